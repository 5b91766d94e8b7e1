//! Issue 15's figures: agenthooks against OPA (the version `e2e/opa/go.mod` pins) in one
//! run, on generated hook sets and their Rego twins (`agenthooks_e2e::opa`), writing
//! `bench/report.md` and `bench/report.json` (the PNG: `bench/plot.py`). bench/README.md
//! says what is measured and how to read it.
//!
//! 1. **Agreement**: every event of every set (the timed ones and the agreement events)
//!    is decided by our engine in process, by OPA's Go API in the driver, and by a plain
//!    model of the rules; the three must select the same rule ids, or the bench fails.
//! 2. **In process**: ours = [`agenthooks_e2e::opa::ours_selected`] on an already-parsed
//!    event; OPA = `PreparedEvalQuery.Eval` on an already-parsed input (the Go driver).
//!    Each decision is timed alone and checked against the agreed one.
//! 3. **Over HTTP on loopback**: the release `agenthooks-dispatcher` (standalone, one per
//!    set), `opa run --server` (one per set) and a bare axum server (the ceiling: reads
//!    the body, answers a fixed decision; a child process like the others) under the same
//!    load generator: keep-alive reqwest clients as tokio tasks, one request in flight
//!    each, at 1, 16 and 64 connections. Every answer is checked.
//!
//! Both timed phases run in rounds that visit every cell in turn, in a new order each
//! round (in process a rotation, the two engines alternating which goes first; over HTTP
//! a shuffle), so load from elsewhere on the machine hits all alike. Knobs (environment): `AGENTHOOKS_BENCH_SIZES` (default
//! `10,100,1000,10000`: the spread sets; the one-tenant set of 1,000 hooks comes with
//! 1000), `AGENTHOOKS_BENCH_CONNECTIONS` (`1,16,64`), `AGENTHOOKS_BENCH_ROUNDS` (6),
//! `AGENTHOOKS_BENCH_IN_PROCESS_SECS` (3: per engine, set and input size, over all
//! rounds), `AGENTHOOKS_BENCH_SECS` (3: per server, set, input size and connection count),
//! `AGENTHOOKS_BENCH_HTTP` (`0`: the in-process phase only), `AGENTHOOKS_BENCH_REPORT_DIR`
//! (default `bench/`), `AGENTHOOKS_BENCH_PIN` (`0`: no CPU pinning; see [`Pinning`]).
//!
//! Run: `make bench-opa`, or `bash e2e/opa/build.sh && cargo build --release -p
//! agenthooks-dispatcher && cargo bench -p agenthooks-e2e --bench opa`. Without `--bench`
//! (e.g. `cargo test --all-targets`) it only checks the wiring on small sets, and only
//! the in-process part unless OPA is already built; it writes no report.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use agenthooks_crds::Edition;
use agenthooks_crds::sealed::SealKey;
use agenthooks_dispatcher::event::Event;
use agenthooks_dispatcher::hookset::HookSet;
use agenthooks_e2e::opa::{BenchEvent, OpaDriver, RuleSet, Shape, Timing, ours_selected};
use agenthooks_e2e::procs::{Proc, bin, free_port};
use serde::Serialize;
use serde_json::{Value, json};

/// Where the processes of the HTTP phase run (`AGENTHOOKS_BENCH_PIN`, on by default with
/// two cores or more): every server (the ceiling, ours, OPA) on the last core, started
/// under `taskset`, and the load generator — this process's threads, the in-process
/// phase and OPA's in-process driver included — on the others. Unpinned, the generator
/// and the server under test share every core, so a server's throughput measures the
/// machine split between them: on two cores the bare ceiling itself reached only ~2.7×
/// OPA, which bounded every "≥ 3× OPA" cell whatever our server did. Pinned, each server
/// gets one whole core of its own and the figures compare the servers' cost per request.
#[derive(Clone, Debug)]
struct Pinning {
    server: usize,
    generator: Vec<usize>,
}

impl Pinning {
    fn from_env() -> Option<Pinning> {
        if std::env::var("AGENTHOOKS_BENCH_PIN").is_ok_and(|v| v == "0") {
            return None;
        }
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        (cores >= 2).then(|| Pinning {
            server: cores - 1,
            generator: (0..cores - 1).collect(),
        })
    }

    /// Pins the calling thread to the generator's cores (threads and children it starts
    /// afterwards inherit it).
    fn pin_generator_thread(&self) {
        // SAFETY: a cpu_set_t zeroed, filled with CPU_SET and passed with its own size to
        // sched_setaffinity(2) for the calling thread (pid 0).
        unsafe {
            let mut set: libc::cpu_set_t = std::mem::zeroed();
            for &c in &self.generator {
                libc::CPU_SET(c, &mut set);
            }
            libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set);
        }
    }

    /// `bin args` as started on the server core (`taskset -c N bin args`).
    fn server_command(&self, bin: &Path, args: &[String]) -> (PathBuf, Vec<String>) {
        let mut all = vec![
            "-c".to_string(),
            self.server.to_string(),
            bin.display().to_string(),
        ];
        all.extend(args.iter().cloned());
        (PathBuf::from("taskset"), all)
    }

    fn describe(&self) -> String {
        format!(
            "Servers pinned to core {} (`taskset`), the load generator to core(s) {:?} (`AGENTHOOKS_BENCH_PIN=0` shares every core).",
            self.server, self.generator
        )
    }
}

/// Starts a server of the HTTP phase, on the server core when pinned.
fn start_server(
    pin: Option<&Pinning>,
    name: &str,
    bin: &Path,
    args: &[String],
    env: &[(&str, &str)],
    logs: &Path,
) -> Proc {
    match pin {
        Some(p) => {
            let (bin, args) = p.server_command(bin, args);
            Proc::start(name, &bin, &args, env, logs)
        }
        None => Proc::start(name, bin, args, env, logs),
    }
}

/// Knobs of one run.
#[derive(Clone)]
struct Config {
    full: bool,
    sizes: Vec<usize>,
    conns: Vec<usize>,
    rounds: usize,
    in_process: Duration,
    http: Duration,
    /// Run the HTTP phase (`AGENTHOOKS_BENCH_HTTP=0`: in process only).
    with_http: bool,
    report_dir: PathBuf,
    pin: Option<Pinning>,
}

