//! Scenario `edition-uninstall`: `helm upgrade` to the Standard edition, then `helm
//! uninstall`.
//!
//! - Standard: a new command hook is refused at admission (the chart's
//!   ValidatingAdmissionPolicy), the sample command hook already there is
//!   Accepted=False/EditionForbidsCommand and no longer runs (the `rm -rf` it blocked is
//!   allowed, no run of it in the answer), the dispatcher Pods have no command runner.
//! - Uninstall: no object carrying the release's instance label is left, namespaced or
//!   cluster-scoped, of any listable type; the CRDs stay (Helm's convention; the chart
//!   keeps no audit claim). In the release namespace only what the test made and what the
//!   operator wrote at run time (its Lease, Events) remain.

use std::time::{Duration, Instant};

use agenthooks_e2e::node::agent::Agent;
use agenthooks_e2e::wait_for;
use serde_json::{Value, json};

use crate::support::{DISPATCH_URL, LS, NS, RELEASE, RM, TENANT_NS, Tier, condition, names};

/// The reason of the sample hook's Accepted=False on Standard.
const EDITION_FORBIDS: &str = "EditionForbidsCommand";
/// What the admission policy says.
const REFUSED: &str = "the command handler runs only on the Lite edition";

/// The scenario (see the module docs).
pub fn run(tier: &mut Tier) {
    tier.ensure_installed();
    let node = &tier.node;

    let t = Instant::now();
    tier.upgrade(&["--set", "edition=standard"]);
    let upgrade_secs = t.elapsed().as_secs_f64();
    tier.wait_rollout("agenthooks-dispatcher");
    for d in tier.component_pods("dispatcher") {
        let spec = &d["spec"];
        assert!(
            spec.get("initContainers").is_none(),
            "no command runner on Standard: {}",
            d["metadata"]["name"]
        );
        assert!(
            spec["containers"][0]["args"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|a| a == "--edition=standard"),
            "{}",
            spec["containers"][0]["args"]
        );
    }

    // A new command hook: refused at admission (the policy may take a moment to bind).
    let hook = json!({
        "apiVersion": "agenthooks.io/v1alpha1", "kind": "AgentHook",
        "metadata": {"name": "new-command-hook", "namespace": TENANT_NS},
        "spec": {"event": "pre_tool_use", "matcher": "^exec$",
                 "handler": {"type": "command", "command": {"command": "exit 2"}}}
    })
    .to_string();
    let mut refusal = String::new();
    let refused = wait_for(Duration::from_secs(30), || {
        let out = node.kubectl_stdin(&["apply", "-f", "-"], hook.as_bytes());
        refusal = String::from_utf8_lossy(&out.stderr).into_owned();
        if out.status.success() {
            let _ = node.kubectl(&["-n", TENANT_NS, "delete", "agenthook", "new-command-hook"]);
            return false;
        }
        true
    });
    assert!(refused, "a command hook was admitted on Standard");
    assert!(
        refusal.contains(REFUSED) && refusal.contains("agenthooks-standard-edition"),
        "{refusal}"
    );

    // The sample command hook: not accepted, no longer run.
    let mut status = Value::Null;
    let forbidden = wait_for(Duration::from_secs(60), || {
        let h = node.kubectl_json(&["-n", TENANT_NS, "get", "agenthook", "block-rm-rf"]);
        status = h["status"].clone();
        condition(&h, "Accepted").as_deref() == Some("False")
            && status["conditions"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|c| c["type"] == "Accepted" && c["reason"] == EDITION_FORBIDS)
    });
    assert!(
        forbidden,
        "block-rm-rf should be Accepted=False/{EDITION_FORBIDS}: {status}"
    );
    let agent = Agent::start(node, TENANT_NS, "agent");
    let mut answer = Value::Null;
    let allowed = wait_for(Duration::from_secs(30), || {
        let a = agent.request(DISPATCH_URL, &[], Some(RM));
        answer = a.json();
        a.status == 200 && answer["decision"] == "allow"
    });
    assert!(
        allowed,
        "the rm -rf the command hook blocked is no longer blocked by it: {answer}"
    );
    assert!(answer.get("decidingHook").is_none(), "{answer}");
    assert!(
        !answer["hooks"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|r| r["hook"] == "tenant-acme/block-rm-rf"),
        "the command hook did not run: {answer}"
    );
    let ls = agent.request(DISPATCH_URL, &[], Some(LS));
    assert_eq!(
        (ls.status, ls.json()["decision"].clone()),
        (200, json!("allow"))
    );
    agent.delete();
    eprintln!("E2E-FIGURE edition_upgrade_s={upgrade_secs:.1}");

    // Uninstall: nothing of the release is left but the CRDs.
    let t = Instant::now();
    tier.helm_ok(&[
        "uninstall",
        RELEASE,
        "--namespace",
        NS,
        "--wait",
        "--timeout",
        "3m",
    ]);
    let uninstall_secs = t.elapsed().as_secs_f64();
    let types = node.kubectl_ok(&["api-resources", "--verbs=list", "-o", "name"]);
    let types: Vec<&str> = types
        .lines()
        .filter(|t| !t.is_empty() && *t != "events" && *t != "events.events.k8s.io")
        .collect();
    let selector = format!("app.kubernetes.io/instance={RELEASE}");
    let mut left = Vec::new();
    let gone = wait_for(Duration::from_secs(90), || {
        let all =
            node.kubectl_json(&["get", &types.join(","), "--all-namespaces", "-l", &selector]);
        left = all["items"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|o| {
                format!(
                    "{} {}/{}",
                    o["kind"].as_str().unwrap_or_default(),
                    o["metadata"]["namespace"].as_str().unwrap_or("-"),
                    o["metadata"]["name"].as_str().unwrap_or_default()
                )
            })
            .collect();
        left.is_empty()
    });
    assert!(
        gone,
        "objects of the release left after helm uninstall (of {} types): {left:?}",
        types.len()
    );
    let gone_secs = t.elapsed().as_secs_f64();
    for crd in [
        "agenthooks.agenthooks.io",
        "tenanthookbudgets.agenthooks.io",
    ] {
        node.kubectl_ok(&["get", "crd", crd]);
    }
    // The release namespace: what the test made, and the operator's run-time Lease.
    let ns_types: Vec<String> = node
        .kubectl_ok(&[
            "api-resources",
            "--verbs=list",
            "--namespaced=true",
            "-o",
            "name",
        ])
        .lines()
        .filter(|t| !t.is_empty() && !t.starts_with("events"))
        .map(str::to_owned)
        .collect();
    let mut in_ns: Vec<String> =
        node.kubectl_json(&["-n", NS, "get", &ns_types.join(",")])["items"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|o| {
                format!(
                    "{}/{}",
                    o["kind"].as_str().unwrap_or_default(),
                    o["metadata"]["name"].as_str().unwrap_or_default()
                )
            })
            .collect();
    in_ns.sort();
    assert_eq!(
        in_ns,
        [
            "ConfigMap/kube-root-ca.crt",
            "Lease/agenthooks-operator",
            "ServiceAccount/default",
        ],
        "the release namespace after uninstall"
    );
    assert!(
        names(&tier.pods("app.kubernetes.io/part-of=agenthooks")).is_empty(),
        "no Pod of the release"
    );
    eprintln!(
        "E2E-FIGURE uninstall_s={uninstall_secs:.1} uninstall_all_gone_s={gone_secs:.1} uninstall_types_checked={}",
        types.len()
    );
}
