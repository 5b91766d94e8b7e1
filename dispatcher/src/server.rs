//! The dispatcher's HTTP API (DESIGN "Dispatch API").
//!
//! - `POST /v1/dispatch`: an [`Event`] → a [`crate::chain::Decision`], from an
//!   authenticated caller ([`crate::identity`]): 401 without a valid credential, 403
//!   naming `tenant_id` for a tenant the caller may not act for (the event's tenant is
//!   the one chosen there). 400 for invalid input, 413 over a cap (all `{"error",
//!   "field"}`), 503 before any hooks are loaded (the caller must treat it as `block`). A blocking event's chain runs in a
//!   task of its own that outlives the connection (CONTRACT §10.3): a client that goes
//!   away does not cut a hook run short, and every run that started writes its audit row.
//!
//! Bounds of the port (CONTRACT §10.2): at most [`AppState::max_requests`] requests in
//! flight (`--max-concurrent-requests`); past it a request is answered 503 at once, not
//! queued (`{"error", "field": ""}`, counted in `agenthooks_requests_shed_total`), except
//! the liveness and metrics probes. A body is refused at [`MAX_BODY_BYTES`] before it is
//! parsed: a `Content-Length` over it gets 413 without reading a byte, a chunked body
//! stops being read at the cap.
//! - `GET /v1/hooks`: the hooks served and the version of their source, and
//!   `unavailable`: the hooks this dispatcher could not load (`hook`, `uid`,
//!   `generation`, `event`, `reason: HookUnavailable`, `error`), whose blocking events
//!   are answered `block` (CONTRACT §10.4).
//! - `GET /v1/executions`, `GET /v1/executions/{id}`: audit history ([`executions`]).
//! - `POST /v1/test`: dry run of one hook on a sample event ([`dry_run`]).
//!
//!   Both authorized (CONTRACT §9.5, [`access`]) by Kubernetes RBAC on the caller's
//!   identity with `--kubernetes-callers`, by the admin token ([`admin`]) standalone.
//! - `GET /healthz`, `GET /readyz` (200 once a snapshot or hooks file is loaded — with
//!   the audit trail's state in `audit`, `degraded` when its spool is full — else
//!   503; 503 with `draining: true` once shutting down, while decisions are still
//!   served), `GET /metrics`.
//! - `/ui/`: the console, HTML for people ([`crate::console`]).
//! - `GET /openapi.json`: the OpenAPI 3.1 document of every route ([`openapi`]), no
//!   credential needed; committed as `docs/openapi.json`.
//!
//! Every 4xx body is [`bodies::ClientError`] `{"error", "field"}` with a non-empty
//! `field` (`path` for an unknown route, `method` for a method a route does not take);
//! 5xx bodies are [`bodies::ServerError`] (`field: ""`).

use std::sync::{Arc, RwLock};
use std::time::Duration;

use axum::Router;
use axum::extract::{DefaultBodyLimit, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};

use crate::chain::{decide, observe};
use crate::dialect::{self, CallOptions, Dialect};
use crate::event::{Event, MAX_BODY_BYTES};
use crate::hookset::HookSet;
use crate::identity::{Authenticator, Refusal};
use crate::runner::Engine;
use outlive::finish_detached;

/// Requests one port serves at once by default (`--max-concurrent-requests`).
pub const DEFAULT_MAX_CONCURRENT_REQUESTS: usize = 1024;

/// Shared state of the server: the engine and the hook set currently served.
pub struct AppState {
    pub engine: Engine,
    hooks: RwLock<Option<Arc<HookSet>>>,
    /// `--admin-token-file`: what `POST /v1/test` and history reads ask for in standalone
    /// mode (with `--kubernetes-callers`, RBAC decides and it is never consulted).
    admin_token: std::sync::OnceLock<admin::AdminToken>,
    /// Who may call `/v1/dispatch`, for which tenants (CONTRACT §9); unset: nobody.
    authenticator: std::sync::OnceLock<Authenticator>,
    /// One permit per request in flight on the port (CONTRACT §10.2).
    request_slots: Arc<tokio::sync::Semaphore>,
    max_requests: usize,
    /// Shutting down: `/readyz` answers 503 while requests are still served.
    draining: std::sync::atomic::AtomicBool,
    /// The sub-agent tree of each session seen on the native hook routes.
    pub sessions: dialect::depth::SessionTree,
    /// Refused stops per session (stop control's bound, issue 16).
    pub stops: crate::stops::StopCounts,
    /// `--kubernetes-callers`: how the console reaches the API server as a person.
    console_kube: std::sync::OnceLock<kube::Config>,
    /// The port serves TLS (the console's cookies get `Secure`).
    tls: std::sync::atomic::AtomicBool,
}

