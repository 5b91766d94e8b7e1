//! The dispatcher's audit flags, parsed (issue 5 points 1 and 5): `--audit-db`,
//! `--audit-key-file [ID=]PATH`, `--audit-spool-dir`, `--audit-spool-max-bytes`. Errors
//! name the flag and the rule.

use std::path::{Path, PathBuf};

use super::error_detail::{AuditKeyError, ErrorDetailKey, ErrorDetailKeys, is_key_id};
use super::store::is_sqlite_url;

/// `--audit-db` default: SQLite, a file in the working directory.
pub const DEFAULT_AUDIT_DB: &str = "sqlite://agenthooks-audit.db";
/// `--audit-db` value that turns the audit trail off.
pub const AUDIT_OFF: &str = "off";
/// `--audit-spool-max-bytes` default: 256 MiB.
pub const DEFAULT_SPOOL_MAX_BYTES: u64 = 256 * 1024 * 1024;
/// `--audit-spool-max-bytes` floor: 64 KiB.
pub const MIN_SPOOL_MAX_BYTES: u64 = 64 * 1024;

/// A bad `--audit-key-file`.
/// (The key error is part of the message, not a `source`, so a printed chain says it once.)
#[derive(Debug, thiserror::Error)]
#[error("--audit-key-file {flag}: {error}")]
pub struct KeyFlagError {
    /// The flag's value as given.
    pub flag: String,
    pub error: AuditKeyError,
}

/// `[ID=]PATH` → (key id, path). Without `ID=` (or when what precedes the first `=` is
/// not a key id, e.g. a path holding `=`), the id is the file's name.
pub fn parse_key_flag(value: &str) -> (String, PathBuf) {
    if let Some((id, path)) = value.split_once('=')
        && is_key_id(id)
        && !path.is_empty()
    {
        return (id.to_owned(), PathBuf::from(path));
    }
    let path = PathBuf::from(value);
    let id = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    (id, path)
}

/// Loads the keys of every `--audit-key-file`: the first seals new rows, the others only
/// open old ones. `Ok(None)` without any (no `error_detail` is stored). Errors: an
/// unreadable file, a key that is not 32 raw bytes or 64 hex characters, an invalid or
/// repeated key id — each naming the flag value.
pub fn load_keys(values: &[String]) -> Result<Option<ErrorDetailKeys>, KeyFlagError> {
    let mut keys = Vec::with_capacity(values.len());
    for value in values {
        let (id, path) = parse_key_flag(value);
        let key = ErrorDetailKey::from_file(&id, &path).map_err(|error| KeyFlagError {
            flag: value.clone(),
            error,
        })?;
        keys.push((value, key));
    }
    let mut iter = keys.into_iter();
    let Some((_, current)) = iter.next() else {
        return Ok(None);
    };
    let (flags, others): (Vec<&String>, Vec<ErrorDetailKey>) = iter.unzip();
    ErrorDetailKeys::new(current, others)
        .map(Some)
        .map_err(|error| {
            let flag = match &error {
                AuditKeyError::DuplicateKeyId(id) => flags
                    .iter()
                    .find(|f| parse_key_flag(f).0 == *id)
                    .map(|f| f.to_string())
                    .unwrap_or_else(|| id.clone()),
                _ => String::new(),
            };
            KeyFlagError { flag, error }
        })
}

/// `--audit-spool-max-bytes`: a byte count, plain (`268435456`) or with a binary suffix
/// (`512Ki`, `256Mi`, `1Gi`), at least [`MIN_SPOOL_MAX_BYTES`]. For clap's
/// `value_parser`, which names the flag in the error.
pub fn parse_byte_size(value: &str) -> Result<u64, String> {
    let v = value.trim();
    let (digits, unit) = match v.find(|c: char| !c.is_ascii_digit()) {
        Some(i) => v.split_at(i),
        None => (v, ""),
    };
    let mult: u64 = match unit {
        "" => 1,
        "Ki" => 1 << 10,
        "Mi" => 1 << 20,
        "Gi" => 1 << 30,
        "Ti" => 1 << 40,
        _ => {
            return Err(format!(
                "expected bytes like 268435456, 256Mi or 1Gi (suffixes Ki, Mi, Gi, Ti), not {value:?}"
            ));
        }
    };
    let n: u64 = digits
        .parse()
        .map_err(|_| format!("expected bytes like 268435456, 256Mi or 1Gi, not {value:?}"))?;
    let bytes = n
        .checked_mul(mult)
        .ok_or_else(|| format!("{value:?} is too large"))?;
    if bytes < MIN_SPOOL_MAX_BYTES {
        return Err(format!(
            "{value:?} is below the minimum of {MIN_SPOOL_MAX_BYTES} bytes (64Ki)"
        ));
    }
    Ok(bytes)
}

