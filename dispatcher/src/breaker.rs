//! The circuit breaker of one hook on one dispatcher (CONTRACT §6.1; seed "Circuit
//! breaker": "N consecutive blocks/timeouts in a rolling window auto-disables the hook").
//!
//! Rule: a hook whose outcomes are `block` or `timeout` [`TRIP_THRESHOLD`] times in a row,
//! the first and the last of them within [`TRIP_WINDOW`], trips. An `allow` resets the
//! run; an `error` neither counts nor resets. Once tripped the hook stays open on this
//! dispatcher: it runs no more. The state lives with the compiled hook, so a new
//! generation (a spec edit) starts closed (CONTRACT §6.3).
//!
//! The breaker also keeps what the operator needs to count the breaker across
//! dispatchers (crds `report::BreakerObservation`): the wall-clock time of the last
//! `allow` and of each outcome of the current run, and whether they changed since the
//! reporter last took them.
//!
//! The lock is a `std::sync::Mutex` held for a few instructions, never across an await.

use std::collections::VecDeque;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use crate::handlers::Outcome;

/// Outcomes in a row that trip the breaker (seed: 5).
pub const TRIP_THRESHOLD: usize = 5;
/// Window the run must fit in (seed: 1 minute).
pub const TRIP_WINDOW: Duration = Duration::from_secs(60);

/// Why and when a breaker tripped.
#[derive(Debug, Clone, PartialEq)]
pub struct Trip {
    /// `block` and `timeout` counts of the tripping run.
    pub blocks: usize,
    pub timeouts: usize,
    /// Seconds between the first and the last outcome of the run.
    pub over_seconds: f64,
}

impl Trip {
    /// A sentence for status, Events and logs.
    pub fn reason(&self) -> String {
        format!(
            "{} blocks and {} timeouts in a row within {:.0} s (threshold {TRIP_THRESHOLD} within {} s)",
            self.blocks,
            self.timeouts,
            self.over_seconds,
            TRIP_WINDOW.as_secs()
        )
    }
}

/// What [`Breaker::record_reporting`] saw.
#[derive(Debug, Clone, PartialEq)]
pub struct Recorded {
    /// The trip, when this outcome tripped the breaker.
    pub trip: Option<Trip>,
    /// Whether the run changed in a way the operator should hear of soon.
    pub report_soon: bool,
}

/// Breaker state of one hook version.
#[derive(Debug, Default)]
pub struct Breaker {
    open: AtomicBool,
    state: Mutex<RunState>,
}

#[derive(Debug, Default)]
struct RunState {
    /// The current run of block/timeout outcomes: (when, was it a timeout, when in
    /// milliseconds since the Unix epoch).
    run: VecDeque<(Instant, bool, u64)>,
    /// The last `allow`, milliseconds since the Unix epoch (0: none).
    last_allow_ms: u64,
    /// Changed since [`Breaker::take_observation`] last took it.
    dirty: bool,
}

/// This dispatcher's view of a hook's run, for the operator's cross-dispatcher count:
/// the last `allow` and the `block`/`timeout` outcomes since, oldest first, at most
/// [`TRIP_THRESHOLD`] (all times in milliseconds since the Unix epoch).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Observation {
    pub last_allow_ms: Option<u64>,
    /// (when, was it a timeout).
    pub run: Vec<(u64, bool)>,
}

impl Breaker {
    /// Whether the hook must not run any more.
    pub fn is_open(&self) -> bool {
        self.open.load(Ordering::Acquire)
    }

    /// Records one outcome at `now` (wall clock: the current time). Returns the trip
    /// when this outcome tripped it.
    pub fn record(&self, outcome: Outcome, now: Instant) -> Option<Trip> {
        self.record_at(outcome, now, crate::report::counters::unix_ms_now())
    }

