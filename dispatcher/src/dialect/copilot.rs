//! GitHub Copilot's hook dialects (CLI 1.0.102 and the cloud coding agent,
//! `.github/hooks/*.json`): the event name's spelling picks one.
//!
//! - camelCase events (`preToolUse`, `postToolUse`, `userPromptSubmitted`,
//!   `sessionStart`, `agentStop`, `subagentStop`) send camelCase payloads **without an
//!   event name** (`sessionId`, `toolName`, `toolArgs` — an object, a JSON string in older
//!   versions): the route needs `?event=` (the shim's `--event`). Answer: `{}` for allow,
//!   `{"permissionDecision": "deny", "permissionDecisionReason"}` for a block,
//!   `modifiedArgs` for a rewrite. Only `preToolUse` can refuse: a prompt hook's answer is
//!   ignored, so guard prompts of Copilot with a `pre_tool_use` hook.
//! - PascalCase events (`PreToolUse`, …; "VS Code compatible") send and take Claude Code's
//!   shapes (`super::claude`).

use agenthooks_crds::HookEvent;
use serde_json::{Value, json};

use super::{
    Payload, Read, Reply, claude, no_opinion, refusal_text, unapplied_output_rewrite,
    unapplied_rewrite,
};
use crate::event::{Event, EventError};

/// Whether the event is one of the camelCase hooks (its first letter is lowercase).
pub(super) fn is_camel_case(native_event: &str) -> bool {
    native_event.starts_with(|c: char| c.is_ascii_lowercase())
}

fn kind(native_event: &str) -> Option<HookEvent> {
    Some(match native_event {
        "preToolUse" => HookEvent::PreToolUse,
        "postToolUse" => HookEvent::PostToolUse,
        "userPromptSubmitted" => HookEvent::UserPromptSubmit,
        "sessionStart" => HookEvent::SessionStart,
        "agentStop" => HookEvent::Stop,
        "subagentStop" => HookEvent::SubagentStop,
        _ => return None,
    })
}

pub(super) fn read(native_event: &str, p: &Payload<'_>) -> Result<Read, EventError> {
    if !is_camel_case(native_event) {
        return claude::read(native_event, p);
    }
    let Some(kind) = kind(native_event) else {
        return Ok(Read::unmapped());
    };
    let mut ev = Event::of(kind);
    ev.session_id = p.string("sessionId")?;
    match kind {
        HookEvent::PreToolUse | HookEvent::PostToolUse => {
            ev.tool_name = p.str("toolName")?;
            ev.tool_input = p.object("toolArgs")?;
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
    let deny =
        |text: String| json!({"permissionDecision": "deny", "permissionDecisionReason": text});
    if r.output_rewrite().is_some() {
        return deny(unapplied_output_rewrite("GitHub Copilot", r.native_event));
    }
    // An ask carrying a master hook's rewrite: Copilot takes no rewrite beside an ask, and
    // an approved call must not run as the model wrote it.
    if r.asks() && r.event == HookEvent::PreToolUse && r.rewrite().is_none() {
        return json!({"permissionDecision": "ask", "permissionDecisionReason": refusal_text(r.decision)});
    }
    if r.blocked() {
        return deny(refusal_text(r.decision));
    }
    if let Some(rewrite) = r.rewrite() {
        if r.event != HookEvent::PreToolUse {
            return deny(unapplied_rewrite("GitHub Copilot", r.native_event));
        }
        return json!({"modifiedArgs": rewrite});
    }
    no_opinion()
}
