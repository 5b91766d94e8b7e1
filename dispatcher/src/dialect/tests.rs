//! Every mapping both ways, on payloads recorded from the real runtimes
//! (`dispatcher/tests/fixtures/dialects/<runtime>-<version>/`) and Cursor's documented ones.

use agenthooks_crds::HookEvent;
use agenthooks_crds::tool::ToolKind;
use serde_json::{Value, json};

use super::depth::Session;
use super::*;
use crate::chain::{Decision, Verdict};

const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/dialects");

fn fixture(path: &str) -> Vec<u8> {
    std::fs::read(format!("{FIXTURES}/{path}")).unwrap_or_else(|e| panic!("{path}: {e}"))
}

fn read(dialect: Dialect, body: &[u8], event: Option<&str>) -> NativeCall {
    let options = CallOptions {
        event: event.map(str::to_string),
        ..CallOptions::default()
    };
    parse(dialect, body, &options).unwrap_or_else(|e| panic!("{e}"))
}

/// (file, dialect, ?event=, our event, tool name, tool kind, command, session id)
type Row = (
    &'static str,
    Dialect,
    Option<&'static str>,
    Option<HookEvent>,
    Option<&'static str>,
    Option<ToolKind>,
    &'static str,
    &'static str,
);

#[test]
fn recorded_payloads_map_to_our_events() {
    use Dialect::*;
    use HookEvent as E;
    let cc = "e1deccff-0d36-470c-82c2-f72952379293";
    let cx = "01a23c04-b91f-7c80-af9a-4753b29fa412";
    let gm = "0162d172-ef5c-4358-9632-c1d23ac8d229";
    let cp = "58c918dc-d34c-4b42-bf6e-ff48bcddeddc";
    let echo = "echo hello-from-standin";
    let rows: Vec<Row> = vec![
        (
            "claude-code-2.1.332/PreToolUse.command.stdin.json",
            ClaudeCode,
            None,
            Some(E::PreToolUse),
            Some("Bash"),
            Some(ToolKind::Shell),
            echo,
            cc,
        ),
        (
            "claude-code-2.1.332/PostToolUse.command.stdin.json",
            ClaudeCode,
            None,
            Some(E::PostToolUse),
            Some("Bash"),
            Some(ToolKind::Shell),
            echo,
            cc,
        ),
        (
            "claude-code-2.1.332/UserPromptSubmit.command.stdin.json",
            ClaudeCode,
            None,
            Some(E::UserPromptSubmit),
            None,
            None,
            "",
            cc,
        ),
        (
            "claude-code-2.1.332/SessionStart.command.stdin.json",
            ClaudeCode,
            None,
            Some(E::SessionStart),
            None,
            None,
            "",
            cc,
        ),
        (
            "claude-code-2.1.332/Stop.command.stdin.json",
            ClaudeCode,
            None,
            Some(E::Stop),
            None,
            None,
            "",
            cc,
        ),
        (
            "claude-code-2.1.332/SessionEnd.command.stdin.json",
            ClaudeCode,
            None,
            None,
            None,
            None,
            "",
            "",
        ),
        (
            "codex-0.171.0/PreToolUse.command.stdin.json",
            Codex,
            None,
            Some(E::PreToolUse),
            Some("Bash"),
            Some(ToolKind::Shell),
            echo,
            cx,
        ),
        (
            "codex-0.171.0/PreToolUse.apply_patch.command.stdin.json",
            Codex,
            None,
            Some(E::PreToolUse),
            Some("apply_patch"),
            Some(ToolKind::FileWrite),
            "",
            "01a23c09-984c-7882-b64a-face425bee22",
        ),
        (
            "codex-0.171.0/PreToolUse.code-mode-nested-Bash.command.stdin.json",
            Codex,
            None,
            Some(E::PreToolUse),
            Some("Bash"),
            Some(ToolKind::Shell),
            "",
            "",
        ),
        (
            "codex-0.171.0/UserPromptSubmit.command.stdin.json",
            Codex,
            None,
            Some(E::UserPromptSubmit),
            None,
            None,
            "",
            cx,
        ),
        (
            "codex-0.171.0/SessionStart.command.stdin.json",
            Codex,
            None,
            Some(E::SessionStart),
            None,
            None,
            "",
            cx,
        ),
        (
            "codex-0.171.0/Stop.command.stdin.json",
            Codex,
            None,
            Some(E::Stop),
            None,
            None,
            "",
            cx,
        ),
        (
            "gemini-cli-0.61.0/BeforeTool.command.stdin.json",
            GeminiCli,
            None,
            Some(E::PreToolUse),
            Some("run_shell_command"),
            Some(ToolKind::Shell),
            echo,
            gm,
        ),
        (
            "gemini-cli-0.61.0/AfterTool.command.stdin.json",
            GeminiCli,
            None,
            Some(E::PostToolUse),
            Some("run_shell_command"),
            Some(ToolKind::Shell),
            echo,
            gm,
        ),
        (
            "gemini-cli-0.61.0/BeforeAgent.command.stdin.json",
            GeminiCli,
            None,
            Some(E::UserPromptSubmit),
            None,
            None,
            "",
            gm,
        ),
        (
            "gemini-cli-0.61.0/AfterAgent.command.stdin.json",
            GeminiCli,
            None,
            Some(E::Stop),
            None,
            None,
            "",
            gm,
        ),
        (
            "gemini-cli-0.61.0/BeforeModel.command.stdin.json",
            GeminiCli,
            None,
            None,
            None,
            None,
            "",
            "",
        ),
        (
            "gemini-cli-0.61.0/BeforeToolSelection.command.stdin.json",
            GeminiCli,
            None,
            None,
            None,
            None,
            "",
            "",
        ),
        (
            "copilot-cli-1.0.102/preToolUse.camelCase.command.stdin.json",
            Copilot,
            Some("preToolUse"),
            Some(E::PreToolUse),
            Some("bash"),
            Some(ToolKind::Shell),
            echo,
            cp,
        ),
        (
            "copilot-cli-1.0.102/postToolUse.camelCase.command.stdin.json",
            Copilot,
            Some("postToolUse"),
            Some(E::PostToolUse),
            Some("bash"),
            Some(ToolKind::Shell),
            echo,
            cp,
        ),
        (
            "copilot-cli-1.0.102/userPromptSubmitted.camelCase.command.stdin.json",
            Copilot,
            Some("userPromptSubmitted"),
            Some(E::UserPromptSubmit),
            None,
            None,
            "",
            cp,
        ),
        (
            "copilot-cli-1.0.102/PreToolUse.PascalCase.command.stdin.json",
            Copilot,
            None,
            Some(E::PreToolUse),
            Some("Bash"),
            Some(ToolKind::Shell),
            echo,
            "b5c992a6-39d1-4253-90b9-3ef1d861eae6",
        ),
    ];
    for (file, dialect, event, want, tool, kind, command, session) in rows {
        let call = read(dialect, &fixture(file), event);
        assert_eq!(call.event.as_ref().map(|e| e.event), want, "{file}");
        let Some(ev) = call.event else { continue };
        assert_eq!(ev.tool_name.as_deref(), tool, "{file}");
        assert_eq!(ev.tool.as_ref().map(|t| t.kind), kind, "{file}");
        if !command.is_empty() {
            assert_eq!(ev.tool.as_ref().unwrap().command, command, "{file}");
        }
        if !session.is_empty() {
            assert_eq!(ev.session_id, session, "{file}");
        }
        assert!(ev.tenant_id.is_empty() && ev.agent_id.is_empty(), "{file}");
        assert_eq!(ev.depth, 0, "{file}");
        assert!(
            ev.raw_input.as_ref().is_some_and(Value::is_object),
            "{file}"
        );
        if ev.event == HookEvent::UserPromptSubmit {
            assert!(
                ev.tool_input["prompt"]
                    .as_str()
                    .is_some_and(|p| !p.is_empty()),
                "{file}"
            );
        }
    }
}

