//! `POST /v1/hooks/{dialect}` over a real loopback socket: the runtimes' payloads in,
//! their answers out, one `toolKinds: [shell]` hook for every runtime's shell.

use super::tests_support::{callers, serve_state};
use super::*;
use crate::handlers::http::HttpCaller;
use agenthooks_crds::Edition;
use agenthooks_crds::sealed::SealKey;
use agenthooks_crds::snapshot::SnapshotHook;
use serde_json::{Value, json};

const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/dialects");
const REASON: &str = "agenthooks: destructive command refused by policy (hook tenant-acme/no-rm)";

/// One tenant-acme hook on `pre_tool_use` for every shell, whatever the runtime calls
/// it, refusing `rm -rf` and (for the depth test) anything three sub-agents deep.
fn shell_guard() -> HookSet {
    one_hook(
        "no-rm",
        r#"
event: pre_tool_use
toolKinds: [shell]
ifExpr: 'tool.command.contains("rm -rf") || depth >= 3'
handler: {type: command, command: {command: 'echo "destructive command refused by policy" >&2; exit 2'}}
"#,
    )
}

/// The hook set of one tenant-acme hook `name` with this spec (YAML).
fn one_hook(name: &str, spec: &str) -> HookSet {
    let src = SnapshotHook {
        uid: "u".into(),
        namespace: "tenant-acme".into(),
        name: name.into(),
        generation: 1,
        created_at: String::new(),
        namespace_tenant: "acme".into(),
        spec: serde_norway::from_str(spec).unwrap(),
        sealed_headers: vec![],
        open_breakers: Vec::new(),
        reset_token: None,
    };
    HookSet::build(vec![src], "agenthooks-system", Edition::Lite, 7, None).0
}

async fn serve_guarded() -> String {
    let state = AppState::new(Engine::new(
        HttpCaller::new(vec![]),
        Edition::Lite,
        SealKey::generate(),
    ));
    state.set_authenticator(crate::identity::Authenticator::Callers(callers()));
    state.set_hooks(shell_guard());
    serve_state(state).await
}

async fn hook(base: &str, path: &str, token: Option<&str>, body: &Value) -> (u16, Value) {
    let mut req = reqwest::Client::new()
        .post(format!("{base}/v1/hooks/{path}"))
        .body(body.to_string());
    if let Some(t) = token {
        req = req.bearer_auth(t);
    }
    let r = req.send().await.unwrap();
    let status = r.status().as_u16();
    let body = serde_json::from_slice(&r.bytes().await.unwrap()).unwrap_or(Value::Null);
    (status, body)
}

fn fixture(path: &str) -> Value {
    serde_json::from_slice(&std::fs::read(format!("{FIXTURES}/{path}")).unwrap()).unwrap()
}

fn with_command(mut payload: Value, key: &str, command: &str) -> Value {
    payload[key]["command"] = json!(command);
    payload
}

