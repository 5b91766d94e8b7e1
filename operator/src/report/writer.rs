//! Group commit of `status.executions` (issue 3 point 4: bounded status writes per hook
//! per interval, whatever the request rate and the number of dispatchers).
//!
//! Reports hand their per-hook [`Counts`] to [`ExecutionWriter::submit`], which merges
//! them into one pending entry per hook (by uid) and returns a receiver for the outcome.
//! One task ([`ExecutionWriter::run`]) takes every pending entry at once, writes each hook
//! once (up to [`WRITE_CONCURRENCY`] hooks at a time), and resolves the receivers of every
//! report whose counts were in that batch. Batches start at least `interval` apart, so a
//! hook is written at most once per interval; the first batch after a quiet spell starts
//! at once.
//!
//! A hook whose write failed transiently (`5xx`, timeout, conflicts past the retry bound:
//! [`super::api`]) stays pending (merged with what arrived meanwhile) and is tried again
//! in the next batch, up to [`MAX_FAILED_BATCHES`] batches; then its reports are told
//! [`HookOutcome::Failed`] (they answer `504` and the dispatcher resends them with the same
//! `reportId`). A write the API server refuses permanently (`403` from RBAC or an
//! admission policy, `422`, ...: [`super::api::refusal`]) would be refused again on every
//! resend, so the hook's counts are dropped at once: an error is logged naming the hook
//! and the API error, the runs are counted in
//! `agenthooks_operator_execution_counts_dropped_total{reason="forbidden"|"invalid"|"refused"}`,
//! and its reports are told [`HookOutcome::Dropped`] (acknowledged, written off). Counts of
//! a hook that is gone are dropped the same way (`reason="hook_gone"`). When this replica
//! stops being the synced leader, or shuts down, every pending entry is failed without
//! being written.

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use tokio::sync::{Notify, oneshot, watch};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::api::{refusal, refusal_label};
use super::executions::{Counts, ExecWrite};
use crate::error::Error;
use crate::metrics::Metrics;
use crate::shared::{Serving, lock};

/// Hooks written at once within a batch.
pub const WRITE_CONCURRENCY: usize = 8;
/// Consecutive failed batches after which a hook's pending counts are given back to their
/// reports as failed.
pub const MAX_FAILED_BATCHES: u32 = 3;

/// How one hook's counts of a report ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HookOutcome {
    /// Written to the hook's status.
    Written,
    /// The hook is gone (or its name has another uid now): dropped, nothing to write.
    Gone,
    /// The API server refused the write permanently (the message says how): the counts
    /// are dropped and the report is acknowledged all the same.
    Dropped(String),
    /// Not written (the message says why); the report must be sent again.
    Failed(String),
}

/// Where a pending hook lives.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HookRef {
    /// Its uid (the key of the pending entries).
    pub uid: String,
    /// Its namespace.
    pub namespace: String,
    /// Its name.
    pub name: String,
}

#[derive(Debug)]
struct Pending {
    hook: HookRef,
    counts: Counts,
    waiters: Vec<oneshot::Sender<HookOutcome>>,
    failures: u32,
}

impl Pending {
    fn resolve(self, outcome: &HookOutcome) {
        for w in self.waiters {
            let _ = w.send(outcome.clone());
        }
    }

    /// Merges `later` (what arrived for the same hook meanwhile) into `self`.
    fn absorb(&mut self, later: Pending) {
        self.counts.add(&later.counts);
        self.waiters.extend(later.waiters);
    }
}

/// The pending counts and the batching rule. See the module documentation.
#[derive(Debug)]
pub struct ExecutionWriter {
    interval: Duration,
    state: Mutex<State>,
    wake: Notify,
}

#[derive(Debug, Default)]
struct State {
    pending: HashMap<String, Pending>,
    /// Set when [`ExecutionWriter::run`] ended: submissions fail at once.
    closed: bool,
}

