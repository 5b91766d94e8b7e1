//! Issue 3's figures, on the real API server with one operator and three dispatcher
//! processes (release builds):
//!
//! 1. **Status writes per second per hook under a steady 2,000 decisions/s** (first, so
//!    no other hook's counts are written meanwhile). Paced
//!    load over the three dispatchers for `AGENTHOOKS_BENCH_SECS` (default 10) on one
//!    matching HTTP hook, and the operator's
//!    `agenthooks_operator_status_writes_total{kind="executions",outcome="written"}`
//!    before and after; then `status.executions.allow` must equal the decisions sent
//!    (no count lost).
//! 2. **From a breaker trip to the open breaker seen by every dispatcher**, side by side
//!    with the baseline of the same run: from `kubectl apply` of a new hook to every
//!    dispatcher serving it (polling `GET /v1/hooks` on the three every 2 ms). The hooks'
//!    endpoint answers an unusable decision (`{"decision":"maybe"}`): every run is a
//!    fault of the handler (`bad_decision`, no retry), never a policy's block, which never
//!    counts (CONTRACT §6.1). A tripped hook stays served; what reaches the dispatchers is
//!    the open breaker of tenant `acme` in the snapshot. It is read without sending an
//!    event (an event on a dispatcher not yet open would be one more fault, and could trip
//!    it locally): a dry run (`POST /v1/test`) of the hook on an event its matcher skips
//!    runs no handler and reports `breakerOpen` for the event's tenant; polled every 2 ms
//!    on the three. Then each dispatcher's next `acme` event must answer `errorKind:
//!    circuit_open` without calling the handler. Trips are measured two ways: five faults
//!    on one dispatcher (its local breaker trips and reports at once) and five spread 2/2/1
//!    over the three (only the operator's merged window sees five in a row; the
//!    dispatchers report runs of faults at once, coalesced).
//!
//! Run: `make bench` (builds the release binaries first), or
//! `cargo build --release --bins && cargo bench -p agenthooks-e2e --bench safeguards`.
//! Without `--bench` (e.g. `cargo test --all-targets`) it does nothing.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use agenthooks_e2e::stack::{
    DispatcherProc, Fleet, OperatorProc, hook_server, http_get, log_dir, metric, serves_everywhere,
    until_served,
};
use agenthooks_e2e::{ControlPlane, wait_for};
use serde_json::{Value, json};

const ROUNDS: usize = 5;
/// The operator's `status.executions` writes: the series and its labels.
const EXECUTION_WRITES: (&str, &str) = (
    "agenthooks_operator_status_writes_total",
    "kind=\"executions\",outcome=\"written\"",
);
/// The dispatchers' admin token (`POST /v1/test`).
const ADMIN_TOKEN: &str = "bench-admin-token-0123456789abcdef";

fn http_hook(ns: &str, name: &str, url: &str) -> String {
    format!(
        "apiVersion: agenthooks.io/v1alpha1\nkind: AgentHook\nmetadata: {{name: {name}, namespace: {ns}}}\nspec:\n  event: pre_tool_use\n  matcher: '^{name}$'\n  handler:\n    type: http\n    http: {{url: '{url}'}}\n"
    )
}

fn event(tenant: &str, tool: &str) -> String {
    json!({"event": "pre_tool_use", "tenant_id": tenant, "agent_id": "a1",
           "tool_name": tool, "tool_input": {"cmd": "x"}})
    .to_string()
}

struct Bench {
    cp: &'static ControlPlane,
    ns: String,
    /// The tenant of `ns` (the fleet's own, called `acme` below).
    tenant: String,
    operator: OperatorProc,
    ds: Vec<DispatcherProc>,
    client: reqwest::Client,
}

impl Bench {
    /// The dispatchers' base URLs.
    fn urls(&self) -> Vec<String> {
        self.ds.iter().map(|d| d.url.clone()).collect()
    }

    /// Whether every dispatcher serves `key` (`want`) or none does (`!want`).
    async fn served_everywhere(&self, key: &str, want: bool) -> bool {
        serves_everywhere(&self.client, &self.urls(), key, want).await
    }

    /// Polls until [`Self::served_everywhere`] holds; the time taken.
    async fn until_served(&self, key: &str, want: bool, since: Instant) -> Duration {
        until_served(&self.client, &self.urls(), key, want, since).await
    }

    /// The answer of `POST /v1/dispatch` on dispatcher `d` (Null if none).
    async fn dispatch(&self, d: usize, tool: &str) -> Value {
        let resp = self
            .client
            .post(format!("{}/v1/dispatch", self.ds[d].url))
            .header("content-type", "application/json")
            .body(event(&self.tenant, tool))
            .send()
            .await;
        match resp {
            Ok(r) => match r.bytes().await {
                Ok(b) => serde_json::from_slice(&b).unwrap_or(Value::Null),
                Err(_) => Value::Null,
            },
            Err(_) => Value::Null,
        }
    }

