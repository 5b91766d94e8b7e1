//! Tenants belong to the platform team (CONTRACT §9.3), on a real kube-apiserver:
//!
//! (a) the operator (run as a process with the ServiceAccount and ClusterRole of
//!     `config/rbac/`, nothing more) lets one namespace hold each tenant: a younger
//!     namespace labelled with a tenant an older one holds has no tenant — its hook and
//!     its budget are `Accepted=False`, reason `TenantConflict`, naming both namespaces,
//!     and the hook is not in the snapshot — while the older namespace's hook is
//!     untouched; the snapshot's `tenants` lists both claims. Removing the label makes
//!     the namespace claim its own name, and its hook and budget are accepted.
//! (b) the ValidatingAdmissionPolicy of `config/tenancy/` refuses a user who may create
//!     and update namespaces but may not `assign` tenants when they set, change or
//!     remove the `agenthooks.io/tenant` label (the refusal names the label), lets the
//!     same user do other edits, and lets them through once bound to the shipped
//!     ClusterRole `agenthooks-tenant-admin`; a narrower grant (resourceNames) allows
//!     its tenants only.

use std::path::Path;
use std::time::Duration;

use agenthooks_e2e::stack::{
    OperatorProc, SyncIdentity, http_get_with, install_crds, log_dir,
    operator_service_account_kubeconfig, wait_or_panic,
};
use agenthooks_e2e::{ControlPlane, condition, unique_name, wait_for};
use serde_json::{Value, json};

const TENANT_LABEL: &str = "agenthooks.io/tenant";

fn hook_yaml(ns: &str, name: &str) -> String {
    format!(
        "apiVersion: agenthooks.io/v1alpha1\nkind: AgentHook\nmetadata: {{name: {name}, namespace: {ns}}}\nspec:\n  event: pre_tool_use\n  matcher: '^{name}$'\n  handler:\n    type: http\n    http: {{url: 'https://policy.example.com/{name}'}}\n"
    )
}

fn budget_yaml(ns: &str, name: &str) -> String {
    format!(
        "apiVersion: agenthooks.io/v1alpha1\nkind: TenantHookBudget\nmetadata: {{name: {name}, namespace: {ns}}}\nspec: {{monthlyTokens: 1000}}\n"
    )
}

/// `kind/name` in `ns` as JSON (Null when it cannot be read).
fn get(cp: &ControlPlane, ns: &str, kind: &str, name: &str) -> Value {
    let out = cp.kubectl(&["-n", ns, "get", kind, name, "-o", "json"]);
    if !out.status.success() {
        return Value::Null;
    }
    serde_json::from_slice(&out.stdout).unwrap_or(Value::Null)
}

/// The `Accepted` condition of `kind/name` in `ns`.
fn accepted(cp: &ControlPlane, ns: &str, kind: &str, name: &str) -> Option<Value> {
    condition(&get(cp, ns, kind, name), "Accepted")
}

/// The operator's current snapshot (`GET /v1/snapshot` on its sync port, as dispatcher
/// `me` asks for it).
fn snapshot(op: &OperatorProc, me: &SyncIdentity) -> Value {
    let (code, body) = http_get_with(
        &format!(
            "{}/v1/snapshot?dispatcher={}&timeoutSeconds=0",
            op.sync,
            me.id.replace('/', "%2F")
        ),
        &["-H", &me.header()],
    );
    if code != 200 {
        return Value::Null;
    }
    serde_json::from_str(&body).unwrap_or(Value::Null)
}

/// The keys (`namespace/name`) of the snapshot's hooks in the namespaces `nss`.
fn served(snapshot: &Value, nss: &[&str]) -> Vec<String> {
    let mut keys: Vec<String> = snapshot["hooks"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|h| nss.iter().any(|ns| h["namespace"] == *ns))
        .map(|h| {
            format!(
                "{}/{}",
                h["namespace"].as_str().unwrap_or(""),
                h["name"].as_str().unwrap_or("")
            )
        })
        .collect();
    keys.sort();
    keys
}

/// The snapshot's claim of namespace `ns` (Null when it has none).
fn claim(snapshot: &Value, ns: &str) -> Value {
    snapshot["tenants"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|t| t["namespace"] == ns)
        .cloned()
        .unwrap_or(Value::Null)
}