impl AppState {
    /// A state with no hooks yet (not ready), serving at most
    /// [`DEFAULT_MAX_CONCURRENT_REQUESTS`] requests at once.
    pub fn new(engine: Engine) -> Arc<AppState> {
        AppState::with_request_limit(engine, DEFAULT_MAX_CONCURRENT_REQUESTS)
    }

    /// A state with no hooks yet serving at most `max_requests` (at least 1) requests at
    /// once; the excess is answered 503 at once.
    pub fn with_request_limit(engine: Engine, max_requests: usize) -> Arc<AppState> {
        let max_requests = max_requests.clamp(1, tokio::sync::Semaphore::MAX_PERMITS);
        Arc::new(AppState {
            engine,
            hooks: RwLock::new(None),
            admin_token: std::sync::OnceLock::new(),
            authenticator: std::sync::OnceLock::new(),
            request_slots: Arc::new(tokio::sync::Semaphore::new(max_requests)),
            max_requests,
            draining: std::sync::atomic::AtomicBool::new(false),
            sessions: Default::default(),
            stops: Default::default(),
            console_kube: std::sync::OnceLock::new(),
            tls: std::sync::atomic::AtomicBool::new(false),
        })
    }

    /// Requests served at once at most; the excess gets 503.
    pub fn max_requests(&self) -> usize {
        self.max_requests
    }

    /// Marks the server as shutting down: `/readyz` answers 503 (`draining`) from now on,
    /// everything else is served as before, so load balancers stop sending requests
    /// before the port closes.
    pub fn start_draining(&self) {
        self.draining
            .store(true, std::sync::atomic::Ordering::Relaxed);
    }