impl Config {
    fn from_env(full: bool) -> Config {
        let list = |k: &str, d: &str| -> Vec<usize> {
            std::env::var(k)
                .unwrap_or_else(|_| d.into())
                .split(',')
                .filter_map(|n| n.trim().parse().ok())
                .filter(|n| *n > 0)
                .collect()
        };
        let num = |k: &str, d: f64| -> f64 {
            std::env::var(k)
                .ok()
                .and_then(|v| v.parse().ok())
                .filter(|v: &f64| *v > 0.0)
                .unwrap_or(d)
        };
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        let report_dir = std::env::var("AGENTHOOKS_BENCH_REPORT_DIR")
            .map(PathBuf::from)
            .unwrap_or_else(|_| root.join("bench"));
        if !full {
            return Config {
                full,
                sizes: vec![10, 100],
                conns: vec![1, 4],
                rounds: 1,
                in_process: Duration::from_millis(20),
                http: Duration::from_millis(100),
                with_http: true,
                report_dir,
                pin: None,
            };
        }
        Config {
            full,
            sizes: list("AGENTHOOKS_BENCH_SIZES", "10,100,1000,10000"),
            conns: list("AGENTHOOKS_BENCH_CONNECTIONS", "1,16,64"),
            rounds: num("AGENTHOOKS_BENCH_ROUNDS", 6.0) as usize,
            in_process: Duration::from_secs_f64(num("AGENTHOOKS_BENCH_IN_PROCESS_SECS", 3.0)),
            http: Duration::from_secs_f64(num("AGENTHOOKS_BENCH_SECS", 3.0)),
            with_http: std::env::var("AGENTHOOKS_BENCH_HTTP").as_deref() != Ok("0"),
            report_dir,
            pin: Pinning::from_env(),
        }
    }

    /// The sets: the spread ones, and with 1,000 (a 100-rule one-tenant set in the wiring
    /// check) the one-tenant set of 1,000 hooks of which 10 are selected.
    fn sets(&self) -> Vec<RuleSet> {
        let mut sets: Vec<RuleSet> = self.sizes.iter().map(|n| RuleSet::spread(*n)).collect();
        if !self.full {
            sets.push(RuleSet::one_tenant(100, 10));
        } else if self.sizes.contains(&1000) {
            sets.push(RuleSet::one_tenant(1000, 10));
        }
        sets
    }
}

/// Where the bench writes its inputs and logs: `target/opa-bench/`, emptied first.
fn work_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("current exe");
    // target/<profile>/deps/<bench> → target
    let target = exe
        .parent()
        .and_then(Path::parent)
        .and_then(Path::parent)
        .expect("target dir");
    let dir = target.join("opa-bench");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("logs")).expect("work dir");
    dir
}

/// One set with everything both phases need.
struct Prepared {
    set: RuleSet,
    events: Vec<BenchEvent>,
    parsed: Vec<Event>,
    hooks: HookSet,
    /// Our decision of every event, in resolution order (the first one decides a block).
    ours: Vec<Vec<String>>,
    manifests: PathBuf,
    rego: PathBuf,
    inputs: PathBuf,
    /// Events compared, and of those, events that select at least one rule.
    agreed: (usize, usize),
    opa_prepare_ms: f64,
    our_load_ms: f64,
}

impl Prepared {
    /// Indices of the timed events of one input size.
    fn timed(&self, large: bool) -> Vec<usize> {
        (0..self.events.len())
            .filter(|i| self.events[*i].timed && self.events[*i].large == large)
            .collect()
    }
}

fn prepare(set: RuleSet, dir: &Path, hook_url: &str) -> Prepared {
    let slug: String = set
        .label
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
        .collect();
    let manifests = dir.join(format!("hooks-{slug}.yaml"));
    let rego = dir.join(format!("policy-{slug}.rego"));
    let inputs = dir.join(format!("inputs-{slug}.jsonl"));
    std::fs::write(&manifests, set.manifests(hook_url)).expect("write manifests");
    std::fs::write(&rego, set.rego()).expect("write policy");
    let events = set.events();
    let mut lines = String::new();
    for e in &events {
        lines.push_str(&e.json().to_string());
        lines.push('\n');
    }
    std::fs::write(&inputs, lines).expect("write inputs");
    // The hooks as standalone mode loads them.
    let started = Instant::now();
    let loaded = agenthooks_dispatcher::manifests::load_all(
        &manifests,
        agenthooks_crds::DEFAULT_MASTER_NAMESPACE,
        Edition::Lite,
        &SealKey::generate(),
    )
    .unwrap_or_else(|e| panic!("{}: {e}", manifests.display()));
    let our_load_ms = started.elapsed().as_secs_f64() * 1e3;
    assert_eq!(loaded.hooks.len(), set.len(), "every generated hook loads");
    assert!(loaded.hooks.unavailable().is_empty());
    let parsed: Vec<Event> = events.iter().map(BenchEvent::parsed).collect();
    let ours = parsed
        .iter()
        .map(|e| ours_selected(&loaded.hooks, e).expect("no CEL error"))
        .collect();
    Prepared {
        set,
        events,
        parsed,
        hooks: loaded.hooks,
        ours,
        manifests,
        rego,
        inputs,
        agreed: (0, 0),
        opa_prepare_ms: 0.0,
        our_load_ms,
    }
}

/// Ours, OPA's and the model's decisions must be the same ids for every event.
fn check_agreement(p: &mut Prepared, opa: &[Vec<String>]) {
    assert_eq!(
        opa.len(),
        p.events.len(),
        "{}: one OPA decision per input",
        p.set.label
    );
    let mut selecting = 0;
    for (i, e) in p.events.iter().enumerate() {
        let mut ours = p.ours[i].clone();
        ours.sort();
        let model = p.set.model(e);
        assert!(
            ours == model && opa[i] == model,
            "set {}: the engines disagree on event {i} {e:?}:\n  ours  {ours:?}\n  OPA   {:?}\n  model {model:?}",
            p.set.label,
            opa[i]
        );
        if e.timed {
            assert!(ours.is_empty(), "a timed event selects nothing");
        }
        selecting += usize::from(!ours.is_empty());
    }
    p.agreed = (p.events.len(), selecting);
}

