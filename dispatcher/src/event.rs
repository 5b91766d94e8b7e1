//! The event an agent runtime sends to `POST /v1/dispatch` (CONTRACT §1.3), its parsing
//! with errors that name the field, and the declared caps on `tool_input` that bound
//! every CEL evaluation (CONTRACT §2.4: over the cap is a 413 before any hook runs).

use agenthooks_crds::HookEvent;
use agenthooks_crds::expr::MAX_LIST_LEN;
use agenthooks_crds::tool::{ToolFacts, ToolHints, classify};
use serde::de::{self, DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use serde_json::map::Entry;

/// Largest request body accepted by `POST /v1/dispatch`, in bytes.
pub const MAX_BODY_BYTES: usize = 1024 * 1024;
/// Largest `tool_input`, in bytes of its JSON text (approximated while walking it).
pub const MAX_TOOL_INPUT_BYTES: usize = 256 * 1024;
/// Deepest nesting of objects and arrays inside `tool_input`.
pub const MAX_TOOL_INPUT_DEPTH: usize = 32;
/// Most entries in [`Event::accept`].
pub const MAX_ACCEPT: usize = 4;
/// Sub-agent depth bound (seed `MaxLoopDepth`): `depth > 3` runs no hook.
pub const MAX_LOOP_DEPTH: i64 = 3;
/// Longest id or key taken from a caller (`event_id`, `session_id`, `tenant_id`,
/// `agent_id`, `turn_id`, `tool_name`), in bytes (CONTRACT §10.2). Over it is a 400
/// naming the field, before any hook runs or anything is kept for the request.
pub const MAX_ID_BYTES: usize = 256;
/// Longest field path reported in an error, in bytes (a cut path ends with `…`).
pub const MAX_REPORTED_PATH_BYTES: usize = 200;
/// Longest error message reported, in bytes (a cut message ends with `…`).
const MAX_REPORTED_MESSAGE_BYTES: usize = 1024;

/// A caller's id or key as the API schema states it: no control character (U+0000–U+001F,
/// U+007F–U+009F), which [`Event::check`] refuses.
pub const ID_PATTERN: &str = r"^[^\x00-\x1f\x7f-\x9f]*$";
/// `event_id` as the API schema states it: [`ID_PATTERN`], and no `#`.
pub const EVENT_ID_PATTERN: &str = r"^[^#\x00-\x1f\x7f-\x9f]*$";

/// One lifecycle event, as given to handlers (snake_case names, CONTRACT §1.3), and the
/// body of `POST /v1/dispatch`: unknown keys are refused (400 naming the key).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Event {
    /// The lifecycle event.
    pub event: HookEvent,
    /// Generated (UUID v4) when missing. At most 256 bytes, no control character, no `#`.
    #[serde(default)]
    #[schemars(length(max = 256), regex(pattern = EVENT_ID_PATTERN))]
    pub event_id: String,
    /// The agent's session. At most 256 bytes, no control character.
    #[serde(default)]
    #[schemars(length(max = 256), regex(pattern = ID_PATTERN))]
    pub session_id: String,
    /// The tenant the event is for; missing: the caller's only tenant. At most 256 bytes,
    /// no control character.
    #[serde(default)]
    #[schemars(length(max = 256), regex(pattern = ID_PATTERN))]
    pub tenant_id: String,
    /// The agent (what `scope: agent` hooks select). At most 256 bytes, no control character.
    #[serde(default)]
    #[schemars(length(max = 256), regex(pattern = ID_PATTERN))]
    pub agent_id: String,
    /// The tool called (tool events). At most 256 bytes, no control character.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 256), regex(pattern = ID_PATTERN))]
    pub tool_name: Option<String>,
    /// A JSON object; `{}` when missing. A key repeated at any depth is refused
    /// (plain serde_json would keep the last one silently). Caps (413 naming the place):
    /// 256 KiB of JSON text, 32 levels of nesting, 1000 items or keys per array or object.
    #[serde(default = "empty_object", deserialize_with = "unique_keys")]
    #[schemars(with = "serde_json::Map<String, Value>")]
    pub tool_input: Value,
    /// `post_tool_use`: what the tool returned (any JSON; a runtime's `tool_response`), under
    /// the same caps as `tool_input`. A `blocking: true` hook may withhold it (`block`) or
    /// rewrite it (`updatedToolOutput`, from the master namespace).
    #[serde(
        default,
        deserialize_with = "some_unique_keys",
        skip_serializing_if = "Option::is_none"
    )]
    #[schemars(with = "Option<Value>")]
    pub tool_output: Option<Value>,
    /// `tool_output` was dropped for being over [`MAX_TOOL_INPUT_BYTES`] or
    /// [`MAX_TOOL_INPUT_DEPTH`] instead of refusing the event: the tool already ran, and
    /// a hook that waits for its output must not pass it unread (the chain withholds it,
    /// [`crate::decision::chain::step`]). Not part of the wire format.
    #[serde(skip)]
    #[schemars(skip)]
    pub tool_output_unread: bool,
    /// `stop`/`subagent_stop`: how many times this session's stop was refused already since
    /// its last prompt (issue 16). Set by the dispatcher for handlers; a caller's value is
    /// read and thrown away.
    #[serde(
        default,
        deserialize_with = "discard_count",
        skip_serializing_if = "Option::is_none"
    )]
    #[schemars(skip)]
    pub stop_count: Option<u32>,
    /// The runtime's own payload, passed to handlers as it is (never to a prompt judge).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub raw_input: Option<Value>,
    /// Sub-agent depth (0 for the main agent); over 3 no hook runs and a blocking event
    /// is answered `block` (`LoopDepthExceeded`).
    #[serde(default)]
    #[schemars(range(min = 0))]
    pub depth: i64,
    /// The turn (a user prompt and what follows): prompt hooks count their calls per turn.
    /// At most 256 bytes, no control character.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 256), regex(pattern = ID_PATTERN))]
    pub turn_id: Option<String>,
    /// The caller's span, from the request's W3C `traceparent`/`tracestate` headers
    /// when tracing is enabled (CONTRACT §8.1). Never read from or written to the JSON:
    /// handlers see the same body, and a `trace_parent` key stays an unknown field.
    #[serde(skip)]
    pub trace_parent: Option<opentelemetry::trace::SpanContext>,
    /// The authenticated caller's name (CONTRACT §9.1), for the audit row's metadata.
    /// Set by the server, never read from or written to the JSON.
    #[serde(skip)]
    pub caller: Option<std::sync::Arc<str>>,
    /// The call in the canonical tool vocabulary (`tool_kind` and normalised fields,
    /// [`agenthooks_crds::tool`]), derived from `tool_name` and `tool_input` by
    /// [`Event::refresh_tool`]: handlers see it as `"tool"`. A caller can never set it: a
    /// `"tool"` key in a request is read and thrown away (so an event a handler got can be
    /// sent again as it is), and the facts are derived anew. `None` without a tool name.
    #[serde(
        default,
        deserialize_with = "discard_tool",
        skip_serializing_if = "Option::is_none"
    )]
    #[schemars(skip)]
    pub tool: Option<ToolFacts>,
    /// What the runtime's payload said about the call beside its name (an MCP server),
    /// kept for [`Event::refresh_tool`]. Set by the dialect adapters only.
    #[serde(skip)]
    pub tool_hints: ToolHints,
    /// Answers the caller can act on beside `allow` and `block` (issue 16): `["ask"]` lets
    /// the answer be `ask` — a hook wants a person to decide. Without it an `ask` is
    /// answered `block` with the same reason (fail-closed). At most [`MAX_ACCEPT`] entries.
    /// Never passed to handlers.
    #[serde(default, skip_serializing)]
    #[schemars(length(max = 4))]
    pub accept: Vec<Accept>,
}

