//! Approvals out of band (issue 16 point 2): a hook with `spec.approval` that answers
//! `ask` turns the call into a `HookApproval` in the hook's namespace, which a person whom
//! RBAC allows to `patch hookapprovals` there approves or rejects with `kubectl`; the same
//! call (same hook version, tenant, session and input hash) within the TTL is then allowed
//! or refused without asking again. Unanswered past the TTL is a refusal.
//!
//! The operator creates approvals (on a dispatcher's `POST /v1/approvals`) and answers
//! their state; nobody else needs to create them. The API server guards them:
//! `spec.request` never changes, a decision once made never changes and names its maker
//! (`spec.decidedBy`, which a `ValidatingAdmissionPolicy` in the chart holds to the
//! requesting user's own name: `config/approvals/`).

#![allow(clippy::duplicated_attributes)]

use kube::{CustomResource, KubeSchema};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// Default `spec.approval.ttlSeconds` of a hook (one hour).
pub const DEFAULT_APPROVAL_TTL_SECONDS: i64 = 3_600;
/// Largest `spec.approval.ttlSeconds` (seven days).
pub const MAX_APPROVAL_TTL_SECONDS: i64 = 7 * 24 * 3_600;
/// Reason prefix of a call refused while its approval waits for a person.
pub const APPROVAL_PENDING: &str = "ApprovalPending";
/// Reason prefix of a call a person refused.
pub const APPROVAL_REJECTED: &str = "ApprovalRejected";
/// Reason prefix of a call whose approval was not answered within its TTL.
pub const APPROVAL_EXPIRED: &str = "ApprovalExpired";
/// Reason prefix of a call whose approval could not be asked for or read.
pub const APPROVAL_UNAVAILABLE: &str = "ApprovalUnavailable";

/// `AgentHook.spec.approval`: an `ask` of this hook becomes a pending approval.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ApprovalPolicy {
    /// How long a request stays answerable and an answer holds, in seconds from the
    /// request; absent or 0: 3600; at most 604800 (7 days).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = 604800))]
    pub ttl_seconds: Option<i64>,
}

impl ApprovalPolicy {
    /// `ttlSeconds` as it applies: absent or 0 is [`DEFAULT_APPROVAL_TTL_SECONDS`].
    pub fn ttl_seconds(&self) -> i64 {
        match self.ttl_seconds {
            None | Some(0) => DEFAULT_APPROVAL_TTL_SECONDS,
            Some(t) => t.clamp(1, MAX_APPROVAL_TTL_SECONDS),
        }
    }
}

/// A call waiting for (or given) a person's decision.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[kube(
    group = "agenthooks.io",
    version = "v1alpha1",
    kind = "HookApproval",
    plural = "hookapprovals",
    shortname = "hap",
    category = "agenthooks",
    namespaced,
    derive = "PartialEq",
    doc = "A call an AgentHook asked a person to approve: approve or reject it by setting spec.decision and spec.decidedBy (your own user name).",
    printcolumn(name = "Hook", type_ = "string", json_path = ".spec.request.hook"),
    printcolumn(name = "Tenant", type_ = "string", json_path = ".spec.request.tenant"),
    printcolumn(name = "Tool", type_ = "string", json_path = ".spec.request.toolName"),
    printcolumn(name = "Decision", type_ = "string", json_path = ".spec.decision"),
    printcolumn(name = "By", type_ = "string", json_path = ".spec.decidedBy"),
    // A timestamp, not a `date` column: kubectl shows a `date` as the time since, which
    // for a future expiry is `<invalid>` and for a past one reads like a countdown.
    printcolumn(
        name = "Expires",
        type_ = "string",
        json_path = ".spec.request.expiresAt"
    ),
    printcolumn(
        name = "Reason",
        type_ = "string",
        json_path = ".spec.request.reason",
        priority = 1
    )
)]
#[x_kube(validation = Rule::new("self.request == oldSelf.request").message("spec.request: set by agenthooks when the call asked; it never changes"))]
#[x_kube(validation = Rule::new("!has(oldSelf.decision) || (has(self.decision) && self.decision == oldSelf.decision && self.decidedBy == oldSelf.decidedBy)").message("spec.decision: a decision once made never changes (delete the approval to ask again)"))]
#[x_kube(validation = Rule::new("has(self.decision) == has(self.decidedBy)").message("spec.decidedBy: set it, to your own user name, exactly when you set spec.decision"))]
#[serde(rename_all = "camelCase")]
pub struct HookApprovalSpec {
    /// What asked, written by agenthooks.
    pub request: ApprovalRequestSpec,
    /// `Approve` or `Reject`, set by a person.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decision: Option<ApprovalDecision>,
    /// Who decided: the deciding user's own name (held to it at admission).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 253))]
    pub decided_by: Option<String>,
    /// A note for the agent (a rejection's reason).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 1024))]
    pub note: Option<String>,
}

