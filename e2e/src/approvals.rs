//! Approvals (docs/approvals.md) on the harness's API server, for the tests that drive
//! them (`approvals`, `console_cluster`): the admission policy and ClusterRole of
//! `config/approvals/`, the id of a call refused `ApprovalPending`, and answers patched as
//! a given user.

use std::time::Duration;

use serde_json::Value;

use crate::{ControlPlane, repo_root, wait_for};

/// Applies `config/approvals/` (the `agenthooks-approval-decision` policy and binding,
/// ClusterRole `agenthooks-approver`), server-side.
pub fn install_policy(cp: &ControlPlane) {
    let dir = repo_root().join("config/approvals");
    cp.kubectl_ok(&["apply", "--server-side", "-k", dir.to_str().unwrap()]);
}

/// The approval id of a call's answer refused `ApprovalPending <id>`; panics on any other.
pub fn pending_id(body: &Value) -> String {
    let reason = body["reason"].as_str().unwrap_or_default();
    assert_eq!(body["decision"], "block", "{body}");
    let id = reason
        .strip_prefix("ApprovalPending ")
        .unwrap_or_else(|| panic!("not pending: {body}"));
    id.to_owned()
}

/// `kubectl --as user -n ns patch hookapproval id --type merge -p patch` → (success,
/// stderr).
pub fn patch_as(
    cp: &ControlPlane,
    ns: &str,
    user: &str,
    id: &str,
    patch: &Value,
) -> (bool, String) {
    let out = cp.kubectl(&[
        "--as",
        user,
        "-n",
        ns,
        "patch",
        "hookapproval",
        id,
        "--type",
        "merge",
        "-p",
        &patch.to_string(),
    ]);
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Retries [`patch_as`] until its stderr holds `needle`, asserting every try is refused
/// (the policy compiles after it is created; until then every decision is refused for
/// that alone). So it also waits until the policy is in force.
pub fn refused_with(
    cp: &ControlPlane,
    ns: &str,
    user: &str,
    id: &str,
    patch: &Value,
    needle: &str,
) {
    let mut last = String::new();
    let ok = wait_for(Duration::from_secs(30), || {
        let (ok, err) = patch_as(cp, ns, user, id, patch);
        assert!(!ok, "{user} patched {id} with {patch}");
        last = err;
        last.contains(needle)
    });
    assert!(ok, "{user}: never refused with {needle:?}: {last}");
}
