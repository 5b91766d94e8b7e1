use std::collections::BTreeMap;

use agenthooks_crds::snapshot::{Snapshot, SnapshotDelta, SnapshotHook, digest, format_digest};
use agenthooks_crds::tenancy::{NamespaceClaim, NamespaceTenant, TenantMap};

use super::*;
use crate::index::tests::hook;
use crate::index::{Index, IndexedHook};

fn tenants() -> Vec<NamespaceTenant> {
    vec![
        NamespaceTenant {
            namespace: "team-b".into(),
            tenant: "a".into(),
            held_by: Some("tenant-a".into()),
        },
        NamespaceTenant {
            namespace: "tenant-a".into(),
            tenant: "a".into(),
            held_by: None,
        },
    ]
}

/// A dispatcher's view of a set: hooks by `namespace/name`, and the tenant map.
#[derive(Debug, Clone, PartialEq, Default)]
struct View {
    version: u64,
    hooks: BTreeMap<(String, String), SnapshotHook>,
    tenants: Vec<NamespaceTenant>,
}

impl View {
    fn of(full: &Snapshot) -> View {
        View {
            version: full.version,
            hooks: full
                .hooks
                .iter()
                .map(|h| ((h.namespace.clone(), h.name.clone()), h.clone()))
                .collect(),
            tenants: full.tenants.clone(),
        }
    }

    /// Applies `delta` as the dispatcher's rules say: to its base only, a removal only of
    /// the uid held.
    fn apply(&self, delta: &SnapshotDelta) -> View {
        assert_eq!(delta.base, self.version, "a delta applies to its base only");
        let mut next = self.clone();
        next.version = delta.version;
        for r in &delta.removed {
            let held = next
                .hooks
                .remove(&(r.namespace.clone(), r.name.clone()))
                .expect("a removal names a hook held at the base");
            assert_eq!(held.uid, r.uid);
        }
        for h in &delta.hooks {
            next.hooks
                .insert((h.namespace.clone(), h.name.clone()), h.clone());
        }
        if let Some(t) = &delta.tenants {
            next.tenants = t.clone();
        }
        assert_eq!(next.hooks.len(), delta.hook_count);
        next
    }
}

fn full(log: &mut SnapshotLog) -> Snapshot {
    serde_json::from_slice(&log.full()).unwrap()
}

fn delta(log: &mut SnapshotLog, after: u64) -> SnapshotDelta {
    let (body, kind) = log.answer("ep", after, true);
    assert_eq!(kind, BodyKind::Delta, "from {after}");
    serde_json::from_slice(&body).unwrap()
}

fn publish(index: &mut Index, log: &mut SnapshotLog) -> Option<u64> {
    let changes = index.publish_changes()?;
    Some(log.publish(changes).unwrap().version)
}

#[test]
fn the_full_body_is_the_snapshot_json_with_its_digest() {
    let mut log = SnapshotLog::new("ep", "agenthooks-system");
    let hooks = vec![hook("tenant-a", "h", "u1", 2).hook];
    let p = log
        .publish(PublishedChanges {
            version: 7,
            hooks: vec![(HookKey::new("tenant-a", "h"), Some(hooks[0].clone()))],
            tenants: Some(tenants()),
            ..Default::default()
        })
        .unwrap();
    assert_eq!((p.epoch.as_str(), p.version, p.hooks), ("ep", 7, 1));
    let body = log.full();
    let back: Snapshot = serde_json::from_slice(&body).unwrap();
    assert_eq!(back.version, 7);
    assert_eq!(back.epoch, "ep");
    assert_eq!(back.master_namespace, "agenthooks-system");
    assert_eq!(back.hooks, hooks);
    assert_eq!(back.tenants, tenants());
    let json = serde_json::to_vec(&hooks[0]).unwrap();
    assert_eq!(back.digest, Some(format_digest(digest([&json[..]]))));
    let v: serde_json::Value = serde_json::from_slice(&body).unwrap();
    assert!(v.get("masterNamespace").is_some(), "camelCase on the wire");
    assert_eq!(v["hooks"][0]["namespaceTenant"], "tenant-a");
    assert_eq!(
        v["tenants"],
        serde_json::json!([
            {"namespace": "team-b", "tenant": "a", "heldBy": "tenant-a"},
            {"namespace": "tenant-a", "tenant": "a"},
        ])
    );
    assert_eq!(
        body.as_ptr(),
        log.full().as_ptr(),
        "assembled once per version"
    );
}

