//! `GET /metrics` of the real `agenthooks-dispatcher` binary after real hook runs: every
//! dispatcher-side family of CONTRACT §8.2 is there with the values the runs imply
//! (executions by decision/handler/event, duration histograms, breaker trips, budget
//! remaining, snapshot version and sync lag). The audit queue families are covered
//! with the audit writer.
//!
//! Standalone on a hooks file (command hooks, one http hook served here); synced against
//! [`operator_standin`] (our own operator protocol, not Kubernetes) for the snapshot
//! version and sync lag.

mod api_harness;
mod operator_standin;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use api_harness::{Proc, command, serve};
use serde_json::{Value, json};

/// A series' labels, by name.
type Labels = BTreeMap<String, String>;

/// Parsed exposition text: `name` → [(labels, value)].
struct Scrape(BTreeMap<String, Vec<(Labels, f64)>>);

impl Scrape {
    fn parse(text: &str) -> Scrape {
        let mut out: BTreeMap<String, Vec<_>> = BTreeMap::new();
        for line in text
            .lines()
            .filter(|l| !l.starts_with('#') && !l.is_empty())
        {
            let (series, value) = line.rsplit_once(' ').unwrap();
            let (name, labels) = match series.split_once('{') {
                Some((n, rest)) => (n, rest.trim_end_matches('}')),
                None => (series, ""),
            };
            let labels = labels
                .split(',')
                .filter(|kv| !kv.is_empty())
                .map(|kv| {
                    let (k, v) = kv.split_once('=').unwrap();
                    (k.to_string(), v.trim_matches('"').to_string())
                })
                .collect();
            out.entry(name.to_string())
                .or_default()
                .push((labels, value.parse().unwrap()));
        }
        Scrape(out)
    }

    /// The value of the series `name` with exactly `labels`; `None` when absent.
    fn get(&self, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
        let want: Labels = labels
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        self.0
            .get(name)?
            .iter()
            .find(|(l, _)| *l == want)
            .map(|(_, v)| *v)
    }

    fn value(&self, name: &str, labels: &[(&str, &str)]) -> f64 {
        self.get(name, labels)
            .unwrap_or_else(|| panic!("no series {name}{labels:?} in {:#?}", self.0.get(name)))
    }

    /// Sum over every series of `name`.
    fn sum(&self, name: &str) -> f64 {
        self.0
            .get(name)
            .map(|v| v.iter().map(|(_, x)| x).sum())
            .unwrap_or(0.0)
    }
}

async fn scrape(c: &reqwest::Client, base: &str) -> Scrape {
    let r = c.get(format!("{base}/metrics")).send().await.unwrap();
    assert_eq!(r.status(), 200);
    Scrape::parse(&r.text().await.unwrap())
}

