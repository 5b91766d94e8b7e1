//! The ready pass: completes the initial sync of a leader session, then finds the hooks
//! whose recorded status differs from what the operator would write (`Ready` moved, or
//! someone else changed `Accepted`, `Ready` or `observedGeneration` — status-only changes
//! the hook predicate filters out) and re-queues them. The reconciler stays the only
//! status writer.
//!
//! It looks only at the hooks whose status may have moved, so a change costs what it
//! touches, whatever the number of hooks:
//! - the hooks a publish stamped with its version ([`crate::ready::Stamps`]), once every
//!   live dispatcher holds that version (their `Ready` turns `True`);
//! - every hook whose object the watch saw change (its status may have been changed by
//!   someone else), as the session's hook watch reports them;
//! - the hooks it re-queued that still differ [`RETRIGGER_AFTER`] later.
//!
//! It looks at every hook when what the `Ready` rule reads changes for all of them: the
//! live dispatchers (one comes or goes, or holds another epoch), what they report they
//! cannot load, the end of the warm-up; when stamped hooks overflowed
//! ([`crate::ready::MAX_STAMPED_KEYS`]); and every [`FULL_PASS_PERIOD`] as a safety net.
//! It runs each [`PERIOD`], and whenever the tracker, a publish or the watch says
//! something moved.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use agenthooks_crds::AgentHook;
use futures::StreamExt;
use futures::channel::mpsc::{UnboundedReceiver, UnboundedSender};
use kube::ResourceExt;
use kube::runtime::reflector::{ObjectRef, Store};
use tokio_util::sync::CancellationToken;

use super::Context;
use crate::index::{HookKey, Publication};
use crate::ready::LiveDispatchers;
use crate::shared::lock;
use crate::status::{DesiredCondition, now as status_now, plan};

/// Period of the pass.
pub const PERIOD: Duration = Duration::from_secs(1);
/// A pass looks at every hook at least this often (a safety net).
pub const FULL_PASS_PERIOD: Duration = Duration::from_secs(30);
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

/// Whether what the `Ready` rule reads for every hook changed from `before` to `after`:
/// the live dispatchers, whether each holds a version of the current epoch, or what they
/// cannot load (a held version moving on is not such a change: the stamps say which hooks
/// it moves).
pub fn live_set_moved(before: &LiveDispatchers, after: &LiveDispatchers) -> bool {
    before.1 != after.1
        || before.0.len() != after.0.len()
        || before
            .0
            .iter()
            .zip(&after.0)
            .any(|((a, va), (b, vb))| a != b || va.is_some() != vb.is_some())
}

/// The version every live dispatcher holds (the least of theirs), `None` when one holds
/// another epoch's or none is live.
pub fn held_by_all(live: &LiveDispatchers) -> Option<u64> {
    live.0
        .values()
        .try_fold(u64::MAX, |min, v| v.map(|v| min.min(v)))
        .filter(|_| !live.is_empty())
}

