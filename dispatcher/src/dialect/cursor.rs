//! Cursor's hook dialect (`.cursor/hooks.json`, version 1), from its documentation: Cursor
//! is not on npm, so this is tested on the documented payloads only.
//!
//! Events: `preToolUse`, and the older per-tool `beforeShellExecution`,
//! `beforeMCPExecution`, `beforeReadFile` (each our `pre_tool_use`, as the tools
//! `Shell`, `MCP`, `Read`); `postToolUse`, `postToolUseFailure`, `afterShellExecution`,
//! `afterMCPExecution`, `afterFileEdit` (`post_tool_use`); `beforeSubmitPrompt`
//! (`user_prompt_submit`); `sessionStart`, `stop`, `subagentStart`, `subagentStop`. The
//! session is `conversation_id`, the turn `generation_id`. Answer: `{}` for allow (no
//! `permission`, so Cursor's own approval stays in force), `{"permission": "deny",
//! "user_message", "agent_message"}` for a block, `updated_input` on `preToolUse`;
//! `beforeSubmitPrompt` takes `{"continue": true|false, "user_message"}`.

use agenthooks_crds::HookEvent;
use agenthooks_crds::tool::ToolHints;
use serde_json::{Value, json};

use super::{
    Payload, Read, Reply, no_opinion, refusal_text, unapplied_output_rewrite, unapplied_rewrite,
};
use crate::event::{Event, EventError};

/// Our event, and the tool name Cursor's per-tool events stand for.
fn kind(native_event: &str) -> Option<(HookEvent, Option<&'static str>)> {
    Some(match native_event {
        "preToolUse" => (HookEvent::PreToolUse, None),
        "beforeShellExecution" => (HookEvent::PreToolUse, Some("Shell")),
        "beforeMCPExecution" => (HookEvent::PreToolUse, Some("MCP")),
        "beforeReadFile" => (HookEvent::PreToolUse, Some("Read")),
        "postToolUse" | "postToolUseFailure" => (HookEvent::PostToolUse, None),
        "afterShellExecution" => (HookEvent::PostToolUse, Some("Shell")),
        "afterMCPExecution" => (HookEvent::PostToolUse, Some("MCP")),
        "afterFileEdit" => (HookEvent::PostToolUse, Some("Edit")),
        "beforeSubmitPrompt" => (HookEvent::UserPromptSubmit, None),
        "sessionStart" => (HookEvent::SessionStart, None),
        "stop" => (HookEvent::Stop, None),
        "subagentStart" => (HookEvent::SubagentStart, None),
        "subagentStop" => (HookEvent::SubagentStop, None),
        _ => return None,
    })
}

pub(super) fn read(native_event: &str, p: &Payload<'_>) -> Result<Read, EventError> {
    let Some((kind, tool)) = kind(native_event) else {
        return Ok(Read::unmapped());
    };
    let mut ev = Event::of(kind);
    ev.session_id = match p.str("conversation_id")? {
        Some(c) => c,
        None => p.string("session_id")?,
    };
    ev.turn_id = p.str("generation_id")?;
    match tool {
        Some("Shell") => {
            ev.tool_name = Some("Shell".into());
            ev.tool_input =
                json!({"command": p.string("command")?, "working_directory": p.string("cwd")?});
        }
        Some("MCP") => {
            // `tool_name` is the MCP tool (`MCP:<server>:<tool>` in some versions); the
            // server is named by its `url` or `command`.
            let name = p.string("tool_name")?;
            let (server, tool) = match name.strip_prefix("MCP:").and_then(|r| r.split_once(':')) {
                Some((s, t)) => (s.to_string(), t.to_string()),
                None => (
                    p.str("url")?.or(p.str("command")?).unwrap_or_default(),
                    name,
                ),
            };
            ev.tool_name = Some("MCP".into());
            ev.tool_input = p.object("tool_input")?;
            ev.tool_hints = ToolHints {
                mcp_server: Some(server),
                mcp_tool: Some(tool),
            };
        }
        Some(name) => {
            // Read and Edit: the file, not its content.
            ev.tool_name = Some(name.into());
            ev.tool_input = json!({"file_path": p.string("file_path")?});
        }
        None if matches!(kind, HookEvent::PreToolUse | HookEvent::PostToolUse) => {
            ev.tool_name = p.str("tool_name")?;
            ev.tool_input = p.object("tool_input")?;
        }
        None if kind == HookEvent::UserPromptSubmit => {
            ev.tool_input = json!({"prompt": p.string("prompt")?});
        }
        None => {}
    }
    Ok(Read {
        event: Some(ev),
        runtime_agent: None,
    })
}

pub(super) fn answer(r: &Reply<'_>) -> Value {
    let prompt = r.event == HookEvent::UserPromptSubmit;
    let refuse = |text: String| {
        if prompt {
            json!({"continue": false, "user_message": text})
        } else {
            json!({"permission": "deny", "user_message": text, "agent_message": text})
        }
    };
    if r.output_rewrite().is_some() {
        return refuse(unapplied_output_rewrite("Cursor", r.native_event));
    }
    // Cursor asks only where its hook answers take `permission: "ask"`, and never beside a
    // master hook's rewrite (an approved call must not run as the model wrote it).
    if r.asks()
        && r.rewrite().is_none()
        && matches!(
            r.native_event,
            "preToolUse" | "beforeShellExecution" | "beforeMCPExecution"
        )
    {
        let text = refusal_text(r.decision);
        return json!({"permission": "ask", "user_message": text, "agent_message": text});
    }
    if r.blocked() {
        return refuse(refusal_text(r.decision));
    }
    if let Some(rewrite) = r.rewrite() {
        if r.native_event != "preToolUse" {
            return refuse(unapplied_rewrite("Cursor", r.native_event));
        }
        return json!({"updated_input": rewrite});
    }
    if prompt {
        return json!({"continue": true});
    }
    no_opinion()
}
