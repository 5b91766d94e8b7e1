//! `ifExpr`: [`IfExpr::compile`] (bounds, names, functions, static cost) and
//! [`IfExpr::evaluate`] on an event the dispatch parser accepted (CONTRACT §2.4, §4.2).
//!
//! Input, as text lines: the expression; the tool name; the depth (decimal, else 0);
//! then `tool_input` as JSON (the rest of the file; `{}` when absent or unusable).
//!
//! Properties: no panic and no hang (libFuzzer's `-timeout=1` is the hang check); an
//! accepted expression is within [`MAX_EXPR_BYTES`] and its cost within [`MAX_COST`];
//! evaluation is deterministic. An accepted expression is evaluated twice: on the input
//! as given and on the input with every list and map grown towards the declared caps
//! ([`MAX_LIST_LEN`] entries, within the dispatch size cap), because the static cost
//! bound is a claim about the capped worst case.

use agenthooks_crds::expr::{Bindings, EvalScope, IfExpr, MAX_COST, MAX_EXPR_BYTES, MAX_LIST_LEN};
use agenthooks_dispatcher::event::{Event, MAX_TOOL_INPUT_BYTES};
use serde_json::{Map, Value, json};

/// The target body (see the module docs for the input format).
pub fn run(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    let mut lines = text.splitn(4, '\n');
    let source = lines.next().unwrap_or("");
    let tool_name = lines.next().unwrap_or("");
    let depth: i64 = lines
        .next()
        .and_then(|d| d.trim().parse().ok())
        .unwrap_or(0);
    let tool_input: Value = lines
        .next()
        .and_then(|j| serde_json::from_str(j).ok())
        .filter(Value::is_object)
        .unwrap_or_else(|| json!({}));

    let Ok(expr) = IfExpr::compile(source) else {
        return;
    };
    assert!(
        source.len() <= MAX_EXPR_BYTES,
        "an expression of {} bytes compiled",
        source.len()
    );
    assert!(
        expr.cost() <= MAX_COST,
        "cost {} over {MAX_COST} accepted",
        expr.cost()
    );

    evaluate(&expr, tool_name, &tool_input, depth);
    let grown = grow(&tool_input);
    if grown != tool_input {
        evaluate(&expr, tool_name, &grown, depth);
    }
}

/// Evaluates `expr` on the event the dispatch parser makes of these fields, as the
/// runner does; skips inputs the parser refuses (no hook would see them).
fn evaluate(expr: &IfExpr, tool_name: &str, tool_input: &Value, depth: i64) {
    let body = json!({
        "event": "pre_tool_use",
        "tool_name": tool_name,
        "tool_input": tool_input,
        "depth": depth,
    });
    let Ok(event) = Event::parse(body.to_string().as_bytes()) else {
        return;
    };
    let bindings = Bindings::new(event.tool().unwrap_or(""), &event.tool_input, event.depth);
    let mut scope = EvalScope::default();
    let first = expr.evaluate(&bindings, &mut scope);
    let second = expr.evaluate(&bindings, &mut scope);
    let fresh = expr.evaluate(&bindings, &mut EvalScope::default());
    assert_eq!(
        first, fresh,
        "a scope's cached values evaluate as fresh ones"
    );
    assert_eq!(first, second, "evaluation is deterministic");
}

/// `v` with every non-empty list cycled towards [`MAX_LIST_LEN`] items and every
/// non-empty map given extra keys (copies of its first value) towards that many, while
/// the copies fit in the dispatch size cap ([`MAX_TOOL_INPUT_BYTES`], counted as the
/// parser counts); halving the target length until the parser accepts the result.
fn grow(v: &Value) -> Value {
    let mut len = MAX_LIST_LEN as usize;
    loop {
        let mut budget = MAX_TOOL_INPUT_BYTES.saturating_sub(approx_size(v));
        let g = grow_to(v, len, &mut budget);
        let body = json!({"event": "pre_tool_use", "tool_input": g});
        if len <= 1 || Event::parse(body.to_string().as_bytes()).is_ok() {
            return g;
        }
        len /= 2;
    }
}

fn grow_to(v: &Value, len: usize, budget: &mut usize) -> Value {
    match v {
        Value::Array(a) if !a.is_empty() => {
            let mut out: Vec<Value> = a.iter().map(|x| grow_to(x, len, budget)).collect();
            for x in a.iter().cycle() {
                let cost = approx_size(x);
                if out.len() >= len || cost > *budget {
                    break;
                }
                *budget -= cost;
                out.push(x.clone());
            }
            Value::Array(out)
        }
        Value::Object(o) if !o.is_empty() => {
            let mut out: Map<String, Value> = o
                .iter()
                .map(|(k, x)| (k.clone(), grow_to(x, len, budget)))
                .collect();
            let first = o.values().next().cloned().unwrap_or(Value::Null);
            let mut i = 0;
            while out.len() < len {
                let key = format!("k{i}");
                let cost = approx_size(&first) + key.len() + 3;
                if cost > *budget {
                    break;
                }
                *budget -= cost;
                out.insert(key, first.clone());
                i += 1;
            }
            Value::Object(out)
        }
        other => other.clone(),
    }
}

/// The dispatch parser's size approximation of a JSON value.
fn approx_size(v: &Value) -> usize {
    match v {
        Value::String(s) => s.len() + 2,
        Value::Number(_) => 8,
        Value::Array(a) => 4 + a.iter().map(approx_size).sum::<usize>(),
        Value::Object(o) => {
            4 + o
                .iter()
                .map(|(k, x)| k.len() + 3 + approx_size(x))
                .sum::<usize>()
        }
        _ => 4,
    }
}
