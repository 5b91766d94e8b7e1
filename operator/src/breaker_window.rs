//! The circuit breaker counted across dispatchers (CONTRACT §6.1, §6.3): faults of one
//! tenant's events spread over several dispatchers trip that tenant's breaker of the hook.
//!
//! A trip is decided in one of two ways, and the operator accepts both:
//! - by **one dispatcher on its own sequence** of runs (the dispatcher whose breaker of a
//!   (hook, tenant) saw [`FAULT_THRESHOLD`] faults in a row within the window opens it at
//!   once and reports the trip; [`crate::report`] records it as sent);
//! - by **the operator on the time-merged sequence of all dispatchers** (this module):
//!   faults that are each too few on every single dispatcher add up here.
//!
//! Each dispatcher reports, per (hook version, tenant), a [`BreakerObservation`]: when the
//! handler last answered (`lastAnswerAt`: an `allow` or a `block`), and the faults since
//! then (`run`: `timeout` true, `error` false). The operator keeps the latest observation
//! of every dispatcher and merges them by time, per (hook version, tenant):
//!
//! - the global last answer is the newest `lastAnswerAt` over all dispatchers;
//! - the global run is every reported fault after it, ordered by time;
//! - it trips when the shared rule says so ([`run_trips`]: the newest [`FAULT_THRESHOLD`]
//!   faults span at most [`WINDOW_MS`]); the open breaker fails closed when any of those
//!   faults was an error ([`fails_closed`]).
//!
//! So an answer anywhere — `allow` or `block` — resets that tenant's run everywhere, a
//! `block` never counts (a policy that refuses is the hook working), one tenant's faults
//! never touch another tenant's run, and "in a row" means in time order across replicas
//! (dispatcher clocks are assumed in sync to well under the window, as NTP gives). A
//! reported time later than the observation's receipt time (+
//! [`crate::report::times::MAX_SKEW`]) is taken as the receipt time, so a skewed or forged
//! `lastAnswerAt` (year 9999) resets the run only up to the moment it arrived and cannot
//! hold the breaker closed afterwards.
//!
//! State is per hook version (uid, generation, reset token) and tenant: a new version
//! starts empty, a (version, tenant) that trips here is forgotten, and
//! [`BreakerWindows::forget`] drops a (hook, tenant) tripped locally by a dispatcher.
//! Memory is bounded: observations older than the window (by arrival) are dropped by
//! [`BreakerWindows::prune`] (the report endpoint prunes on every report and periodically,
//! and then also drops versions the index no longer holds: [`BreakerWindows::retain`]); at
//! most [`MAX_DISPATCHERS_PER_HOOK`] dispatchers are kept per (version, tenant), at most
//! [`MAX_TENANTS_PER_HOOK`] tenants per version and at most [`MAX_HOOKS`] hook versions,
//! the least recently observed going first.

use std::collections::HashMap;

use agenthooks_crds::report::BreakerObservation;
use agenthooks_crds::rules::breaker::{
    FAULT_THRESHOLD, FaultKind, Trip, WINDOW_MS, fails_closed, run_trips,
};
use chrono::{DateTime, Duration, Utc};

use crate::report::times::clamp_future;

/// A hook version: (uid, generation, reset token).
pub type HookVersion = (String, i64, Option<String>);

/// Most dispatchers whose observation is kept per (hook version, tenant) (the oldest
/// observation goes first).
pub const MAX_DISPATCHERS_PER_HOOK: usize = 256;
/// Most tenants tracked per hook version (the least recently observed goes first).
pub const MAX_TENANTS_PER_HOOK: usize = 256;
/// Most hook versions tracked (the least recently observed goes first).
pub const MAX_HOOKS: usize = 100_000;

/// What a dispatcher last said about one (hook version, tenant).
#[derive(Debug, Clone, PartialEq)]
struct Seen {
    last_answer: Option<DateTime<Utc>>,
    /// (when, kind), oldest first, at most [`FAULT_THRESHOLD`].
    run: Vec<(DateTime<Utc>, FaultKind)>,
    /// When this observation arrived (for pruning).
    received: DateTime<Utc>,
}

/// The observations of one tenant of one hook version.
#[derive(Debug, Clone, Default)]
struct TenantRun {
    per: HashMap<String, Seen>,
    /// Arrival of the newest observation.
    last_received: Option<DateTime<Utc>>,
}