#[test]
fn a_delta_holds_what_changed_merged_per_hook() {
    let mut index = Index::new();
    let mut log = SnapshotLog::new("ep", "m");
    index.apply(hook("a", "keep", "u1", 1));
    index.apply(hook("a", "edit", "u2", 1));
    index.apply(hook("a", "drop", "u3", 1));
    assert_eq!(publish(&mut index, &mut log), Some(1));
    let at_1 = View::of(&full(&mut log));

    index.apply(hook("a", "edit", "u2", 2));
    index.delete(&HookKey::new("a", "drop"), None);
    index.apply(hook("a", "brief", "u4", 1));
    assert_eq!(publish(&mut index, &mut log), Some(2));
    index.delete(&HookKey::new("a", "brief"), None);
    index.apply(hook("a", "edit", "u2", 3));
    assert_eq!(publish(&mut index, &mut log), Some(3));

    let d = delta(&mut log, 1);
    assert_eq!((d.base, d.version, d.hook_count), (1, 3, 2));
    let names: Vec<(&str, i64)> = d
        .hooks
        .iter()
        .map(|h| (h.name.as_str(), h.generation))
        .collect();
    assert_eq!(
        names,
        [("edit", 3)],
        "the last content of each changed hook only"
    );
    assert_eq!(
        d.removed,
        [RemovedHook {
            namespace: "a".into(),
            name: "drop".into(),
            uid: "u3".into()
        }],
        "a hook added and removed since the base is not mentioned"
    );
    assert_eq!(d.tenants, None, "the tenant map did not change");
    let at_3 = full(&mut log);
    assert_eq!(at_1.apply(&d), View::of(&at_3));
    assert_eq!(d.digest, at_3.digest.unwrap());
}

#[test]
fn the_same_content_again_is_no_change_and_a_recreated_hook_replaces_its_namesake() {
    let mut log = SnapshotLog::new("ep", "m");
    let key = HookKey::new("a", "h");
    let h1 = hook("a", "h", "u1", 1).hook;
    log.publish(PublishedChanges {
        version: 1,
        hooks: vec![(key.clone(), Some(h1.clone()))],
        ..Default::default()
    })
    .unwrap();
    let before = full(&mut log).digest;
    log.publish(PublishedChanges {
        version: 2,
        hooks: vec![(key.clone(), Some(h1))],
        tenants: Some(Vec::new()),
        ..Default::default()
    })
    .unwrap();
    let d = delta(&mut log, 1);
    assert!(
        d.hooks.is_empty() && d.removed.is_empty() && d.tenants.is_none(),
        "{d:?}"
    );
    assert_eq!(Some(d.digest), before);

    // Deleted and created again under the same name (a new uid) between two polls.
    log.publish(PublishedChanges {
        version: 3,
        hooks: vec![(key.clone(), None)],
        ..Default::default()
    })
    .unwrap();
    log.publish(PublishedChanges {
        version: 4,
        hooks: vec![(key, Some(hook("a", "h", "u2", 1).hook))],
        ..Default::default()
    })
    .unwrap();
    let d = delta(&mut log, 2);
    assert!(
        d.removed.is_empty(),
        "the new one replaces the old by name: {d:?}"
    );
    assert_eq!(d.hooks[0].uid, "u2");
    let d = delta(&mut log, 3);
    assert_eq!(d.hooks[0].uid, "u2");
}

#[test]
fn a_complete_publish_drops_what_it_does_not_list() {
    let mut index = Index::new();
    let mut log = SnapshotLog::new("ep", "m");
    index.apply(hook("a", "h1", "u1", 1));
    index.apply(hook("a", "h2", "u2", 1));
    publish(&mut index, &mut log);
    // A new leader session of the same process: h2 was deleted while no one watched.
    index.reset();
    index.apply(hook("a", "h1", "u1", 1));
    assert_eq!(publish(&mut index, &mut log), Some(2));
    let d = delta(&mut log, 1);
    assert!(d.hooks.is_empty(), "h1 did not change: {d:?}");
    assert_eq!(d.removed.len(), 1);
    assert_eq!(d.removed[0].name, "h2");
    assert_eq!(full(&mut log).hooks.len(), 1);
}

