//! The deployment manifests against a real API server: the kustomize bases under `config/`
//! and the Helm chart under `charts/agenthooks/` render and pass a server-side dry run
//! (every object through the API server's validation and admission, nothing stored), their
//! wiring is consistent (Service ↔ pods, ServiceAccounts, the operator URL, the RBAC of the
//! chart against `config/rbac/`, the chart's admission policy against `config/admission/`),
//! chart values that cannot work fail `helm template`/`install` naming the value (its
//! values schema and `templates/_validate.tpl`), the tenancy policy and ClusterRole of
//! `config/tenancy/` and the chart agree (CONTRACT §9.3; e2e/tests/tenancy.rs runs the
//! policy for real), and the Standard-edition ValidatingAdmissionPolicy refuses a command
//! hook through the API server while admitting an http hook. (The Argo CD health checks of config/argocd run in Argo CD's own code:
//! e2e/tests/argocd.rs.)
//!
//! Needs `helm` (built from its Go module by `e2e/controlplane/build-helm.sh` and cached; or
//! `$HELM`).

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use agenthooks_e2e::{ControlPlane, unique_name, wait_for};
use serde_json::{Value, json};

const COMMAND_REFUSED: &str = "spec.handler.type: the command handler runs only on the Lite edition; use http or prompt on Standard";

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .canonicalize()
        .expect("repository root")
}

fn path_str(p: &Path) -> String {
    p.to_str().expect("UTF-8 path").to_string()
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn ok(out: Output, what: &str) -> String {
    assert!(
        out.status.success(),
        "{what} failed ({}):\nstdout: {}\nstderr: {}",
        out.status,
        text(&out.stdout),
        text(&out.stderr)
    );
    text(&out.stdout)
}

/// The control plane with the agenthooks CRDs applied (server-side, as the brief of the
/// install says) and Established.
fn cp() -> &'static ControlPlane {
    static CRDS: OnceLock<()> = OnceLock::new();
    let cp = ControlPlane::shared();
    CRDS.get_or_init(|| {
        // config/ installs into agenthooks-system; its namespaced objects need it for a dry run.
        cp.create_namespace("agenthooks-system", &[]);
        let crd = root().join("config/crd/agenthooks.yaml");
        ok(
            cp.kubectl(&[
                "apply",
                "--server-side",
                "--force-conflicts",
                "-f",
                &path_str(&crd),
            ]),
            "kubectl apply --server-side of the CRDs",
        );
        cp.wait_for_crd("agenthooks.agenthooks.io", Duration::from_secs(30));
        cp.wait_for_crd("tenanthookbudgets.agenthooks.io", Duration::from_secs(30));
    });
    cp
}

/// `helm`: `$HELM` if set, else the binary `build-helm.sh` builds once and caches.
fn helm() -> &'static Path {
    static HELM: OnceLock<PathBuf> = OnceLock::new();
    HELM.get_or_init(|| {
        if let Some(h) = std::env::var_os("HELM").filter(|h| !h.is_empty()) {
            return PathBuf::from(h);
        }
        let started = Instant::now();
        let out = Command::new(root().join("e2e/controlplane/build-helm.sh"))
            .stdin(Stdio::null())
            .output()
            .expect("run e2e/controlplane/build-helm.sh");
        let stdout = ok(out, "e2e/controlplane/build-helm.sh");
        let path = PathBuf::from(stdout.lines().last().unwrap_or_default().trim());
        assert!(path.is_file(), "build-helm.sh printed {path:?}, not a file");
        eprintln!(
            "[manifests] helm: {} ({:.1}s)",
            path.display(),
            started.elapsed().as_secs_f64()
        );
        path
    })
}

fn run_helm<S: AsRef<OsStr>>(args: &[S]) -> Output {
    Command::new(helm())
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("run helm")
}

fn chart() -> String {
    path_str(&root().join("charts/agenthooks"))
}

/// `kubectl apply --dry-run=server -o json -f -` of `yaml`: every object goes through the API
/// server (schema, defaulting, validation, admission) and nothing is stored. Returns the
/// objects as the server would have stored them.
fn server_dry_run(cp: &ControlPlane, yaml: &str, what: &str) -> Vec<Value> {
    let out = cp.kubectl_stdin(
        &["apply", "--dry-run=server", "-o", "json", "-f", "-"],
        yaml,
    );
    let stdout = ok(out, &format!("server-side dry run of {what}"));
    let v: Value = serde_json::from_str(&stdout)
        .unwrap_or_else(|e| panic!("dry run of {what}: bad JSON ({e}): {stdout}"));
    match v.get("items") {
        Some(Value::Array(items)) => items.clone(),
        _ => vec![v],
    }
}

/// The YAML documents of `yaml` as JSON objects, parsed by kubectl without storing anything.
fn to_json(cp: &ControlPlane, yaml: &str) -> Vec<Value> {
    let out = cp.kubectl_stdin(
        &[
            "create",
            "--dry-run=client",
            "--validate=false",
            "-o",
            "json",
            "-f",
            "-",
        ],
        yaml,
    );
    let stdout = ok(out, "kubectl create --dry-run=client");
    // One JSON document per object, one after the other.
    serde_json::Deserializer::from_str(&stdout)
        .into_iter::<Value>()
        .map(|v| v.unwrap_or_else(|e| panic!("kubectl JSON ({e}): {stdout}")))
        .collect()
}

fn kustomize(cp: &ControlPlane, dir: &str) -> String {
    ok(
        cp.kubectl(&["kustomize", &path_str(&root().join(dir))]),
        &format!("kubectl kustomize {dir}"),
    )
}

fn find<'a>(items: &'a [Value], kind: &str, name: &str) -> &'a Value {
    items
        .iter()
        .find(|o| o["kind"] == kind && o["metadata"]["name"] == name)
        .unwrap_or_else(|| {
            let have: Vec<String> = items
                .iter()
                .map(|o| format!("{}/{}", o["kind"], o["metadata"]["name"]))
                .collect();
            panic!("no {kind} {name} among {have:?}")
        })
}

fn count(items: &[Value], kind: &str) -> usize {
    items.iter().filter(|o| o["kind"] == kind).count()
}

fn args_of(deploy: &Value) -> Vec<String> {
    deploy["spec"]["template"]["spec"]["containers"][0]["args"]
        .as_array()
        .expect("container args")
        .iter()
        .map(|a| a.as_str().unwrap().to_string())
        .collect()
}

fn has_arg(args: &[String], want: &str) -> bool {
    args.iter().any(|a| a == want)
}

/// The label the synced operator leader puts on its own Pod (operator `leader_label`).
const LEADER_LABEL: &str = "agenthooks.io/leader";

/// Name of the leader-only sync Service of operator `op`.
fn leader_service(op: &str) -> String {
    format!("{op}-leader")
}

/// What both install paths must get right: the operator's flags (its Pod's name and
/// namespace from the Downward API, for the leader label), a leader-only sync Service (the
/// operator's Pods *and* `agenthooks.io/leader=true`) whose port the dispatchers'
/// `--operator-url` names, a Service of every operator replica for the metrics port only,
/// the dispatchers' Service over their pods, ServiceAccounts that exist, the seal-key
/// Secret mounted where the flags point, probes and a locked-down securityContext.
fn check_wiring(items: &[Value], op: &str, disp: &str, edition: &str, seal_secret: &str) {
    let operator = find(items, "Deployment", op);
    let dispatcher = find(items, "Deployment", disp);
    // Exactly one way to know callers (CONTRACT §9.1); Kubernetes unless told otherwise.
    let d_args = args_of(dispatcher);
    let ways: Vec<&String> = d_args
        .iter()
        .filter(|a| {
            [
                "--kubernetes-callers",
                "--allow-anonymous",
                "--callers-file",
            ]
            .iter()
            .any(|w| a.starts_with(w))
        })
        .collect();
    assert_eq!(ways.len(), 1, "{d_args:?}");
    let op_args = args_of(operator);
    let leader_svc = leader_service(op);
    for want in [
        "--sync-addr=0.0.0.0:9090",
        "--metrics-addr=0.0.0.0:9091",
        "--seal-key-file=/etc/agenthooks/seal/seal.key",
        &format!("--edition={edition}"),
        "--pod-name=$(POD_NAME)",
        "--pod-namespace=$(POD_NAMESPACE)",
    ] {
        assert!(
            has_arg(&op_args, want),
            "operator args {op_args:?} lack {want}"
        );
    }
    assert!(
        op_args.iter().any(|a| a.starts_with("--master-namespace=")),
        "{op_args:?}"
    );
    assert_eq!(operator["spec"]["replicas"], 2, "two operator replicas");
    let env = &operator["spec"]["template"]["spec"]["containers"][0]["env"];
    for (name, field) in [
        ("POD_NAME", "metadata.name"),
        ("POD_NAMESPACE", "metadata.namespace"),
    ] {
        let var = env
            .as_array()
            .expect("operator env")
            .iter()
            .find(|e| e["name"] == name)
            .unwrap_or_else(|| panic!("operator env lacks {name}: {env}"));
        assert_eq!(var["valueFrom"]["fieldRef"]["fieldPath"], field, "{name}");
    }

    for want in [
        &format!("--operator-url=https://{leader_svc}:9090"),
        "--operator-ca-file=/etc/agenthooks/sync-ca/ca.crt",
        "--listen=0.0.0.0:8080",
        "--max-concurrent-requests=1024",
        "--seal-key-file=/etc/agenthooks/seal/seal.key",
        &format!("--edition={edition}"),
    ] {
        assert!(
            has_arg(&d_args, want),
            "dispatcher args {d_args:?} lack {want}"
        );
    }

    // Services select their pods and expose the ports the flags and probes use; the sync
    // Service selects the operator's pods and the leader label, which no pod template
    // carries (the leader sets it on its own Pod).
    for (deploy, svc_name, port, leader_only) in [
        (operator, leader_svc.as_str(), 9090, true),
        (dispatcher, disp, 8080, false),
    ] {
        let svc = find(items, "Service", svc_name);
        let pod_labels = &deploy["spec"]["template"]["metadata"]["labels"];
        let selector = svc["spec"]["selector"].as_object().expect("selector");
        assert!(!selector.is_empty());
        assert!(pod_labels.get(LEADER_LABEL).is_none(), "{pod_labels}");
        assert_eq!(
            selector.get(LEADER_LABEL),
            leader_only.then(|| json!("true")).as_ref(),
            "Service {svc_name} selector {selector:?}"
        );
        for (k, v) in selector.iter().filter(|(k, _)| *k != LEADER_LABEL) {
            assert_eq!(&pod_labels[k], v, "Service {svc_name} selects {k}={v}");
        }
        assert!(
            selector.len() > usize::from(leader_only),
            "Service {svc_name} selects the pods of its Deployment"
        );
        for (k, v) in deploy["spec"]["selector"]["matchLabels"]
            .as_object()
            .unwrap()
        {
            assert_eq!(&pod_labels[k], v, "Deployment selector {k}={v}");
        }
        assert!(
            svc["spec"]["ports"]
                .as_array()
                .unwrap()
                .iter()
                .any(|p| p["port"] == port),
            "Service {svc_name} has port {port}"
        );
        let pod = &deploy["spec"]["template"]["spec"];
        let sa = pod["serviceAccountName"]
            .as_str()
            .expect("serviceAccountName");
        find(items, "ServiceAccount", sa);
        let c = &pod["containers"][0];
        let sc = &c["securityContext"];
        assert_eq!(sc["runAsNonRoot"], true, "{svc_name}: {sc}");
        assert_eq!(sc["readOnlyRootFilesystem"], true, "{svc_name}: {sc}");
        assert_eq!(sc["allowPrivilegeEscalation"], false, "{svc_name}: {sc}");
        assert_eq!(
            sc["capabilities"]["drop"],
            json!(["ALL"]),
            "{svc_name}: {sc}"
        );
        assert_eq!(pod["securityContext"]["runAsNonRoot"], true);
        for (probe, path) in [("livenessProbe", "/healthz"), ("readinessProbe", "/readyz")] {
            assert_eq!(c[probe]["httpGet"]["path"], path, "{svc_name} {probe}");
        }
        let seal = pod["volumes"]
            .as_array()
            .unwrap()
            .iter()
            .find(|v| v["name"] == "seal-key")
            .expect("seal-key volume");
        assert_eq!(seal["secret"]["secretName"], seal_secret);
        assert!(
            c["volumeMounts"]
                .as_array()
                .unwrap()
                .iter()
                .any(|m| m["name"] == "seal-key" && m["mountPath"] == "/etc/agenthooks/seal"),
            "{svc_name} mounts the seal key"
        );
    }
    // Every operator replica: the metrics port only (a standby must not be reachable on
    // the sync port through a Service).
    let all = find(items, "Service", op);
    let pod_labels = &operator["spec"]["template"]["metadata"]["labels"];
    let selector = all["spec"]["selector"].as_object().expect("selector");
    assert!(!selector.is_empty() && selector.get(LEADER_LABEL).is_none());
    for (k, v) in selector {
        assert_eq!(&pod_labels[k], v, "Service {op} selects {k}={v}");
    }
    let ports: Vec<&Value> = all["spec"]["ports"].as_array().unwrap().iter().collect();
    assert_eq!(ports.len(), 1, "Service {op}: {ports:?}");
    assert_eq!(
        (&ports[0]["port"], &ports[0]["targetPort"]),
        (&json!(9091), &json!("metrics"))
    );

    // Probe ports: the operator's metrics port, the dispatcher's 8080.
    let op_c = &operator["spec"]["template"]["spec"]["containers"][0];
    assert_eq!(op_c["readinessProbe"]["httpGet"]["port"], "metrics");
    assert!(
        op_c["ports"]
            .as_array()
            .unwrap()
            .iter()
            .any(|p| p["name"] == "metrics" && p["containerPort"] == 9091)
    );
    let d_c = &dispatcher["spec"]["template"]["spec"]["containers"][0];
    assert!(d_c["ports"].as_array().unwrap().iter().any(|p| p["name"]
        == d_c["readinessProbe"]["httpGet"]["port"]
        && p["containerPort"] == 8080));
    check_disruptions(items, operator, dispatcher);
    check_sync_tls(operator, dispatcher);
}

/// The sync port speaks TLS (CONTRACT §9.4): the operator serves tls.crt/tls.key of one
/// Secret, mounted without subPath (so a renewal reaches it); the dispatchers mount only
/// ca.crt of the same Secret and point --operator-ca-file at it.
fn check_sync_tls(operator: &Value, dispatcher: &Value) {
    let op_args = args_of(operator);
    for want in [
        "--sync-tls-cert-file=/etc/agenthooks/sync-tls/tls.crt",
        "--sync-tls-key-file=/etc/agenthooks/sync-tls/tls.key",
    ] {
        assert!(
            has_arg(&op_args, want),
            "operator args {op_args:?} lack {want}"
        );
    }
    let op_pod = &operator["spec"]["template"]["spec"];
    let d_pod = &dispatcher["spec"]["template"]["spec"];
    let secret = |pod: &Value, vol: &str| -> (String, Value) {
        let v = pod["volumes"]
            .as_array()
            .unwrap()
            .iter()
            .find(|v| v["name"] == vol)
            .unwrap_or_else(|| panic!("volume {vol}"));
        (
            v["secret"]["secretName"].as_str().unwrap().to_string(),
            v["secret"]["items"].clone(),
        )
    };
    let (op_secret, op_items) = secret(op_pod, "sync-tls");
    let (d_secret, d_items) = secret(d_pod, "sync-ca");
    assert_eq!(op_secret, d_secret, "one Secret for both sides");
    assert_eq!(
        op_items,
        json!([{"key": "tls.crt", "path": "tls.crt"}, {"key": "tls.key", "path": "tls.key"}])
    );
    assert_eq!(
        d_items,
        json!([{"key": "ca.crt", "path": "ca.crt"}]),
        "the dispatcher never gets the operator's key"
    );
    for (pod, vol, path) in [
        (op_pod, "sync-tls", "/etc/agenthooks/sync-tls"),
        (d_pod, "sync-ca", "/etc/agenthooks/sync-ca"),
    ] {
        let m = pod["containers"][0]["volumeMounts"]
            .as_array()
            .unwrap()
            .iter()
            .find(|m| m["name"] == vol)
            .unwrap_or_else(|| panic!("mount {vol}"));
        assert_eq!(m["mountPath"], path);
        assert!(m.get("subPath").is_none(), "{m}");
    }
    // No other container of the dispatcher's Pod (the command runner) sees the CA mount.
    for c in d_pod["initContainers"].as_array().into_iter().flatten() {
        assert!(
            !c["volumeMounts"].to_string().contains("sync-ca"),
            "{}",
            c["name"]
        );
    }
}

