//! Issue 12's figure: the decision latency with callers authenticated against the same with
//! anonymous callers, side by side in one run on the real API server (release builds).
//!
//! One operator and three dispatcher processes following it: `--allow-anonymous`,
//! `--callers-file`, and `--kubernetes-callers` (running with `config/rbac/dispatcher.yaml`'s
//! RBAC). A tenant namespace holds one hook that the measured event does not match, so every
//! request is the decision path plus authentication and nothing else. The Kubernetes
//! caller is a ServiceAccount of the tenant's namespace with a projected-style token for
//! `agenthooks.io`; after a warm-up its TokenReview is cached (the case the goal is about:
//! ≤ 1.05× anonymous at p50). Requests go one at a time on one keep-alive connection per
//! dispatcher, interleaved in rounds so drift on the machine hits all three alike; a
//! separate figure is the first request of a fresh token (TokenReview not cached).
//!
//! Run: `make bench`, or `cargo build --release --bins && cargo bench -p agenthooks-e2e
//! --bench callers`. Without `--bench` it does nothing.

use std::time::{Duration, Instant};

use agenthooks_e2e::stack::{
    DispatcherProc, OperatorProc, dispatcher_service_account_kubeconfig, install_crds, log_dir,
    service_account_token, wait_or_panic,
};
use agenthooks_e2e::{ControlPlane, unique_name};
use serde_json::json;

const ROUNDS: usize = 20;
const PER_ROUND: usize = 250;
const TOKEN: &str = "bench-caller-token-0123456789abcdef";

fn percentile(sorted: &[Duration], p: f64) -> f64 {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i].as_secs_f64() * 1e6
}

async fn one(client: &reqwest::Client, url: &str, token: Option<&str>, body: &str) -> Duration {
    let mut req = client
        .post(format!("{url}/v1/dispatch"))
        .header("content-type", "application/json")
        .body(body.to_string());
    if let Some(t) = token {
        req = req.bearer_auth(t);
    }
    let t = Instant::now();
    let r = req.send().await.expect("dispatch");
    let status = r.status();
    let _ = r.bytes().await;
    let took = t.elapsed();
    assert_eq!(status, 200, "{url}");
    took
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    if !std::env::args().any(|a| a == "--bench") {
        eprintln!("callers bench: run with `cargo bench` (make bench); nothing to do here");
        return;
    }
    let _ = rustls::crypto::ring::default_provider().install_default();
    let cp = ControlPlane::shared();
    install_crds(cp);
    let logs = log_dir("ah-bench-callers");
    let master = unique_name("bench-callers-master");
    let tenant = unique_name("bench-tenant");
    let ns = unique_name("bench-callers");
    cp.create_namespace(&master, &[]);
    cp.create_namespace(&ns, &[("agenthooks.io/tenant", tenant.as_str())]);
    cp.kubectl_ok(&["create", "serviceaccount", "runtime", "-n", &ns]);
    cp.apply_yaml(&format!(
        "apiVersion: agenthooks.io/v1alpha1\nkind: AgentHook\nmetadata: {{name: guard, namespace: {ns}}}\nspec:\n  event: pre_tool_use\n  matcher: '^exec$'\n  handler: {{type: command, command: {{command: 'exit 2'}}}}\n"
    ));
    let callers = logs.join("callers.yaml");
    std::fs::write(
        &callers,
        format!(
            "callers:\n  - name: bench\n    tokenSha256: {}\n    tenants: [{tenant}]\n",
            agenthooks_dispatcher::identity::callers_file::token_sha256(TOKEN)
        ),
    )
    .unwrap();
    let operator = OperatorProc::start(
        &cp.kubeconfig,
        &master,
        &unique_name("bench-callers-lease"),
        "bench-callers-op",
        &[],
        &logs,
    );
    let kubeconfig = dispatcher_service_account_kubeconfig(cp, &master, &logs);
    let start = |id: &str, extra: &[&str], env: &[(&str, &str)]| {
        DispatcherProc::start_with_env(
            &[&operator.sync],
            id,
            &master,
            &[&["--audit-db", "off"], extra].concat(),
            env,
            &logs,
        )
    };
    let anonymous = start("bench-anonymous", &["--allow-anonymous"], &[]);
    let listed = start(
        "bench-callers-file",
        &["--callers-file", callers.to_str().unwrap()],
        &[],
    );
    let kube = start(
        "bench-kubernetes",
        &["--kubernetes-callers"],
        &[("KUBECONFIG", kubeconfig.to_str().unwrap())],
    );
    let key = format!("{ns}/guard");
    let procs = [&operator.proc, &anonymous.proc, &listed.proc, &kube.proc];
    wait_or_panic(Duration::from_secs(60), "served everywhere", &procs, || {
        [&anonymous, &listed, &kube]
            .iter()
            .all(|d| d.served_generation(&key).is_some())
    });
    let sa_token = || service_account_token(cp, &ns, "runtime", "agenthooks.io");
    let kube_token = sa_token();
    // A tool no hook matches: the decision path and authentication only.
    let body = json!({"event": "pre_tool_use", "tenant_id": tenant, "agent_id": "a1",
                      "tool_name": "read", "tool_input": {"path": "/etc/hosts"}})
    .to_string();
    let client = reqwest::Client::builder()
        .pool_max_idle_per_host(4)
        .build()
        .unwrap();
    // Until the Kubernetes dispatcher has the namespaces' tenants (the snapshot after the
    // namespace), then warm up every connection and cache.
    wait_or_panic(Duration::from_secs(30), "tenant known", &procs, || {
        let (code, _) = agenthooks_e2e::stack::http_post_with(
            &format!("{}/v1/dispatch", kube.url),
            &serde_json::from_str(&body).unwrap(),
            &["-H", &format!("Authorization: Bearer {kube_token}")],
        );
        code == 200
    });
    let sides: [(&str, &str, Option<&str>); 3] = [
        ("anonymous", &anonymous.url, None),
        ("callers-file", &listed.url, Some(TOKEN)),
        ("kubernetes", &kube.url, Some(&kube_token)),
    ];
    for (_, url, token) in &sides {
        for _ in 0..500 {
            one(&client, url, *token, &body).await;
        }
    }
    let mut times: [Vec<Duration>; 3] = Default::default();
    for _ in 0..ROUNDS {
        for (i, (_, url, token)) in sides.iter().enumerate() {
            for _ in 0..PER_ROUND {
                times[i].push(one(&client, url, *token, &body).await);
            }
        }
    }
    // A fresh token's first call: the TokenReview round trip (not cached).
    let mut fresh = Vec::new();
    for _ in 0..20 {
        let t = sa_token();
        fresh.push(one(&client, &kube.url, Some(&t), &body).await);
    }
    fresh.sort();
    for t in &mut times {
        t.sort();
    }
    let base50 = percentile(&times[0], 0.5);
    let base99 = percentile(&times[0], 0.99);
    eprintln!(
        "callers bench: {} requests per side, one at a time, release build",
        ROUNDS * PER_ROUND
    );
    for (i, (name, _, _)) in sides.iter().enumerate() {
        let p50 = percentile(&times[i], 0.5);
        let p99 = percentile(&times[i], 0.99);
        println!(
            "BENCH callers side={name} p50_us={p50:.1} p99_us={p99:.1} ratio_p50={:.3} ratio_p99={:.3}",
            p50 / base50,
            p99 / base99
        );
    }
    println!(
        "BENCH callers side=kubernetes-first-call p50_us={:.1} max_us={:.1} (TokenReview not cached, n={})",
        percentile(&fresh, 0.5),
        percentile(&fresh, 1.0),
        fresh.len()
    );
}
