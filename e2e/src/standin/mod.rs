//! Stand-ins of the model APIs that the agent runtimes call: scripted loopback servers
//! that speak the wire formats of the real APIs, never the real models.
//!
//! One [`StandIn`] serves three wire formats on one port, chosen by the request path:
//!
//! * [`anthropic`]: speaks the Anthropic Messages wire format (`POST /v1/messages`, SSE
//!   when `"stream": true`, else one JSON message) — Claude Code;
//! * [`openai_responses`]: speaks the OpenAI Responses wire format (`POST /v1/responses`,
//!   SSE) — Codex CLI;
//! * [`gemini`]: speaks the Gemini API wire format
//!   (`POST /v1beta/models/<m>:streamGenerateContent?alt=sse`, and `:generateContent`) —
//!   Gemini CLI.
//!
//! # Scripts
//!
//! A test gives a [`Script`]: lists of model [`Turn`]s (a tool call, or final text). Which
//! turn a request gets is computed from the request itself, so retries and side requests
//! of a runtime cannot shift the script:
//!
//! * the **lane**: a script has a main lane and any number of lanes keyed by a marker
//!   text. A request belongs to the last-defined lane whose marker occurs in the text the
//!   user side of its conversation wrote (the prompt of `claude -p`, or the prompt a parent
//!   agent gave a sub-agent; tool results are not user text); else to the main lane. So a
//!   sub-agent whose prompt says `LEVEL-2` gets lane `LEVEL-2`'s turns, however deep.
//! * the **turn**: the number of model turns already in the conversation (assistant
//!   messages, Responses output items, Gemini `model` contents). Past the end of its lane
//!   a conversation gets the final text [`DEFAULT_FINAL`].
//!
//! A request that offers no tools always gets text (runtimes make such side requests, e.g.
//! for titles). Every request is recorded ([`StandIn::requests`]) with the lane and turn it
//! got, so a test asserts what the model saw: tool results, additional context, refusals.
//!
//! The server closes the connection after each answer: without a length or chunking, the
//! end of an SSE stream is the close, and Claude Code waits forever for an SSE stream that
//! is neither closed nor framed.

pub mod anthropic;
pub mod gemini;
pub mod openai_responses;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Value, json};

/// The text a conversation gets once its lane has no turns left.
pub const DEFAULT_FINAL: &str = "All done.";

/// One scripted model turn.
#[derive(Clone, Debug, PartialEq)]
pub enum Turn {
    /// A call of tool `name` with JSON `input`; `namespace` is the OpenAI Responses
    /// namespace of a namespaced tool (Codex's `multi_agent_v1` tools), else `None`.
    Tool {
        /// The tool name as the model calls it (the wire name, e.g. `Bash`, `exec_command`).
        name: String,
        /// Its arguments.
        input: Value,
        /// Responses namespace, if the tool is namespaced.
        namespace: Option<String>,
    },
    /// A final answer in plain text.
    Text(String),
}

impl Turn {
    /// In a tool call's input, a string value equal to this is replaced by the first
    /// UUID in the conversation's last tool result: how a script waits for the sub-agent
    /// that Codex's `spawn_agent` answered with (`wait_agent {"targets": [LAST_RESULT_ID]}`).
    pub const LAST_RESULT_ID: &'static str = "$LAST_RESULT_ID";

    /// A call of tool `name` with `input`.
    pub fn tool(name: &str, input: Value) -> Turn {
        Turn::Tool {
            name: name.to_string(),
            input,
            namespace: None,
        }
    }

    /// A final text answer.
    pub fn text(text: &str) -> Turn {
        Turn::Text(text.to_string())
    }

    /// The same tool call in OpenAI Responses namespace `ns`.
    pub fn in_namespace(self, ns: &str) -> Turn {
        match self {
            Turn::Tool { name, input, .. } => Turn::Tool {
                name,
                input,
                namespace: Some(ns.to_string()),
            },
            text => text,
        }
    }
}

/// The turns of one conversation thread, picked by a marker (see the module docs).
#[derive(Clone, Debug)]
struct Lane {
    marker: Option<String>,
    turns: Vec<Turn>,
}

/// What a stand-in answers: a main lane and marker lanes of [`Turn`]s.
#[derive(Clone, Debug)]
pub struct Script {
    lanes: Vec<Lane>,
}

