//! The circuit breakers of one hook version on one dispatcher, one per tenant (CONTRACT §6).
//!
//! The rule itself — what trips, what an open breaker answers, when it probes and what
//! closes it — is [`agenthooks_crds::rules::breaker`], shared with the operator's merged
//! window. This module keeps its state per tenant, follows what the operator's snapshot
//! says is open ([`Breaker::follow`]), and hands the reporter what changed
//! ([`Breaker::take_observations`]).
//!
//! Cost on the decision path: a hook no tenant has faulted on costs one atomic load per
//! [`Breaker::admit`] and per answered [`Breaker::record`]; the lock is taken only while
//! some tenant has a run of faults or an open breaker, and never across an await.
//!
//! Bounds: at most [`MAX_TENANTS`] tenants are tracked per hook version; past it the least
//! recently used entry goes. Forgetting a breaker only lets the handler run again (its
//! faults are still `error`/`timeout`), never turns a refusal into an `allow`.

use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};

use agenthooks_crds::rules::breaker::{Admission, FaultKind, RunClass, State, Transition};
use agenthooks_crds::snapshot::OpenBreaker;
use hashlink::LruCache;

use crate::decision::outcome::{ErrorKind, HandlerResult, Outcome};

pub use agenthooks_crds::rules::breaker::{
    FAULT_THRESHOLD, HALF_OPEN_AFTER_MS, REASON_CIRCUIT_OPEN, Trip, WINDOW_MS,
};

/// Most tenants whose breaker state is kept per hook version.
pub const MAX_TENANTS: usize = 4096;

/// How an outcome counts (CONTRACT §6.1): `allow`/`block` are the handler's answer,
/// `timeout`/`error` its faults.
pub fn class(outcome: Outcome) -> RunClass {
    match outcome {
        Outcome::Allow | Outcome::Block | Outcome::Ask => RunClass::Answer,
        Outcome::Timeout => RunClass::Fault(FaultKind::Timeout),
        Outcome::Error => RunClass::Fault(FaultKind::Error),
    }
}

/// How a finished run counts: as its outcome ([`class`]), except runs that say nothing of
/// the handler ([`RunClass::Cut`]): a timeout cut short by the chain budget
/// ([`ErrorKind::ChainBudget`]: another hook spent it) and a command runner that was busy
/// or unreachable ([`ErrorKind::RunnerUnavailable`]: the handler never started, and the
/// runner is shared by every tenant, so one tenant's load must not open another's breaker,
/// CONTRACT §6.3). Both still fail closed on the event.
pub fn class_of(result: &HandlerResult) -> RunClass {
    match (result.outcome, result.error_kind) {
        (Outcome::Timeout, Some(ErrorKind::ChainBudget))
        | (Outcome::Error, Some(ErrorKind::RunnerUnavailable)) => RunClass::Cut,
        (outcome, _) => class(outcome),
    }
}

impl From<Outcome> for RunClass {
    fn from(outcome: Outcome) -> Self {
        class(outcome)
    }
}

/// One tenant's breaker.
#[derive(Debug, Default)]
struct Entry {
    state: State,
    /// Changed since [`Breaker::take_observations`] last took it.
    dirty: bool,
}

/// What [`Breaker::record`] saw, for the caller to report.
#[derive(Debug, Clone, PartialEq)]
pub struct Recorded {
    /// What changed ([`Transition::None`] when nothing did).
    pub transition: Transition,
}

impl Recorded {
    /// Whether the operator's merged window should hear of the run soon.
    pub fn report_soon(&self) -> bool {
        !matches!(self.transition, Transition::None)
    }
}

/// This dispatcher's view of one tenant's run, for the operator's merged window: the
/// handler's last answer and the faults since, oldest first (ms since the Unix epoch).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Observation {
    pub tenant: String,
    pub last_answer_ms: Option<i64>,
    /// (when, was it a timeout).
    pub run: Vec<(i64, bool)>,
}

/// The breakers of one hook version, per tenant.
#[derive(Debug)]
pub struct Breaker {
    /// False while no tenant has an entry: the fast path.
    tracked: AtomicBool,
    tenants: Mutex<LruCache<String, Entry>>,
    /// The open breakers of the last snapshot followed.
    followed: Mutex<Vec<OpenBreaker>>,
}

impl Default for Breaker {
    fn default() -> Self {
        Breaker {
            tracked: AtomicBool::new(false),
            tenants: Mutex::new(LruCache::new(MAX_TENANTS)),
            followed: Mutex::new(Vec::new()),
        }
    }
}

