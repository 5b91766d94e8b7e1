//! The operator URLs a synced dispatcher talks to, and the failover between them.
//!
//! `--operator-url` may repeat and each value may be a comma-separated list (Helm values
//! and environment variables carry one string). Every call to the operator (snapshot
//! poll, `POST /v1/report`, `POST /v1/budget/{reserve,settle}`) tries the URLs in order,
//! starting with the one that last answered, and stops at the first answer that counts
//! (a `200`; `304` too for the poll; a `4xx` refusal of the request itself). A `503` (a
//! replica that is not the synced leader, crds `report` module), a connection error, a
//! timeout or any other status moves to the next URL. The URL that answered becomes the first one tried by every later call: all
//! calls share one [`OperatorUrls`], so finding the leader once serves them all.
//!
//! Connections: every call opens its own connection (see [`OperatorUrls::fresh_client`]),
//! so a URL that names a Kubernetes Service can reach another replica on the next try
//! instead of staying on a pooled connection to a standby that answers `503` forever.
//!
//! Transport (CONTRACT §9.4, [`OperatorUrls::secure`]): an `https://` URL needs
//! `--operator-ca-file`, the CA bundle that must sign the operator's certificate (only
//! it: the system roots are not trusted for the operator); the host name of the URL must
//! be in the certificate. `http://` is allowed only to a loopback address (127.0.0.0/8,
//! `::1`, `localhost`) unless `--insecure-operator-http` says the clear text is meant. A
//! certificate that does not verify is that URL not answering: the next is tried, the
//! dispatcher keeps its last snapshot (or stays not ready), and the log says why.

use std::future::Future;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use url::{Host, Url};

use crate::operator_token::OperatorToken;

/// Why `--operator-url` values were refused.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum OperatorUrlError {
    #[error("--operator-url: no URL given")]
    Empty,
    #[error("--operator-url: {value:?}: {reason}")]
    Invalid { value: String, reason: String },
    /// A URL breaks the transport rule ([`transport_rule`]).
    #[error("--operator-url {url}: {rule}")]
    Transport { url: String, rule: TransportRule },
    /// `--operator-ca-file` cannot be used (the message names the flag).
    #[error("{0}")]
    CaFile(String),
}

/// Which transport rule an operator URL breaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum TransportRule {
    /// `https://` without `--operator-ca-file`.
    #[error(
        "https:// needs --operator-ca-file, the CA bundle that must sign the operator's certificate (the system roots are not trusted for the operator)"
    )]
    HttpsNeedsCa,
    /// `http://` to a host that is not loopback.
    #[error(
        "http:// is allowed only to a loopback address (127.0.0.0/8, ::1, localhost): snapshots and reports would cross the network in the clear and the operator would not be verified; use https:// with --operator-ca-file (or --insecure-operator-http, for a lab only)"
    )]
    PlainHttpNotLoopback,
}

/// Whether `url` may be used: `https` needs a CA bundle (`has_ca`); `http` needs a
/// loopback host (127.0.0.0/8, `::1`, `localhost`) or `insecure_http`.
pub fn transport_rule(url: &Url, has_ca: bool, insecure_http: bool) -> Result<(), TransportRule> {
    match url.scheme() {
        "https" if !has_ca => Err(TransportRule::HttpsNeedsCa),
        "http" if !insecure_http && !is_loopback(url) => Err(TransportRule::PlainHttpNotLoopback),
        _ => Ok(()),
    }
}

/// Whether the host of `url` is a loopback address or `localhost`.
pub fn is_loopback(url: &Url) -> bool {
    match url.host() {
        Some(Host::Ipv4(ip)) => ip.is_loopback(),
        Some(Host::Ipv6(ip)) => ip.is_loopback(),
        Some(Host::Domain(d)) => d.eq_ignore_ascii_case("localhost"),
        None => false,
    }
}

