//! Scenario `install`: `helm install --wait` (2 operators, 3 dispatchers) → every Pod
//! Ready, the Lease holder labels its own Pod and the leader Service routes to it only, the
//! sample hook applied with kubectl is Accepted and Ready, and an agent Pod calling the
//! dispatcher Service by its DNS name gets allow for `ls` and the hook's block for `rm -rf`.

use std::time::Duration;

use agenthooks_e2e::node::agent::{Agent, verdict};
use agenthooks_e2e::wait_for;

use crate::support::{
    CALLS, DISPATCH_URL, LEADER_LABEL, LS, NS, RM, TENANT_NS, Tier, names, not_ready,
};

/// The scenario (see the module docs).
pub fn run(tier: &mut Tier) {
    assert!(
        !tier.installed(),
        "the install scenario starts with no release"
    );
    let install_secs = tier.install(&[]);

    // Every Pod Ready: 2 operators, 3 dispatchers (each with its command runner).
    let operators = tier.component_pods("operator");
    let dispatchers = tier.component_pods("dispatcher");
    assert_eq!(operators.len(), 2, "{:?}", names(&operators));
    assert_eq!(dispatchers.len(), 3, "{:?}", names(&dispatchers));
    for p in operators.iter().chain(&dispatchers) {
        assert_eq!(not_ready(p), None);
    }
    for d in &dispatchers {
        let statuses: Vec<_> = d["status"]["containerStatuses"]
            .as_array()
            .into_iter()
            .chain(d["status"]["initContainerStatuses"].as_array())
            .flatten()
            .collect();
        let mut running: Vec<&str> = statuses
            .iter()
            .filter(|c| c["state"]["running"].is_object())
            .filter_map(|c| c["name"].as_str())
            .collect();
        running.sort_unstable();
        assert_eq!(
            running,
            ["command-runner", "dispatcher"],
            "dispatcher and command runner run"
        );
    }

    // The Lease holder labels its own Pod, and only that one; the leader Service routes to it.
    let mut leader = String::new();
    let labelled = wait_for(Duration::from_secs(60), || {
        leader = tier.lease_holder();
        !leader.is_empty() && names(&tier.pods(&format!("{LEADER_LABEL}=true"))) == [leader.clone()]
    });
    assert!(
        labelled,
        "the Lease holder {leader:?} should be the only Pod labelled {LEADER_LABEL}=true"
    );
    let leader_ip = tier.node.kubectl_json(&["-n", NS, "get", "pod", &leader])["status"]["podIP"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    let routed = wait_for(Duration::from_secs(30), || {
        tier.endpoint_ips("agenthooks-operator-leader") == [leader_ip.clone()]
    });
    assert!(
        routed,
        "agenthooks-operator-leader should route to the leader {leader} ({leader_ip}) only"
    );

    // The sample hook, applied with kubectl, accepted and served by every dispatcher.
    let apply_to_ready_ms = tier.apply_sample_hook();

    // The agent Pod: restricted, in the tenant's namespace, talks to the Service by name.
    let agent = Agent::start(&tier.node, TENANT_NS, "agent");
    let (rc, out) = agent.sh("nslookup agenthooks-dispatcher.agenthooks-system.svc.cluster.local");
    assert_eq!(rc, 0, "the Service name resolves in the Pod: {out}");
    let allowed = agent.request(DISPATCH_URL, &[], Some(LS));
    assert_eq!(allowed.status, 200, "{allowed:?}");
    let allowed = allowed.json();
    assert_eq!(allowed["decision"], "allow", "{allowed}");
    let blocked = agent.request(DISPATCH_URL, &[], Some(RM));
    assert_eq!(blocked.status, 200, "{blocked:?}");
    let blocked = blocked.json();
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
    tier.baseline = vec![
        (CALLS[0].0.to_owned(), verdict(&allowed)),
        (CALLS[1].0.to_owned(), verdict(&blocked)),
    ];

    eprintln!(
        "E2E-FIGURE helm_install_ready_s={install_secs:.1} hook_apply_to_ready_ms={apply_to_ready_ms}"
    );
}
