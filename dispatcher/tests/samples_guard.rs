//! The shipped samples guard what they say (issue 10 point 5): `config/samples`, loaded
//! the way `agenthooks-dispatcher check` loads it (`manifests::load_all` on the folder,
//! Lite, the default master namespace, then `chain::decide`), against the obvious
//! spellings of what each guard refuses and the look-alikes it must let through.

use std::path::PathBuf;

use agenthooks_crds::sealed::SealKey;
use agenthooks_crds::{DEFAULT_MASTER_NAMESPACE, Edition};
use agenthooks_dispatcher::chain::{Verdict, decide};
use agenthooks_dispatcher::event::Event;
use agenthooks_dispatcher::handlers::http::HttpCaller;
use agenthooks_dispatcher::hookset::HookSet;
use agenthooks_dispatcher::manifests;
use agenthooks_dispatcher::runner::Engine;
use serde_json::{Value, json};

fn samples() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../config/samples")
}

/// The samples folder as `check --hooks config/samples` loads it, and an engine like
/// `check` builds.
fn load() -> (Engine, HookSet) {
    let key = SealKey::generate();
    let loaded =
        manifests::load_all(&samples(), DEFAULT_MASTER_NAMESPACE, Edition::Lite, &key).unwrap();
    let engine = Engine::new(HttpCaller::new(vec![]), Edition::Lite, key);
    (engine, loaded.hooks)
}

fn event(v: Value) -> Event {
    let mut base = json!({"event": "pre_tool_use", "tenant_id": "acme", "agent_id": "coder", "session_id": "s1"});
    base.as_object_mut()
        .unwrap()
        .extend(v.as_object().unwrap().clone());
    Event::parse(&serde_json::to_vec(&base).unwrap()).unwrap()
}

/// Every way the tool call can carry the command: our exec/shell tools (`cmd`), Claude
/// Code's and Codex's Bash (`command`), Gemini CLI's run_shell_command, Copilot CLI's
/// bash, Cursor's Shell, an argv list.
fn calls(cmd: &str) -> [Value; 7] {
    [
        json!({"tool_name": "exec", "tool_input": {"cmd": cmd}}),
        json!({"tool_name": "shell", "tool_input": {"cmd": cmd}}),
        json!({"tool_name": "Bash", "tool_input": {"command": cmd, "description": "x"}}),
        json!({"tool_name": "run_shell_command", "tool_input": {"command": cmd, "dir_path": "."}}),
        json!({"tool_name": "bash", "tool_input": {"command": cmd}}),
        json!({"tool_name": "Shell", "tool_input": {"command": cmd, "working_directory": "/w"}}),
        json!({"tool_name": "exec", "tool_input": {"cmd": ["sh", "-c", cmd]}}),
    ]
}

const DESTRUCTIVE: &[&str] = &[
    "rm -rf /var/lib/data",
    "rm -fr /var/lib/data",
    "rm -Rf /var/lib/data",
    "rm -fR /var/lib/data",
    "rm -rfv /var/lib/data",
    "rm -r -f /var/lib/data",
    "rm -f -r /var/lib/data",
    "rm -R -f /var/lib/data",
    "rm --recursive --force /var/lib/data",
    "rm --force --recursive /var/lib/data",
    "rm -r --force /var/lib/data",
    "rm --recursive -f /var/lib/data",
    "rm -v -i -rf /var/lib/data",
    "rm /var/lib/data -rf",
    "/bin/rm -rf /var/lib/data",
    "/usr/bin/rm -r -f /var/lib/data",
    "\\rm -rf /var/lib/data",
    "sudo rm -rf /var/lib/data",
    "sudo -u root rm --recursive --force /var/lib/data",
    "rm    -rf    /var/lib/data",
    "rm\t-rf\t/var/lib/data",
    "rm \t -r \t -f /var/lib/data",
    "bash -c 'rm -rf /var/lib/data'",
    "sh -c \"rm -fr /var/lib/data\"",
    "cd /tmp; rm -rf /var/lib/data",
    "cd /tmp;rm -rf /var/lib/data",
    "make && rm -rf /var/lib/data",
    "make&&rm -r -f /var/lib/data",
    "false || rm -rf /var/lib/data",
    "(rm -rf /var/lib/data)",
    "echo start\nrm -rf /var/lib/data",
    "ls | xargs rm -rf",
    "find . -name '*.o' -exec rm -rf {} +",
];

