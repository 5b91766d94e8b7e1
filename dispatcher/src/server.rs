//! The dispatcher's HTTP API (DESIGN "Dispatch API").
//!
//! - `POST /v1/dispatch`: an [`Event`] → a [`crate::chain::Decision`]. 400 for invalid
//!   input, 413 over a cap (both `{"error", "field"}`), 503 before any hooks are
//!   loaded (the caller must treat it as `block`).
//! - `GET /v1/hooks`: the hooks served and the version of their source.
//! - `GET /v1/executions`, `GET /v1/executions/{id}`: audit history ([`executions`]).
//! - `POST /v1/test`: dry run of one hook on a sample event ([`dry_run`]; admin token,
//!   [`admin`]).
//! - `GET /healthz`, `GET /readyz` (200 once a snapshot or hooks file is loaded — with
//!   the audit trail's state in `audit`, `degraded` when its spool is full — else
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
    /// `--admin-token-file`: what `POST /v1/test` and error detail reads ask for.
    admin_token: std::sync::OnceLock<admin::AdminToken>,
}

impl AppState {
    /// A state with no hooks yet (not ready).
    pub fn new(engine: Engine) -> Arc<AppState> {
        Arc::new(AppState {
            engine,
            hooks: RwLock::new(None),
            admin_token: std::sync::OnceLock::new(),
        })
    }

    /// The hook set served now, if any. The lock is held only to clone an `Arc`.
    pub fn hooks(&self) -> Option<Arc<HookSet>> {
        self.hooks.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Sets the admin token (once, at start; a second call is ignored).
    pub fn set_admin_token(&self, token: admin::AdminToken) {
        let _ = self.admin_token.set(token);
    }

    /// The admin token, `None` when none is configured.
    pub fn admin_token(&self) -> Option<&admin::AdminToken> {
        self.admin_token.get()
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
        .route("/v1/executions", get(executions::list))
        .route("/v1/executions/{id}", get(executions::get_one))
        .route("/v1/test", post(dry_run::test))
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

/// Reads a request body of at most [`MAX_BODY_BYTES`] within [`BODY_READ_TIMEOUT`].
/// Errors are the answer to send: 413 over the cap, 408 too slow, 400 otherwise (all
/// `{"error", "field": "body"}`).
async fn read_body(body: axum::body::Body) -> Result<bytes::Bytes, Response> {
    match tokio::time::timeout(
        BODY_READ_TIMEOUT,
        axum::body::to_bytes(body, MAX_BODY_BYTES),
    )
    .await
    {
        Ok(Ok(b)) => Ok(b),
        Ok(Err(e)) => {
            // axum reports the size cap as a `LengthLimitError` ("length limit exceeded").
            let too_large = e.to_string().contains("length limit");
            Err(if too_large {
                error(
                    StatusCode::PAYLOAD_TOO_LARGE,
                    "body",
                    format!("body: larger than {MAX_BODY_BYTES} bytes"),
                )
            } else {
                error(StatusCode::BAD_REQUEST, "body", format!("body: {e}"))
            })
        }
        Err(_) => Err(error(
            StatusCode::REQUEST_TIMEOUT,
            "body",
            format!(
                "body: not received within {} s",
                BODY_READ_TIMEOUT.as_secs()
            ),
        )),
    }
}

async fn dispatch(State(state): State<Arc<AppState>>, request: axum::extract::Request) -> Response {
    let (parts, body) = request.into_parts();
    // The caller's span (W3C `traceparent`), read only when tracing is on (CONTRACT §8.1).
    let trace_parent = state.engine.telemetry.extract(&parts.headers);
    let body = match read_body(body).await {
        Ok(b) => b,
        Err(refused) => return refused,
    };
    let Some(set) = state.hooks() else {
        return error(
            StatusCode::SERVICE_UNAVAILABLE,
            "",
            "no hooks loaded yet; treat as block".into(),
        );
    };
    let event = match Event::parse(&body) {
        Ok(e) => Event { trace_parent, ..e },
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

/// Ready once hooks are loaded. The audit trail's state is in the body (`audit.state`:
/// `ok`, `spooling`, or `degraded` when the spool is full or rows were dropped) but never
/// makes the dispatcher unready: every replica shares the database, so a 503 would take
/// all of them out of service during a database outage and turn a gap in the audit trail
/// into agents without decisions. The gap is loud instead (metric, log, this body).
async fn readyz(State(state): State<Arc<AppState>>) -> Response {
    match state.hooks() {
        Some(set) => {
            let mut body = json!({"ready": true, "version": set.version, "hooks": set.len()});
            if let Some(audit) = state.engine.audit.status() {
                body["audit"] = json!(audit);
            }
            axum::Json(body).into_response()
        }
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

pub mod admin;
mod dry_run;
mod executions;
#[cfg(test)]
mod tests;
