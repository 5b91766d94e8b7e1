//! Issue 13's figure: what our hook costs a real agent runtime. One Claude Code tool turn
//! (`claude -p`, the stand-in model asks for `echo`, then answers; a wall-clock run of the
//! whole process) with its `PreToolUse` hook wired to a standalone dispatcher (the `http`
//! hook, one hook matching every shell call) against the same turn without any hook,
//! side by side: median of `AGENTHOOKS_BENCH_RUNS` runs each (default 7), interleaved so
//! drift on the machine hits both alike, and the ratio.
//!
//! Run: `make bench`, or `cargo build --release --bins && cargo bench -p agenthooks-e2e
//! --bench runtimes` (needs `bash scripts/install-deps.sh runtimes`). Without `--bench`
//! it does nothing.

use std::time::Duration;

use agenthooks_e2e::runtimes::{HookWiring, Runtime, RuntimeRun, StandaloneDispatcher};
use agenthooks_e2e::stack::log_dir;
use agenthooks_e2e::standin::{Script, StandIn, Turn};
use serde_json::json;

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn main() {
    if !std::env::args().any(|a| a == "--bench") {
        eprintln!("runtimes bench: run with `cargo bench` (make bench); nothing to do here");
        return;
    }
    let runs: usize = std::env::var("AGENTHOOKS_BENCH_RUNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(7);
    let rt = Runtime::ClaudeCode;
    let hook = json!({"apiVersion": "agenthooks.io/v1alpha1", "kind": "AgentHook",
        "metadata": {"name": "shell-seen", "namespace": "agenthooks-system"},
        "spec": {"event": "pre_tool_use", "scope": "global", "toolKinds": ["shell"],
                 "handler": {"type": "command", "command": {"command": "cat >/dev/null; exit 0"}}}});
    let d = StandaloneDispatcher::start("bench-runtimes", &[hook], &log_dir("ah-bench-runtimes"));
    let one = |wiring: HookWiring| {
        let standin = StandIn::start(Script::new(vec![
            rt.shell_call("echo bench"),
            Turn::text("Finished."),
        ]));
        let out = RuntimeRun::new(rt, &standin, wiring)
            .allow(&["echo"])
            .run("Do the scripted task.");
        assert_eq!(out.exit_code, Some(0), "{}", out.describe());
        assert!(
            standin.tool_results().iter().any(|r| r.contains("bench")),
            "the tool ran\n{}",
            out.describe()
        );
        out.elapsed
    };
    // One warm-up each (page cache, first start of the binary).
    one(HookWiring::None);
    one(d.http_wiring());
    let (mut with, mut without) = (Vec::new(), Vec::new());
    for _ in 0..runs {
        without.push(one(HookWiring::None));
        with.push(one(d.http_wiring()));
    }
    let (w, wo) = (median(with.clone()), median(without.clone()));
    println!(
        "claude-code {} one tool turn, median of {runs}: without hook {:.0} ms | with agenthooks http hook {:.0} ms | ratio {:.2}x ({:+.0} ms)",
        rt.pin().version,
        wo.as_secs_f64() * 1e3,
        w.as_secs_f64() * 1e3,
        w.as_secs_f64() / wo.as_secs_f64(),
        (w.as_secs_f64() - wo.as_secs_f64()) * 1e3
    );
    println!(
        "  runs without: {:?}\n  runs with:    {:?}",
        without.iter().map(|d| d.as_millis()).collect::<Vec<_>>(),
        with.iter().map(|d| d.as_millis()).collect::<Vec<_>>()
    );
}