/// The observations of one hook version.
#[derive(Debug, Clone, Default)]
struct Tracked {
    namespace: String,
    name: String,
    tenants: HashMap<String, TenantRun>,
    /// Arrival of the newest observation.
    last_received: Option<DateTime<Utc>>,
}

/// A trip decided by [`BreakerWindows::observe`].
#[derive(Debug, Clone, PartialEq)]
pub struct GlobalTrip {
    /// The tenant whose breaker tripped.
    pub tenant: String,
    /// The newest fault of the tripping run.
    pub tripped_at: DateTime<Utc>,
    /// The dispatcher whose observation completed the run.
    pub dispatcher: String,
    /// `error` faults in the run.
    pub errors: usize,
    /// `timeout` faults in the run.
    pub timeouts: usize,
    /// Distinct dispatchers that contributed to the run.
    pub dispatchers: usize,
    /// Milliseconds from the run's first to its last fault.
    pub over_ms: i64,
    /// Whether the open breaker answers as an error ([`fails_closed`] over the run).
    pub fail_closed: bool,
}

impl GlobalTrip {
    /// A sentence for status, Events and logs: the shared rule's wording
    /// ([`Trip::reason`]) and the number of dispatchers.
    pub fn reason(&self) -> String {
        let rule = Trip {
            timeouts: self.timeouts,
            errors: self.errors,
            over_ms: self.over_ms,
            at_ms: self.tripped_at.timestamp_millis(),
            fail_closed: self.fail_closed,
        };
        format!("{}, over {} dispatcher(s)", rule.reason(), self.dispatchers)
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

/// Breaker runs of every (hook version, tenant), per dispatcher.
#[derive(Debug)]
pub struct BreakerWindows {
    hooks: HashMap<HookVersion, Tracked>,
    max_hooks: usize,
    max_tenants: usize,
    max_dispatchers: usize,
}

impl Default for BreakerWindows {
    fn default() -> Self {
        BreakerWindows::with_caps(MAX_HOOKS, MAX_TENANTS_PER_HOOK, MAX_DISPATCHERS_PER_HOOK)
    }
}

fn parse(hook: &str, field: &'static str, v: &str) -> Result<DateTime<Utc>, ObservationError> {
    crate::report::times::parse_utc(v).map_err(|_| ObservationError::BadTime {
        hook: hook.to_string(),
        field,
        value: v.to_string(),
    })
}

/// The key of the entry whose `received` is the oldest.
fn least_recent<K: Clone, V>(
    map: &HashMap<K, V>,
    received: impl Fn(&V) -> Option<DateTime<Utc>>,
) -> Option<K> {
    map.iter()
        .min_by_key(|(_, v)| received(v))
        .map(|(k, _)| k.clone())
}

impl BreakerWindows {
    /// Empty, with the default caps ([`MAX_HOOKS`], [`MAX_TENANTS_PER_HOOK`],
    /// [`MAX_DISPATCHERS_PER_HOOK`]).
    pub fn new() -> BreakerWindows {
        BreakerWindows::default()
    }

    /// Empty, keeping at most `max_hooks` hook versions, `max_tenants` tenants per version
    /// and `max_dispatchers` dispatchers per (version, tenant) (each at least 1).
    pub fn with_caps(
        max_hooks: usize,
        max_tenants: usize,
        max_dispatchers: usize,
    ) -> BreakerWindows {
        BreakerWindows {
            hooks: HashMap::new(),
            max_hooks: max_hooks.max(1),
            max_tenants: max_tenants.max(1),
            max_dispatchers: max_dispatchers.max(1),
        }
    }

    /// Records `obs` from `dispatcher` (replacing its previous one for that hook version
    /// and tenant), received at `now`, and returns a trip if that tenant's merged run now
    /// trips. Times later than `now` (+ skew) are taken as `now`. A (version, tenant) that
    /// tripped is forgotten (its breaker is open; a new run starts empty). At a cap, the
    /// oldest observation of the (version, tenant), the least recently observed tenant of
    /// the version, or the least recently observed version is dropped first.
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
        let last_answer = obs
            .last_answer_at
            .as_deref()
            .map(|v| parse(&hook, "lastAnswerAt", v).map(|t| clamp_future(t, now)))
            .transpose()?;
        let mut run = obs
            .run
            .iter()
            .map(|o| {
                let kind = if o.timeout {
                    FaultKind::Timeout
                } else {
                    FaultKind::Error
                };
                parse(&hook, "run[].at", &o.at).map(|t| (clamp_future(t, now), kind))
            })
            .collect::<Result<Vec<_>, _>>()?;
        run.sort_by_key(|(t, _)| *t);
        let keep_from = run.len().saturating_sub(FAULT_THRESHOLD);
        run.drain(..keep_from);
        let key: HookVersion = (obs.uid.clone(), obs.generation, obs.reset_token.clone());
        if !self.hooks.contains_key(&key) && self.hooks.len() >= self.max_hooks {
            self.prune(now);
            if self.hooks.len() >= self.max_hooks
                && let Some(k) = least_recent(&self.hooks, |t| t.last_received)
            {
                self.hooks.remove(&k);
            }
        }
        let (max_tenants, max_dispatchers) = (self.max_tenants, self.max_dispatchers);
        let tracked = self.hooks.entry(key.clone()).or_insert_with(|| Tracked {
            namespace: obs.namespace.clone(),
            name: obs.name.clone(),
            ..Default::default()
        });
        tracked.last_received = Some(tracked.last_received.map_or(now, |t| t.max(now)));
        if !tracked.tenants.contains_key(&obs.tenant)
            && tracked.tenants.len() >= max_tenants
            && let Some(t) = least_recent(&tracked.tenants, |r| r.last_received)
        {
            tracked.tenants.remove(&t);
        }
        let tenant = tracked.tenants.entry(obs.tenant.clone()).or_default();
        if !tenant.per.contains_key(dispatcher)
            && tenant.per.len() >= max_dispatchers
            && let Some(d) = least_recent(&tenant.per, |s| Some(s.received))
        {
            tenant.per.remove(&d);
        }
        tenant.per.insert(
            dispatcher.to_string(),
            Seen {
                last_answer,
                run,
                received: now,
            },
        );
        tenant.last_received = Some(tenant.last_received.map_or(now, |t| t.max(now)));
        let trip = merged_trip(&tenant.per, dispatcher, &obs.tenant);
        if trip.is_some() {
            tracked.tenants.remove(&obs.tenant);
            if tracked.tenants.is_empty() {
                self.hooks.remove(&key);
            }
        }
        Ok(trip)
    }

    /// Forgets observations older than the window (by arrival), and tenants and hook
    /// versions left with none. Returns how many hook versions remain.
    pub fn prune(&mut self, now: DateTime<Utc>) -> usize {
        let horizon = now - Duration::milliseconds(WINDOW_MS);
        self.hooks.retain(|_, t| {
            t.tenants.retain(|_, r| {
                r.per.retain(|_, s| s.received >= horizon);
                !r.per.is_empty()
            });
            !t.tenants.is_empty()
        });
        self.hooks.len()
    }

    /// Keeps only the hook versions for which `keep(version, namespace, name)` holds (the
    /// report endpoint keeps those the index still holds at that version). Returns how
    /// many were dropped.
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

    /// Forgets `tenant`'s run of every version of hook `uid` (its breaker was tripped by a
    /// dispatcher's own trip).
    pub fn forget(&mut self, uid: &str, tenant: &str) {
        self.hooks.retain(|(u, _, _), t| {
            if u == uid {
                t.tenants.remove(tenant);
            }
            !t.tenants.is_empty()
        });
    }

    /// Hook versions tracked.
    pub fn len(&self) -> usize {
        self.hooks.len()
    }

    /// Whether nothing is tracked.
    pub fn is_empty(&self) -> bool {
        self.hooks.is_empty()
    }

    /// Tenants tracked for hook version `version`.
    pub fn tenants(&self, version: &HookVersion) -> usize {
        self.hooks.get(version).map_or(0, |t| t.tenants.len())
    }

    /// Dispatchers whose observation is kept for `tenant` of hook version `version`.
    pub fn dispatchers(&self, version: &HookVersion, tenant: &str) -> usize {
        self.hooks
            .get(version)
            .and_then(|t| t.tenants.get(tenant))
            .map_or(0, |r| r.per.len())
    }
}

fn merged_trip(per: &HashMap<String, Seen>, reporter: &str, tenant: &str) -> Option<GlobalTrip> {
    let last_answer = per.values().filter_map(|s| s.last_answer).max();
    let mut run: Vec<(DateTime<Utc>, FaultKind, &str)> = per
        .iter()
        .flat_map(|(d, s)| s.run.iter().map(move |(t, k)| (*t, *k, d.as_str())))
        .filter(|(t, _, _)| last_answer.is_none_or(|a| *t > a))
        .collect();
    run.sort_by_key(|(t, _, _)| *t);
    let times: Vec<i64> = run.iter().map(|(t, _, _)| t.timestamp_millis()).collect();
    let over_ms = run_trips(&times)?;
    let newest = &run[run.len() - FAULT_THRESHOLD..];
    let timeouts = newest
        .iter()
        .filter(|(_, k, _)| *k == FaultKind::Timeout)
        .count();
    let mut who: Vec<&str> = newest.iter().map(|(_, _, d)| *d).collect();
    who.sort_unstable();
    who.dedup();
    Some(GlobalTrip {
        tenant: tenant.to_string(),
        tripped_at: newest[FAULT_THRESHOLD - 1].0,
        dispatcher: reporter.to_string(),
        errors: FAULT_THRESHOLD - timeouts,
        timeouts,
        dispatchers: who.len(),
        over_ms,
        fail_closed: fails_closed(newest.iter().map(|(_, k, _)| *k)),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use agenthooks_crds::report::RunOutcome;

    fn t(s: i64) -> DateTime<Utc> {
        DateTime::from_timestamp(1_790_000_000 + s, 0).unwrap()
    }

    /// An observation of tenant `tenant`: last answer at `answer` s, faults `(s, timeout)`.
    fn obs(tenant: &str, answer: Option<i64>, run: &[(i64, bool)]) -> BreakerObservation {
        BreakerObservation {
            uid: "u1".into(),
            namespace: "ns".into(),
            name: "h".into(),
            generation: 1,
            reset_token: None,
            tenant: tenant.into(),
            last_answer_at: answer.map(|s| t(s).to_rfc3339()),
            run: run
                .iter()
                .map(|(s, to)| RunOutcome {
                    at: t(*s).to_rfc3339(),
                    timeout: *to,
                })
                .collect(),
        }
    }

    fn version() -> HookVersion {
        ("u1".to_string(), 1, None)
    }

    #[test]
    fn five_faults_of_tenant_a_over_three_dispatchers_trip_a_only() {
        let mut w = BreakerWindows::new();
        // Tenant B: four faults, interleaved with A's.
        w.observe("d1", &obs("b", None, &[(0, true), (1, true)]), t(6))
            .unwrap();
        w.observe("d2", &obs("b", None, &[(2, true), (3, true)]), t(6))
            .unwrap();
        // Tenant A: d1 at 0,3; d2 at 1,4; d3 at 5 (an error).
        assert_eq!(
            w.observe("d1", &obs("a", None, &[(0, true), (3, true)]), t(6)),
            Ok(None)
        );
        assert_eq!(
            w.observe("d2", &obs("a", None, &[(1, true), (4, true)]), t(6)),
            Ok(None)
        );
        let trip = w
            .observe("d3", &obs("a", None, &[(5, false)]), t(6))
            .unwrap()
            .expect("trips");
        assert_eq!(trip.tenant, "a");
        assert_eq!(trip.dispatcher, "d3");
        assert_eq!((trip.timeouts, trip.errors, trip.dispatchers), (4, 1, 3));
        assert_eq!((trip.tripped_at, trip.over_ms), (t(5), 5000));
        assert!(trip.fail_closed, "an error in the run fails closed");
        let r = trip.reason();
        assert!(
            r.starts_with("4 timeouts and 1 errors of the handler in a row within 5 s")
                && r.contains("never count")
                && r.ends_with("over 3 dispatcher(s)"),
            "{r}"
        );
        assert_eq!(w.tenants(&version()), 1, "a tripped tenant is forgotten");
        assert_eq!(w.dispatchers(&version(), "b"), 2, "b's run is untouched");
        // One more fault of b makes five: b trips on its own, as timeouts only.
        let trip = w
            .observe("d3", &obs("b", None, &[(6, true)]), t(7))
            .unwrap()
            .expect("b trips");
        assert_eq!((trip.tenant.as_str(), trip.fail_closed), ("b", false));
        assert!(w.is_empty());
    }

    #[test]
    fn answers_never_count_and_reset_the_run_on_every_dispatcher() {
        let mut w = BreakerWindows::new();
        // Any number of answers (allow or block: the observation only says "answered"),
        // from any mix of dispatchers and tenants, with a few faults between them.
        for i in 0..50 {
            let d = format!("d{}", i % 3);
            let tenant = ["a", "b"][i as usize % 2];
            let o = obs(tenant, Some(i * 2 + 1), &[(i * 2, true)]);
            assert_eq!(w.observe(&d, &o, t(i * 2 + 1)), Ok(None), "round {i}");
        }
        // d1 saw three faults of a; d2 answered for a at 2.5 s, then saw two faults.
        let mut w = BreakerWindows::new();
        w.observe(
            "d1",
            &obs("a", None, &[(0, true), (1, true), (2, true)]),
            t(3),
        )
        .unwrap();
        let mut o = obs("a", None, &[(4, true), (5, true)]);
        o.last_answer_at = Some((t(2) + Duration::milliseconds(500)).to_rfc3339());
        assert_eq!(w.observe("d2", &o, t(6)), Ok(None), "reset by d2's answer");
        // An answer for tenant b does not reset a.
        w.observe("d3", &obs("b", Some(6), &[]), t(6)).unwrap();
        let run = [
            (0, true),
            (1, true),
            (2, true),
            (6, true),
            (7, true),
            (8, true),
        ];
        let trip = w
            .observe("d1", &obs("a", None, &run), t(9))
            .unwrap()
            .expect("five faults after d2's answer trip");
        assert_eq!((trip.dispatchers, trip.tripped_at), (2, t(8)));
    }

    #[test]
    fn exactly_the_window_trips_one_millisecond_more_does_not() {
        let mut w = BreakerWindows::new();
        let run = [(0, true), (15, true), (30, true), (45, true), (60, true)];
        let trip = w
            .observe("d1", &obs("a", None, &run), t(61))
            .unwrap()
            .expect("five within exactly 60 s trip");
        assert_eq!(
            (trip.tripped_at, trip.over_ms, trip.timeouts),
            (t(60), 60_000, 5)
        );
        let mut w = BreakerWindows::new();
        let mut o = obs("a", None, &run);
        o.run[4].at = (t(60) + Duration::milliseconds(1)).to_rfc3339();
        assert_eq!(w.observe("d1", &o, t(62)), Ok(None));
    }

    #[test]
    fn a_new_generation_or_reset_token_starts_empty() {
        let mut w = BreakerWindows::new();
        let four = [(0, true), (1, true), (2, true), (3, true)];
        w.observe("d1", &obs("a", None, &four), t(4)).unwrap();
        let mut next = obs("a", None, &[(5, true)]);
        next.generation = 2;
        assert_eq!(w.observe("d2", &next, t(6)), Ok(None));
        let mut reset = obs("a", None, &[(5, true)]);
        reset.reset_token = Some("r1".into());
        assert_eq!(w.observe("d2", &reset, t(6)), Ok(None));
        assert_eq!(w.len(), 3);
    }

    #[test]
    fn a_later_observation_replaces_the_dispatchers_previous_one() {
        let mut w = BreakerWindows::new();
        let four = [(0, true), (1, true), (2, true), (3, true)];
        w.observe("d1", &obs("a", None, &four), t(4)).unwrap();
        // d1's handler then answered: its run is empty now.
        assert_eq!(w.observe("d1", &obs("a", Some(5), &[]), t(5)), Ok(None));
        assert_eq!(
            w.observe("d2", &obs("a", None, &[(6, true)]), t(6)),
            Ok(None)
        );
    }

    #[test]
    fn prune_forgets_old_observations() {
        let mut w = BreakerWindows::new();
        w.observe("d1", &obs("a", None, &[(0, true)]), t(0))
            .unwrap();
        w.observe("d1", &obs("b", None, &[(20, true)]), t(20))
            .unwrap();
        assert_eq!(w.prune(t(30)), 1);
        assert_eq!(w.tenants(&version()), 2);
        assert_eq!(w.prune(t(61)), 1);
        assert_eq!(
            w.tenants(&version()),
            1,
            "a's observation is older than the window"
        );
        assert_eq!(w.prune(t(81)), 0);
    }

    #[test]
    fn bad_times_are_refused_and_nothing_is_recorded() {
        let mut w = BreakerWindows::new();
        let mut o = obs("a", None, &[(0, true)]);
        o.run[0].at = "yesterday".into();
        let e = w.observe("d1", &o, t(0)).unwrap_err();
        assert!(e.to_string().contains("run[].at `yesterday`"), "{e}");
        let mut o = obs("a", None, &[]);
        o.last_answer_at = Some("soon".into());
        let e = w.observe("d1", &o, t(0)).unwrap_err();
        assert!(e.to_string().contains("lastAnswerAt `soon`"), "{e}");
        assert!(w.is_empty());
    }

    #[test]
    fn a_last_answer_in_year_9999_no_longer_holds_the_breaker_closed() {
        let mut w = BreakerWindows::new();
        let mut forged = obs("a", None, &[]);
        forged.last_answer_at = Some("9999-12-31T23:59:59Z".into());
        assert_eq!(w.observe("d1", &forged, t(0)), Ok(None));
        assert_eq!(
            w.observe("d2", &obs("a", None, &[(1, true), (2, true)]), t(3)),
            Ok(None)
        );
        let trip = w
            .observe(
                "d3",
                &obs("a", None, &[(3, true), (4, false), (5, true)]),
                t(6),
            )
            .unwrap()
            .expect("trips despite the forged answer");
        assert_eq!(trip.tripped_at, t(5));
        // Faults before the (clamped) answer stay reset.
        let mut w = BreakerWindows::new();
        w.observe("d1", &forged, t(10)).unwrap();
        let five = [(5, true), (6, true), (7, true), (8, true), (9, true)];
        assert_eq!(w.observe("d2", &obs("a", None, &five), t(10)), Ok(None));
        // Fault times in the future are taken as the receipt time too.
        let mut w = BreakerWindows::new();
        let mut future = obs("a", None, &[(0, true)]);
        future.run[0].at = "9999-01-01T00:00:00Z".into();
        w.observe("d1", &future, t(1)).unwrap();
        let four = [(0, true), (0, true), (1, true), (1, true)];
        let trip = w
            .observe("d2", &obs("a", None, &four), t(2))
            .unwrap()
            .expect("trips");
        assert_eq!(trip.tripped_at, t(1), "not year 9999");
    }

    #[test]
    fn dispatchers_tenants_and_hooks_are_capped_least_recent_first() {
        let mut w = BreakerWindows::with_caps(3, 2, 2);
        w.observe("d1", &obs("a", None, &[(0, true)]), t(0))
            .unwrap();
        w.observe("d2", &obs("a", None, &[(1, true)]), t(1))
            .unwrap();
        w.observe("d3", &obs("a", None, &[(2, true)]), t(2))
            .unwrap();
        assert_eq!(w.dispatchers(&version(), "a"), 2, "d1 (oldest) dropped");
        // d1's fault is gone: three more make five only with it, so no trip.
        assert_eq!(
            w.observe(
                "d2",
                &obs("a", None, &[(1, true), (3, true), (4, true)]),
                t(4)
            ),
            Ok(None)
        );
        // Tenants: b, then c pushes out a (observed least recently).
        w.observe("d1", &obs("b", None, &[(5, true)]), t(5))
            .unwrap();
        w.observe("d1", &obs("c", None, &[(6, true)]), t(6))
            .unwrap();
        assert_eq!(w.tenants(&version()), 2);
        assert_eq!(w.dispatchers(&version(), "a"), 0, "a went first");
        assert_eq!(w.dispatchers(&version(), "c"), 1);
        for (i, uid) in ["u2", "u3", "u4"].iter().enumerate() {
            let mut o = obs("a", None, &[(7, true)]);
            o.uid = uid.to_string();
            w.observe("d1", &o, t(7 + i as i64)).unwrap();
        }
        assert_eq!(w.len(), 3);
        assert_eq!(
            w.tenants(&version()),
            0,
            "u1, observed least recently, went first"
        );
        assert_eq!(w.tenants(&("u4".to_string(), 1, None)), 1);
    }

    #[test]
    fn forget_and_retain_drop_tenants_and_versions() {
        let mut w = BreakerWindows::new();
        w.observe("d1", &obs("a", None, &[(0, true)]), t(0))
            .unwrap();
        w.observe("d1", &obs("b", None, &[(0, true)]), t(0))
            .unwrap();
        let mut other = obs("a", None, &[(0, true)]);
        other.uid = "u2".into();
        other.name = "g".into();
        w.observe("d1", &other, t(0)).unwrap();
        let mut next = obs("a", None, &[(0, true)]);
        next.generation = 2;
        w.observe("d1", &next, t(0)).unwrap();
        assert_eq!(w.len(), 3);
        w.forget("u1", "a");
        assert_eq!(w.len(), 2, "u1 generation 2 had only a");
        assert_eq!(w.tenants(&version()), 1, "b of u1 stays");
        w.forget("u1", "b");
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
