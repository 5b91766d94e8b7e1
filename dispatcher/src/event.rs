//! The event an agent runtime sends to `POST /v1/dispatch` (CONTRACT §1.3), its parsing
//! with errors that name the field, and the declared caps on `tool_input` that bound
//! every CEL evaluation (CONTRACT §2.4: over the cap is a 413 before any hook runs).

use agenthooks_crds::HookEvent;
use agenthooks_crds::expr::MAX_LIST_LEN;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Largest request body accepted by `POST /v1/dispatch`, in bytes.
pub const MAX_BODY_BYTES: usize = 1024 * 1024;
/// Largest `tool_input`, in bytes of its JSON text (approximated while walking it).
pub const MAX_TOOL_INPUT_BYTES: usize = 256 * 1024;
/// Deepest nesting of objects and arrays inside `tool_input`.
pub const MAX_TOOL_INPUT_DEPTH: usize = 32;
/// Sub-agent depth bound (seed `MaxLoopDepth`): `depth > 3` runs no hook.
pub const MAX_LOOP_DEPTH: i64 = 3;

/// One lifecycle event, as given to handlers (snake_case names, CONTRACT §1.3).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Event {
    pub event: HookEvent,
    /// Generated (UUID v4) when missing.
    #[serde(default)]
    pub event_id: String,
    #[serde(default)]
    pub session_id: String,
    #[serde(default)]
    pub tenant_id: String,
    #[serde(default)]
    pub agent_id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_name: Option<String>,
    /// A JSON object; `{}` when missing.
    #[serde(default = "empty_object")]
    pub tool_input: Value,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub raw_input: Option<Value>,
    #[serde(default)]
    pub depth: i64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub turn_id: Option<String>,
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
    fn invalid(field: impl Into<String>, message: impl Into<String>) -> Self {
        EventError::Invalid {
            field: field.into(),
            message: message.into(),
        }
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
        // Fast path; on failure, parse again with path tracking to name the field.
        let mut ev: Event = match serde_json::from_slice(body) {
            Ok(ev) => ev,
            Err(first) => {
                let de = &mut serde_json::Deserializer::from_slice(body);
                let (path, msg) = match serde_path_to_error::deserialize::<_, Event>(de) {
                    Err(e) => (e.path().to_string(), e.into_inner().to_string()),
                    // Never expected; still an error, never a panic.
                    Ok(_) => (String::new(), first.to_string()),
                };
                let field = if path == "." || path.is_empty() {
                    "body".to_string()
                } else {
                    path
                };
                return Err(EventError::invalid(field, strip_position(&msg)));
            }
        };
        ev.check()?;
        if ev.event_id.is_empty() {
            ev.event_id = uuid::Uuid::new_v4().to_string();
        }
        Ok(ev)
    }

    /// Checks shapes serde cannot: `tool_input` is an object within the caps, `depth`
    /// is not negative, ids are short.
    pub fn check(&self) -> Result<(), EventError> {
        if !self.tool_input.is_object() {
            return Err(EventError::invalid("tool_input", "must be a JSON object"));
        }
        if self.depth < 0 {
            return Err(EventError::invalid("depth", "must not be negative"));
        }
        for (field, v) in [
            ("event_id", &self.event_id),
            ("session_id", &self.session_id),
            ("tenant_id", &self.tenant_id),
            ("agent_id", &self.agent_id),
        ] {
            if v.len() > 256 {
                return Err(EventError::invalid(field, "is longer than 256 bytes"));
            }
        }
        if self.tool_name.as_ref().is_some_and(|t| t.len() > 256) {
            return Err(EventError::invalid("tool_name", "is longer than 256 bytes"));
        }
        let mut size = 0usize;
        check_caps(&self.tool_input, &mut Vec::new(), &mut size)
    }

    /// The tool name, `None` when absent or empty.
    pub fn tool(&self) -> Option<&str> {
        self.tool_name.as_deref().filter(|t| !t.is_empty())
    }
}

fn strip_position(msg: &str) -> String {
    match msg.rfind(" at line ") {
        Some(i) => msg[..i].to_string(),
        None => msg.to_string(),
    }
}

/// One step of a path inside `tool_input`, kept as borrowed parts and formatted only when
/// a cap is broken.
enum Seg<'a> {
    Key(&'a str),
    Index(usize),
}

fn path_string(path: &[Seg<'_>]) -> String {
    let mut out = String::from("tool_input");
    for seg in path {
        match seg {
            Seg::Key(k) => {
                out.push('.');
                out.push_str(k);
            }
            Seg::Index(i) => out.push_str(&format!("[{i}]")),
        }
    }
    out
}

fn check_caps<'a>(
    v: &'a Value,
    path: &mut Vec<Seg<'a>>,
    size: &mut usize,
) -> Result<(), EventError> {
    let too_large = |path: &[Seg<'_>], message: String| EventError::TooLarge {
        field: path_string(path),
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
            field: "tool_input".into(),
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
                check_caps(x, path, size)?;
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
                check_caps(x, path, size)?;
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
}
