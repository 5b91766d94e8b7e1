//! The vocabulary of a hook run, at the bottom so every layer can name it without a cycle:
//! [`Outcome`] (`allow|block|error|timeout`, CONTRACT §7.1), [`ErrorKind`] (why an error),
//! [`HandlerResult`] (what a handler reports) and its metadata.

use serde::Serialize;
use serde_json::Value;

/// What one hook run came to. Audit rows store it as `allow|block|error|timeout`
/// (CONTRACT §7.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Outcome {
    /// The hook lets the event go on.
    Allow,
    /// The hook stops the event (exit 2, `"decision": "block"`, `"continue": false`).
    Block,
    /// The hook wants a person to decide (`"decision": "ask"`; Claude Code's
    /// `permissionDecision: "ask"`). In a chain `block` beats `ask` beats `allow`.
    Ask,
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
            Outcome::Ask => "ask",
            Outcome::Error => "error",
            Outcome::Timeout => "timeout",
        }
    }
}

/// Why a run is an `error` (or a `timeout`): a closed set, used as the metrics label
/// `kind`, the audit row's error label and the response's `errorKind` (its
/// [`ErrorKind::as_str`] word). Prompt runs carry their own finer label
/// ([`ErrorKind::Prompt`]: `prompt_unconfigured`, `per_turn_cap`, `budget_exhausted`, a
/// provider call failure or an unusable answer, see [`crate::handlers::prompt`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ErrorKind {
    /// The command could not be started (not found, not executable: exit 126/127).
    SpawnFailed,
    /// The command exited with a code other than 0 and 2, or was killed.
    ExitStatus,
    /// Stdout or stderr went past the 1 MiB cap.
    OutputTooLarge,
    /// The command's `cwd` does not exist.
    CwdMissing,
    /// The command runner could not be reached or answered badly.
    RunnerUnavailable,
    /// A command hook on the Standard edition (never run).
    EditionForbidsCommand,
    /// The SSRF guard refused the URL or an address it resolves to.
    SsrfBlocked,
    /// The HTTP request failed in transport (after its retry).
    Transport,
    /// The endpoint answered a redirect (never followed).
    Http3xx,
    /// The endpoint answered 4xx (no retry).
    Http4xx,
    /// The endpoint answered 5xx (after its retry).
    Http5xx,
    /// The answer went past the 1 MiB cap.
    ResponseTooLarge,
    /// The answer's `decision` is neither allow nor block.
    BadDecision,
    /// A configured header name or value is not valid HTTP.
    BadHeader,
    /// A sealed header value could not be opened.
    HeaderUnseal,
    /// The handler block named by `spec.handler.type` is missing.
    BadSpec,
    /// No answer within the hook's timeout.
    Timeout,
    /// `ifExpr` failed to evaluate or was not a boolean (no handler ran).
    CelEval,
    /// The handler panicked.
    Panic,
    /// The chain budget was spent before the hook could run.
    ChainBudget,
    /// The hook's breaker is open for the tenant: answered as its fault (CONTRACT §6.2).
    CircuitOpen,
    /// An `ask` of a hook with `spec.approval` could not become an approval (no operator,
    /// or it did not answer): refused, never allowed.
    ApprovalUnavailable,
    /// A prompt run's failure, by its own label.
    Prompt(&'static str),
}

impl ErrorKind {
    /// The snake_case word (`exit_status`, `ssrf_blocked`, ...).
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorKind::SpawnFailed => "spawn_failed",
            ErrorKind::ExitStatus => "exit_status",
            ErrorKind::OutputTooLarge => "output_too_large",
            ErrorKind::CwdMissing => "cwd_missing",
            ErrorKind::RunnerUnavailable => "runner_unavailable",
            ErrorKind::EditionForbidsCommand => "edition_forbids_command",
            ErrorKind::SsrfBlocked => "ssrf_blocked",
            ErrorKind::Transport => "transport",
            ErrorKind::Http3xx => "http_3xx",
            ErrorKind::Http4xx => "http_4xx",
            ErrorKind::Http5xx => "http_5xx",
            ErrorKind::ResponseTooLarge => "response_too_large",
            ErrorKind::BadDecision => "bad_decision",
            ErrorKind::BadHeader => "bad_header",
            ErrorKind::HeaderUnseal => "header_unseal",
            ErrorKind::BadSpec => "bad_spec",
            ErrorKind::Timeout => "timeout",
            ErrorKind::CelEval => "cel_eval",
            ErrorKind::Panic => "panic",
            ErrorKind::ChainBudget => "chain_budget",
            ErrorKind::CircuitOpen => "circuit_open",
            ErrorKind::ApprovalUnavailable => "approval_unavailable",
            ErrorKind::Prompt(kind) => kind,
        }
    }
}

