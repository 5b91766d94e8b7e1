//! Issue 3, points 1–4, on the real API server with one operator (running as the
//! ServiceAccount of `config/rbac/operator.yaml`) and three dispatcher processes:
//!
//! 1. the circuit breaker (CONTRACT §6) counted across dispatchers: refused calls never
//!    open it; handler faults of one tenant spread over three dispatchers open that
//!    tenant's breaker of a global guard on every dispatcher within one sync (status,
//!    condition, Event; the hook stays served; another tenant still runs the handler); the
//!    reset annotation closes it without anything writing `spec`; and once the endpoint
//!    recovers a half-open probe closes it everywhere with no one resetting anything;
//! 2. TenantHookBudget status and printer columns, defaults, rollover of a past period;
//! 3. budget accounting from three dispatcher processes at once (`budget-load`): `used`
//!    is exactly the sum of settled costs and never more than the reservations allow;
//! 4. `status.executions` merged across dispatchers without losing a count.
//!
//! The hook endpoints are tiny HTTP servers inside this test that answer in the seed's
//! hook response shape (`{"decision": ...}`); they stand in for a policy service.

use std::process::Command;
use std::sync::OnceLock;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use agenthooks_e2e::procs::{Proc, bin};
use agenthooks_e2e::stack::{
    DispatcherProc, OperatorProc, hook_server, http_get, install_crds, log_dir, metric,
    operator_service_account_kubeconfig, switchable_hook_server, tails,
};
use agenthooks_e2e::{ControlPlane, condition, unique_name, wait_for};
use serde_json::{Value, json};

/// Milliseconds between a dispatcher's execution reports.
const REPORT_INTERVAL_MS: &str = "200";

struct Stack {
    cp: &'static ControlPlane,
    master: String,
    /// The stack's log directory (tokens of extra dispatchers go there too).
    logs: std::path::PathBuf,
    operator: OperatorProc,
    ds: Vec<DispatcherProc>,
}

impl Stack {
    fn procs(&self) -> Vec<&Proc> {
        let mut v: Vec<&Proc> = self.ds.iter().map(|d| &d.proc).collect();
        v.push(&self.operator.proc);
        v
    }

    fn tails(&self) -> String {
        tails(&self.procs())
    }

    fn wait(&self, timeout: Duration, what: &str, f: impl FnMut() -> bool) {
        if !wait_for(timeout, f) {
            panic!("{what} (within {timeout:?})\n{}", self.tails());
        }
    }

    fn hook(&self, ns: &str, name: &str) -> Value {
        self.cp
            .kubectl_json(&["-n", ns, "get", "agenthook", name, "--show-managed-fields"])
    }
}

fn stack() -> &'static Stack {
    static STACK: OnceLock<Stack> = OnceLock::new();
    STACK.get_or_init(|| {
        let cp = ControlPlane::shared();
        install_crds(cp);
        let master = unique_name("ah-safeguards");
        cp.create_namespace(&master, &[]);
        let logs = log_dir("ah-safeguards");
        let kubeconfig = operator_service_account_kubeconfig(cp, &master, &logs);
        let operator = OperatorProc::start(
            &kubeconfig,
            &master,
            &unique_name("agenthooks-operator"),
            "op",
            &["--dispatcher-ttl-seconds", "10"],
            &logs,
        );
        let ds: Vec<DispatcherProc> = (1..=3)
            .map(|i| {
                DispatcherProc::start(
                    &[&operator.sync],
                    &format!("sg-{i}"),
                    &master,
                    &[
                        "--http-allow-cidr",
                        "127.0.0.1/32",
                        "--report-interval-ms",
                        REPORT_INTERVAL_MS,
                    ],
                    &logs,
                )
            })
            .collect();
        let stack = Stack {
            cp,
            master: master.clone(),
            logs: logs.clone(),
            operator,
            ds,
        };
        stack.wait(Duration::from_secs(60), "dispatchers ready", || {
            stack.ds.iter().all(|d| d.readyz() == 200)
        });
        stack
    })
}

