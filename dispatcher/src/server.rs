//! The dispatcher's HTTP API (DESIGN "Dispatch API").
//!
//! - `POST /v1/dispatch`: an [`Event`] → a [`crate::chain::Decision`]. 400 for invalid
//!   input, 413 over a cap (both `{"error", "field"}`), 503 before any hooks are
//!   loaded (the caller must treat it as `block`).
//! - `GET /v1/hooks`: the hooks served and the version of their source.
//! - `GET /healthz`, `GET /readyz` (200 once a snapshot or hooks file is loaded, else
//!   503), `GET /metrics`.

use std::sync::{Arc, RwLock};
use std::time::Duration;

use axum::Router;
use axum::extract::{DefaultBodyLimit, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde_json::json;

use crate::chain::{decide, observe};
use crate::event::{Event, MAX_BODY_BYTES};
use crate::hookset::HookSet;
use crate::runner::Engine;

/// Shared state of the server: the engine and the hook set currently served.
pub struct AppState {
    pub engine: Engine,
    hooks: RwLock<Option<Arc<HookSet>>>,
}

impl AppState {
    /// A state with no hooks yet (not ready).
    pub fn new(engine: Engine) -> Arc<AppState> {
        Arc::new(AppState {
            engine,
            hooks: RwLock::new(None),
        })
    }

    /// The hook set served now, if any. The lock is held only to clone an `Arc`.
    pub fn hooks(&self) -> Option<Arc<HookSet>> {
        self.hooks.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Replaces the hook set served (atomically for readers). The outbox keeps the new
    /// hooks' counters first, so no run on them goes uncounted.
    pub fn set_hooks(&self, set: HookSet) {
        self.engine.outbox.register(&set);
        self.engine.metrics.snapshot_version.set(set.version as i64);
        self.engine.metrics.hooks_loaded.set(set.len() as i64);
        *self.hooks.write().unwrap_or_else(|p| p.into_inner()) = Some(Arc::new(set));
    }
}

/// Deadline for a client to send a request's headers (slowloris guard).
pub const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(5);
/// Deadline for a client to send a request's body once its headers arrived.
pub const BODY_READ_TIMEOUT: Duration = Duration::from_secs(10);

/// Serves `router` on `listener` until `shutdown` fires, then lets in-flight requests
/// finish. Unlike `axum::serve`, a client that sends its headers slower than
/// [`HEADER_READ_TIMEOUT`] is disconnected (the handler bounds body reads by
/// [`BODY_READ_TIMEOUT`]): a dispatcher on every tool call must not be held by idle
/// sockets.
pub async fn serve(
    listener: tokio::net::TcpListener,
    router: Router,
    shutdown: tokio_util::sync::CancellationToken,
) -> std::io::Result<()> {
    use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
    use hyper_util::server::conn::auto::Builder;
    use hyper_util::service::TowerToHyperService;

    let mut builder = Builder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(HEADER_READ_TIMEOUT);
    let builder = builder.http1_only();
    let graceful = hyper_util::server::graceful::GracefulShutdown::new();
    loop {
        let (stream, _peer) = tokio::select! {
            _ = shutdown.cancelled() => break,
            accepted = listener.accept() => match accepted {
                Ok(a) => a,
                Err(e) => {
                    // Out of file descriptors and the like: back off, keep serving.
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        let _ = stream.set_nodelay(true);
        let service = TowerToHyperService::new(router.clone());
        let conn = builder
            .serve_connection(TokioIo::new(stream), service)
            .into_owned();
        let conn = graceful.watch(conn);
        tokio::spawn(async move {
            if let Err(e) = conn.await {
                tracing::debug!(error = %e, "connection ended with an error");
            }
        });
    }
    tokio::select! {
        _ = graceful.shutdown() => {}
        _ = tokio::time::sleep(Duration::from_secs(15)) => tracing::warn!("connections still open after 15 s; exiting"),
    }
    Ok(())
}

/// The router of every route above.
pub fn router(state: Arc<AppState>) -> Router {
    Router::new()
        .route("/v1/dispatch", post(dispatch))
        .route("/v1/hooks", get(list_hooks))
        .route("/healthz", get(|| async { "ok" }))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics))
        .layer(DefaultBodyLimit::max(MAX_BODY_BYTES))
        .with_state(state)
}

fn error(status: StatusCode, field: &str, message: String) -> Response {
    (
        status,
        axum::Json(json!({"error": message, "field": field})),
    )
        .into_response()
}

async fn dispatch(State(state): State<Arc<AppState>>, body: axum::body::Body) -> Response {
    let body = match tokio::time::timeout(
        BODY_READ_TIMEOUT,
        axum::body::to_bytes(body, MAX_BODY_BYTES),
    )
    .await
    {
        Ok(Ok(b)) => b,
        Ok(Err(e)) => {
            // axum reports the size cap as a `LengthLimitError` ("length limit exceeded").
            let too_large = e.to_string().contains("length limit");
            return if too_large {
                error(
                    StatusCode::PAYLOAD_TOO_LARGE,
                    "body",
                    format!("body: larger than {MAX_BODY_BYTES} bytes"),
                )
            } else {
                error(StatusCode::BAD_REQUEST, "body", format!("body: {e}"))
            };
        }
        Err(_) => {
            return error(
                StatusCode::REQUEST_TIMEOUT,
                "body",
                format!(
                    "body: not received within {} s",
                    BODY_READ_TIMEOUT.as_secs()
                ),
            );
        }
    };
    let Some(set) = state.hooks() else {
        return error(
            StatusCode::SERVICE_UNAVAILABLE,
            "",
            "no hooks loaded yet; treat as block".into(),
        );
    };
    let event = match Event::parse(&body) {
        Ok(e) => e,
        Err(e) => {
            let status = StatusCode::from_u16(e.status()).unwrap_or(StatusCode::BAD_REQUEST);
            let field = match &e {
                crate::event::EventError::Invalid { field, .. }
                | crate::event::EventError::TooLarge { field, .. } => field.clone(),
            };
            return error(status, &field, e.to_string());
        }
    };
    let decision = if event.event.is_blocking() {
        decide(&state.engine, &set, event).await
    } else {
        observe(&state.engine, set, event).0
    };
    axum::Json(decision).into_response()
}

async fn list_hooks(State(state): State<Arc<AppState>>) -> Response {
    match state.hooks() {
        None => error(
            StatusCode::SERVICE_UNAVAILABLE,
            "",
            "no hooks loaded yet".into(),
        ),
        Some(set) => {
            let mut hooks: Vec<_> = set
                .iter()
                .map(|h| json!({"hook": h.key, "uid": h.uid, "generation": h.generation, "event": h.spec.event, "handler": h.spec.handler.type_.as_str(), "priority": h.spec.priority}))
                .collect();
            hooks.sort_by(|a, b| a["hook"].as_str().cmp(&b["hook"].as_str()));
            axum::Json(json!({"version": set.version, "hooks": hooks})).into_response()
        }
    }
}

async fn readyz(State(state): State<Arc<AppState>>) -> Response {
    match state.hooks() {
        Some(set) => axum::Json(json!({"ready": true, "version": set.version, "hooks": set.len()}))
            .into_response(),
        None => (
            StatusCode::SERVICE_UNAVAILABLE,
            axum::Json(json!({"ready": false})),
        )
            .into_response(),
    }
}

async fn metrics(State(state): State<Arc<AppState>>) -> Response {
    (
        [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
        state.engine.metrics.render(),
    )
        .into_response()
}

#[cfg(test)]
mod tests;
