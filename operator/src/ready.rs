//! Which dispatcher holds which snapshot version, and the `Ready` rule built on it
//! (DESIGN "Sync": a hook is Ready only once every live dispatcher serves it).
//!
//! A dispatcher is identified by the `dispatcher` query parameter of its long poll.
//! Polling with `after=N&epoch=E` means "I serve version N of epoch E": when E is this
//! process's epoch the dispatcher holds version N; otherwise it holds nothing of ours.
//! It is *live* while a poll of it is in flight, or for `--dispatcher-ttl-seconds` after
//! its last poll ended.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::time::{Duration, Instant};

use agenthooks_crds::report::UnavailableReport;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;

use crate::index::{HookKey, Publication};
use crate::status::{CondStatus, DesiredCondition, READY};

/// Largest number of dispatchers tracked at once; polls from further ids are refused
/// (429) until older entries expire.
pub const MAX_TRACKED_DISPATCHERS: usize = 10_000;

#[derive(Debug, Clone)]
struct Seen {
    epoch: String,
    after: u64,
    last_seen: Instant,
    in_flight: u32,
    /// The hooks it last reported it cannot load (CONTRACT §10.4), sorted.
    unavailable: Vec<UnavailableReport>,
}

/// The tracker is full (see [`MAX_TRACKED_DISPATCHERS`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TooManyDispatchers;

/// One tracked dispatcher, as `GET /v1/dispatchers` shows it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct DispatcherInfo {
    /// The dispatcher's id.
    pub id: String,
    /// The epoch it last said it holds.
    pub epoch: String,
    /// The version it last said it holds (in `epoch`).
    pub version: u64,
    /// Whether it holds a version of this operator's epoch.
    pub current_epoch: bool,
    /// Polling now, or polled within the TTL.
    pub live: bool,
    /// Polls in flight.
    pub in_flight: u32,
    /// Whole seconds since its last poll began or ended.
    pub last_seen_seconds_ago: u64,
}

/// Live dispatchers and the version of the current epoch each holds (`None`: a version
/// of another epoch, i.e. nothing of ours yet); and, for the live ones that reported
/// some, the hooks each cannot load (CONTRACT §10.4; absent when none).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LiveDispatchers(
    pub BTreeMap<String, Option<u64>>,
    pub BTreeMap<String, Vec<UnavailableReport>>,
);

impl LiveDispatchers {
    /// Number of live dispatchers.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// No live dispatcher.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Every live dispatcher holds `version` or a later one of the current epoch
    /// (vacuously true with none).
    pub fn all_hold(&self, version: u64) -> bool {
        self.0
            .values()
            .all(|held| held.is_some_and(|h| h >= version))
    }

    /// The live dispatchers that reported they cannot load generation `generation` of
    /// the hook `uid`, each with its error, sorted by dispatcher id.
    pub fn unavailable(&self, uid: &str, generation: i64) -> Vec<(&str, &str)> {
        self.1
            .iter()
            .filter_map(|(id, list)| {
                list.iter()
                    .find(|u| u.uid == uid && u.generation == generation)
                    .map(|u| (id.as_str(), u.error.as_str()))
            })
            .collect()
    }
}

/// Dispatcher tracking. Time is passed in, so tests need no clock.
#[derive(Debug)]
pub struct DispatcherTracker {
    ttl: Duration,
    max: usize,
    by_id: HashMap<String, Seen>,
}

impl DispatcherTracker {
    /// A tracker in which a dispatcher stays live `ttl` after its last poll.
    pub fn new(ttl: Duration) -> DispatcherTracker {
        DispatcherTracker {
            ttl,
            max: MAX_TRACKED_DISPATCHERS,
            by_id: HashMap::new(),
        }
    }

    /// The TTL given to [`DispatcherTracker::new`].
    pub fn ttl(&self) -> Duration {
        self.ttl
    }

    fn is_live(&self, s: &Seen, now: Instant) -> bool {
        s.in_flight > 0 || now.saturating_duration_since(s.last_seen) < self.ttl
    }

