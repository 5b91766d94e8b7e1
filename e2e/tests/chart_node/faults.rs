//! Scenario `faults`: faults on Pods, as the process tier has them.
//!
//! - No operator to reach (its Deployment scaled to 0) and a dispatcher Pod replaced: the
//!   new Pod is not Ready, answers `/readyz` 503 and `/v1/dispatch` 503 ("treat as
//!   block", never a decision from an empty set), while the Ready dispatchers behind the
//!   Service keep deciding from their snapshot; with the operators back it becomes Ready
//!   and decides.
//! - An operator without RBAC for a watch (`watch` taken off Secrets in its ClusterRole):
//!   the replica that leads next is not Ready, its `/readyz` names the failing watch; with
//!   the verb back it is Ready again.

use std::time::{Duration, Instant};

use agenthooks_e2e::node::agent::{Agent, verdict};
use agenthooks_e2e::wait_for;
use serde_json::{Value, json};

use crate::support::{CALLS, DISPATCH_URL, NS, RM, TENANT_NS, Tier, condition, names};

const OPERATOR: &str = "agenthooks-operator";
const DISPATCHER: &str = "agenthooks-dispatcher";

/// The scenario (see the module docs).
pub fn run(tier: &mut Tier) {
    tier.ensure_installed();
    tier.wait_rollout(DISPATCHER);
    tier.wait_rollout(OPERATOR);
    let agent = Agent::start(&tier.node, TENANT_NS, "agent");
    no_operator(tier, &agent);
    no_watch_rbac(tier, &agent);
}

