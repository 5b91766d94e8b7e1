//! Approvals out of band (issue 16 point 2) on the real API server: an operator and a
//! synced dispatcher; an AgentHook with `spec.approval` whose command answers `ask`; the
//! policy and ClusterRole of `config/approvals/`. A call becomes a `HookApproval` and is
//! refused `ApprovalPending <id>`; a user without RBAC cannot answer it, nor one who may
//! patch it but not `approve`, nor anyone in another's name; `alice` (bound to
//! agenthooks-approver) approves it and the same call goes through, while another input
//! asks anew; a rejection refuses with its note; a decision never changes; an unanswered
//! approval expires into a refusal, and the next call asks again.

use std::time::Duration;

use agenthooks_e2e::approvals::{self, patch_as, pending_id};
use agenthooks_e2e::stack::{Fleet, tails};
use agenthooks_e2e::wait_for;
use serde_json::{Value, json};

fn hook(ns: &str, name: &str, tool: &str, ttl: i64) -> String {
    format!(
        r#"apiVersion: agenthooks.io/v1alpha1
kind: AgentHook
metadata: {{name: {name}, namespace: {ns}}}
spec:
  event: pre_tool_use
  matcher: "^{tool}$"
  approval: {{ttlSeconds: {ttl}}}
  handler: {{type: command, command: {{command: "echo '{{\"decision\": \"ask\", \"reason\": \"{tool} needs a person\"}}'"}}}}
"#
    )
}

fn event(tenant: &str, tool: &str, input: Value) -> Value {
    json!({"event": "pre_tool_use", "tenant_id": tenant, "session_id": "s1", "agent_id": "a1",
           "tool_name": tool, "tool_input": input})
}

/// [`patch_as`] in the fleet's tenant namespace.
fn patch(f: &Fleet, user: &str, id: &str, patch: &Value) -> (bool, String) {
    patch_as(f.cp, &f.tenant_ns, user, id, patch)
}

/// [`approvals::refused_with`] in the fleet's tenant namespace.
fn refused_with(f: &Fleet, user: &str, id: &str, patch: &Value, needle: &str) {
    approvals::refused_with(f.cp, &f.tenant_ns, user, id, patch, needle);
}