impl ExecutionWriter {
    /// A writer whose batches start at least `interval` apart.
    pub fn new(interval: Duration) -> Arc<ExecutionWriter> {
        Arc::new(ExecutionWriter {
            interval,
            state: Mutex::new(State::default()),
            wake: Notify::new(),
        })
    }

    /// The batch interval.
    pub fn interval(&self) -> Duration {
        self.interval
    }

    /// Adds `counts` for `hook` to the next batch; the receiver gets how it ended
    /// ([`HookOutcome::Failed`] at once when the writer has stopped).
    pub fn submit(&self, hook: HookRef, counts: Counts) -> oneshot::Receiver<HookOutcome> {
        let (tx, rx) = oneshot::channel();
        let uid = hook.uid.clone();
        let entry = Pending {
            hook,
            counts,
            waiters: vec![tx],
            failures: 0,
        };
        let mut state = lock(&self.state);
        if state.closed {
            drop(state);
            entry.resolve(&HookOutcome::Failed(
                "the operator is shutting down".to_string(),
            ));
            return rx;
        }
        match state.pending.get_mut(&uid) {
            Some(p) => p.absorb(entry),
            None => {
                state.pending.insert(uid, entry);
            }
        }
        drop(state);
        self.wake.notify_one();
        rx
    }

    /// Hooks waiting for the next batch.
    pub fn pending_hooks(&self) -> usize {
        lock(&self.state).pending.len()
    }

    fn take(&self) -> HashMap<String, Pending> {
        std::mem::take(&mut lock(&self.state).pending)
    }

    fn requeue(&self, failed: Pending) {
        let mut state = lock(&self.state);
        let pending = &mut state.pending;
        let uid = failed.hook.uid.clone();
        match pending.remove(&uid) {
            Some(newer) => {
                let mut merged = failed;
                merged.absorb(newer);
                pending.insert(uid, merged);
            }
            None => {
                pending.insert(uid, failed);
            }
        }
    }

    fn fail_all(&self, why: &str) {
        let outcome = HookOutcome::Failed(why.to_string());
        for (_, p) in self.take() {
            p.resolve(&outcome);
        }
    }

    fn close(&self) {
        let drained = {
            let mut state = lock(&self.state);
            state.closed = true;
            std::mem::take(&mut state.pending)
        };
        let outcome = HookOutcome::Failed("the operator is shutting down".to_string());
        for (_, p) in drained {
            p.resolve(&outcome);
        }
    }