/// The operator's sync URLs in the order given, and which one answered last.
#[derive(Debug)]
pub struct OperatorUrls {
    urls: Vec<Url>,
    /// Index into `urls` of the URL that last answered (the first one tried).
    current: AtomicUsize,
    /// The dispatcher's own token, sent as `Authorization: Bearer <token>` with every
    /// call (`--operator-token-file`, [`crate::operator_token`]); none in tests that
    /// talk to a stand-in operator.
    token: Option<Arc<OperatorToken>>,
    /// TLS of `https` URLs: trusts `--operator-ca-file` only ([`OperatorUrls::secure`]).
    tls: Option<Arc<rustls::ClientConfig>>,
}

/// What one attempt against one URL came to.
#[derive(Debug)]
pub enum Attempt<T> {
    /// This URL answered: stop here, and try it first next time.
    Answered(T),
    /// Try the next URL; the text says why (for logs and the final error).
    Next(String),
}

/// Every URL was tried and none answered: one line per URL, in the order tried.
#[derive(Debug, Clone, thiserror::Error, PartialEq)]
#[error("no operator answered: {}", .attempts.join("; "))]
pub struct NoOperatorAnswered {
    pub attempts: Vec<String>,
}

impl OperatorUrls {
    /// Parses the flag values: each may hold several URLs separated by commas; blanks
    /// are skipped. Every URL must be `http` or `https` with a host; a trailing `/` is
    /// dropped. Errors: [`OperatorUrlError::Empty`] when nothing is left,
    /// [`OperatorUrlError::Invalid`] naming the first bad value.
    pub fn parse<S: AsRef<str>>(values: &[S]) -> Result<OperatorUrls, OperatorUrlError> {
        let mut urls = Vec::new();
        for value in values {
            for part in value.as_ref().split(',').map(str::trim) {
                if part.is_empty() {
                    continue;
                }
                let invalid = |reason: String| OperatorUrlError::Invalid {
                    value: part.to_string(),
                    reason,
                };
                let url = Url::parse(part.trim_end_matches('/'))
                    .map_err(|e| invalid(format!("not a URL ({e})")))?;
                if !matches!(url.scheme(), "http" | "https") {
                    return Err(invalid("scheme must be http or https".into()));
                }
                if url.host_str().is_none_or(str::is_empty) {
                    return Err(invalid("a host is required".into()));
                }
                if url.query().is_some() || url.fragment().is_some() {
                    return Err(invalid("no query or fragment allowed".into()));
                }
                urls.push(url);
            }
        }
        if urls.is_empty() {
            return Err(OperatorUrlError::Empty);
        }
        Ok(OperatorUrls {
            urls,
            current: AtomicUsize::new(0),
            token: None,
            tls: None,
        })
    }

    /// Applies the transport rule to every URL ([`transport_rule`]) and, with `ca_file`
    /// (`--operator-ca-file`), trusts that CA bundle alone for `https` URLs. With
    /// `insecure_http` (`--insecure-operator-http`) a non-loopback `http` URL is allowed,
    /// with a warning. Errors: [`OperatorUrlError::Transport`] naming the first URL that
    /// breaks the rule, [`OperatorUrlError::CaFile`] when the bundle cannot be used.
    pub fn secure(
        mut self,
        ca_file: Option<&Path>,
        insecure_http: bool,
    ) -> Result<OperatorUrls, OperatorUrlError> {
        for url in &self.urls {
            transport_rule(url, ca_file.is_some(), insecure_http).map_err(|rule| {
                OperatorUrlError::Transport {
                    url: url.to_string(),
                    rule,
                }
            })?;
            if url.scheme() == "http" && !is_loopback(url) {
                tracing::warn!(operator = %url, "--insecure-operator-http: this dispatcher follows an operator over plain HTTP; anyone on the path can read and change its snapshots");
            }
        }
        if let Some(path) = ca_file {
            let config = agenthooks_tls::client_config_trusting("--operator-ca-file", path)
                .map_err(|e| OperatorUrlError::CaFile(e.to_string()))?;
            self.tls = Some(Arc::new(config));
            if self.urls.iter().all(|u| u.scheme() == "http") {
                tracing::warn!(
                    "--operator-ca-file is given but every --operator-url is http://: the CA is not used"
                );
            }
        }
        Ok(self)
    }

