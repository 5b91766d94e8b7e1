//! Dispatch overhead over real loopback HTTP, side by side with a bare axum baseline.
//!
//! Run: `cargo bench -p agenthooks-dispatcher --bench dispatch_overhead`. See
//! `bench/README.md` for what each scenario measures and how to read the ratios.
//!
//! Every scenario gets a warm-up, then a sequential phase (one keep-alive client, one
//! request at a time: latency), a concurrent phase (16 keep-alive clients: throughput)
//! and an in-process phase (`Event::parse` + `decide`, no dispatch HTTP). Each phase is
//! split into 10 rounds that visit every scenario in turn, so load from elsewhere on the
//! machine hits all scenarios alike. Each phase stops at a request count or a time cap,
//! whichever comes first, so a scenario takes at most ~12 s. Knobs (environment):
//! `AGENTHOOKS_BENCH_SECS` (time cap per phase, default 5), `AGENTHOOKS_BENCH_REQUESTS`
//! (sequential request cap, default 20000), `AGENTHOOKS_BENCH_CONCURRENCY` (default 16),
//! `AGENTHOOKS_BENCH_ONLY` (e.g. `3,5`: only these dispatcher scenarios; the baseline
//! always runs), `AGENTHOOKS_BENCH_IN_PROCESS_SECS` (default 1).
//!
//! Last: issue 4's figure, a prompt hook answered from its decision cache vs one http
//! hook's decision, in process, alternating rounds (`prompt_cache_hit`).
//!
//! Without `--bench` (e.g. `cargo test --all-targets`) it runs a few requests per
//! scenario only, to check the wiring.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use agenthooks_crds::Edition;
use agenthooks_crds::sealed::SealKey;
use agenthooks_crds::snapshot::SnapshotHook;
use agenthooks_dispatcher::chain::decide;
use agenthooks_dispatcher::event::Event;
use agenthooks_dispatcher::handlers::http::HttpCaller;
use agenthooks_dispatcher::hookset::HookSet;
use agenthooks_dispatcher::runner::Engine;
use agenthooks_dispatcher::server::{AppState, router};
use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::header::CONTENT_TYPE;
use axum::routing::post;
use serde_json::Value;

const EVENT: &str = r#"{"event":"pre_tool_use","tenant_id":"acme","agent_id":"a1","tool_name":"exec","tool_input":{"cmd":"ls -la"}}"#;
const MASTER_NAMESPACE: &str = "agenthooks-system";

/// Phase limits.
#[derive(Clone, Copy)]
struct Limits {
    warmup_requests: usize,
    warmup_time: Duration,
    seq_requests: usize,
    conc_requests: usize,
    phase_time: Duration,
    concurrency: usize,
    in_process_time: Duration,
    /// Rounds each phase is split into (see `run`).
    rounds: usize,
    /// Dispatcher scenarios to run (2..=5); `None`: all. The baseline always runs.
    only: Option<[bool; 6]>,
}

impl Limits {
    fn from_env(full: bool) -> Limits {
        let env = |k: &str, d: u64| {
            std::env::var(k)
                .ok()
                .and_then(|v| v.parse().ok())
                .unwrap_or(d)
        };
        let concurrency = env("AGENTHOOKS_BENCH_CONCURRENCY", 16).max(1) as usize;
        let only = std::env::var("AGENTHOOKS_BENCH_ONLY").ok().map(|v| {
            let mut keep = [false; 6];
            for n in v.split(',').filter_map(|n| n.trim().parse::<usize>().ok()) {
                if n < keep.len() {
                    keep[n] = true;
                }
            }
            keep
        });
        if !full {
            return Limits {
                warmup_requests: 5,
                warmup_time: Duration::from_secs(1),
                seq_requests: 20,
                conc_requests: 4 * concurrency,
                phase_time: Duration::from_secs(2),
                concurrency,
                in_process_time: Duration::from_millis(50),
                rounds: 1,
                only,
            };
        }
        let secs = env("AGENTHOOKS_BENCH_SECS", 5).max(1);
        let seq = env("AGENTHOOKS_BENCH_REQUESTS", 20_000).max(10) as usize;
        Limits {
            warmup_requests: 500,
            warmup_time: Duration::from_secs(1),
            seq_requests: seq,
            conc_requests: seq * 5,
            phase_time: Duration::from_secs(secs),
            concurrency,
            in_process_time: Duration::from_secs(env("AGENTHOOKS_BENCH_IN_PROCESS_SECS", 1)),
            rounds: 10,
            only,
        }
    }
}

