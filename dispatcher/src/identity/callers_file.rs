//! `--callers-file`: the callers of a standalone dispatcher (CONTRACT §9.1).
//!
//! ```yaml
//! callers:
//!   - name: acme-runtime          # in logs and audit rows
//!     tokenSha256: "<64 hex>"     # sha256 of the bearer token, never the token itself
//!     tenants: [acme]             # the tenants it may act for; ["*"] for any
//! ```
//!
//! Rules (each refusal names the file and the field, and the dispatcher does not start):
//! unknown keys are refused; `name` is 1–256 bytes and unique; `tokenSha256` is 64 hex
//! characters and unique; `tenants` is not empty, each 1–256 bytes, and `"*"` stands
//! alone.

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::Deserialize;
use sha2::{Digest, Sha256};

use super::rule::Grant;

/// Longest caller name or tenant, in bytes (CONTRACT §10.2).
pub const MAX_NAME_BYTES: usize = 256;

/// A callers file that cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum CallersFileError {
    /// The file could not be read.
    #[error("{file}: {source}")]
    Read {
        file: PathBuf,
        source: std::io::Error,
    },
    /// A field breaks a rule (or the YAML is malformed: `field` is where).
    #[error("{file}: {field}: {message}")]
    Invalid {
        file: PathBuf,
        field: String,
        message: String,
    },
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct FileShape {
    callers: Vec<CallerShape>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct CallerShape {
    name: String,
    token_sha256: String,
    tenants: Vec<String>,
}

/// One listed caller.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StaticCaller {
    pub name: Arc<str>,
    /// The tenants it may act for (`"*"` alone: any), shared with every request's grant.
    pub tenants: Arc<[String]>,
}

impl StaticCaller {
    /// Its grant for [`super::rule::choose_tenant`].
    pub fn grant(&self) -> Grant {
        Grant::Tenants(Arc::clone(&self.tenants))
    }
}

/// The callers of a file, found by the sha256 of their token.
#[derive(Debug, Clone, Default)]
pub struct CallersFile {
    by_digest: HashMap<[u8; 32], StaticCaller>,
}

impl CallersFile {
    /// Reads and checks `path`.
    ///
    /// Errors: [`CallersFileError`] naming the file and the field.
    pub fn load(path: &Path) -> Result<CallersFile, CallersFileError> {
        let text = std::fs::read_to_string(path).map_err(|source| CallersFileError::Read {
            file: path.to_path_buf(),
            source,
        })?;
        CallersFile::parse(&text).map_err(|(field, message)| CallersFileError::Invalid {
            file: path.to_path_buf(),
            field,
            message,
        })
    }

    /// Parses and checks a file's text. Errors: `(field, message)`.
    pub fn parse(text: &str) -> Result<CallersFile, (String, String)> {
        let de = serde_norway::Deserializer::from_str(text);
        let shape: FileShape = serde_path_to_error::deserialize(de).map_err(|e| {
            let field = e.path().to_string();
            let field = if field == "." {
                "callers".into()
            } else {
                field
            };
            (field, e.into_inner().to_string())
        })?;
        let mut by_digest = HashMap::new();
        let mut names = HashSet::new();
        for (i, c) in shape.callers.into_iter().enumerate() {
            let at = |f: &str| format!("callers[{i}].{f}");
            if c.name.is_empty() || c.name.len() > MAX_NAME_BYTES {
                return Err((at("name"), format!("must be 1 to {MAX_NAME_BYTES} bytes")));
            }
            if !names.insert(c.name.clone()) {
                return Err((at("name"), format!("{:?} is listed twice", c.name)));
            }
            let mut digest = [0u8; 32];
            if c.token_sha256.len() != 64
                || hex::decode_to_slice(c.token_sha256.to_ascii_lowercase(), &mut digest).is_err()
            {
                return Err((
                    at("tokenSha256"),
                    "must be 64 hex characters: the sha256 of the token (e.g. `printf %s TOKEN | sha256sum`)".into(),
                ));
            }
            if c.tenants.is_empty() {
                return Err((
                    at("tenants"),
                    "must list at least one tenant (\"*\" for any)".into(),
                ));
            }
            for (j, t) in c.tenants.iter().enumerate() {
                if t.is_empty() || t.len() > MAX_NAME_BYTES {
                    return Err((
                        format!("callers[{i}].tenants[{j}]"),
                        format!("must be 1 to {MAX_NAME_BYTES} bytes"),
                    ));
                }
            }
            if c.tenants.len() > 1 && c.tenants.iter().any(|t| t == "*") {
                return Err((at("tenants"), "\"*\" (any tenant) must stand alone".into()));
            }
            let caller = StaticCaller {
                name: Arc::from(c.name.as_str()),
                tenants: c.tenants.into(),
            };
            if by_digest.insert(digest, caller).is_some() {
                return Err((
                    at("tokenSha256"),
                    "the same token is listed twice: one token, one caller".into(),
                ));
            }
        }
        Ok(CallersFile { by_digest })
    }

