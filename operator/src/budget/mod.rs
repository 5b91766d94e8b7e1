//! TenantHookBudget: the reconciler, the leader's ledger and
//! `POST /v1/budget/reserve`, `POST /v1/budget/settle` on the sync port (DESIGN
//! "TenantHookBudget", CONTRACT §5.5, issue 3 points 2 and 3).
//!
//! # The protocol
//!
//! Dispatchers hold no API-server credentials: before a costly call (a prompt hook's
//! bound: prompt estimate + max output tokens) a dispatcher **reserves** tokens of its
//! tenant's budget from the operator's leader, and after the call it **settles** the
//! real cost (`tokens: 0` releases a reservation whose call failed). The operator leader
//! is the single writer of budget status; reservations live in its memory only.
//!
//! - **Reserve** of `tokens` (1 to [`ledger::MAX_CALL_TOKENS`] = 1,048,576; more is `400`
//!   naming `tokens`) is granted iff `total - used - unwritten - reserved >= tokens`,
//!   decided under one lock, so concurrent reserves from any number of dispatchers never
//!   admit more than the budget holds (1,000 tokens, 40 × 100 → at most 10). `used`
//!   counts only in its own UTC month; `unwritten` is settled tokens not yet in
//!   `status.used`. A reservation expires after [`Settings::reservation_ttl`]
//!   ([`ledger::RESERVATION_TTL`], 120 s; a hook call lasts at most 10 s) and is then
//!   released. Refusals are `200` with `granted: false` and a reason:
//!   `BudgetExhausted`, `BudgetNotFound`, or `BudgetUnavailable` during the failover
//!   hold-off (below).
//! - **Settle** of a reservation this leader knows must come from the dispatcher that
//!   reserved it and name the same tenant; otherwise it is refused `409 {"error"}`
//!   naming the mismatch, and nothing is counted. Its tokens are capped at the tokens
//!   reserved (the reservation is the call's upper bound, CONTRACT §5.5): the excess is
//!   not counted, but logged and added to
//!   `agenthooks_budget_settle_overage_tokens_total{cap="reservation"}`. A settle of an
//!   id this leader does not know (reserved with a previous leader, or expired) counts
//!   its tokens capped at [`ledger::MAX_CALL_TOKENS`] (`cap="absolute"`), so `used` is
//!   the sum of settled costs within the bounds the calls had. An id known under
//!   another tenant's budget is a mismatch too.
//! - The settle removes the reservation and queues the tokens for the budget's writer,
//!   which takes every queued settle of the budget and makes one read-modify-write of
//!   `status.used` (group commit), under a resourceVersion precondition (409 → re-read,
//!   retry; [`commit`]). A settle is answered `200` only after its tokens are in
//!   `status.used`; so `used` is exactly the sum of acknowledged settles. From the
//!   moment it is queued until it is written, its tokens count against what the budget
//!   has available (`agenthooks_budget_unwritten_tokens`), however long the write
//!   takes: a failing write is retried in the background with backoff
//!   ([`writer`]) for as long as this replica leads, and a settle that waited
//!   [`Settings::settle_wait`] (30 s) is answered `503` while its tokens stay counted.
//!   A retried settle (same `reservationId`) joins the queued one or, once written, is
//!   answered `duplicate: true`: counted once either way. A settle landing in a new
//!   month resets `used` first.
//! - **Failover.** A new leader starts with an empty ledger and does not know the
//!   reservations the old one granted. So for [`Settings::hold_off`]
//!   ([`hold_off::FAILOVER_HOLD_OFF`], 12 s) after this replica starts leading it
//!   refuses every reserve with `BudgetUnavailable` (fail closed) while it accepts
//!   settles. A reservation is bounded in time by the hook call that made it (a hook's
//!   timeout is at most 10 s, the whole blocking chain at most 10 s, CONTRACT §4), and
//!   the old leader grants nothing once this one holds the Lease; so after the
//!   hold-off every call reserved with the old leader has ended, and its settle has
//!   arrived here (counted, as an unknown id) or is counted when it arrives. The "at
//!   most what the budget holds is admitted" rule thus holds across a failover (99,000
//!   reserved on the old leader of a 100,000 budget: the new leader grants nothing for
//!   12 s, then sees those 99,000 settled). Only a settle that reaches the new leader
//!   later than the hold-off (its dispatcher could not reach it for seconds after the
//!   call ended) is seen late: the reserves granted meanwhile can overshoot the total by
//!   at most those late settles' tokens. The first leader of a Lease (no one held it
//!   before; [`hold_off`]) skips the hold-off.
//!
//!   **Dispatchers:** a reserve refused `BudgetUnavailable` is a refusal like any
//!   other: the prompt hook asking does not call its model and, on a blocking event,
//!   blocks with that reason (CONTRACT §5.5 fails closed). So during the 12 s after a
//!   failover, prompt hooks that need a reservation block.
//!
//!   `used` stays exact: every acknowledged settle was persisted before its answer,
//!   and the resourceVersion precondition keeps an old leader still writing from
//!   overwriting the new one's writes. One case counts twice: a settle the old leader
//!   persisted but whose answer was lost, retried at the new leader (which never saw
//!   its id): an over-count, never an under-count. Settled tokens an old leader had
//!   not written when it lost leadership are dropped there; their settles were not
//!   acknowledged, so the dispatcher retries them at the new leader, which counts them.
//! - A replica that is not the synced leader (or has not listed the budgets yet) answers
//!   `503 {"error", "leader", "synced"}`; the dispatcher tries its next operator URL.
//!
//! # Parts
//!
//! - [`resolution`]: the tenant of a budget and the oldest-wins rule for duplicates (pure).
//! - [`ledger`]: books, reservations, caps, the hold-off and group-commit batches (pure).
//! - [`status`]: the status a budget should show and the transitions worth an Event (pure).
//! - [`commit`]: the optimistic-concurrency status write.
//! - [`writer`]: the per-budget group-commit loop and its retries.
//! - [`hold_off`]: the failover hold-off and when a first leader skips it.
//! - [`session`]: watches, the routing pass and the controller while this replica leads.
//! - [`reconcile`]: the reconciler (status, Events, requeue at the next UTC month).
//! - [`routes`]: the two endpoints.
//! - [`metrics`]: the `agenthooks_budget_*` metrics.
//!
//! The ledger is one `std` mutex over every budget; no lock is held across an `.await`
//! (every future touching it is spawned or served by axum, so it must be `Send`, which
//! a held `std::sync::MutexGuard` is not).