/// The creation time of namespace `ns` (RFC 3339, second precision).
fn created(cp: &ControlPlane, ns: &str) -> String {
    cp.kubectl_json(&["get", "namespace", ns])["metadata"]["creationTimestamp"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

#[test]
fn a_second_namespace_claiming_a_tenant_runs_nothing_until_its_label_goes() {
    let cp = ControlPlane::shared();
    install_crds(cp);
    let master = unique_name("ah-tenancy");
    cp.create_namespace(&master, &[]);
    let tenant = unique_name("acme");
    let holder = unique_name("tenant-acme");
    cp.create_namespace(&holder, &[(TENANT_LABEL, &tenant)]);
    // Creation times have whole seconds: the second namespace must be younger, not of
    // the same second (a tie is broken by the name, where team-b would win).
    let team_b = unique_name("team-b");
    std::thread::sleep(Duration::from_millis(1100));
    cp.create_namespace(&team_b, &[(TENANT_LABEL, &tenant)]);
    assert!(
        created(cp, &team_b) > created(cp, &holder),
        "{team_b} is not younger than {holder}"
    );

    let logs = log_dir("ah-tenancy");
    let kubeconfig = operator_service_account_kubeconfig(cp, &master, &logs);
    let op = OperatorProc::start(
        &kubeconfig,
        &master,
        &unique_name("agenthooks-operator"),
        "tenancy-op",
        &[],
        &logs,
    );
    let me = SyncIdentity::mint(cp, &master, "tenancy-e2e");
    cp.apply_yaml(&hook_yaml(&holder, "guard"));
    cp.apply_yaml(&hook_yaml(&team_b, "mine"));
    cp.apply_yaml(&budget_yaml(&team_b, "mine"));

    wait_or_panic(
        Duration::from_secs(60),
        "the holder's hook accepted, team-b's hook and budget refused TenantConflict",
        &[&op.proc],
        || {
            accepted(cp, &holder, "agenthook", "guard").is_some_and(|c| c["status"] == "True")
                && accepted(cp, &team_b, "agenthook", "mine")
                    .is_some_and(|c| c["reason"] == "TenantConflict")
                && accepted(cp, &team_b, "tenanthookbudget", "mine")
                    .is_some_and(|c| c["reason"] == "TenantConflict")
        },
    );
    for kind in ["agenthook", "tenanthookbudget"] {
        let c = accepted(cp, &team_b, kind, "mine").unwrap();
        assert_eq!(c["status"], "False", "{kind}: {c}");
        let message = c["message"].as_str().unwrap_or_default();
        for name in [&team_b, &format!("{tenant:?}"), &holder] {
            assert!(
                message.contains(name.as_str()),
                "{kind}: {name} in {message}"
            );
        }
    }
    let guard_since =
        accepted(cp, &holder, "agenthook", "guard").unwrap()["lastTransitionTime"].clone();

    // The snapshot: the holder's hook only; both claims, team-b's lost to the holder.
    let want_claims = |s: &Value| {
        claim(s, &holder) == json!({"namespace": holder, "tenant": tenant})
            && claim(s, &team_b) == json!({"namespace": team_b, "tenant": tenant, "heldBy": holder})
    };
    wait_or_panic(
        Duration::from_secs(20),
        "the snapshot carries both claims",
        &[&op.proc],
        || want_claims(&snapshot(&op, &me)),
    );
    let s = snapshot(&op, &me);
    assert_eq!(
        served(&s, &[&holder, &team_b]),
        [format!("{holder}/guard")],
        "team-b's hook is not served"
    );
    assert_eq!(
        claim(&s, &master),
        json!({"namespace": master, "tenant": master})
    );

    // The label goes: team-b claims its own name, and holds it.
    cp.kubectl_ok(&["label", "namespace", &team_b, &format!("{TENANT_LABEL}-")]);
    wait_or_panic(
        Duration::from_secs(30),
        "team-b's hook and budget accepted once its label is gone",
        &[&op.proc],
        || {
            accepted(cp, &team_b, "agenthook", "mine").is_some_and(|c| c["status"] == "True")
                && accepted(cp, &team_b, "tenanthookbudget", "mine")
                    .is_some_and(|c| c["status"] == "True")
        },
    );
    let budget = accepted(cp, &team_b, "tenanthookbudget", "mine").unwrap();
    assert!(
        budget["message"]
            .as_str()
            .is_some_and(|m| m.contains(&team_b)),
        "the budget of tenant {team_b}: {budget}"
    );
    wait_or_panic(
        Duration::from_secs(20),
        "team-b's hook served",
        &[&op.proc],
        || served(&snapshot(&op, &me), &[&holder, &team_b]).len() == 2,
    );
    let s = snapshot(&op, &me);
    assert_eq!(
        served(&s, &[&holder, &team_b]),
        [format!("{team_b}/mine"), format!("{holder}/guard")],
        "sorted: team-b… before tenant-acme…"
    );
    let mine = s["hooks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|h| h["namespace"] == team_b.as_str())
        .unwrap();
    assert_eq!(mine["namespaceTenant"], team_b.as_str());
    assert_eq!(
        claim(&s, &holder),
        json!({"namespace": holder, "tenant": tenant})
    );
    assert_eq!(
        claim(&s, &team_b),
        json!({"namespace": team_b, "tenant": team_b})
    );
    // The holder's hook never moved.
    let guard = accepted(cp, &holder, "agenthook", "guard").unwrap();
    assert_eq!(
        (&guard["status"], &guard["lastTransitionTime"]),
        (&json!("True"), &guard_since),
        "{guard}"
    );
}

// ---- (b) the admission policy ---------------------------------------------------------

/// Deletes the cluster-scoped objects a test made, even when it fails.
struct Cleanup(&'static ControlPlane, Vec<(String, String)>);

impl Drop for Cleanup {
    fn drop(&mut self) {
        for (kind, name) in &self.1 {
            let _ = self
                .0
                .kubectl(&["delete", kind, name, "--ignore-not-found"]);
        }
    }
}

/// Runs `kubectl args` as `user` (impersonated by the admin); (success, stderr).
fn as_user(cp: &ControlPlane, user: &str, args: &[&str]) -> (bool, String) {
    let mut all = vec!["--as", user];
    all.extend_from_slice(args);
    let out = cp.kubectl(&all);
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// `config/tenancy/<file>` as JSON objects.
fn shipped(cp: &ControlPlane, file: &str) -> Value {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../config/tenancy")
        .join(file);
    let out = cp.kubectl(&[
        "create",
        "--dry-run=client",
        "-o",
        "json",
        "-f",
        path.to_str().unwrap(),
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

#[test]
fn only_tenant_admins_may_set_change_or_remove_the_tenant_label() {
    let cp = ControlPlane::shared();
    let run = unique_name("tenancy");
    // The shipped policy under a name of this test, bound to this test's namespaces only
    // (they carry the label e2e-tenancy=<run>): other tests on the shared API server label
    // their namespaces as the admin, which the policy would allow anyway.
    let mut policy = shipped(cp, "policy.yaml");
    let policy_name = unique_name("ah-tenant-label");
    policy["metadata"]["name"] = json!(policy_name);
    let binding = json!({
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {"name": policy_name},
        "spec": {
            "policyName": policy_name,
            "validationActions": ["Deny"],
            "matchResources": {"objectSelector": {"matchLabels": {"e2e-tenancy": run}}},
        },
    });
    let user = unique_name("alice");
    let narrow_user = unique_name("bob");
    let editor = unique_name("ns-editor");
    let narrow = unique_name("assign-one");
    let _cleanup = Cleanup(
        cp,
        vec![
            (
                "validatingadmissionpolicybinding".into(),
                policy_name.clone(),
            ),
            ("validatingadmissionpolicy".into(), policy_name.clone()),
            ("clusterrolebinding".into(), editor.clone()),
            ("clusterrolebinding".into(), format!("{editor}-admin")),
            ("clusterrolebinding".into(), narrow.clone()),
            ("clusterrole".into(), editor.clone()),
            ("clusterrole".into(), narrow.clone()),
        ],
    );
    cp.apply_yaml(&policy.to_string());
    cp.apply_yaml(&binding.to_string());
    // Both users may create, update and patch namespaces; bob may assign one tenant.
    let (t1, t2, t3) = (unique_name("t1"), unique_name("t2"), unique_name("t3"));
    cp.apply_yaml(
        &json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
            "metadata": {"name": editor},
            "rules": [{"apiGroups": [""], "resources": ["namespaces"],
                       "verbs": ["get", "list", "create", "update", "patch"]}]})
        .to_string(),
    );
    cp.apply_yaml(
        &json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
            "metadata": {"name": narrow},
            "rules": [{"apiGroups": ["agenthooks.io"], "resources": ["tenants"],
                       "resourceNames": [t3], "verbs": ["assign"]}]})
        .to_string(),
    );
    for (name, role, subject) in [
        (editor.as_str(), editor.as_str(), &user),
        (narrow.as_str(), narrow.as_str(), &narrow_user),
    ] {
        let mut subjects =
            vec![json!({"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": subject})];
        if name == editor {
            subjects.push(json!({"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": narrow_user}));
        }
        cp.apply_yaml(
            &json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
                "metadata": {"name": name},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
                "subjects": subjects})
            .to_string(),
        );
    }

    // A namespace of alice's, claiming its name (anyone who may create namespaces can).
    let ns = unique_name("team-x");
    let ns_doc = |name: &str, tenant: Option<&str>| {
        let mut labels = json!({"e2e-tenancy": run});
        if let Some(t) = tenant {
            labels[TENANT_LABEL] = json!(t);
        }
        json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": labels}})
            .to_string()
    };
    let create = |who: &str, name: &str, tenant: Option<&str>, dry: bool| {
        let mut args = vec!["create", "-f", "-"];
        if dry {
            args.push("--dry-run=server");
        }
        let out = cp.kubectl_stdin(
            &[&["--as", who][..], &args[..]].concat(),
            &ns_doc(name, tenant),
        );
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    assert!(
        wait_for(Duration::from_secs(20), || create(&user, &ns, None, false)
            .0),
        "alice may create namespaces: {}",
        create(&user, &ns, None, true).1
    );
    let label = |who: &str, value: Option<&str>, dry: bool| {
        let arg = match value {
            Some(v) => format!("{TENANT_LABEL}={v}"),
            None => format!("{TENANT_LABEL}-"),
        };
        let mut args = vec![
            "label",
            "namespace",
            ns.as_str(),
            arg.as_str(),
            "--overwrite",
        ];
        if dry {
            args.push("--dry-run=server");
        }
        as_user(cp, who, &args)
    };

    // The policy takes a moment to be active: probe with server-side dry runs.
    assert!(
        wait_for(Duration::from_secs(30), || !label(&user, Some(&t1), true).0),
        "the policy never refused alice: {}",
        label(&user, Some(&t1), true).1
    );
    let refusals = [
        ("setting the label", label(&user, Some(&t1), false)),
        (
            "creating a labelled namespace",
            create(&user, &unique_name("team-y"), Some(&t1), false),
        ),
    ];
    for (what, (ok, stderr)) in &refusals {
        assert!(!ok, "{what} was allowed");
        for want in [
            "metadata.labels[agenthooks.io/tenant]",
            "Forbidden",
            user.as_str(),
            "assign",
        ] {
            assert!(stderr.contains(want), "{what}: {want:?} in {stderr}");
        }
    }
    // Other edits of the namespace are none of the policy's business.
    let (ok, stderr) = as_user(cp, &user, &["label", "namespace", &ns, "team=x"]);
    assert!(ok, "another label: {stderr}");

    // The platform (the admin) assigns it to t1; alice may neither relabel nor unlabel it.
    cp.kubectl_ok(&["label", "namespace", &ns, &format!("{TENANT_LABEL}={t1}")]);
    let (ok, stderr) = label(&user, Some(&t2), false);
    assert!(
        !ok && stderr.contains(&format!("set it to {t2} (it was {t1})")),
        "{stderr}"
    );
    let (ok, stderr) = label(&user, None, false);
    assert!(
        !ok && stderr.contains(&format!(
            "remove the label (the namespace would claim tenant {ns} by its name)"
        )),
        "{stderr}"
    );
    // bob may assign t3 only: not t2, and not away from t1 either.
    let (ok, stderr) = label(&narrow_user, Some(&t3), false);
    assert!(
        !ok && stderr.contains(&format!("set it to {t3} (it was {t1})")),
        "{stderr}"
    );
    cp.kubectl_ok(&["label", "namespace", &ns, &format!("{TENANT_LABEL}-")]);
    assert!(label(&narrow_user, Some(&t3), false).0, "bob assigns t3");
    let (ok, stderr) = label(&narrow_user, Some(&t2), false);
    assert!(
        !ok && stderr.contains(&format!("set it to {t2} (it was {t3})")),
        "{stderr}"
    );

    // alice bound to the shipped tenant-admin ClusterRole: all of it goes through.
    let admin_role = shipped(cp, "tenant-admin.yaml");
    cp.apply_yaml(&admin_role.to_string());
    cp.apply_yaml(
        &json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
            "metadata": {"name": format!("{editor}-admin")},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                        "name": admin_role["metadata"]["name"]},
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}]})
        .to_string(),
    );
    assert!(
        wait_for(Duration::from_secs(20), || label(&user, Some(&t2), true).0),
        "alice still refused as a tenant admin: {}",
        label(&user, Some(&t2), true).1
    );
    for (what, (ok, stderr)) in [
        ("relabel", label(&user, Some(&t2), false)),
        ("unlabel", label(&user, None, false)),
        ("label", label(&user, Some(&t1), false)),
        (
            "create labelled",
            create(&user, &unique_name("team-z"), Some(&t2), false),
        ),
    ] {
        assert!(ok, "{what}: {stderr}");
    }
    let labels = &cp.kubectl_json(&["get", "namespace", &ns])["metadata"]["labels"];
    assert_eq!(labels[TENANT_LABEL], t1.as_str(), "{labels}");
}
