//! The `http` handler: POSTs the event JSON to a webhook and reads its decision.
//!
//! Rules: CONTRACT §5 http.1–4; seed "Handler reference / http" and "Security model".
//!
//! Every call goes through the SSRF guard ([`SsrfGuard`]): the URL is checked, a host
//! name is resolved once through a [`HostResolver`], every answer is classified, and the
//! HTTP client is pinned to exactly the addresses that passed: its DNS hook
//! ([`PinnedResolver`]) only hands out addresses registered by a checked call and refuses
//! any other name, so nothing unchecked is ever dialled. IP-literal URLs skip DNS in
//! reqwest and are checked by [`SsrfGuard::check_url`]. No redirect is followed, no proxy
//! is used, and reqwest's own retries are off, so the one retry here is the only one.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use agenthooks_crds::validation::RESERVED_HEADERS;
use bytes::Bytes;
use reqwest::header::{CONTENT_TYPE, HeaderMap, HeaderName, HeaderValue};
use serde_json::Value;
use tokio::time::Instant;
use url::{Host, Url};

use super::ssrf::{HostResolver, SsrfError, SsrfGuard, SystemResolver};
use super::{HandlerResult, MAX_OUTPUT_BYTES, cut};
use crate::decision::outcome::ErrorKind;

/// Pause before the single retry of a 5xx or transport error (CONTRACT §5 http.3).
pub const RETRY_BACKOFF: Duration = Duration::from_secs(1);

/// Calls HTTP hooks. One per process, reused: it holds the connection pool, the SSRF
/// guard and the resolver. Cheap to clone (an `Arc` inside); `Send + Sync`.
#[derive(Clone)]
pub struct HttpCaller {
    inner: Arc<Inner>,
}

struct Inner {
    /// The client, or why it could not be built (then every call is an `Error`).
    client: Result<reqwest::Client, String>,
    guard: SsrfGuard,
    resolver: Arc<dyn HostResolver>,
    pins: Arc<PinTable>,
}

impl std::fmt::Debug for HttpCaller {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HttpCaller")
            .field("allow_cidrs", &self.inner.guard.allow_cidrs())
            .field("client_ok", &self.inner.client.is_ok())
            .finish()
    }
}

impl HttpCaller {
    /// A caller using the system resolver. `allow_cidrs` is the operator-set allowlist
    /// (flag `--http-allow-cidr`, e.g. `10.96.0.0/12`; `127.0.0.0/8` in tests): the only
    /// way to admit an address the SSRF guard would refuse.
    ///
    /// Installs rustls' `ring` crypto provider as the process default if none is set yet.
    pub fn new(allow_cidrs: Vec<ipnet::IpNet>) -> Self {
        Self::with_resolver(allow_cidrs, Arc::new(SystemResolver))
    }

    /// Same as [`HttpCaller::new`] with an injected resolver (tests make a name answer
    /// public and private addresses at once).
    pub fn with_resolver(allow_cidrs: Vec<ipnet::IpNet>, resolver: Arc<dyn HostResolver>) -> Self {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let pins = Arc::new(PinTable::default());
        let client = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .retry(reqwest::retry::never())
            .no_proxy()
            .dns_resolver(PinnedResolver { pins: pins.clone() })
            .user_agent(concat!("agenthooks-dispatcher/", env!("CARGO_PKG_VERSION")))
            .pool_idle_timeout(Duration::from_secs(30))
            .build()
            .map_err(|e| {
                tracing::error!(error = %e, "could not build the HTTP hook client");
                format!("HTTP client unavailable: {e}")
            });
        HttpCaller {
            inner: Arc::new(Inner {
                client,
                guard: SsrfGuard::new(allow_cidrs),
                resolver,
                pins,
            }),
        }
    }

    /// The SSRF guard this caller applies (for validating hook URLs with the same rules).
    pub fn guard(&self) -> &SsrfGuard {
        &self.inner.guard
    }

