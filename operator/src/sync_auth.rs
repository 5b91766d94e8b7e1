//! Who calls the sync port (CONTRACT §9.4): every dispatcher proves its own identity.
//!
//! The sync port hands out every tenant's hooks (`GET /v1/snapshot`), takes breaker
//! trips and counts (`POST /v1/report`) and spends budgets (`POST /v1/budget/*`). Each
//! request must carry `Authorization: Bearer <token>`, the dispatcher's own projected
//! ServiceAccount token for the audience [`SYNC_AUDIENCE`] (`--sync-audience`), which
//! the operator checks as the kubelet checks its clients:
//!
//! 1. a TokenReview authenticates the token for that audience;
//! 2. the caller's identity ([`identity_of`]) is `NAMESPACE/POD` when the token is bound
//!    to a Pod (a projected token: `user.extra["authentication.kubernetes.io/pod-name"]`),
//!    else `NAMESPACE/SERVICEACCOUNT`; a user that is not a ServiceAccount is no
//!    dispatcher;
//! 3. a SubjectAccessReview asks whether RBAC lets it `create` `agenthooks/sync` (group
//!    `agenthooks.io`) in the operator's master namespace (or `--sync-rbac-namespace`) —
//!    the ClusterRole [`SYNC_CLUSTER_ROLE`] bound by a RoleBinding there.
//!
//! Both answers are cached as the dispatcher caches its callers'
//! ([`agenthooks_kube_review::CacheConfig`]; `--sync-*-cache-seconds`). The identity goes
//! into the request's extensions as a [`SyncCaller`]; every handler checks that the
//! `dispatcher` its body or query names is that caller ([`SyncCaller::acts_for`]), so a
//! dispatcher reports, polls, reserves and settles only for itself.
//!
//! Answers (`{"error", "field"?}`): `401` with `WWW-Authenticate: Bearer
//! realm="agenthooks-sync"` for a missing or unverified token; `403` for a caller that is
//! not a ServiceAccount, or that RBAC refuses (naming the ClusterRole to bind), or (from
//! the handlers) a `dispatcher` that is not the caller, naming `dispatcher`; `503` when
//! the API server cannot be asked (the dispatcher tries its next operator URL, as for
//! any unavailable operator).
//!
//! The seal key plays no part here: it only seals header values.

use std::sync::Arc;

use agenthooks_kube_review::{Access, KubeUser, ReviewError, Reviewer};
use axum::Router;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

pub use agenthooks_kube_review::SYNC_AUDIENCE;

/// Realm named in `WWW-Authenticate`.
pub const REALM: &str = "agenthooks-sync";
/// The ClusterRole that grants `create` on `agenthooks/sync` (config/rbac and the chart
/// ship it; a RoleBinding in the master namespace binds it to a dispatcher).
pub const SYNC_CLUSTER_ROLE: &str = "agenthooks-sync";
/// Longest dispatcher identity, in bytes: `NAMESPACE/POD`, a namespace (a DNS label, 63)
/// and a Pod name (a DNS subdomain, 253). Every `dispatcher` field of the sync port is
/// held to it (poll, report, reserve, settle), so any identity [`identity_of`] gives fits.
pub const MAX_DISPATCHER_ID_LEN: usize = 63 + 1 + 253;
/// Longest bearer token read, in bytes; a longer one is refused (401) unread.
pub use agenthooks_kube_review::MAX_TOKEN_BYTES;

/// A dispatcher the sync port authenticated and RBAC allowed: what the handlers see.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SyncCaller {
    id: Arc<str>,
}

impl SyncCaller {
    /// The caller with identity `id` (`NAMESPACE/POD` or `NAMESPACE/SERVICEACCOUNT`).
    /// The sync port's middleware makes it; in-process tests of a handler insert one.
    pub fn new(id: impl Into<Arc<str>>) -> SyncCaller {
        SyncCaller { id: id.into() }
    }

