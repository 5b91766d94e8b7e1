//! The agent runtimes' own hook dialects (issue 13): their payloads in, our [`Event`] out,
//! our [`Decision`] in, their answer out. Pure: no I/O, no clock (the sub-agent depth a
//! payload lacks is looked up at the edge, [`depth`]).
//!
//! | dialect | route | runtimes |
//! |---|---|---|
//! | [`Dialect::ClaudeCode`] | `POST /v1/hooks/claude-code` | Claude Code (command and `http` hooks) |
//! | [`Dialect::Codex`] | `POST /v1/hooks/codex` | Codex CLI (command hooks, through the shim) |
//! | [`Dialect::GeminiCli`] | `POST /v1/hooks/gemini-cli` | Gemini CLI (command hooks, through the shim) |
//! | [`Dialect::Cursor`] | `POST /v1/hooks/cursor` | Cursor (`.cursor/hooks.json`; from its documentation) |
//! | [`Dialect::Copilot`] | `POST /v1/hooks/copilot` | GitHub Copilot CLI and coding agent (`.github/hooks/*.json`) |
//!
//! The rules, from the runtimes' documentation and from runs of Claude Code 2.1.332, Codex
//! CLI 0.171.0, Gemini CLI 0.61.0 and Copilot CLI 1.0.102 (`docs/dialects.md`):
//! - Unknown keys in a payload are ignored (the runtimes add keys in minor versions);
//!   `/v1/dispatch` still refuses them.
//! - A runtime event with no counterpart among our seven (Claude Code's `Notification`,
//!   Gemini CLI's `BeforeModel`, …) runs nothing and is answered with no opinion.
//! - Allow is the answer that overrides none of the runtime's own rules (`{}`: its
//!   permission prompts, allow and deny lists and sandbox stay in force).
//! - Block is the runtime's deny with our reason and the deciding hook
//!   ([`refusal_text`]); where an event has no deny (Claude Code's `SubagentStart`), the
//!   runtime is told to stop (`continue: false`).
//! - A rewrite (`updatedInput`) the runtime cannot apply at that event is a block: the
//!   call as the model wrote it is not the one a master hook let through.
//! - `additionalContext` goes where the runtime feeds it to the model, and is dropped
//!   where it has no such field (Gemini CLI's `BeforeTool`).
//! - Failures are not answered here: the route answers non-2xx, which Claude Code's
//!   `onFailure: "block"` and the shim (`agenthooks-dispatcher hook`, exit 2) turn into a
//!   refusal.

mod claude;
pub use claude::payload_for as claude_code_payload;
mod copilot;
mod cursor;
pub mod depth;
mod gemini;
#[cfg(test)]
mod tests;
pub mod withheld;

use serde_json::{Map, Value};

use crate::chain::{Decision, Verdict};
use crate::event::{Event, EventError};

/// A hook dialect: one route, one payload and answer format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Dialect {
    ClaudeCode,
    Codex,
    GeminiCli,
    Cursor,
    Copilot,
}

impl Dialect {
    /// Every dialect, in route order.
    pub const ALL: [Dialect; 5] = [
        Dialect::ClaudeCode,
        Dialect::Codex,
        Dialect::GeminiCli,
        Dialect::Cursor,
        Dialect::Copilot,
    ];

    /// The route segment and `--dialect` value (`claude-code`).
    pub fn as_str(self) -> &'static str {
        match self {
            Dialect::ClaudeCode => "claude-code",
            Dialect::Codex => "codex",
            Dialect::GeminiCli => "gemini-cli",
            Dialect::Cursor => "cursor",
            Dialect::Copilot => "copilot",
        }
    }

    /// Parses a route segment; `None` for anything else.
    pub fn parse(s: &str) -> Option<Dialect> {
        Dialect::ALL.into_iter().find(|d| d.as_str() == s)
    }

    /// The runtime's name, for messages.
    pub fn runtime(self) -> &'static str {
        match self {
            Dialect::ClaudeCode => "Claude Code",
            Dialect::Codex => "Codex CLI",
            Dialect::GeminiCli => "Gemini CLI",
            Dialect::Cursor => "Cursor",
            Dialect::Copilot => "GitHub Copilot",
        }
    }
}