    /// Records one outcome at `now`, `unix_ms` on the wall clock. Returns the trip when
    /// this outcome tripped it.
    pub fn record_at(&self, outcome: Outcome, now: Instant, unix_ms: u64) -> Option<Trip> {
        self.record_reporting(outcome, now, unix_ms).trip
    }

    /// Like [`Breaker::record_at`], also saying whether the operator should hear of the
    /// run soon: a `block` or `timeout` grew it, or an `allow` ended a run the operator
    /// may hold (its merged window must see that reset before later blocks, or it would
    /// count them in a row with the earlier ones).
    pub fn record_reporting(&self, outcome: Outcome, now: Instant, unix_ms: u64) -> Recorded {
        let trip = match outcome {
            Outcome::Allow => {
                let mut st = self.state.lock().unwrap_or_else(|p| p.into_inner());
                let ended_a_run = !st.run.is_empty();
                st.run.clear();
                st.last_allow_ms = st.last_allow_ms.max(unix_ms);
                st.dirty = true;
                return Recorded {
                    trip: None,
                    report_soon: ended_a_run,
                };
            }
            Outcome::Error => {
                return Recorded {
                    trip: None,
                    report_soon: false,
                };
            }
            Outcome::Block | Outcome::Timeout => self.record_run(outcome, now, unix_ms),
        };
        Recorded {
            trip,
            report_soon: true,
        }
    }

    fn record_run(&self, outcome: Outcome, now: Instant, unix_ms: u64) -> Option<Trip> {
        let counts_as_timeout = match outcome {
            Outcome::Allow | Outcome::Error => return None,
            Outcome::Block => false,
            Outcome::Timeout => true,
        };
        let mut st = self.state.lock().unwrap_or_else(|p| p.into_inner());
        st.dirty = true;
        let run = &mut st.run;
        run.push_back((now, counts_as_timeout, unix_ms));
        while run.len() > TRIP_THRESHOLD {
            run.pop_front();
        }
        if run.len() < TRIP_THRESHOLD {
            return None;
        }
        let first = run.front().map(|(t, _, _)| *t).unwrap_or(now);
        let span = now.saturating_duration_since(first);
        if span > TRIP_WINDOW {
            return None;
        }
        if self.open.swap(true, Ordering::AcqRel) {
            return None; // already open: trip once
        }
        let timeouts = run.iter().filter(|(_, t, _)| *t).count();
        Some(Trip {
            blocks: run.len() - timeouts,
            timeouts,
            over_seconds: span.as_secs_f64(),
        })
    }

