//! Issue 5's audit figures, release binaries, a real PostgreSQL (Debian's package, started
//! by `agenthooks_e2e::postgres::PgServer`) and two standalone dispatchers side by side on
//! the same hooks file (one global http hook that allows at once, served on loopback):
//!
//! - **on**: `--audit-db postgres://...` — every run leaves a `hook_executions` row;
//! - **off**: `--audit-db off`.
//!
//! Four concurrent clients send `pre_tool_use` events in alternating rounds (off, on, off,
//! on; `AGENTHOOKS_BENCH_SECS` per mode, default 10, split over the two rounds) so both
//! modes see the same machine: first as fast as they are answered (saturation), then paced
//! at a steady 2,000 decisions/s. Printed:
//!
//! 1. **Sustained audit rows/s into PostgreSQL while decisions run**: the `on` dispatcher's
//!    `agenthooks_audit_rows_written_total` over its saturation rounds, next to its
//!    decisions/s; then every run's row is checked in the table exactly once.
//! 2. **Decision latency with audit on vs off**, for each load: client side (HTTP
//!    included) p50, p90, p99 and mean, and the server-side mean of
//!    `agenthooks_decision_duration_seconds`, with their ratios (goal: under 1.1). On a
//!    small machine PostgreSQL competes with the dispatcher for the same cores: under
//!    saturation that shows in the ratio; the paced load shows the decision path's own
//!    cost.
//!
//! 3. **What a SIGKILL under load loses**: a third dispatcher on the same database, the
//!    clients unpaced for `KILL_AFTER`, then `SIGKILL`: the answered runs that have no row
//!    and how far before the kill the oldest of them was answered (the README's crash-loss
//!    window), over `KILL_ROUNDS` rounds.
//!
//! Env: `AGENTHOOKS_BENCH_SECS` (per mode and load, default 10);
//! `AGENTHOOKS_BENCH_AUDIT_DB_PARAMS`, a query string appended to the audit database URL of
//! the dispatchers and the capacity phase, e.g. `options[synchronous_commit]=off` to measure
//! the README's asynchronous-commit option.
//!
//! Run: `make bench`, or `cargo build --release --bins && cargo bench -p agenthooks-e2e --bench audit`.
//! Without `--bench` (e.g. `cargo test --all-targets`) it does nothing.

use std::sync::Arc;
use std::time::{Duration, Instant};

use agenthooks_dispatcher::audit::store::AuditStore;
use agenthooks_e2e::postgres::PgServer;
use agenthooks_e2e::procs::{Proc, bin, free_port};
use agenthooks_e2e::stack::{hook_server, metric};
use serde_json::json;

const CLIENTS: usize = 4;

struct Dispatcher {
    proc: Proc,
    url: String,
}

