//! `agenthooks-dispatcher hook`, the command a runtime runs as its hook, against a real
//! dispatcher process: the answer printed with exit 0, and every failure (dispatcher
//! stopped, wrong token, bad flags, bad payload) a refusal on stderr with exit 2 — the one
//! failure every runtime reads as "deny" (Codex CLI and Gemini CLI let a call through on
//! any other).

mod api_harness;

use std::io::Write;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use api_harness::{Files, command, start};
use serde_json::{Value, json};

const HOOKS: &str = r#"
apiVersion: v1
kind: Namespace
metadata:
  name: tenant-acme
  labels: {agenthooks.io/tenant: acme}
---
apiVersion: agenthooks.io/v1alpha1
kind: AgentHook
metadata: {name: no-rm, namespace: tenant-acme}
spec:
  event: pre_tool_use
  toolKinds: [shell]
  ifExpr: 'tool.command.contains("rm -rf")'
  handler:
    type: command
    command: {command: 'echo "destructive command refused by policy" >&2; exit 2'}
"#;

const CALLER_TOKEN: &str = "shim-caller-token";

fn callers_file(files: &Files) -> String {
    use agenthooks_dispatcher::identity::callers_file::token_sha256;
    let path = files.path("callers.yaml");
    std::fs::write(
        &path,
        format!(
            "callers:\n  - name: runtime\n    tokenSha256: {}\n    tenants: [acme]\n",
            token_sha256(CALLER_TOKEN)
        ),
    )
    .unwrap();
    std::fs::write(files.path("caller.token"), format!("{CALLER_TOKEN}\n")).unwrap();
    path.display().to_string()
}

/// Runs the shim with `args`, `payload` on stdin: (exit code, stdout, stderr, how long).
fn shim(args: &[&str], payload: &Value) -> (i32, String, String, Duration) {
    let dir = tempfile::tempdir().unwrap();
    let mut cmd: Command = command(dir.path());
    cmd.arg("hook").args(args).env_remove("AGENTHOOKS_TOKEN");
    cmd.stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let started = Instant::now();
    let mut child = cmd.spawn().unwrap();
    // A shim that refuses its flags exits before it reads stdin: a broken pipe here is that
    // refusal, which the exit code below shows.
    match child
        .stdin
        .take()
        .unwrap()
        .write_all(payload.to_string().as_bytes())
    {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => {}
        Err(e) => panic!("writing the shim's stdin: {e}"),
    }
    let out = child.wait_with_output().unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
        started.elapsed(),
    )
}