/// Disruptions as a user expects them: rollouts add a Pod before one stops
/// (maxUnavailable 0), a PodDisruptionBudget per component selects its Pods and lets one
/// be evicted at a time, and a stopping dispatcher stays serving (unready) for its
/// shutdown delay, which its grace period covers with the drain and the audit flush.
fn check_disruptions(items: &[Value], operator: &Value, dispatcher: &Value) {
    for deploy in [operator, dispatcher] {
        let name = &deploy["metadata"]["name"];
        assert_eq!(
            deploy["spec"]["strategy"],
            json!({"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 0, "maxSurge": 1}}),
            "{name}"
        );
        let pod_labels = &deploy["spec"]["template"]["metadata"]["labels"];
        let pdbs: Vec<&Value> = items
            .iter()
            .filter(|o| o["kind"] == "PodDisruptionBudget")
            .filter(|o| {
                o["spec"]["selector"]["matchLabels"]
                    .as_object()
                    .is_some_and(|m| !m.is_empty() && m.iter().all(|(k, v)| &pod_labels[k] == v))
            })
            .collect();
        assert_eq!(
            pdbs.len(),
            1,
            "one PodDisruptionBudget selects {name}'s Pods"
        );
        assert_eq!(pdbs[0]["spec"]["maxUnavailable"], 1, "{name}");
    }
    let delay = args_of(dispatcher)
        .iter()
        .find_map(|a| {
            a.strip_prefix("--shutdown-delay-seconds=")?
                .parse::<i64>()
                .ok()
        })
        .expect("the dispatcher has a shutdown delay");
    assert!(delay >= 5, "--shutdown-delay-seconds={delay}");
    assert!(
        dispatcher["spec"]["template"]["spec"]["terminationGracePeriodSeconds"]
            .as_i64()
            .is_some_and(|g| g >= delay + 40),
        "the grace period covers the delay, the drain and the flush"
    );
}

/// The rules of the operator's ClusterRole (the one whose name ends in `operator`); the
/// others are for people to bind: tenant-admin ([`check_tenancy`]), and the dispatcher's
/// agenthooks-dispatch, -history-reader, -tester ([`check_roles_to_bind`]).
fn cluster_role_rules(items: &[Value]) -> Value {
    let roles: Vec<&Value> = items
        .iter()
        .filter(|o| {
            o["kind"] == "ClusterRole"
                && o["metadata"]["name"]
                    .as_str()
                    .is_some_and(|n| n.ends_with("operator"))
        })
        .collect();
    assert_eq!(roles.len(), 1, "one operator ClusterRole");
    roles[0]["rules"].clone()
}

/// The ClusterRoles platform teams bind for `--kubernetes-callers` (CONTRACT §9.2, §9.5):
/// each grants exactly one subresource of agenthooks, and nothing else.
fn check_roles_to_bind(items: &[Value]) {
    for (name, resource, verbs) in [
        (
            "agenthooks-dispatch",
            "agenthooks/dispatch",
            json!(["create"]),
        ),
        (
            "agenthooks-history-reader",
            "agenthooks/executions",
            json!(["get", "list"]),
        ),
        ("agenthooks-tester", "agenthooks/test", json!(["create"])),
    ] {
        let role = find(items, "ClusterRole", name);
        assert_eq!(
            role["rules"],
            json!([{"apiGroups": ["agenthooks.io"], "resources": [resource], "verbs": verbs}]),
            "{name}"
        );
    }
}

/// The rules of the one object of `kind` (Role) among `items`.
fn role_rules(items: &[Value], kind: &str) -> Value {
    let roles: Vec<&Value> = items.iter().filter(|o| o["kind"] == kind).collect();
    assert_eq!(roles.len(), 1, "one {kind}");
    roles[0]["rules"].clone()
}

/// The approval objects (issue 16) among `items`, named `<base>-approval-decision` and
/// `<base>-approver`: the policy that lets only those who may `approve` hookapprovals set
/// a decision, in their own name, its binding on every HookApproval, and the ClusterRole
/// to bind to approvers. Returns the policy.
fn check_approvals<'a>(items: &'a [Value], base: &str) -> &'a Value {
    let policy = find(
        items,
        "ValidatingAdmissionPolicy",
        &format!("{base}-approval-decision"),
    );
    let spec = &policy["spec"];
    assert_eq!(spec["failurePolicy"], "Fail");
    let rule = &spec["matchConstraints"]["resourceRules"][0];
    assert_eq!(
        (&rule["apiGroups"], &rule["operations"], &rule["resources"]),
        (
            &json!(["agenthooks.io"]),
            &json!(["CREATE", "UPDATE"]),
            &json!(["hookapprovals"])
        )
    );
    let checks: Vec<&str> = spec["validations"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v["expression"].as_str().unwrap())
        .collect();
    assert!(checks[0].contains("check('approve')"), "{checks:?}");
    assert!(
        checks[1].contains("object.spec.decidedBy == request.userInfo.username"),
        "{checks:?}"
    );
    let binding = find(
        items,
        "ValidatingAdmissionPolicyBinding",
        &format!("{base}-approval-decision"),
    );
    assert_eq!(binding["spec"]["validationActions"], json!(["Deny"]));
    let role = find(items, "ClusterRole", &format!("{base}-approver"));
    assert_eq!(
        role["rules"],
        json!([{"apiGroups": ["agenthooks.io"], "resources": ["hookapprovals"],
                "verbs": ["get", "list", "watch", "patch", "update", "approve"]}])
    );
    policy
}

/// The tenancy objects (CONTRACT §9.3) among `items`, named `<base>-tenant-label` and
/// `<base>-tenant-admin`: the policy refusing changes of a Namespace's
/// `agenthooks.io/tenant` label to those who may not `assign` the tenant, its binding on
/// every Namespace, and the ClusterRole granting `assign` on every tenant and nothing
/// else. Returns the policy.
fn check_tenancy<'a>(items: &'a [Value], base: &str) -> &'a Value {
    let policy = find(
        items,
        "ValidatingAdmissionPolicy",
        &format!("{base}-tenant-label"),
    );
    let spec = &policy["spec"];
    assert_eq!(spec["failurePolicy"], "Fail");
    assert_eq!(
        spec["matchConstraints"]["resourceRules"],
        json!([{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE", "UPDATE"],
                "resources": ["namespaces"], "scope": "*"}])
    );
    let validation = &spec["validations"][0];
    assert_eq!(validation["reason"], "Forbidden");
    assert!(
        validation["messageExpression"]
            .as_str()
            .is_some_and(|m| m.contains("metadata.labels[agenthooks.io/tenant]")),
        "{validation}"
    );
    let expressions = spec.to_string();
    assert!(
        expressions.contains("authorizer.group('agenthooks.io').resource('tenants')")
            && expressions.contains("check('assign').allowed()"),
        "{spec}"
    );
    let binding = find(
        items,
        "ValidatingAdmissionPolicyBinding",
        &format!("{base}-tenant-label"),
    );
    assert_eq!(binding["spec"]["policyName"], policy["metadata"]["name"]);
    assert_eq!(binding["spec"]["validationActions"], json!(["Deny"]));
    assert!(
        binding["spec"]["matchResources"]["namespaceSelector"]["matchLabels"].is_null()
            && binding["spec"]["matchResources"]["objectSelector"]["matchLabels"].is_null(),
        "every Namespace: {binding}"
    );
    let admin = find(items, "ClusterRole", &format!("{base}-tenant-admin"));
    assert_eq!(
        admin["rules"],
        json!([{"apiGroups": ["agenthooks.io"], "resources": ["tenants"], "verbs": ["assign"]}])
    );
    for o in items.iter().filter(|o| {
        matches!(
            o["kind"].as_str(),
            Some("ValidatingAdmissionPolicy" | "ValidatingAdmissionPolicyBinding")
        )
    }) {
        assert!(o["metadata"]["namespace"].is_null(), "cluster-scoped: {o}");
    }
    policy
}

/// The operator's namespaced rights: the Lease, and the Pods the leader labels (get, list,
/// patch, in its own namespace only: nothing about pods in the ClusterRole).
fn check_namespaced_rbac(items: &[Value]) {
    let rules = role_rules(items, "Role");
    let pods: Vec<&Value> = rules
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["resources"].as_array().unwrap().contains(&json!("pods")))
        .collect();
    assert_eq!(pods.len(), 1, "{rules}");
    assert_eq!(pods[0]["apiGroups"], json!([""]));
    assert_eq!(pods[0]["resources"], json!(["pods"]));
    assert_eq!(pods[0]["verbs"], json!(["get", "list", "patch"]));
    let cluster = cluster_role_rules(items);
    assert!(
        !cluster.to_string().contains("\"pods\""),
        "no cluster-wide pod rights: {cluster}"
    );
}

// ---------------------------------------------------------------------------------------
// (a) kustomize

#[test]
fn kustomize_default_renders_and_passes_a_server_side_dry_run() {
    let cp = cp();

    let rendered = kustomize(cp, "config/default");
    let items = server_dry_run(cp, &rendered, "config/default");
    for o in &items {
        if !matches!(
            o["kind"].as_str(),
            Some(
                "Namespace"
                    | "CustomResourceDefinition"
                    | "ClusterRole"
                    | "ClusterRoleBinding"
                    | "ValidatingAdmissionPolicy"
                    | "ValidatingAdmissionPolicyBinding"
            )
        ) {
            assert_eq!(
                o["metadata"]["namespace"], "agenthooks-system",
                "{} {}",
                o["kind"], o["metadata"]["name"]
            );
        }
    }
    assert_eq!(count(&items, "CustomResourceDefinition"), 3);
    assert_eq!(count(&items, "Deployment"), 2);
    find(&items, "Namespace", "agenthooks-system");
    find(&items, "ClusterRoleBinding", "agenthooks-operator");
    find(&items, "Role", "agenthooks-operator-leader-election");
    check_namespaced_rbac(&items);
    check_roles_to_bind(&items);
    check_wiring(
        &items,
        "agenthooks-operator",
        "agenthooks-dispatcher",
        "lite",
        "agenthooks-seal-key",
    );
    // The Lite install's admission policies are the tenancy and approval ones (no
    // command-hook policy); nobody is bound to the tenant-admin ClusterRole.
    assert_eq!(count(&items, "ValidatingAdmissionPolicy"), 2);
    check_tenancy(&items, "agenthooks");
    check_approvals(&items, "agenthooks");
    // The operator's ClusterRole, its system:auth-delegator (dispatchers on the sync port)
    // and the dispatcher's (callers by Kubernetes).
    assert_eq!(count(&items, "ClusterRoleBinding"), 3);
    find(
        &items,
        "ClusterRoleBinding",
        "agenthooks-dispatcher-auth-delegator",
    );
    check_sync_rbac(
        &items,
        "agenthooks-operator",
        "agenthooks-dispatcher",
        "agenthooks-system",
    );
    assert!(has_arg(
        &args_of(find(&items, "Deployment", "agenthooks-dispatcher")),
        "--kubernetes-callers"
    ));
    // Lite: command hooks run in the runner container, as in the chart.
    check_command_runner(&items);

    // Every base renders on its own, and admission/ passes the API server (which compiles the
    // policy's CEL) with its binding naming the policy.
    for dir in [
        "config/crd",
        "config/rbac",
        "config/operator",
        "config/dispatcher",
        "config/argocd",
    ] {
        assert!(!kustomize(cp, dir).trim().is_empty(), "{dir} renders");
    }
    let tenancy = server_dry_run(cp, &kustomize(cp, "config/tenancy"), "config/tenancy");
    assert_eq!(tenancy.len(), 3, "policy, binding, ClusterRole");
    check_tenancy(&tenancy, "agenthooks");
    let approvals = server_dry_run(cp, &kustomize(cp, "config/approvals"), "config/approvals");
    assert_eq!(approvals.len(), 3, "policy, binding, ClusterRole");
    check_approvals(&approvals, "agenthooks");
    let admission = server_dry_run(cp, &kustomize(cp, "config/admission"), "config/admission");
    let policy = find(
        &admission,
        "ValidatingAdmissionPolicy",
        "agenthooks-standard-edition",
    );
    let binding = find(
        &admission,
        "ValidatingAdmissionPolicyBinding",
        "agenthooks-standard-edition",
    );
    assert_eq!(binding["spec"]["policyName"], policy["metadata"]["name"]);
    assert_eq!(binding["spec"]["validationActions"], json!(["Deny"]));
    assert_eq!(policy["spec"]["validations"][0]["message"], COMMAND_REFUSED);
}

// ---------------------------------------------------------------------------------------
// (b) Helm

fn helm_template(ns: &str, extra: &[&str]) -> Output {
    let chart = chart();
    let mut args = vec![
        "template",
        "agenthooks",
        chart.as_str(),
        "--namespace",
        ns,
        "--include-crds",
    ];
    args.extend_from_slice(extra);
    run_helm(&args)
}

/// The objects `helm template` renders with `extra` (release `agenthooks` in
/// `agenthooks-system`), read here without an API server: for the checks of what the chart
/// renders that need no server-side dry run.
fn rendered(extra: &[&str]) -> Vec<Value> {
    use serde::Deserialize;
    let yaml = ok(
        helm_template("agenthooks-system", extra),
        &format!("helm template {extra:?}"),
    );
    serde_norway::Deserializer::from_str(&yaml)
        .map(|doc| {
            Value::deserialize(doc).unwrap_or_else(|e| panic!("helm template {extra:?}: {e}"))
        })
        .filter(|v| !v.is_null())
        .collect()
}