/// Times `ours_selected` on events `which` in turn for `time`, checking every decision.
fn time_ours(p: &Prepared, which: &[usize], time: Duration, lat: &mut Vec<u64>) {
    let deadline = Instant::now() + time;
    let mut k = 0;
    while Instant::now() < deadline {
        let i = which[k % which.len()];
        let t = Instant::now();
        let got = ours_selected(&p.hooks, &p.parsed[i]);
        let ns = t.elapsed().as_nanos() as u64;
        assert!(
            got.as_ref() == Ok(&p.ours[i]),
            "set {}: timed decision {got:?} differs from {:?}",
            p.set.label,
            p.ours[i]
        );
        lat.push(ns);
        k += 1;
    }
}

/// What timing one decision alone adds on our side: two clock reads around nothing, the
/// same way [`time_ours`] takes them (p50 in ns).
fn clock_overhead_ns() -> f64 {
    let mut lat = Vec::with_capacity(200_000);
    for _ in 0..200_000 {
        let t = Instant::now();
        std::hint::black_box(());
        lat.push(t.elapsed().as_nanos() as u64);
    }
    Timing::of(lat).p50_ns
}

/// One in-process cell's figures.
#[derive(Serialize, Clone)]
struct InProcessRow {
    set: String,
    rules: usize,
    shape: &'static str,
    /// Hooks resolved for a timed event, and hooks whose both filters are evaluated.
    resolved: usize,
    evaluated: usize,
    input: &'static str,
    ours: Timing,
    opa: Timing,
}

fn shape_name(s: Shape) -> &'static str {
    match s {
        Shape::Spread => "spread",
        Shape::OneTenant { .. } => "one-tenant",
    }
}

/// The in-process phase: agreement, then rounds of both engines on every cell.
fn in_process(
    cfg: &Config,
    prepared: &mut [Prepared],
    driver_bin: Option<&Path>,
    logs: &Path,
) -> Vec<InProcessRow> {
    let mut drivers: Vec<Option<OpaDriver>> = Vec::new();
    for p in prepared.iter_mut() {
        let Some(driver_bin) = driver_bin else {
            // Wiring check without OPA: ours against the model only.
            let model: Vec<Vec<String>> = p.events.iter().map(|e| p.set.model(e)).collect();
            check_agreement(p, &model);
            drivers.push(None);
            continue;
        };
        let log = logs.join(format!("driver-{}.log", p.set.len()));
        let mut d = OpaDriver::start(driver_bin, &p.rego, &p.inputs, &log);
        p.opa_prepare_ms = d.prepare_ns as f64 / 1e6;
        let opa = d.decide();
        check_agreement(p, &opa);
        eprintln!(
            "[opa bench] set {}: {} events agree ({} select rules); OPA prepared in {:.0} ms, ours loaded in {:.0} ms",
            p.set.label, p.agreed.0, p.agreed.1, p.opa_prepare_ms, p.our_load_ms
        );
        drivers.push(Some(d));
    }
    // Cells: (set index, large). Latencies per cell and engine.
    let cells: Vec<(usize, bool)> = (0..prepared.len())
        .flat_map(|s| [(s, false), (s, true)])
        .collect();
    let mut ours_lat: Vec<Vec<u64>> = vec![Vec::new(); cells.len()];
    let slice = cfg.in_process / cfg.rounds as u32;
    let warmup = slice.min(Duration::from_millis(200));
    let group = |c: usize, warm: bool| format!("{}c{c}", if warm { "warm-" } else { "" });
    // Round 0 warms up (not recorded).
    for round in 0..=cfg.rounds {
        let warm = round == 0;
        for k in 0..cells.len() {
            let c = (k + round) % cells.len();
            let (s, large) = cells[c];
            let p = &prepared[s];
            let which = p.timed(large);
            let t = if warm { warmup } else { slice };
            let ours_first = round % 2 == 0;
            for engine in 0..2 {
                if (engine == 0) == ours_first {
                    let mut scratch = Vec::new();
                    let lat = if warm { &mut scratch } else { &mut ours_lat[c] };
                    time_ours(p, &which, t, lat);
                } else if let Some(d) = drivers[s].as_mut() {
                    d.time(&group(c, warm), t.as_millis().max(1) as u64, &which);
                }
            }
        }
        if !warm {
            eprintln!("[opa bench] in process: round {round}/{}", cfg.rounds);
        }
    }
    let mut rows = Vec::new();
    for (c, (s, large)) in cells.iter().enumerate() {
        let p = &prepared[*s];
        let (resolved, evaluated) = p.set.per_event();
        rows.push(InProcessRow {
            set: p.set.label.clone(),
            rules: p.set.len(),
            shape: shape_name(p.set.shape),
            resolved,
            evaluated,
            input: if *large { "256 KiB" } else { "small" },
            ours: Timing::of(std::mem::take(&mut ours_lat[c])),
            opa: drivers[*s]
                .as_mut()
                .map(|d| d.stats(&group(c, false)))
                .unwrap_or_default(),
        });
    }
    rows
}

// ---------------------------------------------------------------- HTTP

/// The ceiling's answer: the shape of a decision, fixed.
const CEILING_ANSWER: &str =
    r#"{"event_id":"00000000-0000-4000-8000-000000000000","decision":"allow","hooks":[]}"#;

/// `--serve-ceiling ADDR`: the bare axum ceiling as a process of its own (like the
/// dispatcher and OPA): reads the body, answers [`CEILING_ANSWER`].
fn serve_ceiling(addr: &str) {
    use axum::routing::post;
    let addr: std::net::SocketAddr = addr.parse().expect("ceiling address");
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("tokio runtime")
        .block_on(async move {
            let app = axum::Router::new().route(
                "/v1/dispatch",
                post(|_body: axum::body::Bytes| async {
                    (
                        [(axum::http::header::CONTENT_TYPE, "application/json")],
                        CEILING_ANSWER,
                    )
                }),
            );
            let listener = tokio::net::TcpListener::bind(addr).await.expect("bind");
            axum::serve(listener, app).await.expect("serve");
        });
}