    /// The run as the operator wants it, when it changed since the last call (which
    /// this call clears); `None` when nothing changed.
    pub fn take_observation(&self) -> Option<Observation> {
        let mut st = self.state.lock().unwrap_or_else(|p| p.into_inner());
        if !std::mem::take(&mut st.dirty) {
            return None;
        }
        Some(Observation {
            last_allow_ms: (st.last_allow_ms != 0).then_some(st.last_allow_ms),
            run: st.run.iter().map(|(_, to, ms)| (*ms, *to)).collect(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(base: Instant, secs: u64) -> Instant {
        base + Duration::from_secs(secs)
    }

    #[test]
    fn five_blocks_within_a_minute_trip_once() {
        let b = Breaker::default();
        let t0 = Instant::now();
        for i in 0..4 {
            assert_eq!(b.record(Outcome::Block, at(t0, i)), None);
            assert!(!b.is_open());
        }
        let trip = b
            .record(Outcome::Block, at(t0, 4))
            .expect("the fifth trips");
        assert_eq!((trip.blocks, trip.timeouts), (5, 0));
        assert!(b.is_open());
        assert_eq!(b.record(Outcome::Block, at(t0, 5)), None, "trips only once");
    }

    #[test]
    fn timeouts_count_like_blocks() {
        let b = Breaker::default();
        let t0 = Instant::now();
        for (i, o) in [
            Outcome::Timeout,
            Outcome::Block,
            Outcome::Timeout,
            Outcome::Block,
        ]
        .into_iter()
        .enumerate()
        {
            assert_eq!(b.record(o, at(t0, i as u64)), None);
        }
        let trip = b.record(Outcome::Timeout, at(t0, 10)).unwrap();
        assert_eq!((trip.blocks, trip.timeouts), (2, 3));
    }

    #[test]
    fn an_allow_resets_the_run() {
        let b = Breaker::default();
        let t0 = Instant::now();
        for i in 0..4 {
            b.record(Outcome::Block, at(t0, i));
        }
        b.record(Outcome::Allow, at(t0, 5));
        for i in 6..10 {
            assert_eq!(
                b.record(Outcome::Block, at(t0, i)),
                None,
                "only 4 since the allow"
            );
        }
        assert!(b.record(Outcome::Block, at(t0, 10)).is_some());
    }

    #[test]
    fn errors_neither_count_nor_reset() {
        let b = Breaker::default();
        let t0 = Instant::now();
        for i in 0..4 {
            b.record(Outcome::Block, at(t0, i));
            assert_eq!(b.record(Outcome::Error, at(t0, i)), None);
        }
        assert!(!b.is_open(), "errors do not count");
        assert!(
            b.record(Outcome::Block, at(t0, 5)).is_some(),
            "errors did not reset the run"
        );
    }

    #[test]
    fn blocks_and_an_allow_ending_a_run_are_reported_soon_other_allows_and_errors_not() {
        let b = Breaker::default();
        let t0 = Instant::now();
        let soon = |o| b.record_reporting(o, t0, 1_000).report_soon;
        assert!(
            !soon(Outcome::Allow),
            "an allow with no run changes nothing the operator holds"
        );
        assert!(!soon(Outcome::Error));
        assert!(soon(Outcome::Block));
        assert!(!soon(Outcome::Error), "errors neither count nor reset");
        assert!(soon(Outcome::Timeout));
        assert!(soon(Outcome::Allow), "this allow ends a run of two");
        assert!(!soon(Outcome::Allow));
    }

    #[test]
    fn observations_carry_the_last_allow_and_the_run_once_per_change() {
        let b = Breaker::default();
        let t0 = Instant::now();
        assert_eq!(b.take_observation(), None, "nothing ran");
        b.record_at(Outcome::Block, t0, 1_000);
        b.record_at(Outcome::Allow, t0, 2_000);
        b.record_at(Outcome::Timeout, t0, 3_000);
        b.record_at(Outcome::Error, t0, 3_500);
        b.record_at(Outcome::Block, t0, 4_000);
        assert_eq!(
            b.take_observation(),
            Some(Observation {
                last_allow_ms: Some(2_000),
                run: vec![(3_000, true), (4_000, false)],
            })
        );
        assert_eq!(b.take_observation(), None, "taken once");
        b.record_at(Outcome::Error, t0, 5_000);
        assert_eq!(b.take_observation(), None, "an error changes nothing");
        for i in 0..7 {
            b.record_at(Outcome::Block, t0, 6_000 + i);
        }
        let o = b.take_observation().unwrap();
        assert_eq!(o.run.len(), TRIP_THRESHOLD, "the newest five only");
        assert_eq!(o.run[0], (6_002, false));
        assert!(b.is_open());
    }

    #[test]
    fn a_run_spread_over_more_than_a_minute_does_not_trip() {
        let b = Breaker::default();
        let t0 = Instant::now();
        for i in 0..5 {
            assert_eq!(
                b.record(Outcome::Block, at(t0, i * 20)),
                None,
                "5 blocks over 80 s"
            );
        }
        // the last five are now 20..100 s: still over a minute apart
        assert_eq!(b.record(Outcome::Block, at(t0, 100)), None);
        // exactly 60 s between first and last of the run trips (within the window)
        let b = Breaker::default();
        for i in 0..4 {
            b.record(Outcome::Block, at(t0, i * 15));
        }
        assert!(b.record(Outcome::Block, at(t0, 60)).is_some());
    }
}