    /// Writes batches until `cancel`, with `write(hook, counts)` (production:
    /// [`super::executions::write`], which counts each write in
    /// `agenthooks_operator_status_writes_total{kind="executions"}`); only while `serving`
    /// says this replica is the synced leader. Counts failed batches and dropped runs in
    /// `metrics`.
    pub async fn run<W, Fut>(
        self: Arc<Self>,
        write: W,
        serving: watch::Receiver<Serving>,
        metrics: Metrics,
        cancel: CancellationToken,
    ) where
        W: Fn(HookRef, Counts) -> Fut,
        Fut: Future<Output = Result<ExecWrite, Error>>,
    {
        let mut last_batch: Option<Instant> = None;
        loop {
            while self.pending_hooks() == 0 {
                tokio::select! {
                    _ = cancel.cancelled() => return self.close(),
                    _ = self.wake.notified() => {}
                }
            }
            if let Some(t) = last_batch {
                tokio::select! {
                    _ = cancel.cancelled() => return self.close(),
                    _ = tokio::time::sleep_until(t + self.interval) => {}
                }
            }
            if !serving.borrow().ok() {
                self.fail_all("this operator replica is not the synced leader");
                continue;
            }
            let batch = self.take();
            last_batch = Some(Instant::now());
            tracing::debug!(hooks = batch.len(), "writing a batch of status.executions");
            let results: Vec<(Pending, Result<ExecWrite, Error>)> =
                futures::stream::iter(batch.into_values().map(|p| {
                    let fut = write(p.hook.clone(), p.counts.clone());
                    async move { (p, fut.await) }
                }))
                .buffer_unordered(WRITE_CONCURRENCY)
                .collect()
                .await;
            for (mut p, result) in results {
                match result {
                    Ok(ExecWrite::Written { .. }) => p.resolve(&HookOutcome::Written),
                    Ok(ExecWrite::Gone) => {
                        tracing::debug!(hook = %format!("{}/{}", p.hook.namespace, p.hook.name), "hook gone; its execution counts are dropped");
                        metrics
                            .execution_counts_dropped_total
                            .with_label_values(&["hook_gone"])
                            .inc_by(p.counts.runs());
                        p.resolve(&HookOutcome::Gone);
                    }
                    Err(e) if refusal(&e).is_some() => {
                        let (code, reason) = refusal(&e)
                            .map(|s| (s.code, refusal_label(s)))
                            .unwrap_or_default();
                        let key = format!("{}/{}", p.hook.namespace, p.hook.name);
                        metrics.execution_status_write_errors_total.inc();
                        metrics
                            .execution_counts_dropped_total
                            .with_label_values(&[reason])
                            .inc_by(p.counts.runs());
                        tracing::error!(
                            hook = %key, uid = %p.hook.uid, code, error = %e, runs = p.counts.runs(),
                            "the API server refused to write status.executions of this hook (it would refuse it again): its execution counts are DROPPED"
                        );
                        p.resolve(&HookOutcome::Dropped(format!(
                            "status.executions of {key} refused by the API server ({code}): {e}"
                        )));
                    }
                    Err(e) => {
                        metrics.execution_status_write_errors_total.inc();
                        p.failures += 1;
                        let key = format!("{}/{}", p.hook.namespace, p.hook.name);
                        if p.failures >= MAX_FAILED_BATCHES {
                            tracing::warn!(hook = %key, error = %e, failures = p.failures, "writing status.executions keeps failing; its reports will be sent again");
                            p.resolve(&HookOutcome::Failed(format!(
                                "writing status.executions of {key} failed: {e}"
                            )));
                        } else {
                            tracing::warn!(hook = %key, error = %e, failures = p.failures, "writing status.executions failed; retrying in the next batch");
                            self.requeue(p);
                        }
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::api::tests::api_error;
    use agenthooks_crds::agenthook::ExecutionsStatus;
    use std::sync::atomic::{AtomicU32, Ordering};

    fn hook(uid: &str) -> HookRef {
        HookRef {
            uid: uid.into(),
            namespace: "ns".into(),
            name: format!("h-{uid}"),
        }
    }

    fn allow(n: u64) -> Counts {
        Counts {
            allow: n,
            ..Default::default()
        }
    }

    type Log = Arc<Mutex<Vec<(Instant, String, u64)>>>;

    /// A writer running with a `write` that records (time, uid, allow) and fails the
    /// first `fail_first` calls.
    fn spawn(
        interval: Duration,
        fail_first: u32,
        serving: watch::Receiver<Serving>,
    ) -> (Arc<ExecutionWriter>, Log, Metrics, CancellationToken) {
        let writer = ExecutionWriter::new(interval);
        let log: Log = Arc::new(Mutex::new(Vec::new()));
        let metrics = Metrics::new().unwrap();
        let cancel = CancellationToken::new();
        let failures = Arc::new(AtomicU32::new(0));
        let l = log.clone();
        tokio::spawn(writer.clone().run(
            move |h: HookRef, c: Counts| {
                let l = l.clone();
                let failures = failures.clone();
                async move {
                    if failures.fetch_add(1, Ordering::SeqCst) < fail_first {
                        return Err(Error::StoreGone);
                    }
                    lock(&l).push((Instant::now(), h.uid, c.allow));
                    Ok(ExecWrite::Written {
                        executions: ExecutionsStatus::default(),
                        attempts: 2,
                    })
                }
            },
            serving,
            metrics.clone(),
            cancel.clone(),
        ));
        (writer, log, metrics, cancel)
    }

    fn leader() -> (watch::Sender<Serving>, watch::Receiver<Serving>) {
        watch::channel(Serving {
            leader: true,
            synced: true,
        })
    }

    #[tokio::test(start_paused = true)]
    async fn each_hook_is_written_at_most_once_per_interval_whatever_the_rate() {
        let interval = Duration::from_secs(1);
        let (_s, serving) = leader();
        let (writer, log, metrics, cancel) = spawn(interval, 0, serving);
        let start = Instant::now();
        let mut receivers = Vec::new();
        // 3 dispatchers reporting 2 hooks every 10 ms for 3.5 s
        for _ in 0..350 {
            for _dispatcher in 0..3 {
                receivers.push(writer.submit(hook("a"), allow(1)));
                receivers.push(writer.submit(hook("b"), allow(2)));
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        for rx in receivers {
            assert_eq!(rx.await.unwrap(), HookOutcome::Written);
        }
        let log = lock(&log).clone();
        for uid in ["a", "b"] {
            let writes: Vec<Instant> = log
                .iter()
                .filter(|(_, u, _)| u == uid)
                .map(|(t, ..)| *t)
                .collect();
            assert!(
                writes.len() <= 5,
                "{uid}: {} writes in {:?}",
                writes.len(),
                start.elapsed()
            );
            for pair in writes.windows(2) {
                assert!(pair[1] - pair[0] >= interval, "{pair:?}");
            }
            let total: u64 = log
                .iter()
                .filter(|(_, u, _)| u == uid)
                .map(|(.., n)| n)
                .sum();
            let per = if uid == "a" { 1 } else { 2 };
            assert_eq!(total, 350 * 3 * per, "{uid}: no count lost or doubled");
        }
        assert_eq!(metrics.execution_status_write_errors_total.get(), 0);
        cancel.cancel();
    }

    #[tokio::test(start_paused = true)]
    async fn a_quiet_writer_writes_at_once() {
        let (_s, serving) = leader();
        let (writer, log, _m, cancel) = spawn(Duration::from_secs(1), 0, serving);
        tokio::time::sleep(Duration::from_secs(5)).await;
        let t0 = Instant::now();
        let rx = writer.submit(hook("a"), allow(1));
        assert_eq!(rx.await.unwrap(), HookOutcome::Written);
        assert!(Instant::now() - t0 < Duration::from_millis(10));
        assert_eq!(lock(&log).len(), 1);
        cancel.cancel();
    }

    #[tokio::test(start_paused = true)]
    async fn failed_writes_are_retried_with_what_arrived_meanwhile_then_given_up() {
        let (_s, serving) = leader();
        let (writer, log, metrics, cancel) = spawn(Duration::from_secs(1), 1, serving);
        let first = writer.submit(hook("a"), allow(1));
        tokio::time::sleep(Duration::from_millis(100)).await;
        let second = writer.submit(hook("a"), allow(2));
        assert_eq!(first.await.unwrap(), HookOutcome::Written);
        assert_eq!(second.await.unwrap(), HookOutcome::Written);
        assert_eq!(
            lock(&log)
                .iter()
                .map(|(_, u, n)| (u.clone(), *n))
                .collect::<Vec<_>>(),
            [("a".to_string(), 3)],
            "one write with both"
        );
        assert_eq!(metrics.execution_status_write_errors_total.get(), 1);
        cancel.cancel();

        let (_s, serving) = leader();
        let (writer, log, metrics, cancel) =
            spawn(Duration::from_secs(1), MAX_FAILED_BATCHES, serving);
        let rx = writer.submit(hook("a"), allow(1));
        assert!(matches!(rx.await.unwrap(), HookOutcome::Failed(_)));
        assert!(lock(&log).is_empty());
        assert_eq!(
            metrics.execution_status_write_errors_total.get(),
            u64::from(MAX_FAILED_BATCHES)
        );
        assert_eq!(writer.pending_hooks(), 0);
        cancel.cancel();
    }

    #[tokio::test(start_paused = true)]
    async fn nothing_is_written_once_leadership_is_gone() {
        let (s, serving) = leader();
        let (writer, log, _m, cancel) = spawn(Duration::from_secs(1), 0, serving);
        assert_eq!(
            writer.submit(hook("a"), allow(1)).await.unwrap(),
            HookOutcome::Written
        );
        s.send_replace(Serving::default());
        let rx = writer.submit(hook("a"), allow(1));
        assert!(matches!(rx.await.unwrap(), HookOutcome::Failed(_)));
        assert_eq!(lock(&log).len(), 1);
        cancel.cancel();
        tokio::time::sleep(Duration::from_millis(1)).await;
        let late = writer.submit(hook("b"), allow(1));
        assert!(
            matches!(late.await.unwrap(), HookOutcome::Failed(_)),
            "after shutdown a submission fails at once"
        );
        assert_eq!(writer.pending_hooks(), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn a_permanent_refusal_drops_the_counts_at_once_and_a_5xx_is_retried() {
        let (_s, serving) = leader();
        let writer = ExecutionWriter::new(Duration::from_secs(1));
        let metrics = Metrics::new().unwrap();
        let cancel = CancellationToken::new();
        let calls = Arc::new(Mutex::new(Vec::<String>::new()));
        let c = calls.clone();
        tokio::spawn(writer.clone().run(
            move |h: HookRef, _c: Counts| {
                let c = c.clone();
                async move {
                    let n = {
                        let mut calls = lock(&c);
                        calls.push(h.uid.clone());
                        calls.iter().filter(|u| **u == h.uid).count()
                    };
                    match h.uid.as_str() {
                        "forbidden" => Err(Error::Kube(api_error(403))),
                        "invalid" => Err(Error::Kube(api_error(422))),
                        // a 503 once, then written
                        _ if n == 1 => Err(Error::Kube(api_error(503))),
                        _ => Ok(ExecWrite::Written {
                            executions: ExecutionsStatus::default(),
                            attempts: 1,
                        }),
                    }
                }
            },
            serving,
            metrics.clone(),
            cancel.clone(),
        ));
        let runs = |n| Counts {
            allow: n,
            block: 1,
            ..Default::default()
        };
        let forbidden = writer.submit(hook("forbidden"), runs(4));
        let invalid = writer.submit(hook("invalid"), runs(1));
        let flaky = writer.submit(hook("flaky"), runs(1));
        match forbidden.await.unwrap() {
            HookOutcome::Dropped(why) => {
                assert!(
                    why.contains("ns/h-forbidden") && why.contains("403"),
                    "{why}"
                )
            }
            other => panic!("expected Dropped, got {other:?}"),
        }
        assert!(matches!(invalid.await.unwrap(), HookOutcome::Dropped(_)));
        assert_eq!(flaky.await.unwrap(), HookOutcome::Written);
        let calls = lock(&calls).clone();
        assert_eq!(
            calls.iter().filter(|u| *u == "forbidden").count(),
            1,
            "a permanent refusal is not retried"
        );
        assert_eq!(calls.iter().filter(|u| *u == "flaky").count(), 2);
        let dropped = |reason: &str| {
            metrics
                .execution_counts_dropped_total
                .with_label_values(&[reason])
                .get()
        };
        assert_eq!((dropped("forbidden"), dropped("invalid")), (5, 2));
        assert_eq!(metrics.execution_status_write_errors_total.get(), 3);
        assert_eq!(writer.pending_hooks(), 0);
        cancel.cancel();
    }
}