pub mod commit;
pub mod error;
pub mod hold_off;
pub mod ledger;
pub mod metrics;
pub mod reconcile;
pub mod resolution;
pub mod routes;
pub mod session;
pub mod status;
pub mod writer;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use agenthooks_crds::TenantHookBudget;
use agenthooks_crds::budget::period_of;
use axum::Router;
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::{Client, Resource};
use tokio_util::sync::CancellationToken;

use crate::shared::{Serving, Shared, lock};
use ledger::Ledger;
use metrics::BudgetMetrics;
use status::Notice;

/// How often expired reservations are released and the gauges refreshed, besides the
/// releases a reserve or settle makes on its own budget.
pub const SWEEP_INTERVAL: Duration = Duration::from_secs(10);
/// First pause before a failed settle write is retried (then doubling).
pub const WRITE_RETRY_FIRST: Duration = Duration::from_millis(200);
/// Longest pause between two attempts of a failed settle write.
pub const WRITE_RETRY_MAX: Duration = Duration::from_secs(5);

/// Timings of the budget machinery; [`Settings::default`] is what the operator runs
/// with (tests shorten them).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settings {
    /// How long a reservation holds its tokens without a settle
    /// ([`ledger::RESERVATION_TTL`], 120 s).
    pub reservation_ttl: Duration,
    /// How long a new leader refuses reserves ([`hold_off::FAILOVER_HOLD_OFF`], 12 s).
    pub hold_off: Duration,
    /// How long a settle waits for its write before answering 503
    /// ([`routes::SETTLE_WAIT`], 30 s).
    pub settle_wait: Duration,
    /// First pause before a failed settle write is retried ([`WRITE_RETRY_FIRST`]).
    pub write_retry_first: Duration,
    /// Longest pause between attempts ([`WRITE_RETRY_MAX`]).
    pub write_retry_max: Duration,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            reservation_ttl: ledger::RESERVATION_TTL,
            hold_off: hold_off::FAILOVER_HOLD_OFF,
            settle_wait: routes::SETTLE_WAIT,
            write_retry_first: WRITE_RETRY_FIRST,
            write_retry_max: WRITE_RETRY_MAX,
        }
    }
}

/// Everything the budget routes, writers and sessions share.
pub struct Budgets {
    /// The operator's shared state (leadership, settings, metrics registry).
    pub shared: Arc<Shared>,
    /// API client.
    pub client: Client,
    /// The ledger; a `std` mutex, never held across an `.await`.
    pub ledger: Mutex<Ledger>,
    /// `agenthooks_budget_*`.
    pub metrics: BudgetMetrics,
    /// Events on budgets.
    pub recorder: Recorder,
    /// Timings.
    pub settings: Settings,
    /// When this budget machinery started, Unix microseconds (the hold-off's "first
    /// leader" test).
    pub started_micros: i64,
    /// Set once a leader session has started in this process.
    led_before: AtomicBool,
    /// Set once the current leader session has listed the budgets and namespaces and
    /// installed the accepted budgets in the ledger.
    synced: AtomicBool,
}

impl std::fmt::Debug for Budgets {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Budgets")
            .field("synced", &self.synced)
            .finish_non_exhaustive()
    }
}

