//! Which reports this replica has applied: a report retried after a lost answer is
//! applied once (crds `report.rs`: "the operator applies a given id once").
//!
//! A report is known by its dispatcher and `reportId` (two dispatchers may pick the same
//! id without touching each other's reports) and carries the [`digest`] of its body: the
//! same id from the same dispatcher with another body is refused ([`Begin::Mismatch`],
//! a `409`) rather than taken for a duplicate and silently dropped.
//!
//! Per report the log holds one of:
//! - *in flight*: an attempt is being applied; a duplicate waits for its result instead of
//!   applying the report a second time;
//! - *done*: applied; a duplicate answers the same acknowledgement, `duplicate: true`;
//! - *failed*: an attempt ended without persisting everything; it remembers which hooks'
//!   counts it did persist, so the retry (same id, same body) writes only the rest and no
//!   count is written twice.
//!
//! Bounded: finished entries are forgotten after [`RETENTION`] or beyond [`MAX_FINISHED`]
//! (oldest first). An id retried later than that is applied again; dispatchers retry
//! within seconds. Entries in flight are never forgotten (their number is bounded by the
//! requests being served).

use std::collections::{HashMap, HashSet, VecDeque};
use std::time::{Duration, Instant};

use agenthooks_crds::report::{Report, ReportAck, TripReport};
use sha2::{Digest, Sha256};
use tokio::sync::watch;

/// SHA-256 of a report's body as parsed (its canonical JSON: field order fixed, unknown
/// fields left out, times as sent), so a verbatim resend matches whatever its whitespace.
pub fn digest(report: &Report) -> [u8; 32] {
    let canonical = serde_json::to_vec(report).unwrap_or_default();
    Sha256::digest(&canonical).into()
}

/// A report's identity: (dispatcher, reportId).
pub type ReportKey = (String, String);

/// How long a finished report id is remembered.
pub const RETENTION: Duration = Duration::from_secs(600);
/// How many finished report ids are remembered at most.
pub const MAX_FINISHED: usize = 10_000;

/// The result of one attempt at a report: the acknowledgement, or why it is not (yet)
/// persisted.
pub type AttemptResult = Result<ReportAck, String>;

/// What an attempt that did not persist everything did persist, and what its retry must
/// still write.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Progress {
    /// Uids whose counts are persisted (or whose hook is gone: nothing left to write).
    pub persisted: HashSet<String>,
    /// Trips recorded so far.
    pub trips: usize,
    /// Hooks whose `status.executions` were written so far.
    pub executions: usize,
    /// Trips the report's breaker observations decided (the windows forget a run once it
    /// tripped, so a retry could not decide them again); the retry writes them.
    pub decided_trips: Vec<TripReport>,
}

#[derive(Debug)]
enum State {
    InFlight(watch::Receiver<Option<AttemptResult>>),
    Done(ReportAck),
    Failed(Progress),
}

#[derive(Debug)]
struct Entry {
    state: State,
    /// [`digest`] of the body first applied under this key.
    digest: [u8; 32],
    /// Bumped each time the entry is (re)started, so a stale `finished` record of an
    /// earlier attempt never evicts a later one.
    seq: u64,
}

/// What [`ReportLog::begin`] decided.
#[derive(Debug)]
pub enum Begin {
    /// This dispatcher already used this id for another body: refuse it (409).
    Mismatch,
    /// Applied before: answer this acknowledgement with `duplicate: true`.
    Done(ReportAck),
    /// Being applied by another request: wait for its result.
    InFlight(watch::Receiver<Option<AttemptResult>>),
    /// Apply it now, skipping what `progress` says is persisted; send the attempt's result
    /// on `done` after [`ReportLog::finish`].
    Start {
        /// What an earlier failed attempt persisted (empty for a new id).
        progress: Progress,
        /// Where the attempt's result goes.
        done: watch::Sender<Option<AttemptResult>>,
    },
}

/// The log. Time is passed in, so tests need no clock.
#[derive(Debug)]
pub struct ReportLog {
    entries: HashMap<ReportKey, Entry>,
    finished: VecDeque<(ReportKey, u64, Instant)>,
    next_seq: u64,
    retention: Duration,
    max_finished: usize,
}

impl Default for ReportLog {
    fn default() -> Self {
        ReportLog::new(RETENTION, MAX_FINISHED)
    }
}

