//! One leader session: the watches, the AgentHook controller, the publisher and the
//! ready pass, all stopped by one cancellation token when leadership ends.
//!
//! Watches:
//! - AgentHooks (all namespaces): into a reflector store; deletions and re-lists are fed
//!   to the index straight from the event stream; changes pass the
//!   [`super::triggers::hook_trigger`] predicate before they trigger a reconcile.
//! - Namespaces (metadata only): into a store, from which every change (a namespace
//!   added or deleted, a label changed, a re-list) recomputes the tenant map
//!   ([`crate::tenants`]) held by the index; when the map changes the index wants a
//!   publish (snapshots carry it) and the hooks of every namespace whose claim moved are
//!   re-queued — one namespace's label can move another's claim.
//! - Secrets opted in to hook use (metadata only, label selector
//!   `agenthooks.io/hook-secret=true`, CONTRACT §9.6): a change or deletion re-queues the
//!   hooks of that namespace whose headers read that Secret. Adding the label is an
//!   `ADDED` event and removing it a `DELETED` one (the API server reports an object
//!   entering or leaving a selector so), so both re-queue the hooks at once. Other Secrets
//!   never reach the operator through the watch (their metadata can hold their data: the
//!   `last-applied-configuration` annotation of a client-side `kubectl apply`); the
//!   reconcile reads the metadata of one it names to tell "not opted in" from "not found".
//!   The cost: a Secret *created* without the label after its hook is still reported
//!   `SecretNotFound` (whose message names the label) until the hook's next reconcile
//!   ([`super::RESYNC`], or any change of the hook), not `SecretNotOptedIn`.
//! - The ready pass re-queues hooks whose `Ready` should move; the hook watch tells it
//!   which hooks changed (their status may have been changed by someone else).
//!
//! The hooks kept in the store lose their `metadata.managedFields` and the
//! `kubectl.kubernetes.io/last-applied-configuration` annotation on the way in: nothing
//! here reads them, and with 10,000 hooks they were most of the operator's memory.
//!
//! The controller, the namespace watch, the publisher, the ready pass and the watch
//! monitor each run as a task of their own, so a long pass of one (the first publish of
//! 10,000 hooks, a ready pass over all of them) never holds up the others.
//!
//! Every watch retries its own errors with backoff (a `410 Gone` starts it over), reports
//! them and its recoveries to [`crate::watch_health`], and keeps them from the controller
//! (whose shared trigger backoff would pause every watch). A small monitor re-evaluates
//! their health each second (metrics, and a log line when one turns unhealthy). A `410
//! Gone` or a restarted API server makes the watcher re-list (the hook store is replaced
//! and deletions missed meanwhile are pruned from the index), so the session keeps
//! working without a restart.

use std::collections::HashSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use agenthooks_crds::AgentHook;
use agenthooks_crds::rules::hook_secret::OPTED_IN_SELECTOR;
use futures::{Stream, StreamExt};
use k8s_openapi::api::core::v1::{Namespace, Secret};
use kube::api::PartialObjectMeta;
use kube::runtime::controller::{self, Controller};
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::utils::Backoff;
use kube::runtime::{PredicateConfig, WatchStreamExt, predicates, watcher};
use kube::{Api, Client, ResourceExt};
use tokio_util::sync::CancellationToken;

use super::{Context, error_policy, ready_pass, reconcile, triggers};
use crate::index::HookKey;
use crate::shared::{Shared, lock};
use crate::snapshot_builder;
use crate::tenants;
use crate::watch_health::Watched;

/// Reconciles running at once (each mostly waits for the API server).
pub const CONCURRENCY: u16 = 32;

/// The annotation `kubectl apply` (client side) keeps the whole last applied object in.
pub const LAST_APPLIED_ANNOTATION: &str = "kubectl.kubernetes.io/last-applied-configuration";

/// Drops what the operator never reads and would keep for every hook: the managed fields
/// and the last-applied annotation.
pub fn slim(hook: &mut AgentHook) {
    hook.metadata.managed_fields = None;
    if let Some(a) = hook.metadata.annotations.as_mut() {
        a.remove(LAST_APPLIED_ANNOTATION);
    }
}