#[test]
fn helm_chart_lints_renders_and_passes_a_server_side_dry_run() {
    let cp = cp();
    let chart = chart();
    for extra in [&[][..], &["--set", "edition=standard"][..]] {
        let mut args = vec!["lint", "--strict", chart.as_str()];
        args.extend_from_slice(extra);
        ok(run_helm(&args), &format!("helm lint {extra:?}"));
    }

    let ns = unique_name("ah-helm");
    cp.create_namespace(&ns, &[]);

    // Defaults: Lite, no admission policy, a generated 32-byte seal key.
    let lite = ok(helm_template(&ns, &[]), "helm template (defaults)");
    let items = server_dry_run(cp, &lite, "helm template (defaults)");
    check_wiring(
        &items,
        "agenthooks-operator",
        "agenthooks-dispatcher",
        "lite",
        "agenthooks-seal-key",
    );
    assert_eq!(count(&items, "CustomResourceDefinition"), 3);
    // Lite: the tenancy and approval policies only, the same as config/tenancy/ and
    // config/approvals/; no tenant admin bound.
    assert_eq!(count(&items, "ValidatingAdmissionPolicy"), 2);
    let approvals = server_dry_run(cp, &kustomize(cp, "config/approvals"), "config/approvals");
    assert_eq!(
        check_approvals(&items, "agenthooks")["spec"],
        check_approvals(&approvals, "agenthooks")["spec"]
    );
    let tenancy_policy = check_tenancy(&items, "agenthooks");
    let tenancy = server_dry_run(cp, &kustomize(cp, "config/tenancy"), "config/tenancy");
    assert_eq!(
        tenancy_policy["spec"],
        check_tenancy(&tenancy, "agenthooks")["spec"]
    );
    assert!(
        !items.iter().any(|o| o["kind"] == "ClusterRoleBinding"
            && o["metadata"]["name"] == "agenthooks-tenant-admin"),
        "nobody is bound by default"
    );
    // No admin token by default: history and dry runs answer 403.
    assert!(
        !args_of(find(&items, "Deployment", "agenthooks-dispatcher"))
            .iter()
            .any(|a| a.starts_with("--admin-token-file"))
    );
    let secret = find(&items, "Secret", "agenthooks-seal-key");
    let key = secret["data"]["seal.key"].as_str().expect("seal.key");
    assert_eq!(key.len(), 44, "32 bytes in base64: {key}");
    assert!(key.ends_with('='), "32 bytes in base64: {key}");
    // uninstall deletes it: nothing kept outlives the release sealed with it
    assert!(
        secret["metadata"]["annotations"]
            .get("helm.sh/resource-policy")
            .is_none(),
        "{secret}"
    );
    let op_args = args_of(find(&items, "Deployment", "agenthooks-operator"));
    for want in [
        format!("--master-namespace={ns}"),
        format!("--lease-namespace={ns}"),
        "--lease-name=agenthooks-operator".to_string(),
    ] {
        assert!(has_arg(&op_args, &want), "{op_args:?} lacks {want}");
    }
    assert!(
        !args_of(find(&items, "Deployment", "agenthooks-dispatcher"))
            .iter()
            .any(|a| a.starts_with("--http-allow-cidr")),
    );
    // The chart's operator rights are those of config/rbac/.
    let rbac = server_dry_run(cp, &kustomize(cp, "config/rbac"), "config/rbac");
    assert_eq!(cluster_role_rules(&items), cluster_role_rules(&rbac));
    assert_eq!(role_rules(&items, "Role"), role_rules(&rbac, "Role"));
    check_namespaced_rbac(&items);
    check_namespaced_rbac(&rbac);
    // The roles to bind are the same in the chart and in config/rbac (fixed names: the
    // dispatcher's 403 answers name them).
    check_roles_to_bind(&items);
    check_roles_to_bind(&rbac);
    let rb = find(&items, "RoleBinding", "agenthooks-operator-leader-election");
    assert_eq!(rb["metadata"]["namespace"], ns.as_str());
    assert_eq!(
        rb["subjects"],
        json!([{"kind": "ServiceAccount", "name": "agenthooks-operator", "namespace": ns}])
    );
    let crb = find(&items, "ClusterRoleBinding", "agenthooks-operator");
    assert_eq!(
        crb["subjects"],
        json!([{"kind": "ServiceAccount", "name": "agenthooks-operator", "namespace": ns}])
    );

    // Standard, with two allowed CIDRs and three dispatchers.
    let standard = ok(
        helm_template(
            &ns,
            &[
                "--set",
                "edition=standard",
                "--set",
                "dispatcher.replicaCount=3",
                "--set",
                "dispatcher.httpAllowCidrs={10.20.0.0/16,fd00::/8}",
                "--set",
                "dispatcher.adminTokenSecret.name=agenthooks-admin",
                // the admin token is for callers not asked by Kubernetes (CONTRACT §9.5)
                "--set",
                "dispatcher.callers.mode=anonymous",
            ],
        ),
        "helm template (standard)",
    );
    let items = server_dry_run(cp, &standard, "helm template (standard)");
    check_wiring(
        &items,
        "agenthooks-operator",
        "agenthooks-dispatcher",
        "standard",
        "agenthooks-seal-key",
    );
    let dispatcher = find(&items, "Deployment", "agenthooks-dispatcher");
    assert_eq!(dispatcher["spec"]["replicas"], 3);
    // The admin token (history and dry runs) from its Secret, mounted read-only.
    assert!(has_arg(
        &args_of(dispatcher),
        "--admin-token-file=/etc/agenthooks/admin/token"
    ));
    let pod = &dispatcher["spec"]["template"]["spec"];
    assert_eq!(
        volume(pod, "admin-token").unwrap()["secret"]["secretName"],
        "agenthooks-admin"
    );
    assert_eq!(mount(pod, "admin-token").unwrap()["readOnly"], true);
    let cidrs: Vec<String> = args_of(dispatcher)
        .into_iter()
        .filter(|a| a.starts_with("--http-allow-cidr="))
        .collect();
    assert_eq!(
        cidrs,
        [
            "--http-allow-cidr=10.20.0.0/16",
            "--http-allow-cidr=fd00::/8"
        ]
    );
    let policy = find(
        &items,
        "ValidatingAdmissionPolicy",
        "agenthooks-standard-edition",
    );
    let binding = find(
        &items,
        "ValidatingAdmissionPolicyBinding",
        "agenthooks-standard-edition",
    );
    assert_eq!(binding["spec"]["policyName"], "agenthooks-standard-edition");
    assert_eq!(
        count(&items, "ValidatingAdmissionPolicy"),
        3,
        "and tenancy's and approvals'"
    );
    check_tenancy(&items, "agenthooks");
    // Same policy as config/admission/ (which test (c) runs for real).
    let admission = server_dry_run(cp, &kustomize(cp, "config/admission"), "config/admission");
    let shipped = find(
        &admission,
        "ValidatingAdmissionPolicy",
        "agenthooks-standard-edition",
    );
    assert_eq!(policy["spec"], shipped["spec"]);

    // Another release name, and every optional value set (from a values file).
    let dir = tempfile::tempdir().unwrap();
    let values = dir.path().join("values.yaml");
    std::fs::write(
        &values,
        "masterNamespace: tenants-master\n\
         logLevel: debug\n\
         imagePullSecrets: [{name: regcred}]\n\
         image: {tag: \"1.2\", pullPolicy: Always}\n\
         operator:\n  image: {repository: registry.example.com/agenthooks/operator}\n  replicaCount: 3\n  logFormat: text\n  leaseDurationSeconds: 20\n\
         \x20 nodeSelector: {kubernetes.io/os: linux}\n\
         \x20 tolerations: [{key: dedicated, operator: Equal, value: agents, effect: NoSchedule}]\n\
         \x20 podAnnotations: {prometheus.io/scrape: \"true\"}\n\
         dispatcher:\n  image: {repository: registry.example.com/agenthooks/dispatcher, tag: \"1.3\"}\n  service: {type: NodePort, port: 18080}\n\
         \x20 resources: {requests: {cpu: 1, memory: 1Gi}, limits: {memory: 2Gi}}\n",
    )
    .unwrap();
    let full = ok(
        run_helm(&[
            "template",
            "prod",
            chart.as_str(),
            "--namespace",
            ns.as_str(),
            "-f",
            &path_str(&values),
        ]),
        "helm template prod -f values.yaml",
    );
    let items = server_dry_run(cp, &full, "helm template prod -f values.yaml");
    let operator = find(&items, "Deployment", "prod-agenthooks-operator");
    let op_args = args_of(operator);
    assert!(
        has_arg(&op_args, "--master-namespace=tenants-master"),
        "{op_args:?}"
    );
    assert!(
        has_arg(&op_args, "--lease-name=prod-agenthooks-operator"),
        "{op_args:?}"
    );
    assert_eq!(operator["spec"]["replicas"], 3);
    assert_eq!(
        operator["spec"]["template"]["spec"]["containers"][0]["image"],
        "registry.example.com/agenthooks/operator:1.2"
    );
    let dispatcher = find(&items, "Deployment", "prod-agenthooks-dispatcher");
    // a component's own tag wins over image.tag; the runner follows the dispatcher
    let pod = &dispatcher["spec"]["template"]["spec"];
    for c in pod["containers"]
        .as_array()
        .into_iter()
        .chain(pod["initContainers"].as_array())
        .flatten()
    {
        assert_eq!(
            c["image"], "registry.example.com/agenthooks/dispatcher:1.3",
            "{}",
            c["name"]
        );
        assert_eq!(c["imagePullPolicy"], "Always", "{}", c["name"]);
    }
    assert!(has_arg(
        &args_of(dispatcher),
        "--operator-url=https://prod-agenthooks-operator-leader:9090"
    ));
    let leader = find(&items, "Service", "prod-agenthooks-operator-leader");
    assert_eq!(
        leader["spec"]["selector"],
        json!({"app.kubernetes.io/name": "agenthooks", "app.kubernetes.io/instance": "prod",
               "app.kubernetes.io/component": "operator", LEADER_LABEL: "true"})
    );
    find(&items, "Service", "prod-agenthooks-operator");
    find(&items, "Secret", "prod-agenthooks-seal-key");
    find(&items, "ClusterRole", "prod-agenthooks-operator");

    // An existing key Secret is used as is: no Secret rendered, both pods mount it.
    let existing = ok(
        helm_template(&ns, &["--set", "sealKey.existingSecret=my-seal-key"]),
        "helm template (existingSecret)",
    );
    let items = server_dry_run(cp, &existing, "helm template (existingSecret)");
    assert_eq!(count(&items, "Secret"), 1, "the sync certificate's only");
    find(&items, "Secret", "agenthooks-sync-tls");
    check_wiring(
        &items,
        "agenthooks-operator",
        "agenthooks-dispatcher",
        "lite",
        "my-seal-key",
    );

    // The longest fullname (48 characters): the leader Service's name is cut to 63, and the
    // dispatchers' URL names it.
    let long = "a".repeat(48);
    let rendered = ok(
        helm_template(&ns, &["--set", &format!("fullnameOverride={long}")]),
        "helm template (48-character fullname)",
    );
    let items = server_dry_run(cp, &rendered, "helm template (48-character fullname)");
    let leader_name = &leader_service(&format!("{long}-operator"))[..63];
    assert!(leader_name.ends_with("-leade"), "{leader_name}");
    find(&items, "Service", leader_name);
    assert!(has_arg(
        &args_of(find(&items, "Deployment", &format!("{long}-dispatcher"))),
        &format!("--operator-url=https://{leader_name}:9090")
    ));

    // The generated key is stable: with cluster access (what `helm upgrade` has), `lookup`
    // reads the Secret back instead of generating a new key.
    let stored = "MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY=";
    cp.apply_yaml(
        &json!({
            "apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": "agenthooks-seal-key", "namespace": ns},
            "data": {"seal.key": stored},
        })
        .to_string(),
    );
    let kubeconfig = path_str(&cp.kubeconfig);
    let upgraded = ok(
        helm_template(&ns, &["--dry-run=server", "--kubeconfig", &kubeconfig]),
        "helm template --dry-run=server (lookup)",
    );
    let items = to_json(cp, &upgraded);
    assert_eq!(
        find(&items, "Secret", "agenthooks-seal-key")["data"]["seal.key"],
        stored,
        "lookup keeps the existing key"
    );
    // The generated sync CA and certificate too: the dispatchers keep trusting it.
    let sync = json!({"tls.crt": "Y3J0", "tls.key": "a2V5", "ca.crt": "Y2E="});
    cp.apply_yaml(
        &json!({
            "apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/tls",
            "metadata": {"name": "agenthooks-sync-tls", "namespace": ns},
            "data": sync,
        })
        .to_string(),
    );
    let upgraded = ok(
        helm_template(&ns, &["--dry-run=server", "--kubeconfig", &kubeconfig]),
        "helm template --dry-run=server (lookup of the sync certificate)",
    );
    let items = to_json(cp, &upgraded);
    assert_eq!(
        find(&items, "Secret", "agenthooks-sync-tls")["data"],
        sync,
        "lookup keeps the sync CA and certificate"
    );
}

fn b64(s: &str) -> Vec<u8> {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD.decode(s).unwrap()
}

/// Sync TLS in each of its modes, and the dispatch port's TLS, as rendered.
#[test]
fn helm_sync_tls_is_on_by_default_in_each_mode_and_the_dispatch_port_can_serve_tls() {
    let names = [
        "agenthooks-operator-leader",
        "agenthooks-operator-leader.agenthooks-system",
        "agenthooks-operator-leader.agenthooks-system.svc",
        "agenthooks-operator-leader.agenthooks-system.svc.cluster.local",
    ];
    let deploys = |items: &[Value]| {
        (
            find(items, "Deployment", "agenthooks-operator").clone(),
            find(items, "Deployment", "agenthooks-dispatcher").clone(),
        )
    };

    // Default: the chart generates a CA and a certificate for the leader Service's names.
    let items = rendered(&[]);
    let (op, d) = deploys(&items);
    check_sync_tls(&op, &d);
    let secret = find(&items, "Secret", "agenthooks-sync-tls");
    assert_eq!(secret["type"], "kubernetes.io/tls");
    let dir = tempfile::tempdir().unwrap();
    for key in ["tls.crt", "tls.key", "ca.crt"] {
        let data = secret["data"][key]
            .as_str()
            .unwrap_or_else(|| panic!("{key}"));
        std::fs::write(dir.path().join(key), b64(data)).unwrap();
    }
    let openssl = |args: &[&str]| {
        let out = Command::new("openssl")
            .args(args)
            .current_dir(dir.path())
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "openssl {args:?}: {}",
            text(&out.stderr)
        );
        text(&out.stdout)
    };
    assert_eq!(
        openssl(&["verify", "-CAfile", "ca.crt", "tls.crt"]).trim(),
        "tls.crt: OK"
    );
    let sans = openssl(&["x509", "-in", "tls.crt", "-noout", "-ext", "subjectAltName"]);
    let want: Vec<String> = names.iter().map(|n| format!("DNS:{n}")).collect();
    assert_eq!(
        sans.lines().nth(1).unwrap().trim(),
        want.join(", "),
        "{sans}"
    );
    // The key belongs to the certificate.
    assert_eq!(
        openssl(&["x509", "-in", "tls.crt", "-noout", "-pubkey"]),
        openssl(&["pkey", "-in", "tls.key", "-pubout"])
    );
    assert_eq!(count(&items, "Certificate"), 0);

    // cert-manager: self-signed Issuer -> CA Certificate -> CA Issuer -> serving Certificate.
    let items = rendered(&["--set", "operator.syncTLS.certManager.enabled=true"]);
    let (op, d) = deploys(&items);
    check_sync_tls(&op, &d);
    assert!(
        !items
            .iter()
            .any(|o| o["kind"] == "Secret" && o["metadata"]["name"] == "agenthooks-sync-tls"),
        "cert-manager writes the Secret"
    );
    let ca = find(&items, "Certificate", "agenthooks-sync-ca");
    assert_eq!(ca["spec"]["isCA"], true);
    assert_eq!(ca["spec"]["issuerRef"]["name"], "agenthooks-selfsigned");
    assert_eq!(
        find(&items, "Issuer", "agenthooks-sync-ca")["spec"]["ca"]["secretName"],
        "agenthooks-sync-ca"
    );
    let serving = find(&items, "Certificate", "agenthooks-sync-tls");
    assert_eq!(serving["spec"]["secretName"], "agenthooks-sync-tls");
    assert_eq!(serving["spec"]["dnsNames"], json!(names));
    assert_eq!(
        serving["spec"]["issuerRef"],
        json!({"name": "agenthooks-sync-ca", "kind": "Issuer", "group": "cert-manager.io"})
    );
    // A given issuer: no Issuer of ours.
    let items = rendered(&[
        "--set",
        "operator.syncTLS.certManager.enabled=true",
        "--set",
        "operator.syncTLS.certManager.issuerRef.name=corp-ca",
        "--set",
        "operator.syncTLS.certManager.issuerRef.kind=ClusterIssuer",
    ]);
    assert_eq!(count(&items, "Issuer"), 0);
    assert_eq!(count(&items, "Certificate"), 1);
    assert_eq!(
        find(&items, "Certificate", "agenthooks-sync-tls")["spec"]["issuerRef"],
        json!({"name": "corp-ca", "kind": "ClusterIssuer", "group": "cert-manager.io"})
    );

    // An existing Secret: nothing generated, both sides name it.
    let items = rendered(&["--set", "operator.syncTLS.secretName=corp-sync-tls"]);
    let (op, d) = deploys(&items);
    check_sync_tls(&op, &d);
    assert!(op.to_string().contains("\"secretName\":\"corp-sync-tls\""));
    assert!(d.to_string().contains("\"secretName\":\"corp-sync-tls\""));
    assert!(!items.iter().any(|o| {
        o["metadata"]["name"]
            .as_str()
            .is_some_and(|n| n.contains("sync-tls"))
    }));

    // Off (a lab): plain HTTP, and the dispatchers say so on purpose.
    let items = rendered(&["--set", "operator.syncTLS.enabled=false"]);
    let (op, d) = deploys(&items);
    let d_args = args_of(&d);
    assert!(has_arg(
        &d_args,
        "--operator-url=http://agenthooks-operator-leader:9090"
    ));
    assert!(has_arg(&d_args, "--insecure-operator-http"));
    assert!(!args_of(&op).iter().any(|a| a.starts_with("--sync-tls")));
    assert!(!d.to_string().contains("sync-ca") && !op.to_string().contains("sync-tls"));

    // The dispatch port: plain by default, HTTPS from a Secret when asked.
    let (_, d) = deploys(&rendered(&[]));
    assert!(!args_of(&d).iter().any(|a| a.starts_with("--tls-")));
    let items = rendered(&["--set", "dispatcher.tls.secretName=dispatch-tls"]);
    let (_, d) = deploys(&items);
    let d_args = args_of(&d);
    assert!(has_arg(
        &d_args,
        "--tls-cert-file=/etc/agenthooks/tls/tls.crt"
    ));
    assert!(has_arg(
        &d_args,
        "--tls-key-file=/etc/agenthooks/tls/tls.key"
    ));
    let c = &d["spec"]["template"]["spec"]["containers"][0];
    for probe in ["livenessProbe", "readinessProbe"] {
        assert_eq!(c[probe]["httpGet"]["scheme"], "HTTPS", "{probe}");
    }
    let svc = find(&items, "Service", "agenthooks-dispatcher");
    assert_eq!(svc["spec"]["ports"][0]["appProtocol"], "https");
    assert!(d.to_string().contains("\"secretName\":\"dispatch-tls\""));
}

/// Where the chart refuses a value: its values schema (one value out of bounds, a typo, a
/// bad enum; Helm checks it before any template runs) or the checks of
/// `templates/_validate.tpl` (values that cannot work together).
#[derive(Debug, Clone, Copy, PartialEq)]
enum Refused {
    Schema,
    Template,
}

/// How each kind of refusal starts on stderr.
fn refusal_header(by: Refused) -> &'static str {
    match by {
        Refused::Schema => "values don't meet the specifications of the schema",
        Refused::Template => "values that cannot work:",
    }
}

