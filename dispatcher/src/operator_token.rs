//! The dispatcher's own credential on the operator's sync port (CONTRACT §9.4): its
//! projected ServiceAccount token for the audience `agenthooks.io/sync`, read from
//! `--operator-token-file` and sent as `Authorization: Bearer <token>` on every call
//! (snapshot poll, report, budget reserve and settle). The operator verifies it with a
//! TokenReview and RBAC (`create` `agenthooks/sync`).
//!
//! The kubelet rotates a projected token before it expires (it rewrites the file); the
//! file is read again at most every [`RECHECK`] (when a call needs the token and the last
//! read is older), never on every call. A file that cannot be read later keeps the last
//! good token (and says so in the log): the operator refuses it once it has expired.
//!
//! The dispatcher's default id ([`identity`]) is read from the token's own claims
//! (`kubernetes.io.namespace` and `kubernetes.io.pod.name`, else
//! `kubernetes.io.serviceaccount.name`), without checking its signature — it is our
//! own token, and the operator verifies it — so it is the identity the operator
//! derives, and the two cannot disagree by default.

use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use reqwest::header::HeaderValue;

/// Least time between two reads of the token file.
pub const RECHECK: Duration = Duration::from_secs(30);
/// Longest token file read, in bytes.
pub use agenthooks_kube_review::MAX_TOKEN_BYTES;

/// Why the token file cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum TokenFileError {
    /// It cannot be read.
    #[error("--operator-token-file {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// It holds no usable token (empty, too long, or not a header value).
    #[error("--operator-token-file {path}: {why}")]
    Invalid {
        /// The file.
        path: PathBuf,
        /// Why.
        why: String,
    },
}

/// Why no identity could be read from a token.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "the operator token is not a Kubernetes ServiceAccount token whose claims name its namespace and ServiceAccount ({0}); give --dispatcher-id"
)]
pub struct NoIdentity(pub String);

/// The token of `--operator-token-file`, read again at most every [`RECHECK`].
#[derive(Debug)]
pub struct OperatorToken {
    path: PathBuf,
    state: Mutex<State>,
}

#[derive(Debug)]
struct State {
    header: HeaderValue,
    token: String,
    read_at: Instant,
}

impl OperatorToken {
    /// Reads `path` now.
    ///
    /// Errors: [`TokenFileError`] when it cannot be read or holds no usable token.
    pub fn load(path: impl Into<PathBuf>) -> Result<OperatorToken, TokenFileError> {
        let path = path.into();
        let (token, header) = read(&path)?;
        Ok(OperatorToken {
            path,
            state: Mutex::new(State {
                header,
                token,
                read_at: Instant::now(),
            }),
        })
    }

    /// The file read.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// `Bearer <token>` (marked sensitive), as of a read no older than [`RECHECK`].
    pub fn header(&self) -> HeaderValue {
        self.header_at(Instant::now())
    }

    /// [`OperatorToken::header`] at `now` (tests pass their own clock).
    pub fn header_at(&self, now: Instant) -> HeaderValue {
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        if now.saturating_duration_since(state.read_at) >= RECHECK {
            state.read_at = now;
            match read(&self.path) {
                Ok((token, header)) => {
                    if token != state.token {
                        tracing::info!(path = %self.path.display(), "operator token file changed; sending the new token");
                    }
                    state.token = token;
                    state.header = header;
                }
                Err(e) => {
                    tracing::warn!(error = %e, "cannot read the operator token again; sending the last one read")
                }
            }
        }
        state.header.clone()
    }

    /// The identity named by the current token's claims ([`identity`]).
    ///
    /// Errors: [`NoIdentity`].
    pub fn identity(&self) -> Result<String, NoIdentity> {
        let state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        identity(&state.token)
    }
}

fn read(path: &Path) -> Result<(String, HeaderValue), TokenFileError> {
    let invalid = |why: &str| TokenFileError::Invalid {
        path: path.to_path_buf(),
        why: why.to_string(),
    };
    let bytes = std::fs::read(path).map_err(|source| TokenFileError::Read {
        path: path.to_path_buf(),
        source,
    })?;
    if bytes.len() > MAX_TOKEN_BYTES {
        return Err(invalid("longer than 16 KiB"));
    }
    let token = std::str::from_utf8(&bytes)
        .map_err(|_| invalid("not UTF-8"))?
        .trim()
        .to_string();
    if token.is_empty() {
        return Err(invalid("empty"));
    }
    let mut header = HeaderValue::from_str(&format!("Bearer {token}"))
        .map_err(|_| invalid("holds characters a header cannot carry"))?;
    header.set_sensitive(true);
    Ok((token, header))
}

