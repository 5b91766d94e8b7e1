//! `POST /v1/test`: dry run of one hook on a sample event (DESIGN "Dispatch API"; issue 5
//! point 3). The engine side is [`crate::dry_run`].
//!
//! Request (JSON object, unknown keys refused):
//! - `hook`: `NAMESPACE/NAME` of a hook this dispatcher serves, **or**
//! - `spec`: an AgentHook manifest object (`apiVersion`, `kind`, `metadata`, `spec`),
//!   validated by the same function as the operator and the hooks files;
//! - `event`: the sample event, the same JSON as a `POST /v1/dispatch` body, parsed by
//!   [`Event::parse`] with its caps and errors;
//! - `force` (optional, default false): run the handler even when the event kind, scope,
//!   depth, `matcher` or `ifExpr` would skip the hook.
//!
//! Answers:
//! - 200 with [`crate::dry_run::DryRunReport`];
//! - 400 `{"error", "field"}` for a bad request; `field` is the path in the request
//!   body (`hook`, `event.tool_input.a`, `spec.spec.timeoutMs`); an invalid inline spec
//!   adds `reason` (the validation reason, e.g. `InvalidTimeout`) and `errors` (every
//!   broken rule: `field`, `reason`, `message`); 413 for an event over a cap;
//! - who may (CONTRACT §9.5, [`super::access`]; an inline spec is arbitrary code on the
//!   Lite edition and arbitrary outbound calls; a named hook spends a provider's tokens):
//!   with `--kubernetes-callers`, Kubernetes RBAC `create` on `agenthooks/test` in the
//!   hook's namespace (`hook`'s, or the inline spec's `metadata.namespace`, default
//!   `default`), checked before the hook is looked up or anything runs — 401 without a
//!   valid token, 403 naming `hook` or `spec.metadata.namespace` otherwise; standalone,
//!   the admin bearer token (403 without it, checked before the body is read);
//! - 422 `field: hook` for a hook this dispatcher could not load (CONTRACT §10.4: the
//!   message says `HookUnavailable` and why);
//! - 404 `field: hook` for a hook that is not served; 503 before any hooks are loaded.
//!
//! A dry run writes no audit row and touches no breaker, counter, metric, outbox,
//! budget, per-turn cap or decision cache.

use std::sync::Arc;

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::Value;
use serde_json::value::RawValue;

use super::access::{Principal, reader};
use super::{AppState, error, read_body};
use crate::dry_run::{
    DryRunOptions, InlineContext, InlineSpecError, SpecFieldError, dry_run, inline_hook,
    inline_namespace,
};
use crate::event::{Event, EventError};
use crate::identity::Access;
use axum::Extension;

/// The body of `POST /v1/test`: `event`, and `hook` or `spec` (one of them).
#[derive(Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(extend("oneOf" = [{"required": ["hook"]}, {"required": ["spec"]}]))]
pub(super) struct TestRequest<'a> {
    /// `NAMESPACE/NAME` of a hook this dispatcher serves (`GET /v1/hooks`).
    #[serde(default)]
    #[schemars(regex(pattern = r"^[^/]+/[^/]+$"))]
    hook: Option<String>,
    /// An AgentHook manifest to dry-run instead of a served hook.
    #[serde(default)]
    #[schemars(with = "Option<crate::dry_run::InlineManifest>")]
    spec: Option<Value>,
    /// The sample event, as a `POST /v1/dispatch` body. Kept as sent, so
    /// [`Event::parse`] sees the exact text (repeated keys, caps).
    #[serde(default, borrow)]
    #[schemars(with = "Event", required)]
    event: Option<&'a RawValue>,
    /// Run the handler even when the event kind, scope, depth, `matcher` or `ifExpr`
    /// would skip the hook.
    #[serde(default)]
    force: bool,
}

/// The hook a dry run is of.
enum Target {
    /// `hook`: `NAMESPACE/NAME` of a served hook.
    Served(String),
    /// `spec`: an AgentHook manifest.
    Inline(Value),
}

