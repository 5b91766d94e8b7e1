//! Reading the evaluator's answer (CONTRACT §5 prompt.2): the decision comes only from
//! the arguments of one `decide` tool call. Anything else is a [`ParseFailure`], which
//! the handler turns into `block` and a `security.hook.prompt_parse_error` log line.
//!
//! Wire shapes read:
//! - OpenAI chat completions: `choices[0].message.tool_calls[0].function {name,
//!   arguments}` (`arguments` a JSON string), `usage.prompt_tokens` and
//!   `usage.completion_tokens`.
//! - Anthropic Messages: `content[]` blocks of `type: tool_use` with `name` and `input`
//!   (an object), `usage.input_tokens` and `usage.output_tokens`.

use serde_json::Value;

use super::config::ProviderKind;
use super::request::DECIDE_TOOL;
use crate::decision::outcome::Outcome;
use crate::handlers::cut;

/// A valid `decide` call.
#[derive(Debug, Clone, PartialEq)]
pub struct Decided {
    /// `Allow`, `Block` or `Ask` (a person should decide).
    pub decision: Outcome,
    pub reason: String,
    /// `injection_detected`; `false` when absent.
    pub injection_detected: bool,
    /// `updated_input` (an object) when given; the chain honours it only from
    /// master-namespace hooks (CONTRACT §4.5).
    pub updated_input: Option<Value>,
    pub additional_context: Option<String>,
}

/// Tokens the provider reports for one call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Usage {
    pub input: i64,
    pub output: i64,
}

impl Usage {
    /// Input plus output: what the budget is charged.
    pub fn total(self) -> i64 {
        self.input.saturating_add(self.output)
    }
}

/// Why an answer holds no decision. [`ParseFailure::kind`] is the log and metrics label.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ParseFailure {
    #[error("the response body is not the provider's JSON: {0}")]
    NotJson(String),
    #[error("the response holds no message and no tool call")]
    Empty,
    #[error("the model answered in text instead of calling decide: {0:?}")]
    FreeText(String),
    #[error("the model called {0:?}, not decide")]
    WrongTool(String),
    #[error("the model made {0} tool calls; exactly one decide call is expected")]
    SeveralCalls(usize),
    #[error("decide arguments are not a JSON object: {0}")]
    BadArguments(String),
    #[error("decision must be \"allow\", \"block\" or \"ask\", got {0}")]
    BadDecision(String),
    #[error("decide has no reason")]
    MissingReason,
}

impl ParseFailure {
    /// `not_json`, `empty_response`, `free_text`, `wrong_tool`, `several_tool_calls`,
    /// `bad_arguments`, `bad_decision`, `missing_reason`.
    pub fn kind(&self) -> &'static str {
        match self {
            ParseFailure::NotJson(_) => "not_json",
            ParseFailure::Empty => "empty_response",
            ParseFailure::FreeText(_) => "free_text",
            ParseFailure::WrongTool(_) => "wrong_tool",
            ParseFailure::SeveralCalls(_) => "several_tool_calls",
            ParseFailure::BadArguments(_) => "bad_arguments",
            ParseFailure::BadDecision(_) => "bad_decision",
            ParseFailure::MissingReason => "missing_reason",
        }
    }
}

/// Reads a 2xx body of `kind`'s wire format: the decision (or why there is none) and
/// the usage when the provider reported it (even when the decision is unusable).
pub fn parse(kind: ProviderKind, body: &[u8]) -> (Result<Decided, ParseFailure>, Option<Usage>) {
    if body.iter().all(u8::is_ascii_whitespace) {
        return (Err(ParseFailure::Empty), None);
    }
    let v: Value = match serde_json::from_slice(body) {
        Ok(v) => v,
        Err(e) => return (Err(ParseFailure::NotJson(e.to_string())), None),
    };
    match kind {
        ProviderKind::Openai => (
            parse_openai(&v),
            usage(&v, "prompt_tokens", "completion_tokens"),
        ),
        ProviderKind::Anthropic => (
            parse_anthropic(&v),
            usage(&v, "input_tokens", "output_tokens"),
        ),
    }
}