/// An answer a caller can act on beside `allow` and `block` ([`Event::accept`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Accept {
    /// The caller can ask a person (or hold the call) when the answer is `ask`.
    Ask,
}

/// Reads a `"tool"` key of a request and keeps nothing of it: the facts are ours to derive.
fn discard_tool<'de, D: Deserializer<'de>>(d: D) -> Result<Option<ToolFacts>, D::Error> {
    serde::de::IgnoredAny::deserialize(d)?;
    Ok(None)
}

/// Reads a `"stop_count"` key of a request and keeps nothing of it: the count is ours.
fn discard_count<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u32>, D::Error> {
    serde::de::IgnoredAny::deserialize(d)?;
    Ok(None)
}

/// [`unique_keys`] for an optional value; `null` is absent.
fn some_unique_keys<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Value>, D::Error> {
    Ok(Some(unique_keys(d)?).filter(|v| !v.is_null()))
}

fn empty_object() -> Value {
    Value::Object(Default::default())
}

/// Why a request was refused; `status()` is the HTTP status to answer.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum EventError {
    /// Malformed JSON or a field of the wrong shape (400).
    #[error("{field}: {message}")]
    Invalid { field: String, message: String },
    /// Over a declared cap (413).
    #[error("{field}: {message}")]
    TooLarge { field: String, message: String },
}

