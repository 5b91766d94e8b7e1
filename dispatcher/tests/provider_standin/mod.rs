//! A stand-in for the model PROVIDERS (OpenAI chat completions and the Anthropic
//! Messages API), speaking their real request and response wire formats, tool calls
//! included. It is not a model: it answers what the test scripts, and records every
//! request (path, headers, JSON body) so tests can assert what the dispatcher sent.
//!
//! Routes (one server for both; base URLs as the providers file gives them):
//! - OpenAI: `POST /v1/chat/completions` (baseUrl `http://ADDR/v1`). A decision is
//!   `choices[0].message.tool_calls[0] = {id, type: function, function: {name,
//!   arguments: "<JSON text>"}}`, `finish_reason: tool_calls`, `usage {prompt_tokens,
//!   completion_tokens, total_tokens}`. Errors: `{"error": {message, type, param, code}}`.
//! - Anthropic: `POST /v1/messages` (baseUrl `http://ADDR`). A decision is a `content[]`
//!   block `{type: tool_use, id, name, input}`, `stop_reason: tool_use`, `usage
//!   {input_tokens, output_tokens}`. Errors: `{"type": "error", "error": {type,
//!   message}}`: `rate_limit_error` (429, `retry-after`), `overloaded_error` (529),
//!   `api_error` (500).
//!
//! Replies are taken from a script queue, one per request; an empty queue answers
//! `decide allow`.

#![allow(dead_code)]

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use serde_json::{Value, json};

/// One scripted answer.
#[derive(Debug, Clone)]
pub enum Reply {
    /// A `decide` tool call with these arguments (an object).
    Decide(Value),
    /// A `decide` tool call whose arguments are this raw text (OpenAI) / this value
    /// parsed leniently (Anthropic: as a JSON string value when not JSON).
    DecideRaw(String),
    /// A text answer, no tool call.
    FreeText(String),
    /// A call of another tool.
    WrongTool(String),
    /// Two `decide` calls.
    TwoCalls,
    /// A message with no content and no tool call.
    Empty,
    /// An empty 200 body.
    EmptyBody,
    /// `500` in the provider's error shape.
    ServerError,
    /// `429` rate limit with `retry-after` seconds (as the provider sends it).
    RateLimited { retry_after_secs: u64 },
    /// `529` overloaded (Anthropic; OpenAI callers get 503 in its own shape).
    Overloaded,
    /// This status with an error body (e.g. 401 bad key).
    Status(u16),
    /// A 302 to elsewhere.
    Redirect,
    /// A 200 body of this many bytes.
    Huge(usize),
    /// The reply after a pause.
    Slow(Duration, Box<Reply>),
}

impl Reply {
    /// `decide` with `decision` and `reason`.
    pub fn decide(decision: &str, reason: &str) -> Reply {
        Reply::Decide(json!({"decision": decision, "reason": reason}))
    }
}

/// One request as received.
#[derive(Debug, Clone)]
pub struct Recorded {
    pub path: String,
    pub headers: HeaderMap,
    /// The JSON body (`Value::Null` when not JSON).
    pub body: Value,
    pub raw: Bytes,
}

impl Recorded {
    /// A header's value as text ("" when absent).
    pub fn header(&self, name: &str) -> String {
        self.headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_owned()
    }
}

#[derive(Default)]
struct Inner {
    script: VecDeque<Reply>,
    requests: Vec<Recorded>,
    /// Usage reported by decisions: (input, output).
    usage: (i64, i64),
    counter: u64,
}

/// The running stand-in.
#[derive(Clone)]
pub struct ProviderStandIn {
    pub addr: SocketAddr,
    inner: Arc<Mutex<Inner>>,
}