    /// Whether `https` URLs are verified against a CA bundle ([`OperatorUrls::secure`]).
    pub fn verifies_tls(&self) -> bool {
        self.tls.is_some()
    }

    /// A client builder for calls to the operator: no idle connections (each call
    /// connects anew, so a Service URL can reach another replica on the next try), no
    /// proxy, and TLS trusting only `--operator-ca-file` when it was given.
    pub fn client_builder(&self) -> reqwest::ClientBuilder {
        install_crypto_provider();
        // No redirect is followed: an operator never sends one, and following it could
        // leave the transport rule (an https operator redirecting to plain http).
        let builder = reqwest::Client::builder()
            .pool_max_idle_per_host(0)
            .redirect(reqwest::redirect::Policy::none())
            .no_proxy();
        match &self.tls {
            Some(config) => builder.tls_backend_preconfigured(rustls::ClientConfig::clone(config)),
            None => builder,
        }
    }

    /// [`OperatorUrls::client_builder`] with `connect_timeout` (TLS handshake included);
    /// callers set each request's own timeout.
    pub fn fresh_client(&self, connect_timeout: Duration) -> reqwest::Client {
        self.client_builder()
            .connect_timeout(connect_timeout)
            .build()
            .expect("an HTTP client builds")
    }

    /// Sends `Authorization: Bearer <token>` with every call, the token of `token` (the
    /// operator's sync port refuses calls without a token it can verify).
    pub fn with_token(mut self, token: Arc<OperatorToken>) -> OperatorUrls {
        self.token = Some(token);
        self
    }

    /// `req` with the `Authorization` header, when a token was given.
    pub fn authorize(&self, req: reqwest::RequestBuilder) -> reqwest::RequestBuilder {
        match &self.token {
            Some(t) => req.header(reqwest::header::AUTHORIZATION, t.header()),
            None => req,
        }
    }

    /// The URLs, in the order given.
    pub fn urls(&self) -> &[Url] {
        &self.urls
    }

    /// The URL tried first by the next call (the one that answered last).
    pub fn current(&self) -> &Url {
        &self.urls[self.current.load(Ordering::Relaxed) % self.urls.len()]
    }

    /// `base` joined with `path` (e.g. `/v1/report`), keeping any path prefix of `base`.
    pub fn endpoint(base: &Url, path: &str) -> String {
        format!("{}{path}", base.as_str().trim_end_matches('/'))
    }

    /// Runs `attempt` on each URL in turn, starting with the current one and wrapping
    /// around, until one returns [`Attempt::Answered`]; that URL becomes current.
    /// Errors: [`NoOperatorAnswered`] with every URL's reason when none answered.
    pub async fn call<T, F, Fut>(&self, mut attempt: F) -> Result<T, NoOperatorAnswered>
    where
        F: FnMut(&Url) -> Fut,
        Fut: Future<Output = Attempt<T>>,
    {
        let n = self.urls.len();
        let start = self.current.load(Ordering::Relaxed) % n;
        let mut attempts = Vec::new();
        for i in (0..n).map(|k| (start + k) % n) {
            let url = &self.urls[i];
            match attempt(url).await {
                Attempt::Answered(t) => {
                    self.current.store(i, Ordering::Relaxed);
                    return Ok(t);
                }
                Attempt::Next(why) => attempts.push(format!("{url}: {why}")),
            }
        }
        Err(NoOperatorAnswered { attempts })
    }