    /// A poll by `id` saying it holds (`epoch`, `after`) begins. Returns whether what the
    /// tracker knows changed in a way that can move a `Ready` condition (a new or
    /// returning dispatcher, or another held version).
    ///
    /// Errors: [`TooManyDispatchers`] when `id` is new and the tracker is full.
    pub fn begin_poll(
        &mut self,
        id: &str,
        epoch: &str,
        after: u64,
        now: Instant,
    ) -> Result<bool, TooManyDispatchers> {
        if let Some(s) = self.by_id.get(id) {
            let was_live = self.is_live(s, now);
            let s = self.by_id.get_mut(id).expect("present");
            let changed = !was_live || s.epoch != epoch || s.after != after;
            s.epoch = epoch.to_string();
            s.after = after;
            s.last_seen = now;
            s.in_flight += 1;
            return Ok(changed);
        }
        if self.by_id.len() >= self.max {
            self.prune(now);
            if self.by_id.len() >= self.max {
                return Err(TooManyDispatchers);
            }
        }
        self.by_id.insert(
            id.to_string(),
            Seen {
                epoch: epoch.to_string(),
                after,
                last_seen: now,
                in_flight: 1,
                unavailable: Vec::new(),
            },
        );
        Ok(true)
    }

    /// Dispatcher `id` reports the complete list of hooks it cannot load (crds
    /// `Report::unavailable`). An id not tracked yet is tracked from `now`, holding
    /// nothing of ours until it polls. Returns whether the list changed.
    ///
    /// Errors: [`TooManyDispatchers`] when `id` is new and the tracker is full.
    pub fn set_unavailable(
        &mut self,
        id: &str,
        mut list: Vec<UnavailableReport>,
        now: Instant,
    ) -> Result<bool, TooManyDispatchers> {
        list.sort();
        list.dedup();
        if let Some(s) = self.by_id.get_mut(id) {
            let changed = s.unavailable != list;
            s.unavailable = list;
            s.last_seen = s.last_seen.max(now);
            return Ok(changed);
        }
        if self.by_id.len() >= self.max {
            self.prune(now);
            if self.by_id.len() >= self.max {
                return Err(TooManyDispatchers);
            }
        }
        let changed = !list.is_empty();
        self.by_id.insert(
            id.to_string(),
            Seen {
                epoch: String::new(),
                after: 0,
                last_seen: now,
                in_flight: 0,
                unavailable: list,
            },
        );
        Ok(changed)
    }

    /// A poll by `id` ended (answered, timed out, or the client went away).
    pub fn end_poll(&mut self, id: &str, now: Instant) {
        if let Some(s) = self.by_id.get_mut(id) {
            s.in_flight = s.in_flight.saturating_sub(1);
            s.last_seen = now;
        }
    }

    /// The live dispatchers at `now`, with the version of `epoch` each holds.
    pub fn live(&self, epoch: &str, now: Instant) -> LiveDispatchers {
        let live = || self.by_id.iter().filter(|(_, s)| self.is_live(s, now));
        LiveDispatchers(
            live()
                .map(|(id, s)| (id.clone(), (s.epoch == epoch).then_some(s.after)))
                .collect(),
            live()
                .filter(|(_, s)| !s.unavailable.is_empty())
                .map(|(id, s)| (id.clone(), s.unavailable.clone()))
                .collect(),
        )
    }

    /// Forgets dispatchers idle for ten TTLs (they are long not live). Returns how many.
    pub fn prune(&mut self, now: Instant) -> usize {
        let keep_for = self.ttl * 10;
        let before = self.by_id.len();
        self.by_id.retain(|_, s| {
            s.in_flight > 0 || now.saturating_duration_since(s.last_seen) < keep_for
        });
        before - self.by_id.len()
    }

    /// Every tracked dispatcher, sorted by id.
    pub fn list(&self, epoch: &str, now: Instant) -> Vec<DispatcherInfo> {
        let mut out: Vec<DispatcherInfo> = self
            .by_id
            .iter()
            .map(|(id, s)| DispatcherInfo {
                id: id.clone(),
                epoch: s.epoch.clone(),
                version: s.after,
                current_epoch: s.epoch == epoch,
                live: self.is_live(s, now),
                in_flight: s.in_flight,
                last_seen_seconds_ago: now.saturating_duration_since(s.last_seen).as_secs(),
            })
            .collect();
        out.sort_by(|a, b| a.id.cmp(&b.id));
        out
    }
}

/// Most hook keys [`Stamps`] keeps waiting for the ready pass; past it they are dropped and
/// the ready pass looks at every hook once instead.
pub const MAX_STAMPED_KEYS: usize = 200_000;

/// The hooks each publish stamped with its version (their content is in no snapshot
/// before it): the ready pass takes a version's hooks once every live dispatcher holds
/// it, and looks at those only ([`crate::reconcile::ready_pass`]).
#[derive(Debug, Default)]
pub struct Stamps {
    waiting: VecDeque<(u64, Vec<HookKey>)>,
    keys: usize,
    overflowed: bool,
}

