//! One leader session: the watches, the AgentHook controller, the publisher and the
//! ready pass, all stopped by one cancellation token when leadership ends.
//!
//! Watches:
//! - AgentHooks (all namespaces): into a reflector store; deletions and re-lists are fed
//!   to the index straight from the event stream; changes pass the
//!   [`super::triggers::hook_trigger`] predicate before they trigger a reconcile.
//! - Namespaces (metadata only): into a store (tenant look-ups); a label change
//!   re-queues every hook of the namespace.
//! - Secrets (metadata only): a change or deletion re-queues the hooks of that
//!   namespace whose headers read that Secret.
//! - The ready pass re-queues hooks whose `Ready` should move.

use std::collections::HashSet;
use std::sync::Arc;

use agenthooks_crds::AgentHook;
use futures::StreamExt;
use k8s_openapi::api::core::v1::{Namespace, Secret};
use kube::api::PartialObjectMeta;
use kube::runtime::controller::{self, Controller};
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{PredicateConfig, WatchStreamExt, predicates, watcher};
use kube::{Api, Client, ResourceExt};
use tokio_util::sync::CancellationToken;

use super::{Context, error_policy, ready_pass, reconcile, triggers};
use crate::index::HookKey;
use crate::shared::{Shared, lock};
use crate::snapshot_builder;

/// Reconciles running at once.
pub const CONCURRENCY: u16 = 8;

/// Runs a leader session until `cancel`. Starts from an empty index (keeping the version
/// counter) and serves nothing until the ready pass declares the initial sync complete.
pub async fn run(shared: Arc<Shared>, client: Client, cancel: CancellationToken) {
    lock(&shared.index).reset();
    lock(&shared.validation).clear();
    shared.set_synced(false);
    tracing::info!("leader session starting");

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
    let hook_triggers = watcher(
        Api::<AgentHook>::all(client.clone()),
        watcher::Config::default(),
    )
    .default_backoff()
    .reflect(hook_writer)
    .inspect(move |ev| {
        on_hook_event(&tap_shared, &tap_reader, ev);
        if matches!(ev, Ok(watcher::Event::InitDone)) {
            tap_ctx.hooks_listed.send_replace(true);
        }
    })
    .applied_objects()
    .predicate_filter(triggers::hook_trigger, PredicateConfig::default());

    // Api<PartialObjectMeta<K>> makes metadata-only list/watch requests.
    let ns_triggers = watcher(
        Api::<PartialObjectMeta<Namespace>>::all(client.clone()),
        watcher::Config::default(),
    )
    .default_backoff()
    .reflect(ns_writer)
    .inspect({
        let ctx = ctx.clone();
        move |ev| {
            if matches!(ev, Ok(watcher::Event::InitDone)) {
                ctx.namespaces_listed.send_replace(true);
            }
        }
    })
    .touched_objects()
    .predicate_filter(predicates::labels, PredicateConfig::default());

    let secret_triggers = watcher(
        Api::<PartialObjectMeta<Secret>>::all(client.clone()),
        watcher::Config::default(),
    )
    .default_backoff()
    .touched_objects()
    .predicate_filter(predicates::resource_version, PredicateConfig::default());

    let (ready_tx, ready_rx) = futures::channel::mpsc::unbounded::<ObjectRef<AgentHook>>();

    let ns_map = hook_reader.clone();
    let secret_map = hook_reader.clone();
    let controller = Controller::for_stream(hook_triggers, hook_reader.clone())
        .watches_stream(ns_triggers, move |ns: PartialObjectMeta<Namespace>| {
            triggers::hooks_in_namespace(&ns_map, &ns.name_any())
        })
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
    let ready = ready_pass::run(ctx, hook_reader, ready_tx, cancel.clone());
    tokio::join!(controller, publisher, ready);
    shared.set_synced(false);
    tracing::info!("leader session ended");
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
        Ok(_) => {}
        Err(e) => tracing::warn!(error = %e, "AgentHook watch error (retrying with backoff)"),
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