    /// The caller whose token is `token`, if listed.
    pub fn find(&self, token: &str) -> Option<&StaticCaller> {
        let digest: [u8; 32] = Sha256::digest(token.as_bytes()).into();
        self.by_digest.get(&digest)
    }

    /// Callers listed.
    pub fn len(&self) -> usize {
        self.by_digest.len()
    }

    /// No caller listed.
    pub fn is_empty(&self) -> bool {
        self.by_digest.is_empty()
    }
}

/// The `tokenSha256` of `token` (what a callers file lists).
pub fn token_sha256(token: &str) -> String {
    hex::encode(Sha256::digest(token.as_bytes()))
}

#[cfg(test)]
mod tests {
    use super::*;

    const TOKEN: &str = "s3cret-acme-runtime-token";

    fn file(body: &str) -> Result<CallersFile, (String, String)> {
        CallersFile::parse(body)
    }

    fn one(name: &str, digest: &str, tenants: &str) -> String {
        format!(
            "callers:\n  - name: {name}\n    tokenSha256: \"{digest}\"\n    tenants: {tenants}\n"
        )
    }

    #[test]
    fn a_listed_token_finds_its_caller_and_others_find_none() {
        let f = file(&one("acme-runtime", &token_sha256(TOKEN), "[acme]")).unwrap();
        let c = f.find(TOKEN).unwrap();
        assert_eq!(&*c.name, "acme-runtime");
        assert_eq!(c.grant(), Grant::Tenants(vec!["acme".to_string()].into()));
        assert!(f.find("other").is_none());
        assert!(
            f.find(&token_sha256(TOKEN)).is_none(),
            "the digest is not the token"
        );
        assert_eq!(f.len(), 1);
        // Upper-case hex is the same digest.
        let f = file(&one("a", &token_sha256(TOKEN).to_uppercase(), "[\"*\"]")).unwrap();
        assert_eq!(&f.find(TOKEN).unwrap().tenants[..], ["*"]);
    }

    #[test]
    fn bad_files_name_the_field() {
        let d = token_sha256(TOKEN);
        let d2 = token_sha256("another");
        let cases: Vec<(String, &str, &str)> = vec![
            (
                one("a", "abc", "[acme]"),
                "callers[0].tokenSha256",
                "64 hex",
            ),
            (
                one("a", &"g".repeat(64), "[acme]"),
                "callers[0].tokenSha256",
                "64 hex",
            ),
            (one("a", &d, "[]"), "callers[0].tenants", "at least one"),
            (one("a", &d, "[\"\"]"), "callers[0].tenants[0]", "1 to 256"),
            (
                one("a", &d, "[\"*\", acme]"),
                "callers[0].tenants",
                "stand alone",
            ),
            (one("\"\"", &d, "[acme]"), "callers[0].name", "1 to 256"),
            (
                one(&"n".repeat(257), &d, "[acme]"),
                "callers[0].name",
                "1 to 256",
            ),
            (
                format!(
                    "{}{}",
                    one("a", &d, "[acme]"),
                    one("b", &d, "[beta]").trim_start_matches("callers:\n")
                ),
                "callers[1].tokenSha256",
                "listed twice",
            ),
            (
                format!(
                    "{}{}",
                    one("a", &d, "[acme]"),
                    one("a", &d2, "[beta]").trim_start_matches("callers:\n")
                ),
                "callers[1].name",
                "listed twice",
            ),
            (
                format!("{}    token: x\n", one("a", &d, "[acme]")),
                "callers[0].token",
                "unknown field `token`",
            ),
            (
                "callers:\n  - name: a\n    tenants: [acme]\n".into(),
                "callers[0]",
                "tokenSha256",
            ),
            ("clients: []\n".into(), "clients", "unknown field `clients`"),
            ("".into(), "callers", ""),
        ];
        for (body, field, says) in cases {
            let (f, message) = match file(&body) {
                Err(e) => e,
                Ok(_) => panic!("accepted:\n{body}"),
            };
            assert_eq!(f, field, "{body}\n{message}");
            assert!(message.contains(says), "{field}: {message}");
        }
    }

    #[test]
    fn load_names_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("callers.yaml");
        std::fs::write(&path, one("a", "xyz", "[acme]")).unwrap();
        let e = CallersFile::load(&path).unwrap_err().to_string();
        assert!(
            e.starts_with(&format!("{}: callers[0].tokenSha256: ", path.display())),
            "{e}"
        );
        let e = CallersFile::load(&dir.path().join("missing.yaml"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("missing.yaml"), "{e}");
    }
}
