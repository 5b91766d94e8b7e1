//! Gemini CLI's hook dialect (0.61.0, `docs/hooks/reference.md` in its package).
//!
//! Events: `BeforeTool` (our `pre_tool_use`), `AfterTool` (`post_tool_use`), `BeforeAgent`
//! (`user_prompt_submit`), `AfterAgent` (`stop`), `SessionStart`; the model and
//! tool-selection events have no counterpart. Payload: `session_id`, `tool_name`,
//! `tool_input`, `mcp_context: {server_name, tool_name}`, `prompt`. Answer: `{}` for allow
//! (its policy engine still decides), `{"decision": "deny", "reason"}` for a block, a
//! rewrite as `hookSpecificOutput.tool_input`, context as
//! `hookSpecificOutput.additionalContext` on `BeforeAgent` (it has none on `BeforeTool`).
//! It ignores Claude Code's `permissionDecision`: the dialects are not interchangeable.

use agenthooks_crds::HookEvent;
use agenthooks_crds::tool::ToolHints;
use serde_json::{Value, json};

use super::{
    Payload, Read, Reply, no_opinion, refusal_text, unapplied_output_rewrite, unapplied_rewrite,
};
use crate::event::{Event, EventError};

fn kind(native_event: &str) -> Option<HookEvent> {
    Some(match native_event {
        "BeforeTool" => HookEvent::PreToolUse,
        "AfterTool" => HookEvent::PostToolUse,
        "BeforeAgent" => HookEvent::UserPromptSubmit,
        "AfterAgent" => HookEvent::Stop,
        "SessionStart" => HookEvent::SessionStart,
        _ => return None,
    })
}

pub(super) fn read(native_event: &str, p: &Payload<'_>) -> Result<Read, EventError> {
    let Some(kind) = kind(native_event) else {
        return Ok(Read::unmapped());
    };
    let mut ev = Event::of(kind);
    ev.session_id = p.string("session_id")?;
    match kind {
        HookEvent::PreToolUse | HookEvent::PostToolUse => {
            ev.tool_name = p.str("tool_name")?;
            ev.tool_input = p.object("tool_input")?;
            if kind == HookEvent::PostToolUse {
                ev.tool_output = p.get("tool_response").filter(|v| !v.is_null()).cloned();
            }
            if let Some(Value::Object(mcp)) = p.get("mcp_context") {
                let field = |k: &str| mcp.get(k).and_then(Value::as_str).map(str::to_string);
                ev.tool_hints = ToolHints {
                    mcp_server: field("server_name"),
                    mcp_tool: field("tool_name"),
                };
            }
        }
        HookEvent::UserPromptSubmit => ev.tool_input = json!({"prompt": p.string("prompt")?}),
        _ => {}
    }
    Ok(Read {
        event: Some(ev),
        runtime_agent: None,
    })
}

pub(super) fn answer(r: &Reply<'_>) -> Value {
    if r.output_rewrite().is_some() {
        let text = unapplied_output_rewrite("Gemini CLI", r.native_event);
        return json!({"decision": "deny", "reason": text});
    }
    if r.blocked() {
        return json!({"decision": "deny", "reason": refusal_text(r.decision)});
    }
    if let Some(rewrite) = r.rewrite() {
        if r.event != HookEvent::PreToolUse {
            let text = unapplied_rewrite("Gemini CLI", r.native_event);
            return json!({"decision": "deny", "reason": text});
        }
        return json!({"hookSpecificOutput": {
            "hookEventName": r.native_event,
            "tool_input": rewrite,
        }});
    }
    match r.context() {
        Some(context) if r.event == HookEvent::UserPromptSubmit => json!({"hookSpecificOutput": {
            "hookEventName": r.native_event,
            "additionalContext": context,
        }}),
        _ => no_opinion(),
    }
}