impl EventError {
    /// 400 for invalid input, 413 for input over a cap.
    pub fn status(&self) -> u16 {
        match self {
            EventError::Invalid { .. } => 400,
            EventError::TooLarge { .. } => 413,
        }
    }
    pub(crate) fn invalid(field: impl Into<String>, message: impl Into<String>) -> Self {
        EventError::Invalid {
            field: field.into(),
            message: message.into(),
        }
    }
}

/// A JSON value built like serde_json's own, except that an object holding the same key
/// twice, at any depth, is an error. The error is raised while reading the second value,
/// so a path-tracking deserializer reports the repeated key (`tool_input.a.cmd`).
fn unique_keys<'de, D: Deserializer<'de>>(d: D) -> Result<Value, D::Error> {
    d.deserialize_any(UniqueKeys)
}

struct UniqueKeys;

impl<'de> DeserializeSeed<'de> for UniqueKeys {
    type Value = Value;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for UniqueKeys {
    type Value = Value;
    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a JSON value")
    }
    fn visit_bool<E>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }
    fn visit_i64<E>(self, v: i64) -> Result<Value, E> {
        Ok(Value::from(v))
    }
    fn visit_u64<E>(self, v: u64) -> Result<Value, E> {
        Ok(Value::from(v))
    }
    fn visit_f64<E>(self, v: f64) -> Result<Value, E> {
        Ok(Value::from(v))
    }
    fn visit_str<E>(self, v: &str) -> Result<Value, E> {
        Ok(Value::String(v.to_owned()))
    }
    fn visit_string<E>(self, v: String) -> Result<Value, E> {
        Ok(Value::String(v))
    }
    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }
    fn visit_none<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }
    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        d.deserialize_any(self)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut out = Vec::new();
        while let Some(v) = seq.next_element_seed(UniqueKeys)? {
            out.push(v);
        }
        Ok(Value::Array(out))
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut out = serde_json::Map::new();
        while let Some(key) = map.next_key::<String>()? {
            match out.entry(key) {
                Entry::Vacant(slot) => {
                    slot.insert(map.next_value_seed(UniqueKeys)?);
                }
                Entry::Occupied(_) => match map.next_value_seed(DuplicateKey)? {},
            }
        }
        Ok(Value::Object(out))
    }
}

/// Fails in place of the value of a repeated key, so the error's path names that key.
struct DuplicateKey;

impl<'de> DeserializeSeed<'de> for DuplicateKey {
    type Value = std::convert::Infallible;
    fn deserialize<D: Deserializer<'de>>(self, _: D) -> Result<Self::Value, D::Error> {
        Err(de::Error::custom("duplicate key"))
    }
}

impl Event {
    /// Parses a request body. Errors name the field (`event`, `tool_input.a[3]`, ...).
    /// Fills a missing `event_id` with a UUID.
    pub fn parse(body: &[u8]) -> Result<Event, EventError> {
        if body.len() > MAX_BODY_BYTES {
            return Err(EventError::TooLarge {
                field: "body".into(),
                message: format!(
                    "{} bytes is over the {MAX_BODY_BYTES}-byte limit",
                    body.len()
                ),
            });
        }
        // serde derive also reads a struct from a JSON array (`["stop"]`): only an
        // object is an event.
        let first = body
            .iter()
            .find(|b| !matches!(b, b' ' | b'\t' | b'\n' | b'\r'));
        if first != Some(&b'{') {
            return Err(EventError::invalid("body", "must be a JSON object"));
        }
        // Fast path; on failure, parse again with path tracking to name the field.
        let mut ev: Event = match serde_json::from_slice(body) {
            Ok(ev) => ev,
            Err(first) => return Err(parse_error(body, first)),
        };
        ev.set_aside_oversized_output();
        ev.check()?;
        if ev.event_id.is_empty() {
            ev.event_id = uuid::Uuid::new_v4().to_string();
        }
        ev.refresh_tool();
        Ok(ev)
    }

    /// An event of this kind with a fresh id and every other field empty: what the
    /// dialect adapters fill in before [`Event::finish`].
    pub fn of(kind: HookEvent) -> Event {
        Event {
            event: kind,
            event_id: uuid::Uuid::new_v4().to_string(),
            session_id: String::new(),
            tenant_id: String::new(),
            agent_id: String::new(),
            tool_name: None,
            tool_input: empty_object(),
            tool_output: None,
            tool_output_unread: false,
            stop_count: None,
            raw_input: None,
            depth: 0,
            turn_id: None,
            trace_parent: None,
            caller: None,
            tool: None,
            tool_hints: ToolHints::default(),
            accept: Vec::new(),
        }
    }

    /// Whether the caller accepts an `ask` answer ([`Event::accept`]).
    pub fn accepts_ask(&self) -> bool {
        self.accept.contains(&Accept::Ask)
    }

