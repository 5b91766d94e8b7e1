//! Issue 11 point 4: the Argo CD health checks of `config/argocd/argocd-cm.yaml`, evaluated
//! by Argo CD's own code (`e2e/argocd-health`: Argo CD's settings manager reads them from the
//! argocd-cm on the API server, gitops-engine's `GetResourceHealth` with Argo CD's Lua
//! override runs them) on objects read from the real API server, whose status the real
//! operator wrote. Every state is produced for real:
//!
//! - AgentHook: `Progressing` before any operator looked at it, `Progressing` while no
//!   dispatcher serves it, `Healthy` once every live dispatcher does, `Progressing` for a
//!   spec edit the operator has not observed (the operator stopped with SIGSTOP), `Degraded`
//!   for a hook the operator refuses (`Accepted=False`), `Degraded` while a tenant's
//!   breaker is open (`Healthy` again after the reset annotation), `Degraded` for a hook a
//!   live dispatcher cannot load (`Ready=False HookUnavailable`: a Standard dispatcher and
//!   a command hook).
//! - TenantHookBudget: `Healthy` with tokens left (`Ok`, then `Warning` after spending
//!   through the operator's budget API), `Degraded` once exhausted, `Degraded` when refused
//!   (`TenantMismatch`).
//!
//! And the documentation: `docs/argocd.md` shows config/argocd/argocd-cm.yaml verbatim, and
//! its Applications pass a server-side dry run against Argo CD's own Application CRD (from
//! the same argo-cd module), with the sync waves that put the chart (CRDs, operator,
//! admission policy) before the hooks, and the chart renders with their Helm values.

use std::process::Command;
use std::time::Duration;

use agenthooks_e2e::argocd::{ArgoCdConfig, application_crd};
use agenthooks_e2e::procs::{Proc, bin};
use agenthooks_e2e::stack::{
    DispatcherProc, OperatorProc, hook_server, install_crds, log_dir,
    operator_service_account_kubeconfig, tails,
};
use agenthooks_e2e::{ControlPlane, condition, helm_bin, repo_root, unique_name, wait_for};
use serde_json::{Value, json};

/// The message of `Ready=True` (operator/src/ready.rs).
const SERVED: &str = "Served: every live dispatcher serves the hook's current generation";

fn http_hook(ns: &str, name: &str, url: &str, timeout_ms: u32) -> String {
    format!(
        "apiVersion: agenthooks.io/v1alpha1\nkind: AgentHook\nmetadata: {{name: {name}, namespace: {ns}}}\nspec:\n  event: pre_tool_use\n  matcher: '^{name}$'\n  timeoutMs: {timeout_ms}\n  handler:\n    type: http\n    http: {{url: '{url}'}}\n"
    )
}

fn budget_yaml(ns: &str, name: &str, spec: &str) -> String {
    format!(
        "apiVersion: agenthooks.io/v1alpha1\nkind: TenantHookBudget\nmetadata: {{name: {name}, namespace: {ns}}}\nspec: {spec}\n"
    )
}