/// Chart values that cannot work: `--set` arguments, what the message must name, and who
/// refuses them. Issue 11: no image, a bad edition, no operator, missing Secret names, and
/// the numbers, ports, sizes and ranges that the binaries or the API server would refuse.
const CANNOT_WORK: &[(&[&str], &str, Refused)] = &[
    // typos and enums
    (&["replicaCont=2"], "replicaCont", Refused::Schema),
    (
        &["dispatcher.replicaCont=3"],
        "replicaCont",
        Refused::Schema,
    ),
    (&["edition=enterprise"], "'/edition'", Refused::Schema),
    (
        &["operator.logFormat=yaml"],
        "'/operator/logFormat'",
        Refused::Schema,
    ),
    (
        &["operator.resources.limits.memroy=1Gi"],
        "memroy",
        Refused::Schema,
    ),
    (
        &["image.pullPolicy=Sometimes"],
        "'/image/pullPolicy'",
        Refused::Schema,
    ),
    (
        &["dispatcher.prompt.providrs={}"],
        "providrs",
        Refused::Schema,
    ),
    (
        &["dispatcher.adminTokenSecret.nme=x"],
        "nme",
        Refused::Schema,
    ),
    (
        &["dispatcher.prompt.providers[0].kind=gemini"],
        "'/dispatcher/prompt/providers/0/kind'",
        Refused::Schema,
    ),
    (
        &["dispatcher.prompt.providers[0].baseUrl=ftp://x"],
        "'/dispatcher/prompt/providers/0/baseUrl'",
        Refused::Schema,
    ),
    (
        &["dispatcher.commandRunner.maxRun=3"],
        "maxRun",
        Refused::Schema,
    ),
    (
        &["operator.allowTenantCommandHooks=maybe"],
        "'/operator/allowTenantCommandHooks'",
        Refused::Schema,
    ),
    // no image
    (&["image.tag="], "'/image/tag'", Refused::Schema),
    (&["image.tag=null"], "tag", Refused::Schema),
    (
        &["operator.image.repository="],
        "'/operator/image/repository'",
        Refused::Schema,
    ),
    (
        &["dispatcher.image.repository="],
        "'/dispatcher/image/repository'",
        Refused::Schema,
    ),
    (
        &["operator.image.repository=agenthooks/operator:0.1.0"],
        "'/operator/image/repository'",
        Refused::Schema,
    ),
    (
        &["dispatcher.image.repository=Agenthooks/Dispatcher"],
        "'/dispatcher/image/repository'",
        Refused::Schema,
    ),
    (
        &["dispatcher.image.tag=0.1:0"],
        "'/dispatcher/image/tag'",
        Refused::Schema,
    ),
    (
        &["dispatcher.commandRunner.image.repository=tools:1"],
        "'/dispatcher/commandRunner/image/repository'",
        Refused::Schema,
    ),
    (
        &["dispatcher.commandRunner.image.tag=2026.1"],
        "dispatcher.commandRunner.image.tag",
        Refused::Template,
    ),
    // a fullname no Service can carry
    (
        &["fullnameOverride=9hooks"],
        "fullnameOverride \"9hooks\": the Services would be named 9hooks-dispatcher",
        Refused::Template,
    ),
    (
        &["dispatcher.image.digest=sha256:abc"],
        "'/dispatcher/image/digest'",
        Refused::Schema,
    ),
    (
        &[
            "dispatcher.commandRunner.image.digest=sha256:0000000000000000000000000000000000000000000000000000000000000000",
        ],
        "dispatcher.commandRunner.image.digest",
        Refused::Template,
    ),
    (
        &[
            "dispatcher.service.type=NodePort,dispatcher.service.loadBalancerSourceRanges={10.0.0.0/8}",
        ],
        "dispatcher.service.loadBalancerSourceRanges: only a Service of type LoadBalancer applies them, and dispatcher.service.type is NodePort",
        Refused::Template,
    ),
    (
        &[
            "dispatcher.service.type=LoadBalancer,dispatcher.service.loadBalancerSourceRanges={10.0.0/8}",
        ],
        "'/dispatcher/service/loadBalancerSourceRanges/0'",
        Refused::Schema,
    ),
    // replicas, ports, numbers
    (
        &["operator.replicaCount=0"],
        "'/operator/replicaCount'",
        Refused::Schema,
    ),
    (
        &["dispatcher.replicaCount=-1"],
        "'/dispatcher/replicaCount'",
        Refused::Schema,
    ),
    // callers (docs/callers.md)
    (
        &["dispatcher.callers.mode=open"],
        "'/dispatcher/callers/mode'",
        Refused::Schema,
    ),
    (
        &["dispatcher.callers.audience="],
        "'/dispatcher/callers/audience'",
        Refused::Schema,
    ),
    (
        &["dispatcher.callers.accessCacheSeconds=3601"],
        "'/dispatcher/callers/accessCacheSeconds'",
        Refused::Schema,
    ),
    (
        &["dispatcher.adminTokenSecret.name=agenthooks-admin"],
        "dispatcher.adminTokenSecret.name: the admin token is for standalone mode only",
        Refused::Template,
    ),
    (
        &["dispatcher.service.port=0"],
        "'/dispatcher/service/port'",
        Refused::Schema,
    ),
    (
        &["dispatcher.service.port=65536"],
        "'/dispatcher/service/port'",
        Refused::Schema,
    ),
    (
        &["dispatcher.maxConcurrentRequests=0"],
        "'/dispatcher/maxConcurrentRequests'",
        Refused::Schema,
    ),
    (
        &["operator.leaseDurationSeconds=1"],
        "'/operator/leaseDurationSeconds'",
        Refused::Schema,
    ),
    (
        &["operator.leaseDurationSeconds=301"],
        "'/operator/leaseDurationSeconds'",
        Refused::Schema,
    ),
    (
        &["operator.dispatcherTtlSeconds=0"],
        "'/operator/dispatcherTtlSeconds'",
        Refused::Schema,
    ),
    (
        &["dispatcher.httpAllowCidrs={not-a-cidr}"],
        "'/dispatcher/httpAllowCidrs/0'",
        Refused::Schema,
    ),
    (
        &["dispatcher.httpAllowCidrs={10.0.0.0/33}"],
        "'/dispatcher/httpAllowCidrs/0'",
        Refused::Schema,
    ),
    (
        &["dispatcher.httpAllowCidrs={300.1.0.0/16}"],
        "'/dispatcher/httpAllowCidrs/0'",
        Refused::Schema,
    ),
    (
        &[
            "operator.tolerations[0].key=k,operator.tolerations[0].operator=Exists,operator.tolerations[0].value=v",
        ],
        "'/operator/tolerations/0/value'",
        Refused::Schema,
    ),
    (
        &[
            "dispatcher.tolerations[0].key=k,dispatcher.tolerations[0].tolerationSeconds=30,dispatcher.tolerations[0].effect=NoSchedule",
        ],
        "'/dispatcher/tolerations/0/effect'",
        Refused::Schema,
    ),
    // sizes and resources
    (
        &["operator.resources.limits.memory=-1"],
        "'/operator/resources/limits/memory'",
        Refused::Schema,
    ),
    (
        &["dispatcher.resources.requests.cpu=1 core"],
        "'/dispatcher/resources/requests/cpu'",
        Refused::Schema,
    ),
    (
        &["operator.resources.requests.memory=1Gi"],
        "operator.resources.requests.memory: 1Gi is above operator.resources.limits.memory (256Mi)",
        Refused::Template,
    ),
    (
        &["dispatcher.resources.requests.cpu=2,dispatcher.resources.limits.cpu=1500m"],
        "dispatcher.resources.requests.cpu",
        Refused::Template,
    ),
    (
        &["dispatcher.commandRunner.resources.limits.memory=16Mi"],
        "dispatcher.commandRunner.resources.requests.memory",
        Refused::Template,
    ),
    (
        &["dispatcher.commandRunner.tmpSizeLimit=0"],
        "'/dispatcher/commandRunner/tmpSizeLimit'",
        Refused::Schema,
    ),
    (
        &["dispatcher.audit.storage.sizeLimit=0Gi"],
        "'/dispatcher/audit/storage/sizeLimit'",
        Refused::Schema,
    ),
    (
        &["dispatcher.audit.spoolMaxBytes=1000"],
        "'/dispatcher/audit/spoolMaxBytes'",
        Refused::Schema,
    ),
    (
        &["dispatcher.audit.spoolMaxBytes=1Ki"],
        "dispatcher.audit.spoolMaxBytes: 1Ki is below the dispatcher's minimum of 64Ki",
        Refused::Template,
    ),
    (
        &["dispatcher.audit.spoolMaxBytes=1Gi"],
        "dispatcher.audit.spoolMaxBytes: 1Gi does not fit in dispatcher.audit.storage.sizeLimit (1Gi)",
        Refused::Template,
    ),
    (
        &["dispatcher.audit.storage.volume.emptyDir.sizeLimit=100Mi"],
        "dispatcher.audit.spoolMaxBytes: 256Mi does not fit in dispatcher.audit.storage.volume.emptyDir.sizeLimit (100Mi)",
        Refused::Template,
    ),
    (
        &[
            "dispatcher.audit.storage.volume.ephemeral.volumeClaimTemplate.spec.resources.requests.storage=200Mi",
        ],
        "dispatcher.audit.spoolMaxBytes: 256Mi does not fit in dispatcher.audit.storage.volume.ephemeral.volumeClaimTemplate.spec.resources.requests.storage (200Mi)",
        Refused::Template,
    ),
    (
        &["dispatcher.audit.storage.volume.emptyDir.sizeLimit=1Gb"],
        "dispatcher.audit.storage.volume.emptyDir.sizeLimit: \"1Gb\" is not a Kubernetes quantity",
        Refused::Template,
    ),
    // the audit volume
    (
        &["dispatcher.audit.storage.volume.secret.secretName=x"],
        "'/dispatcher/audit/storage/volume/secret'",
        Refused::Schema,
    ),
    (
        &["dispatcher.audit.storage.volume.name=audit"],
        "'/dispatcher/audit/storage/volume/name'",
        Refused::Schema,
    ),
    (
        &["dispatcher.audit.storage.volume.persistentVolumeClaim.claimName=a"],
        "dispatcher.audit.storage.volume: one persistentVolumeClaim for 2 dispatcher replicas",
        Refused::Template,
    ),
    (
        &["dispatcher.replicaCount=3,dispatcher.audit.storage.volume.hostPath.path=/var/lib/ah"],
        "dispatcher.audit.storage.volume: one hostPath for 3 dispatcher replicas",
        Refused::Template,
    ),
    // the command runner's uids
    (
        &["dispatcher.commandRunner.runAsUser=0"],
        "'/dispatcher/commandRunner/runAsUser'",
        Refused::Schema,
    ),
    (
        &["dispatcher.commandRunner.runAsUser=65532"],
        "'/dispatcher/commandRunner/runAsUser'",
        Refused::Schema,
    ),
    (
        &["dispatcher.commandRunner.runAsUser=2147483648"],
        "'/dispatcher/commandRunner/runAsUser'",
        Refused::Schema,
    ),
    (
        &["dispatcher.commandRunner.maxRuns=0"],
        "'/dispatcher/commandRunner/maxRuns'",
        Refused::Schema,
    ),
    (
        &[
            "operator.allowTenantCommandHooks=true,dispatcher.commandRunner.runAsUser=65000,dispatcher.commandRunner.maxRuns=600",
        ],
        "dispatcher.commandRunner.runAsUser: runs take the uids 65000..65599",
        Refused::Template,
    ),
    (
        &["dispatcher.shutdownDelaySeconds=61"],
        "'/dispatcher/shutdownDelaySeconds'",
        Refused::Schema,
    ),
    // scheduling
    (
        &["operator.affinity.podAntiAfinity.x=1"],
        "podAntiAfinity",
        Refused::Schema,
    ),
    (
        &["dispatcher.topologySpreadConstraints[0].maxSkew=1"],
        "'/dispatcher/topologySpreadConstraints/0'",
        Refused::Schema,
    ),
    (
        &["dispatcher.priorityClassName=High"],
        "'/dispatcher/priorityClassName'",
        Refused::Schema,
    ),
    // disruption budgets that would block every drain
    (
        &["dispatcher.podDisruptionBudget.maxUnavailable=0"],
        "'/dispatcher/podDisruptionBudget/maxUnavailable'",
        Refused::Schema,
    ),
    (
        &["operator.podDisruptionBudget.maxUnavailable=0%"],
        "'/operator/podDisruptionBudget/maxUnavailable'",
        Refused::Schema,
    ),
    (
        &["dispatcher.podDisruptionBudget.minAvailable=2"],
        "minAvailable",
        Refused::Schema,
    ),
    // Secrets a feature needs, and Secret names the API server would refuse
    (
        &["dispatcher.audit.backend=postgres"],
        "dispatcher.audit.databaseUrlSecret.name: required",
        Refused::Template,
    ),
    (
        &["dispatcher.audit.keys={key-1}"],
        "dispatcher.audit.keySecret: required",
        Refused::Template,
    ),
    (
        &["dispatcher.audit.keySecret=audit-keys"],
        "dispatcher.audit.keys:",
        Refused::Template,
    ),
    (
        &[
            "dispatcher.prompt.providers[0].name=a,dispatcher.prompt.providers[0].kind=openai,dispatcher.prompt.providers[0].baseUrl=https://x,dispatcher.prompt.providers[0].apiKeySecretKey=k",
        ],
        "dispatcher.prompt.apiKeySecret: required",
        Refused::Template,
    ),
    (
        &["sealKey.existingSecret=Seal_Key"],
        "'/sealKey/existingSecret'",
        Refused::Schema,
    ),
    (
        &["sealKey.secretKey="],
        "'/sealKey/secretKey'",
        Refused::Schema,
    ),
    // the Secret's `..data` link, not a key: a Secret cannot hold `.`, `..` or `..*`
    (
        &["sealKey.secretKey=..data"],
        "'/sealKey/secretKey'",
        Refused::Schema,
    ),
    (
        &["dispatcher.audit.keySecret=audit-keys,dispatcher.audit.keys={..2026}"],
        "'/dispatcher/audit/keys/0'",
        Refused::Schema,
    ),
    (
        &["dispatcher.audit.databaseUrlSecret.name=db/url"],
        "'/dispatcher/audit/databaseUrlSecret/name'",
        Refused::Schema,
    ),
    (
        &["dispatcher.adminTokenSecret.key="],
        "'/dispatcher/adminTokenSecret/key'",
        Refused::Schema,
    ),
    (
        &["imagePullSecrets[0].name=Regcred"],
        "'/imagePullSecrets/0/name'",
        Refused::Schema,
    ),
    // NetworkPolicies: malformed peers and ports, no caller, no DNS or API server, a
    // feature left unreachable
    (&["networkPolicy.enabld=true"], "enabld", Refused::Schema),
    (
        &["networkPolicy.dispatch.namespaces={Agents}"],
        "'/networkPolicy/dispatch/namespaces/0'",
        Refused::Schema,
    ),
    (
        &[
            "networkPolicy.dispatch.namespaceSelector.matchExpressions[0].key=a,networkPolicy.dispatch.namespaceSelector.matchExpressions[0].operator=Equals",
        ],
        "'/networkPolicy/dispatch/namespaceSelector/matchExpressions/0/operator'",
        Refused::Schema,
    ),
    (
        &[
            "networkPolicy.dispatch.extraFrom[0].ipBlock.cidr=10.0.0.0/8,networkPolicy.dispatch.extraFrom[0].podSelector.matchLabels.a=b",
        ],
        "'/networkPolicy/dispatch/extraFrom/0/podSelector': false schema",
        Refused::Schema,
    ),
    (
        &["networkPolicy.dispatch.extraFrom[0].ipBlock.cidr=10.0.0.0/33"],
        "'/networkPolicy/dispatch/extraFrom/0/ipBlock/cidr'",
        Refused::Schema,
    ),
    (
        &["networkPolicy.dispatcherEgress[0].ports[0].port=70000"],
        "'/networkPolicy/dispatcherEgress/0/ports/0/port'",
        Refused::Schema,
    ),
    (
        &["networkPolicy.dispatcherEgress[0].ports[0].protocol=ICMP"],
        "'/networkPolicy/dispatcherEgress/0/ports/0/protocol'",
        Refused::Schema,
    ),
    (
        &["console.ingress.enabled=true"],
        "'/console/ingress/host'",
        Refused::Schema,
    ),
    (
        &["console.ingress.enabled=true,console.ingress.host=Console_Host"],
        "'/console/ingress/host'",
        Refused::Schema,
    ),
    (
        &["networkPolicy.dns.to=null"],
        "at '/networkPolicy/dns': missing property 'to'",
        Refused::Schema,
    ),
    (
        &["networkPolicy.apiServer.ports=null"],
        "at '/networkPolicy/apiServer': missing property 'ports'",
        Refused::Schema,
    ),
    (
        &["networkPolicy.enabled=true"],
        "networkPolicy.dispatch: names no caller, so no agent could reach the dispatchers",
        Refused::Template,
    ),
    (
        &[
            "networkPolicy.enabled=true,networkPolicy.dispatch.allNamespaces=true,networkPolicy.dispatch.namespaces={agents}",
        ],
        "networkPolicy.dispatch.allNamespaces: true admits every namespace",
        Refused::Template,
    ),
    (
        &[
            "networkPolicy.enabled=true,networkPolicy.dispatch.allNamespaces=true,dispatcher.audit.backend=postgres,dispatcher.audit.databaseUrlSecret.name=db",
        ],
        "networkPolicy.dispatcherEgress: empty while dispatcher.audit.backend is postgres",
        Refused::Template,
    ),
    (
        &[
            "networkPolicy.enabled=true,networkPolicy.dispatch.namespaces={agents},dispatcher.prompt.apiKeySecret=keys,dispatcher.prompt.providers[0].name=a,dispatcher.prompt.providers[0].kind=openai,dispatcher.prompt.providers[0].baseUrl=https://x,dispatcher.prompt.providers[0].apiKeySecretKey=k",
        ],
        "networkPolicy.dispatcherEgress: empty while dispatcher.prompt.providers are set",
        Refused::Template,
    ),
];

