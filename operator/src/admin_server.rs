//! Health and metrics server: `/healthz`, `/readyz`, `/metrics` (`--metrics-addr`).
//!
//! - `GET /healthz`: `200 ok` while the process runs.
//! - `GET /readyz`: `200` unless this replica leads and either has not finished its
//!   initial sync or has a watch (AgentHooks, Namespaces, Secrets) that has kept failing
//!   for longer than `--watch-grace-seconds` (see [`crate::watch_health`]): then `503`.
//!   The body is `{"leader", "synced", "snapshotVersion", "watches": [{"resource",
//!   "healthy", "failingForSeconds"?, "errors"?, "error"?}], "failing": [resource...],
//!   "reason"?}`; `reason` says in words why it is not ready. A standby replica runs no
//!   watches and is ready (so a rollout never waits on leadership); dispatchers learn
//!   from the sync server's 503 that it does not serve.
//!   It also says whether the sync port speaks TLS (`syncTLS`); without TLS the body
//!   carries `warning` ([`PLAIN_SYNC_WARNING`]) whatever the status.
//! - `GET /metrics`: Prometheus text format (the watch gauges are re-evaluated first).

use std::sync::Arc;
use std::time::Instant;

use axum::Router;
use axum::extract::State;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use tokio_util::sync::CancellationToken;

use crate::error::Error;
use crate::shared::Shared;
use crate::watch_health::WatchStatus;

/// What the operator says at start and in `/readyz` when the sync port is plain HTTP.
pub const PLAIN_SYNC_WARNING: &str = "the sync port serves plain HTTP (no --sync-tls-cert-file/--sync-tls-key-file): snapshots, sealed headers and dispatcher reports cross the network in the clear and dispatchers cannot verify this operator; give the sync port a certificate (CONTRACT 9.4)";

/// The router.
pub fn router(shared: Arc<Shared>) -> Router {
    Router::new()
        .route("/healthz", get(|| async { "ok" }))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics))
        .with_state(shared)
}

/// Serves [`router`] on `listener` until `shutdown`.
///
/// Errors: [`Error::Serve`] if the server fails.
pub async fn serve(
    listener: tokio::net::TcpListener,
    shared: Arc<Shared>,
    shutdown: CancellationToken,
) -> Result<(), Error> {
    tracing::info!(addr = ?listener.local_addr().ok(), "metrics/health server listening");
    axum::serve(listener, router(shared))
        .with_graceful_shutdown(shutdown.cancelled_owned())
        .await
        .map_err(|source| Error::Serve {
            what: "metrics",
            source,
        })
}