    /// POSTs `body` as JSON to `path` on each URL in turn (see [`OperatorUrls::call`])
    /// and decodes the first `200` answer as `R`. `timeout` bounds each attempt. A
    /// `200` whose body does not decode counts as no answer from that URL; a refusal
    /// ([`is_refusal`]) stops at once with [`PostError::Refused`].
    pub async fn post_json<B, R>(
        &self,
        client: &reqwest::Client,
        path: &str,
        body: &B,
        timeout: Duration,
    ) -> Result<R, PostError>
    where
        B: serde::Serialize + ?Sized,
        R: serde::de::DeserializeOwned,
    {
        let payload = serde_json::to_vec(body).map_err(|e| PostError::Encode(e.to_string()))?;
        // Whether any attempt may have reached an operator that acted on it: anything
        // but a refused connection or a `503` (which does nothing, by protocol).
        let maybe_applied = AtomicBool::new(false);
        let outcome = self
            .call(|base| {
                let req = self
                    .authorize(client.post(OperatorUrls::endpoint(base, path)))
                    .header(reqwest::header::CONTENT_TYPE, "application/json")
                    .timeout(timeout)
                    .body(payload.clone());
                let maybe_applied = &maybe_applied;
                let touched = move || maybe_applied.store(true, Ordering::Relaxed);
                let url = base.to_string();
                async move {
                    let resp = match req.send().await {
                        Ok(r) => r,
                        Err(e) => {
                            if !e.is_connect() {
                                touched();
                            }
                            return Attempt::Next(describe(&e));
                        }
                    };
                    let status = resp.status().as_u16();
                    if status != 200 {
                        let text = resp.text().await.unwrap_or_default();
                        let detail = format!("answered {status} {}", snippet(&text));
                        if is_refusal(status, &text) {
                            // The operator refused the request itself (nothing applied); a
                            // retry, here or elsewhere, would get the same answer.
                            return Attempt::Answered(Err(PostError::Refused {
                                url,
                                status,
                                detail,
                            }));
                        }
                        if status != 503 {
                            touched();
                        }
                        return Attempt::Next(detail);
                    }
                    match resp.bytes().await {
                        Ok(b) => match serde_json::from_slice::<R>(&b) {
                            Ok(r) => Attempt::Answered(Ok(r)),
                            Err(e) => {
                                touched();
                                Attempt::Next(format!(
                                    "answered 200 with a body that does not decode: {e}"
                                ))
                            }
                        },
                        Err(e) => {
                            touched();
                            Attempt::Next(format!("reading the answer: {}", describe(&e)))
                        }
                    }
                }
            })
            .await;
        match outcome {
            Ok(answer) => answer,
            Err(failed) => Err(PostError::NoAnswer {
                failed,
                maybe_applied: maybe_applied.load(Ordering::Relaxed),
            }),
        }
    }
}

/// Why [`OperatorUrls::post_json`] got no answer.
#[derive(Debug, Clone, thiserror::Error, PartialEq)]
pub enum PostError {
    #[error("encoding the request: {0}")]
    Encode(String),
    /// No URL answered `200`. `maybe_applied` is false only when every attempt failed to
    /// connect or was answered `503` by a replica that is not the leader: then no
    /// operator acted on the request, and what it carried may be merged into a new one.
    #[error("{failed}")]
    NoAnswer {
        failed: NoOperatorAnswered,
        maybe_applied: bool,
    },
    /// An operator refused the request itself ([`is_refusal`]: a bad body, `413` too
    /// large, `404` nothing to count, `403` a reservation another dispatcher holds):
    /// nothing was applied and sending it again gets the same answer. The other URLs are
    /// not tried.
    #[error("{url}: {detail}")]
    Refused {
        url: String,
        status: u16,
        detail: String,
    },
}