/// A person's answer.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, schemars::JsonSchema)]
pub enum ApprovalDecision {
    Approve,
    Reject,
}

/// The call an approval is for: the hook version, tenant, session and input it holds for.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ApprovalRequestSpec {
    /// `namespace/name` of the hook that asked.
    pub hook: String,
    pub hook_uid: String,
    pub hook_generation: i64,
    pub tenant: String,
    pub session_id: String,
    /// `tool_name` of the call ("" without a tool).
    #[serde(default)]
    pub tool_name: String,
    /// SHA-256 (hex) of the tool name and canonical input, as in audit rows.
    pub input_hash: String,
    /// The hook's reason for asking.
    #[serde(default)]
    pub reason: String,
    /// When the call asked, RFC 3339 UTC.
    pub requested_at: String,
    /// Until when it can be answered and the answer holds, RFC 3339 UTC.
    pub expires_at: String,
}

/// Where an approval stands for a call (the operator's answer to a dispatcher).
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, schemars::JsonSchema)]
pub enum ApprovalState {
    /// Waiting for a person: the call is refused (`ApprovalPending <id>`).
    Pending,
    /// Approved within the TTL: the call goes on.
    Approved,
    /// Rejected: the call is refused (`ApprovalRejected <id>`).
    Rejected,
    /// Not answered within the TTL: the call is refused (`ApprovalExpired <id>`); the next
    /// call asks anew.
    Expired,
}

impl ApprovalState {
    /// The CamelCase word.
    pub fn as_str(self) -> &'static str {
        match self {
            ApprovalState::Pending => "Pending",
            ApprovalState::Approved => "Approved",
            ApprovalState::Rejected => "Rejected",
            ApprovalState::Expired => "Expired",
        }
    }
}

/// `POST /v1/approvals` (dispatcher → operator): a hook with `spec.approval` asked.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ApprovalRequest {
    /// The asking dispatcher (must be the authenticated caller).
    pub dispatcher: String,
    pub hook_namespace: String,
    pub hook_name: String,
    pub hook_uid: String,
    pub hook_generation: i64,
    pub tenant: String,
    pub session_id: String,
    #[serde(default)]
    pub tool_name: String,
    pub input_hash: String,
    #[serde(default)]
    pub reason: String,
}

/// The answer to [`ApprovalRequest`]: the approval's id (its name, in the hook's
/// namespace), where it stands, and a person's note.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ApprovalAnswer {
    pub id: String,
    pub state: ApprovalState,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
    /// Who decided.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decided_by: Option<String>,
}

/// The approval id of a call: `ap-` and 20 hex digits of SHA-256 over the hook's uid and
/// generation, the tenant, the session and the input hash (NUL-separated): the same call
/// of the same hook version finds the same approval.
pub fn approval_id(r: &ApprovalRequest) -> String {
    let mut h = Sha256::new();
    for part in [
        r.hook_uid.as_bytes(),
        r.hook_generation.to_string().as_bytes(),
        r.tenant.as_bytes(),
        r.session_id.as_bytes(),
        r.input_hash.as_bytes(),
    ] {
        h.update(part);
        h.update([0]);
    }
    let digest = h.finalize();
    let hex: String = digest.iter().take(10).map(|b| format!("{b:02x}")).collect();
    format!("ap-{hex}")
}

/// An RFC 3339 time in Unix seconds; 0 when it is not one.
fn unix_seconds(rfc3339: &str) -> i64 {
    chrono::DateTime::parse_from_rfc3339(rfc3339)
        .map(|t| t.timestamp())
        .unwrap_or(0)
}

