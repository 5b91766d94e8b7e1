//! Claude Code's hook dialect, which Codex CLI and Copilot's PascalCase hooks share with
//! small differences ([`Flavour`]).
//!
//! Payload: `hook_event_name`, `session_id`, `tool_name`, `tool_input`, `prompt`,
//! `agent_id` and `agent_type` (sub-agents only), Codex's `turn_id`, Claude Code's
//! `prompt_id`, `mcp_server: {name}`. Answer: `{}` for allow;
//! `hookSpecificOutput: {hookEventName, permissionDecision: "deny",
//! permissionDecisionReason}` for a tool call refused; top-level `decision: "block"` and
//! `reason` for a prompt refused; `continue: false` and `stopReason` where the event has
//! no deny; `additionalContext` and `updatedInput` inside `hookSpecificOutput`.

use agenthooks_crds::HookEvent;
use agenthooks_crds::tool::ToolHints;
use serde_json::{Map, Value, json};

use super::{Payload, Read, Reply, no_opinion, refusal_text, unapplied_rewrite};
use crate::event::{Event, EventError};

/// Who speaks the dialect: the differences that matter for answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Flavour {
    /// Applies `updatedInput` without a `permissionDecision` (adding `allow` would also
    /// skip its permission prompt for the call, which a rewrite must not do).
    ClaudeCode,
    /// Applies `updatedInput` only beside `permissionDecision: "allow"`, and refuses
    /// `allow` without it as an unsupported answer (Codex 0.171.0 `output_parser`).
    Codex,
    /// Copilot's PascalCase hooks: Claude Code's shapes, no rewrite or context documented.
    Copilot,
}

impl Flavour {
    fn runtime(self) -> &'static str {
        match self {
            Flavour::ClaudeCode => "Claude Code",
            Flavour::Codex => "Codex CLI",
            Flavour::Copilot => "GitHub Copilot",
        }
    }
}

/// Our event for a runtime event name; `None`: no counterpart.
fn kind(native_event: &str) -> Option<HookEvent> {
    Some(match native_event {
        "PreToolUse" => HookEvent::PreToolUse,
        "PostToolUse" | "PostToolUseFailure" => HookEvent::PostToolUse,
        "UserPromptSubmit" => HookEvent::UserPromptSubmit,
        "SessionStart" => HookEvent::SessionStart,
        "Stop" => HookEvent::Stop,
        "SubagentStart" => HookEvent::SubagentStart,
        "SubagentStop" => HookEvent::SubagentStop,
        _ => return None,
    })
}

pub(super) fn read(native_event: &str, p: &Payload<'_>) -> Result<Read, EventError> {
    let Some(kind) = kind(native_event) else {
        return Ok(Read::unmapped());
    };
    let mut ev = Event::of(kind);
    ev.session_id = p.string("session_id")?;
    ev.turn_id = match p.str("turn_id")? {
        Some(t) => Some(t),
        None => p.str("prompt_id")?,
    };
    match kind {
        HookEvent::PreToolUse | HookEvent::PostToolUse => {
            ev.tool_name = p.str("tool_name")?;
            ev.tool_input = p.object("tool_input")?;
            if kind == HookEvent::PostToolUse {
                ev.tool_output = p.get("tool_response").filter(|v| !v.is_null()).cloned();
            }
            if let Some(Value::Object(server)) = p.get("mcp_server") {
                ev.tool_hints = ToolHints {
                    mcp_server: server
                        .get("name")
                        .and_then(Value::as_str)
                        .map(str::to_string),
                    mcp_tool: None,
                };
            }
        }
        HookEvent::UserPromptSubmit => {
            ev.tool_input = json!({"prompt": p.string("prompt")?});
        }
        _ => {}
    }
    Ok(Read {
        event: Some(ev),
        runtime_agent: p.str("agent_id")?.filter(|a| !a.is_empty()),
    })
}

