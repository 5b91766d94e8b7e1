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
//! - **Reserve** is granted iff `total - used - unsettled-but-unwritten - reserved >=
//!   tokens`, decided under one lock, so concurrent reserves from any number of
//!   dispatchers never admit more than the budget holds (1,000 tokens, 40 × 100 → at
//!   most 10). `used` counts only in its own UTC month. A reservation expires after
//!   [`ledger::RESERVATION_TTL`] (120 s; a hook call lasts at most 10 s) and is then
//!   released.
//! - **Settle** removes the reservation and queues the tokens for the budget's writer,
//!   which takes every queued settle of the budget and makes one read-modify-write of
//!   `status.used` (group commit), under a resourceVersion precondition (409 → re-read,
//!   retry; [`commit`]). A settle is answered `200` only after its tokens are in
//!   `status.used`; so `used` is exactly the sum of acknowledged settles. A retried
//!   settle (same `reservationId`) is answered `duplicate: true` and counted once; a
//!   settle of an id this leader does not know (reserved with a previous leader, or
//!   expired) still counts its tokens. A settle landing in a new month resets `used`
//!   first.
//! - **Failover.** A new leader starts with an empty ledger: the reservations in flight
//!   at the failover are forgotten, so the overspend past the total is bounded by the
//!   tokens those reservations held (their settles still count, as unknown ids). `used`
//!   stays exact: every acknowledged settle was persisted before its answer, and the
//!   resourceVersion precondition keeps an old leader still writing from overwriting the
//!   new one's writes. One case counts twice: a settle the old leader persisted but
//!   whose answer was lost, retried at the new leader (which never saw its id): an
//!   over-count, never an under-count.
//! - A replica that is not the synced leader (or has not listed the budgets yet) answers
//!   `503 {"error", "leader", "synced"}`; the dispatcher tries its next operator URL.
//!
//! # Parts
//!
//! - [`resolution`]: the tenant of a budget and the oldest-wins rule for duplicates (pure).
//! - [`ledger`]: books, reservations and group-commit batches (pure).
//! - [`status`]: the status a budget should show and the transitions worth an Event (pure).
//! - [`commit`]: the optimistic-concurrency status write.
//! - [`writer`]: the per-budget group-commit loop.
//! - [`session`]: watches, the routing pass and the controller while this replica leads.
//! - [`reconcile`]: the reconciler (status, Events, requeue at the next UTC month).
//! - [`routes`]: the two endpoints.
//! - [`metrics`]: the `agenthooks_budget_*` metrics.

pub mod commit;
pub mod error;
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
    /// The budget state, its metrics registered on `shared.metrics.registry` (a failed
    /// registration is logged; the metrics still count).
    pub fn new(shared: Arc<Shared>, client: Client) -> Arc<Budgets> {
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
            ledger: Mutex::new(Ledger::new()),
            metrics,
            recorder,
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

/// Starts the budget machinery — a reconciler session for each period this replica
/// leads, and the reservation sweeper — and returns the routes `POST /v1/budget/reserve`
/// and `POST /v1/budget/settle` ([`routes`]).
pub fn start(shared: Arc<Shared>, client: Client, cancel: CancellationToken) -> Router {
    let budgets = Budgets::new(shared, client);
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