    /// Whether [`AppState::start_draining`] was called.
    pub fn is_draining(&self) -> bool {
        self.draining.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Waits until no request holds a slot (blocking chains whose client went away
    /// included), at most `within`; `false` when some were still running. Called after
    /// the server drained on shutdown, so their hook runs reach the audit queue before
    /// it is flushed.
    pub async fn wait_idle(&self, within: Duration) -> bool {
        let all = u32::try_from(self.max_requests).unwrap_or(u32::MAX);
        tokio::time::timeout(within, self.request_slots.acquire_many(all))
            .await
            .is_ok_and(|p| p.is_ok())
    }

    /// The hook set served now, if any. The lock is held only to clone an `Arc`.
    pub fn hooks(&self) -> Option<Arc<HookSet>> {
        self.hooks.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Sets how the console reaches the API server as the signed-in person (once, at
    /// start, with `--kubernetes-callers`; before [`router`] is built).
    pub fn set_console_kube(&self, config: kube::Config) {
        let _ = self.console_kube.set(config);
    }

    /// The API server config of [`AppState::set_console_kube`], if set.
    pub fn console_kube_config(&self) -> Option<kube::Config> {
        self.console_kube.get().cloned()
    }

    /// Marks the port as serving TLS (before [`router`] is built).
    pub fn set_serves_tls(&self) {
        self.tls.store(true, std::sync::atomic::Ordering::Relaxed);
    }

    /// Whether the port serves TLS.
    pub fn serves_tls(&self) -> bool {
        self.tls.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Sets the admin token (once, at start; a second call is ignored).
    pub fn set_admin_token(&self, token: admin::AdminToken) {
        let _ = self.admin_token.set(token);
    }

    /// Sets how callers are authenticated (once, at start; a second call is ignored).
    /// Until it is set, every dispatch is refused (401).
    pub fn set_authenticator(&self, authenticator: Authenticator) {
        let _ = self.authenticator.set(authenticator);
    }

    /// How callers are authenticated, `None` before [`AppState::set_authenticator`].
    pub fn authenticator(&self) -> Option<&Authenticator> {
        self.authenticator.get()
    }

    /// The admin token, `None` when none is configured.
    pub fn admin_token(&self) -> Option<&admin::AdminToken> {
        self.admin_token.get()
    }

    /// Replaces the hook set served (atomically for readers). The outbox keeps the new
    /// hooks' counters first, so no run on them goes uncounted.
    pub fn set_hooks(&self, set: impl Into<Arc<HookSet>>) {
        let set: Arc<HookSet> = set.into();
        self.engine.outbox.register(&set);
        self.engine.metrics.snapshot_version.set(set.version as i64);
        self.engine.metrics.hooks_loaded.set(set.len() as i64);
        self.engine
            .metrics
            .hooks_unavailable
            .set(set.unavailable().len() as i64);
        *self.hooks.write().unwrap_or_else(|p| p.into_inner()) = Some(set);
    }
}

/// Deadline for a client to send a request's headers (slowloris guard).
pub const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(5);
/// Deadline for a client to send a request's body once its headers arrived.
pub const BODY_READ_TIMEOUT: Duration = Duration::from_secs(10);

/// Serves `router` on `listener` (plain, or TLS with `--tls-cert-file`: see
/// [`agenthooks_tls::Incoming`], whose handshakes run side by side under a timeout) until
/// `shutdown` fires, then lets in-flight requests finish. Unlike `axum::serve`, a client
/// that sends its headers slower than [`HEADER_READ_TIMEOUT`] is disconnected (the
/// handler bounds body reads by [`BODY_READ_TIMEOUT`]): a dispatcher on every tool call
/// must not be held by idle sockets.
pub async fn serve(
    mut listener: agenthooks_tls::Incoming,
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
        // Accept errors (out of file descriptors and the like) and failed TLS handshakes
        // are logged and skipped inside; `TCP_NODELAY` is set there.
        let (stream, _peer) = tokio::select! {
            _ = shutdown.cancelled() => break,
            accepted = listener.accept_next() => accepted,
        };
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

/// The router of every route above, and the console under `/ui` ([`crate::console`]).
pub fn router(state: Arc<AppState>) -> Router {
    // The console calls the API routes in process as the signed-in person; those calls
    // already hold the request's slot, so they skip the port's layers.
    let console = crate::console::router(
        Arc::clone(&state),
        api_routes().with_state(Arc::clone(&state)),
    );
    api_routes()
        .nest_service("/ui", console)
        .fallback(unknown_route)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(axum::middleware::from_fn_with_state(
            Arc::clone(&state),
            limit_concurrency,
        ))
        .layer(DefaultBodyLimit::max(MAX_BODY_BYTES))
        .with_state(state)
}

/// The API's routes, without the port's layers.
fn api_routes() -> Router<Arc<AppState>> {
    Router::new()
        .route("/v1/dispatch", post(dispatch))
        .route("/v1/hooks/{dialect}", post(native_hook))
        .route("/v1/hooks", get(list_hooks))
        .route("/v1/executions", get(executions::list))
        .route("/v1/executions/{id}", get(executions::get_one))
        .route("/v1/test", post(dry_run::test))
        .route("/healthz", get(|| async { "ok" }))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics))
        .route("/openapi.json", get(openapi::serve))
}

/// A request's slot among the port's [`AppState::max_requests`]. `dispatch` moves a
/// clone into the task that runs the chain, so a request whose client went away holds
/// its slot until its hooks finished: disconnecting cannot pile up unbounded work.
#[derive(Clone)]
struct RequestSlot(#[allow(dead_code)] Arc<tokio::sync::OwnedSemaphorePermit>);

/// Takes a slot for the request or answers 503 at once (CONTRACT §10.2; callers treat
/// 503 as `block`). `/healthz` and `/metrics` are not limited: a liveness probe failing
/// under load would restart a dispatcher that is only busy.
async fn limit_concurrency(
    State(state): State<Arc<AppState>>,
    mut request: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    if matches!(request.uri().path(), "/healthz" | "/metrics") {
        return next.run(request).await;
    }
    let Ok(permit) = Arc::clone(&state.request_slots).try_acquire_owned() else {
        state.engine.metrics.requests_shed.inc();
        return error(
            StatusCode::SERVICE_UNAVAILABLE,
            "",
            format!(
                "over {} concurrent requests on this port; treat as block",
                state.max_requests
            ),
        );
    };
    request
        .extensions_mut()
        .insert(RequestSlot(Arc::new(permit)));
    next.run(request).await
}

/// The answer `{"error": message, "field": field}`: a [`bodies::ClientError`] for a 4xx,
/// whose `field` must name the part of the request at fault, else a
/// [`bodies::ServerError`].
fn error(status: StatusCode, field: &str, message: String) -> Response {
    if status.is_client_error() {
        debug_assert!(
            !field.is_empty(),
            "a {status} answer names the field at fault"
        );
        let body = bodies::ClientError {
            error: message,
            field: field.to_owned(),
            reason: None,
            errors: None,
        };
        return (status, axum::Json(body)).into_response();
    }
    let body = bodies::ServerError {
        error: message,
        field: field.to_owned(),
    };
    (status, axum::Json(body)).into_response()
}

/// 404 `field: path` for a route that does not exist.
async fn unknown_route(uri: axum::http::Uri) -> Response {
    let path: String = uri.path().chars().take(200).collect();
    error(
        StatusCode::NOT_FOUND,
        "path",
        format!("path: no route {path:?} (GET /openapi.json lists them)"),
    )
}

/// 405 `field: method` for a method the route does not take (axum adds `Allow`).
async fn method_not_allowed(method: axum::http::Method) -> Response {
    error(
        StatusCode::METHOD_NOT_ALLOWED,
        "method",
        format!(
            "method: this route does not take {method} (GET /openapi.json lists what it takes)"
        ),
    )
}

fn body_too_large() -> Response {
    error(
        StatusCode::PAYLOAD_TOO_LARGE,
        "body",
        format!("body: larger than {MAX_BODY_BYTES} bytes"),
    )
}

/// Reads a request body of at most [`MAX_BODY_BYTES`] within [`BODY_READ_TIMEOUT`].
/// A `Content-Length` over the cap is refused before a byte is read; a chunked body is
/// read up to the cap and no further. Errors are the answer to send: 413 over the cap,
/// 408 too slow, 400 otherwise (all `{"error", "field": "body"}`).
async fn read_body(
    headers: &axum::http::HeaderMap,
    body: axum::body::Body,
) -> Result<bytes::Bytes, Response> {
    let declared = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok());
    if declared.is_some_and(|n| n > MAX_BODY_BYTES as u64) {
        return Err(body_too_large());
    }
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
                body_too_large()
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

/// The `WWW-Authenticate` challenge of every 401.
pub const WWW_AUTHENTICATE: &str = "Bearer realm=\"agenthooks\"";

/// The answer to a refused caller (`{"error", "field"}`; a 401 says how to authenticate).
fn refused(r: Refusal) -> Response {
    let mut response = error(r.status, r.field, r.message);
    if r.status == StatusCode::UNAUTHORIZED {
        response.headers_mut().insert(
            header::WWW_AUTHENTICATE,
            header::HeaderValue::from_static(WWW_AUTHENTICATE),
        );
    }
    response
}

async fn dispatch(State(state): State<Arc<AppState>>, request: axum::extract::Request) -> Response {
    let (parts, body) = request.into_parts();
    let (identity, trace_parent, body, set) = match admit(&state, &parts, body).await {
        Ok(admitted) => admitted,
        Err(refused) => return refused,
    };
    let event = match Event::parse(&body) {
        Ok(e) => e,
        Err(e) => return event_error(e),
    };
    let event = match authorize(&state, identity, &set, &event.tenant_id).await {
        Ok(a) => authorized_event(event, a, trace_parent),
        Err(refused) => return refused,
    };
    let accepts_ask = event.accepts_ask();
    match run(&state, &parts, set, event).await {
        Ok(decision) => axum::Json(decision.for_caller(accepts_ask)).into_response(),
        Err(failed) => failed,
    }
}

/// What every decision route does before it reads the event: the caller's credential
/// (before a byte of the body is read, CONTRACT §9.1), its span, the body within its
/// bounds, and hooks to decide with (503 "treat as block" before any are loaded).
async fn admit(
    state: &Arc<AppState>,
    parts: &axum::http::request::Parts,
    body: axum::body::Body,
) -> Result<
    (
        crate::identity::Identity,
        Option<opentelemetry::trace::SpanContext>,
        bytes::Bytes,
        Arc<HookSet>,
    ),
    Response,
> {
    let Some(authenticator) = state.authenticator() else {
        return Err(refused(Refusal::unauthenticated(
            "this dispatcher has no caller authentication configured",
        )));
    };
    let identity = authenticator
        .authenticate(&parts.headers)
        .await
        .map_err(refused)?;
    // The caller's span (W3C `traceparent`), read only when tracing is on (CONTRACT §8.1).
    let trace_parent = state.engine.telemetry.extract(&parts.headers);
    let body = read_body(&parts.headers, body).await?;
    let Some(set) = state.hooks() else {
        return Err(error(
            StatusCode::SERVICE_UNAVAILABLE,
            "",
            "no hooks loaded yet; treat as block".into(),
        ));
    };
    Ok((identity, trace_parent, body, set))
}

/// 400 or 413 naming the field of an event that could not be read.
fn event_error(e: crate::event::EventError) -> Response {
    let status = StatusCode::from_u16(e.status()).unwrap_or(StatusCode::BAD_REQUEST);
    let field = match &e {
        crate::event::EventError::Invalid { field, .. }
        | crate::event::EventError::TooLarge { field, .. } => field.clone(),
    };
    error(status, &field, e.to_string())
}

/// The tenant the caller may act for (CONTRACT §9.2), asked for as `requested`: refused
/// before any hook runs, so nothing is written in another tenant's name.
async fn authorize(
    state: &AppState,
    identity: crate::identity::Identity,
    set: &HookSet,
    requested: &str,
) -> Result<crate::identity::Authorized, Response> {
    let authenticator = state
        .authenticator()
        .expect("admit checked an authenticator is configured");
    authenticator
        .authorize(identity, requested, &set.tenants)
        .await
        .map_err(refused)
}

/// The event as run: the authorized tenant and caller, and the caller's span.
fn authorized_event(
    event: Event,
    authorized: crate::identity::Authorized,
    trace_parent: Option<opentelemetry::trace::SpanContext>,
) -> Event {
    Event {
        trace_parent,
        tenant_id: authorized.tenant,
        caller: Some(authorized.caller),
        ..event
    }
}

/// Runs the chain for a blocking event, or starts the non-blocking path.
async fn run(
    state: &Arc<AppState>,
    parts: &axum::http::request::Parts,
    set: Arc<HookSet>,
    mut event: Event,
) -> Result<crate::chain::Decision, Response> {
    use agenthooks_crds::HookEvent;
    let mut waits = crate::chain::waits_for(&set, &event);
    // Stop control (issue 16): a new prompt that goes through starts the session's count
    // again (below); a stop past the bound is let through, its hooks run in the background.
    let prompt = (event.event == HookEvent::UserPromptSubmit)
        .then(|| (event.tenant_id.clone(), event.session_id.clone()));
    let stop = matches!(event.event, HookEvent::Stop | HookEvent::SubagentStop);
    if stop {
        let count = state
            .stops
            .count(&event.tenant_id, &event.session_id, event.event);
        event.stop_count = Some(count);
        if waits && !crate::stops::may_refuse(count, state.stops.limit()) {
            waits = false;
            state.engine.metrics.stop_bound_reached.inc();
            tracing::info!(
                target: "hooks.stop_bound_reached",
                tenant = %event.tenant_id, session_id = %event.session_id, event = %event.event,
                stop_count = count, limit = state.stops.limit(),
                "hooks.stop_bound_reached: this session's stop was refused {count} times since its last prompt; stopping is allowed"
            );
        }
    }
    if !waits {
        return Ok(observe(&state.engine, set, event).0);
    }
    let refused_stop = stop.then(|| {
        (
            event.tenant_id.clone(),
            event.session_id.clone(),
            event.event,
        )
    });
    // Detached (CONTRACT §10.3): if the client goes away, this handler is dropped but
    // the chain runs on, so every hook run that started finishes, settles its budget
    // and writes its audit row. It keeps the request's slot.
    let slot = parts.extensions.get::<RequestSlot>().cloned();
    let detached = Arc::clone(state);
    let chain = finish_detached(async move {
        let _slot = slot;
        decide(&detached.engine, &set, event).await
    });
    let decision = chain.await.map_err(|e| {
        tracing::error!(error = %e, "the decision task failed");
        error(
            StatusCode::INTERNAL_SERVER_ERROR,
            "",
            "the decision failed; treat as block".into(),
        )
    })?;
    if let Some((tenant, session, kind)) = refused_stop
        && decision.decision == crate::chain::Verdict::Block
    {
        state.stops.refused(&tenant, &session, kind);
    }
    if let Some((tenant, session)) = prompt
        && decision.decision == crate::chain::Verdict::Allow
    {
        state.stops.prompted(&tenant, &session);
    }
    Ok(decision)
}

/// `POST /v1/hooks/{dialect}`: a runtime's own hook payload, answered in its own shape
/// ([`crate::dialect`]). Identity, bounds and failures as `/v1/dispatch` (non-2xx, which
/// the runtime's documented fail-closed setting or the shim turns into a refusal). The
/// query may name `event` (for payloads without one), `agent_id` and `tenant_id`
/// ([`crate::dialect::CallOptions`]); any other key is a 400 naming it.
async fn native_hook(
    State(state): State<Arc<AppState>>,
    dialect: Result<axum::extract::Path<String>, axum::extract::rejection::PathRejection>,
    request: axum::extract::Request,
) -> Response {
    let dialect = dialect.map(|p| p.0).unwrap_or_default();
    let Some(dialect) = Dialect::parse(&dialect) else {
        let known: Vec<&str> = Dialect::ALL.iter().map(|d| d.as_str()).collect();
        return error(
            StatusCode::NOT_FOUND,
            "dialect",
            format!("dialect: {dialect:?} is not one of {}", known.join(", ")),
        );
    };
    let options = match call_options(request.uri().query().unwrap_or("")) {
        Ok(o) => o,
        Err((field, message)) => return error(StatusCode::BAD_REQUEST, &field, message),
    };
    let (parts, body) = request.into_parts();
    let (identity, trace_parent, body, set) = match admit(&state, &parts, body).await {
        Ok(admitted) => admitted,
        Err(refused) => return refused,
    };
    let mut call = match dialect::parse(dialect, &body, &options) {
        Ok(c) => c,
        Err(e) => return event_error(e),
    };
    let Some(event) = call.event.take() else {
        // No counterpart among our events: nothing runs, no opinion — for a caller that
        // may act for the tenant it names, as any other call.
        let requested = options.tenant_id.as_deref().unwrap_or("");
        if let Err(refused) = authorize(&state, identity, &set, requested).await {
            return refused;
        }
        count_native(&state, dialect, "no_opinion");
        return axum::Json(dialect::answer(&call, &crate::chain::Decision::allow("")))
            .into_response();
    };
    let mut event = match authorize(&state, identity, &set, &event.tenant_id).await {
        Ok(a) => authorized_event(event, a, trace_parent),
        Err(refused) => return refused,
    };
    // No runtime sends a depth: the session's sub-agent tree gives it.
    let runtime_agent = call.runtime_agent.as_deref();
    event.depth = state.sessions.depth_of(
        &event.tenant_id,
        &event.session_id,
        event.event,
        runtime_agent,
    );
    let spawn = (event.event == agenthooks_crds::HookEvent::PreToolUse
        && event
            .tool
            .as_ref()
            .is_some_and(|t| t.kind == agenthooks_crds::tool::ToolKind::Subagent))
    .then(|| {
        (
            event.tenant_id.clone(),
            event.session_id.clone(),
            event.depth,
        )
    });
    let decision = match run(&state, &parts, set, event).await {
        Ok(d) => d,
        Err(failed) => return failed,
    };
    if let Some((tenant, session, depth)) = spawn
        && decision.decision == crate::chain::Verdict::Allow
    {
        state.sessions.spawn_allowed(&tenant, &session, depth);
    }
    let answer = match decision.decision {
        crate::chain::Verdict::Allow => "allow",
        crate::chain::Verdict::Block => "block",
        crate::chain::Verdict::Ask => "ask",
    };
    count_native(&state, dialect, answer);
    axum::Json(dialect::answer(&call, &decision)).into_response()
}

fn count_native(state: &AppState, dialect: Dialect, answer: &str) {
    state
        .engine
        .metrics
        .native_hook_calls
        .with_label_values(&[dialect.as_str(), answer])
        .inc();
}

/// The query of a native hook route: `event`, `agent_id`, `tenant_id`, each at most once.
/// Errors are (field, message) for a 400.
fn call_options(query: &str) -> Result<CallOptions, (String, String)> {
    let mut options = CallOptions::default();
    for (key, value) in url::form_urlencoded::parse(query.as_bytes()) {
        let slot = match key.as_ref() {
            "event" => &mut options.event,
            "agent_id" => &mut options.agent_id,
            "tenant_id" => &mut options.tenant_id,
            "ask" => &mut options.ask,
            other => {
                return Err((
                    "query".into(),
                    format!(
                        "query: unknown parameter {other:?}; this route takes event, agent_id, tenant_id and ask"
                    ),
                ));
            }
        };
        if slot.replace(value.into_owned()).is_some() {
            return Err((key.to_string(), format!("{key}: given more than once")));
        }
    }
    Ok(options)
}

async fn list_hooks(State(state): State<Arc<AppState>>) -> Response {
    match state.hooks() {
        None => error(
            StatusCode::SERVICE_UNAVAILABLE,
            "",
            "no hooks loaded yet".into(),
        ),
        Some(set) => axum::Json(bodies::HookList::of(&set)).into_response(),
    }
}

/// Ready once hooks are loaded. The audit trail's state is in the body (`audit.state`:
/// `ok`, `spooling`, or `degraded` when the spool is full or rows were dropped) but never
/// makes the dispatcher unready: every replica shares the database, so a 503 would take
/// all of them out of service during a database outage and turn a gap in the audit trail
/// into agents without decisions. The gap is loud instead (metric, log, this body).
/// Once shutting down ([`AppState::start_draining`]) it answers 503 `{"ready": false,
/// "draining": true}`.
async fn readyz(State(state): State<Arc<AppState>>) -> Response {
    use bodies::Readiness;
    if state.is_draining() {
        let body = Readiness {
            draining: true,
            ..Readiness::default()
        };
        return (StatusCode::SERVICE_UNAVAILABLE, axum::Json(body)).into_response();
    }
    let Some(set) = state.hooks() else {
        return (
            StatusCode::SERVICE_UNAVAILABLE,
            axum::Json(Readiness::default()),
        )
            .into_response();
    };
    let (callers, warning) = match state.authenticator() {
        Some(a) if a.is_anonymous() => (
            "anonymous",
            Some("--allow-anonymous: callers are not authenticated and may act for any tenant"),
        ),
        Some(a) => (a.mode(), None),
        None => ("none", None),
    };
    axum::Json(Readiness {
        ready: true,
        version: Some(set.version),
        hooks: Some(set.len()),
        callers: Some(callers),
        warning,
        audit: state.engine.audit.status(),
        draining: false,
    })
    .into_response()
}

async fn metrics(State(state): State<Arc<AppState>>) -> Response {
    (
        [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
        state.engine.metrics.render(),
    )
        .into_response()
}

mod access;
pub use access::Principal;
pub mod admin;
pub mod bodies;
mod dry_run;
mod executions;
#[cfg(test)]
mod native_tests;
pub mod openapi;
mod outlive;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_support;
