//! The prompt handler's reading of a provider's answer (CONTRACT §5 prompt.2):
//! [`response::parse`] for the OpenAI chat-completions and the Anthropic Messages wire
//! formats. Input: the whole file is the response body; it is read as both formats.
//!
//! Properties: no panic; a decision is only ever taken from a well-formed `decide` call,
//! checked by an oracle written here from the contract (exactly one tool call, named
//! `decide`, whose arguments are an object with `decision` exactly `"allow"`, `"block"`
//! or `"ask"`, a non-blank `reason`, and optional fields of the right types), and the
//! decision returned is the one in that call; reported usage is never negative.

use agenthooks_dispatcher::handlers::prompt::config::ProviderKind;
use agenthooks_dispatcher::handlers::prompt::response::{self, Decided};
use serde_json::Value;

/// The target body: `data` as an OpenAI and as an Anthropic answer.
pub fn run(data: &[u8]) {
    for kind in [ProviderKind::Openai, ProviderKind::Anthropic] {
        let (decided, usage) = response::parse(kind, data);
        if let Some(u) = usage {
            assert!(u.input >= 0 && u.output >= 0, "negative usage {u:?}");
            assert!(u.total() >= 0);
        }
        let expected = oracle(kind, data);
        match (&decided, &expected) {
            (Ok(d), Some(args)) => same_decision(d, args),
            (Ok(d), None) => panic!(
                "{} answer without one well-formed decide call gave a decision: {d:?}",
                kind.as_str()
            ),
            (Err(_), Some(args)) => panic!(
                "{} answer with a well-formed decide call {args} gave no decision: {decided:?}",
                kind.as_str()
            ),
            (Err(e), None) => assert!(!e.kind().is_empty()),
        }
    }
}

/// The arguments of the one well-formed `decide` call of the answer, if it has one.
fn oracle(kind: ProviderKind, data: &[u8]) -> Option<Value> {
    let v: Value = serde_json::from_slice(data).ok()?;
    let args = match kind {
        ProviderKind::Openai => {
            let calls = v
                .get("choices")?
                .get(0)?
                .get("message")?
                .get("tool_calls")?
                .as_array()?;
            let [call] = calls.as_slice() else {
                return None;
            };
            let function = call.get("function")?;
            if function.get("name")?.as_str()? != "decide" {
                return None;
            }
            match function.get("arguments")? {
                // The API sends the arguments as a JSON string; an object is read too.
                Value::String(s) => serde_json::from_str(s).ok()?,
                other => other.clone(),
            }
        }
        ProviderKind::Anthropic => {
            let blocks = v.get("content")?.as_array()?;
            let uses: Vec<&Value> = blocks
                .iter()
                .filter(|b| b.get("type").and_then(Value::as_str) == Some("tool_use"))
                .collect();
            let [call] = uses.as_slice() else { return None };
            if call.get("name")?.as_str()? != "decide" {
                return None;
            }
            call.get("input")?.clone()
        }
    };
    let obj = args.as_object()?;
    if !matches!(obj.get("decision")?.as_str()?, "allow" | "block" | "ask") {
        return None;
    }
    if obj.get("reason")?.as_str()?.trim().is_empty() {
        return None;
    }
    let typed =
        |key: &str, ok: fn(&Value) -> bool| obj.get(key).is_none_or(|x| x.is_null() || ok(x));
    if !(typed("injection_detected", Value::is_boolean)
        && typed("updated_input", Value::is_object)
        && typed("additional_context", Value::is_string))
    {
        return None;
    }
    Some(args)
}

/// `d` says what `args` say.
fn same_decision(d: &Decided, args: &Value) {
    assert_eq!(
        d.decision.as_str(),
        args["decision"].as_str().unwrap(),
        "decision of {args}"
    );
    let reason = args["reason"].as_str().unwrap().trim();
    assert!(
        !d.reason.is_empty() && reason.starts_with(&d.reason),
        "reason of {args}"
    );
    assert_eq!(d.injection_detected, args["injection_detected"] == true);
    let updated = args.get("updated_input").filter(|u| !u.is_null());
    assert_eq!(d.updated_input.as_ref(), updated, "updated_input of {args}");
    let context = args.get("additional_context").and_then(Value::as_str);
    assert_eq!(d.additional_context.is_some(), context.is_some());
    if let (Some(got), Some(sent)) = (&d.additional_context, context) {
        assert!(
            sent.starts_with(got.as_str()),
            "additional_context of {args}"
        );
    }
}
