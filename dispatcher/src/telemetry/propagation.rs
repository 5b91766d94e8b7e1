//! The caller's trace context from W3C Trace Context headers (`traceparent`,
//! `tracestate`), parsed by opentelemetry's [`TraceContextPropagator`] (CONTRACT §8.1:
//! "parent span when there is one").

use axum::http::HeaderMap;
use opentelemetry::propagation::TextMapPropagator;
use opentelemetry::trace::{SpanContext, TraceContextExt};
use opentelemetry_http::HeaderExtractor;
use opentelemetry_sdk::propagation::TraceContextPropagator;

/// The `traceparent` header name (W3C Trace Context).
pub const TRACEPARENT: &str = "traceparent";

/// Length of a version-00 `traceparent`: `00-<32 hex>-<16 hex>-<2 hex>`.
const VERSION_00_LEN: usize = 55;

/// The remote span context of `headers`; `None` without a `traceparent` header or with
/// one the propagator refuses (unknown version, non-hex or uppercase, all-zero ids...).
/// A version-00 header must also have the W3C length (the propagator alone would take
/// a 31-digit trace id and pad it). `tracestate` is kept on the context when present.
pub fn extract(headers: &HeaderMap) -> Option<SpanContext> {
    let value = headers.get(TRACEPARENT)?.as_bytes();
    if value.starts_with(b"00-") && value.len() != VERSION_00_LEN {
        return None;
    }
    let cx = TraceContextPropagator::new().extract(&HeaderExtractor(headers));
    let sc = cx.span().span_context().clone();
    (sc.is_valid() && sc.is_remote()).then_some(sc)
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    fn headers(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.insert(*k, HeaderValue::from_static(v));
        }
        h
    }

    #[test]
    fn a_valid_traceparent_gives_its_trace_and_span_ids_and_tracestate() {
        let sc = extract(&headers(&[
            (
                "traceparent",
                "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            ),
            ("tracestate", "vendor=abc"),
        ]))
        .unwrap();
        assert_eq!(
            sc.trace_id().to_string(),
            "4bf92f3577b34da6a3ce929d0e0e4736"
        );
        assert_eq!(sc.span_id().to_string(), "00f067aa0ba902b7");
        assert!(sc.is_sampled());
        assert!(sc.is_remote());
        assert_eq!(sc.trace_state().header(), "vendor=abc");
    }

    #[test]
    fn no_header_or_a_malformed_one_gives_none() {
        assert_eq!(extract(&HeaderMap::new()), None);
        for bad in [
            "garbage",
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            "00-4bf92f3577b34da6a3ce929d0e0e473-00f067aa0ba902b7-01",
            "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra",
        ] {
            assert_eq!(extract(&headers(&[("traceparent", bad)])), None, "{bad}");
        }
    }
}
