//! The OTLP/HTTP span exporter, configured by the standard OpenTelemetry variables
//! (CONTRACT §8.1: "OTLP export when configured, nothing when not").
//!
//! Installed only when `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` (used as is) or
//! `OTEL_EXPORTER_OTLP_ENDPOINT` (`/v1/traces` appended) is set and non-empty, and
//! `OTEL_SDK_DISABLED` is not `true`. Also read:
//!
//! - `OTEL_EXPORTER_OTLP_[TRACES_]PROTOCOL`: `http/protobuf` (default) or `http/json`;
//!   `grpc` is refused (this build has no gRPC transport).
//! - `OTEL_EXPORTER_OTLP_[TRACES_]TIMEOUT`: milliseconds per export (default 10000).
//! - `OTEL_EXPORTER_OTLP_[TRACES_]HEADERS`, `OTEL_EXPORTER_OTLP_[TRACES_]COMPRESSION`
//!   (read by `opentelemetry-otlp`).
//! - `OTEL_SERVICE_NAME` (default `agenthooks-dispatcher`), `OTEL_RESOURCE_ATTRIBUTES`.
//! - `OTEL_BSP_SCHEDULE_DELAY`, `OTEL_BSP_MAX_QUEUE_SIZE`, `OTEL_BSP_MAX_EXPORT_BATCH_SIZE`,
//!   `OTEL_BSP_EXPORT_TIMEOUT` (the batch processor); `OTEL_TRACES_SAMPLER[_ARG]`.
//!
//! Spans are batched on the SDK's own thread; the HTTP requests run on the process's
//! tokio runtime through the dispatcher's reqwest (no second HTTP stack). A full queue
//! drops spans, never delays a decision.

use std::time::Duration;

use opentelemetry_http::{Bytes, HttpClient, HttpError, Request, Response};
use opentelemetry_otlp::{Protocol, WithExportConfig, WithHttpConfig};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::trace::SdkTracerProvider;

/// `service.name` when neither `OTEL_SERVICE_NAME` nor `OTEL_RESOURCE_ATTRIBUTES` names one.
pub const DEFAULT_SERVICE_NAME: &str = "agenthooks-dispatcher";
/// Export timeout when no `OTEL_EXPORTER_OTLP_[TRACES_]TIMEOUT` is set (the spec's 10 s).
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);