    /// Its identity.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// Whether a request naming dispatcher `claimed` may proceed: only when it is this
    /// caller (the one rule of "a dispatcher acts only for itself").
    ///
    /// Errors: [`ForeignDispatcher`] (403 naming `dispatcher`).
    pub fn acts_for(&self, claimed: &str) -> Result<(), ForeignDispatcher> {
        if claimed == &*self.id {
            Ok(())
        } else {
            Err(ForeignDispatcher {
                caller: self.id.to_string(),
                claimed: claimed.to_string(),
            })
        }
    }
}

/// A request naming another dispatcher than its authenticated caller.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("dispatcher: this caller is {caller}, not {claimed}")]
pub struct ForeignDispatcher {
    /// The authenticated identity.
    pub caller: String,
    /// The `dispatcher` the request named.
    pub claimed: String,
}

impl IntoResponse for ForeignDispatcher {
    /// `403 {"error": "dispatcher: this caller is X, not Y", "field": "dispatcher"}`.
    fn into_response(self) -> Response {
        tracing::warn!(caller = %self.caller, claimed = %self.claimed, "sync request refused: it names another dispatcher");
        SyncRefusal::from(self).into_response()
    }
}

/// A sync request refused: `401` (with `WWW-Authenticate`), `403` or `503`, as
/// `{"error", "field"?}`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct SyncRefusal {
    /// The answer's status.
    pub status: StatusCode,
    /// The field at fault, if one is.
    pub field: Option<&'static str>,
    /// Why.
    pub message: String,
}

impl From<ForeignDispatcher> for SyncRefusal {
    fn from(e: ForeignDispatcher) -> SyncRefusal {
        SyncRefusal {
            status: StatusCode::FORBIDDEN,
            field: Some("dispatcher"),
            message: e.to_string(),
        }
    }
}

impl IntoResponse for SyncRefusal {
    fn into_response(self) -> Response {
        let mut body = serde_json::json!({ "error": self.message });
        if let Some(f) = self.field {
            body["field"] = serde_json::json!(f);
        }
        let mut resp = (self.status, axum::Json(body)).into_response();
        if self.status == StatusCode::UNAUTHORIZED {
            resp.headers_mut().insert(
                header::WWW_AUTHENTICATE,
                axum::http::HeaderValue::from_static(WWW_AUTHENTICATE),
            );
        }
        resp
    }
}

/// `WWW-Authenticate` of a `401` (realm [`REALM`]).
const WWW_AUTHENTICATE: &str = "Bearer realm=\"agenthooks-sync\"";

/// The 401 a handler gives when no [`SyncCaller`] is in the request (never behind
/// [`protect`]; a router served without it refuses everything).
pub fn no_caller() -> SyncRefusal {
    unauthenticated("no authenticated dispatcher")
}

/// A user that the sync port does not take for a dispatcher.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "{user} is not a ServiceAccount: only a dispatcher's ServiceAccount token is accepted on the sync port"
)]
pub struct NotADispatcher {
    /// The user name the API server gave.
    pub user: String,
}

/// The identity of a reviewed user: `NAMESPACE/POD` for a token bound to a Pod,
/// `NAMESPACE/SERVICEACCOUNT` for another ServiceAccount token.
///
/// Errors: [`NotADispatcher`] for a user that is not a ServiceAccount.
pub fn identity_of(user: &KubeUser) -> Result<String, NotADispatcher> {
    match (&user.namespace, &user.service_account, &user.pod) {
        (Some(ns), Some(_), Some(pod)) => Ok(format!("{ns}/{}", pod.name)),
        (Some(ns), Some(sa), None) => Ok(format!("{ns}/{sa}")),
        _ => Err(NotADispatcher {
            user: user.name.to_string(),
        }),
    }
}

/// The sync port's authenticator: reviews through the API server, RBAC asked in
/// `namespace` (the operator's master namespace).
pub struct SyncAuth {
    reviewer: Reviewer,
    namespace: String,
}