    /// The checks of [`Event::parse`] ([`Event::check`]) and the tool facts, for an event
    /// built field by field.
    pub fn finish(mut self) -> Result<Event, EventError> {
        self.set_aside_oversized_output();
        self.check()?;
        self.refresh_tool();
        Ok(self)
    }

    /// A `tool_output` over the caps is dropped, and that noted
    /// ([`Event::tool_output_unread`]): the call already happened, so the event is still
    /// decided (a `tool_input` over the caps refuses the event instead).
    fn set_aside_oversized_output(&mut self) {
        if self
            .tool_output
            .as_ref()
            .is_some_and(|o| check_tool_output(o).is_err())
        {
            self.tool_output = None;
            self.tool_output_unread = true;
        }
    }

    /// Derives [`Event::tool`] from the tool name, `tool_input` and the hints: after
    /// parsing, and again whenever `tool_input` is rewritten, so no hook sees the facts of
    /// an input that is no longer the one to run.
    pub fn refresh_tool(&mut self) {
        self.tool = self
            .tool()
            .map(|name| classify(name, &self.tool_input, &self.tool_hints));
    }

    /// Checks shapes serde cannot: `tool_input` is an object within the caps, `depth`
    /// is not negative, ids are at most [`MAX_ID_BYTES`] and hold no control character.
    pub fn check(&self) -> Result<(), EventError> {
        if !self.tool_input.is_object() {
            return Err(EventError::invalid("tool_input", "must be a JSON object"));
        }
        if self.depth < 0 {
            return Err(EventError::invalid("depth", "must not be negative"));
        }
        if self.accept.len() > MAX_ACCEPT {
            return Err(EventError::invalid(
                "accept",
                format!("lists {} answers; at most {MAX_ACCEPT}", self.accept.len()),
            ));
        }
        // Every id and key the caller chose (CONTRACT §10.2): bounded, and, as names and
        // ids end up in logs, metrics labels and audit rows, free of NUL, newline, escape
        // and other control characters. The one list of them.
        for (field, v) in self.caller_ids() {
            let Some(v) = v else { continue };
            if v.len() > MAX_ID_BYTES {
                return Err(EventError::invalid(
                    field,
                    format!(
                        "is {} bytes, longer than the {MAX_ID_BYTES}-byte limit on ids (CONTRACT §10.2)",
                        v.len()
                    ),
                ));
            }
        }
        for (field, v) in self.caller_ids() {
            if let Some(c) = v.and_then(|v| v.chars().find(|c| c.is_control())) {
                return Err(EventError::invalid(
                    field,
                    format!("contains a control character (U+{:04X})", u32::from(c)),
                ));
            }
        }
        // `#` separates a reused event id from its suffix in audit dedup keys
        // (`<hook uid>:<event_id>#<16 hex>`, see `audit::store::reused_event_key`): an id
        // holding it could take the key another event's row needs.
        if self.event_id.contains('#') {
            return Err(EventError::invalid(
                "event_id",
                "must not contain '#' (it is reserved in audit dedup keys)",
            ));
        }
        check_tool_input(&self.tool_input)?;
        if let Some(output) = &self.tool_output {
            check_tool_output(output)?;
        }
        Ok(())
    }

    /// Every string id or key of the body the caller chose, by field name (`None` when
    /// absent): what [`MAX_ID_BYTES`] bounds.
    fn caller_ids(&self) -> [(&'static str, Option<&str>); 6] {
        [
            ("event_id", Some(self.event_id.as_str())),
            ("session_id", Some(self.session_id.as_str())),
            ("tenant_id", Some(self.tenant_id.as_str())),
            ("agent_id", Some(self.agent_id.as_str())),
            ("turn_id", self.turn_id.as_deref()),
            ("tool_name", self.tool_name.as_deref()),
        ]
    }

    /// The tool name, `None` when absent or empty.
    pub fn tool(&self) -> Option<&str> {
        self.tool_name.as_deref().filter(|t| !t.is_empty())
    }
}

/// Names the field of a failed parse: parses again with path tracking.
fn parse_error(body: &[u8], first: serde_json::Error) -> EventError {
    let de = &mut serde_json::Deserializer::from_slice(body);
    let (path, msg) = match serde_path_to_error::deserialize::<_, Event>(de) {
        Err(e) => (e.path().to_string(), e.into_inner().to_string()),
        // Trailing characters after the object (only the fast path checks the end).
        Ok(_) => (String::new(), first.to_string()),
    };
    // `?` stands for a place with no name (a key that could not be read): name the
    // enclosing field, or the whole body.
    let mut path = path.as_str();
    while let Some(parent) = path.strip_suffix('?') {
        path = parent.strip_suffix('.').unwrap_or(parent);
    }
    let field = if path.is_empty() || path == "." {
        "body"
    } else {
        path
    };
    let msg = strip_position(&msg);
    // serde refuses a repeated top-level field before reading its value, so the path
    // is still empty: take the name from the message.
    let field = match msg
        .strip_prefix("duplicate field `")
        .and_then(|m| m.strip_suffix('`'))
    {
        Some(name) if field == "body" => name,
        _ => field,
    };
    if msg == "recursion limit exceeded" {
        // Past serde_json's nesting limit (128): over a cap, whatever the path.
        let top = field.split(['.', '[']).next().unwrap_or(field);
        let message = if top == "tool_input" {
            format!("nests deeper than {MAX_TOOL_INPUT_DEPTH} levels")
        } else {
            "nests deeper than 127 levels".to_owned()
        };
        return EventError::TooLarge {
            field: top.to_owned(),
            message,
        };
    }
    EventError::invalid(
        cut_to(field, MAX_REPORTED_PATH_BYTES),
        cut_to(&msg, MAX_REPORTED_MESSAGE_BYTES),
    )
}

/// `s`, or its longest prefix that, followed by `…`, fits in `max` bytes.
fn cut_to(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_owned();
    }
    let mut end = max - '…'.len_utf8();
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &s[..end])
}