    /// POSTs `body` (the event JSON) to `url` with `Content-Type: application/json` and
    /// `headers` (name, already-decrypted value), within `timeout` overall.
    ///
    /// Outcomes (CONTRACT §5 http):
    /// * SSRF refusal (URL rule, or any resolved address denied) → `Error` kind
    ///   `ssrf_blocked`, logged on target `security.hook.ssrf_block`; nothing is sent.
    /// * 2xx: body read up to 1 MiB (more → `Error` kind `response_too_large`). Empty or
    ///   non-JSON or non-object body → `Allow`; one that starts as a JSON object and does
    ///   not parse → `Error` kind `bad_decision` ([`super::answer_object`]). Object: `decision` `"block"` → `Block`
    ///   (reason from a `reason` string), `"allow"` → `Allow`, any other value → `Error`
    ///   kind `bad_decision`; no `decision` and `"continue": false` → `Block`.
    ///   `additionalContext` (string) and `updatedInput` (non-null JSON) are carried.
    /// * 3xx → `Error` kind `http_3xx` (not followed); 4xx → `Error` kind `http_4xx`
    ///   (no retry).
    /// * 5xx or transport error → one retry after [`RETRY_BACKOFF`]; if it fails again,
    ///   `Error` kind `http_5xx` / `transport`. If the retry cannot happen before the
    ///   timeout, that first error is returned at once (still an `Error`: fail-closed,
    ///   CONTRACT §4.3; never relabelled `Timeout`, which `onTimeout: allow` would let
    ///   through).
    /// * Host name not resolvable → `Error` kind `transport` (not retried: one resolution
    ///   per call). Bad header name/value → `Error` kind `bad_header`.
    /// * The whole call past `timeout` → [`HandlerResult::timeout`].
    ///
    /// `metadata.http_status` is the status of the last response received.
    pub async fn call(
        &self,
        url: &str,
        headers: &[(String, String)],
        body: Bytes,
        timeout: Duration,
    ) -> HandlerResult {
        let timeout_ms = u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX);
        let deadline = Instant::now() + timeout;
        let work = self.call_inner(url, headers, body, deadline);
        match tokio::time::timeout_at(deadline, work).await {
            Ok(r) => r,
            Err(_) => HandlerResult::timeout(timeout_ms),
        }
    }

    async fn call_inner(
        &self,
        url: &str,
        headers: &[(String, String)],
        body: Bytes,
        deadline: Instant,
    ) -> HandlerResult {
        let client = match &self.inner.client {
            Ok(c) => c,
            Err(e) => return HandlerResult::error(ErrorKind::Transport, e.clone()),
        };
        let parsed = match self.inner.guard.check_url(url) {
            Ok(u) => u,
            Err(e) => return ssrf_refusal(url, &e),
        };

        // Resolve a host name once, check every answer, pin the client to them.
        let _pin = match parsed.host() {
            Some(Host::Domain(host)) => {
                let port = parsed.port_or_known_default().unwrap_or(80);
                let addrs = match self.inner.resolver.resolve(host, port).await {
                    Ok(a) if !a.is_empty() => a,
                    Ok(_) => {
                        return HandlerResult::error(
                            ErrorKind::Transport,
                            format!("host {host} resolved to no address"),
                        );
                    }
                    Err(e) => {
                        return HandlerResult::error(
                            ErrorKind::Transport,
                            format!("could not resolve host {host}: {e}"),
                        );
                    }
                };
                for a in &addrs {
                    if let Err(e) = self.inner.guard.check_ip(a.ip()) {
                        return ssrf_refusal(url, &e);
                    }
                }
                let ips: Vec<IpAddr> = addrs.iter().map(SocketAddr::ip).collect();
                Some(self.inner.pins.pin(host, ips))
            }
            _ => None,
        };

        let mut header_map = HeaderMap::new();
        for (name, value) in headers {
            let Ok(n) = HeaderName::from_bytes(name.as_bytes()) else {
                return HandlerResult::error(
                    ErrorKind::BadHeader,
                    format!("invalid header name {name:?}"),
                );
            };
            if RESERVED_HEADERS.contains(&n.as_str()) {
                return HandlerResult::error(
                    ErrorKind::BadHeader,
                    format!("header {n} is set by the dispatcher and may not be configured"),
                );
            }
            // Never echo the value: it is a decrypted secret.
            let Ok(mut v) = HeaderValue::from_str(value) else {
                return HandlerResult::error(
                    ErrorKind::BadHeader,
                    format!("value of header {n} is not a valid header value"),
                );
            };
            v.set_sensitive(true);
            header_map.append(n, v);
        }
        header_map.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));

        let first = attempt(client, &parsed, &header_map, body.clone()).await;
        let retry_why = match first {
            Attempt::Done(r) => return r,
            Attempt::Retryable(r) => r,
        };
        if deadline.saturating_duration_since(Instant::now()) <= RETRY_BACKOFF {
            // The retry cannot happen inside the hook's timeout: the failure stands as
            // the error it is. Only the deadline expiring while waiting is a timeout.
            tracing::debug!(
                reason = retry_why.reason.as_deref().unwrap_or(""),
                "http hook failed, no room left in the timeout for the retry"
            );
            return retry_why;
        }
        tracing::debug!(
            reason = retry_why.reason.as_deref().unwrap_or(""),
            "http hook failed, retrying once"
        );
        tokio::time::sleep(RETRY_BACKOFF).await;
        match attempt(client, &parsed, &header_map, body).await {
            Attempt::Done(r) | Attempt::Retryable(r) => r,
        }
    }
}

/// The result of one request: final, or worth the one retry (5xx, transport error).
enum Attempt {
    Done(HandlerResult),
    Retryable(HandlerResult),
}

async fn attempt(client: &reqwest::Client, url: &Url, headers: &HeaderMap, body: Bytes) -> Attempt {
    let resp = match client
        .post(url.clone())
        .headers(headers.clone())
        .body(body)
        .send()
        .await
    {
        Ok(r) => r,
        Err(e) => {
            return Attempt::Retryable(HandlerResult::error(
                ErrorKind::Transport,
                format!("request failed: {}", error_chain(&e.without_url())),
            ));
        }
    };
    let status = resp.status();
    let code = status.as_u16();
    let with_status = |mut r: HandlerResult| {
        r.metadata.http_status = Some(code);
        r
    };
    if status.is_success() {
        return match read_body(resp).await {
            Ok(body) => Attempt::Done(with_status(interpret_body(&body))),
            Err(BodyError::TooLarge) => Attempt::Done(with_status(HandlerResult::error(
                ErrorKind::ResponseTooLarge,
                format!("response body larger than {MAX_OUTPUT_BYTES} bytes"),
            ))),
            Err(BodyError::Transport(e)) => Attempt::Retryable(with_status(HandlerResult::error(
                ErrorKind::Transport,
                format!("reading response body failed: {e}"),
            ))),
        };
    }
    if status.is_redirection() {
        let location = resp
            .headers()
            .get(reqwest::header::LOCATION)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("");
        return Attempt::Done(with_status(HandlerResult::error(
            ErrorKind::Http3xx,
            format!("hook answered {code} (redirects are not followed) to {location:?}"),
        )));
    }
    if status.is_client_error() {
        let snippet = read_body(resp)
            .await
            .map(|b| String::from_utf8_lossy(&b).trim().to_owned())
            .unwrap_or_default();
        return Attempt::Done(with_status(HandlerResult::error(
            ErrorKind::Http4xx,
            format!("hook answered {code}: {snippet}"),
        )));
    }
    if status.is_server_error() {
        return Attempt::Retryable(with_status(HandlerResult::error(
            ErrorKind::Http5xx,
            format!("hook answered {code}"),
        )));
    }
    Attempt::Done(with_status(HandlerResult::error(
        ErrorKind::Transport,
        format!("hook answered unexpected status {code}"),
    )))
}