fn codex_call(command: &str) -> Value {
    json!({
        "session_id": "s1", "turn_id": "t1", "transcript_path": null, "cwd": "/p",
        "hook_event_name": "PreToolUse", "model": "gpt-5.1-codex",
        "permission_mode": "bypassPermissions", "tool_name": "Bash",
        "tool_input": {"command": command}, "tool_use_id": "call_1"
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_shim_prints_the_runtimes_answer_and_refuses_on_every_failure() {
    let files = Files::new(HOOKS);
    let callers = callers_file(&files);
    let d = start(&files, &["--callers-file", &callers]).await;
    let token_file = files.path("caller.token").display().to_string();
    let base = d.base.clone();
    let args = |dialect: &'static str| -> Vec<String> {
        vec![
            "--dialect".into(),
            dialect.into(),
            "--url".into(),
            base.clone(),
            "--token-file".into(),
            token_file.clone(),
        ]
    };
    let run = |args: Vec<String>, payload: Value| {
        tokio::task::spawn_blocking(move || {
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            shim(&args, &payload)
        })
    };

    // Allowed: Codex's "no opinion", exit 0.
    let (code, out, err, _) = run(args("codex"), codex_call("ls")).await.unwrap();
    assert_eq!((code, out.as_str()), (0, "{}"), "{err}");
    // Refused by the hook: Codex's deny, exit 0 (the JSON carries the refusal and reason).
    let (code, out, err, _) = run(args("codex"), codex_call("rm -rf /data"))
        .await
        .unwrap();
    assert_eq!(code, 0, "{err}");
    let answer: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(
        answer,
        json!({"hookSpecificOutput": {"hookEventName": "PreToolUse", "permissionDecision": "deny",
            "permissionDecisionReason": "agenthooks: destructive command refused by policy (hook tenant-acme/no-rm)"}})
    );
    // Gemini CLI's shell, the same hook.
    let gemini = json!({"session_id": "s", "hook_event_name": "BeforeTool", "timestamp": "2026-12-03T13:09:55.908Z",
        "tool_name": "run_shell_command", "tool_input": {"command": "rm -rf /data"}});
    let (code, out, _, _) = run(args("gemini-cli"), gemini).await.unwrap();
    assert_eq!(code, 0);
    assert_eq!(
        serde_json::from_str::<Value>(&out).unwrap()["decision"],
        "deny"
    );

    // The token from the environment when no file is named; a wrong one is a 401: exit 2.
    let mut no_file = args("codex");
    no_file.truncate(4);
    let (code, out, err, _) = run(no_file, codex_call("ls")).await.unwrap();
    assert_eq!((code, out.as_str()), (2, ""), "{err}");
    assert!(
        err.starts_with("agenthooks: refused: the dispatcher answered 401"),
        "{err}"
    );
    // An empty token file, a payload that is not an object, a dialect we do not speak.
    let empty = files.path("empty.token");
    std::fs::write(&empty, "").unwrap();
    let mut with_empty = args("codex");
    with_empty[5] = empty.display().to_string();
    let (code, _, err, _) = run(with_empty, codex_call("ls")).await.unwrap();
    assert_eq!(code, 2);
    assert!(err.contains("is empty"), "{err}");
    let (code, _, err, _) = run(args("codex"), json!(["PreToolUse"])).await.unwrap();
    assert_eq!(code, 2);
    assert!(
        err.contains("answered 400") && err.contains("must be a JSON object"),
        "{err}"
    );
    let (code, _, err, _) = run(args("vim"), codex_call("ls")).await.unwrap();
    assert_eq!(code, 2, "a bad flag refuses too: {err}");
    // Ours, not clap's usage error (whose exit code is 2 as well).
    assert!(
        err.starts_with("agenthooks: refused: ") && err.contains("--dialect"),
        "{err}"
    );
    let (code, _, err, _) = run(vec!["--dialect".into(), "codex".into()], codex_call("ls"))
        .await
        .unwrap();
    assert_eq!(code, 2, "a missing flag refuses too: {err}");
    assert!(
        err.starts_with("agenthooks: refused: ") && err.contains("--url"),
        "{err}"
    );

    // The dispatcher stopped: refused, fast, naming it.
    drop(d);
    let (code, out, err, took) = run(args("codex"), codex_call("ls")).await.unwrap();
    assert_eq!((code, out.as_str()), (2, ""), "{err}");
    assert!(err.contains("could not be reached"), "{err}");
    assert!(took < Duration::from_secs(3), "{took:?}");
}

/// A runtime that holds stdin open: the deadline covers reading it too (break-it review).
#[test]
fn stdin_that_never_ends_is_a_refusal_within_the_deadline() {
    let dir = tempfile::tempdir().unwrap();
    let mut cmd: Command = command(dir.path());
    cmd.args([
        "hook",
        "--dialect",
        "claude-code",
        "--url",
        "http://127.0.0.1:9",
        "--timeout-seconds",
        "1",
    ]);
    cmd.stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let started = Instant::now();
    let mut child = cmd.spawn().unwrap();
    let mut stdin = child.stdin.take().unwrap();
    stdin
        .write_all(br#"{"hook_event_name":"PreToolUse","#)
        .unwrap();
    let out = child.wait_with_output().unwrap();
    drop(stdin);
    let took = started.elapsed();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("did not end within --timeout-seconds 1"),
        "{err}"
    );
    assert!(took < Duration::from_secs(3), "{took:?}");
}

/// A dispatcher that accepts and never answers: the shim's deadline, then a refusal.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dispatcher_slower_than_the_deadline_is_a_refusal() {
    let silent = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", silent.local_addr().unwrap());
    let _held = tokio::spawn(async move {
        let mut held = Vec::new();
        loop {
            let (sock, _) = silent.accept().await.unwrap();
            held.push(sock);
        }
    });
    let (code, _, err, took) = tokio::task::spawn_blocking(move || {
        shim(
            &[
                "--dialect",
                "claude-code",
                "--url",
                &url,
                "--timeout-seconds",
                "1",
            ],
            &codex_call("ls"),
        )
    })
    .await
    .unwrap();
    assert_eq!(code, 2);
    assert!(err.contains("did not answer within 1 s"), "{err}");
    assert!(
        took >= Duration::from_secs(1) && took < Duration::from_secs(4),
        "{took:?}"
    );
}