impl Breaker {
    fn lock(&self) -> std::sync::MutexGuard<'_, LruCache<String, Entry>> {
        self.tenants.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// What an event of `tenant` at `now_ms` may do (CONTRACT §6.2, §6.4); hands out the
    /// probe slot when it answers [`Admission::Probe`].
    pub fn admit(&self, tenant: &str, now_ms: i64) -> Admission {
        if !self.tracked.load(Ordering::Acquire) {
            return Admission::Run;
        }
        match self.lock().get_mut(tenant) {
            Some(e) => e.state.admit(now_ms),
            None => Admission::Run,
        }
    }

    /// Whether `tenant`'s breaker is open (a probe in flight included).
    pub fn is_open(&self, tenant: &str) -> bool {
        self.tracked.load(Ordering::Acquire)
            && self.lock().peek(tenant).is_some_and(|e| e.state.is_open())
    }

    /// The tenants whose breaker is open on this dispatcher and since when (ms), sorted
    /// by tenant: what the console shows standalone.
    pub fn open_tenants(&self) -> Vec<(String, i64)> {
        if !self.tracked.load(Ordering::Acquire) {
            return Vec::new();
        }
        let mut open: Vec<(String, i64)> = self
            .lock()
            .iter()
            .filter_map(|(tenant, e)| match e.state {
                State::Open { since, .. } => Some((tenant.clone(), since)),
                State::Closed { .. } => None,
            })
            .collect();
        open.sort();
        open
    }

    /// Records a handler run of `tenant` admitted as `admission` that ended as `run` (an
    /// [`Outcome`], or the [`RunClass`] of [`class_of`]) at `now_ms`.
    pub fn record(
        &self,
        tenant: &str,
        admission: Admission,
        run: impl Into<RunClass>,
        now_ms: i64,
    ) -> Recorded {
        let class = run.into();
        if matches!(admission, Admission::Refuse { .. }) {
            return Recorded {
                transition: Transition::None,
            };
        }
        if matches!(class, RunClass::Answer | RunClass::Cut)
            && !self.tracked.load(Ordering::Acquire)
        {
            return Recorded {
                transition: Transition::None,
            };
        }
        let mut tenants = self.lock();
        let entry = match tenants.get_mut(tenant) {
            Some(e) => e,
            None if matches!(class, RunClass::Answer | RunClass::Cut) => {
                return Recorded {
                    transition: Transition::None,
                };
            }
            None => {
                tenants.insert(tenant.to_string(), Entry::default());
                self.tracked.store(true, Ordering::Release);
                tenants.get_mut(tenant).expect("just inserted")
            }
        };
        let transition = entry.state.record(admission, class, now_ms);
        if !matches!(transition, Transition::None) {
            entry.dirty = true;
        }
        Recorded { transition }
    }

    /// Follows the open breakers of a new snapshot of this hook version: a tenant newly
    /// listed opens here from its `since` (unless it opened here later); a tenant no longer
    /// listed closes here if it was open by that trip (a probe elsewhere answered, or the
    /// operator reset it).
    pub fn follow(&self, open: &[OpenBreaker]) {
        let mut followed = self.followed.lock().unwrap_or_else(|p| p.into_inner());
        if *followed == open {
            return;
        }
        let mut tenants = self.lock();
        for o in open {
            let known = followed
                .iter()
                .any(|f| f.tenant == o.tenant && f.since_ms == o.since_ms);
            if known {
                continue;
            }
            if tenants.get_mut(&o.tenant).is_none() {
                tenants.insert(o.tenant.clone(), Entry::default());
            }
            if let Some(e) = tenants.get_mut(&o.tenant) {
                e.state.open_from(o.since_ms, o.fail_closed);
            }
        }
        for f in followed.iter() {
            if open.iter().any(|o| o.tenant == f.tenant) {
                continue;
            }
            if let Some(e) = tenants.get_mut(&f.tenant) {
                e.state.close_if_opened_by(f.since_ms);
            }
        }
        if !tenants.is_empty() {
            self.tracked.store(true, Ordering::Release);
        }
        *followed = open.to_vec();
    }

    /// The runs that changed since the last call (which this call clears), one per tenant.
    pub fn take_observations(&self) -> Vec<Observation> {
        if !self.tracked.load(Ordering::Acquire) {
            return Vec::new();
        }
        let mut tenants = self.lock();
        let mut out = Vec::new();
        for (tenant, e) in tenants.iter_mut() {
            if !std::mem::take(&mut e.dirty) {
                continue;
            }
            let (last_answer_ms, run) = match &e.state {
                State::Closed {
                    faults,
                    last_answer,
                } => (
                    (*last_answer != 0).then_some(*last_answer),
                    faults
                        .iter()
                        .map(|(t, k)| (*t, *k == FaultKind::Timeout))
                        .collect(),
                ),
                State::Open { .. } => (None, Vec::new()),
            };
            out.push(Observation {
                tenant: tenant.clone(),
                last_answer_ms,
                run,
            });
        }
        out
    }
}

#[cfg(test)]
mod tests;
