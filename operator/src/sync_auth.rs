//! Authentication of the sync port: every request must carry
//! `Authorization: Bearer <token>`, the token derived from the seal key the operator and
//! its dispatchers share ([`agenthooks_crds::sealed::SealKey::sync_token`]).
//!
//! The sync port hands out every tenant's hooks (`GET /v1/snapshot`), takes breaker
//! trips and counts (`POST /v1/report`) and spends budgets (`POST /v1/budget/*`): a pod
//! that could call it unauthenticated could read other tenants' policies, switch a guard
//! hook off with a forged trip, or exhaust a tenant's budget. With the token, only
//! holders of the seal key (the dispatchers) can.
//!
//! Answers: `401 {"error"}` with `WWW-Authenticate: Bearer realm="agenthooks-sync"` when
//! the header is missing, not a bearer token, or not the token. Without a seal key
//! (`--seal-key-file` not given) the port is open and the operator says so loudly at
//! start; the shipped manifests and the chart always give one.

use agenthooks_crds::sealed::SealKey;
use axum::Router;
use axum::extract::{Request, State};
use axum::http::{StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

/// Realm named in `WWW-Authenticate`.
pub const REALM: &str = "agenthooks-sync";

/// `app` behind the bearer-token check when `key` is given; `app` as is (and a warning)
/// otherwise.
pub fn protect(app: Router, key: Option<SealKey>) -> Router {
    match key {
        Some(key) => app.layer(axum::middleware::from_fn_with_state(key, require_token)),
        None => {
            tracing::warn!(
                "no --seal-key-file: the sync port is NOT authenticated; any pod that reaches it can read every hook, report trips and spend budgets"
            );
            app
        }
    }
}

async fn require_token(State(key): State<SealKey>, req: Request, next: Next) -> Response {
    let presented = req
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "));
    match presented {
        Some(token) if key.verify_sync_token(token.trim()) => next.run(req).await,
        other => {
            let why = if other.is_some() {
                "the bearer token does not match this operator's seal key"
            } else {
                "missing `Authorization: Bearer <token>` (the token derived from the seal key)"
            };
            tracing::warn!(path = %req.uri().path(), reason = why, "sync request refused");
            (
                StatusCode::UNAUTHORIZED,
                [(
                    header::WWW_AUTHENTICATE,
                    format!("Bearer realm=\"{REALM}\""),
                )],
                axum::Json(serde_json::json!({ "error": why })),
            )
                .into_response()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::body::Body;
    use axum::routing::get;
    use tower::ServiceExt;

    fn app(key: Option<SealKey>) -> Router {
        protect(
            Router::new().route("/v1/snapshot", get(|| async { "ok" })),
            key,
        )
    }

    async fn status(app: Router, auth: Option<&str>) -> (StatusCode, Option<String>) {
        let mut req = axum::http::Request::get("/v1/snapshot");
        if let Some(a) = auth {
            req = req.header(header::AUTHORIZATION, a);
        }
        let resp = app.oneshot(req.body(Body::empty()).unwrap()).await.unwrap();
        let www = resp
            .headers()
            .get(header::WWW_AUTHENTICATE)
            .map(|v| v.to_str().unwrap().to_string());
        (resp.status(), www)
    }

    #[tokio::test]
    async fn only_the_token_of_the_shared_key_passes() {
        let key = SealKey::generate();
        let good = format!("Bearer {}", key.sync_token());
        assert_eq!(
            status(app(Some(key.clone())), Some(&good)).await.0,
            StatusCode::OK
        );
        let other = format!("Bearer {}", SealKey::generate().sync_token());
        for bad in [
            None,
            Some(other.as_str()),
            Some("Bearer "),
            Some("Basic abc"),
            Some(key.sync_token()),
        ] {
            let (code, www) = status(app(Some(key.clone())), bad).await;
            assert_eq!(code, StatusCode::UNAUTHORIZED, "{bad:?}");
            assert_eq!(www.as_deref(), Some("Bearer realm=\"agenthooks-sync\""));
        }
    }

    #[tokio::test]
    async fn without_a_key_the_port_is_open() {
        assert_eq!(status(app(None), None).await.0, StatusCode::OK);
    }
}