impl Script {
    /// A script whose main conversation gets `turns` in order.
    pub fn new(turns: Vec<Turn>) -> Script {
        Script {
            lanes: vec![Lane {
                marker: None,
                turns,
            }],
        }
    }

    /// Adds a lane: conversations whose user text contains `marker` get `turns` (later
    /// lanes win when several markers occur).
    pub fn lane(mut self, marker: &str, turns: Vec<Turn>) -> Script {
        self.lanes.push(Lane {
            marker: Some(marker.to_string()),
            turns,
        });
        self
    }

    /// The lane of a conversation whose user side wrote `user_text`.
    fn pick(&self, user_text: &str) -> &Lane {
        self.lanes
            .iter()
            .rev()
            .find(|l| l.marker.as_deref().is_some_and(|m| user_text.contains(m)))
            .unwrap_or(&self.lanes[0])
    }
}

/// What a wire format reads out of a request to pick its turn.
#[derive(Debug, Default)]
pub struct Conversation {
    /// The text of the user side (prompts; not tool results), joined by newlines.
    pub user_text: String,
    /// Model turns already in the conversation.
    pub answered: usize,
    /// Whether the request offers the model any tool.
    pub offers_tools: bool,
}

/// One request the stand-in answered.
#[derive(Clone, Debug)]
pub struct Recorded {
    /// Path and query, e.g. `/v1/messages?beta=true`.
    pub path: String,
    /// The JSON body (`Null` for a GET or a body that is not JSON).
    pub body: Value,
    /// The lane's marker (`None`: main lane).
    pub lane: Option<String>,
    /// The index of the turn it was answered with (model turns already in it).
    pub turn: usize,
    /// What it was answered with (`None`: not a model request).
    pub answer: Option<Turn>,
}

impl Recorded {
    /// The tool results this request showed the model, as text, in any wire format:
    /// Anthropic `tool_result` blocks, Responses `function_call_output` items, Gemini
    /// `functionResponse` parts (JSON-encoded).
    pub fn tool_results(&self) -> Vec<String> {
        tool_results_in(&self.body)
    }

    /// The whole body as compact JSON text, for `contains` assertions.
    pub fn text(&self) -> String {
        self.body.to_string()
    }
}

/// The tool results in a request body of any of the three wire formats.
fn tool_results_in(body: &Value) -> Vec<String> {
    let mut out = anthropic::tool_results(body);
    out.extend(openai_responses::tool_results(body));
    out.extend(gemini::tool_results(body));
    out
}

/// A running stand-in model server on 127.0.0.1 (stops when dropped).
pub struct StandIn {
    url: String,
    script: Arc<Mutex<Script>>,
    requests: Arc<Mutex<Vec<Recorded>>>,
    stop: Arc<AtomicBool>,
}

impl StandIn {
    /// Starts a stand-in serving `script` on a free loopback port.
    pub fn start(script: Script) -> StandIn {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind stand-in");
        let url = format!("http://{}", listener.local_addr().unwrap());
        let script = Arc::new(Mutex::new(script));
        let requests = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let (s, r, st) = (script.clone(), requests.clone(), stop.clone());
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                if st.load(Ordering::SeqCst) {
                    break;
                }
                let Ok(conn) = conn else { continue };
                let (s, r) = (s.clone(), r.clone());
                std::thread::spawn(move || {
                    let _ = serve(conn, &s, &r);
                });
            }
        });
        StandIn {
            url,
            script,
            requests,
            stop,
        }
    }

    /// `http://127.0.0.1:<port>` (no trailing slash).
    pub fn url(&self) -> &str {
        &self.url
    }

    /// Replaces the script (requests already answered stay recorded).
    pub fn set_script(&self, script: Script) {
        *self.script.lock().unwrap() = script;
    }

    /// Every request answered so far, in order.
    pub fn requests(&self) -> Vec<Recorded> {
        self.requests.lock().unwrap().clone()
    }

    /// The model requests (those answered with a turn) so far.
    pub fn model_requests(&self) -> Vec<Recorded> {
        self.requests()
            .into_iter()
            .filter(|r| r.answer.is_some())
            .collect()
    }

    /// Every distinct tool result the model was shown so far (see
    /// [`Recorded::tool_results`]), in order of first appearance.
    pub fn tool_results(&self) -> Vec<String> {
        let mut seen: Vec<String> = Vec::new();
        for r in self.requests() {
            for t in r.tool_results() {
                if !seen.contains(&t) {
                    seen.push(t);
                }
            }
        }
        seen
    }
}