/// One scenario: where to send, what to expect.
struct Scenario {
    name: &'static str,
    url: String,
    /// Hooks resolved per event (what the set holds for `pre_tool_use`/acme/a1).
    hooks: usize,
    /// Hooks whose matcher matches (each one HTTP call to the fast hook).
    matching: usize,
    /// For the in-process measurement; `None` for the baseline.
    state: Option<Arc<AppState>>,
}

/// Latency summary of one phase.
#[derive(Clone, Copy, Default)]
struct Stats {
    n: usize,
    p50_us: f64,
    p99_us: f64,
    mean_us: f64,
    rps: f64,
}

fn stats(mut lat_ns: Vec<u64>, wall: Duration) -> Stats {
    if lat_ns.is_empty() {
        return Stats::default();
    }
    lat_ns.sort_unstable();
    let n = lat_ns.len();
    let pct = |p: f64| lat_ns[(((n as f64) * p).ceil() as usize).clamp(1, n) - 1] as f64 / 1000.0;
    Stats {
        n,
        p50_us: pct(0.50),
        p99_us: pct(0.99),
        mean_us: lat_ns.iter().sum::<u64>() as f64 / n as f64 / 1000.0,
        rps: n as f64 / wall.as_secs_f64(),
    }
}

fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .no_proxy()
        .pool_max_idle_per_host(1)
        .tcp_nodelay(true)
        .build()
        .expect("bench client")
}

async fn send(c: &reqwest::Client, url: &str) -> Bytes {
    let r = c
        .post(url)
        .header(CONTENT_TYPE, "application/json")
        .body(EVENT)
        .send()
        .await
        .expect("request");
    assert!(r.status().is_success(), "{url}: status {}", r.status());
    r.bytes().await.expect("body")
}

async fn serve(app: Router) -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind loopback");
    let addr = listener.local_addr().expect("local addr");
    tokio::spawn(async move { axum::serve(listener, app).await.expect("serve") });
    addr
}

/// The baseline: reads the body and answers the decision shape, nothing else.
async fn baseline(_body: Bytes) -> axum::response::Response {
    use axum::response::IntoResponse;
    axum::Json(serde_json::json!({
        "event_id": "00000000-0000-4000-8000-000000000000",
        "decision": "allow",
        "hooks": [],
    }))
    .into_response()
}

/// The fast local HTTP hook: always allows, counts its calls.
async fn fast_hook(
    State(hits): State<Arc<AtomicUsize>>,
    _body: Bytes,
) -> impl axum::response::IntoResponse {
    hits.fetch_add(1, Ordering::Relaxed);
    (
        [(CONTENT_TYPE, "application/json")],
        r#"{"decision":"allow"}"#,
    )
}

fn source(i: usize, matcher: &str, hook_url: &str) -> SnapshotHook {
    let yaml = format!(
        "event: pre_tool_use\nmatcher: '{matcher}'\nhandler: {{type: http, http: {{url: '{hook_url}'}}}}"
    );
    SnapshotHook {
        uid: format!("uid-{i:04}"),
        namespace: "tenant-acme".into(),
        name: format!("hook-{i:04}"),
        generation: 1,
        created_at: String::new(),
        namespace_tenant: "acme".into(),
        spec: serde_norway::from_str(&yaml).expect("hook spec"),
        sealed_headers: vec![],
        open_breakers: Vec::new(),
        reset_token: None,
    }
}