pub(super) fn answer(r: &Reply<'_>, flavour: Flavour) -> Value {
    match r.event {
        // Stop control (issue 16): `block` keeps the agent working, the reason telling
        // the model why (only `blocking: true` hooks can get here with a block).
        HookEvent::Stop | HookEvent::SubagentStop => {
            return if r.blocked() {
                json!({"decision": "block", "reason": refusal_text(r.decision)})
            } else {
                no_opinion()
            };
        }
        HookEvent::PostToolUse => return post_tool_use(r, flavour),
        _ => {}
    }
    let mut specific = Map::new();
    // A tool call a hook wants a person to decide: Claude Code's (and Copilot's) `ask`, or
    // `defer` for a headless run. Codex refuses `ask` as unsupported: refused here.
    if r.asks()
        && r.event == HookEvent::PreToolUse
        && (flavour == Flavour::ClaudeCode
            || (flavour == Flavour::Copilot && r.rewrite().is_none()))
    {
        let how = if r.defer && flavour == Flavour::ClaudeCode {
            "defer"
        } else {
            "ask"
        };
        specific.insert("hookEventName".into(), r.native_event.into());
        specific.insert("permissionDecision".into(), how.into());
        specific.insert(
            "permissionDecisionReason".into(),
            refusal_text(r.decision).into(),
        );
        if flavour == Flavour::ClaudeCode {
            if let Some(rewrite) = r.rewrite() {
                specific.insert("updatedInput".into(), rewrite.clone());
            }
            if let Some(context) = r.context() {
                specific.insert("additionalContext".into(), context.into());
            }
        }
        return json!({"hookSpecificOutput": specific});
    }
    if r.blocked() {
        return refuse(r, refusal_text(r.decision));
    }
    if let Some(rewrite) = r.rewrite() {
        if r.event != HookEvent::PreToolUse || flavour == Flavour::Copilot {
            return refuse(r, unapplied_rewrite(flavour.runtime(), r.native_event));
        }
        specific.insert("updatedInput".into(), rewrite.clone());
        if flavour == Flavour::Codex {
            specific.insert("permissionDecision".into(), "allow".into());
        }
    }
    if let Some(context) = r.context()
        && flavour != Flavour::Copilot
        && takes_context(r.event)
    {
        specific.insert("additionalContext".into(), context.into());
    }
    if specific.is_empty() {
        return no_opinion();
    }
    specific.insert("hookEventName".into(), r.native_event.into());
    json!({"hookSpecificOutput": specific})
}

/// Tool-output control (issue 16): a `block` withholds the output — Claude Code gets it
/// replaced (`updatedToolOutput`, in the output's own shape: [`super::withheld`]; where
/// the shape has no place for a text, `continue: false` ends the turn before the model
/// reads it) and the reason as `decision: "block"`; the others only the reason — and an
/// `updatedToolOutput` is Claude Code's own field. A rewrite the runtime cannot apply
/// withholds the output rather than let the model see it unchanged.
fn post_tool_use(r: &Reply<'_>, flavour: Flavour) -> Value {
    let withheld = |text: String| {
        let mut v = json!({"decision": "block", "reason": text});
        if flavour == Flavour::ClaudeCode {
            match r.withholding {
                Some(w) => {
                    v["hookSpecificOutput"] = json!({
                        "hookEventName": r.native_event,
                        "updatedToolOutput": w.with_text(&format!("[withheld by agenthooks] {text}")),
                    });
                }
                None => {
                    v["continue"] = false.into();
                    v["stopReason"] = text.into();
                }
            }
        }
        v
    };
    if r.blocked() {
        return withheld(refusal_text(r.decision));
    }
    if r.rewrite().is_some() {
        return withheld(unapplied_rewrite(flavour.runtime(), r.native_event));
    }
    let mut specific = Map::new();
    if let Some(output) = &r.decision.updated_tool_output {
        if flavour != Flavour::ClaudeCode {
            return withheld(format!(
                "agenthooks: a master hook rewrote this tool's output and {} cannot apply it at {}; withheld rather than shown as it was",
                flavour.runtime(),
                r.native_event
            ));
        }
        specific.insert("updatedToolOutput".into(), output.clone());
    }
    if let Some(context) = r.context()
        && flavour == Flavour::ClaudeCode
    {
        specific.insert("additionalContext".into(), context.into());
    }
    if specific.is_empty() {
        return no_opinion();
    }
    specific.insert("hookEventName".into(), r.native_event.into());
    json!({"hookSpecificOutput": specific})
}

/// Events whose `hookSpecificOutput` takes `additionalContext` (and whose answer we wait
/// for: the blocking ones).
fn takes_context(event: HookEvent) -> bool {
    matches!(
        event,
        HookEvent::PreToolUse | HookEvent::UserPromptSubmit | HookEvent::SubagentStart
    )
}

/// A refusal at this event: the tool call's deny, the prompt's block, and where the
/// event has no deny (`SubagentStart`), `continue: false` (stop the agent).
fn refuse(r: &Reply<'_>, text: String) -> Value {
    match r.event {
        HookEvent::PreToolUse => json!({"hookSpecificOutput": {
            "hookEventName": r.native_event,
            "permissionDecision": "deny",
            "permissionDecisionReason": text,
        }}),
        HookEvent::UserPromptSubmit => json!({"decision": "block", "reason": text}),
        _ => json!({"continue": false, "stopReason": text}),
    }
}

