//! The tier's driver ([`run`]) and what its scenarios share: the node, the release, the
//! sample hook, the agents' events, diagnostics.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::time::{Duration, Instant};

use agenthooks_e2e::node::Node;
use agenthooks_e2e::node::agent::{Agent, verdict};
use agenthooks_e2e::{repo_root, wait_for};
use serde_json::{Value, json};

/// The release's namespace (also the master namespace).
pub const NS: &str = "agenthooks-system";
/// The Helm release.
pub const RELEASE: &str = "agenthooks";
/// The sample hook's tenant namespace, where the agents run.
pub const TENANT_NS: &str = "tenant-acme";
/// The label the operator leader puts on its own Pod.
pub const LEADER_LABEL: &str = "agenthooks.io/leader";
/// The dispatchers' decision endpoint, by the Service's DNS name.
pub const DISPATCH_URL: &str =
    "http://agenthooks-dispatcher.agenthooks-system.svc.cluster.local:8080/v1/dispatch";
/// An exec the sample hook allows.
pub const LS: &str = r#"{"event":"pre_tool_use","tenant_id":"acme","agent_id":"coder","session_id":"s1","tool_name":"exec","tool_input":{"cmd":"ls -la"}}"#;
/// An exec the sample hook (`tenant-acme/block-rm-rf`, a command hook) blocks.
pub const RM: &str = r#"{"event":"pre_tool_use","tenant_id":"acme","agent_id":"coder","session_id":"s1","tool_name":"exec","tool_input":{"cmd":"rm -rf /var/lib/data"}}"#;
/// The calls of the load generators: (label, event).
pub const CALLS: &[(&str, &str)] = &[("ls", LS), ("rm", RM)];