/// The local hook every generated hook calls (only agreement events reach it): blocks.
async fn blocker() -> String {
    use axum::routing::post;
    let app = axum::Router::new().route(
        "/block",
        post(|_body: axum::body::Bytes| async {
            (
                [(axum::http::header::CONTENT_TYPE, "application/json")],
                r#"{"decision":"block","reason":"bench blocker"}"#,
            )
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(async move { axum::serve(listener, app).await.expect("serve") });
    format!("http://{addr}/block")
}

fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .no_proxy()
        .pool_max_idle_per_host(1)
        .tcp_nodelay(true)
        .build()
        .expect("bench client")
}

async fn post(c: &reqwest::Client, url: &str, body: bytes::Bytes) -> Vec<u8> {
    let r = c
        .post(url)
        .header("content-type", "application/json")
        .body(body)
        .send()
        .await
        .unwrap_or_else(|e| panic!("{url}: {e}"));
    let status = r.status();
    let bytes = r.bytes().await.unwrap_or_else(|e| panic!("{url}: {e}"));
    assert!(
        status.is_success(),
        "{url}: {status}: {}",
        String::from_utf8_lossy(&bytes)
    );
    bytes.to_vec()
}

fn contains(hay: &[u8], needle: &[u8]) -> bool {
    hay.windows(needle.len()).any(|w| w == needle)
}

/// Which server a target is.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Server {
    Ceiling,
    Ours,
    Opa,
}

/// One server under load: its URL, the bodies of its timed events (small, large), what
/// every answer to them must hold, and 64 clients (each one connection).
struct Target {
    server: Server,
    /// Index in `prepared` (not for the ceiling).
    set: Option<usize>,
    url: String,
    bodies: [Vec<bytes::Bytes>; 2],
    expect: &'static [u8],
    clients: Vec<reqwest::Client>,
}

/// One HTTP cell's figures.
#[derive(Serialize, Clone, Copy, Default)]
struct HttpStats {
    n: usize,
    rps: f64,
    p50_us: f64,
    p99_us: f64,
    mean_us: f64,
}

#[derive(Default)]
struct Acc {
    lat: Vec<u64>,
    /// Requests done inside the windows: each counts for the fraction of its duration that
    /// fell inside its slice's window (requests still in flight when a slice ends count in
    /// part), so a slow server is not charged for the drain after the window.
    done: f64,
    /// The windows' total length.
    window: Duration,
}

impl Acc {
    fn stats(&self) -> HttpStats {
        let t = Timing::of(self.lat.clone());
        HttpStats {
            n: t.n,
            rps: self.done / self.window.as_secs_f64().max(1e-9),
            p50_us: t.p50_ns / 1e3,
            p99_us: t.p99_ns / 1e3,
            mean_us: t.mean_ns / 1e3,
        }
    }
}

/// Every client keeps one request in flight for `time` (the window), cycling through
/// `bodies`; requests in flight when it ends are awaited and counted in part.
async fn load(
    clients: &[reqwest::Client],
    url: &str,
    bodies: &[bytes::Bytes],
    expect: &'static [u8],
    time: Duration,
    acc: Option<&mut Acc>,
) {
    let started = Instant::now();
    let deadline = started + time;
    let tasks: Vec<_> = clients
        .iter()
        .enumerate()
        .map(|(i, c)| {
            let (c, url, bodies) = (c.clone(), url.to_string(), bodies.to_vec());
            tokio::spawn(async move {
                let (mut lat, mut done) = (Vec::new(), 0.0);
                let mut k = i;
                while Instant::now() < deadline {
                    let body = bodies[k % bodies.len()].clone();
                    k += 1;
                    let t = Instant::now();
                    let answer = post(&c, &url, body).await;
                    let end = Instant::now();
                    let took = end - t;
                    lat.push(took.as_nanos() as u64);
                    done += if end <= deadline {
                        1.0
                    } else {
                        deadline.saturating_duration_since(t).as_secs_f64()
                            / took.as_secs_f64().max(1e-12)
                    };
                    assert!(
                        contains(&answer, expect),
                        "{url}: answer {} lacks {}",
                        String::from_utf8_lossy(&answer[..answer.len().min(300)]),
                        String::from_utf8_lossy(expect)
                    );
                }
                (lat, done)
            })
        })
        .collect();
    let (mut all, mut done) = (Vec::new(), 0.0);
    for t in tasks {
        let (lat, d) = t.await.expect("client task");
        all.extend(lat);
        done += d;
    }
    if let Some(acc) = acc {
        acc.lat.extend(all);
        acc.done += done;
        acc.window += time;
    }
}

/// `0..n` in an order of its own for each `seed` (Fisher-Yates with xorshift64*:
/// deterministic, so runs visit cells alike).
fn shuffled(n: usize, seed: u64) -> Vec<usize> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let mut next = || {
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    };
    let mut order: Vec<usize> = (0..n).collect();
    for i in (1..n).rev() {
        order.swap(i, (next() % (i as u64 + 1)) as usize);
    }
    order
}