/// A string, one of the route segments of [`Dialect::ALL`] (`claude-code`, `codex`, ...).
impl schemars::JsonSchema for Dialect {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "Dialect".into()
    }

    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        let names: Vec<&str> = Dialect::ALL.iter().map(|d| d.as_str()).collect();
        let runtimes: Vec<String> = Dialect::ALL
            .iter()
            .map(|d| format!("{d}: {}", d.runtime()))
            .collect();
        schemars::json_schema!({
            "type": "string",
            "enum": names,
            "description": format!("A runtime's hook dialect ({}).", runtimes.join("; ")),
        })
    }
}

impl std::fmt::Display for Dialect {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What the route knows besides the payload: the query string of the hook's URL (or the
/// shim's flags). `agent_id` and `tenant_id` are ids of the event ([`Event::check`]: at
/// most 256 bytes, no control character).
#[derive(Debug, Clone, Default, PartialEq, Eq, schemars::JsonSchema)]
pub struct CallOptions {
    /// The runtime's event name, for payloads that do not carry one (Copilot's camelCase
    /// hooks); a payload that names its event must name the same one.
    pub event: Option<String>,
    /// Our `agent_id` for every call of this runtime (the platform's name for the agent:
    /// what `scope: agent` hooks select). Its sub-agents keep it: a model cannot leave an
    /// agent's hooks behind by starting a sub-agent.
    #[schemars(length(max = 256), regex(pattern = crate::event::ID_PATTERN))]
    pub agent_id: Option<String>,
    /// The tenant, for a caller that may act for several (as `tenant_id` in `/v1/dispatch`).
    #[schemars(length(max = 256), regex(pattern = crate::event::ID_PATTERN))]
    pub tenant_id: Option<String>,
    /// How an `ask` is answered where the runtime can ask: `ask` (default: the runtime's
    /// permission prompt) or `defer` (Claude Code's headless `-p` runs: the session stops
    /// with the call deferred to the process that started it).
    #[schemars(regex(pattern = "^(ask|defer)$"))]
    pub ask: Option<String>,
}

/// The keys of a runtime's payload the readers of this module read, for the API schema
/// of `POST /v1/hooks/{dialect}` (the payload itself is read as a JSON object by
/// [`parse`]). Every key is optional, every other key is ignored
/// (`additionalProperties: true`); a key read with the wrong type is a 400 naming it.
/// Which keys a dialect reads, and for which of its events, is in each dialect's module.
#[derive(Debug, Clone, Default, PartialEq, serde::Deserialize, schemars::JsonSchema)]
#[schemars(extend("additionalProperties" = true))]
pub struct NativePayload {
    /// The runtime's event name (`PreToolUse`, `BeforeTool`, `preToolUse`); Copilot's
    /// camelCase hooks send none: give it as `?event=`. An event with no counterpart among
    /// ours runs nothing and is answered `{}`.
    pub hook_event_name: Option<String>,
    /// The session (Claude Code, Codex, Gemini CLI; Cursor without `conversation_id`).
    pub session_id: Option<String>,
    /// Codex: the turn.
    pub turn_id: Option<String>,
    /// Claude Code: the turn (`turn_id` when there is none).
    pub prompt_id: Option<String>,
    /// The tool called (tool events; Cursor's MCP events: the MCP tool).
    pub tool_name: Option<String>,
    /// The tool's arguments: an object, or a string holding one.
    pub tool_input: Option<ToolArguments>,
    /// The user's prompt (prompt events).
    pub prompt: Option<String>,
    /// Claude Code and Codex: the sub-agent that made the call (absent on the main
    /// thread); keys the session's sub-agent depth.
    pub agent_id: Option<String>,
    /// Claude Code: an MCP tool's server, as `{"name": ...}` (anything else is ignored).
    pub mcp_server: Option<Value>,
    /// Gemini CLI: an MCP tool's `{"server_name", "tool_name"}` (anything else is ignored).
    pub mcp_context: Option<Value>,
    /// Cursor: the session.
    pub conversation_id: Option<String>,
    /// Cursor: the turn.
    pub generation_id: Option<String>,
    /// Cursor `beforeShellExecution`/`afterShellExecution`: the command.
    pub command: Option<String>,
    /// Cursor shell events: the working directory.
    pub cwd: Option<String>,
    /// Cursor MCP events: the server's URL (or its `command`).
    pub url: Option<String>,
    /// Cursor `beforeReadFile`/`afterFileEdit`: the file.
    pub file_path: Option<String>,
    /// Copilot camelCase hooks: the session.
    #[serde(rename = "sessionId")]
    pub session_id_camel: Option<String>,
    /// Copilot camelCase hooks: the tool called.
    #[serde(rename = "toolName")]
    pub tool_name_camel: Option<String>,
    /// Copilot camelCase hooks: the tool's arguments, an object or a string holding one.
    #[serde(rename = "toolArgs")]
    pub tool_args: Option<ToolArguments>,
}

/// A tool's arguments in a runtime's payload: a JSON object, or (older Copilot and Cursor
/// versions) a string holding one.
#[derive(Debug, Clone, PartialEq, serde::Deserialize, schemars::JsonSchema)]
#[serde(untagged)]
pub enum ToolArguments {
    Object(Map<String, Value>),
    Json(String),
}

/// A runtime's hook call, read.
#[derive(Debug, Clone, PartialEq)]
pub struct NativeCall {
    pub dialect: Dialect,
    /// The runtime's event name as it sent it (`PreToolUse`, `BeforeTool`, `preToolUse`).
    pub native_event: String,
    /// Our event's kind, or `None` when the runtime's event has no counterpart: nothing
    /// runs and the answer is no opinion.
    pub kind: Option<agenthooks_crds::HookEvent>,
    /// Our event to decide (taken by the route to run it; [`answer`] needs only `kind`).
    pub event: Option<Event>,
    /// The runtime's own id of the (sub-)agent that made the call (`agent_id` of Claude
    /// Code and Codex; `None` on the main thread): what [`depth`] keys on.
    pub runtime_agent: Option<String>,
    /// Copilot: the camelCase hooks (`preToolUse`), answered in their own shape; the
    /// PascalCase ones take Claude Code's.
    pub camel_case: bool,
    /// An `ask` is answered Claude Code's `defer` rather than `ask` (`?ask=defer`).
    pub defer: bool,
    /// Claude Code's `PostToolUse`: how to withhold the tool's output in its own shape
    /// (`None`: it has no place for a text, or another event or runtime).
    pub withholding: Option<withheld::Withholding>,
}

/// The answer to the runtime: a JSON body for a 200.
pub type NativeAnswer = Value;

/// Reads a runtime's payload (a JSON object; unknown keys ignored). Errors name the
/// runtime's field (400) or a cap (413), as `/v1/dispatch` does.
pub fn parse(
    dialect: Dialect,
    body: &[u8],
    options: &CallOptions,
) -> Result<NativeCall, EventError> {
    let defer = match options.ask.as_deref() {
        None | Some("ask") => false,
        Some("defer") if dialect == Dialect::ClaudeCode => true,
        Some("defer") => {
            return Err(EventError::invalid(
                "ask",
                format!(
                    "defer is Claude Code's (its headless runs); {} has no defer",
                    dialect.runtime()
                ),
            ));
        }
        Some(other) => {
            return Err(EventError::invalid(
                "ask",
                format!("{other:?} is not one of ask, defer"),
            ));
        }
    };
    let first = body
        .iter()
        .find(|b| !matches!(b, b' ' | b'\t' | b'\n' | b'\r'));
    if first != Some(&b'{') {
        return Err(EventError::invalid("body", "must be a JSON object"));
    }
    let payload: Map<String, Value> = serde_json::from_slice(body)
        .map_err(|e| EventError::invalid("body", format!("not a JSON object: {e}")))?;
    let named = payload.get("hook_event_name").map(|v| {
        v.as_str()
            .map(str::to_string)
            .ok_or_else(|| EventError::invalid("hook_event_name", "must be a string"))
    });
    let named = named.transpose()?;
    let from_query = named.is_none();
    let native_event = match (named, &options.event) {
        (Some(n), Some(q)) if n != *q => {
            return Err(EventError::invalid(
                "event",
                format!("the query names {q:?} but the payload's hook_event_name is {n:?}"),
            ));
        }
        (Some(n), _) => n,
        (None, Some(q)) => q.clone(),
        (None, None) => {
            return Err(EventError::invalid(
                "hook_event_name",
                "missing: the payload names no event; give it as ?event=<the runtime's event name> (Copilot's camelCase hooks send none)",
            ));
        }
    };
    if native_event.trim().is_empty() || native_event.trim() != native_event {
        return Err(EventError::invalid(
            if from_query {
                "event"
            } else {
                "hook_event_name"
            },
            format!("{native_event:?} is not an event name"),
        ));
    }
    // The PascalCase hooks of Copilot send `hook_event_name`; a payload without one is
    // camelCase and read as such only under a camelCase event.
    if from_query && dialect == Dialect::Copilot && !copilot::is_camel_case(&native_event) {
        return Err(EventError::invalid(
            "event",
            format!(
                "{native_event:?}: this payload names no event, so it is one of Copilot's camelCase hooks; name its camelCase event (preToolUse, userPromptSubmitted, …)"
            ),
        ));
    }
    let p = Payload(&payload);
    let read = match dialect {
        Dialect::ClaudeCode | Dialect::Codex => claude::read(&native_event, &p)?,
        Dialect::GeminiCli => gemini::read(&native_event, &p)?,
        Dialect::Cursor => cursor::read(&native_event, &p)?,
        Dialect::Copilot => copilot::read(&native_event, &p)?,
    };
    // An event named by configuration (the query) must be one we answer: a misspelt
    // `--event` would otherwise be "no opinion" for every call.
    if from_query && read.event.is_none() {
        return Err(EventError::invalid(
            "event",
            format!(
                "{native_event:?} is not a {} event agenthooks answers (docs/dialects.md lists them)",
                dialect.runtime()
            ),
        ));
    }
    // A tool event names its tool: without one no tool hook could match, and the call
    // would be allowed unseen.
    if let Some(ev) = &read.event
        && matches!(
            ev.event,
            agenthooks_crds::HookEvent::PreToolUse | agenthooks_crds::HookEvent::PostToolUse
        )
        && ev.tool().is_none()
    {
        let camel = dialect == Dialect::Copilot && copilot::is_camel_case(&native_event);
        return Err(EventError::invalid(
            if camel { "toolName" } else { "tool_name" },
            format!("missing: a {native_event} event names its tool"),
        ));
    }
    // Claude Code's PostToolUse: the output's shape, read before the caps may set an
    // oversized output aside ([`Event::finish`]), so it is withheld in that shape too.
    let withholding = read
        .event
        .as_ref()
        .filter(|e| {
            dialect == Dialect::ClaudeCode && e.event == agenthooks_crds::HookEvent::PostToolUse
        })
        .and_then(|e| withheld::Withholding::of(e.tool_output.as_ref()));
    let event = match read.event {
        Some(mut ev) => {
            // The runtime's payload, kept whole and moved, not copied.
            ev.raw_input = Some(Value::Object(payload));
            if let Some(a) = &options.agent_id {
                ev.agent_id = a.clone();
            }
            if let Some(t) = &options.tenant_id {
                ev.tenant_id = t.clone();
            }
            Some(ev.finish()?)
        }
        None => None,
    };
    Ok(NativeCall {
        dialect,
        kind: event.as_ref().map(|e| e.event),
        camel_case: dialect == Dialect::Copilot && copilot::is_camel_case(&native_event),
        native_event,
        event,
        runtime_agent: read.runtime_agent,
        defer,
        withholding,
    })
}

/// The runtime's answer to `decision` for `call` (see module docs for the rules).
pub fn answer(call: &NativeCall, decision: &Decision) -> NativeAnswer {
    let Some(kind) = call.kind else {
        return no_opinion();
    };
    let reply = Reply {
        event: kind,
        native_event: &call.native_event,
        decision,
        defer: call.defer,
        withholding: call.withholding.as_ref(),
    };
    match call.dialect {
        Dialect::ClaudeCode => claude::answer(&reply, claude::Flavour::ClaudeCode),
        Dialect::Codex => claude::answer(&reply, claude::Flavour::Codex),
        Dialect::GeminiCli => gemini::answer(&reply),
        Dialect::Cursor => cursor::answer(&reply),
        Dialect::Copilot if call.camel_case => copilot::answer(&reply),
        Dialect::Copilot => claude::answer(&reply, claude::Flavour::Copilot),
    }
}

/// The text a runtime shows the model and the user for a block: our reason and the
/// deciding hook (`agenthooks: destructive command refused by policy (hook
/// tenant-acme/block-rm-rf)`).
pub fn refusal_text(decision: &Decision) -> String {
    let reason = decision
        .reason
        .as_deref()
        .filter(|r| !r.trim().is_empty())
        .unwrap_or("blocked");
    match &decision.deciding_hook {
        Some(hook) => format!("agenthooks: {} (hook {hook})", reason.trim()),
        None => format!("agenthooks: {}", reason.trim()),
    }
}

/// The refusal of an output rewrite the runtime cannot apply: the output is withheld
/// rather than shown as it was.
fn unapplied_output_rewrite(runtime: &str, native_event: &str) -> String {
    format!(
        "agenthooks: a master hook rewrote this tool's output and {runtime} cannot apply that at {native_event}; withheld rather than shown as it was"
    )
}

/// The refusal of a rewrite the runtime cannot apply at this event.
fn unapplied_rewrite(runtime: &str, native_event: &str) -> String {
    format!(
        "agenthooks: a master hook rewrote this call and {runtime} cannot apply a rewrite at {native_event}; refused rather than run the call as written"
    )
}

/// `{}`: no opinion; the runtime's own rules decide.
fn no_opinion() -> Value {
    Value::Object(Map::new())
}

/// What the per-dialect answer functions get.
struct Reply<'a> {
    event: agenthooks_crds::HookEvent,
    native_event: &'a str,
    decision: &'a Decision,
    /// `?ask=defer`: Claude Code's `defer` for an `ask`.
    defer: bool,
    /// Claude Code's `PostToolUse`: the output's shape to withhold it in.
    withholding: Option<&'a withheld::Withholding>,
}

