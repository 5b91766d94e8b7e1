//! The budget reconciler runs only while this replica leads: [`follow_leadership`]
//! starts a [`run`] session each time `shared.serving` says leader and stops it as soon
//! as leadership is lost (the ledger is cleared both times: reservations are the
//! leader's memory only).
//!
//! Each session starts in the failover hold-off ([`super::hold_off`]): reserves are
//! refused `BudgetUnavailable` for [`super::Settings::hold_off`] unless this replica is
//! the Lease's first leader.
//!
//! A session:
//! - watches TenantHookBudgets (all namespaces; health in [`Watched::TenantHookBudgets`])
//!   and Namespaces (metadata: the tenant label) into stores, and resolves the tenant map
//!   ([`crate::tenants`], the same rule the hook reconciler uses) after every namespace
//!   change;
//! - runs the routing pass after every change of either (and each
//!   [`PASS_INTERVAL`]): resolves every budget ([`super::resolution`]), installs the
//!   accepted ones in the ledger, refreshes the gauges, and queues a reconcile for every
//!   budget whose status differs from what it should show (a duplicate that now wins, a
//!   relabelled namespace, a namespace that lost or won its tenant claim, a new
//!   month...). A budget in a namespace the map does not hold yet waits for the
//!   namespace watch. The first pass marks the budgets synced;
//!   the endpoints answer 503 before it;
//! - runs the kube-runtime `Controller` ([`super::reconcile`]) on spec changes
//!   (generation predicate: our own status writes trigger nothing) and on the pass's
//!   queue.

use std::sync::Arc;
use std::time::{Duration, Instant};

use agenthooks_crds::TenantHookBudget;
use agenthooks_crds::budget::period_of;
use agenthooks_crds::tenancy::TenantMap;
use futures::StreamExt;
use futures::channel::mpsc;
use k8s_openapi::api::core::v1::Namespace;
use kube::api::PartialObjectMeta;
use kube::runtime::controller::{self, Controller};
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{PredicateConfig, WatchStreamExt, predicates, watcher};
use kube::{Api, ResourceExt};
use tokio::sync::{Notify, watch};
use tokio_util::sync::CancellationToken;

use super::Budgets;
use super::error::BudgetError;
use super::hold_off;
use super::ledger::Observed;
use super::reconcile::{error_policy, reconcile};
use super::resolution::{BudgetFacts, BudgetKey, Verdict, resolve};
use super::status::needs_write;
use crate::shared::lock;
use crate::tenants;
use crate::watch_health::Watched;

/// Longest time between two routing passes (a pass also follows every change).
pub const PASS_INTERVAL: Duration = Duration::from_secs(60);
/// Budget reconciles running at once.
pub const CONCURRENCY: u16 = 4;

