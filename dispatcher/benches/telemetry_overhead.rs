//! Per-run cost of the hook span (CONTRACT §8.1), tracing disabled vs enabled.
//!
//! Run: `cargo bench -p agenthooks-dispatcher --bench telemetry_overhead`.
//!
//! What one hook run pays in `runner::run_matched` for tracing: `hook_span` (start),
//! `trace_id_hex` (for the audit row) and `end` (attributes, status, hand-off to the
//! batch processor), measured in process with no handler I/O; plus reading a
//! `traceparent` in the dispatch handler. Enabled uses the production pipeline (the
//! SDK's batch processor and its thread) with an exporter that discards batches, so
//! the figure is the decision path's share, not the network's. Rounds alternate
//! between the variants so machine noise hits all alike; the median round is reported.
//!
//! Without `--bench` (e.g. `cargo test --all-targets`) it runs a few iterations only.

use std::hint::black_box;
use std::time::{Duration, Instant};

use agenthooks_crds::Edition;
use agenthooks_crds::snapshot::SnapshotHook;
use agenthooks_dispatcher::event::Event;
use agenthooks_dispatcher::handlers::Outcome;
use agenthooks_dispatcher::hookset::HookSet;
use agenthooks_dispatcher::telemetry::Telemetry;
use axum::http::{HeaderMap, HeaderValue};
use opentelemetry::trace::{SpanContext, TracerProvider};
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::trace::{SdkTracerProvider, SpanData, SpanExporter};

/// Drops every batch.
#[derive(Debug)]
struct Discard;

impl SpanExporter for Discard {
    async fn export(&self, batch: Vec<SpanData>) -> OTelSdkResult {
        black_box(batch);
        Ok(())
    }
}

fn hook_set() -> HookSet {
    let spec = serde_norway::from_str(
        "event: pre_tool_use\nhandler: {type: http, http: {url: 'http://127.0.0.1:9/hook'}}",
    )
    .unwrap();
    let (set, rejected) = HookSet::build(
        vec![SnapshotHook {
            uid: "uid-web".into(),
            namespace: "tenant-acme".into(),
            name: "web".into(),
            generation: 1,
            created_at: "2026-01-01T00:00:00Z".into(),
            namespace_tenant: "acme".into(),
            spec,
            sealed_headers: vec![],
            open_breakers: Vec::new(),
            reset_token: None,
        }],
        "agenthooks-system",
        Edition::Lite,
        1,
        None,
    );
    assert!(rejected.is_empty());
    set
}

/// ns per iteration of `f` over `n` iterations.
fn time(n: usize, mut f: impl FnMut()) -> f64 {
    let t = Instant::now();
    for _ in 0..n {
        f();
    }
    t.elapsed().as_nanos() as f64 / n as f64
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[v.len() / 2]
}

fn main() {
    let full = std::env::args().any(|a| a == "--bench");
    let (rounds, n) = if full { (15, 20_000) } else { (1, 50) };

    let set = hook_set();
    let hook = set.iter().next().unwrap().clone();
    let event = Event::parse(
        br#"{"event":"pre_tool_use","event_id":"ev-1","tenant_id":"acme","tool_name":"exec","tool_input":{"cmd":"ls"}}"#,
    )
    .unwrap();
    let mut headers = HeaderMap::new();
    headers.insert(
        "traceparent",
        HeaderValue::from_static("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"),
    );
    let parent: SpanContext =
        agenthooks_dispatcher::telemetry::propagation::extract(&headers).unwrap();
    let mut child_event = event.clone();
    child_event.trace_parent = Some(parent);

    let provider = SdkTracerProvider::builder()
        .with_batch_exporter(Discard)
        .build();
    let disabled = Telemetry::disabled();
    let enabled = Telemetry::new(provider.tracer("bench"));
    let elapsed = Duration::from_micros(1234);

    let run = |t: &Telemetry, e: &Event| {
        let span = t.hook_span(&hook, e);
        black_box(span.trace_id_hex());
        span.end(Outcome::Allow, elapsed, None);
    };
    let mut results: [Vec<f64>; 5] = Default::default();
    for _ in 0..rounds {
        results[0].push(time(n, || run(&disabled, &event)));
        results[1].push(time(n, || run(&enabled, &event)));
        results[2].push(time(n, || run(&enabled, &child_event)));
        results[3].push(time(n, || {
            black_box(disabled.extract(black_box(&headers)));
        }));
        results[4].push(time(n, || {
            black_box(enabled.extract(black_box(&headers)));
        }));
    }
    let names = [
        "hook span, tracing disabled",
        "hook span, enabled, root",
        "hook span, enabled, child of traceparent",
        "traceparent read, tracing disabled",
        "traceparent read, tracing enabled",
    ];
    println!("telemetry_overhead ({rounds} rounds x {n} iterations, median ns per op)");
    for (name, r) in names.iter().zip(results) {
        println!("  {name:<42} {:>9.1} ns", median(r));
    }
    let _ = provider.shutdown();
}
