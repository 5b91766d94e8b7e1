//! The circuit breaker counted across dispatchers (CONTRACT §6.1; issue 3 point 1: six
//! blocks spread over three dispatchers trip the hook).
//!
//! A trip is decided in one of two ways, and the operator accepts both:
//! - by **one dispatcher on its own sequence** of outcomes (CONTRACT §6.2: the dispatcher
//!   that saw five `block`/`timeout` in a row within the window stops running the hook at
//!   once and reports the trip; [`crate::report`] records it as sent);
//! - by **the operator on the time-merged sequence of all dispatchers** (this module):
//!   outcomes that are each too few on every single dispatcher add up here.
//!
//! Each dispatcher reports, per hook, a [`BreakerObservation`]: when it last saw `allow`,
//! and the `block`/`timeout` outcomes since then (its run). The operator keeps the
//! latest observation of every dispatcher and merges them by time:
//!
//! - the global last allow is the newest `lastAllowAt` over all dispatchers;
//! - the global run is every reported outcome after it, ordered by time;
//! - the hook trips when the global run's newest [`BREAKER_THRESHOLD`] outcomes span at
//!   most [`BREAKER_WINDOW_SECONDS`] (first to last).
//!
//! So an `allow` anywhere resets the run everywhere, errors neither count nor reset, and
//! "in a row" means in time order across replicas (dispatcher clocks are assumed in
//! sync to well under the window, as NTP gives). A reported time later than the
//! observation's receipt time (+ [`crate::report::times::MAX_SKEW`]) is taken as the
//! receipt time, so a skewed or forged `lastAllowAt` (year 9999) resets the run only up
//! to the moment it arrived and cannot hold the breaker closed afterwards.
//!
//! State is per hook version (uid, generation, reset token): a new version starts empty,
//! a version that trips here is forgotten, and [`BreakerWindows::forget`] drops a hook
//! tripped locally by a dispatcher. Memory is bounded: observations older than the window
//! (by arrival) are dropped by [`BreakerWindows::prune`] (the report endpoint prunes on
//! every report and periodically, and then also drops versions the index no longer holds:
//! [`BreakerWindows::retain`]); at most [`MAX_DISPATCHERS_PER_HOOK`] dispatchers are kept
//! per hook version and at most [`MAX_HOOKS`] hook versions, the least recently observed
//! ones going first.

use std::collections::HashMap;

use agenthooks_crds::report::{BREAKER_THRESHOLD, BREAKER_WINDOW_SECONDS, BreakerObservation};
use chrono::{DateTime, Duration, Utc};

use crate::report::times::clamp_future;

/// A hook version: (uid, generation, reset token).
pub type HookVersion = (String, i64, Option<String>);

/// Most dispatchers whose observation is kept per hook version (the oldest observation
/// goes first).
pub const MAX_DISPATCHERS_PER_HOOK: usize = 256;
/// Most hook versions tracked (the least recently observed goes first).
pub const MAX_HOOKS: usize = 100_000;

/// What a dispatcher last said about one hook version.
#[derive(Debug, Clone, PartialEq)]
struct Seen {
    last_allow: Option<DateTime<Utc>>,
    /// (when, timeout), oldest first.
    run: Vec<(DateTime<Utc>, bool)>,
    /// When this observation arrived (for pruning).
    received: DateTime<Utc>,
}

/// The observations of one hook version.
#[derive(Debug, Clone, Default)]
struct Tracked {
    namespace: String,
    name: String,
    per: HashMap<String, Seen>,
    /// Arrival of the newest observation.
    last_received: Option<DateTime<Utc>>,
}

/// A trip decided by [`BreakerWindows::observe`].
#[derive(Debug, Clone, PartialEq)]
pub struct GlobalTrip {
    /// The newest outcome of the tripping run.
    pub tripped_at: DateTime<Utc>,
    /// The dispatcher whose observation completed the run.
    pub dispatcher: String,
    /// `block` outcomes in the run.
    pub blocks: usize,
    /// `timeout` outcomes in the run.
    pub timeouts: usize,
    /// Distinct dispatchers that contributed to the run.
    pub dispatchers: usize,
    /// Seconds from the run's first to its last outcome.
    pub over_seconds: f64,
}

impl GlobalTrip {
    /// A sentence for status, Events and logs.
    pub fn reason(&self) -> String {
        format!(
            "{} blocks and {} timeouts in a row within {:.0} s over {} dispatcher(s) (threshold {BREAKER_THRESHOLD} within {BREAKER_WINDOW_SECONDS} s)",
            self.blocks, self.timeouts, self.over_seconds, self.dispatchers
        )
    }
}

