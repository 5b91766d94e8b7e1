//! The decision path's end of the audit trail (CONTRACT §7.6; issue 5 "Durability:
//! nothing lost"): [`AuditSink::record`] hands one [`RunRecord`] per hook run to the
//! audit writer ([`super::writer`]) without waiting, hashing, redacting, sealing or
//! formatting anything. The writer builds the `hook_executions` rows and writes them in
//! batches, spooling to disk while the database is unreachable.
//!
//! Never changes a decision and never blocks: a full queue (or a stopped writer) drops
//! the record, loudly — `agenthooks_audit_rows_dropped_total`, an error log with the
//! seed's key `security.hook.audit_write_failed` (at most one line per
//! [`DROP_LOG_INTERVAL`]) and `/readyz` saying `degraded`.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use agenthooks_crds::HookEvent;
use bytes::Bytes;
use chrono::{DateTime, Utc};
use serde::Serialize;
use tokio::sync::mpsc;

use super::error_detail::ErrorDetailKeys;
use super::store::AuditStore;
use super::writer::WriterHandle;
use crate::decision::outcome::PromptMetadata;
use crate::decision::outcome::{HandlerResult, Outcome};
use crate::event::Event;
use crate::hookset::LoadedHook;
use crate::metrics::Metrics;
use crate::report::counters::unix_ms_now;

/// At most one `audit rows dropped` error line per this interval (the count in between
/// is in the next line and in `agenthooks_audit_rows_dropped_total`).
pub const DROP_LOG_INTERVAL: Duration = Duration::from_secs(5);
/// `/readyz` reports `degraded` for this long after the last dropped row.
pub const DEGRADED_AFTER_DROP: Duration = Duration::from_secs(60);

/// One hook run, as the decision path hands it over: cheap clones and moves only
/// (an `Arc` of the hook, the `Bytes` of the event JSON the hook saw, the error text
/// of a run that did not allow). The writer turns it into an
/// [`super::row::AuditRow`]: event id, tenant and session, tool name and input come
/// from `event_json`.
#[derive(Debug, Clone)]
pub struct RunRecord {
    /// The hook that ran (uid, namespace, name).
    pub hook: Arc<LoadedHook>,
    /// The lifecycle event.
    pub event: HookEvent,
    /// The exact event JSON the hook saw (after any earlier rewrite of `tool_input`).
    pub event_json: Bytes,
    /// What the hook came to (CONTRACT §7.1: allow|block|error|timeout).
    pub outcome: Outcome,
    /// Wall time of the run.
    pub duration: Duration,
    /// When the run finished.
    pub finished_at: DateTime<Utc>,
    /// The reason of a run that did not allow (block reason, error, timeout), in full;
    /// redacted, cut and sealed by the writer. `None` for an allow.
    pub error: Option<String>,
    /// Facts for the `metadata` column (CONTRACT §7.5).
    pub facts: RunFacts,
    /// W3C trace id (32 lowercase hex) of the run's span, when traced (CONTRACT §8.1).
    pub trace_id: Option<String>,
}

/// The facts of a run that go into `metadata` (CONTRACT §7.5), each `None` where it does
/// not apply.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RunFacts {
    /// `true` when the hook has a tool matcher (which matched, or it would not have run).
    pub matcher_matched: Option<bool>,
    /// The hook's CEL filter result when it has one: `Some(true)` when it selected the
    /// event, `None` when its evaluation failed (the run is then an error).
    pub cel_eval_result: Option<bool>,
    /// Bytes the command wrote to stdout.
    pub stdout_len: Option<u64>,
    /// HTTP status of the hook's answer.
    pub http_status: Option<u16>,
    /// Model, tokens and `injection_detected` of a prompt run.
    pub prompt: Option<PromptMetadata>,
    /// The authenticated caller whose event it was (CONTRACT §9.1).
    pub caller: Option<Arc<str>>,
    /// The approval id and state of an `ask` of a hook with `spec.approval`.
    pub approval: Option<(String, &'static str)>,
}

