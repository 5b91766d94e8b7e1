//! Scenario `manifests`: every manifest the chart renders, under value sets that between
//! them render every template and branch, passes `kubectl apply --dry-run=server` on the
//! node; and RBAC as the API server sees it (`kubectl auth can-i --as=
//! system:serviceaccount:...`): what each component may do and, as much, what it may not.

use std::time::Instant;

use agenthooks_e2e::node::Node;
use serde_json::Value;

use crate::support::{NS, RELEASE, TENANT_NS, Tier};

/// Value sets, each rendered and dry-run in a namespace of its own (a release of another
/// name, so nothing of the live release is touched).
const VALUE_SETS: &[(&str, &[&str])] = &[
    ("defaults", &[]),
    (
        // everything a Lite install can switch on
        "lite-full",
        &[
            "--set",
            "operator.allowTenantCommandHooks=true",
            "--set",
            "dispatcher.adminTokenSecret.name=agenthooks-admin",
            "--set",
            "dispatcher.callers.mode=anonymous",
            "--set",
            "dispatcher.audit.backend=postgres",
            "--set",
            "dispatcher.audit.databaseUrlSecret.name=agenthooks-audit-db",
            "--set",
            "dispatcher.audit.keySecret=agenthooks-audit-keys",
            "--set",
            "dispatcher.audit.keys={key-2026-02,key-2025-11}",
            "--set",
            "dispatcher.httpAllowCidrs={10.20.0.0/16}",
            "--set",
            "dispatcher.prompt.apiKeySecret=agenthooks-provider-keys",
            "--set",
            "dispatcher.prompt.providers[0].name=anthropic",
            "--set",
            "dispatcher.prompt.providers[0].kind=anthropic",
            "--set",
            "dispatcher.prompt.providers[0].baseUrl=https://api.anthropic.com",
            "--set",
            "dispatcher.prompt.providers[0].apiKeySecretKey=anthropic-api-key",
            "--set",
            "dispatcher.prompt.models.haiku.provider=anthropic",
            "--set",
            "dispatcher.prompt.models.haiku.model=claude-3-5-haiku-latest",
            "--set",
            "dispatcher.prompt.defaultModel=haiku",
            "--set",
            "imagePullSecrets[0].name=regcred",
            "--set",
            "operator.podAnnotations.example\\.com/team=platform",
            "--set",
            "dispatcher.nodeSelector.kubernetes\\.io/os=linux",
            // NetworkPolicies (stored, not enforced: the node's bridge CNI ignores them);
            // the providers and the database need egress rules
            "--set",
            "networkPolicy.enabled=true",
            "--set",
            "networkPolicy.dispatch.namespaces={agents-a,agents-b}",
            "--set",
            "networkPolicy.dispatcherEgress[0].ports[0].port=443",
            "--set",
            "networkPolicy.dispatcherEgress[1].ports[0].port=5432",
        ],
    ),
    (
        // Standard: the admission policy, no runner; SQLite on a claim; an existing key
        "standard",
        &[
            "--set",
            "edition=standard",
            "--set",
            "dispatcher.replicaCount=1",
            "--set",
            "sealKey.existingSecret=my-seal-key",
            "--set",
            "dispatcher.audit.storage.volume.persistentVolumeClaim.claimName=agenthooks-audit",
        ],
    ),
];

/// (identity, verb, resource, namespace or "" for all namespaces, allowed).
type Check = (&'static str, &'static str, &'static str, &'static str, bool);

const OPERATOR: &str = "operator";
const DISPATCHER: &str = "dispatcher";

