//! What this dispatcher owes the operator: breaker trips to send at once, breaker runs
//! to send soon, and the execution counters of every hook version it served since the
//! last sweep.
//!
//! The engine holds one [`Outbox`]. It is inactive until the reporter starts (synced
//! mode); an inactive outbox queues no trip and registers no counter, so standalone
//! mode and `check` report nothing (the counters on each hook still count, unread).
//!
//! Counters survive snapshot swaps: [`Outbox::register`] keeps an `Arc` of each hook
//! version's counters, and a sweep forgets a cell only after taking its counts with no
//! hook left to bump it. Locks are `std::sync::Mutex`, held for a few instructions and
//! never across an await.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Weak};

use agenthooks_crds::report::{BreakerObservation, CloseReport, RunOutcome, TripReport};

use crate::breaker::{Observation, Trip};

use crate::hookset::{HookSet, LoadedHook};
use crate::report::counters::{Counts, HookCounters, HookIdentity};

/// One hook version kept by the outbox: its counters (kept alive until swept) and the
/// hook itself while it lives (for its breaker run).
#[derive(Debug)]
struct Cell {
    counters: Arc<HookCounters>,
    hook: Weak<LoadedHook>,
}

/// What one sweep took.
#[derive(Debug, Default)]
pub struct Swept {
    /// Non-empty counts per hook version.
    pub executions: Vec<(HookIdentity, Counts)>,
    /// Breaker runs that changed, per live hook version.
    pub observations: Vec<BreakerObservation>,
}

/// Trips, counters and breaker runs waiting for the reporter.
#[derive(Debug, Default)]
pub struct Outbox {
    active: AtomicBool,
    cells: Mutex<Vec<Cell>>,
    trips: Mutex<Vec<TripReport>>,
    closes: Mutex<Vec<CloseReport>>,
    /// Wakes the reporter at once: a trip is queued.
    pub(crate) wake_trip: tokio::sync::Notify,
    /// Wakes the reporter soon: a breaker run grew.
    pub(crate) wake_run: tokio::sync::Notify,
}

impl Outbox {
    /// Starts queueing (the reporter calls it; `main` too, before the first snapshot).
    pub fn activate(&self) {
        self.active.store(true, Ordering::Release);
    }

    /// Whether a reporter reads this outbox.
    pub fn is_active(&self) -> bool {
        self.active.load(Ordering::Acquire)
    }

    /// Keeps the counters of every hook of `set` not kept yet (called on every swap).
    pub fn register(&self, set: &HookSet) {
        if !self.is_active() {
            return;
        }
        let mut cells = self.cells.lock().unwrap_or_else(|p| p.into_inner());
        for hook in set.iter() {
            if !hook.counters.registered.swap(true, Ordering::AcqRel) {
                cells.push(Cell {
                    counters: Arc::clone(&hook.counters),
                    hook: Arc::downgrade(hook),
                });
            }
        }
    }

    /// Queues the trip of `hook`'s breaker for `tenant` (inactive: ignored) and wakes the
    /// reporter's breaker lane: the operator publishes it to every dispatcher.
    pub fn trip(&self, hook: &LoadedHook, tenant: &str, trip: &Trip) {
        if !self.is_active() {
            return;
        }
        let report = TripReport {
            uid: hook.uid.clone(),
            namespace: hook.namespace.clone(),
            name: hook.name.clone(),
            generation: hook.generation,
            reset_token: hook.reset_token.clone(),
            tenant: tenant.to_string(),
            tripped_at: rfc3339_ms(trip.at_ms).unwrap_or_default(),
            fail_closed: trip.fail_closed,
            reason: trip.reason(),
        };
        self.trips
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(report);
        self.wake_trip.notify_one();
    }

    /// Queues the close of `hook`'s breaker for `tenant` by a probe that answered at
    /// `closed_ms` (the trip it ends opened at `opened_ms`) and wakes the breaker lane: the
    /// operator closes it everywhere (CONTRACT §6.4).
    pub fn close(&self, hook: &LoadedHook, tenant: &str, opened_ms: i64, closed_ms: i64) {
        if !self.is_active() {
            return;
        }
        let report = CloseReport {
            uid: hook.uid.clone(),
            namespace: hook.namespace.clone(),
            name: hook.name.clone(),
            generation: hook.generation,
            reset_token: hook.reset_token.clone(),
            tenant: tenant.to_string(),
            opened_at: rfc3339_ms(opened_ms).unwrap_or_default(),
            closed_at: rfc3339_ms(closed_ms).unwrap_or_default(),
        };
        self.closes
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(report);
        self.wake_trip.notify_one();
    }

    /// Takes the queued closes.
    pub fn take_closes(&self) -> Vec<CloseReport> {
        std::mem::take(&mut *self.closes.lock().unwrap_or_else(|p| p.into_inner()))
    }

