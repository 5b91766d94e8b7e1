//! Span naming and attribute mapping; spans of real command-hook runs through
//! `decide`, collected by an in-process exporter (the OTLP wire format is covered by
//! `tests/telemetry_otlp.rs`).

use std::sync::{Arc, Mutex};

use super::*;
use crate::chain::{Verdict, decide};
use crate::handlers::http::HttpCaller;
use crate::hookset::HookSet;
use crate::runner::Engine;
use crate::telemetry::Telemetry;
use agenthooks_crds::Edition;
use agenthooks_crds::sealed::SealKey;
use agenthooks_crds::snapshot::SnapshotHook;
use opentelemetry::trace::{SpanContext, SpanId, TraceFlags, TraceId, TraceState, TracerProvider};
use opentelemetry::{Key, Value};
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::trace::{SdkTracerProvider, SpanData, SpanExporter};
use serde_json::json;

#[test]
fn names_are_hook_handler_event() {
    assert_eq!(
        span_name(HandlerType::Http, HookEvent::PreToolUse),
        "hook.http.pre_tool_use"
    );
    assert_eq!(
        span_name(HandlerType::Prompt, HookEvent::PreToolUse),
        "hook.prompt.pre_tool_use"
    );
    assert_eq!(
        span_name(HandlerType::Command, HookEvent::SessionStart),
        "hook.command.session_start"
    );
    assert_eq!(
        span_name(HandlerType::Prompt, HookEvent::SubagentStop),
        "hook.prompt.subagent_stop"
    );
    // Every pair has its own name.
    let mut all: Vec<&str> = [HandlerType::Command, HandlerType::Http, HandlerType::Prompt]
        .iter()
        .flat_map(|h| HookEvent::ALL.iter().map(move |e| span_name(*h, *e)))
        .collect();
    all.sort();
    all.dedup();
    assert_eq!(all.len(), 21);
}

#[test]
fn status_is_completed_for_answers_and_error_otherwise() {
    assert_eq!(status_word(Outcome::Allow), "completed");
    assert_eq!(status_word(Outcome::Block), "completed");
    assert_eq!(status_word(Outcome::Error), "error");
    assert_eq!(status_word(Outcome::Timeout), "error");
}

#[test]
fn end_attributes_carry_status_duration_decision_and_error_kind() {
    let kv = end_attributes(
        Outcome::Timeout,
        Duration::from_micros(12_345_678),
        Some(crate::handlers::ErrorKind::Timeout),
    );
    assert_eq!(
        kv,
        vec![
            KeyValue::new("status", "error"),
            KeyValue::new("duration_ms", 12_345.678),
            KeyValue::new("metadata.decision", "timeout"),
            KeyValue::new("error.kind", "timeout"),
        ]
    );
    let kv = end_attributes(Outcome::Block, Duration::from_nanos(1_500_400), None);
    assert_eq!(
        kv,
        vec![
            KeyValue::new("status", "completed"),
            KeyValue::new("duration_ms", 1.5),
            KeyValue::new("metadata.decision", "block"),
        ]
    );
}

#[test]
fn a_disabled_span_has_no_ids_and_ends_quietly() {
    let span = Telemetry::disabled().hook_span_for_test();
    assert_eq!(span.trace_id_hex(), None);
    assert_eq!(span.span_id_hex(), None);
    span.end(Outcome::Allow, Duration::ZERO, None);
}

impl Telemetry {
    fn hook_span_for_test(&self) -> HookSpan {
        let set = set(vec![cmd("a", "exit 0")]);
        let hook = set.iter().next().unwrap().clone();
        self.hook_span(&hook, &event(None))
    }
}

/// Keeps every exported span.
#[derive(Debug, Clone, Default)]
struct Collected(Arc<Mutex<Vec<SpanData>>>);

impl SpanExporter for Collected {
    async fn export(&self, batch: Vec<SpanData>) -> OTelSdkResult {
        self.0.lock().unwrap().extend(batch);
        Ok(())
    }
}

fn traced_engine() -> (Engine, Collected) {
    let collected = Collected::default();
    let provider = SdkTracerProvider::builder()
        .with_simple_exporter(collected.clone())
        .build();
    let mut engine = Engine::new(HttpCaller::new(vec![]), Edition::Lite, SealKey::generate());
    engine.telemetry = Telemetry::new(provider.tracer("test"));
    (engine, collected)
}

fn cmd(name: &str, command: &str) -> SnapshotHook {
    let yaml = format!(
        "event: pre_tool_use\nhandler: {{type: command, command: {{command: {}}}}}\n",
        serde_json::to_string(command).unwrap()
    );
    SnapshotHook {
        uid: format!("uid-{name}"),
        namespace: "tenant-acme".into(),
        name: name.into(),
        generation: 1,
        created_at: "2026-01-01T00:00:00Z".into(),
        namespace_tenant: "acme".into(),
        spec: serde_norway::from_str(&yaml).unwrap(),
        sealed_headers: vec![],
        open_breakers: Vec::new(),
        reset_token: None,
    }
}

fn set(sources: Vec<SnapshotHook>) -> HookSet {
    let (set, rejected) = HookSet::build(sources, "agenthooks-system", Edition::Lite, 1, None);
    assert!(rejected.is_empty(), "{rejected:?}");
    set
}

