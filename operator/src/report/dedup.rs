//! Which `reportId`s this replica has applied: a report retried after a lost answer is
//! applied once (crds `report.rs`: "the operator applies a given id once").
//!
//! Per id the log holds one of:
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

use agenthooks_crds::report::{ReportAck, TripReport};
use tokio::sync::watch;

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
    /// Bumped each time the entry is (re)started, so a stale `finished` record of an
    /// earlier attempt never evicts a later one.
    seq: u64,
}

/// What [`ReportLog::begin`] decided.
#[derive(Debug)]
pub enum Begin {
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
    entries: HashMap<String, Entry>,
    finished: VecDeque<(String, u64, Instant)>,
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

    /// Decides what to do with report `id` arriving at `now` (and marks it in flight when
    /// it is to be applied).
    pub fn begin(&mut self, id: &str, now: Instant) -> Begin {
        self.prune(now);
        let progress = match self.entries.get(id).map(|e| &e.state) {
            Some(State::Done(ack)) => return Begin::Done(ack.clone()),
            Some(State::InFlight(rx)) => return Begin::InFlight(rx.clone()),
            Some(State::Failed(p)) => p.clone(),
            None => Progress::default(),
        };
        let (done, rx) = watch::channel(None);
        self.next_seq += 1;
        self.entries.insert(
            id.to_string(),
            Entry {
                state: State::InFlight(rx),
                seq: self.next_seq,
            },
        );
        Begin::Start { progress, done }
    }

    /// Records how the attempt at `id` ended: `Ok` → done, `Err` → failed with `progress`.
    pub fn finish(&mut self, id: &str, result: &AttemptResult, progress: Progress, now: Instant) {
        let Some(entry) = self.entries.get_mut(id) else {
            return;
        };
        entry.state = match result {
            Ok(ack) => State::Done(ack.clone()),
            Err(_) => State::Failed(progress),
        };
        self.finished.push_back((id.to_string(), entry.seq, now));
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

    fn start(
        log: &mut ReportLog,
        id: &str,
        now: Instant,
    ) -> (Progress, watch::Sender<Option<AttemptResult>>) {
        match log.begin(id, now) {
            Begin::Start { progress, done } => (progress, done),
            other => panic!("expected Start, got {other:?}"),
        }
    }

    #[test]
    fn a_repeated_id_is_applied_once() {
        let t0 = Instant::now();
        let mut log = ReportLog::default();
        let (progress, done) = start(&mut log, "r1", t0);
        assert_eq!(progress, Progress::default());
        // a duplicate while the first attempt runs waits for it
        let Begin::InFlight(mut rx) = log.begin("r1", t0) else {
            panic!("expected InFlight")
        };
        log.finish("r1", &Ok(ack(1)), Progress::default(), t0);
        done.send_replace(Some(Ok(ack(1))));
        assert_eq!(rx.borrow_and_update().clone(), Some(Ok(ack(1))));
        // and after it
        match log.begin("r1", t0 + Duration::from_secs(5)) {
            Begin::Done(a) => assert_eq!(a, ack(1)),
            other => panic!("expected Done, got {other:?}"),
        }
        // another id is new
        assert!(matches!(log.begin("r2", t0), Begin::Start { .. }));
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
        log.finish("r1", &Err("uid-b not written".into()), progress.clone(), t0);
        let (again, _done) = start(&mut log, "r1", t0);
        assert_eq!(again, progress, "the retry skips uid-a");
        assert!(
            matches!(log.begin("r1", t0), Begin::InFlight(_)),
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
            log.finish(&id, &Ok(ack(0)), Progress::default(), t0);
        }
        assert_eq!(log.len(), 3, "bounded");
        assert!(
            matches!(log.begin("r0", t0), Begin::Start { .. }),
            "oldest gone"
        );
        assert!(matches!(log.begin("r4", t0), Begin::Done(_)));
        let later = t0 + Duration::from_secs(601);
        assert!(
            matches!(log.begin("r4", later), Begin::Start { .. }),
            "expired"
        );
        assert_eq!(log.len(), 2, "r0 and r4 in flight; the rest expired");
    }

    #[test]
    fn an_entry_in_flight_again_is_not_evicted_by_its_old_record() {
        let t0 = Instant::now();
        let mut log = ReportLog::new(Duration::from_secs(10), 100);
        let _ = start(&mut log, "r1", t0);
        log.finish("r1", &Err("x".into()), Progress::default(), t0);
        let _ = start(&mut log, "r1", t0 + Duration::from_secs(5));
        // the first attempt's record expires while the retry runs
        assert!(matches!(
            log.begin("r1", t0 + Duration::from_secs(11)),
            Begin::InFlight(_)
        ));
    }
}