impl RunRecord {
    /// The record of a hook run that finished with `result` after `elapsed`;
    /// `cel_failed` when the hook's CEL filter failed to evaluate (the run is that
    /// error). `trace_id` is left `None` for the caller to fill.
    pub fn of_run(
        hook: &Arc<LoadedHook>,
        event: &Event,
        event_json: &Bytes,
        result: &HandlerResult,
        elapsed: Duration,
        cel_failed: bool,
    ) -> RunRecord {
        let error = match result.outcome {
            Outcome::Allow => None,
            _ => result
                .reason
                .clone()
                .or_else(|| result.error_kind.map(|k| k.as_str().to_owned())),
        };
        RunRecord {
            hook: Arc::clone(hook),
            event: event.event,
            event_json: event_json.clone(),
            outcome: result.outcome,
            duration: elapsed,
            finished_at: Utc::now(),
            error,
            facts: RunFacts {
                matcher_matched: hook.compiled.matcher.as_ref().map(|_| true),
                cel_eval_result: match (&hook.compiled.if_expr, cel_failed) {
                    (Some(_), false) => Some(true),
                    _ => None,
                },
                stdout_len: result.metadata.stdout_len.map(|n| n as u64),
                http_status: result.metadata.http_status,
                prompt: result.metadata.prompt.clone(),
                caller: event.caller.clone(),
                approval: result.metadata.approval.clone(),
            },
            trace_id: None,
        }
    }

    /// The record of a hook that was selected but never ran (the chain budget was spent
    /// first, CONTRACT §4.3): `outcome` with `reason` and no duration. An auditor finds
    /// every hook the response lists.
    pub fn not_run(
        hook: &Arc<LoadedHook>,
        event: &Event,
        event_json: &Bytes,
        outcome: Outcome,
        reason: &str,
    ) -> RunRecord {
        RunRecord {
            hook: Arc::clone(hook),
            event: event.event,
            event_json: event_json.clone(),
            outcome,
            duration: Duration::ZERO,
            finished_at: Utc::now(),
            error: Some(reason.to_owned()),
            facts: RunFacts {
                matcher_matched: hook.compiled.matcher.as_ref().map(|_| true),
                cel_eval_result: hook.compiled.if_expr.as_ref().map(|_| true),
                caller: event.caller.clone(),
                ..Default::default()
            },
            trace_id: None,
        }
    }
}

/// Where the audit trail stands, for `/readyz` and logs.
#[derive(Debug, Clone, PartialEq, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AuditStatus {
    /// `ok` (rows reach the database), `spooling` (the database is unreachable, or has
    /// not been reached yet since start; rows wait in the spool) or `degraded` (the spool
    /// is full or rows were dropped in the last minute). Never `ok` before the first
    /// successful connect.
    #[schemars(extend("enum" = ["ok", "spooling", "degraded"]))]
    pub state: &'static str,
    /// `sqlite` or `postgres`.
    #[schemars(extend("enum" = ["sqlite", "postgres"]))]
    pub backend: &'static str,
    /// Rows waiting in memory.
    pub queued_rows: u64,
    /// Rows and bytes waiting in the spool, and its bound.
    pub spool_rows: u64,
    pub spool_bytes: u64,
    pub spool_max_bytes: u64,
    /// Rows dropped since start (only when even the spool was full).
    pub dropped_rows: u64,
    /// What is wrong, for people; `None` when `ok`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// State shared by the sink, the writer and `/readyz`. Queued rows, spool rows and bytes
/// and dropped rows are not kept here: [`AuditStatus`] reads them from the sink's
/// [`Metrics`] (one dispatcher, one sink, one set of metrics).
#[derive(Debug, Default)]
pub struct AuditHealth {
    /// The last write to the database failed, or it was never reached (rows go to the
    /// spool).
    pub(crate) db_down: AtomicBool,
    /// No connection to the database yet since start (PostgreSQL, connected in the
    /// background): rows go to the spool and the writer leaves connecting to that task.
    pub(crate) connecting: AtomicBool,
    /// Failed connect attempts since start (while `connecting`).
    pub(crate) connect_failures: AtomicU64,
    /// The last spool append refused rows for the bound (less room was left than they
    /// needed).
    pub(crate) spool_full: AtomicBool,
    /// Bytes of the smallest row the last refusing append could not fit.
    pub(crate) spool_refused_row_bytes: AtomicU64,
    pub(crate) spool_max_bytes: AtomicU64,
    /// Bytes of `event_json` held by queued runs (each run counts its own, shared or not).
    pub(crate) queued_bytes: AtomicUsize,
    /// When the last row was dropped (unix ms); 0 before any.
    last_drop_ms: AtomicU64,
    dropped_unlogged: AtomicU64,
    last_drop_log_ms: AtomicU64,
}

