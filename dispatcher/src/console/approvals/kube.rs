//! HookApprovals on the API server, asked as the signed-in person (their own token, as
//! every request of [`crate::console::kube`]): listed as hooks are listed
//! ([`list_visible`]: cluster-wide, else the namespaces the person may list), read, and
//! answered by a JSON merge patch of `spec.decision`, `spec.decidedBy` and `spec.note`,
//! which the API server admits only from a person RBAC lets `approve` there, in their own
//! name (config/approvals/). Its refusals are returned as it words them.

use agenthooks_crds::approval::{ApprovalDecision, HookApproval};
use kube::api::{Api, Patch, PatchParams};
use serde_json::json;

use crate::console::kube::{KubeConsole, KubeError, Listed, classify, list_visible};
use crate::console::session::Session;

/// The HookApprovals the person may list; `namespaces` are tried one by one when a
/// cluster-wide list is refused.
pub async fn list(
    kube: &KubeConsole,
    s: &Session,
    namespaces: &[String],
) -> Result<Listed<HookApproval>, KubeError> {
    list_visible(&kube.session_client(s)?, namespaces).await
}

/// Approval `namespace/id`; `None` when it does not exist or the person may not read it
/// (one answer for both).
pub async fn get(
    kube: &KubeConsole,
    s: &Session,
    namespace: &str,
    id: &str,
) -> Result<Option<HookApproval>, KubeError> {
    let api: Api<HookApproval> = Api::namespaced(kube.session_client(s)?, namespace);
    match api.get(id).await {
        Ok(a) => Ok(Some(a)),
        Err(e) => match classify(e) {
            KubeError::Refused {
                status: 403 | 404, ..
            } => Ok(None),
            other => Err(other),
        },
    }
}

/// The merge patch that answers an approval: `decidedBy` is the name the API server gave
/// the person at sign-in; an empty note is left out.
pub fn decision_patch(
    decision: ApprovalDecision,
    decided_by: &str,
    note: &str,
) -> serde_json::Value {
    let mut spec = json!({"decision": decision, "decidedBy": decided_by});
    let note = note.trim();
    if !note.is_empty() {
        spec["note"] = json!(note);
    }
    json!({ "spec": spec })
}

/// Answers approval `namespace/id` as the person ([`decision_patch`] with the session's
/// name). An RBAC refusal (403 "cannot patch") says which permission is missing; the
/// admission policy's and the CRD's refusals are the API server's words.
pub async fn decide(
    kube: &KubeConsole,
    s: &Session,
    namespace: &str,
    id: &str,
    decision: ApprovalDecision,
    note: &str,
) -> Result<HookApproval, KubeError> {
    let api: Api<HookApproval> = Api::namespaced(kube.session_client(s)?, namespace);
    let patch = decision_patch(decision, &s.name, note);
    api.patch(id, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .map_err(|e| refusal(e, namespace))
}

/// A refused answer in namespace `ns`: RBAC's 403 names the ClusterRole to bind; the rest
/// as [`classify`] says (the policy's 403 and the CRD's 422 keep their own message).
fn refusal(e: kube::Error, ns: &str) -> KubeError {
    match classify(e) {
        KubeError::Refused {
            status: 403,
            message,
            ..
        } if message.contains(" cannot ") => KubeError::Refused {
            status: 403,
            field: "decision".into(),
            message: format!(
                "decision: you may not answer approvals in namespace {ns:?} (Kubernetes RBAC: patch and approve on hookapprovals.agenthooks.io there: bind ClusterRole agenthooks-approver, with Helm <release>-approver): {message}"
            ),
        },
        KubeError::Refused {
            status,
            field,
            message,
        } => KubeError::Refused {
            status,
            field: if field.is_empty() {
                "decision".into()
            } else {
                field
            },
            message,
        },
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn api_error(status: serde_json::Value) -> kube::Error {
        kube::Error::Api(Box::new(serde_json::from_value(status).unwrap()))
    }

    #[test]
    fn the_patch_names_the_person_and_leaves_out_an_empty_note() {
        assert_eq!(
            decision_patch(
                ApprovalDecision::Approve,
                "system:serviceaccount:a:alice",
                "  "
            ),
            json!({"spec": {"decision": "Approve", "decidedBy": "system:serviceaccount:a:alice"}})
        );
        assert_eq!(
            decision_patch(ApprovalDecision::Reject, "alice", " no force pushes\n"),
            json!({"spec": {"decision": "Reject", "decidedBy": "alice", "note": "no force pushes"}})
        );
    }

    #[test]
    fn refusals_keep_the_api_servers_words() {
        let rbac = api_error(json!({
            "status": "Failure", "code": 403, "reason": "Forbidden",
            "message": "hookapprovals.agenthooks.io \"ap-1\" is forbidden: User \"bob\" cannot patch resource \"hookapprovals\" in API group \"agenthooks.io\" in the namespace \"a\"",
            "details": {"name": "ap-1", "group": "agenthooks.io", "kind": "hookapprovals"}
        }));
        match refusal(rbac, "a") {
            KubeError::Refused {
                status,
                field,
                message,
            } => {
                assert_eq!((status, field.as_str()), (403, "decision"));
                assert!(
                    message.starts_with("decision: you may not answer approvals in namespace \"a\" (Kubernetes RBAC: patch and approve on hookapprovals.agenthooks.io there: bind ClusterRole agenthooks-approver, with Helm <release>-approver): hookapprovals.agenthooks.io \"ap-1\" is forbidden: User \"bob\" cannot patch"),
                    "{message}"
                );
            }
            other => panic!("{other:?}"),
        }
        let policy_message = "hookapprovals.agenthooks.io \"ap-1\" is forbidden: ValidatingAdmissionPolicy 'agenthooks-approval-decision' with binding 'agenthooks-approval-decision' denied request: spec.decision: carol may not approve calls in a (RBAC verb approve on hookapprovals.agenthooks.io; bind ClusterRole agenthooks-approver)";
        let policy = api_error(json!({
            "status": "Failure", "code": 403, "reason": "Forbidden", "message": policy_message,
            "details": {"name": "ap-1", "group": "agenthooks.io", "kind": "hookapprovals"}
        }));
        match refusal(policy, "a") {
            KubeError::Refused {
                status,
                field,
                message,
            } => assert_eq!(
                (status, field.as_str(), message.as_str()),
                (403, "decision", policy_message)
            ),
            other => panic!("{other:?}"),
        }
        let expired = api_error(
            json!({"status": "Failure", "code": 401, "reason": "Unauthorized", "message": "Unauthorized"}),
        );
        assert!(matches!(refusal(expired, "a"), KubeError::Unauthorized));
    }
}
