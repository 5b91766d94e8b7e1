//! The leader's in-memory ledger of every accepted budget: what is persisted (`used` of
//! the recorded period), what is settled but not yet persisted, and the reservations in
//! flight (CONTRACT §5.5; issue 3 point 3).
//!
//! A reservation of `n` tokens is granted iff
//! `total - used - unpersisted - reserved >= n`, where `used` counts only when its
//! recorded period is the current UTC month (a new month starts at 0). Reservations
//! expire after [`RESERVATION_TTL`]. A settle removes its reservation and queues its
//! tokens for the budget's writer ([`Ledger::take_batch`] / [`Ledger::finish_batch`]),
//! which persists them in groups; the settle is answered once its group is written.
//!
//! Pure (no I/O, no clock of its own: every call takes `now`); the caller holds it in a
//! `std::sync::Mutex` and never across an `.await`.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};

use agenthooks_crds::TenantHookBudget;
use agenthooks_crds::budget::BudgetState;
use agenthooks_crds::report::{
    REASON_BUDGET_EXHAUSTED, REASON_BUDGET_NOT_FOUND, ReserveRequest, SettleRequest, SettleResponse,
};
use tokio::sync::oneshot;

use super::resolution::BudgetKey;

/// How long a reservation holds its tokens without a settle (longer than any hook call:
/// a hook's timeout is at most 10 s, CONTRACT §1).
pub const RESERVATION_TTL: Duration = Duration::from_secs(120);
/// How long a settled reservation id is remembered, so a retried settle is answered
/// `duplicate` instead of counted twice.
pub const SETTLED_MEMORY: Duration = Duration::from_secs(15 * 60);
/// Most settled ids remembered per budget (the oldest are forgotten first).
pub const MAX_SETTLED_REMEMBERED: usize = 100_000;
/// Most reservations in flight per budget; past it a reserve is answered 429.
pub const MAX_RESERVATIONS: usize = 10_000;

/// A budget as observed from the API server (watch) or as written by us.
#[derive(Debug, Clone)]
pub struct Observed {
    /// `namespace/name`.
    pub key: BudgetKey,
    /// `metadata.uid`.
    pub uid: String,
    /// The tenant it caps (its accepted verdict).
    pub tenant: String,
    /// `spec.monthlyTokens`.
    pub total: i64,
    /// `status.used`, as recorded for `period`.
    pub used: i64,
    /// `status.period` (`YYYY-MM`), `None` before the first status.
    pub period: Option<String>,
    /// `metadata.resourceVersion`.
    pub resource_version: Option<String>,
    /// The object itself (the writer's first base for a read-modify-write).
    pub object: Arc<TenantHookBudget>,
}

impl Observed {
    /// The facts of `budget` accepted for `tenant`; `None` without name, namespace or uid.
    pub fn of(budget: Arc<TenantHookBudget>, tenant: &str) -> Option<Observed> {
        let meta = &budget.metadata;
        let status = budget.status.as_ref();
        Some(Observed {
            key: BudgetKey::new(meta.namespace.clone()?, meta.name.clone()?),
            uid: meta.uid.clone()?,
            tenant: tenant.to_string(),
            total: budget.spec.monthly_tokens,
            used: status.map_or(0, |s| s.used),
            period: status.and_then(|s| s.period.clone()),
            resource_version: meta.resource_version.clone(),
            object: budget,
        })
    }
}

/// Whether resource version `seen` is newer than `known`. Resource versions compare as
/// integers (etcd revisions, as every API server backed by etcd serves them); two that do
/// not parse count as newer when they differ.
pub fn newer(seen: Option<&str>, known: Option<&str>) -> bool {
    match (seen, known) {
        (_, None) => true,
        (None, Some(_)) => false,
        (Some(s), Some(k)) => match (s.parse::<u64>(), k.parse::<u64>()) {
            (Ok(s), Ok(k)) => s > k,
            _ => s != k,
        },
    }
}

/// The persisted figures of a budget in the current period.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct View {
    /// Used in the current period (0 when the recorded period is another month).
    pub used: i64,
    /// `max(0, total - used)`.
    pub remaining: i64,
    /// Its state.
    pub state: BudgetState,
}

impl View {
    /// A settle answer from these figures.
    pub fn answer(self, duplicate: bool) -> SettleResponse {
        SettleResponse {
            used: self.used,
            remaining: self.remaining,
            state: self.state.as_str().to_string(),
            duplicate,
        }
    }
}

#[derive(Debug, Clone)]
struct Reservation {
    tokens: i64,
    dispatcher: String,
    expires: Instant,
}

/// Who waits for a settle: its answer channel and whether it repeats an earlier settle.
type Waiter = (oneshot::Sender<SettleOutcome>, bool);

#[derive(Debug)]
struct Pending {
    tokens: i64,
    waiters: Vec<Waiter>,
    in_flight: bool,
    /// The reservation it settled, put back if the write fails.
    restore: Option<(String, Reservation)>,
}