/// `NAMESPACE/POD` for a token bound to a Pod, else `NAMESPACE/SERVICEACCOUNT`, from the
/// `kubernetes.io` claim of a ServiceAccount JWT (read, not verified).
///
/// Errors: [`NoIdentity`] for a token that is not such a JWT.
pub fn identity(token: &str) -> Result<String, NoIdentity> {
    let claims = agenthooks_kube_review::jwt_claims(token)
        .ok_or_else(|| NoIdentity("not a JWT with a JSON payload".into()))?;
    let k = &claims["kubernetes.io"];
    let text = |v: &serde_json::Value| v.as_str().filter(|s| !s.is_empty()).map(str::to_string);
    let namespace =
        text(&k["namespace"]).ok_or_else(|| NoIdentity("no kubernetes.io.namespace".into()))?;
    let name = text(&k["pod"]["name"])
        .or_else(|| text(&k["serviceaccount"]["name"]))
        .ok_or_else(|| NoIdentity("no kubernetes.io.serviceaccount.name".into()))?;
    Ok(format!("{namespace}/{name}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn jwt(claims: serde_json::Value) -> String {
        use base64::Engine;
        let enc = |v: &[u8]| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(v);
        format!(
            "{}.{}.sig",
            enc(br#"{"alg":"RS256"}"#),
            enc(claims.to_string().as_bytes())
        )
    }

    #[test]
    fn the_identity_is_the_pod_of_a_bound_token_else_its_service_account() {
        let pod = jwt(
            serde_json::json!({"aud": ["agenthooks.io/sync"], "kubernetes.io": {
            "namespace": "agenthooks-system",
            "pod": {"name": "agenthooks-dispatcher-7d9-x", "uid": "p-1"},
            "serviceaccount": {"name": "agenthooks-dispatcher", "uid": "s-1"}}}),
        );
        assert_eq!(
            identity(&pod).as_deref(),
            Ok("agenthooks-system/agenthooks-dispatcher-7d9-x")
        );
        let sa = jwt(serde_json::json!({"kubernetes.io": {
            "namespace": "ns", "serviceaccount": {"name": "disp", "uid": "s-1"}}}));
        assert_eq!(identity(&sa).as_deref(), Ok("ns/disp"));
        for bad in [
            "opaque".to_string(),
            "a.!!!.c".to_string(),
            jwt(serde_json::json!({"sub": "x"})),
            jwt(serde_json::json!({"kubernetes.io": {"namespace": "ns"}})),
            jwt(serde_json::json!({"kubernetes.io": {"serviceaccount": {"name": "d"}}})),
        ] {
            let e = identity(&bad).unwrap_err();
            assert!(
                e.to_string().ends_with("give --dispatcher-id"),
                "{bad}: {e}"
            );
        }
    }

    #[test]
    fn the_file_is_read_again_at_most_every_recheck_and_a_bad_read_keeps_the_last() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("token");
        std::fs::write(&path, "first\n").unwrap();
        let t = OperatorToken::load(&path).unwrap();
        let t0 = Instant::now();
        assert_eq!(t.header_at(t0), "Bearer first");
        assert!(t.header_at(t0).is_sensitive(), "kept out of debug output");
        std::fs::write(&path, "second").unwrap();
        assert_eq!(
            t.header_at(t0 + RECHECK - Duration::from_millis(1)),
            "Bearer first",
            "not read again before RECHECK"
        );
        assert_eq!(t.header_at(t0 + RECHECK), "Bearer second", "rotated");
        std::fs::remove_file(&path).unwrap();
        assert_eq!(
            t.header_at(t0 + RECHECK * 3),
            "Bearer second",
            "a missing file keeps the last token"
        );
        std::fs::write(&path, "").unwrap();
        assert_eq!(
            t.header_at(t0 + RECHECK * 5),
            "Bearer second",
            "and so does an empty one"
        );
    }

    #[test]
    fn an_unusable_file_fails_at_start_naming_it() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("missing");
        let e = OperatorToken::load(&missing).unwrap_err();
        assert!(e.to_string().starts_with("--operator-token-file "), "{e}");
        let empty = dir.path().join("empty");
        std::fs::write(&empty, " \n").unwrap();
        let e = OperatorToken::load(&empty).unwrap_err();
        assert!(e.to_string().ends_with(": empty"), "{e}");
        let bad = dir.path().join("bad");
        std::fs::write(&bad, "a\u{7}b").unwrap();
        assert!(OperatorToken::load(&bad).is_err());
    }
}