/// Issue 11, bad input: each value that cannot work fails `helm template` (what `helm
/// install` renders) naming the value. `helm lint` fails on the schema's refusals; the
/// template checks it prints as `[INFO] Fail: ...` and passes (Helm's lint mode makes
/// `fail` non-fatal, helm/helm#8973), so the message is still in front of whoever lints.
/// Every template check fails at once, listing them all. The values at the edges pass, and
/// numbers from a values file render as the binaries and the API server read them.
#[test]
fn helm_values_that_cannot_work_fail_naming_the_value() {
    let ns = "agenthooks-system";
    let chart = chart();
    for (sets, needle, by) in CANNOT_WORK {
        let mut args = Vec::new();
        for s in *sets {
            args.extend(["--set", *s]);
        }
        let out = helm_template(ns, &args);
        let stderr = text(&out.stderr);
        assert!(
            !out.status.success(),
            "{sets:?} was accepted:\n{}",
            text(&out.stdout)
        );
        assert!(
            stderr.contains(refusal_header(*by)) && stderr.contains(needle),
            "{sets:?} should be refused by the {by:?} naming {needle:?}:\n{stderr}"
        );
        let mut lint_args = vec!["lint", chart.as_str()];
        lint_args.extend(&args);
        let lint = run_helm(&lint_args);
        let lint_out = format!("{}{}", text(&lint.stdout), text(&lint.stderr));
        assert_eq!(
            lint.status.success(),
            *by == Refused::Template,
            "helm lint {sets:?}:\n{lint_out}"
        );
        assert!(lint_out.contains(needle), "helm lint {sets:?}:\n{lint_out}");
    }

    // Release names Helm takes but no Service name can start with (a digit) or hold (a
    // dot): refused naming the release, unless fullnameOverride gives a name that works.
    for release in ["1hooks", "my.hooks"] {
        let out = run_helm(&["template", release, chart.as_str()]);
        assert!(!out.status.success(), "release {release} was accepted");
        let stderr = text(&out.stderr);
        assert!(
            stderr.contains(&format!(
                "- release name \"{release}\": the Services would be named {release}-agenthooks-dispatcher"
            )),
            "{release}: {stderr}"
        );
        ok(
            run_helm(&[
                "template",
                release,
                chart.as_str(),
                "--set",
                "fullnameOverride=hooks",
            ]),
            &format!("helm template {release} with fullnameOverride"),
        );
    }

    // Every template check at once, each on its own line.
    let out = helm_template(
        ns,
        &[
            "--set",
            "dispatcher.audit.backend=postgres,dispatcher.audit.keys={k1}",
            "--set-string",
            "dispatcher.commandRunner.image.tag=1",
            "--set",
            "operator.resources.requests.cpu=2,operator.resources.limits.cpu=1",
        ],
    );
    assert!(!out.status.success());
    let stderr = text(&out.stderr);
    for line in [
        "\n- dispatcher.commandRunner.image.tag:",
        "\n- dispatcher.audit.databaseUrlSecret.name:",
        "\n- dispatcher.audit.keySecret:",
        "\n- operator.resources.requests.cpu: 2 is above operator.resources.limits.cpu (1)",
    ] {
        assert!(stderr.contains(line), "{line:?} in:\n{stderr}");
    }

    // The edges that work: a spool of exactly 64Ki, a uid range ending just below the
    // dispatcher's 65532 or starting just above it, one claim for one dispatcher, a claim
    // per Pod for three, requests equal to limits, no dispatcher at all (NOTES warns),
    // runner resources on Standard (no runner there).
    for sets in [
        &["dispatcher.audit.spoolMaxBytes=64Ki"][..],
        &["dispatcher.audit.spoolMaxBytes=65536"],
        &["dispatcher.commandRunner.uidPerRun=true,dispatcher.commandRunner.runAsUser=65468"],
        &["dispatcher.commandRunner.uidPerRun=true,dispatcher.commandRunner.runAsUser=65533"],
        &[
            "dispatcher.replicaCount=1,dispatcher.audit.storage.volume.persistentVolumeClaim.claimName=a",
        ],
        &[
            "dispatcher.replicaCount=3,dispatcher.audit.storage.volume.ephemeral.volumeClaimTemplate.spec.accessModes={ReadWriteOnce}",
        ],
        &["dispatcher.audit.backend=off,dispatcher.audit.spoolMaxBytes=8Gi"],
        &["dispatcher.audit.storage.volume.emptyDir.sizeLimit=1.5Gi"],
        &["dispatcher.audit.storage.volume.emptyDir.medium=Memory"],
        &[
            "dispatcher.audit.storage.volume.ephemeral.volumeClaimTemplate.spec.resources.requests.storage=2Gi",
        ],
        &[
            "operator.resources.requests.memory=256Mi,operator.resources.requests.cpu=0.5,operator.resources.limits.cpu=500m",
        ],
        &["dispatcher.replicaCount=0"],
        &[
            "sealKey.secretKey=.seal,dispatcher.adminTokenSecret.name=admin,dispatcher.adminTokenSecret.key=a..b,dispatcher.callers.mode=anonymous",
        ],
        &["edition=standard,dispatcher.commandRunner.resources.requests.memory=1Gi"],
        &[
            "dispatcher.commandRunner.image.repository=registry.example.com:5000/tools,dispatcher.commandRunner.image.tag=v1",
        ],
        // a caller named any one way is enough; a feature's egress opens it
        &["networkPolicy.enabled=true,networkPolicy.dispatch.allNamespaces=true"],
        &["networkPolicy.enabled=true,networkPolicy.dispatch.extraFrom[0].ipBlock.cidr=10.0.0.0/8"],
        &["networkPolicy.enabled=true,networkPolicy.dispatch.namespaceSelector.matchLabels.a=b"],
        &[
            "networkPolicy.enabled=true,networkPolicy.dispatch.namespaces={agents},dispatcher.audit.backend=postgres,dispatcher.audit.databaseUrlSecret.name=db,networkPolicy.dispatcherEgress[0].ports[0].port=5432",
        ],
    ] {
        let mut args = Vec::new();
        for s in sets {
            args.extend(["--set", *s]);
        }
        ok(helm_template(ns, &args), &format!("helm template {sets:?}"));
    }

    // Numbers from a values file are floats to Helm: they render in full, not as 1e+06
    // (which the dispatcher's flags and the API server's int64 fields refuse).
    let dir = tempfile::tempdir().unwrap();
    let values = dir.path().join("numbers.yaml");
    std::fs::write(
        &values,
        "operator: {allowTenantCommandHooks: true}\n\
         dispatcher:\n  maxConcurrentRequests: 1000000\n  audit: {spoolMaxBytes: 268435456}\n\
         \x20 commandRunner: {runAsUser: 1000000, maxRuns: 4096}\n",
    )
    .unwrap();
    let rendered = ok(
        helm_template(ns, &["-f", &path_str(&values)]),
        "helm template -f numbers.yaml",
    );
    for want in [
        "- --max-concurrent-requests=1000000\n",
        "- --audit-spool-max-bytes=268435456\n",
        "- --run-as-uid=1000000\n",
        "- --max-runs=4096\n",
    ] {
        assert!(rendered.contains(want), "{want:?} in:\n{rendered}");
    }
    assert!(!rendered.contains("e+0"), "{rendered}");
}

/// The dispatcher's update strategy: a rolling update (a new Pod Ready before an old one
/// goes) by default and with a claim per Pod, but `Recreate` when one
/// persistentVolumeClaim or hostPath holds the spool: a surge Pod could not lock the spool
/// (the dispatcher exits) nor attach a ReadWriteOnce claim on another node, and the rollout
/// would hang with the old Pod still running.
#[test]
fn helm_dispatcher_on_one_audit_volume_is_recreated_not_rolled() {
    let strategy = |sets: &[&str]| {
        let mut args = Vec::new();
        for s in sets {
            args.extend(["--set", *s]);
        }
        find(&rendered(&args), "Deployment", "agenthooks-dispatcher")["spec"]["strategy"].clone()
    };
    // rollingUpdate: null, so that `helm upgrade` of a release first installed with a
    // rolling update removes the server's rollingUpdate defaults in its patch (the API
    // server refuses Recreate next to them, helm/helm#5144).
    let recreate = json!({"type": "Recreate", "rollingUpdate": null});
    for sets in [
        &[
            "dispatcher.replicaCount=1,dispatcher.audit.storage.volume.persistentVolumeClaim.claimName=audit",
        ][..],
        &["dispatcher.replicaCount=1,dispatcher.audit.storage.volume.hostPath.path=/var/lib/ah"],
        &[
            "dispatcher.replicaCount=1,dispatcher.audit.backend=postgres,dispatcher.audit.databaseUrlSecret.name=db,dispatcher.audit.storage.volume.persistentVolumeClaim.claimName=audit",
        ],
    ] {
        assert_eq!(strategy(sets), recreate, "{sets:?}");
    }
    for sets in [
        &[][..],
        &[
            "dispatcher.replicaCount=3,dispatcher.audit.storage.volume.ephemeral.volumeClaimTemplate.spec.accessModes={ReadWriteOnce}",
        ],
        // the audit trail off: the claim is not mounted, so nothing is shared
        &[
            "dispatcher.audit.backend=off,dispatcher.audit.storage.volume.persistentVolumeClaim.claimName=audit",
        ],
    ] {
        assert_eq!(
            strategy(sets),
            json!({"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 0, "maxSurge": 1}}),
            "{sets:?}"
        );
    }
}

/// A PodDisruptionBudget per component, selecting exactly its Deployment's Pods: a node
/// drain takes at most `maxUnavailable` of them at once (1 by default, a percentage kept a
/// string), unready Pods may always go (a dispatcher cut off from the operator never holds
/// a drain up), and none when disabled.
#[test]
fn helm_disruption_budgets_select_each_component_and_never_block_a_drain() {
    let items = rendered(&[]);
    let pdbs: Vec<&Value> = items
        .iter()
        .filter(|i| i["kind"] == "PodDisruptionBudget")
        .collect();
    assert_eq!(pdbs.len(), 2, "{pdbs:?}");
    for component in ["operator", "dispatcher"] {
        let name = format!("agenthooks-{component}");
        let pdb = find(&items, "PodDisruptionBudget", &name);
        let deploy = find(&items, "Deployment", &name);
        assert_eq!(pdb["apiVersion"], "policy/v1");
        assert_eq!(pdb["metadata"]["namespace"], "agenthooks-system");
        assert_eq!(pdb["spec"]["maxUnavailable"], 1, "{name}");
        assert!(pdb["spec"].get("minAvailable").is_none(), "{name}");
        assert_eq!(pdb["spec"]["unhealthyPodEvictionPolicy"], "AlwaysAllow");
        assert_eq!(
            pdb["spec"]["selector"]["matchLabels"], deploy["spec"]["selector"]["matchLabels"],
            "{name}"
        );
        assert_eq!(
            pdb["metadata"]["labels"]["app.kubernetes.io/component"],
            component
        );
    }
    let items = rendered(&[
        "--set",
        "operator.podDisruptionBudget.enabled=false",
        "--set",
        "dispatcher.replicaCount=4,dispatcher.podDisruptionBudget.maxUnavailable=50%",
    ]);
    assert_eq!(count(&items, "PodDisruptionBudget"), 1);
    assert_eq!(
        find(&items, "PodDisruptionBudget", "agenthooks-dispatcher")["spec"]["maxUnavailable"],
        "50%"
    );
}

/// Where the Pods run: by default each component prefers nodes that run no other Pod of
/// it (a soft anti-affinity on the hostname, selecting exactly its Deployment's Pods), so
/// one lost or drained node does not take every replica; a given affinity replaces that
/// preference; a spread constraint without labelSelector gets the component's;
/// priorityClassName, nodeSelector and tolerations are passed on.
#[test]
fn helm_replicas_prefer_separate_nodes_and_take_scheduling_values() {
    let items = rendered(&[]);
    for component in ["operator", "dispatcher"] {
        let d = find(&items, "Deployment", &format!("agenthooks-{component}"));
        let pod = &d["spec"]["template"]["spec"];
        let preferred =
            &pod["affinity"]["podAntiAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"];
        assert_eq!(preferred.as_array().map(Vec::len), Some(1), "{pod}");
        assert_eq!(preferred[0]["weight"], 100);
        let term = &preferred[0]["podAffinityTerm"];
        assert_eq!(term["topologyKey"], "kubernetes.io/hostname");
        assert_eq!(
            term["labelSelector"]["matchLabels"], d["spec"]["selector"]["matchLabels"],
            "{component}"
        );
        assert!(pod["affinity"].get("nodeAffinity").is_none());
        for absent in [
            "priorityClassName",
            "topologySpreadConstraints",
            "nodeSelector",
            "tolerations",
        ] {
            assert!(pod.get(absent).is_none(), "{component}: {absent} in {pod}");
        }
    }

    let items = rendered(&[
        "--set",
        "dispatcher.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[0].matchExpressions[0].key=pool,dispatcher.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[0].matchExpressions[0].operator=Exists",
        "--set",
        "dispatcher.topologySpreadConstraints[0].maxSkew=1,dispatcher.topologySpreadConstraints[0].topologyKey=topology.kubernetes.io/zone,dispatcher.topologySpreadConstraints[0].whenUnsatisfiable=DoNotSchedule",
        "--set",
        "dispatcher.topologySpreadConstraints[1].maxSkew=2,dispatcher.topologySpreadConstraints[1].topologyKey=rack,dispatcher.topologySpreadConstraints[1].whenUnsatisfiable=ScheduleAnyway,dispatcher.topologySpreadConstraints[1].labelSelector.matchLabels.tier=hooks",
        "--set",
        "dispatcher.priorityClassName=system-cluster-critical,dispatcher.nodeSelector.pool=hooks",
        "--set",
        "dispatcher.tolerations[0].key=dedicated,dispatcher.tolerations[0].operator=Exists",
    ]);
    let d = find(&items, "Deployment", "agenthooks-dispatcher");
    let pod = &d["spec"]["template"]["spec"];
    assert_eq!(
        pod["affinity"],
        json!({"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [{"matchExpressions": [{"key": "pool", "operator": "Exists"}]}]
        }}}),
        "a given affinity replaces the default preference"
    );
    assert_eq!(
        pod["topologySpreadConstraints"],
        json!([
            {
                "maxSkew": 1,
                "topologyKey": "topology.kubernetes.io/zone",
                "whenUnsatisfiable": "DoNotSchedule",
                "labelSelector": {"matchLabels": d["spec"]["selector"]["matchLabels"]}
            },
            {
                "maxSkew": 2,
                "topologyKey": "rack",
                "whenUnsatisfiable": "ScheduleAnyway",
                "labelSelector": {"matchLabels": {"tier": "hooks"}}
            }
        ])
    );
    assert_eq!(pod["priorityClassName"], "system-cluster-critical");
    assert_eq!(pod["nodeSelector"], json!({"pool": "hooks"}));
    assert_eq!(
        pod["tolerations"],
        json!([{"key": "dedicated", "operator": "Exists"}])
    );
    // The operator keeps its own defaults.
    let op = &find(&items, "Deployment", "agenthooks-operator")["spec"]["template"]["spec"];
    assert!(op["affinity"]["podAntiAffinity"].is_object(), "{op}");
    assert!(op.get("priorityClassName").is_none());
}

/// How a dispatcher Pod stops: the dispatcher's `--shutdown-delay-seconds` (None: not
/// passed), whether the command runner is a native sidecar (an init container restarting
/// Always, which the kubelet stops only after the dispatcher has exited), whether any
/// container has a preStop hook, and the Pod's grace period.
fn shutdown_timing(items: &[Value]) -> (Option<i64>, bool, bool, i64) {
    let pod = &find(items, "Deployment", "agenthooks-dispatcher")["spec"]["template"]["spec"];
    let dispatcher = pod["containers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == "dispatcher")
        .unwrap();
    let delay = dispatcher["args"].as_array().unwrap().iter().find_map(|a| {
        a.as_str()?
            .strip_prefix("--shutdown-delay-seconds=")
            .map(|v| v.parse::<i64>().unwrap())
    });
    let sidecar = pod["initContainers"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|c| c["name"] == "command-runner" && c["restartPolicy"] == "Always");
    let pre_stop = pod["containers"]
        .as_array()
        .into_iter()
        .chain(pod["initContainers"].as_array())
        .flatten()
        .any(|c| c["lifecycle"]["preStop"].is_object());
    (
        delay,
        sidecar,
        pre_stop,
        pod["terminationGracePeriodSeconds"].as_i64().unwrap(),
    )
}

/// A terminating dispatcher Pod goes on deciding for `dispatcher.shutdownDelaySeconds`
/// while its `/readyz` answers 503 (kube-proxy still routes to it until its endpoint is gone
/// everywhere: the chart tier's rollout scenario lost 48 of 782 decisions without it), and
/// its command runner, a native sidecar, stops only after the dispatcher has drained, so no
/// decision in flight loses its runner; the grace period covers the delay, the drain and
/// the audit flush. One mechanism, in the binary: no preStop sleeps.
#[test]
fn helm_dispatcher_keeps_serving_while_its_endpoint_goes_and_its_runner_outlives_the_drain() {
    assert_eq!(shutdown_timing(&rendered(&[])), (Some(5), true, false, 45));
    assert_eq!(
        shutdown_timing(&rendered(&["--set", "dispatcher.shutdownDelaySeconds=20"])),
        (Some(20), true, false, 60)
    );
    assert_eq!(
        shutdown_timing(&rendered(&["--set", "dispatcher.shutdownDelaySeconds=0"])),
        (Some(0), true, false, 40)
    );
    // Standard: no runner.
    assert_eq!(
        shutdown_timing(&rendered(&["--set", "edition=standard"])),
        (Some(5), false, false, 45)
    );
    // The operator has none: dispatchers keep their snapshot through a leader change.
    let items = rendered(&[]);
    let op = &find(&items, "Deployment", "agenthooks-operator")["spec"]["template"]["spec"];
    assert!(op["containers"][0].get("lifecycle").is_none(), "{op}");
}

/// The image of each container of the rendered Deployments, by container name.
fn images(items: &[Value]) -> Vec<(String, String)> {
    items
        .iter()
        .filter(|i| i["kind"] == "Deployment")
        .flat_map(|d| {
            let pod = &d["spec"]["template"]["spec"];
            pod["containers"]
                .as_array()
                .unwrap()
                .iter()
                .chain(pod["initContainers"].as_array().into_iter().flatten())
                .map(|c| {
                    (
                        c["name"].as_str().unwrap().to_string(),
                        c["image"].as_str().unwrap().to_string(),
                    )
                })
                .collect::<Vec<_>>()
        })
        .collect()
}

/// Images pinned by digest (what admission policies that require digests ask for): a
/// component's `image.digest` gives `repository@digest` whatever the tag, the runner
/// follows the dispatcher's unless it has a repository (and digest) of its own.
#[test]
fn helm_images_may_be_pinned_by_digest() {
    let a = format!("sha256:{}", "a".repeat(64));
    let b = format!("sha256:{}", "b".repeat(64));
    let pair = |n: &str, i: &str| (n.to_string(), i.to_string());
    let items = rendered(&[
        "--set",
        &format!("operator.image.digest={a},dispatcher.image.digest={b}"),
        "--set-string",
        "image.tag=9.9",
    ]);
    let mut got = images(&items);
    got.sort();
    assert_eq!(
        got,
        [
            pair("command-runner", &format!("agenthooks/dispatcher@{b}")),
            pair("dispatcher", &format!("agenthooks/dispatcher@{b}")),
            pair("operator", &format!("agenthooks/operator@{a}")),
        ]
    );
    let items = rendered(&[
        "--set",
        &format!(
            "dispatcher.image.digest={b},dispatcher.commandRunner.image.repository=registry.example.com/tools,dispatcher.commandRunner.image.digest={a}"
        ),
    ]);
    let mut got = images(&items);
    got.sort();
    assert_eq!(
        got,
        [
            pair("command-runner", &format!("registry.example.com/tools@{a}")),
            pair("dispatcher", &format!("agenthooks/dispatcher@{b}")),
            pair("operator", "agenthooks/operator:0.1.0"),
        ]
    );
}

/// The dispatcher Service takes annotations (a cloud's internal load balancer) and, as a
/// LoadBalancer, the client CIDRs it admits; by default neither, and a ClusterIP.
#[test]
fn helm_dispatcher_service_takes_annotations_and_source_ranges() {
    let items = rendered(&[]);
    let svc = find(&items, "Service", "agenthooks-dispatcher");
    assert_eq!(svc["spec"]["type"], "ClusterIP");
    assert!(svc["metadata"].get("annotations").is_none(), "{svc}");
    assert!(
        svc["spec"].get("loadBalancerSourceRanges").is_none(),
        "{svc}"
    );
    let items = rendered(&[
        "--set",
        "dispatcher.service.type=LoadBalancer,dispatcher.service.loadBalancerSourceRanges={10.20.0.0/16,fd00::/8}",
        "--set-string",
        "dispatcher.service.annotations.service\\.beta\\.kubernetes\\.io/aws-load-balancer-scheme=internal",
    ]);
    let svc = find(&items, "Service", "agenthooks-dispatcher");
    assert_eq!(svc["spec"]["type"], "LoadBalancer");
    assert_eq!(
        svc["metadata"]["annotations"],
        json!({"service.beta.kubernetes.io/aws-load-balancer-scheme": "internal"})
    );
    assert_eq!(
        svc["spec"]["loadBalancerSourceRanges"],
        json!(["10.20.0.0/16", "fd00::/8"])
    );
}

/// Tenancy values (CONTRACT §9.3): `tenancy.tenantAdmins` binds the groups and users
/// named to `<fullname>-tenant-admin` (a binding that passes the API server), and
/// `tenancy.admissionPolicy: false` leaves the policy out but keeps the ClusterRole.
/// Neither needs anything new of the operator: its ClusterRole stays that of
/// `config/rbac/`.
#[test]
fn helm_tenancy_binds_the_tenant_admins_named_and_the_policy_can_be_left_out() {
    let cp = cp();
    let ns = unique_name("ah-helm-tenancy");
    cp.create_namespace(&ns, &[]);
    let release = unique_name("aht");
    let full = format!("{release}-agenthooks");
    let yaml = ok(
        run_helm(&[
            "template",
            release.as_str(),
            chart().as_str(),
            "--namespace",
            ns.as_str(),
            "--set",
            "tenancy.tenantAdmins.groups={platform-team,sre}",
            "--set",
            "tenancy.tenantAdmins.users={alice@example.com}",
        ]),
        "helm template (tenant admins)",
    );
    let items = server_dry_run(cp, &yaml, "helm template (tenant admins)");
    check_tenancy(&items, &full);
    let binding = find(
        &items,
        "ClusterRoleBinding",
        &format!("{full}-tenant-admin"),
    );
    assert_eq!(
        binding["roleRef"],
        json!({"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
               "name": format!("{full}-tenant-admin")})
    );
    assert_eq!(
        binding["subjects"],
        json!([
            {"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": "platform-team"},
            {"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": "sre"},
            {"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "alice@example.com"},
        ])
    );
    let rbac = server_dry_run(cp, &kustomize(cp, "config/rbac"), "config/rbac");
    assert_eq!(cluster_role_rules(&items), cluster_role_rules(&rbac));

    let off = rendered(&["--set", "tenancy.admissionPolicy=false"]);
    // Only the approval policy is left.
    assert_eq!(count(&off, "ValidatingAdmissionPolicy"), 1);
    assert_eq!(count(&off, "ValidatingAdmissionPolicyBinding"), 1);
    check_approvals(&off, "agenthooks");
    let admin = find(&off, "ClusterRole", "agenthooks-tenant-admin");
    assert_eq!(admin["rules"][0]["verbs"], json!(["assign"]));
    assert!(
        !off.iter().any(|o| o["kind"] == "ClusterRoleBinding"
            && o["metadata"]["name"] == "agenthooks-tenant-admin"),
        "no tenant admins named, no binding"
    );

    // The schema refuses what is not a list of names.
    for (set, needle) in [
        ("tenancy.admissionPolicy=maybe", "/tenancy/admissionPolicy"),
        ("tenancy.tenantAdmins.team={x}", "team"),
    ] {
        let out = helm_template("agenthooks-system", &["--set", set]);
        let stderr = text(&out.stderr);
        assert!(!out.status.success(), "--set {set} rendered");
        assert!(stderr.contains(needle), "--set {set}: {stderr}");
    }
}

/// The `namespaceSelector` peer admitting the namespaces `names` by name.
fn namespaces_peer(names: &[&str]) -> Value {
    json!({"namespaceSelector": {"matchExpressions": [
        {"key": "kubernetes.io/metadata.name", "operator": "In", "values": names}
    ]}})
}

/// The egress rule for DNS with the default `networkPolicy.dns.to` (kube-dns of kube-system).
fn default_dns_rule() -> Value {
    json!({
        "to": [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "kube-system"}},
                "podSelector": {"matchLabels": {"k8s-app": "kube-dns"}}}],
        "ports": [{"port": 53, "protocol": "UDP"}, {"port": 53, "protocol": "TCP"}],
    })
}

