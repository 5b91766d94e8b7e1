//! Issue 15's figures (points 5 and 6), on the real API server with one operator and two
//! dispatcher processes (release builds), once per hook count (`1,000` then `10,000` by
//! default, each with a fresh operator and dispatchers, in the same run):
//!
//! 1. **Bulk apply → all Accepted and Ready.** `N` AgentHooks are applied in chunks of
//!    `AGENTHOOKS_BENCH_CHUNK` (500) documents, `AGENTHOOKS_BENCH_APPLIERS` (2) `kubectl
//!    apply --server-side` processes at a time. A `kubectl get --raw ...?watch=1` of the
//!    namespace, started before the first apply, follows every hook's status: the bench
//!    notes when the last one had `Accepted=True`, and when the last one had both
//!    `Accepted=True` and `Ready=True` (each for the hook's current generation). Times
//!    count from the start of the first apply; the apply's own duration is printed too,
//!    since on two cores it is most of it.
//! 2. **One edit → enforced by every dispatcher**, `AGENTHOOKS_BENCH_EDITS` (30) times with
//!    the `N` hooks present: a blocking `pre_tool_use` hook (an HTTP hook answering `block`)
//!    gets a new `matcher` (`^edit-K$`) by `kubectl apply`, 300 ms after the previous edit
//!    was enforced; the clock starts before kubectl does, and stops once both dispatchers
//!    answer a `POST /v1/dispatch` for tool `edit-K` with `block` (each polled every 2 ms
//!    from the moment kubectl starts). p50, p99, max.
//! 3. **RSS** (`VmRSS`, and the peak `VmHWM`) of the operator and of each dispatcher after
//!    the edits, from `/proc`.
//!
//! The bulk hooks are spread over the six other events and carry a matcher, and every other
//! one an `ifExpr`, so that the operator validates and compiles each and the dispatchers
//! load each, while an event of the edited hook resolves only it.
//!
//! Run: `make bench`, or `cargo build --release --bins && cargo bench -p agenthooks-e2e
//! --bench scale`. `AGENTHOOKS_BENCH_SIZES=1000,10000` sets the hook counts,
//! `AGENTHOOKS_BENCH_SETTLE_SECS` (1200) how long to wait for all Ready, and
//! `AGENTHOOKS_E2E_BIN_DIR` runs another build's binaries (bench/README.md). Without
//! `--bench` (e.g. `cargo test --all-targets`) it does nothing.

use std::collections::HashMap;
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use agenthooks_e2e::stack::{Fleet, hook_server, http_get, metric, until_served};
use agenthooks_e2e::{ControlPlane, wait_for};
use serde_json::{Value, json};

/// The events of the bulk hooks (every one but the edited hook's `pre_tool_use`).
const BULK_EVENTS: [&str; 6] = [
    "session_start",
    "user_prompt_submit",
    "post_tool_use",
    "stop",
    "subagent_start",
    "subagent_stop",
];

fn env_or<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn bulk_hook(ns: &str, i: usize) -> String {
    let event = BULK_EVENTS[i % BULK_EVENTS.len()];
    let if_expr = if i.is_multiple_of(2) {
        format!("  ifExpr: 'size(tool_name) > {}'\n", i % 7)
    } else {
        String::new()
    };
    format!(
        "---\napiVersion: agenthooks.io/v1alpha1\nkind: AgentHook\nmetadata: {{name: bulk-{i}, namespace: {ns}}}\nspec:\n  event: {event}\n  priority: {}\n  matcher: '^bulk-{i}$'\n{if_expr}  handler:\n    type: http\n    http: {{url: 'http://127.0.0.1:9/never-called'}}\n",
        i % 50
    )
}

fn edit_hook(ns: &str, k: usize, url: &str) -> String {
    format!(
        "apiVersion: agenthooks.io/v1alpha1\nkind: AgentHook\nmetadata: {{name: edit-target, namespace: {ns}}}\nspec:\n  event: pre_tool_use\n  matcher: '^edit-{k}$'\n  handler:\n    type: http\n    http: {{url: '{url}'}}\n"
    )
}

/// What the watch saw: per hook, whether `Accepted` and `Ready` are `True` for its
/// current generation; and when the count of each first reached the target.
#[derive(Default)]
struct Tally {
    hooks: HashMap<String, (bool, bool)>,
    accepted: usize,
    ready: usize,
    target: usize,
    all_accepted: Option<Instant>,
    all_ready: Option<Instant>,
    /// Watches (re)started.
    watches: usize,
}