/// Why a response body could not be read: over [`MAX_OUTPUT_BYTES`], or the connection failed.
pub(crate) enum BodyError {
    TooLarge,
    Transport(String),
}

/// Reads the body chunk by chunk, stopping as soon as it passes [`MAX_OUTPUT_BYTES`]
/// (also used by the prompt handler's provider calls).
pub(crate) async fn read_body(mut resp: reqwest::Response) -> Result<Vec<u8>, BodyError> {
    if resp
        .content_length()
        .is_some_and(|n| n > u64::try_from(MAX_OUTPUT_BYTES).unwrap_or(u64::MAX))
    {
        return Err(BodyError::TooLarge);
    }
    let mut buf = Vec::new();
    loop {
        match resp.chunk().await {
            Ok(Some(chunk)) => {
                if buf.len() + chunk.len() > MAX_OUTPUT_BYTES {
                    return Err(BodyError::TooLarge);
                }
                buf.extend_from_slice(&chunk);
            }
            Ok(None) => return Ok(buf),
            Err(e) => return Err(BodyError::Transport(error_chain(&e.without_url()))),
        }
    }
}

/// A 2xx body to an outcome (CONTRACT §5 http.4).
fn interpret_body(body: &[u8]) -> HandlerResult {
    let obj = match super::answer_object(body) {
        Ok(Some(obj)) => obj,
        Ok(None) => return HandlerResult::allow(),
        Err(broken) => return *broken,
    };
    let reason = || {
        ["reason", "stopReason"]
            .iter()
            .find_map(|k| obj.get(*k).and_then(Value::as_str))
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(str::to_owned)
    };
    let mut result = match obj.get("decision") {
        Some(Value::String(d)) if d == "block" => {
            HandlerResult::block(reason().unwrap_or_else(|| "blocked by http hook".to_owned()))
        }
        Some(Value::String(d)) if d == "allow" => HandlerResult::allow(),
        Some(Value::String(d)) if d == "ask" => HandlerResult::ask(
            reason().unwrap_or_else(|| "the http hook asks for a person's decision".to_owned()),
        ),
        Some(other) => {
            return HandlerResult::error(
                ErrorKind::BadDecision,
                format!(
                    "decision must be \"allow\", \"block\" or \"ask\", got {}",
                    cut(other.to_string())
                ),
            );
        }
        None if obj.get("continue") == Some(&Value::Bool(false)) => HandlerResult::block(
            reason().unwrap_or_else(|| "blocked by http hook (\"continue\": false)".to_owned()),
        ),
        None => HandlerResult::allow(),
    };
    result.additional_context = obj
        .get("additionalContext")
        .and_then(Value::as_str)
        .map(str::to_owned);
    result.updated_input = obj.get("updatedInput").filter(|v| !v.is_null()).cloned();
    result.updated_tool_output = super::output_rewrite(&obj);
    result
}

/// Logs and reports an SSRF refusal (`security.hook.ssrf_block`). The URL is logged
/// without query, fragment or userinfo (they may carry secrets).
fn ssrf_refusal(url: &str, err: &SsrfError) -> HandlerResult {
    let shown = loggable_url(url);
    tracing::warn!(
        target: "security.hook.ssrf_block",
        reason = err.rule(),
        detail = %err,
        url = %shown,
        "http hook refused by the SSRF guard"
    );
    HandlerResult::error(
        ErrorKind::SsrfBlocked,
        format!("refused by the SSRF guard: {err}"),
    )
}

fn loggable_url(url: &str) -> String {
    match Url::parse(url) {
        Ok(mut u) => {
            let _ = u.set_username("");
            let _ = u.set_password(None);
            u.set_query(None);
            u.set_fragment(None);
            cut(u.to_string())
        }
        Err(_) => {
            let end = url.find(['?', '#']).unwrap_or(url.len());
            let s = &url[..end];
            let s = match (s.find("://"), s.rfind('@')) {
                (Some(i), Some(at)) if at > i => format!("{}{}", &s[..i + 3], &s[at + 1..]),
                _ => s.to_owned(),
            };
            cut(s)
        }
    }
}

/// The error and its sources, e.g. "error sending request: connection refused".
pub(crate) fn error_chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut s = e.to_string();
    let mut src = e.source();
    while let Some(inner) = src {
        let t = inner.to_string();
        if !s.contains(&t) {
            s.push_str(": ");
            s.push_str(&t);
        }
        src = inner.source();
    }
    s
}

/// Host name → addresses that passed the SSRF guard, shared by all in-flight calls.
/// An entry lives while at least one call that registered it is in flight.
#[derive(Default)]
struct PinTable {
    map: Mutex<HashMap<String, PinEntry>>,
}

struct PinEntry {
    ips: Vec<IpAddr>,
    users: usize,
}

impl PinTable {
    /// Registers the checked addresses of `host` (replacing the previous set: every set
    /// in the table was checked, so any of them is safe to dial).
    fn pin(self: &Arc<Self>, host: &str, ips: Vec<IpAddr>) -> PinGuard {
        let key = host.to_ascii_lowercase();
        let mut map = self.map.lock().unwrap_or_else(|p| p.into_inner());
        let entry = map.entry(key.clone()).or_insert(PinEntry {
            ips: Vec::new(),
            users: 0,
        });
        entry.ips = ips;
        entry.users += 1;
        PinGuard {
            table: self.clone(),
            key,
        }
    }

    fn lookup(&self, host: &str) -> Option<Vec<IpAddr>> {
        let map = self.map.lock().unwrap_or_else(|p| p.into_inner());
        map.get(&host.to_ascii_lowercase()).map(|e| e.ips.clone())
    }
}

struct PinGuard {
    table: Arc<PinTable>,
    key: String,
}

