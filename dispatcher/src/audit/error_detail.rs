//! The `error_detail` column (CONTRACT §7.4; issue 5 point 5): the full, unredacted
//! error, AES-256-GCM encrypted with a random 96-bit nonce, never stored in plain text.
//! Each row records the id of the key that sealed it, so keys can rotate: new rows are
//! sealed with the current key, old rows still open with the key of their id.
//!
//! The cipher is [`agenthooks_crds::sealed::SealKey`] (the format is base64 of
//! `nonce (12 bytes) || ciphertext+tag`); the key is 32 bytes from a file holding
//! 64 hex characters or 32 raw bytes (`--audit-key-file`, a mounted Secret). Without a key
//! the caller stores no error detail at all.

use std::path::{Path, PathBuf};

use agenthooks_crds::sealed::{SealError, SealKey};
use serde::{Deserialize, Serialize};

/// Most bytes of a key id (stored per row).
pub const KEY_ID_MAX_BYTES: usize = 64;

/// One sealed `error_detail` value as stored in a row.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SealedDetail {
    /// Id of the [`ErrorDetailKey`] that sealed it.
    pub key_id: String,
    /// Standard padded base64 of `nonce (12 bytes) || ciphertext+tag (16 bytes)`.
    pub ciphertext: String,
}

/// Errors of loading audit keys and opening sealed details. Messages never carry key
/// material or plaintext.
#[derive(Debug, thiserror::Error)]
pub enum AuditKeyError {
    /// The key file could not be read.
    #[error("cannot read audit key file {path}: {source}")]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// The key is not 32 raw bytes or 64 hex characters.
    #[error("audit key {key_id:?}: {source}")]
    BadKey {
        key_id: String,
        #[source]
        source: SealError,
    },
    /// A key id must be 1 to 64 characters of `A-Z a-z 0-9 . _ -`.
    #[error("audit key id {0:?} is invalid: use 1 to 64 characters of A-Z a-z 0-9 . _ -")]
    BadKeyId(String),
    /// Two keys of a key set share an id.
    #[error("audit key id {0:?} is given twice")]
    DuplicateKeyId(String),
    /// The detail was sealed under another key id than the key asked to open it.
    #[error("error detail was sealed with audit key {sealed:?}, not {key:?}")]
    KeyIdMismatch { sealed: String, key: String },
    /// No key of the set has the detail's key id (rotated out?).
    #[error("no audit key with id {0:?} is loaded")]
    UnknownKeyId(String),
    /// The ciphertext is not valid base64 or too short.
    #[error("error detail sealed with audit key {0:?} is malformed")]
    Malformed(String),
    /// Authentication failed: the wrong key under this id, or a tampered value.
    #[error("error detail does not open with audit key {0:?} (wrong key or tampered value)")]
    Open(String),
    /// Opened, but the plaintext is not UTF-8 (never sealed by [`ErrorDetailKey::seal`]).
    #[error("error detail sealed with audit key {0:?} is not UTF-8 text")]
    NotUtf8(String),
}

/// One AES-256-GCM key with its id.
#[derive(Clone)]
pub struct ErrorDetailKey {
    id: String,
    key: SealKey,
}

impl std::fmt::Debug for ErrorDetailKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ErrorDetailKey({:?})", self.id)
    }
}

/// Whether `id` is a valid key id: 1 to [`KEY_ID_MAX_BYTES`] characters of
/// `A-Z a-z 0-9 . _ -`.
pub fn is_key_id(id: &str) -> bool {
    !id.is_empty()
        && id.len() <= KEY_ID_MAX_BYTES
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
}

fn check_key_id(id: &str) -> Result<(), AuditKeyError> {
    if is_key_id(id) {
        Ok(())
    } else {
        Err(AuditKeyError::BadKeyId(id.to_owned()))
    }
}

impl ErrorDetailKey {
    /// A key from 32 raw bytes or 64 hex characters (surrounding whitespace ignored).
    /// Errors: [`AuditKeyError::BadKeyId`], [`AuditKeyError::BadKey`].
    pub fn from_bytes(key_id: &str, raw: &[u8]) -> Result<Self, AuditKeyError> {
        check_key_id(key_id)?;
        let key = SealKey::from_bytes(raw).map_err(|source| AuditKeyError::BadKey {
            key_id: key_id.to_owned(),
            source,
        })?;
        Ok(ErrorDetailKey {
            id: key_id.to_owned(),
            key,
        })
    }

    /// A key read from `path` (see [`ErrorDetailKey::from_bytes`]); adds
    /// [`AuditKeyError::Read`].
    pub fn from_file(key_id: &str, path: &Path) -> Result<Self, AuditKeyError> {
        let raw = std::fs::read(path).map_err(|source| AuditKeyError::Read {
            path: path.to_owned(),
            source,
        })?;
        Self::from_bytes(key_id, &raw)
    }

    /// A fresh random key (tests, tools).
    pub fn generate(key_id: &str) -> Result<Self, AuditKeyError> {
        check_key_id(key_id)?;
        Ok(ErrorDetailKey {
            id: key_id.to_owned(),
            key: SealKey::generate(),
        })
    }

