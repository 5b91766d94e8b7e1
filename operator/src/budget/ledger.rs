//! The leader's in-memory ledger of every accepted budget: what is persisted (`used` of
//! the recorded period), what is settled but not yet persisted, and the reservations in
//! flight (CONTRACT §5.5; issue 3 point 3).
//!
//! A reservation of `n` tokens (`0 < n <=` [`MAX_CALL_TOKENS`]) is granted iff
//! `total - used - unpersisted - reserved >= n`, where `used` counts only when its
//! recorded period is the current UTC month (a new month starts at 0), and never during
//! the failover hold-off ([`Ledger::hold_off`]: refused `BudgetUnavailable`).
//! Reservations expire after the ledger's TTL ([`RESERVATION_TTL`] by default).
//!
//! A settle must come from the dispatcher that reserved (else
//! [`SettleOutcome::NotHolder`]) and name the tenant of the reservation (else
//! [`SettleOutcome::Mismatch`]); nothing is counted then (crds'
//! [`agenthooks_crds::rules::ledger::check_holder`]). The dispatcher of a request is its
//! authenticated identity (the routes refuse a body naming another). It removes the
//! reservation and queues its tokens, capped at the reserved tokens (the call's upper
//! bound) — or at [`MAX_CALL_TOKENS`] for an id this leader does not know — for the
//! budget's writer ([`Ledger::take_batch`] / [`Ledger::finish_batch`]), which persists
//! them in groups; the settle is answered once its group is written. Queued tokens count
//! against what is available (`unpersisted`) until they are written, however long the
//! write takes: a failing status write never frees them.
//!
//! The admission, cap, remaining and period rules are crds'
//! [`agenthooks_crds::rules::ledger`], which the standalone dispatcher's ledger applies
//! too (the tests run crds' case table through this ledger).
//!
//! Pure (no I/O, no clock of its own: every call takes `now`); the caller holds it in a
//! `std::sync::Mutex` and never across an `.await`.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};

use agenthooks_crds::TenantHookBudget;
use agenthooks_crds::budget::BudgetState;
use agenthooks_crds::report::{
    REASON_BUDGET_EXHAUSTED, REASON_BUDGET_NOT_FOUND, REASON_BUDGET_UNAVAILABLE, ReserveRequest,
    SettleRequest, SettleResponse,
};
use agenthooks_crds::rules::ledger::{self as rule, Admission, Charge};
use tokio::sync::oneshot;

use super::resolution::BudgetKey;

/// How long a reservation holds its tokens without a settle, by default (longer than
/// any hook call: a hook's timeout is at most 10 s, CONTRACT §4).
pub const RESERVATION_TTL: Duration = Duration::from_secs(120);
/// How long a settled reservation id is remembered, so a retried settle is answered
/// `duplicate` instead of counted twice.
pub const SETTLED_MEMORY: Duration = Duration::from_secs(15 * 60);
/// Most settled ids remembered per budget (the oldest are forgotten first).
pub const MAX_SETTLED_REMEMBERED: usize = 100_000;
/// Most reservations in flight per budget; past it a reserve is answered 429.
pub const MAX_RESERVATIONS: usize = 10_000;
/// Which cap a settle met (crds' rule): the reservation, or [`MAX_CALL_TOKENS`] for an id
/// this leader does not know.
pub use agenthooks_crds::rules::ledger::Cap;
/// Most tokens one call may hold or count (crds' rule, 2^20 = 1,048,576): a reserve asking
/// for more is refused (400), and a settle of an id this leader does not know (reserved
/// with a previous leader, or expired) counts at most this much. A settle of a known
/// reservation counts at most what it reserved (CONTRACT §5.5: the reservation is the
/// call's bound, prompt estimate + max output tokens).
pub use agenthooks_crds::rules::ledger::MAX_CALL_TOKENS;

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