impl ProviderStandIn {
    /// Starts on a free loopback port; decisions report usage 100 in, 20 out.
    pub async fn start() -> ProviderStandIn {
        let inner = Arc::new(Mutex::new(Inner {
            usage: (100, 20),
            ..Inner::default()
        }));
        let app = Router::new()
            .route("/v1/chat/completions", post(openai))
            .route("/v1/messages", post(anthropic))
            .with_state(inner.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        ProviderStandIn { addr, inner }
    }

    /// The OpenAI-style base URL (`/chat/completions` is appended).
    pub fn openai_base(&self) -> String {
        format!("http://{}/v1", self.addr)
    }

    /// The Anthropic-style base URL (`/v1/messages` is appended).
    pub fn anthropic_base(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Queues replies, one per coming request.
    pub fn script(&self, replies: impl IntoIterator<Item = Reply>) {
        self.inner.lock().unwrap().script.extend(replies);
    }

    /// Usage reported by coming decisions.
    pub fn set_usage(&self, input: i64, output: i64) {
        self.inner.lock().unwrap().usage = (input, output);
    }

    /// Every request so far.
    pub fn requests(&self) -> Vec<Recorded> {
        self.inner.lock().unwrap().requests.clone()
    }

    /// The number of requests so far.
    pub fn count(&self) -> usize {
        self.inner.lock().unwrap().requests.len()
    }
}

type Shared = Arc<Mutex<Inner>>;

#[derive(Clone, Copy, PartialEq)]
enum Wire {
    OpenAi,
    Anthropic,
}

async fn openai(State(s): State<Shared>, headers: HeaderMap, body: Bytes) -> Response {
    answer(s, Wire::OpenAi, "/v1/chat/completions", headers, body).await
}

async fn anthropic(State(s): State<Shared>, headers: HeaderMap, body: Bytes) -> Response {
    answer(s, Wire::Anthropic, "/v1/messages", headers, body).await
}

async fn answer(s: Shared, wire: Wire, path: &str, headers: HeaderMap, raw: Bytes) -> Response {
    let body: Value = serde_json::from_slice(&raw).unwrap_or(Value::Null);
    let model = body.get("model").cloned().unwrap_or(Value::Null);
    let (mut reply, usage, n) = {
        let mut g = s.lock().unwrap();
        g.requests.push(Recorded {
            path: path.into(),
            headers,
            body,
            raw,
        });
        g.counter += 1;
        let reply = g
            .script
            .pop_front()
            .unwrap_or_else(|| Reply::decide("allow", "default stand-in answer"));
        (reply, g.usage, g.counter)
    };
    while let Reply::Slow(d, inner) = reply {
        tokio::time::sleep(d).await;
        reply = *inner;
    }
    render(wire, reply, &model, usage, n)
}

fn render(wire: Wire, reply: Reply, model: &Value, usage: (i64, i64), n: u64) -> Response {
    let tool_calls = |calls: Vec<(String, String)>| -> Response {
        match wire {
            Wire::OpenAi => {
                let calls: Vec<Value> = calls
                    .into_iter()
                    .enumerate()
                    .map(|(i, (name, args))| json!({"id": format!("call_{n}_{i}"), "type": "function", "function": {"name": name, "arguments": args}}))
                    .collect();
                openai_message(
                    json!({"role": "assistant", "content": null, "tool_calls": calls}),
                    "tool_calls",
                    model,
                    usage,
                    n,
                )
            }
            Wire::Anthropic => {
                let blocks: Vec<Value> = calls
                    .into_iter()
                    .enumerate()
                    .map(|(i, (name, args))| {
                        let input = serde_json::from_str::<Value>(&args).unwrap_or(Value::String(args));
                        json!({"type": "tool_use", "id": format!("toolu_{n}_{i}"), "name": name, "input": input})
                    })
                    .collect();
                anthropic_message(blocks, "tool_use", model, usage, n)
            }
        }
    };
    match reply {
        Reply::Decide(args) => tool_calls(vec![("decide".into(), args.to_string())]),
        Reply::DecideRaw(text) => tool_calls(vec![("decide".into(), text)]),
        Reply::WrongTool(name) => tool_calls(vec![(name, "{\"cmd\":\"ls\"}".into())]),
        Reply::TwoCalls => tool_calls(vec![
            (
                "decide".into(),
                json!({"decision": "allow", "reason": "a"}).to_string(),
            ),
            (
                "decide".into(),
                json!({"decision": "block", "reason": "b"}).to_string(),
            ),
        ]),
        Reply::FreeText(text) => match wire {
            Wire::OpenAi => openai_message(
                json!({"role": "assistant", "content": text}),
                "stop",
                model,
                usage,
                n,
            ),
            Wire::Anthropic => anthropic_message(
                vec![json!({"type": "text", "text": text})],
                "end_turn",
                model,
                usage,
                n,
            ),
        },
        Reply::Empty => match wire {
            Wire::OpenAi => openai_message(
                json!({"role": "assistant", "content": null}),
                "stop",
                model,
                usage,
                n,
            ),
            Wire::Anthropic => anthropic_message(vec![], "end_turn", model, usage, n),
        },
        Reply::EmptyBody => {
            (StatusCode::OK, [("content-type", "application/json")], "").into_response()
        }
        Reply::ServerError => error(
            wire,
            500,
            "server_error",
            "api_error",
            "The server had an error while processing your request.",
            None,
        ),
        Reply::RateLimited { retry_after_secs } => error(
            wire,
            429,
            "rate_limit_exceeded",
            "rate_limit_error",
            "Rate limit reached.",
            Some(retry_after_secs),
        ),
        Reply::Overloaded => match wire {
            Wire::Anthropic => error(wire, 529, "", "overloaded_error", "Overloaded", None),
            Wire::OpenAi => error(
                wire,
                503,
                "server_overloaded",
                "",
                "The engine is currently overloaded.",
                None,
            ),
        },
        Reply::Status(code) => error(
            wire,
            code,
            "invalid_api_key",
            "authentication_error",
            "invalid x-api-key",
            None,
        ),
        Reply::Redirect => (
            StatusCode::FOUND,
            [("location", "http://169.254.169.254/latest/meta-data/")],
            "",
        )
            .into_response(),
        Reply::Huge(len) => (
            StatusCode::OK,
            [("content-type", "application/json")],
            " ".repeat(len),
        )
            .into_response(),
        Reply::Slow(..) => unreachable!("unwrapped above"),
    }
}

fn openai_message(
    message: Value,
    finish: &str,
    model: &Value,
    usage: (i64, i64),
    n: u64,
) -> Response {
    axum::Json(json!({
        "id": format!("chatcmpl-standin-{n}"),
        "object": "chat.completion",
        "created": 1_767_225_600,
        "model": model,
        "choices": [{"index": 0, "message": message, "logprobs": null, "finish_reason": finish}],
        "usage": {"prompt_tokens": usage.0, "completion_tokens": usage.1, "total_tokens": usage.0 + usage.1}
    }))
    .into_response()
}

fn anthropic_message(
    content: Vec<Value>,
    stop: &str,
    model: &Value,
    usage: (i64, i64),
    n: u64,
) -> Response {
    axum::Json(json!({
        "id": format!("msg_standin_{n}"),
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": content,
        "stop_reason": stop,
        "stop_sequence": null,
        "usage": {"input_tokens": usage.0, "output_tokens": usage.1}
    }))
    .into_response()
}

fn error(
    wire: Wire,
    code: u16,
    openai_code: &str,
    anthropic_type: &str,
    message: &str,
    retry_after: Option<u64>,
) -> Response {
    let body = match wire {
        Wire::OpenAi => {
            json!({"error": {"message": message, "type": if code >= 500 { "server_error" } else { "requests" }, "param": null, "code": openai_code}})
        }
        Wire::Anthropic => {
            json!({"type": "error", "error": {"type": anthropic_type, "message": message}})
        }
    };
    let mut resp = (StatusCode::from_u16(code).unwrap(), axum::Json(body)).into_response();
    if let Some(s) = retry_after {
        resp.headers_mut()
            .insert("retry-after", s.to_string().parse().unwrap());
    }
    resp
}