/// Runs a budget session while this replica leads, until `cancel`.
pub async fn follow_leadership(budgets: Arc<Budgets>, cancel: CancellationToken) {
    let mut serving = budgets.shared.serving.subscribe();
    loop {
        tokio::select! {
            _ = cancel.cancelled() => return,
            r = serving.wait_for(|s| s.leader) => if r.is_err() { return; },
        }
        let led_before = budgets.start_leading();
        let session = {
            let mut ledger = lock(&budgets.ledger);
            ledger.clear();
            ledger.hold_off(Instant::now() + budgets.settings.hold_off);
            ledger.session()
        };
        budgets.set_synced(false);
        tokio::spawn(hold_off::lift_if_first_leader(
            budgets.clone(),
            session,
            led_before,
        ));
        let session_cancel = cancel.child_token();
        let mut task = tokio::spawn(run(budgets.clone(), session_cancel.clone()));
        let ended_by_itself = tokio::select! {
            _ = cancel.cancelled() => false,
            _ = serving.wait_for(|s| !s.leader) => false,
            _ = &mut task => true,
        };
        session_cancel.cancel();
        budgets.set_synced(false);
        lock(&budgets.ledger).clear();
        budgets.metrics.set_all(&[]);
        if !ended_by_itself
            && tokio::time::timeout(Duration::from_secs(10), &mut task)
                .await
                .is_err()
        {
            tracing::warn!("budget session did not stop in time; aborting it");
            task.abort();
        }
        if cancel.is_cancelled() {
            return;
        }
        if ended_by_itself {
            tracing::error!("budget session ended unexpectedly; restarting it");
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
    }
}

/// What the reconciles of one session share.
pub struct SessionCtx {
    /// The budget state.
    pub budgets: Arc<Budgets>,
    /// Every budget.
    pub store: Store<TenantHookBudget>,
    /// Namespace metadata (tenant labels).
    pub namespaces: Store<PartialObjectMeta<Namespace>>,
    /// The tenant map resolved from `namespaces` after its last change.
    pub tenants: std::sync::Mutex<Arc<TenantMap>>,
    /// Set once the budget watch finished its first list.
    pub budgets_listed: watch::Sender<bool>,
    /// Set once the namespace watch finished its first list.
    pub namespaces_listed: watch::Sender<bool>,
}

impl SessionCtx {
    /// Waits until both watches have listed (their stores are complete).
    ///
    /// Errors: [`BudgetError::StoreGone`] when the session ends meanwhile.
    pub async fn listed(&self) -> Result<(), BudgetError> {
        for listed in [&self.budgets_listed, &self.namespaces_listed] {
            listed
                .subscribe()
                .wait_for(|l| *l)
                .await
                .map_err(|_| BudgetError::StoreGone)?;
        }
        Ok(())
    }

    /// Resolves the tenant map from the namespace store (after a change of it).
    pub fn refresh_tenants(&self) {
        let state = self.namespaces.state();
        let map = tenants::resolve(
            state.iter().map(|m| m.as_ref()),
            &self.budgets.shared.config.master_namespace,
        );
        *lock(&self.tenants) = Arc::new(map);
    }

    /// Every budget in the store (being deleted ones, and those in a namespace the tenant
    /// map does not hold yet, left out) with its verdict.
    pub fn resolve(&self) -> Vec<(Arc<TenantHookBudget>, Verdict)> {
        let map = lock(&self.tenants).clone();
        let budgets: Vec<Arc<TenantHookBudget>> = self
            .store
            .state()
            .into_iter()
            .filter(|b| b.metadata.deletion_timestamp.is_none())
            .collect();
        let facts: Vec<BudgetFacts> = budgets
            .iter()
            .filter_map(|b| {
                let ns = b.namespace()?;
                let namespace_tenant = match map.tenant_of(&ns) {
                    Ok(Some(t)) => Ok(t.to_string()),
                    Ok(None) => return None,
                    Err(conflict) => Err(conflict),
                };
                Some(BudgetFacts {
                    key: BudgetKey::new(ns.clone(), b.name_any()),
                    created: b
                        .metadata
                        .creation_timestamp
                        .as_ref()
                        .map(|t| t.0.as_second()),
                    spec_tenant: b.spec.tenant.clone(),
                    namespace_tenant,
                })
            })
            .collect();
        let mut verdicts = resolve(&facts, &self.budgets.shared.config.master_namespace);
        budgets
            .into_iter()
            .filter_map(|b| {
                let key = BudgetKey::new(b.namespace()?, b.name_any());
                let v = verdicts.remove(&key)?;
                Some((b, v))
            })
            .collect()
    }

    /// The verdict of the budget `key` now (`None`: not in the store).
    pub fn verdict_of(&self, key: &BudgetKey) -> Option<Verdict> {
        self.resolve().into_iter().find_map(|(b, v)| {
            (b.namespace().as_deref() == Some(key.namespace.as_str()) && b.name_any() == key.name)
                .then_some(v)
        })
    }
}

/// One leader session, until `cancel`.
pub async fn run(budgets: Arc<Budgets>, cancel: CancellationToken) {
    tracing::info!("budget session starting");
    let client = budgets.client.clone();
    let shared = budgets.shared.clone();
    let config = watcher::Config::default().timeout(shared.config.watch_timeout_seconds);
    let (store, budget_writer) = reflector::store::<TenantHookBudget>();
    let (namespaces, ns_writer) = reflector::store::<PartialObjectMeta<Namespace>>();
    let ctx = Arc::new(SessionCtx {
        budgets: budgets.clone(),
        store: store.clone(),
        namespaces,
        tenants: std::sync::Mutex::new(Arc::new(TenantMap::default())),
        budgets_listed: watch::channel(false).0,
        namespaces_listed: watch::channel(false).0,
    });
    let changed = Arc::new(Notify::new());

    let tap = ctx.clone();
    let tap_changed = changed.clone();
    let budget_triggers = watcher(Api::<TenantHookBudget>::all(client.clone()), config.clone())
        .default_backoff()
        .reflect(budget_writer)
        .inspect(move |ev| {
            tap.budgets
                .shared
                .observe_watch(Watched::TenantHookBudgets, ev);
            match ev {
                Ok(watcher::Event::InitDone) => {
                    tap.budgets_listed.send_replace(true);
                    tap_changed.notify_one();
                }
                Ok(watcher::Event::Apply(_) | watcher::Event::Delete(_)) => {
                    tap_changed.notify_one()
                }
                _ => {}
            }
        })
        .filter(|ev| std::future::ready(ev.is_ok()))
        .applied_objects()
        .predicate_filter(predicates::generation, PredicateConfig::default());

    let ns_tap = ctx.clone();
    let ns_changed = changed.clone();
    let ns_watch = watcher(
        Api::<PartialObjectMeta<Namespace>>::all(client.clone()),
        config,
    )
    .default_backoff()
    .reflect(ns_writer)
    .take_until(cancel.clone().cancelled_owned())
    .for_each(move |ev| {
        match &ev {
            Ok(watcher::Event::InitDone) => {
                ns_tap.refresh_tenants();
                ns_tap.namespaces_listed.send_replace(true);
                ns_changed.notify_one();
            }
            Ok(watcher::Event::Apply(_) | watcher::Event::Delete(_)) => {
                ns_tap.refresh_tenants();
                ns_changed.notify_one()
            }
            Err(e) => tracing::warn!(error = %e, "budget session: namespace watch error (retrying with backoff)"),
            _ => {}
        }
        std::future::ready(())
    });

    let (queue_tx, queue_rx) = mpsc::unbounded::<ObjectRef<TenantHookBudget>>();
    let controller = Controller::for_stream(budget_triggers, store)
        .reconcile_on(queue_rx)
        .with_config(controller::Config::default().concurrency(CONCURRENCY))
        .graceful_shutdown_on(cancel.clone().cancelled_owned())
        .run(reconcile, error_policy, ctx.clone())
        .for_each(|res| {
            match res {
                Ok((obj, _)) => tracing::trace!(budget = %obj, "reconciled"),
                Err(controller::Error::ReconcilerFailed(_, obj)) => {
                    tracing::debug!(budget = %obj, "budget reconcile failed (logged by the error policy)")
                }
                Err(controller::Error::ObjectNotFound(obj)) => {
                    tracing::debug!(budget = %obj, "budget gone before its reconcile")
                }
                Err(e) => tracing::warn!(error = %e, "budget controller"),
            }
            std::future::ready(())
        });

    let pass = routing_pass(ctx, changed, queue_tx, cancel.clone());
    tokio::join!(controller, ns_watch, pass);
    budgets.set_synced(false);
    tracing::info!("budget session ended");
}

/// Resolves every budget, installs the accepted ones in the ledger and queues the
/// budgets whose status should change; after every change and each [`PASS_INTERVAL`].
async fn routing_pass(
    ctx: Arc<SessionCtx>,
    changed: Arc<Notify>,
    queue: mpsc::UnboundedSender<ObjectRef<TenantHookBudget>>,
    cancel: CancellationToken,
) {
    tokio::select! {
        _ = cancel.cancelled() => return,
        r = ctx.listed() => if r.is_err() { return; },
    }
    loop {
        let now = chrono::Utc::now();
        let now_time = crate::status::now();
        let resolved = ctx.resolve();
        let winners: Vec<Observed> = resolved
            .iter()
            .filter_map(|(b, v)| v.tenant().and_then(|t| Observed::of(b.clone(), t)))
            .collect();
        let figures = {
            let mut ledger = lock(&ctx.budgets.ledger);
            ledger.sync(winners);
            ledger.figures(&period_of(now))
        };
        ctx.budgets.metrics.set_all(&figures);
        if !ctx.budgets.serving().synced && ctx.budgets.shared.serving().leader {
            tracing::info!(
                budgets = resolved.len(),
                accepted = figures.len(),
                "budgets listed and installed"
            );
        }
        ctx.budgets.set_synced(true);
        for (b, v) in &resolved {
            if needs_write(b, v, now, &now_time) {
                let _ = queue.unbounded_send(ObjectRef::from_obj(b.as_ref()));
            }
        }
        tokio::select! {
            _ = cancel.cancelled() => return,
            _ = changed.notified() => {}
            _ = tokio::time::sleep(PASS_INTERVAL) => {}
        }
    }
}