/// A scenario of the tier: a name (for `AGENTHOOKS_NODE_SCENARIOS` and the figures) and
/// the function that runs it.
pub type Scenario = (&'static str, fn(&mut Tier));

/// The node and the release under test, shared by the scenarios in turn.
pub struct Tier {
    /// The node (or the cluster of `AGENTHOOKS_E2E_KUBECONFIG`).
    pub node: Node,
    /// The verdict of each call of [`CALLS`] with the sample hook served, once seen.
    pub baseline: Vec<(String, Value)>,
}

/// Runs `scenarios` in order on one node, each timed (`E2E-FIGURE scenario_<name>_s`), then
/// tears the node down. A scenario that panics stops the run: the diagnostics are printed
/// while the node still runs, the node is torn down, and the run fails with the scenario's
/// name; a host that `down.sh` finds changed fails the run too, whatever the scenarios did.
/// `AGENTHOOKS_NODE_SCENARIOS=a,b` runs only those (each installs what it needs).
pub fn run(scenarios: &[Scenario]) {
    let only: Option<Vec<String>> = std::env::var("AGENTHOOKS_NODE_SCENARIOS")
        .ok()
        .filter(|v| !v.trim().is_empty())
        .map(|v| v.split(',').map(|s| s.trim().to_owned()).collect());
    if let Some(only) = &only {
        for name in only {
            assert!(
                scenarios.iter().any(|(n, _)| n == name),
                "AGENTHOOKS_NODE_SCENARIOS: no scenario {name:?}"
            );
        }
    }
    let t0 = Instant::now();
    let mut tier = Tier {
        node: Node::up(),
        baseline: Vec::new(),
    };
    eprintln!(
        "E2E-FIGURE node_images_s={:.1} node_up_s={:.1}",
        tier.node.images_secs, tier.node.up_secs
    );
    let mut failed = None;
    for (name, scenario) in scenarios {
        if only.as_ref().is_some_and(|o| !o.iter().any(|n| n == name)) {
            continue;
        }
        eprintln!("[tier] scenario {name}");
        let t = Instant::now();
        let result = catch_unwind(AssertUnwindSafe(|| scenario(&mut tier)));
        let secs = t.elapsed().as_secs_f64();
        match result {
            Ok(()) => eprintln!("E2E-FIGURE scenario_{}_s={secs:.1}", name.replace('-', "_")),
            Err(panic) => {
                let msg = panic
                    .downcast_ref::<String>()
                    .cloned()
                    .or_else(|| panic.downcast_ref::<&str>().map(|s| (*s).to_owned()))
                    .unwrap_or_default();
                eprintln!(
                    "[tier] scenario {name} failed after {secs:.1}s; the cluster then:\n{}",
                    tier.diagnostics()
                );
                failed = Some(format!("scenario {name} failed: {msg}"));
                break;
            }
        }
    }
    let down = tier.node.down();
    if let Ok(secs) = &down {
        eprintln!("E2E-FIGURE node_down_s={secs:.1}");
    }
    eprintln!("E2E-FIGURE tier_total_s={:.1}", t0.elapsed().as_secs_f64());
    match (failed, down) {
        (None, Ok(_)) => {}
        (Some(f), Ok(_)) => panic!("{f}"),
        (None, Err(e)) => panic!("the host was not restored: {e}"),
        (Some(f), Err(e)) => panic!("{f}\nand the host was not restored: {e}"),
    }
}

/// `status` of condition `type_` of an object, if set.
pub fn condition(v: &Value, type_: &str) -> Option<String> {
    agenthooks_e2e::condition(v, type_).and_then(|c| c["status"].as_str().map(str::to_owned))
}

/// Why `pod` is not Ready (None: it is), for assertion messages.
pub fn not_ready(pod: &Value) -> Option<String> {
    if condition(pod, "Ready").as_deref() == Some("True") {
        return None;
    }
    Some(format!(
        "{} {}: {}",
        pod["metadata"]["name"], pod["status"]["phase"], pod["status"]["containerStatuses"]
    ))
}

/// `metadata.name` of each object.
pub fn names(items: &[Value]) -> Vec<String> {
    items
        .iter()
        .filter_map(|p| p["metadata"]["name"].as_str().map(str::to_owned))
        .collect()
}

impl Tier {
    /// The chart's directory.
    pub fn chart(&self) -> String {
        repo_root().join("charts/agenthooks").display().to_string()
    }

    /// `helm ARGS...`, panicking with its output unless it exits 0 (the driver prints
    /// the diagnostics).
    pub fn helm_ok(&self, args: &[&str]) -> String {
        let out = self.node.helm(args);
        assert!(
            out.status.success(),
            "helm {} failed: {}{}",
            args.join(" "),
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr),
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// Whether the release is installed.
    pub fn installed(&self) -> bool {
        self.node
            .helm(&["status", RELEASE, "--namespace", NS])
            .status
            .success()
    }

    /// The values every install of the tier starts from: 2 operators, 3 dispatchers,
    /// tenants' command hooks allowed (the sample hook is one); callers authenticated by
    /// Kubernetes (the chart's default).
    pub fn base_values() -> Vec<&'static str> {
        vec![
            "--set",
            "operator.replicaCount=2",
            "--set",
            "dispatcher.replicaCount=3",
            "--set",
            "operator.allowTenantCommandHooks=true",
        ]
    }

    /// `helm install --wait` of the chart with [`Tier::base_values`] and `extra`; the
    /// namespace is made first, and the agents of [`TENANT_NS`] (its `default`
    /// ServiceAccount) may read that namespace's audit history: a RoleBinding of the
    /// chart's `agenthooks-history-reader` (CONTRACT §9.5). Returns the seconds it took.
    pub fn install(&self, extra: &[&str]) -> f64 {
        let _ = self.node.kubectl(&["create", "namespace", NS]);
        let _ = self.node.kubectl(&["create", "namespace", TENANT_NS]);
        self.node.apply(
            &json!({
                "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
                "metadata": {"name": "agents-read-history", "namespace": TENANT_NS},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "agenthooks-history-reader"},
                "subjects": [{"kind": "ServiceAccount", "name": "default", "namespace": TENANT_NS}]
            })
            .to_string(),
        );
        self.helm_release("install", extra)
    }

    /// `helm upgrade --wait` of the release to [`Tier::base_values`] and `extra` (not
    /// reusing the values of the last release). Returns the seconds it took.
    ///
    /// Returns only once the replaced Pods are gone: `helm upgrade --wait` returns when the
    /// new Pods are Ready, while the old ones still decide through their shutdown delay
    /// (with the old values: an event sent then can land in the old audit backend).
    pub fn upgrade(&self, extra: &[&str]) -> f64 {
        let t = Instant::now();
        self.helm_release("upgrade", extra);
        let settled = wait_for(Duration::from_secs(120), || {
            self.pods(&format!("app.kubernetes.io/instance={RELEASE}"))
                .iter()
                .all(|p| p["metadata"]["deletionTimestamp"].is_null())
        });
        assert!(
            settled,
            "replaced Pods still terminating 120 s after helm upgrade"
        );
        t.elapsed().as_secs_f64()
    }

    /// `helm <verb> --wait` of the release with [`Tier::base_values`] and `extra`; seconds.
    fn helm_release(&self, verb: &str, extra: &[&str]) -> f64 {
        let chart = self.chart();
        let mut args = vec![
            verb,
            RELEASE,
            chart.as_str(),
            "--namespace",
            NS,
            "--wait",
            "--timeout",
            "5m",
        ];
        args.extend(Self::base_values());
        args.extend_from_slice(extra);
        let t = Instant::now();
        self.helm_ok(&args);
        t.elapsed().as_secs_f64()
    }

    /// The release with the base values and the sample hook Ready, installing (or
    /// upgrading back to the base values) what is missing: what a scenario run on its own
    /// starts from.
    pub fn ensure_installed(&mut self) {
        if !self.installed() {
            self.install(&[]);
        }
        self.apply_sample_hook();
        if self.baseline.is_empty() {
            let agent = Agent::start(&self.node, TENANT_NS, "agent");
            self.baseline = CALLS
                .iter()
                .map(|(label, event)| {
                    let a = agent.request(DISPATCH_URL, &[], Some(event));
                    assert_eq!(a.status, 200, "{label}: {a:?}");
                    ((*label).to_owned(), verdict(&a.json()))
                })
                .collect();
        }
    }

    /// The verdict the sample hook gives call `label` of [`CALLS`] (from [`Tier::baseline`]).
    pub fn expected(&self, label: &str) -> Value {
        self.baseline
            .iter()
            .find(|(l, _)| l == label)
            .map(|(_, v)| v.clone())
            .unwrap_or_else(|| panic!("no baseline verdict for {label}"))
    }

    /// Applies the sample namespaces and the sample hook `tenant-acme/block-rm-rf` and waits
    /// until it is Accepted and Ready. Returns the milliseconds from apply to Ready.
    pub fn apply_sample_hook(&self) -> u128 {
        let samples = repo_root().join("config/samples");
        self.node.kubectl_ok(&[
            "apply",
            "-f",
            samples.join("namespaces.yaml").to_str().unwrap(),
            "-f",
            samples.join("block-dangerous-exec.yaml").to_str().unwrap(),
        ]);
        let t = Instant::now();
        let mut hook = Value::Null;
        let served = wait_for(Duration::from_secs(60), || {
            hook = self
                .node
                .kubectl_json(&["-n", TENANT_NS, "get", "agenthook", "block-rm-rf"]);
            condition(&hook, "Accepted").as_deref() == Some("True")
                && condition(&hook, "Ready").as_deref() == Some("True")
        });
        assert!(
            served,
            "block-rm-rf should be Accepted and Ready: {}",
            hook["status"]
        );
        t.elapsed().as_millis()
    }

    /// Pods of the release's namespace matching `selector`.
    pub fn pods(&self, selector: &str) -> Vec<Value> {
        self.node
            .kubectl_json(&["-n", NS, "get", "pods", "-l", selector])["items"]
            .as_array()
            .cloned()
            .unwrap_or_default()
    }

    /// Pods of one component (`operator`, `dispatcher`) that are not being deleted.
    pub fn component_pods(&self, component: &str) -> Vec<Value> {
        self.pods(&format!("app.kubernetes.io/component={component}"))
            .into_iter()
            .filter(|p| p["metadata"]["deletionTimestamp"].is_null())
            .collect()
    }

    /// The holder of the operator's Lease ("" when none).
    pub fn lease_holder(&self) -> String {
        let lease = self.node.kubectl(&[
            "-n",
            NS,
            "get",
            "lease",
            "agenthooks-operator",
            "-o",
            "json",
        ]);
        serde_json::from_slice::<Value>(&lease.stdout).unwrap_or_default()["spec"]["holderIdentity"]
            .as_str()
            .unwrap_or_default()
            .to_owned()
    }

    /// The Pod IPs the EndpointSlices of Service `service` route to (ready endpoints).
    pub fn endpoint_ips(&self, service: &str) -> Vec<String> {
        let slices = self.node.kubectl_json(&[
            "-n",
            NS,
            "get",
            "endpointslices",
            "-l",
            &format!("kubernetes.io/service-name={service}"),
        ]);
        let mut ips: Vec<String> = slices["items"]
            .as_array()
            .into_iter()
            .flatten()
            .flat_map(|s| s["endpoints"].as_array().cloned().unwrap_or_default())
            .filter(|e| e["conditions"]["ready"] != false)
            .flat_map(|e| e["addresses"].as_array().cloned().unwrap_or_default())
            .filter_map(|a| a.as_str().map(str::to_owned))
            .collect();
        ips.sort();
        ips
    }

    /// Waits until every Pod of the Deployment `name` is Ready, of its latest revision,
    /// and no old one is left (`kubectl rollout status`).
    pub fn wait_rollout(&self, name: &str) {
        let out = self.node.kubectl(&[
            "-n",
            NS,
            "rollout",
            "status",
            &format!("deployment/{name}"),
            "--timeout=180s",
        ]);
        assert!(
            out.status.success(),
            "rollout of {name}: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// Everything a failure message needs: Pods, events, the dispatcher and operator logs,
    /// the kubelet's log.
    pub fn diagnostics(&self) -> String {
        let text = |o: std::process::Output| {
            format!(
                "{}{}",
                String::from_utf8_lossy(&o.stdout),
                String::from_utf8_lossy(&o.stderr)
            )
        };
        let pods = text(self.node.kubectl(&["get", "pods", "-A", "-o", "wide"]));
        let events = text(
            self.node
                .kubectl(&["get", "events", "-A", "--sort-by=.lastTimestamp"]),
        );
        let events: Vec<&str> = events.lines().collect();
        let events = events[events.len().saturating_sub(40)..].join("\n");
        let mut logs = String::new();
        for c in ["operator", "dispatcher"] {
            logs.push_str(&text(self.node.kubectl(&[
                "-n",
                NS,
                "logs",
                "-l",
                &format!("app.kubernetes.io/component={c}"),
                "--all-containers",
                "--tail=20",
                "--prefix",
            ])));
        }
        format!(
            "pods:\n{pods}\nevents (last 40):\n{events}\nlogs:\n{logs}\nkubelet:\n{}",
            self.node.log_tail("kubelet", 30)
        )
    }
}