/// Runs a leader session until `cancel`. Starts from an empty index (keeping the version
/// counter) and serves nothing until the ready pass declares the initial sync complete.
pub async fn run(shared: Arc<Shared>, client: Client, cancel: CancellationToken) {
    lock(&shared.index).reset();
    lock(&shared.validation).clear();
    shared.set_synced(false);
    shared.watch_health.reset();
    tracing::info!("leader session starting");
    let watch_config = watcher::Config::default().timeout(shared.config.watch_timeout_seconds);

    let (hook_reader, hook_writer) = reflector::store::<AgentHook>();
    let (ns_reader, ns_writer) = reflector::store::<PartialObjectMeta<Namespace>>();

    let ctx = Arc::new(Context::new(
        shared.clone(),
        client.clone(),
        ns_reader.clone(),
    ));
    let tap_shared = shared.clone();
    let tap_reader = hook_reader.clone();
    let tap_ctx = ctx.clone();
    let (touched_tx, touched_rx) = futures::channel::mpsc::unbounded::<HookKey>();
    let hook_triggers = retried(watcher(
        Api::<AgentHook>::all(client.clone()),
        watch_config.clone(),
    ))
    .modify(slim)
    .reflect(hook_writer)
    .inspect(move |ev| {
        tap_shared.observe_watch(Watched::AgentHooks, ev);
        on_hook_event(&tap_shared, &tap_reader, ev);
        if let Ok(watcher::Event::Apply(h)) = ev
            && let Some(ns) = h.namespace()
        {
            let _ = touched_tx.unbounded_send(HookKey::new(ns, h.name_any()));
        }
        if matches!(ev, Ok(watcher::Event::InitDone)) {
            tap_ctx.hooks_listed.send_replace(true);
        }
    })
    .filter(observed_errors_stay_here)
    .applied_objects()
    .predicate_filter(triggers::hook_trigger, PredicateConfig::default());

    // Api<PartialObjectMeta<K>> makes metadata-only list/watch requests.
    let (tenant_tx, tenant_rx) = futures::channel::mpsc::unbounded::<ObjectRef<AgentHook>>();
    let ns_watch = retried(watcher(
        Api::<PartialObjectMeta<Namespace>>::all(client.clone()),
        watch_config.clone(),
    ))
    .reflect(ns_writer)
    .take_until(cancel.clone().cancelled_owned())
    .for_each({
        let ctx = ctx.clone();
        let (namespaces, hooks) = (ns_reader.clone(), hook_reader.clone());
        move |ev| {
            ctx.shared.observe_watch(Watched::Namespaces, &ev);
            if matches!(
                ev,
                Ok(watcher::Event::Apply(_) | watcher::Event::Delete(_) | watcher::Event::InitDone)
            ) {
                for hook in on_namespaces_changed(&ctx.shared, &namespaces, &hooks) {
                    let _ = tenant_tx.unbounded_send(hook);
                }
            }
            if matches!(ev, Ok(watcher::Event::InitDone)) {
                ctx.namespaces_listed.send_replace(true);
            }
            std::future::ready(())
        }
    });

    let secret_shared = shared.clone();
    let secret_triggers = retried(watcher(
        Api::<PartialObjectMeta<Secret>>::all(client.clone()),
        watch_config.labels(OPTED_IN_SELECTOR),
    ))
    .inspect(move |ev| secret_shared.observe_watch(Watched::Secrets, ev))
    .filter(observed_errors_stay_here)
    .touched_objects()
    .predicate_filter(predicates::resource_version, PredicateConfig::default());

    let (ready_tx, ready_rx) = futures::channel::mpsc::unbounded::<ObjectRef<AgentHook>>();

    let secret_map = hook_reader.clone();
    let controller = Controller::for_stream(hook_triggers, hook_reader.clone())
        .reconcile_on(tenant_rx)
        .watches_stream(
            secret_triggers,
            move |s: PartialObjectMeta<Secret>| match s.namespace() {
                Some(ns) => triggers::hooks_using_secret(&secret_map, &ns, &s.name_any()),
                None => Vec::new(),
            },
        )
        .reconcile_on(ready_rx)
        .with_config(controller::Config::default().concurrency(CONCURRENCY))
        .graceful_shutdown_on(cancel.clone().cancelled_owned())
        .run(reconcile, error_policy, ctx.clone())
        .for_each(|res| {
            match res {
                Ok((obj, _)) => tracing::trace!(hook = %obj, "reconciled"),
                Err(controller::Error::ReconcilerFailed(_, obj)) => {
                    tracing::debug!(hook = %obj, "reconcile failed (logged by the error policy)")
                }
                Err(controller::Error::ObjectNotFound(obj)) => {
                    tracing::debug!(hook = %obj, "hook gone before its reconcile")
                }
                Err(e) => tracing::warn!(error = %e, "controller"),
            }
            futures::future::ready(())
        });

    let publisher = snapshot_builder::run_publisher(shared.clone(), cancel.clone());
    let ready = ready_pass::run(ctx, hook_reader, ready_tx, touched_rx, cancel.clone());
    let monitor = monitor_watches(shared.clone(), cancel.clone());
    let tasks = [
        tokio::spawn(controller),
        tokio::spawn(ns_watch),
        tokio::spawn(publisher),
        tokio::spawn(ready),
        tokio::spawn(monitor),
    ];
    // Each ends on `cancel` (or, for the watches, when their stream does); a task that
    // ends early ends the session, as `join!` of all of them did.
    let (first, _, rest) = futures::future::select_all(tasks).await;
    if let Err(e) = first {
        tracing::error!(error = %e, "a leader session task failed");
    }
    cancel.cancel();
    for t in rest {
        let _ = t.await;
    }
    shared.set_synced(false);
    shared.watch_health.reset();
    shared.watch_report(Instant::now());
    tracing::info!("leader session ended");
}

