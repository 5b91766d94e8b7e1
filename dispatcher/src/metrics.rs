//! Prometheus series of the dispatcher (CONTRACT §8.2), named `agenthooks_<noun>_<unit|total>`.

use std::sync::Arc;
use std::time::Duration;

use agenthooks_crds::HookEvent;
use agenthooks_crds::agenthook::HandlerType;

use crate::decision::outcome::ErrorKind;
use crate::decision::outcome::Outcome;
use prometheus::{
    Encoder, Histogram, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGauge, Opts,
    Registry, TextEncoder,
};

/// Every series the dispatcher exports, registered in one registry.
#[derive(Clone)]
pub struct Metrics {
    pub registry: Registry,
    /// Hook runs by `decision` (allow|block|error|timeout), `handler`, `event`.
    pub executions: IntCounterVec,
    /// Hook run duration in seconds by `handler`.
    pub hook_duration: HistogramVec,
    /// Whole decision duration in seconds by `event` (blocking events).
    pub decision_duration: HistogramVec,
    /// Handler errors by `kind` (spawn_failed, ssrf_blocked, http_4xx, ...).
    pub handler_errors: IntCounterVec,
    /// Events refused for `depth > 3` (seed `security.hook.loop_depth_exceeded`).
    pub loop_depth_exceeded: IntCounter,
    /// Stops let through because the session's stop was refused `--stop-block-limit`
    /// times since its last prompt (issue 16, `hooks.stop_bound_reached`).
    pub stop_bound_reached: IntCounter,
    /// `updatedInput` dropped: from hooks outside the master namespace, or from a prompt
    /// judge not allowed to rewrite (CONTRACT §4.5, §5 prompt.2).
    pub mutation_denied: IntCounter,
    /// Circuit-breaker trips (seed `security.hook.circuit_breaker`).
    pub breaker_trips: IntCounter,
    /// Breakers a half-open probe of this dispatcher closed (CONTRACT §6.4).
    pub breaker_closes: IntCounter,
    /// Non-blocking hook runs shed because the background queue was full.
    pub background_shed: IntCounter,
    /// Requests answered 503 at once because the port already served its concurrency
    /// limit (`--max-concurrent-requests`, CONTRACT §10.2).
    pub requests_shed: IntCounter,
    /// Calls answered on the runtimes' native routes (`/v1/hooks/{dialect}`), by `dialect`
    /// and `answer` (`allow`, `block`, `no_opinion` for a runtime event with no
    /// counterpart among ours).
    pub native_hook_calls: IntCounterVec,
    /// Version of the snapshot or hooks file served.
    pub snapshot_version: IntGauge,
    /// Hooks served.
    pub hooks_loaded: IntGauge,
    /// `agenthooks_hooks_unavailable`: hooks of the served set this dispatcher could not
    /// load (CONTRACT §10.4); each answers the blocking events it could apply to `block`.
    pub hooks_unavailable: IntGauge,
    /// `agenthooks_hook_unavailable_events_total{event, result}`: events an unavailable
    /// hook could apply to, `result` `blocked` (a blocking event answered `block`
    /// `HookUnavailable`) or `skipped` (a non-blocking event: nothing ran for the hook).
    pub hook_unavailable_events: IntCounterVec,
    /// Failed snapshot polls.
    pub sync_errors: IntCounter,
    /// Seconds between the last two successful snapshot polls that brought changes.
    pub sync_lag: Histogram,
    /// Bodies of the operator taken or refused, by `body` (`snapshot`: a complete one,
    /// `delta`) and `result` (`applied`, `rejected`: unreadable, or a delta that does not
    /// apply to what this dispatcher holds; it then asks for a complete snapshot).
    pub sync_updates: IntCounterVec,
    /// `POST /v1/report` sends that no operator URL acknowledged.
    pub report_failures: IntCounter,
    /// Reports acknowledged by the operator.
    pub reports_sent: IntCounter,
    /// Hooks whose counts wait for an acknowledgement (pending plus in flight).
    pub report_pending_hooks: IntGauge,
    /// Hook runs whose counts were dropped: reports failing and the pending cap reached.
    pub report_dropped_executions: IntCounter,
    /// Budget reservations granted.
    pub budget_grants: IntCounter,
    /// Budget reservations refused, by `reason` (BudgetNotFound, BudgetExhausted,
    /// BudgetUnavailable, InvalidTokens).
    pub budget_refusals: IntCounterVec,
    /// Settles (or releases) not acknowledged before their deadline.
    pub budget_settle_failures: IntCounter,
    /// Prompt hook runs answered from the decision cache (CONTRACT §5 prompt.3).
    pub prompt_cache_hits: IntCounter,
    /// Evaluator calls by `provider` (name in the providers file) and `result` (`ok`,
    /// or a failure kind: `provider_timeout`, `provider_5xx`, `provider_rate_limited`...).
    pub prompt_calls: IntCounterVec,
    /// Unusable evaluator answers and failed calls, by `kind` (seed
    /// `security.hook.prompt_parse_error`).
    pub prompt_parse_errors: IntCounterVec,
    /// Tokens the providers reported (input + output), by `provider`.
    pub prompt_tokens: IntCounterVec,
    /// Hook runs waiting in memory for the audit writer (CONTRACT §8.2 "audit queue depth").
    pub audit_queue_depth: IntGauge,
    /// `hook_executions` rows inserted (replays of rows already stored are not counted).
    pub audit_rows_written: IntCounter,
    /// Failed audit writes: database unreachable, timed out or refusing rows (seed
    /// `security.hook.audit_write_failed`).
    pub audit_write_failures: IntCounter,
    /// Bytes in the audit spool (rows waiting for the database on disk).
    pub audit_spool_bytes: IntGauge,
    /// Rows in the audit spool.
    pub audit_spool_rows: IntGauge,
    /// Audit rows lost: the spool was full (or unwritable) while the database was down,
    /// the in-memory queue was full, or the database refused a row.
    pub audit_rows_dropped: IntCounter,
    /// Seconds per successful audit batch insert.
    pub audit_batch_seconds: Histogram,
    /// The hot series, resolved once: `executions` by [outcome][handler][event],
    /// `hook_duration` by [handler], `decision_duration` by [event].
    hot: Arc<HotSeries>,
}

