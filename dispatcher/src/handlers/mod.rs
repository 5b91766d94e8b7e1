//! Hook handlers: the code that turns one event into one hook outcome.
//!
//! Each handler owns its timeout (so it can clean up: kill a process group, drop a
//! connection) and reports a [`HandlerResult`]. The chain (`crate::chain`) turns outcomes
//! into the event's decision; handlers never see other hooks.
//!
//! Rules: CONTRACT.md §5; seed "Handler reference". Handlers: [`command`], [`http`]
//! (with its SSRF guard, [`ssrf`]) and [`prompt`] (a model decides).

pub mod command;
pub mod http;
pub mod prompt;
pub mod ssrf;

pub use crate::decision::outcome::{
    ErrorKind, HandlerMetadata, HandlerResult, MAX_OUTPUT_BYTES, MAX_REASON_BYTES, Outcome, cut,
};

/// A hook's answer (an http hook's 2xx body, a command hook's stdout) as the JSON object
/// it holds: `Ok(None)` for an answer that is no JSON object — empty, plain text, or
/// other JSON (CONTRACT §5: it allows) — and the run's error (`bad_decision`) for one that
/// starts as an object and does not parse: a cut or malformed answer is a failed one,
/// which a blocking event must not take as silence (`{"decision": "block", "reason": "no`
/// was an allow).
pub fn answer_object(
    answer: &[u8],
) -> Result<Option<serde_json::Map<String, serde_json::Value>>, Box<HandlerResult>> {
    // A UTF-8 byte order mark (Windows tools write one) is not part of the answer.
    let answer = answer.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(answer);
    let starts_as_object = answer
        .iter()
        .find(|b| !b.is_ascii_whitespace())
        .is_some_and(|b| *b == b'{');
    match serde_json::from_slice::<serde_json::Value>(answer) {
        Ok(serde_json::Value::Object(obj)) => Ok(Some(obj)),
        Err(e) if starts_as_object => Err(Box::new(HandlerResult::error(
            ErrorKind::BadDecision,
            format!("the answer starts as a JSON object and is not one: {e}"),
        ))),
        _ => Ok(None),
    }
}

/// A hook answer's output rewrite: `updatedToolOutput`, else Claude Code's older
/// `updatedMCPToolOutput` (read too, as docs/decisions.md says); `null` is none.
pub fn output_rewrite(
    obj: &serde_json::Map<String, serde_json::Value>,
) -> Option<serde_json::Value> {
    ["updatedToolOutput", "updatedMCPToolOutput"]
        .iter()
        .find_map(|k| obj.get(*k).filter(|v| !v.is_null()))
        .cloned()
}

#[cfg(test)]
mod answer_tests {
    use super::*;

    #[test]
    fn a_broken_object_is_an_error_and_anything_else_not_an_object_is_none() {
        assert!(
            answer_object(br#" {"decision": "block"} "#)
                .unwrap()
                .is_some()
        );
        assert!(
            answer_object(b"\xEF\xBB\xBF{\"decision\": \"block\"}")
                .unwrap()
                .is_some()
        );
        for silent in [&b""[..], b"OK", b"null", b"[]", b"\"block\"", b"  \n"] {
            assert_eq!(answer_object(silent).unwrap(), None, "{silent:?}");
        }
        let obj = |v: serde_json::Value| v.as_object().unwrap().clone();
        assert_eq!(
            output_rewrite(&obj(serde_json::json!({"updatedMCPToolOutput": "r"}))),
            Some(serde_json::json!("r"))
        );
        assert_eq!(
            output_rewrite(&obj(
                serde_json::json!({"updatedToolOutput": "a", "updatedMCPToolOutput": "b"})
            )),
            Some(serde_json::json!("a"))
        );
        assert_eq!(
            output_rewrite(&obj(serde_json::json!({"updatedToolOutput": null}))),
            None
        );
        for broken in [&br#"{"decision":"block","reason":"no"#[..], b"{", b" {x}"] {
            let e = answer_object(broken).unwrap_err();
            assert_eq!(
                (e.outcome, e.error_kind),
                (Outcome::Error, Some(ErrorKind::BadDecision)),
                "{broken:?}"
            );
        }
    }
}