/// A settle queued for the writer: its tokens count (as `unpersisted`) until written.
#[derive(Debug)]
struct Pending {
    /// The tokens counted (after the cap).
    tokens: i64,
    /// Who settled.
    dispatcher: String,
    waiters: Vec<Waiter>,
    in_flight: bool,
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
    /// Settled ids and who settled them.
    settled: HashMap<String, String>,
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
            settled: HashMap::new(),
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
        rule::used_in(self.period.as_deref(), self.used, period)
    }

    fn view(&self, period: &str) -> View {
        let used = self.used_in(period);
        let remaining = rule::remaining(self.total, used);
        View {
            used,
            remaining,
            state: BudgetState::of(self.total, remaining),
        }
    }

    /// Tokens a new reservation may take (may be negative after an overspend).
    fn available(&self, period: &str) -> i64 {
        rule::available(
            self.total,
            self.used_in(period),
            self.unpersisted,
            self.reserved,
        )
    }

    /// Who reserved or settled `id` in this budget (in flight, queued or settled).
    fn owner_of(&self, id: &str) -> Option<&str> {
        self.reservations
            .get(id)
            .map(|r| r.dispatcher.as_str())
            .or_else(|| self.pending.get(id).map(|p| p.dispatcher.as_str()))
            .or_else(|| self.settled.get(id).map(String::as_str))
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

    fn remember_settled(&mut self, id: String, dispatcher: String, now: Instant) {
        if self.settled.insert(id.clone(), dispatcher).is_none() {
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
    /// Not held: `reason` is [`REASON_BUDGET_EXHAUSTED`], [`REASON_BUDGET_NOT_FOUND`] or
    /// [`REASON_BUDGET_UNAVAILABLE`] (the failover hold-off).
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
    /// Another dispatcher than the settle's holds the reservation (the message says
    /// which); nothing counted, the reservation still held for its holder.
    NotHolder(String),
    /// The settle names another tenant than the reservation it settles (the message
    /// says which); nothing counted.
    Mismatch(String),
    /// Not written yet: retry with the same id. The tokens stay counted while this
    /// leader keeps the budget (its writer retries the write); only a change of
    /// leadership (or of the budget) drops them, and the retry counts them again there.
    Failed(String),
}

/// A settle that claimed more than its cap ([`agenthooks_crds::rules::ledger::charge`]):
/// `counted` of `claimed` tokens counted; the overage goes to
/// `agenthooks_budget_settle_overage_tokens_total{cap}`.
pub type Capped = Charge;

/// What to do with a settle.
#[derive(Debug)]
pub enum SettleStep {
    /// Answer at once (a duplicate, a release, a settle of 0 tokens, a mismatch).
    Done(SettleOutcome),
    /// Wait for the writer; spawn one for `spawn_writer` when set.
    Wait {
        /// Receives the outcome once the group holding this settle is written.
        answer: oneshot::Receiver<SettleOutcome>,
        /// Set when no writer runs for this budget yet.
        spawn_writer: Option<BudgetKey>,
        /// Set when the settle carried more than its cap (the excess is not counted).
        capped: Option<Capped>,
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
    /// The budget is gone (404): its queued tokens have nothing to count against.
    Gone,
    /// The writer gave up because the batch's book is no longer this session's (the
    /// leadership changed, or the budget was deleted, refused or replaced).
    Abandoned(String),
}

/// A settle answer to deliver (outside the lock).
pub type Delivery = (oneshot::Sender<SettleOutcome>, SettleOutcome);

/// Per tenant, the persisted remaining and the tokens held (metrics).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TenantFigures {
    /// Tenant.
    pub tenant: String,
    /// Persisted remaining in the current period.
    pub remaining: i64,
    /// The monthly total (`spec.monthlyTokens`).
    pub total: i64,
    /// Tokens held by reservations in flight.
    pub reserved: i64,
    /// Tokens settled and counted, not yet written to `status.used`.
    pub unpersisted: i64,
}

/// Every accepted budget's book, and tenant → budget routes.
#[derive(Debug)]
pub struct Ledger {
    session: u64,
    books: HashMap<BudgetKey, Book>,
    routes: HashMap<String, BudgetKey>,
    expired: u64,
    ttl: Duration,
    hold_until: Option<Instant>,
}

impl Default for Ledger {
    fn default() -> Self {
        Ledger::with_ttl(RESERVATION_TTL)
    }
}

impl Ledger {
    /// An empty ledger whose reservations expire after [`RESERVATION_TTL`].
    pub fn new() -> Ledger {
        Ledger::default()
    }

    /// An empty ledger whose reservations expire after `ttl`.
    pub fn with_ttl(ttl: Duration) -> Ledger {
        Ledger {
            session: 0,
            books: HashMap::new(),
            routes: HashMap::new(),
            expired: 0,
            ttl,
            hold_until: None,
        }
    }

    /// Forgets everything (leadership starts or ends: reservations in flight are
    /// forgotten, settles waiting for a write are answered by their dropped channel) and
    /// ends any hold-off.
    pub fn clear(&mut self) {
        self.session += 1;
        self.books.clear();
        self.routes.clear();
        self.hold_until = None;
    }

    /// The current session (bumped by [`Ledger::clear`]).
    pub fn session(&self) -> u64 {
        self.session
    }

    /// Refuses every reserve with `BudgetUnavailable` until `until` (the failover
    /// hold-off: reservations a previous leader granted may still be in flight, and this
    /// ledger does not know them). Settles are not affected.
    pub fn hold_off(&mut self, until: Instant) {
        self.hold_until = Some(until);
    }

    /// Ends the hold-off of session `session` (no effect on a later session). Returns
    /// whether a hold-off was ended.
    pub fn end_hold_off(&mut self, session: u64) -> bool {
        session == self.session && self.hold_until.take().is_some()
    }

    /// How long the hold-off still lasts at `now` (`None`: not holding off).
    pub fn holding_off(&self, now: Instant) -> Option<Duration> {
        self.hold_until
            .filter(|t| *t > now)
            .map(|t| t.saturating_duration_since(now))
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

    /// Holds `req.tokens` (`1..=MAX_CALL_TOKENS`, checked by the caller) of the tenant's
    /// budget if what remains after every reservation in flight and every unpersisted
    /// settle covers it, and this ledger is not in its failover hold-off.
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
        if self.hold_until.is_some_and(|t| now < t) {
            return ReserveOutcome::Refused {
                reason: REASON_BUDGET_UNAVAILABLE,
                remaining: available.max(0),
                budget: Some(key.clone()),
            };
        }
        let remaining = match rule::admit(req.tokens, available) {
            Admission::Granted { remaining } => remaining,
            Admission::Exhausted { remaining } => {
                return ReserveOutcome::Refused {
                    reason: REASON_BUDGET_EXHAUSTED,
                    remaining,
                    budget: Some(key.clone()),
                };
            }
        };
        if book.reservations.len() >= MAX_RESERVATIONS {
            return ReserveOutcome::TooMany {
                budget: key.clone(),
            };
        }
        let id = uuid::Uuid::new_v4().simple().to_string();
        let expires = now + self.ttl;
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
            remaining,
            budget: key.clone(),
        }
    }

    /// Settles `req` (tokens >= 0, checked by the caller):
    /// - an id known to this ledger must be settled by the dispatcher that reserved it
    ///   and name its tenant; otherwise [`SettleOutcome::Mismatch`] and nothing changes;
    /// - an id settled before (or being written) is a duplicate: nothing is counted twice;
    /// - `tokens: 0` releases the reservation at once (nothing to write);
    /// - otherwise the reservation is removed and its tokens, capped at the reserved
    ///   tokens, queued for the budget's writer. An unknown id (reserved with a previous
    ///   leader, or expired) still counts its tokens, capped at [`MAX_CALL_TOKENS`], so
    ///   `used` is the sum of settled costs within the bounds the calls had.
    pub fn settle(&mut self, req: &SettleRequest, now: Instant, period: &str) -> SettleStep {
        let Some(key) = self.routes.get(&req.tenant).cloned() else {
            return SettleStep::Done(SettleOutcome::NotFound);
        };
        let id = &req.reservation_id;
        let known_here = match self.books.get_mut(&key) {
            Some(book) => {
                self.expired += book.expire(now);
                book.forget_settled(now);
                book.owner_of(id).map(str::to_string)
            }
            None => return SettleStep::Done(SettleOutcome::NotFound),
        };
        // (tenant, dispatcher) of the reservation: this budget's, or another's.
        let holder = match known_here {
            Some(owner) => Some((req.tenant.clone(), owner)),
            None => self
                .books
                .iter()
                .filter(|(k, _)| **k != key)
                .find_map(|(_, b)| b.owner_of(id).map(|d| (b.tenant.clone(), d.to_string()))),
        };
        let held = holder
            .as_ref()
            .map(|(tenant, dispatcher)| rule::Holder { dispatcher, tenant });
        match rule::check_holder(held, &req.dispatcher, &req.tenant) {
            Ok(()) => {}
            Err(e @ rule::NotHolder::OtherDispatcher { .. }) => {
                return SettleStep::Done(SettleOutcome::NotHolder(format!(
                    "reservationId: reservation {id} is {e}; nothing counted"
                )));
            }
            Err(e @ rule::NotHolder::OtherTenant { .. }) => {
                return SettleStep::Done(SettleOutcome::Mismatch(format!(
                    "reservation {id} was {e}; nothing counted"
                )));
            }
        }
        let Some(book) = self.books.get_mut(&key) else {
            return SettleStep::Done(SettleOutcome::NotFound);
        };
        if book.settled.contains_key(id) {
            return SettleStep::Done(SettleOutcome::Persisted(book.view(period).answer(true)));
        }
        let (tx, rx) = oneshot::channel();
        if let Some(p) = book.pending.get_mut(id) {
            // earlier attempts that gave up waiting leave closed channels behind
            p.waiters.retain(|(w, _)| !w.is_closed());
            p.waiters.push((tx, true));
            // (a writer always runs while anything is queued, unless one gave up)
            let spawn_writer = (!book.writing).then(|| {
                book.writing = true;
                key.clone()
            });
            return SettleStep::Wait {
                answer: rx,
                spawn_writer,
                capped: None,
            };
        }
        let reservation = book.reservations.remove(id);
        if let Some(r) = &reservation {
            book.reserved -= r.tokens;
        }
        if req.tokens == 0 {
            if reservation.is_some() {
                book.remember_settled(id.clone(), req.dispatcher.clone(), now);
            }
            return SettleStep::Done(SettleOutcome::Persisted(book.view(period).answer(false)));
        }
        let charge = rule::charge(req.tokens, reservation.as_ref().map(|r| r.tokens));
        let tokens = charge.counted;
        let capped = charge.is_capped().then_some(charge);
        book.pending.insert(
            id.clone(),
            Pending {
                tokens,
                dispatcher: req.dispatcher.clone(),
                waiters: vec![(tx, false)],
                in_flight: false,
            },
        );
        book.unpersisted = book.unpersisted.saturating_add(tokens);
        let spawn_writer = if book.writing {
            None
        } else {
            book.writing = true;
            Some(key.clone())
        };
        SettleStep::Wait {
            answer: rx,
            spawn_writer,
            capped,
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

    /// Whether `batch` still belongs to this ledger: same session, and its budget still
    /// installed with the same uid (else its writer gives up: [`BatchFailure::Abandoned`]).
    pub fn holds(&self, batch: &Batch) -> bool {
        batch.session == self.session
            && self
                .books
                .get(&batch.key)
                .is_some_and(|b| b.uid == batch.uid)
    }

    /// Ends a batch: on success its settles are remembered as settled and every waiter
    /// (duplicates that came meanwhile too) gets the written figures; when the budget is
    /// gone its tokens are dropped (nothing to count against) and the waiters told. An
    /// abandoned batch of a book still held (never, as the writer abandons only batches
    /// not [`held`](Ledger::holds)) goes back to the queue, still counted, for the next
    /// writer. Returns the answers to send.
    pub fn finish_batch(
        &mut self,
        batch: Batch,
        result: Result<&Observed, BatchFailure>,
        now: Instant,
    ) -> Vec<Delivery> {
        let outcome = match &result {
            Ok(written) => {
                let remaining = rule::remaining(written.total, written.used);
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
            Err(BatchFailure::Abandoned(e)) => SettleOutcome::Failed(e.clone()),
        };
        let mut waiters = batch.waiters;
        let same_book = batch.session == self.session;
        if let Some(book) = self
            .books
            .get_mut(&batch.key)
            .filter(|b| same_book && b.uid == batch.uid)
        {
            for id in &batch.ids {
                if matches!(result, Err(BatchFailure::Abandoned(_))) {
                    if let Some(p) = book.pending.get_mut(id) {
                        p.in_flight = false;
                        waiters.append(&mut p.waiters);
                    }
                    book.writing = false;
                    continue;
                }
                let Some(p) = book.pending.remove(id) else {
                    continue;
                };
                waiters.extend(p.waiters);
                book.unpersisted = book.unpersisted.saturating_sub(p.tokens);
                if result.is_ok() {
                    book.remember_settled(id.clone(), p.dispatcher, now);
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

    /// Per tenant, the persisted remaining in `period`, the tokens reserved and those
    /// settled but not yet written.
    pub fn figures(&self, period: &str) -> Vec<TenantFigures> {
        self.books.values().map(|b| figures(b, period)).collect()
    }

    /// The figures of the budget of `tenant` (metrics after a change).
    pub fn figures_of(&self, tenant: &str, period: &str) -> Option<TenantFigures> {
        let book = self.books.get(self.routes.get(tenant)?)?;
        Some(figures(book, period))
    }
}

fn figures(b: &Book, period: &str) -> TenantFigures {
    TenantFigures {
        tenant: b.tenant.clone(),
        remaining: b.view(period).remaining,
        total: b.total,
        reserved: b.reserved,
        unpersisted: b.unpersisted,
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
            ..
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
            ..
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
                    capped: None,
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
    fn settled_tokens_count_until_written_however_long_the_write_takes() {
        // F6: a write failing for longer than the reservation TTL must not free the
        // settled tokens (before: uncounted, the reservation held again until its TTL,
        // then granted again while status showed used 0)
        let t0 = Instant::now();
        let ttl = Duration::from_secs(2);
        let mut l = Ledger::with_ttl(ttl);
        l.sync(vec![observed("acme", 1000, 0, P, 10)]);
        let (id, _) = granted(&reserve(&mut l, 600, t0));
        let SettleStep::Wait {
            answer: rx,
            spawn_writer,
            ..
        } = l.settle(&settle_req(&id, 500), t0, P)
        else {
            panic!()
        };
        let key = spawn_writer.unwrap();
        let b = l.take_batch(&key, l.session(), None).unwrap();
        assert_eq!(b.tokens, 500);
        // the writer keeps failing; the settle gave up waiting (503)
        drop(rx);
        let later = t0 + ttl * 5;
        l.sweep(later);
        assert!(
            l.holds(&b),
            "the writer keeps retrying while it holds the batch"
        );
        assert_eq!(
            refused(&reserve(&mut l, 501, later)),
            ("BudgetExhausted", 500),
            "the 500 settled stay counted past the TTL"
        );
        assert_eq!(l.figures(P)[0].unpersisted, 500);
        assert_eq!(l.view("acme", P).unwrap().used, 0, "not written yet");
        // the dispatcher retries with the same id: it joins, nothing counted twice
        let SettleStep::Wait {
            answer: mut retry,
            spawn_writer: None,
            capped: None,
        } = l.settle(&settle_req(&id, 500), later, P)
        else {
            panic!("a retry joins the queued settle")
        };
        assert_eq!(l.figures(P)[0].unpersisted, 500, "counted once");
        // the write lands at last
        let w = write(&l, &b, 0, 11);
        for (tx, o) in l.finish_batch(b, Ok(&w), later) {
            let _ = tx.send(o);
        }
        match retry.try_recv().unwrap() {
            SettleOutcome::Persisted(r) => assert_eq!((r.used, r.duplicate), (500, true)),
            o => panic!("{o:?}"),
        }
        assert_eq!(l.figures(P)[0].unpersisted, 0);
        assert_eq!(granted(&reserve(&mut l, 500, later)).1, 0);
        assert!(matches!(
            l.settle(&settle_req(&id, 500), later, P),
            SettleStep::Done(SettleOutcome::Persisted(r)) if r.duplicate && r.used == 500
        ));
    }

    #[test]
    fn a_gone_budget_drops_its_queued_tokens_and_an_abandoned_batch_goes_back() {
        let now = Instant::now();
        let mut l = ledger(1000, 0);
        let (id, _) = granted(&reserve(&mut l, 300, now));
        let SettleStep::Wait {
            answer: mut rx,
            spawn_writer,
            ..
        } = l.settle(&settle_req(&id, 200), now, P)
        else {
            panic!()
        };
        let key = spawn_writer.unwrap();
        let b = l.take_batch(&key, l.session(), None).unwrap();
        for (tx, o) in l.finish_batch(b, Err(BatchFailure::Abandoned("x".into())), now) {
            tx.send(o).unwrap();
        }
        assert_eq!(rx.try_recv().unwrap(), SettleOutcome::Failed("x".into()));
        assert_eq!(
            refused(&reserve(&mut l, 801, now)).1,
            800,
            "still counted, queued for the next writer"
        );
        let SettleStep::Wait { spawn_writer, .. } = l.settle(&settle_req(&id, 200), now, P) else {
            panic!()
        };
        assert_eq!(spawn_writer, Some(key.clone()), "a new writer takes it");
        let b = l.take_batch(&key, l.session(), None).unwrap();
        assert_eq!(b.tokens, 200, "once");
        for (tx, o) in l.finish_batch(b, Err(BatchFailure::Gone), now) {
            assert_eq!(o, SettleOutcome::NotFound);
            let _ = tx.send(o);
        }
        assert_eq!(l.figures(P)[0].unpersisted, 0);
    }

    #[test]
    fn a_batch_of_a_cleared_or_replaced_book_is_no_longer_held() {
        let now = Instant::now();
        let mut l = ledger(1000, 0);
        let SettleStep::Wait { spawn_writer, .. } = l.settle(&settle_req("x", 5), now, P) else {
            panic!()
        };
        let key = spawn_writer.unwrap();
        let b = l.take_batch(&key, l.session(), None).unwrap();
        assert!(l.holds(&b));
        let mut replaced = observed("acme", 1000, 0, P, 12);
        replaced.uid = "uid-acme-2".into();
        l.sync(vec![replaced]);
        assert!(!l.holds(&b), "the budget was deleted and created again");
        let mut l = ledger(1000, 0);
        let SettleStep::Wait { spawn_writer, .. } = l.settle(&settle_req("x", 5), now, P) else {
            panic!()
        };
        let b = l
            .take_batch(&spawn_writer.unwrap(), l.session(), None)
            .unwrap();
        l.clear();
        l.sync(vec![observed("acme", 1000, 0, P, 10)]);
        assert!(!l.holds(&b), "leadership changed");
    }

    #[test]
    fn a_settle_counts_at_most_its_reservation_and_an_unknown_id_at_most_the_call_maximum() {
        let now = Instant::now();
        let mut l = ledger(10_000_000, 0);
        let (id, _) = granted(&reserve(&mut l, 300, now));
        let SettleStep::Wait {
            spawn_writer,
            capped,
            ..
        } = l.settle(&settle_req(&id, 1_000_000), now, P)
        else {
            panic!()
        };
        assert_eq!(
            capped,
            Some(Capped {
                claimed: 1_000_000,
                counted: 300,
                cap: Cap::Reservation
            })
        );
        let key = spawn_writer.unwrap();
        let b = l.take_batch(&key, l.session(), None).unwrap();
        assert_eq!(b.tokens, 300, "the reservation is the call's bound");
        let SettleStep::Wait { capped, .. } = l.settle(&settle_req("unknown", 9_000_000), now, P)
        else {
            panic!()
        };
        assert_eq!(
            capped,
            Some(Capped {
                claimed: 9_000_000,
                counted: MAX_CALL_TOKENS,
                cap: Cap::Absolute
            })
        );
        assert_eq!(capped.unwrap().overage(), 9_000_000 - 1_048_576);
        let SettleStep::Wait { capped: None, .. } = l.settle(&settle_req("unknown-2", 700), now, P)
        else {
            panic!("under the cap: counted in full")
        };
        let b2 = l.take_batch(&key, l.session(), Some("uid-acme")).unwrap();
        assert_eq!(b2.tokens, MAX_CALL_TOKENS + 700);
        let (id, _) = granted(&reserve(&mut l, 300, now));
        let SettleStep::Wait { capped: None, .. } = l.settle(&settle_req(&id, 300), now, P) else {
            panic!("exactly the reservation: no overage")
        };
    }

    #[test]
    fn a_settle_by_another_dispatcher_or_for_another_tenant_counts_nothing() {
        let now = Instant::now();
        let mut l = Ledger::new();
        l.sync(vec![
            observed("acme", 1000, 0, P, 10),
            observed("globex", 1000, 0, P, 10),
        ]);
        let (id, _) = granted(&reserve(&mut l, 400, now));
        let mut other = settle_req(&id, 400);
        other.dispatcher = "d2".into();
        match l.settle(&other, now, P) {
            SettleStep::Done(SettleOutcome::NotHolder(m)) => assert_eq!(
                m,
                format!(
                    "reservationId: reservation {id} is held by dispatcher d1, not d2; nothing counted"
                )
            ),
            o => panic!("{o:?}"),
        }
        let mut wrong_tenant = settle_req(&id, 400);
        wrong_tenant.tenant = "globex".into();
        match l.settle(&wrong_tenant, now, P) {
            SettleStep::Done(SettleOutcome::Mismatch(m)) => {
                assert!(m.contains("\"acme\"") && m.contains("\"globex\""), "{m}")
            }
            o => panic!("{o:?}"),
        }
        assert_eq!(
            l.figures_of("globex", P).unwrap().unpersisted,
            0,
            "nothing counted on the tenant named"
        );
        assert_eq!(
            refused(&reserve(&mut l, 601, now)).1,
            600,
            "the reservation is still held for its owner"
        );
        // its own dispatcher settles it; a later settle of it by another is refused too
        let SettleStep::Wait {
            answer: mut rx,
            spawn_writer,
            ..
        } = l.settle(&settle_req(&id, 100), now, P)
        else {
            panic!()
        };
        assert!(matches!(
            l.settle(&other, now, P),
            SettleStep::Done(SettleOutcome::NotHolder(_))
        ));
        let key = spawn_writer.unwrap();
        let b = l.take_batch(&key, l.session(), None).unwrap();
        let w = write(&l, &b, 0, 11);
        for (tx, o) in l.finish_batch(b, Ok(&w), now) {
            tx.send(o).unwrap();
        }
        assert!(matches!(rx.try_recv().unwrap(), SettleOutcome::Persisted(r) if r.used == 100));
        assert!(matches!(
            l.settle(&other, now, P),
            SettleStep::Done(SettleOutcome::NotHolder(_))
        ));
        assert!(matches!(
            l.settle(&wrong_tenant, now, P),
            SettleStep::Done(SettleOutcome::Mismatch(_))
        ));
        // a release by another dispatcher is refused as well
        let (id, _) = granted(&reserve(&mut l, 10, now));
        let mut release = settle_req(&id, 0);
        release.dispatcher = "d2".into();
        assert!(matches!(
            l.settle(&release, now, P),
            SettleStep::Done(SettleOutcome::NotHolder(_))
        ));
        // ... and so is another dispatcher naming another tenant (holder first)
        let mut both = settle_req(&id, 10);
        both.dispatcher = "d2".into();
        both.tenant = "globex".into();
        assert!(matches!(
            l.settle(&both, now, P),
            SettleStep::Done(SettleOutcome::NotHolder(_))
        ));
        // its holder still releases it
        assert!(matches!(
            l.settle(&settle_req(&id, 0), now, P),
            SettleStep::Done(SettleOutcome::Persisted(_))
        ));
    }

    #[test]
    fn the_hold_off_refuses_reserves_but_takes_settles_until_it_ends() {
        let t0 = Instant::now();
        let mut l = ledger(100_000, 0);
        l.hold_off(t0 + Duration::from_secs(12));
        let session = l.session();
        assert_eq!(
            refused(&reserve(&mut l, 1, t0)),
            ("BudgetUnavailable", 100_000)
        );
        assert_eq!(l.holding_off(t0), Some(Duration::from_secs(12)));
        // a call reserved with the old leader settles here: counted
        let SettleStep::Wait { .. } = l.settle(
            &settle_req("old-leader-id", 99_000),
            t0 + Duration::from_secs(3),
            P,
        ) else {
            panic!("settles are taken during the hold-off")
        };
        let just_before = t0 + Duration::from_millis(11_999);
        assert_eq!(
            refused(&reserve(&mut l, 1, just_before)).0,
            "BudgetUnavailable"
        );
        let after = t0 + Duration::from_secs(12);
        assert_eq!(l.holding_off(after), None);
        assert_eq!(
            refused(&reserve(&mut l, 99_000, after)),
            ("BudgetExhausted", 1000),
            "the old leader's call is counted: at most the budget is admitted"
        );
        assert_eq!(granted(&reserve(&mut l, 1000, after)).1, 0);
        // ending it early: only for its own session
        l.hold_off(after + Duration::from_secs(12));
        assert!(!l.end_hold_off(session + 1));
        assert!(l.holding_off(after).is_some());
        assert!(l.end_hold_off(session));
        assert_eq!(l.holding_off(after), None);
        l.hold_off(after + Duration::from_secs(12));
        l.clear();
        assert_eq!(
            l.holding_off(after),
            None,
            "a cleared ledger does not hold off"
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
            ..
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

    /// crds' case table (CONTRACT §5.5: one corpus every ledger answers alike) through this
    /// ledger: reserves and settles as the routes make them, each settle's group written
    /// at once as the writer writes it ([`super::super::status::with_spend`] on the batch's
    /// base, a new resource version) and answered from what was written.
    #[test]
    fn the_shared_budget_cases_give_the_same_answers_here() {
        use super::super::status::with_spend;
        use agenthooks_crds::budget::period_of;
        use agenthooks_crds::rules::ledger::cases::{CASES, Reserved, Step};
        let at = |t: &str| {
            chrono::DateTime::parse_from_rfc3339(t)
                .unwrap()
                .with_timezone(&chrono::Utc)
        };
        for case in CASES {
            let mut now = at(case.start);
            let mut l = Ledger::new();
            l.sync(vec![observed(
                "acme",
                case.total,
                case.used,
                case.recorded_period,
                10,
            )]);
            let mut grants: Vec<String> = Vec::new();
            let mut rv = 10;
            for (i, step) in case.steps.iter().enumerate() {
                let what = format!("{}: step {i}", case.name);
                let period = period_of(now);
                match *step {
                    Step::At(t) => now = at(t),
                    Step::Reserve { tokens, expect } => {
                        let got = match l.reserve(
                            &ReserveRequest {
                                dispatcher: "d1".into(),
                                tenant: "acme".into(),
                                tokens,
                                hook: None,
                            },
                            Instant::now(),
                            &period,
                        ) {
                            ReserveOutcome::Granted {
                                reservation_id,
                                remaining,
                                ..
                            } => {
                                grants.push(reservation_id);
                                Reserved::Granted { remaining }
                            }
                            ReserveOutcome::Refused {
                                reason: REASON_BUDGET_EXHAUSTED,
                                remaining,
                                ..
                            } => Reserved::Exhausted { remaining },
                            other => panic!("{what}: {other:?}"),
                        };
                        assert_eq!(got, expect, "{what}");
                    }
                    Step::Settle {
                        grant,
                        tokens,
                        expect,
                    } => {
                        let req = settle_req(&grants[grant], tokens);
                        let answer = match l.settle(&req, Instant::now(), &period) {
                            SettleStep::Done(o) => o,
                            SettleStep::Wait {
                                mut answer,
                                spawn_writer,
                                ..
                            } => {
                                let key = spawn_writer.expect("one writer per group");
                                let batch = l.take_batch(&key, l.session(), None).unwrap();
                                let mut b = (*batch.base).clone();
                                b.status = Some(with_spend(&b, batch.tokens, now));
                                rv += 1;
                                b.metadata.resource_version = Some(rv.to_string());
                                let written = Observed::of(Arc::new(b), "acme").unwrap();
                                for (tx, o) in l.finish_batch(batch, Ok(&written), Instant::now()) {
                                    tx.send(o).unwrap();
                                }
                                assert!(
                                    l.take_batch(&key, l.session(), None).is_none(),
                                    "the writer stops"
                                );
                                answer.try_recv().unwrap()
                            }
                        };
                        let SettleOutcome::Persisted(r) = answer else {
                            panic!("{what}: {answer:?}")
                        };
                        assert_eq!(
                            (r.used, r.remaining, r.state.as_str()),
                            (expect.used, expect.remaining, expect.state.as_str()),
                            "{what}"
                        );
                    }
                }
            }
        }
    }
}