/// The chart's NetworkPolicies (docs/network-policies.md): none by default; turned on, one
/// per component, each selecting exactly its Deployment's Pods, for ingress and egress.
/// The operator: the sync port from the release's dispatcher Pods only, the metrics port
/// from the monitoring namespaces; egress to DNS and the API server only. The dispatchers:
/// port 8080 from the namespaces `networkPolicy.dispatch` names and the monitoring ones;
/// egress to DNS and the operator's sync port, nothing else (the command runner shares the
/// Pod's network) unless `networkPolicy.dispatcherEgress` adds it. The rendered chart passes
/// a server-side dry run. (Whether a network plugin enforces them is not tested: the e2e
/// node's bridge CNI does not.)
/// The console's Ingress (docs/console.md): off by default; on, it routes `/ui` of its host
/// — and nothing else — to the dispatchers' Service, with the class, annotations and TLS
/// Secret given.
#[test]
fn helm_console_ingress_routes_only_the_console() {
    assert_eq!(count(&rendered(&[]), "Ingress"), 0, "off by default");
    let items = rendered(&[
        "--set",
        "console.ingress.enabled=true,console.ingress.host=agenthooks.example.com,console.ingress.className=nginx,console.ingress.tlsSecretName=console-tls",
        "--set-string",
        "console.ingress.annotations.nginx\\.ingress\\.kubernetes\\.io/affinity=cookie",
    ]);
    let ing = find(&items, "Ingress", "agenthooks-dispatcher-console");
    assert_eq!(
        ing["spec"],
        json!({
            "ingressClassName": "nginx",
            "tls": [{"hosts": ["agenthooks.example.com"], "secretName": "console-tls"}],
            "rules": [{"host": "agenthooks.example.com", "http": {"paths": [{
                "path": "/ui", "pathType": "Prefix",
                "backend": {"service": {"name": "agenthooks-dispatcher", "port": {"number": 8080}}}
            }]}}]
        })
    );
    assert_eq!(
        ing["metadata"]["annotations"],
        json!({"nginx.ingress.kubernetes.io/affinity": "cookie"})
    );
    let svc = find(&items, "Service", "agenthooks-dispatcher");
    assert_eq!(svc["spec"]["ports"][0]["port"], json!(8080));
}

#[test]
fn helm_network_policies_select_each_component_and_its_ports() {
    assert_eq!(count(&rendered(&[]), "NetworkPolicy"), 0, "off by default");

    let sets = [
        "--set",
        "networkPolicy.enabled=true,networkPolicy.dispatch.namespaces={agents-a,agents-b}",
        "--set-string",
        "networkPolicy.dispatch.namespaceSelector.matchLabels.example\\.com/runs-agents=true",
    ];
    let items = rendered(&sets);
    assert_eq!(count(&items, "NetworkPolicy"), 2);
    let op_labels = json!({"app.kubernetes.io/name": "agenthooks",
        "app.kubernetes.io/instance": "agenthooks", "app.kubernetes.io/component": "operator"});
    let disp_labels = json!({"app.kubernetes.io/name": "agenthooks",
        "app.kubernetes.io/instance": "agenthooks", "app.kubernetes.io/component": "dispatcher"});
    for (policy, deployment, labels) in [
        ("agenthooks-operator", "agenthooks-operator", &op_labels),
        (
            "agenthooks-dispatcher",
            "agenthooks-dispatcher",
            &disp_labels,
        ),
    ] {
        let np = find(&items, "NetworkPolicy", policy);
        assert_eq!(np["metadata"]["namespace"], "agenthooks-system");
        assert_eq!(np["spec"]["podSelector"]["matchLabels"], *labels);
        assert_eq!(
            np["spec"]["podSelector"]["matchLabels"],
            find(&items, "Deployment", deployment)["spec"]["selector"]["matchLabels"],
            "{policy} selects its Deployment's Pods"
        );
        assert_eq!(np["spec"]["policyTypes"], json!(["Ingress", "Egress"]));
    }
    let monitoring = namespaces_peer(&["monitoring"]);

    let op = &find(&items, "NetworkPolicy", "agenthooks-operator")["spec"];
    assert_eq!(
        op["ingress"],
        json!([
            {"from": [{"podSelector": {"matchLabels": disp_labels}}],
             "ports": [{"port": 9090, "protocol": "TCP"}]},
            {"from": [monitoring],
             "ports": [{"port": 9091, "protocol": "TCP"}]},
        ])
    );
    assert_eq!(
        op["egress"],
        json!([
            default_dns_rule(),
            {"to": [{"ipBlock": {"cidr": "0.0.0.0/0"}}, {"ipBlock": {"cidr": "::/0"}}],
             "ports": [{"port": 443, "protocol": "TCP"}, {"port": 6443, "protocol": "TCP"}]},
        ])
    );
    // The ports the policies open are the ones the containers listen on.
    let op_ports = &find(&items, "Deployment", "agenthooks-operator")["spec"]["template"]["spec"]["containers"]
        [0]["ports"];
    assert_eq!(
        *op_ports,
        json!([{"name": "sync", "containerPort": 9090, "protocol": "TCP"},
               {"name": "metrics", "containerPort": 9091, "protocol": "TCP"}])
    );

    let disp = &find(&items, "NetworkPolicy", "agenthooks-dispatcher")["spec"];
    assert_eq!(
        disp["ingress"],
        json!([{
            "from": [
                namespaces_peer(&["agents-a", "agents-b"]),
                {"namespaceSelector": {"matchLabels": {"example.com/runs-agents": "true"}}},
                monitoring,
            ],
            "ports": [{"port": 8080, "protocol": "TCP"}],
        }])
    );
    assert_eq!(
        disp["egress"],
        json!([
            default_dns_rule(),
            {"to": [{"podSelector": {"matchLabels": op_labels}}],
             "ports": [{"port": 9090, "protocol": "TCP"}]},
            // callers by Kubernetes: TokenReview, SubjectAccessReview
            {"to": [{"ipBlock": {"cidr": "0.0.0.0/0"}}, {"ipBlock": {"cidr": "::/0"}}],
             "ports": [{"port": 443, "protocol": "TCP"}, {"port": 6443, "protocol": "TCP"}]},
        ]),
        "the dispatcher Pod (and its command runner) reaches DNS, the operator and the API server, nothing else"
    );
    let disp_ports = &find(&items, "Deployment", "agenthooks-dispatcher")["spec"]["template"]["spec"]
        ["containers"][0]["ports"];
    assert_eq!(
        *disp_ports,
        json!([{"name": "http", "containerPort": 8080, "protocol": "TCP"}])
    );
    assert!(
        !find(&items, "Deployment", "agenthooks-dispatcher")["spec"]["template"]["spec"]
            ["initContainers"][0]
            .to_string()
            .contains("containerPort"),
        "the command runner listens on no port"
    );

    // Every namespace and a client CIDR; no metrics namespace; the API server's own
    // addresses; egress for the hooks' services, appended as given.
    let wide = [
        "--set",
        "networkPolicy.enabled=true,networkPolicy.dispatch.allNamespaces=true",
        "--set",
        "networkPolicy.dispatch.extraFrom[0].ipBlock.cidr=10.20.0.0/16",
        "--set-json",
        "networkPolicy.metrics.namespaces=[]",
        "--set",
        "networkPolicy.apiServer.cidrs={10.0.0.0/24},networkPolicy.apiServer.ports={6443}",
        "--set-json",
        r#"networkPolicy.dispatcherEgress=[{"to":[{"ipBlock":{"cidr":"10.40.0.0/16"}}],"ports":[{"port":443,"protocol":"TCP"}]}]"#,
        "--set-json",
        r#"networkPolicy.dns.to=[{"ipBlock":{"cidr":"169.254.20.10/32"}}]"#,
    ];
    let items = rendered(&wide);
    let op = &find(&items, "NetworkPolicy", "agenthooks-operator")["spec"];
    assert_eq!(
        op["ingress"].as_array().unwrap().len(),
        1,
        "no metrics rule without a monitoring namespace: {}",
        op["ingress"]
    );
    let dns = json!({"to": [{"ipBlock": {"cidr": "169.254.20.10/32"}}],
                     "ports": [{"port": 53, "protocol": "UDP"}, {"port": 53, "protocol": "TCP"}]});
    assert_eq!(
        op["egress"],
        json!([dns, {"to": [{"ipBlock": {"cidr": "10.0.0.0/24"}}],
                     "ports": [{"port": 6443, "protocol": "TCP"}]}])
    );
    let disp = &find(&items, "NetworkPolicy", "agenthooks-dispatcher")["spec"];
    assert_eq!(
        disp["ingress"],
        json!([{"from": [{"namespaceSelector": {}}, {"ipBlock": {"cidr": "10.20.0.0/16"}}],
                "ports": [{"port": 8080, "protocol": "TCP"}]}])
    );
    assert_eq!(
        disp["egress"],
        json!([
            dns,
            {"to": [{"podSelector": {"matchLabels": op_labels}}],
             "ports": [{"port": 9090, "protocol": "TCP"}]},
            {"to": [{"ipBlock": {"cidr": "10.0.0.0/24"}}],
             "ports": [{"port": 6443, "protocol": "TCP"}]},
            {"to": [{"ipBlock": {"cidr": "10.40.0.0/16"}}],
             "ports": [{"port": 443, "protocol": "TCP"}]},
        ])
    );

    // The API server takes both renders as they are (`kubectl apply --dry-run=server`).
    let cp = cp();
    let ns = unique_name("ah-helm-netpol");
    cp.create_namespace(&ns, &[]);
    for (what, args) in [
        ("named namespaces", &sets[..]),
        ("every namespace", &wide[..]),
    ] {
        let yaml = ok(helm_template(&ns, args), &format!("helm template ({what})"));
        let items = server_dry_run(cp, &yaml, &format!("helm template ({what})"));
        assert_eq!(count(&items, "NetworkPolicy"), 2, "{what}");
        for np in items.iter().filter(|o| o["kind"] == "NetworkPolicy") {
            assert_eq!(np["metadata"]["namespace"], ns.as_str(), "{what}");
            assert_eq!(
                np["spec"]["policyTypes"],
                json!(["Ingress", "Egress"]),
                "{what}"
            );
        }
    }
}

/// `helm install` (against the real API server, no dry run) refuses values that cannot
/// work before it creates anything: no release, no object in the namespace.
#[test]
fn helm_install_refuses_values_that_cannot_work_and_creates_nothing() {
    let cp = cp();
    let ns = unique_name("ah-helm-bad");
    cp.create_namespace(&ns, &[]);
    let home = tempfile::tempdir().unwrap();
    let helm_env = |cmd: &mut Command| {
        for (var, sub) in [
            ("HELM_CACHE_HOME", "cache"),
            ("HELM_CONFIG_HOME", "config"),
            ("HELM_DATA_HOME", "data"),
        ] {
            cmd.env(var, home.path().join(sub));
        }
    };
    let kubeconfig = path_str(&cp.kubeconfig);
    let chart = chart();
    for (set, needle) in [
        ("operator.replicaCount=0", "'/operator/replicaCount'"),
        ("edition=enterprise", "'/edition'"),
        (
            "dispatcher.audit.backend=postgres",
            "dispatcher.audit.databaseUrlSecret.name: required",
        ),
    ] {
        let mut cmd = Command::new(helm());
        helm_env(&mut cmd);
        let out = cmd
            .args([
                "install",
                "agenthooks",
                chart.as_str(),
                "--namespace",
                ns.as_str(),
                "--kubeconfig",
                kubeconfig.as_str(),
                "--skip-crds",
                "--set",
                set,
            ])
            .stdin(Stdio::null())
            .output()
            .expect("run helm install");
        let stderr = text(&out.stderr);
        assert!(!out.status.success(), "helm install --set {set} succeeded");
        assert!(
            stderr.contains("INSTALLATION FAILED") && stderr.contains(needle),
            "--set {set}: {stderr}"
        );
    }
    let mut cmd = Command::new(helm());
    helm_env(&mut cmd);
    let list = ok(
        cmd.args([
            "list",
            "--all",
            "--short",
            "--namespace",
            ns.as_str(),
            "--kubeconfig",
            kubeconfig.as_str(),
        ])
        .stdin(Stdio::null())
        .output()
        .expect("run helm list"),
        "helm list",
    );
    assert_eq!(list.trim(), "", "no release is left");
    let left = cp.kubectl_json(&[
        "-n",
        &ns,
        "get",
        "deployments,services,serviceaccounts,secrets,configmaps,roles,rolebindings",
        "-l",
        "app.kubernetes.io/managed-by=Helm",
    ]);
    assert_eq!(left["items"], json!([]), "objects left: {left}");
}

