//! The chart tier on a real node (issue 11): `charts/agenthooks` installed with
//! `helm install --wait` on a single-node cluster whose kubelet runs the images that
//! `e2e/images/build.sh` builds like the Dockerfile does, and an "agent" Pod that calls the
//! dispatcher through its Service by DNS name.
//!
//! Ignored by `cargo test` (it needs root, builds release images and starts a node: a
//! minute or so once the binaries are cached, many minutes cold); `make test-node` runs it.
//! The node is torn down at the end, and the test fails if `down.sh` finds the host
//! different from before (iptables, links, routes, sysctls, mounts, cgroups, paths).

use std::time::{Duration, Instant};

use agenthooks_e2e::node::Node;
use agenthooks_e2e::repo_root;
use agenthooks_e2e::wait_for;
use serde_json::Value;

const NS: &str = "agenthooks-system";
const LEADER_LABEL: &str = "agenthooks.io/leader";

fn condition(v: &Value, type_: &str) -> Option<String> {
    v["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == type_)
        .and_then(|c| c["status"].as_str().map(str::to_owned))
}

fn pods(node: &Node, selector: &str) -> Vec<Value> {
    node.kubectl_json(&["-n", NS, "get", "pods", "-l", selector])["items"]
        .as_array()
        .cloned()
        .unwrap_or_default()
}

/// Why `pod` is not Ready (None: it is), for assertion messages.
fn not_ready(pod: &Value) -> Option<String> {
    if condition(pod, "Ready").as_deref() == Some("True") {
        return None;
    }
    Some(format!(
        "{} {}: {}",
        pod["metadata"]["name"], pod["status"]["phase"], pod["status"]["containerStatuses"]
    ))
}

/// Everything a failure message needs: Pods, events, the dispatcher and operator logs.
fn diagnostics(node: &Node) -> String {
    let pods = node.kubectl(&["get", "pods", "-A", "-o", "wide"]);
    let events = node.kubectl(&["get", "events", "-A", "--sort-by=.lastTimestamp"]);
    let mut logs = String::new();
    for c in ["operator", "dispatcher"] {
        let out = node.kubectl(&[
            "-n",
            NS,
            "logs",
            "-l",
            &format!("app.kubernetes.io/component={c}"),
            "--all-containers",
            "--tail=20",
            "--prefix",
        ]);
        logs.push_str(&String::from_utf8_lossy(&out.stdout));
    }
    format!(
        "pods:\n{}\nevents:\n{}\nlogs:\n{logs}\nkubelet:\n{}",
        String::from_utf8_lossy(&pods.stdout),
        String::from_utf8_lossy(&events.stdout),
        node.log_tail("kubelet", 30)
    )
}

/// The agent's script: one pre_tool_use call per line of `calls` (label, event JSON), each
/// answer printed as `ANSWER <label> <body>`; the dispatcher is found by its Service name.
fn agent_script(calls: &[(&str, &str)]) -> String {
    let mut s = String::from(
        "url=http://agenthooks-dispatcher.agenthooks-system.svc:8080/v1/dispatch\n\
         nslookup agenthooks-dispatcher.agenthooks-system.svc.cluster.local >/dev/null || { echo 'NO DNS'; exit 3; }\n",
    );
    for (label, event) in calls {
        s.push_str(&format!(
            "echo \"ANSWER {label} $(timeout 20 wget -q -O - --header 'content-type: application/json' --post-data '{event}' \"$url\")\"\n"
        ));
    }
    s
}

#[test]
#[ignore = "needs root and starts a real node (kubelet, containerd): make test-node"]
fn chart_on_a_real_node_serves_an_agent_pod_by_dns_name() {
    let mut node = Node::up();
    let chart = repo_root().join("charts/agenthooks");

    // helm install --wait: 2 operators, 3 dispatchers, command hooks of tenants allowed
    // (the sample hook is a tenant's command hook: the runner gets a uid per run).
    let t = Instant::now();
    let out = node.helm(&[
        "install",
        "agenthooks",
        chart.to_str().unwrap(),
        "--namespace",
        NS,
        "--create-namespace",
        "--set",
        "operator.replicaCount=2",
        "--set",
        "dispatcher.replicaCount=3",
        "--set",
        "operator.allowTenantCommandHooks=true",
        "--wait",
        "--timeout",
        "5m",
    ]);
    assert!(
        out.status.success(),
        "helm install failed: {}{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
        diagnostics(&node)
    );
    let install_secs = t.elapsed().as_secs_f64();

    // Every Pod Ready: 2 operators, 3 dispatchers (dispatcher + command-runner each).
    let operators = pods(&node, "app.kubernetes.io/component=operator");
    let dispatchers = pods(&node, "app.kubernetes.io/component=dispatcher");
    assert_eq!(operators.len(), 2, "{}", diagnostics(&node));
    assert_eq!(dispatchers.len(), 3, "{}", diagnostics(&node));
    for p in operators.iter().chain(&dispatchers) {
        assert_eq!(not_ready(p), None, "{}", diagnostics(&node));
    }
    for d in &dispatchers {
        let names: Vec<&str> = d["status"]["containerStatuses"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|c| c["ready"] == true)
            .filter_map(|c| c["name"].as_str())
            .collect();
        assert_eq!(
            names.len(),
            2,
            "dispatcher + command-runner ready: {names:?}"
        );
    }

    // The Lease holder labels its own Pod, and only that one; the leader Service routes to it.
    let mut leader = String::new();
    let labelled = wait_for(Duration::from_secs(60), || {
        let lease = node.kubectl_json(&["-n", NS, "get", "lease", "agenthooks-operator"]);
        leader = lease["spec"]["holderIdentity"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        let marked: Vec<String> = pods(&node, &format!("{LEADER_LABEL}=true"))
            .iter()
            .filter_map(|p| p["metadata"]["name"].as_str().map(str::to_owned))
            .collect();
        !leader.is_empty() && marked == [leader.clone()]
    });
    assert!(
        labelled,
        "the Lease holder {leader:?} should be the only Pod labelled {LEADER_LABEL}=true\n{}",
        diagnostics(&node)
    );
    let leader_ip = node.kubectl_json(&["-n", NS, "get", "pod", &leader])["status"]["podIP"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    let routed = wait_for(Duration::from_secs(30), || {
        let slices = node.kubectl_json(&[
            "-n",
            NS,
            "get",
            "endpointslices",
            "-l",
            "kubernetes.io/service-name=agenthooks-operator-leader",
        ]);
        let ips: Vec<String> = slices["items"]
            .as_array()
            .into_iter()
            .flatten()
            .flat_map(|s| s["endpoints"].as_array().cloned().unwrap_or_default())
            .flat_map(|e| e["addresses"].as_array().cloned().unwrap_or_default())
            .filter_map(|a| a.as_str().map(str::to_owned))
            .collect();
        ips == [leader_ip.clone()]
    });
    assert!(
        routed,
        "agenthooks-operator-leader should route to the leader {leader} ({leader_ip}) only"
    );

    // The sample hook, applied with kubectl, accepted and served by every dispatcher.
    let samples = repo_root().join("config/samples");
    node.kubectl_ok(&[
        "apply",
        "-f",
        samples.join("namespaces.yaml").to_str().unwrap(),
        "-f",
        samples.join("block-dangerous-exec.yaml").to_str().unwrap(),
    ]);
    let t = Instant::now();
    let mut hook = Value::Null;
    let served = wait_for(Duration::from_secs(60), || {
        hook = node.kubectl_json(&["-n", "tenant-acme", "get", "agenthook", "block-rm-rf"]);
        condition(&hook, "Accepted").as_deref() == Some("True")
            && condition(&hook, "Ready").as_deref() == Some("True")
    });
    assert!(
        served,
        "block-rm-rf should be Accepted and Ready: {}\n{}",
        hook["status"],
        diagnostics(&node)
    );
    let apply_to_ready_ms = t.elapsed().as_millis();

    // The agent Pod: restricted, in the tenant's namespace, talks to the Service by name.
    let ls = r#"{"event":"pre_tool_use","tenant_id":"acme","agent_id":"coder","session_id":"s1","tool_name":"exec","tool_input":{"cmd":"ls -la"}}"#;
    let rm = r#"{"event":"pre_tool_use","tenant_id":"acme","agent_id":"coder","session_id":"s1","tool_name":"exec","tool_input":{"cmd":"rm -rf /var/lib/data"}}"#;
    let pod = serde_json::json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "agent", "namespace": "tenant-acme"},
        "spec": {
            "restartPolicy": "Never",
            "automountServiceAccountToken": false,
            "securityContext": {
                "runAsNonRoot": true, "runAsUser": 1000, "runAsGroup": 1000,
                "seccompProfile": {"type": "RuntimeDefault"}
            },
            "containers": [{
                "name": "agent",
                "image": "agenthooks.test/agent:1",
                "imagePullPolicy": "Never",
                "command": ["/bin/sh", "-c", agent_script(&[("ls", ls), ("rm", rm)])],
                "securityContext": {
                    "allowPrivilegeEscalation": false, "readOnlyRootFilesystem": true,
                    "capabilities": {"drop": ["ALL"]}
                }
            }]
        }
    });
    let manifest = node.dir.join("agent-pod.json");
    std::fs::write(&manifest, pod.to_string()).unwrap();
    node.kubectl_ok(&["apply", "-f", manifest.to_str().unwrap()]);
    let finished = wait_for(Duration::from_secs(90), || {
        let phase =
            node.kubectl_json(&["-n", "tenant-acme", "get", "pod", "agent"])["status"]["phase"]
                .clone();
        phase == "Succeeded" || phase == "Failed"
    });
    let logs =
        String::from_utf8_lossy(&node.kubectl(&["-n", "tenant-acme", "logs", "agent"]).stdout)
            .into_owned();
    assert!(
        finished,
        "the agent Pod did not finish: {logs}\n{}",
        diagnostics(&node)
    );
    let answer = |label: &str| -> Value {
        let prefix = format!("ANSWER {label} ");
        let line = logs
            .lines()
            .find_map(|l| l.strip_prefix(&prefix))
            .unwrap_or_else(|| panic!("no answer for {label} in the agent's log:\n{logs}"));
        serde_json::from_str(line)
            .unwrap_or_else(|e| panic!("answer for {label} is not JSON ({e}): {line}"))
    };
    let allowed = answer("ls");
    assert_eq!(allowed["decision"], "allow", "{allowed}");
    let blocked = answer("rm");
    assert_eq!(blocked["decision"], "block", "{blocked}");
    assert_eq!(
        blocked["decidingHook"], "tenant-acme/block-rm-rf",
        "{blocked}"
    );
    assert!(
        blocked["reason"]
            .as_str()
            .is_some_and(|r| r.contains("destructive command refused by policy")),
        "the command hook's stderr is the reason: {blocked}"
    );

    eprintln!(
        "E2E-FIGURE node_images_s={:.1} node_up_s={:.1} helm_install_ready_s={install_secs:.1} hook_apply_to_ready_ms={apply_to_ready_ms}",
        node.images_secs, node.up_secs
    );
    match node.down() {
        Ok(secs) => eprintln!("E2E-FIGURE node_down_s={secs:.1}"),
        Err(e) => panic!("the host was not restored: {e}"),
    }
}
