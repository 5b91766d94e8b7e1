//! Reports not yet acknowledged: counts merged per hook, trips, and the batch in flight.
//!
//! Rules (crds `report` module): a report is acknowledged (`200`) only once the operator
//! has written what it carries, and it applies a given `reportId` once. So:
//! - A batch whose send may have reached an operator (a timeout, a reset, a `5xx` other
//!   than `503`) is retried verbatim with the same `reportId` until acknowledged: the
//!   operator either applied it (and answers `duplicate`) or applies it now.
//! - A batch that no operator can have acted on (every URL refused the connection or
//!   answered `503`) is merged back into what is pending; the next batch gets a new id.
//! - Memory is bounded: at most `cap` hooks are held (pending plus the batch in flight);
//!   counts of further hooks are dropped and counted (the caller logs and exports it).
//!   Breaker runs are held the same way, at most `cap`, the latest per hook.
//! - A batch is at most about [`MAX_BATCH_BYTES`] of JSON (the operator refuses bodies
//!   over 4 MiB with a `413`); what does not fit goes in the next batch.
//! - A batch the operator refuses (`400`, `413`: nothing applied, and it would refuse it
//!   again) is dropped and counted, so one bad report never blocks the ones after it.

use std::collections::HashMap;

use agenthooks_crds::report::{
    BreakerObservation, CloseReport, ExecutionDelta, Report, TripReport,
};

use crate::report::counters::{Counts, HookIdentity};

/// Hooks held at most by default (pending plus in flight).
pub const DEFAULT_PENDING_CAP: usize = 100_000;
/// Estimated JSON bytes of one batch at most (half the operator's 4 MiB body limit).
pub const MAX_BATCH_BYTES: usize = 2 * 1024 * 1024;

fn trip_bytes(t: &TripReport) -> usize {
    200 + t.uid.len()
        + t.namespace.len()
        + t.name.len()
        + t.reason.len()
        + t.tenant.len()
        + t.reset_token.as_ref().map_or(0, String::len)
}

fn execution_bytes(id: &HookIdentity) -> usize {
    250 + id.uid.len() + id.namespace.len() + id.name.len()
}

fn observation_bytes(o: &BreakerObservation) -> usize {
    150 + o.uid.len()
        + o.tenant.len()
        + o.namespace.len()
        + o.name.len()
        + o.reset_token.as_ref().map_or(0, String::len)
        + 60 * o.run.len()
}

/// A batch: one `POST /v1/report` with its id.
#[derive(Debug, Clone, PartialEq)]
pub struct Batch {
    pub report_id: String,
    pub trips: Vec<TripReport>,
    /// Breakers closed by a probe here (sent with the trips, first).
    pub closes: Vec<CloseReport>,
    pub executions: Vec<(HookIdentity, Counts)>,
    pub observations: Vec<BreakerObservation>,
}

impl Batch {
    /// The wire form for `dispatcher` (crds `report::Report`).
    pub fn to_report(&self, dispatcher: &str) -> Report {
        Report {
            dispatcher: dispatcher.to_string(),
            report_id: self.report_id.clone(),
            trips: self.trips.clone(),
            executions: self.executions.iter().map(|(id, c)| delta(id, c)).collect(),
            breaker: self.observations.clone(),
            closes: self.closes.clone(),
            // Sent by the snapshot follower on its own (crate::sync), never batched here.
            unavailable: None,
        }
    }
}

/// The wire form of one hook's counts.
pub fn delta(id: &HookIdentity, c: &Counts) -> ExecutionDelta {
    let last = c.last_run();
    ExecutionDelta {
        uid: id.uid.clone(),
        namespace: id.namespace.clone(),
        name: id.name.clone(),
        allow: c.by_outcome[0],
        block: c.by_outcome[1],
        error: c.by_outcome[2],
        timeout: c.by_outcome[3],
        ask: c.by_outcome[4],
        last_execution_time: last.and_then(|(ms, _)| {
            chrono::DateTime::from_timestamp_millis(ms as i64)
                .map(|t| t.to_rfc3339_opts(chrono::SecondsFormat::Secs, true))
        }),
        last_decision: last.map(|(_, o)| o.as_str().to_string()),
    }
}

