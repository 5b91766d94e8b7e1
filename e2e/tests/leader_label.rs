//! The leader-only sync Service, on the real API server: two operator processes (as the
//! ServiceAccount of `config/rbac/operator.yaml`) share a Lease, each with
//! `--pod-name`/`--pod-namespace` naming a plain Pod object that stands for its replica
//! (the harness control plane runs no kubelet or scheduler: the Pods stay Pending, and
//! nothing computes Endpoints, so the test checks which Pods the shipped Service's
//! selector picks).
//!
//! - Only the synced leader's Pod carries `agenthooks.io/leader=true`; a leftover label on
//!   another Pod of the namespace is removed by the leader; the selector of the shipped
//!   Service `agenthooks-operator-leader` picks exactly the leader's Pod.
//! - SIGKILL of the leader (no clean-up of its own): the standby takes over, labels its Pod
//!   and removes the killed leader's label, within the Lease duration plus a few seconds.
//! - SIGTERM of the (only) leader: it removes its own label on the way out.
//! - The ServiceAccount may patch Pods in its own namespace only.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use agenthooks_e2e::stack::{
    OperatorProc, install_crds, log_dir, operator_service_account_kubeconfig, tails, wait_or_panic,
};
use agenthooks_e2e::{ControlPlane, unique_name};
use serde_json::{Value, json};

/// Lease duration given to both operators (seconds).
const LEASE_SECONDS: u64 = 10;
const LEADER_LABEL: &str = "agenthooks.io/leader";

fn root() -> &'static Path {
    Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/.."))
}

/// The objects `kubectl kustomize config/operator` renders, as JSON.
fn shipped_operator(cp: &ControlPlane) -> Vec<Value> {
    let dir = root().join("config/operator");
    let yaml = cp.kubectl_ok(&["kustomize", dir.to_str().unwrap()]);
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
        &yaml,
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::Deserializer::from_slice(&out.stdout)
        .into_iter::<Value>()
        .map(|v| v.expect("kubectl JSON"))
        .collect()
}

fn find<'a>(items: &'a [Value], kind: &str, name: &str) -> &'a Value {
    items
        .iter()
        .find(|o| o["kind"] == kind && o["metadata"]["name"] == name)
        .unwrap_or_else(|| panic!("config/operator has no {kind} {name}"))
}

/// `k=v,k=v` of a label map.
fn selector_string(labels: &Value) -> String {
    labels
        .as_object()
        .expect("label map")
        .iter()
        .map(|(k, v)| format!("{k}={}", v.as_str().unwrap()))
        .collect::<Vec<_>>()
        .join(",")
}

/// Creates a plain Pod `name` in `ns` with `labels` (it stays Pending: nothing runs it).
fn create_pod(cp: &ControlPlane, ns: &str, name: &str, labels: &Value) {
    cp.apply_yaml(
        &json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": ns, "labels": labels},
            "spec": {"containers": [{"name": "operator", "image": "agenthooks/operator:0.1.0"}]},
        })
        .to_string(),
    );
}

/// The value of the leader label on Pod `name`, if any.
fn leader_label(cp: &ControlPlane, ns: &str, name: &str) -> Option<String> {
    let pod = cp.kubectl_json(&["-n", ns, "get", "pod", name]);
    pod["metadata"]["labels"][LEADER_LABEL]
        .as_str()
        .map(str::to_string)
}