    /// This key's id, stored with every detail it seals.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// Seals `plain` under a random 96-bit nonce, bound to `row`: the row's
    /// [`super::row::detail_binding`] is the AES-GCM associated data, so a detail moved
    /// to another row no longer opens.
    pub fn seal(&self, plain: &str, row: &str) -> SealedDetail {
        SealedDetail {
            key_id: self.id.clone(),
            ciphertext: self.key.seal_with_aad(plain.as_bytes(), row.as_bytes()),
        }
    }

    /// Opens a detail sealed by this key. Errors: [`AuditKeyError::KeyIdMismatch`] when
    /// `sealed` carries another key id; [`AuditKeyError::Malformed`];
    /// [`AuditKeyError::Open`] (wrong key under the same id, tampered, or sealed for
    /// another `row`); [`AuditKeyError::NotUtf8`].
    pub fn open(&self, sealed: &SealedDetail, row: &str) -> Result<String, AuditKeyError> {
        if sealed.key_id != self.id {
            return Err(AuditKeyError::KeyIdMismatch {
                sealed: sealed.key_id.clone(),
                key: self.id.clone(),
            });
        }
        let plain = self
            .key
            .open_with_aad(&sealed.ciphertext, row.as_bytes())
            .map_err(|e| match e {
                SealError::Malformed | SealError::BadKeyLength(_) => {
                    AuditKeyError::Malformed(self.id.clone())
                }
                SealError::Open => AuditKeyError::Open(self.id.clone()),
            })?;
        String::from_utf8(plain).map_err(|_| AuditKeyError::NotUtf8(self.id.clone()))
    }
}

/// The keys of a dispatcher: `current` seals new details; `current` and `others` open
/// old ones by key id (rotation: add the new key as current, keep the old as other
/// until its rows are gone).
#[derive(Debug, Clone)]
pub struct ErrorDetailKeys {
    current: ErrorDetailKey,
    others: Vec<ErrorDetailKey>,
}

impl ErrorDetailKeys {
    /// Errors: [`AuditKeyError::DuplicateKeyId`] when two keys share an id.
    pub fn new(
        current: ErrorDetailKey,
        others: Vec<ErrorDetailKey>,
    ) -> Result<Self, AuditKeyError> {
        let mut seen = vec![current.id.as_str()];
        for k in &others {
            if seen.contains(&k.id.as_str()) {
                return Err(AuditKeyError::DuplicateKeyId(k.id.clone()));
            }
            seen.push(&k.id);
        }
        Ok(ErrorDetailKeys { current, others })
    }

    /// The key new details are sealed with.
    pub fn current(&self) -> &ErrorDetailKey {
        &self.current
    }

    /// Seals with the current key, bound to `row` (see [`ErrorDetailKey::seal`]).
    pub fn seal(&self, plain: &str, row: &str) -> SealedDetail {
        self.current.seal(plain, row)
    }

    /// Opens with the key of `sealed.key_id`. Errors: [`AuditKeyError::UnknownKeyId`],
    /// and those of [`ErrorDetailKey::open`].
    pub fn open(&self, sealed: &SealedDetail, row: &str) -> Result<String, AuditKeyError> {
        std::iter::once(&self.current)
            .chain(&self.others)
            .find(|k| k.id == sealed.key_id)
            .ok_or_else(|| AuditKeyError::UnknownKeyId(sealed.key_id.clone()))?
            .open(sealed, row)
    }
}

#[cfg(test)]
mod tests {
    /// The row binding used by these tests.
    const ROW: &str = "uid-1:evt-1";
    use super::*;
    use base64::Engine;
    use base64::engine::general_purpose::STANDARD;

    const DETAIL: &str = "POST https://hooks.example/x: 500, Bearer s3cret-token, body é";

    #[test]
    fn a_detail_moved_to_another_row_does_not_open() {
        let k = ErrorDetailKey::generate("k1").unwrap();
        let sealed = k.seal(DETAIL, "uid-1:evt-1");
        assert_eq!(k.open(&sealed, "uid-1:evt-1").unwrap(), DETAIL);
        for other in ["uid-1:evt-2", "uid-2:evt-1", ""] {
            assert!(
                matches!(k.open(&sealed, other), Err(AuditKeyError::Open(_))),
                "{other:?}"
            );
        }
    }

    #[test]
    fn round_trip_and_random_nonce() {
        let k = ErrorDetailKey::generate("k1").unwrap();
        let a = k.seal(DETAIL, ROW);
        let b = k.seal(DETAIL, ROW);
        assert_eq!(a.key_id, "k1");
        assert_ne!(a.ciphertext, b.ciphertext, "nonce must be random");
        assert!(!a.ciphertext.contains("s3cret"));
        // nonce 12 + plaintext + tag 16
        assert_eq!(
            STANDARD.decode(&a.ciphertext).unwrap().len(),
            12 + DETAIL.len() + 16
        );
        assert_eq!(k.open(&a, ROW).unwrap(), DETAIL);
        assert_eq!(k.open(&b, ROW).unwrap(), DETAIL);
    }