fn this_month() -> String {
    let out = Command::new("date")
        .args(["-u", "+%Y-%m"])
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// The scenario's cluster, argocd-cm and tenant namespace.
struct Scene {
    cp: &'static ControlPlane,
    argocd: ArgoCdConfig,
    ns: String,
}

impl Scene {
    /// `kubectl get KIND NAME -o json` in the tenant namespace: the object as Argo CD
    /// would read it from the API server.
    fn get(&self, kind: &str, name: &str) -> String {
        self.cp
            .kubectl_ok(&["-n", &self.ns, "get", kind, name, "-o", "json"])
    }

    fn json(&self, kind: &str, name: &str) -> Value {
        serde_json::from_str(&self.get(kind, name)).expect("kubectl JSON")
    }

    fn health(&self, kind: &str, name: &str) -> (String, String) {
        self.argocd.health_of(&self.get(kind, name))
    }

    /// Waits until Argo CD's health of `kind/name` has `status`; returns the message. On
    /// timeout, panics with the object and the log tails of `procs`.
    fn wait_health(&self, kind: &str, name: &str, status: &str, procs: &[&Proc]) -> String {
        let mut last = (String::new(), String::new());
        let ok = wait_for(Duration::from_secs(60), || {
            last = self.health(kind, name);
            last.0 == status
        });
        if !ok {
            panic!(
                "{kind}/{name} is not {status} within 60 s: {last:?}\n{}\n{}",
                self.get(kind, name),
                tails(procs)
            );
        }
        last.1
    }
}

#[test]
fn argo_cd_health_of_hooks_and_budgets_whose_status_the_operator_wrote() {
    let cp = ControlPlane::shared();
    install_crds(cp);
    let argocd = ArgoCdConfig::install(cp);
    let master = unique_name("ah-argocd");
    cp.create_namespace(&master, &[]);
    let tenant = unique_name("argo");
    let ns = unique_name("tenant-argo");
    cp.create_namespace(&ns, &[("agenthooks.io/tenant", &tenant)]);
    let logs = log_dir("ah-argocd");
    let s = Scene {
        cp,
        argocd,
        ns: ns.clone(),
    };
    let (allow_url, _) = hook_server(json!({"decision": "allow"}));

    // Applied before any operator runs: no status at all.
    cp.apply_yaml(&http_hook(&ns, "guard", &allow_url, 2000));
    assert_eq!(
        s.health("agenthook", "guard"),
        (
            "Progressing".to_string(),
            "Waiting for the agenthooks operator".to_string()
        )
    );

    // An operator (as the ServiceAccount of config/rbac), no dispatcher yet: accepted,
    // Ready=Unknown NoDispatchers.
    let kubeconfig = operator_service_account_kubeconfig(cp, &master, &logs);
    let operator = OperatorProc::start(
        &kubeconfig,
        &master,
        &unique_name("agenthooks-operator"),
        "op",
        &["--dispatcher-ttl-seconds", "10"],
        &logs,
    );
    let message = s.wait_health("agenthook", "guard", "Progressing", &[&operator.proc]);
    let fresh = wait_for(Duration::from_secs(30), || {
        condition(&s.json("agenthook", "guard"), "Ready")
            .is_some_and(|c| c["reason"] == "NoDispatchers")
    });
    assert!(fresh, "{}", s.get("agenthook", "guard"));
    let (status, message_now) = s.health("agenthook", "guard");
    assert_eq!(status, "Progressing", "{message}");
    assert_eq!(
        message_now,
        "Not ready yet, NoDispatchers: no dispatcher has polled the operator recently; the hook is ready to be served"
    );

    // A dispatcher: every live dispatcher serves generation 1.
    let dispatcher = DispatcherProc::start(
        &[&operator.sync],
        "argo-1",
        &master,
        &["--http-allow-cidr", "127.0.0.1/32"],
        &logs,
    );
    let procs = [&operator.proc, &dispatcher.proc];
    let message = s.wait_health("agenthook", "guard", "Healthy", &procs);
    assert_eq!(message, SERVED);

    // A spec edit the operator has not observed yet (it is stopped): generation 2 against
    // a status of generation 1.
    operator.proc.signal(libc::SIGSTOP);
    cp.apply_yaml(&http_hook(&ns, "guard", &allow_url, 3000));
    let edited = s.json("agenthook", "guard");
    assert_eq!(edited["metadata"]["generation"], 2, "{edited}");
    assert_eq!(edited["status"]["observedGeneration"], 1, "{edited}");
    let seen = s.health("agenthook", "guard");
    operator.proc.signal(libc::SIGCONT);
    assert_eq!(
        seen,
        (
            "Progressing".to_string(),
            "Waiting for the agenthooks operator to observe generation 2 (the status is of generation 1)"
                .to_string()
        )
    );
    assert_eq!(
        s.wait_health("agenthook", "guard", "Healthy", &procs),
        SERVED
    );
    assert_eq!(
        s.json("agenthook", "guard")["status"]["observedGeneration"],
        2
    );

    // Refused by the operator: a matcher that is no regex.
    cp.apply_yaml(&format!(
        "apiVersion: agenthooks.io/v1alpha1\nkind: AgentHook\nmetadata: {{name: refused, namespace: {ns}}}\nspec:\n  event: pre_tool_use\n  matcher: '(unclosed'\n  handler:\n    type: http\n    http: {{url: '{allow_url}'}}\n"
    ));
    let message = s.wait_health("agenthook", "refused", "Degraded", &procs);
    let accepted = condition(&s.json("agenthook", "refused"), "Accepted").expect("Accepted");
    assert_eq!(accepted["status"], "False");
    assert_eq!(accepted["reason"], "InvalidMatcher");
    assert!(
        accepted["message"]
            .as_str()
            .unwrap()
            .starts_with("spec.matcher"),
        "{accepted}"
    );
    assert_eq!(
        message,
        format!(
            "Not accepted, InvalidMatcher: {}",
            accepted["message"].as_str().unwrap()
        )
    );

    // A tenant's breaker opens: five faults in a row (the endpoint answers no decision).
    let (broken_url, _) = hook_server(json!({"decision": "maybe"}));
    cp.apply_yaml(&http_hook(&ns, "flaky", &broken_url, 2000));
    s.wait_health("agenthook", "flaky", "Healthy", &procs);
    for i in 0..5 {
        let (code, body) = dispatcher.dispatch(&json!({
            "event": "pre_tool_use", "tenant_id": tenant, "agent_id": "a1",
            "tool_name": "flaky", "tool_input": {"cmd": "x"}}));
        assert_eq!(code, 200, "{body}");
        assert_eq!(body["decision"], "block", "fault {i} fails closed: {body}");
    }
    let message = s.wait_health("agenthook", "flaky", "Degraded", &procs);
    let flaky = s.json("agenthook", "flaky");
    let open = condition(&flaky, "CircuitOpen").expect("CircuitOpen");
    assert_eq!(open["status"], "True", "{flaky}");
    assert_eq!(
        flaky["status"]["breaker"]["open"][0]["tenant"],
        tenant.as_str()
    );
    assert_eq!(
        message,
        format!("BreakerTripped: {}", open["message"].as_str().unwrap())
    );
    assert!(
        message.starts_with(&format!(
            "BreakerTripped: circuit breaker open for 1 tenant(s) (\"{tenant}\")"
        )),
        "{message}"
    );
    assert_eq!(
        condition(&flaky, "Ready").expect("Ready")["status"],
        "True",
        "an open breaker keeps the hook served"
    );
    // The reset annotation closes it: Healthy again, the spec untouched.
    cp.kubectl_ok(&[
        "-n",
        &ns,
        "annotate",
        "--overwrite",
        "agenthook",
        "flaky",
        "agenthooks.io/reset-breaker=argocd-test",
    ]);
    assert_eq!(
        s.wait_health("agenthook", "flaky", "Healthy", &procs),
        SERVED
    );

    // Budgets: 1000 tokens, none used.
    let month = this_month();
    cp.apply_yaml(&budget_yaml(&ns, "tokens", "{monthlyTokens: 1000}"));
    assert_eq!(
        s.wait_health("tenanthookbudget", "tokens", "Healthy", &procs),
        format!("Ok: 1000 of 1000 tokens left in {month}")
    );
    // 900 spent through the operator's budget API, as a dispatcher spends them.
    let token =
        agenthooks_e2e::stack::SyncIdentity::mint(cp, &master, "argo-load").token_file(&logs);
    let spend = |calls: &str| {
        let out = Command::new(bin("agenthooks-dispatcher"))
            .args(["budget-load", "--operator-url", &operator.sync])
            .args(["--tenant", &tenant])
            .args(["--calls", calls, "--reserve", "100", "--settle", "100"])
            .args(["--operator-token-file", token.to_str().unwrap()])
            .args(agenthooks_e2e::stack::test_pki().operator_ca_flags())
            .output()
            .expect("run budget-load");
        assert!(
            out.status.success(),
            "budget-load: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let last: Value = serde_json::from_str(
            String::from_utf8_lossy(&out.stdout)
                .lines()
                .last()
                .unwrap_or(""),
        )
        .expect("budget-load JSON");
        last
    };
    let out = spend("9");
    assert_eq!(out["granted"], 9, "{out}");
    let warned = wait_for(Duration::from_secs(20), || {
        s.json("tenanthookbudget", "tokens")["status"]["state"] == "Warning"
    });
    assert!(warned, "{}", s.get("tenanthookbudget", "tokens"));
    assert_eq!(
        s.health("tenanthookbudget", "tokens"),
        (
            "Healthy".to_string(),
            format!("Warning: 100 of 1000 tokens left in {month}")
        )
    );
    // The last 100: exhausted.
    let out = spend("1");
    assert_eq!(out["granted"], 1, "{out}");
    assert_eq!(
        s.wait_health("tenanthookbudget", "tokens", "Degraded", &procs),
        format!(
            "Exhausted: 0 of 1000 tokens left in {month}; prompt hooks of blocking events are blocked until the next month or a larger spec.monthlyTokens"
        )
    );
    let budget = s.json("tenanthookbudget", "tokens");
    assert_eq!(
        (&budget["status"]["used"], &budget["status"]["state"]),
        (&json!(1000), &json!("Exhausted"))
    );

    // A budget the operator refuses: spec.tenant is not the namespace's tenant.
    cp.apply_yaml(&budget_yaml(&ns, "elsewhere", "{tenant: someone-else}"));
    let message = s.wait_health("tenanthookbudget", "elsewhere", "Degraded", &procs);
    let accepted =
        condition(&s.json("tenanthookbudget", "elsewhere"), "Accepted").expect("Accepted");
    assert_eq!(accepted["reason"], "TenantMismatch");
    assert_eq!(
        message,
        format!(
            "Not accepted, TenantMismatch: {}",
            accepted["message"].as_str().unwrap()
        )
    );

    // A live dispatcher that cannot load an accepted hook: a Standard dispatcher and a
    // command hook (the operator allows tenant command hooks).
    let standard = DispatcherProc::start(
        &[&operator.sync],
        "argo-standard",
        &master,
        &["--edition", "standard"],
        &logs,
    );
    cp.apply_yaml(&format!(
        "apiVersion: agenthooks.io/v1alpha1\nkind: AgentHook\nmetadata: {{name: local-check, namespace: {ns}}}\nspec:\n  event: pre_tool_use\n  matcher: '^local-check$'\n  handler:\n    type: command\n    command: {{command: 'exit 0'}}\n"
    ));
    let message = s.wait_health(
        "agenthook",
        "local-check",
        "Degraded",
        &[&operator.proc, &dispatcher.proc, &standard.proc],
    );
    let ready = condition(&s.json("agenthook", "local-check"), "Ready").expect("Ready");
    assert_eq!(ready["reason"], "HookUnavailable");
    assert_eq!(
        message,
        format!(
            "Not ready, HookUnavailable: {}",
            ready["message"].as_str().unwrap()
        )
    );
    assert!(
        message.contains(&format!(
            "dispatcher {} cannot load generation 1 of the hook",
            standard.id
        )),
        "{message}"
    );

    // The whole namespace at once (a List, as kubectl prints it), as Argo CD shows an app.
    let list = cp.kubectl_ok(&[
        "-n",
        &ns,
        "get",
        "agenthooks,tenanthookbudgets",
        "-o",
        "json",
    ]);
    let mut all: Vec<(String, String, String)> = s
        .argocd
        .health(&list)
        .into_iter()
        .map(|h| (h.kind, h.name, h.status))
        .collect();
    all.sort();
    let want = |k: &str, n: &str, st: &str| (k.to_string(), n.to_string(), st.to_string());
    assert_eq!(
        all,
        [
            want("AgentHook", "flaky", "Healthy"),
            want("AgentHook", "guard", "Healthy"),
            want("AgentHook", "local-check", "Degraded"),
            want("AgentHook", "refused", "Degraded"),
            want("TenantHookBudget", "elsewhere", "Degraded"),
            want("TenantHookBudget", "tokens", "Degraded"),
        ]
    );
}

// ---------------------------------------------------------------------------------------
// docs/argocd.md

/// The fenced ```yaml blocks of `markdown`, in order.
fn yaml_blocks(markdown: &str) -> Vec<String> {
    let mut blocks = Vec::new();
    let mut current: Option<String> = None;
    for line in markdown.lines() {
        match (&mut current, line.trim_end()) {
            (None, "```yaml") => current = Some(String::new()),
            (Some(_), "```") => blocks.push(current.take().expect("open block")),
            (Some(b), _) => {
                b.push_str(line);
                b.push('\n');
            }
            (None, _) => {}
        }
    }
    assert!(current.is_none(), "an unclosed ```yaml block");
    blocks
}

/// `kubectl create --dry-run=client -o json` of YAML: the documents as JSON, through
/// kubectl's own YAML parser.
fn to_json(cp: &ControlPlane, yaml: &str) -> Vec<Value> {
    let out = cp.kubectl_stdin(
        &["create", "--dry-run=client", "-o", "json", "-f", "-"],
        yaml,
    );
    assert!(
        out.status.success(),
        "kubectl cannot read:\n{yaml}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // One JSON document per object, one after the other.
    serde_json::Deserializer::from_slice(&out.stdout)
        .into_iter::<Value>()
        .map(|v| v.expect("kubectl JSON"))
        .collect()
}

fn wave(obj: &Value) -> i64 {
    obj["metadata"]["annotations"]["argocd.argoproj.io/sync-wave"]
        .as_str()
        .unwrap_or("0")
        .parse()
        .expect("a sync wave is an integer")
}

fn sync_options(app: &Value) -> Vec<String> {
    app["spec"]["syncPolicy"]["syncOptions"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|o| o.as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

#[test]
fn docs_show_the_argocd_cm_and_applications_that_land_the_chart_before_the_hooks() {
    let cp = ControlPlane::shared();
    let root = repo_root();
    let doc = std::fs::read_to_string(root.join("docs/argocd.md")).expect("docs/argocd.md");
    let cm = std::fs::read_to_string(root.join("config/argocd/argocd-cm.yaml")).unwrap();
    let blocks = yaml_blocks(&doc);
    assert!(
        blocks.contains(&cm),
        "docs/argocd.md shows config/argocd/argocd-cm.yaml verbatim in a ```yaml block"
    );

    // The Applications: Argo CD's own CRD (same module as the tool) validates them on the
    // API server.
    cp.kubectl_ok(&[
        "apply",
        "--server-side",
        "--force-conflicts",
        "-f",
        application_crd().to_str().unwrap(),
    ]);
    cp.wait_for_crd("applications.argoproj.io", Duration::from_secs(30));
    let apps: Vec<Value> = blocks
        .iter()
        .flat_map(|b| to_json(cp, b))
        .filter(|o| o["kind"] == "Application")
        .collect();
    let named = |name: &str| -> &Value {
        apps.iter()
            .find(|a| a["metadata"]["name"] == name)
            .unwrap_or_else(|| panic!("docs/argocd.md has no Application {name}"))
    };
    let chart = named("agenthooks");
    let hooks = named("agenthooks-hooks");

    let argocd_ns = unique_name("argocd");
    cp.create_namespace(&argocd_ns, &[]);
    for app in [chart, hooks] {
        let mut app = app.clone();
        app["metadata"]["namespace"] = json!(argocd_ns);
        let out = cp.kubectl_stdin(
            &["apply", "--server-side", "--dry-run=server", "-f", "-"],
            &app.to_string(),
        );
        assert!(
            out.status.success(),
            "Application {} against Argo CD's CRD: {}",
            app["metadata"]["name"],
            String::from_utf8_lossy(&out.stderr)
        );
    }

    // The chart's Application: Helm from charts/agenthooks, the release namespace created,
    // server-side apply (the CRDs), and an earlier wave than the hooks'.
    assert_eq!(
        chart["spec"]["source"]["path"], "charts/agenthooks",
        "{chart}"
    );
    let release_ns = chart["spec"]["destination"]["namespace"]
        .as_str()
        .expect("destination.namespace");
    let chart_opts = sync_options(chart);
    for o in ["CreateNamespace=true", "ServerSideApply=true"] {
        assert!(chart_opts.iter().any(|x| x == o), "{o} in {chart_opts:?}");
    }
    assert!(
        wave(chart) < wave(hooks),
        "the chart (wave {}) lands before the hooks (wave {})",
        wave(chart),
        wave(hooks)
    );
    // The hooks' Application may find the CRDs missing at its first dry run.
    let hook_opts = sync_options(hooks);
    assert!(
        hook_opts
            .iter()
            .any(|x| x == "SkipDryRunOnMissingResource=true"),
        "{hook_opts:?}"
    );
    assert!(
        hooks["spec"]["syncPolicy"]["retry"]["limit"].as_i64() > Some(0),
        "{hooks}"
    );
    // The parent waits on a wave's Applications only when Argo CD assesses their health:
    // the doc restores that check (removed from Argo CD in 1.8) for app-of-apps.
    assert!(
        doc.contains("resource.customizations.health.argoproj.io_Application"),
        "the doc shows the Application health check the waves need"
    );

    // The chart renders with the Application's Helm values, as Argo CD's repo server runs
    // `helm template` (no cluster lookups: the seal key must be an existing Secret).
    let values = &chart["spec"]["source"]["helm"]["valuesObject"];
    assert!(
        values["sealKey"]["existingSecret"]
            .as_str()
            .is_some_and(|s| !s.is_empty()),
        "{values}"
    );
    let dir = tempfile::tempdir().unwrap();
    let values_file = dir.path().join("values.json");
    std::fs::write(&values_file, values.to_string()).unwrap();
    let out = Command::new(helm_bin())
        .args(["template", "agenthooks"])
        .arg(root.join("charts/agenthooks"))
        .args(["--namespace", release_ns, "--include-crds", "-f"])
        .arg(&values_file)
        .output()
        .expect("run helm");
    assert!(
        out.status.success(),
        "helm template with the Application's values: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let rendered = to_json(cp, &String::from_utf8_lossy(&out.stdout));
    let kinds: Vec<&str> = rendered.iter().filter_map(|o| o["kind"].as_str()).collect();
    assert_eq!(
        kinds
            .iter()
            .filter(|k| **k == "CustomResourceDefinition")
            .count(),
        3,
        "the chart's CRDs come with it: {kinds:?}"
    );
}
