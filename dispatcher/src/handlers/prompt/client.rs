//! One call to a provider: POST, at most one retry, everything inside the hook's
//! deadline (CONTRACT §5 prompt.2, prompt.6; issue 4 points 1 and 3).
//!
//! - No redirect is followed (a 3xx is a failure), reqwest's own retries are off, the
//!   body is read up to 1 MiB ([`MAX_OUTPUT_BYTES`]); the deadline bounds connect,
//!   send, wait and read. Provider base URLs come from the platform team's providers
//!   file, so the hook SSRF guard does not apply.
//! - Retried once, only when the wait still ends before the deadline: 429 (rate limit;
//!   wait `retry-after-ms` or `retry-after` seconds, as OpenAI and Anthropic send them,
//!   else [`DEFAULT_RETRY_WAIT`]), 529 (Anthropic `overloaded_error`), other 5xx and
//!   transport errors (wait [`DEFAULT_RETRY_WAIT`]). Other 4xx are final (a bad key, a
//!   bad model: retrying gets the same answer).

use std::time::Duration;

use bytes::Bytes;
use reqwest::header::{AUTHORIZATION, CONTENT_TYPE, HeaderMap, HeaderValue};
use tokio::time::Instant;

use super::config::{Provider, ProviderKind};
use super::request::ANTHROPIC_VERSION;
use crate::handlers::http::{BodyError, error_chain, read_body};
use crate::handlers::{MAX_OUTPUT_BYTES, cut};

/// Wait before the one retry when the provider names none.
pub const DEFAULT_RETRY_WAIT: Duration = Duration::from_millis(500);
/// Longest `retry-after` honoured; a longer one ends the call (the hook's timeout is at
/// most 10 s anyway).
pub const MAX_RETRY_WAIT: Duration = Duration::from_secs(10);

/// Why a call brought no 2xx body. [`CallFailure::kind`] is the log and metrics label.
#[derive(Debug, Clone, PartialEq)]
pub struct CallFailure {
    /// `provider_timeout`, `provider_rate_limited`, `provider_overloaded`,
    /// `provider_5xx`, `provider_4xx`, `provider_3xx`, `transport`,
    /// `response_too_large`, `client_unavailable`.
    pub kind: &'static str,
    pub detail: String,
    /// Status of the last response, when one came.
    pub status: Option<u16>,
    /// Whether the provider may have counted tokens (a timeout after sending, a body
    /// too large or cut off): the reservation is then settled in full, not released.
    pub may_have_cost: bool,
}

/// A 2xx answer.
#[derive(Debug, Clone, PartialEq)]
pub struct Answer {
    pub status: u16,
    pub body: Vec<u8>,
}

/// The HTTP client for providers. Cheap to clone; one per process.
#[derive(Clone, Debug)]
pub struct ProviderClient {
    client: Result<reqwest::Client, String>,
}

impl Default for ProviderClient {
    fn default() -> Self {
        ProviderClient::new()
    }
}

impl ProviderClient {
    /// A client that follows no redirect and never retries on its own. Installs
    /// rustls' `ring` provider as the process default if none is set yet.
    pub fn new() -> ProviderClient {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let client = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .retry(reqwest::retry::never())
            .user_agent(concat!("agenthooks-dispatcher/", env!("CARGO_PKG_VERSION")))
            .pool_idle_timeout(Duration::from_secs(60))
            .build()
            .map_err(|e| format!("provider HTTP client unavailable: {e}"));
        if let Err(e) = &client {
            tracing::error!(error = %e, "could not build the provider client");
        }
        ProviderClient { client }
    }

    /// POSTs `body` to the provider's endpoint with its auth headers, retrying once as
    /// the module doc says; never past `deadline`.
    pub async fn call(
        &self,
        provider: &Provider,
        body: Bytes,
        deadline: Instant,
    ) -> Result<Answer, CallFailure> {
        let client = match &self.client {
            Ok(c) => c,
            Err(e) => {
                return Err(CallFailure {
                    kind: "client_unavailable",
                    detail: e.clone(),
                    status: None,
                    may_have_cost: false,
                });
            }
        };
        let headers = match headers(provider) {
            Ok(h) => h,
            Err(detail) => {
                return Err(CallFailure {
                    kind: "client_unavailable",
                    detail,
                    status: None,
                    may_have_cost: false,
                });
            }
        };
        let url = provider.endpoint();
        let mut attempt = 0;
        loop {
            attempt += 1;
            let one = attempt_once(client, &url, &headers, body.clone());
            let (failure, wait) = match tokio::time::timeout_at(deadline, one).await {
                Err(_) => {
                    return Err(CallFailure {
                        kind: "provider_timeout",
                        detail: "no complete answer before the hook's timeout".into(),
                        status: None,
                        may_have_cost: true,
                    });
                }
                Ok(Ok(answer)) => return Ok(answer),
                Ok(Err(Failed::Final(f))) => return Err(f),
                Ok(Err(Failed::Retryable(f, wait))) => (f, wait),
            };
            if attempt > 1 || wait > MAX_RETRY_WAIT || Instant::now() + wait >= deadline {
                return Err(failure);
            }
            tracing::debug!(provider = %provider.name, kind = failure.kind, wait_ms = wait.as_millis() as u64, "provider call failed, retrying once");
            tokio::time::sleep(wait).await;
        }
    }
}