#[derive(Debug)]
struct Book {
    uid: String,
    tenant: String,
    total: i64,
    used: i64,
    period: Option<String>,
    resource_version: Option<String>,
    base: Arc<TenantHookBudget>,
    reservations: HashMap<String, Reservation>,
    expiry: VecDeque<(Instant, String)>,
    reserved: i64,
    pending: HashMap<String, Pending>,
    unpersisted: i64,
    settled: HashSet<String>,
    settled_order: VecDeque<(Instant, String)>,
    writing: bool,
}

impl Book {
    fn new(o: Observed) -> Book {
        Book {
            uid: o.uid,
            tenant: o.tenant,
            total: o.total,
            used: o.used,
            period: o.period,
            resource_version: o.resource_version,
            base: o.object,
            reservations: HashMap::new(),
            expiry: VecDeque::new(),
            reserved: 0,
            pending: HashMap::new(),
            unpersisted: 0,
            settled: HashSet::new(),
            settled_order: VecDeque::new(),
            writing: false,
        }
    }

    /// Takes `o`'s persisted figures when `o` is newer than what the book knows (spec
    /// and tenant always).
    fn observe(&mut self, o: &Observed) {
        self.tenant.clone_from(&o.tenant);
        self.total = o.total;
        if newer(
            o.resource_version.as_deref(),
            self.resource_version.as_deref(),
        ) {
            self.used = o.used;
            self.period.clone_from(&o.period);
            self.resource_version.clone_from(&o.resource_version);
        }
    }

    fn used_in(&self, period: &str) -> i64 {
        if self.period.as_deref() == Some(period) {
            self.used.max(0)
        } else {
            0
        }
    }

    fn view(&self, period: &str) -> View {
        let used = self.used_in(period);
        let remaining = self.total.max(0).saturating_sub(used).max(0);
        View {
            used,
            remaining,
            state: BudgetState::of(self.total, remaining),
        }
    }

    /// Tokens a new reservation may take (may be negative after an overspend).
    fn available(&self, period: &str) -> i64 {
        self.total
            .saturating_sub(self.used_in(period))
            .saturating_sub(self.unpersisted)
            .saturating_sub(self.reserved)
    }

    /// Releases the reservations expired at `now`; returns how many.
    fn expire(&mut self, now: Instant) -> u64 {
        let mut n = 0;
        while let Some((at, _)) = self.expiry.front() {
            if *at > now {
                break;
            }
            let Some((at, id)) = self.expiry.pop_front() else {
                break;
            };
            if self.reservations.get(&id).is_some_and(|r| r.expires == at)
                && let Some(r) = self.reservations.remove(&id)
            {
                self.reserved -= r.tokens;
                n += 1;
                tracing::info!(tenant = %self.tenant, reservation = %id, dispatcher = %r.dispatcher, tokens = r.tokens, "budget reservation expired without a settle; released");
            }
        }
        n
    }

    fn remember_settled(&mut self, id: String, now: Instant) {
        if self.settled.insert(id.clone()) {
            self.settled_order.push_back((now, id));
        }
        while self.settled_order.len() > MAX_SETTLED_REMEMBERED {
            if let Some((_, old)) = self.settled_order.pop_front() {
                self.settled.remove(&old);
            }
        }
    }

    fn forget_settled(&mut self, now: Instant) {
        while let Some((at, _)) = self.settled_order.front() {
            if now.saturating_duration_since(*at) < SETTLED_MEMORY {
                break;
            }
            if let Some((_, old)) = self.settled_order.pop_front() {
                self.settled.remove(&old);
            }
        }
    }
}

/// The answer to a reserve.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReserveOutcome {
    /// Held: settle with `reservation_id`.
    Granted {
        /// Pass to settle.
        reservation_id: String,
        /// Tokens left after this and every other reservation in flight (>= 0).
        remaining: i64,
        /// The budget.
        budget: BudgetKey,
    },
    /// Not held: `reason` is [`REASON_BUDGET_EXHAUSTED`] or [`REASON_BUDGET_NOT_FOUND`].
    Refused {
        /// Why.
        reason: &'static str,
        /// Tokens left after the reservations in flight (>= 0).
        remaining: i64,
        /// The budget, when the tenant has one.
        budget: Option<BudgetKey>,
    },
    /// The budget already holds [`MAX_RESERVATIONS`] reservations.
    TooMany {
        /// The budget.
        budget: BudgetKey,
    },
}

/// How a settle ends for the one who asked.
#[derive(Debug, Clone, PartialEq)]
pub enum SettleOutcome {
    /// Written (or nothing to write): the budget's figures after it.
    Persisted(SettleResponse),
    /// The tenant has no accepted budget (or it was deleted before the write).
    NotFound,
    /// Not written (the tokens are not counted; the reservation, if any, is held again):
    /// retry.
    Failed(String),
}