impl ReportLog {
    /// A log keeping finished ids for `retention`, at most `max_finished` of them.
    pub fn new(retention: Duration, max_finished: usize) -> ReportLog {
        ReportLog {
            entries: HashMap::new(),
            finished: VecDeque::new(),
            next_seq: 0,
            retention,
            max_finished,
        }
    }

    /// Decides what to do with report `key` (dispatcher, reportId) of body `digest`
    /// arriving at `now` (and marks it in flight when it is to be applied).
    pub fn begin(&mut self, key: &ReportKey, digest: [u8; 32], now: Instant) -> Begin {
        self.prune(now);
        let progress = match self.entries.get(key) {
            Some(e) if e.digest != digest => return Begin::Mismatch,
            Some(e) => match &e.state {
                State::Done(ack) => return Begin::Done(ack.clone()),
                State::InFlight(rx) => return Begin::InFlight(rx.clone()),
                State::Failed(p) => p.clone(),
            },
            None => Progress::default(),
        };
        let (done, rx) = watch::channel(None);
        self.next_seq += 1;
        self.entries.insert(
            key.clone(),
            Entry {
                state: State::InFlight(rx),
                digest,
                seq: self.next_seq,
            },
        );
        Begin::Start { progress, done }
    }

    /// Records how the attempt at `key` ended: `Ok` → done, `Err` → failed with `progress`.
    pub fn finish(
        &mut self,
        key: &ReportKey,
        result: &AttemptResult,
        progress: Progress,
        now: Instant,
    ) {
        let Some(entry) = self.entries.get_mut(key) else {
            return;
        };
        entry.state = match result {
            Ok(ack) => State::Done(ack.clone()),
            Err(_) => State::Failed(progress),
        };
        self.finished.push_back((key.clone(), entry.seq, now));
        self.prune(now);
    }