fn http_hook(ns: &str, name: &str, url: &str, extra: &str) -> String {
    format!(
        "apiVersion: agenthooks.io/v1alpha1\nkind: AgentHook\nmetadata: {{name: {name}, namespace: {ns}}}\nspec:\n  event: pre_tool_use\n  matcher: '^{name}$'\n{extra}  handler:\n    type: http\n    http: {{url: '{url}'}}\n"
    )
}

/// A namespace of `tenant` (give each test a tenant of its own: one namespace holds each
/// tenant on the shared API server, CONTRACT §9.3, so a second namespace labelled with the
/// same tenant would lose its claim).
fn tenant_namespace(s: &Stack, tenant: &str) -> String {
    let ns = unique_name(&format!("tenant-{tenant}"));
    s.cp.create_namespace(&ns, &[("agenthooks.io/tenant", tenant)]);
    ns
}

// ---- 1. the circuit breaker across dispatchers ------------------------------------------

fn event_for(tool: &str, tenant: &str) -> Value {
    json!({"event": "pre_tool_use", "tenant_id": tenant, "agent_id": "a1",
           "tool_name": tool, "tool_input": {"cmd": "x"}})
}

#[test]
fn refused_calls_over_three_dispatchers_never_open_the_breaker() {
    // The seed's talk-past: five refused calls tripped the guard and the sixth ran.
    let s = stack();
    let tenant = unique_name("acme");
    let ns = tenant_namespace(s, &tenant);
    let (url, hits) = hook_server(json!({"decision": "block", "reason": "policy says no"}));
    let name = "always-block";
    s.cp.apply_yaml(&http_hook(&ns, name, &url, ""));
    let key = format!("{ns}/{name}");
    s.wait(Duration::from_secs(60), "hook served by all three", || {
        s.ds.iter().all(|d| d.served_generation(&key) == Some(1))
    });
    for i in 0..12 {
        let d = &s.ds[i % 3];
        let (code, body) = d.dispatch(&event_for(name, &tenant));
        assert_eq!(code, 200, "{body}");
        assert_eq!(body["decision"], "block", "event {i} on {}: {body}", d.id);
        assert_eq!(body["hooks"][0]["decision"], "block", "{body}");
    }
    assert_eq!(
        hits.load(Ordering::SeqCst),
        12,
        "every refused call ran the guard"
    );
    // Give the merged window a report interval or two: still closed.
    std::thread::sleep(Duration::from_millis(1000));
    let hook = s.hook(&ns, name);
    assert!(hook["status"]["breaker"].is_null(), "{hook}");
    assert!(condition(&hook, "CircuitOpen").is_none_or(|c| c["status"] != "True"));
}

