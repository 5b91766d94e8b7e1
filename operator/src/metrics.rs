//! Prometheus metrics of the operator (CONVENTIONS habit 12: `agenthooks_<noun>_<unit|total>`).

use prometheus::{
    Histogram, HistogramOpts, IntCounter, IntCounterVec, IntGauge, IntGaugeVec, Opts, Registry,
};

use crate::watch_health::Watched;

/// The operator's metrics, registered in their own [`Registry`].
#[derive(Clone, Debug)]
pub struct Metrics {
    /// The registry `/metrics` encodes.
    pub registry: Registry,
    /// `agenthooks_operator_reconcile_total{result}`: finished reconciles by result,
    /// `accepted`, `refused` or `error`.
    pub reconcile_total: IntCounterVec,
    /// `agenthooks_operator_reconcile_errors_total{reason}`: failed reconciles by
    /// [`crate::Error::metric_label`].
    pub reconcile_errors_total: IntCounterVec,
    /// `agenthooks_snapshot_version`: version of the last published snapshot.
    pub snapshot_version: IntGauge,
    /// `agenthooks_snapshot_hooks`: hooks in the last published snapshot.
    pub snapshot_hooks: IntGauge,
    /// `agenthooks_operator_live_dispatchers`: dispatchers polling now or within the TTL.
    pub live_dispatchers: IntGauge,
    /// `agenthooks_operator_ready_checks_total`: hooks the ready pass compared with their
    /// recorded status ([`crate::reconcile::ready_pass`]): what a change costs it.
    pub ready_checks_total: IntCounter,
    /// `agenthooks_operator_status_writes_total{kind, outcome}`: status writes of
    /// AgentHooks and TenantHookBudgets ([`crate::status::writer`]), one per write, by kind
    /// (`conditions`, `breaker_trip`, `breaker_close`, `breaker_reset`, `executions`,
    /// `budget_settle`, `budget_reconcile`) and outcome: `written`, `unchanged` (nothing
    /// but timestamps would change: no request), `gone`, `conflict` (still 409 past the
    /// retries), `failed`, `not_leader` (not sent). A flat `outcome="written"` line while
    /// nothing changes shows there is no write loop.
    pub status_writes_total: IntCounterVec,
    /// `agenthooks_operator_status_write_conflicts_total{kind}`: status patches answered
    /// `409 Conflict` (each read again and recomputed, unless it was the last retry).
    pub status_write_conflicts_total: IntCounterVec,
    /// `agenthooks_operator_leader`: 1 while this replica holds the Lease.
    pub leader: IntGauge,
    /// `agenthooks_operator_snapshot_polls_total{result}`: long polls by answer,
    /// `snapshot` (a complete one), `delta`, `not_modified`, `unavailable`,
    /// `bad_request` or `forbidden`.
    pub snapshot_polls_total: IntCounterVec,
    /// `agenthooks_operator_watch_errors_total{resource}`: errors of the leader session's
    /// watch streams (`agenthooks`, `namespaces`, `secrets`): failed lists and watch
    /// starts (a `403` included) and errors inside a watch (a `410 Gone` included).
    pub watch_errors_total: IntCounterVec,
    /// `agenthooks_operator_watch_healthy{resource}`: 0 while that watch has kept failing
    /// for longer than `--watch-grace-seconds` (readiness fails meanwhile), else 1.
    pub watch_healthy: IntGaugeVec,
    /// `agenthooks_operator_reports_total{result}`: `POST /v1/report` answers by result,
    /// `applied`, `duplicate`, `bad_request`, `too_large`, `conflict` (409: the id was used
    /// for another body), `unavailable` (not the synced leader) or `not_persisted` (504:
    /// not yet written, retry with the same id).
    pub reports_total: IntCounterVec,
    /// `agenthooks_operator_breaker_trips_total{result}`: tenant breaker trips (reported
    /// or decided by the merged window) by outcome, `recorded` (written open),
    /// `already_open`, `already_closed` (a probe already ended that trip), `too_many` (the
    /// hook has the most open tenants already), `stale` (another generation or reset
    /// annotation), `unknown` (no such hook or uid), `refused` (the API server refused the
    /// status write permanently, e.g. 403: the snapshots carry the open breaker but the
    /// status does not show it) or `failed` (not written, transient).
    pub breaker_trips_total: IntCounterVec,
    /// `agenthooks_operator_breaker_closes_total{result}`: reported closes (a half-open
    /// probe answered) by outcome, `recorded` (the tenant written closed), `not_open`,
    /// `newer` (the tenant's breaker is a newer trip: stays open), `stale`, `unknown`,
    /// `refused` or `failed` (as for trips).
    pub breaker_closes_total: IntCounterVec,
    /// `agenthooks_operator_breaker_resets_total`: breakers written closed after a spec or
    /// reset-annotation change.
    pub breaker_resets_total: IntCounter,
    /// `agenthooks_operator_breaker_trip_publish_seconds`: from receiving a trip or a close
    /// to the publish of the snapshot carrying it (the status write comes after).
    pub breaker_trip_publish_seconds: Histogram,
    /// `agenthooks_operator_execution_status_write_errors_total`: batches of one hook whose
    /// `status.executions` write failed (kept and retried in the next batch, up to a
    /// bound; the writes themselves are in `agenthooks_operator_status_writes_total`).
    pub execution_status_write_errors_total: IntCounter,
    /// `agenthooks_operator_execution_counts_dropped_total{reason}`: reported runs
    /// (allow+block+error+timeout) acknowledged without being written: `unknown_hook` (no
    /// hook with that namespace/name and uid in the index; no API call made), `hook_gone`
    /// (deleted before the write), or a permanent refusal of the write by the API server:
    /// `forbidden` (403), `invalid` (422), `refused` (another 4xx).
    pub execution_counts_dropped_total: IntCounterVec,
}

