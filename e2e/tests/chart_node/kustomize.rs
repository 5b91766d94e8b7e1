//! Scenario `kustomize`: `kubectl apply --server-side -k config/default` (after the Helm
//! release is gone) and the seal key Secret its README asks for give the same working
//! install: every Pod Ready (2 operators, 2 dispatchers with their runners), the leader
//! labelled and routed to, the sample global command hook Accepted and deciding for an
//! agent Pod, and a tenant's command hook refused as config/ says
//! (CommandHookNotAllowed: its operator has no --allow-tenant-command-hooks). Then
//! `kubectl delete -k config/default` removes it all: namespace, CRDs, RBAC.

use std::time::{Duration, Instant};

use agenthooks_e2e::node::agent::Agent;
use agenthooks_e2e::{repo_root, wait_for};
use serde_json::{Value, json};

use crate::support::{
    DISPATCH_URL, LEADER_LABEL, NS, RELEASE, RM, TENANT_NS, Tier, condition, names, not_ready,
};

/// A sub-agent two deep: the sample global hook `subagent-depth-guard` blocks it.
const DEEP: &str = r#"{"event":"subagent_start","tenant_id":"acme","agent_id":"coder","session_id":"s1","depth":2}"#;
/// One deep: allowed.
const SHALLOW: &str = r#"{"event":"subagent_start","tenant_id":"acme","agent_id":"coder","session_id":"s1","depth":1}"#;

fn hook(tier: &Tier, ns: &str, name: &str) -> Value {
    tier.node
        .kubectl_json(&["-n", ns, "get", "agenthook", name])
}

fn reason(hook: &Value, type_: &str) -> String {
    hook["status"]["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|c| c["type"] == type_)
        .and_then(|c| c["reason"].as_str())
        .unwrap_or_default()
        .to_owned()
}

/// The scenario (see the module docs).
pub fn run(tier: &mut Tier) {
    let node = &tier.node;
    if tier.installed() {
        tier.helm_ok(&["uninstall", RELEASE, "--namespace", NS, "--wait"]);
    }
    let t = Instant::now();
    let config = repo_root().join("config/default");
    node.kubectl_ok(&["apply", "--server-side", "-k", config.to_str().unwrap()]);
    node.apply(
        &json!({
            "apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": "agenthooks-seal-key", "namespace": NS},
            "stringData": {"seal.key": "7f".repeat(32)}
        })
        .to_string(),
    );
    // The sync port's certificate the README asks for (config/operator/kustomization.yaml):
    // a CA and a certificate for the leader Service's names.
    let pki = agenthooks_e2e::stack::test_pki();
    let leader = "agenthooks-operator-leader";
    let sync_names = [
        leader.to_string(),
        format!("{leader}.{NS}"),
        format!("{leader}.{NS}.svc"),
        format!("{leader}.{NS}.svc.cluster.local"),
    ];
    let (crt, key) = pki.serving_cert(
        "kustomize-sync",
        &sync_names.iter().map(String::as_str).collect::<Vec<_>>(),
    );
    let read = |p: &std::path::Path| std::fs::read_to_string(p).unwrap();
    node.apply(
        &json!({
            "apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/tls",
            "metadata": {"name": "agenthooks-sync-tls", "namespace": NS},
            "stringData": {"tls.crt": read(&crt), "tls.key": read(&key), "ca.crt": read(&pki.ca)}
        })
        .to_string(),
    );
    tier.wait_rollout("agenthooks-operator");
    tier.wait_rollout("agenthooks-dispatcher");
    let ready_secs = t.elapsed().as_secs_f64();
    let operators = tier.component_pods("operator");
    let dispatchers = tier.component_pods("dispatcher");
    assert_eq!(operators.len(), 2, "{:?}", names(&operators));
    assert_eq!(dispatchers.len(), 2, "{:?}", names(&dispatchers));
    for p in operators.iter().chain(&dispatchers) {
        assert_eq!(not_ready(p), None);
    }
    let mut leader = String::new();
    let routed = wait_for(Duration::from_secs(60), || {
        leader = tier.lease_holder();
        let labelled = names(&tier.pods(&format!("{LEADER_LABEL}=true")));
        let ip = node.kubectl_json(&["-n", NS, "get", "pod", &leader])["status"]["podIP"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        labelled == [leader.clone()] && tier.endpoint_ips("agenthooks-operator-leader") == [ip]
    });
    assert!(routed, "the leader {leader:?} labelled and routed to");

    // The samples: the global command hook is accepted and decides; a tenant's command
    // hook is not allowed by this install.
    let samples = repo_root().join("config/samples");
    node.kubectl_ok(&[
        "apply",
        "-f",
        samples.join("namespaces.yaml").to_str().unwrap(),
        "-f",
        samples.join("global-depth-guard.yaml").to_str().unwrap(),
        "-f",
        samples.join("block-dangerous-exec.yaml").to_str().unwrap(),
    ]);
    let mut guard = Value::Null;
    let accepted = wait_for(Duration::from_secs(60), || {
        guard = hook(tier, NS, "subagent-depth-guard");
        condition(&guard, "Accepted").as_deref() == Some("True")
            && condition(&guard, "Ready").as_deref() == Some("True")
    });
    assert!(
        accepted,
        "subagent-depth-guard Accepted and Ready: {}",
        guard["status"]
    );
    let mut tenant_hook = Value::Null;
    let refused = wait_for(Duration::from_secs(60), || {
        tenant_hook = hook(tier, TENANT_NS, "block-rm-rf");
        reason(&tenant_hook, "Accepted") == "CommandHookNotAllowed"
    });
    assert!(
        refused,
        "block-rm-rf Accepted=False/CommandHookNotAllowed: {}",
        tenant_hook["status"]
    );

    let agent = Agent::start(node, TENANT_NS, "agent");
    let deep = agent.request(DISPATCH_URL, &[], Some(DEEP));
    assert_eq!(deep.status, 200, "{deep:?}");
    let deep = deep.json();
    assert_eq!(
        (&deep["decision"], &deep["decidingHook"]),
        (
            &json!("block"),
            &json!("agenthooks-system/subagent-depth-guard")
        ),
        "{deep}"
    );
    assert_eq!(
        deep["reason"], "sub-agents may nest at most 2 deep here",
        "{deep}"
    );
    for event in [SHALLOW, RM] {
        let a = agent.request(DISPATCH_URL, &[], Some(event));
        assert_eq!(
            (a.status, a.json()["decision"].clone()),
            (200, json!("allow")),
            "{event}: {a:?}"
        );
    }
    agent.delete();

    // Removed as applied.
    let t = Instant::now();
    node.kubectl_ok(&[
        "delete",
        "-k",
        config.to_str().unwrap(),
        "--wait=true",
        "--timeout=180s",
    ]);
    let delete_secs = t.elapsed().as_secs_f64();
    for (kind, name) in [
        ("namespace", NS),
        ("crd", "agenthooks.agenthooks.io"),
        ("crd", "tenanthookbudgets.agenthooks.io"),
        ("clusterrole", "agenthooks-operator"),
        ("clusterrolebinding", "agenthooks-operator"),
    ] {
        let out = node.kubectl(&["get", kind, name]);
        assert!(!out.status.success(), "{kind} {name} still there");
    }
    eprintln!("E2E-FIGURE kustomize_ready_s={ready_secs:.1} kustomize_delete_s={delete_secs:.1}");
}
