//! Health and metrics server: `/healthz`, `/readyz`, `/metrics` (`--metrics-addr`).
//!
//! - `GET /healthz`: `200 ok` while the process runs.
//! - `GET /readyz`: `200` unless this replica leads but has not finished its initial
//!   sync (then `503`); the body is `{"leader", "synced", "snapshotVersion"}`. A standby
//!   replica is ready (so a rollout never waits on leadership); dispatchers learn from
//!   the sync server's 503 that it does not serve.
//! - `GET /metrics`: Prometheus text format.

use std::sync::Arc;

use axum::Router;
use axum::extract::State;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use tokio_util::sync::CancellationToken;

use crate::error::Error;
use crate::shared::Shared;

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
    let status = if s.leader && !s.synced {
        StatusCode::SERVICE_UNAVAILABLE
    } else {
        StatusCode::OK
    };
    let version = shared.snapshots.borrow().version;
    (
        status,
        axum::Json(serde_json::json!({
            "leader": s.leader,
            "synced": s.synced,
            "snapshotVersion": version,
        })),
    )
        .into_response()
}

async fn metrics(State(shared): State<Arc<Shared>>) -> Response {
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
}