fn event(parent: Option<SpanContext>) -> Event {
    let mut e = Event::parse(
        &serde_json::to_vec(&json!({"event": "pre_tool_use", "event_id": "ev-1", "tenant_id": "acme", "tool_name": "exec"}))
            .unwrap(),
    )
    .unwrap();
    e.trace_parent = parent;
    e
}

fn attr<'a>(span: &'a SpanData, key: &str) -> Option<&'a Value> {
    span.attributes
        .iter()
        .find(|kv| kv.key == Key::from(key.to_string()))
        .map(|kv| &kv.value)
}

#[tokio::test]
async fn each_run_is_a_span_under_the_callers_span() {
    let (engine, collected) = traced_engine();
    // Same priority: `allow` runs before `block` (CONTRACT §3.2: then by name).
    let s = set(vec![cmd("block", "exit 2"), cmd("allow", "exit 0")]);
    let parent = SpanContext::new(
        TraceId::from_hex("4bf92f3577b34da6a3ce929d0e0e4736").unwrap(),
        SpanId::from_hex("00f067aa0ba902b7").unwrap(),
        TraceFlags::SAMPLED,
        true,
        TraceState::default(),
    );
    let d = decide(&engine, &s, event(Some(parent))).await;
    assert_eq!(d.decision, Verdict::Block);
    let spans = collected.0.lock().unwrap().clone();
    assert_eq!(spans.len(), 2, "{spans:?}");
    for span in &spans {
        assert_eq!(span.name, "hook.command.pre_tool_use");
        assert_eq!(
            span.span_context.trace_id().to_string(),
            "4bf92f3577b34da6a3ce929d0e0e4736"
        );
        assert_eq!(span.parent_span_id.to_string(), "00f067aa0ba902b7");
        assert!(span.parent_span_is_remote);
        assert_eq!(attr(span, "event_id"), Some(&Value::from("ev-1")));
    }
    let by_hook = |name: &str| {
        spans
            .iter()
            .find(|s| attr(s, "hook.name") == Some(&Value::from(name.to_string())))
            .unwrap()
    };
    let ok = by_hook("tenant-acme/allow");
    assert_eq!(attr(ok, "hook.uid"), Some(&Value::from("uid-allow")));
    assert_eq!(attr(ok, "status"), Some(&Value::from("completed")));
    assert_eq!(attr(ok, "metadata.decision"), Some(&Value::from("allow")));
    assert_eq!(ok.status, Status::Unset);
    let no = by_hook("tenant-acme/block");
    assert_eq!(attr(no, "hook.uid"), Some(&Value::from("uid-block")));
    assert_eq!(attr(no, "status"), Some(&Value::from("completed")));
    assert_eq!(attr(no, "metadata.decision"), Some(&Value::from("block")));
    // duration_ms is the response's figure.
    let Some(Value::F64(ms)) = attr(no, "duration_ms") else {
        panic!("duration_ms is a float: {no:?}");
    };
    assert_eq!(*ms, d.hooks[1].duration_ms);
}

#[tokio::test]
async fn without_a_traceparent_a_run_is_a_root_span_and_errors_are_marked() {
    let (engine, collected) = traced_engine();
    let s = set(vec![cmd("broken", "exit 7")]);
    let d = decide(&engine, &s, event(None)).await;
    assert_eq!(d.decision, Verdict::Block);
    let spans = collected.0.lock().unwrap().clone();
    assert_eq!(spans.len(), 1);
    let span = &spans[0];
    assert_eq!(span.parent_span_id, SpanId::INVALID);
    assert!(span.span_context.trace_id() != TraceId::INVALID);
    assert_eq!(attr(span, "status"), Some(&Value::from("error")));
    assert_eq!(attr(span, "metadata.decision"), Some(&Value::from("error")));
    let kind = d.hooks[0].error_kind.unwrap().as_str();
    assert_eq!(attr(span, "error.kind"), Some(&Value::from(kind)));
    assert_eq!(span.status, Status::error(kind));
}

#[tokio::test]
async fn the_trace_id_is_32_lowercase_hex_and_the_callers_when_given() {
    let (engine, _collected) = traced_engine();
    let span = engine.telemetry.hook_span_for_test();
    let id = span.trace_id_hex().unwrap();
    assert_eq!(id.len(), 32);
    assert!(
        id.chars()
            .all(|c| c.is_ascii_hexdigit() && !c.is_ascii_uppercase())
    );
    assert_eq!(span.span_id_hex().unwrap().len(), 16);
    span.end(Outcome::Allow, Duration::ZERO, None);

    let set = set(vec![cmd("a", "exit 0")]);
    let hook = set.iter().next().unwrap().clone();
    let parent = SpanContext::new(
        TraceId::from_hex("0af7651916cd43dd8448eb211c80319c").unwrap(),
        SpanId::from_hex("b7ad6b7169203331").unwrap(),
        TraceFlags::NOT_SAMPLED,
        true,
        TraceState::default(),
    );
    // Not sampled by the caller: no span is exported, the trace id still is the caller's.
    let span = engine.telemetry.hook_span(&hook, &event(Some(parent)));
    assert_eq!(
        span.trace_id_hex().as_deref(),
        Some("0af7651916cd43dd8448eb211c80319c")
    );
}
