//! CONTRACT §9.6 on the real API server: a hook's header takes its value from a Secret only
//! when the Secret's owner opted in with the label `agenthooks.io/hook-secret: "true"`.
//!
//! One operator and one dispatcher (allowed to call 127.0.0.1, where a stand-in policy
//! service records the headers it receives). A hook whose header names an unlabelled Secret
//! is `Accepted=False`, reason `SecretNotOptedIn`, its message naming the Secret
//! (namespace/name) and the label, and no dispatcher serves it. Labelling the Secret
//! accepts it at once (the operator's label-selected Secret watch sees the Secret enter its
//! selection), the dispatcher serves it and the policy service receives the Secret's value
//! in the header. Removing the label refuses it again (the Secret leaves the selection) and
//! the dispatcher stops serving it, so the value is no longer sent. A hook naming a Secret
//! that does not exist yet is `SecretNotFound` until the Secret is created with the label.

use std::time::Duration;

use agenthooks_e2e::stack::{
    DispatcherProc, OperatorProc, install_crds, log_dir, switchable_hook_server, wait_or_panic,
};
use agenthooks_e2e::{ControlPlane, condition, unique_name};
use serde_json::{Value, json};

/// How long a Secret label change may take to reach the hook's status. Far below the
/// operator's resync (600 s): only the Secret watch can make it.
const LABEL_REACHES_STATUS: Duration = Duration::from_secs(30);

fn http_hook(ns: &str, name: &str, url: &str, secret: &str) -> String {
    format!(
        "apiVersion: agenthooks.io/v1alpha1\nkind: AgentHook\nmetadata: {{name: {name}, namespace: {ns}}}\nspec:\n  event: pre_tool_use\n  matcher: '^{name}$'\n  handler:\n    type: http\n    http:\n      url: '{url}'\n      headers:\n        - name: Authorization\n          valueFrom:\n            secretKeyRef: {{name: {secret}, key: token}}\n"
    )
}

/// The hook's `Accepted` condition as (status, reason, message).
fn accepted(cp: &ControlPlane, ns: &str, name: &str) -> Option<(String, String, String)> {
    let out = cp.kubectl(&["-n", ns, "get", "agenthook", name, "-o", "json"]);
    if !out.status.success() {
        return None;
    }
    let hook: Value = serde_json::from_slice(&out.stdout).ok()?;
    let c = condition(&hook, "Accepted")?;
    let s = |k: &str| c[k].as_str().unwrap_or_default().to_string();
    Some((s("status"), s("reason"), s("message")))
}

fn has_reason(cp: &ControlPlane, ns: &str, name: &str, status: &str, reason: &str) -> bool {
    accepted(cp, ns, name).is_some_and(|(s, r, _)| s == status && r == reason)
}

