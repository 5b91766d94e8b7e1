//! The dispatchers' sync server (DESIGN "Sync: operator → dispatchers").
//!
//! `GET /v1/snapshot?after=N&epoch=E&dispatcher=ID&timeoutSeconds=T`
//!
//! - `dispatcher` (required, 1–317 characters, no control characters): the
//!   dispatcher's stable id, recorded for `Ready` tracking together with (E, N), which
//!   the dispatcher says it serves.
//! - `after` (default 0), `epoch` (default empty): the snapshot the dispatcher holds.
//! - `timeoutSeconds` (default 30, at most 60; larger values are cut to 60): how long to
//!   wait for a change.
//! - `deltas` (default false): the dispatcher takes a
//!   [`agenthooks_crds::snapshot::SnapshotDelta`]; `full` (default false): it wants the
//!   complete snapshot all the same (its last delta did not apply).
//!
//! Answers:
//! - `200` at once when this operator's (epoch, version) differs from (E, N), or as soon
//!   as a new snapshot is published during the wait, with the
//!   [`agenthooks_crds::snapshot::SnapshotDelta`] from N when the dispatcher takes deltas
//!   (and not `full`), E is this epoch and the changes since N are still kept
//!   ([`crate::snapshot_builder::SnapshotLog`]); else with the complete
//!   [`agenthooks_crds::snapshot::Snapshot`];
//! - `304 Not Modified` (empty body) when the wait ends without a change;
//! - `503` with `{"error", "leader", "synced"}` when this replica is not the leader or
//!   has not finished its initial sync, also when that happens during the wait or the
//!   operator shuts down (the dispatcher keeps its last snapshot and retries);
//! - `400` with `{"error"}` for a malformed query or a missing/invalid `dispatcher`;
//! - `403` with `{"error", "field": "dispatcher"}` when `dispatcher` is not the
//!   authenticated caller ([`crate::sync_auth`]; nothing is tracked);
//! - `429` with `{"error"}` when too many distinct dispatchers are tracked.
//!
//! `GET /v1/dispatchers`: `200` with `{"epoch", "version", "ttlSeconds", "dispatchers":
//! [{"id", "epoch", "version", "currentEpoch", "live", "inFlight",
//! "lastSeenSecondsAgo"}]}` — every tracked dispatcher, live or not (for tests and
//! debugging; served whether or not this replica leads).

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use agenthooks_crds::snapshot::SnapshotQuery;
use axum::Router;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Extension, Query, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use tokio::sync::{Notify, watch};
use tokio_util::sync::CancellationToken;

use crate::error::Error;
use crate::metrics::Metrics;
use crate::ready::DispatcherTracker;
use crate::shared::{Serving, Shared, lock};
use crate::snapshot_builder::{Published, SnapshotLog};
use crate::sync_auth::{SyncCaller, no_caller};

/// Wait of a long poll without `timeoutSeconds`.
pub const DEFAULT_TIMEOUT_SECONDS: u64 = 30;
/// Longest wait of a long poll.
pub const MAX_TIMEOUT_SECONDS: u64 = 60;
/// Longest accepted dispatcher id (any identity of [`crate::sync_auth::identity_of`]).
pub const MAX_DISPATCHER_ID_LEN: usize = crate::sync_auth::MAX_DISPATCHER_ID_LEN;

/// What the sync server reads.
#[derive(Clone, Debug)]
pub struct SyncState {
    /// This process's epoch.
    pub epoch: String,
    /// The identity of the last published snapshot.
    pub snapshots: watch::Receiver<Arc<Published>>,
    /// The bodies: full snapshots and deltas.
    pub log: Arc<Mutex<SnapshotLog>>,
    /// Leader / synced.
    pub serving: watch::Receiver<Serving>,
    /// Dispatcher tracking.
    pub tracker: Arc<Mutex<DispatcherTracker>>,
    /// Signalled when a poll tells the tracker something new.
    pub tracker_changed: Arc<Notify>,
    /// Ends every wait (shutdown).
    pub shutdown: CancellationToken,
    /// Poll counters.
    pub metrics: Metrics,
}