#[test]
fn five_faults_over_three_dispatchers_open_one_tenants_breaker_and_reset_closes_it() {
    let s = stack();
    // A global guard whose endpoint answers something unusable: every run is an error.
    let (url, hits) = hook_server(json!({"decision": "maybe"}));
    let name = "flaky-guard";
    let ns = s.master.clone();
    s.cp.apply_yaml(&http_hook(&ns, name, &url, "  scope: global\n"));
    let key = format!("{ns}/{name}");
    s.wait(Duration::from_secs(60), "hook served by all three", || {
        s.ds.iter().all(|d| d.served_generation(&key) == Some(1))
    });
    let spec_before = s.hook(&ns, name)["spec"].clone();

    // Six faults of tenant acme, round robin: two per dispatcher, none trips locally; the
    // operator's merged window does.
    for i in 0..6 {
        let d = &s.ds[i % 3];
        let (code, body) = d.dispatch(&event_for(name, "acme"));
        assert_eq!(code, 200, "{body}");
        assert_eq!(body["decision"], "block", "an error fails closed: {body}");
    }
    let sixth = Instant::now();
    let open_everywhere = || {
        s.ds.iter().all(|d| {
            let (_, body) = d.dispatch(&event_for(name, "acme"));
            body["hooks"][0]["errorKind"] == "circuit_open"
        })
    };
    s.wait(
        Duration::from_secs(10),
        "acme's breaker open on every dispatcher",
        open_everywhere,
    );
    eprintln!(
        "six faults over three dispatchers -> open on all three in {:?}",
        sixth.elapsed()
    );
    let before = hits.load(Ordering::SeqCst);
    for d in &s.ds {
        let (_, body) = d.dispatch(&event_for(name, "acme"));
        assert_eq!(
            (
                &body["decision"],
                &body["reason"],
                &body["hooks"][0]["errorKind"]
            ),
            (
                &json!("block"),
                &json!("CircuitOpen"),
                &json!("circuit_open")
            ),
            "{}: {body}",
            d.id
        );
        assert_eq!(d.served_generation(&key), Some(1), "the hook stays served");
    }
    assert_eq!(
        hits.load(Ordering::SeqCst),
        before,
        "an open breaker does not call the handler"
    );
    // Another tenant's events still run the handler.
    let (_, body) = s.ds[0].dispatch(&event_for(name, "globex"));
    assert_eq!(body["hooks"][0]["errorKind"], "bad_decision", "{body}");
    assert_eq!(hits.load(Ordering::SeqCst), before + 1);

    // Status, condition, Event.
    s.wait(
        Duration::from_secs(10),
        "CircuitOpen=True in status",
        || condition(&s.hook(&ns, name), "CircuitOpen").is_some_and(|c| c["status"] == "True"),
    );
    let hook = s.hook(&ns, name);
    let breaker = &hook["status"]["breaker"];
    assert_eq!(breaker["state"], "Open", "{hook}");
    let open = breaker["open"].as_array().expect("open tenants");
    assert_eq!(open.len(), 1, "{breaker}");
    assert_eq!(open[0]["tenant"], "acme");
    assert_eq!(open[0]["failClosed"], true);
    assert!(
        breaker["reason"]
            .as_str()
            .is_some_and(|r| r.contains("in a row")),
        "why: {breaker}"
    );
    assert_eq!(breaker["generation"], 1);
    s.wait(Duration::from_secs(10), "a CircuitOpen Event", || {
        let out = s.cp.kubectl(&[
            "-n",
            &ns,
            "get",
            "events",
            "--field-selector",
            &format!("involvedObject.name={name}"),
            "-o",
            "json",
        ]);
        let v: Value = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
        v["items"].as_array().is_some_and(|items| {
            items
                .iter()
                .any(|e| e["reason"] == "CircuitOpen" && e["type"] == "Warning")
        })
    });

    // The reset annotation closes it; spec and generation untouched.
    s.cp.kubectl_ok(&[
        "-n",
        &ns,
        "annotate",
        "--overwrite",
        "agenthook",
        name,
        "agenthooks.io/reset-breaker=first-reset",
    ]);
    s.wait(
        Duration::from_secs(15),
        "CircuitOpen=False after reset",
        || condition(&s.hook(&ns, name), "CircuitOpen").is_some_and(|c| c["status"] == "False"),
    );
    // Every dispatcher follows within one sync (the status is written after the publish);
    // one event each, so these faults cannot add up to a new trip.
    std::thread::sleep(Duration::from_millis(500));
    for d in &s.ds {
        let (_, body) = d.dispatch(&event_for(name, "acme"));
        assert_eq!(
            body["hooks"][0]["errorKind"], "bad_decision",
            "{}: {body}",
            d.id
        );
    }
    let hook = s.hook(&ns, name);
    assert_eq!(hook["metadata"]["generation"], 1, "something wrote spec");
    assert_eq!(hook["spec"], spec_before, "something wrote spec");
    assert_eq!(hook["status"]["breaker"]["state"], "Closed", "{hook}");
    let managers: Vec<String> = hook["metadata"]["managedFields"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["fieldsV1"]["f:spec"].is_object())
        .map(|m| m["manager"].as_str().unwrap_or_default().to_string())
        .collect();
    assert!(
        managers
            .iter()
            .all(|m| !m.starts_with("agenthooks-operator")),
        "spec written by {managers:?}"
    );
}

/// The snapshot version the operator publishes now (`GET /v1/dispatchers` on the sync port).
fn operator_version(s: &Stack) -> i64 {
    use agenthooks_e2e::stack::http_get_with;
    let (code, body) = http_get_with(
        &format!("{}/v1/dispatchers", s.operator.sync),
        &["-H", &s.ds[0].identity.header()],
    );
    assert_eq!(code, 200, "{body}");
    let v: Value = serde_json::from_str(&body).unwrap_or(Value::Null);
    v["version"]
        .as_i64()
        .unwrap_or_else(|| panic!("no version: {body}"))
}