#[test]
fn codex_patches_and_turns_and_claude_prompt_ids() {
    let call = read(
        Dialect::Codex,
        &fixture("codex-0.171.0/PreToolUse.apply_patch.command.stdin.json"),
        None,
    );
    let ev = call.event.unwrap();
    assert_eq!(ev.tool.unwrap().paths, ["hello.txt"]);
    assert_eq!(
        ev.turn_id.as_deref(),
        Some("01a23c09-98e1-7661-972f-e7af40e9cf19")
    );
    let call = read(
        Dialect::ClaudeCode,
        &fixture("claude-code-2.1.332/PreToolUse.command.stdin.json"),
        None,
    );
    assert!(
        call.event
            .unwrap()
            .turn_id
            .unwrap()
            .starts_with("f45817d6-")
    );
}

#[test]
fn unknown_keys_are_ignored_and_bad_fields_are_named() {
    let body = br#"{"hook_event_name":"PreToolUse","session_id":"s","tool_name":"Bash","tool_input":{"command":"ls"},"brand_new_key":{"x":1}}"#;
    let call = read(Dialect::ClaudeCode, body, None);
    assert_eq!(call.event.unwrap().tool.unwrap().command, "ls");
    let refused = |dialect: Dialect, body: &str, event: Option<&str>| {
        let options = CallOptions {
            event: event.map(str::to_string),
            ..CallOptions::default()
        };
        match parse(dialect, body.as_bytes(), &options) {
            Err(EventError::Invalid { field, .. }) => field,
            other => panic!("{body}: {other:?}"),
        }
    };
    assert_eq!(refused(Dialect::ClaudeCode, "[]", None), "body");
    assert_eq!(
        refused(Dialect::ClaudeCode, r#"{"session_id":"s"}"#, None),
        "hook_event_name"
    );
    assert_eq!(
        refused(Dialect::ClaudeCode, r#"{"hook_event_name":7}"#, None),
        "hook_event_name"
    );
    assert_eq!(
        refused(
            Dialect::ClaudeCode,
            r#"{"hook_event_name":"PreToolUse","session_id":5}"#,
            None
        ),
        "session_id"
    );
    assert_eq!(
        refused(
            Dialect::ClaudeCode,
            r#"{"hook_event_name":"PreToolUse","tool_input":[1]}"#,
            None
        ),
        "tool_input"
    );
    assert_eq!(
        refused(
            Dialect::ClaudeCode,
            r#"{"hook_event_name":"PreToolUse"}"#,
            Some("Stop")
        ),
        "event"
    );
    assert_eq!(
        refused(
            Dialect::Copilot,
            r#"{"sessionId":"s","toolName":"bash"}"#,
            None
        ),
        "hook_event_name"
    );
    // A misnamed event from configuration is refused, never "no opinion" (break-it review).
    let copilot_call = r#"{"sessionId":"s1","toolName":"bash","toolArgs":{"command":"rm -rf /x"}}"#;
    for event in [
        "",
        "PreToolUse",
        "pretooluse",
        "preToolUse ",
        "preToolUse\u{0}",
        "sessionEnd",
    ] {
        assert_eq!(
            refused(Dialect::Copilot, copilot_call, Some(event)),
            "event",
            "{event:?}"
        );
    }
    assert_eq!(
        refused(Dialect::ClaudeCode, r#"{"hook_event_name":""}"#, None),
        "hook_event_name"
    );
    // A tool event without its tool.
    assert_eq!(
        refused(
            Dialect::ClaudeCode,
            r#"{"hook_event_name":"PreToolUse","session_id":"s1","tool_input":{"command":"rm -rf /x"}}"#,
            None
        ),
        "tool_name"
    );
    assert_eq!(
        refused(
            Dialect::Copilot,
            r#"{"sessionId":"s1","toolArgs":{"command":"rm -rf /x"}}"#,
            Some("preToolUse")
        ),
        "toolName"
    );
    assert_eq!(
        refused(
            Dialect::GeminiCli,
            r#"{"hook_event_name":"BeforeTool","tool_name":""}"#,
            None
        ),
        "tool_name"
    );
    // Our own checks still hold: ids are bounded and free of control characters.
    let long = format!(
        r#"{{"hook_event_name":"Stop","session_id":"{}"}}"#,
        "s".repeat(300)
    );
    assert_eq!(refused(Dialect::ClaudeCode, &long, None), "session_id");
    // A Copilot toolArgs string holding an object is read as one; anything else is not.
    let call = read(
        Dialect::Copilot,
        br#"{"sessionId":"s","toolName":"bash","toolArgs":"{\"command\":\"ls\"}"}"#,
        Some("preToolUse"),
    );
    assert_eq!(call.event.unwrap().tool.unwrap().command, "ls");
    assert_eq!(
        refused(
            Dialect::Copilot,
            r#"{"toolName":"bash","toolArgs":"ls"}"#,
            Some("preToolUse")
        ),
        "toolArgs"
    );
}

#[test]
fn the_query_names_the_agent_and_tenant_and_subagents_keep_the_agent() {
    let body = fixture("claude-code-2.1.332/subagents-3-deep/09-PreToolUse-Bash.json");
    let options = CallOptions {
        event: None,
        agent_id: Some("coder".into()),
        tenant_id: Some("acme".into()),
        ask: None,
    };
    let call = parse(Dialect::ClaudeCode, &body, &options).unwrap();
    let ev = call.event.unwrap();
    // The sub-agent's call is still the agent "coder"'s: its hooks apply.
    assert_eq!(
        (ev.agent_id.as_str(), ev.tenant_id.as_str()),
        ("coder", "acme")
    );
    assert_eq!(call.runtime_agent.as_deref(), Some("aafc41d0dec799e67"));
}

#[test]
fn cursor_documented_payloads() {
    let shell = br#"{"hook_event_name":"beforeShellExecution","conversation_id":"conv-123","generation_id":"gen-456","workspace_roots":["/p"],"command":"rm -rf /","cwd":"/p"}"#;
    let ev = read(Dialect::Cursor, shell, None).event.unwrap();
    assert_eq!(
        (
            ev.event,
            ev.tool_name.as_deref(),
            ev.session_id.as_str(),
            ev.turn_id.as_deref()
        ),
        (
            HookEvent::PreToolUse,
            Some("Shell"),
            "conv-123",
            Some("gen-456")
        )
    );
    let t = ev.tool.unwrap();
    assert_eq!(
        (t.kind, t.command.as_str(), t.cwd.as_str()),
        (ToolKind::Shell, "rm -rf /", "/p")
    );
    let mcp = br#"{"hook_event_name":"beforeMCPExecution","conversation_id":"c","tool_name":"database_query","tool_input":"{\"query\":\"DROP TABLE users\"}","url":"http://localhost:3000"}"#;
    let ev = read(Dialect::Cursor, mcp, None).event.unwrap();
    let t = ev.tool.unwrap();
    assert_eq!(
        (t.kind, t.mcp_server.as_str(), t.mcp_tool.as_str()),
        (ToolKind::Mcp, "http://localhost:3000", "database_query")
    );
    assert_eq!(ev.tool_input["query"], "DROP TABLE users");
    let read_file = br#"{"hook_event_name":"beforeReadFile","conversation_id":"c","file_path":"/p/secrets.env","content":"API_KEY=x"}"#;
    let ev = read(Dialect::Cursor, read_file, None).event.unwrap();
    assert_eq!(ev.tool.unwrap().paths, ["/p/secrets.env"]);
    // The file's content is not the call: it is not kept in tool_input.
    assert_eq!(ev.tool_input, json!({"file_path": "/p/secrets.env"}));
    let pre = br#"{"hook_event_name":"preToolUse","conversation_id":"c","tool_name":"Shell","tool_input":{"command":"ls","working_directory":"/p"},"tool_use_id":"t"}"#;
    assert_eq!(
        read(Dialect::Cursor, pre, None)
            .event
            .unwrap()
            .tool
            .unwrap()
            .kind,
        ToolKind::Shell
    );
    let prompt = br#"{"hook_event_name":"beforeSubmitPrompt","conversation_id":"c","prompt":"hi","attachments":[]}"#;
    assert_eq!(
        read(Dialect::Cursor, prompt, None).event.unwrap().event,
        HookEvent::UserPromptSubmit
    );
    let thought = br#"{"hook_event_name":"afterAgentThought","conversation_id":"c"}"#;
    assert!(read(Dialect::Cursor, thought, None).event.is_none());
}

fn decision(verdict: Verdict) -> Decision {
    let mut d = Decision::allow("e1");
    d.decision = verdict;
    if verdict == Verdict::Block {
        d.reason = Some("destructive command refused by policy".into());
        d.deciding_hook = Some("tenant-acme/block-rm-rf".into());
    }
    d
}

fn with_context(mut d: Decision) -> Decision {
    d.additional_context = Some("remember the style guide".into());
    d
}

fn with_rewrite(mut d: Decision) -> Decision {
    d.updated_input = Some(json!({"command": "echo rewritten"}));
    d
}

fn call(dialect: Dialect, native_event: &str, body: Value) -> NativeCall {
    let mut body = body;
    if dialect != Dialect::Copilot || !native_event.starts_with(char::is_lowercase) {
        body["hook_event_name"] = native_event.into();
    }
    let options = CallOptions {
        event: Some(native_event.into()),
        ..CallOptions::default()
    };
    parse(dialect, body.to_string().as_bytes(), &options).unwrap()
}

#[test]
fn answers_in_each_runtimes_shape() {
    use Dialect::*;
    let reason = "agenthooks: destructive command refused by policy (hook tenant-acme/block-rm-rf)";
    let tool =
        json!({"session_id": "s", "tool_name": "Bash", "tool_input": {"command": "rm -rf x"}});
    let copilot_tool =
        json!({"sessionId": "s", "toolName": "bash", "toolArgs": {"command": "rm -rf x"}});
    let prompt = json!({"session_id": "s", "prompt": "hi"});
    let allow = decision(Verdict::Allow);
    let block = decision(Verdict::Block);
    let pre_cc = |v: Value| json!({"hookSpecificOutput": v});
    // (dialect, runtime event, payload, decision, answer)
    let rows: Vec<(Dialect, &str, Value, Decision, Value)> = vec![
        // Allow overrides nothing: no permissionDecision, which would skip the runtime's prompts.
        (
            ClaudeCode,
            "PreToolUse",
            tool.clone(),
            allow.clone(),
            json!({}),
        ),
        (
            ClaudeCode,
            "PreToolUse",
            tool.clone(),
            block.clone(),
            pre_cc(
                json!({"hookEventName": "PreToolUse", "permissionDecision": "deny", "permissionDecisionReason": reason}),
            ),
        ),
        (
            ClaudeCode,
            "PreToolUse",
            tool.clone(),
            with_context(allow.clone()),
            pre_cc(
                json!({"hookEventName": "PreToolUse", "additionalContext": "remember the style guide"}),
            ),
        ),
        (
            ClaudeCode,
            "PreToolUse",
            tool.clone(),
            with_rewrite(allow.clone()),
            pre_cc(
                json!({"hookEventName": "PreToolUse", "updatedInput": {"command": "echo rewritten"}}),
            ),
        ),
        (
            ClaudeCode,
            "UserPromptSubmit",
            prompt.clone(),
            block.clone(),
            json!({"decision": "block", "reason": reason}),
        ),
        (
            ClaudeCode,
            "UserPromptSubmit",
            prompt.clone(),
            with_context(allow.clone()),
            pre_cc(
                json!({"hookEventName": "UserPromptSubmit", "additionalContext": "remember the style guide"}),
            ),
        ),
        (
            ClaudeCode,
            "SubagentStart",
            json!({"session_id": "s", "agent_id": "a"}),
            block.clone(),
            json!({"continue": false, "stopReason": reason}),
        ),
        // A `blocking: true` post_tool_use hook's context reaches Claude Code (issue 16).
        (
            ClaudeCode,
            "PostToolUse",
            tool.clone(),
            with_context(allow.clone()),
            json!({"hookSpecificOutput": {"hookEventName": "PostToolUse", "additionalContext": "remember the style guide"}}),
        ),
        (
            ClaudeCode,
            "Notification",
            json!({"session_id": "s"}),
            block.clone(),
            json!({}),
        ),
        // Codex applies a rewrite only beside allow.
        (Codex, "PreToolUse", tool.clone(), allow.clone(), json!({})),
        (
            Codex,
            "PreToolUse",
            tool.clone(),
            block.clone(),
            pre_cc(
                json!({"hookEventName": "PreToolUse", "permissionDecision": "deny", "permissionDecisionReason": reason}),
            ),
        ),
        (
            Codex,
            "PreToolUse",
            tool.clone(),
            with_rewrite(allow.clone()),
            pre_cc(
                json!({"hookEventName": "PreToolUse", "permissionDecision": "allow", "updatedInput": {"command": "echo rewritten"}}),
            ),
        ),
        (
            Codex,
            "PreToolUse",
            tool.clone(),
            with_context(allow.clone()),
            pre_cc(
                json!({"hookEventName": "PreToolUse", "additionalContext": "remember the style guide"}),
            ),
        ),
        (
            Codex,
            "UserPromptSubmit",
            prompt.clone(),
            block.clone(),
            json!({"decision": "block", "reason": reason}),
        ),
        (
            GeminiCli,
            "BeforeTool",
            json!({"session_id": "s", "tool_name": "run_shell_command", "tool_input": {"command": "rm -rf x"}}),
            allow.clone(),
            json!({}),
        ),
        (
            GeminiCli,
            "BeforeTool",
            json!({"session_id": "s", "tool_name": "run_shell_command", "tool_input": {"command": "rm -rf x"}}),
            block.clone(),
            json!({"decision": "deny", "reason": reason}),
        ),
        (
            GeminiCli,
            "BeforeTool",
            json!({"session_id": "s", "tool_name": "run_shell_command", "tool_input": {}}),
            with_rewrite(allow.clone()),
            json!({"hookSpecificOutput": {"hookEventName": "BeforeTool", "tool_input": {"command": "echo rewritten"}}}),
        ),
        // Gemini CLI has no context at BeforeTool: dropped, not turned into something else.
        (
            GeminiCli,
            "BeforeTool",
            json!({"session_id": "s", "tool_name": "run_shell_command"}),
            with_context(allow.clone()),
            json!({}),
        ),
        (
            GeminiCli,
            "BeforeAgent",
            prompt.clone(),
            with_context(allow.clone()),
            json!({"hookSpecificOutput": {"hookEventName": "BeforeAgent", "additionalContext": "remember the style guide"}}),
        ),
        (
            GeminiCli,
            "BeforeAgent",
            prompt.clone(),
            block.clone(),
            json!({"decision": "deny", "reason": reason}),
        ),
        (Cursor, "preToolUse", tool.clone(), allow.clone(), json!({})),
        (
            Cursor,
            "beforeShellExecution",
            json!({"conversation_id": "c", "command": "rm -rf x"}),
            block.clone(),
            json!({"permission": "deny", "user_message": reason, "agent_message": reason}),
        ),
        (
            Cursor,
            "preToolUse",
            tool.clone(),
            with_rewrite(allow.clone()),
            json!({"updated_input": {"command": "echo rewritten"}}),
        ),
        (
            Cursor,
            "beforeSubmitPrompt",
            json!({"conversation_id": "c", "prompt": "hi"}),
            allow.clone(),
            json!({"continue": true}),
        ),
        (
            Cursor,
            "beforeSubmitPrompt",
            json!({"conversation_id": "c", "prompt": "hi"}),
            block.clone(),
            json!({"continue": false, "user_message": reason}),
        ),
        (
            Copilot,
            "preToolUse",
            copilot_tool.clone(),
            allow.clone(),
            json!({}),
        ),
        (
            Copilot,
            "preToolUse",
            copilot_tool.clone(),
            block.clone(),
            json!({"permissionDecision": "deny", "permissionDecisionReason": reason}),
        ),
        (
            Copilot,
            "preToolUse",
            copilot_tool.clone(),
            with_rewrite(allow.clone()),
            json!({"modifiedArgs": {"command": "echo rewritten"}}),
        ),
        (
            Copilot,
            "PreToolUse",
            tool.clone(),
            block.clone(),
            pre_cc(
                json!({"hookEventName": "PreToolUse", "permissionDecision": "deny", "permissionDecisionReason": reason}),
            ),
        ),
    ];
    for (dialect, native_event, payload, decision, want) in rows {
        let c = call(dialect, native_event, payload);
        assert_eq!(answer(&c, &decision), want, "{dialect} {native_event}");
    }
}

#[test]
fn a_rewrite_the_runtime_cannot_apply_is_a_refusal() {
    let allow_rewritten = with_rewrite(decision(Verdict::Allow));
    let cases = [
        (
            Dialect::Cursor,
            "beforeShellExecution",
            json!({"conversation_id": "c", "command": "x"}),
        ),
        (
            Dialect::Copilot,
            "PreToolUse",
            json!({"session_id": "s", "tool_name": "Bash", "tool_input": {}}),
        ),
        (
            Dialect::ClaudeCode,
            "UserPromptSubmit",
            json!({"session_id": "s", "prompt": "p"}),
        ),
        (
            Dialect::GeminiCli,
            "BeforeAgent",
            json!({"session_id": "s", "prompt": "p"}),
        ),
    ];
    for (dialect, native_event, payload) in cases {
        let text = answer(&call(dialect, native_event, payload), &allow_rewritten).to_string();
        assert!(
            text.contains("cannot apply a rewrite")
                && (text.contains("deny") || text.contains("block")),
            "{dialect} {native_event}: {text}"
        );
    }
}

#[test]
fn refusal_text_names_reason_and_hook() {
    let mut d = decision(Verdict::Block);
    assert_eq!(
        refusal_text(&d),
        "agenthooks: destructive command refused by policy (hook tenant-acme/block-rm-rf)"
    );
    d.reason = None;
    d.deciding_hook = None;
    assert_eq!(refusal_text(&d), "agenthooks: blocked");
}

#[test]
fn recorded_sub_agents_three_deep_get_depths_from_the_session() {
    // Claude Code 2.1.332: main → Agent → Agent → Agent → Bash, as recorded.
    let dir = format!("{FIXTURES}/claude-code-2.1.332/subagents-3-deep");
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    files.sort();
    let mut session = Session::default();
    let mut seen = Vec::new();
    for f in files {
        let c = read(Dialect::ClaudeCode, &std::fs::read(&f).unwrap(), None);
        let Some(ev) = c.event else { continue };
        let depth = session.depth_of(ev.event, c.runtime_agent.as_deref());
        if ev.event == HookEvent::PreToolUse && ev.tool.as_ref().unwrap().kind == ToolKind::Subagent
        {
            session.spawn_allowed(depth);
        }
        seen.push(format!(
            "{}:{}:{depth}",
            ev.event,
            ev.tool_name.unwrap_or_default()
        ));
    }
    assert_eq!(
        seen,
        [
            "session_start::0",
            "user_prompt_submit::0",
            "pre_tool_use:Agent:0",
            "subagent_start::1",
            "pre_tool_use:Agent:1",
            "subagent_start::2",
            "pre_tool_use:Agent:2",
            "subagent_start::3",
            "pre_tool_use:Bash:3",
            "post_tool_use:Bash:3",
            "subagent_stop::3",
            "post_tool_use:Agent:2",
            "subagent_stop::2",
            "post_tool_use:Agent:1",
            "subagent_stop::1",
            "post_tool_use:Agent:0",
            "stop::0",
        ]
    );
}

#[test]
fn recorded_codex_sub_agent_gets_depth_one() {
    let dir = format!("{FIXTURES}/codex-0.171.0/subagent");
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    files.sort();
    let mut session = Session::default();
    let mut bash_depth = None;
    for f in files {
        let c = read(Dialect::Codex, &std::fs::read(&f).unwrap(), None);
        let Some(ev) = c.event else { continue };
        let depth = session.depth_of(ev.event, c.runtime_agent.as_deref());
        if ev.event == HookEvent::PreToolUse && ev.tool.as_ref().unwrap().kind == ToolKind::Subagent
        {
            session.spawn_allowed(depth);
        }
        if ev.tool_name.as_deref() == Some("Bash") && ev.event == HookEvent::PreToolUse {
            bash_depth = Some(depth);
        }
    }
    assert_eq!(bash_depth, Some(1));
}

/// Issue 16: an `ask` becomes the runtime's own ask where it has one, Claude Code's
/// `defer` with `?ask=defer`, and a refusal everywhere else.
#[test]
fn an_ask_is_the_runtimes_ask_where_it_has_one_and_a_refusal_elsewhere() {
    use Dialect::*;
    let mut ask = Decision::allow("e1");
    ask.decision = Verdict::Ask;
    ask.reason = Some("prod database write".into());
    ask.deciding_hook = Some("tenant-acme/approve-prod".into());
    let text = "agenthooks: prod database write (hook tenant-acme/approve-prod)";
    let tool =
        json!({"session_id": "s", "tool_name": "Bash", "tool_input": {"command": "psql prod"}});
    let copilot_tool =
        json!({"sessionId": "s", "toolName": "bash", "toolArgs": {"command": "psql prod"}});
    let prompt = json!({"session_id": "s", "prompt": "hi"});
    let cc_ask = |how: &str| json!({"hookSpecificOutput": {"hookEventName": "PreToolUse", "permissionDecision": how, "permissionDecisionReason": text}});
    let rows: Vec<(Dialect, &str, Value, Option<&str>, Value)> = vec![
        (ClaudeCode, "PreToolUse", tool.clone(), None, cc_ask("ask")),
        (
            ClaudeCode,
            "PreToolUse",
            tool.clone(),
            Some("defer"),
            cc_ask("defer"),
        ),
        (Copilot, "PreToolUse", tool.clone(), None, cc_ask("ask")),
        (
            Copilot,
            "preToolUse",
            copilot_tool,
            None,
            json!({"permissionDecision": "ask", "permissionDecisionReason": text}),
        ),
        (
            Cursor,
            "preToolUse",
            tool.clone(),
            None,
            json!({"permission": "ask", "user_message": text, "agent_message": text}),
        ),
        // No ask there: refused.
        (
            Codex,
            "PreToolUse",
            tool.clone(),
            None,
            json!({"hookSpecificOutput": {"hookEventName": "PreToolUse", "permissionDecision": "deny", "permissionDecisionReason": text}}),
        ),
        (
            GeminiCli,
            "BeforeTool",
            json!({"session_id": "s", "tool_name": "run_shell_command", "tool_input": {"command": "psql prod"}}),
            None,
            json!({"decision": "deny", "reason": text}),
        ),
        (
            ClaudeCode,
            "UserPromptSubmit",
            prompt.clone(),
            None,
            json!({"decision": "block", "reason": text}),
        ),
        (
            Cursor,
            "beforeSubmitPrompt",
            json!({"conversation_id": "c", "prompt": "hi"}),
            None,
            json!({"continue": false, "user_message": text}),
        ),
    ];
    for (dialect, native_event, mut payload, how, want) in rows {
        if dialect != Dialect::Copilot || !native_event.starts_with(char::is_lowercase) {
            payload["hook_event_name"] = native_event.into();
        }
        let options = CallOptions {
            event: Some(native_event.into()),
            ask: how.map(str::to_owned),
            ..CallOptions::default()
        };
        let c = parse(dialect, payload.to_string().as_bytes(), &options).unwrap();
        assert_eq!(answer(&c, &ask), want, "{dialect} {native_event} {how:?}");
    }
    let bad = CallOptions {
        event: Some("PreToolUse".into()),
        ask: Some("maybe".into()),
        ..CallOptions::default()
    };
    match parse(Dialect::ClaudeCode, tool.to_string().as_bytes(), &bad) {
        Err(EventError::Invalid { field, .. }) => assert_eq!(field, "ask"),
        other => panic!("{other:?}"),
    }
    // defer is Claude Code's alone: elsewhere it would be ignored silently.
    let defer = CallOptions {
        event: Some("preToolUse".into()),
        ask: Some("defer".into()),
        ..CallOptions::default()
    };
    match parse(Dialect::Cursor, tool.to_string().as_bytes(), &defer) {
        Err(EventError::Invalid { field, .. }) => assert_eq!(field, "ask"),
        other => panic!("{other:?}"),
    }
}

/// The tester's cases (issue 16): an ask carrying a master rewrite is never an ask that
/// would run the call as the model wrote it once approved, and an output rewrite the
/// runtime cannot apply withholds the output.
#[test]
fn an_ask_with_a_rewrite_and_an_output_rewrite_fail_closed_where_unsupported() {
    use Dialect::*;
    let mut ask = Decision::allow("e1");
    ask.decision = Verdict::Ask;
    ask.reason = Some("a person decides".into());
    ask.updated_input = Some(json!({"command": "safe-rewrite"}));
    let tool = json!({"session_id": "s", "tool_name": "Bash", "tool_input": {"command": "orig"}});
    let copilot_tool =
        json!({"sessionId": "s", "toolName": "bash", "toolArgs": {"command": "orig"}});
    for (dialect, native_event, payload) in [
        (Copilot, "PreToolUse", tool.clone()),
        (Copilot, "preToolUse", copilot_tool.clone()),
        (Cursor, "preToolUse", tool.clone()),
        (
            Cursor,
            "beforeShellExecution",
            json!({"conversation_id": "c", "command": "orig"}),
        ),
    ] {
        let a = answer(&call(dialect, native_event, payload), &ask);
        let text = a.to_string();
        assert!(
            text.contains("deny") && !text.contains("\"ask\""),
            "{dialect} {native_event}: {a}"
        );
    }
    // Claude Code takes the rewrite beside its ask.
    let a = answer(&call(ClaudeCode, "PreToolUse", tool.clone()), &ask);
    assert_eq!(a["hookSpecificOutput"]["permissionDecision"], "ask");
    assert_eq!(
        a["hookSpecificOutput"]["updatedInput"]["command"],
        "safe-rewrite"
    );
    // Cursor asks only where its answers take an ask.
    let mut plain_ask = ask.clone();
    plain_ask.updated_input = None;
    let a = answer(
        &call(
            Cursor,
            "beforeReadFile",
            json!({"conversation_id": "c", "file_path": "/etc/x"}),
        ),
        &plain_ask,
    );
    assert_ne!(a["permission"], "ask", "{a}");

    let mut redacted = Decision::allow("e2");
    redacted.updated_tool_output = Some(json!("[redacted]"));
    let post = json!({"session_id": "s", "tool_name": "Bash", "tool_input": {"command": "env"},
                      "tool_response": {"stdout": "SECRET=1"}});
    for (dialect, native_event, payload) in [
        (
            GeminiCli,
            "AfterTool",
            json!({"session_id": "s", "tool_name": "run_shell_command", "tool_input": {"command": "env"}, "tool_response": "SECRET=1"}),
        ),
        (Cursor, "postToolUse", post.clone()),
        (
            Copilot,
            "postToolUse",
            json!({"sessionId": "s", "toolName": "bash", "toolArgs": {"command": "env"}}),
        ),
        (Codex, "PostToolUse", post.clone()),
    ] {
        let a = answer(&call(dialect, native_event, payload), &redacted);
        let text = a.to_string();
        assert!(
            text.contains("deny") || text.contains("\"block\""),
            "{dialect} {native_event}: the output is withheld: {a}"
        );
    }
    let a = answer(&call(ClaudeCode, "PostToolUse", post), &redacted);
    assert_eq!(a["hookSpecificOutput"]["updatedToolOutput"], "[redacted]");
}

/// A withheld output reaches Claude Code in the tool's own shape (its schema refuses
/// anything else and shows the original); a shape with no place for a text ends the turn
/// (`continue: false`) before the model reads it.
#[test]
fn claude_code_withholds_an_output_in_its_shape() {
    let blocked = decision(Verdict::Block);
    let post = |response: Value| {
        call(
            Dialect::ClaudeCode,
            "PostToolUse",
            json!({"session_id": "s", "tool_name": "Bash", "tool_input": {"command": "env"},
                   "tool_response": response}),
        )
    };
    let a = answer(
        &post(json!({"stdout": "SECRET=1", "stderr": "", "interrupted": false})),
        &blocked,
    );
    let text = "[withheld by agenthooks] agenthooks: destructive command refused by policy (hook tenant-acme/block-rm-rf)";
    assert_eq!(
        a,
        json!({"decision": "block",
               "reason": "agenthooks: destructive command refused by policy (hook tenant-acme/block-rm-rf)",
               "hookSpecificOutput": {"hookEventName": "PostToolUse", "updatedToolOutput":
                   {"stdout": text, "stderr": "", "interrupted": false}}})
    );
    let a = answer(&post(json!("SECRET=1")), &blocked);
    assert_eq!(a["hookSpecificOutput"]["updatedToolOutput"], text);
    let a = answer(&post(json!({"count": 3})), &blocked);
    assert_eq!(a["continue"], false, "{a}");
    assert_eq!(
        a["stopReason"],
        "agenthooks: destructive command refused by policy (hook tenant-acme/block-rm-rf)"
    );
    assert!(a.get("hookSpecificOutput").is_none(), "{a}");
}
