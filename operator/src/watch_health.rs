//! Health of the leader session's watches (AgentHooks, Namespaces, Secrets), so a watch
//! that keeps failing — a Role that lost `watch` or `list`, an API server that is gone —
//! fails readiness and shows in the metrics instead of degrading silently.
//!
//! A watch is *failing* from its first stream error until it is seen working again, and
//! *unhealthy* once it has been failing for longer than the grace (`--watch-grace-seconds`).
//! Working again means one of:
//! - an object event (`Apply`, `Delete`) or a finished (re-)list (`InitDone`) on its stream;
//! - a `2xx` answer to one of its watch requests, seen by [`WatchStartLayer`] in the API
//!   client. This one is needed because kube-runtime's watcher resumes a watch without
//!   emitting anything: after a `403` on a watch start, the first successful start is
//!   silent until an object changes, which may take forever in a quiet cluster.
//!
//! A `410 Gone` (the watch expired) is an error too, healed at once by the re-list that
//! follows it; it counts in `agenthooks_operator_watch_errors_total` and never reaches the
//! grace.
//!
//! The API server checks authorization only when a watch starts, so a permission removed
//! while a watch runs shows when that watch ends (`--watch-timeout-seconds`, 290 s by
//! default, as in kube-runtime) and the watcher starts the next one.

use std::fmt;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use agenthooks_crds::{AgentHook, TenantHookBudget};
use axum::http::{Method, Request, Response, Uri};
use futures::future::BoxFuture;
use k8s_openapi::api::core::v1::{Namespace, Secret};
use kube::Resource;

use crate::shared::lock;

/// Longest error text kept for `/readyz` (an API status message is usually far shorter).
const MAX_ERROR_LEN: usize = 512;

/// One of the session's watches.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Watched {
    /// `agenthooks.agenthooks.io`, all namespaces.
    AgentHooks,
    /// `namespaces` (metadata only).
    Namespaces,
    /// `secrets` opted in to hook use, all namespaces (metadata only).
    Secrets,
    /// `tenanthookbudgets.agenthooks.io`, all namespaces (the budget session's watch).
    TenantHookBudgets,
}

impl Watched {
    /// Every watch, in label order.
    pub const ALL: [Watched; 4] = [
        Watched::AgentHooks,
        Watched::Namespaces,
        Watched::Secrets,
        Watched::TenantHookBudgets,
    ];

    /// The `resource` label of the metrics and the name in `/readyz`.
    pub fn label(self) -> &'static str {
        match self {
            Watched::AgentHooks => "agenthooks",
            Watched::Namespaces => "namespaces",
            Watched::Secrets => "secrets",
            Watched::TenantHookBudgets => "tenanthookbudgets",
        }
    }

    fn idx(self) -> usize {
        self as usize
    }

    /// The path of its all-namespaces collection (what its list and watch requests ask).
    pub fn collection_path(self) -> String {
        match self {
            Watched::AgentHooks => AgentHook::url_path(&(), None),
            Watched::Namespaces => Namespace::url_path(&(), None),
            Watched::Secrets => Secret::url_path(&(), None),
            Watched::TenantHookBudgets => TenantHookBudget::url_path(&(), None),
        }
    }
}

impl fmt::Display for Watched {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.label())
    }
}

/// What one watch looks like now (`/readyz` lists one per watch).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct WatchStatus {
    /// `agenthooks`, `namespaces` or `secrets`.
    pub resource: &'static str,
    /// False once the watch has kept failing for longer than the grace.
    pub healthy: bool,
    /// Seconds since its first error, while it fails (within the grace too).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub failing_for_seconds: Option<u64>,
    /// Errors since it started failing.
    #[serde(skip_serializing_if = "is_zero")]
    pub errors: u64,
    /// The last error, while it fails.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

#[derive(Debug, Clone, Default)]
struct State {
    failing_since: Option<Instant>,
    errors: u64,
    last_error: Option<String>,
    /// The unhealthy transition has been logged (so it is logged once per streak).
    reported: bool,
}

/// The health of the three watches, shared by the session (which feeds it), the API
/// client's [`WatchStartLayer`] and the servers (which read it).
#[derive(Debug)]
pub struct WatchHealth {
    states: Mutex<[State; Watched::ALL.len()]>,
    paths: [String; Watched::ALL.len()],
}

impl WatchHealth {
    /// Every watch healthy.
    pub fn new() -> Arc<WatchHealth> {
        Arc::new(WatchHealth {
            states: Mutex::new(Default::default()),
            paths: Watched::ALL.map(Watched::collection_path),
        })
    }

    /// Forgets every failure (a leader session starts or ends: its watches are new or gone).
    pub fn reset(&self) {
        *lock(&self.states) = Default::default();
    }