/// How far the operator's clock may be ahead of the API server's when it sets an
/// approval's expiry ([`HookApprovalSpec::check_made_for`]).
pub const CLOCK_SLACK_SECONDS: i64 = 60;

impl HookApprovalSpec {
    /// `spec.request.expiresAt` in Unix seconds; 0 (long past) when it is not RFC 3339.
    pub fn expires_unix(&self) -> i64 {
        unix_seconds(&self.request.expires_at)
    }

    /// `spec.request.requestedAt` in Unix seconds; 0 when it is not RFC 3339.
    pub fn requested_unix(&self) -> i64 {
        unix_seconds(&self.request.requested_at)
    }

    /// Whether this stored approval is the one the operator makes for `req`: the same
    /// hook (name, uid, generation), tenant, session, tool and input hash, and an expiry
    /// no later than `ttl_seconds` (plus [`CLOCK_SLACK_SECONDS`]) after `created_unix`, the
    /// object's creation time as the API server set it. Anyone who may create
    /// `HookApproval`s can make one under a call's id (the id is a hash of what the caller
    /// knows): one that shows a person another call, or lasts past the hook's TTL, must not
    /// answer for this call. Errors: the first field that differs.
    pub fn check_made_for(
        &self,
        req: &ApprovalRequest,
        ttl_seconds: i64,
        created_unix: i64,
    ) -> Result<(), &'static str> {
        let r = &self.request;
        let same = [
            (
                "hook",
                r.hook == format!("{}/{}", req.hook_namespace, req.hook_name),
            ),
            ("hookUid", r.hook_uid == req.hook_uid),
            ("hookGeneration", r.hook_generation == req.hook_generation),
            ("tenant", r.tenant == req.tenant),
            ("sessionId", r.session_id == req.session_id),
            ("toolName", r.tool_name == req.tool_name),
            ("inputHash", r.input_hash == req.input_hash),
        ];
        if let Some((field, _)) = same.iter().find(|(_, same)| !same) {
            return Err(field);
        }
        if self.expires_unix() > created_unix + ttl_seconds + CLOCK_SLACK_SECONDS {
            return Err("expiresAt");
        }
        Ok(())
    }

    /// Where it stands at `now_unix` ([`state_of`] at [`Self::expires_unix`]).
    pub fn state_at(&self, now_unix: i64) -> ApprovalState {
        state_of(self, self.expires_unix(), now_unix)
    }
}