impl SyncState {
    /// The sync server's view of `shared`.
    pub fn from_shared(shared: &Shared, shutdown: CancellationToken) -> SyncState {
        SyncState {
            epoch: shared.epoch.clone(),
            snapshots: shared.snapshots.subscribe(),
            log: shared.log.clone(),
            serving: shared.serving.subscribe(),
            tracker: shared.tracker.clone(),
            tracker_changed: shared.tracker_changed.clone(),
            shutdown,
            metrics: shared.metrics.clone(),
        }
    }
}

/// The router: `GET /v1/snapshot` and `GET /v1/dispatchers`.
pub fn router(state: SyncState) -> Router {
    Router::new()
        .route("/v1/snapshot", get(get_snapshot))
        .route("/v1/dispatchers", get(get_dispatchers))
        .with_state(state)
}

/// Serves `app` ([`router`] merged with the report and budget routes) on `listener`
/// (TLS with `--sync-tls-cert-file`, else plain) until `shutdown` (waits in progress
/// answer 503 at once).
///
/// Errors: [`Error::Serve`] if the server fails.
pub async fn serve(
    listener: agenthooks_tls::Incoming,
    app: Router,
    shutdown: CancellationToken,
) -> Result<(), Error> {
    let addr: Option<SocketAddr> = listener.local_addr().ok();
    tracing::info!(addr = ?addr, tls = listener.is_tls(), "sync server listening");
    axum::serve(listener, app)
        .with_graceful_shutdown(shutdown.cancelled_owned())
        .await
        .map_err(|source| Error::Serve {
            what: "sync",
            source,
        })
}

fn json_error(status: StatusCode, message: impl Into<String>) -> Response {
    (
        status,
        axum::Json(serde_json::json!({ "error": message.into() })),
    )
        .into_response()
}

fn unavailable(state: &SyncState, serving: Serving, why: &str) -> Response {
    state
        .metrics
        .snapshot_polls_total
        .with_label_values(&["unavailable"])
        .inc();
    (
        StatusCode::SERVICE_UNAVAILABLE,
        axum::Json(serving.error_body(why)),
    )
        .into_response()
}

fn check_dispatcher_id(id: &str) -> Result<(), String> {
    if id.is_empty() {
        return Err("query parameter dispatcher is required: the dispatcher's stable id".into());
    }
    if id.len() > MAX_DISPATCHER_ID_LEN {
        return Err(format!(
            "dispatcher id is {} bytes; at most {MAX_DISPATCHER_ID_LEN}",
            id.len()
        ));
    }
    if id.chars().any(char::is_control) {
        return Err("dispatcher id holds control characters".into());
    }
    Ok(())
}

/// Ends the tracker's record of a poll however the poll ends (also when the client
/// goes away and the handler is dropped).
struct PollGuard {
    tracker: Arc<Mutex<DispatcherTracker>>,
    id: String,
}

impl Drop for PollGuard {
    fn drop(&mut self) {
        lock(&self.tracker).end_poll(&self.id, Instant::now());
    }
}

fn snapshot_response(body: bytes::Bytes) -> Response {
    let mut resp = (StatusCode::OK, body).into_response();
    let h = resp.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    resp
}

