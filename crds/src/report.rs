//! What dispatchers tell the operator: breaker trips and execution counts
//! (`POST /v1/report` on the operator's sync port), and the budget accounting calls
//! (`POST /v1/budget/reserve`, `POST /v1/budget/settle`).
//!
//! Design (issue "Safeguards that hold across replicas"): dispatchers hold no API-server
//! credentials. They report to the operator's leader, which is the one writer of
//! AgentHook and TenantHookBudget status. A report is acknowledged (`200`) only once
//! what it carries is written to the API server, so a dispatcher keeps (and merges into
//! its next report) anything not acknowledged: no count is lost when the operator is
//! away or fails over. Every call answers `503` on a replica that is not the synced
//! leader; the dispatcher then tries its next operator URL.

use serde::{Deserialize, Serialize};

/// `POST /v1/report` body.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct Report {
    /// The dispatcher's stable id (as in the snapshot poll).
    pub dispatcher: String,
    /// Random per report attempt batch; a report retried after a lost answer carries the
    /// same id, and the operator applies a given id once.
    pub report_id: String,
    /// Breakers this dispatcher tripped since its last acknowledged report.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub trips: Vec<TripReport>,
    /// Execution counts since its last acknowledged report, one entry per hook.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub executions: Vec<ExecutionDelta>,
    /// The breaker's view of (hook, tenant) pairs whose run of faults changed since the
    /// last report: the operator merges these across dispatchers by time and trips a
    /// (hook, tenant) whose last [`BREAKER_THRESHOLD`] outcomes, over every dispatcher, are
    /// faults within [`BREAKER_WINDOW_SECONDS`] ([`crate::rules::breaker`], CONTRACT §6).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub breaker: Vec<BreakerObservation>,
    /// Breakers a probe of this dispatcher closed since its last acknowledged report
    /// (CONTRACT §6.4: a handler answer closes the breaker everywhere).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub closes: Vec<CloseReport>,
    /// The hooks this dispatcher holds but cannot load (CONTRACT §10.4), the complete
    /// list as of its latest snapshot, not a delta: present (even empty) means "replace
    /// what you know of me with this", absent means "no news". The dispatcher sends it
    /// with a report of its own (nothing else in it) after every snapshot whose list
    /// differs from the one the operator acknowledged, and once more after an operator
    /// epoch change, before it polls saying it holds that snapshot; the operator keeps it
    /// per dispatcher (in memory, with the dispatcher's liveness) and holds a hook
    /// reported at its current generation by a live dispatcher at `Ready=False`
    /// `HookUnavailable`. Dedup and acknowledgement are those of any report; a resend
    /// is harmless (replacing with the same list).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unavailable: Option<Vec<UnavailableReport>>,
}

/// Longest `error` of an [`UnavailableReport`], in bytes.
pub const MAX_UNAVAILABLE_ERROR_BYTES: usize = 1024;

/// Most entries in [`Report::unavailable`].
pub const MAX_UNAVAILABLE_HOOKS: usize = 10_000;

/// One hook a dispatcher cannot load: the version it holds and why (its own
/// validation: edition, regex or CEL compile).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq, PartialOrd, Ord)]
#[serde(rename_all = "camelCase")]
pub struct UnavailableReport {
    pub uid: String,
    pub namespace: String,
    pub name: String,
    /// The generation the dispatcher's snapshot holds.
    pub generation: i64,
    /// Why, at most [`MAX_UNAVAILABLE_ERROR_BYTES`] (cut on a character boundary).
    pub error: String,
}

/// Faults in a row that trip a breaker: [`crate::rules::breaker::FAULT_THRESHOLD`].
pub const BREAKER_THRESHOLD: usize = crate::rules::breaker::FAULT_THRESHOLD;
/// Window, in seconds, those faults must fit in: [`crate::rules::breaker::WINDOW_MS`].
pub const BREAKER_WINDOW_SECONDS: i64 = crate::rules::breaker::WINDOW_MS / 1000;

/// One dispatcher's breaker run of one hook for one tenant: when the handler last answered
/// (`allow` or `block`), and the faults (`timeout`, `error`) it saw since, oldest first.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct BreakerObservation {
    pub uid: String,
    pub namespace: String,
    pub name: String,
    pub generation: i64,
    /// As in [`TripReport::reset_token`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reset_token: Option<String>,
    /// The tenant of the events (a breaker is kept per hook and tenant, CONTRACT §6.3).
    pub tenant: String,
    /// The handler's last answer for this tenant on this dispatcher, RFC 3339 UTC (ms).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_answer_at: Option<String>,
    /// The faults after `last_answer_at`, oldest first; at most [`BREAKER_THRESHOLD`] (the
    /// newest ones). Answers are never in it (§6.1).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub run: Vec<RunOutcome>,
}

