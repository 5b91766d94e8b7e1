//! The reporter: sends trips and breaker runs at once and execution counts every
//! interval to the operator's leader (`POST /v1/report`, crds `report` module).
//!
//! Two lanes, each its own task with its own [`Pending`], so the safety signals never
//! wait behind counts: the operator acknowledges a report of counts only once it has
//! written them (at most once per hook per `--status-write-interval-ms`), which can take
//! a second, while a trip must leave every dispatcher within one sync.
//! - **Breaker lane** — trips and breaker runs. Wakes: a queued trip (at once); a breaker
//!   run that grew (at once, but at most every [`RUN_REPORT_GAP`], so a burst of blocks
//!   makes one report, not one per block); the interval (retries).
//! - **Counts lane** — execution counts. Wakes: the interval.
//!
//! Each wake sweeps its part into its [`Pending`] and sends batches until nothing is held
//! or a send fails. On shutdown each lane makes one last attempt within
//! [`FINAL_FLUSH_DEADLINE`].

use std::sync::Arc;
use std::time::Duration;

use agenthooks_crds::report::ReportAck;
use tokio_util::sync::CancellationToken;

use crate::metrics::Metrics;
use crate::operator_urls::{OperatorUrls, PostError};
use crate::report::outbox::Outbox;
use crate::report::pending::{DEFAULT_PENDING_CAP, Pending};

/// Default interval between execution reports (`--report-interval-ms`).
pub const DEFAULT_REPORT_INTERVAL: Duration = Duration::from_millis(1000);
/// Bound of one `POST /v1/report` attempt on one URL (the operator answers once it has
/// written the status, which may take a few API-server round trips).
pub const REPORT_TIMEOUT: Duration = Duration::from_secs(10);
/// Least time between two reports woken by breaker runs.
pub const RUN_REPORT_GAP: Duration = Duration::from_millis(100);
/// Bound of the last flush at shutdown.
pub const FINAL_FLUSH_DEADLINE: Duration = Duration::from_secs(3);

/// How the reporter runs.
#[derive(Debug, Clone)]
pub struct ReporterConfig {
    /// The dispatcher's stable id (as in the snapshot poll).
    pub dispatcher: String,
    /// Interval between execution reports.
    pub interval: Duration,
    /// Bound of one attempt on one URL.
    pub timeout: Duration,
    /// Hooks held at most while reports fail.
    pub pending_cap: usize,
}

impl ReporterConfig {
    /// The defaults for `dispatcher`.
    pub fn new(dispatcher: impl Into<String>) -> ReporterConfig {
        ReporterConfig {
            dispatcher: dispatcher.into(),
            interval: DEFAULT_REPORT_INTERVAL,
            timeout: REPORT_TIMEOUT,
            pending_cap: DEFAULT_PENDING_CAP,
        }
    }
}

/// Which part of the outbox a lane reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Lane {
    /// Trips and breaker runs.
    Breaker,
    /// Execution counts.
    Counts,
}

/// Activates `outbox` and runs both lanes until `stop` fires, then flushes each once.
/// Spawn it; await it after the server stopped so the last runs are counted.
pub async fn run(
    outbox: Arc<Outbox>,
    urls: Arc<OperatorUrls>,
    metrics: Metrics,
    config: ReporterConfig,
    stop: CancellationToken,
) {
    outbox.activate();
    let breaker = lane(
        Lane::Breaker,
        outbox.clone(),
        urls.clone(),
        metrics.clone(),
        config.clone(),
        stop.clone(),
    );
    let counts = lane(Lane::Counts, outbox, urls, metrics, config, stop);
    tokio::join!(breaker, counts);
}

