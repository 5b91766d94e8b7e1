//! The console (issue 14): the seed's Web UI, served by the dispatcher under `/ui/` —
//! hooks and budgets listed with their conditions, a create form, a Test panel with a
//! diff, History, and an Overview with a chart. HTML is rendered on the server
//! ([`views`]); one small script and one stylesheet are built into the binary
//! ([`assets`]), and the Content-Security-Policy allows nothing but this origin.
//!
//! Who may do what:
//! - **Standalone** (`--callers-file` or `--allow-anonymous`): the admin token
//!   (`--admin-token-file`) signs in and may do everything the admin token may do on the
//!   API. Hooks are those of the hooks files; "Apply" serves a new hook at once, in memory
//!   until the dispatcher restarts (the console never writes the files; "Download YAML"
//!   keeps it).
//! - **In a cluster** (`--kubernetes-callers`): any bearer token the API server accepts
//!   (a `kubectl create token`, an OIDC id token) signs in; the API server names the person
//!   (SelfSubjectReview). Hooks, budgets and Secrets are read, and hooks applied
//!   (server-side apply, field manager `agenthooks-console`), with the person's own token:
//!   they see and change exactly what their RBAC allows ([`kube`]). History and dry runs go
//!   through the API routes as that person ([`api`]), authorized by RBAC as any caller.
//!   HookApprovals are listed, read and answered as the person too ([`approvals`]);
//!   standalone there are none.
//!
//! Sessions live on the server ([`session`]); forms carry a CSRF token and POSTs must come
//! from this origin. A session ends on sign-out, after an hour idle, after 12 hours, when
//! its token expires, or when the API server refuses the token (back to sign-in).

pub mod api;
pub mod approvals;
pub mod assets;
pub mod catalog;
pub mod chart;
pub mod diff;
pub mod form;
mod handlers;
pub mod kube;
pub mod session;
pub mod views;

use std::sync::Arc;
use std::time::Instant;

use axum::Router;
use axum::http::{HeaderMap, HeaderValue, StatusCode, Uri, header};
use axum::response::{Html, IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use maud::Markup;

use crate::server::AppState;
use session::{Lookup, Session, Sessions};

/// One console: the dispatcher it belongs to, its API routes, its sessions.
pub struct Console {
    app: Arc<AppState>,
    api: Router,
    sessions: Sessions,
    /// In a cluster: how to reach the API server as a person.
    kube: Option<kube::KubeConsole>,
    /// Standalone applies, one at a time (each builds the next hook set from the last).
    apply_lock: tokio::sync::Mutex<()>,
}

/// The console's routes, to be nested at `/ui` (paths here are relative to it).
pub fn router(app: Arc<AppState>, api: Router) -> Router {
    let kube = app.console_kube_config().map(kube::KubeConsole::new);
    let console = Arc::new(Console {
        app,
        api,
        sessions: Sessions::default(),
        kube,
        apply_lock: tokio::sync::Mutex::new(()),
    });
    Router::new()
        .route("/", get(handlers::root))
        .route(
            "/sign-in",
            get(handlers::sign_in_page).post(handlers::sign_in),
        )
        .route("/sign-out", post(handlers::sign_out))
        .route("/hooks", get(handlers::list))
        .route(
            "/hooks/new",
            get(handlers::new_form).post(handlers::new_submit),
        )
        .route("/hooks/validate", post(handlers::validate_live))
        .route("/hooks/{namespace}/{name}", get(handlers::overview))
        .route("/hooks/{namespace}/{name}/edit", get(handlers::edit_form))
        .route(
            "/hooks/{namespace}/{name}/test",
            get(handlers::test_form).post(handlers::test_run),
        )
        .route("/hooks/{namespace}/{name}/history", get(handlers::history))
        .route("/executions/{id}", get(handlers::execution))
        .route("/approvals", get(approvals::list))
        .route(
            "/approvals/{namespace}/{id}",
            get(approvals::detail).post(approvals::decide),
        )
        .route("/assets/{file}", get(assets::serve))
        .fallback(handlers::not_found)
        .layer(axum::middleware::map_response(security_headers))
        .with_state(console)
}

/// The Content-Security-Policy of every console response: this origin's script and
/// stylesheet, nothing else (no inline code, no other origin, no framing).
pub const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'";

async fn security_headers(mut response: Response) -> Response {
    let h = response.headers_mut();
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CSP),
    );
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    // `same-origin`: a POST keeps its real `Origin` (with `no-referrer` Chromium sends
    // `Origin: null`), and no other site learns a console URL.
    h.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("same-origin"),
    );
    h.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    h.entry(header::CACHE_CONTROL)
        .or_insert(HeaderValue::from_static("no-store"));
    response
}

/// The signed-in person of a request, as an extractor: a route that takes it serves only
/// a live session, and answers anything else with the redirect to sign-in
/// ([`Console::session`]).
pub struct SignedIn(pub Arc<Session>);