/// What each component may and may not do. The operator: read hooks and budgets
/// cluster-wide and write only their status, read Namespaces and Secrets (header
/// valueFrom), write Events; its Lease and its own namespace's Pods (the leader label) only
/// in the release namespace. Never a hook's spec, a Secret's content, other namespaces'
/// Leases or Pods, workloads or RBAC. The dispatcher: review tokens and access
/// (system:auth-delegator, for `--kubernetes-callers`), nothing else.
const CHECKS: &[Check] = &[
    (OPERATOR, "list", "agenthooks.agenthooks.io", "", true),
    (OPERATOR, "watch", "agenthooks.agenthooks.io", "", true),
    (OPERATOR, "get", "agenthooks.agenthooks.io", TENANT_NS, true),
    (
        OPERATOR,
        "patch",
        "agenthooks.agenthooks.io/status",
        TENANT_NS,
        true,
    ),
    (
        OPERATOR,
        "update",
        "agenthooks.agenthooks.io/status",
        TENANT_NS,
        true,
    ),
    (
        OPERATOR,
        "watch",
        "tenanthookbudgets.agenthooks.io",
        "",
        true,
    ),
    (
        OPERATOR,
        "patch",
        "tenanthookbudgets.agenthooks.io/status",
        TENANT_NS,
        true,
    ),
    // Approvals (issue 16): found, created and, once expired, deleted by the operator;
    // never patched by it (a decision is a person's), never touched by the dispatcher.
    (
        OPERATOR,
        "create",
        "hookapprovals.agenthooks.io",
        TENANT_NS,
        true,
    ),
    (
        OPERATOR,
        "delete",
        "hookapprovals.agenthooks.io",
        TENANT_NS,
        true,
    ),
    (
        OPERATOR,
        "patch",
        "hookapprovals.agenthooks.io",
        TENANT_NS,
        false,
    ),
    (
        DISPATCHER,
        "create",
        "hookapprovals.agenthooks.io",
        TENANT_NS,
        false,
    ),
    (OPERATOR, "watch", "namespaces", "", true),
    (OPERATOR, "watch", "secrets", "", true),
    (OPERATOR, "create", "events", TENANT_NS, true),
    (OPERATOR, "create", "events.events.k8s.io", TENANT_NS, true),
    (OPERATOR, "get", "leases.coordination.k8s.io", NS, true),
    (OPERATOR, "create", "leases.coordination.k8s.io", NS, true),
    (OPERATOR, "update", "leases.coordination.k8s.io", NS, true),
    (OPERATOR, "list", "pods", NS, true),
    (OPERATOR, "patch", "pods", NS, true),
    // ...and not
    (
        OPERATOR,
        "create",
        "agenthooks.agenthooks.io",
        TENANT_NS,
        false,
    ),
    (
        OPERATOR,
        "update",
        "agenthooks.agenthooks.io",
        TENANT_NS,
        false,
    ),
    (
        OPERATOR,
        "patch",
        "agenthooks.agenthooks.io",
        TENANT_NS,
        false,
    ),
    (
        OPERATOR,
        "delete",
        "agenthooks.agenthooks.io",
        TENANT_NS,
        false,
    ),
    (
        OPERATOR,
        "update",
        "tenanthookbudgets.agenthooks.io",
        TENANT_NS,
        false,
    ),
    (
        OPERATOR,
        "delete",
        "tenanthookbudgets.agenthooks.io",
        TENANT_NS,
        false,
    ),
    (OPERATOR, "create", "secrets", TENANT_NS, false),
    (OPERATOR, "update", "secrets", TENANT_NS, false),
    (OPERATOR, "delete", "secrets", NS, false),
    (OPERATOR, "patch", "namespaces", "", false),
    (OPERATOR, "delete", "namespaces", "", false),
    (
        OPERATOR,
        "update",
        "leases.coordination.k8s.io",
        "kube-system",
        false,
    ),
    (
        OPERATOR,
        "get",
        "leases.coordination.k8s.io",
        TENANT_NS,
        false,
    ),
    (OPERATOR, "delete", "leases.coordination.k8s.io", NS, false),
    (OPERATOR, "list", "pods", TENANT_NS, false),
    (OPERATOR, "patch", "pods", TENANT_NS, false),
    (OPERATOR, "create", "pods", NS, false),
    (OPERATOR, "delete", "pods", NS, false),
    (OPERATOR, "create", "pods/exec", NS, false),
    (OPERATOR, "update", "deployments.apps", NS, false),
    (OPERATOR, "get", "configmaps", NS, false),
    (OPERATOR, "create", "serviceaccounts/token", NS, false),
    (
        OPERATOR,
        "create",
        "clusterrolebindings.rbac.authorization.k8s.io",
        "",
        false,
    ),
    (
        OPERATOR,
        "escalate",
        "clusterroles.rbac.authorization.k8s.io",
        "",
        false,
    ),
    (
        OPERATOR,
        "create",
        "validatingadmissionpolicies.admissionregistration.k8s.io",
        "",
        false,
    ),
    (DISPATCHER, "list", "secrets", "", false),
    (DISPATCHER, "get", "secrets", NS, false),
    (DISPATCHER, "list", "agenthooks.agenthooks.io", "", false),
    (
        DISPATCHER,
        "get",
        "agenthooks.agenthooks.io",
        TENANT_NS,
        false,
    ),
    (
        DISPATCHER,
        "patch",
        "agenthooks.agenthooks.io",
        TENANT_NS,
        false,
    ),
    (
        DISPATCHER,
        "patch",
        "agenthooks.agenthooks.io/status",
        TENANT_NS,
        false,
    ),
    (
        DISPATCHER,
        "create",
        "agenthooks.agenthooks.io",
        TENANT_NS,
        false,
    ),
    (
        DISPATCHER,
        "list",
        "tenanthookbudgets.agenthooks.io",
        "",
        false,
    ),
    (DISPATCHER, "get", "leases.coordination.k8s.io", NS, false),
    (DISPATCHER, "list", "pods", NS, false),
    (DISPATCHER, "get", "configmaps", NS, false),
    (DISPATCHER, "create", "events", NS, false),
];