    /// A hook's breaker run grew (a block or timeout): wakes the reporter, which sends
    /// the run soon (coalescing a burst into one report).
    #[inline]
    pub fn run_changed(&self) {
        if self.is_active() {
            self.wake_run.notify_one();
        }
    }

    /// Takes the queued trips.
    pub fn take_trips(&self) -> Vec<TripReport> {
        std::mem::take(&mut *self.trips.lock().unwrap_or_else(|p| p.into_inner()))
    }

    /// Takes every kept hook's counts (non-empty ones) and changed breaker runs, and
    /// forgets the cells no hook holds any more once their counts are taken.
    pub fn sweep(&self) -> Swept {
        Swept {
            executions: self.sweep_executions(),
            observations: self.sweep_observations(),
        }
    }

    /// Takes the non-empty counts of every hook version, and forgets the versions no
    /// hook set holds any more once their last counts are taken.
    pub fn sweep_executions(&self) -> Vec<(HookIdentity, Counts)> {
        let mut cells = self.cells.lock().unwrap_or_else(|p| p.into_inner());
        let mut out = Vec::new();
        cells.retain(|cell| {
            // Only this list holds the counters: the hook is gone, no run can bump them
            // any more, so after this last take the cell can go.
            let orphan = Arc::strong_count(&cell.counters) == 1;
            let counts = cell.counters.take();
            if !counts.is_empty() {
                out.push((cell.counters.identity.clone(), counts));
            }
            !orphan
        });
        out
    }

    /// Takes the breaker runs that changed, per live hook version (keeps every cell).
    pub fn sweep_observations(&self) -> Vec<BreakerObservation> {
        let cells = self.cells.lock().unwrap_or_else(|p| p.into_inner());
        cells
            .iter()
            .filter_map(|cell| {
                let hook = cell.hook.upgrade()?;
                let obs = hook.breaker.take_observations();
                Some(obs.into_iter().map(move |o| observation(&hook, o)))
            })
            .flatten()
            .collect()
    }

    /// Hook versions whose counters are kept.
    pub fn cells(&self) -> usize {
        self.cells.lock().unwrap_or_else(|p| p.into_inner()).len()
    }
}

fn rfc3339_ms(unix_ms: i64) -> Option<String> {
    chrono::DateTime::from_timestamp_millis(unix_ms)
        .map(|t| t.to_rfc3339_opts(chrono::SecondsFormat::Millis, true))
}