#[test]
fn gaps_other_epochs_and_no_deltas_get_the_full_snapshot() {
    let mut log = SnapshotLog::with_history("ep", "m", 3);
    for v in 1..=6 {
        log.publish(PublishedChanges {
            version: v,
            hooks: vec![(
                HookKey::new("a", format!("h{v}")),
                Some(hook("a", &format!("h{v}"), &format!("u{v}"), 1).hook),
            )],
            ..Default::default()
        })
        .unwrap();
    }
    assert_eq!(log.oldest_base(), 3, "versions 4, 5 and 6 are kept");
    assert_eq!(log.answer("ep", 3, true).1, BodyKind::Delta);
    assert_eq!(log.answer("ep", 5, true).1, BodyKind::Delta);
    assert_eq!(log.answer("ep", 2, true).1, BodyKind::Snapshot, "a gap");
    assert_eq!(log.answer("ep", 0, true).1, BodyKind::Snapshot);
    assert_eq!(log.answer("other", 5, true).1, BodyKind::Snapshot);
    assert_eq!(log.answer("ep", 5, false).1, BodyKind::Snapshot);
    assert_eq!(
        log.answer("ep", 9, true).1,
        BodyKind::Snapshot,
        "a version not yet published"
    );
    // A version the log never took (the index moved on after a failed publish): no delta
    // spans it.
    log.publish(PublishedChanges {
        version: 8,
        ..Default::default()
    })
    .unwrap();
    assert_eq!(log.oldest_base(), 7);
    assert_eq!(log.answer("ep", 6, true).1, BodyKind::Snapshot);
}

#[test]
fn the_history_is_bounded_by_hook_changes_too() {
    let mut log = SnapshotLog::new("ep", "m");
    let batch = |v: u64, n: usize| PublishedChanges {
        version: v,
        hooks: (0..n)
            .map(|i| {
                let name = format!("h{v}-{i}");
                (
                    HookKey::new("a", &name),
                    Some(hook("a", &name, &name, 1).hook),
                )
            })
            .collect(),
        ..Default::default()
    };
    log.publish(batch(1, MAX_HISTORY_HOOKS / 2)).unwrap();
    log.publish(batch(2, MAX_HISTORY_HOOKS / 2)).unwrap();
    assert_eq!(log.oldest_base(), 0);
    log.publish(batch(3, 1)).unwrap();
    assert_eq!(log.oldest_base(), 1, "version 1's changes went first");
    log.publish(batch(4, MAX_HISTORY_HOOKS + 1)).unwrap();
    assert_eq!(
        log.oldest_base(),
        3,
        "the newest version is kept whatever its size"
    );
}