/// Waits until every dispatcher serves the operator's current snapshot (or a newer one),
/// without sending an event (an event past the half-open time would be a probe).
fn wait_all_synced(s: &Stack, what: &str) {
    let want = operator_version(s);
    s.wait(Duration::from_secs(10), what, || {
        s.ds.iter().all(|d| {
            let (_, body) = http_get(&format!("{}/v1/hooks", d.url));
            serde_json::from_str::<Value>(&body)
                .ok()
                .and_then(|v| v["version"].as_i64())
                .is_some_and(|v| v >= want)
        })
    });
}

/// Whether the hook has an Event of `reason` and `type_` (`Warning`, `Normal`).
fn has_event(s: &Stack, ns: &str, name: &str, reason: &str, type_: &str) -> bool {
    let out = s.cp.kubectl(&[
        "-n",
        ns,
        "get",
        "events",
        "--field-selector",
        &format!("involvedObject.name={name}"),
        "-o",
        "json",
    ]);
    let v: Value = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
    v["items"].as_array().is_some_and(|items| {
        items
            .iter()
            .any(|e| e["reason"] == reason && e["type"] == type_)
    })
}

fn closes(d: &DispatcherProc) -> f64 {
    metric(&d.metrics(), "agenthooks_breaker_closes_total", "")
}