    /// Records an error of watch `w` at `now`: starts a failing streak unless one runs.
    pub fn error(&self, w: Watched, error: &str, now: Instant) {
        let mut states = lock(&self.states);
        let s = &mut states[w.idx()];
        s.failing_since.get_or_insert(now);
        s.errors += 1;
        let mut text = error.to_string();
        if text.len() > MAX_ERROR_LEN {
            let mut cut = MAX_ERROR_LEN;
            while !text.is_char_boundary(cut) {
                cut -= 1;
            }
            text.truncate(cut);
        }
        s.last_error = Some(text);
    }

    /// Records that watch `w` works (an event, a finished list, a watch started): ends its
    /// failing streak.
    pub fn ok(&self, w: Watched) {
        let mut states = lock(&self.states);
        let s = &mut states[w.idx()];
        if s.failing_since.is_none() {
            return;
        }
        if s.reported {
            tracing::info!(watch = %w, errors = s.errors, "watch recovered");
        }
        *s = State::default();
    }

    /// Every watch's status at `now`, unhealthy past `grace`. Logs (once per streak) a
    /// watch that just became unhealthy.
    pub fn report(&self, now: Instant, grace: Duration) -> Vec<WatchStatus> {
        let mut states = lock(&self.states);
        Watched::ALL
            .iter()
            .map(|&w| {
                let s = &mut states[w.idx()];
                let failing_for = s.failing_since.map(|t| now.saturating_duration_since(t));
                let healthy = failing_for.is_none_or(|d| d <= grace);
                if !healthy && !s.reported {
                    s.reported = true;
                    tracing::error!(
                        watch = %w,
                        failing_for_seconds = failing_for.unwrap_or_default().as_secs(),
                        errors = s.errors,
                        error = s.last_error.as_deref().unwrap_or(""),
                        "watch keeps failing; readiness fails until it recovers"
                    );
                }
                WatchStatus {
                    resource: w.label(),
                    healthy,
                    failing_for_seconds: failing_for.map(|d| d.as_secs()),
                    errors: s.errors,
                    error: failing_for.and(s.last_error.clone()),
                }
            })
            .collect()
    }

    /// Which watch a request starts: a `GET` of one of the three collections with
    /// `watch=true` (`None` for every other request).
    pub fn watch_started_by(&self, method: &Method, uri: &Uri) -> Option<Watched> {
        if method != Method::GET {
            return None;
        }
        let is_watch = uri
            .query()
            .is_some_and(|q| q.split('&').any(|p| p == "watch=true" || p == "watch=1"));
        if !is_watch {
            return None;
        }
        let path = uri.path();
        Watched::ALL
            .into_iter()
            .find(|w| self.paths[w.idx()] == path)
    }
}

/// A tower layer for the API client: a `2xx` answer to a watch request of one of the
/// session's watches marks that watch working ([`WatchHealth::ok`]).
#[derive(Debug, Clone)]
pub struct WatchStartLayer {
    health: Arc<WatchHealth>,
}

impl WatchStartLayer {
    /// A layer feeding `health`.
    pub fn new(health: Arc<WatchHealth>) -> WatchStartLayer {
        WatchStartLayer { health }
    }
}

impl<S> tower::Layer<S> for WatchStartLayer {
    type Service = WatchStartService<S>;

    fn layer(&self, inner: S) -> WatchStartService<S> {
        WatchStartService {
            inner,
            health: self.health.clone(),
        }
    }
}

/// The service of [`WatchStartLayer`].
#[derive(Debug, Clone)]
pub struct WatchStartService<S> {
    inner: S,
    health: Arc<WatchHealth>,
}

impl<S, ReqBody, ResBody> tower::Service<Request<ReqBody>> for WatchStartService<S>
where
    S: tower::Service<Request<ReqBody>, Response = Response<ResBody>>,
    S::Future: Send + 'static,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = BoxFuture<'static, Result<S::Response, S::Error>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Request<ReqBody>) -> Self::Future {
        let watched = self.health.watch_started_by(req.method(), req.uri());
        let response = self.inner.call(req);
        let health = self.health.clone();
        Box::pin(async move {
            let result = response.await;
            if let (Some(w), Ok(resp)) = (watched, &result)
                && resp.status().is_success()
            {
                health.ok(w);
            }
            result
        })
    }
}

/// The operator's API client for `config`, with [`WatchStartLayer`] feeding `health`.
///
/// Errors: [`kube::Error`] when the client stack cannot be built from `config` (TLS,
/// proxy, auth settings).
pub fn client(
    config: kube::Config,
    health: &Arc<WatchHealth>,
) -> Result<kube::Client, kube::Error> {
    Ok(kube::client::ClientBuilder::try_from(config)?
        .with_layer(&WatchStartLayer::new(health.clone()))
        .build())
}

#[cfg(test)]
mod tests {
    use super::*;
    use tower::{Layer, Service, ServiceExt};

    const GRACE: Duration = Duration::from_secs(10);

    fn status(h: &WatchHealth, now: Instant, w: Watched) -> WatchStatus {
        h.report(now, GRACE)
            .into_iter()
            .find(|s| s.resource == w.label())
            .unwrap()
    }