/// A set of `total` tenant hooks for `pre_tool_use`, `matching` of them (spread evenly
/// over the resolution order) with matcher `^exec$`, the rest `^nomatch-N$`.
fn hook_set(total: usize, matching: usize, hook_url: &str) -> HookSet {
    let stride = total.checked_div(matching).unwrap_or(usize::MAX).max(1);
    let sources = (0..total)
        .map(|i| {
            if i % stride == 0 && i / stride < matching {
                source(i, "^exec$", hook_url)
            } else {
                source(i, &format!("^nomatch-{i}$"), hook_url)
            }
        })
        .collect();
    let (set, rejected) = HookSet::build(sources, MASTER_NAMESPACE, Edition::Lite, 1, None);
    assert!(rejected.is_empty(), "rejected hooks: {rejected:?}");
    assert_eq!(set.len(), total);
    set
}

async fn dispatcher(set: HookSet) -> (Arc<AppState>, SocketAddr) {
    let http = HttpCaller::new(vec!["127.0.0.0/8".parse().expect("cidr")]);
    let state = AppState::new(Engine::new(http, Edition::Lite, SealKey::generate()));
    state.set_authenticator(agenthooks_dispatcher::identity::Authenticator::Anonymous);
    state.set_hooks(set);
    let addr = serve(router(state.clone())).await;
    (state, addr)
}

/// Checks one answer: allow, and one hook line per matching hook, each an allow.
fn check(s: &Scenario, body: &[u8]) {
    let v: Value = serde_json::from_slice(body).expect("JSON answer");
    assert_eq!(v["decision"], "allow", "{}: {v}", s.name);
    let hooks = v["hooks"].as_array().expect("hooks array");
    assert_eq!(hooks.len(), s.matching, "{}: {v}", s.name);
    assert!(
        hooks.iter().all(|h| h["decision"] == "allow"),
        "{}: {v}",
        s.name
    );
    assert!(
        v["event_id"].as_str().is_some_and(|id| id.len() == 36),
        "{}: {v}",
        s.name
    );
}

/// Latencies and elapsed time of one phase, gathered over its rounds.
#[derive(Default)]
struct Acc {
    lat: Vec<u64>,
    wall: Duration,
}

impl Acc {
    fn stats(&self) -> Stats {
        stats(self.lat.clone(), self.wall)
    }
}

/// Everything one scenario needs across the rounds.
struct Run<'a> {
    s: &'a Scenario,
    seq_client: reqwest::Client,
    conc_clients: Vec<reqwest::Client>,
    seq: Acc,
    conc: Acc,
    in_process: Acc,
}

async fn warm_up(c: &reqwest::Client, url: &str, lim: Limits) {
    let started = Instant::now();
    for _ in 0..lim.warmup_requests {
        send(c, url).await;
        if started.elapsed() > lim.warmup_time {
            break;
        }
    }
}

/// One round of the sequential phase: up to `n` requests or `time`, one at a time.
async fn sequential_round(c: &reqwest::Client, url: &str, n: usize, time: Duration, acc: &mut Acc) {
    let started = Instant::now();
    let mut done = 0;
    while done < n && started.elapsed() < time {
        let t = Instant::now();
        send(c, url).await;
        acc.lat.push(t.elapsed().as_nanos() as u64);
        done += 1;
    }
    acc.wall += started.elapsed();
}

/// One round of the concurrent phase: every client keeps one request in flight, up to
/// `n` requests in all or `time`.
async fn concurrent_round(
    clients: &[reqwest::Client],
    url: &str,
    n: usize,
    time: Duration,
    acc: &mut Acc,
) {
    let issued = Arc::new(AtomicUsize::new(0));
    let started = Instant::now();
    let deadline = started + time;
    let tasks: Vec<_> = clients
        .iter()
        .cloned()
        .map(|c| {
            let (url, issued) = (url.to_string(), issued.clone());
            tokio::spawn(async move {
                let mut lat = Vec::new();
                while Instant::now() < deadline && issued.fetch_add(1, Ordering::Relaxed) < n {
                    let t = Instant::now();
                    send(&c, &url).await;
                    lat.push(t.elapsed().as_nanos() as u64);
                }
                lat
            })
        })
        .collect();
    for t in tasks {
        acc.lat.extend(t.await.expect("client task"));
    }
    acc.wall += started.elapsed();
}