impl Stamps {
    /// Version `version` stamped `keys`.
    pub fn record(&mut self, version: u64, keys: Vec<HookKey>) {
        if keys.is_empty() {
            return;
        }
        if self.keys + keys.len() > MAX_STAMPED_KEYS {
            self.waiting.clear();
            self.keys = 0;
            self.overflowed = true;
            return;
        }
        self.keys += keys.len();
        self.waiting.push_back((version, keys));
    }

    /// The hooks stamped with `version` or an earlier one, taken out.
    pub fn take_up_to(&mut self, version: u64) -> Vec<HookKey> {
        let mut out = Vec::new();
        while self.waiting.front().is_some_and(|(v, _)| *v <= version) {
            if let Some((_, keys)) = self.waiting.pop_front() {
                self.keys -= keys.len();
                out.extend(keys);
            }
        }
        out
    }

    /// Every hook waiting, taken out.
    pub fn take_all(&mut self) -> Vec<HookKey> {
        self.take_up_to(u64::MAX)
    }

    /// Whether keys were dropped since the last call (the ready pass then looks at every
    /// hook).
    pub fn take_overflow(&mut self) -> bool {
        std::mem::take(&mut self.overflowed)
    }
}

/// The `Ready` condition of a hook (status, reason, message), from where it stands in
/// the snapshots and which live dispatcher holds what:
///
/// | publication | live dispatchers | Ready |
/// |---|---|---|
/// | refused | any | `False` `NotAccepted` |
/// | published | some live one reported it cannot load the hook's current generation | `False` `HookUnavailable` |
/// | published | none | `Unknown` `NoDispatchers` |
/// | published, not yet in a snapshot, or some live dispatcher holds an older version (or another epoch) | ≥ 1 | `Unknown` `Pending` |
/// | published from version V | every live one holds ≥ V | `True` `Served` |
///
/// A hook with open breakers is published (it stays in every snapshot, carrying the open
/// tenants): `Ready` says whether the dispatchers serve its current generation, and the
/// `CircuitOpen` condition which tenants get its fault instead of its handler. A trip or
/// a close does not move `served_from`, so `Ready` does not flap with the breaker.
///
/// Messages name no counts or versions that move while the condition stays put, so a
/// status is rewritten only when the outcome changes.
///
/// `uid` and `generation` are the hook's own: a dispatcher's report of another generation
/// (older, or not yet the one in its snapshot) does not hold this one.
pub fn ready_condition(
    publication: Publication,
    live: &LiveDispatchers,
    uid: &str,
    generation: i64,
) -> DesiredCondition {
    let unavailable = live.unavailable(uid, generation);
    let (status, reason, message) = match publication {
        Publication::NotAccepted => (
            CondStatus::False,
            "NotAccepted",
            "the hook is not accepted (see the Accepted condition), so no dispatcher runs it"
                .to_string(),
        ),
        Publication::Published { .. } if !unavailable.is_empty() => (
            CondStatus::False,
            HOOK_UNAVAILABLE,
            unavailable_message(&unavailable, generation),
        ),
        Publication::Published { .. } if live.is_empty() => (
            CondStatus::Unknown,
            "NoDispatchers",
            "no dispatcher has polled the operator recently; the hook is ready to be served".to_string(),
        ),
        Publication::Published {
            served_from: Some(v),
        } if live.all_hold(v) => (
            CondStatus::True,
            "Served",
            "every live dispatcher serves the hook's current generation".to_string(),
        ),
        Publication::Published { .. } => (
            CondStatus::Unknown,
            PENDING,
            "waiting for every live dispatcher to load a snapshot with the hook's current generation".to_string(),
        ),
    };
    DesiredCondition {
        type_: READY,
        status,
        reason: reason.to_string(),
        message,
    }
}

/// Reason of `Ready=Unknown` while some live dispatcher does not serve the hook's current
/// generation yet.
pub const PENDING: &str = "Pending";

/// Reason of `Ready=False` while a live dispatcher cannot load the hook (CONTRACT §10.4).
pub const HOOK_UNAVAILABLE: &str = "HookUnavailable";

/// Most dispatchers named in a `HookUnavailable` message; the others are counted.
pub const MAX_NAMED_DISPATCHERS: usize = 5;