/// The wire form of `hook`'s run.
fn observation(hook: &LoadedHook, obs: Observation) -> BreakerObservation {
    BreakerObservation {
        uid: hook.uid.clone(),
        namespace: hook.namespace.clone(),
        name: hook.name.clone(),
        generation: hook.generation,
        reset_token: hook.reset_token.clone(),
        tenant: obs.tenant,
        last_answer_at: obs.last_answer_ms.and_then(rfc3339_ms),
        run: obs
            .run
            .into_iter()
            .filter_map(|(ms, timeout)| rfc3339_ms(ms).map(|at| RunOutcome { at, timeout }))
            .collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::breaker::FAULT_THRESHOLD;
    use crate::handlers::Outcome;
    use agenthooks_crds::Edition;
    use agenthooks_crds::rules::breaker::Transition;
    use agenthooks_crds::snapshot::SnapshotHook;

    fn set(names: &[&str], version: u64, previous: Option<&HookSet>) -> HookSet {
        let sources = names
            .iter()
            .map(|n| SnapshotHook {
                uid: format!("uid-{n}"),
                namespace: "tenant-acme".into(),
                name: n.to_string(),
                generation: 2,
                created_at: String::new(),
                namespace_tenant: "acme".into(),
                spec: serde_norway::from_str(
                    "event: pre_tool_use\nhandler: {type: http, http: {url: 'https://a.example'}}",
                )
                .unwrap(),
                sealed_headers: vec![],
                open_breakers: Vec::new(),
                reset_token: Some("r1".into()),
            })
            .collect();
        HookSet::build(
            sources,
            "agenthooks-system",
            Edition::Lite,
            version,
            previous,
        )
        .0
    }

    #[test]
    fn an_inactive_outbox_standalone_keeps_nothing() {
        let outbox = Outbox::default();
        let s = set(&["a"], 1, None);
        outbox.register(&s);
        let h = s.get("tenant-acme/a").unwrap();
        h.counters.record(Outcome::Block, 1);
        let trip = Trip {
            timeouts: 5,
            errors: 0,
            over_ms: 1000,
            at_ms: 1,
            fail_closed: false,
        };
        outbox.trip(h, "acme", &trip);
        outbox.close(h, "acme", 1, 2);
        assert_eq!(outbox.cells(), 0);
        assert!(outbox.take_trips().is_empty());
        assert!(outbox.take_closes().is_empty());
        assert!(outbox.sweep().executions.is_empty());
    }

    #[test]
    fn counts_of_a_hook_dropped_between_sweeps_are_still_swept_once() {
        let outbox = Outbox::default();
        outbox.activate();
        let first = set(&["a", "b"], 1, None);
        outbox.register(&first);
        first
            .get("tenant-acme/a")
            .unwrap()
            .counters
            .record(Outcome::Allow, 10);
        first
            .get("tenant-acme/b")
            .unwrap()
            .counters
            .record(Outcome::Block, 20);
        // b leaves the snapshot; a is reused (same version), c arrives.
        let second = set(&["a", "c"], 2, Some(&first));
        outbox.register(&second);
        drop(first);
        second
            .get("tenant-acme/a")
            .unwrap()
            .counters
            .record(Outcome::Allow, 30);
        assert_eq!(outbox.cells(), 3, "a once, b until swept, c");
        let mut swept = outbox.sweep().executions;
        swept.sort_by(|x, y| x.0.uid.cmp(&y.0.uid));
        let got: Vec<(&str, [u64; 5])> = swept
            .iter()
            .map(|(id, c)| (id.uid.as_str(), c.by_outcome))
            .collect();
        assert_eq!(
            got,
            [("uid-a", [2, 0, 0, 0, 0]), ("uid-b", [0, 1, 0, 0, 0])]
        );
        assert_eq!(outbox.cells(), 2, "b forgotten once its counts were taken");
        assert!(outbox.sweep().executions.is_empty());
    }

    #[test]
    fn a_trip_is_queued_with_the_hook_version_and_wakes_the_reporter() {
        let outbox = Outbox::default();
        outbox.activate();
        let s = set(&["a"], 1, None);
        outbox.register(&s);
        let h = s.get("tenant-acme/a").unwrap();
        let base = 1_767_225_600_000; // 2026-01-01T00:00:00Z
        let mut trip = None;
        for i in 0..FAULT_THRESHOLD as i64 {
            let at = base + i * 1000;
            let a = h.breaker.admit("globex", at);
            if let Transition::Tripped(t) = h
                .breaker
                .record("globex", a, Outcome::Timeout, at)
                .transition
            {
                trip = Some(t);
            }
        }
        outbox.trip(h, "globex", &trip.expect("five timeouts trip"));
        let trips = outbox.take_trips();
        assert_eq!(
            trips,
            vec![TripReport {
                uid: "uid-a".into(),
                namespace: "tenant-acme".into(),
                name: "a".into(),
                generation: 2,
                reset_token: Some("r1".into()),
                tenant: "globex".into(),
                tripped_at: "2026-01-01T00:00:04.000Z".into(),
                fail_closed: false,
                reason: "5 timeouts and 0 errors of the handler in a row within 4 s (threshold 5 faults within 60 s; answers, allow or block, never count)"
                    .into(),
            }]
        );
        // The notify stored a permit: the reporter's next wait returns at once.
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            tokio::time::timeout(
                std::time::Duration::from_millis(100),
                outbox.wake_trip.notified(),
            )
            .await
            .expect("woken");
        });
        // Another tenant's run of faults is its own observation.
        let a = h.breaker.admit("acme", base);
        h.breaker.record("acme", a, Outcome::Error, base);
        let mut obs = outbox.sweep().observations;
        obs.sort_by(|x, y| x.tenant.cmp(&y.tenant));
        assert_eq!(obs.len(), 2);
        assert_eq!(
            (
                obs[0].tenant.as_str(),
                obs[0].generation,
                obs[0].reset_token.as_deref()
            ),
            ("acme", 2, Some("r1"))
        );
        assert_eq!(obs[0].last_answer_at, None);
        assert_eq!(
            obs[0].run,
            vec![RunOutcome {
                at: "2026-01-01T00:00:00.000Z".into(),
                timeout: false
            }]
        );
        assert_eq!(obs[1].tenant, "globex");
        assert!(
            outbox.sweep().observations.is_empty(),
            "sent once per change"
        );
        // A probe that answers queues a close and wakes the breaker lane.
        let probe_at = base + 4000 + crate::breaker::HALF_OPEN_AFTER_MS;
        let a = h.breaker.admit("globex", probe_at);
        assert_eq!(
            h.breaker
                .record("globex", a, Outcome::Allow, probe_at)
                .transition,
            Transition::Closed { since: base + 4000 }
        );
        outbox.close(h, "globex", base + 4000, probe_at);
        assert_eq!(
            outbox.take_closes(),
            vec![CloseReport {
                uid: "uid-a".into(),
                namespace: "tenant-acme".into(),
                name: "a".into(),
                generation: 2,
                reset_token: Some("r1".into()),
                tenant: "globex".into(),
                opened_at: "2026-01-01T00:00:04.000Z".into(),
                closed_at: "2026-01-01T00:00:34.000Z".into(),
            }]
        );
    }
}