/// The parts of an AgentHook the tally reads.
#[derive(serde::Deserialize)]
struct Obj {
    metadata: Meta,
    #[serde(default)]
    status: Option<Status>,
}

#[derive(serde::Deserialize)]
struct Meta {
    name: String,
    #[serde(default)]
    generation: Option<i64>,
}

#[derive(serde::Deserialize)]
struct Status {
    #[serde(default)]
    conditions: Vec<Cond>,
}

#[derive(serde::Deserialize)]
#[serde(rename_all = "camelCase")]
struct Cond {
    #[serde(rename = "type")]
    type_: String,
    status: String,
    #[serde(default)]
    observed_generation: Option<i64>,
}

impl Tally {
    fn observe(&mut self, obj: &Obj, deleted: bool) {
        if !obj.metadata.name.starts_with("bulk-") {
            return;
        }
        let holds = |t: &str| {
            !deleted
                && obj.status.as_ref().is_some_and(|s| {
                    s.conditions.iter().any(|c| {
                        c.type_ == t
                            && c.status == "True"
                            && c.observed_generation == obj.metadata.generation
                    })
                })
        };
        let now = (holds("Accepted"), holds("Accepted") && holds("Ready"));
        let before = self
            .hooks
            .insert(obj.metadata.name.clone(), now)
            .unwrap_or_default();
        self.accepted = self.accepted + now.0 as usize - before.0 as usize;
        self.ready = self.ready + now.1 as usize - before.1 as usize;
        if self.target > 0 && self.accepted == self.target && self.all_accepted.is_none() {
            self.all_accepted = Some(Instant::now());
        }
        if self.target > 0 && self.ready == self.target && self.all_ready.is_none() {
            self.all_ready = Some(Instant::now());
        }
    }
}

/// Follows every AgentHook of `ns` into the tally, in a thread: a list, then `kubectl get
/// --raw ...?watch=1` from its resourceVersion; when the watch ends (the API server may
/// close a watch that falls behind), a list and a watch again.
fn watch_statuses(ns: &str, tally: Arc<Mutex<Tally>>, stop: Arc<AtomicBool>) {
    let ns = ns.to_string();
    std::thread::spawn(move || {
        let cp = ControlPlane::shared();
        let path = format!("/apis/agenthooks.io/v1alpha1/namespaces/{ns}/agenthooks");
        while !stop.load(Ordering::Relaxed) {
            let out = cp.kubectl(&["get", "--raw", &path]);
            let Ok(list) = serde_json::from_slice::<Value>(&out.stdout) else {
                std::thread::sleep(Duration::from_millis(200));
                continue;
            };
            let rv = list["metadata"]["resourceVersion"]
                .as_str()
                .unwrap_or_default()
                .to_string();
            {
                let mut t = tally.lock().unwrap();
                t.watches += 1;
                for item in list["items"].as_array().into_iter().flatten() {
                    if let Ok(obj) = serde_json::from_value::<Obj>(item.clone()) {
                        t.observe(&obj, false);
                    }
                }
            }
            let mut child = Command::new(&cp.kubectl_bin)
                .arg("--kubeconfig")
                .arg(&cp.kubeconfig)
                .args([
                    "get",
                    "--raw",
                    &format!("{path}?watch=1&resourceVersion={rv}&timeoutSeconds=1800"),
                ])
                .stdin(Stdio::null())
                .stdout(Stdio::piped())
                .stderr(Stdio::null())
                .spawn()
                .expect("kubectl get --raw ...?watch=1");
            let out = child.stdout.take().unwrap();
            #[derive(serde::Deserialize)]
            struct Ev {
                #[serde(rename = "type")]
                type_: String,
                object: Value,
            }
            for line in BufReader::new(out).lines() {
                if stop.load(Ordering::Relaxed) {
                    break;
                }
                let Ok(line) = line else { break };
                let Ok(ev) = serde_json::from_str::<Ev>(&line) else {
                    continue;
                };
                if ev.type_ == "ERROR" {
                    break;
                }
                let Ok(obj) = serde_json::from_value::<Obj>(ev.object) else {
                    continue;
                };
                tally.lock().unwrap().observe(&obj, ev.type_ == "DELETED");
            }
            let _ = child.kill();
            let _ = child.wait();
        }
    });
}