impl Reply<'_> {
    /// Refused: a `block`, or an `ask` where the dialect has no way to ask (a dialect that
    /// can ask tests [`Reply::asks`] first).
    fn blocked(&self) -> bool {
        matches!(self.decision.decision, Verdict::Block | Verdict::Ask)
    }
    /// A hook wants a person to decide, and nothing blocked.
    fn asks(&self) -> bool {
        self.decision.decision == Verdict::Ask
    }
    /// A master hook rewrote the tool's output (`post_tool_use`).
    fn output_rewrite(&self) -> Option<&Value> {
        self.decision.updated_tool_output.as_ref()
    }
    fn context(&self) -> Option<&str> {
        self.decision.additional_context.as_deref()
    }
    fn rewrite(&self) -> Option<&Value> {
        self.decision.updated_input.as_ref()
    }
}

/// What a per-dialect reader returns.
struct Read {
    event: Option<Event>,
    runtime_agent: Option<String>,
}

impl Read {
    fn unmapped() -> Read {
        Read {
            event: None,
            runtime_agent: None,
        }
    }
}

/// Typed access to a payload's fields; errors name the runtime's field.
struct Payload<'a>(&'a Map<String, Value>);

impl Payload<'_> {
    /// A string field; `None` when absent or null.
    fn str(&self, key: &str) -> Result<Option<String>, EventError> {
        match self.0.get(key) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(s)) => Ok(Some(s.clone())),
            Some(_) => Err(EventError::invalid(key, "must be a string")),
        }
    }

    /// A string field, `""` when absent.
    fn string(&self, key: &str) -> Result<String, EventError> {
        Ok(self.str(key)?.unwrap_or_default())
    }

    /// A JSON object field (a string holding a JSON object is read as one: older Copilot
    /// and Cursor versions send tool arguments that way); `{}` when absent.
    fn object(&self, key: &str) -> Result<Value, EventError> {
        match self.0.get(key) {
            None | Some(Value::Null) => Ok(Value::Object(Map::new())),
            Some(v @ Value::Object(_)) => Ok(v.clone()),
            Some(Value::String(s)) => match serde_json::from_str::<Value>(s) {
                Ok(v @ Value::Object(_)) => Ok(v),
                _ => Err(EventError::invalid(
                    key,
                    "must be a JSON object (or a string holding one)",
                )),
            },
            Some(_) => Err(EventError::invalid(key, "must be a JSON object")),
        }
    }

    fn get(&self, key: &str) -> Option<&Value> {
        self.0.get(key)
    }
}