impl AuditHealth {
    /// Counts `n` dropped rows: metric, `degraded` for [`DEGRADED_AFTER_DROP`], and an
    /// error line at most every [`DROP_LOG_INTERVAL`] (with the count since the last).
    pub(crate) fn dropped(&self, metrics: &Metrics, n: u64, why: &'static str) {
        if n == 0 {
            return;
        }
        metrics.audit_rows_dropped.inc_by(n);
        let now = unix_ms_now();
        self.last_drop_ms.store(now, Ordering::Relaxed);
        self.dropped_unlogged.fetch_add(n, Ordering::Relaxed);
        let last = self.last_drop_log_ms.load(Ordering::Relaxed);
        if now.saturating_sub(last) >= DROP_LOG_INTERVAL.as_millis() as u64
            && self
                .last_drop_log_ms
                .compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
        {
            let count = self.dropped_unlogged.swap(0, Ordering::Relaxed);
            tracing::error!(
                target: "security.hook.audit_write_failed",
                dropped = count, why,
                "audit rows dropped: {why}; hook_executions is missing these runs (agenthooks_audit_rows_dropped_total)"
            );
        }
    }

    fn status(&self, backend: &'static str, metrics: &Metrics) -> AuditStatus {
        // A gauge may dip below zero for a moment (the writer took a run before the sink
        // counted it in): never show that as a huge count.
        let gauge = |g: &prometheus::IntGauge| u64::try_from(g.get()).unwrap_or(0);
        let spool_max_bytes = self.spool_max_bytes.load(Ordering::Relaxed);
        let spool_bytes = gauge(&metrics.audit_spool_bytes);
        let dropped_rows = metrics.audit_rows_dropped.get();
        let last_drop = self.last_drop_ms.load(Ordering::Relaxed);
        let recently_dropped = dropped_rows > 0
            && unix_ms_now().saturating_sub(last_drop) < DEGRADED_AFTER_DROP.as_millis() as u64;
        let (state, reason) = if self.spool_full.load(Ordering::Relaxed) {
            let need = self.spool_refused_row_bytes.load(Ordering::Relaxed);
            (
                "degraded",
                Some(format!(
                    "audit spool full ({spool_bytes} of {spool_max_bytes} bytes used, {} left; a {need}-byte row did not fit) and the database unreachable: hook runs are not recorded",
                    spool_max_bytes.saturating_sub(spool_bytes)
                )),
            )
        } else if recently_dropped {
            (
                "degraded",
                Some(format!(
                    "{dropped_rows} audit rows dropped since start, the last less than {} s ago",
                    DEGRADED_AFTER_DROP.as_secs()
                )),
            )
        } else if self.connecting.load(Ordering::Acquire) {
            let failed = self.connect_failures.load(Ordering::Relaxed);
            let why = if failed == 0 {
                "audit database not connected yet since start (first attempt under way)".to_owned()
            } else {
                format!(
                    "audit database not connected since start ({failed} connect attempts failed)"
                )
            };
            ("spooling", Some(format!("{why}: rows wait in the spool")))
        } else if self.db_down.load(Ordering::Relaxed) {
            (
                "spooling",
                Some("audit database unreachable: rows wait in the spool".to_owned()),
            )
        } else {
            ("ok", None)
        };
        AuditStatus {
            state,
            backend,
            queued_rows: gauge(&metrics.audit_queue_depth),
            spool_rows: gauge(&metrics.audit_spool_rows),
            spool_bytes,
            spool_max_bytes,
            dropped_rows,
            reason,
        }
    }
}