/// "dispatcher d1 cannot load generation 3 of the hook: <error>; ...".
fn unavailable_message(unavailable: &[(&str, &str)], generation: i64) -> String {
    let named: Vec<String> = unavailable
        .iter()
        .take(MAX_NAMED_DISPATCHERS)
        .map(|(id, error)| {
            format!("dispatcher {id} cannot load generation {generation} of the hook: {error}")
        })
        .collect();
    let mut message = named.join("; ");
    if unavailable.len() > MAX_NAMED_DISPATCHERS {
        message.push_str(&format!(
            "; and {} more dispatchers",
            unavailable.len() - MAX_NAMED_DISPATCHERS
        ));
    }
    message.push_str(
        " (blocking events the hook could apply to are answered block, reason HookUnavailable, by those dispatchers)",
    );
    message
}

/// During the warm-up of a leader session (its initial sync, then one dispatcher TTL after
/// it starts serving), dispatchers have not yet polled this process or still hold the
/// previous leader's epoch; an `Unknown` outcome then does not replace a `True` or
/// `Unknown` Ready already recorded for the same generation, so an operator restart does
/// not rewrite every hook's status. Outside warm-up, or in any other case, `desired`
/// stands.
pub fn settle_ready(
    desired: DesiredCondition,
    current: Option<&Condition>,
    generation: i64,
    warming_up: bool,
) -> DesiredCondition {
    if warming_up
        && desired.status == CondStatus::Unknown
        && let Some(c) = current
        && (c.status == "True" || c.status == "Unknown")
        && c.observed_generation == Some(generation)
    {
        return DesiredCondition {
            type_: READY,
            status: if c.status == "True" {
                CondStatus::True
            } else {
                CondStatus::Unknown
            },
            reason: c.reason.clone(),
            message: c.message.clone(),
        };
    }
    desired
}

#[cfg(test)]
mod tests {
    use super::*;

    const EPOCH: &str = "e1";

    fn published(v: Option<u64>) -> Publication {
        Publication::Published { served_from: v }
    }

    fn reason(c: &DesiredCondition) -> (&'static str, &str) {
        (c.status.as_str(), c.reason.as_str())
    }

    #[test]
    fn ready_with_zero_one_and_two_dispatchers() {
        let t0 = Instant::now();
        let mut tr = DispatcherTracker::new(Duration::from_secs(30));
        // 0 dispatchers
        let live = tr.live(EPOCH, t0);
        assert_eq!(
            reason(&ready_condition(published(Some(3)), &live, "u", 1)),
            ("Unknown", "NoDispatchers")
        );
        // 1 dispatcher holding 2 < 3
        tr.begin_poll("d1", EPOCH, 2, t0).unwrap();
        let live = tr.live(EPOCH, t0);
        assert_eq!(
            reason(&ready_condition(published(Some(3)), &live, "u", 1)),
            ("Unknown", "Pending")
        );
        // it moves to 3
        tr.end_poll("d1", t0);
        assert!(tr.begin_poll("d1", EPOCH, 3, t0).unwrap());
        let live = tr.live(EPOCH, t0);
        assert_eq!(
            reason(&ready_condition(published(Some(3)), &live, "u", 1)),
            ("True", "Served")
        );
        // later versions also include the hook
        assert_eq!(
            reason(&ready_condition(published(Some(2)), &live, "u", 1)),
            ("True", "Served")
        );
        // not yet published at all
        assert_eq!(
            reason(&ready_condition(published(None), &live, "u", 1)),
            ("Unknown", "Pending")
        );
        // 2 dispatchers: the second still on another epoch
        tr.begin_poll("d2", "old-epoch", 9, t0).unwrap();
        let live = tr.live(EPOCH, t0);
        assert_eq!(live.len(), 2);
        assert_eq!(
            reason(&ready_condition(published(Some(3)), &live, "u", 1)),
            ("Unknown", "Pending"),
            "a version of another epoch holds nothing of ours"
        );
        tr.end_poll("d2", t0);
        tr.begin_poll("d2", EPOCH, 4, t0).unwrap();
        let live = tr.live(EPOCH, t0);
        assert_eq!(
            reason(&ready_condition(published(Some(3)), &live, "u", 1)),
            ("True", "Served")
        );
        assert_eq!(
            reason(&ready_condition(published(Some(4)), &live, "u", 1)),
            ("Unknown", "Pending"),
            "d1 holds only 3"
        );
    }

    fn gone(uid: &str, generation: i64, error: &str) -> UnavailableReport {
        UnavailableReport {
            uid: uid.into(),
            namespace: "tenant-a".into(),
            name: "h".into(),
            generation,
            error: error.into(),
        }
    }