const HARMLESS: &[&str] = &[
    "rm file.txt",
    "rm -f file",
    "rm -r build",
    "rm -i notes.md",
    "ls -rf",
    "ls -la",
    "grep -rf patterns.txt src",
    "grep -r -f patterns.txt src",
    "echo farm -rf",
    "rm -f a.log; ls -r logs",
    "cargo build --release",
];

#[tokio::test]
async fn block_rm_rf_holds_against_the_obvious_variants() {
    let (_, hooks) = load();
    assert!(
        hooks.get("tenant-acme/block-rm-rf").is_some(),
        "the flagship sample loads"
    );
    for cmd in DESTRUCTIVE {
        for call in calls(cmd) {
            // Loaded afresh for each call: this tests the filter alone, with no state
            // carried from one call to the next.
            let (engine, hooks) = load();
            let d = decide(&engine, &hooks, event(call.clone())).await;
            assert_eq!(d.decision, Verdict::Block, "{call}: {d:?}");
            assert_eq!(
                d.deciding_hook.as_deref(),
                Some("tenant-acme/block-rm-rf"),
                "{call}"
            );
            assert_eq!(
                d.reason.as_deref(),
                Some("destructive command refused by policy")
            );
        }
    }
}

#[tokio::test]
async fn block_rm_rf_lets_the_look_alikes_through() {
    let (engine, hooks) = load();
    for cmd in HARMLESS {
        for call in calls(cmd) {
            let d = decide(&engine, &hooks, event(call.clone())).await;
            assert_eq!(d.decision, Verdict::Allow, "{call}: {d:?}");
            assert!(
                d.hooks.iter().all(|h| h.hook != "tenant-acme/block-rm-rf"),
                "{call}: the guard's filter did not select it: {d:?}"
            );
        }
    }
    // A `command` that is not a string (Codex's argv list) is not an evaluation error
    // (which would block every such call): the guard leaves it alone.
    let d = decide(
        &engine,
        &hooks,
        event(json!({"tool_name": "shell", "tool_input": {"command": ["bash", "-lc", "ls"]}})),
    )
    .await;
    assert_eq!(d.decision, Verdict::Allow, "{d:?}");
    // Another tool is not this guard's business.
    let d = decide(
        &engine,
        &hooks,
        event(json!({"tool_name": "write_file", "tool_input": {"cmd": "rm -rf /"}})),
    )
    .await;
    assert_eq!(d.decision, Verdict::Allow);
}

#[tokio::test]
async fn the_depth_guard_refuses_sub_agents_two_deep() {
    let (engine, hooks) = load();
    for (depth, want) in [
        (0, Verdict::Allow),
        (1, Verdict::Allow),
        (2, Verdict::Block),
        (3, Verdict::Block),
    ] {
        let d = decide(
            &engine,
            &hooks,
            event(json!({"event": "subagent_start", "tenant_id": "beta", "depth": depth})),
        )
        .await;
        assert_eq!(d.decision, want, "depth {depth}: {d:?}");
        if want == Verdict::Block {
            assert_eq!(
                d.deciding_hook.as_deref(),
                Some("agenthooks-system/subagent-depth-guard")
            );
        }
    }
}