impl axum::extract::FromRequestParts<Arc<Console>> for SignedIn {
    type Rejection = Response;

    async fn from_request_parts(
        parts: &mut axum::http::request::Parts,
        c: &Arc<Console>,
    ) -> Result<Self, Response> {
        c.session(&parts.headers, &parts.uri)
            .map(SignedIn)
            .map_err(IntoResponse::into_response)
    }
}

impl Console {
    /// The API server as the person of `s`: when the console runs in a cluster and they
    /// signed in with a Kubernetes token (`None` standalone, or with the admin token).
    pub(crate) fn kube_for(&self, s: &Session) -> Option<&kube::KubeConsole> {
        match (&self.kube, &s.principal) {
            (Some(kube), crate::server::Principal::Kubernetes(_)) => Some(kube),
            _ => None,
        }
    }

    /// The session of this request, or the redirect to sign-in (with `next` = this page,
    /// and why when the session ended).
    fn session(&self, headers: &HeaderMap, uri: &Uri) -> Result<Arc<Session>, Redirect> {
        let next = format!("/ui{}", uri.path_and_query().map_or("/", |p| p.as_str()));
        let why =
            match session::cookie_value(headers).map(|id| self.sessions.get(&id, Instant::now())) {
                Some(Lookup::Live(s)) => return Ok(s),
                Some(Lookup::Ended) => "ended",
                Some(Lookup::Unknown) | None => "required",
            };
        Err(sign_in_redirect(&next, Some(why)))
    }

    /// Ends the request's session (its token was refused by the API server) and sends
    /// the person to sign in again.
    fn expired(&self, headers: &HeaderMap, uri: &Uri) -> Response {
        if let Some(id) = session::cookie_value(headers) {
            self.sessions.remove(&id);
        }
        let next = format!("/ui{}", uri.path_and_query().map_or("/", |p| p.as_str()));
        to_sign_in(&next, Some("expired"))
    }

    /// Whether cookies get `Secure` (the port serves TLS).
    /// The port serves TLS, or the request came through a proxy that terminated it
    /// (`X-Forwarded-Proto: https`, as the chart's Ingress sends). Only ever adds `Secure`.
    fn secure(&self, headers: &HeaderMap) -> bool {
        self.app.serves_tls()
            || headers
                .get("x-forwarded-proto")
                .and_then(|v| v.to_str().ok())
                .is_some_and(|p| p.eq_ignore_ascii_case("https"))
    }
}

/// `303` to the sign-in page.
fn to_sign_in(next: &str, why: Option<&str>) -> Response {
    sign_in_redirect(next, why).into_response()
}

/// The redirect of [`to_sign_in`].
fn sign_in_redirect(next: &str, why: Option<&str>) -> Redirect {
    let mut to = format!(
        "/ui/sign-in?next={}",
        url::form_urlencoded::byte_serialize(next.as_bytes()).collect::<String>()
    );
    if let Some(w) = why {
        to.push_str("&reason=");
        to.push_str(w);
    }
    Redirect::to(&to)
}

/// Where to go after sign-in: `next` when it is a console path, else the list (never
/// another origin).
fn safe_next(next: &str) -> &str {
    // A console path of plain characters: no `//`, no `..` segment, no backslash, no
    // control character (a `Location` header could not hold it).
    let plain = next
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b"/-_.~%?=&+:".contains(&b));
    let ok = plain
        && next.starts_with("/ui/")
        && !next.contains("//")
        && !next
            .split(['/', '?'])
            .any(|seg| seg == ".." || seg == "." || seg.eq_ignore_ascii_case("%2e%2e"))
        && !next.starts_with("/ui/sign-");
    if ok { next } else { "/ui/hooks" }
}

/// Refuses a POST from another origin (the `Origin` header, when sent, must be this
/// host) or without the session's CSRF token.
fn check_post(
    headers: &HeaderMap,
    session: Option<&Session>,
    csrf: &str,
) -> Result<(), (StatusCode, &'static str)> {
    if !same_origin(headers) {
        return Err((
            StatusCode::FORBIDDEN,
            "Origin: this form was sent from another site",
        ));
    }
    match session {
        Some(s) if !s.csrf_matches(csrf) => Err((
            StatusCode::FORBIDDEN,
            "csrf: the form's token is missing or stale; reload the page and send it again",
        )),
        _ => Ok(()),
    }
}

/// `Origin`, when present, names this host (`http://HOST` or `https://HOST`).
fn same_origin(headers: &HeaderMap) -> bool {
    let Some(origin) = headers.get(header::ORIGIN) else {
        return true;
    };
    let host = headers.get(header::HOST).and_then(|h| h.to_str().ok());
    match (origin.to_str().ok(), host) {
        (Some(o), Some(h)) => o == format!("http://{h}") || o == format!("https://{h}"),
        _ => false,
    }
}

/// A page with a status.
fn html(status: StatusCode, page: Markup) -> Response {
    (status, Html(page.into_string())).into_response()
}

#[cfg(test)]
mod tests;
