//! Speaks the OpenAI Responses wire format (`POST /v1/responses`, SSE events). A stand-in
//! for Codex CLI's model provider (`wire_api = "responses"`).

use serde_json::{Value, json};

use super::{Conversation, Reply, Turn, next_id, text_of};

/// Reads the user text, model turns so far and tools offered out of a Responses request.
pub fn conversation(body: &Value) -> Conversation {
    let input = body["input"].as_array().cloned().unwrap_or_default();
    let user_text = input
        .iter()
        .filter(|i| i["role"] == "user")
        .map(|i| text_of(&i["content"]))
        .collect::<Vec<_>>()
        .join("\n");
    let answered = input
        .iter()
        .filter(|i| {
            matches!(
                i["type"].as_str(),
                Some("function_call" | "custom_tool_call" | "local_shell_call")
            ) || (i["type"] == "message" && i["role"] == "assistant")
        })
        .count();
    Conversation {
        user_text,
        answered,
        offers_tools: body["tools"].as_array().is_some_and(|t| !t.is_empty()),
    }
}

/// The SSE answer with `turn`: one output item (a `function_call`, or an assistant
/// `message`), then `response.completed`.
pub fn reply(turn: &Turn, _body: &Value) -> Reply {
    let rid = format!("resp_{}", next_id());
    let mut events = vec![json!({"type": "response.created",
        "response": {"id": rid, "object": "response", "status": "in_progress", "output": []}})];
    match turn {
        Turn::Tool {
            name,
            input,
            namespace,
        } => {
            let mut item = json!({"type": "function_call", "id": format!("fc_{}", next_id()),
                "call_id": format!("call_{}", next_id()), "name": name,
                "arguments": input.to_string(), "status": "completed"});
            if let Some(ns) = namespace {
                item["namespace"] = json!(ns);
            }
            let mut added = item.clone();
            added["arguments"] = json!("");
            added["status"] = json!("in_progress");
            events.push(
                json!({"type": "response.output_item.added", "output_index": 0, "item": added}),
            );
            events.push(
                json!({"type": "response.output_item.done", "output_index": 0, "item": item}),
            );
        }
        Turn::Text(text) => {
            let mid = format!("msg_{}", next_id());
            let msg = json!({"type": "message", "id": mid, "role": "assistant", "status": "completed",
                "content": [{"type": "output_text", "text": text, "annotations": []}]});
            let mut added = msg.clone();
            added["content"] = json!([]);
            added["status"] = json!("in_progress");
            events.push(
                json!({"type": "response.output_item.added", "output_index": 0, "item": added}),
            );
            events.push(
                json!({"type": "response.output_text.delta", "output_index": 0,
                "content_index": 0, "item_id": mid, "delta": text}),
            );
            events
                .push(json!({"type": "response.output_item.done", "output_index": 0, "item": msg}));
        }
    }
    events.push(json!({"type": "response.completed", "response": {"id": rid, "object": "response",
        "status": "completed", "usage": {"input_tokens": 10, "input_tokens_details": {"cached_tokens": 0},
        "output_tokens": 5, "output_tokens_details": {"reasoning_tokens": 0}, "total_tokens": 15}}}));
    Reply::Sse(
        events
            .into_iter()
            .map(|e| (e["type"].as_str().map(str::to_string), e))
            .collect(),
    )
}

/// The `function_call_output` / `custom_tool_call_output` items of a Responses request, as
/// text.
pub fn tool_results(body: &Value) -> Vec<String> {
    let Some(input) = body["input"].as_array() else {
        return Vec::new();
    };
    input
        .iter()
        .filter(|i| {
            matches!(
                i["type"].as_str(),
                Some("function_call_output" | "custom_tool_call_output")
            )
        })
        .map(|i| match &i["output"] {
            Value::String(s) => s.clone(),
            other => text_of(other),
        })
        .collect()
}