/// What [`AuditSink::shutdown`] did with the rows still queued.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FlushReport {
    /// Rows inserted into the database during the flush.
    pub written: u64,
    /// Rows moved to the spool (the database was unreachable); replayed at next start.
    pub spooled: u64,
    /// Rows dropped (the spool was full too).
    pub dropped: u64,
    /// The writer did not finish within the deadline.
    pub timed_out: bool,
}

pub(crate) struct SinkShared {
    pub(crate) tx: mpsc::Sender<RunRecord>,
    pub(crate) max_queued_bytes: usize,
    pub(crate) store: Arc<OnceLock<AuditStore>>,
    pub(crate) backend: &'static str,
    pub(crate) keys: Option<ErrorDetailKeys>,
    pub(crate) health: Arc<AuditHealth>,
    pub(crate) metrics: Metrics,
    pub(crate) writer: Mutex<Option<WriterHandle>>,
}

/// The handle on the audit trail the engine carries: cheap to clone, disabled by
/// default ([`AuditSink::disabled`]; `--audit-db off`, `check`, tests). Started by
/// [`super::writer::start`].
#[derive(Clone, Default)]
pub struct AuditSink {
    pub(crate) inner: Option<Arc<SinkShared>>,
}

impl std::fmt::Debug for AuditSink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.inner {
            None => write!(f, "AuditSink(disabled)"),
            Some(s) => write!(f, "AuditSink({})", s.backend),
        }
    }
}

impl AuditSink {
    /// A sink that records nothing.
    pub fn disabled() -> AuditSink {
        AuditSink { inner: None }
    }

    /// Whether rows are recorded at all (callers skip building a [`RunRecord`] if not).
    pub fn is_enabled(&self) -> bool {
        self.inner.is_some()
    }

    /// Queues one run for its row. Never waits and never fails the caller: when the
    /// in-memory queue is full (rows or bytes) or the writer has stopped, the run is
    /// counted as dropped (see the module docs).
    pub fn record(&self, run: RunRecord) {
        let Some(s) = &self.inner else {
            return;
        };
        let len = run.event_json.len();
        let before = s.health.queued_bytes.fetch_add(len, Ordering::Relaxed);
        if before + len > s.max_queued_bytes {
            s.health.queued_bytes.fetch_sub(len, Ordering::Relaxed);
            s.health
                .dropped(&s.metrics, 1, "the in-memory audit queue is full (bytes)");
            return;
        }
        match s.tx.try_send(run) {
            Ok(()) => s.metrics.audit_queue_depth.inc(),
            Err(e) => {
                s.health.queued_bytes.fetch_sub(len, Ordering::Relaxed);
                let why = match e {
                    mpsc::error::TrySendError::Full(_) => {
                        "the in-memory audit queue is full (rows)"
                    }
                    mpsc::error::TrySendError::Closed(_) => "the audit writer has stopped",
                };
                s.health.dropped(&s.metrics, 1, why);
            }
        }
    }

    /// The audit database, for reading history (`GET /v1/executions`). `None` when
    /// audit is off or the database has not answered yet since start.
    pub fn store(&self) -> Option<&AuditStore> {
        self.inner.as_ref()?.store.get()
    }

    /// The `error_detail` keys (`--audit-key-file`); `None` without any.
    pub fn keys(&self) -> Option<&ErrorDetailKeys> {
        self.inner.as_ref()?.keys.as_ref()
    }

    /// Where the audit trail stands (`None` when audit is off).
    pub fn status(&self) -> Option<AuditStatus> {
        let s = self.inner.as_ref()?;
        Some(s.health.status(s.backend, &s.metrics))
    }

    /// Stops the writer after it wrote what is queued now — to the database, or to the
    /// spool when the database does not answer — waiting at most `deadline`. Runs
    /// recorded afterwards are dropped (counted). A second call does nothing.
    pub async fn shutdown(&self, deadline: Duration) -> FlushReport {
        let Some(s) = &self.inner else {
            return FlushReport::default();
        };
        let handle = s.writer.lock().unwrap_or_else(|p| p.into_inner()).take();
        match handle {
            Some(h) => h.finish(deadline).await,
            None => FlushReport::default(),
        }
    }
}