impl Metrics {
    /// Creates and registers every metric.
    ///
    /// Errors: [`prometheus::Error`] only if two metrics shared a name (a bug).
    pub fn new() -> Result<Metrics, prometheus::Error> {
        let registry = Registry::new();
        let reconcile_total = IntCounterVec::new(
            Opts::new(
                "agenthooks_operator_reconcile_total",
                "Finished AgentHook reconciles by result (accepted, refused, error).",
            ),
            &["result"],
        )?;
        let reconcile_errors_total = IntCounterVec::new(
            Opts::new(
                "agenthooks_operator_reconcile_errors_total",
                "Failed AgentHook reconciles by error reason.",
            ),
            &["reason"],
        )?;
        let snapshot_version = IntGauge::new(
            "agenthooks_snapshot_version",
            "Version of the last snapshot published to dispatchers.",
        )?;
        let snapshot_hooks = IntGauge::new(
            "agenthooks_snapshot_hooks",
            "Hooks in the last snapshot published to dispatchers.",
        )?;
        let ready_checks_total = IntCounter::new(
            "agenthooks_operator_ready_checks_total",
            "Hooks the ready pass compared with their recorded status.",
        )?;
        let live_dispatchers = IntGauge::new(
            "agenthooks_operator_live_dispatchers",
            "Dispatchers polling now or within the dispatcher TTL.",
        )?;
        let status_writes_total = IntCounterVec::new(
            Opts::new(
                "agenthooks_operator_status_writes_total",
                "AgentHook and TenantHookBudget status writes by kind and outcome (written, unchanged, gone, conflict, failed, not_leader).",
            ),
            &["kind", "outcome"],
        )?;
        let status_write_conflicts_total = IntCounterVec::new(
            Opts::new(
                "agenthooks_operator_status_write_conflicts_total",
                "Status patches answered 409 Conflict, by kind (each read again and recomputed).",
            ),
            &["kind"],
        )?;
        for kind in crate::status::writer::WriteKind::ALL {
            status_write_conflicts_total.with_label_values(&[kind.label()]);
            for outcome in crate::status::writer::OUTCOMES {
                status_writes_total.with_label_values(&[kind.label(), outcome]);
            }
        }
        let leader = IntGauge::new(
            "agenthooks_operator_leader",
            "1 while this replica holds the leader Lease.",
        )?;
        let snapshot_polls_total = IntCounterVec::new(
            Opts::new(
                "agenthooks_operator_snapshot_polls_total",
                "Snapshot long polls by answer (snapshot: a complete one, delta, not_modified, unavailable, bad_request, forbidden).",
            ),
            &["result"],
        )?;
        registry.register(Box::new(reconcile_total.clone()))?;
        registry.register(Box::new(reconcile_errors_total.clone()))?;
        registry.register(Box::new(snapshot_version.clone()))?;
        registry.register(Box::new(snapshot_hooks.clone()))?;
        registry.register(Box::new(live_dispatchers.clone()))?;
        registry.register(Box::new(ready_checks_total.clone()))?;
        registry.register(Box::new(status_writes_total.clone()))?;
        registry.register(Box::new(status_write_conflicts_total.clone()))?;
        registry.register(Box::new(leader.clone()))?;
        let watch_errors_total = IntCounterVec::new(
            Opts::new(
                "agenthooks_operator_watch_errors_total",
                "Errors of the watch streams by resource (agenthooks, namespaces, secrets).",
            ),
            &["resource"],
        )?;
        let watch_healthy = IntGaugeVec::new(
            Opts::new(
                "agenthooks_operator_watch_healthy",
                "0 while a watch has kept failing for longer than the grace, else 1.",
            ),
            &["resource"],
        )?;
        for w in Watched::ALL {
            watch_errors_total.with_label_values(&[w.label()]);
            watch_healthy.with_label_values(&[w.label()]).set(1);
        }
        let reports_total = IntCounterVec::new(
            Opts::new(
                "agenthooks_operator_reports_total",
                "POST /v1/report answers by result (applied, duplicate, bad_request, too_large, forbidden, conflict, unavailable, not_persisted).",
            ),
            &["result"],
        )?;
        let breaker_trips_total = IntCounterVec::new(
            Opts::new(
                "agenthooks_operator_breaker_trips_total",
                "Tenant breaker trips by outcome (recorded, already_open, already_closed, too_many, stale, unknown, refused, failed).",
            ),
            &["result"],
        )?;
        let breaker_closes_total = IntCounterVec::new(
            Opts::new(
                "agenthooks_operator_breaker_closes_total",
                "Tenant breaker closes by half-open probes, by outcome (recorded, not_open, newer, stale, unknown, refused, failed).",
            ),
            &["result"],
        )?;
        let breaker_resets_total = IntCounter::new(
            "agenthooks_operator_breaker_resets_total",
            "Breakers written closed after a spec or reset-annotation change.",
        )?;
        let breaker_trip_publish_seconds = Histogram::with_opts(
            HistogramOpts::new(
                "agenthooks_operator_breaker_trip_publish_seconds",
                "From receiving a breaker trip or close to publishing the snapshot carrying it.",
            )
            .buckets(vec![
                0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0,
            ]),
        )?;
        let execution_status_write_errors_total = IntCounter::new(
            "agenthooks_operator_execution_status_write_errors_total",
            "Failed status.executions writes of one hook's batch (kept for the next batch).",
        )?;
        for result in [
            "recorded",
            "already_open",
            "already_closed",
            "too_many",
            "stale",
            "unknown",
            "refused",
            "failed",
        ] {
            breaker_trips_total.with_label_values(&[result]);
        }
        for result in [
            "recorded", "not_open", "newer", "stale", "unknown", "refused", "failed",
        ] {
            breaker_closes_total.with_label_values(&[result]);
        }
        let execution_counts_dropped_total = IntCounterVec::new(
            Opts::new(
                "agenthooks_operator_execution_counts_dropped_total",
                "Reported hook runs acknowledged without being written to status.executions, by reason (unknown_hook, hook_gone, forbidden, invalid, refused).",
            ),
            &["reason"],
        )?;
        for reason in [
            "unknown_hook",
            "hook_gone",
            "forbidden",
            "invalid",
            "refused",
        ] {
            execution_counts_dropped_total.with_label_values(&[reason]);
        }
        registry.register(Box::new(execution_counts_dropped_total.clone()))?;
        registry.register(Box::new(reports_total.clone()))?;
        registry.register(Box::new(breaker_trips_total.clone()))?;
        registry.register(Box::new(breaker_closes_total.clone()))?;
        registry.register(Box::new(breaker_resets_total.clone()))?;
        registry.register(Box::new(breaker_trip_publish_seconds.clone()))?;
        registry.register(Box::new(execution_status_write_errors_total.clone()))?;
        for result in ["snapshot", "delta", "not_modified"] {
            snapshot_polls_total.with_label_values(&[result]);
        }
        registry.register(Box::new(snapshot_polls_total.clone()))?;
        registry.register(Box::new(watch_errors_total.clone()))?;
        registry.register(Box::new(watch_healthy.clone()))?;
        Ok(Metrics {
            registry,
            reconcile_total,
            reconcile_errors_total,
            snapshot_version,
            snapshot_hooks,
            live_dispatchers,
            ready_checks_total,
            status_writes_total,
            status_write_conflicts_total,
            leader,
            snapshot_polls_total,
            watch_errors_total,
            watch_healthy,
            reports_total,
            breaker_trips_total,
            breaker_closes_total,
            breaker_resets_total,
            breaker_trip_publish_seconds,
            execution_status_write_errors_total,
            execution_counts_dropped_total,
        })
    }