impl Drop for PinGuard {
    fn drop(&mut self) {
        let mut map = self.table.map.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(entry) = map.get_mut(&self.key) {
            entry.users -= 1;
            if entry.users == 0 {
                map.remove(&self.key);
            }
        }
    }
}

/// reqwest's DNS hook: answers only names a checked call pinned, with exactly the
/// checked addresses (reqwest sets the port). Any other name fails, so reqwest can never
/// dial an address the guard did not see.
struct PinnedResolver {
    pins: Arc<PinTable>,
}

impl reqwest::dns::Resolve for PinnedResolver {
    fn resolve(&self, name: reqwest::dns::Name) -> reqwest::dns::Resolving {
        let found = self.pins.lookup(name.as_str());
        let host = name.as_str().to_owned();
        Box::pin(async move {
            match found {
                Some(ips) => {
                    let addrs: reqwest::dns::Addrs =
                        Box::new(ips.into_iter().map(|ip| SocketAddr::new(ip, 0)));
                    Ok(addrs)
                }
                None => Err(format!("host {host} was not checked by the SSRF guard").into()),
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::handlers::Outcome;
    use axum::Router;
    use axum::body::Body;
    use axum::extract::State;
    use axum::http::{HeaderMap as AxHeaders, StatusCode};
    use axum::response::{IntoResponse, Response};
    use futures::future::BoxFuture;
    use std::io;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Instant as StdInstant;

    const EVENT: &str =
        r#"{"event":"pre_tool_use","tool_name":"Bash","tool_input":{"command":"ls"}}"#;

    type Reply =
        Arc<dyn Fn(usize, &AxHeaders, &Bytes) -> BoxFuture<'static, Response> + Send + Sync>;

    #[derive(Clone)]
    struct Srv {
        hits: Arc<AtomicUsize>,
        seen: Arc<Mutex<Vec<(AxHeaders, Bytes)>>>,
        reply: Reply,
    }

    struct TestServer {
        addr: SocketAddr,
        hits: Arc<AtomicUsize>,
        seen: Arc<Mutex<Vec<(AxHeaders, Bytes)>>>,
    }

    impl TestServer {
        fn url(&self, path: &str) -> String {
            format!("http://{}{path}", self.addr)
        }
        fn hits(&self) -> usize {
            self.hits.load(Ordering::SeqCst)
        }
    }

    async fn handle(State(s): State<Srv>, headers: AxHeaders, body: Bytes) -> Response {
        let n = s.hits.fetch_add(1, Ordering::SeqCst) + 1;
        s.seen.lock().unwrap().push((headers.clone(), body.clone()));
        (s.reply)(n, &headers, &body).await
    }

    /// A local HTTP server on 127.0.0.1 answering every request with `reply(n, ..)`,
    /// where n is the 1-based request number.
    async fn server<F, Fut>(reply: F) -> TestServer
    where
        F: Fn(usize) -> Fut + Send + Sync + 'static,
        Fut: std::future::Future<Output = Response> + Send + 'static,
    {
        let reply = Arc::new(reply);
        let srv = Srv {
            hits: Arc::new(AtomicUsize::new(0)),
            seen: Arc::new(Mutex::new(Vec::new())),
            reply: Arc::new(move |n, _h, _b| {
                let reply = reply.clone();
                Box::pin(async move { reply(n).await })
            }),
        };
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let out = TestServer {
            addr,
            hits: srv.hits.clone(),
            seen: srv.seen.clone(),
        };
        let app = Router::new().fallback(handle).with_state(srv);
        tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        out
    }

    fn json(status: u16, body: &str) -> Response {
        (
            StatusCode::from_u16(status).unwrap(),
            [("content-type", "application/json")],
            body.to_owned(),
        )
            .into_response()
    }

    fn loopback_caller() -> HttpCaller {
        HttpCaller::new(vec!["127.0.0.0/8".parse().unwrap()])
    }

    async fn call(c: &HttpCaller, url: &str) -> HandlerResult {
        c.call(
            url,
            &[],
            Bytes::from_static(EVENT.as_bytes()),
            Duration::from_secs(5),
        )
        .await
    }

    /// A resolver with fixed answers that counts its calls.
    struct FixedResolver {
        answers: HashMap<String, Vec<SocketAddr>>,
        calls: AtomicUsize,
    }

    impl FixedResolver {
        fn new(entries: &[(&str, Vec<SocketAddr>)]) -> Arc<Self> {
            Arc::new(FixedResolver {
                answers: entries
                    .iter()
                    .map(|(h, a)| (h.to_string(), a.clone()))
                    .collect(),
                calls: AtomicUsize::new(0),
            })
        }
        fn calls(&self) -> usize {
            self.calls.load(Ordering::SeqCst)
        }
    }

    impl HostResolver for FixedResolver {
        fn resolve(
            &self,
            host: &str,
            _port: u16,
        ) -> BoxFuture<'static, io::Result<Vec<SocketAddr>>> {
            self.calls.fetch_add(1, Ordering::SeqCst);
            let r = self
                .answers
                .get(host)
                .cloned()
                .ok_or_else(|| io::Error::new(io::ErrorKind::NotFound, "no such host"));
            Box::pin(async move { r })
        }
    }

    fn sa(s: &str) -> SocketAddr {
        s.parse().unwrap()
    }

    // --- http.1: request shape -------------------------------------------------------

    #[tokio::test]
    async fn posts_event_json_with_content_type_and_headers() {
        let srv = server(|_| async { json(200, "") }).await;
        let c = loopback_caller();
        let headers = vec![
            ("Authorization".to_owned(), "Bearer s3cr3t".to_owned()),
            ("X-Tenant".to_owned(), "acme".to_owned()),
        ];
        let r = c
            .call(
                &srv.url("/hook"),
                &headers,
                Bytes::from_static(EVENT.as_bytes()),
                Duration::from_secs(5),
            )
            .await;
        assert_eq!(r.outcome, Outcome::Allow, "{r:?}");
        assert_eq!(r.metadata.http_status, Some(200));
        assert_eq!(srv.hits(), 1);
        let seen = srv.seen.lock().unwrap();
        let (h, body) = &seen[0];
        assert_eq!(body.as_ref(), EVENT.as_bytes());
        assert_eq!(h.get("content-type").unwrap(), "application/json");
        assert_eq!(h.get("authorization").unwrap(), "Bearer s3cr3t");
        assert_eq!(h.get("x-tenant").unwrap(), "acme");
    }

    #[tokio::test]
    async fn bad_or_reserved_headers_are_refused_without_sending() {
        let srv = server(|_| async { json(200, "") }).await;
        let c = loopback_caller();
        for (name, value) in [
            ("Bad Name", "x"),
            ("X-Ok", "line\nbreak"),
            ("Host", "evil.example"),
            ("Content-Type", "text/plain"),
        ] {
            let r = c
                .call(
                    &srv.url("/"),
                    &[(name.to_owned(), value.to_owned())],
                    Bytes::new(),
                    Duration::from_secs(5),
                )
                .await;
            assert_eq!(r.error_kind, Some(ErrorKind::BadHeader), "{name}");
            assert!(!r.reason.unwrap().contains(value), "{name}: value echoed");
        }
        assert_eq!(srv.hits(), 0);
    }

    // --- http.4: response interpretation ------------------------------------------

    #[tokio::test]
    async fn decisions_from_the_body() {
        let cases: &[(&str, Outcome, Option<&str>, Option<ErrorKind>)] = &[
            ("", Outcome::Allow, None, None),
            ("not json", Outcome::Allow, None, None),
            ("[1,2]", Outcome::Allow, None, None),
            (r#"{"decision":"allow"}"#, Outcome::Allow, None, None),
            (
                r#"{"decision":"block"}"#,
                Outcome::Block,
                Some("blocked by http hook"),
                None,
            ),
            (
                r#"{"decision":"block","reason":"no prod writes"}"#,
                Outcome::Block,
                Some("no prod writes"),
                None,
            ),
            (
                r#"{"decision":"maybe"}"#,
                Outcome::Error,
                None,
                Some(ErrorKind::BadDecision),
            ),
            (
                r#"{"decision":"BLOCK"}"#,
                Outcome::Error,
                None,
                Some(ErrorKind::BadDecision),
            ),
            (
                r#"{"decision":null}"#,
                Outcome::Error,
                None,
                Some(ErrorKind::BadDecision),
            ),
            (
                r#"{"decision":true}"#,
                Outcome::Error,
                None,
                Some(ErrorKind::BadDecision),
            ),
            (
                r#"{"continue":false}"#,
                Outcome::Block,
                Some("blocked by http hook (\"continue\": false)"),
                None,
            ),
            (
                "{\n  \"continue\": false,\n  \"reason\": \"stop\"\n}",
                Outcome::Block,
                Some("stop"),
                None,
            ),
            (r#"{"continue":true}"#, Outcome::Allow, None, None),
            (
                r#"{"decision":"allow","continue":false}"#,
                Outcome::Allow,
                None,
                None,
            ),
        ];
        let bodies: Arc<Vec<String>> = Arc::new(cases.iter().map(|c| c.0.to_owned()).collect());
        let b = bodies.clone();
        let srv = server(move |n| {
            let body = b[n - 1].clone();
            async move { json(200, &body) }
        })
        .await;
        let c = loopback_caller();
        for (body, outcome, reason, kind) in cases {
            let r = call(&c, &srv.url("/")).await;
            assert_eq!(r.outcome, *outcome, "{body}: {r:?}");
            if reason.is_some() {
                assert_eq!(r.reason.as_deref(), *reason, "{body}");
            }
            assert_eq!(r.error_kind, *kind, "{body}");
            assert_eq!(r.metadata.http_status, Some(200), "{body}");
        }
    }

    #[tokio::test]
    async fn additional_context_and_updated_input_are_carried() {
        let srv = server(|_| async {
            json(
                200,
                r#"{"decision":"allow","additionalContext":"be careful","updatedInput":{"command":"ls -la"}}"#,
            )
        })
        .await;
        let r = call(&loopback_caller(), &srv.url("/")).await;
        assert_eq!(r.outcome, Outcome::Allow);
        assert_eq!(r.additional_context.as_deref(), Some("be careful"));
        assert_eq!(
            r.updated_input,
            Some(serde_json::json!({"command": "ls -la"}))
        );
        assert_eq!(r.metadata.http_status, Some(200));
    }

    #[tokio::test]
    async fn other_2xx_statuses_are_read_too() {
        let srv = server(|_| async { json(204, "") }).await;
        let r = call(&loopback_caller(), &srv.url("/")).await;
        assert_eq!(r.outcome, Outcome::Allow);
        assert_eq!(r.metadata.http_status, Some(204));
    }

    #[tokio::test]
    async fn response_over_one_mib_is_an_error() {
        let srv = server(|n| async move {
            if n == 1 {
                // Content-Length known up front.
                json(200, &" ".repeat(MAX_OUTPUT_BYTES + 1))
            } else {
                // Streamed, no Content-Length: cut while reading.
                let chunks = futures::stream::iter(
                    (0..40).map(|_| Ok::<_, io::Error>(Bytes::from(vec![b' '; 64 * 1024]))),
                );
                Response::builder()
                    .status(200)
                    .body(Body::from_stream(chunks))
                    .unwrap()
            }
        })
        .await;
        let c = loopback_caller();
        for _ in 0..2 {
            let r = call(&c, &srv.url("/")).await;
            assert_eq!(r.outcome, Outcome::Error);
            assert_eq!(r.error_kind, Some(ErrorKind::ResponseTooLarge));
            assert_eq!(r.metadata.http_status, Some(200));
        }
        assert_eq!(srv.hits(), 2, "no retry on an oversized body");
    }

    #[tokio::test]
    async fn response_of_exactly_one_mib_is_fine() {
        let srv = server(|_| async { json(200, &" ".repeat(MAX_OUTPUT_BYTES)) }).await;
        let r = call(&loopback_caller(), &srv.url("/")).await;
        assert_eq!(r.outcome, Outcome::Allow, "{r:?}");
    }

    // --- http.3: status classes and retry ----------------------------------------

    #[tokio::test]
    async fn client_error_is_not_retried() {
        let srv = server(|_| async { json(403, "forbidden") }).await;
        let r = call(&loopback_caller(), &srv.url("/")).await;
        assert_eq!(r.outcome, Outcome::Error);
        assert_eq!(r.error_kind, Some(ErrorKind::Http4xx));
        assert_eq!(r.metadata.http_status, Some(403));
        assert!(r.reason.unwrap().contains("403"));
        tokio::time::sleep(Duration::from_millis(1200)).await;
        assert_eq!(srv.hits(), 1);
    }

    #[tokio::test]
    async fn server_error_is_retried_once_after_a_second() {
        let srv = server(|n| async move {
            if n == 1 {
                json(503, "")
            } else {
                json(200, r#"{"decision":"block","reason":"second try"}"#)
            }
        })
        .await;
        let started = StdInstant::now();
        let r = call(&loopback_caller(), &srv.url("/")).await;
        let took = started.elapsed();
        assert_eq!(r.outcome, Outcome::Block, "{r:?}");
        assert_eq!(r.reason.as_deref(), Some("second try"));
        assert_eq!(srv.hits(), 2);
        assert!(took >= Duration::from_millis(950), "{took:?}");
        assert!(took < Duration::from_secs(3), "{took:?}");
    }

    #[tokio::test]
    async fn server_error_twice_is_an_error_after_exactly_two_requests() {
        let srv = server(|_| async { json(500, "") }).await;
        let r = call(&loopback_caller(), &srv.url("/")).await;
        assert_eq!(r.outcome, Outcome::Error);
        assert_eq!(r.error_kind, Some(ErrorKind::Http5xx));
        assert_eq!(r.metadata.http_status, Some(500));
        tokio::time::sleep(Duration::from_millis(1200)).await;
        assert_eq!(srv.hits(), 2);
    }

    #[tokio::test]
    async fn server_error_with_no_room_for_the_retry_is_an_error_not_a_timeout() {
        let srv = server(|_| async { json(502, "") }).await;
        let started = StdInstant::now();
        let r = loopback_caller()
            .call(
                &srv.url("/"),
                &[],
                Bytes::from_static(b"{}"),
                Duration::from_millis(800),
            )
            .await;
        // An error (fail-closed whatever `onTimeout` says), returned at once.
        assert_eq!(r.outcome, Outcome::Error, "{r:?}");
        assert_eq!(r.error_kind, Some(ErrorKind::Http5xx));
        assert_eq!(r.reason.as_deref(), Some("hook answered 502"));
        assert_eq!(r.metadata.http_status, Some(502));
        assert!(
            started.elapsed() < Duration::from_millis(700),
            "{:?}",
            started.elapsed()
        );
        tokio::time::sleep(Duration::from_millis(1200)).await;
        assert_eq!(srv.hits(), 1);
    }

    #[tokio::test]
    async fn transport_error_with_no_room_for_the_retry_is_an_error_not_a_timeout() {
        let (addr, count) = dropping_server().await;
        let started = StdInstant::now();
        let r = loopback_caller()
            .call(
                &format!("http://{addr}/"),
                &[],
                Bytes::from_static(b"{}"),
                Duration::from_millis(800),
            )
            .await;
        assert_eq!(r.outcome, Outcome::Error, "{r:?}");
        assert_eq!(r.error_kind, Some(ErrorKind::Transport));
        assert_eq!(r.metadata.http_status, None);
        assert!(
            r.reason.as_deref().unwrap().starts_with("request failed"),
            "{r:?}"
        );
        assert!(
            started.elapsed() < Duration::from_millis(700),
            "{:?}",
            started.elapsed()
        );
        tokio::time::sleep(Duration::from_millis(1200)).await;
        assert_eq!(count.load(Ordering::SeqCst), 1);
    }

    /// A TCP server that accepts and drops every connection, counting them.
    async fn dropping_server() -> (SocketAddr, Arc<AtomicUsize>) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let count = Arc::new(AtomicUsize::new(0));
        let c = count.clone();
        tokio::spawn(async move {
            while let Ok((sock, _)) = listener.accept().await {
                c.fetch_add(1, Ordering::SeqCst);
                drop(sock);
            }
        });
        (addr, count)
    }

    #[tokio::test]
    async fn transport_error_is_retried_once() {
        let (addr, count) = dropping_server().await;
        let started = StdInstant::now();
        let r = call(&loopback_caller(), &format!("http://{addr}/")).await;
        assert_eq!(r.outcome, Outcome::Error, "{r:?}");
        assert_eq!(r.error_kind, Some(ErrorKind::Transport));
        assert_eq!(r.metadata.http_status, None);
        assert!(started.elapsed() >= Duration::from_millis(950));
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert_eq!(count.load(Ordering::SeqCst), 2);
    }

    #[tokio::test]
    async fn connection_refused_is_a_transport_error() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        drop(listener);
        let r = call(&loopback_caller(), &format!("http://{addr}/?token=sekrit")).await;
        assert_eq!(r.outcome, Outcome::Error);
        assert_eq!(r.error_kind, Some(ErrorKind::Transport));
        let reason = r.reason.unwrap();
        assert!(reason.contains("onnect"), "{reason}");
        // The URL (and any secret in its query) is not copied into the reason.
        assert!(!reason.contains("sekrit"), "{reason}");
    }

    // --- http.5: timeout ----------------------------------------------------------

    #[tokio::test]
    async fn slow_hook_times_out() {
        let srv = server(|_| async {
            tokio::time::sleep(Duration::from_secs(10)).await;
            json(200, "")
        })
        .await;
        let started = StdInstant::now();
        let r = loopback_caller()
            .call(&srv.url("/"), &[], Bytes::new(), Duration::from_millis(300))
            .await;
        assert_eq!(r.outcome, Outcome::Timeout);
        assert_eq!(r.reason.as_deref(), Some("no answer within 300 ms"));
        let took = started.elapsed();
        assert!(
            took >= Duration::from_millis(290) && took < Duration::from_secs(1),
            "{took:?}"
        );
    }

    // --- http.2: SSRF -------------------------------------------------------------

    #[tokio::test]
    async fn redirect_is_an_error_and_the_target_sees_nothing() {
        let target = server(|_| async { json(200, "") }).await;
        let target_url = target.url("/metadata");
        let srv = server(move |_| {
            let loc = target_url.clone();
            async move {
                Response::builder()
                    .status(302)
                    .header("location", loc)
                    .body(Body::empty())
                    .unwrap()
            }
        })
        .await;
        let r = call(&loopback_caller(), &srv.url("/")).await;
        assert_eq!(r.outcome, Outcome::Error);
        assert_eq!(r.error_kind, Some(ErrorKind::Http3xx));
        assert_eq!(r.metadata.http_status, Some(302));
        assert_eq!(srv.hits(), 1);
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert_eq!(target.hits(), 0);
    }

    #[tokio::test]
    async fn redirect_to_metadata_service_is_not_followed() {
        let srv = server(|_| async {
            Response::builder()
                .status(302)
                .header("location", "http://169.254.169.254/latest/meta-data/")
                .body(Body::empty())
                .unwrap()
        })
        .await;
        let r = call(&loopback_caller(), &srv.url("/")).await;
        assert_eq!(r.error_kind, Some(ErrorKind::Http3xx));
        assert!(r.reason.unwrap().contains("169.254.169.254"));
    }

    #[tokio::test]
    async fn loopback_is_refused_without_the_allowlist_and_nothing_is_sent() {
        let srv = server(|_| async { json(200, "") }).await;
        let c = HttpCaller::new(vec![]);
        let r = call(&c, &srv.url("/")).await;
        assert_eq!(r.outcome, Outcome::Error);
        assert_eq!(r.error_kind, Some(ErrorKind::SsrfBlocked));
        let reason = r.reason.unwrap();
        assert!(reason.contains("loopback"), "{reason}");
        // The allowlist admits it only when it lists it.
        let other = HttpCaller::new(vec!["10.0.0.0/8".parse().unwrap()]);
        assert_eq!(
            call(&other, &srv.url("/")).await.error_kind,
            Some(ErrorKind::SsrfBlocked)
        );
        assert_eq!(srv.hits(), 0);
        let allowed = HttpCaller::new(vec!["127.0.0.1/32".parse().unwrap()]);
        assert_eq!(call(&allowed, &srv.url("/")).await.outcome, Outcome::Allow);
        assert_eq!(srv.hits(), 1);
    }

    #[tokio::test]
    async fn url_rules_are_enforced_at_dispatch() {
        let srv = server(|_| async { json(200, "") }).await;
        let port = srv.addr.port();
        let strict = HttpCaller::new(vec![]);
        let loose = loopback_caller();
        let refused_by_both = [
            format!("http://user@127.0.0.1:{port}/"),
            format!("http://localhost:{port}/"),
            format!("http://localhost.:{port}/"),
            format!("HTTP://LOCALHOST:{port}/"),
            format!("gopher://127.0.0.1:{port}/_INFO"),
            "file:///etc/passwd".to_owned(),
            format!("http://[fe80::1%25eth0]:{port}/"),
        ];
        for url in &refused_by_both {
            for c in [&strict, &loose] {
                let r = call(c, url).await;
                assert_eq!(r.error_kind, Some(ErrorKind::SsrfBlocked), "{url}");
            }
        }
        for host in [
            "2130706433",
            "0x7f.1",
            "0177.0.0.1",
            "127.1",
            "[::ffff:127.0.0.1]",
        ] {
            let url = format!("http://{host}:{port}/");
            let r = call(&strict, &url).await;
            assert_eq!(r.error_kind, Some(ErrorKind::SsrfBlocked), "{url}");
            assert!(r.reason.unwrap().contains("loopback"), "{url}");
            // With the allowlist, the canonicalised loopback address is reachable.
            let r = call(&loose, &url).await;
            assert_eq!(r.outcome, Outcome::Allow, "{url}: {r:?}");
        }
        for url in [
            "http://0/",
            "http://1/",
            "http://[::]/",
            "http://100.64.0.1/",
            "http://198.18.0.1/",
            "http://192.0.0.1/",
            "http://[fe80::1]/",
            "http://[fc00::1]/",
            "http://169.254.169.254/",
            "http://[::ffff:169.254.169.254]/",
            "http://10.0.0.1/",
        ] {
            let r = call(&loose, url).await;
            assert_eq!(r.error_kind, Some(ErrorKind::SsrfBlocked), "{url}");
        }
        // Only the allow-listed loopback calls reached the server.
        assert_eq!(srv.hits(), 5);
    }

    #[tokio::test]
    async fn a_name_with_one_private_answer_is_refused_and_nothing_is_dialled() {
        let srv = server(|_| async { json(200, "") }).await;
        let resolver =
            FixedResolver::new(&[("hook.example", vec![sa("93.184.216.34:80"), srv.addr])]);
        let c = HttpCaller::with_resolver(vec![], resolver.clone());
        let r = call(&c, &format!("http://hook.example:{}/", srv.addr.port())).await;
        assert_eq!(r.outcome, Outcome::Error);
        assert_eq!(r.error_kind, Some(ErrorKind::SsrfBlocked));
        assert!(r.reason.unwrap().contains("127.0.0.1"));
        assert_eq!(resolver.calls(), 1);
        assert_eq!(srv.hits(), 0);

        // Private first, public second: same.
        let resolver = FixedResolver::new(&[(
            "hook.example",
            vec![sa("10.0.0.5:80"), sa("93.184.216.34:80")],
        )]);
        let c = HttpCaller::with_resolver(vec![], resolver.clone());
        let r = call(&c, "http://hook.example/").await;
        assert_eq!(r.error_kind, Some(ErrorKind::SsrfBlocked));
        assert!(r.reason.unwrap().contains("private"));
    }

    #[tokio::test]
    async fn a_name_is_resolved_once_and_only_checked_addresses_are_dialled() {
        let srv = server(|_| async { json(500, "") }).await;
        let resolver = FixedResolver::new(&[("hook.internal", vec![srv.addr])]);
        let c = HttpCaller::with_resolver(vec!["127.0.0.0/8".parse().unwrap()], resolver.clone());
        let r = call(&c, &format!("http://hook.internal:{}/x", srv.addr.port())).await;
        // 5xx twice: retried once, but the name was resolved once.
        assert_eq!(r.error_kind, Some(ErrorKind::Http5xx));
        assert_eq!(srv.hits(), 2);
        assert_eq!(resolver.calls(), 1);
        // The request went to the checked address, with the name as Host.
        let seen = srv.seen.lock().unwrap();
        assert_eq!(
            seen[0].0.get("host").unwrap().to_str().unwrap(),
            format!("hook.internal:{}", srv.addr.port())
        );
        drop(seen);
        // Nothing stays pinned once the call is over.
        assert!(c.inner.pins.lookup("hook.internal").is_none());
    }

    #[tokio::test]
    async fn unresolvable_name_is_a_transport_error() {
        let resolver = FixedResolver::new(&[("empty.example", vec![])]);
        let c = HttpCaller::with_resolver(vec![], resolver.clone());
        let r = call(&c, "http://nope.example/").await;
        assert_eq!(r.error_kind, Some(ErrorKind::Transport));
        let r = call(&c, "http://empty.example/").await;
        assert_eq!(r.error_kind, Some(ErrorKind::Transport));
        assert_eq!(resolver.calls(), 2);
    }

    #[tokio::test]
    async fn pinned_resolver_refuses_unchecked_names() {
        use reqwest::dns::Resolve;
        let pins = Arc::new(PinTable::default());
        let r = PinnedResolver { pins: pins.clone() };
        assert!(r.resolve("evil.example".parse().unwrap()).await.is_err());
        let guard = pins.pin("ok.example", vec!["93.184.216.34".parse().unwrap()]);
        let addrs: Vec<SocketAddr> = r
            .resolve("OK.example".parse().unwrap())
            .await
            .ok()
            .unwrap()
            .collect();
        assert_eq!(addrs, vec![sa("93.184.216.34:0")]);
        let second = pins.pin("ok.example", vec!["93.184.216.35".parse().unwrap()]);
        drop(guard);
        assert!(
            pins.lookup("ok.example").is_some(),
            "still used by one call"
        );
        drop(second);
        assert!(pins.lookup("ok.example").is_none());
    }

    /// A `MakeWriter` that appends log output to a shared buffer.
    #[derive(Clone, Default)]
    struct Capture(Arc<Mutex<Vec<u8>>>);

    impl io::Write for Capture {
        fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for Capture {
        type Writer = Capture;
        fn make_writer(&'a self) -> Self::Writer {
            self.clone()
        }
    }

    #[test]
    fn ssrf_refusal_is_logged_on_the_security_target_without_secrets() {
        let capture = Capture::default();
        let subscriber = tracing_subscriber::fmt()
            .with_writer(capture.clone())
            .with_ansi(false)
            .with_max_level(tracing::Level::TRACE)
            .finish();
        let r = tracing::subscriber::with_default(subscriber, || {
            let caller = HttpCaller::new(vec![]);
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(caller.call(
                "http://169.254.169.254/latest/meta-data?token=abc",
                &[],
                Bytes::new(),
                Duration::from_secs(1),
            ))
        });
        assert_eq!(r.error_kind, Some(ErrorKind::SsrfBlocked));
        let logs = String::from_utf8(capture.0.lock().unwrap().clone()).unwrap();
        assert!(logs.contains("WARN"), "{logs}");
        assert!(logs.contains("security.hook.ssrf_block"), "{logs}");
        assert!(logs.contains("reason=\"link-local\""), "{logs}");
        assert!(
            logs.contains("url=http://169.254.169.254/latest/meta-data\n"),
            "{logs}"
        );
        assert!(!logs.contains("token=abc"), "{logs}");
    }

    #[test]
    fn loggable_url_drops_query_fragment_and_userinfo() {
        assert_eq!(
            loggable_url("http://127.0.0.1/a?token=abc#f"),
            "http://127.0.0.1/a"
        );
        assert_eq!(
            loggable_url("http://u:p@h.example/x?y"),
            "http://h.example/x"
        );
        assert_eq!(loggable_url("gar bage://u@h?y"), "gar bage://h");
    }

    #[test]
    fn caller_is_cheap_to_clone_and_thread_safe() {
        fn assert_traits<T: Clone + Send + Sync + 'static>() {}
        assert_traits::<HttpCaller>();
        let c = HttpCaller::new(vec![]);
        let d = c.clone();
        assert!(Arc::ptr_eq(&c.inner, &d.inner));
        assert!(c.inner.client.is_ok());
    }
}
