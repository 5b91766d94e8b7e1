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

use std::process::Command;
use std::time::Duration;

use agenthooks_e2e::argocd::ArgoCdConfig;
use agenthooks_e2e::procs::{Proc, bin};
use agenthooks_e2e::stack::{
    DispatcherProc, OperatorProc, hook_server, install_crds, log_dir,
    operator_service_account_kubeconfig, seal_key_path, tails,
};
use agenthooks_e2e::{ControlPlane, unique_name, wait_for};
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

fn condition(obj: &Value, type_: &str) -> Option<Value> {
    obj["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == type_)
        .cloned()
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
    let seal = seal_key_path(&logs);
    let spend = |calls: &str| {
        let out = Command::new(bin("agenthooks-dispatcher"))
            .args(["budget-load", "--operator-url", &operator.sync])
            .args(["--dispatcher-id", "argo-load", "--tenant", &tenant])
            .args(["--calls", calls, "--reserve", "100", "--settle", "100"])
            .args(["--seal-key-file", seal.to_str().unwrap()])
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
        message.contains("dispatcher argo-standard cannot load generation 1 of the hook"),
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
