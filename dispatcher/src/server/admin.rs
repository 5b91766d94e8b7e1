//! The admin bearer token (issue 5 points 2 and 3): what `GET /v1/executions[/{id}]`
//! (every tenant's audit rows, and with `errorDetail=true` the decrypted error detail)
//! and `POST /v1/test` (a dry run may run an inline command or call any URL the SSRF
//! guard allows) ask of their caller.
//!
//! The token comes from `--admin-token-file` (env `AGENTHOOKS_ADMIN_TOKEN_FILE`), e.g. a
//! mounted Secret; the caller sends `Authorization: Bearer <token>`. Without a token file
//! those requests are refused (403) with a message saying how to enable them. Tokens are
//! compared in constant time (SHA-256 of both sides, compared with `subtle`), so neither
//! the content nor the length of the configured token leaks through timing.

use std::path::{Path, PathBuf};

use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

/// Fewest bytes an admin token may have (after trimming whitespace).
pub const MIN_TOKEN_BYTES: usize = 16;

/// The configured admin token, kept only as its SHA-256 digest.
#[derive(Clone)]
pub struct AdminToken {
    digest: [u8; 32],
}

impl std::fmt::Debug for AdminToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("AdminToken(***)")
    }
}

/// Why an admin token file could not be used. Messages name the file, never the token.
#[derive(Debug, thiserror::Error)]
pub enum AdminTokenError {
    /// The file could not be read.
    #[error("--admin-token-file {path}: {source}")]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// The token is shorter than [`MIN_TOKEN_BYTES`], not UTF-8, or holds whitespace
    /// or control characters inside.
    #[error(
        "--admin-token-file {path}: the token must be at least {MIN_TOKEN_BYTES} printable characters without inner whitespace (e.g. `openssl rand -hex 32`)"
    )]
    Invalid { path: PathBuf },
}

impl AdminToken {
    /// A token from its text (surrounding whitespace, such as a trailing newline, is
    /// ignored). `None` when it breaks the rules of [`AdminTokenError::Invalid`].
    pub fn new(text: &str) -> Option<AdminToken> {
        let t = text.trim();
        let ok = t.len() >= MIN_TOKEN_BYTES && t.chars().all(|c| c.is_ascii_graphic());
        ok.then(|| AdminToken {
            digest: Sha256::digest(t.as_bytes()).into(),
        })
    }

    /// Reads the token from `path`. Errors: [`AdminTokenError`].
    pub fn from_file(path: &Path) -> Result<AdminToken, AdminTokenError> {
        let raw = std::fs::read(path).map_err(|source| AdminTokenError::Read {
            path: path.to_owned(),
            source,
        })?;
        std::str::from_utf8(&raw)
            .ok()
            .and_then(AdminToken::new)
            .ok_or_else(|| AdminTokenError::Invalid {
                path: path.to_owned(),
            })
    }

    /// Whether `presented` is this token, in constant time.
    pub fn matches(&self, presented: &str) -> bool {
        let d: [u8; 32] = Sha256::digest(presented.as_bytes()).into();
        d.ct_eq(&self.digest).into()
    }
}

/// Why a request was refused the admin right; each a 403 with a message that says what
/// to do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Denied {
    /// This dispatcher has no `--admin-token-file`.
    NotConfigured,
    /// No `Authorization: Bearer ...` header (or another scheme).
    Missing,
    /// A bearer token that is not the admin token.
    Wrong,
}

impl Denied {
    /// The 403 answer `{"error", "field": "authorization"}` for `what` (e.g. `POST /v1/test`).
    pub fn response(self, what: &str) -> Response {
        let message = match self {
            Denied::NotConfigured => format!(
                "{what} needs the admin token, and this dispatcher has none: start it with --admin-token-file PATH (env AGENTHOOKS_ADMIN_TOKEN_FILE) and send Authorization: Bearer <token>"
            ),
            Denied::Missing => {
                format!("{what} needs the admin token: send Authorization: Bearer <token>")
            }
            Denied::Wrong => format!(
                "{what}: the bearer token is not this dispatcher's admin token (--admin-token-file)"
            ),
        };
        super::error(StatusCode::FORBIDDEN, "authorization", message)
    }
}

/// Checks the request's `Authorization: Bearer <token>` against `token`. The header is
/// read by the one bearer parser of [`crate::identity::bearer`] (any malformed or oversized
/// header is [`Denied::Missing`]).
pub fn authorize(token: Option<&AdminToken>, headers: &HeaderMap) -> Result<(), Denied> {
    let token = token.ok_or(Denied::NotConfigured)?;
    let presented = crate::identity::bearer(headers).map_err(|_| Denied::Missing)?;
    if token.matches(presented) {
        Ok(())
    } else {
        Err(Denied::Wrong)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::{HeaderValue, header};

    const T: &str = "0123456789abcdef0123";

    fn with(auth: &str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(header::AUTHORIZATION, HeaderValue::from_str(auth).unwrap());
        h
    }

    #[test]
    fn tokens_follow_the_rules() {
        assert!(AdminToken::new(&format!("  {T}\n")).is_some());
        assert!(AdminToken::new("short").is_none());
        assert!(AdminToken::new("0123456789 abcdef0123").is_none());
        assert!(AdminToken::new("").is_none());
        assert_eq!(
            format!("{:?}", AdminToken::new(T).unwrap()),
            "AdminToken(***)"
        );
    }

    #[test]
    fn authorize_says_why() {
        let t = AdminToken::new(T).unwrap();
        assert_eq!(
            authorize(None, &with(&format!("Bearer {T}"))),
            Err(Denied::NotConfigured)
        );
        assert_eq!(authorize(Some(&t), &HeaderMap::new()), Err(Denied::Missing));
        assert_eq!(
            authorize(Some(&t), &with(&format!("Basic {T}"))),
            Err(Denied::Missing)
        );
        assert_eq!(authorize(Some(&t), &with("Bearer ")), Err(Denied::Missing));
        assert_eq!(
            authorize(Some(&t), &with("Bearer 0123456789abcdef012")),
            Err(Denied::Wrong)
        );
        assert_eq!(
            authorize(Some(&t), &with(&format!("Bearer {T}x"))),
            Err(Denied::Wrong)
        );
        assert_eq!(authorize(Some(&t), &with(&format!("Bearer {T}"))), Ok(()));
        assert_eq!(authorize(Some(&t), &with(&format!("bearer  {T}"))), Ok(()));
    }

    #[test]
    fn token_files_are_read_and_checked() {
        let dir = tempfile::tempdir().unwrap();
        let good = dir.path().join("good");
        std::fs::write(&good, format!("{T}\n")).unwrap();
        assert!(AdminToken::from_file(&good).unwrap().matches(T));
        let bad = dir.path().join("bad");
        std::fs::write(&bad, "x").unwrap();
        let e = AdminToken::from_file(&bad).unwrap_err().to_string();
        assert!(e.contains("at least 16"), "{e}");
        let e = AdminToken::from_file(&dir.path().join("none"))
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("--admin-token-file "), "{e}");
    }
}