async fn get_snapshot(
    State(state): State<SyncState>,
    caller: Option<Extension<SyncCaller>>,
    query: Result<Query<SnapshotQuery>, QueryRejection>,
) -> Response {
    let Some(Extension(caller)) = caller else {
        return no_caller().into_response();
    };
    let q = match query {
        Ok(Query(q)) => q,
        Err(e) => {
            state
                .metrics
                .snapshot_polls_total
                .with_label_values(&["bad_request"])
                .inc();
            return json_error(StatusCode::BAD_REQUEST, e.body_text());
        }
    };
    if let Err(m) = check_dispatcher_id(&q.dispatcher) {
        state
            .metrics
            .snapshot_polls_total
            .with_label_values(&["bad_request"])
            .inc();
        return json_error(StatusCode::BAD_REQUEST, m);
    }
    if let Err(foreign) = caller.acts_for(&q.dispatcher) {
        state
            .metrics
            .snapshot_polls_total
            .with_label_values(&["forbidden"])
            .inc();
        return foreign.into_response();
    }
    let serving = *state.serving.borrow();
    if !serving.ok() {
        let why = if serving.leader {
            "the operator has not finished its initial sync"
        } else {
            "this operator replica is not the leader"
        };
        return unavailable(&state, serving, why);
    }
    let wait = Duration::from_secs(
        q.timeout_seconds
            .unwrap_or(DEFAULT_TIMEOUT_SECONDS)
            .min(MAX_TIMEOUT_SECONDS),
    );
    let deadline = tokio::time::Instant::now() + wait;

    let changed =
        match lock(&state.tracker).begin_poll(&q.dispatcher, &q.epoch, q.after, Instant::now()) {
            Ok(changed) => changed,
            Err(_) => {
                return json_error(
                    StatusCode::TOO_MANY_REQUESTS,
                    "too many distinct dispatcher ids are tracked; retry later",
                );
            }
        };
    let _guard = PollGuard {
        tracker: state.tracker.clone(),
        id: q.dispatcher.clone(),
    };
    if changed {
        tracing::debug!(dispatcher = %q.dispatcher, epoch = %q.epoch, after = q.after, "dispatcher reports a new version");
        state.tracker_changed.notify_one();
    }

    let mut snapshots = state.snapshots.clone();
    let mut serving_rx = state.serving.clone();
    loop {
        let serving = *serving_rx.borrow_and_update();
        if !serving.ok() {
            return unavailable(&state, serving, "this operator replica stopped serving");
        }
        let current = snapshots.borrow_and_update().clone();
        if current.epoch != q.epoch || current.version != q.after {
            let (body, kind) = lock(&state.log).answer(&q.epoch, q.after, q.deltas && !q.full);
            state
                .metrics
                .snapshot_polls_total
                .with_label_values(&[kind.label()])
                .inc();
            return snapshot_response(body);
        }
        tokio::select! {
            _ = tokio::time::sleep_until(deadline) => {
                state.metrics.snapshot_polls_total.with_label_values(&["not_modified"]).inc();
                return StatusCode::NOT_MODIFIED.into_response();
            }
            r = snapshots.changed() => if r.is_err() {
                return unavailable(&state, serving, "the operator is shutting down");
            },
            r = serving_rx.changed() => if r.is_err() {
                return unavailable(&state, serving, "the operator is shutting down");
            },
            _ = state.shutdown.cancelled() => {
                return unavailable(&state, Serving::default(), "the operator is shutting down");
            }
        }
    }
}