impl Drop for StandIn {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        // Wakes the accept loop so it sees the flag.
        let _ = TcpStream::connect_timeout(
            &self.url["http://".len()..].parse().unwrap(),
            Duration::from_millis(200),
        );
    }
}

/// A wire format: what it reads out of a request, and how it writes a turn.
type WireFormat = (fn(&Value) -> Conversation, fn(&Turn, &Value) -> Reply);

/// A unique id suffix for message, call and response ids.
pub(crate) fn next_id() -> String {
    static N: AtomicU64 = AtomicU64::new(1);
    format!(
        "{:08x}{:012x}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    )
}

/// An answer a wire format writes back.
pub enum Reply {
    /// 200 with a JSON body.
    Json(Value),
    /// 200 `text/event-stream`: each `(event name, data)`; `None` names no event line.
    Sse(Vec<(Option<String>, Value)>),
}

/// Reads one request, answers it, closes the connection.
fn serve(
    conn: TcpStream,
    script: &Mutex<Script>,
    requests: &Mutex<Vec<Recorded>>,
) -> std::io::Result<()> {
    conn.set_read_timeout(Some(Duration::from_secs(30)))?;
    let mut reader = BufReader::new(conn.try_clone()?);
    let mut line = String::new();
    reader.read_line(&mut line)?;
    let mut parts = line.split_whitespace();
    let method = parts.next().unwrap_or("").to_string();
    let path = parts.next().unwrap_or("/").to_string();
    let mut length = 0usize;
    let mut chunked = false;
    loop {
        let mut h = String::new();
        if reader.read_line(&mut h)? == 0 || h == "\r\n" || h == "\n" {
            break;
        }
        let lower = h.to_ascii_lowercase();
        if let Some(v) = lower.strip_prefix("content-length:") {
            length = v.trim().parse().unwrap_or(0);
        } else if lower.starts_with("transfer-encoding:") && lower.contains("chunked") {
            chunked = true;
        }
    }
    let raw = if chunked {
        read_chunked(&mut reader)?
    } else {
        let mut buf = vec![0; length];
        reader.read_exact(&mut buf)?;
        buf
    };
    let body: Value = serde_json::from_slice(&raw).unwrap_or(Value::Null);
    let route = path.split('?').next().unwrap_or("");

    let (reply, lane, turn, answer) = if method != "POST" {
        (
            Reply::Json(json!({"data": [], "models": []})),
            None,
            0,
            None,
        )
    } else if route.ends_with("/count_tokens") {
        (Reply::Json(json!({"input_tokens": 10})), None, 0, None)
    } else if route.ends_with(":countTokens") {
        (Reply::Json(json!({"totalTokens": 10})), None, 0, None)
    } else {
        let format: Option<WireFormat> = if route.ends_with("/messages") {
            Some((anthropic::conversation, anthropic::reply))
        } else if route.ends_with("/responses") {
            Some((openai_responses::conversation, openai_responses::reply))
        } else if route.contains(":streamGenerateContent") {
            Some((gemini::conversation, gemini::reply_stream))
        } else if route.contains(":generateContent") {
            Some((gemini::conversation, gemini::reply_json))
        } else {
            None
        };
        match format {
            None => (Reply::Json(json!({})), None, 0, None),
            Some((read, write)) => {
                let conv = read(&body);
                let (lane, turn) = {
                    let script = script.lock().unwrap();
                    let lane = script.pick(&conv.user_text);
                    let turn = lane
                        .turns
                        .get(conv.answered)
                        .cloned()
                        .unwrap_or_else(|| Turn::text(DEFAULT_FINAL));
                    (lane.marker.clone(), turn)
                };
                let turn = match turn {
                    Turn::Tool { .. } if !conv.offers_tools => Turn::text(DEFAULT_FINAL),
                    Turn::Tool {
                        name,
                        mut input,
                        namespace,
                    } => {
                        let id = tool_results_in(&body)
                            .last()
                            .and_then(|r| first_uuid(r))
                            .unwrap_or_default();
                        substitute(&mut input, Turn::LAST_RESULT_ID, &id);
                        Turn::Tool {
                            name,
                            input,
                            namespace,
                        }
                    }
                    t => t,
                };
                (write(&turn, &body), lane, conv.answered, Some(turn))
            }
        }
    };
    requests.lock().unwrap().push(Recorded {
        path,
        body,
        lane,
        turn,
        answer,
    });
    let mut conn = conn;
    match reply {
        Reply::Json(v) => {
            let data = v.to_string();
            write!(
                conn,
                "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{data}",
                data.len()
            )?;
        }
        Reply::Sse(events) => {
            // No length and no chunking: the end of the stream is the close.
            write!(
                conn,
                "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\nConnection: close\r\n\r\n"
            )?;
            for (name, data) in events {
                if let Some(n) = name {
                    writeln!(conn, "event: {n}")?;
                }
                write!(conn, "data: {data}\n\n")?;
            }
        }
    }
    conn.flush()?;
    conn.shutdown(std::net::Shutdown::Both)
}

fn read_chunked(reader: &mut impl BufRead) -> std::io::Result<Vec<u8>> {
    let mut out = Vec::new();
    loop {
        let mut size = String::new();
        reader.read_line(&mut size)?;
        let n =
            usize::from_str_radix(size.trim().split(';').next().unwrap_or("0"), 16).unwrap_or(0);
        if n == 0 {
            let mut end = String::new();
            let _ = reader.read_line(&mut end);
            return Ok(out);
        }
        let mut chunk = vec![0; n + 2];
        reader.read_exact(&mut chunk)?;
        out.extend_from_slice(&chunk[..n]);
    }
}

/// The first UUID (8-4-4-4-12 hex digits) in `text`.
fn first_uuid(text: &str) -> Option<String> {
    let b = text.as_bytes();
    (0..b.len().saturating_sub(35)).find_map(|i| {
        let cand = &text.get(i..i + 36)?;
        let ok = cand.char_indices().all(|(j, c)| match j {
            8 | 13 | 18 | 23 => c == '-',
            _ => c.is_ascii_hexdigit(),
        });
        ok.then(|| cand.to_string())
    })
}

/// Replaces every string value equal to `from` in `v` by `to`.
fn substitute(v: &mut Value, from: &str, to: &str) {
    match v {
        Value::String(s) if s == from => *s = to.to_string(),
        Value::Array(items) => items.iter_mut().for_each(|i| substitute(i, from, to)),
        Value::Object(map) => map.values_mut().for_each(|i| substitute(i, from, to)),
        _ => {}
    }
}

/// Text of a content value that is a string or a list of `{"text": …}` parts.
pub(crate) fn text_of(content: &Value) -> String {
    match content {
        Value::String(s) => s.clone(),
        Value::Array(parts) => parts
            .iter()
            .filter_map(|p| p.get("text").and_then(Value::as_str))
            .collect::<Vec<_>>()
            .join("\n"),
        _ => String::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// POSTs `body` to `path` of `s` over a raw HTTP/1.1 connection; returns the body.
    fn post(s: &StandIn, path: &str, body: &Value) -> String {
        let mut conn = TcpStream::connect(&s.url()["http://".len()..]).unwrap();
        let data = body.to_string();
        write!(
            conn,
            "POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{data}",
            data.len()
        )
        .unwrap();
        let mut out = String::new();
        conn.read_to_string(&mut out).unwrap();
        out.split_once("\r\n\r\n").unwrap().1.to_string()
    }

    fn sse_data(text: &str) -> Vec<Value> {
        text.lines()
            .filter_map(|l| l.strip_prefix("data: "))
            .map(|d| serde_json::from_str(d).unwrap())
            .collect()
    }

    #[test]
    fn anthropic_turns_follow_lanes_and_answered_turns() {
        let s = StandIn::start(
            Script::new(vec![
                Turn::tool("Bash", json!({"command": "echo main"})),
                Turn::text("main done"),
            ])
            .lane(
                "LEVEL-1:",
                vec![Turn::tool("Bash", json!({"command": "echo sub"}))],
            ),
        );
        let tools = json!([{"name": "Bash"}]);
        // Main lane, nothing answered yet: the tool call, as SSE.
        let first = post(
            &s,
            "/v1/messages?beta=true",
            &json!({"stream": true, "tools": tools,
                    "messages": [{"role": "user", "content": "go"}]}),
        );
        let events = sse_data(&first);
        assert_eq!(events[1]["content_block"]["name"], "Bash");
        assert_eq!(
            events[2]["delta"]["partial_json"],
            json!({"command": "echo main"}).to_string()
        );
        assert_eq!(events[4]["delta"]["stop_reason"], "tool_use");
        // One model turn answered, with its result: the text, as JSON (no stream).
        let second = post(
            &s,
            "/v1/messages",
            &json!({"tools": tools, "messages": [
                {"role": "user", "content": "go"},
                {"role": "assistant", "content": [{"type": "tool_use", "id": "t", "name": "Bash", "input": {}}]},
                {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t", "content": "LEVEL-1: not user text"}]}]}),
        );
        let msg: Value = serde_json::from_str(&second).unwrap();
        assert_eq!(msg["content"][0]["text"], "main done");
        // A sub-agent whose prompt carries the marker gets its lane.
        let sub = post(
            &s,
            "/v1/messages",
            &json!({"tools": tools, "messages": [{"role": "user", "content": [
                {"type": "text", "text": "LEVEL-1: do it"}]}]}),
        );
        let msg: Value = serde_json::from_str(&sub).unwrap();
        assert_eq!(msg["content"][0]["input"]["command"], "echo sub");
        // No tools offered: text, whatever the lane says.
        let side = post(
            &s,
            "/v1/messages",
            &json!({"messages": [{"role": "user", "content": "title?"}]}),
        );
        let msg: Value = serde_json::from_str(&side).unwrap();
        assert_eq!(msg["content"][0]["text"], DEFAULT_FINAL);
        let recorded = s.requests();
        assert_eq!(
            recorded
                .iter()
                .map(|r| (r.lane.clone(), r.turn))
                .collect::<Vec<_>>(),
            vec![
                (None, 0),
                (None, 1),
                (Some("LEVEL-1:".to_string()), 0),
                (None, 0)
            ]
        );
        assert_eq!(s.tool_results(), vec!["LEVEL-1: not user text".to_string()]);
    }

    #[test]
    fn responses_and_gemini_formats() {
        let s = StandIn::start(Script::new(vec![
            Turn::tool("wait_agent", json!({"targets": [Turn::LAST_RESULT_ID]}))
                .in_namespace("multi_agent_v1"),
        ]));
        let out = post(
            &s,
            "/v1/responses",
            &json!({"tools": [{"type": "function", "name": "exec_command"}], "input": [
                {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "go"}]},
                {"type": "function_call_output", "call_id": "c",
                 "output": "{\"agent_id\":\"01a23c0a-a685-74d1-b106-e6da8df5fc7a\"}"}]}),
        );
        let events = sse_data(&out);
        let item = &events[2]["item"];
        assert_eq!(
            (
                item["type"].as_str(),
                item["name"].as_str(),
                item["namespace"].as_str()
            ),
            (
                Some("function_call"),
                Some("wait_agent"),
                Some("multi_agent_v1")
            )
        );
        let args: Value = serde_json::from_str(item["arguments"].as_str().unwrap()).unwrap();
        assert_eq!(args["targets"][0], "01a23c0a-a685-74d1-b106-e6da8df5fc7a");
        assert_eq!(events.last().unwrap()["type"], "response.completed");

        let out = post(
            &s,
            "/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse",
            &json!({"tools": [{"functionDeclarations": [{"name": "run_shell_command"}]}],
                    "contents": [{"role": "user", "parts": [{"text": "go"}]},
                                 {"role": "model", "parts": [{"functionCall": {"name": "x", "args": {}}}]},
                                 {"role": "user", "parts": [{"functionResponse": {"name": "x", "response": {"output": "ok"}}}]}]}),
        );
        let chunk = &sse_data(&out)[0];
        assert_eq!(
            chunk["candidates"][0]["content"]["parts"][0]["text"],
            DEFAULT_FINAL
        );
        assert!(
            s.tool_results()
                .contains(&json!({"output": "ok"}).to_string())
        );
    }
}