/// Runs the pass until `cancel`. `touched` carries the key of every hook the watch saw
/// change.
pub async fn run(
    ctx: Arc<Context>,
    hooks: Store<AgentHook>,
    requeue: UnboundedSender<ObjectRef<AgentHook>>,
    mut touched: UnboundedReceiver<HookKey>,
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
    let mut recent: HashMap<String, ((DesiredCondition, DesiredCondition), Instant, HookKey)> =
        HashMap::new();
    let mut last_live = LiveDispatchers::default();
    let mut last_warming: Option<bool> = None;
    let mut last_full: Option<Instant> = None;
    let mut check: HashSet<HookKey> = HashSet::new();
    loop {
        tokio::select! {
            _ = cancel.cancelled() => return,
            _ = tick.tick() => {}
            _ = shared.tracker_changed.notified() => {}
            key = touched.next() => match key {
                Some(key) => { check.insert(key); }
                None => return,
            },
        }
        while let Ok(key) = touched.try_recv() {
            check.insert(key);
        }
        let now = Instant::now();
        let live = {
            let mut tracker = lock(&shared.tracker);
            tracker.prune(now);
            tracker.live(&shared.epoch, now)
        };
        shared.metrics.live_dispatchers.set(live.len() as i64);
        log_live_changes(&last_live, &live);
        let moved = live_set_moved(&last_live, &live);
        last_live = live;

        if !shared.serving().synced {
            let state = hooks.state();
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

        // The hooks whose content every live dispatcher now holds.
        {
            let mut stamps = lock(&shared.stamps);
            if last_live.is_empty() {
                check.extend(stamps.take_all());
            } else if let Some(v) = held_by_all(&last_live) {
                check.extend(stamps.take_up_to(v));
            }
            if stamps.take_overflow() {
                last_full = None;
            }
        }
        let warming = ctx.warming_up(now);
        let full = moved
            || last_warming != Some(warming)
            || last_full.is_none_or(|t| now.saturating_duration_since(t) >= FULL_PASS_PERIOD);
        last_warming = Some(warming);
        for (_, (_, at, key)) in recent.iter() {
            if now.saturating_duration_since(*at) >= RETRIGGER_AFTER {
                check.insert(key.clone());
            }
        }
        let candidates: Vec<Arc<AgentHook>> = if full {
            last_full = Some(now);
            check.clear();
            hooks.state()
        } else {
            check
                .drain()
                .filter_map(|k| hooks.get(&ObjectRef::new(&k.name).within(&k.namespace)))
                .collect()
        };
        shared
            .metrics
            .ready_checks_total
            .inc_by(candidates.len() as u64);
        let now_time = status_now();
        let keys: Vec<Option<HookKey>> = candidates
            .iter()
            .map(|h| h.namespace().map(|ns| HookKey::new(ns, h.name_any())))
            .collect();
        // What the index knows of each, read under one lock.
        let known: Vec<Option<(Publication, DesiredCondition)>> = {
            let index = lock(&shared.index);
            candidates
                .iter()
                .zip(&keys)
                .map(|(hook, key)| {
                    let key = key.as_ref()?;
                    let uid = hook.uid()?;
                    let generation = hook.metadata.generation.unwrap_or(0);
                    match index.get(key) {
                        Some(h) if h.hook.uid == uid && h.hook.generation == generation => {
                            index.publication(key).map(|p| (p, h.accepted.clone()))
                        }
                        _ => None, // not reconciled at this generation yet
                    }
                })
                .collect()
        };
        for ((hook, key), known) in candidates.iter().zip(keys).zip(known) {
            let (Some(key), Some(uid), Some((publication, accepted))) = (key, hook.uid(), known)
            else {
                continue;
            };
            let generation = hook.metadata.generation.unwrap_or(0);
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
            if let Some((d, at, _)) = recent.get(&uid)
                && *d == desired
                && now.saturating_duration_since(*at) < RETRIGGER_AFTER
            {
                continue;
            }
            tracing::debug!(hook = %key, ready = %desired.1.reason, "status should move; re-queueing");
            recent.insert(uid, (desired, now, key));
            let _ = requeue.unbounded_send(ObjectRef::from_obj(&**hook));
        }
        recent.retain(|_, (_, at, _)| now.saturating_duration_since(*at) < RETRIGGER_AFTER * 6);
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

    fn live(held: &[(&str, Option<u64>)]) -> LiveDispatchers {
        LiveDispatchers(
            held.iter().map(|(id, v)| (id.to_string(), *v)).collect(),
            Default::default(),
        )
    }

    #[test]
    fn only_arrivals_departures_epochs_and_reports_move_the_live_set() {
        let a = live(&[("d1", Some(3)), ("d2", Some(4))]);
        assert!(
            !live_set_moved(&a, &live(&[("d1", Some(5)), ("d2", Some(5))])),
            "versions move on"
        );
        assert!(live_set_moved(&a, &live(&[("d1", Some(3))])), "d2 left");
        assert!(
            live_set_moved(&a, &live(&[("d1", Some(3)), ("d3", Some(4))])),
            "another one"
        );
        assert!(
            live_set_moved(&a, &live(&[("d1", Some(3)), ("d2", None)])),
            "another epoch"
        );
        let mut reported = a.clone();
        reported.1.insert("d1".into(), Vec::new());
        assert!(live_set_moved(&a, &reported), "what they cannot load");
        assert_eq!(held_by_all(&a), Some(3));
        assert_eq!(held_by_all(&live(&[("d1", Some(3)), ("d2", None)])), None);
        assert_eq!(held_by_all(&live(&[])), None);
    }

    /// The ready pass over 1,000 hooks served and recorded Ready: after its first pass over
    /// all of them, an edit of one hook (published, then held by the dispatcher) costs it
    /// that hook, which it re-queues, and no other.
    #[tokio::test]
    async fn an_edit_costs_the_ready_pass_the_edited_hook_only() {
        use crate::index::tests::hook as indexed;
        use crate::metrics::Metrics;
        use crate::ready::ready_condition;
        use crate::shared::Shared;
        use crate::status::{accepted_condition, plan};
        use agenthooks_crds::AgentHookStatus;
        use k8s_openapi::api::core::v1::Namespace;
        use kube::api::PartialObjectMeta;
        use kube::runtime::{reflector, watcher};

        let shared = Shared::new(crate::shared::tests::config(), Metrics::new().unwrap());
        shared.set_leader(true);
        shared.set_synced(true);
        let client =
            kube::Client::try_from(kube::Config::new("http://127.0.0.1:9".parse().unwrap()))
                .unwrap();
        let (namespaces, _ns_writer) = reflector::store::<PartialObjectMeta<Namespace>>();
        let ctx = Arc::new(Context::new(shared.clone(), client, namespaces));
        ctx.hooks_listed.send_replace(true);
        ctx.namespaces_listed.send_replace(true);
        let (hooks, mut writer) = reflector::store::<AgentHook>();

        // What the operator would have written for generation `g` served from version `v`.
        let object = |name: &str, g: i64, recorded: i64| {
            let mut h = AgentHook::new(name, crate::index::tests::spec(0));
            h.metadata.namespace = Some("ns".into());
            h.metadata.uid = Some(format!("u-{name}"));
            h.metadata.generation = Some(g);
            let mut live = LiveDispatchers::default();
            live.0.insert("d1".into(), Some(1));
            let desired = [
                accepted_condition(&crate::index::Verdict::Accepted),
                ready_condition(
                    Publication::Published {
                        served_from: Some(1),
                    },
                    &live,
                    "",
                    recorded,
                ),
            ];
            let p = plan(None, recorded, &desired, &status_now()).unwrap();
            h.status = Some(AgentHookStatus {
                observed_generation: Some(recorded),
                conditions: p.conditions,
                ..Default::default()
            });
            h
        };
        let names: Vec<String> = (0..1000).map(|i| format!("h{i}")).collect();
        for name in &names {
            writer.apply_watcher_event(&watcher::Event::Apply(object(name, 1, 1)));
            lock(&shared.index).apply(indexed("ns", name, &format!("u-{name}"), 1));
        }
        assert_eq!(shared.publish_now().unwrap(), Some(1));
        lock(&shared.tracker)
            .begin_poll("d1", &shared.epoch, 1, Instant::now())
            .unwrap();

        let (requeue_tx, mut requeued) = futures::channel::mpsc::unbounded();
        let (touched_tx, touched) = futures::channel::mpsc::unbounded();
        let cancel = CancellationToken::new();
        tokio::spawn(run(
            ctx.clone(),
            hooks.clone(),
            requeue_tx,
            touched,
            cancel.clone(),
        ));
        let checks = || shared.metrics.ready_checks_total.get();
        let deadline = Instant::now() + Duration::from_secs(10);
        while checks() < 1000 {
            assert!(Instant::now() < deadline, "no full pass: {}", checks());
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert!(requeued.try_recv().is_err(), "every recorded status holds");
        let before = checks();

        // h7 edited: generation 2 in the store (status still of 1), reconciled into the
        // index and published; the dispatcher then holds version 2.
        writer.apply_watcher_event(&watcher::Event::Apply(object("h7", 2, 1)));
        let _ = touched_tx.unbounded_send(HookKey::new("ns", "h7"));
        lock(&shared.index).apply(indexed("ns", "h7", "u-h7", 2));
        assert_eq!(shared.publish_now().unwrap(), Some(2));
        {
            let mut tracker = lock(&shared.tracker);
            tracker.end_poll("d1", Instant::now());
            tracker
                .begin_poll("d1", &shared.epoch, 2, Instant::now())
                .unwrap();
        }
        shared.tracker_changed.notify_one();
        let got = tokio::time::timeout(Duration::from_secs(5), requeued.next())
            .await
            .expect("h7 re-queued")
            .unwrap();
        assert_eq!(got.name, "h7");
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert!(requeued.try_recv().is_err(), "only h7");
        let cost = checks() - before;
        assert!(
            (1..=4).contains(&cost),
            "the edit cost the ready pass {cost} checks, not the 1,000 hooks"
        );
        cancel.cancel();
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