fn pod_ip(tier: &Tier, pod: &str) -> String {
    tier.node.kubectl_json(&["-n", NS, "get", "pod", pod])["status"]["podIP"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

fn ready(tier: &Tier, pod: &str) -> Option<String> {
    condition(
        &tier.node.kubectl_json(&["-n", NS, "get", "pod", pod]),
        "Ready",
    )
}

fn no_operator(tier: &Tier, agent: &Agent) {
    let node = &tier.node;
    node.kubectl_ok(&["-n", NS, "scale", "deployment", OPERATOR, "--replicas=0"]);
    let gone = wait_for(Duration::from_secs(60), || {
        tier.pods("app.kubernetes.io/component=operator").is_empty()
    });
    assert!(gone, "the operators did not stop");

    let old = names(&tier.component_pods("dispatcher"));
    node.kubectl_ok(&["-n", NS, "delete", "pod", &old[0], "--wait=false"]);
    let mut fresh = String::new();
    let started = wait_for(Duration::from_secs(60), || {
        let now = names(&tier.component_pods("dispatcher"));
        match now.iter().find(|p| !old.contains(p)) {
            Some(p) => {
                fresh = p.clone();
                !pod_ip(tier, p).is_empty() && {
                    let pod = node.kubectl_json(&["-n", NS, "get", "pod", p]);
                    pod["status"]["containerStatuses"][0]["state"]["running"].is_object()
                }
            }
            None => false,
        }
    });
    assert!(started, "no replacement dispatcher runs");
    let ip = pod_ip(tier, &fresh);
    // Up (live), polling an operator that is not there, for a while: not Ready.
    let t = Instant::now();
    let live = wait_for(Duration::from_secs(30), || {
        agent
            .request(&format!("http://{ip}:8080/healthz"), &[], None)
            .status
            == 200
    });
    assert!(live, "{fresh} answers /healthz");
    std::thread::sleep(Duration::from_secs(8).saturating_sub(t.elapsed()));
    assert_eq!(
        ready(tier, &fresh).as_deref(),
        Some("False"),
        "{fresh} with no operator to reach is not Ready"
    );
    let readyz = agent.request(&format!("http://{ip}:8080/readyz"), &[], None);
    assert_eq!(
        (readyz.status, readyz.json()),
        (503, json!({"ready": false})),
        "{readyz:?}"
    );
    let refused = agent.request(&format!("http://{ip}:8080/v1/dispatch"), &[], Some(RM));
    assert_eq!(refused.status, 503, "{refused:?}");
    let body = refused.json();
    assert!(
        body["error"]
            .as_str()
            .is_some_and(|e| e.contains("no hooks loaded yet; treat as block")),
        "{body}"
    );
    assert!(
        body.get("decision").is_none(),
        "no decision from an empty set: {body}"
    );
    // The Service routes around it: the Ready dispatchers decide from their snapshot.
    let routed = tier.endpoint_ips("agenthooks-dispatcher");
    assert!(!routed.contains(&ip), "{ip} is not an endpoint: {routed:?}");
    for (label, event) in CALLS {
        let a = agent.request(DISPATCH_URL, &[], Some(event));
        assert_eq!(a.status, 200, "{label}: {a:?}");
        assert_eq!(verdict(&a.json()), tier.expected(label), "{label}");
    }

    // The operators back: the new dispatcher syncs, is Ready and decides.
    node.kubectl_ok(&["-n", NS, "scale", "deployment", OPERATOR, "--replicas=2"]);
    let t = Instant::now();
    let recovered = wait_for(Duration::from_secs(90), || {
        ready(tier, &fresh).as_deref() == Some("True")
    });
    assert!(
        recovered,
        "{fresh} did not become Ready with the operators back"
    );
    let recovered_secs = t.elapsed().as_secs_f64();
    let decided = agent.request(&format!("http://{ip}:8080/v1/dispatch"), &[], Some(RM));
    assert_eq!(decided.status, 200, "{decided:?}");
    assert_eq!(verdict(&decided.json()), tier.expected("rm"));
    tier.wait_rollout(OPERATOR);
    tier.wait_rollout(DISPATCHER);
    eprintln!("E2E-FIGURE fault_no_operator_ready_after_scale_up_s={recovered_secs:.1}");
}

fn no_watch_rbac(tier: &Tier, agent: &Agent) {
    let node = &tier.node;
    let role = node.kubectl_json(&["get", "clusterrole", OPERATOR]);
    let rules = role["rules"].as_array().cloned().unwrap_or_default();
    let secrets = rules
        .iter()
        .position(|r| r["apiGroups"] == json!([""]) && r["resources"] == json!(["secrets"]))
        .expect("a rule for Secrets");
    let mut cut = rules.clone();
    cut[secrets]["verbs"] = json!(["get", "list"]);
    let patch = |rules: &[Value]| {
        node.kubectl_ok(&[
            "patch",
            "clusterrole",
            OPERATOR,
            "--type=merge",
            "-p",
            &json!({"rules": rules}).to_string(),
        ]);
    };
    patch(&cut);
    // A leader starts its watches when it takes over: make one take over.
    let leader = tier.lease_holder();
    node.kubectl_ok(&["-n", NS, "delete", "pod", &leader, "--wait=false"]);
    let t = Instant::now();
    let mut holder = String::new();
    let mut body = Value::Null;
    // Not Ready at once (the initial sync cannot finish), and once the watch has failed
    // for longer than its grace, /readyz names it.
    let unready = wait_for(Duration::from_secs(90), || {
        holder = tier.lease_holder();
        if holder.is_empty() || holder == leader {
            return false;
        }
        body = agent
            .request(
                &format!("http://{}:9091/readyz", pod_ip(tier, &holder)),
                &[],
                None,
            )
            .json();
        body["failing"] == json!(["secrets"]) && ready(tier, &holder).as_deref() == Some("False")
    });
    let unready_secs = t.elapsed().as_secs_f64();
    patch(&rules);
    assert!(
        unready,
        "the new leader {holder:?} without watch on Secrets should not be Ready: {body}"
    );
    assert_eq!(body["leader"], true, "{body}");
    assert_eq!(body["failing"], json!(["secrets"]), "{body}");
    assert!(
        body["reason"]
            .as_str()
            .is_some_and(|r| r.contains("watch secrets failing")),
        "{body}"
    );

    // The verb back: the watch recovers and the leader is Ready again.
    let t = Instant::now();
    let back = wait_for(Duration::from_secs(120), || {
        ready(tier, &holder).as_deref() == Some("True")
    });
    assert!(back, "{holder} did not become Ready with its RBAC back");
    let back_secs = t.elapsed().as_secs_f64();
    tier.wait_rollout(OPERATOR);
    eprintln!(
        "E2E-FIGURE fault_no_watch_unready_s={unready_secs:.1} fault_no_watch_ready_again_s={back_secs:.1}"
    );
}