/// CONTRACT §6.2–6.4 and the cases "a global http guard; tenant A sends inputs that make its
/// endpoint answer 500 five times" and "the guard's endpoint recovers": A's five faults,
/// spread over the three dispatchers, open A's breaker everywhere while B still runs the
/// handler; once the endpoint answers again a half-open probe, 30 s after the trip, runs
/// the handler on one dispatcher and closes A's breaker on all three, with no one
/// resetting anything.
#[test]
fn a_global_guards_endpoint_failing_for_one_tenant_opens_its_breaker_and_a_probe_closes_it_after_recovery()
 {
    let s = stack();
    let (url, endpoint) = switchable_hook_server(500, json!({"error": "policy service down"}));
    let name = "recovering-guard";
    let ns = s.master.clone();
    s.cp.apply_yaml(&http_hook(&ns, name, &url, "  scope: global\n"));
    let key = format!("{ns}/{name}");
    s.wait(Duration::from_secs(60), "hook served by all three", || {
        s.ds.iter().all(|d| d.served_generation(&key) == Some(1))
    });
    // Tenants of this test only (other tests leave hooks of common tenants behind).
    let (a, b) = (unique_name("initech"), unique_name("umbrella"));
    let (a, b) = (a.as_str(), b.as_str());

    // Five faults of tenant A, spread 2/2/1 over the dispatchers (none trips locally);
    // each 500 is retried once after 1 s, so each event is one fault and two requests.
    for i in 0..5 {
        let d = &s.ds[i % 3];
        let (code, body) = d.dispatch(&event_for(name, a));
        assert_eq!(code, 200, "{body}");
        assert_eq!(
            (&body["decision"], &body["hooks"][0]["errorKind"]),
            (&json!("block"), &json!("http_5xx")),
            "fault {i} on {}: an error fails closed: {body}",
            d.id
        );
    }
    let fifth = Instant::now();
    assert_eq!(endpoint.hits(), 10, "five runs, each retried once");

    s.wait(
        Duration::from_secs(15),
        "CircuitOpen=True in status",
        || condition(&s.hook(&ns, name), "CircuitOpen").is_some_and(|c| c["status"] == "True"),
    );
    // The operator publishes the trip before it writes the status.
    wait_all_synced(
        s,
        "every dispatcher holds the snapshot with A's open breaker",
    );
    for d in &s.ds {
        let (_, body) = d.dispatch(&event_for(name, a));
        assert_eq!(
            (
                &body["decision"],
                &body["reason"],
                &body["hooks"][0]["errorKind"]
            ),
            (
                &json!("block"),
                &json!("CircuitOpen"),
                &json!("circuit_open")
            ),
            "{}: {body}",
            d.id
        );
        assert_eq!(d.served_generation(&key), Some(1), "the hook stays served");
    }
    assert_eq!(
        endpoint.hits(),
        10,
        "an open breaker does not call the handler"
    );
    let hook = s.hook(&ns, name);
    let breaker = &hook["status"]["breaker"];
    assert_eq!(breaker["state"], "Open", "{hook}");
    let open = breaker["open"].as_array().expect("open tenants");
    assert_eq!(open.len(), 1, "{breaker}");
    assert_eq!(
        (&open[0]["tenant"], &open[0]["failClosed"]),
        (&json!(a), &json!(true))
    );
    s.wait(
        Duration::from_secs(10),
        "a CircuitOpen Warning Event",
        || has_event(s, &ns, name, "CircuitOpen", "Warning"),
    );

    // Tenant B's events still run the handler, on every dispatcher (it still fails: 500).
    for d in &s.ds {
        let (_, body) = d.dispatch(&event_for(name, b));
        assert_eq!(
            body["hooks"][0]["errorKind"], "http_5xx",
            "{}: B runs the handler: {body}",
            d.id
        );
    }
    assert_eq!(endpoint.hits(), 16, "three runs of B, each retried once");
    let closes_before: Vec<f64> = s.ds.iter().map(closes).collect();

    // The endpoint recovers; nobody resets anything. A's events on one dispatcher are
    // refused until the half-open time, 30 s after the trip; then one runs the handler.
    assert!(
        fifth.elapsed() < Duration::from_secs(25),
        "too slow to recover before the half-open time: {:?}",
        fifth.elapsed()
    );
    endpoint.set(200, json!({"decision": "allow"}));
    let deadline = fifth + Duration::from_secs(40);
    let (probe_after, probe) = loop {
        let (_, body) = s.ds[0].dispatch(&event_for(name, a));
        if body["hooks"][0]["errorKind"] != "circuit_open" {
            break (fifth.elapsed(), body);
        }
        assert_eq!(
            (&body["decision"], &body["reason"]),
            (&json!("block"), &json!("CircuitOpen")),
            "{body}"
        );
        assert!(
            Instant::now() < deadline,
            "no half-open probe within 40 s of the trip\n{}",
            s.tails()
        );
        std::thread::sleep(Duration::from_millis(200));
    };
    eprintln!("trip -> half-open probe ran the handler after {probe_after:?}");
    assert!(
        probe_after >= Duration::from_secs(29),
        "the probe ran before the half-open time: {probe_after:?}"
    );
    assert_eq!(probe["decision"], "allow", "the probe's answer: {probe}");
    assert!(probe["hooks"][0]["errorKind"].is_null(), "{probe}");
    assert_eq!(endpoint.hits(), 17, "one probe, one request");

    // The probe's answer closes A's breaker everywhere: status, condition, Event.
    s.wait(Duration::from_secs(15), "status.breaker Closed", || {
        let hook = s.hook(&ns, name);
        hook["status"]["breaker"]["state"] == "Closed"
            && condition(&hook, "CircuitOpen")
                .is_some_and(|c| c["status"] == "False" && c["reason"] == "BreakerClosed")
    });
    let hook = s.hook(&ns, name);
    assert!(
        hook["status"]["breaker"]["open"]
            .as_array()
            .is_none_or(|o| o.is_empty()),
        "{hook}"
    );
    assert_eq!(hook["metadata"]["generation"], 1, "something wrote spec");
    s.wait(
        Duration::from_secs(10),
        "a CircuitClosed Normal Event",
        || has_event(s, &ns, name, "CircuitClosed", "Normal"),
    );
    // Closed on the other dispatchers by the snapshot, not by probes of their own: their
    // next A event runs the handler as a closed breaker's run (no close counted there).
    wait_all_synced(s, "every dispatcher holds the snapshot without A's breaker");
    for d in s.ds.iter().skip(1).chain(s.ds.iter().take(1)) {
        let (_, body) = d.dispatch(&event_for(name, a));
        assert_eq!(body["decision"], "allow", "{}: {body}", d.id);
        assert!(body["hooks"][0]["errorKind"].is_null(), "{}: {body}", d.id);
    }
    assert_eq!(
        endpoint.hits(),
        20,
        "every dispatcher ran the handler for A"
    );
    let closed_by_probe: Vec<f64> =
        s.ds.iter()
            .zip(&closes_before)
            .map(|(d, before)| closes(d) - before)
            .collect();
    assert_eq!(
        closed_by_probe,
        [1.0, 0.0, 0.0],
        "one probe closed it on the first dispatcher; the others followed the snapshot"
    );
    let (_, body) = s.ds[1].dispatch(&event_for(name, b));
    assert_eq!(body["decision"], "allow", "B: {body}");
    assert_eq!(endpoint.hits(), 21);
}