/// `VmRSS` and `VmHWM` of process `pid`, in MiB.
fn rss_mib(pid: Option<u32>) -> (f64, f64) {
    let Some(pid) = pid else {
        return (0.0, 0.0);
    };
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.split_whitespace().next()?.parse::<f64>().ok())
            .unwrap_or(0.0)
            / 1024.0
    };
    (field("VmRSS:"), field("VmHWM:"))
}

/// CPU seconds (user + system) process `pid` has used so far.
fn cpu_secs(pid: Option<u32>) -> f64 {
    let Some(pid) = pid else { return 0.0 };
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let Some(rest) = stat.rfind(')').map(|i| &stat[i + 2..]) else {
        return 0.0;
    };
    let f: Vec<f64> = rest
        .split_whitespace()
        .map(|v| v.parse().unwrap_or(0.0))
        .collect();
    // utime and stime are fields 14 and 15 of /proc/PID/stat (11 and 12 after the state).
    let ticks = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
    (f.get(11).copied().unwrap_or(0.0) + f.get(12).copied().unwrap_or(0.0)) / ticks
}

/// CPU seconds of the children this process has waited for (the kubectl applies).
fn children_cpu_secs() -> f64 {
    let mut u: libc::rusage = unsafe { std::mem::zeroed() };
    unsafe { libc::getrusage(libc::RUSAGE_CHILDREN, &mut u) };
    let s = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    s(u.ru_utime) + s(u.ru_stime)
}

/// The pids of the control plane's processes (`etcd`, `kube-apiserver`) from its `pids`
/// file (none for an external cluster).
fn control_plane_pids(cp: &ControlPlane) -> Vec<(String, u32)> {
    let Some(dir) = &cp.dir else {
        return Vec::new();
    };
    std::fs::read_to_string(dir.join("pids"))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| {
            let (name, pid) = l.split_once(' ')?;
            Some((name.to_string(), pid.trim().parse().ok()?))
        })
        .filter(|(name, _)| name == "etcd" || name == "kube-apiserver")
        .collect()
}

/// (p50, p99, max) in milliseconds.
fn percentiles(mut v: Vec<Duration>) -> (f64, f64, f64) {
    v.sort();
    let at = |q: f64| {
        let i = ((v.len() as f64 - 1.0) * q).round() as usize;
        v[i].as_secs_f64() * 1e3
    };
    (at(0.50), at(0.99), at(1.0))
}

/// Whether dispatcher `url` answers tool `tool` of `tenant` with `block`.
async fn blocks(client: &reqwest::Client, url: &str, tenant: &str, tool: &str) -> bool {
    let body = json!({"event": "pre_tool_use", "tenant_id": tenant, "agent_id": "a1",
        "tool_name": tool, "tool_input": {}});
    let Ok(resp) = client
        .post(format!("{url}/v1/dispatch"))
        .header("content-type", "application/json")
        .body(body.to_string())
        .send()
        .await
    else {
        return false;
    };
    let Ok(b) = resp.bytes().await else {
        return false;
    };
    serde_json::from_slice::<Value>(&b).is_ok_and(|v| v["decision"] == "block")
}

struct Row {
    n: usize,
    apply: Duration,
    all_accepted: Duration,
    all_ready: Duration,
    edits: (f64, f64, f64),
    operator_rss: (f64, f64),
    dispatcher_rss: Vec<(f64, f64)>,
    snapshots: f64,
    status_writes: f64,
    /// CPU seconds of each process from the first apply to all Ready.
    cpu: Vec<(String, f64)>,
}