/// The scenario (see the module docs).
pub fn run(tier: &mut Tier) {
    tier.ensure_installed();
    let node = &tier.node;

    // Dry runs, one namespace per value set.
    let t = Instant::now();
    let mut objects = 0;
    for (name, values) in VALUE_SETS {
        let ns = format!("ah-dry-{name}");
        let _ = node.kubectl(&["create", "namespace", &ns]);
        let chart = tier.chart();
        let mut args = vec![
            "template",
            "ahdry",
            chart.as_str(),
            "--namespace",
            &ns,
            "--include-crds",
        ];
        args.extend_from_slice(values);
        let rendered = tier.helm_ok(&args);
        let out = node.kubectl_stdin(
            &["apply", "--dry-run=server", "-o", "json", "-f", "-"],
            rendered.as_bytes(),
        );
        assert!(
            out.status.success(),
            "value set {name}: kubectl apply --dry-run=server refused the chart's manifests: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let applied: Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
        let items = applied["items"].as_array().cloned().unwrap_or_default();
        let documents = rendered
            .split("\n---")
            .filter(|d| d.lines().any(|l| l.starts_with("kind:")))
            .count();
        assert_eq!(
            items.len(),
            documents,
            "value set {name}: every rendered document is applied"
        );
        let kinds: Vec<&str> = items.iter().filter_map(|i| i["kind"].as_str()).collect();
        for want in ["Deployment", "Service", "ServiceAccount", "ClusterRole"] {
            assert!(kinds.contains(&want), "value set {name}: {kinds:?}");
        }
        if *name == "standard" {
            assert!(
                kinds.contains(&"ValidatingAdmissionPolicy"),
                "standard: {kinds:?}"
            );
        }
        assert_eq!(
            kinds.iter().filter(|k| **k == "NetworkPolicy").count(),
            if *name == "lite-full" { 2 } else { 0 },
            "value set {name}: {kinds:?}"
        );
        objects += items.len();
        let _ = node.kubectl(&["delete", "namespace", &ns, "--wait=false"]);
    }
    let dry_run_secs = t.elapsed().as_secs_f64();

    // RBAC of the live release's ServiceAccounts.
    let t = Instant::now();
    // (four at a time: each is a kubectl process)
    let wrong: Vec<String> = std::thread::scope(|s| {
        let workers: Vec<_> = CHECKS
            .chunks(CHECKS.len().div_ceil(4))
            .map(|chunk| {
                s.spawn(move || {
                    chunk
                        .iter()
                        .filter_map(|c| can_i(node, c))
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        workers
            .into_iter()
            .flat_map(|w| w.join().expect("can-i worker"))
            .collect()
    });
    assert!(wrong.is_empty(), "RBAC differs:\n{}", wrong.join("\n"));

    // The dispatcher may do nothing on resources but what every authenticated user may
    // (review its own access) and what system:auth-delegator gives it: review callers'
    // tokens and access (CONTRACT §9.1–9.2); and sync with the operator as itself
    // (`agenthooks/sync` in its own namespace, §9.4).
    let list = node.kubectl_ok(&[
        "auth",
        "can-i",
        "--list",
        &format!("--as=system:serviceaccount:{NS}:{RELEASE}-dispatcher"),
        "--namespace",
        NS,
    ]);
    let resources: Vec<&str> = list
        .lines()
        .skip(1)
        .filter_map(|l| l.split_whitespace().next())
        .filter(|r| !r.starts_with('['))
        .collect();
    for r in &resources {
        assert!(
            r.starts_with("self")
                || [
                    "tokenreviews.authentication.k8s.io",
                    "subjectaccessreviews.authorization.k8s.io",
                    // its own sync with the operator (agenthooks-sync, CONTRACT §9.4)
                    "agenthooks.agenthooks.io/sync",
                ]
                .contains(r),
            "the dispatcher may touch {r}:\n{list}"
        );
    }
    for r in [
        "tokenreviews.authentication.k8s.io",
        "subjectaccessreviews.authorization.k8s.io",
    ] {
        assert!(
            resources.contains(&r),
            "the dispatcher may not create {r}:\n{list}"
        );
    }
    let rbac_secs = t.elapsed().as_secs_f64();
    eprintln!(
        "E2E-FIGURE dry_run_value_sets={} dry_run_objects={objects} dry_run_s={dry_run_secs:.1} rbac_checks={} rbac_s={rbac_secs:.1}",
        VALUE_SETS.len(),
        CHECKS.len() + 1
    );
}

/// Runs one [`Check`] with `kubectl auth can-i`; `Some(what differs)` when the answer is
/// not the one wanted.
fn can_i(node: &Node, (who, verb, resource, ns, allowed): &Check) -> Option<String> {
    let sa = format!("system:serviceaccount:{NS}:{RELEASE}-{who}");
    let (resource, sub) = match resource.split_once('/') {
        Some((r, s)) => (r, Some(s)),
        None => (*resource, None),
    };
    let mut args = vec![
        "auth".to_owned(),
        "can-i".to_owned(),
        verb.to_string(),
        resource.to_owned(),
        format!("--as={sa}"),
    ];
    if let Some(sub) = sub {
        args.push(format!("--subresource={sub}"));
    }
    if ns.is_empty() {
        args.push("--all-namespaces".to_owned());
    } else {
        args.push(format!("--namespace={ns}"));
    }
    let out = node.kubectl(&args);
    let code = out.status.code();
    assert!(
        matches!(code, Some(0 | 1)),
        "kubectl {}: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
    ((code == Some(0)) != *allowed).then(|| {
        format!(
            "{who} {verb} {resource}{} in {}: {} (wanted {})",
            sub.map(|s| format!("/{s}")).unwrap_or_default(),
            if ns.is_empty() { "all namespaces" } else { ns },
            if code == Some(0) { "yes" } else { "no" },
            if *allowed { "yes" } else { "no" }
        )
    })
}