// ---- 2. TenantHookBudget status -----------------------------------------------------------

fn budget_yaml(ns: &str, name: &str, spec: &str) -> String {
    format!(
        "apiVersion: agenthooks.io/v1alpha1\nkind: TenantHookBudget\nmetadata: {{name: {name}, namespace: {ns}}}\nspec: {spec}\n"
    )
}

fn budget(s: &Stack, ns: &str, name: &str) -> Value {
    s.cp.kubectl_json(&["-n", ns, "get", "tenanthookbudget", name])
}

fn this_month() -> String {
    let out = Command::new("date")
        .args(["-u", "+%Y-%m"])
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

#[test]
fn a_budget_shows_period_used_remaining_and_state_and_rolls_over() {
    let s = stack();
    let ns = tenant_namespace(s, "columns");
    s.cp.apply_yaml(&budget_yaml(&ns, "default-size", "{}"));
    s.wait(Duration::from_secs(20), "budget status", || {
        budget(s, &ns, "default-size")["status"]["state"] == "Ok"
    });
    let b = budget(s, &ns, "default-size");
    assert_eq!(b["spec"]["monthlyTokens"], 1_000_000, "default total");
    assert_eq!(b["status"]["period"], this_month());
    assert_eq!(b["status"]["used"], 0);
    assert_eq!(b["status"]["remaining"], 1_000_000);

    // Printer columns, as a user sees them.
    let table = s.cp.kubectl_ok(&["-n", &ns, "get", "tenanthookbudgets"]);
    let header: Vec<&str> = table.lines().next().unwrap().split_whitespace().collect();
    assert_eq!(
        header,
        ["NAME", "PERIOD", "USED", "REMAINING", "STATE", "AGE"],
        "{table}"
    );
    let row: Vec<&str> = table.lines().nth(1).unwrap().split_whitespace().collect();
    assert_eq!(
        &row[..5],
        ["default-size", &this_month(), "0", "1000000", "Ok"]
    );

    // A past period with spending rolls over to this month, keeping the total.
    let old = json!({"status": {"period": "2020-01", "used": 900_000, "remaining": 100_000, "state": "Warning"}});
    s.cp.kubectl_ok(&[
        "-n",
        &ns,
        "patch",
        "tenanthookbudget",
        "default-size",
        "--subresource=status",
        "--type=merge",
        "-p",
        &old.to_string(),
    ]);
    // Any change to the budget makes the operator look again; bump the spec to be sure.
    s.cp.apply_yaml(&budget_yaml(
        &ns,
        "default-size",
        "{monthlyTokens: 1000000}",
    ));
    s.wait(Duration::from_secs(20), "rolled over", || {
        let st = &budget(s, &ns, "default-size")["status"];
        st["period"] == this_month() && st["used"] == 0 && st["remaining"] == 1_000_000
    });
}

// ---- 3. budget accounting across dispatcher processes ------------------------------------

/// Runs `budget-load` as three (or `n`) processes at once; returns their JSON lines.
fn budget_load(s: &Stack, n: usize, tenant: &str, args: &[&str]) -> Vec<Value> {
    let children: Vec<_> = (0..n)
        .map(|i| {
            // each load process is a dispatcher of its own (its id read from its token)
            let me =
                agenthooks_e2e::stack::SyncIdentity::mint(s.cp, &s.master, &format!("load-{i}"));
            let token = me.token_file(&s.logs);
            let mut cmd = Command::new(bin("agenthooks-dispatcher"));
            cmd.args([
                "budget-load",
                "--operator-url",
                &s.operator.sync,
                "--tenant",
                tenant,
                "--operator-token-file",
                token.to_str().unwrap(),
            ])
            .args(agenthooks_e2e::stack::test_pki().operator_ca_flags())
            .args(args);
            cmd.stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    children
        .into_iter()
        .map(|c| {
            let out = c.wait_with_output().unwrap();
            assert!(
                out.status.success(),
                "budget-load failed: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            let text = String::from_utf8_lossy(&out.stdout);
            serde_json::from_str(text.lines().last().unwrap_or(""))
                .unwrap_or_else(|e| panic!("budget-load output ({e}): {text}"))
        })
        .collect()
}

fn total(outs: &[Value], field: &str) -> i64 {
    outs.iter().map(|o| o[field].as_i64().unwrap_or(0)).sum()
}

#[test]
fn forty_concurrent_reservations_of_100_on_1000_admit_exactly_ten() {
    let s = stack();
    let ns = tenant_namespace(s, "forty");
    s.cp.apply_yaml(&budget_yaml(&ns, "b", "{monthlyTokens: 1000}"));
    s.wait(Duration::from_secs(20), "budget Ok", || {
        budget(s, &ns, "b")["status"]["state"] == "Ok"
    });
    // Two dispatcher processes, 20 calls each, all in flight at once (held 3 s).
    let outs = budget_load(
        s,
        2,
        "forty",
        &[
            "--calls",
            "20",
            "--concurrency",
            "20",
            "--reserve",
            "100",
            "--settle",
            "100",
            "--hold-ms",
            "3000",
        ],
    );
    assert_eq!(total(&outs, "granted"), 10, "{outs:?}");
    assert_eq!(total(&outs, "refused"), 30, "{outs:?}");
    for o in &outs {
        let reasons = o["refusedReasons"].as_object().unwrap();
        assert!(
            reasons.keys().all(|r| r == "BudgetExhausted"),
            "refusals carry a budget reason: {o}"
        );
    }
    s.wait(Duration::from_secs(10), "used 1000, Exhausted", || {
        let st = &budget(s, &ns, "b")["status"];
        st["used"] == 1000 && st["remaining"] == 0 && st["state"] == "Exhausted"
    });
}

#[test]
fn three_dispatchers_spending_at_once_record_exactly_what_they_settled() {
    let s = stack();
    let ns = tenant_namespace(s, "spend");
    s.cp.apply_yaml(&budget_yaml(&ns, "b", "{monthlyTokens: 20000}"));
    s.wait(Duration::from_secs(20), "budget Ok", || {
        budget(s, &ns, "b")["status"]["state"] == "Ok"
    });
    // Reserve 100, settle 37: the budget frees as calls settle, so far more than 200
    // calls fit; the spending runs until the budget is nearly gone.
    let outs = budget_load(
        s,
        3,
        "spend",
        &[
            "--calls",
            "250",
            "--concurrency",
            "8",
            "--reserve",
            "100",
            "--settle",
            "37",
            "--hold-ms",
            "5",
        ],
    );
    let settled = total(&outs, "settledTokens");
    assert!(settled > 0, "{outs:?}");
    assert_eq!(total(&outs, "errors"), 0, "{outs:?}");
    s.wait(Duration::from_secs(10), "used == sum of settled", || {
        budget(s, &ns, "b")["status"]["used"] == settled
    });
    let st = &budget(s, &ns, "b")["status"];
    assert!(st["remaining"].as_i64().unwrap() >= 0);
    assert!(settled <= 20_000, "overspent: {settled}");
    eprintln!(
        "three dispatchers settled {settled} tokens; status.used = {}",
        st["used"]
    );
}

// ---- 4. status.executions merged across dispatchers --------------------------------------

#[test]
fn executions_from_three_dispatchers_add_up_exactly() {
    let s = stack();
    let tenant = unique_name("acme");
    let ns = tenant_namespace(s, &tenant);
    let (url, hits) = hook_server(json!({"decision": "allow"}));
    let name = "counted";
    s.cp.apply_yaml(&http_hook(&ns, name, &url, ""));
    let key = format!("{ns}/{name}");
    s.wait(Duration::from_secs(60), "hook served by all three", || {
        s.ds.iter().all(|d| d.served_generation(&key) == Some(1))
    });
    let writes_before = metric(
        &http_get(&format!("{}/metrics", s.operator.admin)).1,
        "agenthooks_operator_status_writes_total",
        "kind=\"executions\",outcome=\"written\"",
    );
    let started = Instant::now();
    // 3 × 40 decisions, the three dispatchers at once.
    std::thread::scope(|scope| {
        let tenant = tenant.as_str();
        for d in &s.ds {
            scope.spawn(move || {
                for _ in 0..40 {
                    let (code, body) = d.dispatch(&event_for(name, tenant));
                    assert_eq!(code, 200);
                    assert_eq!(body["decision"], "allow", "{body}");
                }
            });
        }
    });
    assert_eq!(hits.load(Ordering::SeqCst), 120);
    s.wait(Duration::from_secs(20), "executions.allow == 120", || {
        s.hook(&ns, name)["status"]["executions"]["allow"] == 120
    });
    let elapsed = started.elapsed().as_secs_f64();
    let ex = &s.hook(&ns, name)["status"]["executions"];
    assert_eq!(ex["block"].as_i64().unwrap_or(0), 0);
    assert_eq!(ex["lastDecision"], "allow");
    assert!(
        ex["lastExecutionTime"]
            .as_str()
            .is_some_and(|t| !t.is_empty())
    );
    let writes = metric(
        &http_get(&format!("{}/metrics", s.operator.admin)).1,
        "agenthooks_operator_status_writes_total",
        "kind=\"executions\",outcome=\"written\"",
    ) - writes_before;
    // At most one write per hook per second (plus the one in flight), whatever the rate;
    // other tests' hooks may write meanwhile, so this bounds the sum loosely.
    eprintln!("120 decisions over {elapsed:.1} s -> {writes} execution status writes (all hooks)");
    assert!(writes >= 1.0);
}

// ---- the sync port is authenticated --------------------------------------------------------

/// Only dispatchers with a verified token may call the operator's sync port: without one
/// (or with the old seal-key-derived kind) a forged trip, a settle or a snapshot read is
/// refused (401) and changes nothing.
#[test]
fn the_sync_port_refuses_callers_without_the_token() {
    use agenthooks_e2e::stack::{http_get_with, http_post_with};
    let s = stack();
    let tenant = unique_name("acme");
    let ns = tenant_namespace(s, &tenant);
    let (url, _) = hook_server(json!({"decision": "block"}));
    let name = "guarded";
    s.cp.apply_yaml(&http_hook(&ns, name, &url, ""));
    let key = format!("{ns}/{name}");
    s.wait(Duration::from_secs(60), "hook served", || {
        s.ds.iter().all(|d| d.served_generation(&key) == Some(1))
    });
    let hook = s.hook(&ns, name);
    let trip = json!({"dispatcher": "mallory", "reportId": "forged-1", "trips": [{
        "uid": hook["metadata"]["uid"], "namespace": ns, "name": name, "generation": 1,
        "trippedAt": "2026-01-01T00:00:00Z", "reason": "never ran"}]});
    let sync = &s.operator.sync;
    let wrong =
        "authorization: Bearer 0000000000000000000000000000000000000000000000000000000000000000";
    for extra in [&[][..], &["-H", wrong][..]] {
        let (code, body) = http_post_with(&format!("{sync}/v1/report"), &trip, extra);
        assert_eq!(code, 401, "forged trip: {body}");
        let (code, _) = http_get_with(
            &format!("{sync}/v1/snapshot?dispatcher=mallory&timeoutSeconds=0"),
            extra,
        );
        assert_eq!(code, 401, "snapshot read without the token");
        let settle = json!({"dispatcher": "mallory", "tenant": tenant, "reservationId": "0123456789abcdef0123456789abcdef", "tokens": 1_000_000_000});
        let (code, _) = http_post_with(&format!("{sync}/v1/budget/settle"), &settle, extra);
        assert_eq!(code, 401, "settle without the token");
    }
    std::thread::sleep(Duration::from_millis(500));
    assert!(
        s.ds.iter().all(|d| d.served_generation(&key) == Some(1)),
        "a refused forged trip took the hook out"
    );
    // A dispatcher's own token is accepted.
    let (code, body) = http_get_with(
        &format!("{sync}/v1/dispatchers"),
        &["-H", &s.ds[0].identity.header()],
    );
    assert_eq!(code, 200, "{body}");
}