impl std::fmt::Display for ErrorKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl serde::Serialize for ErrorKind {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl ErrorKind {
    /// Every kind but [`ErrorKind::Prompt`], whose labels are the prompt handler's own.
    pub const FIXED: [ErrorKind; 22] = [
        ErrorKind::SpawnFailed,
        ErrorKind::ExitStatus,
        ErrorKind::OutputTooLarge,
        ErrorKind::CwdMissing,
        ErrorKind::RunnerUnavailable,
        ErrorKind::EditionForbidsCommand,
        ErrorKind::SsrfBlocked,
        ErrorKind::Transport,
        ErrorKind::Http3xx,
        ErrorKind::Http4xx,
        ErrorKind::Http5xx,
        ErrorKind::ResponseTooLarge,
        ErrorKind::BadDecision,
        ErrorKind::BadHeader,
        ErrorKind::HeaderUnseal,
        ErrorKind::BadSpec,
        ErrorKind::Timeout,
        ErrorKind::CelEval,
        ErrorKind::Panic,
        ErrorKind::ChainBudget,
        ErrorKind::CircuitOpen,
        ErrorKind::ApprovalUnavailable,
    ];
}

impl ErrorKind {
    /// Whether this error is the hook's *outage* — its handler could not be reached,
    /// spawned or run — which `spec.onError: allow` lets pass. Not an outage: an answer
    /// that is wrong (bad decision, exit status, 4xx, oversize output, a model's unusable
    /// answer), a safeguard (SSRF guard, prompt budget, per-turn cap, chain budget), a
    /// configuration error, or an `ifExpr` error: an agent's input can provoke most of
    /// those, and none of them may open a guard.
    pub fn is_outage(self) -> bool {
        match self {
            ErrorKind::Transport
            | ErrorKind::Http5xx
            | ErrorKind::RunnerUnavailable
            | ErrorKind::SpawnFailed
            | ErrorKind::CircuitOpen
            | ErrorKind::Panic => true,
            // The model provider's side (crate::handlers::prompt::client's labels).
            ErrorKind::Prompt(kind) => matches!(
                kind,
                "client_unavailable"
                    | "transport"
                    | "provider_timeout"
                    | "provider_rate_limited"
                    | "provider_overloaded"
                    | "provider_5xx"
            ),
            _ => false,
        }
    }
}

/// A snake_case string: one of [`ErrorKind::FIXED`]'s words (listed as `examples`) or a
/// prompt run's own label, so not a closed `enum` in the API schema.
impl schemars::JsonSchema for ErrorKind {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "ErrorKind".into()
    }

    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        let words: Vec<&str> = ErrorKind::FIXED.iter().map(|k| k.as_str()).collect();
        schemars::json_schema!({
            "type": "string",
            "pattern": "^[a-z0-9_]+$",
            "description": "Why a run is an error or a timeout: one of the listed words, or a prompt run's own label (prompt_unconfigured, per_turn_cap, budget_exhausted, a provider failure, ...).",
            "examples": words,
        })
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
    pub error_kind: Option<ErrorKind>,
    /// `additionalContext` from an allowing hook (seed: HTTP response body field).
    pub additional_context: Option<String>,
    /// `updatedInput` proposed by the hook; the chain decides whether to honour it.
    pub updated_input: Option<Value>,
    /// `updatedToolOutput` proposed by a `post_tool_use` hook (Claude Code's field name);
    /// the chain decides whether to honour it.
    pub updated_tool_output: Option<Value>,
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
    pub prompt: Option<PromptMetadata>,
    /// The approval an `ask` of a hook with `spec.approval` became: its id and state
    /// (`Pending`, `Approved`, `Rejected`, `Expired`).
    pub approval: Option<(String, &'static str)>,
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
    /// An `ask` with a reason (a person should decide).
    pub fn ask(reason: impl Into<String>) -> Self {
        Self::with(Outcome::Ask, Some(cut(reason.into())), None)
    }
    /// An `error` of `kind` with a reason.
    pub fn error(kind: ErrorKind, reason: impl Into<String>) -> Self {
        Self::with(Outcome::Error, Some(cut(reason.into())), Some(kind))
    }
    /// A `timeout`.
    pub fn timeout(after_ms: u64) -> Self {
        Self::with(
            Outcome::Timeout,
            Some(format!("no answer within {after_ms} ms")),
            Some(ErrorKind::Timeout),
        )
    }
    /// The answer of an open breaker (CONTRACT §6.2): the handler did not run, and the hook
    /// is answered as an `error` — `block` on a blocking event, whatever `onTimeout` says —
    /// with reason [`agenthooks_crds::rules::breaker::REASON_CIRCUIT_OPEN`] and kind
    /// `circuit_open`. An open breaker cannot know what the handler would have answered,
    /// and a caller can choose inputs that make a handler slow: answering as a timeout
    /// would let `onTimeout: allow` pass calls the handler refuses.
    pub fn circuit_open() -> Self {
        Self::with(
            Outcome::Error,
            Some(agenthooks_crds::rules::breaker::REASON_CIRCUIT_OPEN.to_string()),
            Some(ErrorKind::CircuitOpen),
        )
    }
    fn with(outcome: Outcome, reason: Option<String>, error_kind: Option<ErrorKind>) -> Self {
        HandlerResult {
            outcome,
            reason,
            error_kind,
            additional_context: None,
            updated_input: None,
            updated_tool_output: None,
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

/// What a prompt run tells the audit row (CONTRACT §7.5: `prompt_model`,
/// `prompt_tokens`, `injection_detected`) and the dispatch response (`hooks[].prompt`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PromptMetadata {
    /// The provider's model name the alias resolved to.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// Tokens the provider reported for this run (input + output); 0 on a cache hit;
    /// absent when no call was answered.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tokens: Option<i64>,
    /// The model's `injection_detected`, when it answered with a valid `decide`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub injection_detected: Option<bool>,
    /// Answered from the decision cache.
    pub cache_hit: bool,
    /// The model proposed an `updated_input` and it was dropped (CONTRACT §5 prompt.2):
    /// the hook did not opt in (`allowRewrite`, master namespace only) or the model
    /// reported `injection_detected`. The decision stands; the call is not rewritten.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub rewrite_denied: bool,
}
