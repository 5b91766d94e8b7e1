//! CONTRACT §10.4 (issue 10 point 6) on the real API server: a hook the operator accepted
//! but a dispatcher cannot load is never dropped in silence.
//!
//! One operator on Lite (tenant command hooks allowed), one dispatcher on Lite and one on
//! Standard. A command hook applied in a tenant namespace is accepted and runs on the Lite
//! dispatcher; the Standard one cannot load it, lists it under `unavailable`, answers the
//! tenant's matching blocking event `block` (`HookUnavailable`, the hook deciding) and
//! leaves another tenant's events alone; the operator holds the hook at
//! `Ready=False HookUnavailable` naming the Standard dispatcher. Once the Standard
//! dispatcher is stopped and its liveness TTL has passed, the hook is `Ready=True`.

use std::time::{Duration, Instant};

use agenthooks_e2e::stack::{
    DispatcherProc, OperatorProc, http_get, install_crds, log_dir, metric, tails, wait_or_panic,
};
use agenthooks_e2e::{ControlPlane, unique_name};
use serde_json::{Value, json};

/// The operator's `--dispatcher-ttl-seconds`.
const TTL_SECONDS: u64 = 6;

/// A command hook on `exec` calls: blocks `rm ...` with reason `lite-ran`, allows the rest.
fn hook_yaml(ns: &str, name: &str) -> String {
    format!(
        "apiVersion: agenthooks.io/v1alpha1\nkind: AgentHook\nmetadata: {{name: {name}, namespace: {ns}}}\nspec:\n  event: pre_tool_use\n  matcher: '^exec$'\n  handler:\n    type: command\n    command:\n      command: |\n        case \"$(cat)\" in *'\"cmd\":\"rm'*) echo lite-ran >&2; exit 2;; esac; exit 0\n"
    )
}

fn exec_event(tenant: &str, cmd: &str) -> Value {
    json!({"event": "pre_tool_use", "tenant_id": tenant, "agent_id": "a1",
           "tool_name": "exec", "tool_input": {"cmd": cmd}})
}

/// (decision, reason, decidingHook) of a dispatch that must be answered 200.
fn decide(d: &DispatcherProc, event: &Value) -> (String, Option<String>, Option<String>) {
    let (code, body) = d.dispatch(event);
    assert_eq!(code, 200, "{} answered {code}: {body}", d.id);
    let s = |k: &str| body[k].as_str().map(str::to_string);
    (
        s("decision").unwrap_or_default(),
        s("reason"),
        s("decidingHook"),
    )
}

fn hook_json(cp: &ControlPlane, ns: &str, name: &str) -> Value {
    cp.kubectl_json(&["-n", ns, "get", "agenthook", name, "-o", "json"])
}

