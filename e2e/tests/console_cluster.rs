//! The web console (issue 14) in a cluster, in a real browser: on the e2e harness's real
//! API server, an operator and a dispatcher with `--kubernetes-callers` (Lite edition, its
//! own ServiceAccount with `config/rbac/dispatcher.yaml`'s RBAC) and a second one on the
//! Standard edition (which makes the command hooks Ready=False, HookUnavailable: it cannot
//! load them); people who sign in with ServiceAccount tokens as `kubectl create token` gives
//! them (the API server's default audience), each seeing and changing what their RBAC
//! allows:
//!
//! - a platform person, bound cluster-wide to read and write AgentHooks, read
//!   TenantHookBudgets, list Secrets, and this run's copies of `agenthooks-history-reader`
//!   and `agenthooks-tester`;
//! - a tenant person with the same roles in tenant namespace A only (labelled with its
//!   tenant, `agenthooks.io/tenant`), and a namespace B with hooks, a budget and audit rows
//!   the tenant person must never see;
//! - a person (history reader in A) whose ServiceAccount is deleted while signed in, and
//!   one whose token expires while signed in;
//! - approvals (`config/approvals/`): the tenant person is bound to `agenthooks-approver`
//!   in A, and a person who may read and patch A's HookApprovals but not `approve` them.
//!
//! The hooks: in the master namespace a command hook that blocks with a reason on stderr,
//! one that rewrites `tool_input`, one that allows every shell call (the history), an http
//! hook on `post_tool_use`, and an http hook whose endpoint answers 500, whose breaker is
//! opened for tenant A by five faults before the browser starts; an http hook and a budget
//! in A and in B; a hook Secret in A; in A an http hook with `spec.approval` whose endpoint
//! answers `ask`, called once by A's runtime before the browser starts, so its approval is
//! pending.
//!
//! Then `node --test` runs `e2e/console/cluster.test.mjs` and the standalone files that
//! hold in both modes (`sign-in`, `test-panel`, `history`) against the Lite dispatcher.
//! Screenshots go to `target/console-cluster-screenshots/`. Needs `bash
//! scripts/install-deps.sh browser`; `AGENTHOOKS_CONSOLE_TESTS=cluster` runs one file.

use std::time::{Duration, Instant};

use agenthooks_e2e::approvals::{install_policy, pending_id, refused_with};
use agenthooks_e2e::console::{browser_tools, run_and_assert, test_files, workspace};
use agenthooks_e2e::stack::{
    CALLER_AUDIENCE, DispatcherProc, bindable_role, dispatcher_service_account_kubeconfig,
    hook_server, kubernetes_callers_stack, log_dir, service_account_token, switchable_hook_server,
    tails, wait_or_panic,
};
use agenthooks_e2e::{ControlPlane, condition, unique_name, wait_for};
use serde_json::{Value, json};

/// What the blocking hook writes to stderr before `exit 2`.
const BLOCK_REASON: &str = "refused by the console test's block hook";
/// The command the blocking hook refuses (a shell call whose command holds it).
const BLOCK_COMMAND: &str = "console-block";
/// The command the rewriting hook rewrites, and what into.
const REWRITE_COMMAND: &str = "console-rewrite";
const REWRITTEN_COMMAND: &str = "echo rewritten-by-the-console-test";
/// The tool name only the failing http hook selects.
const FLAKY_TOOL: &str = "console-flaky";
/// The tool name only the approval hook selects.
const APPROVAL_TOOL: &str = "a-deploy";
/// Why the approval hook's endpoint asks.
const APPROVAL_REASON: &str = "a-deploy needs a person";
/// How long the browser tests may take in all.
const TIMEOUT: Duration = Duration::from_secs(600);

/// An AgentHook `ns/name` with `spec`.
fn hook(ns: &str, name: &str, spec: Value) -> Value {
    json!({"apiVersion": "agenthooks.io/v1alpha1", "kind": "AgentHook",
           "metadata": {"name": name, "namespace": ns}, "spec": spec})
}

/// A global command hook of the master namespace on `pre_tool_use` shell calls, only for
/// commands holding `holds` if given (`tool_input`: a dry run has no tool facts).
fn command_hook(ns: &str, name: &str, priority: i64, holds: Option<&str>, command: &str) -> Value {
    let mut spec = json!({
        "event": "pre_tool_use", "scope": "global", "priority": priority,
        "toolKinds": ["shell"], "timeoutMs": 5000,
        "handler": {"type": "command", "command": {"command": command}},
    });
    if let Some(h) = holds {
        spec["ifExpr"] = json!(format!("tool_input.command.contains({})", json!(h)));
    }
    hook(ns, name, spec)
}

