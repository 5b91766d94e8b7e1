//! Issue 11's figures, on the real node (e2e/node) beside the process tier, in one run:
//!
//! 1. **`kubectl apply` → enforced by every dispatcher**: 50 applies of a new hook, each
//!    timed from the start of `kubectl apply --server-side` until all three dispatchers
//!    list it in `GET /v1/hooks` (polled every 2 ms); p50 and p99. First in the process
//!    tier (the shared kube-apiserver, one operator and three dispatcher processes, release
//!    builds), then on the node (the chart installed with 2 operators and 3 dispatcher Pods,
//!    their `/v1/hooks` polled at the Pod IPs from the host); the ratio node ÷ process.
//! 2. **Image sizes**: each OCI archive `e2e/images/build.sh` made for the node, and the
//!    bytes of its root file system.
//! 3. **Pod RSS**: the resident set of every container process of the operator and
//!    dispatcher Pods (read in the host's `/proc`: the node's containers are host
//!    processes), idle and at the end of `AGENTHOOKS_BENCH_SECS` (default 10) of paced load
//!    at `AGENTHOOKS_BENCH_RATE` (default 2,000) decisions/s sent from the host to the
//!    dispatcher Service's ClusterIP (kube-proxy's rules spread it over the Pods); every
//!    answer must be 200 with a decision.
//!
//! Run: `make bench` (root: it starts a node), or `cargo build --release --bins && cargo
//! bench -p agenthooks-e2e --bench node`. Without `--bench` it does nothing.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use agenthooks_e2e::node::Node;
use agenthooks_e2e::repo_root;
use agenthooks_e2e::stack::{Fleet, until_served};
use serde_json::{Value, json};

const APPLIES: usize = 50;
const NS: &str = "agenthooks-system";
const TENANT_NS: &str = "bench-acme";

/// A hook that is served but never runs (its matcher names only itself).
fn hook(ns: &str, name: &str) -> String {
    format!(
        "apiVersion: agenthooks.io/v1alpha1\nkind: AgentHook\nmetadata: {{name: {name}, namespace: {ns}}}\nspec:\n  event: pre_tool_use\n  matcher: '^{name}$'\n  handler:\n    type: http\n    http: {{url: 'https://policy.example.com/{name}'}}\n"
    )
}

/// `APPLIES` applies through `apply`, each timed until every dispatcher of `urls` serves it.
async fn apply_to_enforced(
    client: &reqwest::Client,
    urls: &[String],
    ns: &str,
    apply: impl Fn(&str),
) -> Vec<Duration> {
    let mut times = Vec::with_capacity(APPLIES);
    for i in 0..APPLIES {
        let name = format!("bench-apply-{i}");
        let key = format!("{ns}/{name}");
        let t = Instant::now();
        apply(&hook(ns, &name));
        times.push(until_served(client, urls, &key, true, t).await);
    }
    times
}

/// (p50, p99) in milliseconds.
fn percentiles(mut v: Vec<Duration>) -> (f64, f64) {
    v.sort();
    let at = |q: f64| {
        let i = ((v.len() as f64 - 1.0) * q).round() as usize;
        v[i].as_secs_f64() * 1e3
    };
    (at(0.50), at(0.99))
}

/// The process tier: the shared API server, one operator, three dispatchers.
async fn process_tier(client: &reqwest::Client) -> Vec<Duration> {
    let fleet = Fleet::start("ah-bench-node", 3, &[]);
    apply_to_enforced(client, &fleet.urls(), &fleet.tenant_ns, |y| {
        fleet.cp.apply_yaml(y);
    })
    .await
}