fn start(name: &str, hooks: &std::path::Path, audit_db: &str, dir: &std::path::Path) -> Dispatcher {
    let port = free_port();
    let args: Vec<String> = [
        "--hooks",
        hooks.to_str().unwrap(),
        "--listen",
        &format!("127.0.0.1:{port}"),
        "--http-allow-cidr",
        "127.0.0.0/8",
        "--allow-anonymous",
        "--audit-db",
        audit_db,
        "--audit-spool-dir",
        dir.join(format!("{name}.spool")).to_str().unwrap(),
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let proc = Proc::start(name, &bin("agenthooks-dispatcher"), &args, &[], dir);
    Dispatcher {
        proc,
        url: format!("http://127.0.0.1:{port}"),
    }
}

async fn get(client: &reqwest::Client, url: &str) -> Option<String> {
    let r = client.get(url).send().await.ok()?;
    (r.status() == 200).then_some(())?;
    r.text().await.ok()
}

async fn rows_written(client: &reqwest::Client, d: &Dispatcher) -> f64 {
    let text = get(client, &format!("{}/metrics", d.url)).await.unwrap();
    metric(&text, "agenthooks_audit_rows_written_total", "")
}

/// `CLIENTS` loops sending events to `d` for `secs`, each as fast as answered (`rate`
/// `None`) or paced to `rate / CLIENTS` per second; every answer must be an allow.
/// Returns the latencies.
async fn round(
    client: &reqwest::Client,
    d: &Dispatcher,
    tag: &str,
    secs: f64,
    rate: Option<f64>,
) -> Vec<Duration> {
    let until = Instant::now() + Duration::from_secs_f64(secs);
    let mut tasks = Vec::new();
    for w in 0..CLIENTS {
        let (client, url, tag) = (
            client.clone(),
            format!("{}/v1/dispatch", d.url),
            tag.to_owned(),
        );
        tasks.push(tokio::spawn(async move {
            let mut lat = Vec::with_capacity(50_000);
            let mut i = 0u64;
            let mut tick = rate.map(|r| {
                let mut t = tokio::time::interval(Duration::from_secs_f64(CLIENTS as f64 / r));
                t.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
                t
            });
            while Instant::now() < until {
                if let Some(t) = tick.as_mut() {
                    t.tick().await;
                }
                let body = json!({"event": "pre_tool_use", "event_id": format!("{tag}-{w}-{i}"),
                    "session_id": "s-1", "tenant_id": "acme", "agent_id": "a1",
                    "tool_name": "Bash", "tool_input": {"command": "ls -la", "i": i}})
                .to_string();
                let t = Instant::now();
                let r = client
                    .post(&url)
                    .header("content-type", "application/json")
                    .body(body)
                    .send()
                    .await
                    .expect("dispatch");
                let ok = r.status() == 200;
                let answer = r.bytes().await.expect("dispatch body");
                lat.push(t.elapsed());
                assert!(
                    ok && answer.starts_with(b"{") && memchr(&answer, b"\"decision\":\"allow\""),
                    "{}",
                    String::from_utf8_lossy(&answer)
                );
                i += 1;
            }
            lat
        }));
    }
    let mut all = Vec::new();
    for t in tasks {
        all.extend(t.await.unwrap());
    }
    all
}

fn memchr(hay: &[u8], needle: &[u8]) -> bool {
    hay.windows(needle.len()).any(|w| w == needle)
}

struct Stats {
    n: usize,
    p50: f64,
    p90: f64,
    p99: f64,
    mean: f64,
}

/// Milliseconds.
fn stats(mut lat: Vec<Duration>) -> Stats {
    lat.sort();
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    let at = |q: f64| ms(lat[((lat.len() as f64 * q) as usize).min(lat.len() - 1)]);
    Stats {
        n: lat.len(),
        p50: at(0.50),
        p90: at(0.90),
        p99: at(0.99),
        mean: lat.iter().map(|d| ms(*d)).sum::<f64>() / lat.len() as f64,
    }
}

/// Decisions/s of the paced load.
const PACED_RATE: f64 = 2_000.0;

/// One mode's latencies (client side) and server-side decision time.
#[derive(Default)]
struct Mode {
    lat: Vec<Duration>,
    secs: f64,
    /// `agenthooks_decision_duration_seconds` sum and count over the rounds.
    server_sum: f64,
    server_count: f64,
}

impl Mode {
    async fn run(
        &mut self,
        client: &reqwest::Client,
        d: &Dispatcher,
        tag: &str,
        secs: f64,
        rate: Option<f64>,
    ) -> usize {
        let (s0, c0) = server_time(client, d).await;
        let t = Instant::now();
        let lat = round(client, d, tag, secs, rate).await;
        self.secs += t.elapsed().as_secs_f64();
        let (s1, c1) = server_time(client, d).await;
        self.server_sum += s1 - s0;
        self.server_count += c1 - c0;
        let n = lat.len();
        self.lat.extend(lat);
        n
    }
}

async fn server_time(client: &reqwest::Client, d: &Dispatcher) -> (f64, f64) {
    let text = get(client, &format!("{}/metrics", d.url)).await.unwrap();
    (
        metric(&text, "agenthooks_decision_duration_seconds_sum", ""),
        metric(&text, "agenthooks_decision_duration_seconds_count", ""),
    )
}

#[derive(Default)]
struct Compare {
    off: Mode,
    on: Mode,
}

impl Compare {
    fn print(&self, load: &str) {
        println!(
            "decision latency, {load} (ms)          n   dec/s     p50     p90     p99    mean  server-mean"
        );
        let off = stats(self.off.lat.clone());
        let on = stats(self.on.lat.clone());
        let srv = |m: &Mode| m.server_sum / m.server_count.max(1.0) * 1000.0;
        for (name, s, m) in [("audit off", &off, &self.off), ("audit on ", &on, &self.on)] {
            println!(
                "  {name}                        {:>8} {:>7.0} {:>7.3} {:>7.3} {:>7.3} {:>7.3}  {:>7.3}",
                s.n,
                s.n as f64 / m.secs,
                s.p50,
                s.p90,
                s.p99,
                s.mean,
                srv(m)
            );
        }
        println!(
            "  ratio on/off                                     {:>7.3} {:>7.3} {:>7.3} {:>7.3}  {:>7.3}   (goal < 1.1)",
            on.p50 / off.p50,
            on.p90 / off.p90,
            on.p99 / off.p99,
            on.mean / off.mean,
            srv(&self.on) / srv(&self.off)
        );
    }
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    if !std::env::args().any(|a| a == "--bench") {
        eprintln!("audit bench: run with `cargo bench` (make bench); nothing to do here");
        return;
    }
    let _ = rustls::crypto::ring::default_provider().install_default();
    let secs: f64 = std::env::var("AGENTHOOKS_BENCH_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(10.0);
    let dir = tempfile::tempdir().unwrap();
    let pg = Arc::new(
        tokio::task::spawn_blocking(|| PgServer::new().expect("PostgreSQL"))
            .await
            .unwrap(),
    );
    let url = match std::env::var("AGENTHOOKS_BENCH_AUDIT_DB_PARAMS") {
        Ok(params) if !params.is_empty() => format!("{}?{params}", pg.url()),
        _ => pg.url(),
    };
    let (hook_url, _) = hook_server(json!({"decision": "allow"}));
    let hooks = dir.path().join("hooks.yaml");
    std::fs::write(
        &hooks,
        format!(
            "apiVersion: agenthooks.io/v1alpha1\nkind: AgentHook\nmetadata: {{name: bench-allow, namespace: agenthooks-system}}\nspec:\n  event: pre_tool_use\n  scope: global\n  matcher: '^Bash$'\n  handler:\n    type: http\n    http: {{url: '{hook_url}'}}\n"
        ),
    )
    .unwrap();
    let on = start("audit-on", &hooks, &url, dir.path());
    let off = start("audit-off", &hooks, "off", dir.path());
    let client = reqwest::Client::builder()
        .pool_max_idle_per_host(CLIENTS * 2)
        .build()
        .unwrap();
    for d in [&on, &off] {
        let deadline = Instant::now() + Duration::from_secs(30);
        while get(&client, &format!("{}/readyz", d.url)).await.is_none() {
            assert!(
                Instant::now() < deadline,
                "{} not ready:\n{}",
                d.proc.name,
                d.proc.log_tail(20)
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    // Warm-up: connections, the hook server's threads, PostgreSQL's caches.
    round(&client, &off, "warm-off", 1.0, None).await;
    let mut runs_on = round(&client, &on, "warm-on", 1.0, None).await.len() as f64;

    let half = secs / 2.0;
    // 1. Saturation: the clients as fast as answered.
    let mut sat = Compare::default();
    let mut on_time = Duration::ZERO;
    let mut rows_in_rounds = 0.0;
    let mut sat_on_decisions = 0;
    for r in 0..2 {
        sat.off
            .run(&client, &off, &format!("off{r}"), half, None)
            .await;
        let before = rows_written(&client, &on).await;
        let t = Instant::now();
        let n = sat
            .on
            .run(&client, &on, &format!("on{r}"), half, None)
            .await;
        on_time += t.elapsed();
        rows_in_rounds += rows_written(&client, &on).await - before;
        sat_on_decisions += n;
    }
    runs_on += sat_on_decisions as f64;
    // 1b. What the audit path can write: while the clients run decisions on `on` (its own
    // rows included), the store inserts prebuilt rows in the writer's batches and in large
    // ones, from WRITERS tasks; rows/s into the table.
    let capacity = writer_capacity(&client, &on, &url, half).await;
    runs_on += capacity.decisions as f64;
    // 2. Paced: a steady PACED_RATE decisions/s, the machine not saturated.
    let mut paced = Compare::default();
    for r in 0..2 {
        paced
            .off
            .run(&client, &off, &format!("poff{r}"), half, Some(PACED_RATE))
            .await;
        let n = paced
            .on
            .run(&client, &on, &format!("pon{r}"), half, Some(PACED_RATE))
            .await;
        runs_on += n as f64;
    }

    // Every run of the `on` dispatcher has its row, once.
    let drained_at = Instant::now();
    let deadline = drained_at + Duration::from_secs(60);
    while rows_written(&client, &on).await < runs_on {
        assert!(
            Instant::now() < deadline,
            "rows missing after 60 s:\n{}",
            on.proc.log_tail(20)
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let drain = drained_at.elapsed();
    let store = AuditStore::connect(&url).await.unwrap();
    let (rows, keys): (i64, i64) = match &store {
        AuditStore::Postgres(pool) => {
            sqlx::query_as("SELECT count(*), count(DISTINCT dedup_key) FROM hook_executions")
                .fetch_one(pool)
                .await
                .unwrap()
        }
        AuditStore::Sqlite(_) => unreachable!("postgres"),
    };
    store.close().await;
    let metrics_on = get(&client, &format!("{}/metrics", on.url)).await.unwrap();

    let on_secs = on_time.as_secs_f64();
    println!();
    println!(
        "== audit bench: {CLIENTS} clients, {secs:.0} s per mode and load (2 alternating rounds), release binaries, PostgreSQL on 127.0.0.1:{} ==",
        pg.port()
    );
    println!(
        "audit rows into PostgreSQL while decisions run: {:>8.0} rows/s  ({:.0} decisions/s with audit on, clients unpaced; {rows_in_rounds:.0} rows in {on_secs:.1} s)",
        rows_in_rounds / on_secs,
        sat_on_decisions as f64 / on_secs
    );
    println!(
        "  after the load: every row in the table within {:.0} ms; {rows} rows, {keys} distinct dedup keys, {runs_on:.0} runs; dropped {}, write failures {}",
        drain.as_secs_f64() * 1000.0,
        metric(&metrics_on, "agenthooks_audit_rows_dropped_total", ""),
        metric(&metrics_on, "agenthooks_audit_write_failures_total", "")
    );
    let batches = metric(&metrics_on, "agenthooks_audit_batch_seconds_count", "");
    let batch_sum = metric(&metrics_on, "agenthooks_audit_batch_seconds_sum", "");
    println!(
        "  batches: {batches:.0}, mean {:.1} rows and {:.2} ms per insert_batch",
        rows as f64 / batches.max(1.0),
        batch_sum / batches.max(1.0) * 1000.0
    );
    for (batch, rate) in &capacity.rows_per_s {
        println!(
            "audit store capacity while decisions run: {rate:>8.0} rows/s in batches of {batch} ({WRITERS} writers; {:.0} decisions/s meanwhile)",
            capacity.decisions as f64 / capacity.secs
        );
    }
    sat.print("unpaced (saturation)");
    paced.print(&format!("paced at {PACED_RATE:.0} decisions/s"));
    assert_eq!(
        (rows, keys),
        (
            runs_on as i64 + capacity.rows as i64,
            runs_on as i64 + capacity.rows as i64
        ),
        "every run's row exactly once (and every prebuilt row)"
    );
    drop(on);
    drop(off);
    crash_loss(&client, &hooks, &url, dir.path()).await;
    let _ = tokio::task::spawn_blocking(move || drop(pg)).await;
}

/// Concurrent inserting tasks of the capacity phase (the writer's pool has 8 connections).
const WRITERS: usize = 2;

/// What [`writer_capacity`] measured.
struct Capacity {
    /// (batch size, rows/s) for each batch size tried.
    rows_per_s: Vec<(usize, f64)>,
    /// Prebuilt rows inserted in all.
    rows: u64,
    /// Decisions answered by `d` meanwhile, and over how long.
    decisions: usize,
    secs: f64,
}

/// The audit store's insert rate into PostgreSQL while `d` answers unpaced decisions
/// (whose own rows go in too): prebuilt rows through `AuditStore::insert_batch`, in the
/// writer's batch size (500) and in batches of 5,000, `secs` for each.
async fn writer_capacity(
    client: &reqwest::Client,
    d: &Dispatcher,
    url: &str,
    secs: f64,
) -> Capacity {
    use agenthooks_dispatcher::audit::row::AuditRow;
    let store = Arc::new(AuditStore::connect(url).await.unwrap());
    let mut rows_per_s = Vec::new();
    let (mut rows, mut decisions, mut total) = (0u64, 0usize, 0.0);
    for batch in [500usize, 5_000] {
        let started = Instant::now();
        let mut writers = Vec::new();
        for w in 0..WRITERS {
            let store = Arc::clone(&store);
            writers.push(tokio::spawn(async move {
                let mut n = 0u64;
                while started.elapsed().as_secs_f64() < secs {
                    let now = chrono::Utc::now();
                    let rows: Vec<AuditRow> = (0..batch)
                        .map(|i| AuditRow {
                            id: None,
                            hook_uid: "standalone:agenthooks-system/capacity".into(),
                            hook_namespace: "agenthooks-system".into(),
                            hook_name: "capacity".into(),
                            tenant: "acme".into(),
                            session_id: "s-1".into(),
                            event: agenthooks_crds::HookEvent::PreToolUse,
                            input_hash: format!("{:064x}", n + i as u64),
                            decision: agenthooks_dispatcher::decision::outcome::Outcome::Allow,
                            duration_ms: 1,
                            dedup_key: format!("capacity:{batch}-{w}-{}", n + i as u64),
                            error: None,
                            error_detail: None,
                            metadata: json!({"matcher_matched": true, "http_status": 200}),
                            created_at: now,
                        })
                        .collect();
                    n += store.insert_batch(&rows).await.expect("insert_batch");
                }
                n
            }));
        }
        let tag = format!("cap{batch}");
        let (answered, inserted) = tokio::join!(round(client, d, &tag, secs, None), async {
            let mut inserted = 0;
            for w in writers {
                inserted += w.await.unwrap();
            }
            inserted
        });
        let took = started.elapsed().as_secs_f64();
        decisions += answered.len();
        rows_per_s.push((batch, inserted as f64 / took));
        rows += inserted;
        total += took;
    }
    Capacity {
        rows_per_s,
        rows,
        decisions,
        secs: total,
    }
}

/// Rounds of the crash-loss measurement, and how long the load runs before the kill.
const KILL_ROUNDS: usize = 5;
const KILL_AFTER: Duration = Duration::from_secs(3);

/// Part 3: SIGKILL under load, `KILL_ROUNDS` times; prints what each kill lost.
async fn crash_loss(
    client: &reqwest::Client,
    hooks: &std::path::Path,
    url: &str,
    dir: &std::path::Path,
) {
    println!();
    println!(
        "SIGKILL under load ({CLIENTS} unpaced clients, killed {:.0} s in; README: about 70 ms of runs while the writer keeps up, the queue backlog when it does not):",
        KILL_AFTER.as_secs_f64()
    );
    let mut worst = 0.0f64;
    for k in 0..KILL_ROUNDS {
        let name = format!("audit-kill{k}");
        let d = start(&name, hooks, url, dir);
        let deadline = Instant::now() + Duration::from_secs(30);
        while get(client, &format!("{}/readyz", d.url)).await.is_none() {
            assert!(Instant::now() < deadline, "{name} not ready");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let mut tasks = Vec::new();
        for w in 0..CLIENTS {
            let (client, url) = (client.clone(), format!("{}/v1/dispatch", d.url));
            let tag = format!("kill{k}-{w}");
            tasks.push(tokio::spawn(async move {
                // (event_id, when its answer arrived) until the dispatcher is gone
                let mut answered = Vec::with_capacity(50_000);
                for i in 0u64.. {
                    let event_id = format!("{tag}-{i}");
                    let body = json!({"event": "pre_tool_use", "event_id": event_id,
                        "session_id": "s-1", "tenant_id": "acme", "agent_id": "a1",
                        "tool_name": "Bash", "tool_input": {"command": "ls -la", "i": i}})
                    .to_string();
                    let Ok(r) = client
                        .post(&url)
                        .header("content-type", "application/json")
                        .body(body)
                        .send()
                        .await
                    else {
                        break;
                    };
                    let ok = r.status() == 200;
                    if r.bytes().await.is_err() || !ok {
                        break;
                    }
                    answered.push((event_id, Instant::now()));
                }
                answered
            }));
        }
        tokio::time::sleep(KILL_AFTER).await;
        let killed_at = Instant::now();
        d.proc.signal(libc::SIGKILL);
        let mut answered = Vec::new();
        for t in tasks {
            answered.extend(t.await.unwrap());
        }
        let store = AuditStore::connect(url).await.unwrap();
        let AuditStore::Postgres(pool) = &store else {
            unreachable!("postgres")
        };
        let keys: Vec<(String,)> =
            sqlx::query_as("SELECT dedup_key FROM hook_executions WHERE dedup_key LIKE $1")
                .bind(format!("%:kill{k}-%"))
                .fetch_all(pool)
                .await
                .unwrap();
        store.close().await;
        let stored: std::collections::HashSet<String> = keys
            .into_iter()
            // `<hook uid>:<event_id>`; a standalone uid has a colon of its own
            // (`standalone:<ns>/<name>`), these event ids none.
            .filter_map(|(key,)| key.rsplit_once(':').map(|(_, id)| id.to_owned()))
            .collect();
        let lost: Vec<_> = answered
            .iter()
            .filter(|(id, _)| !stored.contains(id))
            .collect();
        let window_ms = lost
            .iter()
            .map(|(_, at)| killed_at.saturating_duration_since(*at).as_secs_f64() * 1000.0)
            .fold(0.0, f64::max);
        worst = worst.max(window_ms);
        println!(
            "  round {}: {} runs answered, {} of them without a row, the oldest of those answered {window_ms:.0} ms before the kill",
            k + 1,
            answered.len(),
            lost.len(),
        );
        drop(d);
    }
    println!("  worst: {worst:.0} ms of answered runs lost to a SIGKILL");
}
