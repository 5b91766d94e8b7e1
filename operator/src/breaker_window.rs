//! The circuit breaker counted across dispatchers (CONTRACT §6.1; issue 3 point 1: six
//! blocks spread over three dispatchers trip the hook).
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
//! sync to well under the window, as NTP gives). State is per hook version
//! (uid, generation, reset token): a new version starts empty. Observations older than
//! the window are dropped, so memory stays bounded by the hooks that blocked recently
//! times the dispatchers that saw them.

use std::collections::HashMap;

use agenthooks_crds::report::{BREAKER_THRESHOLD, BREAKER_WINDOW_SECONDS, BreakerObservation};
use chrono::{DateTime, Duration, Utc};

/// A hook version: (uid, generation, reset token).
pub type HookVersion = (String, i64, Option<String>);

/// What a dispatcher last said about one hook version.
#[derive(Debug, Clone, PartialEq)]
struct Seen {
    last_allow: Option<DateTime<Utc>>,
    /// (when, timeout), oldest first.
    run: Vec<(DateTime<Utc>, bool)>,
    /// When this observation arrived (for pruning).
    received: DateTime<Utc>,
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
#[derive(Debug, Default)]
pub struct BreakerWindows {
    hooks: HashMap<HookVersion, HashMap<String, Seen>>,
}

fn parse(hook: &str, field: &'static str, v: &str) -> Result<DateTime<Utc>, ObservationError> {
    DateTime::parse_from_rfc3339(v)
        .map(|t| t.with_timezone(&Utc))
        .map_err(|_| ObservationError::BadTime {
            hook: hook.to_string(),
            field,
            value: v.to_string(),
        })
}

impl BreakerWindows {
    /// Empty.
    pub fn new() -> BreakerWindows {
        BreakerWindows::default()
    }

    /// Records `obs` from `dispatcher` (replacing its previous one for that hook
    /// version), received at `now`, and returns a trip if the merged run now trips.
    /// A hook version that tripped is forgotten (its next version starts empty).
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
            .map(|v| parse(&hook, "lastAllowAt", v))
            .transpose()?;
        let mut run = obs
            .run
            .iter()
            .map(|o| parse(&hook, "run[].at", &o.at).map(|t| (t, o.timeout)))
            .collect::<Result<Vec<_>, _>>()?;
        run.sort_by_key(|(t, _)| *t);
        let keep_from = run.len().saturating_sub(BREAKER_THRESHOLD);
        run.drain(..keep_from);
        let key: HookVersion = (obs.uid.clone(), obs.generation, obs.reset_token.clone());
        let per = self.hooks.entry(key.clone()).or_default();
        per.insert(
            dispatcher.to_string(),
            Seen {
                last_allow,
                run,
                received: now,
            },
        );
        let trip = merged_trip(per, dispatcher);
        if trip.is_some() {
            self.hooks.remove(&key);
        }
        Ok(trip)
    }

    /// Forgets observations older than the window (by arrival) and hook versions left
    /// with none. Returns how many hook versions remain.
    pub fn prune(&mut self, now: DateTime<Utc>) -> usize {
        let horizon = now - Duration::seconds(BREAKER_WINDOW_SECONDS);
        self.hooks.retain(|_, per| {
            per.retain(|_, s| s.received >= horizon);
            !per.is_empty()
        });
        self.hooks.len()
    }

    /// Forgets every version of hook `uid` (deleted, or tripped by other means).
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
        assert!(w.observe("d1", &obs(None, &run), t(61)).unwrap().is_some());
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
}