/// Why an observation was not taken.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum ObservationError {
    /// A time field is not RFC 3339.
    #[error("breaker observation of {hook}: {field} `{value}` is not an RFC 3339 time")]
    BadTime {
        /// `namespace/name`.
        hook: String,
        /// The field's JSON path.
        field: &'static str,
        /// What was sent.
        value: String,
    },
}

/// Breaker runs of every hook version, per dispatcher.
#[derive(Debug)]
pub struct BreakerWindows {
    hooks: HashMap<HookVersion, Tracked>,
    max_hooks: usize,
    max_dispatchers: usize,
}

impl Default for BreakerWindows {
    fn default() -> Self {
        BreakerWindows::with_caps(MAX_HOOKS, MAX_DISPATCHERS_PER_HOOK)
    }
}

fn parse(hook: &str, field: &'static str, v: &str) -> Result<DateTime<Utc>, ObservationError> {
    crate::report::times::parse_utc(v).map_err(|_| ObservationError::BadTime {
        hook: hook.to_string(),
        field,
        value: v.to_string(),
    })
}

impl BreakerWindows {
    /// Empty, with the default caps ([`MAX_HOOKS`], [`MAX_DISPATCHERS_PER_HOOK`]).
    pub fn new() -> BreakerWindows {
        BreakerWindows::default()
    }

    /// Empty, keeping at most `max_hooks` hook versions and `max_dispatchers` dispatchers
    /// per version (each at least 1).
    pub fn with_caps(max_hooks: usize, max_dispatchers: usize) -> BreakerWindows {
        BreakerWindows {
            hooks: HashMap::new(),
            max_hooks: max_hooks.max(1),
            max_dispatchers: max_dispatchers.max(1),
        }
    }

    /// Records `obs` from `dispatcher` (replacing its previous one for that hook
    /// version), received at `now`, and returns a trip if the merged run now trips.
    /// Times later than `now` (+ skew) are taken as `now`. A hook version that tripped is
    /// forgotten (its next version starts empty). At a cap, the oldest observation of the
    /// version (or the least recently observed version) is dropped first.
    ///
    /// Errors: [`ObservationError::BadTime`] when a time does not parse (nothing is
    /// recorded).
    pub fn observe(
        &mut self,
        dispatcher: &str,
        obs: &BreakerObservation,
        now: DateTime<Utc>,
    ) -> Result<Option<GlobalTrip>, ObservationError> {
        let hook = format!("{}/{}", obs.namespace, obs.name);
        let last_allow = obs
            .last_allow_at
            .as_deref()
            .map(|v| parse(&hook, "lastAllowAt", v).map(|t| clamp_future(t, now)))
            .transpose()?;
        let mut run = obs
            .run
            .iter()
            .map(|o| parse(&hook, "run[].at", &o.at).map(|t| (clamp_future(t, now), o.timeout)))
            .collect::<Result<Vec<_>, _>>()?;
        run.sort_by_key(|(t, _)| *t);
        let keep_from = run.len().saturating_sub(BREAKER_THRESHOLD);
        run.drain(..keep_from);
        let key: HookVersion = (obs.uid.clone(), obs.generation, obs.reset_token.clone());
        if !self.hooks.contains_key(&key) && self.hooks.len() >= self.max_hooks {
            self.prune(now);
            if self.hooks.len() >= self.max_hooks {
                self.evict_least_recent_hook();
            }
        }
        let max_dispatchers = self.max_dispatchers;
        let tracked = self.hooks.entry(key.clone()).or_insert_with(|| Tracked {
            namespace: obs.namespace.clone(),
            name: obs.name.clone(),
            ..Default::default()
        });
        if !tracked.per.contains_key(dispatcher) && tracked.per.len() >= max_dispatchers {
            let oldest = tracked
                .per
                .iter()
                .min_by_key(|(_, s)| s.received)
                .map(|(d, _)| d.clone());
            if let Some(d) = oldest {
                tracked.per.remove(&d);
            }
        }
        tracked.per.insert(
            dispatcher.to_string(),
            Seen {
                last_allow,
                run,
                received: now,
            },
        );
        tracked.last_received = Some(tracked.last_received.map_or(now, |t| t.max(now)));
        let trip = merged_trip(&tracked.per, dispatcher);
        if trip.is_some() {
            self.hooks.remove(&key);
        }
        Ok(trip)
    }