/// What was dropped for lack of room.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Dropped {
    pub hooks: usize,
    pub executions: u64,
    /// Breaker runs dropped.
    pub observations: usize,
}

/// Everything not acknowledged yet.
#[derive(Debug)]
pub struct Pending {
    /// Counts by hook uid (generations of one hook merge).
    executions: HashMap<String, (HookIdentity, Counts)>,
    /// The latest breaker run by (hook uid, tenant).
    observations: HashMap<(String, String), BreakerObservation>,
    trips: Vec<TripReport>,
    closes: Vec<CloseReport>,
    in_flight: Option<Batch>,
    cap: usize,
    batch_bytes: usize,
}

impl Pending {
    /// Empty, holding at most `cap` hooks.
    pub fn new(cap: usize) -> Pending {
        Pending {
            executions: HashMap::new(),
            observations: HashMap::new(),
            trips: Vec::new(),
            closes: Vec::new(),
            in_flight: None,
            cap,
            batch_bytes: MAX_BATCH_BYTES,
        }
    }

    /// The same, with batches of at most about `bytes` of JSON.
    pub fn with_batch_bytes(mut self, bytes: usize) -> Pending {
        self.batch_bytes = bytes;
        self
    }

    /// Hooks held: pending plus in flight.
    pub fn hooks(&self) -> usize {
        self.executions.len() + self.in_flight.as_ref().map_or(0, |b| b.executions.len())
    }

    /// Trips held: pending plus in flight.
    pub fn trips(&self) -> usize {
        self.trips.len()
            + self.closes.len()
            + self
                .in_flight
                .as_ref()
                .map_or(0, |b| b.trips.len() + b.closes.len())
    }

    /// Breaker runs held: pending plus in flight.
    pub fn observations(&self) -> usize {
        self.observations.len() + self.in_flight.as_ref().map_or(0, |b| b.observations.len())
    }

    /// Nothing held.
    pub fn is_empty(&self) -> bool {
        self.hooks() == 0 && self.trips() == 0 && self.observations() == 0
    }

    /// Keeps the latest breaker run of each hook; a hook not held yet is dropped when
    /// the cap is reached.
    pub fn add_observations(&mut self, observations: Vec<BreakerObservation>) -> Dropped {
        let mut dropped = Dropped::default();
        for o in observations {
            let key = (o.uid.clone(), o.tenant.clone());
            if !self.observations.contains_key(&key) && self.observations() >= self.cap {
                dropped.observations += 1;
                continue;
            }
            self.observations.insert(key, o);
        }
        dropped
    }

    /// Merges swept counts; a hook not held yet is dropped when the cap is reached.
    pub fn add_executions(
        &mut self,
        swept: impl IntoIterator<Item = (HookIdentity, Counts)>,
    ) -> Dropped {
        let mut dropped = Dropped::default();
        for (id, counts) in swept {
            if let Some((_, held)) = self.executions.get_mut(&id.uid) {
                held.merge(&counts);
                continue;
            }
            if self.hooks() >= self.cap {
                dropped.hooks += 1;
                dropped.executions += counts.total();
                continue;
            }
            self.executions.insert(id.uid.clone(), (id, counts));
        }
        dropped
    }

    /// Queues trips (trips are few: one per hook version and tenant at most).
    pub fn add_trips(&mut self, trips: Vec<TripReport>) {
        self.trips.extend(trips);
    }

    /// Queues closes (few: one per probe that answered).
    pub fn add_closes(&mut self, closes: Vec<CloseReport>) {
        self.closes.extend(closes);
    }

