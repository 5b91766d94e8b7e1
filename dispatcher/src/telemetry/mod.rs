//! Tracing spans of hook runs and their OTLP export (CONTRACT §8.1; seed "Tracing
//! spans"), plus the dispatcher-side metric the ledger owns (CONTRACT §8.2 "budget
//! remaining").
//!
//! - [`span`]: one span per hook run, `hook.<handler_type>.<event>`, its attributes.
//! - [`propagation`]: the caller's W3C `traceparent`/`tracestate` headers.
//! - [`export`]: the OTLP/HTTP exporter, installed from the standard `OTEL_*` variables.
//! - [`budget_remaining`]: `agenthooks_budget_remaining_tokens{tenant}` of the standalone
//!   ledger, read at scrape time.
//!
//! [`Telemetry`] is what the engine holds: disabled (the default) it costs one branch per
//! hook run and nothing else: no span, no clock read, no header parsing.

pub mod budget_remaining;
pub mod export;
pub mod propagation;
pub mod span;

use opentelemetry::Context;
use opentelemetry::trace::{SpanContext, TraceContextExt, Tracer};
use opentelemetry_sdk::trace::SdkTracer;

use crate::event::Event;
use crate::hookset::LoadedHook;
pub use span::HookSpan;

/// Instrumentation scope of the dispatcher's spans (`otel.scope.name`).
pub const SCOPE_NAME: &str = "agenthooks-dispatcher";

/// The tracer of hook runs, or nothing. Cheap to clone.
#[derive(Clone, Debug, Default)]
pub struct Telemetry {
    tracer: Option<SdkTracer>,
}

impl Telemetry {
    /// No tracing: [`Telemetry::hook_span`] returns an inert span, headers are not read.
    pub fn disabled() -> Telemetry {
        Telemetry { tracer: None }
    }

    /// Spans go to `tracer` (from an SDK provider, see [`export::install_from_env`]).
    pub fn new(tracer: SdkTracer) -> Telemetry {
        Telemetry {
            tracer: Some(tracer),
        }
    }

    /// Whether spans are made at all.
    pub fn enabled(&self) -> bool {
        self.tracer.is_some()
    }

    /// The caller's span from the request's `traceparent` (and `tracestate`) headers;
    /// `None` when tracing is disabled, the header is missing or malformed (a malformed
    /// header starts a new root trace, it never fails the request).
    pub fn extract(&self, headers: &axum::http::HeaderMap) -> Option<SpanContext> {
        self.tracer.as_ref()?;
        propagation::extract(headers)
    }

    /// Starts the span of one hook run (CONTRACT §8.1): named
    /// `hook.<handler_type>.<event>`, child of `event.trace_parent` when the request
    /// carried one, else the root of a new trace. End it with [`HookSpan::end`].
    pub fn hook_span(&self, hook: &LoadedHook, event: &Event) -> HookSpan {
        let Some(tracer) = &self.tracer else {
            return HookSpan::none();
        };
        let parent = match &event.trace_parent {
            Some(sc) => Context::new().with_remote_span_context(sc.clone()),
            None => Context::new(),
        };
        let builder = tracer
            .span_builder(span::span_name(hook.spec.handler.type_, event.event))
            .with_kind(opentelemetry::trace::SpanKind::Internal)
            .with_attributes(span::start_attributes(hook, event));
        HookSpan::started(tracer.build_with_context(builder, &parent))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use opentelemetry::trace::{SpanId, TraceFlags, TraceId, TraceState};

    #[test]
    fn the_trace_parent_never_reaches_or_comes_from_the_events_json() {
        let body = br#"{"event":"pre_tool_use","event_id":"ev-1","tool_name":"exec"}"#;
        let mut event = Event::parse(body).unwrap();
        assert_eq!(event.trace_parent, None);
        let plain = serde_json::to_string(&event).unwrap();
        event.trace_parent = Some(SpanContext::new(
            TraceId::from_hex("4bf92f3577b34da6a3ce929d0e0e4736").unwrap(),
            SpanId::from_hex("00f067aa0ba902b7").unwrap(),
            TraceFlags::SAMPLED,
            true,
            TraceState::default(),
        ));
        // Handlers see the same body with or without a caller's span.
        assert_eq!(serde_json::to_string(&event).unwrap(), plain);
        // And it stays an unknown field for deny_unknown_fields.
        let e = Event::parse(
            br#"{"event":"pre_tool_use","trace_parent":"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}"#,
        )
        .unwrap_err();
        assert!(
            e.to_string().contains("unknown field `trace_parent`"),
            "{e}"
        );
    }

    #[test]
    fn disabled_reads_no_header() {
        let mut h = axum::http::HeaderMap::new();
        h.insert(
            "traceparent",
            axum::http::HeaderValue::from_static(
                "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            ),
        );
        assert_eq!(Telemetry::disabled().extract(&h), None);
        assert!(!Telemetry::disabled().enabled());
    }
}