/// A small deterministic generator (xorshift64*).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// Random edits, deletions, refusals, trips, closes, tenant maps and session resets: after
/// every publish, the delta from every version still kept, applied to what the full
/// snapshot of that version held, gives the full snapshot of the new version, digest
/// included; the index's published hooks are the full snapshot's.
#[test]
fn deltas_from_every_kept_base_replay_to_the_full_snapshot() {
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let mut index = Index::new();
    let mut log = SnapshotLog::with_history("ep", "m", 8);
    let mut views: BTreeMap<u64, View> = BTreeMap::new();
    let mut generations: BTreeMap<u64, i64> = BTreeMap::new();
    let mut uids: BTreeMap<u64, u64> = BTreeMap::new();
    for step in 0..600 {
        for _ in 0..=rng.below(4) {
            let n = rng.below(12);
            let name = format!("h{n}");
            let key = HookKey::new("a", &name);
            let uid = format!("u{n}-{}", uids.get(&n).copied().unwrap_or(0));
            let generation = *generations.entry(n).or_insert(1);
            match rng.below(9) {
                0 | 1 => {
                    let g = generations.entry(n).or_insert(1);
                    *g += 1;
                    index.apply(hook("a", &name, &uid, *g));
                }
                2 => {
                    index.delete(&key, None);
                    *uids.entry(n).or_insert(0) += 1;
                }
                3 => {
                    let mut h: IndexedHook = hook("a", &name, &uid, generation);
                    h.verdict = crate::index::Verdict::Refused(crate::index::Refusal {
                        reason: "X".into(),
                        message: "x".into(),
                    });
                    index.apply(h);
                }
                4 => {
                    index.trip(
                        &key,
                        &uid,
                        generation,
                        None,
                        &format!("t{}", rng.below(3)),
                        step as i64,
                        false,
                    );
                }
                5 => {
                    index.close(
                        &key,
                        &uid,
                        generation,
                        None,
                        &format!("t{}", rng.below(3)),
                        step as i64,
                    );
                }
                6 => {
                    let claim = NamespaceClaim {
                        namespace: format!("ns{}", rng.below(3)),
                        label: Some(format!("t{}", rng.below(2))),
                        created_at: format!("2026-01-0{}T00:00:00Z", 1 + rng.below(3)),
                    };
                    index.set_tenants(TenantMap::resolve(&[claim]));
                }
                7 if rng.below(10) == 0 => {
                    // A new leader session: the index is rebuilt from what is there.
                    let kept: Vec<IndexedHook> = (0..12)
                        .filter_map(|i| index.get(&HookKey::new("a", format!("h{i}"))).cloned())
                        .filter(|_| rng.below(4) > 0)
                        .collect();
                    index.reset();
                    for h in kept {
                        index.apply(h);
                    }
                }
                _ => {
                    index.apply(hook("a", &name, &uid, generation));
                }
            }
        }
        let Some(version) = publish(&mut index, &mut log) else {
            continue;
        };
        let now = full(&mut log);
        assert_eq!(now.hooks, {
            let mut want = index.published_hooks();
            want.sort_by(|a, b| (&a.namespace, &a.name).cmp(&(&b.namespace, &b.name)));
            want
        });
        assert_eq!(now.tenants, index.published_tenants());
        let jsons: Vec<Vec<u8>> = now
            .hooks
            .iter()
            .map(|h| serde_json::to_vec(h).unwrap())
            .collect();
        assert_eq!(
            now.digest,
            Some(format_digest(digest(jsons.iter().map(Vec::as_slice))))
        );
        let want = View::of(&now);
        for (base, view) in views.range(log.oldest_base()..) {
            let d = delta(&mut log, *base);
            assert_eq!(
                &view.apply(&d),
                &want,
                "step {step}: from {base} to {version}"
            );
            assert_eq!(Some(&d.digest), now.digest.as_ref());
        }
        views.insert(version, want);
    }
    assert!(log.version() > 100, "enough publishes: {}", log.version());
}

#[tokio::test(start_paused = true)]
async fn the_first_change_after_a_quiet_spell_is_published_at_once_the_next_ones_together() {
    use crate::shared::lock;
    let shared = Shared::new(
        crate::shared::tests::config(),
        crate::metrics::Metrics::new().unwrap(),
    );
    shared.set_leader(true);
    shared.set_synced(true);
    let cancel = CancellationToken::new();
    tokio::spawn(run_publisher(shared.clone(), cancel.clone()));
    let published = || {
        let p = shared.snapshots.borrow();
        (p.version, p.hooks)
    };
    let t0 = tokio::time::Instant::now();
    lock(&shared.index).apply(hook("a", "h1", "u1", 1));
    shared.publish_requested.notify_one();
    tokio::time::sleep(std::time::Duration::from_millis(1)).await;
    assert_eq!(published(), (1, 1), "at once");
    // Two more changes right after: published together, PUBLISH_DEBOUNCE after the first.
    lock(&shared.index).apply(hook("a", "h2", "u2", 1));
    shared.publish_requested.notify_one();
    lock(&shared.index).apply(hook("a", "h3", "u3", 1));
    shared.publish_requested.notify_one();
    tokio::time::sleep(PUBLISH_DEBOUNCE / 2).await;
    assert_eq!(published(), (1, 1), "not before the debounce");
    tokio::time::sleep(PUBLISH_DEBOUNCE).await;
    assert_eq!(published(), (2, 3), "both in one version");
    assert!(t0.elapsed() < PUBLISH_DEBOUNCE * 2);
    cancel.cancel();
}
