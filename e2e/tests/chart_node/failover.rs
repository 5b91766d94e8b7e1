//! Scenario `leader-failover`: `kubectl delete pod` of the operator leader while an agent
//! Pod sends a steady stream of decisions through the dispatcher Service. Another replica
//! (the standby, or the leader's replacement when it starts first: the leader hands the
//! Lease over as it stops) takes the Lease within the lease duration, labels its own Pod, the leader Service
//! follows it, the Deployment is whole again, and every answer of the stream is the
//! verdict given before (the dispatchers keep serving their snapshot meanwhile).

use std::time::{Duration, Instant};

use agenthooks_e2e::node::agent::Load;

use crate::support::{CALLS, DISPATCH_URL, LEADER_LABEL, NS, TENANT_NS, Tier, names};

/// The chart's default `operator.leaseDurationSeconds`.
const LEASE_DURATION: Duration = Duration::from_secs(15);

/// The scenario (see the module docs).
pub fn run(tier: &mut Tier) {
    tier.ensure_installed();
    tier.wait_rollout("agenthooks-operator");
    let leader = tier.lease_holder();
    let operators = names(&tier.component_pods("operator"));
    assert!(
        operators.contains(&leader),
        "leader {leader:?} among {operators:?}"
    );
    let standby: Vec<String> = operators.into_iter().filter(|o| *o != leader).collect();
    assert_eq!(standby.len(), 1, "one standby: {standby:?}");

    let load = Load::start(&tier.node, TENANT_NS, "load-failover", DISPATCH_URL, CALLS);
    load.wait_for_requests(20, Duration::from_secs(60));
    let before = load.count();

    let t = Instant::now();
    tier.node
        .kubectl_ok(&["-n", NS, "delete", "pod", &leader, "--wait=false"]);
    let (mut lease_at, mut label_at, mut service_at) = (None, None, None);
    let mut holder = String::new();
    while t.elapsed() < Duration::from_secs(60) && service_at.is_none() {
        if lease_at.is_none() {
            holder = tier.lease_holder();
            if !holder.is_empty() && holder != leader {
                lease_at = Some(t.elapsed());
            }
        }
        if lease_at.is_some() && label_at.is_none() {
            let labelled = names(&tier.pods(&format!("{LEADER_LABEL}=true")));
            if labelled == [holder.clone()] {
                label_at = Some(t.elapsed());
            }
        }
        if label_at.is_some() {
            let ip = tier.node.kubectl_json(&["-n", NS, "get", "pod", &holder])["status"]["podIP"]
                .as_str()
                .unwrap_or_default()
                .to_owned();
            if tier.endpoint_ips("agenthooks-operator-leader") == [ip] {
                service_at = Some(t.elapsed());
            }
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let lease_at = lease_at.expect("no standby took the Lease within 60 s");
    // The standby, or the Pod that replaced the leader if it started first: either is a
    // replica of the Deployment that was not leading.
    let by = if [holder.clone()] == standby.as_slice() {
        "standby"
    } else {
        "replacement"
    };
    assert!(
        holder.starts_with("agenthooks-operator-"),
        "an operator Pod took the Lease: {holder}"
    );
    assert!(
        lease_at <= LEASE_DURATION,
        "the standby took the Lease after {lease_at:?}, more than the lease duration {LEASE_DURATION:?}"
    );
    let label_at = label_at.expect("the new leader did not label its Pod within 60 s");
    let service_at =
        service_at.expect("the leader Service did not route to the new leader (only) within 60 s");

    // The Deployment whole again (the deleted Pod replaced), while the load goes on.
    tier.wait_rollout("agenthooks-operator");
    let during = load.count() - before;
    load.wait_for_requests(load.count() + 20, Duration::from_secs(60));
    let report = load.stop();
    report.assert_all_answered_as("the failover", |label| tier.expected(label));
    eprintln!("[tier] the Lease went from {leader} to the {by} {holder}");
    eprintln!(
        "E2E-FIGURE failover_lease_ms={} failover_label_ms={} failover_service_ms={} failover_decisions={} failover_decisions_during={during} failover_failed=0 failover_wrong=0 failover_decisions_per_s={:.1}",
        lease_at.as_millis(),
        label_at.as_millis(),
        service_at.as_millis(),
        report.answered(),
        report.answered() as f64 / report.seconds
    );
}