/// What the NOTES of each documented example must say (and must not); `{full}` stands for
/// the release's base name.
const EXAMPLE_NOTES: &[(&str, &[&str], &[&str])] = &[
    (
        "(defaults)",
        &[
            "audit       SQLite, one file per dispatcher Pod",
            "tenants     only users bound to ClusterRole {full}-tenant-admin (or cluster-admins) may set the",
            "(ValidatingAdmissionPolicy {full}-tenant-label)",
            "command hooks run in its command-runner container (agenthooks/dispatcher:0.1.0)",
            "- dispatcher.audit.backend=sqlite on an emptyDir",
            "- operator.image.repository / dispatcher.image.repository are the default agenthooks/*",
            "sync        TLS: dispatchers trust only ca.crt of Secret {full}-sync-tls (generated by the chart, kept on upgrades);",
            "Wire the agent runtimes (docs/dialects.md): each has its own route, http://{full}-dispatcher.",
            "then trust it (Codex skips an untrusted hook silently): /hooks, or docs/dialects.md",
            "\"command\": \"agenthooks-dispatcher hook --dialect gemini-cli --url http://{full}-dispatcher.",
            "- operator.syncTLS: the chart generated the sync CA and certificate (Secret {full}-sync-tls, kept on upgrades by Helm lookup). Argo CD",
        ],
        &[
            "syncTLS.enabled=false",
            "allowTenantCommandHooks",
            "replicaCount=1",
            "refused at admission",
            "tenancy.admissionPolicy=false",
            "bound:",
            "NetworkPolicies",
            "networkPolicy",
        ],
    ),
    (
        "standard-values.yaml",
        &[
            "command hooks are refused at admission (ValidatingAdmissionPolicy {full}-standard-edition)",
        ],
        &["command-runner container", "uid per command run"],
    ),
    (
        "postgres-values.yaml",
        &[
            "audit       PostgreSQL (URL from Secret agenthooks-audit-db)",
            "registry.example.com/agenthooks/operator:0.1.0",
        ],
        &["which no registry publishes", "sqlite on an emptyDir"],
    ),
    (
        "sqlite-volume-values.yaml",
        &["- dispatcher.replicaCount=1: a restart or a node drain"],
        &["sqlite on an emptyDir"],
    ),
    (
        "ephemeral-values.yaml",
        &["Deployment {full}-dispatcher: 3 replica(s)"],
        &["sqlite on an emptyDir", "replicaCount=1"],
    ),
    (
        "prompt-values.yaml",
        &[
            "prompt hooks: providers anthropic, openai; model aliases gpt-4o-mini, haiku (default haiku)",
        ],
        &["prompt hooks block"],
    ),
    (
        "network-policy-values.yaml",
        &[
            "network     NetworkPolicies {full}-operator and {full}-dispatcher: in effect only where the cluster's network",
        ],
        &["networkPolicy.dispatcherEgress is empty"],
    ),
    (
        "tenant-command-hooks-values.yaml",
        &[
            "- operator.allowTenantCommandHooks=true: hooks in tenant namespaces may run shell commands",
            "- a uid per command run (uids 1000000..1000127)",
            "\"restricted\" Pod Security Standard",
            "command-runner container (registry.example.com/agenthooks/hook-tools:2026.1)",
        ],
        &[],
    ),
];

/// The recommended labels every object of the release carries.
fn check_release_labels(labels: &Value, release: &str, what: &str) {
    for (k, v) in [
        ("app.kubernetes.io/name", "agenthooks"),
        ("app.kubernetes.io/instance", release),
        ("app.kubernetes.io/version", "0.1.0"),
        ("app.kubernetes.io/managed-by", "Helm"),
        ("app.kubernetes.io/part-of", "agenthooks"),
        ("helm.sh/chart", "agenthooks-0.1.0"),
    ] {
        assert_eq!(labels[k], v, "{what}: label {k} in {labels}");
    }
}

/// The chart's documented examples (`charts/agenthooks/ci/*-values.yaml`, the directory
/// chart-testing reads) and the defaults: each passes `helm lint --strict`, renders and
/// passes a server-side dry run; every object carries Kubernetes' recommended labels and
/// Helm's chart label, every container asks for CPU and memory and has a memory limit; the
/// NOTES that `helm install` prints name what was installed, how to check Ready (with a
/// selector that matches the Deployments) and how to reach the dispatcher Service, and warn
/// of what the values risk.
#[test]
fn helm_documented_examples_render_with_labels_resources_and_notes() {
    let cp = cp();
    let chart = chart();
    let ns = unique_name("ah-helm-examples");
    cp.create_namespace(&ns, &[]);
    // A release of its own: its cluster-scoped objects (the Standard edition's admission
    // policy, the ClusterRole) must not meet other tests' objects of the default names.
    let release = unique_name("ahx");
    let full = format!("{release}-agenthooks");
    let kubeconfig = path_str(&cp.kubeconfig);
    let home = tempfile::tempdir().unwrap();
    let mut files: Vec<String> = std::fs::read_dir(root().join("charts/agenthooks/ci"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with("-values.yaml"))
        .collect();
    files.sort();
    let mut expected: Vec<&str> = EXAMPLE_NOTES.iter().skip(1).map(|e| e.0).collect();
    expected.sort();
    assert_eq!(
        files, expected,
        "every example has its NOTES expectations here"
    );

    for (example, notes_have, notes_lack) in EXAMPLE_NOTES {
        let values = (*example != "(defaults)")
            .then(|| path_str(&root().join("charts/agenthooks/ci").join(example)));
        let mut extra: Vec<&str> = Vec::new();
        if let Some(v) = &values {
            extra.extend(["-f", v.as_str()]);
        }
        let mut lint = vec!["lint", "--strict", chart.as_str()];
        lint.extend(&extra);
        ok(run_helm(&lint), &format!("helm lint --strict {example}"));
        let mut template = vec![
            "template",
            release.as_str(),
            chart.as_str(),
            "--namespace",
            ns.as_str(),
            "--include-crds",
        ];
        template.extend(&extra);
        let rendered = ok(run_helm(&template), &format!("helm template {example}"));
        let items = server_dry_run(cp, &rendered, example);

        for o in items
            .iter()
            .filter(|o| o["kind"] != "CustomResourceDefinition")
        {
            let what = format!("{example}: {} {}", o["kind"], o["metadata"]["name"]);
            check_release_labels(&o["metadata"]["labels"], &release, &what);
            let Some(pod) = o["spec"].get("template") else {
                continue;
            };
            check_release_labels(
                &pod["metadata"]["labels"],
                &release,
                &format!("{what} pod template"),
            );
            assert!(
                pod["metadata"]["labels"]["app.kubernetes.io/component"].is_string(),
                "{what}"
            );
            for c in pod["spec"]["containers"].as_array().unwrap() {
                let r = &c["resources"];
                assert!(
                    r["requests"]["cpu"].is_string()
                        && r["requests"]["memory"].is_string()
                        && r["limits"]["memory"].is_string(),
                    "{what}: container {} resources {r}",
                    c["name"]
                );
            }
        }

        // The NOTES, as `helm install` prints them.
        let mut cmd = Command::new(helm());
        for (var, sub) in [
            ("HELM_CACHE_HOME", "cache"),
            ("HELM_CONFIG_HOME", "config"),
            ("HELM_DATA_HOME", "data"),
        ] {
            cmd.env(var, home.path().join(sub));
        }
        let mut args = vec![
            "install",
            release.as_str(),
            chart.as_str(),
            "--namespace",
            ns.as_str(),
            "--kubeconfig",
            kubeconfig.as_str(),
            "--skip-crds",
            "--dry-run=server",
        ];
        args.extend(&extra);
        let out = ok(
            cmd.args(&args)
                .stdin(Stdio::null())
                .output()
                .expect("run helm install"),
            &format!("helm install --dry-run=server {example}"),
        );
        let notes = out
            .split_once("\nNOTES:\n")
            .unwrap_or_else(|| panic!("{example}: no NOTES in:\n{out}"))
            .1;
        let svc = find(&items, "Service", &format!("{full}-dispatcher"));
        let port = &svc["spec"]["ports"][0]["port"];
        for want in [
            format!("in the cluster  http://{full}-dispatcher.{ns}.svc:{port}/v1/dispatch"),
            format!("kubectl -n {ns} port-forward service/{full}-dispatcher 8080:{port}"),
            format!("kubectl -n {ns} get lease {full}-operator"),
        ] {
            assert!(
                notes.contains(&want),
                "{example}: {want:?} in NOTES:\n{notes}"
            );
        }
        // The Ready check's selector matches both Deployments.
        let wait = notes
            .lines()
            .find(|l| l.contains("--for=condition=Available"))
            .unwrap_or_else(|| panic!("{example}: no Ready check in NOTES:\n{notes}"));
        let selector = wait
            .split_whitespace()
            .skip_while(|w| *w != "-l")
            .nth(1)
            .unwrap_or_else(|| panic!("no -l in {wait:?}"));
        let deployments: Vec<&Value> = items.iter().filter(|o| o["kind"] == "Deployment").collect();
        assert_eq!(deployments.len(), 2, "{example}");
        for d in deployments {
            for pair in selector.split(',') {
                let (k, v) = pair.split_once('=').unwrap();
                assert_eq!(d["metadata"]["labels"][k], v, "{example}: {wait}");
            }
        }
        for want in notes_have.iter().map(|w| w.replace("{full}", &full)) {
            assert!(
                notes.contains(&want),
                "{example}: {want:?} in NOTES:\n{notes}"
            );
        }
        for unwanted in notes_lack.iter().map(|w| w.replace("{full}", &full)) {
            assert!(
                !notes.contains(&unwanted),
                "{example}: {unwanted:?} in NOTES:\n{notes}"
            );
        }
    }
}

/// CONTRACT §9.4 in RBAC: the operator (ServiceAccount `op`) may review tokens and access
/// (system:auth-delegator); the ClusterRole `agenthooks-sync` grants `create` on
/// `agenthooks/sync`, bound to the dispatcher's ServiceAccount `disp` in namespace
/// `master`, where the operator asks.
fn check_sync_rbac(items: &[Value], op: &str, disp: &str, master: &str) {
    let b = find(items, "ClusterRoleBinding", &format!("{op}-auth-delegator"));
    assert_eq!(b["roleRef"]["name"], "system:auth-delegator", "{b}");
    assert_eq!(b["subjects"][0]["name"], op, "{b}");
    let role = find(items, "ClusterRole", "agenthooks-sync");
    assert_eq!(
        role["rules"],
        serde_json::json!([{"apiGroups": ["agenthooks.io"], "resources": ["agenthooks/sync"], "verbs": ["create"]}])
    );
    let rb = find(items, "RoleBinding", &format!("{disp}-sync"));
    assert_eq!(rb["metadata"]["namespace"], master, "{rb}");
    // The operator asks RBAC where the binding is (the chart's release namespace).
    let op_args = args_of(find(items, "Deployment", op));
    let asked = op_args
        .iter()
        .find_map(|a| a.strip_prefix("--sync-rbac-namespace="))
        .or_else(|| {
            op_args
                .iter()
                .find_map(|a| a.strip_prefix("--master-namespace="))
        })
        .unwrap_or("agenthooks-system");
    // (the Downward API's namespace is the Deployment's own)
    let own = find(items, "Deployment", op)["metadata"]["namespace"].clone();
    let asked = if asked == "$(POD_NAMESPACE)" {
        own.as_str().unwrap_or("agenthooks-system")
    } else {
        asked
    };
    assert_eq!(asked, master, "{op_args:?}");
    assert_eq!(
        (rb["roleRef"]["kind"].clone(), rb["roleRef"]["name"].clone()),
        (
            serde_json::json!("ClusterRole"),
            serde_json::json!("agenthooks-sync")
        )
    );
    assert_eq!(
        (
            rb["subjects"][0]["kind"].clone(),
            rb["subjects"][0]["name"].clone()
        ),
        (serde_json::json!("ServiceAccount"), serde_json::json!(disp))
    );
}

/// The dispatcher Deployment of `items` runs command hooks in its `command-runner`
/// container (CONTRACT §10.1): another uid, only the socket and its own /tmp mounted, no
/// Secret, no ServiceAccount token; the dispatcher reaches it over the socket. A native
/// sidecar (an init container that restarts Always): up before the dispatcher, stopped
/// after it, so a draining dispatcher still has its runner.
fn check_command_runner(items: &[Value]) {
    let d = find(items, "Deployment", "agenthooks-dispatcher");
    let pod = &d["spec"]["template"]["spec"];
    assert_eq!(pod["automountServiceAccountToken"], false);
    let containers = pod["containers"].as_array().unwrap();
    assert_eq!(containers.len(), 1, "{containers:?}");
    assert_eq!(containers[0]["name"], "dispatcher");
    assert!(has_arg(
        &args_of(d),
        "--command-runner=unix:/run/agenthooks-runner/runner.sock"
    ));
    let sidecars = pod["initContainers"].as_array().expect("initContainers");
    assert_eq!(sidecars.len(), 1, "{sidecars:?}");
    let r = &sidecars[0];
    assert_eq!(r["name"], "command-runner");
    assert_eq!(r["restartPolicy"], "Always", "a native sidecar");
    assert_eq!(
        r["image"], containers[0]["image"],
        "the dispatcher's image by default"
    );
    assert_eq!(r["image"], "agenthooks/dispatcher:0.1.0");
    assert_eq!(
        find(items, "Deployment", "agenthooks-operator")["spec"]["template"]["spec"]["containers"]
            [0]["image"],
        "agenthooks/operator:0.1.0"
    );
    let r_args: Vec<&str> = r["args"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap())
        .collect();
    assert_eq!(
        r_args,
        [
            "command-runner",
            "--socket=/run/agenthooks-runner/runner.sock",
            "--tmp-dir=/tmp",
            "--max-runs=64"
        ]
    );
    let sc = &r["securityContext"];
    assert_eq!(sc["runAsUser"], 65533);
    assert_eq!(sc["runAsGroup"], 65533);
    assert_ne!(sc["runAsUser"], pod["securityContext"]["runAsUser"]);
    assert_eq!(sc["readOnlyRootFilesystem"], true);
    assert_eq!(sc["allowPrivilegeEscalation"], false);
    // Only the socket and its own /tmp: no Secret, no audit storage, no dispatcher /tmp.
    let mounts: Vec<&str> = r["volumeMounts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["name"].as_str().unwrap())
        .collect();
    assert_eq!(mounts, ["runner-socket", "runner-tmp"]);
    // The API token (for --kubernetes-callers) is the dispatcher container's alone, and
    // only when it asks the API server about callers.
    let kube = has_arg(&args_of(d), "--kubernetes-callers");
    assert_eq!(volume(pod, "kube-api-access").is_some(), kube, "{pod}");
    if kube {
        let token = volume(pod, "kube-api-access").unwrap();
        assert_eq!(
            token["projected"]["sources"][0]["serviceAccountToken"]["path"],
            "token"
        );
        assert!(
            containers[0]["volumeMounts"]
                .as_array()
                .unwrap()
                .iter()
                .any(|m| m["name"] == "kube-api-access"
                    && m["mountPath"] == "/var/run/secrets/kubernetes.io/serviceaccount")
        );
    }
    // The dispatcher's identity on the operator's sync port (CONTRACT §9.4): a token of
    // the audience agenthooks.io/sync, mounted in the dispatcher container only, its id
    // read from it (no --dispatcher-id).
    let sync = volume(pod, "sync-token").expect("sync-token volume");
    assert_eq!(
        sync["projected"]["sources"],
        serde_json::json!([{"serviceAccountToken": {
            "audience": "agenthooks.io/sync", "expirationSeconds": 3600, "path": "token"}}]),
        "{sync}"
    );
    assert!(
        containers[0]["volumeMounts"]
            .as_array()
            .unwrap()
            .iter()
            .any(|m| m["name"] == "sync-token"
                && m["mountPath"] == "/var/run/secrets/agenthooks.io/sync"
                && m["readOnly"] == true),
        "{pod}"
    );
    assert!(!mounts.contains(&"sync-token"), "the runner has no token");
    assert!(has_arg(
        &args_of(d),
        "--operator-token-file=/var/run/secrets/agenthooks.io/sync/token"
    ));
    assert!(
        !args_of(d).iter().any(|a| a.starts_with("--dispatcher-id")),
        "the id comes from the token"
    );
    assert!(r.get("envFrom").is_none());
    for e in r["env"].as_array().into_iter().flatten() {
        assert!(e.get("valueFrom").is_none(), "{e}");
    }
    assert!(
        volume(pod, "runner-socket").unwrap()["emptyDir"].is_object(),
        "{pod}"
    );
    assert!(volume(pod, "runner-tmp").unwrap()["emptyDir"].is_object());
    assert_eq!(
        containers[0]["volumeMounts"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|m| m["name"] == "runner-socket")
            .count(),
        1
    );
}

/// CONTRACT §10.1 in the chart: on Lite each dispatcher Pod has a `command-runner`
/// container (another uid, only the socket and its own /tmp mounted, no ServiceAccount
/// token) and the dispatcher is pointed at its socket; Standard has neither; the
/// operator gets `--allow-tenant-command-hooks` only from its value; the runner's image
/// is a value.
#[test]
fn helm_command_runner_runs_hooks_away_from_the_dispatchers_secrets() {
    let cp = cp();
    let ns = "agenthooks-system";
    let yaml = ok(
        helm_template(
            ns,
            &[
                "--set",
                "dispatcher.adminTokenSecret.name=agenthooks-admin",
                "--set",
                "dispatcher.callers.mode=anonymous",
                "--set",
                "dispatcher.audit.keySecret=audit-keys",
                "--set",
                "dispatcher.audit.keys={k1}",
            ],
        ),
        "helm template (lite)",
    );
    let items = to_json(cp, &yaml);
    check_command_runner(&items);
    check_sync_rbac(&items, "agenthooks-operator", "agenthooks-dispatcher", ns);
    let op_args = args_of(find(&items, "Deployment", "agenthooks-operator"));
    assert!(!has_arg(&op_args, "--allow-tenant-command-hooks"));

    // The image and the tenant setting are values.
    let yaml = ok(
        helm_template(
            ns,
            &[
                "--set",
                "dispatcher.commandRunner.image.repository=registry.example.com/hooks-tools",
                "--set-string",
                "dispatcher.commandRunner.image.tag=2026.1",
                "--set",
                "operator.allowTenantCommandHooks=true",
            ],
        ),
        "helm template (runner image)",
    );
    let items = to_json(cp, &yaml);
    let d = find(&items, "Deployment", "agenthooks-dispatcher");
    assert_eq!(
        d["spec"]["template"]["spec"]["initContainers"][0]["image"],
        "registry.example.com/hooks-tools:2026.1"
    );
    assert!(has_arg(
        &args_of(find(&items, "Deployment", "agenthooks-operator")),
        "--allow-tenant-command-hooks"
    ));
    // Tenants' command hooks: a uid per run (the runner root with only the capabilities
    // to switch uids, clean up and kill).
    let r = &d["spec"]["template"]["spec"]["initContainers"][0];
    assert!(
        r["args"]
            .as_array()
            .unwrap()
            .iter()
            .any(|a| a == "--run-as-uid=65533"),
        "{r}"
    );
    let sc = &r["securityContext"];
    assert_eq!(
        (
            &sc["runAsUser"],
            &sc["runAsNonRoot"],
            &sc["allowPrivilegeEscalation"]
        ),
        (&json!(0), &json!(false), &json!(false))
    );
    assert_eq!(sc["capabilities"]["drop"], json!(["ALL"]));
    assert_eq!(
        sc["capabilities"]["add"],
        json!([
            "SETUID",
            "SETGID",
            "CHOWN",
            "DAC_OVERRIDE",
            "FOWNER",
            "KILL"
        ])
    );
    // A range of run uids that would hold the dispatcher's uid is refused at render time.
    let out = helm_template(
        ns,
        &[
            "--set",
            "dispatcher.commandRunner.uidPerRun=true",
            "--set",
            "dispatcher.commandRunner.runAsUser=65500",
        ],
    );
    assert!(!out.status.success());
    let err = text(&out.stderr);
    assert!(
        err.contains("65500..65563") && err.contains("65532"),
        "{err}"
    );

    // Standard: no runner, no flag, no socket volume.
    let yaml = ok(
        helm_template(ns, &["--set", "edition=standard"]),
        "helm template (standard)",
    );
    let items = to_json(cp, &yaml);
    let d = find(&items, "Deployment", "agenthooks-dispatcher");
    let pod = &d["spec"]["template"]["spec"];
    assert_eq!(pod["containers"].as_array().unwrap().len(), 1);
    assert!(pod.get("initContainers").is_none(), "{pod}");
    assert!(!args_of(d).iter().any(|a| a.starts_with("--command-runner")));
    assert!(volume(pod, "runner-socket").is_none());
}

/// Chart values giving the dispatchers two model providers (issue 4 point 1): the
/// chart's documented example.
fn prompt_values() -> PathBuf {
    root().join("charts/agenthooks/ci/prompt-values.yaml")
}

/// Where the chart mounts `dispatcher.prompt.apiKeySecret`.
const PROVIDER_KEYS_DIR: &str = "/var/run/secrets/agenthooks/providers";

fn volume<'a>(pod: &'a Value, name: &str) -> Option<&'a Value> {
    pod["volumes"]
        .as_array()?
        .iter()
        .find(|v| v["name"] == name)
}