/// Claude Code's hook payload for one of our events: what a command hook with
/// `dialect: claude-code` gets on stdin, so a team's existing Claude Code hook runs
/// centrally unchanged. The session, cwd and ids come from the runtime's own payload when
/// the event came from Claude Code or Codex; the tool is named as Claude Code names it
/// (a Gemini CLI `run_shell_command` arrives as `Bash` with its `command`), and the input
/// is the event's current one (after any rewrite).
pub fn payload_for(event: &Event) -> Value {
    let raw = event.raw_input.as_ref().and_then(Value::as_object);
    let from_raw = |key: &str| raw.and_then(|r| r.get(key)).cloned();
    let name = match event.event {
        HookEvent::SessionStart => "SessionStart",
        HookEvent::UserPromptSubmit => "UserPromptSubmit",
        HookEvent::PreToolUse => "PreToolUse",
        HookEvent::PostToolUse => "PostToolUse",
        HookEvent::Stop => "Stop",
        HookEvent::SubagentStart => "SubagentStart",
        HookEvent::SubagentStop => "SubagentStop",
    };
    let mut p = Map::new();
    p.insert("session_id".into(), event.session_id.clone().into());
    p.insert(
        "transcript_path".into(),
        from_raw("transcript_path").unwrap_or_else(|| "".into()),
    );
    p.insert("cwd".into(), from_raw("cwd").unwrap_or_else(|| "".into()));
    p.insert("hook_event_name".into(), name.into());
    for key in ["permission_mode", "agent_id", "agent_type"] {
        if let Some(v) = from_raw(key) {
            p.insert(key.into(), v);
        }
    }
    match event.event {
        HookEvent::PreToolUse | HookEvent::PostToolUse => {
            let (tool_name, tool_input) = claude_tool(event);
            p.insert("tool_name".into(), tool_name.into());
            p.insert("tool_input".into(), tool_input);
            if let Some(id) = from_raw("tool_use_id") {
                p.insert("tool_use_id".into(), id);
            }
            if event.event == HookEvent::PostToolUse
                && let Some(r) = event
                    .tool_output
                    .clone()
                    .or_else(|| from_raw("tool_response"))
            {
                p.insert("tool_response".into(), r);
            }
        }
        HookEvent::UserPromptSubmit => {
            let prompt = event
                .tool_input
                .get("prompt")
                .cloned()
                .unwrap_or_else(|| "".into());
            p.insert("prompt".into(), prompt);
        }
        HookEvent::Stop | HookEvent::SubagentStop => {
            // Claude Code's one bit: a stop hook already kept this agent working.
            p.insert(
                "stop_hook_active".into(),
                (event.stop_count.unwrap_or(0) > 0).into(),
            );
        }
        HookEvent::SessionStart => {
            p.insert(
                "source".into(),
                from_raw("source").unwrap_or_else(|| "startup".into()),
            );
        }
        HookEvent::SubagentStart => {}
    }
    Value::Object(p)
}

/// The tool as Claude Code names it: its own names unchanged; another runtime's tool of a
/// known kind renamed, with the input Claude Code's tool takes built from the normalised
/// fields.
fn claude_tool(event: &Event) -> (String, Value) {
    use agenthooks_crds::tool::ToolKind;
    let name = event.tool_name.clone().unwrap_or_default();
    let Some(facts) = &event.tool else {
        return (name, event.tool_input.clone());
    };
    let claude_names = [
        "Bash",
        "Read",
        "Write",
        "Edit",
        "MultiEdit",
        "NotebookEdit",
        "WebFetch",
        "WebSearch",
        "Agent",
        "Task",
        "Glob",
        "Grep",
        "LS",
        "PowerShell",
        "NotebookRead",
    ];
    if claude_names.contains(&name.as_str()) || name.starts_with("mcp__") {
        return (name, event.tool_input.clone());
    }
    let first = |v: &[String]| v.first().cloned().unwrap_or_default();
    match facts.kind {
        ToolKind::Shell => ("Bash".into(), json!({"command": facts.command})),
        ToolKind::FileRead => ("Read".into(), json!({"file_path": first(&facts.paths)})),
        ToolKind::FileWrite => (
            "Write".into(),
            json!({"file_path": first(&facts.paths), "content": event.tool_input.get("content").or(event.tool_input.get("file_text")).cloned().unwrap_or_else(|| "".into())}),
        ),
        ToolKind::FileEdit => ("Edit".into(), json!({"file_path": first(&facts.paths)})),
        ToolKind::WebFetch => (
            "WebFetch".into(),
            json!({"url": first(&facts.urls), "prompt": event.tool_input.get("prompt").cloned().unwrap_or_else(|| "".into())}),
        ),
        ToolKind::WebSearch => ("WebSearch".into(), json!({"query": facts.query})),
        ToolKind::Mcp if !facts.mcp_server.is_empty() && !facts.mcp_tool.is_empty() => (
            format!("mcp__{}__{}", facts.mcp_server, facts.mcp_tool),
            event.tool_input.clone(),
        ),
        ToolKind::Subagent => (
            "Agent".into(),
            json!({"subagent_type": facts.agent_type, "prompt": event.tool_input.get("prompt").or(event.tool_input.get("message")).cloned().unwrap_or_else(|| "".into())}),
        ),
        _ => (name, event.tool_input.clone()),
    }
}