#[test]
fn a_header_reads_only_a_secret_its_owner_opted_in() {
    let cp = ControlPlane::shared();
    install_crds(cp);
    let master = unique_name("ah-secrets");
    let ns = unique_name("tenant-secrets");
    // A tenant of this test only: other tests' hooks on the shared API server never decide.
    let tenant = unique_name("secrets");
    cp.create_namespace(&master, &[]);
    cp.create_namespace(&ns, &[("agenthooks.io/tenant", tenant.as_str())]);
    let logs = log_dir("ah-secrets");
    let op = OperatorProc::start(
        &cp.kubeconfig,
        &master,
        &unique_name("agenthooks-operator"),
        "op-secrets",
        &[],
        &logs,
    );
    let d = DispatcherProc::start(
        &[&op.sync],
        &unique_name("secrets"),
        &master,
        &["--http-allow-cidr", "127.0.0.1/32"],
        &logs,
    );
    let procs = [&op.proc, &d.proc];
    wait_or_panic(
        Duration::from_secs(60),
        "the dispatcher ready",
        &procs,
        || d.readyz() == 200,
    );
    let (url, policy) = switchable_hook_server(
        200,
        json!({"decision": "block", "reason": "policy service saw the call"}),
    );

    // A Secret without the label, and a hook whose header names it.
    let secret = unique_name("policy-token");
    cp.kubectl_ok(&[
        "-n",
        &ns,
        "create",
        "secret",
        "generic",
        &secret,
        "--from-literal=token=Bearer s3cret",
    ]);
    let name = unique_name("guard");
    let key = format!("{ns}/{name}");
    cp.apply_yaml(&http_hook(&ns, &name, &url, &secret));
    wait_or_panic(
        Duration::from_secs(30),
        "Accepted=False SecretNotOptedIn",
        &procs,
        || has_reason(cp, &ns, &name, "False", "SecretNotOptedIn"),
    );
    let (_, _, message) = accepted(cp, &ns, &name).unwrap();
    assert_eq!(
        message,
        format!(
            "spec.handler.http.headers[name=Authorization].valueFrom.secretKeyRef: Secret {ns}/{secret} is not opted in to hook use; hooks may read a Secret only if its owner labels it agenthooks.io/hook-secret: \"true\" (kubectl -n {ns} label secret {secret} agenthooks.io/hook-secret=true)"
        )
    );
    let event = json!({"event": "pre_tool_use", "tenant_id": tenant, "agent_id": "a1",
                       "tool_name": name, "tool_input": {"cmd": "x"}});
    assert_eq!(
        d.served_generation(&key),
        None,
        "a refused hook is never served"
    );
    let (code, body) = d.dispatch(&event);
    assert_eq!(code, 200, "{body}");
    assert_eq!(body["decision"], "allow", "{body}");
    assert_eq!(policy.hits(), 0, "the policy service was never called");

    // The owner opts in: the hook is accepted, served, and the header carries the value.
    cp.kubectl_ok(&[
        "-n",
        &ns,
        "label",
        "secret",
        &secret,
        "agenthooks.io/hook-secret=true",
    ]);
    wait_or_panic(LABEL_REACHES_STATUS, "Accepted=True", &procs, || {
        has_reason(cp, &ns, &name, "True", "Accepted")
    });
    wait_or_panic(
        Duration::from_secs(30),
        "the dispatcher serves the hook",
        &procs,
        || d.served_generation(&key).is_some(),
    );
    let (code, body) = d.dispatch(&event);
    assert_eq!(code, 200, "{body}");
    assert_eq!(body["decision"], "block", "{body}");
    assert_eq!(body["decidingHook"], key.as_str(), "{body}");
    assert_eq!(policy.hits(), 1);
    assert_eq!(
        policy.last_header("authorization").as_deref(),
        Some("Bearer s3cret")
    );

    // The label goes: refused again, no longer served, the value no longer sent.
    cp.kubectl_ok(&[
        "-n",
        &ns,
        "label",
        "secret",
        &secret,
        "agenthooks.io/hook-secret-",
    ]);
    wait_or_panic(
        LABEL_REACHES_STATUS,
        "Accepted=False SecretNotOptedIn after the label was removed",
        &procs,
        || has_reason(cp, &ns, &name, "False", "SecretNotOptedIn"),
    );
    wait_or_panic(
        Duration::from_secs(30),
        "the dispatcher drops the hook",
        &procs,
        || d.served_generation(&key).is_none(),
    );
    let (code, body) = d.dispatch(&event);
    assert_eq!(code, 200, "{body}");
    assert_eq!(body["decision"], "allow", "{body}");
    assert_eq!(policy.hits(), 1, "no call after the opt-in was withdrawn");

    // A Secret that does not exist yet: SecretNotFound, its message naming the label; created
    // with the label, the hook is accepted at once.
    let later = unique_name("later-token");
    let name2 = unique_name("guard2");
    cp.apply_yaml(&http_hook(&ns, &name2, &url, &later));
    wait_or_panic(
        Duration::from_secs(30),
        "Accepted=False SecretNotFound",
        &procs,
        || has_reason(cp, &ns, &name2, "False", "SecretNotFound"),
    );
    let (_, _, message) = accepted(cp, &ns, &name2).unwrap();
    assert!(
        message.contains(&format!("Secret {later:?} not found in namespace {ns:?}"))
            && message.contains("labelled agenthooks.io/hook-secret: \"true\""),
        "{message}"
    );
    cp.apply_yaml(
        &json!({
            "apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": later, "namespace": ns,
                         "labels": {"agenthooks.io/hook-secret": "true"}},
            "stringData": {"token": "Bearer later"},
        })
        .to_string(),
    );
    wait_or_panic(
        LABEL_REACHES_STATUS,
        "Accepted=True once the labelled Secret exists",
        &procs,
        || has_reason(cp, &ns, &name2, "True", "Accepted"),
    );
}