/// Resident set (bytes) of every process whose command line names `binary`, split into
/// (main containers, command runners).
fn rss_of(binary: &str) -> (Vec<u64>, Vec<u64>) {
    let (mut main, mut runners) = (Vec::new(), Vec::new());
    for e in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let p = e.path();
        let Ok(cmd) = std::fs::read(p.join("cmdline")) else {
            continue;
        };
        let args: Vec<String> = cmd
            .split(|b| *b == 0)
            .map(|a| String::from_utf8_lossy(a).into_owned())
            .collect();
        if !args.first().is_some_and(|a| a.ends_with(binary)) {
            continue;
        }
        let Ok(status) = std::fs::read_to_string(p.join("status")) else {
            continue;
        };
        let kb: u64 = status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.split_whitespace().next()?.parse().ok())
            .unwrap_or(0);
        if args.iter().any(|a| a == "command-runner") {
            runners.push(kb * 1024);
        } else {
            main.push(kb * 1024);
        }
    }
    (main, runners)
}

fn mib(v: &[u64]) -> String {
    let s: Vec<String> = v
        .iter()
        .map(|b| format!("{:.1}", *b as f64 / 1048576.0))
        .collect();
    s.join(" / ")
}

/// Bytes of the files a tar archive holds.
fn tar_content_bytes(path: &Path) -> u64 {
    let out = std::process::Command::new("tar")
        .arg("-tvf")
        .arg(path)
        .output()
        .expect("tar -tvf");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split_whitespace().nth(2)?.parse::<u64>().ok())
        .sum()
}