/// What to do with a settle.
#[derive(Debug)]
pub enum SettleStep {
    /// Answer at once (a duplicate, a release, or a settle of 0 tokens).
    Done(SettleOutcome),
    /// Wait for the writer; spawn one for `spawn_writer` when set.
    Wait {
        /// Receives the outcome once the group holding this settle is written.
        answer: oneshot::Receiver<SettleOutcome>,
        /// Set when no writer runs for this budget yet.
        spawn_writer: Option<BudgetKey>,
    },
}

/// A group of settles of one budget for one status write.
#[derive(Debug)]
pub struct Batch {
    /// The budget.
    pub key: BudgetKey,
    /// Its uid when the batch was taken.
    pub uid: String,
    /// The tenant it caps.
    pub tenant: String,
    /// The ledger session the batch belongs to.
    pub session: u64,
    /// Sum of the settled tokens, to add to `status.used`.
    pub tokens: i64,
    /// What to patch first (the last object we wrote or saw installed).
    pub base: Arc<TenantHookBudget>,
    ids: Vec<String>,
    waiters: Vec<Waiter>,
}

impl Batch {
    /// Settles in the batch.
    pub fn len(&self) -> usize {
        self.ids.len()
    }

    /// Never true: a batch holds at least one settle.
    pub fn is_empty(&self) -> bool {
        self.ids.is_empty()
    }
}

/// Why a batch was not written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BatchFailure {
    /// The budget is gone (404).
    Gone,
    /// Anything else (conflicts past the retries, API errors, timeouts).
    Error(String),
}

/// A settle answer to deliver (outside the lock).
pub type Delivery = (oneshot::Sender<SettleOutcome>, SettleOutcome);

/// Per tenant, the persisted remaining and the tokens held by reservations (metrics).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TenantFigures {
    /// Tenant.
    pub tenant: String,
    /// Persisted remaining in the current period.
    pub remaining: i64,
    /// Tokens held by reservations in flight.
    pub reserved: i64,
}

/// Every accepted budget's book, and tenant → budget routes.
#[derive(Debug, Default)]
pub struct Ledger {
    session: u64,
    books: HashMap<BudgetKey, Book>,
    routes: HashMap<String, BudgetKey>,
    expired: u64,
}

impl Ledger {
    /// An empty ledger.
    pub fn new() -> Ledger {
        Ledger::default()
    }

    /// Forgets everything (leadership starts or ends: reservations in flight are
    /// forgotten, settles waiting for a write are answered by their dropped channel).
    pub fn clear(&mut self) {
        self.session += 1;
        self.books.clear();
        self.routes.clear();
    }

    /// The current session (bumped by [`Ledger::clear`]).
    pub fn session(&self) -> u64 {
        self.session
    }

    /// The budget of `tenant`.
    pub fn route(&self, tenant: &str) -> Option<&BudgetKey> {
        self.routes.get(tenant)
    }

    /// Installs exactly `winners` (each tenant's accepted budget): new ones get a book,
    /// known ones (same uid) take their spec and newer persisted figures, the others
    /// (deleted, refused, recreated) are dropped with their reservations.
    pub fn sync(&mut self, winners: Vec<Observed>) {
        let wanted: HashMap<&BudgetKey, &str> =
            winners.iter().map(|w| (&w.key, w.uid.as_str())).collect();
        self.books
            .retain(|k, b| wanted.get(k).is_some_and(|uid| *uid == b.uid));
        self.routes.clear();
        for w in winners {
            self.routes.insert(w.tenant.clone(), w.key.clone());
            match self.books.get_mut(&w.key) {
                Some(book) => book.observe(&w),
                None => {
                    self.books.insert(w.key.clone(), Book::new(w));
                }
            }
        }
    }

    /// Records a status we wrote (or read) outside a batch: newer persisted figures and
    /// the writer's next base.
    pub fn observe_write(&mut self, o: &Observed) {
        if let Some(book) = self.books.get_mut(&o.key).filter(|b| b.uid == o.uid)
            && newer(
                o.resource_version.as_deref(),
                book.resource_version.as_deref(),
            )
        {
            book.observe(o);
            book.base = o.object.clone();
        }
    }

    /// The persisted figures of the budget of `tenant` in `period`.
    pub fn view(&self, tenant: &str, period: &str) -> Option<View> {
        let key = self.routes.get(tenant)?;
        self.books.get(key).map(|b| b.view(period))
    }