async fn readyz(State(shared): State<Arc<Shared>>) -> Response {
    let s = shared.serving();
    let watches = shared.watch_report(Instant::now());
    let failing: Vec<&WatchStatus> = watches.iter().filter(|w| !w.healthy).collect();
    let mut reasons = Vec::new();
    if s.leader && !s.synced {
        reasons.push("the initial sync of this leader session is not complete".to_string());
    }
    if s.leader {
        reasons.extend(failing.iter().map(|w| {
            format!(
                "watch {} failing for {} s: {}",
                w.resource,
                w.failing_for_seconds.unwrap_or_default(),
                w.error.as_deref().unwrap_or("unknown error")
            )
        }));
    }
    let status = if reasons.is_empty() {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    let version = shared.snapshots.borrow().version;
    let mut body = serde_json::json!({
        "leader": s.leader,
        "synced": s.synced,
        "snapshotVersion": version,
        "watches": watches,
        "failing": failing.iter().map(|w| w.resource).collect::<Vec<_>>(),
    });
    if !reasons.is_empty() {
        body["reason"] = reasons.join("; ").into();
    }
    let sync_tls = shared.config.sync_tls.is_some();
    body["syncTLS"] = sync_tls.into();
    if !sync_tls {
        body["warning"] = PLAIN_SYNC_WARNING.into();
    }
    (status, axum::Json(body)).into_response()
}

async fn metrics(State(shared): State<Arc<Shared>>) -> Response {
    shared.watch_report(Instant::now());
    let mut resp = shared.metrics.encode().into_response();
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; version=0.0.4; charset=utf-8"),
    );
    resp
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::Metrics;
    use crate::shared::tests::config;
    use crate::watch_health::Watched;
    use axum::body::Body;
    use axum::http::Request;
    use tower::ServiceExt;

    async fn status(shared: &Arc<Shared>, uri: &str) -> StatusCode {
        router(shared.clone())
            .oneshot(Request::get(uri).body(Body::empty()).unwrap())
            .await
            .unwrap()
            .status()
    }

    #[tokio::test]
    async fn readyz_follows_leader_and_sync() {
        let shared = Shared::new(config(), Metrics::new().unwrap());
        assert_eq!(status(&shared, "/healthz").await, StatusCode::OK);
        assert_eq!(status(&shared, "/readyz").await, StatusCode::OK, "standby");
        shared.set_leader(true);
        assert_eq!(
            status(&shared, "/readyz").await,
            StatusCode::SERVICE_UNAVAILABLE
        );
        shared.set_synced(true);
        assert_eq!(status(&shared, "/readyz").await, StatusCode::OK);
        assert_eq!(status(&shared, "/metrics").await, StatusCode::OK);
    }

    async fn get(shared: &Arc<Shared>, uri: &str) -> (StatusCode, String) {
        let resp = router(shared.clone())
            .oneshot(Request::get(uri).body(Body::empty()).unwrap())
            .await
            .unwrap();
        let status = resp.status();
        let body = http_body_util::BodyExt::collect(resp.into_body())
            .await
            .unwrap()
            .to_bytes();
        (status, String::from_utf8_lossy(&body).into_owned())
    }

    #[tokio::test]
    async fn readyz_fails_while_a_watch_keeps_failing_and_names_it() {
        let mut cfg = config();
        cfg.watch_grace = std::time::Duration::ZERO;
        let shared = Shared::new(cfg, Metrics::new().unwrap());
        shared.set_leader(true);
        shared.set_synced(true);
        let forbidden = "agenthooks.agenthooks.io is forbidden: cannot watch";
        let past = Instant::now() - std::time::Duration::from_secs(3);
        shared
            .watch_health
            .error(Watched::AgentHooks, forbidden, past);

        let (code, body) = get(&shared, "/readyz").await;
        assert_eq!(code, StatusCode::SERVICE_UNAVAILABLE, "{body}");
        let v: serde_json::Value = serde_json::from_str(&body).unwrap();
        assert_eq!(v["failing"], serde_json::json!(["agenthooks"]));
        assert!(v["reason"].as_str().unwrap().contains(forbidden), "{body}");
        let hooks = &v["watches"][0];
        assert_eq!(hooks["resource"], "agenthooks");
        assert_eq!(hooks["healthy"], false);
        assert_eq!(hooks["error"], forbidden);
        assert_eq!(v["watches"][1]["healthy"], true);
        let (_, metrics) = get(&shared, "/metrics").await;
        assert!(
            metrics.contains("agenthooks_operator_watch_healthy{resource=\"agenthooks\"} 0"),
            "{metrics}"
        );

        // a standby runs no watches: ready whatever is recorded
        shared.set_leader(false);
        assert_eq!(get(&shared, "/readyz").await.0, StatusCode::OK);
        shared.set_leader(true);
        shared.set_synced(true);
        shared.watch_health.ok(Watched::AgentHooks);
        let (code, body) = get(&shared, "/readyz").await;
        assert_eq!(code, StatusCode::OK, "{body}");
        assert!(!body.contains("reason"), "{body}");
        let (_, metrics) = get(&shared, "/metrics").await;
        assert!(metrics.contains("agenthooks_operator_watch_healthy{resource=\"agenthooks\"} 1"));
    }

    #[tokio::test]
    async fn readyz_warns_while_the_sync_port_is_plain() {
        let plain = Shared::new(config(), Metrics::new().unwrap());
        let (code, body) = get(&plain, "/readyz").await;
        assert_eq!(code, StatusCode::OK, "a warning, not a failure: {body}");
        let v: serde_json::Value = serde_json::from_str(&body).unwrap();
        assert_eq!(v["syncTLS"], false);
        assert_eq!(v["warning"], PLAIN_SYNC_WARNING);

        let mut cfg = config();
        cfg.sync_tls = Some(agenthooks_tls::PemFiles {
            cert: "tls.crt".into(),
            key: "tls.key".into(),
            cert_flag: "--sync-tls-cert-file",
            key_flag: "--sync-tls-key-file",
        });
        let tls = Shared::new(cfg, Metrics::new().unwrap());
        let (code, body) = get(&tls, "/readyz").await;
        assert_eq!(code, StatusCode::OK, "{body}");
        let v: serde_json::Value = serde_json::from_str(&body).unwrap();
        assert_eq!(v["syncTLS"], true);
        assert!(v.get("warning").is_none(), "{body}");
    }
}