/// One round of `Event::parse` + `decide` + serializing the decision, called directly
/// (no dispatch HTTP, no axum): the engine's own cost.
async fn in_process_round(state: &AppState, time: Duration, acc: &mut Acc) {
    let set = state.hooks().expect("hooks loaded");
    let started = Instant::now();
    while started.elapsed() < time {
        let t = Instant::now();
        let event = Event::parse(EVENT.as_bytes()).expect("event");
        let d = decide(&state.engine, &set, event).await;
        std::hint::black_box(serde_json::to_vec(&d).expect("decision serializes"));
        acc.lat.push(t.elapsed().as_nanos() as u64);
    }
    acc.wall += started.elapsed();
}

fn nproc() -> String {
    std::process::Command::new("nproc")
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_else(|| {
            std::thread::available_parallelism()
                .map(|n| n.to_string())
                .unwrap_or_else(|_| "?".into())
        })
}

fn ratio(x: f64, base: f64) -> String {
    if base > 0.0 {
        format!("{:.2}×", x / base)
    } else {
        "-".into()
    }
}

fn table(title: &str, rows: &[(&Scenario, Stats)], show_rps_ratio: bool) {
    let base = rows[0].1;
    println!("\n### {title}\n");
    if show_rps_ratio {
        println!(
            "| scenario | hooks | matching | n | p50 µs | p99 µs | mean µs | req/s | p50 × base | mean × base | req/s × base |"
        );
        println!("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    } else {
        println!(
            "| scenario | hooks | matching | n | p50 µs | p99 µs | mean µs | req/s | p50 × base | mean × base |"
        );
        println!("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    }
    for (s, st) in rows {
        print!(
            "| {} | {} | {} | {} | {:.1} | {:.1} | {:.1} | {:.0} | {} | {} |",
            s.name,
            s.hooks,
            s.matching,
            st.n,
            st.p50_us,
            st.p99_us,
            st.mean_us,
            st.rps,
            ratio(st.p50_us, base.p50_us),
            ratio(st.mean_us, base.mean_us)
        );
        if show_rps_ratio {
            print!(" {} |", ratio(st.rps, base.rps));
        }
        println!();
    }
}

async fn run(full: bool) {
    let lim = Limits::from_env(full);
    let _ = rustls::crypto::ring::default_provider().install_default();

    let hits = Arc::new(AtomicUsize::new(0));
    let hook_addr = serve(
        Router::new()
            .route("/allow", post(fast_hook))
            .with_state(hits.clone()),
    )
    .await;
    let hook_url = format!("http://{hook_addr}/allow");
    let base_addr = serve(Router::new().route("/v1/dispatch", post(baseline))).await;

    let mut scenarios = vec![Scenario {
        name: "1. baseline (bare axum)",
        url: format!("http://{base_addr}/v1/dispatch"),
        hooks: 0,
        matching: 0,
        state: None,
    }];
    for (number, name, total, matching) in [
        (2, "2. 10 hooks, none match", 10, 0),
        (3, "3. 1,000 hooks, none match", 1000, 0),
        (4, "4. 10 hooks, 10 match (HTTP)", 10, 10),
        (5, "5. 1,000 hooks, 10 match (HTTP)", 1000, 10),
    ] {
        if lim.only.is_some_and(|keep| !keep[number]) {
            continue;
        }
        let (state, addr) = dispatcher(hook_set(total, matching, &hook_url)).await;
        scenarios.push(Scenario {
            name,
            url: format!("http://{addr}/v1/dispatch"),
            hooks: total,
            matching,
            state: Some(state),
        });
    }

    println!("# agenthooks dispatch overhead");
    println!();
    println!(
        "nproc: {} · mode: {} · per-phase cap: {} sequential / {} concurrent requests or {:?} · concurrency: {}",
        nproc(),
        if full {
            "bench"
        } else {
            "smoke (run with --bench for numbers)"
        },
        lim.seq_requests,
        lim.conc_requests,
        lim.phase_time,
        lim.concurrency
    );
    println!("event: `{EVENT}`");

    // Set up every scenario: check one answer, warm up, open the connections.
    let mut runs = Vec::new();
    for s in &scenarios {
        let seq_client = client();
        let before = hits.load(Ordering::Relaxed);
        check(s, &send(&seq_client, &s.url).await);
        assert_eq!(
            hits.load(Ordering::Relaxed) - before,
            s.matching,
            "{}: fast hook calls per request",
            s.name
        );
        warm_up(&seq_client, &s.url, lim).await;
        let conc_clients: Vec<reqwest::Client> = (0..lim.concurrency).map(|_| client()).collect();
        for c in &conc_clients {
            for _ in 0..3 {
                send(c, &s.url).await;
            }
        }
        runs.push(Run {
            s,
            seq_client,
            conc_clients,
            seq: Acc::default(),
            conc: Acc::default(),
            in_process: Acc::default(),
        });
    }

    // Each phase runs in rounds that visit every scenario in turn (rotating the
    // order), so a burst of load from elsewhere on the machine hits all of them alike.
    let rounds = lim.rounds;
    let seq_n = lim.seq_requests.div_ceil(rounds);
    let conc_n = lim.conc_requests.div_ceil(rounds);
    let slice = lim.phase_time / rounds as u32;
    let in_process_slice = lim.in_process_time / rounds as u32;
    let order = |round: usize, len: usize| (0..len).map(move |i| (i + round) % len);
    let started = Instant::now();
    for round in 0..rounds {
        for i in order(round, runs.len()) {
            let r = &mut runs[i];
            sequential_round(&r.seq_client, &r.s.url, seq_n, slice, &mut r.seq).await;
        }
        eprintln!(
            "sequential: round {}/{rounds} ({:.1} s)",
            round + 1,
            started.elapsed().as_secs_f64()
        );
    }
    for round in 0..rounds {
        for i in order(round, runs.len()) {
            let r = &mut runs[i];
            concurrent_round(&r.conc_clients, &r.s.url, conc_n, slice, &mut r.conc).await;
        }
        eprintln!(
            "concurrent: round {}/{rounds} ({:.1} s)",
            round + 1,
            started.elapsed().as_secs_f64()
        );
    }
    for round in 0..rounds {
        for i in order(round, runs.len()) {
            let r = &mut runs[i];
            if let Some(state) = &r.s.state {
                in_process_round(state, in_process_slice, &mut r.in_process).await;
            }
        }
    }
    let seq_rows: Vec<_> = runs.iter().map(|r| (r.s, r.seq.stats())).collect();
    let conc_rows: Vec<_> = runs.iter().map(|r| (r.s, r.conc.stats())).collect();
    let inproc_rows: Vec<_> = runs
        .iter()
        .filter(|r| r.s.state.is_some())
        .map(|r| (r.s, r.in_process.stats()))
        .collect();

    table(
        "Sequential: 1 keep-alive client, one request at a time (latency)",
        &seq_rows,
        false,
    );
    table(
        &format!(
            "Concurrent: {} keep-alive clients (throughput; latency under load)",
            lim.concurrency
        ),
        &conc_rows,
        true,
    );
    println!(
        "\n### In process: `Event::parse` + `decide` + serialize, no dispatch HTTP (engine cost; hook calls still go over loopback)\n"
    );
    println!("| scenario | n | p50 µs | p99 µs | mean µs |");
    println!("|---|---:|---:|---:|---:|");
    for (s, st) in &inproc_rows {
        println!(
            "| {} | {} | {:.2} | {:.2} | {:.2} |",
            s.name, st.n, st.p50_us, st.p99_us, st.mean_us
        );
    }
    println!(
        "\nRatios: scenario ÷ baseline of the same table (1.00× = no overhead over a bare axum handler)."
    );
    bookkeeping(full);
    prompt_cache_hit(full).await;
}

/// The per-run bookkeeping every hook run pays on top of its handler: the execution
/// counters for the operator's reports (a clock read and two atomics) and the breaker's
/// record (a short lock), measured alone, single-threaded and with both cores
/// hammering one hook.
fn bookkeeping(full: bool) {
    use agenthooks_dispatcher::handlers::Outcome;
    use agenthooks_dispatcher::report::counters::unix_ms_now;
    let n: u64 = if full { 2_000_000 } else { 10_000 };
    let set = hook_set(1, 1, "https://a.example/");
    let hook = Arc::clone(set.iter().next().expect("one hook"));
    let run = |hook: &agenthooks_dispatcher::hookset::LoadedHook| {
        let ms = unix_ms_now();
        hook.counters.record(Outcome::Allow, ms);
        let a = hook.breaker.admit("acme", ms as i64);
        hook.breaker.record("acme", a, Outcome::Allow, ms as i64);
    };
    let counters_only = {
        let t = Instant::now();
        for _ in 0..n {
            hook.counters.record(Outcome::Allow, unix_ms_now());
        }
        t.elapsed().as_nanos() as f64 / n as f64
    };
    let single = {
        let t = Instant::now();
        for _ in 0..n {
            run(&hook);
        }
        t.elapsed().as_nanos() as f64 / n as f64
    };
    let threads = 2;
    let contended = {
        let t = Instant::now();
        std::thread::scope(|s| {
            for _ in 0..threads {
                s.spawn(|| {
                    for _ in 0..n / threads {
                        run(&hook);
                    }
                });
            }
        });
        t.elapsed().as_nanos() as f64 / n as f64
    };
    std::hint::black_box(hook.counters.take());
    println!("\n### Bookkeeping per hook run (no handler)\n");
    println!("| what | ns per run |");
    println!("|---|---:|");
    println!("| execution counters (clock read + 2 atomics) | {counters_only:.1} |");
    println!("| counters + breaker record, 1 thread | {single:.1} |");
    println!(
        "| counters + breaker record, {threads} threads on one hook (wall ÷ runs) | {contended:.1} |"
    );
}

/// A stand-in for the Anthropic Messages API (`POST /v1/messages`): always one
/// `decide` allow tool call. The bench calls it once, to fill the decision cache.
async fn messages_standin(_body: Bytes) -> impl axum::response::IntoResponse {
    axum::Json(serde_json::json!({
        "id": "msg_bench", "type": "message", "role": "assistant", "model": "bench-model",
        "content": [{"type": "tool_use", "id": "toolu_bench", "name": "decide", "input": {"decision": "allow", "reason": "bench"}}],
        "stop_reason": "tool_use", "usage": {"input_tokens": 100, "output_tokens": 20}
    }))
}

/// Issue 4's figure: a prompt hook answered from its decision cache, against a
/// non-prompt hook's decision (one http hook on loopback), both `Event::parse` +
/// `decide` + serialize in process, in alternating rounds of one run.
async fn prompt_cache_hit(full: bool) {
    use agenthooks_crds::TenantHookBudgetSpec;
    use agenthooks_dispatcher::budget::Budgets;
    use agenthooks_dispatcher::budget::local::{LocalBudget, LocalLedger};
    use agenthooks_dispatcher::handlers::prompt::PromptEvaluator;
    use agenthooks_dispatcher::handlers::prompt::config::ProvidersConfig;

    let hits = Arc::new(AtomicUsize::new(0));
    let hook_addr = serve(
        Router::new()
            .route("/hook", post(fast_hook))
            .with_state(hits),
    )
    .await;
    let provider_addr = serve(Router::new().route("/v1/messages", post(messages_standin))).await;
    let http_set = hook_set(1, 1, &format!("http://{hook_addr}/hook"));
    let http_engine = Engine::new(
        HttpCaller::new(vec!["127.0.0.0/8".parse().expect("cidr")]),
        Edition::Lite,
        SealKey::generate(),
    );

    let yaml = "event: pre_tool_use\nmatcher: '^exec$'\nhandler: {type: prompt, prompt: {promptTemplate: 'Judge the command.', model: bench}}";
    let mut prompt_source = source(0, "^exec$", "https://unused.example/");
    prompt_source.spec = serde_norway::from_str(yaml).expect("prompt hook spec");
    let (prompt_set, rejected) = HookSet::build(
        vec![prompt_source],
        MASTER_NAMESPACE,
        Edition::Lite,
        1,
        None,
    );
    assert!(rejected.is_empty(), "{rejected:?}");
    let providers = format!(
        "providers: [{{name: an, kind: anthropic, baseUrl: 'http://{provider_addr}', apiKeyFile: k}}]\nmodels: {{bench: {{provider: an, model: bench-model}}}}\n"
    );
    let config = ProvidersConfig::parse(&providers, std::path::Path::new("bench"), |_| {
        Ok("sk-bench".into())
    })
    .expect("providers");
    let mut prompt_engine =
        Engine::new(HttpCaller::new(vec![]), Edition::Lite, SealKey::generate());
    prompt_engine.prompt = PromptEvaluator::new(config);
    prompt_engine.budgets = Budgets::local(
        LocalLedger::new(vec![LocalBudget {
            namespace: "tenant-acme".into(),
            name: "tokens".into(),
            tenant: "acme".into(),
            spec: TenantHookBudgetSpec {
                tenant: None,
                monthly_tokens: i64::MAX / 4,
            },
        }])
        .expect("ledger"),
        None,
    );

    async fn once(engine: &Engine, set: &HookSet) -> (u64, Value) {
        let t = Instant::now();
        let event = Event::parse(EVENT.as_bytes()).expect("event");
        let d = decide(engine, set, event).await;
        let body = serde_json::to_vec(&d).expect("decision serializes");
        let ns = t.elapsed().as_nanos() as u64;
        (ns, serde_json::from_slice(&body).expect("JSON"))
    }
    // The first prompt run calls the stand-in and fills the cache.
    let (_, first) = once(&prompt_engine, &prompt_set).await;
    assert_eq!(first["decision"], "allow", "{first}");
    let (_, hit) = once(&prompt_engine, &prompt_set).await;
    assert_eq!(hit["hooks"][0]["prompt"]["cacheHit"], true, "{hit}");
    let (_, http) = once(&http_engine, &http_set).await;
    assert_eq!(http["hooks"][0]["decision"], "allow", "{http}");

    let (rounds, per_round) = if full { (10, 2_000) } else { (1, 20) };
    let (mut http_lat, mut hit_lat) = (Vec::new(), Vec::new());
    let (mut http_wall, mut hit_wall) = (Duration::ZERO, Duration::ZERO);
    for _ in 0..rounds {
        let t = Instant::now();
        for _ in 0..per_round {
            http_lat.push(once(&http_engine, &http_set).await.0);
        }
        http_wall += t.elapsed();
        let t = Instant::now();
        for _ in 0..per_round {
            hit_lat.push(once(&prompt_engine, &prompt_set).await.0);
        }
        hit_wall += t.elapsed();
    }
    assert_eq!(
        prompt_engine.metrics.prompt_cache_hits.get() as usize,
        rounds * per_round + 1,
        "every measured prompt run is a cache hit"
    );
    let (h, p) = (stats(http_lat, http_wall), stats(hit_lat, hit_wall));
    println!("\n### Prompt hook answered from the decision cache vs a non-prompt hook (issue 4)\n");
    println!(
        "In process (`Event::parse` + `decide` + serialize), alternating rounds; the http hook calls a loopback hook, the cache hit calls nothing.\n"
    );
    println!("| scenario | n | p50 µs | p99 µs | mean µs | p50 ratio | mean ratio |");
    println!("|---|---:|---:|---:|---:|---:|---:|");
    println!(
        "| 1 http hook (loopback) | {} | {:.2} | {:.2} | {:.2} | 1.00× | 1.00× |",
        h.n, h.p50_us, h.p99_us, h.mean_us
    );
    println!(
        "| 1 prompt hook, cache hit | {} | {:.2} | {:.2} | {:.2} | {} | {} |",
        p.n,
        p.p50_us,
        p.p99_us,
        p.mean_us,
        ratio(p.p50_us, h.p50_us),
        ratio(p.mean_us, h.mean_us)
    );
}

fn main() {
    let full = std::env::args().any(|a| a == "--bench");
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("tokio runtime")
        // Spawned, so the clients run on the worker threads like the servers do, not on
        // the extra thread that `block_on` parks.
        .block_on(async move { tokio::spawn(run(full)).await })
        .expect("bench task");
}