impl Budgets {
    /// The budget state with `settings`, its metrics registered on
    /// `shared.metrics.registry` (a failed registration is logged; the metrics still
    /// count).
    pub fn new(shared: Arc<Shared>, client: Client, settings: Settings) -> Arc<Budgets> {
        let metrics = match BudgetMetrics::new() {
            Ok(m) => m,
            Err(e) => panic!("budget metric definitions are static and valid: {e}"),
        };
        if let Err(e) = metrics.register(&shared.metrics.registry) {
            tracing::error!(error = %e, "registering the budget metrics failed");
        }
        let recorder = Recorder::new(
            client.clone(),
            Reporter {
                controller: crate::FIELD_MANAGER.into(),
                instance: Some(shared.config.lease.identity.clone()),
            },
        );
        Arc::new(Budgets {
            shared,
            client,
            ledger: Mutex::new(Ledger::with_ttl(settings.reservation_ttl)),
            metrics,
            recorder,
            settings,
            started_micros: chrono::Utc::now().timestamp_micros(),
            led_before: AtomicBool::new(false),
            synced: AtomicBool::new(false),
        })
    }

    /// Leadership as the endpoints see it: `leader`, and `synced` = the operator's
    /// initial sync and the budgets' both done.
    pub fn serving(&self) -> Serving {
        let s = self.shared.serving();
        Serving {
            leader: s.leader,
            synced: s.synced && self.synced.load(Ordering::Acquire),
        }
    }

    /// Records that a leader session starts; returns whether one had started before in
    /// this process.
    pub fn start_leading(&self) -> bool {
        self.led_before.swap(true, Ordering::AcqRel)
    }

    /// Records whether the budgets are listed and installed.
    pub fn set_synced(&self, synced: bool) {
        self.synced.store(synced, Ordering::Release);
    }

    /// Refreshes the gauges from the ledger.
    pub fn refresh_gauges(&self) {
        let figures = lock(&self.ledger).figures(&period_of(chrono::Utc::now()));
        self.metrics.set_all(&figures);
    }

    /// Refreshes the gauges of `tenant`.
    pub fn refresh_tenant(&self, tenant: &str) {
        if let Some(f) = lock(&self.ledger).figures_of(tenant, &period_of(chrono::Utc::now())) {
            self.metrics.set(&f);
        }
    }

    /// Publishes `notices` as Events on `budget` (failures are logged, never fatal).
    pub async fn publish(&self, budget: &TenantHookBudget, notices: Vec<Notice>, action: &str) {
        let reference = budget.object_ref(&());
        for n in notices {
            let mut note = n.note;
            if note.len() > 1000 {
                let mut cut = 1000;
                while !note.is_char_boundary(cut) {
                    cut -= 1;
                }
                note.truncate(cut);
            }
            tracing::info!(budget = %format!("{}/{}", reference.namespace.as_deref().unwrap_or(""), reference.name.as_deref().unwrap_or("")), reason = %n.reason, note = %note, "budget event");
            let event = Event {
                type_: if n.warning {
                    EventType::Warning
                } else {
                    EventType::Normal
                },
                reason: n.reason,
                note: Some(note),
                action: action.to_string(),
                secondary: None,
            };
            if let Err(e) = self.recorder.publish(&event, &reference).await {
                tracing::warn!(error = %e, "publishing a budget Event failed");
            }
        }
    }
}

/// Starts the budget machinery with the default [`Settings`] — a reconciler session for
/// each period this replica leads, and the reservation sweeper — and returns the routes
/// `POST /v1/budget/reserve` and `POST /v1/budget/settle` ([`routes`]).
pub fn start(shared: Arc<Shared>, client: Client, cancel: CancellationToken) -> Router {
    start_with(shared, client, cancel, Settings::default())
}

/// [`start`] with `settings`.
pub fn start_with(
    shared: Arc<Shared>,
    client: Client,
    cancel: CancellationToken,
    settings: Settings,
) -> Router {
    let budgets = Budgets::new(shared, client, settings);
    tokio::spawn(session::follow_leadership(budgets.clone(), cancel.clone()));
    tokio::spawn(sweep(budgets.clone(), cancel));
    routes::router(budgets)
}

/// Releases expired reservations and refreshes the gauges every [`SWEEP_INTERVAL`].
async fn sweep(budgets: Arc<Budgets>, cancel: CancellationToken) {
    let mut tick = tokio::time::interval(SWEEP_INTERVAL);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = cancel.cancelled() => return,
            _ = tick.tick() => {}
        }
        let expired = {
            let mut l = lock(&budgets.ledger);
            l.sweep(Instant::now());
            l.take_expired()
        };
        budgets.metrics.reservations_expired_total.inc_by(expired);
        if budgets.shared.serving().leader {
            budgets.refresh_gauges();
        }
    }
}