    #[test]
    fn a_failure_is_unhealthy_only_past_the_grace_and_heals_on_ok() {
        let h = WatchHealth::new();
        let t0 = Instant::now();
        assert!(h.report(t0, GRACE).iter().all(|s| s.healthy));

        h.error(Watched::AgentHooks, "403 forbidden", t0);
        let s = status(&h, t0 + Duration::from_secs(5), Watched::AgentHooks);
        assert!(s.healthy, "within the grace: {s:?}");
        assert_eq!(s.failing_for_seconds, Some(5));

        // more errors do not move the start of the streak
        h.error(
            Watched::AgentHooks,
            "403 again",
            t0 + Duration::from_secs(8),
        );
        let s = status(&h, t0 + Duration::from_secs(11), Watched::AgentHooks);
        assert!(!s.healthy, "past the grace: {s:?}");
        assert_eq!(s.errors, 2);
        assert_eq!(s.error.as_deref(), Some("403 again"));
        assert!(status(&h, t0 + Duration::from_secs(11), Watched::Secrets).healthy);

        h.ok(Watched::AgentHooks);
        let s = status(&h, t0 + Duration::from_secs(12), Watched::AgentHooks);
        assert!(s.healthy);
        assert_eq!((s.failing_for_seconds, s.errors, s.error), (None, 0, None));

        h.error(Watched::Namespaces, "gone", t0);
        h.reset();
        assert!(
            h.report(t0 + Duration::from_secs(60), GRACE)
                .iter()
                .all(|s| s.healthy && s.errors == 0)
        );
    }

    #[test]
    fn long_errors_are_cut_on_a_char_boundary() {
        let h = WatchHealth::new();
        let t0 = Instant::now();
        h.error(Watched::Secrets, &"é".repeat(400), t0);
        let s = status(&h, t0, Watched::Secrets);
        let e = s.error.unwrap();
        assert!(e.len() <= MAX_ERROR_LEN && !e.is_empty());
    }

    #[test]
    fn watch_requests_are_recognised_by_path_and_query() {
        let h = WatchHealth::new();
        let get = Method::GET;
        let uri = |s: &str| s.parse::<Uri>().unwrap();
        assert_eq!(
            h.watch_started_by(
                &get,
                &uri("/apis/agenthooks.io/v1alpha1/agenthooks?&watch=true&timeoutSeconds=290&resourceVersion=12")
            ),
            Some(Watched::AgentHooks)
        );
        assert_eq!(
            h.watch_started_by(&get, &uri("/api/v1/namespaces?watch=true")),
            Some(Watched::Namespaces)
        );
        assert_eq!(
            h.watch_started_by(
                &get,
                &uri("/api/v1/secrets?watch=1&allowWatchBookmarks=true")
            ),
            Some(Watched::Secrets)
        );
        for (m, u) in [
            (Method::GET, "/api/v1/secrets?limit=500"), // a list
            (Method::GET, "/api/v1/namespaces/a/secrets?watch=true"), // one namespace
            (Method::GET, "/api/v1/namespaces/a"),      // a get
            (
                Method::PATCH,
                "/apis/agenthooks.io/v1alpha1/agenthooks?watch=true",
            ),
            (
                Method::GET,
                "/apis/coordination.k8s.io/v1/namespaces/x/leases?watch=true",
            ),
        ] {
            assert_eq!(h.watch_started_by(&m, &uri(u)), None, "{m} {u}");
        }
    }

    #[tokio::test]
    async fn the_layer_heals_a_watch_on_a_successful_start_only() {
        let h = WatchHealth::new();
        let t0 = Instant::now();
        let watch = "/apis/agenthooks.io/v1alpha1/agenthooks?watch=true";
        let answer = |code: u16| {
            WatchStartLayer::new(h.clone()).layer(tower::service_fn(
                move |_req: Request<()>| async move {
                    Ok::<_, std::convert::Infallible>(
                        Response::builder().status(code).body(()).unwrap(),
                    )
                },
            ))
        };
        let send = |code: u16, uri: &'static str| {
            let svc = answer(code);
            async move {
                svc.oneshot(Request::get(uri).body(()).unwrap())
                    .await
                    .unwrap()
            }
        };

        h.error(Watched::AgentHooks, "forbidden", t0);
        send(403, watch).await;
        send(200, "/api/v1/secrets?watch=true").await;
        send(200, "/apis/agenthooks.io/v1alpha1/agenthooks").await; // a list is not a watch
        assert!(!status(&h, t0 + GRACE * 2, Watched::AgentHooks).healthy);
        send(200, watch).await;
        assert!(status(&h, t0 + GRACE * 2, Watched::AgentHooks).healthy);

        // the layer stays a plain pass-through for readiness checks of the inner service
        let mut svc = answer(200);
        std::future::poll_fn(|cx| svc.poll_ready(cx)).await.unwrap();
    }
}