/// An http hook on `pre_tool_use` calls of tool `tool` only.
fn http_hook(ns: &str, name: &str, scope: &str, tool: &str, url: &str) -> Value {
    hook(
        ns,
        name,
        json!({"event": "pre_tool_use", "scope": scope, "priority": 5,
               "matcher": format!("^{tool}$"), "timeoutMs": 3000,
               "handler": {"type": "http", "http": {"url": url}}}),
    )
}

fn budget(ns: &str, name: &str, monthly: i64) -> Value {
    json!({"apiVersion": "agenthooks.io/v1alpha1", "kind": "TenantHookBudget",
           "metadata": {"name": name, "namespace": ns}, "spec": {"monthlyTokens": monthly}})
}

/// Applies objects in one `kubectl apply` (a `List`).
fn apply(cp: &ControlPlane, items: &[Value]) {
    cp.apply_yaml(&json!({"apiVersion": "v1", "kind": "List", "items": items}).to_string());
}

/// A token of ServiceAccount `ns/sa` as a person gets one, `kubectl create token SA -n NS`:
/// for the API server's default audience.
fn person_token(cp: &ControlPlane, ns: &str, sa: &str) -> String {
    cp.kubectl_ok(&["create", "token", sa, "-n", ns, "--duration=1h"])
        .trim()
        .to_owned()
}

/// `POST /v1/dispatch` with a caller's bearer token → (status, JSON body or Null).
fn dispatch(url: &str, token: &str, event: &Value) -> (u16, Value) {
    let header = format!("Authorization: Bearer {token}");
    let (code, body) = agenthooks_e2e::stack::http_post_with(
        &format!("{url}/v1/dispatch"),
        event,
        &["-H", &header],
    );
    (code, serde_json::from_str(&body).unwrap_or(Value::Null))
}

fn tool_event(tool: &str) -> Value {
    json!({"event": "pre_tool_use", "session_id": "console-cluster-setup", "agent_id": "setup",
           "tool_name": tool, "tool_input": {"cmd": "x"}})
}

/// ClusterRoleBinding (`ns` = None) or RoleBinding in `ns` of ClusterRole `role` to
/// ServiceAccount `sa_ns/sa`.
fn binding(name: &str, ns: Option<&str>, role: &str, sa_ns: &str, sa: &str) -> Value {
    let mut b = json!({
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": if ns.is_some() { "RoleBinding" } else { "ClusterRoleBinding" },
        "metadata": {"name": name},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
        "subjects": [{"kind": "ServiceAccount", "name": sa, "namespace": sa_ns}],
    });
    if let Some(ns) = ns {
        b["metadata"]["namespace"] = json!(ns);
    }
    b
}

