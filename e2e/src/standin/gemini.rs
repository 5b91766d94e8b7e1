//! Speaks the Gemini API wire format (`POST /v1beta/models/<m>:streamGenerateContent?alt=sse`,
//! SSE `data:` lines without event names; `:generateContent`, one JSON answer). A stand-in
//! for Gemini CLI's model.

use serde_json::{Value, json};

use super::{Conversation, Reply, Turn, next_id};

/// Reads the user text, model turns so far and tools offered out of a Gemini request.
pub fn conversation(body: &Value) -> Conversation {
    let contents = body["contents"].as_array().cloned().unwrap_or_default();
    let user_text = contents
        .iter()
        .filter(|c| c["role"] == "user")
        .flat_map(|c| c["parts"].as_array().cloned().unwrap_or_default())
        .filter_map(|p| p["text"].as_str().map(str::to_string))
        .collect::<Vec<_>>()
        .join("\n");
    let offers_tools = body["tools"].as_array().is_some_and(|tools| {
        tools.iter().any(|t| {
            t["functionDeclarations"]
                .as_array()
                .is_some_and(|d| !d.is_empty())
        })
    });
    Conversation {
        user_text,
        answered: contents.iter().filter(|c| c["role"] == "model").count(),
        offers_tools,
    }
}

fn candidate(turn: &Turn) -> Value {
    let parts = match turn {
        Turn::Tool { name, input, .. } => json!([{"functionCall": {"name": name, "args": input}}]),
        Turn::Text(text) => json!([{"text": text}]),
    };
    json!({"candidates": [{"content": {"role": "model", "parts": parts}, "finishReason": "STOP", "index": 0}],
           "usageMetadata": {"promptTokenCount": 10, "candidatesTokenCount": 5, "totalTokenCount": 15},
           "modelVersion": "gemini-standin", "responseId": next_id()})
}

/// The SSE answer with `turn` (one chunk).
pub fn reply_stream(turn: &Turn, _body: &Value) -> Reply {
    Reply::Sse(vec![(None, candidate(turn))])
}

/// The JSON answer with `turn`.
pub fn reply_json(turn: &Turn, _body: &Value) -> Reply {
    Reply::Json(candidate(turn))
}

/// The `functionResponse` parts of a Gemini request, each as its JSON `response` text.
pub fn tool_results(body: &Value) -> Vec<String> {
    let Some(contents) = body["contents"].as_array() else {
        return Vec::new();
    };
    contents
        .iter()
        .filter_map(|c| c["parts"].as_array())
        .flatten()
        .filter_map(|p| p.get("functionResponse"))
        .map(|f| f["response"].to_string())
        .collect()
}