/// Paced load on `url` for `secs` at `rate` decisions/s; (answered with a decision, other).
async fn paced_load(client: &reqwest::Client, url: &str, secs: u64, rate: u64) -> (u64, u64) {
    const CLIENTS: u64 = 16;
    let ok = Arc::new(AtomicU64::new(0));
    let bad = Arc::new(AtomicU64::new(0));
    let until = Instant::now() + Duration::from_secs(secs);
    let mut tasks = Vec::new();
    for w in 0..CLIENTS {
        let (client, url, ok, bad) = (client.clone(), url.to_owned(), ok.clone(), bad.clone());
        tasks.push(tokio::spawn(async move {
            let mut tick =
                tokio::time::interval(Duration::from_secs_f64(CLIENTS as f64 / rate as f64));
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            let mut i = 0u64;
            while Instant::now() < until {
                tick.tick().await;
                let body = json!({"event": "pre_tool_use", "event_id": format!("load-{w}-{i}"),
                    "tenant_id": "acme", "agent_id": "a1", "tool_name": "exec",
                    "tool_input": {"cmd": "ls -la", "i": i}})
                .to_string();
                let answered = match client
                    .post(&url)
                    .header("content-type", "application/json")
                    .body(body)
                    .send()
                    .await
                {
                    Ok(r) if r.status() == 200 => r.bytes().await.is_ok_and(|b| {
                        serde_json::from_slice::<Value>(&b).is_ok_and(|v| v["decision"].is_string())
                    }),
                    _ => false,
                };
                if answered { &ok } else { &bad }.fetch_add(1, Ordering::Relaxed);
                i += 1;
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    (ok.load(Ordering::Relaxed), bad.load(Ordering::Relaxed))
}

fn helm_ok(node: &Node, args: &[&str]) {
    let out = node.helm(args);
    assert!(
        out.status.success(),
        "helm {args:?}: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

#[tokio::main]
async fn main() {
    if !std::env::args().any(|a| a == "--bench") {
        eprintln!("node bench: run with `cargo bench` (make bench); nothing to do here");
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
    let client = reqwest::Client::builder()
        .pool_max_idle_per_host(64)
        .build()
        .unwrap();

    // ---- 1a. the process tier -----------------------------------------------------------
    let (proc_p50, proc_p99) = percentiles(process_tier(&client).await);

    // ---- the node ----------------------------------------------------------------------
    let mut node = Node::up();
    let chart = repo_root().join("charts/agenthooks");
    helm_ok(
        &node,
        &[
            "install",
            "agenthooks",
            chart.to_str().unwrap(),
            "--namespace",
            NS,
            "--create-namespace",
            "--set",
            "operator.replicaCount=2",
            "--set",
            "dispatcher.replicaCount=3",
            "--wait",
            "--timeout",
            "5m",
        ],
    );
    node.apply(
        &json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": TENANT_NS,
            "labels": {"agenthooks.io/tenant": "acme"}}})
        .to_string(),
    );
    let pods = node.kubectl_json(&[
        "-n",
        NS,
        "get",
        "pods",
        "-l",
        "app.kubernetes.io/component=dispatcher",
    ]);
    let urls: Vec<String> = pods["items"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|p| p["status"]["podIP"].as_str())
        .map(|ip| format!("http://{ip}:8080"))
        .collect();
    assert_eq!(urls.len(), 3, "{pods}");

    // ---- 3a. idle RSS (before the applies: nothing served yet but the release) ----------
    tokio::time::sleep(Duration::from_secs(5)).await;
    let (op_idle, _) = rss_of("agenthooks-operator");
    let (d_idle, r_idle) = rss_of("agenthooks-dispatcher");

    // ---- 1b. apply → enforced on the node -----------------------------------------------
    let node_times = apply_to_enforced(&client, &urls, TENANT_NS, |y| {
        let out = node.kubectl_stdin(
            &["apply", "--server-side", "--force-conflicts", "-f", "-"],
            y.as_bytes(),
        );
        assert!(out.status.success(), "kubectl apply: {out:?}");
    })
    .await;
    let (node_p50, node_p99) = percentiles(node_times);

    // ---- 3b. RSS at the end of paced load through the Service ---------------------------
    let svc = node.kubectl_json(&["-n", NS, "get", "service", "agenthooks-dispatcher"]);
    let cluster_ip = svc["spec"]["clusterIP"].as_str().unwrap().to_owned();
    let url = format!("http://{cluster_ip}:8080/v1/dispatch");
    let t = Instant::now();
    let (ok, bad) = paced_load(&client, &url, secs, rate).await;
    let elapsed = t.elapsed().as_secs_f64();
    let (op_load, _) = rss_of("agenthooks-operator");
    let (d_load, r_load) = rss_of("agenthooks-dispatcher");

    // ---- 2. image sizes -----------------------------------------------------------------
    let images = node.dir.join("images");
    let mut image_rows = Vec::new();
    for name in ["operator", "dispatcher"] {
        let p = images.join(format!("{name}.tar"));
        if let Ok(m) = std::fs::metadata(&p) {
            image_rows.push((name, m.len(), tar_content_bytes(&p)));
        }
    }

    let down = node.down();

    println!(
        "\n## Issue 11 on the real node (one run, {} cores)\n",
        num_cpus()
    );
    println!(
        "| kubectl apply → served by all 3 dispatchers ({APPLIES} applies) | p50 ms | p99 ms |"
    );
    println!("|---|---:|---:|");
    println!(
        "| process tier (processes on the shared API server) | {proc_p50:.1} | {proc_p99:.1} |"
    );
    println!("| real node (chart, 3 dispatcher Pods) | {node_p50:.1} | {node_p99:.1} |");
    println!(
        "| ratio node ÷ process | {:.2} | {:.2} |",
        node_p50 / proc_p50,
        node_p99 / proc_p99
    );
    println!("\n| image | OCI archive MiB | archive content MiB |");
    println!("|---|---:|---:|");
    for (name, len, content) in &image_rows {
        println!(
            "| {name} | {:.1} | {:.1} |",
            *len as f64 / 1048576.0,
            *content as f64 / 1048576.0
        );
    }
    println!(
        "\n| RSS MiB (each process) | idle | after {secs} s at {rate}/s ({:.0} decisions/s answered, {bad} not) |",
        ok as f64 / elapsed
    );
    println!("|---|---|---|");
    println!("| operator | {} | {} |", mib(&op_idle), mib(&op_load));
    println!("| dispatcher | {} | {} |", mib(&d_idle), mib(&d_load));
    println!("| command runner | {} | {} |", mib(&r_idle), mib(&r_load));
    println!(
        "E2E-FIGURE apply_enforced_p50_ms process={proc_p50:.1} node={node_p50:.1} ratio={:.2}",
        node_p50 / proc_p50
    );
    if let Err(e) = down {
        panic!("the host was not restored: {e}");
    }
    assert_eq!(bad, 0, "decisions without an answer under load");
}

fn num_cpus() -> usize {
    std::thread::available_parallelism().map_or(0, |n| n.get())
}