    #[test]
    fn wrong_key_and_other_key_id_fail() {
        let k = ErrorDetailKey::generate("k1").unwrap();
        let sealed = k.seal(DETAIL, ROW);
        let same_id_other_key = ErrorDetailKey::generate("k1").unwrap();
        assert!(matches!(
            same_id_other_key.open(&sealed, ROW),
            Err(AuditKeyError::Open(id)) if id == "k1"
        ));
        let other_id = ErrorDetailKey::generate("k2").unwrap();
        let err = other_id.open(&sealed, ROW).unwrap_err();
        assert!(
            matches!(&err, AuditKeyError::KeyIdMismatch { sealed, key } if sealed == "k1" && key == "k2")
        );
        assert_eq!(
            err.to_string(),
            r#"error detail was sealed with audit key "k1", not "k2""#
        );
    }

    #[test]
    fn tampering_fails() {
        let k = ErrorDetailKey::generate("k1").unwrap();
        let sealed = k.seal(DETAIL, ROW);
        let mut raw = STANDARD.decode(&sealed.ciphertext).unwrap();
        raw[20] ^= 1;
        let tampered = SealedDetail {
            key_id: "k1".into(),
            ciphertext: STANDARD.encode(raw),
        };
        assert!(matches!(
            k.open(&tampered, ROW),
            Err(AuditKeyError::Open(_))
        ));
        let garbage = SealedDetail {
            key_id: "k1".into(),
            ciphertext: "!!".into(),
        };
        assert!(matches!(
            k.open(&garbage, ROW),
            Err(AuditKeyError::Malformed(_))
        ));
    }

    #[test]
    fn rotation_opens_old_rows_with_the_old_key_id() {
        let old = ErrorDetailKey::generate("2026-01").unwrap();
        let old_row = old.seal("old failure", ROW);
        let new = ErrorDetailKey::generate("2026-06").unwrap();
        let keys = ErrorDetailKeys::new(new, vec![old.clone()]).unwrap();
        let new_row = keys.seal("new failure", ROW);
        assert_eq!(new_row.key_id, "2026-06");
        assert_eq!(keys.current().id(), "2026-06");
        assert_eq!(keys.open(&old_row, ROW).unwrap(), "old failure");
        assert_eq!(keys.open(&new_row, ROW).unwrap(), "new failure");
        // The old key alone cannot open new rows.
        assert!(matches!(
            old.open(&new_row, ROW),
            Err(AuditKeyError::KeyIdMismatch { .. })
        ));
        // A rotated-out key id is reported as such.
        let only_new = ErrorDetailKeys::new(keys.current().clone(), vec![]).unwrap();
        assert!(matches!(
            only_new.open(&old_row, ROW),
            Err(AuditKeyError::UnknownKeyId(id)) if id == "2026-01"
        ));
        assert!(matches!(
            ErrorDetailKeys::new(old.clone(), vec![old]),
            Err(AuditKeyError::DuplicateKeyId(id)) if id == "2026-01"
        ));
    }

    #[test]
    fn keys_from_files_hex_or_raw_and_bad_inputs() {
        let dir = tempfile::tempdir().unwrap();
        let hex_path = dir.path().join("hex");
        std::fs::write(
            &hex_path,
            "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff\n",
        )
        .unwrap();
        let raw_path = dir.path().join("raw");
        std::fs::write(
            &raw_path,
            [
                0x00u8, 0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77, 0x88, 0x99, 0xaa, 0xbb, 0xcc,
                0xdd, 0xee, 0xff, 0x00, 0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77, 0x88, 0x99, 0xaa,
                0xbb, 0xcc, 0xdd, 0xee, 0xff,
            ],
        )
        .unwrap();
        let from_hex = ErrorDetailKey::from_file("k", &hex_path).unwrap();
        let from_raw = ErrorDetailKey::from_file("k", &raw_path).unwrap();
        assert_eq!(
            from_raw.open(&from_hex.seal("same key", ROW), ROW).unwrap(),
            "same key"
        );

        let short = dir.path().join("short");
        std::fs::write(&short, "abc").unwrap();
        assert!(matches!(
            ErrorDetailKey::from_file("k", &short),
            Err(AuditKeyError::BadKey {
                source: SealError::BadKeyLength(3),
                ..
            })
        ));
        assert!(matches!(
            ErrorDetailKey::from_file("k", &dir.path().join("missing")),
            Err(AuditKeyError::Read { .. })
        ));
        for bad in ["", "has space", "a/b", &"x".repeat(65)] {
            assert!(
                matches!(
                    ErrorDetailKey::generate(bad),
                    Err(AuditKeyError::BadKeyId(_))
                ),
                "{bad:?}"
            );
        }
        assert!(format!("{from_hex:?}").contains("\"k\""));
        assert!(!format!("{from_hex:?}").contains("0011"));
    }
}
