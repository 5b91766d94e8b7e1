//! Hook handlers: the code that turns one event into one hook outcome.
//!
//! Each handler owns its timeout (so it can clean up: kill a process group, drop a
//! connection) and reports a [`HandlerResult`]. The chain (`crate::chain`) turns outcomes
//! into the event's decision; handlers never see other hooks.
//!
//! Rules: CONTRACT.md §5; seed "Handler reference". Handlers: [`command`], [`http`]
//! (with its SSRF guard, [`ssrf`]) and [`prompt`] (a model decides).

pub mod command;
pub mod http;
pub mod prompt;
pub mod ssrf;

use serde_json::Value;

/// What one hook run came to. Audit rows store it as `allow|block|error|timeout`
/// (CONTRACT §7.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Outcome {
    /// The hook lets the event go on.
    Allow,
    /// The hook stops the event (exit 2, `"decision": "block"`, `"continue": false`).
    Block,
    /// The hook failed (bad exit code, transport error, 4xx, bad JSON decision, spawn
    /// failure...). Fail-closed on blocking events.
    Error,
    /// The hook did not answer within its timeout; `onTimeout` decides.
    Timeout,
}

impl Outcome {
    /// The lowercase word used in audit rows, metrics labels and responses.
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Allow => "allow",
            Outcome::Block => "block",
            Outcome::Error => "error",
            Outcome::Timeout => "timeout",
        }
    }
}

/// The result of one handler run.
#[derive(Debug, Clone, PartialEq)]
pub struct HandlerResult {
    pub outcome: Outcome,
    /// Why a block or an error happened, for people (already cut to a sane length,
    /// at most [`MAX_REASON_BYTES`]).
    pub reason: Option<String>,
    /// A short machine label for an error, used as a metrics label and in audit metadata:
    /// e.g. `spawn_failed`, `exit_status`, `output_too_large`, `cwd_missing`,
    /// `ssrf_blocked`, `transport`, `http_4xx`, `http_5xx`, `http_3xx`,
    /// `response_too_large`, `bad_decision`, `timeout`.
    pub error_kind: Option<&'static str>,
    /// `additionalContext` from an allowing hook (seed: HTTP response body field).
    pub additional_context: Option<String>,
    /// `updatedInput` proposed by the hook; the chain decides whether to honour it.
    pub updated_input: Option<Value>,
    /// Facts for audit metadata and dry runs.
    pub metadata: HandlerMetadata,
}

/// Facts about a run that go into audit metadata (`stdout_len`, `http_status`) and the
/// dry-run response (`stdout`, `stderr`).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct HandlerMetadata {
    pub stdout_len: Option<usize>,
    pub http_status: Option<u16>,
    /// Captured stdout (command), cut to [`MAX_REASON_BYTES`]; for dry runs only.
    pub stdout: Option<String>,
    /// Captured stderr (command), cut to [`MAX_REASON_BYTES`]; for dry runs only.
    pub stderr: Option<String>,
    /// Model, tokens, `injection_detected` and cache hit of a prompt run.
    pub prompt: Option<prompt::PromptMetadata>,
}

/// Longest reason or captured text kept in a [`HandlerResult`], in bytes (cut on a UTF-8
/// boundary).
pub const MAX_REASON_BYTES: usize = 1024;

/// Most bytes read from a command's stdout or stderr, or from an HTTP response body
/// (CONTRACT §5 command.4 and http.4: 1 MiB). Past it is an error.
pub const MAX_OUTPUT_BYTES: usize = 1024 * 1024;

impl HandlerResult {
    /// An `allow` with nothing else.
    pub fn allow() -> Self {
        Self::with(Outcome::Allow, None, None)
    }
    /// A `block` with a reason.
    pub fn block(reason: impl Into<String>) -> Self {
        Self::with(Outcome::Block, Some(cut(reason.into())), None)
    }
    /// An `error` with a machine label and a reason.
    pub fn error(kind: &'static str, reason: impl Into<String>) -> Self {
        Self::with(Outcome::Error, Some(cut(reason.into())), Some(kind))
    }
    /// A `timeout`.
    pub fn timeout(after_ms: u64) -> Self {
        Self::with(
            Outcome::Timeout,
            Some(format!("no answer within {after_ms} ms")),
            Some("timeout"),
        )
    }
    /// The answer of an open breaker (CONTRACT §6.2): the handler did not run; the hook is
    /// answered as its fault — an `error` when `fail_closed` (the run that opened it had an
    /// error), else a `timeout`, so `onTimeout` decides — with reason
    /// [`crate::breaker::REASON_CIRCUIT_OPEN`] and kind `circuit_open`.
    pub fn circuit_open(fail_closed: bool) -> Self {
        let outcome = if fail_closed {
            Outcome::Error
        } else {
            Outcome::Timeout
        };
        Self::with(
            outcome,
            Some(crate::breaker::REASON_CIRCUIT_OPEN.to_string()),
            Some("circuit_open"),
        )
    }
    fn with(outcome: Outcome, reason: Option<String>, error_kind: Option<&'static str>) -> Self {
        HandlerResult {
            outcome,
            reason,
            error_kind,
            additional_context: None,
            updated_input: None,
            metadata: HandlerMetadata::default(),
        }
    }
}

/// Cuts `s` to at most [`MAX_REASON_BYTES`] on a UTF-8 boundary.
pub fn cut(mut s: String) -> String {
    if s.len() > MAX_REASON_BYTES {
        let mut end = MAX_REASON_BYTES;
        while !s.is_char_boundary(end) {
            end -= 1;
        }
        s.truncate(end);
    }
    s
}