    /// The text exposition of every metric.
    pub fn encode(&self) -> String {
        prometheus::TextEncoder::new()
            .encode_to_string(&self.registry.gather())
            .unwrap_or_else(|e| format!("# encoding metrics failed: {e}\n"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_exposed() {
        let m = Metrics::new().unwrap();
        m.reconcile_total.with_label_values(&["accepted"]).inc();
        m.reconcile_errors_total.with_label_values(&["kube"]).inc();
        m.snapshot_version.set(3);
        m.live_dispatchers.set(2);
        let text = m.encode();
        for name in [
            "agenthooks_operator_reconcile_total{result=\"accepted\"} 1",
            "agenthooks_operator_reconcile_errors_total{reason=\"kube\"} 1",
            "agenthooks_snapshot_version 3",
            "agenthooks_operator_live_dispatchers 2",
            "agenthooks_operator_watch_errors_total{resource=\"secrets\"} 0",
            "agenthooks_operator_watch_healthy{resource=\"agenthooks\"} 1",
            "agenthooks_operator_breaker_trips_total{result=\"recorded\"} 0",
            "agenthooks_operator_breaker_resets_total 0",
            "agenthooks_operator_status_writes_total{kind=\"executions\",outcome=\"written\"} 0",
            "agenthooks_operator_status_writes_total{kind=\"conditions\",outcome=\"unchanged\"} 0",
            "agenthooks_operator_status_writes_total{kind=\"budget_settle\",outcome=\"not_leader\"} 0",
            "agenthooks_operator_status_write_conflicts_total{kind=\"breaker_trip\"} 0",
            "agenthooks_operator_execution_status_write_errors_total 0",
            "agenthooks_operator_breaker_trip_publish_seconds_count 0",
            "agenthooks_operator_breaker_trips_total{result=\"refused\"} 0",
            "agenthooks_operator_breaker_trips_total{result=\"too_many\"} 0",
            "agenthooks_operator_breaker_closes_total{result=\"recorded\"} 0",
            "agenthooks_operator_breaker_closes_total{result=\"newer\"} 0",
            "agenthooks_operator_execution_counts_dropped_total{reason=\"unknown_hook\"} 0",
            "agenthooks_operator_execution_counts_dropped_total{reason=\"forbidden\"} 0",
        ] {
            assert!(text.contains(name), "missing {name} in\n{text}");
        }
    }
}