impl SyncAuth {
    /// Dispatchers reviewed by `reviewer` (its audience: `--sync-audience`), allowed by
    /// RBAC in `namespace`.
    pub fn new(reviewer: Reviewer, namespace: impl Into<String>) -> SyncAuth {
        SyncAuth {
            reviewer,
            namespace: namespace.into(),
        }
    }

    /// The caller of a request with `headers`.
    ///
    /// Errors: the [`SyncRefusal`] (401, 403 or 503).
    pub async fn caller(&self, headers: &HeaderMap) -> Result<SyncCaller, SyncRefusal> {
        let token = bearer(headers).map_err(|e| unauthenticated(&e.to_string()))?;
        let user = self
            .reviewer
            .authenticate(token)
            .await
            .map_err(|e| review_failed(&e))?;
        let id = identity_of(&user).map_err(|e| forbidden(e.to_string()))?;
        let access = Access::sync(&self.namespace);
        if !self
            .reviewer
            .allowed(&user, &access)
            .await
            .map_err(|e| review_failed(&e))?
        {
            return Err(forbidden(format!(
                "{} ({id}) may not {access} (Kubernetes RBAC); a RoleBinding of the ClusterRole {SYNC_CLUSTER_ROLE} in namespace {} grants it",
                user.name, self.namespace
            )));
        }
        Ok(SyncCaller::new(id))
    }
}

/// `app` behind [`SyncAuth`]: a request goes on only with a [`SyncCaller`] in its
/// extensions.
pub fn protect(app: Router, auth: Arc<SyncAuth>) -> Router {
    app.layer(axum::middleware::from_fn_with_state(
        auth,
        require_dispatcher,
    ))
}

/// `app` serving at most `max` requests at once (CONTRACT §10.2): past it a request is
/// answered `503 {"error"}` at once, not queued, before [`protect`] looks at its token
/// (so a flood of requests costs neither memory nor TokenReviews past the bound; the
/// reviews themselves are bounded too, [`agenthooks_kube_review::MAX_REVIEWS_IN_FLIGHT`]).
/// A dispatcher takes a `503` as an unavailable operator: it tries its next URL and
/// keeps its snapshot. Wrap the protected app: `limit(protect(app, auth), max)`.
pub fn limit(app: Router, max: usize) -> Router {
    let slots = Arc::new(tokio::sync::Semaphore::new(
        max.clamp(1, tokio::sync::Semaphore::MAX_PERMITS),
    ));
    app.layer(axum::middleware::from_fn_with_state(slots, shed))
}

async fn shed(
    State(slots): State<Arc<tokio::sync::Semaphore>>,
    req: Request,
    next: Next,
) -> Response {
    match slots.try_acquire_owned() {
        Ok(slot) => {
            let answer = next.run(req).await;
            drop(slot);
            answer
        }
        Err(_) => (
            StatusCode::SERVICE_UNAVAILABLE,
            axum::Json(serde_json::json!({
                "error": "the sync port serves as many requests as it may at once (--sync-max-concurrent-requests); try again or another operator URL"
            })),
        )
            .into_response(),
    }
}

async fn require_dispatcher(
    State(auth): State<Arc<SyncAuth>>,
    mut req: Request,
    next: Next,
) -> Response {
    match auth.caller(req.headers()).await {
        Ok(caller) => {
            req.extensions_mut().insert(caller);
            next.run(req).await
        }
        Err(refused) => {
            tracing::warn!(path = %req.uri().path(), status = refused.status.as_u16(), reason = %refused, "sync request refused");
            refused.into_response()
        }
    }
}

/// The request's bearer token. Errors: why there is none.
fn bearer(headers: &HeaderMap) -> Result<&str, agenthooks_kube_review::BearerError> {
    agenthooks_kube_review::bearer(headers.get(header::AUTHORIZATION).map(|v| v.as_bytes()))
}