/// A fault in a breaker run.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct RunOutcome {
    /// When, RFC 3339 UTC (ms precision).
    pub at: String,
    /// `timeout` (true) or `error` (false).
    #[serde(default)]
    pub timeout: bool,
}

/// One breaker trip of one hook for one tenant (CONTRACT §6.2, §6.5).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct TripReport {
    pub uid: String,
    pub namespace: String,
    pub name: String,
    /// The generation that tripped; a report for an older generation is ignored.
    pub generation: i64,
    /// The `agenthooks.io/reset-breaker` value of the snapshot hook that tripped
    /// ([`crate::snapshot::SnapshotHook::reset_token`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reset_token: Option<String>,
    /// The tenant whose events faulted.
    pub tenant: String,
    /// When it tripped, RFC 3339 UTC.
    pub tripped_at: String,
    /// Whether the tripping run had an error ([`crate::rules::breaker::fails_closed`]);
    /// informational: an open breaker always answers as an error.
    #[serde(default)]
    pub fail_closed: bool,
    /// Why, one sentence (e.g. "5 timeouts and 0 errors of the handler in a row ...").
    pub reason: String,
}

/// A breaker a half-open probe closed (CONTRACT §6.4).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct CloseReport {
    pub uid: String,
    pub namespace: String,
    pub name: String,
    pub generation: i64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reset_token: Option<String>,
    pub tenant: String,
    /// When the trip this probe ended had opened the breaker, RFC 3339 UTC: a breaker that
    /// opened later (a newer trip) stays open.
    pub opened_at: String,
    /// When the probe answered, RFC 3339 UTC.
    pub closed_at: String,
}

/// Executions of one hook since the last acknowledged report (CONTRACT §7; issue point 4).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct ExecutionDelta {
    pub uid: String,
    pub namespace: String,
    pub name: String,
    #[serde(default)]
    pub allow: u64,
    #[serde(default)]
    pub block: u64,
    #[serde(default)]
    pub error: u64,
    #[serde(default)]
    pub timeout: u64,
    /// Runs that asked for a person's decision (issue 16). Left out when 0, so an
    /// operator from before `ask` reads every report that has none.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub ask: u64,
    /// The latest run among these, RFC 3339 UTC.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_execution_time: Option<String>,
    /// Its outcome: `allow`, `block`, `ask`, `error` or `timeout`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_decision: Option<String>,
}

/// `POST /v1/report` answer (200): what was applied.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct ReportAck {
    /// Trips recorded (a trip for a hook already open, gone or at another generation is
    /// acknowledged but not counted).
    pub trips: usize,
    /// Hooks whose `status.executions` were written.
    pub executions: usize,
    /// True when this `reportId` had already been applied (nothing done twice).
    #[serde(default)]
    pub duplicate: bool,
}

/// Refusal reason: the tenant has no TenantHookBudget.
pub const REASON_BUDGET_NOT_FOUND: &str = "BudgetNotFound";
/// Refusal reason: what remains (after reservations in flight) cannot cover the call.
pub const REASON_BUDGET_EXHAUSTED: &str = "BudgetExhausted";
/// Refusal reason: the budget could not be reached or read (fail closed).
pub const REASON_BUDGET_UNAVAILABLE: &str = "BudgetUnavailable";

/// `POST /v1/budget/reserve` body: hold `tokens` of `tenant`'s budget before a costly
/// call (CONTRACT §5.5: the call's bound, prompt estimate + max output tokens).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ReserveRequest {
    pub dispatcher: String,
    pub tenant: String,
    /// Tokens to hold, > 0.
    pub tokens: i64,
    /// The hook asking, `namespace/name` (logs and Events only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hook: Option<String>,
}

/// `POST /v1/budget/reserve` answer (200 whether granted or not).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ReserveResponse {
    pub granted: bool,
    /// Set when granted: pass it to settle.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reservation_id: Option<String>,
    /// Set when refused: [`REASON_BUDGET_NOT_FOUND`] or [`REASON_BUDGET_EXHAUSTED`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Tokens left after this reservation and every other one in flight (never below 0).
    pub remaining: i64,
    /// The budget, `namespace/name`, when one applies.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub budget: Option<String>,
}

/// `POST /v1/budget/settle` body: the real cost of a reserved call; `tokens: 0` releases
/// a reservation whose call was never made or failed before the provider counted
/// anything (case "release on failure").
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct SettleRequest {
    pub dispatcher: String,
    pub tenant: String,
    pub reservation_id: String,
    /// Tokens the provider reported, >= 0.
    pub tokens: i64,
}

/// `POST /v1/budget/settle` answer (200 once `used` is written to the budget's status).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct SettleResponse {
    /// `status.used` after this settle.
    pub used: i64,
    /// `status.remaining` after this settle.
    pub remaining: i64,
    /// `Ok`, `Warning` or `Exhausted`.
    pub state: String,
    /// True when this reservation had already been settled (nothing done twice).
    #[serde(default)]
    pub duplicate: bool,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}