    /// The batch to send now: the one in flight if any (same id), else a new one with
    /// what is pending (trips first, then counts, then breaker runs, up to about the
    /// batch size; at least one item) and a new id, which becomes the one in flight.
    /// `None` when nothing is held.
    pub fn next_batch(&mut self) -> Option<Batch> {
        if let Some(b) = &self.in_flight {
            return Some(b.clone());
        }
        if self.executions.is_empty()
            && self.trips.is_empty()
            && self.closes.is_empty()
            && self.observations.is_empty()
        {
            return None;
        }
        let mut room = self.batch_bytes;
        let mut fits = |bytes: usize, empty: bool| {
            if bytes <= room || empty {
                room = room.saturating_sub(bytes);
                true
            } else {
                false
            }
        };
        let mut trips = Vec::new();
        while let Some(t) = self.trips.first() {
            if !fits(trip_bytes(t), trips.is_empty()) {
                break;
            }
            trips.push(self.trips.remove(0));
        }
        let closes = std::mem::take(&mut self.closes);
        let mut uids: Vec<String> = Vec::new();
        for (uid, (id, _)) in &self.executions {
            if !fits(execution_bytes(id), trips.is_empty() && uids.is_empty()) {
                break;
            }
            uids.push(uid.clone());
        }
        let mut executions: Vec<_> = uids
            .iter()
            .filter_map(|u| self.executions.remove(u))
            .collect();
        executions.sort_by(|a, b| a.0.uid.cmp(&b.0.uid));
        let mut keys: Vec<(String, String)> = Vec::new();
        for (key, o) in &self.observations {
            let empty = trips.is_empty() && executions.is_empty() && keys.is_empty();
            if !fits(observation_bytes(o), empty) {
                break;
            }
            keys.push(key.clone());
        }
        let mut observations: Vec<_> = keys
            .iter()
            .filter_map(|k| self.observations.remove(k))
            .collect();
        observations.sort_by(|a, b| (&a.uid, &a.tenant).cmp(&(&b.uid, &b.tenant)));
        let batch = Batch {
            report_id: uuid::Uuid::new_v4().to_string(),
            trips,
            closes,
            executions,
            observations,
        };
        self.in_flight = Some(batch.clone());
        Some(batch)
    }

    /// The operator refused the batch in flight (it would refuse it again): drop it.
    /// Returns what was dropped.
    pub fn refused(&mut self) -> Dropped {
        let Some(b) = self.in_flight.take() else {
            return Dropped::default();
        };
        Dropped {
            hooks: b.executions.len(),
            executions: b.executions.iter().map(|(_, c)| c.total()).sum(),
            observations: b.observations.len(),
        }
    }

    /// The batch in flight was acknowledged: forget it.
    pub fn acknowledged(&mut self) {
        self.in_flight = None;
    }

