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
//! Connections: every call opens its own connection (see [`fresh_client`]), so a URL
//! that names a Kubernetes Service can reach another replica on the next try instead of
//! staying on a pooled connection to a standby that answers `503` forever.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use url::Url;

use crate::operator_token::OperatorToken;

/// Why `--operator-url` values were refused.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum OperatorUrlError {
    #[error("--operator-url: no URL given")]
    Empty,
    #[error("--operator-url: {value:?}: {reason}")]
    Invalid { value: String, reason: String },
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
        })
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
    /// (`4xx` but `408`/`429`) stops at once with [`PostError::Refused`].
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
                        if is_refusal(status) {
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
    /// An operator refused the request with a `4xx` other than `408` and `429` (a bad
    /// body, `413` too large, `404` nothing to count): nothing was applied and sending it
    /// again gets the same answer. The other URLs are not tried.
    #[error("{url}: {detail}")]
    Refused {
        url: String,
        status: u16,
        detail: String,
    },
}

/// Whether `status` is a refusal of the request itself ([`PostError::Refused`]).
pub fn is_refusal(status: u16) -> bool {
    (400..500).contains(&status) && status != 408 && status != 429
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

/// A reqwest error in a few words: timeout, connect, or the error itself.
pub fn describe(e: &reqwest::Error) -> String {
    if e.is_timeout() {
        "timed out".into()
    } else if e.is_connect() {
        format!("cannot connect ({e})")
    } else {
        e.to_string()
    }
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

/// An HTTP client that keeps no idle connection: each call connects anew, so a Service
/// URL can reach another replica on the next try. `connect_timeout` bounds connecting;
/// callers set each request's own timeout.
pub fn fresh_client(connect_timeout: Duration) -> reqwest::Client {
    install_crypto_provider();
    reqwest::Client::builder()
        .pool_max_idle_per_host(0)
        .connect_timeout(connect_timeout)
        .no_proxy()
        .build()
        .expect("an HTTP client builds")
}

#[cfg(test)]
mod tests {
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
}
