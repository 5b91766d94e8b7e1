//! AES-256-GCM sealing of secret values that travel inside snapshots (DESIGN "Sync":
//! "encrypted header values"; CONTRACT §5 http.1: decrypted only at send time).
//!
//! Format of a sealed value: base64 (standard, padded) of `nonce (12 bytes) ||
//! ciphertext+tag`. The nonce is random per seal. The key is 32 bytes, shared by the
//! operator and its dispatchers (a Secret mounted as a file: 64 hex characters or 32 raw
//! bytes).
//!
//! The key only seals: dispatchers prove who they are to the operator with their own
//! ServiceAccount tokens (CONTRACT §9.4), never with anything derived from this key.

use aes_gcm::aead::{Aead, AeadCore, KeyInit, OsRng};
use aes_gcm::{Aes256Gcm, Nonce};
use base64::Engine;
use base64::engine::general_purpose::STANDARD;

/// A 256-bit key.
#[derive(Clone)]
pub struct SealKey {
    aead: Aes256Gcm,
}

impl std::fmt::Debug for SealKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SealKey(..)")
    }
}

/// Errors of key loading and unsealing. Messages never include secret material.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum SealError {
    #[error("a seal key must be 32 bytes, or 64 hex characters; got {0} bytes")]
    BadKeyLength(usize),
    #[error("sealed value is not valid base64 or is too short")]
    Malformed,
    #[error("sealed value does not open with this key (wrong key or tampered value)")]
    Open,
}

impl SealKey {
    /// From 32 raw bytes, or 64 hex characters (surrounding whitespace ignored).
    pub fn from_bytes(raw: &[u8]) -> Result<SealKey, SealError> {
        let trimmed = trim_ascii(raw);
        let bytes: Vec<u8> = if trimmed.len() == 64 && trimmed.iter().all(u8::is_ascii_hexdigit) {
            (0..32)
                .map(|i| {
                    u8::from_str_radix(
                        std::str::from_utf8(&trimmed[2 * i..2 * i + 2]).unwrap_or("00"),
                        16,
                    )
                    .unwrap_or(0)
                })
                .collect()
        } else {
            raw.to_vec()
        };
        if bytes.len() != 32 {
            return Err(SealError::BadKeyLength(bytes.len()));
        }
        Ok(SealKey {
            aead: Aes256Gcm::new_from_slice(&bytes)
                .map_err(|_| SealError::BadKeyLength(bytes.len()))?,
        })
    }

    /// A fresh random key.
    pub fn generate() -> SealKey {
        let key = Aes256Gcm::generate_key(OsRng);
        SealKey {
            aead: Aes256Gcm::new(&key),
        }
    }

    /// Seals `plain` with a random nonce.
    pub fn seal(&self, plain: &[u8]) -> String {
        self.seal_with_aad(plain, b"")
    }

    /// Seals `plain` with a random nonce, authenticating `aad` with it (AES-GCM associated
    /// data: not stored, and needed again to open). With an empty `aad` the output is
    /// exactly [`SealKey::seal`]'s.
    pub fn seal_with_aad(&self, plain: &[u8], aad: &[u8]) -> String {
        use aes_gcm::aead::Payload;
        let nonce = Aes256Gcm::generate_nonce(&mut OsRng);
        let mut out = nonce.to_vec();
        out.extend(
            self.aead
                .encrypt(&nonce, Payload { msg: plain, aad })
                .expect("AES-GCM encryption of an in-memory buffer"),
        );
        STANDARD.encode(out)
    }

    /// Opens a value made by [`SealKey::seal`].
    pub fn open(&self, sealed: &str) -> Result<Vec<u8>, SealError> {
        self.open_with_aad(sealed, b"")
    }

    /// Opens a value made by [`SealKey::seal_with_aad`] with the same `aad`; another
    /// `aad` fails like a wrong key ([`SealError::Open`]).
    pub fn open_with_aad(&self, sealed: &str, aad: &[u8]) -> Result<Vec<u8>, SealError> {
        use aes_gcm::aead::Payload;
        let raw = STANDARD.decode(sealed).map_err(|_| SealError::Malformed)?;
        if raw.len() < 12 + 16 {
            return Err(SealError::Malformed);
        }
        let (nonce, ct) = raw.split_at(12);
        self.aead
            .decrypt(Nonce::from_slice(nonce), Payload { msg: ct, aad })
            .map_err(|_| SealError::Open)
    }
}

fn trim_ascii(b: &[u8]) -> &[u8] {
    let start = b
        .iter()
        .position(|c| !c.is_ascii_whitespace())
        .unwrap_or(b.len());
    let end = b
        .iter()
        .rposition(|c| !c.is_ascii_whitespace())
        .map_or(start, |e| e + 1);
    &b[start..end]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_random_nonce() {
        let k = SealKey::generate();
        let a = k.seal(b"Bearer s3cret");
        let b = k.seal(b"Bearer s3cret");
        assert_ne!(a, b, "nonce must be random");
        assert_eq!(k.open(&a).unwrap(), b"Bearer s3cret");
        assert!(!a.contains("s3cret"));
    }

    #[test]
    fn wrong_key_and_tampering_fail() {
        let k = SealKey::generate();
        let sealed = k.seal(b"x");
        assert_eq!(SealKey::generate().open(&sealed), Err(SealError::Open));
        let mut raw = STANDARD.decode(&sealed).unwrap();
        *raw.last_mut().unwrap() ^= 1;
        assert_eq!(k.open(&STANDARD.encode(raw)), Err(SealError::Open));
        assert_eq!(k.open("!!"), Err(SealError::Malformed));
    }

    #[test]
    fn hex_and_raw_keys() {
        let hex = "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff\n";
        let k = SealKey::from_bytes(hex.as_bytes()).unwrap();
        let k2 = SealKey::from_bytes(hex.as_bytes()).unwrap();
        assert_eq!(k2.open(&k.seal(b"v")).unwrap(), b"v");
        assert!(SealKey::from_bytes(&[7u8; 32]).is_ok());
        assert_eq!(
            SealKey::from_bytes(b"short").unwrap_err(),
            SealError::BadKeyLength(5)
        );
    }
}