/// Polls `url` (GET) until it answers 200, up to 120 s; the time it took.
async fn wait_ready(url: &str, proc: &mut Proc) -> Duration {
    let c = client();
    let started = Instant::now();
    loop {
        if let Ok(r) = c.get(url).send().await
            && r.status().is_success()
        {
            return started.elapsed();
        }
        assert!(
            proc.running(),
            "{} exited:\n{}",
            proc.name,
            proc.log_tail(20)
        );
        assert!(
            started.elapsed() < Duration::from_secs(120),
            "{} not ready after 120 s:\n{}",
            proc.name,
            proc.log_tail(20)
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// One row of the HTTP table: a set, an input size and a connection count.
#[derive(Serialize, Clone)]
struct HttpRow {
    set: String,
    rules: usize,
    shape: &'static str,
    /// Hooks resolved for a timed event, and hooks whose both filters are evaluated.
    resolved: usize,
    evaluated: usize,
    input: &'static str,
    conns: usize,
    ceiling: HttpStats,
    ours: HttpStats,
    opa: HttpStats,
}

/// Start-up of the servers on each set: until `/readyz` (ours) or `/health` (OPA) answers.
#[derive(Serialize, Clone)]
struct StartRow {
    set: String,
    ours_ms: f64,
    opa_ms: f64,
    ours_in_process_load_ms: f64,
    opa_prepare_ms: f64,
}

struct HttpResults {
    rows: Vec<HttpRow>,
    starts: Vec<StartRow>,
    /// Events whose answers over HTTP were checked, per set.
    checked: Vec<usize>,
}

async fn over_http(
    cfg: &Config,
    prepared: Arc<Vec<Prepared>>,
    opa_bin: PathBuf,
    logs: PathBuf,
) -> HttpResults {
    let mut procs = Vec::new();
    let max_conns = cfg.conns.iter().copied().max().unwrap_or(1);
    let mut targets: Vec<Target> = Vec::new();
    let timed_bodies = |p: &Prepared, f: fn(&BenchEvent) -> Vec<u8>| -> [Vec<bytes::Bytes>; 2] {
        [false, true].map(|large| {
            p.timed(large)
                .into_iter()
                .map(|i| bytes::Bytes::from(f(&p.events[i])))
                .collect()
        })
    };

    // The ceiling, with the bodies of the first set's timed events.
    let port = free_port();
    let exe = std::env::current_exe().expect("current exe");
    let pin = cfg.pin.as_ref();
    let mut ceiling = start_server(
        pin,
        "ceiling",
        &exe,
        &["--serve-ceiling".into(), format!("127.0.0.1:{port}")],
        &[],
        &logs,
    );
    // The ceiling has no readiness route: a POST that succeeds is ready.
    let url = format!("http://127.0.0.1:{port}/v1/dispatch");
    let started = Instant::now();
    while client()
        .post(&url)
        .body("{}")
        .send()
        .await
        .map(|r| !r.status().is_success())
        .unwrap_or(true)
    {
        assert!(
            ceiling.running() && started.elapsed() < Duration::from_secs(30),
            "ceiling: {}",
            ceiling.log_tail(20)
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    targets.push(Target {
        server: Server::Ceiling,
        set: None,
        url,
        bodies: timed_bodies(&prepared[0], BenchEvent::dispatch_body),
        expect: b"\"decision\":\"allow\"",
        clients: Vec::new(),
    });
    procs.push(ceiling);

    // Ours and OPA on every set, started one at a time so their start-up is timed alone.
    let dispatcher = bin("agenthooks-dispatcher");
    if cfg.full {
        assert!(
            dispatcher.components().any(|c| c.as_os_str() == "release"),
            "the bench runs the release dispatcher: {}",
            dispatcher.display()
        );
    }
    let mut starts = Vec::new();
    for (s, p) in prepared.iter().enumerate() {
        let port = free_port();
        let name = format!("dispatcher-{}", p.set.len());
        let mut ours = start_server(
            pin,
            &name,
            &dispatcher,
            &[
                "--hooks".into(),
                p.manifests.display().to_string(),
                "--listen".into(),
                format!("127.0.0.1:{port}"),
                "--allow-anonymous".into(),
                "--audit-db".into(),
                "off".into(),
                "--http-allow-cidr".into(),
                "127.0.0.0/8".into(),
            ],
            &[("RUST_LOG", "warn")],
            &logs,
        );
        let ours_ready = wait_ready(&format!("http://127.0.0.1:{port}/readyz"), &mut ours).await;
        targets.push(Target {
            server: Server::Ours,
            set: Some(s),
            url: format!("http://127.0.0.1:{port}/v1/dispatch"),
            bodies: timed_bodies(p, BenchEvent::dispatch_body),
            expect: b"\"decision\":\"allow\",\"hooks\":[]",
            clients: Vec::new(),
        });
        procs.push(ours);
        let port = free_port();
        let mut opa = start_server(
            pin,
            &format!("opa-{}", p.set.len()),
            &opa_bin,
            &[
                "run".into(),
                "--server".into(),
                "--addr".into(),
                format!("127.0.0.1:{port}"),
                "--log-level".into(),
                "error".into(),
                "--disable-telemetry".into(),
                p.rego.display().to_string(),
            ],
            &[],
            &logs,
        );
        let opa_ready = wait_ready(&format!("http://127.0.0.1:{port}/health"), &mut opa).await;
        targets.push(Target {
            server: Server::Opa,
            set: Some(s),
            url: format!("http://127.0.0.1:{port}/v1/data/agenthooks/deny"),
            bodies: timed_bodies(p, BenchEvent::opa_body),
            expect: b"{\"result\":[]}",
            clients: Vec::new(),
        });
        procs.push(opa);
        eprintln!(
            "[opa bench] set {}: dispatcher ready in {:.0} ms, opa in {:.0} ms",
            p.set.label,
            ours_ready.as_secs_f64() * 1e3,
            opa_ready.as_secs_f64() * 1e3
        );
        starts.push(StartRow {
            set: p.set.label.clone(),
            ours_ms: ours_ready.as_secs_f64() * 1e3,
            opa_ms: opa_ready.as_secs_f64() * 1e3,
            ours_in_process_load_ms: p.our_load_ms,
            opa_prepare_ms: p.opa_prepare_ms,
        });
    }

    // Agreement over HTTP: every event of every set, both servers.
    let c = client();
    let mut checked = vec![0; prepared.len()];
    for t in &targets {
        let Some(s) = t.set else { continue };
        let p = &prepared[s];
        for (i, e) in p.events.iter().enumerate() {
            let expected = &p.ours[i];
            match t.server {
                Server::Ours => {
                    let v: Value =
                        serde_json::from_slice(&post(&c, &t.url, e.dispatch_body().into()).await)
                            .expect("JSON answer");
                    if expected.is_empty() {
                        assert!(
                            v["decision"] == "allow" && v["hooks"] == json!([]),
                            "set {} event {i}: {v}",
                            p.set.label
                        );
                    } else {
                        assert!(
                            v["decision"] == "block" && v["decidingHook"] == expected[0],
                            "set {} event {i}: expected a block by {}: {v}",
                            p.set.label,
                            expected[0]
                        );
                    }
                }
                Server::Opa => {
                    let v: Value =
                        serde_json::from_slice(&post(&c, &t.url, e.opa_body().into()).await)
                            .expect("JSON answer");
                    let mut got: Vec<String> =
                        serde_json::from_value(v["result"].clone()).expect("a set of ids");
                    got.sort();
                    let mut want = expected.clone();
                    want.sort();
                    assert_eq!(got, want, "set {} event {i}: OPA over HTTP", p.set.label);
                    checked[s] += 1;
                }
                Server::Ceiling => {}
            }
        }
    }
    eprintln!("[opa bench] answers over HTTP agree: {checked:?} events per set");

    // Open the connections, then warm every target up (not recorded).
    for t in &mut targets {
        t.clients = (0..max_conns).map(|_| client()).collect();
        load(
            &t.clients,
            &t.url,
            &t.bodies[0],
            t.expect,
            Duration::from_millis(50),
            None,
        )
        .await;
    }
    let warm = (cfg.http / cfg.rounds as u32).min(Duration::from_millis(300));
    for t in &targets {
        for large in [false, true] {
            let n = 16.min(max_conns);
            load(
                &t.clients[..n],
                &t.url,
                &t.bodies[usize::from(large)],
                t.expect,
                warm,
                None,
            )
            .await;
        }
    }

    // Cells: (target, large, conns), in rounds.
    let cells: Vec<(usize, bool, usize)> = (0..targets.len())
        .flat_map(|t| {
            [false, true]
                .into_iter()
                .flat_map(move |large| cfg.conns.iter().map(move |c| (t, large, *c)))
        })
        .collect();
    let mut accs: Vec<Acc> = cells.iter().map(|_| Acc::default()).collect();
    let slice = cfg.http / cfg.rounds as u32;
    let phase = Instant::now();
    for round in 0..cfg.rounds {
        // A new order every round: with a fixed rotation a cell would always follow the
        // same one, and what a heavy cell leaves running (OPA's GC and scavenger after
        // 64 connections of 256 KiB inputs) would always land on the same next cell.
        for c in shuffled(cells.len(), round as u64) {
            let (t, large, conns) = cells[c];
            let t = &targets[t];
            load(
                &t.clients[..conns],
                &t.url,
                &t.bodies[usize::from(large)],
                t.expect,
                slice,
                Some(&mut accs[c]),
            )
            .await;
        }
        eprintln!(
            "[opa bench] over HTTP: round {}/{} ({:.0} s)",
            round + 1,
            cfg.rounds,
            phase.elapsed().as_secs_f64()
        );
    }
    let stat = |server: Server, set: Option<usize>, large: bool, conns: usize| -> HttpStats {
        cells
            .iter()
            .position(|(t, l, c)| {
                targets[*t].server == server
                    && (server == Server::Ceiling || targets[*t].set == set)
                    && *l == large
                    && *c == conns
            })
            .map(|i| accs[i].stats())
            .unwrap_or_default()
    };
    let mut rows = Vec::new();
    for (s, p) in prepared.iter().enumerate() {
        let (resolved, evaluated) = p.set.per_event();
        for large in [false, true] {
            for &conns in &cfg.conns {
                rows.push(HttpRow {
                    set: p.set.label.clone(),
                    rules: p.set.len(),
                    shape: shape_name(p.set.shape),
                    resolved,
                    evaluated,
                    input: if large { "256 KiB" } else { "small" },
                    conns,
                    ceiling: stat(Server::Ceiling, None, large, conns),
                    ours: stat(Server::Ours, Some(s), large, conns),
                    opa: stat(Server::Opa, Some(s), large, conns),
                });
            }
        }
    }
    for mut p in procs {
        p.stop(Duration::from_secs(5));
    }
    HttpResults {
        rows,
        starts,
        checked,
    }
}

// ---------------------------------------------------------------- report

fn ratio(a: f64, b: f64) -> String {
    if a > 0.0 && b > 0.0 {
        format!("{:.2}×", a / b)
    } else {
        "-".into()
    }
}

/// `met` / `missed` against a goal; `-` when there is none.
fn goal(value: f64, ok: impl Fn(f64) -> bool) -> &'static str {
    if value.is_finite() && value > 0.0 {
        if ok(value) { "met" } else { "**missed**" }
    } else {
        "-"
    }
}

fn us(ns: f64) -> String {
    if ns >= 100_000.0 {
        format!("{:.0}", ns / 1e3)
    } else {
        format!("{:.2}", ns / 1e3)
    }
}

fn cmd_out(cmd: &str, args: &[&str]) -> String {
    std::process::Command::new(cmd)
        .args(args)
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_else(|| "?".into())
}

fn cpu_model() -> String {
    std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|t| {
            t.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split(':').nth(1))
                .map(|s| s.trim().to_string())
        })
        .unwrap_or_else(|| "?".into())
}

struct Meta {
    opa_version: String,
    /// [`clock_overhead_ns`].
    clock_ns: f64,
    /// `/proc/loadavg`'s 1- and 5-minute figures when the run started and ended.
    load: (String, String),
    started: chrono::DateTime<chrono::Utc>,
    took: Duration,
    cfg_line: String,
}

fn report(
    meta: &Meta,
    prepared: &[Prepared],
    inproc: &[InProcessRow],
    http: Option<&HttpResults>,
) -> String {
    use std::fmt::Write as _;
    let mut o = String::new();
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let commit = cmd_out(
        "git",
        &[
            "-C",
            &root.display().to_string(),
            "rev-parse",
            "--short",
            "HEAD",
        ],
    );
    let _ = writeln!(o, "# agenthooks vs OPA {}\n", meta.opa_version);
    let _ = writeln!(
        o,
        "Written by `cargo bench -p agenthooks-e2e --bench opa` (`make bench-opa`; bench/README.md says how to read it) on {} at commit `{commit}`: {} cores ({}), whole run {:.1} min. {}\n",
        meta.started.format("%Y-%m-%d %H:%M UTC"),
        // `nproc` counts this process's cores, which pinning narrows: the machine's.
        cmd_out("nproc", &["--all"]),
        cpu_model(),
        meta.took.as_secs_f64() / 60.0,
        meta.cfg_line
    );
    let _ = writeln!(
        o,
        "Load average (1 min, 5 min) at the start: {}; at the end: {}. Other work on the machine shares its cores with both engines alike (rounds interleave every cell), but it widens tails: read the p50s first.\n",
        meta.load.0, meta.load.1
    );
    let _ = writeln!(
        o,
        "Every set is N generated tenant-scoped `pre_tool_use` AgentHooks, each with a `matcher` regex on `tool_name` and an `ifExpr` on `tool_input.cmd`, and the equivalent Rego (one `deny contains \"<namespace>/<name>\" if {{ input.event == …; input.tenant_id == …; regex.match(…, input.tool_name); startswith/contains/endswith(input.tool_input.cmd, …) }}` per hook). *Spread* sets put rule i in tenant `t(i mod 100)`; every matcher matches the timed tool, so for a timed event **every hook of its tenant has both filters evaluated** (the condition is false: the answer is allow). The *one-tenant* set has 1,000 hooks in one tenant, of which the matchers select 10. Timed events: `tool_input` `{{\"cmd\": …}}` (*small*) or that plus a 256 KiB field (`tool_input` just under the dispatcher's 256 KiB cap) that no filter reads (*256 KiB*).\n"
    );
    // Agreement.
    let _ = writeln!(o, "## Agreement\n");
    let _ = writeln!(
        o,
        "Every event below was decided by our engine, by OPA and by a plain model of the rules, and all three selected the same rule ids (a difference fails the bench). Every timed decision is checked again against these, in process and over HTTP.\n"
    );
    let _ = writeln!(
        o,
        "| set | events compared in process | of which select ≥ 1 rule | events checked over HTTP (both servers) |"
    );
    let _ = writeln!(o, "|---|---:|---:|---:|");
    for (s, p) in prepared.iter().enumerate() {
        let _ = writeln!(
            o,
            "| {} | {} | {} | {} |",
            p.set.label,
            p.agreed.0,
            p.agreed.1,
            http.map(|h| h.checked[s].to_string())
                .unwrap_or_else(|| "-".into())
        );
    }
    // In process.
    let _ = writeln!(o, "\n## In process: one decision, from a parsed event\n");
    let _ = writeln!(
        o,
        "Ours: `ours_selected` (e2e/src/opa.rs: `HookSet::select`, resolution through the matcher index, then `filters_match` for `ifExpr`, as `chain::decide` does) on an `Event` already parsed. OPA: `PreparedEvalQuery.Eval` with the input already an `ast.Value` and the server's inter-query value cache (compiled regexes). Each decision timed alone; µs. Goal: ours ≤ 0.1× OPA's time at 10, 100 and 1,000 rules, both inputs.\n"
    );
    let _ = writeln!(
        o,
        "Timing a decision alone includes two clock reads: {:.0} ns (p50) on our side on this machine, within every figure of ours below (Go's two `time.Now()` weigh about as much on OPA's).\n",
        meta.clock_ns
    );
    let _ = writeln!(
        o,
        "| rules | hooks resolved / both filters evaluated per event | input | ours p50 µs | ours mean µs | OPA p50 µs | OPA mean µs | ours ÷ OPA p50 | ours ÷ OPA mean | goal ≤ 0.1× |"
    );
    let _ = writeln!(o, "|---|---|---|---:|---:|---:|---:|---:|---:|---|");
    for r in inproc {
        let gated = r.shape == "spread" && r.rules <= 1000;
        let _ = writeln!(
            o,
            "| {} | {} / {} | {} | {} | {} | {} | {} | {} | {} | {} |",
            r.set,
            r.resolved,
            r.evaluated,
            r.input,
            us(r.ours.p50_ns),
            us(r.ours.mean_ns),
            us(r.opa.p50_ns),
            us(r.opa.mean_ns),
            ratio(r.ours.p50_ns, r.opa.p50_ns),
            ratio(r.ours.mean_ns, r.opa.mean_ns),
            if gated {
                goal(r.ours.p50_ns / r.opa.p50_ns, |x| x <= 0.1)
            } else {
                "-"
            }
        );
    }
    let _ = writeln!(o, "\n### A 256 KiB input ÷ a small one (p50, in process)\n");
    let _ = writeln!(o, "Goal: ours ≤ 1.2× (the filters read one field).\n");
    let _ = writeln!(o, "| rules | ours | OPA | goal ≤ 1.2× (ours) |");
    let _ = writeln!(o, "|---|---:|---:|---|");
    for pair in inproc.chunks(2) {
        let (small, large) = (&pair[0], &pair[1]);
        let _ = writeln!(
            o,
            "| {} | {} | {} | {} |",
            small.set,
            ratio(large.ours.p50_ns, small.ours.p50_ns),
            ratio(large.opa.p50_ns, small.opa.p50_ns),
            goal(large.ours.p50_ns / small.ours.p50_ns, |x| x <= 1.2)
        );
    }
    if let Some(h) = http {
        let _ = writeln!(o, "\n## Over HTTP on loopback\n");
        let _ = writeln!(
            o,
            "The release `agenthooks-dispatcher` (standalone, `--allow-anonymous --audit-db off`, `RUST_LOG=warn`) on each set's manifests, `opa run --server --log-level error` on its policy (`POST /v1/data/agenthooks/deny` with `{{\"input\": <event>}}`), and the bare axum ceiling (a process of its own: reads the body, answers a fixed decision), all driven by one load generator: keep-alive reqwest clients as tokio tasks, one request in flight per connection. Every answer is checked (allow with no hook run; OPA's empty set). Throughput in requests/s done inside the timed windows (a request in flight when a window closes counts for its part inside); goals at 16 connections, small input: ours ≥ 0.9× the ceiling with 10 hooks, ≥ 0.8× with 1,000 hooks of which 10 are selected, and ≥ 3× OPA at every size.\n"
        );
        for input in ["small", "256 KiB"] {
            let _ = writeln!(o, "### {input} input\n");
            let _ = writeln!(
                o,
                "| set | hooks resolved / evaluated per event | conns | ceiling req/s | ours req/s | OPA req/s | ours ÷ ceiling | OPA ÷ ceiling | ours ÷ OPA | ours p50 µs | OPA p50 µs | ceiling p50 µs | goal ours ÷ ceiling | goal ≥ 3× OPA |"
            );
            let _ = writeln!(
                o,
                "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---|"
            );
            for r in h.rows.iter().filter(|r| r.input == input) {
                let at16 = r.conns == 16 && input == "small";
                let ceiling_goal = match (r.shape, r.rules) {
                    ("spread", 10) if at16 => goal(r.ours.rps / r.ceiling.rps, |x| x >= 0.9),
                    ("one-tenant", 1000) if at16 => goal(r.ours.rps / r.ceiling.rps, |x| x >= 0.8),
                    _ => "-",
                };
                let _ = writeln!(
                    o,
                    "| {} | {} / {} | {} | {:.0} | {:.0} | {:.0} | {} | {} | {} | {:.0} | {:.0} | {:.0} | {} | {} |",
                    r.set,
                    r.resolved,
                    r.evaluated,
                    r.conns,
                    r.ceiling.rps,
                    r.ours.rps,
                    r.opa.rps,
                    ratio(r.ours.rps, r.ceiling.rps),
                    ratio(r.opa.rps, r.ceiling.rps),
                    ratio(r.ours.rps, r.opa.rps),
                    r.ours.p50_us,
                    r.opa.p50_us,
                    r.ceiling.p50_us,
                    ceiling_goal,
                    if at16 {
                        goal(r.ours.rps / r.opa.rps, |x| x >= 3.0)
                    } else {
                        "-"
                    }
                );
            }
            let _ = writeln!(o);
        }
        let _ = writeln!(o, "### Start-up\n");
        let _ = writeln!(
            o,
            "Until the server answers `/readyz` (ours) or `/health` (OPA) after it starts; and in process, loading the manifests into a `HookSet` (ours) and preparing the query (OPA's driver).\n"
        );
        let _ = writeln!(
            o,
            "| set | ours to ready ms | OPA to ready ms | ours load in process ms | OPA prepare in process ms |"
        );
        let _ = writeln!(o, "|---|---:|---:|---:|---:|");
        for s in &h.starts {
            let _ = writeln!(
                o,
                "| {} | {:.0} | {:.0} | {:.0} | {:.0} |",
                s.set, s.ours_ms, s.opa_ms, s.ours_in_process_load_ms, s.opa_prepare_ms
            );
        }
    }
    let _ = writeln!(o, "\n![decision cost against hook count](report.png)");
    o
}

/// `/proc/loadavg`'s 1- and 5-minute figures.
fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|t| t.split_whitespace().take(2).collect::<Vec<_>>().join(", "))
        .unwrap_or_else(|_| "?".into())
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if let Some(i) = args.iter().position(|a| a == "--serve-ceiling") {
        serve_ceiling(args.get(i + 1).expect("--serve-ceiling ADDR"));
        return;
    }
    let full = args.iter().any(|a| a == "--bench");
    let cfg = Config::from_env(full);
    let started_at = chrono::Utc::now();
    let load_at_start = loadavg();
    let started = Instant::now();
    let _ = rustls::crypto::ring::default_provider().install_default();
    // OPA and the driver: built now in a real run; only if already built in a wiring check.
    let opa = agenthooks_e2e::opa::opa_dir(full);
    if opa.is_none() {
        eprintln!(
            "[opa bench] wiring check without OPA (not built: bash e2e/opa/build.sh): our engine against the model only"
        );
    }
    let dir = work_dir();
    let logs = dir.join("logs");
    // The load generator (and the in-process phase) off the servers' core.
    if let Some(p) = &cfg.pin {
        p.pin_generator_thread();
    }
    let pin = cfg.pin.clone();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .on_thread_start(move || {
            if let Some(p) = &pin {
                p.pin_generator_thread();
            }
        })
        .build()
        .expect("tokio runtime");
    let hook_url = rt.block_on(blocker());
    let mut prepared: Vec<Prepared> = cfg
        .sets()
        .into_iter()
        .map(|s| prepare(s, &dir, &hook_url))
        .collect();
    let driver = opa.as_ref().map(|d| d.join("opa-bench-driver"));
    let inproc = in_process(&cfg, &mut prepared, driver.as_deref(), &logs);
    let prepared = Arc::new(prepared);
    let http = opa.as_ref().filter(|_| cfg.with_http).map(|d| {
        let (cfg_ref, prepared, opa_bin, logs) = (
            cfg.clone(),
            Arc::clone(&prepared),
            d.join("opa"),
            logs.clone(),
        );
        rt.block_on(async move {
            // Spawned, so the clients run on the worker threads.
            tokio::spawn(async move { over_http(&cfg_ref, prepared, opa_bin, logs).await })
                .await
                .expect("HTTP phase")
        })
    });
    let meta = Meta {
        clock_ns: clock_overhead_ns(),
        opa_version: opa
            .as_ref()
            .map(|d| {
                cmd_out(&d.join("opa").display().to_string(), &["version"])
                    .lines()
                    .next()
                    .unwrap_or("?")
                    .trim_start_matches("Version: ")
                    .to_string()
            })
            .map(|v| format!("v{v}"))
            .unwrap_or_else(|| "(not built)".into()),
        load: (load_at_start, loadavg()),
        started: started_at,
        took: started.elapsed(),
        cfg_line: format!(
            "Knobs: {} rounds, {:.1} s per engine × set × input in process, {:.1} s per server × set × input × connections over HTTP. {}",
            cfg.rounds,
            cfg.in_process.as_secs_f64(),
            cfg.http.as_secs_f64(),
            cfg.pin.as_ref().map_or(
                "No CPU pinning: servers and the load generator share every core.".to_string(),
                Pinning::describe
            )
        ),
    };
    let text = report(&meta, &prepared, &inproc, http.as_ref());
    println!("{text}");
    if !full {
        eprintln!(
            "[opa bench] wiring check done (run with --bench for figures; no report written)"
        );
        return;
    }
    let data = json!({
        "opa_version": meta.opa_version,
        "in_process": inproc,
        "http": http.as_ref().map(|h| &h.rows),
        "startup": http.as_ref().map(|h| &h.starts),
    });
    std::fs::create_dir_all(&cfg.report_dir).expect("report dir");
    std::fs::write(cfg.report_dir.join("report.md"), &text).expect("write report.md");
    std::fs::write(
        cfg.report_dir.join("report.json"),
        serde_json::to_string_pretty(&data).expect("JSON") + "\n",
    )
    .expect("write report.json");
    eprintln!(
        "[opa bench] wrote {}/report.md and report.json in {:.1} min; the plot: /usr/bin/python3 bench/plot.py",
        cfg.report_dir.display(),
        started.elapsed().as_secs_f64() / 60.0
    );
}