/// `kubectl --as carol -n <tenant ns> ARGS` → (success, stderr).
fn carol_kubectl(f: &Fleet, args: &[&str]) -> (bool, String) {
    let mut all = vec!["--as", "carol", "-n", f.tenant_ns.as_str()];
    all.extend_from_slice(args);
    let out = f.cp.kubectl(&all);
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn decision(f: &Fleet, tool: &str, input: Value) -> Value {
    let (code, body) = f.dispatchers[0].dispatch(&event(&f.tenant, tool, input));
    assert_eq!(code, 200, "{body}");
    body
}

#[test]
fn approvals_are_answered_by_rbac_in_ones_own_name_and_expire() {
    let f = Fleet::start("appr", 1, &[]);
    let procs = [&f.operator.proc, &f.dispatchers[0].proc];
    approvals::install_policy(f.cp);
    let ns = f.tenant_ns.clone();
    f.cp.apply_yaml(&hook(&ns, "approve-deploys", "Deploy", 600));
    f.cp.apply_yaml(&hook(&ns, "short-lived", "Short", 3));
    // alice answers this namespace's approvals; carol may patch, create and delete them
    // but not approve.
    f.cp.apply_yaml(&format!(
        "apiVersion: rbac.authorization.k8s.io/v1\nkind: RoleBinding\nmetadata: {{name: approvers, namespace: {ns}}}\nroleRef: {{apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: agenthooks-approver}}\nsubjects: [{{kind: User, name: alice, apiGroup: rbac.authorization.k8s.io}}]\n---\napiVersion: rbac.authorization.k8s.io/v1\nkind: Role\nmetadata: {{name: patcher, namespace: {ns}}}\nrules: [{{apiGroups: [agenthooks.io], resources: [hookapprovals], verbs: [get, patch, create, delete]}}]\n---\napiVersion: rbac.authorization.k8s.io/v1\nkind: RoleBinding\nmetadata: {{name: patcher, namespace: {ns}}}\nroleRef: {{apiGroup: rbac.authorization.k8s.io, kind: Role, name: patcher}}\nsubjects: [{{kind: User, name: carol, apiGroup: rbac.authorization.k8s.io}}]\n"
    ));
    let served = wait_for(Duration::from_secs(60), || {
        ["approve-deploys", "short-lived"].iter().all(|n| {
            f.dispatchers[0]
                .served_generation(&format!("{ns}/{n}"))
                .is_some()
        })
    });
    assert!(served, "hooks not served\n{}", tails(&procs));

    // The first call asks: a pending approval, the call refused.
    let prod = json!({"env": "prod"});
    let id = pending_id(&decision(&f, "Deploy", prod.clone()));
    let approval = f.cp.kubectl_json(&["-n", &ns, "get", "hookapproval", &id]);
    let request = &approval["spec"]["request"];
    assert_eq!(request["hook"], format!("{ns}/approve-deploys"));
    assert_eq!(
        (
            &request["tenant"],
            &request["sessionId"],
            &request["toolName"],
            &request["reason"]
        ),
        (
            &json!(f.tenant),
            &json!("s1"),
            &json!("Deploy"),
            &json!("Deploy needs a person")
        )
    );
    assert!(approval["spec"].get("decision").is_none());
    // Asked again: the same approval, still pending.
    assert_eq!(pending_id(&decision(&f, "Deploy", prod.clone())), id);

    // carol replaces it with one of her own under the same id, showing a harmless call
    // that lasts for years. The next ask does not take it: it is replaced by the call's own.
    let (ok, err) = carol_kubectl(&f, &["delete", "hookapproval", &id]);
    assert!(ok, "{err}");
    let mut forged = approval.clone();
    forged["metadata"] = json!({"name": id, "namespace": ns});
    forged["spec"]["request"]["toolName"] = json!("Read");
    forged["spec"]["request"]["reason"] = json!("reads README.md");
    forged["spec"]["request"]["expiresAt"] = json!("2030-01-01T00:00:00Z");
    let out = f.cp.kubectl_stdin(
        &["--as", "carol", "-n", &ns, "create", "-f", "-"],
        &forged.to_string(),
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(pending_id(&decision(&f, "Deploy", prod.clone())), id);
    let replaced = f.cp.kubectl_json(&["-n", &ns, "get", "hookapproval", &id]);
    assert_eq!(
        replaced["spec"]["request"]["toolName"], "Deploy",
        "{replaced}"
    );
    assert_eq!(
        replaced["spec"]["request"]["reason"], "Deploy needs a person",
        "{replaced}"
    );
    assert_ne!(
        replaced["spec"]["request"]["expiresAt"], "2030-01-01T00:00:00Z",
        "{replaced}"
    );

    let approve = |by: &str| json!({"spec": {"decision": "Approve", "decidedBy": by}});
    // bob has no RBAC on approvals at all.
    let (ok, err) = patch(&f, "bob", &id, &approve("bob"));
    assert!(!ok && err.contains("forbidden"), "{err}");
    // carol may patch, not approve.
    refused_with(&f, "carol", &id, &approve("carol"), "may not approve calls");
    // alice may approve, only in her own name.
    refused_with(
        &f,
        "alice",
        &id,
        &approve("bob"),
        "must be your own user name",
    );
    let (ok, err) = patch(&f, "alice", &id, &approve("alice"));
    assert!(ok, "{err}");

    // The same call now goes through, without asking again.
    let body = decision(&f, "Deploy", prod.clone());
    assert_eq!(body["decision"], "allow", "{body}");
    assert_eq!(
        body["hooks"][0]["reason"],
        format!("approved by alice ({id})")
    );
    // A decision never changes.
    let (ok, err) = patch(
        &f,
        "alice",
        &id,
        &json!({"spec": {"decision": "Reject", "decidedBy": "alice"}}),
    );
    assert!(!ok && err.contains("never changes"), "{err}");
    // Another input is another call: asked anew, and rejected with a note.
    let other = pending_id(&decision(
        &f,
        "Deploy",
        json!({"env": "prod", "force": true}),
    ));
    assert_ne!(other, id);
    let (ok, err) = patch(
        &f,
        "alice",
        &other,
        &json!({"spec": {"decision": "Reject", "decidedBy": "alice", "note": "no force pushes"}}),
    );
    assert!(ok, "{err}");
    let body = decision(&f, "Deploy", json!({"env": "prod", "force": true}));
    assert_eq!(
        (&body["decision"], &body["reason"]),
        (
            &json!("block"),
            &json!(format!("ApprovalRejected {other}: no force pushes"))
        )
    );

    // Unanswered past its TTL: refused as expired, and the next call asks anew.
    let short = pending_id(&decision(&f, "Short", json!({})));
    std::thread::sleep(Duration::from_secs(4));
    let body = decision(&f, "Short", json!({}));
    assert_eq!(
        (&body["decision"], &body["reason"]),
        (&json!("block"), &json!(format!("ApprovalExpired {short}")))
    );
    assert_eq!(pending_id(&decision(&f, "Short", json!({}))), short);
    let again =
        f.cp.kubectl_json(&["-n", &ns, "get", "hookapproval", &short]);
    assert!(again["spec"].get("decision").is_none(), "a fresh request");
}