    fn evict_least_recent_hook(&mut self) {
        let oldest = self
            .hooks
            .iter()
            .min_by_key(|(_, t)| t.last_received)
            .map(|(k, _)| k.clone());
        if let Some(k) = oldest {
            self.hooks.remove(&k);
        }
    }

    /// Forgets observations older than the window (by arrival) and hook versions left
    /// with none. Returns how many hook versions remain.
    pub fn prune(&mut self, now: DateTime<Utc>) -> usize {
        let horizon = now - Duration::seconds(BREAKER_WINDOW_SECONDS);
        self.hooks.retain(|_, t| {
            t.per.retain(|_, s| s.received >= horizon);
            !t.per.is_empty()
        });
        self.hooks.len()
    }

    /// Keeps only the hook versions for which `keep(version, namespace, name)` holds (the
    /// report endpoint keeps those the index still holds, breaker closed). Returns how many
    /// were dropped.
    pub fn retain(&mut self, mut keep: impl FnMut(&HookVersion, &str, &str) -> bool) -> usize {
        let before = self.hooks.len();
        self.hooks.retain(|v, t| keep(v, &t.namespace, &t.name));
        before - self.hooks.len()
    }

    /// Every tracked hook version with its namespace and name.
    pub fn versions(&self) -> Vec<(HookVersion, String, String)> {
        self.hooks
            .iter()
            .map(|(v, t)| (v.clone(), t.namespace.clone(), t.name.clone()))
            .collect()
    }

    /// Forgets every version of hook `uid` (deleted, or tripped by a dispatcher's own
    /// trip).
    pub fn forget(&mut self, uid: &str) {
        self.hooks.retain(|(u, _, _), _| u != uid);
    }

    /// Hook versions tracked.
    pub fn len(&self) -> usize {
        self.hooks.len()
    }

    /// Whether nothing is tracked.
    pub fn is_empty(&self) -> bool {
        self.hooks.is_empty()
    }

    /// Dispatchers whose observation is kept for hook version `version`.
    pub fn dispatchers(&self, version: &HookVersion) -> usize {
        self.hooks.get(version).map_or(0, |t| t.per.len())
    }
}