async fn dispatch(c: &reqwest::Client, base: &str, event: Value) -> Value {
    let r = c
        .post(format!("{base}/v1/dispatch"))
        .body(event.to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    serde_json::from_slice(&r.bytes().await.unwrap()).unwrap()
}

/// The binary with `args` in `dir`, listening and ready.
async fn serve_in(dir: &std::path::Path, args: &[&str]) -> (Proc, String) {
    let mut cmd = command(dir);
    cmd.args(args);
    serve(cmd).await
}

const HOOKS: &str = r#"apiVersion: agenthooks.io/v1alpha1
kind: AgentHook
metadata: {name: deny, namespace: tenant-acme}
spec:
  event: pre_tool_use
  matcher: '^exec$'
  handler: {type: command, command: {command: 'exit 2'}}
---
apiVersion: agenthooks.io/v1alpha1
kind: AgentHook
metadata: {name: broken, namespace: tenant-acme}
spec:
  event: user_prompt_submit
  handler: {type: command, command: {command: 'exit 7'}}
---
apiVersion: agenthooks.io/v1alpha1
kind: AgentHook
metadata: {name: slow, namespace: tenant-acme}
spec:
  event: subagent_start
  timeoutMs: 100
  handler: {type: command, command: {command: 'sleep 5'}}
---
apiVersion: agenthooks.io/v1alpha1
kind: AgentHook
metadata: {name: web, namespace: tenant-acme}
spec:
  event: post_tool_use
  handler: {type: http, http: {url: 'HOOK_URL'}}
---
apiVersion: agenthooks.io/v1alpha1
kind: TenantHookBudget
metadata: {name: monthly, namespace: tenant-acme}
spec: {monthlyTokens: 4000}
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn standalone_exports_executions_durations_trips_and_budget_remaining() {
    // The http hook's endpoint: answers allow.
    let app = axum::Router::new().route(
        "/hook",
        axum::routing::post(|| async { axum::Json(json!({"decision": "allow"})) }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let hook_url = format!("http://{}/hook", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });

    let dir = tempfile::tempdir().unwrap();
    let hooks = dir.path().join("hooks.yaml");
    std::fs::write(&hooks, HOOKS.replace("HOOK_URL", &hook_url)).unwrap();
    let (_proc, base) = serve_in(
        dir.path(),
        &[
            "--hooks",
            hooks.to_str().unwrap(),
            "--http-allow-cidr",
            "127.0.0.1/32",
        ],
    )
    .await;
    let c = api_harness::client();

    // Before any run: the budget is whole, nothing executed.
    let m = scrape(&c, &base).await;
    assert_eq!(
        m.value(
            "agenthooks_budget_remaining_tokens",
            &[("tenant", "tenant-acme")]
        ),
        4000.0
    );
    assert_eq!(m.sum("agenthooks_executions_total"), 0.0);
    assert_eq!(m.value("agenthooks_hooks_loaded", &[]), 4.0);
    let version = {
        let r = c.get(format!("{base}/readyz")).send().await.unwrap();
        let v: Value = serde_json::from_slice(&r.bytes().await.unwrap()).unwrap();
        v["version"].as_f64().unwrap()
    };
    assert_eq!(m.value("agenthooks_snapshot_version", &[]), version);

    let ev = |event: &str, extra: Value| {
        let mut e = json!({"event": event, "tenant_id": "tenant-acme", "tool_name": "exec", "tool_input": {}});
        e.as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        e
    };
    // Six blocks in a row never trip `deny` (CONTRACT §6.1: a policy's block is the hook
    // working; only faults count): the sixth still runs it.
    for _ in 0..6 {
        let d = dispatch(&c, &base, ev("pre_tool_use", json!({}))).await;
        assert_eq!(d["decision"], "block", "{d}");
        assert_eq!(d["hooks"][0]["decision"], "block", "{d}");
    }
    let broken = dispatch(&c, &base, ev("user_prompt_submit", json!({}))).await;
    assert_eq!(broken["hooks"][0]["decision"], "error", "{broken}");
    let error_kind = broken["hooks"][0]["errorKind"]
        .as_str()
        .unwrap()
        .to_string();
    let slow = dispatch(&c, &base, ev("subagent_start", json!({}))).await;
    assert_eq!(slow["hooks"][0]["decision"], "timeout", "{slow}");
    let deep = dispatch(&c, &base, ev("pre_tool_use", json!({"depth": 4}))).await;
    assert_eq!(deep["reason"], "LoopDepthExceeded", "{deep}");
    // Non-blocking: answered at once, the http hook runs in the background.
    dispatch(&c, &base, ev("post_tool_use", json!({}))).await;
    let mut m = scrape(&c, &base).await;
    for _ in 0..200 {
        if m.sum("agenthooks_executions_total") >= 9.0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
        m = scrape(&c, &base).await;
    }

    let exec = |decision: &str, handler: &str, event: &str| {
        m.value(
            "agenthooks_executions_total",
            &[
                ("decision", decision),
                ("handler", handler),
                ("event", event),
            ],
        )
    };
    assert_eq!(exec("block", "command", "pre_tool_use"), 6.0);
    assert_eq!(exec("error", "command", "user_prompt_submit"), 1.0);
    assert_eq!(exec("timeout", "command", "subagent_start"), 1.0);
    assert_eq!(exec("allow", "http", "post_tool_use"), 1.0);
    assert_eq!(exec("allow", "command", "pre_tool_use"), 0.0);
    assert_eq!(m.sum("agenthooks_executions_total"), 9.0);

    // Duration histograms: one observation per run (by handler), per blocking decision
    // (by event); the timeout took at least its 100 ms.
    assert_eq!(
        m.value(
            "agenthooks_hook_duration_seconds_count",
            &[("handler", "command")]
        ),
        8.0
    );
    assert_eq!(
        m.value(
            "agenthooks_hook_duration_seconds_count",
            &[("handler", "http")]
        ),
        1.0
    );
    assert!(
        m.value(
            "agenthooks_hook_duration_seconds_sum",
            &[("handler", "command")]
        ) >= 0.1
    );
    assert_eq!(
        m.value(
            "agenthooks_hook_duration_seconds_bucket",
            &[("handler", "command"), ("le", "+Inf")]
        ),
        8.0
    );
    let decisions = |event: &str| {
        m.value(
            "agenthooks_decision_duration_seconds_count",
            &[("event", event)],
        )
    };
    assert_eq!(decisions("pre_tool_use"), 6.0);
    assert_eq!(decisions("user_prompt_submit"), 1.0);
    assert_eq!(decisions("subagent_start"), 1.0);

    assert_eq!(m.value("agenthooks_breaker_trips_total", &[]), 0.0);
    assert_eq!(m.value("agenthooks_breaker_closes_total", &[]), 0.0);
    assert_eq!(m.value("agenthooks_loop_depth_exceeded_total", &[]), 1.0);
    assert_eq!(
        m.value("agenthooks_handler_errors_total", &[("kind", &error_kind)]),
        1.0
    );
    // No prompt hook spent tokens: the budget is still whole.
    assert_eq!(
        m.value(
            "agenthooks_budget_remaining_tokens",
            &[("tenant", "tenant-acme")]
        ),
        4000.0
    );
    // Standalone: no sync, the lag histogram is there and empty.
    assert_eq!(m.value("agenthooks_sync_lag_seconds_count", &[]), 0.0);
    assert_eq!(m.value("agenthooks_sync_errors_total", &[]), 0.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn synced_exports_the_snapshot_version_and_sync_lag() {
    let c = operator_standin::client();
    let state = Arc::new(operator_standin::StandInState::default());
    state.leader.store(true, Ordering::SeqCst);
    *state.snapshot.lock().unwrap() = Some(operator_standin::snapshot("e1", 7, "synced"));
    let op = operator_standin::StandIn::start_on("127.0.0.1:0".parse().unwrap(), state).await;
    let dead = operator_standin::dead_url().await;
    let dir = tempfile::tempdir().unwrap();
    let (_proc, base) = serve_in(
        dir.path(),
        &[
            "--operator-url",
            &format!("{dead},{}", op.url),
            "--dispatcher-id",
            "metrics-1",
        ],
    )
    .await;
    let d = dispatch(
        &c,
        &base,
        json!({"event": "pre_tool_use", "tenant_id": "acme", "tool_name": "exec", "tool_input": {}}),
    )
    .await;
    assert_eq!(d["decision"], "allow", "{d}");

    let m = scrape(&c, &base).await;
    assert_eq!(m.value("agenthooks_snapshot_version", &[]), 7.0);
    assert_eq!(m.value("agenthooks_hooks_loaded", &[]), 1.0);
    // One snapshot brought changes: one lag observation, well under a second here.
    assert_eq!(m.value("agenthooks_sync_lag_seconds_count", &[]), 1.0);
    assert!(m.value("agenthooks_sync_lag_seconds_sum", &[]) < 1.0);
    assert_eq!(
        m.value(
            "agenthooks_executions_total",
            &[
                ("decision", "allow"),
                ("handler", "command"),
                ("event", "pre_tool_use")
            ]
        ),
        1.0
    );
    // Budgets live on the operator in synced mode: it exports the remaining tokens.
    assert_eq!(
        m.get("agenthooks_budget_remaining_tokens", &[("tenant", "acme")]),
        None
    );

    // A new snapshot version: the gauge follows, and the lag is observed again.
    *op.state.snapshot.lock().unwrap() = Some(operator_standin::snapshot("e1", 8, "again"));
    let mut m = scrape(&c, &base).await;
    for _ in 0..400 {
        if m.value("agenthooks_snapshot_version", &[]) == 8.0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
        m = scrape(&c, &base).await;
    }
    assert_eq!(m.value("agenthooks_snapshot_version", &[]), 8.0);
    assert_eq!(m.value("agenthooks_sync_lag_seconds_count", &[]), 2.0);
}
