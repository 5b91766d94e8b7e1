//! `agenthooks-dispatcher hook`: the command a runtime runs as its hook (issue 13). It
//! reads the runtime's payload on stdin, posts it to the dispatcher's native route
//! (`POST <url>/v1/hooks/<dialect>`) with the caller's token, and prints the answer.
//!
//! Fail-closed by construction: Codex CLI and Gemini CLI let a call through when a hook
//! fails in any way but one (exit 2 with a reason on stderr; Copilot CLI denies on any
//! non-zero exit; Claude Code, with `onFailure: "block"`, on any failure). So every
//! failure here — no token where one is named, the dispatcher unreachable, slower than
//! `--timeout-seconds`, a non-2xx answer, a body that is not a JSON object, stdin over
//! the cap — is [`ShimError`], which the binary prints to stderr and exits 2 with.
//! Set the runtime's own hook timeout above the shim's, or the runtime kills the shim
//! first and (Codex, Gemini) lets the call through.

use std::path::PathBuf;
use std::time::Duration;

use crate::dialect::Dialect;
use crate::event::MAX_BODY_BYTES;

/// Exit code of a refusal (every runtime's "block": Claude Code, Codex CLI, Gemini CLI,
/// Copilot CLI and Cursor all read exit 2 as a deny).
pub const EXIT_REFUSED: u8 = 2;
/// Default deadline of the whole call, in seconds.
pub const DEFAULT_TIMEOUT_SECONDS: u64 = 5;
/// Environment variable holding the caller's token when no `--token-file` is given.
pub const TOKEN_ENV: &str = "AGENTHOOKS_TOKEN";

/// What the shim calls, and how.
#[derive(Debug, Clone)]
pub struct ShimConfig {
    pub dialect: Dialect,
    /// The dispatcher's base URL (`http://127.0.0.1:8080`, `https://agenthooks.example`).
    pub url: String,
    /// The caller's token (from `--token-file` or [`TOKEN_ENV`]); `None`: no credential.
    pub token: Option<String>,
    /// `?event=` (Copilot's camelCase hooks send no event name).
    pub event: Option<String>,
    /// `?agent_id=`: our name for the agent.
    pub agent_id: Option<String>,
    /// `?tenant_id=`, for a caller that may act for several.
    pub tenant_id: Option<String>,
    /// Deadline of the whole call, reading stdin included.
    pub timeout: Duration,
    /// CA bundle an `https` dispatcher's certificate must chain to.
    pub ca_file: Option<PathBuf>,
}

/// Why the shim refuses (printed to stderr; exit [`EXIT_REFUSED`]).
#[derive(Debug, thiserror::Error)]
pub enum ShimError {
    #[error("--url {url:?}: {why}")]
    Url { url: String, why: String },
    #[error("stdin: {0}")]
    Stdin(String),
    #[error("--token-file {path}: {why}")]
    Token { path: String, why: String },
    #[error("--ca-file: {0}")]
    Ca(String),
    #[error("the dispatcher at {url} did not answer within {seconds} s")]
    Timeout { url: String, seconds: u64 },
    #[error("the dispatcher at {url} could not be reached: {why}")]
    Unreachable { url: String, why: String },
    #[error("the dispatcher answered {status}: {body}")]
    Refused { status: u16, body: String },
    #[error("the dispatcher's answer is not a JSON object: {0}")]
    BadAnswer(String),
}

/// Reads the token file (trimmed); an empty or unreadable file is an error, never "no
/// credential".
pub fn read_token(path: &std::path::Path) -> Result<String, ShimError> {
    let text = std::fs::read_to_string(path).map_err(|e| ShimError::Token {
        path: path.display().to_string(),
        why: e.to_string(),
    })?;
    let token = text.trim();
    if token.is_empty() {
        return Err(ShimError::Token {
            path: path.display().to_string(),
            why: "is empty".into(),
        });
    }
    Ok(token.to_string())
}

/// The route for `config`: `<url>/v1/hooks/<dialect>` with its query.
pub fn route(config: &ShimConfig) -> Result<url::Url, ShimError> {
    let bad = |why: &str| ShimError::Url {
        url: config.url.clone(),
        why: why.to_string(),
    };
    let mut url = url::Url::parse(&config.url).map_err(|e| bad(&e.to_string()))?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err(bad("must be http:// or https://"));
    }
    let path = format!(
        "{}/v1/hooks/{}",
        url.path().trim_end_matches('/'),
        config.dialect
    );
    url.set_path(&path);
    url.set_query(None);
    {
        let mut query = url.query_pairs_mut();
        for (key, value) in [
            ("event", &config.event),
            ("agent_id", &config.agent_id),
            ("tenant_id", &config.tenant_id),
        ] {
            if let Some(v) = value {
                query.append_pair(key, v);
            }
        }
    }
    if url.query() == Some("") {
        url.set_query(None);
    }
    Ok(url)
}