/// `--audit-spool-dir` default: next to a SQLite file (`DIR/NAME.db` →
/// `DIR/NAME.spool/`), else `agenthooks-audit.spool/` in the working directory.
pub fn default_spool_dir(url: &str) -> PathBuf {
    let fallback = PathBuf::from("agenthooks-audit.spool");
    if !is_sqlite_url(url) {
        return fallback;
    }
    let rest = &url["sqlite:".len()..];
    let rest = rest.strip_prefix("//").unwrap_or(rest);
    let path = rest.split('?').next().unwrap_or("");
    if path.is_empty() || path.starts_with(":memory:") {
        return fallback;
    }
    Path::new(path).with_extension("spool")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_flags_take_an_id_or_the_file_name() {
        assert_eq!(
            parse_key_flag("k2=/etc/keys/current"),
            ("k2".into(), PathBuf::from("/etc/keys/current"))
        );
        assert_eq!(
            parse_key_flag("/etc/keys/key-2026"),
            ("key-2026".into(), PathBuf::from("/etc/keys/key-2026"))
        );
        // What precedes `=` is no key id: the whole value is the path.
        assert_eq!(
            parse_key_flag("/a=b/key"),
            ("key".into(), PathBuf::from("/a=b/key"))
        );
    }

    #[test]
    fn keys_load_in_order_and_errors_name_the_flag() {
        let dir = tempfile::tempdir().unwrap();
        let a = dir.path().join("a");
        let b = dir.path().join("b");
        std::fs::write(&a, "11".repeat(32)).unwrap();
        std::fs::write(&b, [7u8; 32]).unwrap();
        assert!(load_keys(&[]).unwrap().is_none());
        let keys = load_keys(&[format!("new={}", b.display()), a.display().to_string()])
            .unwrap()
            .unwrap();
        assert_eq!(keys.current().id(), "new");
        let old = ErrorDetailKey::from_file("a", &a).unwrap().seal("x", "u:e");
        assert_eq!(keys.open(&old, "u:e").unwrap(), "x");

        let missing = format!("k={}", dir.path().join("nope").display());
        let e = load_keys(std::slice::from_ref(&missing)).unwrap_err();
        assert!(
            e.to_string()
                .starts_with(&format!("--audit-key-file {missing}: cannot read")),
            "{e}"
        );
        std::fs::write(dir.path().join("short"), "abc").unwrap();
        let e = load_keys(&[dir.path().join("short").display().to_string()]).unwrap_err();
        assert!(e.to_string().contains("--audit-key-file"), "{e}");
        let dup = format!("a={}", b.display());
        let e = load_keys(&[a.display().to_string(), dup.clone()]).unwrap_err();
        assert_eq!(
            e.to_string(),
            format!("--audit-key-file {dup}: audit key id \"a\" is given twice")
        );
    }

    #[test]
    fn byte_sizes() {
        assert_eq!(parse_byte_size("268435456"), Ok(268_435_456));
        assert_eq!(parse_byte_size("256Mi"), Ok(256 << 20));
        assert_eq!(parse_byte_size("1Gi"), Ok(1 << 30));
        assert_eq!(parse_byte_size("64Ki"), Ok(65_536));
        assert!(parse_byte_size("1Ki").unwrap_err().contains("minimum"));
        assert!(parse_byte_size("10MB").unwrap_err().contains("256Mi"));
        assert!(parse_byte_size("").is_err());
        assert!(
            parse_byte_size("99999999999Ti")
                .unwrap_err()
                .contains("too large")
        );
    }

    #[test]
    fn the_spool_sits_next_to_a_sqlite_file() {
        assert_eq!(
            default_spool_dir(DEFAULT_AUDIT_DB),
            PathBuf::from("agenthooks-audit.spool")
        );
        assert_eq!(
            default_spool_dir("sqlite:///var/lib/agenthooks/audit.db?mode=rwc"),
            PathBuf::from("/var/lib/agenthooks/audit.spool")
        );
        assert_eq!(
            default_spool_dir("sqlite:data/a.db"),
            PathBuf::from("data/a.spool")
        );
        assert_eq!(
            default_spool_dir("sqlite::memory:"),
            PathBuf::from("agenthooks-audit.spool")
        );
        assert_eq!(
            default_spool_dir("postgres://u:p@db:5432/audit"),
            PathBuf::from("agenthooks-audit.spool")
        );
    }
}
