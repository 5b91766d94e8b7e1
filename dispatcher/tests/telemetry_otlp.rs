//! Spans of the `agenthooks-dispatcher` binary over OTLP/HTTP (CONTRACT §8.1).
//!
//! The collector is a local **OTLP/HTTP receiver** started here: `POST /v1/traces` with
//! the real wire format, a protobuf `ExportTraceServiceRequest` decoded with
//! `opentelemetry-proto` (or its JSON mapping under `http/json`), answered with an
//! `ExportTraceServiceResponse`. The dispatcher runs standalone on a hooks file with an
//! http hook (served here, allowed by `--http-allow-cidr`) and a command hook. The
//! audit rows of the traced runs carry the caller's trace id (`GET /v1/executions`).

mod api_harness;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use api_harness::{Proc, command, serve};
use axum::body::Bytes;
use axum::http::{HeaderMap, StatusCode, header};
use axum::routing::post;
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::any_value;
use opentelemetry_proto::tonic::trace::v1::Span;
use prost::Message;
use serde_json::{Value, json};

/// Admin token of the dispatchers started here (history reads need it).
const ADMIN_TOKEN: &str = "telemetry-test-admin-token-0123456789";

const TRACE_ID: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const PARENT_SPAN_ID: &str = "00f067aa0ba902b7";

/// What the receiver got: one entry per export request.
#[derive(Default)]
struct Received {
    /// Decoded protobuf requests.
    proto: Vec<ExportTraceServiceRequest>,
    /// `http/json` requests, as JSON.
    json: Vec<Value>,
    /// Content types seen.
    content_types: Vec<String>,
}

/// A local OTLP/HTTP trace receiver (`POST /v1/traces`), plus `POST /hook` answering
/// an http hook with `{"decision": "allow"}`.
struct Receiver {
    url: String,
    got: Arc<Mutex<Received>>,
}

impl Receiver {
    async fn start() -> Receiver {
        let got = Arc::new(Mutex::new(Received::default()));
        let state = Arc::clone(&got);
        let app = axum::Router::new()
            .route(
                "/v1/traces",
                post(move |headers: HeaderMap, body: Bytes| {
                    let state = Arc::clone(&state);
                    async move { traces(state, headers, body) }
                }),
            )
            .route(
                "/hook",
                post(|| async { axum::Json(json!({"decision": "allow"})) }),
            );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        Receiver { url, got }
    }

    fn spans(&self) -> Vec<(Vec<(String, String)>, Span)> {
        let got = self.got.lock().unwrap();
        got.proto
            .iter()
            .flat_map(|r| &r.resource_spans)
            .flat_map(|rs| {
                let resource: Vec<(String, String)> = rs
                    .resource
                    .iter()
                    .flat_map(|r| &r.attributes)
                    .map(|kv| (kv.key.clone(), text(kv.value.as_ref())))
                    .collect();
                rs.scope_spans
                    .iter()
                    .flat_map(|ss| &ss.spans)
                    .map(move |s| (resource.clone(), s.clone()))
            })
            .collect()
    }

    fn requests(&self) -> usize {
        let got = self.got.lock().unwrap();
        got.proto.len() + got.json.len()
    }