    /// Whether dispatcher `d` has `acme`'s breaker of hook `key` open: a dry run of the hook
    /// on an event its matcher skips (no handler runs, nothing is recorded) reports it.
    async fn breaker_open_on(&self, d: usize, key: &str) -> bool {
        let body = json!({"hook": key, "event": {"event": "pre_tool_use", "tenant_id": self.tenant,
            "agent_id": "a1", "tool_name": "matches-no-hook", "tool_input": {}}});
        let Ok(resp) = self
            .client
            .post(format!("{}/v1/test", self.ds[d].url))
            .header("content-type", "application/json")
            .header("authorization", format!("Bearer {ADMIN_TOKEN}"))
            .body(body.to_string())
            .send()
            .await
        else {
            return false;
        };
        let Ok(b) = resp.bytes().await else {
            return false;
        };
        let v: Value = serde_json::from_slice(&b).unwrap_or(Value::Null);
        assert!(v["ran"] == false, "the dry-run probe ran the handler: {v}");
        v["breakerOpen"] == true
    }

    /// Polls until every dispatcher has `acme`'s breaker of `key` open; the time taken.
    async fn until_open_everywhere(&self, key: &str, since: Instant) -> Duration {
        let deadline = since + Duration::from_secs(30);
        let mut open = [false; 3];
        loop {
            for (d, o) in open.iter_mut().enumerate() {
                if !*o {
                    *o = self.breaker_open_on(d, key).await;
                }
            }
            if open.iter().all(|o| *o) {
                return since.elapsed();
            }
            assert!(
                Instant::now() < deadline,
                "{key}: acme's breaker not open on all 3 within 30 s: {open:?}"
            );
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    }

    fn operator_metric(&self, name: &str, labels: &str) -> f64 {
        metric(
            &http_get(&format!("{}/metrics", self.operator.admin)).1,
            name,
            labels,
        )
    }
}

fn stats(mut v: Vec<Duration>) -> (f64, f64) {
    v.sort();
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    let mean = v.iter().map(|d| ms(*d)).sum::<f64>() / v.len() as f64;
    (mean, ms(v[v.len() / 2]))
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    if !std::env::args().any(|a| a == "--bench") {
        eprintln!("safeguards bench: run with `cargo bench` (make bench); nothing to do here");
        return;
    }
    let _ = rustls::crypto::ring::default_provider().install_default();
    let secs: u64 = std::env::var("AGENTHOOKS_BENCH_SECS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10);
    let rate: u64 = std::env::var("AGENTHOOKS_BENCH_RATE")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(2000);

    // The admin token file is read by the dispatchers at start (POST /v1/test).
    let admin_token = log_dir("ah-bench-admin").join("admin.token");
    std::fs::write(&admin_token, ADMIN_TOKEN).unwrap();
    let fleet = Fleet::start(
        "ah-bench",
        3,
        &[
            "--http-allow-cidr",
            "127.0.0.1/32",
            "--admin-token-file",
            admin_token.to_str().unwrap(),
        ],
    );
    let bench = Bench {
        cp: fleet.cp,
        ns: fleet.tenant_ns,
        tenant: fleet.tenant,
        operator: fleet.operator,
        ds: fleet.dispatchers,
        client: reqwest::Client::builder()
            .pool_max_idle_per_host(64)
            .build()
            .unwrap(),
    };
    eprintln!(
        "nproc: {}",
        std::thread::available_parallelism().map_or(0, |n| n.get())
    );

    // ---- 1. status writes per hook under steady load -----------------------------------
    let (allow_url, hits) = hook_server(json!({"decision": "allow"}));
    let name = "steady";
    let key = format!("{}/{name}", bench.ns);
    let t = Instant::now();
    bench.cp.apply_yaml(&http_hook(&bench.ns, name, &allow_url));
    bench.until_served(&key, true, t).await;
    let writes_before = bench.operator_metric(EXECUTION_WRITES.0, EXECUTION_WRITES.1);
    let sent = Arc::new(AtomicU64::new(0));
    let failed = Arc::new(AtomicU64::new(0));
    let workers = 48u64;
    let per_worker = Duration::from_secs_f64(workers as f64 / rate as f64);
    let started = Instant::now();
    let end = started + Duration::from_secs(secs);
    let bench = Arc::new(bench);
    let mut tasks = Vec::new();
    for w in 0..workers {
        let (bench, sent, failed) = (bench.clone(), sent.clone(), failed.clone());
        tasks.push(tokio::spawn(async move {
            let mut next = started + per_worker.mul_f64(w as f64 / workers as f64);
            let mut i = w as usize;
            while next < end {
                tokio::time::sleep_until(next.into()).await;
                let v = bench.dispatch(i % 3, "steady").await;
                if v["decision"] == "allow" {
                    sent.fetch_add(1, Ordering::Relaxed);
                } else {
                    failed.fetch_add(1, Ordering::Relaxed);
                }
                i += 1;
                next += per_worker;
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let elapsed = started.elapsed().as_secs_f64();
    let sent = sent.load(Ordering::Relaxed);
    let writes_during_load =
        bench.operator_metric(EXECUTION_WRITES.0, EXECUTION_WRITES.1) - writes_before;
    // Wait for the last reports to land, then count.
    let ns = bench.ns.clone();
    let counted = wait_for(Duration::from_secs(30), || {
        bench
            .cp
            .kubectl_json(&["-n", &ns, "get", "agenthook", name])["status"]["executions"]["allow"]
            .as_u64()
            == Some(sent)
    });
    let writes = bench.operator_metric(EXECUTION_WRITES.0, EXECUTION_WRITES.1) - writes_before;
    let writes_elapsed = started.elapsed().as_secs_f64();
    println!("\n## status.executions writes under steady load (1 hook, 3 dispatchers)\n");
    println!(
        "| target decisions/s | achieved decisions/s | decisions | hook calls | status writes during the load | writes/s/hook during the load | writes until every count landed | writes per 1,000 decisions | exact count |"
    );
    println!("|---|---|---|---|---|---|---|---|---|");
    println!(
        "| {rate} | {:.0} | {sent} | {} | {writes_during_load:.0} | {:.2} | {writes:.0} in {writes_elapsed:.1} s | {:.2} | {} |",
        sent as f64 / elapsed,
        hits.load(std::sync::atomic::Ordering::SeqCst),
        writes_during_load / elapsed,
        writes * 1000.0 / sent.max(1) as f64,
        if counted { "yes" } else { "NO" }
    );
    if failed.load(Ordering::Relaxed) > 0 {
        println!(
            "\n{} decisions were not `allow` (errors under load)",
            failed.load(Ordering::Relaxed)
        );
    }

    // ---- 2. trip → open breaker on every dispatcher, against apply → served ------------
    let (fault_url, fault_hits) = hook_server(json!({"decision": "maybe"}));
    let (mut apply, mut local, mut merged) = (Vec::new(), Vec::new(), Vec::new());
    for round in 0..ROUNDS {
        for (kind, spread) in [("local", false), ("merged", true)] {
            let name = format!("trip-{kind}-{round}");
            let key = format!("{}/{name}", bench.ns);
            let t = Instant::now();
            bench
                .cp
                .apply_yaml(&http_hook(&bench.ns, &name, &fault_url));
            apply.push(bench.until_served(&key, true, t).await);
            for i in 0..5 {
                let d = if spread { i % 3 } else { 0 };
                let v = bench.dispatch(d, &name).await;
                assert_eq!(
                    (&v["decision"], &v["hooks"][0]["errorKind"]),
                    (&json!("block"), &json!("bad_decision")),
                    "a fault, failing closed: {v}"
                );
            }
            let t = Instant::now();
            let took = bench.until_open_everywhere(&key, t).await;
            let hits = fault_hits.load(Ordering::SeqCst);
            for d in 0..3 {
                let v = bench.dispatch(d, &name).await;
                assert_eq!(
                    (&v["decision"], &v["reason"], &v["hooks"][0]["errorKind"]),
                    (
                        &json!("block"),
                        &json!("CircuitOpen"),
                        &json!("circuit_open")
                    ),
                    "{kind} round {round}, dispatcher {d}: {v}"
                );
                assert!(
                    bench.served_everywhere(&key, true).await,
                    "the hook stays served"
                );
            }
            assert_eq!(
                fault_hits.load(Ordering::SeqCst),
                hits,
                "an open breaker does not call the handler"
            );
            if spread {
                merged.push(took)
            } else {
                local.push(took)
            }
        }
    }
    let (apply_mean, apply_p50) = stats(apply);
    let (local_mean, local_p50) = stats(local);
    let (merged_mean, merged_p50) = stats(merged);
    println!("\n## Breaker trip → open breaker seen by all 3 dispatchers ({ROUNDS} rounds each)\n");
    println!("| path | mean ms | p50 ms | ratio to apply→served (mean) |");
    println!("|---|---|---|---|");
    println!(
        "| baseline: kubectl apply → served by all 3 | {apply_mean:.1} | {apply_p50:.1} | 1.00 |"
    );
    println!(
        "| 5 faults on one dispatcher (local trip, reported at once) | {local_mean:.1} | {local_p50:.1} | {:.2} |",
        local_mean / apply_mean
    );
    println!(
        "| 5 faults over 3 dispatchers, 2/2/1 (operator's merged window) | {merged_mean:.1} | {merged_p50:.1} | {:.2} |",
        merged_mean / apply_mean
    );
}