fn strip_position(msg: &str) -> String {
    match msg.rfind(" at line ") {
        Some(i) => msg[..i].to_string(),
        None => msg.to_string(),
    }
}

/// `tool_input`'s caps ([`MAX_TOOL_INPUT_BYTES`], [`MAX_TOOL_INPUT_DEPTH`] and the rest
/// of [`Event::check`]'s size rules), alone: what a rewrite is checked against without
/// copying the event. Errors name the place inside it.
pub fn check_tool_input(v: &Value) -> Result<(), EventError> {
    check_caps("tool_input", v, &mut Vec::new(), &mut 0)
}

/// `tool_output`'s caps, which are `tool_input`'s ([`check_tool_input`]).
pub fn check_tool_output(v: &Value) -> Result<(), EventError> {
    check_caps("tool_output", v, &mut Vec::new(), &mut 0)
}

/// One step of a path inside `tool_input` (or `tool_output`), kept as borrowed parts and
/// formatted only when a cap is broken.
enum Seg<'a> {
    Key(&'a str),
    Index(usize),
}

fn path_string(root: &str, path: &[Seg<'_>]) -> String {
    let mut out = String::from(root);
    for seg in path {
        match seg {
            Seg::Key(k) => {
                out.push('.');
                out.push_str(k);
            }
            Seg::Index(i) => out.push_str(&format!("[{i}]")),
        }
        if out.len() > MAX_REPORTED_PATH_BYTES {
            break;
        }
    }
    cut_to(&out, MAX_REPORTED_PATH_BYTES)
}

/// The caps of [`MAX_TOOL_INPUT_BYTES`], [`MAX_TOOL_INPUT_DEPTH`] and `MAX_LIST_LEN` on the
/// value `v` of field `root` (`tool_input`, `tool_output`); errors name the place.
fn check_caps<'a>(
    root: &'static str,
    v: &'a Value,
    path: &mut Vec<Seg<'a>>,
    size: &mut usize,
) -> Result<(), EventError> {
    let too_large = |path: &[Seg<'_>], message: String| EventError::TooLarge {
        field: path_string(root, path),
        message,
    };
    if path.len() > MAX_TOOL_INPUT_DEPTH {
        return Err(too_large(
            path,
            format!("nests deeper than {MAX_TOOL_INPUT_DEPTH} levels"),
        ));
    }
    *size += match v {
        Value::String(s) => s.len() + 2,
        Value::Number(_) => 8,
        _ => 4,
    };
    if *size > MAX_TOOL_INPUT_BYTES {
        return Err(EventError::TooLarge {
            field: root.into(),
            message: format!("is larger than {MAX_TOOL_INPUT_BYTES} bytes"),
        });
    }
    match v {
        Value::Array(a) => {
            if a.len() as u64 > MAX_LIST_LEN {
                return Err(too_large(
                    path,
                    format!("holds {} items; at most {MAX_LIST_LEN}", a.len()),
                ));
            }
            for (i, x) in a.iter().enumerate() {
                path.push(Seg::Index(i));
                check_caps(root, x, path, size)?;
                path.pop();
            }
        }
        Value::Object(o) => {
            if o.len() as u64 > MAX_LIST_LEN {
                return Err(too_large(
                    path,
                    format!("holds {} keys; at most {MAX_LIST_LEN}", o.len()),
                ));
            }
            for (k, x) in o {
                *size += k.len() + 3;
                path.push(Seg::Key(k));
                check_caps(root, x, path, size)?;
                path.pop();
            }
        }
        _ => {}
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn parse(v: Value) -> Result<Event, EventError> {
        Event::parse(serde_json::to_vec(&v).unwrap().as_slice())
    }

    #[test]
    fn minimal_event_gets_defaults_and_an_event_id() {
        let e = parse(json!({"event": "pre_tool_use", "tool_name": "exec"})).unwrap();
        assert_eq!(e.event, HookEvent::PreToolUse);
        assert_eq!(e.tool_input, json!({}));
        assert_eq!(e.depth, 0);
        assert_eq!(
            uuid::Uuid::parse_str(&e.event_id)
                .unwrap()
                .get_version_num(),
            4
        );
        let e = parse(json!({"event": "stop", "event_id": "ev-1"})).unwrap();
        assert_eq!(e.event_id, "ev-1");
    }

    #[test]
    fn every_caller_id_is_at_most_256_bytes_else_400_naming_it() {
        for field in [
            "event_id",
            "session_id",
            "tenant_id",
            "agent_id",
            "turn_id",
            "tool_name",
        ] {
            let mut v = json!({"event": "pre_tool_use"});
            v[field] = json!("x".repeat(MAX_ID_BYTES));
            assert!(parse(v.clone()).is_ok(), "{field} of 256 bytes is accepted");
            v[field] = json!("x".repeat(MAX_ID_BYTES + 1));
            let err = parse(v).unwrap_err();
            assert_eq!(err.status(), 400, "{field}");
            assert_eq!(
                err,
                EventError::Invalid {
                    field: field.into(),
                    message: "is 257 bytes, longer than the 256-byte limit on ids (CONTRACT §10.2)"
                        .into()
                }
            );
        }
        // Bytes, not characters: 129 two-byte characters are 258 bytes.
        let err = parse(json!({"event": "stop", "turn_id": "é".repeat(129)})).unwrap_err();
        assert_eq!(err.status(), 400);
        assert!(
            err.to_string().starts_with("turn_id: is 258 bytes"),
            "{err}"
        );
    }

    #[test]
    fn unknown_event_is_400_naming_the_field() {
        let err = parse(json!({"event": "pre_tool_call"})).unwrap_err();
        assert_eq!(err.status(), 400);
        let EventError::Invalid { field, message } = err else {
            panic!()
        };
        assert_eq!(field, "event");
        assert!(message.contains("pre_tool_use"), "{message}");
    }

    #[test]
    fn wrong_types_name_their_field() {
        for (body, field) in [
            (json!({"event": "stop", "depth": "3"}), "depth"),
            (json!({"event": "stop", "tool_input": [1]}), "tool_input"),
            (json!({"event": "stop", "tool_name": 7}), "tool_name"),
            (json!({"event": "stop", "depth": -1}), "depth"),
            (json!({"event": "stop", "surprise": 1}), "surprise"),
            (json!({}), "body"),
        ] {
            match parse(body.clone()) {
                Err(EventError::Invalid { field: f, .. }) => assert_eq!(f, field, "{body}"),
                other => panic!("{body}: {other:?}"),
            }
        }
        assert!(matches!(
            Event::parse(b"{not json"),
            Err(EventError::Invalid { .. })
        ));
        assert!(matches!(Event::parse(b""), Err(EventError::Invalid { .. })));
    }

    #[test]
    fn tool_input_caps_are_413() {
        let long: Vec<_> = (0..=MAX_LIST_LEN).collect();
        let err =
            parse(json!({"event": "pre_tool_use", "tool_input": {"items": long}})).unwrap_err();
        assert_eq!(err.status(), 413);
        assert!(
            err.to_string()
                .starts_with("tool_input.items: holds 1001 items"),
            "{err}"
        );

        let mut deep = json!(1);
        for _ in 0..40 {
            deep = json!([deep]);
        }
        let err = parse(json!({"event": "pre_tool_use", "tool_input": {"d": deep}})).unwrap_err();
        assert_eq!(err.status(), 413);

        let big = "x".repeat(MAX_TOOL_INPUT_BYTES);
        let err = parse(json!({"event": "pre_tool_use", "tool_input": {"s": big}})).unwrap_err();
        assert_eq!(err.status(), 413);

        let body = vec![b' '; MAX_BODY_BYTES + 1];
        assert_eq!(Event::parse(&body).unwrap_err().status(), 413);
    }

    #[test]
    fn empty_tool_name_counts_as_none() {
        let e = parse(json!({"event": "pre_tool_use", "tool_name": ""})).unwrap();
        assert_eq!(e.tool(), None);
    }

    fn invalid(body: &[u8]) -> (String, String) {
        match Event::parse(body) {
            Err(EventError::Invalid { field, message }) => (field, message),
            other => panic!("{}: {other:?}", String::from_utf8_lossy(body)),
        }
    }

    #[test]
    fn a_callers_tool_key_is_thrown_away_and_the_facts_derived_anew() {
        let e = Event::parse(
            br#"{"event":"pre_tool_use","tool_name":"Bash","tool_input":{"command":"rm -rf /"},"tool":{"kind":"other","command":"ls"}}"#,
        )
        .unwrap();
        let t = e.tool.as_ref().unwrap();
        assert_eq!(
            (t.kind, t.command.as_str()),
            (agenthooks_crds::tool::ToolKind::Shell, "rm -rf /")
        );
        // What a handler got parses again as it is.
        let again = Event::parse(&serde_json::to_vec(&e).unwrap()).unwrap();
        assert_eq!(again.tool, e.tool);
    }

    #[test]
    fn a_body_that_is_not_a_json_object_is_400_on_body() {
        for body in [
            &br#"["stop"]"#[..],
            b" \n\t[\"pre_tool_use\", \"e\", \"s\"]",
            b"\"stop\"",
            b"7",
            b"null",
            b"",
            b"   ",
        ] {
            let (field, message) = invalid(body);
            assert_eq!(
                (field.as_str(), message.as_str()),
                ("body", "must be a JSON object"),
                "{}",
                String::from_utf8_lossy(body)
            );
        }
        // Leading JSON whitespace before the object is fine.
        let e = Event::parse(b" \r\n\t{\"event\":\"stop\"}").unwrap();
        assert_eq!(e.event, HookEvent::Stop);
    }

    #[test]
    fn duplicate_keys_inside_tool_input_are_400_naming_the_path() {
        for (body, path) in [
            (
                r#"{"event":"pre_tool_use","tool_input":{"cmd":"rm -rf /x","cmd":"ls"}}"#,
                "tool_input.cmd",
            ),
            (
                r#"{"event":"pre_tool_use","tool_input":{"a":{"b":[1,{"c":1,"d":2,"c":3}]}}}"#,
                "tool_input.a.b[1].c",
            ),
            (
                r#"{"event":"pre_tool_use","tool_input":{"x":{},"y":1,"x":{"z":2}}}"#,
                "tool_input.x",
            ),
        ] {
            let (field, message) = invalid(body.as_bytes());
            assert_eq!(
                (field.as_str(), message.as_str()),
                (path, "duplicate key"),
                "{body}"
            );
        }
        // Top-level duplicates stay refused.
        let (field, message) = invalid(br#"{"event":"stop","event":"pre_tool_use"}"#);
        assert_eq!(field, "event");
        assert_eq!(message, "duplicate field `event`");
        // Same key at different places is not a duplicate; values keep every type.
        let e = Event::parse(
            br#"{"event":"pre_tool_use","tool_input":{"a":{"k":1},"b":{"k":[true,null,-2,3.5,18446744073709551615,"s"]},"k":"x"}}"#,
        )
        .unwrap();
        assert_eq!(
            e.tool_input,
            serde_json::json!({"a":{"k":1},"b":{"k":[true,null,-2,3.5,18446744073709551615u64,"s"]},"k":"x"})
        );
    }

    #[test]
    fn malformed_json_is_reported_on_body_not_a_question_mark() {
        for body in [
            &b"{not json"[..],
            b"{",
            b"{\"event\":\"stop\"",
            b"{\"event\":\"stop\",}",
            b"{\"event\":\"stop\"} trailing",
        ] {
            let (field, _) = invalid(body);
            assert_eq!(field, "body", "{}", String::from_utf8_lossy(body));
        }
        // Inside a field, the field is named (not `tool_input.?`).
        let (field, message) = invalid(br#"{"event":"stop","tool_input":{"a":{"b":1,}}}"#);
        assert_eq!(
            (field.as_str(), message.as_str()),
            ("tool_input.a", "trailing comma")
        );
    }

    #[test]
    fn nesting_past_the_parser_limit_is_413_on_tool_input_with_a_short_field() {
        for depth in [130, 5000] {
            let body = format!(
                r#"{{"event":"pre_tool_use","tool_input":{{"d":{}1{}}}}}"#,
                "[".repeat(depth),
                "]".repeat(depth)
            );
            let err = Event::parse(body.as_bytes()).unwrap_err();
            assert_eq!(err.status(), 413, "{err}");
            assert_eq!(
                err,
                EventError::TooLarge {
                    field: "tool_input".into(),
                    message: format!("nests deeper than {MAX_TOOL_INPUT_DEPTH} levels"),
                }
            );
        }
        // Objects too, not only arrays.
        let body = format!(
            r#"{{"event":"pre_tool_use","tool_input":{}1{}}}"#,
            r#"{"k":"#.repeat(200),
            "}".repeat(200)
        );
        let err = Event::parse(body.as_bytes()).unwrap_err();
        assert_eq!(
            (err.status(), err.to_string().len() < 100),
            (413, true),
            "{err}"
        );
    }

    #[test]
    fn reported_paths_are_cut_to_200_bytes() {
        // A duplicate key with a long name, and a cap broken under long keys.
        let k = "k".repeat(1000);
        let body = format!(r#"{{"event":"pre_tool_use","tool_input":{{"{k}":1,"{k}":2}}}}"#);
        let (field, message) = invalid(body.as_bytes());
        assert_eq!(message, "duplicate key");
        assert_eq!(field.len(), 200, "{field}");
        assert!(field.starts_with("tool_input.kkk"), "{field}");

        let long: Vec<_> = (0..=MAX_LIST_LEN).collect();
        let mut v = serde_json::json!({ "items": long });
        for _ in 0..3 {
            v = serde_json::json!({ k.clone(): v });
        }
        let err = parse(json!({"event": "pre_tool_use", "tool_input": v})).unwrap_err();
        let EventError::TooLarge { field, .. } = err else {
            panic!("{err:?}")
        };
        assert_eq!(field.len(), 200, "{field}");
        // Cut on a character boundary.
        let k = "é".repeat(300);
        let body = format!(r#"{{"event":"pre_tool_use","tool_input":{{"{k}":1,"{k}":2}}}}"#);
        let (field, _) = invalid(body.as_bytes());
        assert!(field.len() <= 200 && field.len() >= 196, "{}", field.len());
        // An unknown top-level field with a long name: path and message both cut.
        let k = "u".repeat(2000);
        let (field, message) = invalid(format!(r#"{{"event":"stop","{k}":1}}"#).as_bytes());
        assert_eq!((field.len(), message.len()), (200, 1024));
        assert!(field.ends_with("uu…"), "{field}");
        assert!(message.starts_with("unknown field `uuu"), "{message}");
    }

    #[test]
    fn control_characters_in_names_and_ids_are_400_naming_the_field() {
        for field in [
            "tool_name",
            "event_id",
            "session_id",
            "tenant_id",
            "agent_id",
            "turn_id",
        ] {
            for bad in [
                "exec\u{0}",
                "ex\nec",
                "\u{1b}[31m",
                "a\u{7f}",
                "b\u{85}",
                "\t",
            ] {
                let mut body = json!({"event": "pre_tool_use"});
                body[field] = json!(bad);
                let (f, message) = match parse(body) {
                    Err(EventError::Invalid { field, message }) => (field, message),
                    other => panic!("{field} {bad:?}: {other:?}"),
                };
                assert_eq!(f, field, "{bad:?}");
                assert!(
                    message.starts_with("contains a control character (U+"),
                    "{message}"
                );
            }
            let mut body = json!({"event": "pre_tool_use"});
            body[field] = json!("fine-id_ü 1");
            assert!(parse(body).is_ok(), "{field}");
        }
        let (f, message) = invalid(br#"{"event":"pre_tool_use","tool_name":"exec\u0000"}"#);
        assert_eq!(
            (f.as_str(), message.as_str()),
            ("tool_name", "contains a control character (U+0000)")
        );
    }

    #[test]
    fn every_refusal_names_a_field() {
        for body in [
            &br#"{"event":"stop","":1}"#[..],
            br#"{"":1}"#,
            br#"{"event":"stop","tool_input":{"":1,"":2}}"#,
            br#"{"event":""}"#,
        ] {
            let (field, _) = invalid(body);
            assert!(!field.is_empty(), "{}", String::from_utf8_lossy(body));
        }
    }

    #[test]
    fn an_event_id_with_a_hash_sign_is_400() {
        // `#` is reserved in audit dedup keys (`<uid>:<event_id>#<16 hex>`).
        let (f, message) = invalid(br#"{"event":"pre_tool_use","event_id":"F3#0d872b122e4862d1"}"#);
        assert_eq!(
            (f.as_str(), message.as_str()),
            (
                "event_id",
                "must not contain '#' (it is reserved in audit dedup keys)"
            )
        );
        let mut body = json!({"event": "pre_tool_use", "session_id": "a#b", "tenant_id": "t#1"});
        assert!(parse(body.clone()).is_ok(), "only event_id is restricted");
        body["event_id"] = json!("run-1:step/2");
        assert!(parse(body).is_ok());
    }
}