/// The usage block, when it is usable: each field absent or a non-negative integer, and
/// at least one present. A field that is present but not such a number makes the whole
/// block unusable (`None`), so the caller charges the full reservation rather than
/// trusting half of it.
fn usage(v: &Value, input: &str, output: &str) -> Option<Usage> {
    let u = v.get("usage")?;
    let field = |k: &str| match u.get(k) {
        None => Ok(None),
        Some(x) => x.as_i64().filter(|n| *n >= 0).map(Some).ok_or(()),
    };
    match (field(input), field(output)) {
        (Ok(None), Ok(None)) => None,
        (Ok(i), Ok(o)) => Some(Usage {
            input: i.unwrap_or(0),
            output: o.unwrap_or(0),
        }),
        _ => None,
    }
}

fn parse_openai(v: &Value) -> Result<Decided, ParseFailure> {
    let Some(message) = v.pointer("/choices/0/message") else {
        return Err(ParseFailure::Empty);
    };
    let calls = message
        .get("tool_calls")
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default();
    match calls {
        [] => Err(no_call(message.get("content").and_then(Value::as_str))),
        [call] => {
            let name = call
                .pointer("/function/name")
                .and_then(Value::as_str)
                .unwrap_or("");
            if name != DECIDE_TOOL {
                return Err(ParseFailure::WrongTool(cut(name.to_owned())));
            }
            let args = match call.pointer("/function/arguments") {
                Some(Value::String(s)) => serde_json::from_str::<Value>(s)
                    .map_err(|e| ParseFailure::BadArguments(e.to_string()))?,
                Some(other) => other.clone(),
                None => return Err(ParseFailure::BadArguments("no arguments".into())),
            };
            decide_args(&args)
        }
        more => Err(ParseFailure::SeveralCalls(more.len())),
    }
}

fn parse_anthropic(v: &Value) -> Result<Decided, ParseFailure> {
    let blocks = v
        .get("content")
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default();
    let calls: Vec<&Value> = blocks
        .iter()
        .filter(|b| b.get("type").and_then(Value::as_str) == Some("tool_use"))
        .collect();
    match calls.as_slice() {
        [] => {
            let text: Vec<&str> = blocks
                .iter()
                .filter(|b| b.get("type").and_then(Value::as_str) == Some("text"))
                .filter_map(|b| b.get("text").and_then(Value::as_str))
                .collect();
            Err(no_call(Some(&text.join("\n"))))
        }
        [call] => {
            let name = call.get("name").and_then(Value::as_str).unwrap_or("");
            if name != DECIDE_TOOL {
                return Err(ParseFailure::WrongTool(cut(name.to_owned())));
            }
            decide_args(call.get("input").unwrap_or(&Value::Null))
        }
        more => Err(ParseFailure::SeveralCalls(more.len())),
    }
}

fn no_call(text: Option<&str>) -> ParseFailure {
    match text.map(str::trim).filter(|t| !t.is_empty()) {
        Some(t) => ParseFailure::FreeText(cut(t.to_owned())),
        None => ParseFailure::Empty,
    }
}