async fn get_dispatchers(State(state): State<SyncState>) -> Response {
    let current = state.snapshots.borrow().clone();
    let tracker = lock(&state.tracker);
    let body = serde_json::json!({
        "epoch": state.epoch,
        "version": current.version,
        "ttlSeconds": tracker.ttl().as_secs(),
        "dispatchers": tracker.list(&state.epoch, Instant::now()),
    });
    drop(tracker);
    (StatusCode::OK, axum::Json(body)).into_response()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::index::PublishedChanges;
    use crate::metrics::Metrics;
    use axum::body::Body;
    use axum::http::Request;
    use http_body_util::BodyExt;
    use tower::ServiceExt;

    struct Harness {
        state: SyncState,
        snapshots: watch::Sender<Arc<Published>>,
        serving: watch::Sender<Serving>,
    }

    impl Harness {
        /// Publishes version `version` (one hook more each time) and wakes the polls.
        fn publish(&self, version: u64) {
            let mut log = lock(&self.state.log);
            let key = crate::index::HookKey::new("ns", format!("h{version}"));
            let mut hook = crate::index::tests::hook("ns", &key.name, &key.name, 1).hook;
            hook.name = key.name.clone();
            let published = log
                .publish(PublishedChanges {
                    version,
                    hooks: vec![(key, Some(hook))],
                    ..Default::default()
                })
                .unwrap();
            self.snapshots.send_replace(Arc::new(published));
        }
    }

    fn harness() -> Harness {
        let mut log = SnapshotLog::new("E", "agenthooks-system");
        for version in 1..=3 {
            log.publish(PublishedChanges {
                version,
                ..Default::default()
            })
            .unwrap();
        }
        let (snapshots, snapshots_rx) = watch::channel(Arc::new(log.published()));
        let (serving, serving_rx) = watch::channel(Serving {
            leader: true,
            synced: true,
        });
        Harness {
            state: SyncState {
                epoch: "E".into(),
                snapshots: snapshots_rx,
                log: Arc::new(Mutex::new(log)),
                serving: serving_rx,
                tracker: Arc::new(Mutex::new(DispatcherTracker::new(Duration::from_secs(30)))),
                tracker_changed: Arc::new(Notify::new()),
                shutdown: CancellationToken::new(),
                metrics: Metrics::new().unwrap(),
            },
            snapshots,
            serving,
        }
    }

    /// `GET uri` as the dispatcher its query names (what the sync port's authentication
    /// leaves in the request), or as `d1` when it names none.
    async fn get(state: &SyncState, uri: &str) -> (StatusCode, serde_json::Value) {
        let id = uri
            .split(['?', '&'])
            .find_map(|p| p.strip_prefix("dispatcher="))
            .unwrap_or("d1");
        get_as(state, uri, Some(id)).await
    }

    async fn get_as(
        state: &SyncState,
        uri: &str,
        caller: Option<&str>,
    ) -> (StatusCode, serde_json::Value) {
        let mut req = Request::get(uri).body(Body::empty()).unwrap();
        if let Some(id) = caller {
            req.extensions_mut().insert(SyncCaller::new(id));
        }
        let resp = router(state.clone()).oneshot(req).await.unwrap();
        let status = resp.status();
        let bytes = resp.into_body().collect().await.unwrap().to_bytes();
        let json = if bytes.is_empty() {
            serde_json::Value::Null
        } else {
            serde_json::from_slice(&bytes).unwrap()
        };
        (status, json)
    }

    #[tokio::test]
    async fn answers_at_once_when_the_version_or_epoch_differs() {
        let h = harness();
        let t0 = Instant::now();
        let (status, body) = get(&h.state, "/v1/snapshot?dispatcher=d1&timeoutSeconds=30").await;
        assert_eq!(
            status,
            StatusCode::OK,
            "a fresh dispatcher (no epoch) gets it"
        );
        assert_eq!(body["version"], 3);
        assert_eq!(body["epoch"], "E");
        let (status, _) = get(
            &h.state,
            "/v1/snapshot?dispatcher=d1&epoch=E&after=2&timeoutSeconds=30",
        )
        .await;
        assert_eq!(status, StatusCode::OK, "older version");
        let (status, _) = get(
            &h.state,
            "/v1/snapshot?dispatcher=d1&epoch=OLD&after=3&timeoutSeconds=30",
        )
        .await;
        assert_eq!(status, StatusCode::OK, "same version of another epoch");
        assert!(t0.elapsed() < Duration::from_secs(5), "no waiting");
    }

    #[tokio::test]
    async fn waits_then_304_when_nothing_changes() {
        let h = harness();
        let t0 = Instant::now();
        let (status, body) = get(
            &h.state,
            "/v1/snapshot?dispatcher=d1&epoch=E&after=3&timeoutSeconds=1",
        )
        .await;
        assert_eq!(status, StatusCode::NOT_MODIFIED);
        assert_eq!(body, serde_json::Value::Null, "empty body");
        let waited = t0.elapsed();
        assert!(waited >= Duration::from_millis(950), "waited {waited:?}");
        assert!(waited < Duration::from_secs(5));
    }

    #[tokio::test]
    async fn a_publish_during_the_wait_answers_it() {
        let h = Arc::new(harness());
        let publisher = h.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(200)).await;
            publisher.publish(4);
        });
        let t0 = Instant::now();
        let (status, body) = get(
            &h.state,
            "/v1/snapshot?dispatcher=d1&epoch=E&after=3&timeoutSeconds=30",
        )
        .await;
        assert_eq!(status, StatusCode::OK);
        assert_eq!(body["version"], 4);
        assert!(t0.elapsed() < Duration::from_secs(5));
    }

    #[tokio::test]
    async fn deltas_to_those_that_take_them_full_snapshots_otherwise() {
        let h = harness();
        h.publish(4);
        h.publish(5);
        let q = |rest: &str| format!("/v1/snapshot?dispatcher=d1&timeoutSeconds=0&{rest}");
        let (status, body) = get(&h.state, &q("epoch=E&after=3&deltas=true")).await;
        assert_eq!(status, StatusCode::OK);
        assert_eq!(
            (body["base"].as_u64(), body["version"].as_u64()),
            (Some(3), Some(5))
        );
        let names: Vec<&str> = body["hooks"]
            .as_array()
            .unwrap()
            .iter()
            .map(|h| h["name"].as_str().unwrap())
            .collect();
        assert_eq!(names, ["h4", "h5"], "what changed since 3, nothing else");
        assert_eq!(body["hookCount"], 2);
        let full_digest = |b: &serde_json::Value| b["digest"].as_str().unwrap().to_string();
        // Without `deltas`, with `full`, from another epoch: the complete snapshot.
        for rest in [
            "epoch=E&after=3",
            "epoch=E&after=3&deltas=true&full=true",
            "epoch=OLD&after=3&deltas=true",
        ] {
            let (status, full) = get(&h.state, &q(rest)).await;
            assert_eq!(status, StatusCode::OK);
            assert!(full.get("base").is_none(), "{rest}: {full}");
            assert_eq!(full["hooks"].as_array().unwrap().len(), 2, "{rest}");
            assert_eq!(full_digest(&full), full_digest(&body), "{rest}");
        }
        let count = |result: &str| {
            h.state
                .metrics
                .snapshot_polls_total
                .with_label_values(&[result])
                .get()
        };
        assert_eq!((count("delta"), count("snapshot")), (1, 3));
    }

    #[tokio::test]
    async fn a_dispatcher_past_the_kept_history_gets_the_full_snapshot() {
        let h = harness();
        *lock(&h.state.log) = SnapshotLog::with_history("E", "agenthooks-system", 2);
        for v in 1..=5 {
            h.publish(v);
        }
        let q = |after: u64| {
            format!("/v1/snapshot?dispatcher=d1&timeoutSeconds=0&epoch=E&after={after}&deltas=true")
        };
        let (_, body) = get(&h.state, &q(3)).await;
        assert_eq!(body["base"], 3, "versions 4 and 5 are kept");
        let (_, body) = get(&h.state, &q(2)).await;
        assert!(body.get("base").is_none(), "a gap: {body}");
        assert_eq!(body["hooks"].as_array().unwrap().len(), 5);
    }

    #[tokio::test]
    async fn unavailable_unless_leader_and_synced() {
        let h = harness();
        h.serving.send_replace(Serving {
            leader: true,
            synced: false,
        });
        let (status, body) = get(&h.state, "/v1/snapshot?dispatcher=d1").await;
        assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(body["leader"], true);
        assert_eq!(body["synced"], false);
        assert!(body["error"].as_str().unwrap().contains("initial sync"));
        h.serving.send_replace(Serving::default());
        let (status, body) = get(&h.state, "/v1/snapshot?dispatcher=d1").await;
        assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
        assert!(body["error"].as_str().unwrap().contains("not the leader"));
    }

    #[tokio::test]
    async fn losing_leadership_or_shutdown_ends_a_wait_with_503() {
        let h = harness();
        let serving = h.serving.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(100)).await;
            serving.send_replace(Serving::default());
        });
        let (status, _) = get(
            &h.state,
            "/v1/snapshot?dispatcher=d1&epoch=E&after=3&timeoutSeconds=30",
        )
        .await;
        assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);

        let h = harness();
        let token = h.state.shutdown.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(100)).await;
            token.cancel();
        });
        let t0 = Instant::now();
        let (status, _) = get(
            &h.state,
            "/v1/snapshot?dispatcher=d1&epoch=E&after=3&timeoutSeconds=30",
        )
        .await;
        assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
        assert!(t0.elapsed() < Duration::from_secs(5));
    }

    #[tokio::test]
    async fn bad_queries_are_400() {
        let h = harness();
        let (status, body) = get(&h.state, "/v1/snapshot").await;
        assert_eq!(status, StatusCode::BAD_REQUEST);
        assert!(body["error"].as_str().unwrap().contains("dispatcher"));
        let (status, _) = get(&h.state, "/v1/snapshot?dispatcher=d&after=minus-one").await;
        assert_eq!(status, StatusCode::BAD_REQUEST);
        // Longer than any identity `NAMESPACE/POD` (63 + 1 + 253).
        let long = "x".repeat(crate::sync_auth::MAX_DISPATCHER_ID_LEN + 1);
        let (status, _) = get(&h.state, &format!("/v1/snapshot?dispatcher={long}")).await;
        assert_eq!(status, StatusCode::BAD_REQUEST);
    }

    #[tokio::test]
    async fn a_poll_for_another_dispatcher_is_403_and_tracks_nothing() {
        let h = harness();
        let (status, body) = get_as(
            &h.state,
            "/v1/snapshot?dispatcher=ns%2Fdisp-b&timeoutSeconds=0",
            Some("ns/disp-a"),
        )
        .await;
        assert_eq!(status, StatusCode::FORBIDDEN);
        assert_eq!(
            body,
            serde_json::json!({"error": "dispatcher: this caller is ns/disp-a, not ns/disp-b", "field": "dispatcher"})
        );
        let (status, _) = get_as(&h.state, "/v1/snapshot?dispatcher=ns%2Fdisp-a", None).await;
        assert_eq!(status, StatusCode::UNAUTHORIZED, "no caller, no answer");
        let (_, listed) = get(&h.state, "/v1/dispatchers").await;
        assert_eq!(
            listed["dispatchers"],
            serde_json::json!([]),
            "no liveness recorded"
        );
        let (status, _) = get_as(
            &h.state,
            "/v1/snapshot?dispatcher=ns%2Fdisp-a&timeoutSeconds=0",
            Some("ns/disp-a"),
        )
        .await;
        assert_eq!(status, StatusCode::OK, "its own poll is served");
    }

    #[tokio::test]
    async fn polls_are_tracked_and_listed() {
        let h = harness();
        get(
            &h.state,
            "/v1/snapshot?dispatcher=d1&epoch=E&after=3&timeoutSeconds=0",
        )
        .await;
        get(
            &h.state,
            "/v1/snapshot?dispatcher=d2&epoch=OLD&after=9&timeoutSeconds=0",
        )
        .await;
        let (status, body) = get(&h.state, "/v1/dispatchers").await;
        assert_eq!(status, StatusCode::OK);
        assert_eq!(body["epoch"], "E");
        assert_eq!(body["version"], 3);
        let ds = body["dispatchers"].as_array().unwrap();
        assert_eq!(ds.len(), 2);
        assert_eq!(ds[0]["id"], "d1");
        assert_eq!(ds[0]["version"], 3);
        assert_eq!(ds[0]["currentEpoch"], true);
        assert_eq!(ds[0]["live"], true);
        assert_eq!(ds[0]["inFlight"], 0, "the poll ended");
        assert_eq!(ds[1]["currentEpoch"], false);
        let live = lock(&h.state.tracker).live("E", Instant::now());
        assert_eq!(live.0.get("d1"), Some(&Some(3)));
        assert_eq!(live.0.get("d2"), Some(&None));
    }

    #[tokio::test]
    async fn over_a_real_loopback_listener() {
        let h = harness();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let shutdown = h.state.shutdown.clone();
        let app = router(h.state.clone()).layer(axum::Extension(SyncCaller::new("d9")));
        let server = tokio::spawn(serve(
            agenthooks_tls::Incoming::Plain(listener),
            app,
            shutdown.clone(),
        ));
        let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        stream
            .write_all(
                b"GET /v1/snapshot?dispatcher=d9 HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
            )
            .await
            .unwrap();
        let mut out = String::new();
        stream.read_to_string(&mut out).await.unwrap();
        assert!(out.starts_with("HTTP/1.1 200"), "{out}");
        assert!(out.contains("\"version\":3"));
        shutdown.cancel();
        server.await.unwrap().unwrap();
    }

    /// `--sync-tls-*`: the same long polls over TLS, a client that stalls its handshake
    /// holds up no one, and shutdown answers a waiting poll 503 and stops the server.
    #[tokio::test]
    async fn long_polls_over_tls_and_a_graceful_shutdown() {
        use rcgen::{BasicConstraints, CertificateParams, IsCa, Issuer, KeyPair};
        let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        let ca_key = KeyPair::generate().unwrap();
        let ca_pem = ca_params.self_signed(&ca_key).unwrap().pem();
        let issuer = Issuer::new(ca_params, ca_key);
        let key = KeyPair::generate().unwrap();
        let cert = CertificateParams::new(vec!["127.0.0.1".to_string()])
            .unwrap()
            .signed_by(&key, &issuer)
            .unwrap();
        let dir = std::env::temp_dir().join(format!("ah-sync-tls-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(&dir).unwrap();
        let files = agenthooks_tls::PemFiles {
            cert: dir.join("tls.crt"),
            key: dir.join("tls.key"),
            cert_flag: "--sync-tls-cert-file",
            key_flag: "--sync-tls-key-file",
        };
        std::fs::write(&files.cert, cert.pem()).unwrap();
        std::fs::write(&files.key, key.serialize_pem()).unwrap();
        std::fs::write(dir.join("ca.crt"), ca_pem).unwrap();
        let server_cert = agenthooks_tls::ServerCert::load(files).unwrap();

        let h = harness();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let incoming = agenthooks_tls::Incoming::new(listener, Some(&server_cert)).unwrap();
        let shutdown = h.state.shutdown.clone();
        let app = router(h.state.clone()).layer(axum::Extension(SyncCaller::new("d1")));
        let server = tokio::spawn(serve(incoming, app, shutdown.clone()));
        let _stalled = tokio::net::TcpStream::connect(addr).await.unwrap();

        let _ = rustls::crypto::ring::default_provider().install_default();
        let tls = agenthooks_tls::client_config_trusting("--operator-ca-file", &dir.join("ca.crt"))
            .unwrap();
        let client = reqwest::Client::builder()
            .tls_backend_preconfigured(tls)
            .no_proxy()
            .build()
            .unwrap();
        let base = format!("https://{addr}");
        let r = client
            .get(format!("{base}/v1/snapshot?dispatcher=d1"))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status().as_u16(), 200);
        let body: serde_json::Value = serde_json::from_slice(&r.bytes().await.unwrap()).unwrap();
        assert_eq!(body["version"], 3);

        // A poll that holds (E, 3) waits; shutdown answers it 503 at once.
        let waiting = tokio::spawn({
            let client = client.clone();
            let url = format!("{base}/v1/snapshot?dispatcher=d1&epoch=E&after=3&timeoutSeconds=30");
            async move { client.get(url).send().await.unwrap().status().as_u16() }
        });
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert!(!waiting.is_finished(), "a long poll waits for a change");
        shutdown.cancel();
        let status = tokio::time::timeout(Duration::from_secs(5), waiting)
            .await
            .expect("the waiting poll is answered")
            .unwrap();
        assert_eq!(status, 503);
        drop(_stalled);
        tokio::time::timeout(Duration::from_secs(5), server)
            .await
            .expect("graceful shutdown")
            .unwrap()
            .unwrap();
        std::fs::remove_dir_all(dir).ok();
    }
}