    /// The batch in flight reached no operator: merge it back into what is pending (its
    /// trips first, in order; a newer breaker run of a hook wins), so the next batch
    /// carries it under a new id.
    pub fn not_applied(&mut self) {
        let Some(b) = self.in_flight.take() else {
            return;
        };
        let mut trips = b.trips;
        trips.append(&mut self.trips);
        self.trips = trips;
        let mut closes = b.closes;
        closes.append(&mut self.closes);
        self.closes = closes;
        for (id, counts) in b.executions {
            match self.executions.get_mut(&id.uid) {
                Some((_, held)) => held.merge(&counts),
                None => {
                    self.executions.insert(id.uid.clone(), (id, counts));
                }
            }
        }
        for o in b.observations {
            self.observations
                .entry((o.uid.clone(), o.tenant.clone()))
                .or_insert(o);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::handlers::Outcome;
    use crate::report::counters::pack_last;

    fn id(n: usize) -> HookIdentity {
        HookIdentity {
            uid: format!("uid-{n}"),
            namespace: "tenant-acme".into(),
            name: format!("h{n}"),
        }
    }

    fn counts(allow: u64, block: u64, last_ms: u64, o: Outcome) -> Counts {
        Counts {
            by_outcome: [allow, block, 0, 0, 0],
            last: pack_last(last_ms, o),
        }
    }

    fn trip(name: &str) -> TripReport {
        TripReport {
            uid: format!("uid-{name}"),
            namespace: "tenant-acme".into(),
            name: name.into(),
            generation: 1,
            reset_token: None,
            tenant: "acme".into(),
            tripped_at: "2026-01-01T00:00:00Z".into(),
            fail_closed: false,
            reason: "5 blocks".into(),
        }
    }

    #[test]
    fn sweeps_merge_per_hook_and_render_the_wire_form() {
        let mut p = Pending::new(10);
        p.add_executions([
            (id(1), counts(1, 0, 1_000, Outcome::Allow)),
            (id(2), counts(0, 1, 2_000, Outcome::Block)),
        ]);
        p.add_executions([(id(1), counts(2, 3, 1_767_225_600_000, Outcome::Block))]);
        let b = p.next_batch().unwrap();
        let r = b.to_report("d1");
        assert_eq!(r.dispatcher, "d1");
        assert_eq!(r.report_id.len(), 36);
        assert_eq!(
            r.executions[0],
            ExecutionDelta {
                uid: "uid-1".into(),
                namespace: "tenant-acme".into(),
                name: "h1".into(),
                allow: 3,
                block: 3,
                error: 0,
                timeout: 0,
                ask: 0,
                last_execution_time: Some("2026-01-01T00:00:00Z".into()),
                last_decision: Some("block".into()),
            }
        );
        assert_eq!(
            (r.executions[1].uid.as_str(), r.executions[1].block),
            ("uid-2", 1)
        );
    }

    #[test]
    fn a_batch_that_may_have_been_applied_is_retried_verbatim_with_its_id() {
        let mut p = Pending::new(10);
        p.add_executions([(id(1), counts(5, 0, 1_000, Outcome::Allow))]);
        p.add_trips(vec![trip("t")]);
        let first = p.next_batch().unwrap();
        // counts arriving meanwhile wait for the next batch
        p.add_executions([(id(1), counts(7, 0, 2_000, Outcome::Allow))]);
        let retry = p.next_batch().unwrap();
        assert_eq!(retry, first, "same id, same content");
        assert_eq!(p.hooks(), 2, "one in flight, one pending (same hook)");
        p.acknowledged();
        let next = p.next_batch().unwrap();
        assert_ne!(next.report_id, first.report_id);
        assert_eq!(next.executions[0].1.by_outcome[0], 7);
        assert!(next.trips.is_empty());
        p.acknowledged();
        assert!(p.next_batch().is_none());
        assert!(p.is_empty());
    }

    #[test]
    fn a_batch_no_operator_took_is_merged_into_the_next_under_a_new_id() {
        let mut p = Pending::new(10);
        p.add_executions([(id(1), counts(5, 1, 1_000, Outcome::Block))]);
        p.add_trips(vec![trip("a")]);
        let first = p.next_batch().unwrap();
        p.add_executions([
            (id(1), counts(2, 0, 3_000, Outcome::Allow)),
            (id(2), counts(1, 0, 500, Outcome::Allow)),
        ]);
        p.add_trips(vec![trip("b")]);
        p.not_applied();
        let next = p.next_batch().unwrap();
        assert_ne!(next.report_id, first.report_id);
        let names: Vec<&str> = next.trips.iter().map(|t| t.name.as_str()).collect();
        assert_eq!(names, ["a", "b"], "older trips first");
        assert_eq!(next.executions.len(), 2);
        let h1 = &next.executions[0].1;
        assert_eq!(h1.by_outcome, [7, 1, 0, 0, 0]);
        assert_eq!(h1.last_run(), Some((3_000, Outcome::Allow)));
    }

    fn obs(uid: &str, last_allow: &str) -> BreakerObservation {
        BreakerObservation {
            uid: uid.into(),
            namespace: "tenant-acme".into(),
            name: uid.into(),
            generation: 1,
            reset_token: None,
            tenant: "acme".into(),
            last_answer_at: Some(last_allow.into()),
            run: vec![],
        }
    }

    #[test]
    fn runs_are_kept_per_hook_and_tenant_and_closes_go_with_the_trips() {
        let mut p = Pending::new(10);
        let mut other = obs("a", "t1");
        other.tenant = "globex".into();
        p.add_observations(vec![obs("a", "t1"), other.clone(), obs("a", "t2")]);
        let close = CloseReport {
            uid: "uid-a".into(),
            namespace: "tenant-acme".into(),
            name: "a".into(),
            generation: 1,
            reset_token: None,
            tenant: "acme".into(),
            opened_at: "2026-01-01T00:00:00.000Z".into(),
            closed_at: "2026-01-01T00:00:30.000Z".into(),
        };
        p.add_closes(vec![close.clone()]);
        assert_eq!(p.trips(), 1, "a close is sent in the trip lane");
        let b = p.next_batch().unwrap();
        assert_eq!(b.observations, vec![obs("a", "t2"), other]);
        assert_eq!(b.closes, vec![close.clone()]);
        assert_eq!(b.to_report("d").closes, vec![close.clone()]);
        p.not_applied();
        let again = p.next_batch().unwrap();
        assert_eq!(
            again.closes,
            vec![close],
            "a close not applied is sent again"
        );
        p.acknowledged();
        assert!(p.is_empty());
    }

    #[test]
    fn breaker_runs_keep_the_latest_per_hook_and_survive_a_failed_send() {
        let mut p = Pending::new(2);
        p.add_observations(vec![obs("a", "t1"), obs("a", "t2")]);
        let b = p.next_batch().unwrap();
        assert_eq!(b.observations, vec![obs("a", "t2")]);
        assert_eq!(b.to_report("d").breaker, vec![obs("a", "t2")]);
        let d = p.add_observations(vec![obs("a", "t3"), obs("b", "t1")]);
        assert_eq!(
            d.observations, 1,
            "a pending, a and b in flight: b has no room"
        );
        p.not_applied();
        let next = p.next_batch().unwrap();
        assert_eq!(
            next.observations,
            vec![obs("a", "t3")],
            "the newer run wins"
        );
        p.acknowledged();
        assert!(p.is_empty());
    }

    #[test]
    fn batches_stay_under_the_size_bound_and_the_rest_follows() {
        // Room for about three execution entries per batch.
        let per = execution_bytes(&id(0));
        let mut p = Pending::new(100).with_batch_bytes(3 * per + 10);
        p.add_executions((0..8).map(|n| (id(n), counts(1, 0, 1, Outcome::Allow))));
        let mut seen = 0;
        let mut batches = 0;
        while let Some(b) = p.next_batch() {
            assert!(b.executions.len() <= 3, "{}", b.executions.len());
            seen += b.executions.len();
            batches += 1;
            p.acknowledged();
        }
        assert_eq!((seen, batches), (8, 3));
        // One entry larger than the bound still goes, alone.
        let mut p = Pending::new(100).with_batch_bytes(1);
        p.add_trips(vec![trip("a"), trip("b")]);
        assert_eq!(p.next_batch().unwrap().trips.len(), 1);
    }

    #[test]
    fn a_refused_batch_is_dropped_and_counted() {
        let mut p = Pending::new(10);
        p.add_executions([(id(1), counts(3, 2, 1, Outcome::Block))]);
        p.add_observations(vec![obs("uid-1", "t")]);
        let first = p.next_batch().unwrap();
        p.add_executions([(id(1), counts(1, 0, 2, Outcome::Allow))]);
        assert_eq!(
            p.refused(),
            Dropped {
                hooks: 1,
                executions: 5,
                observations: 1
            }
        );
        let next = p.next_batch().unwrap();
        assert_ne!(next.report_id, first.report_id);
        assert_eq!(
            next.executions[0].1.by_outcome,
            [1, 0, 0, 0, 0],
            "later counts go on"
        );
    }

    #[test]
    fn the_cap_bounds_hooks_held_and_counts_what_it_drops() {
        let mut p = Pending::new(3);
        let d = p.add_executions((0..3).map(|n| (id(n), counts(1, 0, 1, Outcome::Allow))));
        assert_eq!(d, Dropped::default());
        let _in_flight = p.next_batch().unwrap();
        let d = p.add_executions([
            (id(0), counts(4, 0, 2, Outcome::Allow)), // held in flight, but not pending:
            (id(9), counts(2, 3, 2, Outcome::Block)),
        ]);
        assert_eq!(
            d,
            Dropped {
                hooks: 2,
                executions: 9,
                observations: 0
            },
            "in flight counts toward the cap"
        );
        p.acknowledged();
        let d = p.add_executions([
            (id(9), counts(2, 0, 3, Outcome::Allow)),
            (id(9), counts(1, 0, 4, Outcome::Allow)),
        ]);
        assert_eq!(d, Dropped::default());
        assert_eq!(p.hooks(), 1);
        // a hook already held always merges, even at the cap
        let mut full = Pending::new(1);
        full.add_executions([(id(1), counts(1, 0, 1, Outcome::Allow))]);
        let d = full.add_executions([
            (id(1), counts(1, 0, 1, Outcome::Allow)),
            (id(2), counts(1, 0, 1, Outcome::Allow)),
        ]);
        assert_eq!(d.hooks, 1);
        assert_eq!(full.next_batch().unwrap().executions[0].1.by_outcome[0], 2);
    }
}
