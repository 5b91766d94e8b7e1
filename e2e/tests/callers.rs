//! Callers in a cluster (CONTRACT §9.1–9.2) on the real API server: a dispatcher with
//! `--kubernetes-callers`, running as a ServiceAccount with exactly the RBAC of
//! `config/rbac/dispatcher.yaml`, verifies projected ServiceAccount tokens with TokenReview and
//! grants other tenants by RBAC on `agenthooks/dispatch` (SubjectAccessReview).
//!
//! Tenant names are unique per run: the control plane is shared by every test of the run, and
//! one namespace holds each tenant (CONTRACT §9.3).

use std::time::Duration;

use agenthooks_e2e::stack::{
    http_post_with, install_crds, kubernetes_callers_stack, log_dir, service_account_token, tails,
    wait_or_panic,
};
use agenthooks_e2e::{ControlPlane, unique_name, wait_for};
use serde_json::{Value, json};

/// `POST /v1/dispatch` with `Authorization: Bearer token` (none for `None`).
fn dispatch(url: &str, token: Option<&str>, event: &Value) -> (u16, Value) {
    let header = token.map(|t| format!("Authorization: Bearer {t}"));
    let extra: Vec<&str> = match &header {
        Some(h) => vec!["-H", h],
        None => vec![],
    };
    let (code, body) = http_post_with(&format!("{url}/v1/dispatch"), event, &extra);
    (code, serde_json::from_str(&body).unwrap_or(Value::Null))
}