    #[test]
    fn a_live_dispatcher_that_cannot_load_the_generation_holds_ready_false() {
        let t0 = Instant::now();
        let ttl = Duration::from_secs(30);
        let mut tr = DispatcherTracker::new(ttl);
        tr.begin_poll("lite", EPOCH, 3, t0).unwrap();
        tr.begin_poll("std", EPOCH, 3, t0).unwrap();
        tr.end_poll("std", t0);
        let served = |tr: &DispatcherTracker, at, uid, generation| {
            ready_condition(published(Some(3)), &tr.live(EPOCH, at), uid, generation)
        };
        assert_eq!(reason(&served(&tr, t0, "u", 2)), ("True", "Served"));

        assert!(
            tr.set_unavailable(
                "std",
                vec![gone(
                    "u",
                    2,
                    "handler.type: command hooks need the lite edition"
                )],
                t0
            )
            .unwrap()
        );
        let c = served(&tr, t0, "u", 2);
        assert_eq!(reason(&c), ("False", "HookUnavailable"));
        assert_eq!(
            c.message,
            "dispatcher std cannot load generation 2 of the hook: handler.type: command hooks need the lite edition (blocking events the hook could apply to are answered block, reason HookUnavailable, by those dispatchers)"
        );
        // It wins over Pending: the hook is not Ready even before every version is held.
        assert_eq!(
            reason(&ready_condition(
                published(Some(9)),
                &tr.live(EPOCH, t0),
                "u",
                2
            )),
            ("False", "HookUnavailable")
        );
        // Another hook, or another generation of this one, is not held by it.
        assert_eq!(reason(&served(&tr, t0, "other", 2)), ("True", "Served"));
        assert_eq!(
            reason(&served(&tr, t0, "u", 3)),
            ("True", "Served"),
            "a report of generation 2 does not hold generation 3"
        );
        // The same list again is no change; the operator's message stays put.
        assert!(
            !tr.set_unavailable(
                "std",
                vec![gone(
                    "u",
                    2,
                    "handler.type: command hooks need the lite edition"
                )],
                t0
            )
            .unwrap()
        );

        // Two dispatchers: both named, sorted.
        tr.set_unavailable("lite", vec![gone("u", 2, "e2")], t0)
            .unwrap();
        let c = served(&tr, t0, "u", 2);
        assert!(
            c.message.starts_with("dispatcher lite cannot load generation 2 of the hook: e2; dispatcher std cannot load"),
            "{}",
            c.message
        );

        // lite loads it (an empty list): only std holds it now.
        assert!(tr.set_unavailable("lite", vec![], t0).unwrap());
        assert!(
            served(&tr, t0, "u", 2)
                .message
                .starts_with("dispatcher std ")
        );
        // std is no longer live: Ready again from lite alone.
        let later = t0 + ttl * 2;
        assert_eq!(reason(&served(&tr, later, "u", 2)), ("True", "Served"));
        // std comes back and loads it.
        tr.begin_poll("std", EPOCH, 3, later).unwrap();
        assert_eq!(
            reason(&served(&tr, later, "u", 2)),
            ("False", "HookUnavailable")
        );
        tr.set_unavailable("std", vec![], later).unwrap();
        assert_eq!(reason(&served(&tr, later, "u", 2)), ("True", "Served"));
    }