/// Posts `payload` and returns the answer to print (a JSON object, as the dispatcher sent
/// it), within what is left of [`ShimConfig::timeout`] after `spent` (reading stdin).
/// Every failure is a [`ShimError`].
pub async fn call(
    config: &ShimConfig,
    payload: Vec<u8>,
    spent: Duration,
) -> Result<Vec<u8>, ShimError> {
    if payload.len() > MAX_BODY_BYTES {
        return Err(ShimError::Stdin(format!(
            "{} bytes is over the {MAX_BODY_BYTES}-byte limit",
            payload.len()
        )));
    }
    let url = route(config)?;
    crate::operator_urls::install_crypto_provider();
    let mut builder = reqwest::Client::builder()
        .no_proxy()
        .redirect(reqwest::redirect::Policy::none())
        .timeout(
            config
                .timeout
                .saturating_sub(spent)
                .max(Duration::from_millis(1)),
        );
    if let Some(ca) = &config.ca_file {
        let tls = agenthooks_tls::client_config_trusting("--ca-file", ca)
            .map_err(|e| ShimError::Ca(e.to_string()))?;
        builder = builder.tls_backend_preconfigured(tls);
    }
    let client = builder.build().map_err(|e| ShimError::Ca(e.to_string()))?;
    let mut request = client
        .post(url.clone())
        .header(reqwest::header::CONTENT_TYPE, "application/json")
        .body(payload);
    if let Some(token) = &config.token {
        request = request.bearer_auth(token);
    }
    let shown = url.as_str().to_string();
    let failed = |e: reqwest::Error| {
        if e.is_timeout() {
            ShimError::Timeout {
                url: shown.clone(),
                seconds: config.timeout.as_secs(),
            }
        } else {
            ShimError::Unreachable {
                url: shown.clone(),
                why: error_chain(&e),
            }
        }
    };
    let response = request.send().await.map_err(failed)?;
    let status = response.status();
    let body = response.bytes().await.map_err(failed)?;
    if !status.is_success() {
        let text = String::from_utf8_lossy(&body);
        let text: String = text.chars().take(1000).collect();
        return Err(ShimError::Refused {
            status: status.as_u16(),
            body: text,
        });
    }
    match serde_json::from_slice::<serde_json::Value>(&body) {
        Ok(serde_json::Value::Object(_)) => Ok(body.to_vec()),
        Ok(other) => Err(ShimError::BadAnswer(other.to_string())),
        Err(e) => Err(ShimError::BadAnswer(e.to_string())),
    }
}

/// An error and its sources, joined (`error sending request: connection refused`).
fn error_chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(url: &str) -> ShimConfig {
        ShimConfig {
            dialect: Dialect::Copilot,
            url: url.into(),
            token: None,
            event: Some("preToolUse".into()),
            agent_id: Some("coder one".into()),
            tenant_id: None,
            timeout: Duration::from_secs(1),
            ca_file: None,
        }
    }

    #[test]
    fn the_route_keeps_a_base_path_and_encodes_the_query() {
        assert_eq!(
            route(&config("http://127.0.0.1:8080")).unwrap().as_str(),
            "http://127.0.0.1:8080/v1/hooks/copilot?event=preToolUse&agent_id=coder+one"
        );
        assert_eq!(
            route(&config("https://h.example/agenthooks/"))
                .unwrap()
                .as_str(),
            "https://h.example/agenthooks/v1/hooks/copilot?event=preToolUse&agent_id=coder+one"
        );
        let mut bare = config("http://h:1");
        bare.event = None;
        bare.agent_id = None;
        assert_eq!(
            route(&bare).unwrap().as_str(),
            "http://h:1/v1/hooks/copilot"
        );
        assert!(matches!(
            route(&config("ftp://h")),
            Err(ShimError::Url { .. })
        ));
        assert!(matches!(
            route(&config("not a url")),
            Err(ShimError::Url { .. })
        ));
    }

    #[test]
    fn an_empty_or_missing_token_file_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let empty = dir.path().join("empty");
        std::fs::write(&empty, "\n").unwrap();
        assert!(
            read_token(&empty)
                .unwrap_err()
                .to_string()
                .contains("is empty")
        );
        assert!(read_token(&dir.path().join("none")).is_err());
        let good = dir.path().join("good");
        std::fs::write(&good, "tok\n").unwrap();
        assert_eq!(read_token(&good).unwrap(), "tok");
    }

    #[tokio::test]
    async fn every_failure_is_an_error() {
        // Nothing listens: unreachable.
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let e = call(
            &config(&format!("http://127.0.0.1:{port}")),
            b"{}".to_vec(),
            Duration::ZERO,
        )
        .await
        .unwrap_err();
        assert!(matches!(e, ShimError::Unreachable { .. }), "{e}");
        // Over the cap: refused before any connection.
        let e = call(
            &config("http://127.0.0.1:1"),
            vec![b' '; MAX_BODY_BYTES + 1],
            Duration::ZERO,
        )
        .await
        .unwrap_err();
        assert!(matches!(e, ShimError::Stdin(_)), "{e}");
        // Accepts but never answers: the deadline.
        let silent = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = silent.local_addr().unwrap();
        let _held = tokio::spawn(async move {
            let (_sock, _) = silent.accept().await.unwrap();
            tokio::time::sleep(Duration::from_secs(30)).await;
        });
        let e = call(
            &config(&format!("http://{addr}")),
            b"{}".to_vec(),
            Duration::ZERO,
        )
        .await
        .unwrap_err();
        assert!(matches!(e, ShimError::Timeout { seconds: 1, .. }), "{e}");
    }
}
