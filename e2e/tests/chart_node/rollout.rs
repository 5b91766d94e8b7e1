//! Scenario `rollout`: `kubectl rollout restart` of the dispatchers while an agent Pod
//! sends a steady load of decisions through their Service: every request gets an answer
//! and every answer is the verdict given before (counted), the Deployment never has fewer
//! Ready Pods than replicas (maxUnavailable 0), and the PodDisruptionBudgets select the
//! Pods they guard. Then one dispatcher Pod is deleted and, during its shutdown delay,
//! answers /readyz 503 while it still decides: readiness goes false before it stops
//! serving.

use std::time::{Duration, Instant};

use agenthooks_e2e::node::agent::{Agent, Load};
use agenthooks_e2e::wait_for;
use serde_json::Value;

use crate::support::{CALLS, DISPATCH_URL, LS, NS, TENANT_NS, Tier, names};

const DISPATCHER: &str = "agenthooks-dispatcher";

/// The scenario (see the module docs).
pub fn run(tier: &mut Tier) {
    tier.ensure_installed();
    tier.wait_rollout(DISPATCHER);
    let node = &tier.node;
    let replicas =
        node.kubectl_json(&["-n", NS, "get", "deployment", DISPATCHER])["spec"]["replicas"]
            .as_i64()
            .unwrap_or_default();
    assert_eq!(replicas, 3);

    // The budgets select every Pod of their Deployment and allow one disruption.
    for (pdb, pods) in [("agenthooks-dispatcher", 3), ("agenthooks-operator", 2)] {
        let mut status = Value::Null;
        let settled = wait_for(Duration::from_secs(30), || {
            status = node.kubectl_json(&["-n", NS, "get", "pdb", pdb])["status"].clone();
            status["expectedPods"] == pods && status["currentHealthy"] == pods
        });
        assert!(settled, "PodDisruptionBudget {pdb}: {status}");
        assert_eq!(status["disruptionsAllowed"], 1, "{pdb}: {status}");
    }

    let old = names(&tier.component_pods("dispatcher"));
    let load = Load::start(node, TENANT_NS, "load-rollout", DISPATCH_URL, CALLS);
    load.wait_for_requests(20, Duration::from_secs(60));
    let before = load.count();

    let t = Instant::now();
    node.kubectl_ok(&[
        "-n",
        NS,
        "rollout",
        "restart",
        &format!("deployment/{DISPATCHER}"),
    ]);
    // Until every Pod is new and Ready, and no old one is left (terminating ones aside).
    let mut min_available = i64::MAX;
    let mut status = Value::Null;
    let done = wait_for(Duration::from_secs(180), || {
        let d = node.kubectl_json(&["-n", NS, "get", "deployment", DISPATCHER]);
        status = d["status"].clone();
        let available = status["availableReplicas"].as_i64().unwrap_or_default();
        min_available = min_available.min(available);
        d["metadata"]["generation"] == status["observedGeneration"]
            && status["updatedReplicas"] == replicas
            && status["replicas"] == replicas
            && available == replicas
    });
    assert!(done, "the rollout did not finish within 180 s: {status}");
    let rollout_secs = t.elapsed().as_secs_f64();
    let new = names(&tier.component_pods("dispatcher"));
    assert_eq!(new.len(), 3, "{new:?}");
    assert!(
        new.iter().all(|p| !old.contains(p)),
        "every Pod replaced: {old:?} -> {new:?}"
    );
    assert_eq!(
        min_available, replicas,
        "Ready Pods never fewer than replicas during the rollout"
    );
    let during = load.count() - before;
    // on until the old Pods are gone (their shutdown delay over, their ports closed)
    let gone = wait_for(Duration::from_secs(120), || {
        let left = names(&tier.pods("app.kubernetes.io/component=dispatcher"));
        left.iter().all(|p| !old.contains(p))
    });
    assert!(gone, "the old dispatcher Pods did not stop within 120 s");
    let stopped_secs = t.elapsed().as_secs_f64();
    load.wait_for_requests(load.count() + 20, Duration::from_secs(60));
    let report = load.stop();
    report.assert_all_answered_as("the rollout", |label| tier.expected(label));
    eprintln!(
        "E2E-FIGURE rollout_s={rollout_secs:.1} rollout_old_pods_gone_s={stopped_secs:.1} rollout_decisions={} rollout_decisions_during={during} rollout_failed=0 rollout_wrong=0 rollout_decisions_per_s={:.1}",
        report.answered(),
        report.answered() as f64 / report.seconds
    );

    // A deleted Pod: unready at once, still deciding until its shutdown delay is over.
    let victim = new[0].clone();
    let ip = node.kubectl_json(&["-n", NS, "get", "pod", &victim])["status"]["podIP"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    let agent = Agent::start(node, TENANT_NS, "agent");
    assert_eq!(
        agent
            .request(&format!("http://{ip}:8080/readyz"), &[], None)
            .status,
        200
    );
    node.kubectl_ok(&["-n", NS, "delete", "pod", &victim, "--wait=false"]);
    let t = Instant::now();
    let mut readyz = agent.request(&format!("http://{ip}:8080/readyz"), &[], None);
    while readyz.status == 200 && t.elapsed() < Duration::from_secs(3) {
        readyz = agent.request(&format!("http://{ip}:8080/readyz"), &[], None);
    }
    let unready_ms = t.elapsed().as_millis();
    let decided = agent.request(&format!("http://{ip}:8080/v1/dispatch"), &[], Some(LS));
    let decided_ms = t.elapsed().as_millis();
    assert_eq!(
        readyz.status, 503,
        "a terminating dispatcher answers /readyz 503: {readyz:?}"
    );
    assert_eq!(
        readyz.json()["draining"],
        true,
        "and says it drains: {readyz:?}"
    );
    assert_eq!(
        decided.status, 200,
        "it still decides {decided_ms} ms after the delete: {decided:?}"
    );
    assert_eq!(decided.json()["decision"], "allow", "{decided:?}");
    eprintln!(
        "E2E-FIGURE drain_unready_after_delete_ms={unready_ms} drain_still_deciding_at_ms={decided_ms}"
    );
    tier.wait_rollout(DISPATCHER);
}