fn refusal(status: StatusCode, why: impl Into<String>) -> SyncRefusal {
    SyncRefusal {
        status,
        field: None,
        message: why.into(),
    }
}

fn unauthenticated(why: &str) -> SyncRefusal {
    refusal(StatusCode::UNAUTHORIZED, why)
}

fn forbidden(why: String) -> SyncRefusal {
    refusal(StatusCode::FORBIDDEN, why)
}

fn review_failed(e: &ReviewError) -> SyncRefusal {
    match e {
        ReviewError::Unauthenticated { .. } => unauthenticated(&e.to_string()),
        ReviewError::Unavailable(why) => refusal(StatusCode::SERVICE_UNAVAILABLE, why.clone()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use agenthooks_kube_review::{POD_NAME_EXTRA, POD_UID_EXTRA, user_of};
    use axum::body::Body;
    use axum::routing::get;
    use http_body_util::BodyExt;
    use k8s_openapi::api::authentication::v1::{TokenReviewStatus, UserInfo};
    use tower::ServiceExt;

    #[tokio::test]
    async fn past_its_limit_the_port_answers_503_at_once_and_frees_the_slot_after() {
        let gate = Arc::new(tokio::sync::Notify::new());
        let held = gate.clone();
        let app = limit(
            Router::new().route(
                "/v1/snapshot",
                get(move || {
                    let held = held.clone();
                    async move {
                        held.notified().await;
                        "ok"
                    }
                }),
            ),
            1,
        );
        let call = |app: Router| async move {
            let r = app
                .oneshot(Request::get("/v1/snapshot").body(Body::empty()).unwrap())
                .await
                .unwrap();
            let status = r.status();
            let body = r.into_body().collect().await.unwrap().to_bytes();
            (status, String::from_utf8_lossy(&body).into_owned())
        };
        let first = tokio::spawn(call(app.clone()));
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        let started = std::time::Instant::now();
        let (status, body) = call(app.clone()).await;
        assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{body}");
        assert!(body.contains("--sync-max-concurrent-requests"), "{body}");
        assert!(
            started.elapsed() < std::time::Duration::from_secs(1),
            "not queued"
        );
        gate.notify_one();
        assert_eq!(first.await.unwrap(), (StatusCode::OK, "ok".to_string()));
        // The slot is free again.
        gate.notify_one();
        assert_eq!(call(app).await, (StatusCode::OK, "ok".to_string()));
    }

    fn reviewed(name: &str, pod: Option<&str>) -> KubeUser {
        let extra = pod.map(|p| {
            [
                (POD_NAME_EXTRA.to_string(), vec![p.to_string()]),
                (POD_UID_EXTRA.to_string(), vec!["uid-1".to_string()]),
            ]
            .into()
        });
        let status = TokenReviewStatus {
            authenticated: Some(true),
            audiences: Some(vec![SYNC_AUDIENCE.into()]),
            user: Some(UserInfo {
                username: Some(name.into()),
                uid: Some("u".into()),
                groups: None,
                extra,
            }),
            error: None,
        };
        user_of(Some(&status), SYNC_AUDIENCE).unwrap()
    }

    #[test]
    fn the_identity_is_the_pod_its_token_is_bound_to_else_the_service_account() {
        let sa = "system:serviceaccount:agenthooks-system:agenthooks-dispatcher";
        assert_eq!(
            identity_of(&reviewed(sa, Some("agenthooks-dispatcher-5d8f-x2"))).as_deref(),
            Ok("agenthooks-system/agenthooks-dispatcher-5d8f-x2")
        );
        assert_eq!(
            identity_of(&reviewed(sa, None)).as_deref(),
            Ok("agenthooks-system/agenthooks-dispatcher")
        );
        for user in ["alice", "system:admin", "system:node:n1"] {
            assert_eq!(
                identity_of(&reviewed(user, Some("p"))),
                Err(NotADispatcher { user: user.into() }),
                "{user}"
            );
        }
    }

    #[test]
    fn a_dispatcher_acts_only_for_itself() {
        let caller = SyncCaller::new("ns/disp-a");
        assert_eq!(caller.acts_for("ns/disp-a"), Ok(()));
        for other in [
            "ns/disp-b",
            "",
            "NS/disp-a",
            "ns/disp-a ",
            "disp-a",
            "other/disp-a",
        ] {
            let e = caller.acts_for(other).unwrap_err();
            assert_eq!(
                e.to_string(),
                format!("dispatcher: this caller is ns/disp-a, not {other}")
            );
        }
    }

    #[tokio::test]
    async fn a_foreign_dispatcher_is_403_naming_the_field() {
        let resp = SyncCaller::new("a/x")
            .acts_for("a/y")
            .unwrap_err()
            .into_response();
        assert_eq!(resp.status(), StatusCode::FORBIDDEN);
        let body = resp.into_body().collect().await.unwrap().to_bytes();
        let v: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(
            v,
            serde_json::json!({"error": "dispatcher: this caller is a/x, not a/y", "field": "dispatcher"})
        );
    }

    #[test]
    fn bearer_tokens_are_read_strictly() {
        let h = |v: Option<&str>| {
            let mut m = HeaderMap::new();
            if let Some(v) = v {
                m.insert(header::AUTHORIZATION, v.parse().unwrap());
            }
            m
        };
        assert_eq!(bearer(&h(Some("Bearer abc"))), Ok("abc"));
        assert_eq!(bearer(&h(Some("bearer  abc "))), Ok("abc"));
        for bad in [
            None,
            Some("Basic abc"),
            Some("Bearer "),
            Some("Bearer"),
            Some("abc"),
        ] {
            assert!(bearer(&h(bad)).is_err(), "{bad:?}");
        }
        let long = format!("Bearer {}", "x".repeat(MAX_TOKEN_BYTES + 1));
        assert!(bearer(&h(Some(&long))).is_err());
    }

    /// Without a token nothing reaches the API server: 401 with the realm; with one, an
    /// API server that cannot be asked is 503 (the dispatcher tries another operator).
    #[test]
    fn the_challenge_names_the_realm() {
        assert_eq!(WWW_AUTHENTICATE, format!("Bearer realm=\"{REALM}\""));
    }

    #[tokio::test]
    async fn no_token_is_401_and_an_unreachable_api_server_503() {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let dead = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap();
        let config = kube::Config::new(format!("http://{dead}").parse().unwrap());
        let reviewer = Reviewer::new(
            kube::Client::try_from(config).unwrap(),
            SYNC_AUDIENCE,
            Default::default(),
        );
        let app = protect(
            Router::new().route("/v1/snapshot", get(|| async { "ok" })),
            Arc::new(SyncAuth::new(reviewer, "agenthooks-system")),
        );
        let call = |auth: Option<&str>| {
            let mut req = axum::http::Request::get("/v1/snapshot");
            if let Some(a) = auth {
                req = req.header(header::AUTHORIZATION, a);
            }
            app.clone().oneshot(req.body(Body::empty()).unwrap())
        };
        for bad in [None, Some("Basic abc"), Some("Bearer ")] {
            let resp = call(bad).await.unwrap();
            assert_eq!(resp.status(), StatusCode::UNAUTHORIZED, "{bad:?}");
            assert_eq!(
                resp.headers()[header::WWW_AUTHENTICATE],
                "Bearer realm=\"agenthooks-sync\""
            );
        }
        let resp = call(Some("Bearer some.jwt.token")).await.unwrap();
        assert_eq!(resp.status(), StatusCode::SERVICE_UNAVAILABLE);
        let body = resp.into_body().collect().await.unwrap().to_bytes();
        let v: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert!(
            v["error"]
                .as_str()
                .unwrap()
                .starts_with("the API server could not review the token"),
            "{v}"
        );
    }
}