#[tokio::test]
async fn one_shell_hook_refuses_rm_rf_in_every_runtimes_own_shape() {
    let base = serve_guarded().await;
    let cc_deny = json!({"hookSpecificOutput": {"hookEventName": "PreToolUse", "permissionDecision": "deny", "permissionDecisionReason": REASON}});
    // (route, recorded payload, key of the input, refusal)
    let rows = [
        (
            "claude-code",
            fixture("claude-code-2.1.332/PreToolUse.command.stdin.json"),
            "tool_input",
            cc_deny.clone(),
        ),
        (
            "codex",
            fixture("codex-0.171.0/PreToolUse.command.stdin.json"),
            "tool_input",
            cc_deny.clone(),
        ),
        (
            "gemini-cli",
            fixture("gemini-cli-0.61.0/BeforeTool.command.stdin.json"),
            "tool_input",
            json!({"decision": "deny", "reason": REASON}),
        ),
        (
            "copilot?event=preToolUse",
            fixture("copilot-cli-1.0.102/preToolUse.camelCase.command.stdin.json"),
            "toolArgs",
            json!({"permissionDecision": "deny", "permissionDecisionReason": REASON}),
        ),
        (
            "copilot",
            fixture("copilot-cli-1.0.102/PreToolUse.PascalCase.command.stdin.json"),
            "tool_input",
            cc_deny.clone(),
        ),
        (
            "cursor",
            json!({"hook_event_name": "beforeShellExecution", "conversation_id": "c", "command": "", "cwd": "/p"}),
            "",
            json!({"permission": "deny", "user_message": REASON, "agent_message": REASON}),
        ),
    ];
    for (route, payload, key, refusal) in rows {
        // The recorded harmless call: no opinion, the runtime's own rules decide.
        let (status, body) = hook(&base, route, Some("acme-token"), &payload).await;
        assert_eq!((status, body), (200, json!({})), "{route} allowed");
        let dangerous = if key.is_empty() {
            let mut p = payload.clone();
            p["command"] = json!("rm -rf /var/lib/data");
            p
        } else {
            with_command(payload.clone(), key, "rm -rf /var/lib/data")
        };
        let (status, body) = hook(&base, route, Some("acme-token"), &dangerous).await;
        assert_eq!((status, body), (200, refusal), "{route} refused");
    }
    let metrics = reqwest::get(format!("{base}/metrics"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    for (dialect, n) in [
        ("claude-code", 1),
        ("codex", 1),
        ("gemini-cli", 1),
        ("copilot", 2),
        ("cursor", 1),
    ] {
        for answer in ["allow", "block"] {
            let line = format!(
                "agenthooks_native_hook_calls_total{{answer=\"{answer}\",dialect=\"{dialect}\"}} {n}"
            );
            assert!(metrics.contains(&line), "{line}\n{metrics}");
        }
    }
}

#[tokio::test]
async fn failures_are_non_2xx_naming_the_field_and_unmapped_events_run_nothing() {
    let base = serve_guarded().await;
    let pre = fixture("claude-code-2.1.332/PreToolUse.command.stdin.json");
    // Who calls is checked first, as on /v1/dispatch.
    let (status, body) = hook(&base, "claude-code", None, &pre).await;
    assert_eq!(status, 401, "{body}");
    assert!(
        body["error"].as_str().unwrap().contains("Authorization"),
        "{body}"
    );
    let (status, body) = hook(&base, "vim", Some("acme-token"), &pre).await;
    assert_eq!(
        (status, body["field"].as_str()),
        (404, Some("dialect")),
        "{body}"
    );
    let (status, body) = hook(&base, "claude-code?evnt=x", Some("acme-token"), &pre).await;
    assert_eq!(
        (status, body["field"].as_str()),
        (400, Some("query")),
        "{body}"
    );
    let (status, body) = hook(&base, "claude-code?event=Stop", Some("acme-token"), &pre).await;
    assert_eq!(
        (status, body["field"].as_str()),
        (400, Some("event")),
        "{body}"
    );
    let copilot = fixture("copilot-cli-1.0.102/preToolUse.camelCase.command.stdin.json");
    let (status, body) = hook(&base, "copilot", Some("acme-token"), &copilot).await;
    assert_eq!(
        (status, body["field"].as_str()),
        (400, Some("hook_event_name")),
        "{body}"
    );
    let (status, body) = hook(
        &base,
        "claude-code",
        Some("acme-token"),
        &json!({"hook_event_name": "PreToolUse", "tool_input": "rm -rf /"}),
    )
    .await;
    assert_eq!(
        (status, body["field"].as_str()),
        (400, Some("tool_input")),
        "{body}"
    );
    // A tenant the caller may not act for: 403, nothing runs.
    let (status, body) = hook(
        &base,
        "claude-code?tenant_id=beta",
        Some("acme-token"),
        &pre,
    )
    .await;
    assert_eq!(
        (status, body["field"].as_str()),
        (403, Some("tenant_id")),
        "{body}"
    );
    // An event with no counterpart: no opinion, whatever it carries.
    let end = fixture("claude-code-2.1.332/SessionEnd.command.stdin.json");
    let (status, body) = hook(
        &base,
        "claude-code?tenant_id=beta",
        Some("acme-token"),
        &end,
    )
    .await;
    assert_eq!(
        (status, body["field"].as_str()),
        (403, Some("tenant_id")),
        "{body}"
    );
    assert_eq!(
        hook(&base, "claude-code", Some("acme-token"), &end).await,
        (200, json!({}))
    );
    let metrics = reqwest::get(format!("{base}/metrics"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        metrics.contains(
            "agenthooks_native_hook_calls_total{answer=\"no_opinion\",dialect=\"claude-code\"} 1"
        ),
        "{metrics}"
    );
}

#[tokio::test]
async fn no_hooks_loaded_is_503() {
    let state = AppState::new(Engine::new(
        HttpCaller::new(vec![]),
        Edition::Lite,
        SealKey::generate(),
    ));
    state.set_authenticator(crate::identity::Authenticator::Callers(callers()));
    let base = serve_state(state).await;
    let pre = fixture("claude-code-2.1.332/PreToolUse.command.stdin.json");
    let (status, _) = hook(&base, "claude-code", Some("acme-token"), &pre).await;
    assert_eq!(status, 503);
}

/// The recorded Claude Code session three sub-agents deep, replayed: the Bash call from
/// the third sub-agent is at depth 3 (the guard above refuses depth ≥ 3), the same call
/// from the main thread is not.
#[tokio::test]
async fn depth_comes_from_the_sessions_sub_agent_tree() {
    let base = serve_guarded().await;
    let dir = format!("{FIXTURES}/claude-code-2.1.332/subagents-3-deep");
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    files.sort();
    let mut bash = None;
    for f in files {
        let payload: Value = serde_json::from_slice(&std::fs::read(&f).unwrap()).unwrap();
        let (status, body) = hook(&base, "claude-code", Some("acme-token"), &payload).await;
        assert_eq!(status, 200, "{}: {body}", f.display());
        if payload["tool_name"] == "Bash" && payload["hook_event_name"] == "PreToolUse" {
            bash = Some(body);
        }
    }
    let bash = bash.unwrap();
    assert_eq!(
        bash["hookSpecificOutput"]["permissionDecision"], "deny",
        "{bash}"
    );
    // The main thread's call in the same session: depth 0, allowed.
    let main = fixture("claude-code-2.1.332/subagents-3-deep/09-PreToolUse-Bash.json");
    let mut main = main.clone();
    main.as_object_mut().unwrap().remove("agent_id");
    assert_eq!(
        hook(&base, "claude-code", Some("acme-token"), &main).await,
        (200, json!({}))
    );
}

/// A team's existing Claude Code hook (`dialect: claude-code`), run centrally: it gets
/// Claude Code's payload — also for a Gemini CLI call, renamed `Bash` — and its
/// `permissionDecision: "deny"` blocks.
#[tokio::test]
async fn an_existing_claude_code_hook_runs_unchanged_for_every_runtime() {
    let dir = tempfile::tempdir().unwrap();
    let seen = dir.path().join("stdin.json");
    let script = format!(
        r#"input=$(cat); printf '%s' "$input" > {seen}
case "$input" in *'"tool_name":"Bash"'*) case "$input" in *'rm -rf'*)
  echo '{{"hookSpecificOutput":{{"hookEventName":"PreToolUse","permissionDecision":"deny","permissionDecisionReason":"rm -rf is not for agents"}}}}'; exit 0 ;;
esac ;; esac
echo '{{}}'"#,
        seen = seen.display()
    );
    let spec = format!(
        "event: pre_tool_use\nhandler: {{type: command, command: {{dialect: claude-code, command: {}}}}}",
        serde_json::to_string(&script).unwrap()
    );
    let state = AppState::new(Engine::new(
        HttpCaller::new(vec![]),
        Edition::Lite,
        SealKey::generate(),
    ));
    state.set_authenticator(crate::identity::Authenticator::Callers(callers()));
    state.set_hooks(one_hook("team-hook", &spec));
    let base = serve_state(state).await;
    let gemini = with_command(
        fixture("gemini-cli-0.61.0/BeforeTool.command.stdin.json"),
        "tool_input",
        "rm -rf /data",
    );
    let (status, body) = hook(&base, "gemini-cli", Some("acme-token"), &gemini).await;
    assert_eq!(
        (status, body),
        (
            200,
            json!({"decision": "deny", "reason": "agenthooks: rm -rf is not for agents (hook tenant-acme/team-hook)"})
        )
    );
    let stdin: Value = serde_json::from_slice(&std::fs::read(&seen).unwrap()).unwrap();
    assert_eq!(
        stdin,
        json!({
            "session_id": "0162d172-ef5c-4358-9632-c1d23ac8d229",
            "transcript_path": "/tmp/i13/gm1/home/.gemini/tmp/proj/chats/session-2026-12-03T13-09-0162d172.jsonl",
            "cwd": "/tmp/i13/gm1/proj",
            "hook_event_name": "PreToolUse",
            "tool_name": "Bash",
            "tool_input": {"command": "rm -rf /data"},
        })
    );
    // The same hook through /v1/dispatch with our own vocabulary (`exec` + `cmd`).
    let r = reqwest::Client::new()
        .post(format!("{base}/v1/dispatch"))
        .bearer_auth("acme-token")
        .body(json!({"event": "pre_tool_use", "tool_name": "exec", "tool_input": {"cmd": "rm -rf /data"}}).to_string())
        .send()
        .await
        .unwrap();
    let body: Value = serde_json::from_slice(&r.bytes().await.unwrap()).unwrap();
    assert_eq!(body["decision"], "block", "{body}");
    let (status, body) = hook(
        &base,
        "claude-code",
        Some("acme-token"),
        &fixture("claude-code-2.1.332/PreToolUse.command.stdin.json"),
    )
    .await;
    assert_eq!((status, body), (200, json!({})));
}