/// `check --dialect`: a runtime's own payload offline, answered in its shape.
#[test]
fn check_reads_a_runtimes_payload_with_dialect() {
    let dir = tempfile::tempdir().unwrap();
    let run = |payload: &str, extra: &[&str]| {
        let file = dir.path().join("payload.json");
        std::fs::write(&file, payload).unwrap();
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_agenthooks-dispatcher"))
            .arg("check")
            .arg("--hooks")
            .arg(samples())
            .arg("--event")
            .arg(&file)
            .args(extra)
            .output()
            .unwrap();
        let answer: Value = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
        (
            out.status.code(),
            answer,
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let gemini = r#"{"hook_event_name":"BeforeTool","session_id":"s","tool_name":"run_shell_command","tool_input":{"command":"rm -rf /var/lib/data"}}"#;
    let (code, answer, err) = run(gemini, &["--dialect", "gemini-cli", "--tenant-id", "acme"]);
    assert_eq!(code, Some(2), "{err}");
    assert_eq!(answer["decision"], "deny", "{answer}");
    assert!(
        answer["reason"]
            .as_str()
            .unwrap()
            .contains("hook tenant-acme/block-rm-rf"),
        "{answer}"
    );
    let ls = r#"{"hook_event_name":"BeforeTool","session_id":"s","tool_name":"run_shell_command","tool_input":{"command":"ls"}}"#;
    assert_eq!(
        run(ls, &["--dialect", "gemini-cli", "--tenant-id", "acme"]).0,
        Some(0)
    );
    let (code, answer, _) = run(
        r#"{"hook_event_name":"Notification","session_id":"s"}"#,
        &["--dialect", "claude-code"],
    );
    assert_eq!((code, answer), (Some(0), json!({})));
    // Without --dialect a runtime's payload is refused, naming the field.
    let (code, _, err) = run(gemini, &[]);
    assert_eq!(code, Some(1));
    assert!(err.contains("hook_event_name"), "{err}");
}

/// The README's "one event, without a server" step: the binary's own `check` on the
/// shipped events (exit 2 block, 0 allow).
#[test]
fn check_on_the_shipped_events_blocks_rm_rf_and_allows_ls() {
    for (event, code) in [("rm-rf.json", 2), ("ls.json", 0)] {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_agenthooks-dispatcher"))
            .arg("check")
            .arg("--hooks")
            .arg(samples())
            .arg("--event")
            .arg(samples().join("events").join(event))
            .output()
            .unwrap();
        assert_eq!(
            out.status.code(),
            Some(code),
            "{event}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

#[test]
fn bench_reports_the_selected_hook_the_cost_and_the_allocations_of_a_decision() {
    let run = |event: &str| {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_agenthooks-dispatcher"))
            .args([
                "bench",
                "--seconds",
                "0",
                "--min-decisions",
                "200",
                "--hooks",
            ])
            .arg(samples())
            .arg("--event")
            .arg(samples().join("events").join(event))
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    };
    let rm = run("rm-rf.json");
    let lines: Vec<&str> = rm.lines().collect();
    assert!(lines[0].starts_with("hooks: 3 loaded in "), "{rm}");
    assert_eq!(lines[1], "selected: 1 hook(s): tenant-acme/block-rm-rf");
    assert!(lines[2].starts_with("decisions: 200  mean "), "{rm}");
    // The binary counts its allocations: planning this event allocates the plan's list
    // and nothing per hook list (the tool name is borrowed, not copied).
    let allocations: f64 = lines[2]
        .split("allocations ")
        .nth(1)
        .and_then(|a| a.split(' ').next())
        .and_then(|a| a.parse().ok())
        .unwrap_or_else(|| panic!("{rm}"));
    assert!(allocations > 0.0 && allocations <= 1.0, "{rm}");
    assert!(run("ls.json").contains("\nselected: no hook (allow)\n"));
    // A bad file is an error naming it, exit 1.
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_agenthooks-dispatcher"))
        .args(["bench", "--hooks"])
        .arg(samples())
        .args(["--event", "/nonexistent/event.json"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("/nonexistent/event.json"));
}