fn merged_trip(per: &HashMap<String, Seen>, reporter: &str) -> Option<GlobalTrip> {
    let last_allow = per.values().filter_map(|s| s.last_allow).max();
    let mut run: Vec<(DateTime<Utc>, bool, &str)> = per
        .iter()
        .flat_map(|(d, s)| s.run.iter().map(move |(t, to)| (*t, *to, d.as_str())))
        .filter(|(t, _, _)| last_allow.is_none_or(|a| *t > a))
        .collect();
    if run.len() < BREAKER_THRESHOLD {
        return None;
    }
    run.sort_by_key(|(t, _, _)| *t);
    let newest = &run[run.len() - BREAKER_THRESHOLD..];
    let (first, last) = (newest[0].0, newest[BREAKER_THRESHOLD - 1].0);
    let span = last - first;
    if span > Duration::seconds(BREAKER_WINDOW_SECONDS) {
        return None;
    }
    let timeouts = newest.iter().filter(|(_, to, _)| *to).count();
    let mut who: Vec<&str> = newest.iter().map(|(_, _, d)| *d).collect();
    who.sort_unstable();
    who.dedup();
    Some(GlobalTrip {
        tripped_at: last,
        dispatcher: reporter.to_string(),
        blocks: BREAKER_THRESHOLD - timeouts,
        timeouts,
        dispatchers: who.len(),
        over_seconds: span.num_milliseconds() as f64 / 1000.0,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use agenthooks_crds::report::RunOutcome;

    fn t(s: i64) -> DateTime<Utc> {
        DateTime::from_timestamp(1_790_000_000 + s, 0).unwrap()
    }

    fn obs(allow: Option<i64>, run: &[(i64, bool)]) -> BreakerObservation {
        BreakerObservation {
            uid: "u1".into(),
            namespace: "ns".into(),
            name: "h".into(),
            generation: 1,
            reset_token: None,
            last_allow_at: allow.map(|s| t(s).to_rfc3339()),
            run: run
                .iter()
                .map(|(s, to)| RunOutcome {
                    at: t(*s).to_rfc3339(),
                    timeout: *to,
                })
                .collect(),
        }
    }

    #[test]
    fn six_blocks_over_three_dispatchers_trip() {
        let mut w = BreakerWindows::new();
        // Two blocks each, interleaved in time: d1 at 0,3; d2 at 1,4; d3 at 2,5.
        assert_eq!(
            w.observe("d1", &obs(None, &[(0, false), (3, false)]), t(6)),
            Ok(None)
        );
        assert_eq!(
            w.observe("d2", &obs(None, &[(1, false), (4, false)]), t(6)),
            Ok(None)
        );
        let trip = w
            .observe("d3", &obs(None, &[(2, false), (5, true)]), t(6))
            .unwrap()
            .expect("trips");
        assert_eq!(trip.dispatcher, "d3");
        assert_eq!((trip.blocks, trip.timeouts, trip.dispatchers), (4, 1, 3));
        assert_eq!(trip.tripped_at, t(5));
        assert_eq!(trip.over_seconds, 4.0);
        assert!(trip.reason().contains("over 3 dispatcher(s)"));
        assert!(w.is_empty(), "a tripped version is forgotten");
    }

    #[test]
    fn four_in_a_row_do_not_trip() {
        let mut w = BreakerWindows::new();
        w.observe("d1", &obs(None, &[(0, false), (1, false)]), t(2))
            .unwrap();
        assert_eq!(
            w.observe("d2", &obs(None, &[(2, false), (3, true)]), t(4)),
            Ok(None)
        );
    }

    #[test]
    fn an_allow_on_another_dispatcher_resets_the_run() {
        let mut w = BreakerWindows::new();
        w.observe(
            "d1",
            &obs(None, &[(0, false), (1, false), (2, false)]),
            t(3),
        )
        .unwrap();
        // d2 allowed at 2.5 s, then saw two blocks: the run after 2.5 s has only those.
        let mut o = obs(None, &[(4, false), (5, false)]);
        o.last_allow_at = Some((t(2) + Duration::milliseconds(500)).to_rfc3339());
        assert_eq!(w.observe("d2", &o, t(6)), Ok(None));
        // Three more blocks on d1 (after d2's allow) complete a run of five.
        let trip = w
            .observe(
                "d1",
                &obs(
                    None,
                    &[
                        (0, false),
                        (1, false),
                        (2, false),
                        (6, false),
                        (7, false),
                        (8, false),
                    ],
                ),
                t(9),
            )
            .unwrap()
            .expect("trips");
        assert_eq!(trip.dispatchers, 2);
        assert_eq!(trip.tripped_at, t(8));
    }

    #[test]
    fn exactly_the_window_trips_one_second_more_does_not() {
        let mut w = BreakerWindows::new();
        let run = [
            (0, false),
            (15, false),
            (30, false),
            (45, false),
            (60, false),
        ];
        let trip = w
            .observe("d1", &obs(None, &run), t(61))
            .unwrap()
            .expect("five within exactly 60 s trip");
        assert_eq!(
            (trip.tripped_at, trip.over_seconds, trip.blocks),
            (t(60), 60.0, 5)
        );
        let mut w = BreakerWindows::new();
        let run = [
            (0, false),
            (15, false),
            (30, false),
            (45, false),
            (61, false),
        ];
        assert_eq!(w.observe("d1", &obs(None, &run), t(62)), Ok(None));
    }

    #[test]
    fn a_new_generation_or_reset_token_starts_empty() {
        let mut w = BreakerWindows::new();
        w.observe(
            "d1",
            &obs(None, &[(0, false), (1, false), (2, false), (3, false)]),
            t(4),
        )
        .unwrap();
        let mut next = obs(None, &[(5, false)]);
        next.generation = 2;
        assert_eq!(w.observe("d2", &next, t(6)), Ok(None));
        let mut reset = obs(None, &[(5, false)]);
        reset.reset_token = Some("r1".into());
        assert_eq!(w.observe("d2", &reset, t(6)), Ok(None));
        assert_eq!(w.len(), 3);
    }

    #[test]
    fn a_later_observation_replaces_the_dispatchers_previous_one() {
        let mut w = BreakerWindows::new();
        w.observe(
            "d1",
            &obs(None, &[(0, false), (1, false), (2, false), (3, false)]),
            t(4),
        )
        .unwrap();
        // d1 then allowed: its run is empty now.
        assert_eq!(w.observe("d1", &obs(Some(5), &[]), t(5)), Ok(None));
        assert_eq!(w.observe("d2", &obs(None, &[(6, false)]), t(6)), Ok(None));
    }

    #[test]
    fn prune_forgets_old_observations() {
        let mut w = BreakerWindows::new();
        w.observe("d1", &obs(None, &[(0, false)]), t(0)).unwrap();
        assert_eq!(w.prune(t(30)), 1);
        assert_eq!(w.prune(t(61)), 0);
    }

    #[test]
    fn bad_times_are_refused_and_nothing_is_recorded() {
        let mut w = BreakerWindows::new();
        let mut o = obs(None, &[(0, false)]);
        o.run[0].at = "yesterday".into();
        let e = w.observe("d1", &o, t(0)).unwrap_err();
        assert!(e.to_string().contains("run[].at `yesterday`"), "{e}");
        assert!(w.is_empty());
    }

    #[test]
    fn a_last_allow_in_year_9999_no_longer_holds_the_breaker_closed() {
        let mut w = BreakerWindows::new();
        // d1 claims an allow in year 9999: taken as its receipt time, t(0).
        let mut forged = obs(None, &[]);
        forged.last_allow_at = Some("9999-12-31T23:59:59Z".into());
        assert_eq!(w.observe("d1", &forged, t(0)), Ok(None));
        // Five blocks after that, over two dispatchers, trip.
        assert_eq!(
            w.observe("d2", &obs(None, &[(1, false), (2, false)]), t(3)),
            Ok(None)
        );
        let trip = w
            .observe("d3", &obs(None, &[(3, false), (4, false), (5, true)]), t(6))
            .unwrap()
            .expect("trips despite the forged allow");
        assert_eq!(trip.tripped_at, t(5));
        // Outcomes before the (clamped) allow stay reset.
        let mut w = BreakerWindows::new();
        w.observe("d1", &forged, t(10)).unwrap();
        assert_eq!(
            w.observe(
                "d2",
                &obs(
                    None,
                    &[(5, false), (6, false), (7, false), (8, false), (9, false)]
                ),
                t(10)
            ),
            Ok(None),
            "an allow at receipt still resets what came before it"
        );
        // Run times in the future are taken as the receipt time too.
        let mut w = BreakerWindows::new();
        let mut future = obs(None, &[(0, false)]);
        future.run[0].at = "9999-01-01T00:00:00Z".into();
        w.observe("d1", &future, t(1)).unwrap();
        let trip = w
            .observe(
                "d2",
                &obs(None, &[(0, false), (0, false), (1, false), (1, false)]),
                t(2),
            )
            .unwrap()
            .expect("trips");
        assert_eq!(trip.tripped_at, t(1), "not year 9999");
    }

    #[test]
    fn dispatchers_per_hook_and_hooks_are_capped_oldest_first() {
        let mut w = BreakerWindows::with_caps(3, 2);
        let version = |uid: &str| (uid.to_string(), 1, None);
        w.observe("d1", &obs(None, &[(0, false)]), t(0)).unwrap();
        w.observe("d2", &obs(None, &[(1, false)]), t(1)).unwrap();
        w.observe("d3", &obs(None, &[(2, false)]), t(2)).unwrap();
        assert_eq!(w.dispatchers(&version("u1")), 2, "d1 (oldest) dropped");
        // d1's outcome is gone: three more make five only with it, so no trip.
        assert_eq!(
            w.observe(
                "d2",
                &obs(None, &[(1, false), (3, false), (4, false)]),
                t(4)
            ),
            Ok(None)
        );
        for (i, uid) in ["u2", "u3", "u4"].iter().enumerate() {
            let mut o = obs(None, &[(5, false)]);
            o.uid = uid.to_string();
            w.observe("d1", &o, t(5 + i as i64)).unwrap();
        }
        assert_eq!(w.len(), 3);
        assert_eq!(
            w.dispatchers(&version("u1")),
            0,
            "u1, observed least recently, went first"
        );
        assert_eq!(w.dispatchers(&version("u4")), 1);
    }

    #[test]
    fn forget_and_retain_drop_versions() {
        let mut w = BreakerWindows::new();
        w.observe("d1", &obs(None, &[(0, false)]), t(0)).unwrap();
        let mut other = obs(None, &[(0, false)]);
        other.uid = "u2".into();
        other.name = "g".into();
        w.observe("d1", &other, t(0)).unwrap();
        let mut next = obs(None, &[(0, false)]);
        next.generation = 2;
        w.observe("d1", &next, t(0)).unwrap();
        assert_eq!(w.len(), 3);
        w.forget("u1");
        assert_eq!(w.len(), 1, "both versions of u1");
        assert_eq!(
            w.versions(),
            [(
                ("u2".to_string(), 1, None),
                "ns".to_string(),
                "g".to_string()
            )]
        );
        assert_eq!(w.retain(|_, ns, name| ns == "ns" && name == "h"), 1);
        assert!(w.is_empty());
    }
}