    /// Holds `req.tokens` (> 0, checked by the caller) of the tenant's budget if what
    /// remains after every reservation in flight and every unpersisted settle covers it.
    pub fn reserve(&mut self, req: &ReserveRequest, now: Instant, period: &str) -> ReserveOutcome {
        let Some(key) = self.routes.get(&req.tenant) else {
            return ReserveOutcome::Refused {
                reason: REASON_BUDGET_NOT_FOUND,
                remaining: 0,
                budget: None,
            };
        };
        let Some(book) = self.books.get_mut(key) else {
            return ReserveOutcome::Refused {
                reason: REASON_BUDGET_NOT_FOUND,
                remaining: 0,
                budget: None,
            };
        };
        self.expired += book.expire(now);
        let available = book.available(period);
        if available < req.tokens {
            return ReserveOutcome::Refused {
                reason: REASON_BUDGET_EXHAUSTED,
                remaining: available.max(0),
                budget: Some(key.clone()),
            };
        }
        if book.reservations.len() >= MAX_RESERVATIONS {
            return ReserveOutcome::TooMany {
                budget: key.clone(),
            };
        }
        let id = uuid::Uuid::new_v4().simple().to_string();
        let expires = now + RESERVATION_TTL;
        book.reservations.insert(
            id.clone(),
            Reservation {
                tokens: req.tokens,
                dispatcher: req.dispatcher.clone(),
                expires,
            },
        );
        book.expiry.push_back((expires, id.clone()));
        book.reserved += req.tokens;
        ReserveOutcome::Granted {
            reservation_id: id,
            remaining: (available - req.tokens).max(0),
            budget: key.clone(),
        }
    }

    /// Settles `req` (tokens >= 0, checked by the caller):
    /// - an id settled before (or being written) is a duplicate: nothing is counted twice;
    /// - `tokens: 0` releases the reservation at once (nothing to write);
    /// - otherwise the reservation (if this leader knows it) is removed and the tokens
    ///   queued for the budget's writer. An unknown id (reserved with a previous leader,
    ///   or expired) still counts its tokens, so `used` is the sum of settled costs.
    pub fn settle(&mut self, req: &SettleRequest, now: Instant, period: &str) -> SettleStep {
        let Some(key) = self.routes.get(&req.tenant) else {
            return SettleStep::Done(SettleOutcome::NotFound);
        };
        let Some(book) = self.books.get_mut(key) else {
            return SettleStep::Done(SettleOutcome::NotFound);
        };
        self.expired += book.expire(now);
        book.forget_settled(now);
        let id = &req.reservation_id;
        if book.settled.contains(id) {
            return SettleStep::Done(SettleOutcome::Persisted(book.view(period).answer(true)));
        }
        let (tx, rx) = oneshot::channel();
        if let Some(p) = book.pending.get_mut(id) {
            p.waiters.push((tx, true));
            return SettleStep::Wait {
                answer: rx,
                spawn_writer: None,
            };
        }
        let reservation = book.reservations.remove(id);
        if let Some(r) = &reservation {
            book.reserved -= r.tokens;
        }
        if req.tokens == 0 {
            if reservation.is_some() {
                book.remember_settled(id.clone(), now);
            }
            return SettleStep::Done(SettleOutcome::Persisted(book.view(period).answer(false)));
        }
        book.pending.insert(
            id.clone(),
            Pending {
                tokens: req.tokens,
                waiters: vec![(tx, false)],
                in_flight: false,
                restore: reservation.map(|r| (id.clone(), r)),
            },
        );
        book.unpersisted = book.unpersisted.saturating_add(req.tokens);
        let spawn_writer = if book.writing {
            None
        } else {
            book.writing = true;
            Some(key.clone())
        };
        SettleStep::Wait {
            answer: rx,
            spawn_writer,
        }
    }

    /// Takes every queued settle of `key` for one write, for the writer of `session` and
    /// budget `uid` (`None` for the first batch). `None` when there is nothing to write
    /// (the writer stops), or the book is gone or belongs to another session or uid.
    pub fn take_batch(
        &mut self,
        key: &BudgetKey,
        session: u64,
        uid: Option<&str>,
    ) -> Option<Batch> {
        if session != self.session {
            return None;
        }
        let book = self.books.get_mut(key)?;
        if uid.is_some_and(|u| u != book.uid) {
            return None;
        }
        let mut ids = Vec::new();
        let mut tokens = 0i64;
        let mut waiters = Vec::new();
        for (id, p) in book.pending.iter_mut().filter(|(_, p)| !p.in_flight) {
            p.in_flight = true;
            ids.push(id.clone());
            tokens = tokens.saturating_add(p.tokens);
            waiters.append(&mut p.waiters);
        }
        if ids.is_empty() {
            book.writing = false;
            return None;
        }
        Some(Batch {
            key: key.clone(),
            uid: book.uid.clone(),
            tenant: book.tenant.clone(),
            session,
            tokens,
            base: book.base.clone(),
            ids,
            waiters,
        })
    }