/// `POST /v1/test`.
pub(super) async fn test(
    State(state): State<Arc<AppState>>,
    principal: Option<Extension<Principal>>,
    headers: HeaderMap,
    body: axum::body::Body,
) -> Response {
    const WHAT: &str = "POST /v1/test";
    let principal = principal.map(|Extension(p)| p);
    let reader = match reader(&state, &headers, principal.as_ref(), WHAT).await {
        Ok(r) => r,
        Err(refused) => return refused,
    };
    let body = match read_body(&headers, body).await {
        Ok(b) => b,
        Err(refused) => return refused,
    };
    let req: TestRequest = match serde_json::from_slice(&body) {
        Ok(r) => r,
        Err(e) => {
            return error(
                StatusCode::BAD_REQUEST,
                "body",
                format!(
                    "body: {e} (expected {{\"hook\": \"NS/NAME\"}} or {{\"spec\": <AgentHook manifest>}}, plus \"event\")"
                ),
            );
        }
    };
    let Some(raw_event) = req.event else {
        return error(
            StatusCode::BAD_REQUEST,
            "event",
            "event: required (the same JSON as a POST /v1/dispatch body)".into(),
        );
    };
    let event = match Event::parse(raw_event.get().as_bytes()) {
        Ok(e) => e,
        Err(e) => return event_error(&e),
    };
    // Which hook, and so which namespace RBAC is asked about, before it is looked up
    // (a caller learns nothing of another namespace's hooks) or anything runs.
    let target = match (req.hook, req.spec) {
        (Some(_), Some(_)) => {
            return error(
                StatusCode::BAD_REQUEST,
                "hook",
                "hook: give hook (a served hook) or spec (an inline manifest), not both".into(),
            );
        }
        (None, None) => {
            return error(
                StatusCode::BAD_REQUEST,
                "hook",
                "hook: required: give hook (\"NAMESPACE/NAME\" of a served hook) or spec (an AgentHook manifest)".into(),
            );
        }
        (Some(key), None) => {
            let well_formed = matches!(key.split_once('/'), Some((ns, name)) if !ns.is_empty() && !name.is_empty() && !name.contains('/'));
            if !well_formed {
                return error(
                    StatusCode::BAD_REQUEST,
                    "hook",
                    format!("hook: expected NAMESPACE/NAME, got {key:?}"),
                );
            }
            Target::Served(key)
        }
        (None, Some(manifest)) => Target::Inline(manifest),
    };
    let (namespace, field) = match &target {
        Target::Served(key) => (key.split_once('/').map_or("", |(ns, _)| ns), "hook"),
        Target::Inline(manifest) => (inline_namespace(manifest), "spec.metadata.namespace"),
    };
    if let Err(forbidden) = reader
        .require(&Access::create_test(namespace), WHAT, field)
        .await
    {
        return forbidden;
    }
    let Some(set) = state.hooks() else {
        return error(
            StatusCode::SERVICE_UNAVAILABLE,
            "",
            "no hooks loaded yet: a dry run needs the served set (master namespace, tenants)"
                .into(),
        );
    };
    let hook = match target {
        Target::Served(key) => match set.get(&key) {
            Some(h) => Arc::clone(h),
            None if let Some(u) = set.unavailable().iter().find(|u| u.key == key) => {
                return error(
                    StatusCode::UNPROCESSABLE_ENTITY,
                    "hook",
                    format!(
                        "hook: {key} (generation {}) is unavailable on this dispatcher ({}): it could not be loaded: {}; blocking events it could apply to are answered block",
                        u.generation,
                        crate::hookset::HOOK_UNAVAILABLE,
                        u.error
                    ),
                );
            }
            None => {
                return error(
                    StatusCode::NOT_FOUND,
                    "hook",
                    format!(
                        "hook: {key} is not served by this dispatcher (GET /v1/hooks lists them)"
                    ),
                );
            }
        },
        Target::Inline(manifest) => {
            let ctx = InlineContext {
                master_namespace: &set.master_namespace,
                edition: state.engine.edition,
                seal_key: &state.engine.seal_key,
                served: Some(&set),
                validate_only: false,
            };
            match inline_hook(&manifest, &ctx) {
                Ok(h) => h,
                Err(e) => return spec_error(&e),
            }
        }
    };
    let options = DryRunOptions { force: req.force };
    axum::Json(dry_run(&state.engine, &hook, &event, options).await).into_response()
}

/// An event error, its field prefixed with `event.` (400, or 413 over a cap).
fn event_error(e: &EventError) -> Response {
    let status = StatusCode::from_u16(e.status()).unwrap_or(StatusCode::BAD_REQUEST);
    let (EventError::Invalid { field, message } | EventError::TooLarge { field, message }) = e;
    let field = if field == "body" {
        "event".to_owned()
    } else {
        format!("event.{field}")
    };
    error(status, &field, format!("{field}: {message}"))
}

/// 400 for an invalid inline manifest: the first broken rule as `field`/`reason`, all of
/// them in `errors`; fields are paths in the request body (`spec.` + manifest path).
fn spec_error(e: &InlineSpecError) -> Response {
    let prefixed = |f: &str| {
        if f.is_empty() {
            "spec".to_owned()
        } else {
            format!("spec.{f}")
        }
    };
    let errors: Vec<SpecFieldError> =
        e.0.iter()
            .map(|fe| SpecFieldError {
                field: prefixed(&fe.field),
                ..fe.clone()
            })
            .collect();
    let first = e.0.first();
    let field = first
        .map(|f| prefixed(&f.field))
        .unwrap_or_else(|| "spec".into());
    let message =
        e.0.iter()
            .map(|fe| format!("{}: {}", prefixed(&fe.field), fe.message))
            .collect::<Vec<_>>()
            .join("; ");
    let body = super::bodies::ClientError {
        error: message,
        field,
        reason: Some(first.map(|f| f.reason).unwrap_or("InvalidField")),
        errors: Some(errors),
    };
    (StatusCode::BAD_REQUEST, axum::Json(body)).into_response()
}