/// Whether a watch stream item is a `410 Gone` (the watch expired: the watcher re-lists).
fn is_gone<K>(item: &Result<watcher::Event<K>, watcher::Error>) -> bool {
    matches!(item, Err(watcher::Error::WatchError(status)) if status.code == 410)
}

/// kube-runtime's default watcher backoff (0.8 s doubling to 30 s, jittered, forgotten
/// after 2 min without errors), started over by a `410 Gone`.
///
/// A 410 right after a watch start succeeded means "re-list now". Without starting over,
/// the delay grown by the failed reconnections of an outage (up to 30 s) was slept once
/// more before the re-list that ends it.
#[derive(Default)]
struct GoneRestartsBackoff {
    inner: watcher::DefaultBackoff,
    gone: Arc<AtomicBool>,
}

impl Iterator for GoneRestartsBackoff {
    type Item = Duration;

    fn next(&mut self) -> Option<Duration> {
        if self.gone.swap(false, Ordering::Relaxed) {
            self.inner.reset();
        }
        self.inner.next()
    }
}

impl Backoff for GoneRestartsBackoff {
    fn reset(&mut self) {
        self.inner.reset();
    }
}

/// A watch stream that retries its errors after [`GoneRestartsBackoff`].
fn retried<K>(
    stream: impl Stream<Item = Result<watcher::Event<K>, watcher::Error>> + Send,
) -> impl Stream<Item = Result<watcher::Event<K>, watcher::Error>> + Send {
    let backoff = GoneRestartsBackoff::default();
    let gone = backoff.gone.clone();
    stream
        .inspect(move |item| {
            if is_gone(item) {
                gone.store(true, Ordering::Relaxed);
            }
        })
        .backoff(backoff)
}

/// Keeps a watch error (already backed off by its own watcher, counted and logged by
/// [`Shared::observe_watch`]) from reaching the controller.
///
/// The kube-runtime `Controller` puts its own backoff on the *merged* trigger streams:
/// every error of any watch paused all three, for a delay that grew with each error and
/// reset only on a change that passed the predicates. After an API server restart (each
/// watch failing to reconnect, then `410 Gone`) that left every watch, re-lists included,
/// unpolled for half a minute and more, so a new hook waited that long.
fn observed_errors_stay_here<K>(
    item: &Result<watcher::Event<K>, watcher::Error>,
) -> std::future::Ready<bool> {
    std::future::ready(item.is_ok())
}

/// Re-evaluates the watches' health each second until `cancel` (the gauge, and the log
/// line of a watch turning unhealthy, follow the clock even when nobody asks `/readyz`).
async fn monitor_watches(shared: Arc<Shared>, cancel: CancellationToken) {
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = cancel.cancelled() => return,
            _ = tick.tick() => { shared.watch_report(Instant::now()); }
        }
    }
}