struct HotSeries {
    executions: Vec<IntCounter>,
    hook_duration: [Histogram; 3],
    decision_duration: Vec<Histogram>,
}

const OUTCOMES: [Outcome; 5] = [
    Outcome::Allow,
    Outcome::Block,
    Outcome::Error,
    Outcome::Timeout,
    Outcome::Ask,
];
const HANDLERS: [HandlerType; 3] = [HandlerType::Command, HandlerType::Http, HandlerType::Prompt];

fn handler_index(h: HandlerType) -> usize {
    HANDLERS.iter().position(|x| *x == h).unwrap_or(0)
}

fn outcome_index(o: Outcome) -> usize {
    OUTCOMES.iter().position(|x| *x == o).unwrap_or(0)
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    /// Creates and registers every series.
    pub fn new() -> Metrics {
        let registry = Registry::new();
        let buckets = vec![
            0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
        ];
        let executions = IntCounterVec::new(
            Opts::new(
                "agenthooks_executions_total",
                "Hook runs by decision, handler and event",
            ),
            &["decision", "handler", "event"],
        )
        .unwrap();
        let hook_duration = HistogramVec::new(
            HistogramOpts::new(
                "agenthooks_hook_duration_seconds",
                "Duration of one hook run",
            )
            .buckets(buckets.clone()),
            &["handler"],
        )
        .unwrap();
        let decision_duration = HistogramVec::new(
            HistogramOpts::new(
                "agenthooks_decision_duration_seconds",
                "Duration of a blocking decision",
            )
            .buckets(buckets.clone()),
            &["event"],
        )
        .unwrap();
        let hot = Arc::new(HotSeries {
            executions: OUTCOMES
                .iter()
                .flat_map(|o| {
                    HANDLERS
                        .iter()
                        .flat_map(move |h| HookEvent::ALL.iter().map(move |e| (*o, *h, *e)))
                })
                .map(|(o, h, e)| {
                    executions.with_label_values(&[o.as_str(), h.as_str(), e.as_str()])
                })
                .collect(),
            hook_duration: HANDLERS.map(|h| hook_duration.with_label_values(&[h.as_str()])),
            decision_duration: HookEvent::ALL
                .iter()
                .map(|e| decision_duration.with_label_values(&[e.as_str()]))
                .collect(),
        });
        let m = Metrics {
            hot,
            executions: executions.clone(),
            hook_duration: hook_duration.clone(),
            decision_duration: decision_duration.clone(),
            handler_errors: IntCounterVec::new(
                Opts::new("agenthooks_handler_errors_total", "Hook errors by kind"),
                &["kind"],
            )
            .unwrap(),
            loop_depth_exceeded: IntCounter::new(
                "agenthooks_loop_depth_exceeded_total",
                "Events refused for sub-agent depth over 3",
            )
            .unwrap(),
            stop_bound_reached: IntCounter::new(
                "agenthooks_stop_bound_reached_total",
                "Stops let through because the session's stop was refused --stop-block-limit times since its last prompt",
            )
            .unwrap(),
            mutation_denied: IntCounter::new(
                "agenthooks_mutation_denied_total",
                "updatedInput dropped from non-master hooks",
            )
            .unwrap(),
            breaker_trips: IntCounter::new(
                "agenthooks_breaker_trips_total",
                "Breakers (hook, tenant) tripped by five faults of the handler in a row",
            )
            .unwrap(),
            breaker_closes: IntCounter::new(
                "agenthooks_breaker_closes_total",
                "Breakers (hook, tenant) closed by a half-open probe that the handler answered",
            )
            .unwrap(),
            background_shed: IntCounter::new(
                "agenthooks_background_shed_total",
                "Non-blocking hook runs shed: queue full",
            )
            .unwrap(),
            requests_shed: IntCounter::new(
                "agenthooks_requests_shed_total",
                "Requests answered 503 at once: the port's concurrency limit was reached",
            )
            .unwrap(),
            native_hook_calls: IntCounterVec::new(
                Opts::new(
                    "agenthooks_native_hook_calls_total",
                    "Calls answered on the runtimes' native hook routes, by dialect and answer (allow, block, no_opinion)",
                ),
                &["dialect", "answer"],
            )
            .unwrap(),
            snapshot_version: IntGauge::new(
                "agenthooks_snapshot_version",
                "Version of the hooks served",
            )
            .unwrap(),
            hooks_loaded: IntGauge::new("agenthooks_hooks_loaded", "Hooks served").unwrap(),
            hooks_unavailable: IntGauge::new(
                "agenthooks_hooks_unavailable",
                "Hooks of the served set this dispatcher could not load (their blocking events are blocked)",
            )
            .unwrap(),
            hook_unavailable_events: IntCounterVec::new(
                Opts::new(
                    "agenthooks_hook_unavailable_events_total",
                    "Events an unavailable hook could apply to, by event and result (blocked, skipped)",
                ),
                &["event", "result"],
            )
            .unwrap(),
            sync_errors: IntCounter::new("agenthooks_sync_errors_total", "Failed snapshot polls")
                .unwrap(),
            sync_lag: Histogram::with_opts(
                HistogramOpts::new(
                    "agenthooks_sync_lag_seconds",
                    "Time from a poll being answered to the new hooks being served",
                )
                .buckets(buckets),
            )
            .unwrap(),
            sync_updates: {
                let v = IntCounterVec::new(
                    Opts::new(
                        "agenthooks_sync_updates_total",
                        "Operator answers taken or refused, by body (snapshot, delta) and result (applied, rejected)",
                    ),
                    &["body", "result"],
                )
                .unwrap();
                for body in ["snapshot", "delta"] {
                    for result in ["applied", "rejected"] {
                        v.with_label_values(&[body, result]);
                    }
                }
                v
            },
            report_failures: IntCounter::new(
                "agenthooks_report_failures_total",
                "Reports to the operator that no operator URL acknowledged",
            )
            .unwrap(),
            reports_sent: IntCounter::new(
                "agenthooks_reports_total",
                "Reports acknowledged by the operator",
            )
            .unwrap(),
            report_pending_hooks: IntGauge::new(
                "agenthooks_report_pending_hooks",
                "Hooks whose execution counts wait for the operator's acknowledgement",
            )
            .unwrap(),
            report_dropped_executions: IntCounter::new(
                "agenthooks_report_dropped_executions_total",
                "Hook runs whose counts were dropped: reports failing and the pending cap reached",
            )
            .unwrap(),
            budget_grants: IntCounter::new(
                "agenthooks_budget_grants_total",
                "Budget reservations granted",
            )
            .unwrap(),
            budget_refusals: IntCounterVec::new(
                Opts::new(
                    "agenthooks_budget_refusals_total",
                    "Budget reservations refused, by reason",
                ),
                &["reason"],
            )
            .unwrap(),
            budget_settle_failures: IntCounter::new(
                "agenthooks_budget_settle_failures_total",
                "Budget settles or releases not acknowledged before their deadline",
            )
            .unwrap(),
            prompt_cache_hits: IntCounter::new(
                "agenthooks_prompt_cache_hits_total",
                "Prompt hook runs answered from the decision cache",
            )
            .unwrap(),
            prompt_calls: IntCounterVec::new(
                Opts::new(
                    "agenthooks_prompt_calls_total",
                    "Evaluator calls by provider and result",
                ),
                &["provider", "result"],
            )
            .unwrap(),
            prompt_parse_errors: IntCounterVec::new(
                Opts::new(
                    "agenthooks_prompt_parse_errors_total",
                    "Prompt hook runs blocked for an unusable evaluator answer or a failed call, by kind",
                ),
                &["kind"],
            )
            .unwrap(),
            prompt_tokens: IntCounterVec::new(
                Opts::new(
                    "agenthooks_prompt_tokens_total",
                    "Tokens reported by the evaluator providers (input + output)",
                ),
                &["provider"],
            )
            .unwrap(),
            audit_queue_depth: IntGauge::new(
                "agenthooks_audit_queue_depth",
                "Hook runs waiting in memory for the audit writer",
            )
            .unwrap(),
            audit_rows_written: IntCounter::new(
                "agenthooks_audit_rows_written_total",
                "hook_executions rows inserted",
            )
            .unwrap(),
            audit_write_failures: IntCounter::new(
                "agenthooks_audit_write_failures_total",
                "Failed audit writes (security.hook.audit_write_failed)",
            )
            .unwrap(),
            audit_spool_bytes: IntGauge::new(
                "agenthooks_audit_spool_bytes",
                "Bytes of audit rows waiting in the on-disk spool",
            )
            .unwrap(),
            audit_spool_rows: IntGauge::new(
                "agenthooks_audit_spool_rows",
                "Audit rows waiting in the on-disk spool",
            )
            .unwrap(),
            audit_rows_dropped: IntCounter::new(
                "agenthooks_audit_rows_dropped_total",
                "Audit rows lost: spool full while the database was down, queue full, or refused by the database",
            )
            .unwrap(),
            audit_batch_seconds: Histogram::with_opts(
                HistogramOpts::new(
                    "agenthooks_audit_batch_seconds",
                    "Duration of one successful audit batch insert",
                )
                .buckets(vec![
                    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
                ]),
            )
            .unwrap(),
            registry,
        };
        for c in [
            Box::new(m.executions.clone()) as Box<dyn prometheus::core::Collector>,
            Box::new(m.hook_duration.clone()),
            Box::new(m.decision_duration.clone()),
            Box::new(m.handler_errors.clone()),
            Box::new(m.loop_depth_exceeded.clone()),
            Box::new(m.stop_bound_reached.clone()),
            Box::new(m.mutation_denied.clone()),
            Box::new(m.background_shed.clone()),
            Box::new(m.requests_shed.clone()),
            Box::new(m.native_hook_calls.clone()),
            Box::new(m.breaker_trips.clone()),
            Box::new(m.breaker_closes.clone()),
            Box::new(m.snapshot_version.clone()),
            Box::new(m.hooks_loaded.clone()),
            Box::new(m.hooks_unavailable.clone()),
            Box::new(m.hook_unavailable_events.clone()),
            Box::new(m.sync_errors.clone()),
            Box::new(m.sync_lag.clone()),
            Box::new(m.sync_updates.clone()),
            Box::new(m.report_failures.clone()),
            Box::new(m.reports_sent.clone()),
            Box::new(m.report_pending_hooks.clone()),
            Box::new(m.report_dropped_executions.clone()),
            Box::new(m.budget_grants.clone()),
            Box::new(m.budget_refusals.clone()),
            Box::new(m.budget_settle_failures.clone()),
            Box::new(m.prompt_cache_hits.clone()),
            Box::new(m.prompt_calls.clone()),
            Box::new(m.prompt_parse_errors.clone()),
            Box::new(m.prompt_tokens.clone()),
            Box::new(m.audit_queue_depth.clone()),
            Box::new(m.audit_rows_written.clone()),
            Box::new(m.audit_write_failures.clone()),
            Box::new(m.audit_spool_bytes.clone()),
            Box::new(m.audit_spool_rows.clone()),
            Box::new(m.audit_rows_dropped.clone()),
            Box::new(m.audit_batch_seconds.clone()),
        ] {
            m.registry.register(c).expect("metric names are unique");
        }
        m
    }

    /// Counts one hook run: its outcome, duration and error kind.
    pub fn record_run(
        &self,
        outcome: Outcome,
        handler: HandlerType,
        event: HookEvent,
        elapsed: Duration,
        error_kind: Option<ErrorKind>,
    ) {
        let i = (outcome_index(outcome) * HANDLERS.len() + handler_index(handler))
            * HookEvent::ALL.len()
            + event as usize;
        self.hot.executions[i].inc();
        self.hot.hook_duration[handler_index(handler)].observe(elapsed.as_secs_f64());
        if let Some(kind) = error_kind {
            self.handler_errors
                .with_label_values(&[kind.as_str()])
                .inc();
        }
    }

    /// Records the duration of one blocking decision.
    pub fn record_decision(&self, event: HookEvent, elapsed: Duration) {
        self.hot.decision_duration[event as usize].observe(elapsed.as_secs_f64());
    }

    /// The text exposition format.
    pub fn render(&self) -> String {
        let mut buf = Vec::new();
        TextEncoder::new()
            .encode(&self.registry.gather(), &mut buf)
            .expect("text encoding");
        String::from_utf8(buf).unwrap_or_default()
    }
}
