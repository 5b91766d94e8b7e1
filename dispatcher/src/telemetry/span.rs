//! The span of one hook run (CONTRACT §8.1; seed "Tracing spans"): its name and
//! attributes.
//!
//! | attribute | value |
//! |---|---|
//! | `status` | `completed` (the hook answered: allow or block) or `error` (error, timeout) |
//! | `duration_ms` | the run's duration in milliseconds (f64, µs precision), as in the response |
//! | `metadata.decision` | `allow`, `block`, `error` or `timeout` |
//! | `hook.name` | `namespace/name` |
//! | `hook.uid` | the AgentHook's uid |
//! | `event_id` | the event's id |
//! | `error.kind` | the handler's error kind (`spawn_failed`, `http_5xx`...), when there is one |
//!
//! The span's OTel status is `Error` (description: the error kind) for `error` and
//! `timeout`, unset otherwise. Its parent is the caller's span when the request carried
//! a `traceparent` (same trace id); without one, each run is the root of its own trace
//! (the dispatcher has no pipeline span of its own to nest under). Kind: `Internal`.

use std::sync::LazyLock;
use std::time::Duration;

use agenthooks_crds::HookEvent;
use agenthooks_crds::agenthook::HandlerType;
use opentelemetry::KeyValue;
use opentelemetry::trace::{Span as _, Status};

use crate::decision::outcome::ErrorKind;
use crate::decision::outcome::Outcome;
use crate::event::Event;
use crate::hookset::LoadedHook;

/// Attribute keys of a hook span.
pub mod keys {
    /// `completed` or `error`.
    pub const STATUS: &str = "status";
    /// Milliseconds, f64.
    pub const DURATION_MS: &str = "duration_ms";
    /// `allow`, `block`, `error` or `timeout`.
    pub const DECISION: &str = "metadata.decision";
    /// `namespace/name`.
    pub const HOOK_NAME: &str = "hook.name";
    /// The AgentHook's uid.
    pub const HOOK_UID: &str = "hook.uid";
    /// The event's id.
    pub const EVENT_ID: &str = "event_id";
    /// The handler's error kind, when the run failed.
    pub const ERROR_KIND: &str = "error.kind";
}

const HANDLERS: [HandlerType; 3] = [HandlerType::Command, HandlerType::Http, HandlerType::Prompt];

/// Every `hook.<handler_type>.<event>` name, built once: [handler][event].
static NAMES: LazyLock<Vec<String>> = LazyLock::new(|| {
    HANDLERS
        .iter()
        .flat_map(|h| {
            HookEvent::ALL
                .iter()
                .map(move |e| format!("hook.{}.{}", h.as_str(), e.as_str()))
        })
        .collect()
});

/// `hook.<handler_type>.<event>`, e.g. `hook.http.pre_tool_use` (seed "Tracing spans").
pub fn span_name(handler: HandlerType, event: HookEvent) -> &'static str {
    let h = HANDLERS.iter().position(|x| *x == handler).unwrap_or(0);
    NAMES[h * HookEvent::ALL.len() + event as usize].as_str()
}

/// `completed` when the hook answered (allow, block), `error` when it did not (error,
/// timeout): the seed's span `status`.
pub fn status_word(outcome: Outcome) -> &'static str {
    match outcome {
        Outcome::Allow | Outcome::Block | Outcome::Ask => "completed",
        Outcome::Error | Outcome::Timeout => "error",
    }
}

/// `duration_ms` of a run: milliseconds rounded to the microsecond, as in the response.
pub fn duration_ms(elapsed: Duration) -> f64 {
    (elapsed.as_secs_f64() * 1000.0 * 1000.0).round() / 1000.0
}

/// Attributes known when the run starts: `hook.name`, `hook.uid`, `event_id`.
pub fn start_attributes(hook: &LoadedHook, event: &Event) -> [KeyValue; 3] {
    [
        KeyValue::new(keys::HOOK_NAME, hook.key.clone()),
        KeyValue::new(keys::HOOK_UID, hook.uid.clone()),
        KeyValue::new(keys::EVENT_ID, event.event_id.clone()),
    ]
}

/// Attributes known when the run ends: `status`, `duration_ms`, `metadata.decision`,
/// and `error.kind` when there is one.
pub fn end_attributes(
    outcome: Outcome,
    elapsed: Duration,
    error_kind: Option<ErrorKind>,
) -> Vec<KeyValue> {
    let mut kv = Vec::with_capacity(4);
    kv.push(KeyValue::new(keys::STATUS, status_word(outcome)));
    kv.push(KeyValue::new(keys::DURATION_MS, duration_ms(elapsed)));
    kv.push(KeyValue::new(keys::DECISION, outcome.as_str()));
    if let Some(kind) = error_kind {
        kv.push(KeyValue::new(keys::ERROR_KIND, kind.as_str()));
    }
    kv
}

/// The span of one hook run, or nothing when tracing is disabled. Dropped without
/// [`HookSpan::end`] (a cancelled run), the SDK ends it without the end attributes.
#[derive(Debug)]
pub struct HookSpan(Option<Box<opentelemetry_sdk::trace::Span>>);

impl HookSpan {
    /// No span (tracing disabled).
    pub const fn none() -> HookSpan {
        HookSpan(None)
    }

    pub(crate) fn started(span: opentelemetry_sdk::trace::Span) -> HookSpan {
        // Boxed: the SDK span is a few hundred bytes, moved around the run; disabled,
        // a `HookSpan` stays one word.
        HookSpan(Some(Box::new(span)))
    }

    /// The trace id, 32 lowercase hex digits: the caller's when the request carried a
    /// `traceparent`, else the new trace's. `None` when tracing is disabled. Goes into
    /// the audit row's `metadata.trace_id` (CONTRACT §7.5).
    pub fn trace_id_hex(&self) -> Option<String> {
        let sc = self.0.as_ref()?.span_context();
        sc.is_valid().then(|| sc.trace_id().to_string())
    }

    /// The span id, 16 lowercase hex digits; `None` when tracing is disabled.
    pub fn span_id_hex(&self) -> Option<String> {
        let sc = self.0.as_ref()?.span_context();
        sc.is_valid().then(|| sc.span_id().to_string())
    }

    /// Sets the end attributes (see [`end_attributes`]) and the status, and ends the span.
    pub fn end(self, outcome: Outcome, elapsed: Duration, error_kind: Option<ErrorKind>) {
        let Some(mut span) = self.0 else {
            return;
        };
        span.set_attributes(end_attributes(outcome, elapsed, error_kind));
        if matches!(outcome, Outcome::Error | Outcome::Timeout) {
            span.set_status(Status::error(
                error_kind.map_or(outcome.as_str(), ErrorKind::as_str),
            ));
        }
        span.end();
    }
}

#[cfg(test)]
mod tests;
