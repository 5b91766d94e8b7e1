//! `POST /v1/approvals` (issue 16 point 2): a dispatcher's hook with `spec.approval`
//! answered `ask`; the operator finds or creates the call's `HookApproval` in the hook's
//! namespace and answers where it stands ([`agenthooks_crds::approval`]).
//!
//! - First ask of a call: the approval is created (`spec.request`, expiring `ttlSeconds`
//!   after now) and answered `Pending`.
//! - Later asks of the same call (same hook version, tenant, session, input hash): its
//!   decision (`Approved`, `Rejected`) or `Pending`, while the TTL lasts; past it
//!   `Expired`, and the approval is deleted so the next call asks anew.
//!
//! Answers: `200` [`ApprovalAnswer`]; `400 {"error", "field"}` for a bad body; `401`/`403`
//! as every sync route (a dispatcher acts only for itself); `404` when the hook is gone or
//! is another object (uid), `409` when it has no `spec.approval`; `503` when the API server
//! did not answer. The dispatcher refuses the call on anything but `200` (fail-closed).
//! Any replica answers: the API server holds the approvals.

use std::sync::Arc;

use agenthooks_crds::AgentHook;
use agenthooks_crds::approval::{
    ApprovalAnswer, ApprovalRequest, ApprovalRequestSpec, ApprovalState, HookApproval,
    HookApprovalSpec, approval_id,
};
use axum::Router;
use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{DefaultBodyLimit, Extension, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use chrono::{DateTime, SecondsFormat, Utc};
use kube::api::{DeleteParams, PostParams, Preconditions};
use kube::{Api, Client};

use crate::sync_auth::{SyncCaller, no_caller};

/// Largest request body accepted.
pub const MAX_BODY_BYTES: usize = 16 * 1024;
/// Longest name, id or hash field accepted (Kubernetes names are at most 253).
const MAX_FIELD_LEN: usize = 253;
/// Longest reason kept on an approval.
const MAX_REASON_LEN: usize = 1024;

/// The route, with the API client it reads and writes approvals with.
pub fn router(client: Client) -> Router {
    Router::new()
        .route("/v1/approvals", post(post_approval))
        .layer(DefaultBodyLimit::max(MAX_BODY_BYTES))
        .with_state(Arc::new(client))
}

fn refuse(status: StatusCode, field: Option<&str>, message: impl Into<String>) -> Response {
    let mut body = serde_json::json!({ "error": message.into() });
    if let Some(f) = field {
        body["field"] = f.into();
    }
    (status, axum::Json(body)).into_response()
}

/// Checks the fields a dispatcher sends: names and ids non-empty (session may be empty),
/// bounded, no control characters. Errors: (field, message).
fn check(req: &ApprovalRequest) -> Result<(), (&'static str, String)> {
    for (field, value, may_be_empty) in [
        ("hookNamespace", &req.hook_namespace, false),
        ("hookName", &req.hook_name, false),
        ("hookUid", &req.hook_uid, false),
        ("tenant", &req.tenant, false),
        ("sessionId", &req.session_id, true),
        ("toolName", &req.tool_name, true),
        ("inputHash", &req.input_hash, false),
    ] {
        if (value.is_empty() && !may_be_empty) || value.len() > MAX_FIELD_LEN {
            return Err((
                field,
                format!("{field}: must be 1 to {MAX_FIELD_LEN} characters"),
            ));
        }
        if value.chars().any(char::is_control) {
            return Err((field, format!("{field}: contains a control character")));
        }
    }
    if req.hook_generation < 1 {
        return Err((
            "hookGeneration",
            "hookGeneration: must be at least 1".into(),
        ));
    }
    Ok(())
}

/// A character that makes text display as something else: control characters (but tab
/// and newline) and the bidirectional embeddings, overrides, isolates and marks.
fn is_deceptive(c: char) -> bool {
    (c.is_control() && c != '\n' && c != '\t')
        || matches!(c, '\u{200E}' | '\u{200F}' | '\u{061C}' | '\u{202A}'..='\u{202E}' | '\u{2066}'..='\u{2069}')
}

fn rfc3339(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(SecondsFormat::Secs, true)
}

async fn post_approval(
    State(client): State<Arc<Client>>,
    caller: Option<Extension<SyncCaller>>,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    let Some(Extension(caller)) = caller else {
        return no_caller().into_response();
    };
    tracing::debug!(caller = %caller.id(), "approvals: request");
    let bytes = match body {
        Ok(b) => b,
        Err(e) => return refuse(e.status(), None, e.body_text()),
    };
    let mut req: ApprovalRequest = match serde_json::from_slice(&bytes) {
        Ok(r) => r,
        Err(e) => {
            return refuse(
                StatusCode::BAD_REQUEST,
                Some("body"),
                format!("not an approval request: {e}"),
            );
        }
    };
    if let Err(e) = caller.acts_for(&req.dispatcher) {
        return crate::sync_auth::SyncRefusal::from(e).into_response();
    }
    if let Err((field, message)) = check(&req) {
        return refuse(StatusCode::BAD_REQUEST, Some(field), message);
    }
    // What a person reads must say what it shows: no bidirectional overrides or control
    // characters (a reason could otherwise render as another text).
    if req.reason.chars().any(is_deceptive) {
        req.reason = req
            .reason
            .chars()
            .map(|c| if is_deceptive(c) { '\u{FFFD}' } else { c })
            .collect();
    }
    if req.reason.len() > MAX_REASON_LEN {
        let mut cut = MAX_REASON_LEN;
        while !req.reason.is_char_boundary(cut) {
            cut -= 1;
        }
        req.reason.truncate(cut);
    }
    let started = std::time::Instant::now();
    let answered = answer(&client, &req, Utc::now()).await;
    tracing::debug!(
        hook = %req.hook_name, namespace = %req.hook_namespace,
        elapsed_ms = started.elapsed().as_millis() as u64, ok = answered.is_ok(),
        "approvals: answered"
    );
    match answered {
        Ok(a) => (StatusCode::OK, axum::Json(a)).into_response(),
        Err(r) => r,
    }
}

fn api_unavailable(what: &str, e: kube::Error) -> Response {
    tracing::warn!(error = %e, "approvals: {what} failed");
    refuse(
        StatusCode::SERVICE_UNAVAILABLE,
        None,
        format!("{what} failed: {e}"),
    )
}

/// Deletes `approval` only: not another object made under its name meanwhile.
fn only(approval: &HookApproval) -> DeleteParams {
    DeleteParams {
        preconditions: Some(Preconditions {
            uid: approval.metadata.uid.clone(),
            resource_version: None,
        }),
        ..DeleteParams::default()
    }
}

/// Finds or creates the call's approval and says where it stands at `now`.
async fn answer(
    client: &Client,
    req: &ApprovalRequest,
    now: DateTime<Utc>,
) -> Result<ApprovalAnswer, Response> {
    let hooks: Api<AgentHook> = Api::namespaced(client.clone(), &req.hook_namespace);
    let hook = match hooks.get_opt(&req.hook_name).await {
        Ok(Some(h)) => h,
        Ok(None) => {
            return Err(refuse(
                StatusCode::NOT_FOUND,
                Some("hookName"),
                format!(
                    "AgentHook {}/{} does not exist",
                    req.hook_namespace, req.hook_name
                ),
            ));
        }
        Err(e) => return Err(api_unavailable("reading the hook", e)),
    };
    if hook.metadata.uid.as_deref() != Some(req.hook_uid.as_str()) {
        return Err(refuse(
            StatusCode::NOT_FOUND,
            Some("hookUid"),
            format!(
                "AgentHook {}/{} is another object than uid {}",
                req.hook_namespace, req.hook_name, req.hook_uid
            ),
        ));
    }
    let Some(policy) = hook.spec.approval.clone() else {
        return Err(refuse(
            StatusCode::CONFLICT,
            Some("hookName"),
            format!(
                "AgentHook {}/{} has no spec.approval",
                req.hook_namespace, req.hook_name
            ),
        ));
    };
    let id = approval_id(req);
    let approvals: Api<HookApproval> = Api::namespaced(client.clone(), &req.hook_namespace);
    for _ in 0..3 {
        let existing = approvals
            .get_opt(&id)
            .await
            .map_err(|e| api_unavailable("reading the approval", e))?;
        let Some(existing) = existing else {
            let approval = HookApproval::new(
                &id,
                HookApprovalSpec {
                    request: ApprovalRequestSpec {
                        hook: format!("{}/{}", req.hook_namespace, req.hook_name),
                        hook_uid: req.hook_uid.clone(),
                        hook_generation: req.hook_generation,
                        tenant: req.tenant.clone(),
                        session_id: req.session_id.clone(),
                        tool_name: req.tool_name.clone(),
                        input_hash: req.input_hash.clone(),
                        reason: req.reason.clone(),
                        requested_at: rfc3339(now),
                        expires_at: rfc3339(now + chrono::Duration::seconds(policy.ttl_seconds())),
                    },
                    decision: None,
                    decided_by: None,
                    note: None,
                },
            );
            match approvals.create(&PostParams::default(), &approval).await {
                Ok(_) => {
                    tracing::info!(
                        target: "hooks.approval",
                        approval = %id, namespace = %req.hook_namespace, hook = %req.hook_name,
                        tenant = %req.tenant, session_id = %req.session_id, ttl_seconds = policy.ttl_seconds(),
                        "hooks.approval: requested"
                    );
                    return Ok(ApprovalAnswer {
                        id,
                        state: ApprovalState::Pending,
                        note: None,
                        decided_by: None,
                    });
                }
                // Another replica or call created it first: read it again.
                Err(kube::Error::Api(e)) if e.code == 409 => continue,
                Err(e) => return Err(api_unavailable("creating the approval", e)),
            }
        };
        // Made by someone else under this call's id (it shows a person another call, or
        // outlives the TTL): it answers nothing. Gone (only this object), and the call's
        // own approval is made in its place.
        let created = existing
            .metadata
            .creation_timestamp
            .as_ref()
            .map_or(0, |t| t.0.as_second());
        if let Err(field) = existing
            .spec
            .check_made_for(req, policy.ttl_seconds(), created)
        {
            tracing::warn!(
                target: "hooks.approval",
                approval = %id, namespace = %req.hook_namespace, hook = %req.hook_name,
                field, "hooks.approval: not made for this call (spec.request.{field} differs); replaced"
            );
            match approvals.delete(&id, &only(&existing)).await {
                Ok(_) => continue,
                Err(kube::Error::Api(e)) if e.code == 404 || e.code == 409 => continue,
                Err(e) => return Err(api_unavailable("deleting a forged approval", e)),
            }
        }
        let state = existing.spec.state_at(now.timestamp());
        if state == ApprovalState::Expired {
            // The next call asks anew: this one is gone (only this object: uid precondition).
            if let Err(e) = approvals.delete(&id, &only(&existing)).await {
                tracing::warn!(approval = %id, error = %e, "approvals: deleting an expired approval failed");
            }
            tracing::info!(target: "hooks.approval", approval = %id, namespace = %req.hook_namespace, "hooks.approval: expired");
        }
        return Ok(ApprovalAnswer {
            id,
            state,
            note: existing.spec.note.clone(),
            decided_by: existing.spec.decided_by.clone(),
        });
    }
    Err(refuse(
        StatusCode::SERVICE_UNAVAILABLE,
        None,
        "the approval kept changing; try again",
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_are_checked_field_by_field() {
        let ok = ApprovalRequest {
            dispatcher: "agenthooks-system/d1".into(),
            hook_namespace: "team-a".into(),
            hook_name: "h".into(),
            hook_uid: "u".into(),
            hook_generation: 1,
            tenant: "acme".into(),
            session_id: String::new(),
            tool_name: String::new(),
            input_hash: "ab".repeat(32),
            reason: String::new(),
        };
        assert_eq!(check(&ok), Ok(()));
        let bad = |f: fn(&mut ApprovalRequest)| {
            let mut r = ok.clone();
            f(&mut r);
            check(&r).unwrap_err().0
        };
        assert_eq!(bad(|r| r.hook_name.clear()), "hookName");
        assert_eq!(bad(|r| r.tenant = "a\nb".into()), "tenant");
        assert_eq!(bad(|r| r.input_hash = "x".repeat(300)), "inputHash");
        assert_eq!(bad(|r| r.hook_generation = 0), "hookGeneration");
    }

    #[test]
    fn deceptive_characters_are_the_bidi_controls_and_control_characters() {
        for c in ['\u{202E}', '\u{2066}', '\u{200F}', '\u{0007}', '\r'] {
            assert!(is_deceptive(c), "{c:?}");
        }
        for c in ['a', 'é', '\n', '\t', '→', '日'] {
            assert!(!is_deceptive(c), "{c:?}");
        }
    }
}