/// Whether an answer `status` with body `body` is a refusal of the request itself
/// ([`PostError::Refused`]: nothing was applied, and sending it again anywhere gets the
/// same answer): a `4xx` but `408` and `429`, and but the refusals of the *caller* rather
/// than of the request, which may pass by (a token cached as refused for a few seconds,
/// a RoleBinding recreated by a Helm upgrade or an Argo CD sync, a new leader):
/// `401`, and `403` unless it names the request's `reservationId` (a settle of a
/// reservation another dispatcher holds). Those count as "that URL did not apply it":
/// the next URL is tried and the report or settle stays pending, retried later.
pub fn is_refusal(status: u16, body: &str) -> bool {
    match status {
        401 | 408 | 429 => false,
        403 => {
            serde_json::from_str::<serde_json::Value>(body)
                .ok()
                .and_then(|v| v.get("field").and_then(|f| f.as_str().map(str::to_owned)))
                .as_deref()
                == Some("reservationId")
        }
        s => (400..500).contains(&s),
    }
}

impl PostError {
    /// Whether an operator may have acted on the request (see [`PostError::NoAnswer`]).
    pub fn maybe_applied(&self) -> bool {
        match self {
            PostError::Encode(_) | PostError::Refused { .. } => false,
            PostError::NoAnswer { maybe_applied, .. } => *maybe_applied,
        }
    }
}

/// A reqwest error in a few words: timeout, connect, or the error itself, followed by
/// its causes (a certificate that does not verify shows as `invalid peer certificate:
/// ...` with rustls' reason).
pub fn describe(e: &reqwest::Error) -> String {
    let head = if e.is_timeout() {
        "timed out".to_string()
    } else if e.is_connect() {
        format!("cannot connect ({e})")
    } else {
        e.to_string()
    };
    let mut out = head;
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        let text = s.to_string();
        if !out.contains(&text) {
            out.push_str(": ");
            out.push_str(&text);
        }
        source = s.source();
    }
    out
}

fn snippet(text: &str) -> String {
    let t = text.trim();
    let mut end = t.len().min(200);
    while !t.is_char_boundary(end) {
        end -= 1;
    }
    t[..end].to_string()
}

/// Installs rustls' `ring` provider for the process if none is (reqwest is built
/// without a default provider; https operator URLs need one).
pub fn install_crypto_provider() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}