/// Why the exporter cannot be installed; each names the variable at fault.
#[derive(Debug, thiserror::Error)]
pub enum ExportError {
    /// A protocol other than `http/protobuf` or `http/json`.
    #[error(
        "{var}: {value:?} is not supported; use http/protobuf or http/json (this build has no gRPC)"
    )]
    Protocol { var: &'static str, value: String },
    /// A timeout that is not a whole number of milliseconds.
    #[error("{var}: {value:?} is not a whole number of milliseconds")]
    Timeout { var: &'static str, value: String },
    /// The exporter refused its configuration (an endpoint that is not a URL...).
    #[error("OTLP exporter: {0}")]
    Build(#[from] opentelemetry_otlp::ExporterBuildError),
    /// The HTTP client could not be built.
    #[error("OTLP exporter HTTP client: {0}")]
    Client(String),
}

/// What the dispatcher decides from the environment; the rest is read by the SDK.
#[derive(Debug, Clone, PartialEq)]
pub struct ExportSettings {
    pub protocol: Protocol,
    pub timeout: Duration,
    /// `Some(DEFAULT_SERVICE_NAME)` when the environment names no service.
    pub default_service_name: Option<&'static str>,
}

/// Reads the settings through `var` (the environment in production). `Ok(None)`: no
/// endpoint (or the SDK disabled), so no exporter and no spans.
pub fn settings(
    var: impl Fn(&str) -> Option<String>,
) -> Result<Option<ExportSettings>, ExportError> {
    let set = |k: &str| var(k).filter(|v| !v.trim().is_empty());
    if set("OTEL_SDK_DISABLED").is_some_and(|v| v.trim().eq_ignore_ascii_case("true")) {
        return Ok(None);
    }
    if set("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT").is_none()
        && set("OTEL_EXPORTER_OTLP_ENDPOINT").is_none()
    {
        return Ok(None);
    }
    let first = |a: &'static str, b: &'static str| {
        set(a).map(|v| (a, v)).or_else(|| set(b).map(|v| (b, v)))
    };
    let protocol = match first(
        "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL",
        "OTEL_EXPORTER_OTLP_PROTOCOL",
    ) {
        None => Protocol::HttpBinary,
        Some((var, value)) => match value.trim() {
            "http/protobuf" => Protocol::HttpBinary,
            "http/json" => Protocol::HttpJson,
            _ => return Err(ExportError::Protocol { var, value }),
        },
    };
    let timeout = match first(
        "OTEL_EXPORTER_OTLP_TRACES_TIMEOUT",
        "OTEL_EXPORTER_OTLP_TIMEOUT",
    ) {
        None => DEFAULT_TIMEOUT,
        Some((var, value)) => match value.trim().parse::<u64>() {
            Ok(ms) => Duration::from_millis(ms),
            Err(_) => return Err(ExportError::Timeout { var, value }),
        },
    };
    let named = set("OTEL_SERVICE_NAME").is_some()
        || set("OTEL_RESOURCE_ATTRIBUTES").is_some_and(|attrs| {
            attrs
                .split(',')
                .any(|kv| kv.split('=').next().map(str::trim) == Some("service.name"))
        });
    Ok(Some(ExportSettings {
        protocol,
        timeout,
        default_service_name: (!named).then_some(DEFAULT_SERVICE_NAME),
    }))
}

/// Builds the tracer provider from the environment (see the module docs): `Ok(None)`
/// when no endpoint is configured. Call it inside the tokio runtime that will carry the
/// exports; shut the provider down (off the runtime's workers, e.g. in
/// `spawn_blocking`) after the server drained, so the last spans are sent.
pub fn install_from_env() -> Result<Option<SdkTracerProvider>, ExportError> {
    let Some(s) = settings(|k| std::env::var(k).ok())? else {
        return Ok(None);
    };
    crate::operator_urls::install_crypto_provider();
    let client = reqwest::Client::builder()
        .timeout(s.timeout)
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .map_err(|e| ExportError::Client(e.to_string()))?;
    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .with_protocol(s.protocol)
        .with_timeout(s.timeout)
        .with_http_client(TokioHttpClient {
            client,
            runtime: tokio::runtime::Handle::current(),
        })
        .build()?;
    let mut resource = Resource::builder();
    if let Some(name) = s.default_service_name {
        resource = resource.with_service_name(name);
    }
    Ok(Some(
        SdkTracerProvider::builder()
            .with_batch_exporter(exporter)
            .with_resource(resource.build())
            .build(),
    ))
}

/// reqwest on the process's tokio runtime, callable from the SDK's batch thread (which
/// drives exports with a plain executor, where reqwest alone would find no reactor).
#[derive(Debug)]
struct TokioHttpClient {
    client: reqwest::Client,
    runtime: tokio::runtime::Handle,
}

#[async_trait::async_trait]
impl HttpClient for TokioHttpClient {
    async fn send_bytes(&self, request: Request<Bytes>) -> Result<Response<Bytes>, HttpError> {
        let client = self.client.clone();
        self.runtime
            .spawn(async move { client.send_bytes(request).await })
            .await
            .map_err(|e| Box::new(e) as HttpError)?
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn env(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let m: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        move |k| m.get(k).cloned()
    }

    #[test]
    fn no_endpoint_or_a_disabled_sdk_means_no_exporter() {
        assert_eq!(settings(env(&[])).unwrap(), None);
        assert_eq!(
            settings(env(&[("OTEL_EXPORTER_OTLP_ENDPOINT", "  ")])).unwrap(),
            None
        );
        assert_eq!(
            settings(env(&[
                ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4318"),
                ("OTEL_SDK_DISABLED", "TRUE"),
            ]))
            .unwrap(),
            None
        );
    }

    #[test]
    fn defaults_are_http_protobuf_ten_seconds_and_our_service_name() {
        for var in [
            "OTEL_EXPORTER_OTLP_ENDPOINT",
            "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
        ] {
            assert_eq!(
                settings(env(&[(var, "http://127.0.0.1:4318")])).unwrap(),
                Some(ExportSettings {
                    protocol: Protocol::HttpBinary,
                    timeout: Duration::from_secs(10),
                    default_service_name: Some("agenthooks-dispatcher"),
                }),
                "{var}"
            );
        }
    }

    #[test]
    fn the_signal_variables_win_and_a_named_service_keeps_its_name() {
        let s = settings(env(&[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4318"),
            ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf"),
            ("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "http/json"),
            ("OTEL_EXPORTER_OTLP_TIMEOUT", "3000"),
            ("OTEL_EXPORTER_OTLP_TRACES_TIMEOUT", "250"),
            ("OTEL_RESOURCE_ATTRIBUTES", "team=sec, service.name=hooks"),
        ]))
        .unwrap()
        .unwrap();
        assert_eq!(s.protocol, Protocol::HttpJson);
        assert_eq!(s.timeout, Duration::from_millis(250));
        assert_eq!(s.default_service_name, None);
        let s = settings(env(&[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4318"),
            ("OTEL_SERVICE_NAME", "hooks-eu"),
        ]))
        .unwrap()
        .unwrap();
        assert_eq!(s.default_service_name, None);
    }

    #[test]
    fn grpc_and_bad_timeouts_are_refused_naming_the_variable() {
        let e = settings(env(&[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4317"),
            ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"),
        ]))
        .unwrap_err();
        assert_eq!(
            e.to_string(),
            "OTEL_EXPORTER_OTLP_PROTOCOL: \"grpc\" is not supported; use http/protobuf or http/json (this build has no gRPC)"
        );
        let e = settings(env(&[
            (
                "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
                "http://127.0.0.1:4318/v1/traces",
            ),
            ("OTEL_EXPORTER_OTLP_TRACES_TIMEOUT", "5s"),
        ]))
        .unwrap_err();
        assert_eq!(
            e.to_string(),
            "OTEL_EXPORTER_OTLP_TRACES_TIMEOUT: \"5s\" is not a whole number of milliseconds"
        );
    }
}