    #[test]
    fn a_report_from_an_untracked_dispatcher_tracks_it_and_warm_up_keeps_false() {
        let t0 = Instant::now();
        let mut tr = DispatcherTracker::new(Duration::from_secs(30));
        assert!(
            tr.set_unavailable("new", vec![gone("u", 1, "bad")], t0)
                .unwrap()
        );
        let live = tr.live(EPOCH, t0);
        assert_eq!(live.0.get("new"), Some(&None), "holds nothing of ours yet");
        let c = ready_condition(published(Some(1)), &live, "u", 1);
        assert_eq!(reason(&c), ("False", "HookUnavailable"));
        let served = Condition {
            type_: "Ready".into(),
            status: "True".into(),
            reason: "Served".into(),
            message: "m".into(),
            observed_generation: Some(1),
            last_transition_time: k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                k8s_openapi::jiff::Timestamp::UNIX_EPOCH,
            ),
        };
        assert_eq!(
            settle_ready(c.clone(), Some(&served), 1, true),
            c,
            "warm-up never hides HookUnavailable behind an older True"
        );
        // An empty first report of an untracked id changes nothing.
        assert!(!tr.set_unavailable("quiet", vec![], t0).unwrap());
    }

    #[test]
    fn refused_ignores_dispatchers() {
        let live = LiveDispatchers::default();
        assert_eq!(
            reason(&ready_condition(Publication::NotAccepted, &live, "u", 1)),
            ("False", "NotAccepted")
        );
    }

    #[test]
    fn liveness_follows_ttl_and_in_flight_polls() {
        let t0 = Instant::now();
        let ttl = Duration::from_secs(30);
        let mut tr = DispatcherTracker::new(ttl);
        tr.begin_poll("d1", EPOCH, 1, t0).unwrap();
        // a long poll in flight keeps it live past the TTL
        assert_eq!(tr.live(EPOCH, t0 + ttl * 2).len(), 1);
        tr.end_poll("d1", t0 + ttl * 2);
        assert_eq!(tr.live(EPOCH, t0 + ttl * 2 + ttl / 2).len(), 1);
        assert!(tr.live(EPOCH, t0 + ttl * 3).is_empty(), "TTL passed");
        // coming back counts as a change
        assert!(tr.begin_poll("d1", EPOCH, 1, t0 + ttl * 3).unwrap());
        tr.end_poll("d1", t0 + ttl * 3);
        assert!(
            !tr.begin_poll("d1", EPOCH, 1, t0 + ttl * 3).unwrap(),
            "same version while live: no change"
        );
        tr.end_poll("d1", t0 + ttl * 3);
        assert_eq!(tr.prune(t0 + ttl * 14), 1);
        assert!(tr.list(EPOCH, t0).is_empty());
    }

    #[test]
    fn the_tracker_is_bounded() {
        let t0 = Instant::now();
        let mut tr = DispatcherTracker::new(Duration::from_secs(1));
        tr.max = 2;
        tr.begin_poll("a", EPOCH, 0, t0).unwrap();
        tr.begin_poll("b", EPOCH, 0, t0).unwrap();
        assert_eq!(tr.begin_poll("c", EPOCH, 0, t0), Err(TooManyDispatchers));
        assert!(
            tr.begin_poll("a", EPOCH, 1, t0).is_ok(),
            "known ids still pass"
        );
    }

    #[test]
    fn warm_up_keeps_a_served_ready_of_the_same_generation() {
        let served = Condition {
            type_: "Ready".into(),
            status: "True".into(),
            reason: "Served".into(),
            message: "m".into(),
            observed_generation: Some(2),
            last_transition_time: k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                k8s_openapi::jiff::Timestamp::UNIX_EPOCH,
            ),
        };
        let pending = ready_condition(published(Some(5)), &LiveDispatchers::default(), "u", 1);
        let kept = settle_ready(pending.clone(), Some(&served), 2, true);
        assert_eq!(reason(&kept), ("True", "Served"));
        assert_eq!(
            settle_ready(pending.clone(), Some(&served), 2, false),
            pending
        );
        assert_eq!(
            settle_ready(pending.clone(), Some(&served), 3, true),
            pending,
            "a new generation is not covered"
        );
        let refused = ready_condition(
            Publication::NotAccepted,
            &LiveDispatchers::default(),
            "u",
            1,
        );
        assert_eq!(
            settle_ready(refused.clone(), Some(&served), 2, true),
            refused
        );
        let mut pending_before = served.clone();
        pending_before.status = "Unknown".into();
        pending_before.reason = "Pending".into();
        let no_dispatchers =
            ready_condition(published(Some(5)), &LiveDispatchers::default(), "u", 1);
        assert_eq!(
            reason(&settle_ready(
                no_dispatchers,
                Some(&pending_before),
                2,
                true
            )),
            ("Unknown", "Pending"),
            "an Unknown of the same generation is kept during warm-up"
        );
    }

    #[test]
    fn stamps_are_taken_by_version() {
        let k = |n: &str| HookKey::new("ns", n);
        let mut st = Stamps::default();
        st.record(1, vec![k("a")]);
        st.record(2, vec![]);
        st.record(3, vec![k("b"), k("c")]);
        assert_eq!(st.take_up_to(2), vec![k("a")]);
        assert_eq!(st.take_up_to(2), Vec::<HookKey>::new());
        assert_eq!(st.take_all(), vec![k("b"), k("c")]);
        assert!(!st.take_overflow());
        st.record(
            4,
            (0..MAX_STAMPED_KEYS + 1)
                .map(|i| k(&i.to_string()))
                .collect(),
        );
        assert!(
            st.take_overflow(),
            "too many keys: the ready pass looks at all"
        );
        assert!(st.take_all().is_empty());
    }
}