    /// Waits up to 10 s for `n` spans.
    async fn wait_spans(&self, n: usize) -> Vec<(Vec<(String, String)>, Span)> {
        for _ in 0..400 {
            let spans = self.spans();
            if spans.len() >= n {
                return spans;
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
        panic!("fewer than {n} spans within 10 s: {:?}", self.spans());
    }
}

fn traces(
    state: Arc<Mutex<Received>>,
    headers: HeaderMap,
    body: Bytes,
) -> (StatusCode, [(header::HeaderName, &'static str); 1], Vec<u8>) {
    let ct = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_string();
    let mut got = state.lock().unwrap();
    got.content_types.push(ct.clone());
    if ct == "application/json" {
        match serde_json::from_slice(&body) {
            Ok(v) => got.json.push(v),
            Err(_) => {
                return (
                    StatusCode::BAD_REQUEST,
                    [(header::CONTENT_TYPE, "text/plain")],
                    vec![],
                );
            }
        }
        return (
            StatusCode::OK,
            [(header::CONTENT_TYPE, "application/json")],
            b"{}".to_vec(),
        );
    }
    match ExportTraceServiceRequest::decode(body) {
        Ok(req) => got.proto.push(req),
        Err(_) => {
            return (
                StatusCode::BAD_REQUEST,
                [(header::CONTENT_TYPE, "text/plain")],
                vec![],
            );
        }
    }
    (
        StatusCode::OK,
        [(header::CONTENT_TYPE, "application/x-protobuf")],
        ExportTraceServiceResponse::default().encode_to_vec(),
    )
}

fn text(v: Option<&opentelemetry_proto::tonic::common::v1::AnyValue>) -> String {
    match v.and_then(|v| v.value.as_ref()) {
        Some(any_value::Value::StringValue(s)) => s.clone(),
        Some(any_value::Value::DoubleValue(d)) => d.to_string(),
        Some(any_value::Value::IntValue(i)) => i.to_string(),
        Some(any_value::Value::BoolValue(b)) => b.to_string(),
        other => format!("{other:?}"),
    }
}

fn attr(span: &Span, key: &str) -> Option<any_value::Value> {
    span.attributes
        .iter()
        .find(|kv| kv.key == key)
        .and_then(|kv| kv.value.as_ref()?.value.clone())
}

fn string(v: &str) -> Option<any_value::Value> {
    Some(any_value::Value::StringValue(v.into()))
}

/// Hooks: `tenant-acme/web` (http, allow, priority 20), then `tenant-acme/deny`
/// (command, exit 2, priority 10), both on `pre_tool_use`.
fn hooks_file(dir: &std::path::Path, hook_url: &str) -> std::path::PathBuf {
    let path = dir.join("hooks.yaml");
    std::fs::write(
        &path,
        format!(
            "apiVersion: agenthooks.io/v1alpha1\nkind: AgentHook\nmetadata: {{name: web, namespace: tenant-acme, uid: uid-web}}\nspec:\n  event: pre_tool_use\n  priority: 20\n  handler: {{type: http, http: {{url: '{hook_url}'}}}}\n---\napiVersion: agenthooks.io/v1alpha1\nkind: AgentHook\nmetadata: {{name: deny, namespace: tenant-acme, uid: uid-deny}}\nspec:\n  event: pre_tool_use\n  priority: 10\n  handler: {{type: command, command: {{command: 'exit 2'}}}}\n"
        ),
    )
    .unwrap();
    path
}

/// Starts the dispatcher standalone with `env`, waits until ready; returns it and its base URL.
async fn dispatcher(hooks: &std::path::Path, env: &[(&str, &str)]) -> (Proc, String) {
    // Whatever the process writes (the audit database) stays in the test's directory.
    let dir = hooks.parent().unwrap();
    let token = dir.join("admin.token");
    std::fs::write(&token, ADMIN_TOKEN).unwrap();
    let mut cmd = command(dir);
    cmd.args([
        "--hooks",
        hooks.to_str().unwrap(),
        "--http-allow-cidr",
        "127.0.0.1/32",
        "--admin-token-file",
        token.to_str().unwrap(),
    ])
    .envs(env.iter().copied());
    serve(cmd).await
}

async fn dispatch(base: &str, traceparent: Option<&str>) -> Value {
    let mut req = reqwest::Client::new()
        .post(format!("{base}/v1/dispatch"))
        .body(
            json!({"event": "pre_tool_use", "event_id": "ev-1", "tenant_id": "tenant-acme", "tool_name": "exec", "tool_input": {}})
                .to_string(),
        );
    if let Some(tp) = traceparent {
        req = req
            .header("traceparent", tp)
            .header("tracestate", "vendor=abc");
    }
    let r = req.send().await.unwrap();
    assert_eq!(r.status(), 200);
    serde_json::from_slice(&r.bytes().await.unwrap()).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hook_runs_are_spans_under_the_callers_traceparent_and_roots_without_one() {
    let rx = Receiver::start().await;
    let dir = tempfile::tempdir().unwrap();
    let hooks = hooks_file(dir.path(), &format!("{}/hook", rx.url));
    let (mut proc, base) = dispatcher(
        &hooks,
        &[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", rx.url.as_str()),
            ("OTEL_BSP_SCHEDULE_DELAY", "20"),
        ],
    )
    .await;

    let d = dispatch(&base, Some(&format!("00-{TRACE_ID}-{PARENT_SPAN_ID}-01"))).await;
    assert_eq!(d["decision"], "block", "{d}");
    let spans = rx.wait_spans(2).await;
    assert_eq!(spans.len(), 2, "{spans:?}");
    let content_types = rx.got.lock().unwrap().content_types.clone();
    assert!(
        content_types.iter().all(|c| c == "application/x-protobuf"),
        "{content_types:?}"
    );
    for (resource, span) in &spans {
        assert!(
            resource.contains(&("service.name".into(), "agenthooks-dispatcher".into())),
            "{resource:?}"
        );
        assert_eq!(hex::encode(&span.trace_id), TRACE_ID);
        assert_eq!(hex::encode(&span.parent_span_id), PARENT_SPAN_ID);
        assert_eq!(span.span_id.len(), 8);
        assert_eq!(attr(span, "event_id"), string("ev-1"));
        assert!(span.end_time_unix_nano >= span.start_time_unix_nano);
    }
    let by_name = |n: &str| {
        spans
            .iter()
            .map(|(_, s)| s)
            .find(|s| s.name == n)
            .unwrap_or_else(|| panic!("no span {n}: {spans:?}"))
    };
    let web = by_name("hook.http.pre_tool_use");
    assert_eq!(attr(web, "hook.name"), string("tenant-acme/web"));
    assert_eq!(attr(web, "status"), string("completed"));
    assert_eq!(attr(web, "metadata.decision"), string("allow"));
    assert_eq!(
        attr(web, "duration_ms"),
        Some(any_value::Value::DoubleValue(
            d["hooks"][0]["durationMs"].as_f64().unwrap()
        ))
    );
    let deny = by_name("hook.command.pre_tool_use");
    assert_eq!(attr(deny, "hook.name"), string("tenant-acme/deny"));
    assert_eq!(attr(deny, "status"), string("completed"));
    assert_eq!(attr(deny, "metadata.decision"), string("block"));
    assert_eq!(
        attr(deny, "duration_ms"),
        Some(any_value::Value::DoubleValue(
            d["hooks"][1]["durationMs"].as_f64().unwrap()
        ))
    );
    assert_eq!(attr(web, "hook.uid"), string("uid-web"));
    assert_eq!(attr(deny, "hook.uid"), string("uid-deny"));

    // The audit rows of these runs carry the caller's trace id (CONTRACT §7.5).
    let c = reqwest::Client::new();
    let mut rows = Value::Null;
    for _ in 0..400 {
        if let Ok(r) = c
            .get(format!("{base}/v1/executions"))
            .bearer_auth(ADMIN_TOKEN)
            .send()
            .await
            && r.status() == 200
        {
            rows = serde_json::from_slice(&r.bytes().await.unwrap()).unwrap();
            if rows["executions"].as_array().is_some_and(|a| a.len() >= 2) {
                break;
            }
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    let rows = rows["executions"].as_array().expect("audit rows listed");
    assert_eq!(rows.len(), 2, "{rows:?}");
    for row in rows {
        assert_eq!(row["metadata"]["trace_id"], TRACE_ID, "{row}");
    }

    // No traceparent: root spans.
    dispatch(&base, None).await;
    let spans = rx.wait_spans(4).await;
    let roots: Vec<&Span> = spans[2..].iter().map(|(_, s)| s).collect();
    for s in &roots {
        assert!(s.parent_span_id.is_empty(), "a root span: {s:?}");
        assert_eq!(s.trace_id.len(), 16);
        assert_ne!(hex::encode(&s.trace_id), TRACE_ID);
    }
    // No pipeline span to nest under (seed "Tracing spans"): each run starts its own trace.
    assert_ne!(roots[0].trace_id, roots[1].trace_id);

    // A malformed traceparent is ignored, never refused.
    dispatch(&base, Some("00-nothex-00f067aa0ba902b7-01")).await;
    let spans = rx.wait_spans(6).await;
    assert!(spans[4..].iter().all(|(_, s)| s.parent_span_id.is_empty()));
    assert!(proc.terminate(Duration::from_secs(10)).await.success());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_last_spans_are_flushed_on_sigterm_and_http_json_is_spoken() {
    let rx = Receiver::start().await;
    let dir = tempfile::tempdir().unwrap();
    let hooks = hooks_file(dir.path(), &format!("{}/hook", rx.url));
    let (mut proc, base) = dispatcher(
        &hooks,
        &[
            (
                "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
                format!("{}/v1/traces", rx.url).as_str(),
            ),
            ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/json"),
            ("OTEL_SERVICE_NAME", "hooks-eu"),
            // Far beyond the test: only the shutdown flush can send them.
            ("OTEL_BSP_SCHEDULE_DELAY", "600000"),
        ],
    )
    .await;
    dispatch(&base, None).await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(rx.requests(), 0, "batched, not yet sent");
    assert!(proc.terminate(Duration::from_secs(10)).await.success());
    let got = rx.got.lock().unwrap();
    assert_eq!(got.content_types, vec!["application/json".to_string()]);
    let rs = &got.json[0]["resourceSpans"][0];
    let service = rs["resource"]["attributes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["key"] == "service.name")
        .unwrap();
    assert_eq!(service["value"]["stringValue"], "hooks-eu");
    let mut names: Vec<&str> = rs["scopeSpans"][0]["spans"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["name"].as_str().unwrap())
        .collect();
    names.sort();
    assert_eq!(
        names,
        vec!["hook.command.pre_tool_use", "hook.http.pre_tool_use"]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_an_endpoint_nothing_is_sent() {
    let rx = Receiver::start().await;
    let dir = tempfile::tempdir().unwrap();
    let hooks = hooks_file(dir.path(), &format!("{}/hook", rx.url));
    // Every knob but the endpoint: still nothing.
    let (mut proc, base) = dispatcher(
        &hooks,
        &[
            ("OTEL_BSP_SCHEDULE_DELAY", "20"),
            ("OTEL_SERVICE_NAME", "hooks"),
        ],
    )
    .await;
    let d = dispatch(&base, Some(&format!("00-{TRACE_ID}-{PARENT_SPAN_ID}-01"))).await;
    assert_eq!(d["decision"], "block");
    assert!(proc.terminate(Duration::from_secs(10)).await.success());
    // The default endpoint (localhost:4318) is not ours, and no exporter exists anyway:
    // the receiver saw no request at all.
    assert_eq!(rx.requests(), 0);
    assert!(rx.got.lock().unwrap().content_types.is_empty());
}