    /// Ids remembered (in flight or finished).
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Nothing remembered.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    fn prune(&mut self, now: Instant) {
        while let Some((id, seq, at)) = self.finished.front() {
            let expired = now.saturating_duration_since(*at) >= self.retention;
            if !expired && self.finished.len() <= self.max_finished {
                break;
            }
            if let Some(e) = self.entries.get(id)
                && e.seq == *seq
                && !matches!(e.state, State::InFlight(_))
            {
                self.entries.remove(id);
            }
            self.finished.pop_front();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ack(trips: usize) -> ReportAck {
        ReportAck {
            trips,
            executions: 1,
            duplicate: false,
        }
    }

    const BODY: [u8; 32] = [7; 32];

    fn k(id: &str) -> ReportKey {
        ("d".to_string(), id.to_string())
    }

    fn start(
        log: &mut ReportLog,
        id: &str,
        now: Instant,
    ) -> (Progress, watch::Sender<Option<AttemptResult>>) {
        match log.begin(&k(id), BODY, now) {
            Begin::Start { progress, done } => (progress, done),
            other => panic!("expected Start, got {other:?}"),
        }
    }

    #[test]
    fn the_digest_covers_closes() {
        let base: Report =
            serde_json::from_value(serde_json::json!({"dispatcher": "d", "reportId": "r"}))
                .unwrap();
        let with_close: Report = serde_json::from_value(serde_json::json!({
            "dispatcher": "d", "reportId": "r",
            "closes": [{"uid": "u", "namespace": "n", "name": "h", "generation": 1,
                        "tenant": "a", "openedAt": "2025-03-01T10:00:00Z",
                        "closedAt": "2025-03-01T10:00:31Z"}]
        }))
        .unwrap();
        let mut other_tenant = with_close.clone();
        other_tenant.closes[0].tenant = "b".into();
        assert_ne!(digest(&base), digest(&with_close));
        assert_ne!(digest(&with_close), digest(&other_tenant));
        assert_eq!(digest(&with_close), digest(&with_close.clone()));
    }

    #[test]
    fn a_repeated_id_is_applied_once() {
        let t0 = Instant::now();
        let mut log = ReportLog::default();
        let (progress, done) = start(&mut log, "r1", t0);
        assert_eq!(progress, Progress::default());
        // a duplicate while the first attempt runs waits for it
        let Begin::InFlight(mut rx) = log.begin(&k("r1"), BODY, t0) else {
            panic!("expected InFlight")
        };
        log.finish(&k("r1"), &Ok(ack(1)), Progress::default(), t0);
        done.send_replace(Some(Ok(ack(1))));
        assert_eq!(rx.borrow_and_update().clone(), Some(Ok(ack(1))));
        // and after it
        match log.begin(&k("r1"), BODY, t0 + Duration::from_secs(5)) {
            Begin::Done(a) => assert_eq!(a, ack(1)),
            other => panic!("expected Done, got {other:?}"),
        }
        // another id is new
        assert!(matches!(log.begin(&k("r2"), BODY, t0), Begin::Start { .. }));
    }

    #[test]
    fn a_failed_attempt_hands_its_progress_to_the_retry() {
        let t0 = Instant::now();
        let mut log = ReportLog::default();
        let (_, _done) = start(&mut log, "r1", t0);
        let progress = Progress {
            persisted: ["uid-a".to_string()].into(),
            trips: 1,
            executions: 1,
            decided_trips: Vec::new(),
        };
        log.finish(
            &k("r1"),
            &Err("uid-b not written".into()),
            progress.clone(),
            t0,
        );
        let (again, _done) = start(&mut log, "r1", t0);
        assert_eq!(again, progress, "the retry skips uid-a");
        assert!(
            matches!(log.begin(&k("r1"), BODY, t0), Begin::InFlight(_)),
            "the retry is in flight"
        );
    }

    #[test]
    fn finished_ids_are_forgotten_after_the_retention_or_past_the_bound() {
        let t0 = Instant::now();
        let mut log = ReportLog::new(Duration::from_secs(600), 3);
        for i in 0..5 {
            let id = format!("r{i}");
            let _ = start(&mut log, &id, t0);
            log.finish(&k(&id), &Ok(ack(0)), Progress::default(), t0);
        }
        assert_eq!(log.len(), 3, "bounded");
        assert!(
            matches!(log.begin(&k("r0"), BODY, t0), Begin::Start { .. }),
            "oldest gone"
        );
        assert!(matches!(log.begin(&k("r4"), BODY, t0), Begin::Done(_)));
        let later = t0 + Duration::from_secs(601);
        assert!(
            matches!(log.begin(&k("r4"), BODY, later), Begin::Start { .. }),
            "expired"
        );
        assert_eq!(log.len(), 2, "r0 and r4 in flight; the rest expired");
    }

    #[test]
    fn an_entry_in_flight_again_is_not_evicted_by_its_old_record() {
        let t0 = Instant::now();
        let mut log = ReportLog::new(Duration::from_secs(10), 100);
        let _ = start(&mut log, "r1", t0);
        log.finish(&k("r1"), &Err("x".into()), Progress::default(), t0);
        let _ = start(&mut log, "r1", t0 + Duration::from_secs(5));
        // the first attempt's record expires while the retry runs
        assert!(matches!(
            log.begin(&k("r1"), BODY, t0 + Duration::from_secs(11)),
            Begin::InFlight(_)
        ));
    }

    #[test]
    fn ids_are_per_dispatcher_and_another_body_under_an_id_is_a_mismatch() {
        let t0 = Instant::now();
        let mut log = ReportLog::default();
        let (_, done) = start(&mut log, "r1", t0);
        assert!(
            matches!(log.begin(&k("r1"), [8; 32], t0), Begin::Mismatch),
            "in flight, another body"
        );
        log.finish(&k("r1"), &Ok(ack(0)), Progress::default(), t0);
        done.send_replace(Some(Ok(ack(0))));
        assert!(matches!(log.begin(&k("r1"), [8; 32], t0), Begin::Mismatch));
        assert!(matches!(log.begin(&k("r1"), BODY, t0), Begin::Done(_)));
        let other = ("e".to_string(), "r1".to_string());
        assert!(
            matches!(log.begin(&other, [8; 32], t0), Begin::Start { .. }),
            "another dispatcher's r1 is another report"
        );
    }

    #[test]
    fn the_digest_is_of_the_parsed_body() {
        let a: Report =
            serde_json::from_str(r#"{"dispatcher":"d","reportId":"r","executions":[]}"#).unwrap();
        let b: Report = serde_json::from_str(
            r#"{ "reportId" : "r",
                 "dispatcher" : "d", "extra": 1 }"#,
        )
        .unwrap();
        assert_eq!(digest(&a), digest(&b), "order, whitespace, unknown fields");
        let mut c = a.clone();
        c.executions.push(agenthooks_crds::report::ExecutionDelta {
            uid: "u".into(),
            namespace: "n".into(),
            name: "h".into(),
            allow: 1,
            ..Default::default()
        });
        assert_ne!(digest(&a), digest(&c));
    }
}