    /// Ends a batch: on success its settles are remembered as settled and every waiter
    /// (duplicates that came meanwhile too) gets the written figures; on failure the
    /// tokens are uncounted, the reservations held again (unless expired) and every
    /// waiter told. Returns the answers to send.
    pub fn finish_batch(
        &mut self,
        batch: Batch,
        result: Result<&Observed, BatchFailure>,
        now: Instant,
    ) -> Vec<Delivery> {
        let outcome = match &result {
            Ok(written) => {
                let remaining = written.total.max(0).saturating_sub(written.used).max(0);
                SettleOutcome::Persisted(SettleResponse {
                    used: written.used,
                    remaining,
                    state: BudgetState::of(written.total, remaining)
                        .as_str()
                        .to_string(),
                    duplicate: false,
                })
            }
            Err(BatchFailure::Gone) => SettleOutcome::NotFound,
            Err(BatchFailure::Error(e)) => SettleOutcome::Failed(e.clone()),
        };
        let mut waiters = batch.waiters;
        let same_book = batch.session == self.session;
        if let Some(book) = self
            .books
            .get_mut(&batch.key)
            .filter(|b| same_book && b.uid == batch.uid)
        {
            for id in &batch.ids {
                let Some(p) = book.pending.remove(id) else {
                    continue;
                };
                waiters.extend(p.waiters);
                book.unpersisted = book.unpersisted.saturating_sub(p.tokens);
                match &result {
                    Ok(_) => book.remember_settled(id.clone(), now),
                    Err(_) => {
                        if let Some((rid, r)) = p.restore
                            && r.expires > now
                        {
                            book.reserved += r.tokens;
                            book.reservations.insert(rid, r);
                        }
                    }
                }
            }
            if let Ok(written) = &result
                && newer(
                    written.resource_version.as_deref(),
                    book.resource_version.as_deref(),
                )
            {
                book.observe(written);
                book.base = written.object.clone();
            }
        }
        waiters
            .into_iter()
            .map(|(tx, duplicate)| {
                let mut o = outcome.clone();
                if let SettleOutcome::Persisted(r) = &mut o {
                    r.duplicate = duplicate;
                }
                (tx, o)
            })
            .collect()
    }

    /// Releases expired reservations and forgets old settled ids in every book.
    pub fn sweep(&mut self, now: Instant) {
        for book in self.books.values_mut() {
            self.expired += book.expire(now);
            book.forget_settled(now);
        }
    }

    /// Reservations released by expiry since the last call.
    pub fn take_expired(&mut self) -> u64 {
        std::mem::take(&mut self.expired)
    }

    /// Per tenant, the persisted remaining in `period` and the tokens reserved.
    pub fn figures(&self, period: &str) -> Vec<TenantFigures> {
        self.books
            .values()
            .map(|b| TenantFigures {
                tenant: b.tenant.clone(),
                remaining: b.view(period).remaining,
                reserved: b.reserved,
            })
            .collect()
    }

