//! Speaks the Anthropic Messages wire format (`POST /v1/messages`): SSE events when the
//! request says `"stream": true`, else one JSON message. A stand-in for Claude Code's model.

use serde_json::{Value, json};

use super::{Conversation, Reply, Turn, next_id, text_of};

/// Reads the user text, model turns so far and tools offered out of a Messages request.
pub fn conversation(body: &Value) -> Conversation {
    let messages = body["messages"].as_array().cloned().unwrap_or_default();
    let user_text = messages
        .iter()
        .filter(|m| m["role"] == "user")
        .map(|m| match &m["content"] {
            // Only text blocks: a tool_result is not something the user side wrote.
            Value::Array(blocks) => text_of(&Value::Array(
                blocks
                    .iter()
                    .filter(|b| b["type"] == "text")
                    .cloned()
                    .collect(),
            )),
            other => text_of(other),
        })
        .collect::<Vec<_>>()
        .join("\n");
    Conversation {
        user_text,
        answered: messages.iter().filter(|m| m["role"] == "assistant").count(),
        offers_tools: body["tools"].as_array().is_some_and(|t| !t.is_empty()),
    }
}

/// The answer with `turn`: SSE events or one JSON message, as the request asked.
pub fn reply(turn: &Turn, body: &Value) -> Reply {
    let id = format!("msg_{}", next_id());
    let model = body["model"]
        .as_str()
        .unwrap_or("claude-standin")
        .to_string();
    let (block, start_block, delta, stop) = match turn {
        Turn::Tool { name, input, .. } => {
            let tool_id = format!("toolu_{}", next_id());
            (
                json!({"type": "tool_use", "id": tool_id, "name": name, "input": input}),
                json!({"type": "tool_use", "id": tool_id, "name": name, "input": {}}),
                json!({"type": "input_json_delta", "partial_json": input.to_string()}),
                "tool_use",
            )
        }
        Turn::Text(text) => (
            json!({"type": "text", "text": text}),
            json!({"type": "text", "text": ""}),
            json!({"type": "text_delta", "text": text}),
            "end_turn",
        ),
    };
    let usage = json!({"input_tokens": 10, "output_tokens": 5,
                       "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0});
    if body["stream"] != true {
        return Reply::Json(json!({
            "id": id, "type": "message", "role": "assistant", "model": model,
            "content": [block], "stop_reason": stop, "stop_sequence": null, "usage": usage,
        }));
    }
    let mut start_usage = usage.clone();
    start_usage["output_tokens"] = json!(1);
    let events = [
        json!({"type": "message_start", "message": {"id": id, "type": "message", "role": "assistant",
               "model": model, "content": [], "stop_reason": null, "stop_sequence": null,
               "usage": start_usage}}),
        json!({"type": "content_block_start", "index": 0, "content_block": start_block}),
        json!({"type": "content_block_delta", "index": 0, "delta": delta}),
        json!({"type": "content_block_stop", "index": 0}),
        json!({"type": "message_delta", "delta": {"stop_reason": stop, "stop_sequence": null},
               "usage": {"output_tokens": 5}}),
        json!({"type": "message_stop"}),
    ];
    Reply::Sse(
        events
            .into_iter()
            .map(|e| (e["type"].as_str().map(str::to_string), e))
            .collect(),
    )
}

/// The `tool_result` blocks of a Messages request, as text.
pub fn tool_results(body: &Value) -> Vec<String> {
    let Some(messages) = body["messages"].as_array() else {
        return Vec::new();
    };
    messages
        .iter()
        .filter_map(|m| m["content"].as_array())
        .flatten()
        .filter(|b| b["type"] == "tool_result")
        .map(|b| text_of(&b["content"]))
        .collect()
}