#[cfg(test)]
mod tests {
    #[test]
    fn only_refusals_of_the_request_itself_are_final() {
        let field = |f: &str| format!(r#"{{"error": "x", "field": "{f}"}}"#);
        let cases: &[(u16, String, bool)] = &[
            (400, field("tokens"), true),
            (404, String::new(), true),
            (409, String::new(), true),
            (413, String::new(), true),
            (403, field("reservationId"), true),
            // The caller, not the request: may pass by; retried, never dropped.
            (401, field("reservationId"), false),
            (401, String::new(), false),
            (403, r#"{"error": "bind agenthooks-sync"}"#.into(), false),
            (403, field("dispatcher"), false),
            (403, "not json".into(), false),
            (408, String::new(), false),
            (429, String::new(), false),
            (500, String::new(), false),
            (503, String::new(), false),
        ];
        for (status, body, want) in cases {
            assert_eq!(is_refusal(*status, body), *want, "{status} {body}");
        }
    }

    #[test]
    fn calls_carry_the_token_file_s_token_only_when_given() {
        install_crypto_provider();
        let client = reqwest::Client::new();
        let plain = OperatorUrls::parse(&["http://op:9090"]).unwrap();
        let req = plain
            .authorize(client.get("http://op:9090/v1/snapshot"))
            .build()
            .unwrap();
        assert!(req.headers().get(reqwest::header::AUTHORIZATION).is_none());
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("token");
        std::fs::write(&path, "header.payload.sig\n").unwrap();
        let token = Arc::new(OperatorToken::load(&path).unwrap());
        let with = OperatorUrls::parse(&["http://op:9090"])
            .unwrap()
            .with_token(token);
        let req = with
            .authorize(client.get("http://op:9090/v1/snapshot"))
            .build()
            .unwrap();
        let v = req.headers().get(reqwest::header::AUTHORIZATION).unwrap();
        assert_eq!(v.to_str().unwrap(), "Bearer header.payload.sig");
        assert!(v.is_sensitive(), "kept out of debug output");
    }

    use super::*;

    #[test]
    fn values_repeat_and_split_on_commas() {
        let u = OperatorUrls::parse(&[
            "http://a:9090/, http://b:9090",
            "",
            "https://c.example/prefix/",
        ])
        .unwrap();
        let got: Vec<&str> = u.urls().iter().map(Url::as_str).collect();
        assert_eq!(
            got,
            [
                "http://a:9090/",
                "http://b:9090/",
                "https://c.example/prefix"
            ]
        );
        assert_eq!(
            OperatorUrls::endpoint(&u.urls()[2], "/v1/report"),
            "https://c.example/prefix/v1/report"
        );
        assert_eq!(
            OperatorUrls::endpoint(&u.urls()[0], "/v1/report"),
            "http://a:9090/v1/report"
        );
    }

    #[test]
    fn bad_values_are_named() {
        assert_eq!(
            OperatorUrls::parse(&[" , "]).unwrap_err(),
            OperatorUrlError::Empty
        );
        let none: [&str; 0] = [];
        assert_eq!(
            OperatorUrls::parse(&none).unwrap_err(),
            OperatorUrlError::Empty
        );
        for bad in ["ftp://a", "a:9090", "http://a/?x=1", "not a url"] {
            let e = OperatorUrls::parse(&["http://ok:1", bad]).unwrap_err();
            assert!(
                matches!(&e, OperatorUrlError::Invalid { value, .. } if value == bad),
                "{bad}: {e}"
            );
        }
    }

    /// Answers from a scripted list per URL host: `true` answers, `false` moves on.
    async fn run(urls: &OperatorUrls, up: &[&str], tried: &mut Vec<String>) -> Option<String> {
        urls.call(|u| {
            let host = u.host_str().unwrap().to_string();
            tried.push(host.clone());
            let ok = up.contains(&host.as_str());
            async move {
                if ok {
                    Attempt::Answered(host)
                } else {
                    Attempt::Next("down".into())
                }
            }
        })
        .await
        .ok()
    }

    #[tokio::test]
    async fn tries_in_order_and_sticks_with_the_last_that_answered() {
        let urls = OperatorUrls::parse(&["http://a,http://b,http://c"]).unwrap();
        let mut tried = Vec::new();
        assert_eq!(
            run(&urls, &["a", "b", "c"], &mut tried).await.as_deref(),
            Some("a")
        );
        assert_eq!(tried, ["a"]);

        tried.clear();
        assert_eq!(run(&urls, &["c"], &mut tried).await.as_deref(), Some("c"));
        assert_eq!(tried, ["a", "b", "c"], "in the order given");

        tried.clear();
        assert_eq!(
            run(&urls, &["a", "b", "c"], &mut tried).await.as_deref(),
            Some("c"),
            "sticks with c while it answers"
        );
        assert_eq!(tried, ["c"]);

        tried.clear();
        assert_eq!(run(&urls, &["b"], &mut tried).await.as_deref(), Some("b"));
        assert_eq!(tried, ["c", "a", "b"], "wraps around from the current one");
        assert_eq!(urls.current().host_str(), Some("b"));

        tried.clear();
        let err = urls
            .call(|u| {
                tried.push(u.host_str().unwrap().to_string());
                async { Attempt::<()>::Next("503".into()) }
            })
            .await
            .unwrap_err();
        assert_eq!(tried, ["b", "c", "a"]);
        assert_eq!(
            err.attempts,
            ["http://b/: 503", "http://c/: 503", "http://a/: 503"]
        );
        assert_eq!(
            urls.current().host_str(),
            Some("b"),
            "a failure moves nothing"
        );
    }

    #[test]
    fn the_transport_rule() {
        use super::TransportRule::{HttpsNeedsCa, PlainHttpNotLoopback};
        // (url, --operator-ca-file given, --insecure-operator-http, expected)
        let table: &[(&str, bool, bool, Result<(), super::TransportRule>)] = &[
            ("https://op.ns.svc:9090", true, false, Ok(())),
            ("https://op.ns.svc:9090", false, false, Err(HttpsNeedsCa)),
            ("https://127.0.0.1:9090", false, true, Err(HttpsNeedsCa)),
            ("http://127.0.0.1:9090", false, false, Ok(())),
            ("http://127.3.4.5:9090", false, false, Ok(())),
            ("http://[::1]:9090", false, false, Ok(())),
            ("http://localhost:9090", false, false, Ok(())),
            ("http://LOCALHOST:9090", false, false, Ok(())),
            ("http://127.0.0.1:9090", true, false, Ok(())),
            (
                "http://op.ns.svc:9090",
                false,
                false,
                Err(PlainHttpNotLoopback),
            ),
            (
                "http://op.ns.svc:9090",
                true,
                false,
                Err(PlainHttpNotLoopback),
            ),
            (
                "http://10.0.0.7:9090",
                false,
                false,
                Err(PlainHttpNotLoopback),
            ),
            ("http://[::2]:9090", false, false, Err(PlainHttpNotLoopback)),
            (
                "http://localhost.example:9090",
                false,
                false,
                Err(PlainHttpNotLoopback),
            ),
            (
                "http://0.0.0.0:9090",
                false,
                false,
                Err(PlainHttpNotLoopback),
            ),
            ("http://op.ns.svc:9090", false, true, Ok(())),
            ("http://10.0.0.7:9090", true, true, Ok(())),
        ];
        for (url, ca, insecure, want) in table {
            let u = url::Url::parse(url).unwrap();
            assert_eq!(
                &super::transport_rule(&u, *ca, *insecure),
                want,
                "{url} ca={ca} insecure={insecure}"
            );
        }
    }

    #[test]
    fn secure_names_the_flag_the_url_and_the_rule() {
        let urls = OperatorUrls::parse(&["http://127.0.0.1:9090,http://op.ns.svc:9090"]).unwrap();
        let e = urls.secure(None, false).unwrap_err();
        assert_eq!(
            e,
            OperatorUrlError::Transport {
                url: "http://op.ns.svc:9090/".into(),
                rule: TransportRule::PlainHttpNotLoopback
            }
        );
        let text = e.to_string();
        assert!(text.starts_with("--operator-url http://op.ns.svc:9090/: http:// is allowed only to a loopback address"), "{text}");
        assert!(text.contains("--operator-ca-file"), "{text}");

        let e = OperatorUrls::parse(&["https://op.ns.svc:9090"])
            .unwrap()
            .secure(None, false)
            .unwrap_err();
        assert!(
            e.to_string().starts_with(
                "--operator-url https://op.ns.svc:9090/: https:// needs --operator-ca-file"
            ),
            "{e}"
        );

        let missing = std::env::temp_dir().join("agenthooks-no-such-ca.crt");
        let e = OperatorUrls::parse(&["https://op.ns.svc:9090"])
            .unwrap()
            .secure(Some(&missing), false)
            .unwrap_err();
        assert!(matches!(e, OperatorUrlError::CaFile(_)), "{e}");
        assert!(e.to_string().starts_with("--operator-ca-file "), "{e}");

        let plain = OperatorUrls::parse(&["http://[::1]:9090"])
            .unwrap()
            .secure(None, false)
            .unwrap();
        assert!(!plain.verifies_tls());
        let lab = OperatorUrls::parse(&["http://op.ns.svc:9090"])
            .unwrap()
            .secure(None, true)
            .unwrap();
        assert!(!lab.verifies_tls());
    }
}