async fn run(n: usize, client: &reqwest::Client) -> Row {
    let chunk: usize = env_or("AGENTHOOKS_BENCH_CHUNK", 500);
    let appliers: usize = env_or("AGENTHOOKS_BENCH_APPLIERS", 2);
    let edits: usize = env_or("AGENTHOOKS_BENCH_EDITS", 30);
    let fleet = Fleet::start(
        &format!("ah-scale-{n}"),
        2,
        &["--http-allow-cidr", "127.0.0.1/32"],
    );
    let cp = fleet.cp;
    let ns = fleet.tenant_ns.clone();
    let urls = fleet.urls();
    // The hook the edits change; its apply also fills kubectl's cache of the API's
    // schema (tens of seconds of CPU on a new API server), which is no part of the figures.
    let (block_url, _) = hook_server(json!({"decision": "block"}));
    let t = Instant::now();
    cp.apply_yaml(&edit_hook(&ns, 0, &block_url));
    until_served(client, &urls, &format!("{ns}/edit-target"), true, t).await;
    let tally = Arc::new(Mutex::new(Tally {
        target: n,
        ..Default::default()
    }));
    let stop_watch = Arc::new(AtomicBool::new(false));
    watch_statuses(&ns, tally.clone(), stop_watch.clone());
    assert!(
        wait_for(Duration::from_secs(30), || tally.lock().unwrap().watches
            > 0),
        "the status watch did not start"
    );
    let mut pids: Vec<(String, Option<u32>)> = vec![("operator".into(), fleet.operator.proc.pid())];
    for (i, d) in fleet.dispatchers.iter().enumerate() {
        pids.push((format!("dispatcher {}", i + 1), d.proc.pid()));
    }
    for (name, pid) in control_plane_pids(cp) {
        pids.push((name, Some(pid)));
    }
    let cpu_before: Vec<f64> = pids.iter().map(|(_, p)| cpu_secs(*p)).collect();
    let kubectl_before = children_cpu_secs();

    // ---- 1. bulk apply in chunks --------------------------------------------------------
    eprintln!("[scale {n}] applying {n} hooks in chunks of {chunk}, {appliers} at a time");
    let chunks: Vec<String> = (0..n)
        .collect::<Vec<_>>()
        .chunks(chunk)
        .map(|c| c.iter().map(|i| bulk_hook(&ns, *i)).collect())
        .collect();
    let queue = Arc::new(Mutex::new(chunks));
    let started = Instant::now();
    let workers: Vec<_> = (0..appliers)
        .map(|_| {
            let queue = queue.clone();
            std::thread::spawn(move || {
                loop {
                    let Some(yaml) = queue.lock().unwrap().pop() else {
                        return;
                    };
                    ControlPlane::shared().apply_yaml(&yaml);
                }
            })
        })
        .collect();
    for w in workers {
        w.join().expect("an apply failed");
    }
    let apply = started.elapsed();
    eprintln!("[scale {n}] applied in {:.1} s", apply.as_secs_f64());
    let settle_secs: u64 = env_or("AGENTHOOKS_BENCH_SETTLE_SECS", 1200);
    let settled = wait_for(Duration::from_secs(settle_secs), || {
        tally.lock().unwrap().all_ready.is_some()
    });
    let (all_accepted, all_ready) = {
        let t = tally.lock().unwrap();
        assert!(
            settled,
            "{n} hooks: only {} Accepted and {} Ready after {settle_secs} s ({} watches)",
            t.accepted, t.ready, t.watches
        );
        (
            t.all_accepted.unwrap() - started,
            t.all_ready.unwrap() - started,
        )
    };
    let mut cpu: Vec<(String, f64)> = pids
        .iter()
        .zip(cpu_before)
        .map(|((name, pid), before)| (name.clone(), cpu_secs(*pid) - before))
        .collect();
    cpu.push((
        "kubectl applies".into(),
        children_cpu_secs() - kubectl_before,
    ));
    stop_watch.store(true, Ordering::Relaxed);
    eprintln!(
        "[scale {n}] all Accepted at {:.1} s, all Ready at {:.1} s",
        all_accepted.as_secs_f64(),
        all_ready.as_secs_f64()
    );

    // ---- 2. one edit → enforced by every dispatcher ------------------------------------
    let mut took = Vec::new();
    for k in 1..=edits {
        // One edit at a time: the operator publishes changes that come within
        // PUBLISH_DEBOUNCE (100 ms) of its last publish together, which a stream of edits
        // would measure instead.
        tokio::time::sleep(Duration::from_millis(300)).await;
        let yaml = edit_hook(&ns, k, &block_url);
        let t = Instant::now();
        let apply = std::thread::spawn(move || {
            ControlPlane::shared().apply_yaml(&yaml);
        });
        let tool = format!("edit-{k}");
        let mut done = vec![false; urls.len()];
        loop {
            for (i, u) in urls.iter().enumerate() {
                if !done[i] {
                    done[i] = blocks(client, u, &fleet.tenant, &tool).await;
                }
            }
            if done.iter().all(|d| *d) {
                break;
            }
            assert!(
                t.elapsed() < Duration::from_secs(60),
                "edit {k} not enforced in 60 s"
            );
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        took.push(t.elapsed());
        apply.join().expect("the edit's apply failed");
    }
    let edits = percentiles(took);
    eprintln!("[scale {n}] edits p50/p99/max {edits:?} ms");

    // ---- 3. RSS, and what the operator did -------------------------------------------
    let operator_rss = rss_mib(fleet.operator.proc.pid());
    let dispatcher_rss = fleet
        .dispatchers
        .iter()
        .map(|d| rss_mib(d.proc.pid()))
        .collect();
    let metrics = http_get(&format!("{}/metrics", fleet.operator.admin)).1;
    let snapshots = metric(&metrics, "agenthooks_snapshot_version", "");
    let status_writes = metric(
        &metrics,
        "agenthooks_operator_status_writes_total",
        "kind=\"conditions\",outcome=\"written\"",
    );

    // The next fleet's operator watches every namespace: leave it none of these.
    let out = cp.kubectl(&[
        "delete",
        "--raw",
        &format!("/apis/agenthooks.io/v1alpha1/namespaces/{ns}/agenthooks"),
    ]);
    assert!(
        out.status.success(),
        "deleting the hooks: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    wait_for(Duration::from_secs(120), || {
        cp.kubectl_ok(&["get", "agenthooks", "-n", &ns, "-o", "name"])
            .trim()
            .is_empty()
    });
    Row {
        n,
        apply,
        all_accepted,
        all_ready,
        edits,
        operator_rss,
        dispatcher_rss,
        snapshots,
        status_writes,
        cpu,
    }
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    if !std::env::args().any(|a| a == "--bench") {
        eprintln!("scale bench: run with `cargo bench` (make bench); nothing to do here");
        return;
    }
    let _ = rustls::crypto::ring::default_provider().install_default();
    let sizes: Vec<usize> = std::env::var("AGENTHOOKS_BENCH_SIZES")
        .unwrap_or_else(|_| "1000,10000".into())
        .split(',')
        .filter_map(|s| s.trim().parse().ok())
        .collect();
    let client = reqwest::Client::builder()
        .pool_max_idle_per_host(16)
        .build()
        .unwrap();
    eprintln!(
        "nproc: {}",
        std::thread::available_parallelism().map_or(0, |n| n.get())
    );
    let mut rows = Vec::new();
    for n in sizes {
        rows.push(run(n, &client).await);
    }
    println!("\n## Scale: bulk apply, one edit, RSS (one operator, two dispatchers)\n");
    println!(
        "| hooks | kubectl apply s | all Accepted s | all Accepted and Ready s | after the last apply s | edit → enforced by both p50 ms | p99 ms | max ms | operator RSS MiB (peak) | dispatchers RSS MiB (peak) | snapshot versions | conditions writes |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|---|---|");
    for r in &rows {
        let ds: Vec<String> = r
            .dispatcher_rss
            .iter()
            .map(|(rss, hwm)| format!("{rss:.0} ({hwm:.0})"))
            .collect();
        println!(
            "| {} | {:.1} | {:.1} | {:.1} | {:.1} | {:.0} | {:.0} | {:.0} | {:.0} ({:.0}) | {} | {:.0} | {:.0} |",
            r.n,
            r.apply.as_secs_f64(),
            r.all_accepted.as_secs_f64(),
            r.all_ready.as_secs_f64(),
            r.all_ready.saturating_sub(r.apply).as_secs_f64(),
            r.edits.0,
            r.edits.1,
            r.edits.2,
            r.operator_rss.0,
            r.operator_rss.1,
            ds.join(", "),
            r.snapshots,
            r.status_writes,
        );
    }
    println!("\n### CPU seconds from the first apply to all Accepted and Ready\n");
    let names: Vec<&str> = rows[0].cpu.iter().map(|(n, _)| n.as_str()).collect();
    println!("| hooks | {} |", names.join(" | "));
    println!("|---|{}", "---|".repeat(names.len()));
    for r in &rows {
        let v: Vec<String> = r.cpu.iter().map(|(_, s)| format!("{s:.1}")).collect();
        println!("| {} | {} |", r.n, v.join(" | "));
    }
}