    /// The figures of the budget of `tenant` (metrics after a change).
    pub fn figures_of(&self, tenant: &str, period: &str) -> Option<TenantFigures> {
        let book = self.books.get(self.routes.get(tenant)?)?;
        Some(TenantFigures {
            tenant: book.tenant.clone(),
            remaining: book.view(period).remaining,
            reserved: book.reserved,
        })
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use agenthooks_crds::TenantHookBudgetSpec;
    use agenthooks_crds::budget::TenantHookBudgetStatus;
    use std::sync::Mutex;

    const P: &str = "2026-11";

    pub(crate) fn observed(tenant: &str, total: i64, used: i64, period: &str, rv: u64) -> Observed {
        let mut b = TenantHookBudget::new(
            "b",
            TenantHookBudgetSpec {
                tenant: None,
                monthly_tokens: total,
            },
        );
        b.metadata.namespace = Some(format!("ns-{tenant}"));
        b.metadata.uid = Some(format!("uid-{tenant}"));
        b.metadata.resource_version = Some(rv.to_string());
        b.status = Some(TenantHookBudgetStatus {
            period: Some(period.into()),
            used,
            ..Default::default()
        });
        Observed::of(Arc::new(b), tenant).unwrap()
    }

    fn ledger(total: i64, used: i64) -> Ledger {
        let mut l = Ledger::new();
        l.sync(vec![observed("acme", total, used, P, 10)]);
        l
    }

    fn reserve(l: &mut Ledger, tokens: i64, now: Instant) -> ReserveOutcome {
        l.reserve(
            &ReserveRequest {
                dispatcher: "d1".into(),
                tenant: "acme".into(),
                tokens,
                hook: None,
            },
            now,
            P,
        )
    }

    fn settle_req(id: &str, tokens: i64) -> SettleRequest {
        SettleRequest {
            dispatcher: "d1".into(),
            tenant: "acme".into(),
            reservation_id: id.into(),
            tokens,
        }
    }

    fn granted(o: &ReserveOutcome) -> (String, i64) {
        match o {
            ReserveOutcome::Granted {
                reservation_id,
                remaining,
                ..
            } => (reservation_id.clone(), *remaining),
            other => panic!("expected a grant, got {other:?}"),
        }
    }

    fn refused(o: &ReserveOutcome) -> (&'static str, i64) {
        match o {
            ReserveOutcome::Refused {
                reason, remaining, ..
            } => (*reason, *remaining),
            other => panic!("expected a refusal, got {other:?}"),
        }
    }

    /// Writes a batch as the API server would: `used += tokens`, a new resource version.
    fn write(l: &Ledger, batch: &Batch, used_before: i64, rv: u64) -> Observed {
        let _ = l;
        observed("acme", 1000, used_before + batch.tokens, P, rv)
    }

    #[test]
    fn grant_and_refuse_at_the_exact_edges() {
        let now = Instant::now();
        let mut l = ledger(1000, 900);
        assert_eq!(
            refused(&reserve(&mut l, 101, now)),
            ("BudgetExhausted", 100)
        );
        let (_, remaining) = granted(&reserve(&mut l, 100, now));
        assert_eq!(remaining, 0, "exactly what remains is granted");
        assert_eq!(refused(&reserve(&mut l, 1, now)), ("BudgetExhausted", 0));

        let mut l = ledger(1000, 0);
        assert_eq!(granted(&reserve(&mut l, 1000, now)).1, 0);
        let mut l = ledger(1000, 1200);
        assert_eq!(
            refused(&reserve(&mut l, 1, now)),
            ("BudgetExhausted", 0),
            "an overspent budget shows 0, never below"
        );
        let mut l = ledger(0, 0);
        assert_eq!(refused(&reserve(&mut l, 1, now)).0, "BudgetExhausted");
    }

    #[test]
    fn a_tenant_without_budget_is_refused_fail_closed() {
        let mut l = ledger(1000, 0);
        let o = l.reserve(
            &ReserveRequest {
                dispatcher: "d".into(),
                tenant: "nobody".into(),
                tokens: 1,
                hook: None,
            },
            Instant::now(),
            P,
        );
        assert_eq!(
            o,
            ReserveOutcome::Refused {
                reason: "BudgetNotFound",
                remaining: 0,
                budget: None
            }
        );
        let mut req = settle_req("x", 5);
        req.tenant = "nobody".into();
        assert!(matches!(
            l.settle(&req, Instant::now(), P),
            SettleStep::Done(SettleOutcome::NotFound)
        ));
    }

    #[test]
    fn forty_reservations_of_100_on_1000_from_many_threads_grant_exactly_ten() {
        let l = Arc::new(Mutex::new(ledger(1000, 0)));
        let now = Instant::now();
        let handles: Vec<_> = (0..8)
            .map(|t| {
                let l = l.clone();
                std::thread::spawn(move || {
                    (0..5)
                        .map(|_| {
                            let req = ReserveRequest {
                                dispatcher: format!("d{}", t % 2),
                                tenant: "acme".into(),
                                tokens: 100,
                                hook: None,
                            };
                            let o = crate::shared::lock(&l).reserve(&req, now, P);
                            std::thread::yield_now();
                            o
                        })
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        let outcomes: Vec<ReserveOutcome> = handles
            .into_iter()
            .flat_map(|h| h.join().unwrap())
            .collect();
        assert_eq!(outcomes.len(), 40);
        let grants = outcomes
            .iter()
            .filter(|o| matches!(o, ReserveOutcome::Granted { .. }))
            .count();
        assert_eq!(grants, 10);
        for o in &outcomes {
            match o {
                ReserveOutcome::Granted { remaining, .. } => assert!(*remaining >= 0),
                ReserveOutcome::Refused {
                    reason, remaining, ..
                } => assert_eq!((*reason, *remaining), ("BudgetExhausted", 0)),
                other => panic!("{other:?}"),
            }
        }
        assert_eq!(
            crate::shared::lock(&l).figures(P)[0].reserved,
            1000,
            "the ten grants hold the whole budget"
        );
    }

    #[test]
    fn reservations_expire_after_the_ttl_and_are_released() {
        let t0 = Instant::now();
        let mut l = ledger(1000, 0);
        granted(&reserve(&mut l, 600, t0));
        let just_before = t0 + RESERVATION_TTL - Duration::from_millis(1);
        assert_eq!(refused(&reserve(&mut l, 500, just_before)).1, 400);
        assert_eq!(l.take_expired(), 0);
        let at = t0 + RESERVATION_TTL;
        let (_, remaining) = granted(&reserve(&mut l, 500, at));
        assert_eq!(remaining, 500, "the expired 600 were released");
        assert_eq!(l.take_expired(), 1);
        // the sweep releases idle budgets too
        l.sweep(at + RESERVATION_TTL);
        assert_eq!(l.take_expired(), 1);
        assert_eq!(l.figures(P)[0].reserved, 0);
    }

    #[test]
    fn settle_queues_for_one_writer_and_answers_after_the_write() {
        let now = Instant::now();
        let mut l = ledger(1000, 0);
        let (id, _) = granted(&reserve(&mut l, 100, now));
        let SettleStep::Wait {
            answer: mut rx,
            spawn_writer,
        } = l.settle(&settle_req(&id, 80), now, P)
        else {
            panic!("a settle waits for its write")
        };
        let key = spawn_writer.expect("the first settle starts the writer");
        assert_eq!(
            refused(&reserve(&mut l, 921, now)).1,
            920,
            "settled tokens count before they are written"
        );
        let session = l.session();
        let batch = l.take_batch(&key, session, None).unwrap();
        assert_eq!((batch.len(), batch.tokens), (1, 80));
        assert!(rx.try_recv().is_err(), "no answer before the write");
        let written = write(&l, &batch, 0, 11);
        let deliveries = l.finish_batch(batch, Ok(&written), now);
        for (tx, o) in deliveries {
            tx.send(o).unwrap();
        }
        assert_eq!(
            rx.try_recv().unwrap(),
            SettleOutcome::Persisted(SettleResponse {
                used: 80,
                remaining: 920,
                state: "Ok".into(),
                duplicate: false
            })
        );
        assert!(l.take_batch(&key, session, Some("uid-acme")).is_none());
        assert_eq!(l.view("acme", P).unwrap().used, 80);
        assert_eq!(granted(&reserve(&mut l, 920, now)).1, 0);
    }

    #[test]
    fn settles_during_a_write_form_the_next_group_and_duplicates_count_once() {
        let now = Instant::now();
        let mut l = ledger(1000, 0);
        let session = l.session();
        let ids: Vec<String> = (0..3)
            .map(|_| granted(&reserve(&mut l, 10, now)).0)
            .collect();
        let SettleStep::Wait {
            answer: mut first_rx,
            spawn_writer,
        } = l.settle(&settle_req(&ids[0], 10), now, P)
        else {
            panic!()
        };
        let key = spawn_writer.unwrap();
        let b1 = l.take_batch(&key, session, None).unwrap();
        // while b1 is written: two more settles, and a repeat of the first
        let mut second = Vec::new();
        for id in &ids[1..] {
            match l.settle(&settle_req(id, 10), now, P) {
                SettleStep::Wait {
                    answer,
                    spawn_writer: None,
                } => second.push(answer),
                other => panic!("one writer at a time: {other:?}"),
            }
        }
        let SettleStep::Wait {
            answer: mut dup_rx, ..
        } = l.settle(&settle_req(&ids[0], 10), now, P)
        else {
            panic!()
        };
        let w1 = write(&l, &b1, 0, 11);
        for (tx, o) in l.finish_batch(b1, Ok(&w1), now) {
            tx.send(o).unwrap();
        }
        match first_rx.try_recv().unwrap() {
            SettleOutcome::Persisted(r) => assert!(!r.duplicate && r.used == 10),
            o => panic!("{o:?}"),
        }
        match dup_rx.try_recv().unwrap() {
            SettleOutcome::Persisted(r) => assert!(r.duplicate && r.used == 10),
            o => panic!("{o:?}"),
        }
        let b2 = l.take_batch(&key, session, Some("uid-acme")).unwrap();
        assert_eq!((b2.len(), b2.tokens), (2, 20), "one group for both");
        let w2 = write(&l, &b2, 10, 12);
        for (tx, o) in l.finish_batch(b2, Ok(&w2), now) {
            tx.send(o).unwrap();
        }
        for mut rx in second {
            assert!(
                matches!(rx.try_recv().unwrap(), SettleOutcome::Persisted(r) if r.used == 30 && !r.duplicate)
            );
        }
        // a settle repeated after its write changes nothing
        match l.settle(&settle_req(&ids[1], 10), now, P) {
            SettleStep::Done(SettleOutcome::Persisted(r)) => {
                assert!(r.duplicate);
                assert_eq!(r.used, 30);
            }
            other => panic!("{other:?}"),
        }
        assert!(l.take_batch(&key, session, Some("uid-acme")).is_none());
    }

    #[test]
    fn an_unknown_id_still_counts_its_tokens() {
        let now = Instant::now();
        let mut l = ledger(1000, 100);
        let SettleStep::Wait { spawn_writer, .. } = l.settle(
            &settle_req("reserved-with-the-previous-leader", 250),
            now,
            P,
        ) else {
            panic!()
        };
        let b = l
            .take_batch(&spawn_writer.unwrap(), l.session(), None)
            .unwrap();
        assert_eq!(b.tokens, 250);
    }

    #[test]
    fn zero_tokens_release_at_once_without_a_write() {
        let now = Instant::now();
        let mut l = ledger(1000, 0);
        let (id, _) = granted(&reserve(&mut l, 1000, now));
        assert_eq!(refused(&reserve(&mut l, 1, now)).0, "BudgetExhausted");
        match l.settle(&settle_req(&id, 0), now, P) {
            SettleStep::Done(SettleOutcome::Persisted(r)) => {
                assert_eq!((r.used, r.remaining, r.duplicate), (0, 1000, false))
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(granted(&reserve(&mut l, 1000, now)).1, 0);
        assert!(matches!(
            l.settle(&settle_req(&id, 0), now, P),
            SettleStep::Done(SettleOutcome::Persisted(r)) if r.duplicate
        ));
    }

    #[test]
    fn a_failed_write_uncounts_and_holds_the_reservation_again() {
        let now = Instant::now();
        let mut l = ledger(1000, 0);
        let (id, _) = granted(&reserve(&mut l, 300, now));
        let SettleStep::Wait {
            answer: mut rx,
            spawn_writer,
        } = l.settle(&settle_req(&id, 200), now, P)
        else {
            panic!()
        };
        let key = spawn_writer.unwrap();
        let b = l.take_batch(&key, l.session(), None).unwrap();
        for (tx, o) in l.finish_batch(b, Err(BatchFailure::Error("409".into())), now) {
            tx.send(o).unwrap();
        }
        assert_eq!(rx.try_recv().unwrap(), SettleOutcome::Failed("409".into()));
        assert_eq!(
            refused(&reserve(&mut l, 701, now)).1,
            700,
            "the 300 are held again, the 200 not counted"
        );
        // the retry finds its reservation; the same writer (still running) takes it
        let SettleStep::Wait { spawn_writer, .. } = l.settle(&settle_req(&id, 200), now, P) else {
            panic!()
        };
        assert_eq!(spawn_writer, None, "the writer loops on to the next batch");
        let b = l.take_batch(&key, l.session(), Some("uid-acme")).unwrap();
        assert_eq!(b.tokens, 200);
        assert_eq!(
            refused(&reserve(&mut l, 801, now)).1,
            800,
            "the retried 200 count, the reservation is gone"
        );
    }

    #[test]
    fn a_new_utc_month_starts_from_zero_and_keeps_the_total() {
        let now = Instant::now();
        let mut l = Ledger::new();
        l.sync(vec![observed("acme", 1000, 1000, "2026-11", 10)]);
        assert_eq!(
            l.reserve(
                &ReserveRequest {
                    dispatcher: "d".into(),
                    tenant: "acme".into(),
                    tokens: 1,
                    hook: None
                },
                now,
                "2026-11"
            ),
            ReserveOutcome::Refused {
                reason: "BudgetExhausted",
                remaining: 0,
                budget: Some(BudgetKey::new("ns-acme", "b"))
            }
        );
        let v = l.view("acme", "2026-12").unwrap();
        assert_eq!((v.used, v.remaining, v.state), (0, 1000, BudgetState::Ok));
        let o = l.reserve(
            &ReserveRequest {
                dispatcher: "d".into(),
                tenant: "acme".into(),
                tokens: 1000,
                hook: None,
            },
            now,
            "2026-12",
        );
        assert_eq!(granted(&o).1, 0);
    }

    #[test]
    fn observations_move_figures_forward_only_and_sync_drops_losers() {
        let mut l = Ledger::new();
        l.sync(vec![observed("acme", 1000, 500, P, 20)]);
        l.sync(vec![observed("acme", 2000, 100, P, 19)]);
        let v = l.view("acme", P).unwrap();
        assert_eq!(
            (v.used, v.remaining),
            (500, 1500),
            "an older resourceVersion keeps used; the spec total always applies"
        );
        l.sync(vec![observed("acme", 2000, 600, P, 21)]);
        assert_eq!(l.view("acme", P).unwrap().used, 600);
        l.sync(vec![]);
        assert!(l.view("acme", P).is_none());
        assert!(l.route("acme").is_none());
    }

    #[test]
    fn a_cleared_ledger_ignores_the_old_session_writer() {
        let now = Instant::now();
        let mut l = ledger(1000, 0);
        let SettleStep::Wait {
            answer: mut rx,
            spawn_writer,
        } = l.settle(&settle_req("a", 10), now, P)
        else {
            panic!()
        };
        let key = spawn_writer.unwrap();
        let old = l.session();
        let b = l.take_batch(&key, old, None).unwrap();
        l.clear();
        l.sync(vec![observed("acme", 1000, 0, P, 10)]);
        let w = write(&l, &b, 0, 11);
        for (tx, o) in l.finish_batch(b, Ok(&w), now) {
            tx.send(o).unwrap();
        }
        assert!(
            matches!(rx.try_recv().unwrap(), SettleOutcome::Persisted(r) if r.used == 10),
            "what was written is acknowledged even after leadership changed"
        );
        assert!(
            l.take_batch(&key, old, None).is_none(),
            "the old writer stops"
        );
        assert_eq!(
            l.view("acme", P).unwrap().used,
            0,
            "the new session's book is left to its own observations"
        );
    }

    #[test]
    fn resource_versions_compare_as_numbers() {
        assert!(newer(Some("10"), Some("9")));
        assert!(!newer(Some("9"), Some("10")));
        assert!(!newer(Some("10"), Some("10")));
        assert!(newer(Some("x"), None));
        assert!(!newer(None, Some("1")));
        assert!(newer(Some("b"), Some("a")));
    }
}