async fn lane(
    lane: Lane,
    outbox: Arc<Outbox>,
    urls: Arc<OperatorUrls>,
    metrics: Metrics,
    config: ReporterConfig,
    stop: CancellationToken,
) {
    let client = urls.fresh_client(Duration::from_secs(2));
    let mut reporter = Reporter {
        lane,
        outbox,
        urls,
        metrics,
        client,
        pending: Pending::new(config.pending_cap),
        config,
    };
    let mut tick = tokio::time::interval(reporter.config.interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    tick.tick().await; // the first tick is immediate
    let mut last_flush = tokio::time::Instant::now();
    loop {
        let outbox = Arc::clone(&reporter.outbox);
        match lane {
            Lane::Counts => tokio::select! {
                _ = stop.cancelled() => break,
                _ = tick.tick() => {}
            },
            Lane::Breaker => tokio::select! {
                _ = stop.cancelled() => break,
                _ = tick.tick() => {}
                _ = outbox.wake_trip.notified() => {}
                _ = outbox.wake_run.notified() => {
                    // Coalesce a burst; a trip or the stop still cut the wait short.
                    tokio::select! {
                        _ = stop.cancelled() => break,
                        _ = outbox.wake_trip.notified() => {}
                        _ = tokio::time::sleep_until(last_flush + RUN_REPORT_GAP) => {}
                    }
                }
            },
        }
        last_flush = tokio::time::Instant::now();
        let flush = reporter.flush();
        tokio::select! {
            _ = stop.cancelled() => break,
            _ = flush => {}
        }
    }
    match tokio::time::timeout(FINAL_FLUSH_DEADLINE, reporter.flush()).await {
        Ok(()) if reporter.pending.is_empty() => {
            tracing::info!(lane = ?lane, "final report sent")
        }
        _ => tracing::error!(
            lane = ?lane,
            hooks = reporter.pending.hooks(),
            trips = reporter.pending.trips(),
            "final report not acknowledged at shutdown; these counts and trips are lost"
        ),
    }
}

struct Reporter {
    lane: Lane,
    outbox: Arc<Outbox>,
    urls: Arc<OperatorUrls>,
    metrics: Metrics,
    client: reqwest::Client,
    pending: Pending,
    config: ReporterConfig,
}

impl Reporter {
    /// Sweeps, then sends batches until nothing is held or a send fails.
    async fn flush(&mut self) {
        if self.lane == Lane::Breaker {
            self.pending.add_trips(self.outbox.take_trips());
            self.pending.add_closes(self.outbox.take_closes());
            let dropped_runs = self
                .pending
                .add_observations(self.outbox.sweep_observations());
            if dropped_runs.observations > 0 {
                tracing::error!(
                    hooks = dropped_runs.observations,
                    cap = self.config.pending_cap,
                    "reports are not acknowledged and the pending cap is reached: breaker runs DROPPED"
                );
            }
            self.send().await;
            return;
        }
        let dropped = self.pending.add_executions(self.outbox.sweep_executions());
        if dropped.hooks > 0 {
            self.metrics
                .report_dropped_executions
                .inc_by(dropped.executions);
            tracing::error!(
                hooks = dropped.hooks,
                executions = dropped.executions,
                cap = self.config.pending_cap,
                "reports are not acknowledged and the pending cap is reached: execution counts DROPPED"
            );
        }
        self.set_gauges();
        self.send().await;
        self.set_gauges();
    }

    /// Sends batches until nothing is held or a send fails.
    async fn send(&mut self) {
        while let Some(batch) = self.pending.next_batch() {
            let report = batch.to_report(&self.config.dispatcher);
            let answer = self
                .urls
                .post_json::<_, ReportAck>(&self.client, "/v1/report", &report, self.config.timeout)
                .await;
            match answer {
                Ok(ack) => {
                    self.pending.acknowledged();
                    self.metrics.reports_sent.inc();
                    tracing::debug!(
                        report_id = %batch.report_id, trips = batch.trips.len(), hooks = batch.executions.len(), runs = batch.observations.len(),
                        applied_trips = ack.trips, applied_hooks = ack.executions, duplicate = ack.duplicate,
                        "report acknowledged"
                    );
                }
                Err(e @ PostError::Refused { .. }) => {
                    self.metrics.report_failures.inc();
                    let dropped = self.pending.refused();
                    self.metrics
                        .report_dropped_executions
                        .inc_by(dropped.executions);
                    tracing::error!(
                        report_id = %batch.report_id, trips = batch.trips.len(), hooks = dropped.hooks,
                        executions = dropped.executions, runs = dropped.observations, error = %e,
                        "the operator REFUSED this report (it would refuse it again): dropped"
                    );
                }
                Err(e) => {
                    self.metrics.report_failures.inc();
                    let retry_same = e.maybe_applied();
                    if retry_same {
                        // Some operator may have applied it: resend it as is, same id.
                    } else {
                        self.pending.not_applied();
                    }
                    tracing::warn!(
                        report_id = %batch.report_id, trips = batch.trips.len(), hooks = batch.executions.len(),
                        retry_same_id = retry_same, error = %e,
                        "report not acknowledged; kept for the next attempt"
                    );
                    break;
                }
            }
        }
    }

    fn set_gauges(&self) {
        self.metrics
            .report_pending_hooks
            .set(self.pending.hooks() as i64);
    }
}
