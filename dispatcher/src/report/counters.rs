//! Per-hook execution counters, bumped on the hot path (issue 3 point 4; CONTRACT §7).
//!
//! One [`HookCounters`] lives with each compiled hook version. A hook run costs two
//! atomic operations and a clock read: `fetch_add` on its outcome's counter and
//! `fetch_max` on the packed (time, outcome) of the last run. The reporter takes the
//! counts with `swap(0)`, so a run concurrent with a sweep is counted by this sweep or
//! the next one, never twice and never lost.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use crate::decision::outcome::Outcome;

/// Outcomes in counter order: `allow`, `block`, `error`, `timeout`, `ask`.
pub const OUTCOMES: [Outcome; 5] = [
    Outcome::Allow,
    Outcome::Block,
    Outcome::Error,
    Outcome::Timeout,
    Outcome::Ask,
];

/// Index of `o` in [`OUTCOMES`].
pub fn outcome_index(o: Outcome) -> usize {
    match o {
        Outcome::Allow => 0,
        Outcome::Block => 1,
        Outcome::Error => 2,
        Outcome::Timeout => 3,
        Outcome::Ask => 4,
    }
}

/// The identity a count is reported under (crds `report::ExecutionDelta`).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct HookIdentity {
    pub uid: String,
    pub namespace: String,
    pub name: String,
}

/// Counts taken from one [`HookCounters`]: runs by outcome (in [`OUTCOMES`] order) and
/// the last run packed as `unix_ms << 3 | outcome index` (0: none).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counts {
    pub by_outcome: [u64; 5],
    pub last: u64,
}

impl Counts {
    /// Adds `other` (the later of the two last runs wins).
    pub fn merge(&mut self, other: &Counts) {
        for (a, b) in self.by_outcome.iter_mut().zip(other.by_outcome) {
            *a = a.saturating_add(b);
        }
        self.last = self.last.max(other.last);
    }

    /// No run at all.
    pub fn is_empty(&self) -> bool {
        self.by_outcome == [0; 5] && self.last == 0
    }

    /// Runs counted.
    pub fn total(&self) -> u64 {
        self.by_outcome
            .iter()
            .fold(0u64, |a, b| a.saturating_add(*b))
    }

    /// The last run: milliseconds since the Unix epoch and its outcome.
    pub fn last_run(&self) -> Option<(u64, Outcome)> {
        (self.last != 0).then(|| (self.last >> 3, OUTCOMES[(self.last & 7) as usize]))
    }
}

/// Execution counters of one hook version on this dispatcher.
#[derive(Debug)]
pub struct HookCounters {
    pub identity: HookIdentity,
    by_outcome: [AtomicU64; 5],
    last: AtomicU64,
    /// Set once the outbox holds this cell (so a hook reused across snapshots is
    /// registered once).
    pub(crate) registered: AtomicBool,
}

/// Packs a run at `unix_ms` with `outcome` (see [`Counts::last`]).
pub fn pack_last(unix_ms: u64, outcome: Outcome) -> u64 {
    (unix_ms << 3) | outcome_index(outcome) as u64
}

/// Milliseconds since the Unix epoch now (0 if the clock is before 1970).
pub fn unix_ms_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

impl HookCounters {
    /// Zeroed counters for `identity`.
    pub fn new(identity: HookIdentity) -> HookCounters {
        HookCounters {
            identity,
            by_outcome: Default::default(),
            last: AtomicU64::new(0),
            registered: AtomicBool::new(false),
        }
    }

    /// Counts one run at `unix_ms` (the hot path: two atomic operations).
    #[inline]
    pub fn record(&self, outcome: Outcome, unix_ms: u64) {
        self.last
            .fetch_max(pack_last(unix_ms, outcome), Ordering::Relaxed);
        self.by_outcome[outcome_index(outcome)].fetch_add(1, Ordering::Relaxed);
    }

    /// The counts so far, left in place (the console's standalone view: nothing takes
    /// them there).
    pub fn peek(&self) -> Counts {
        Counts {
            by_outcome: [0, 1, 2, 3, 4].map(|i| self.by_outcome[i].load(Ordering::Relaxed)),
            last: self.last.load(Ordering::Relaxed),
        }
    }

    /// Takes the counts so far, leaving zeros.
    pub fn take(&self) -> Counts {
        // The counts first, then `last`: a run racing the sweep leaves at worst a `last`
        // for the next sweep with its count in this one (the operator keeps the latest).
        let by_outcome = [0, 1, 2, 3, 4].map(|i| self.by_outcome[i].swap(0, Ordering::Relaxed));
        Counts {
            by_outcome,
            last: self.last.swap(0, Ordering::Relaxed),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    fn cell() -> HookCounters {
        HookCounters::new(HookIdentity {
            uid: "u".into(),
            namespace: "ns".into(),
            name: "h".into(),
        })
    }

    #[test]
    fn counts_by_outcome_and_keeps_the_latest_run() {
        let c = cell();
        c.record(Outcome::Allow, 1_000);
        c.record(Outcome::Block, 3_000);
        c.record(Outcome::Timeout, 2_000);
        c.record(Outcome::Error, 2_500);
        c.record(Outcome::Allow, 2_900);
        c.record(Outcome::Ask, 2_950);
        let t = c.take();
        assert_eq!(t.by_outcome, [2, 1, 1, 1, 1]);
        assert_eq!(t.total(), 6);
        assert_eq!(t.last_run(), Some((3_000, Outcome::Block)));
        c.record(Outcome::Ask, 4_000);
        assert_eq!(c.take().last_run(), Some((4_000, Outcome::Ask)));
        assert_eq!(c.take(), Counts::default(), "taken counts are zeroed");
        assert!(c.take().is_empty());
    }

    #[test]
    fn merge_adds_and_keeps_the_later_last_run() {
        let mut a = Counts {
            by_outcome: [1, 2, 3, 4, 0],
            last: pack_last(5_000, Outcome::Error),
        };
        a.merge(&Counts {
            by_outcome: [10, 0, 0, 1, 7],
            last: pack_last(4_000, Outcome::Allow),
        });
        assert_eq!(a.by_outcome, [11, 2, 3, 5, 7]);
        assert_eq!(a.last_run(), Some((5_000, Outcome::Error)));
        a.merge(&Counts {
            by_outcome: [0; 5],
            last: pack_last(6_000, Outcome::Timeout),
        });
        assert_eq!(a.last_run(), Some((6_000, Outcome::Timeout)));
    }

    #[test]
    fn sweeps_racing_runs_lose_and_double_nothing() {
        let c = Arc::new(cell());
        let threads: Vec<_> = (0..4)
            .map(|t| {
                let c = Arc::clone(&c);
                std::thread::spawn(move || {
                    for i in 0..50_000u64 {
                        c.record(OUTCOMES[((i + t) % 5) as usize], 1_000 + i);
                    }
                })
            })
            .collect();
        let mut total = Counts::default();
        while !threads.iter().all(|t| t.is_finished()) {
            total.merge(&c.take());
        }
        for t in threads {
            t.join().unwrap();
        }
        total.merge(&c.take());
        assert_eq!(total.total(), 200_000);
        assert_eq!(total.by_outcome, [40_000; 5]);
        assert_eq!(total.last_run().map(|(ms, _)| ms), Some(1_000 + 49_999));
    }
}
