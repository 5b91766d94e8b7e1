//! Issue 13's figure: what a runtime's native hook route adds over `/v1/dispatch`, side by
//! side in one run, and what the command shim adds on top.
//!
//! One dispatcher (in process, real loopback HTTP, one keep-alive client, one request at a
//! time) with the rm -rf guard (`toolKinds: [shell]`, CEL over `tool.command`), which the
//! measured call matches by kind and not by command: every request is the decision path
//! with one CEL evaluation and no handler run. Scenarios, interleaved in rounds so drift
//! on the machine hits all alike:
//!
//! - `dispatch`: `POST /v1/dispatch` with our event (`exec`, `{"cmd": "ls -la"}`);
//! - `claude-code`, `codex`, `gemini-cli`: the payloads recorded from Claude Code 2.1.332,
//!   Codex CLI 0.171.0 and Gemini CLI 0.61.0 on their routes (answers `{}`);
//! - `shim` (fewer runs): `agenthooks-dispatcher hook --dialect codex` as a process per
//!   call, as Codex CLI and Gemini CLI run it — stdin, the call, stdout, exit.
//!
//! Prints p50 and p99 per scenario and each one's p50 ratio to `dispatch`.
//! Run: `make bench`, or `cargo bench -p agenthooks-dispatcher --bench native_hooks`.
//! Without `--bench` it runs a few requests per scenario to check the wiring.

use std::io::Write;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use agenthooks_crds::Edition;
use agenthooks_crds::sealed::SealKey;
use agenthooks_crds::snapshot::SnapshotHook;
use agenthooks_dispatcher::handlers::http::HttpCaller;
use agenthooks_dispatcher::hookset::HookSet;
use agenthooks_dispatcher::identity::{Authenticator, CallersFile};
use agenthooks_dispatcher::runner::Engine;
use agenthooks_dispatcher::server::{AppState, router, serve};

const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/dialects");
const TOKEN: &str = "bench-caller-token-0123456789abcdef";
const DISPATCH: &str =
    r#"{"event":"pre_tool_use","tool_name":"exec","tool_input":{"cmd":"ls -la"}}"#;

fn guard() -> HookSet {
    let spec = serde_norway::from_str(
        r#"
event: pre_tool_use
toolKinds: [shell]
ifExpr: 'tool.command.contains("rm -rf")'
handler: {type: command, command: {command: 'exit 2'}}
"#,
    )
    .unwrap();
    let src = SnapshotHook {
        uid: "u".into(),
        namespace: "tenant-acme".into(),
        name: "no-rm".into(),
        generation: 1,
        created_at: String::new(),
        namespace_tenant: "acme".into(),
        spec,
        sealed_headers: vec![],
        open_breakers: Vec::new(),
        reset_token: None,
    };
    HookSet::build(vec![src], "agenthooks-system", Edition::Lite, 7, None).0
}

fn percentile(sorted: &[Duration], p: f64) -> f64 {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i].as_secs_f64() * 1e6
}

async fn one(client: &reqwest::Client, url: &str, body: &'static str) -> Duration {
    let t = Instant::now();
    let r = client
        .post(url)
        .bearer_auth(TOKEN)
        .header("content-type", "application/json")
        .body(body)
        .send()
        .await
        .expect("request");
    let status = r.status();
    let text = r.bytes().await.expect("body");
    let took = t.elapsed();
    assert_eq!(status, 200, "{url}: {}", String::from_utf8_lossy(&text));
    took
}

