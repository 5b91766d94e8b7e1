//! Smoke tests of the e2e control plane itself: the API server answers, RBAC is enforced, and
//! CustomResourceDefinitions work (with a throwaway CRD, not the agenthooks ones).

use std::time::Duration;

use agenthooks_e2e::{ControlPlane, unique_name, wait_for};

fn stderr(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn api_server_answers() {
    let cp = ControlPlane::shared();

    let version = cp.kubectl_ok(&["get", "--raw", "/version"]);
    let version: serde_json::Value = serde_json::from_str(&version).expect("/version is JSON");
    assert!(
        version["gitVersion"].is_string(),
        "unexpected /version: {version}"
    );
    eprintln!("server /version: {version}");

    let ready = cp.kubectl_ok(&["get", "--raw", "/readyz"]);
    assert_eq!(ready.trim(), "ok");

    let ns = cp.kubectl_json(&["get", "namespace", "default"]);
    assert_eq!(ns["metadata"]["name"], "default");
    assert_eq!(ns["status"]["phase"], "Active");
}

#[test]
fn rbac_is_enforced() {
    let cp = ControlPlane::shared();
    let ns = unique_name("rbac");
    cp.create_namespace(&ns, &[("agenthooks.io/e2e", "controlplane")]);
    let labels = cp.kubectl_ok(&["get", "namespace", &ns, "-o", "jsonpath={.metadata.labels}"]);
    assert!(
        labels.contains("\"agenthooks.io/e2e\":\"controlplane\""),
        "labels: {labels}"
    );

    // Unauthenticated: a wrong bearer token is rejected (anonymous auth is off).
    let out = cp.kubectl(&["--token=not-a-valid-token", "get", "namespaces"]);
    assert!(!out.status.success(), "bogus token was accepted");
    assert!(
        stderr(&out).contains("Unauthorized"),
        "expected Unauthorized, got: {}",
        stderr(&out)
    );

    // Authenticated but not authorised: a fresh ServiceAccount may not list pods.
    cp.kubectl_ok(&["-n", &ns, "create", "serviceaccount", "x"]);
    let sa = format!("--as=system:serviceaccount:{ns}:x");
    let out = cp.kubectl(&[&sa, "-n", &ns, "get", "pods"]);
    assert!(
        !out.status.success(),
        "service account without RBAC could list pods"
    );
    assert!(
        stderr(&out).contains("Forbidden"),
        "expected Forbidden, got: {}",
        stderr(&out)
    );

    // ... until a Role grants it (so RBAC decides, not AlwaysDeny).
    cp.apply_yaml(&format!(
        r#"
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {{name: pod-reader, namespace: {ns}}}
rules:
- apiGroups: [""]
  resources: [pods]
  verbs: [get, list]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {{name: x-reads-pods, namespace: {ns}}}
roleRef: {{apiGroup: rbac.authorization.k8s.io, kind: Role, name: pod-reader}}
subjects:
- {{kind: ServiceAccount, name: x, namespace: {ns}}}
"#
    ));
    assert!(
        wait_for(Duration::from_secs(10), || cp
            .kubectl(&[&sa, "-n", &ns, "get", "pods"])
            .status
            .success()),
        "pods still forbidden after the RoleBinding"
    );
    // Still confined to what the Role grants.
    let out = cp.kubectl(&[&sa, "-n", &ns, "get", "secrets"]);
    assert!(
        stderr(&out).contains("Forbidden"),
        "expected Forbidden, got: {}",
        stderr(&out)
    );
}

const WIDGET_CRD: &str = r#"
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: widgets.test.agenthooks.io
spec:
  group: test.agenthooks.io
  scope: Namespaced
  names: {plural: widgets, singular: widget, kind: Widget, listKind: WidgetList}
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec:
            type: object
            required: [size]
            properties:
              size: {type: integer, minimum: 1}
              color: {type: string}
"#;

#[test]
fn crd_can_be_applied_and_read_back() {
    let cp = ControlPlane::shared();
    cp.apply_yaml(WIDGET_CRD);
    cp.wait_for_crd("widgets.test.agenthooks.io", Duration::from_secs(30));

    let ns = unique_name("crd");
    cp.create_namespace(&ns, &[]);
    let widget = |size: &str| {
        format!(
            "apiVersion: test.agenthooks.io/v1\nkind: Widget\nmetadata: {{name: w1, namespace: {ns}}}\nspec: {{size: {size}, color: blue}}\n"
        )
    };
    // Discovery of a just-established CRD can lag a moment behind in kubectl's cache.
    assert!(
        wait_for(Duration::from_secs(15), || cp
            .try_apply_yaml(&widget("3"))
            .status
            .success()),
        "cannot create a Widget: {}",
        stderr(&cp.try_apply_yaml(&widget("3")))
    );

    let w = cp.kubectl_json(&["-n", &ns, "get", "widgets.test.agenthooks.io", "w1"]);
    assert_eq!(w["kind"], "Widget");
    assert_eq!(w["spec"]["size"], 3);
    assert_eq!(w["spec"]["color"], "blue");

    // The structural schema is enforced by the API server.
    let out = cp.try_apply_yaml(&widget("0"));
    assert!(
        !out.status.success(),
        "size 0 violates minimum: 1 but was accepted"
    );
    assert!(
        stderr(&out).contains("spec.size"),
        "unexpected error: {}",
        stderr(&out)
    );

    let list = cp.kubectl_json(&["-n", &ns, "get", "widgets"]);
    assert_eq!(list["items"].as_array().map(Vec::len), Some(1));
}