#[test]
fn console_in_a_cluster_in_a_real_browser() {
    browser_tools();
    let setup = Instant::now();
    let cp = ControlPlane::shared();
    agenthooks_e2e::stack::install_crds(cp);
    let logs = log_dir("console-k8s");
    let master = unique_name("console-master");
    let ns_a = unique_name("console-a");
    let ns_b = unique_name("console-b");
    // A's tenant is its label (as a platform team names tenants), B's its name.
    let tenant_a = unique_name("acme");
    cp.create_namespace(&master, &[]);
    cp.create_namespace(&ns_a, &[("agenthooks.io/tenant", tenant_a.as_str())]);
    cp.create_namespace(&ns_b, &[]);
    install_policy(cp);
    for (ns, sa) in [
        (&master, "platform"),
        (&ns_a, "alice"),
        (&ns_a, "bob"),
        (&ns_a, "carol"),
        (&ns_a, "dave"),
        (&ns_a, "runtime"),
        (&ns_b, "runtime"),
    ] {
        cp.kubectl_ok(&["create", "serviceaccount", sa, "-n", ns]);
    }

    // The hooks, before the operator starts: it accepts them in its first pass.
    let (flaky_url, flaky) = switchable_hook_server(500, json!({"error": "policy service down"}));
    let (ok_url, _) = hook_server(json!({"decision": "allow"}));
    let (ask_url, _) = hook_server(json!({"decision": "ask", "reason": APPROVAL_REASON}));
    let mut approval_hook = http_hook(&ns_a, "a-approve", "tenant", APPROVAL_TOOL, &ask_url);
    approval_hook["spec"]["approval"] = json!({"ttlSeconds": 3600});
    apply(
        cp,
        &[
            command_hook(
                &master,
                "console-block",
                100,
                Some(BLOCK_COMMAND),
                &format!("cat >/dev/null; echo \"{BLOCK_REASON}\" >&2; exit 2"),
            ),
            command_hook(
                &master,
                "console-rewrite",
                50,
                Some(REWRITE_COMMAND),
                &format!(
                    "cat >/dev/null; printf '%s' '{}'",
                    json!({"updatedInput": {"command": REWRITTEN_COMMAND}})
                ),
            ),
            command_hook(
                &master,
                "console-history",
                1,
                None,
                "cat >/dev/null; exit 0",
            ),
            hook(
                &master,
                "console-notify",
                json!({"event": "post_tool_use", "scope": "global", "priority": 10, "timeoutMs": 2000,
                       "handler": {"type": "http", "http": {"url": "http://127.0.0.1:9/notify"}}}),
            ),
            http_hook(&master, "console-flaky", "global", FLAKY_TOOL, &flaky_url),
            http_hook(&ns_a, "a-guard", "tenant", "a-only", &ok_url),
            approval_hook,
            http_hook(&ns_b, "b-guard", "tenant", "b-only", &ok_url),
            hook(
                &ns_b,
                "b-notify",
                json!({"event": "post_tool_use", "scope": "tenant",
                       "handler": {"type": "http", "http": {"url": "http://127.0.0.1:9/b"}}}),
            ),
            budget(&ns_a, "a-tokens", 50_000),
            budget(&ns_b, "b-tokens", 70_000),
            json!({"apiVersion": "v1", "kind": "Secret",
                   "metadata": {"name": "policy-token", "namespace": ns_a,
                                "labels": {"agenthooks.io/hook-secret": "true"}},
                   "stringData": {"token": "s3cret"}}),
        ],
    );

    // The operator and the Lite dispatcher; then a Standard one following the same operator.
    let db = |name: &str| format!("sqlite://{}", logs.join(name).display());
    let lite_db = db("lite-audit.db");
    let (operator, d) = kubernetes_callers_stack(
        cp,
        "ck8s",
        &master,
        &[
            "--audit-db",
            &lite_db,
            "--http-allow-cidr",
            "127.0.0.0/8",
            "--report-interval-ms",
            "200",
        ],
        &logs,
    );
    let standard_kc = dispatcher_service_account_kubeconfig(cp, &master, &logs);
    let std_db = db("standard-audit.db");
    let standard = DispatcherProc::start_with_env(
        &[&operator.sync],
        "ck8s-standard",
        &master,
        &[
            "--kubernetes-callers",
            "--edition",
            "standard",
            "--audit-db",
            &std_db,
        ],
        &[("KUBECONFIG", standard_kc.to_str().unwrap())],
        &logs,
    );
    let procs = [&operator.proc, &d.proc, &standard.proc];

    // People: RBAC of this run (the roles to bind are this run's copies, applied by the
    // stack), then their tokens.
    let person_role = unique_name("console-person");
    let history = bindable_role("agenthooks-history-reader");
    let tester = bindable_role("agenthooks-tester");
    let mut rbac = vec![json!({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
        "metadata": {"name": person_role},
        "rules": [
            {"apiGroups": ["agenthooks.io"], "resources": ["agenthooks"],
             "verbs": ["get", "list", "watch", "create", "patch"]},
            {"apiGroups": ["agenthooks.io"], "resources": ["tenanthookbudgets"],
             "verbs": ["get", "list", "watch"]},
            {"apiGroups": [""], "resources": ["secrets"], "verbs": ["list"]},
        ],
    })];
    for (i, role) in [&person_role, &history, &tester].into_iter().enumerate() {
        rbac.push(binding(
            &unique_name("console-platform"),
            None,
            role,
            &master,
            "platform",
        ));
        rbac.push(binding(
            &format!("alice-{i}"),
            Some(&ns_a),
            role,
            &ns_a,
            "alice",
        ));
    }
    rbac.push(binding("bob", Some(&ns_a), &person_role, &ns_a, "bob"));
    rbac.push(binding("bob-history", Some(&ns_a), &history, &ns_a, "bob"));
    rbac.push(binding("carol", Some(&ns_a), &person_role, &ns_a, "carol"));
    // Approvals of A: alice answers them; dave may read and patch them, not approve.
    rbac.push(binding(
        "alice-approver",
        Some(&ns_a),
        "agenthooks-approver",
        &ns_a,
        "alice",
    ));
    rbac.push(json!({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
        "metadata": {"name": "approval-patcher", "namespace": ns_a},
        "rules": [{"apiGroups": ["agenthooks.io"], "resources": ["hookapprovals"],
                   "verbs": ["get", "list", "patch"]}],
    }));
    rbac.push(json!({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
        "metadata": {"name": "dave", "namespace": ns_a},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "approval-patcher"},
        "subjects": [{"kind": "ServiceAccount", "name": "dave", "namespace": ns_a}],
    }));
    apply(cp, &rbac);
    let platform_token = person_token(cp, &master, "platform");
    let platform_api_token = service_account_token(cp, &master, "platform", CALLER_AUDIENCE);
    let alice_token = person_token(cp, &ns_a, "alice");
    let bob_token = person_token(cp, &ns_a, "bob");
    let dave_token = person_token(cp, &ns_a, "dave");
    let caller_a = service_account_token(cp, &ns_a, "runtime", CALLER_AUDIENCE);
    let caller_b = service_account_token(cp, &ns_b, "runtime", CALLER_AUDIENCE);

    let key = |ns: &str, name: &str| format!("{ns}/{name}");
    let served = [
        key(&master, "console-block"),
        key(&master, "console-rewrite"),
        key(&master, "console-history"),
        key(&master, "console-notify"),
        key(&master, "console-flaky"),
        key(&ns_a, "a-guard"),
        key(&ns_a, "a-approve"),
        key(&ns_b, "b-guard"),
        key(&ns_b, "b-notify"),
    ];
    wait_or_panic(
        Duration::from_secs(60),
        "both dispatchers ready, the Lite one serving every hook",
        &procs,
        || {
            d.readyz() == 200
                && standard.readyz() == 200
                && served.iter().all(|k| d.served_generation(k).is_some())
        },
    );
    // Tenants' runtimes are served once the snapshot carries their namespaces' tenants.
    wait_or_panic(
        Duration::from_secs(30),
        "the runtimes of A and B are served",
        &procs,
        || {
            dispatch(&d.url, &caller_a, &tool_event("a-only")).0 == 200
                && dispatch(&d.url, &caller_b, &tool_event("b-only")).0 == 200
        },
    );

    // Five faults of tenant A in a row open the failing hook's breaker (each 500 is
    // retried once after 1 s).
    for i in 0..5 {
        let (code, body) = dispatch(&d.url, &caller_a, &tool_event(FLAKY_TOOL));
        assert_eq!(
            (code, &body["decision"]),
            (200, &json!("block")),
            "fault {i}: {body}\n{}",
            tails(&procs)
        );
    }
    assert!(flaky.hits() >= 5, "the failing endpoint was called");
    let flaky_key = key(&master, "console-flaky");
    let hooks_and_budgets = || {
        let items = |kind: &str, ns: &str| -> Vec<Value> {
            cp.kubectl_json(&["get", kind, "-n", ns])["items"]
                .as_array()
                .cloned()
                .unwrap_or_default()
        };
        let hooks: Vec<Value> = [&master, &ns_a, &ns_b]
            .iter()
            .flat_map(|ns| items("agenthooks.agenthooks.io", ns))
            .collect();
        let budgets: Vec<Value> = [&ns_a, &ns_b]
            .iter()
            .flat_map(|ns| items("tenanthookbudgets", ns))
            .collect();
        (hooks, budgets)
    };
    let settled = wait_for(Duration::from_secs(20), || {
        let (hooks, budgets) = hooks_and_budgets();
        let open = hooks.iter().any(|h| {
            h["metadata"]["name"] == "console-flaky"
                && condition(h, "CircuitOpen").is_some_and(|c| c["status"] == "True")
        });
        let accepted = hooks.len() == served.len()
            && hooks.iter().all(|h| {
                condition(h, "Accepted").is_some_and(|c| c["status"] == "True")
                    && condition(h, "Ready").is_some()
            });
        open && accepted && budgets.iter().all(|b| b["status"]["state"].is_string())
    });
    if !settled {
        let (hooks, budgets) = hooks_and_budgets();
        let status: Vec<String> = hooks
            .iter()
            .chain(&budgets)
            .map(|o| {
                format!(
                    "{}/{}: {}",
                    o["metadata"]["namespace"], o["metadata"]["name"], o["status"]
                )
            })
            .collect();
        panic!(
            "within 20 s: CircuitOpen=True on the failing hook, every hook Accepted with a Ready condition, the budgets' state set\n{}\n{}",
            status.join("\n"),
            tails(&procs)
        );
    }
    // A's runtime calls the approval hook: the call is refused, its approval pending. dave
    // is refused approving it by the admission policy (retried until the policy is in
    // force), so the browser sees the policy's own refusal.
    let approval_event = tool_event(APPROVAL_TOOL);
    let (code, body) = dispatch(&d.url, &caller_a, &approval_event);
    assert_eq!(code, 200, "{body}\n{}", tails(&procs));
    let approval_id = pending_id(&body);
    let dave = format!("system:serviceaccount:{ns_a}:dave");
    refused_with(
        cp,
        &ns_a,
        &dave,
        &approval_id,
        &json!({"spec": {"decision": "Approve", "decidedBy": dave}}),
        "may not approve calls",
    );
    println!(
        "[console-cluster] set up in {:.1}s",
        setup.elapsed().as_secs_f64()
    );
    assert!(
        d.served_generation(&flaky_key).is_some(),
        "the failing hook stays served"
    );

    // Carol's tokens are signed by the browser test with the control plane's own key, to
    // expire within seconds (`kubectl create token` gives 10 minutes at least); not on an
    // external cluster, whose key is not ours.
    let carol_uid = cp.kubectl_ok(&[
        "get",
        "serviceaccount",
        "carol",
        "-n",
        &ns_a,
        "-o",
        "jsonpath={.metadata.uid}",
    ]);
    let signing_key = cp
        .dir
        .as_ref()
        .map(|d| d.join("sa.key").to_string_lossy().into_owned())
        .unwrap_or_default();
    let kubectl = cp.kubectl_bin.to_string_lossy().into_owned();
    let kubeconfig = cp.kubeconfig.to_string_lossy().into_owned();
    let shots = workspace().join("target/console-cluster-screenshots");
    let files = test_files(|name| matches!(name, "cluster" | "sign-in" | "test-panel" | "history"));
    let env: Vec<(&str, String)> = vec![
        ("CONSOLE_MODE", "cluster".into()),
        ("CONSOLE_URL", d.url.clone()),
        ("CONSOLE_STANDARD_URL", standard.url.clone()),
        ("CONSOLE_TOKEN", platform_token),
        (
            "CONSOLE_USER",
            format!("system:serviceaccount:{master}:platform"),
        ),
        ("CONSOLE_API_TOKEN", platform_api_token),
        ("CONSOLE_CALLER_TOKEN", caller_a),
        ("CONSOLE_NAMESPACE", master.clone()),
        ("CONSOLE_HOOK_BLOCK", key(&master, "console-block")),
        ("CONSOLE_BLOCK_COMMAND", BLOCK_COMMAND.into()),
        ("CONSOLE_BLOCK_REASON", BLOCK_REASON.into()),
        ("CONSOLE_HOOK_REWRITE", key(&master, "console-rewrite")),
        ("CONSOLE_REWRITE_COMMAND", REWRITE_COMMAND.into()),
        ("CONSOLE_REWRITTEN_COMMAND", REWRITTEN_COMMAND.into()),
        ("CONSOLE_HOOK_HISTORY", key(&master, "console-history")),
        ("CONSOLE_HOOK_FLAKY", flaky_key),
        ("CONSOLE_TENANT_NS", ns_a.clone()),
        ("CONSOLE_TENANT", tenant_a),
        ("CONSOLE_OTHER_NS", ns_b.clone()),
        ("CONSOLE_HOOK_TENANT", key(&ns_a, "a-guard")),
        ("CONSOLE_HOOK_OTHER", key(&ns_b, "b-guard")),
        ("CONSOLE_TENANT_TOKEN", alice_token),
        (
            "CONSOLE_TENANT_USER",
            format!("system:serviceaccount:{ns_a}:alice"),
        ),
        ("CONSOLE_HOOK_SECRET", "policy-token/token".into()),
        ("CONSOLE_REVOKE_TOKEN", bob_token),
        ("CONSOLE_REVOKE_SA", format!("{ns_a}/bob")),
        ("CONSOLE_EXPIRING_SA", format!("{ns_a}/carol/{carol_uid}")),
        ("CONSOLE_SIGNING_KEY", signing_key),
        ("CONSOLE_APPROVAL", key(&ns_a, &approval_id)),
        ("CONSOLE_APPROVAL_HOOK", key(&ns_a, "a-approve")),
        ("CONSOLE_APPROVAL_EVENT", approval_event.to_string()),
        ("CONSOLE_APPROVAL_REASON", APPROVAL_REASON.into()),
        ("CONSOLE_NON_APPROVER_TOKEN", dave_token),
        ("CONSOLE_NON_APPROVER_USER", dave),
        ("CONSOLE_KUBECTL", kubectl),
        ("CONSOLE_KUBECONFIG", kubeconfig),
    ];
    run_and_assert(
        "console-cluster",
        &files,
        &env,
        &logs,
        &shots,
        TIMEOUT,
        &procs,
    );
}