/// Checks `decide`'s arguments: an object; `decision` exactly `"allow"`, `"block"` or `"ask"`;
/// `reason` a non-empty string; `injection_detected` a boolean, `updated_input` an
/// object and `additional_context` a string when present (null is absent).
pub fn decide_args(args: &Value) -> Result<Decided, ParseFailure> {
    let Value::Object(obj) = args else {
        return Err(ParseFailure::BadArguments(format!(
            "expected an object, got {}",
            cut(args.to_string())
        )));
    };
    let decision = match obj.get("decision") {
        Some(Value::String(d)) if d == "allow" => Outcome::Allow,
        Some(Value::String(d)) if d == "block" => Outcome::Block,
        Some(Value::String(d)) if d == "ask" => Outcome::Ask,
        Some(other) => return Err(ParseFailure::BadDecision(cut(other.to_string()))),
        None => return Err(ParseFailure::BadDecision("nothing".into())),
    };
    let reason = match obj.get("reason") {
        Some(Value::String(r)) if !r.trim().is_empty() => cut(r.trim().to_owned()),
        _ => return Err(ParseFailure::MissingReason),
    };
    let injection_detected = match obj.get("injection_detected") {
        None | Some(Value::Null) => false,
        Some(Value::Bool(b)) => *b,
        Some(other) => {
            return Err(ParseFailure::BadArguments(format!(
                "injection_detected must be a boolean, got {}",
                cut(other.to_string())
            )));
        }
    };
    let updated_input = match obj.get("updated_input") {
        None | Some(Value::Null) => None,
        Some(v @ Value::Object(_)) => Some(v.clone()),
        Some(other) => {
            return Err(ParseFailure::BadArguments(format!(
                "updated_input must be an object, got {}",
                cut(other.to_string())
            )));
        }
    };
    let additional_context = match obj.get("additional_context") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) => Some(cut(s.clone())),
        Some(other) => {
            return Err(ParseFailure::BadArguments(format!(
                "additional_context must be a string, got {}",
                cut(other.to_string())
            )));
        }
    };
    Ok(Decided {
        decision,
        reason,
        injection_detected,
        updated_input,
        additional_context,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn openai(message: Value) -> Vec<u8> {
        serde_json::to_vec(&json!({"id": "c1", "object": "chat.completion", "choices": [{"index": 0, "message": message, "finish_reason": "tool_calls"}], "usage": {"prompt_tokens": 120, "completion_tokens": 30, "total_tokens": 150}})).unwrap()
    }
    fn openai_call(name: &str, args: &str) -> Vec<u8> {
        openai(
            json!({"role": "assistant", "content": null, "tool_calls": [{"id": "t1", "type": "function", "function": {"name": name, "arguments": args}}]}),
        )
    }
    fn anthropic(content: Value) -> Vec<u8> {
        serde_json::to_vec(&json!({"id": "m1", "type": "message", "role": "assistant", "content": content, "stop_reason": "tool_use", "usage": {"input_tokens": 200, "output_tokens": 40}})).unwrap()
    }

    #[test]
    fn openai_decide_call_is_read_with_usage() {
        let (d, u) = parse(
            ProviderKind::Openai,
            &openai_call(
                "decide",
                r#"{"decision":"block","reason":"deletes /","injection_detected":true,"updated_input":{"cmd":"ls"},"additional_context":"careful"}"#,
            ),
        );
        assert_eq!(
            d.unwrap(),
            Decided {
                decision: Outcome::Block,
                reason: "deletes /".into(),
                injection_detected: true,
                updated_input: Some(json!({"cmd": "ls"})),
                additional_context: Some("careful".into())
            }
        );
        assert_eq!(
            u,
            Some(Usage {
                input: 120,
                output: 30
            })
        );
    }

    #[test]
    fn anthropic_tool_use_is_read_with_usage() {
        let (d, u) = parse(
            ProviderKind::Anthropic,
            &anthropic(
                json!([{"type": "text", "text": "Let me decide."}, {"type": "tool_use", "id": "tu1", "name": "decide", "input": {"decision": "allow", "reason": "read only"}}]),
            ),
        );
        let d = d.unwrap();
        assert_eq!(d.decision, Outcome::Allow);
        assert_eq!(d.reason, "read only");
        assert!(!d.injection_detected);
        assert_eq!(u.unwrap().total(), 240);
    }

    #[test]
    fn every_unusable_answer_has_its_kind() {
        let cases: Vec<(ProviderKind, Vec<u8>, &str)> = vec![
            (ProviderKind::Openai, b"".to_vec(), "empty_response"),
            (ProviderKind::Openai, b"<html>".to_vec(), "not_json"),
            (
                ProviderKind::Openai,
                br#"{"choices":[]}"#.to_vec(),
                "empty_response",
            ),
            (
                ProviderKind::Openai,
                openai(json!({"role": "assistant", "content": "ALLOW"})),
                "free_text",
            ),
            (
                ProviderKind::Openai,
                openai(json!({"role": "assistant", "content": ""})),
                "empty_response",
            ),
            (
                ProviderKind::Openai,
                openai_call("run_shell", "{}"),
                "wrong_tool",
            ),
            (
                ProviderKind::Openai,
                openai_call("decide", "{decision: allow"),
                "bad_arguments",
            ),
            (
                ProviderKind::Openai,
                openai_call("decide", "[\"allow\"]"),
                "bad_arguments",
            ),
            (
                ProviderKind::Openai,
                openai_call("decide", r#"{"decision":"maybe","reason":"r"}"#),
                "bad_decision",
            ),
            (
                ProviderKind::Openai,
                openai_call("decide", r#"{"decision":"ALLOW","reason":"r"}"#),
                "bad_decision",
            ),
            (
                ProviderKind::Openai,
                openai_call("decide", r#"{"reason":"r"}"#),
                "bad_decision",
            ),
            (
                ProviderKind::Openai,
                openai_call("decide", r#"{"decision":"allow"}"#),
                "missing_reason",
            ),
            (
                ProviderKind::Openai,
                openai_call("decide", r#"{"decision":"allow","reason":"  "}"#),
                "missing_reason",
            ),
            (
                ProviderKind::Openai,
                openai_call(
                    "decide",
                    r#"{"decision":"allow","reason":"r","injection_detected":"no"}"#,
                ),
                "bad_arguments",
            ),
            (
                ProviderKind::Openai,
                openai_call(
                    "decide",
                    r#"{"decision":"allow","reason":"r","updated_input":"rm"}"#,
                ),
                "bad_arguments",
            ),
            (
                ProviderKind::Openai,
                openai(json!({"role": "assistant", "tool_calls": [
                {"id": "a", "type": "function", "function": {"name": "decide", "arguments": "{\"decision\":\"allow\",\"reason\":\"r\"}"}},
                {"id": "b", "type": "function", "function": {"name": "decide", "arguments": "{\"decision\":\"block\",\"reason\":\"r\"}"}}]})),
                "several_tool_calls",
            ),
            (
                ProviderKind::Anthropic,
                anthropic(json!([])),
                "empty_response",
            ),
            (
                ProviderKind::Anthropic,
                anthropic(json!([{"type": "text", "text": "{\"decision\":\"allow\"}"}])),
                "free_text",
            ),
            (
                ProviderKind::Anthropic,
                anthropic(
                    json!([{"type": "tool_use", "id": "x", "name": "allow_all", "input": {}}]),
                ),
                "wrong_tool",
            ),
            (
                ProviderKind::Anthropic,
                anthropic(
                    json!([{"type": "tool_use", "id": "x", "name": "decide", "input": "allow"}]),
                ),
                "bad_arguments",
            ),
        ];
        for (kind, body, want) in cases {
            let (d, _) = parse(kind, &body);
            assert_eq!(
                d.unwrap_err().kind(),
                want,
                "{}",
                String::from_utf8_lossy(&body)
            );
        }
    }

    #[test]
    fn usage_is_kept_when_the_decision_is_unusable() {
        let (d, u) = parse(
            ProviderKind::Openai,
            &openai(json!({"role": "assistant", "content": "yes"})),
        );
        assert!(d.is_err());
        assert_eq!(
            u,
            Some(Usage {
                input: 120,
                output: 30
            })
        );
    }
}