/// A ServiceAccount token signed with the control plane's own key, as the API server makes
/// them, but with the expiry we choose (`exp_in` seconds from now; negative: expired).
/// `None` on an external cluster (its signing key is not ours).
fn signed_token(cp: &ControlPlane, ns: &str, name: &str, uid: &str, exp_in: i64) -> Option<String> {
    use base64::Engine;
    let key = cp.dir.as_ref()?.join("sa.key");
    let enc = |b: &[u8]| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(b);
    let now = chrono::Utc::now().timestamp();
    let claims = json!({
        "aud": ["agenthooks.io"],
        "exp": now + exp_in,
        "iat": now - 700,
        "nbf": now - 700,
        "iss": "https://kubernetes.default.svc",
        "sub": format!("system:serviceaccount:{ns}:{name}"),
        "kubernetes.io": {"namespace": ns, "serviceaccount": {"name": name, "uid": uid}},
    });
    let signing_input = format!(
        "{}.{}",
        enc(br#"{"alg":"RS256","typ":"JWT"}"#),
        enc(claims.to_string().as_bytes())
    );
    let mut child = std::process::Command::new("openssl")
        .args(["dgst", "-sha256", "-sign"])
        .arg(&key)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("openssl");
    use std::io::Write;
    child
        .stdin
        .take()
        .unwrap()
        .write_all(signing_input.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "openssl dgst -sign failed");
    Some(format!("{signing_input}.{}", enc(&out.stdout)))
}

#[test]
fn service_account_callers_act_for_their_tenant_and_rbac_grants_others() {
    let cp = ControlPlane::shared();
    install_crds(cp);
    let logs = log_dir("callers");
    let master = unique_name("callers-master");
    cp.create_namespace(&master, &[]);
    // Tenant acme: a labelled namespace; tenant beta: a namespace claiming its own name;
    // a platform namespace for a runtime serving several tenants.
    let acme = unique_name("acme");
    let acme_ns = unique_name("callers-acme");
    let beta_ns = unique_name("beta");
    let platform_ns = unique_name("callers-platform");
    cp.create_namespace(&acme_ns, &[("agenthooks.io/tenant", acme.as_str())]);
    cp.create_namespace(&beta_ns, &[]);
    cp.create_namespace(&platform_ns, &[]);
    for ns in [&acme_ns, &beta_ns, &platform_ns] {
        cp.kubectl_ok(&["create", "serviceaccount", "runtime", "-n", ns]);
    }
    // acme's guard blocks every exec.
    cp.apply_yaml(&format!(
        "apiVersion: agenthooks.io/v1alpha1\nkind: AgentHook\nmetadata: {{name: guard, namespace: {acme_ns}}}\nspec:\n  event: pre_tool_use\n  matcher: '^exec$'\n  handler: {{type: command, command: {{command: 'echo acme says no >&2; exit 2'}}}}\n"
    ));

    let (operator, d) = kubernetes_callers_stack(cp, "callers", &master, &[], &logs);
    let procs = [&operator.proc, &d.proc];
    let guard = format!("{acme_ns}/guard");
    wait_or_panic(
        Duration::from_secs(60),
        "the dispatcher serves acme's guard",
        &procs,
        || d.served_generation(&guard).is_some(),
    );
    let exec = |tenant: Option<&str>| {
        let mut e =
            json!({"event": "pre_tool_use", "tool_name": "exec", "tool_input": {"cmd": "ls"}});
        if let Some(t) = tenant {
            e["tenant_id"] = json!(t);
        }
        e
    };

    // acme's runtime: its namespace's tenant, named or not; the guard runs.
    let acme_token = service_account_token(cp, &acme_ns, "runtime", "agenthooks.io");
    // The snapshot carries the namespaces' tenants a moment after the namespaces exist.
    wait_or_panic(
        Duration::from_secs(30),
        "acme's runtime is served as tenant acme",
        &procs,
        || dispatch(&d.url, Some(&acme_token), &exec(None)).0 == 200,
    );
    for tenant in [None, Some(acme.as_str())] {
        let (code, body) = dispatch(&d.url, Some(&acme_token), &exec(tenant));
        assert_eq!(
            (code, body["decision"].as_str(), body["reason"].as_str()),
            (200, Some("block"), Some("acme says no")),
            "{tenant:?}: {body}\n{}",
            tails(&procs)
        );
    }

    // beta's runtime claiming acme: 403 naming tenant_id; its own tenant has no hooks.
    let beta_token = service_account_token(cp, &beta_ns, "runtime", "agenthooks.io");
    let (code, body) = dispatch(&d.url, Some(&beta_token), &exec(Some(&acme)));
    assert_eq!(
        (code, body["field"].as_str()),
        (403, Some("tenant_id")),
        "{body}"
    );
    let (code, body) = dispatch(&d.url, Some(&beta_token), &exec(None));
    assert_eq!(
        (code, body["decision"].as_str()),
        (200, Some("allow")),
        "{body}"
    );

    // No credential, a token for another audience (the API's own), garbage: 401.
    let api_token =
        service_account_token(cp, &acme_ns, "runtime", "https://kubernetes.default.svc");
    for t in [None, Some(api_token.as_str()), Some("not-a-token")] {
        let (code, body) = dispatch(&d.url, t, &exec(None));
        assert_eq!(code, 401, "{body}");
    }

    // A token signed by the cluster's key: accepted while valid, 401 once expired.
    let uid = cp.kubectl_ok(&[
        "get",
        "serviceaccount",
        "runtime",
        "-n",
        &acme_ns,
        "-o",
        "jsonpath={.metadata.uid}",
    ]);
    if let (Some(valid), Some(expired)) = (
        signed_token(cp, &acme_ns, "runtime", &uid, 600),
        signed_token(cp, &acme_ns, "runtime", &uid, -60),
    ) {
        let (code, body) = dispatch(&d.url, Some(&valid), &exec(None));
        assert_eq!(
            (code, body["decision"].as_str()),
            (200, Some("block")),
            "{body}"
        );
        let (code, body) = dispatch(&d.url, Some(&expired), &exec(None));
        assert_eq!(code, 401, "an expired token: {body}");
    }

    // A platform runtime: its own tenant by default; acme only once RBAC grants it, and
    // no longer once the RoleBinding goes (within the 2 s access cache).
    let platform_token = service_account_token(cp, &platform_ns, "runtime", "agenthooks.io");
    let (code, body) = dispatch(&d.url, Some(&platform_token), &exec(Some(&acme)));
    assert_eq!(
        (code, body["field"].as_str()),
        (403, Some("tenant_id")),
        "{body}"
    );
    assert!(
        body["error"]
            .as_str()
            .unwrap()
            .contains("create agenthooks/dispatch"),
        "{body}"
    );
    cp.apply_yaml(&format!(
        "apiVersion: rbac.authorization.k8s.io/v1\nkind: RoleBinding\nmetadata: {{name: platform-dispatch, namespace: {acme_ns}}}\nroleRef: {{apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: {role}}}\nsubjects: [{{kind: ServiceAccount, name: runtime, namespace: {platform_ns}}}]\n",
        role = agenthooks_e2e::stack::bindable_role("agenthooks-dispatch")
    ));
    assert!(
        wait_for(Duration::from_secs(10), || {
            dispatch(&d.url, Some(&platform_token), &exec(Some(&acme))).1["decision"] == "block"
        }),
        "the RoleBinding grants acme\n{}",
        tails(&procs)
    );
    // Granted acme is not granted beta.
    let (code, _) = dispatch(&d.url, Some(&platform_token), &exec(Some(&beta_ns)));
    assert_eq!(code, 403);
    cp.kubectl_ok(&["delete", "rolebinding", "platform-dispatch", "-n", &acme_ns]);
    let revoked = std::time::Instant::now();
    assert!(
        wait_for(Duration::from_secs(10), || {
            dispatch(&d.url, Some(&platform_token), &exec(Some(&acme))).0 == 403
        }),
        "deleting the RoleBinding revokes acme"
    );
    assert!(
        revoked.elapsed() < Duration::from_secs(5),
        "revoked within the access cache: {:?}",
        revoked.elapsed()
    );
}
