//! `POST /v1/dispatch` body → [`Event`]: [`Event::parse`] with its caps (CONTRACT §1.3,
//! §2.4), exactly what the server calls on the bytes it read.
//!
//! Properties: no panic; an error is a 400 or a 413 whose field is reported in at most
//! [`MAX_REPORTED_PATH_BYTES`] bytes; an accepted event holds every cap the parser claims
//! (body size, `tool_input` an object within size, depth and list caps, a non-negative
//! depth, short ids without control characters or `#`, an `event_id`), and re-checking
//! or re-serialising and re-parsing it is accepted again.

use agenthooks_crds::expr::MAX_LIST_LEN;
use agenthooks_dispatcher::event::{
    Event, EventError, MAX_BODY_BYTES, MAX_REPORTED_PATH_BYTES, MAX_TOOL_INPUT_BYTES,
    MAX_TOOL_INPUT_DEPTH,
};
use serde_json::Value;

/// The target body: parse `data` as a dispatch body and check the result.
pub fn run(data: &[u8]) {
    match Event::parse(data) {
        Ok(ev) => accepted(data, &ev),
        Err(e) => refused(&e),
    }
}

fn refused(e: &EventError) {
    let (field, status) = match e {
        EventError::Invalid { field, .. } => (field, 400),
        EventError::TooLarge { field, .. } => (field, 413),
    };
    assert_eq!(e.status(), status);
    assert!(!field.is_empty(), "an error names a field: {e:?}");
    assert!(
        field.len() <= MAX_REPORTED_PATH_BYTES,
        "reported field is {} bytes, over {MAX_REPORTED_PATH_BYTES}",
        field.len()
    );
}

fn accepted(data: &[u8], ev: &Event) {
    assert!(data.len() <= MAX_BODY_BYTES);
    assert!(ev.depth >= 0, "negative depth accepted: {}", ev.depth);
    assert!(!ev.event_id.is_empty(), "event_id is filled in");
    assert!(!ev.event_id.contains('#'), "event_id with '#' accepted");
    for (name, v) in [
        ("event_id", Some(ev.event_id.as_str())),
        ("session_id", Some(ev.session_id.as_str())),
        ("tenant_id", Some(ev.tenant_id.as_str())),
        ("agent_id", Some(ev.agent_id.as_str())),
        ("tool_name", ev.tool_name.as_deref()),
    ] {
        if let Some(v) = v {
            assert!(v.len() <= 256, "{name} of {} bytes accepted", v.len());
        }
    }
    for v in [
        ev.tool_name.as_deref(),
        Some(ev.event_id.as_str()),
        Some(ev.session_id.as_str()),
        Some(ev.tenant_id.as_str()),
        Some(ev.agent_id.as_str()),
        ev.turn_id.as_deref(),
    ]
    .into_iter()
    .flatten()
    {
        assert!(
            !v.chars().any(char::is_control),
            "control character accepted in {v:?}"
        );
    }
    assert!(ev.tool_input.is_object(), "tool_input is an object");
    let mut size = 0;
    walk_caps(&ev.tool_input, 0, &mut size);
    // The parser's own size approximation of tool_input stays under its cap.
    assert!(
        size <= MAX_TOOL_INPUT_BYTES,
        "tool_input of ~{size} bytes accepted"
    );
    // The event is what the parser says it is: checking it again, or sending it again
    // as the server would forward it to an http hook, is accepted.
    ev.check().expect("an accepted event passes its own check");
    let again = serde_json::to_vec(ev).expect("an accepted event serialises");
    let back = Event::parse(&again).unwrap_or_else(|e| {
        panic!("re-parsing an accepted event failed: {e}");
    });
    assert_eq!(back.event, ev.event);
    assert_eq!(back.event_id, ev.event_id);
    assert_eq!(back.tool_name, ev.tool_name);
    assert_eq!(back.depth, ev.depth);
    assert_eq!(back.turn_id, ev.turn_id);
}

/// Walks `tool_input` independently of the parser: nesting and list caps, and the
/// parser's size approximation (strings count their bytes plus quotes, keys plus three).
fn walk_caps(v: &Value, depth: usize, size: &mut usize) {
    assert!(
        depth <= MAX_TOOL_INPUT_DEPTH,
        "tool_input nests {depth} levels, past {MAX_TOOL_INPUT_DEPTH}"
    );
    *size += match v {
        Value::String(s) => s.len() + 2,
        Value::Number(_) => 8,
        _ => 4,
    };
    match v {
        Value::Array(a) => {
            assert!(a.len() as u64 <= MAX_LIST_LEN, "list of {} items", a.len());
            a.iter().for_each(|x| walk_caps(x, depth + 1, size));
        }
        Value::Object(o) => {
            assert!(o.len() as u64 <= MAX_LIST_LEN, "map of {} keys", o.len());
            for (k, x) in o {
                *size += k.len() + 3;
                walk_caps(x, depth + 1, size);
            }
        }
        _ => {}
    }
}