fn mount<'a>(pod: &'a Value, name: &str) -> Option<&'a Value> {
    pod["containers"][0]["volumeMounts"]
        .as_array()?
        .iter()
        .find(|m| m["name"] == name)
}

/// Runs `agenthooks-dispatcher check` with `--providers-file providers` (a prompt hook
/// loaded, an event it does not match) → (exit code, stderr).
fn dispatcher_loads_providers(dir: &Path, providers: &Path) -> (Option<i32>, String) {
    let hooks = dir.join("hooks.yaml");
    std::fs::write(
        &hooks,
        "apiVersion: agenthooks.io/v1alpha1\nkind: AgentHook\n\
         metadata: {name: judge, namespace: tenant-acme}\n\
         spec:\n  event: pre_tool_use\n  matcher: '^exec$'\n\
         \x20 handler:\n    type: prompt\n    prompt: {model: gpt-4o-mini, promptTemplate: Judge it.}\n",
    )
    .unwrap();
    let event = dir.join("event.json");
    std::fs::write(&event, r#"{"event": "pre_tool_use", "tool_name": "ls"}"#).unwrap();
    let out = Command::new(agenthooks_e2e::procs::bin("agenthooks-dispatcher"))
        .args(["check", "--hooks"])
        .arg(&hooks)
        .arg("--event")
        .arg(&event)
        .arg("--providers-file")
        .arg(providers)
        .env("NO_COLOR", "1")
        .stdin(Stdio::null())
        .output()
        .expect("run agenthooks-dispatcher check");
    (out.status.code(), text(&out.stderr))
}

/// `dispatcher.prompt`: the providers land in a ConfigMap as providers.yaml with every
/// `apiKeyFile` in the mounted key Secret, the dispatchers get `--providers-file` and both
/// mounts (read-only), a checksum rolls them when the providers change, the API server
/// accepts it all (server-side dry run), and the dispatcher itself loads the rendered file.
/// Without providers nothing of it is rendered; inconsistent values fail the render,
/// naming the value.
#[test]
fn helm_prompt_providers_render_mount_and_load_in_the_dispatcher() {
    let cp = cp();
    let ns = unique_name("ah-helm-prompt");
    cp.create_namespace(&ns, &[]);
    let dir = tempfile::tempdir().unwrap();
    let values = path_str(&prompt_values());

    // Defaults: no providers file, no prompt ConfigMap, no prompt mounts.
    let items = server_dry_run(
        cp,
        &ok(helm_template(&ns, &[]), "helm template (defaults)"),
        "helm template (defaults)",
    );
    let dispatcher = find(&items, "Deployment", "agenthooks-dispatcher");
    assert!(
        !args_of(dispatcher)
            .iter()
            .any(|a| a.starts_with("--providers-file")),
        "{:?}",
        args_of(dispatcher)
    );
    assert_eq!(count(&items, "ConfigMap"), 0);
    let pod = &dispatcher["spec"]["template"]["spec"];
    assert!(volume(pod, "prompt-providers").is_none() && volume(pod, "provider-keys").is_none());

    // With providers.
    ok(
        run_helm(&["lint", "--strict", chart().as_str(), "-f", &values]),
        "helm lint -f prompt-values.yaml",
    );
    let rendered = ok(
        helm_template(&ns, &["-f", &values]),
        "helm template -f prompt-values.yaml",
    );
    let items = server_dry_run(cp, &rendered, "helm template -f prompt-values.yaml");
    check_wiring(
        &items,
        "agenthooks-operator",
        "agenthooks-dispatcher",
        "lite",
        "agenthooks-seal-key",
    );
    let dispatcher = find(&items, "Deployment", "agenthooks-dispatcher");
    assert!(
        has_arg(
            &args_of(dispatcher),
            "--providers-file=/etc/agenthooks/prompt/providers.yaml"
        ),
        "{:?}",
        args_of(dispatcher)
    );
    let pod = &dispatcher["spec"]["template"]["spec"];
    assert_eq!(
        volume(pod, "prompt-providers").map(|v| &v["configMap"]["name"]),
        Some(&json!("agenthooks-dispatcher-prompt"))
    );
    let keys = volume(pod, "provider-keys").expect("provider-keys volume");
    assert_eq!(keys["secret"]["secretName"], "agenthooks-provider-keys");
    for (name, path) in [
        ("prompt-providers", "/etc/agenthooks/prompt"),
        ("provider-keys", PROVIDER_KEYS_DIR),
    ] {
        let m = mount(pod, name).unwrap_or_else(|| panic!("no {name} mount"));
        assert_eq!(m["mountPath"], path, "{m}");
        assert_eq!(m["readOnly"], true, "{m}");
    }
    let checksum =
        dispatcher["spec"]["template"]["metadata"]["annotations"]["checksum/prompt-providers"]
            .as_str()
            .expect("checksum/prompt-providers annotation")
            .to_string();
    assert_eq!(checksum.len(), 64, "{checksum}");
    let cm = find(&items, "ConfigMap", "agenthooks-dispatcher-prompt");
    assert_eq!(cm["metadata"]["namespace"], ns.as_str());
    let file = cm["data"]["providers.yaml"]
        .as_str()
        .expect("providers.yaml in the ConfigMap");
    for want in [
        "apiKeyFile: /var/run/secrets/agenthooks/providers/anthropic-api-key",
        "apiKeyFile: /var/run/secrets/agenthooks/providers/openai-api-key",
        "defaultModel: haiku",
    ] {
        assert!(
            file.contains(want),
            "providers.yaml lacks {want:?}:\n{file}"
        );
    }
    assert!(!file.contains("apiKeySecretKey"), "{file}");

    // The dispatcher loads the rendered file, with the Secret's keys where the mount puts
    // them (here a temp dir standing in for the mount).
    let key_dir = dir.path().join("keys");
    std::fs::create_dir_all(&key_dir).unwrap();
    for k in ["anthropic-api-key", "openai-api-key"] {
        std::fs::write(key_dir.join(k), "sk-test\n").unwrap();
    }
    let local = dir.path().join("providers.yaml");
    std::fs::write(&local, file.replace(PROVIDER_KEYS_DIR, &path_str(&key_dir))).unwrap();
    let (code, stderr) = dispatcher_loads_providers(dir.path(), &local);
    assert_eq!(
        code,
        Some(0),
        "the dispatcher refused the chart's providers file: {stderr}"
    );
    // ... and would refuse it without the keys (so the check above did load it).
    std::fs::remove_file(key_dir.join("openai-api-key")).unwrap();
    let (code, stderr) = dispatcher_loads_providers(dir.path(), &local);
    assert_eq!(code, Some(1), "{stderr}");
    assert!(stderr.contains("providers[1].apiKeyFile"), "{stderr}");

    // Another default model: another checksum (the pods roll).
    let other = ok(
        helm_template(
            &ns,
            &[
                "-f",
                &values,
                "--set",
                "dispatcher.prompt.defaultModel=gpt-4o-mini",
            ],
        ),
        "helm template (other defaultModel)",
    );
    let items = to_json(cp, &other);
    let other_sum = &find(&items, "Deployment", "agenthooks-dispatcher")["spec"]["template"]["metadata"]
        ["annotations"]["checksum/prompt-providers"];
    assert!(
        other_sum.is_string() && *other_sum != checksum.as_str(),
        "{other_sum}"
    );

    // Inconsistent values fail the render, naming the value.
    for (set, needle) in [
        (
            "dispatcher.prompt.apiKeySecret=",
            "dispatcher.prompt.apiKeySecret",
        ),
        (
            "dispatcher.prompt.defaultModel=sonnet",
            "dispatcher.prompt.defaultModel",
        ),
        (
            "dispatcher.prompt.models.mini.provider=opnai,dispatcher.prompt.models.mini.model=m",
            "dispatcher.prompt.models.mini.provider",
        ),
    ] {
        let out = helm_template(&ns, &["-f", &values, "--set", set]);
        assert!(!out.status.success(), "--set {set} was accepted");
        let stderr = text(&out.stderr);
        assert!(stderr.contains(needle), "--set {set}: {stderr}");
    }
    // (--set replaces a list, so a duplicate name comes from a values file.)
    let dup = dir.path().join("dup-values.yaml");
    std::fs::write(
        &dup,
        std::fs::read_to_string(prompt_values())
            .unwrap()
            .replace("name: openai", "name: anthropic"),
    )
    .unwrap();
    let out = helm_template(&ns, &["-f", &path_str(&dup)]);
    assert!(
        !out.status.success(),
        "a provider defined twice was accepted"
    );
    assert!(
        text(&out.stderr).contains("dispatcher.prompt.providers[1].name"),
        "{}",
        text(&out.stderr)
    );
    let out = helm_template(&ns, &["--set", "dispatcher.prompt.defaultModel=haiku"]);
    assert!(
        !out.status.success(),
        "a defaultModel without providers was accepted"
    );
    assert!(
        text(&out.stderr).contains("dispatcher.prompt.providers is empty"),
        "{}",
        text(&out.stderr)
    );
}

// ---------------------------------------------------------------------------------------
// (c) the Standard-edition admission policy, through the API server

fn hook(ns: &str, name: &str, handler: Value) -> String {
    json!({
        "apiVersion": "agenthooks.io/v1alpha1",
        "kind": "AgentHook",
        "metadata": {"name": name, "namespace": ns},
        "spec": {"event": "pre_tool_use", "scope": "tenant", "handler": handler},
    })
    .to_string()
}

fn command_handler() -> Value {
    json!({"type": "command", "command": {"command": "exit 0"}})
}

fn http_handler() -> Value {
    json!({"type": "http", "http": {"url": "https://policy.example.com/hook"}})
}

/// Deletes the test's binding even when the test fails (the policy itself is left: without
/// a binding it does nothing, and a concurrent run against the same cluster may use it).
struct DeleteOnDrop<'a>(&'a ControlPlane, String);

impl Drop for DeleteOnDrop<'_> {
    fn drop(&mut self) {
        let _ = self.0.kubectl(&[
            "delete",
            "validatingadmissionpolicybinding",
            &self.1,
            "--ignore-not-found",
            "--wait=false",
        ]);
    }
}

#[test]
fn admission_policy_refuses_command_hooks_in_bound_namespaces() {
    let cp = cp();
    let ns = unique_name("ah-standard");
    let other = unique_name("ah-lite");
    let label = "agenthooks-e2e/standard-edition";
    cp.create_namespace(&ns, &[(label, &ns)]);
    cp.create_namespace(&other, &[]);
    // A command hook from the Lite days, before the policy binds.
    cp.apply_yaml(&hook(&ns, "legacy", command_handler()));

    // The shipped policy; a binding of our own, limited to the test namespace (the shipped
    // binding applies to every namespace and would refuse other tests' command hooks).
    let policy = std::fs::read_to_string(root().join("config/admission/policy.yaml")).unwrap();
    cp.apply_yaml(&policy);
    let binding = unique_name("ah-standard-edition");
    let _cleanup = DeleteOnDrop(cp, binding.clone());
    cp.apply_yaml(
        &json!({
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "ValidatingAdmissionPolicyBinding",
            "metadata": {"name": binding},
            "spec": {
                "policyName": "agenthooks-standard-edition",
                "validationActions": ["Deny"],
                "matchResources": {"namespaceSelector": {"matchLabels": {label: ns}}},
            },
        })
        .to_string(),
    );

    // Bindings take a few seconds to become active: probe with server-side dry runs.
    let probe = hook(&ns, "probe", command_handler());
    let started = Instant::now();
    let mut last = String::new();
    let active = wait_for(Duration::from_secs(30), || {
        let out = cp.kubectl_stdin(&["create", "--dry-run=server", "-f", "-"], &probe);
        last = text(&out.stderr);
        !out.status.success()
    });
    assert!(active, "policy not enforced within 30 s; last: {last}");
    eprintln!(
        "[manifests] admission policy active after {:.1}s",
        started.elapsed().as_secs_f64()
    );

    // kube-controller-manager type-checks the policy against the CRD schema and writes
    // status.typeChecking; the harness control plane runs none, so this is checked only
    // where the status is there (a full cluster by AGENTHOOKS_E2E_KUBECONFIG).
    let p = cp.kubectl_json(&[
        "get",
        "validatingadmissionpolicy",
        "agenthooks-standard-edition",
    ]);
    match p["status"].get("typeChecking") {
        Some(tc) => {
            let warnings = &tc["expressionWarnings"];
            assert!(
                warnings.is_null() || warnings.as_array().is_some_and(|w| w.is_empty()),
                "type-check warnings: {warnings}"
            );
        }
        None => eprintln!("[manifests] no policy type-check status (no kube-controller-manager)"),
    }

    // A command hook is refused with the policy's message, and not stored.
    let out = cp.kubectl_stdin(
        &["create", "-f", "-"],
        &hook(&ns, "shell", command_handler()),
    );
    let stderr = text(&out.stderr);
    assert!(!out.status.success(), "command hook admitted");
    assert!(stderr.contains(COMMAND_REFUSED), "{stderr}");
    assert!(stderr.contains("agenthooks-standard-edition"), "{stderr}");
    assert!(
        !cp.kubectl(&["-n", &ns, "get", "agenthook", "shell"])
            .status
            .success()
    );

    // An http hook is admitted.
    ok(
        cp.kubectl_stdin(&["create", "-f", "-"], &hook(&ns, "policy", http_handler())),
        "create of an http hook",
    );
    // Turning it into a command hook is refused.
    let out = cp.kubectl(&[
        "-n",
        &ns,
        "patch",
        "agenthook",
        "policy",
        "--type=merge",
        "-p",
        r#"{"spec":{"handler":{"type":"command","http":null,"command":{"command":"exit 0"}}}}"#,
    ]);
    assert!(!out.status.success(), "switch to command admitted");
    assert!(text(&out.stderr).contains(COMMAND_REFUSED));

    // The Lite-era command hook: metadata edits pass (so it can be relabelled and deleted),
    // spec edits that keep the command handler do not.
    ok(
        cp.kubectl(&["-n", &ns, "label", "agenthook", "legacy", "audited=yes"]),
        "label of a Lite-era command hook",
    );
    let out = cp.kubectl(&[
        "-n",
        &ns,
        "patch",
        "agenthook",
        "legacy",
        "--type=merge",
        "-p",
        r#"{"spec":{"priority":7}}"#,
    ]);
    assert!(
        !out.status.success(),
        "spec edit of a command hook admitted"
    );
    assert!(text(&out.stderr).contains(COMMAND_REFUSED));
    ok(
        cp.kubectl(&["-n", &ns, "delete", "agenthook", "legacy", "--wait=false"]),
        "delete of a Lite-era command hook",
    );

    // Outside the bound namespaces (a Lite namespace here) command hooks are still admitted.
    ok(
        cp.kubectl_stdin(
            &["create", "-f", "-"],
            &hook(&other, "shell", command_handler()),
        ),
        "create of a command hook in an unbound namespace",
    );
}