/// Names of the Pods of `ns` that `selector` picks, sorted.
fn selected(cp: &ControlPlane, ns: &str, selector: &str) -> Vec<String> {
    let list = cp.kubectl_json(&["-n", ns, "get", "pods", "-l", selector]);
    let mut names: Vec<String> = list["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["metadata"]["name"].as_str().unwrap().to_string())
        .collect();
    names.sort();
    names
}

/// `kubectl auth can-i VERB pods -n NS` as the user of `kubeconfig`.
fn can_i(cp: &ControlPlane, kubeconfig: &Path, verb: &str, ns: &str) -> bool {
    let out = Command::new(&cp.kubectl_bin)
        .args(["--kubeconfig", kubeconfig.to_str().unwrap()])
        .args(["auth", "can-i", verb, "pods", "-n", ns])
        .output()
        .expect("run kubectl");
    String::from_utf8_lossy(&out.stdout).trim() == "yes"
}

#[test]
fn only_the_leaders_pod_is_labelled_across_kill_and_shutdown() {
    let cp = ControlPlane::shared();
    install_crds(cp);
    let ns = unique_name("ah-leader-label");
    cp.create_namespace(&ns, &[]);
    let logs = log_dir("ah-leader-label");
    let kubeconfig = operator_service_account_kubeconfig(cp, &ns, &logs);
    for verb in ["get", "list", "patch"] {
        assert!(can_i(cp, &kubeconfig, verb, &ns), "{verb} pods in {ns}");
        assert!(
            !can_i(cp, &kubeconfig, verb, "default"),
            "{verb} pods outside its namespace"
        );
    }
    assert!(!can_i(cp, &kubeconfig, "delete", &ns));

    // Pods labelled like the shipped Deployment's, and the shipped Service's selector.
    let shipped = shipped_operator(cp);
    let template_labels = &find(&shipped, "Deployment", "agenthooks-operator")["spec"]["template"]
        ["metadata"]["labels"];
    let service = find(&shipped, "Service", "agenthooks-operator-leader");
    let service_selector = selector_string(&service["spec"]["selector"]);
    assert!(
        service_selector.contains("agenthooks.io/leader=true"),
        "{service_selector}"
    );
    let (pod_a, pod_b) = (
        "agenthooks-operator-5f7c9d8b4-aaaaa",
        "agenthooks-operator-5f7c9d8b4-bbbbb",
    );
    let stale = "agenthooks-operator-5f7c9d8b4-stale";
    create_pod(cp, &ns, pod_a, template_labels);
    create_pod(cp, &ns, pod_b, template_labels);
    let mut stale_labels = template_labels.clone();
    stale_labels[LEADER_LABEL] = json!("true");
    create_pod(cp, &ns, stale, &stale_labels);
    assert_eq!(selected(cp, &ns, &service_selector), [stale]);

    // Two replicas (identity = Pod name, as the manifests set it).
    let lease = unique_name("agenthooks-operator");
    let lease_flag = LEASE_SECONDS.to_string();
    let start = |pod: &str| {
        OperatorProc::start(
            &kubeconfig,
            &ns,
            &lease,
            pod,
            &[
                "--lease-duration-seconds",
                &lease_flag,
                "--dispatcher-ttl-seconds",
                "3600",
                "--pod-name",
                pod,
                "--pod-namespace",
                &ns,
            ],
            &logs,
        )
    };
    let op_a = start(pod_a);
    let op_b = start(pod_b);
    wait_or_panic(
        Duration::from_secs(60),
        "one operator leads",
        &[&op_a.proc, &op_b.proc],
        // Exactly one (each look is a metrics scrape, which may time out under load).
        || op_a.is_leader() != op_b.is_leader(),
    );
    let (leader, standby) = if op_a.is_leader() {
        (op_a, op_b)
    } else {
        (op_b, op_a)
    };
    let (leader_pod, standby_pod) = (leader.identity.clone(), standby.identity.clone());
    wait_or_panic(
        Duration::from_secs(30),
        "the leader's Pod labelled, the leftover label removed",
        &[&leader.proc, &standby.proc],
        || selected(cp, &ns, &service_selector) == [leader_pod.as_str()],
    );
    assert_eq!(leader_label(cp, &ns, &leader_pod).as_deref(), Some("true"));
    assert_eq!(leader_label(cp, &ns, stale), None);
    // The standby stays unlabelled (over more than one resync).
    let until = Instant::now() + Duration::from_secs(LEASE_SECONDS + 1);
    while Instant::now() < until {
        assert_eq!(
            selected(cp, &ns, &service_selector),
            [leader_pod.as_str()],
            "only the leader selected\n{}",
            tails(&[&leader.proc, &standby.proc])
        );
        // (Leadership itself is not asserted here: on a loaded machine a short Lease
        // may change hands, which the label must then follow — checked below.)
        std::thread::sleep(Duration::from_millis(500));
    }

    // SIGKILL of the leader: it removes nothing; the new leader labels itself and removes
    // the old label.
    let mut leader = leader;
    let pid = leader.proc.pid().expect("leader running");
    unsafe { libc::kill(pid as i32, libc::SIGKILL) };
    let killed = Instant::now();
    wait_or_panic(
        Duration::from_secs(LEASE_SECONDS * 3 + 10),
        "the new leader's Pod labelled and the killed leader's label removed",
        &[&standby.proc],
        || selected(cp, &ns, &service_selector) == [standby_pod.as_str()],
    );
    let moved = killed.elapsed();
    assert!(!leader.proc.running(), "killed leader still running");
    assert!(standby.is_leader());
    assert_eq!(leader_label(cp, &ns, &leader_pod), None);
    // The Lease expires LEASE_SECONDS after the last renewal; the standby retries every
    // grace period (a third of the duration), then needs its initial sync.
    assert!(
        moved <= Duration::from_secs(LEASE_SECONDS + LEASE_SECONDS / 3 + 5),
        "label moved after {moved:?} (lease {LEASE_SECONDS} s)"
    );
    eprintln!("leader label moved {moved:?} after SIGKILL of the leader (lease {LEASE_SECONDS} s)");
    leader.proc.stop(Duration::from_secs(1));

    // SIGTERM of the only replica left: it removes its own label before exiting (nobody
    // else could).
    let mut last = standby;
    let stopping = Instant::now();
    last.proc.stop(Duration::from_secs(20));
    let stopped = stopping.elapsed();
    assert!(
        stopped < Duration::from_secs(20),
        "did not stop on SIGTERM\n{}",
        last.proc.log_tail(40)
    );
    assert_eq!(
        leader_label(cp, &ns, &standby_pod),
        None,
        "label left after SIGTERM\n{}",
        last.proc.log_tail(40)
    );
    assert!(selected(cp, &ns, &service_selector).is_empty());
    let log = std::fs::read_to_string(&last.proc.log).unwrap_or_default();
    assert!(log.contains("leader label removed on shutdown"), "{log}");
}