/// Where a stored approval stands at `now_unix` (seconds): its decision within the TTL,
/// else `Expired` (an answer past the TTL no longer holds either).
pub fn state_of(spec: &HookApprovalSpec, expires_unix: i64, now_unix: i64) -> ApprovalState {
    if now_unix >= expires_unix {
        return ApprovalState::Expired;
    }
    match spec.decision {
        None => ApprovalState::Pending,
        Some(ApprovalDecision::Approve) => ApprovalState::Approved,
        Some(ApprovalDecision::Reject) => ApprovalState::Rejected,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request() -> ApprovalRequest {
        ApprovalRequest {
            dispatcher: "d1".into(),
            hook_namespace: "team-a".into(),
            hook_name: "approve-deploys".into(),
            hook_uid: "uid-1".into(),
            hook_generation: 2,
            tenant: "acme".into(),
            session_id: "s1".into(),
            tool_name: "Deploy".into(),
            input_hash: "ab".repeat(32),
            reason: "deploys need a person".into(),
        }
    }

    #[test]
    fn the_same_call_of_the_same_hook_version_has_the_same_id() {
        let id = approval_id(&request());
        assert!(id.starts_with("ap-") && id.len() == 23, "{id}");
        let mut same = request();
        same.reason = "another reason".into();
        same.dispatcher = "d2".into();
        assert_eq!(approval_id(&same), id, "reason and dispatcher do not count");
        for change in [
            |r: &mut ApprovalRequest| r.hook_generation = 3,
            |r: &mut ApprovalRequest| r.hook_uid = "uid-2".into(),
            |r: &mut ApprovalRequest| r.tenant = "other".into(),
            |r: &mut ApprovalRequest| r.session_id = "s2".into(),
            |r: &mut ApprovalRequest| r.input_hash = "cd".repeat(32),
        ] {
            let mut r = request();
            change(&mut r);
            assert_ne!(approval_id(&r), id);
        }
    }

    #[test]
    fn state_by_decision_within_the_ttl_and_expired_after() {
        let spec = |d: Option<ApprovalDecision>| HookApprovalSpec {
            request: ApprovalRequestSpec {
                hook: "team-a/h".into(),
                hook_uid: "u".into(),
                hook_generation: 1,
                tenant: "acme".into(),
                session_id: "s".into(),
                tool_name: String::new(),
                input_hash: String::new(),
                reason: String::new(),
                requested_at: String::new(),
                expires_at: String::new(),
            },
            decided_by: d.map(|_| "alice".into()),
            decision: d,
            note: None,
        };
        use ApprovalState::*;
        for (d, want) in [
            (None, Pending),
            (Some(ApprovalDecision::Approve), Approved),
            (Some(ApprovalDecision::Reject), Rejected),
        ] {
            assert_eq!(state_of(&spec(d), 100, 99), want);
            assert_eq!(state_of(&spec(d), 100, 100), Expired, "{d:?} past the TTL");
        }
        let mut dated = spec(None);
        dated.request.expires_at = "1970-01-01T00:01:40Z".into();
        assert_eq!(dated.expires_unix(), 100);
        assert_eq!(
            (dated.state_at(99), dated.state_at(100)),
            (Pending, Expired)
        );
        dated.request.expires_at = "tomorrow".into();
        assert_eq!((dated.expires_unix(), dated.state_at(0)), (0, Expired));
        assert_eq!(ApprovalPolicy::default().ttl_seconds(), 3_600);
        assert_eq!(
            ApprovalPolicy {
                ttl_seconds: Some(60)
            }
            .ttl_seconds(),
            60
        );
    }
    /// What the operator stores for [`request`], created at 1,000,000 s with a 60 s TTL.
    fn made() -> HookApprovalSpec {
        let r = request();
        HookApprovalSpec {
            request: ApprovalRequestSpec {
                hook: "team-a/approve-deploys".into(),
                hook_uid: r.hook_uid,
                hook_generation: r.hook_generation,
                tenant: r.tenant,
                session_id: r.session_id,
                tool_name: r.tool_name,
                input_hash: r.input_hash,
                reason: r.reason,
                requested_at: "1970-01-12T13:46:40Z".into(),
                expires_at: "1970-01-12T13:47:40Z".into(),
            },
            decision: None,
            decided_by: None,
            note: None,
        }
    }

    const CREATED: i64 = 1_000_000;

    #[test]
    fn the_operators_own_approval_is_made_for_its_call() {
        assert_eq!(made().check_made_for(&request(), 60, CREATED), Ok(()));
        // The reason and the decision are not the call: they may differ.
        let mut decided = made();
        decided.request.reason = "other words".into();
        decided.decision = Some(ApprovalDecision::Approve);
        assert_eq!(decided.check_made_for(&request(), 60, CREATED), Ok(()));
    }

    #[test]
    fn an_approval_showing_another_call_or_outliving_the_ttl_is_not() {
        let differs = |f: fn(&mut ApprovalRequestSpec)| {
            let mut a = made();
            f(&mut a.request);
            a.check_made_for(&request(), 60, CREATED)
        };
        assert_eq!(differs(|r| r.tool_name = "Read".into()), Err("toolName"));
        assert_eq!(differs(|r| r.input_hash = "0".repeat(64)), Err("inputHash"));
        assert_eq!(differs(|r| r.session_id = "s2".into()), Err("sessionId"));
        assert_eq!(differs(|r| r.hook_generation = 1), Err("hookGeneration"));
        assert_eq!(
            differs(|r| r.hook = "team-b/approve-deploys".into()),
            Err("hook")
        );
        assert_eq!(differs(|r| r.tenant = "globex".into()), Err("tenant"));
        assert_eq!(differs(|r| r.hook_uid = "uid-2".into()), Err("hookUid"));
        // An expiry past creation + TTL (+ the clock slack) is forged.
        assert_eq!(
            differs(|r| r.expires_at = "2030-01-01T00:00:00Z".into()),
            Err("expiresAt")
        );
        assert_eq!(
            made().check_made_for(&request(), 60, CREATED - 61),
            Err("expiresAt")
        );
        assert_eq!(made().check_made_for(&request(), 60, CREATED - 60), Ok(()));
    }
}