/// Recomputes the tenant map from the namespace store (after it applied a change) and
/// gives it to the index; when it moved, asks for a publish and returns the hooks of every
/// namespace whose claim moved (to re-queue: their tenant, or their conflict, changed).
fn on_namespaces_changed(
    shared: &Shared,
    namespaces: &Store<PartialObjectMeta<Namespace>>,
    hooks: &Store<AgentHook>,
) -> Vec<ObjectRef<AgentHook>> {
    let state = namespaces.state();
    let map = tenants::resolve(
        state.iter().map(|m| m.as_ref()),
        &shared.config.master_namespace,
    );
    let moved = lock(&shared.index).set_tenants(map);
    if moved.is_empty() {
        return Vec::new();
    }
    tracing::info!(namespaces = moved.len(), first = ?moved.first(), "tenant claims changed");
    shared.publish_requested.notify_one();
    triggers::hooks_in_namespaces(hooks, &moved)
}

/// Feeds deletions and re-lists to the index, straight from the hook watch (after the
/// store has applied them, so the store is current).
fn on_hook_event(
    shared: &Shared,
    reader: &Store<AgentHook>,
    ev: &Result<watcher::Event<AgentHook>, watcher::Error>,
) {
    match ev {
        Ok(watcher::Event::Delete(hook)) => {
            let (Some(ns), Some(uid)) = (hook.namespace(), hook.uid()) else {
                return;
            };
            let key = HookKey::new(ns, hook.name_any());
            lock(&shared.validation).forget(&uid);
            if lock(&shared.index).delete(&key, Some(&uid)) {
                tracing::info!(hook = %key, "hook deleted; dropped from the published set");
                shared.publish_requested.notify_one();
            }
        }
        Ok(watcher::Event::InitDone) => {
            // After a (re-)list, deletions missed while the watch was down show up only
            // as absences from the store.
            let present: HashSet<String> = reader.state().iter().filter_map(|h| h.uid()).collect();
            lock(&shared.validation).retain(|uid| present.contains(uid));
            if lock(&shared.index).retain(|_, uid| present.contains(uid)) {
                tracing::info!("hooks deleted while the watch was down; dropped");
                shared.publish_requested.notify_one();
            }
        }
        // errors are counted and logged by `Shared::observe_watch`
        Ok(_) | Err(_) => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::index::tests::hook;
    use crate::metrics::Metrics;
    use crate::shared::tests::config;

    fn obj(ns: &str, name: &str, uid: &str) -> AgentHook {
        let mut h = AgentHook::new(name, crate::index::tests::spec(0));
        h.metadata.namespace = Some(ns.into());
        h.metadata.uid = Some(uid.into());
        h.metadata.generation = Some(1);
        h
    }

    #[test]
    fn a_410_starts_the_backoff_over() {
        let mut b = GoneRestartsBackoff::default();
        let first = b.next().unwrap();
        assert!(first < Duration::from_millis(1700), "{first:?}");
        let grown = (0..5).map(|_| b.next().unwrap()).last().unwrap();
        assert!(grown >= Duration::from_secs(12), "{grown:?}");
        b.gone.store(true, Ordering::Relaxed);
        let after_gone = b.next().unwrap();
        assert!(after_gone < Duration::from_millis(1700), "{after_gone:?}");

        let gone: Result<watcher::Event<()>, _> =
            Err(watcher::Error::WatchError(Box::new(kube::core::Status {
                code: 410,
                message: "too old resource version: 1 (2)".into(),
                ..Default::default()
            })));
        assert!(is_gone(&gone));
        assert!(!is_gone(&Err::<watcher::Event<()>, _>(
            watcher::Error::NoResourceVersion
        )));
        assert!(!is_gone(&Ok(watcher::Event::<()>::Init)));
    }

    fn namespace(name: &str, label: Option<&str>, created: i64) -> PartialObjectMeta<Namespace> {
        let mut m = PartialObjectMeta::<Namespace>::default();
        m.metadata.name = Some(name.into());
        m.metadata.creation_timestamp = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
            k8s_openapi::jiff::Timestamp::from_second(created).unwrap(),
        ));
        if let Some(l) = label {
            m.metadata.labels =
                Some([(agenthooks_crds::TENANT_LABEL.to_string(), l.to_string())].into());
        }
        m
    }

    #[test]
    fn a_namespace_change_moves_claims_and_requeues_their_hooks() {
        let shared = Shared::new(config(), Metrics::new().unwrap());
        let (hooks, mut hook_writer) = reflector::store::<AgentHook>();
        for h in [
            obj("tenant-acme", "guard", "u1"),
            obj("team-b", "mine", "u2"),
            obj("other", "h", "u3"),
        ] {
            hook_writer.apply_watcher_event(&watcher::Event::Apply(h));
        }
        let (namespaces, mut ns_writer) = reflector::store::<PartialObjectMeta<Namespace>>();
        for n in [
            namespace("tenant-acme", Some("acme"), 100),
            namespace("team-b", None, 200),
            namespace("other", None, 50),
        ] {
            ns_writer.apply_watcher_event(&watcher::Event::Apply(n));
        }
        let names = |refs: Vec<ObjectRef<AgentHook>>| {
            let mut v: Vec<String> = refs
                .into_iter()
                .map(|r| format!("{}/{}", r.namespace.unwrap_or_default(), r.name))
                .collect();
            v.sort();
            v
        };
        // The first map: every namespace is new.
        let first = on_namespaces_changed(&shared, &namespaces, &hooks);
        assert_eq!(
            names(first),
            ["other/h", "team-b/mine", "tenant-acme/guard"]
        );
        assert_eq!(shared.publish_now().unwrap(), Some(1));
        // Nothing moved: nothing re-queued, nothing to publish.
        assert!(on_namespaces_changed(&shared, &namespaces, &hooks).is_empty());
        assert!(!lock(&shared.index).is_dirty());
        // team-b labelled acme: it loses to the older tenant-acme; only its hooks move.
        ns_writer.apply_watcher_event(&watcher::Event::Apply(namespace(
            "team-b",
            Some("acme"),
            200,
        )));
        assert_eq!(
            names(on_namespaces_changed(&shared, &namespaces, &hooks)),
            ["team-b/mine"]
        );
        assert!(
            lock(&shared.index).is_dirty(),
            "the snapshot carries the map"
        );
        let conflict = lock(&shared.index)
            .tenants()
            .tenant_of("team-b")
            .unwrap_err();
        assert_eq!(
            (conflict.tenant.as_str(), conflict.holder.as_str()),
            ("acme", "tenant-acme")
        );
        // tenant-acme deleted: team-b holds acme now.
        ns_writer.apply_watcher_event(&watcher::Event::Delete(namespace(
            "tenant-acme",
            Some("acme"),
            100,
        )));
        assert_eq!(
            names(on_namespaces_changed(&shared, &namespaces, &hooks)),
            ["team-b/mine", "tenant-acme/guard"]
        );
        assert_eq!(
            lock(&shared.index).tenants().tenant_of("team-b"),
            Ok(Some("acme"))
        );
    }

    #[test]
    fn deletions_and_relists_reach_the_index() {
        let shared = Shared::new(config(), Metrics::new().unwrap());
        let (reader, mut writer) = reflector::store::<AgentHook>();
        lock(&shared.index).apply(hook("a", "h1", "u1", 1));
        lock(&shared.index).apply(hook("a", "h2", "u2", 1));
        lock(&shared.index).apply(hook("a", "h3", "u3", 1));
        lock(&shared.index).publish();

        // a deletion of an older object of the same name leaves the index alone
        let ev = Ok(watcher::Event::Delete(obj("a", "h1", "old-uid")));
        on_hook_event(&shared, &reader, &ev);
        assert_eq!(lock(&shared.index).len(), 3);
        let ev = Ok(watcher::Event::Delete(obj("a", "h1", "u1")));
        on_hook_event(&shared, &reader, &ev);
        assert_eq!(lock(&shared.index).len(), 2);
        assert!(lock(&shared.index).is_dirty());

        // a re-list that no longer holds h3 prunes it
        for ev in [
            watcher::Event::Init,
            watcher::Event::InitApply(obj("a", "h2", "u2")),
            watcher::Event::InitDone,
        ] {
            writer.apply_watcher_event(&ev);
            on_hook_event(&shared, &reader, &Ok(ev));
        }
        let index = lock(&shared.index);
        assert_eq!(index.len(), 1);
        assert!(index.get(&HookKey::new("a", "h2")).is_some());
    }
}