fn shim_once(base: &str, payload: &[u8]) -> Duration {
    let t = Instant::now();
    let mut child = Command::new(env!("CARGO_BIN_EXE_agenthooks-dispatcher"))
        .args(["hook", "--dialect", "codex", "--url", base])
        .env("AGENTHOOKS_TOKEN", TOKEN)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the shim starts");
    child.stdin.take().unwrap().write_all(payload).unwrap();
    let out = child.wait_with_output().unwrap();
    let took = t.elapsed();
    assert!(
        out.status.success() && out.stdout == b"{}",
        "{:?} {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    took
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let full = std::env::args().any(|a| a == "--bench");
    let (rounds, per_round, shim_per_round) = if full { (20, 500, 10) } else { (1, 5, 1) };
    agenthooks_dispatcher::operator_urls::install_crypto_provider();

    let state = AppState::new(Engine::new(
        HttpCaller::new(vec![]),
        Edition::Lite,
        SealKey::generate(),
    ));
    let callers = CallersFile::parse(&format!(
        "callers:\n  - name: bench\n    tokenSha256: {}\n    tenants: [acme]\n",
        agenthooks_dispatcher::identity::callers_file::token_sha256(TOKEN)
    ))
    .unwrap();
    state.set_authenticator(Authenticator::Callers(callers));
    state.set_hooks(guard());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let stop = tokio_util::sync::CancellationToken::new();
    let app = router(Arc::clone(&state));
    tokio::spawn(serve(
        agenthooks_tls::Incoming::Plain(listener),
        app,
        stop.clone(),
    ));

    let leak = |path: &str| -> &'static str {
        Box::leak(
            std::fs::read_to_string(format!("{FIXTURES}/{path}"))
                .unwrap()
                .into_boxed_str(),
        )
    };
    let scenarios: Vec<(&str, String, &'static str)> = vec![
        ("dispatch", format!("{base}/v1/dispatch"), DISPATCH),
        (
            "claude-code",
            format!("{base}/v1/hooks/claude-code"),
            leak("claude-code-2.1.332/PreToolUse.command.stdin.json"),
        ),
        (
            "codex",
            format!("{base}/v1/hooks/codex"),
            leak("codex-0.171.0/PreToolUse.command.stdin.json"),
        ),
        (
            "gemini-cli",
            format!("{base}/v1/hooks/gemini-cli"),
            leak("gemini-cli-0.61.0/BeforeTool.command.stdin.json"),
        ),
    ];
    let client = reqwest::Client::builder().no_proxy().build().unwrap();
    // Warm-up: connection, caches, allocator.
    for (_, url, body) in &scenarios {
        for _ in 0..per_round.min(200) {
            one(&client, url, body).await;
        }
    }
    let codex = std::fs::read(format!(
        "{FIXTURES}/codex-0.171.0/PreToolUse.command.stdin.json"
    ))
    .unwrap();
    let mut samples: Vec<Vec<Duration>> = vec![Vec::new(); scenarios.len()];
    let mut shim = Vec::new();
    for _ in 0..rounds {
        for (i, (_, url, body)) in scenarios.iter().enumerate() {
            for _ in 0..per_round {
                samples[i].push(one(&client, url, body).await);
            }
        }
        for _ in 0..shim_per_round {
            let (b, p) = (base.clone(), codex.clone());
            shim.push(
                tokio::task::spawn_blocking(move || shim_once(&b, &p))
                    .await
                    .unwrap(),
            );
        }
    }
    stop.cancel();

    for s in samples.iter_mut().chain(std::iter::once(&mut shim)) {
        s.sort();
    }
    let base_p50 = percentile(&samples[0], 0.5);
    println!(
        "native hooks bench ({} requests per route, {} shim runs; one keep-alive client, sequential):",
        rounds * per_round,
        shim.len()
    );
    println!(
        "{:<14} {:>10} {:>10} {:>12}",
        "scenario", "p50 µs", "p99 µs", "p50 ratio"
    );
    for ((name, _, _), s) in scenarios.iter().zip(&samples) {
        let p50 = percentile(s, 0.5);
        println!(
            "{name:<14} {p50:>10.1} {:>10.1} {:>11.3}×",
            percentile(s, 0.99),
            p50 / base_p50
        );
    }
    let p50 = percentile(&shim, 0.5);
    println!(
        "{:<14} {p50:>10.1} {:>10.1} {:>11.3}×  (a process per call, as Codex CLI and Gemini CLI run it)",
        "shim (codex)",
        percentile(&shim, 0.99),
        p50 / base_p50
    );
}