fn headers(provider: &Provider) -> Result<HeaderMap, String> {
    let mut h = HeaderMap::new();
    h.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    let key = provider.api_key.expose();
    let bad_key = || {
        format!(
            "the API key of provider {} is not a valid header value",
            provider.name
        )
    };
    match provider.kind {
        ProviderKind::Openai => {
            let mut v = HeaderValue::from_str(&format!("Bearer {key}")).map_err(|_| bad_key())?;
            v.set_sensitive(true);
            h.insert(AUTHORIZATION, v);
        }
        ProviderKind::Anthropic => {
            let mut v = HeaderValue::from_str(key).map_err(|_| bad_key())?;
            v.set_sensitive(true);
            h.insert("x-api-key", v);
            h.insert(
                "anthropic-version",
                HeaderValue::from_static(ANTHROPIC_VERSION),
            );
        }
    }
    Ok(h)
}

enum Failed {
    Final(CallFailure),
    Retryable(CallFailure, Duration),
}

fn failure(
    kind: &'static str,
    detail: String,
    status: Option<u16>,
    may_have_cost: bool,
) -> CallFailure {
    CallFailure {
        kind,
        detail: cut(detail),
        status,
        may_have_cost,
    }
}

async fn attempt_once(
    client: &reqwest::Client,
    url: &str,
    headers: &HeaderMap,
    body: Bytes,
) -> Result<Answer, Failed> {
    let resp = client
        .post(url)
        .headers(headers.clone())
        .body(body)
        .send()
        .await
        .map_err(|e| {
            Failed::Retryable(
                failure(
                    "transport",
                    format!("request failed: {}", error_chain(&e.without_url())),
                    None,
                    false,
                ),
                DEFAULT_RETRY_WAIT,
            )
        })?;
    let status = resp.status();
    let code = status.as_u16();
    if status.is_success() {
        return match read_body(resp).await {
            Ok(body) => Ok(Answer { status: code, body }),
            Err(BodyError::TooLarge) => Err(Failed::Final(failure(
                "response_too_large",
                format!("provider answer larger than {MAX_OUTPUT_BYTES} bytes"),
                Some(code),
                true,
            ))),
            Err(BodyError::Transport(e)) => Err(Failed::Final(failure(
                "transport",
                format!("reading the provider answer failed: {e}"),
                Some(code),
                true,
            ))),
        };
    }
    let wait = retry_after(resp.headers()).unwrap_or(DEFAULT_RETRY_WAIT);
    let snippet = read_body(resp)
        .await
        .map(|b| String::from_utf8_lossy(&b).trim().to_owned())
        .unwrap_or_default();
    let detail = format!("provider answered {code}: {}", cut(snippet));
    Err(match code {
        429 => Failed::Retryable(
            failure("provider_rate_limited", detail, Some(code), false),
            wait,
        ),
        529 => Failed::Retryable(
            failure("provider_overloaded", detail, Some(code), false),
            wait,
        ),
        500..=599 => Failed::Retryable(failure("provider_5xx", detail, Some(code), false), wait),
        300..=399 => Failed::Final(failure(
            "provider_3xx",
            format!("{detail} (redirects are not followed)"),
            Some(code),
            false,
        )),
        _ => Failed::Final(failure("provider_4xx", detail, Some(code), false)),
    })
}

/// `retry-after-ms` (milliseconds) or `retry-after` (seconds, possibly fractional); an
/// HTTP date is not honoured (the default wait applies).
fn retry_after(h: &HeaderMap) -> Option<Duration> {
    let get = |k: &str| h.get(k).and_then(|v| v.to_str().ok()).map(str::trim);
    if let Some(ms) = get("retry-after-ms").and_then(|v| v.parse::<f64>().ok()) {
        return Duration::try_from_secs_f64(ms / 1000.0).ok();
    }
    get("retry-after")
        .and_then(|v| v.parse::<f64>().ok())
        .and_then(|s| Duration::try_from_secs_f64(s).ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retry_after_reads_milliseconds_then_seconds() {
        let mut h = HeaderMap::new();
        assert_eq!(retry_after(&h), None);
        h.insert("retry-after", HeaderValue::from_static("2"));
        assert_eq!(retry_after(&h), Some(Duration::from_secs(2)));
        h.insert("retry-after-ms", HeaderValue::from_static("150"));
        assert_eq!(retry_after(&h), Some(Duration::from_millis(150)));
        let mut d = HeaderMap::new();
        d.insert(
            "retry-after",
            HeaderValue::from_static("Wed, 21 Oct 2015 07:28:00 GMT"),
        );
        assert_eq!(retry_after(&d), None);
        d.insert("retry-after", HeaderValue::from_static("-1"));
        assert_eq!(retry_after(&d), None);
    }
}