fn condition(cp: &ControlPlane, ns: &str, name: &str, type_: &str) -> Option<Value> {
    let out = cp.kubectl(&["-n", ns, "get", "agenthook", name, "-o", "json"]);
    if !out.status.success() {
        return None;
    }
    let v: Value = serde_json::from_slice(&out.stdout).ok()?;
    v["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == type_)
        .cloned()
}

/// `GET /v1/hooks` of a dispatcher.
fn hooks(d: &DispatcherProc) -> Value {
    let (code, body) = http_get(&format!("{}/v1/hooks", d.url));
    assert_eq!(code, 200, "{} GET /v1/hooks: {body}", d.id);
    serde_json::from_str(&body).unwrap()
}

fn unavailable_entry(d: &DispatcherProc, key: &str) -> Option<Value> {
    hooks(d)["unavailable"]
        .as_array()?
        .iter()
        .find(|u| u["hook"] == key)
        .cloned()
}

#[test]
fn a_hook_a_dispatcher_cannot_load_blocks_there_and_is_not_ready_until_it_leaves() {
    let cp = ControlPlane::shared();
    install_crds(cp);
    let master = unique_name("ah-unavail");
    let tenant_ns = unique_name("tenant-acme");
    let other_ns = unique_name("tenant-globex");
    cp.create_namespace(&master, &[]);
    // Tenants of this test only: other tests of the run leave hooks of tenant `acme` on
    // the shared API server, and they would decide first.
    let acme = unique_name("acme");
    let globex = unique_name("globex");
    cp.create_namespace(&tenant_ns, &[("agenthooks.io/tenant", acme.as_str())]);
    cp.create_namespace(&other_ns, &[("agenthooks.io/tenant", globex.as_str())]);
    let logs = log_dir("ah-unavail");
    let ttl = TTL_SECONDS.to_string();
    let op = OperatorProc::start(
        &cp.kubeconfig,
        &master,
        &unique_name("agenthooks-operator"),
        "op-unavail",
        &["--edition", "lite", "--dispatcher-ttl-seconds", &ttl],
        &logs,
    );
    let lite = DispatcherProc::start(
        &[&op.sync],
        &unique_name("lite"),
        &master,
        &["--edition", "lite"],
        &logs,
    );
    let mut standard = DispatcherProc::start(
        &[&op.sync],
        &unique_name("standard"),
        &master,
        &["--edition", "standard"],
        &logs,
    );
    wait_or_panic(
        Duration::from_secs(60),
        "both dispatchers ready",
        &[&op.proc, &lite.proc, &standard.proc],
        || lite.readyz() == 200 && standard.readyz() == 200,
    );

    let name = unique_name("cmd-guard");
    let key = format!("{tenant_ns}/{name}");
    cp.apply_yaml(&hook_yaml(&tenant_ns, &name));
    let applied = hook_json(cp, &tenant_ns, &name);
    let generation = applied["metadata"]["generation"].as_i64().unwrap();
    let uid = applied["metadata"]["uid"].as_str().unwrap().to_string();
    let procs = [&op.proc, &lite.proc, &standard.proc];

    // The Lite operator accepts it (tenant command hooks are allowed).
    wait_or_panic(Duration::from_secs(30), "Accepted=True", &procs, || {
        condition(cp, &tenant_ns, &name, "Accepted").is_some_and(|c| c["status"] == "True")
    });

    // The Lite dispatcher serves it; the Standard one lists it as unavailable, not served.
    wait_or_panic(
        Duration::from_secs(30),
        "the Lite dispatcher serves the hook",
        &procs,
        || lite.served_generation(&key) == Some(generation),
    );
    wait_or_panic(
        Duration::from_secs(30),
        "the Standard dispatcher lists the hook as unavailable",
        &procs,
        || unavailable_entry(&standard, &key).is_some(),
    );
    let listed = hooks(&standard);
    let entry = unavailable_entry(&standard, &key).unwrap();
    assert_eq!(
        (
            entry["uid"].as_str(),
            entry["generation"].as_i64(),
            entry["event"].as_str(),
            entry["reason"].as_str(),
        ),
        (
            Some(uid.as_str()),
            Some(generation),
            Some("pre_tool_use"),
            Some("HookUnavailable")
        ),
        "{listed}"
    );
    let error = entry["error"].as_str().unwrap().to_string();
    assert!(
        error.contains("spec.handler.type") && error.contains("runs only on the Lite edition"),
        "{listed}"
    );
    assert_eq!(standard.served_generation(&key), None, "{listed}");
    assert!(
        hooks(&lite)["unavailable"]
            .as_array()
            .is_some_and(|u| u.is_empty()),
        "the Lite dispatcher loads everything: {}",
        hooks(&lite)
    );

    // Standard: the tenant's matching blocking events are refused, the hook deciding,
    // whatever its command would have answered; another tenant's events go through.
    for cmd in ["rm -rf /", "ls"] {
        assert_eq!(
            decide(&standard, &exec_event(&acme, cmd)),
            (
                "block".into(),
                Some("HookUnavailable".into()),
                Some(key.clone())
            ),
            "standard, acme, {cmd}"
        );
    }
    assert_eq!(
        decide(&standard, &exec_event(&globex, "rm -rf /")),
        ("allow".into(), None, None),
        "standard, globex"
    );
    assert_eq!(
        metric(
            &standard.metrics(),
            "agenthooks_hook_unavailable_events_total",
            "result=\"blocked\""
        ),
        2.0,
        "the two refused events are counted"
    );

    // Lite: the hook runs.
    assert_eq!(
        decide(&lite, &exec_event(&acme, "rm -rf /")),
        ("block".into(), Some("lite-ran".into()), Some(key.clone())),
        "lite, acme, rm"
    );
    assert_eq!(
        decide(&lite, &exec_event(&acme, "ls")).0,
        "allow",
        "lite, acme, ls"
    );
    assert_eq!(
        metric(
            &lite.metrics(),
            "agenthooks_hook_unavailable_events_total",
            ""
        ),
        0.0
    );

    // Ready=False HookUnavailable, naming the Standard dispatcher only, with its error.
    wait_or_panic(
        Duration::from_secs(30),
        "Ready=False HookUnavailable",
        &procs,
        || {
            condition(cp, &tenant_ns, &name, "Ready")
                .is_some_and(|c| c["status"] == "False" && c["reason"] == "HookUnavailable")
        },
    );
    let ready = condition(cp, &tenant_ns, &name, "Ready").unwrap();
    let message = ready["message"].as_str().unwrap();
    assert!(
        message.contains(&format!(
            "dispatcher {} cannot load generation {generation} of the hook: {error}",
            standard.id
        )),
        "{ready}"
    );
    assert!(!message.contains(&lite.id), "{ready}");
    assert_eq!(ready["observedGeneration"].as_i64(), Some(generation));
    // It stays there while the Standard dispatcher is live.
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(
        condition(cp, &tenant_ns, &name, "Ready").unwrap()["reason"],
        "HookUnavailable"
    );

    // The Standard dispatcher leaves: the hook is Ready once it is no longer live (within
    // the TTL after its last poll ended, plus the ready pass and the status write), and not
    // at once.
    standard.proc.stop(Duration::from_secs(10));
    let stopped = Instant::now();
    assert_eq!(
        condition(cp, &tenant_ns, &name, "Ready").unwrap()["reason"],
        "HookUnavailable",
        "a dispatcher stays live for the TTL after its last poll"
    );
    wait_or_panic(
        Duration::from_secs(TTL_SECONDS + 20),
        "Ready=True once the Standard dispatcher is no longer live",
        &[&op.proc, &lite.proc],
        || {
            condition(cp, &tenant_ns, &name, "Ready")
                .is_some_and(|c| c["status"] == "True" && c["reason"] == "Served")
        },
    );
    let after = stopped.elapsed();
    assert!(
        after >= Duration::from_secs(TTL_SECONDS - 1),
        "Ready=True after {after:?}, before the {TTL_SECONDS} s TTL\n{}",
        tails(&[&op.proc])
    );
    assert_eq!(
        condition(cp, &tenant_ns, &name, "Ready").unwrap()["observedGeneration"].as_i64(),
        Some(generation)
    );
    // The Lite dispatcher still runs it.
    assert_eq!(
        decide(&lite, &exec_event(&acme, "rm -rf /")),
        ("block".into(), Some("lite-ran".into()), Some(key.clone())),
    );
}
