//! The ready pass: completes the initial sync of a leader session, then re-evaluates
//! every hook's `Ready` each second (and whenever the tracker or a publish says
//! something moved), re-queueing only the hooks whose recorded status differs from what
//! the operator would write (`Ready` moved, or someone else changed `Accepted`, `Ready`
//! or `observedGeneration` — status-only changes the hook predicate filters out). The
//! reconciler stays the only status writer.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use agenthooks_crds::AgentHook;
use futures::channel::mpsc::UnboundedSender;
use kube::ResourceExt;
use kube::runtime::reflector::{ObjectRef, Store};
use tokio_util::sync::CancellationToken;

use super::Context;
use crate::index::HookKey;
use crate::ready::LiveDispatchers;
use crate::shared::lock;
use crate::status::{DesiredCondition, accepted_condition_for, now as status_now, plan};

/// Period of the pass.
pub const PERIOD: Duration = Duration::from_secs(1);
/// A hook re-queued for a `Ready` change is not re-queued for the same change again
/// before this long (its reconcile may be failing and backing off).
pub const RETRIGGER_AFTER: Duration = Duration::from_secs(10);

/// Whether every hook of the initial list (still present) has been reconciled once.
pub fn initial_sync_done(
    initial: &HashSet<String>,
    present: &HashSet<String>,
    attempted: &HashSet<String>,
) -> bool {
    initial
        .iter()
        .all(|uid| attempted.contains(uid) || !present.contains(uid))
}

/// Runs the pass until `cancel`.
pub async fn run(
    ctx: Arc<Context>,
    hooks: Store<AgentHook>,
    requeue: UnboundedSender<ObjectRef<AgentHook>>,
    cancel: CancellationToken,
) {
    let mut hooks_listed = ctx.hooks_listed.subscribe();
    let mut namespaces_listed = ctx.namespaces_listed.subscribe();
    let stores_ready = async {
        hooks_listed.wait_for(|l| *l).await.is_ok()
            && namespaces_listed.wait_for(|l| *l).await.is_ok()
    };
    tokio::select! {
        _ = cancel.cancelled() => return,
        ok = stores_ready => if !ok { return; }
    }
    let initial: HashSet<String> = hooks.state().iter().filter_map(|h| h.uid()).collect();
    tracing::info!(
        hooks = initial.len(),
        "initial list complete; reconciling it before serving"
    );

    let shared = ctx.shared.clone();
    let mut tick = tokio::time::interval(PERIOD);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut recent: HashMap<String, ((DesiredCondition, DesiredCondition), Instant)> =
        HashMap::new();
    let mut last_live = LiveDispatchers::default();
    loop {
        tokio::select! {
            _ = cancel.cancelled() => return,
            _ = tick.tick() => {}
            _ = shared.tracker_changed.notified() => {}
        }
        let now = Instant::now();
        let live = {
            let mut tracker = lock(&shared.tracker);
            tracker.prune(now);
            tracker.live(&shared.epoch, now)
        };
        shared.metrics.live_dispatchers.set(live.len() as i64);
        log_live_changes(&last_live, &live);
        last_live = live;

        let state = hooks.state();
        if !shared.serving().synced {
            let present: HashSet<String> = state.iter().filter_map(|h| h.uid()).collect();
            let done = initial_sync_done(&initial, &present, &lock(&ctx.attempted));
            if !done {
                continue;
            }
            if let Err(e) = shared.publish_now() {
                tracing::error!(error = %e, "publishing the initial snapshot failed; retrying");
                continue;
            }
            *lock(&ctx.serving_since) = Some(now);
            shared.set_synced(true);
            lock(&ctx.attempted).clear();
            let (total, published, version) = {
                let index = lock(&shared.index);
                (index.len(), index.published_len(), index.version())
            };
            tracing::info!(
                hooks = total,
                published,
                version,
                "initial sync complete; serving snapshots"
            );
            continue;
        }

        let now_time = status_now();
        for hook in &state {
            let (Some(ns), Some(uid)) = (hook.namespace(), hook.uid()) else {
                continue;
            };
            let generation = hook.metadata.generation.unwrap_or(0);
            let key = HookKey::new(ns, hook.name_any());
            let known = {
                let index = lock(&shared.index);
                match index.get(&key) {
                    Some(h) if h.hook.uid == uid && h.hook.generation == generation => index
                        .publication(&key)
                        .map(|p| (p, accepted_condition_for(&h.verdict, &hook.spec))),
                    _ => None, // not reconciled at this generation yet
                }
            };
            let Some((publication, accepted)) = known else {
                continue;
            };
            let ready = ctx.desired_ready(hook, publication, &last_live, now);
            let status = hook.status.as_ref();
            // Ready moved, or our fields were changed by someone else (a status-only
            // change the hook predicate does not pass): re-queue.
            if plan(
                status,
                generation,
                &[accepted.clone(), ready.clone()],
                &now_time,
            )
            .is_none()
            {
                recent.remove(&uid);
                continue;
            }
            let desired = (accepted, ready);
            if let Some((d, at)) = recent.get(&uid)
                && *d == desired
                && now.saturating_duration_since(*at) < RETRIGGER_AFTER
            {
                continue;
            }
            tracing::debug!(hook = %key, ready = %desired.1.reason, "status should move; re-queueing");
            recent.insert(uid, (desired, now));
            let _ = requeue.unbounded_send(ObjectRef::from_obj(&**hook));
        }
        recent.retain(|_, (_, at)| now.saturating_duration_since(*at) < RETRIGGER_AFTER * 6);
    }
}

fn log_live_changes(before: &LiveDispatchers, after: &LiveDispatchers) {
    for id in after.0.keys().filter(|id| !before.0.contains_key(*id)) {
        tracing::info!(dispatcher = %id, "dispatcher is live");
    }
    for id in before.0.keys().filter(|id| !after.0.contains_key(*id)) {
        tracing::info!(dispatcher = %id, "dispatcher is no longer live");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(items: &[&str]) -> HashSet<String> {
        items.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn initial_sync_waits_for_every_present_hook() {
        let initial = set(&["a", "b"]);
        assert!(!initial_sync_done(
            &initial,
            &set(&["a", "b"]),
            &set(&["a"])
        ));
        assert!(initial_sync_done(
            &initial,
            &set(&["a", "b"]),
            &set(&["a", "b"])
        ));
        assert!(
            initial_sync_done(&initial, &set(&["a"]), &set(&["a"])),
            "a hook deleted meanwhile is not waited for"
        );
        assert!(initial_sync_done(
            &HashSet::new(),
            &HashSet::new(),
            &HashSet::new()
        ));
    }
}
