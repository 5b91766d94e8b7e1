//! The in-memory index of AgentHooks: every reconciled hook with its verdict, the set
//! published to dispatchers, and the snapshot version counter.
//!
//! Pure (no I/O, no clock): the reconciler feeds it with [`Index::apply`] and the watch
//! with [`Index::delete`] / [`Index::retain`]; [`Index::publish`] turns pending changes
//! into a new version. Tested by feeding it objects (linkerd policy-controller style).
//!
//! Rules:
//! - A hook is *published* when it is accepted and its breaker is not open (DESIGN
//!   "Sync", CONTRACT §6.2). Disabled hooks are published too: dispatchers filter them.
//! - Any change of the published set (a hook added, removed, or its published content —
//!   generation, spec, tenant, sealed headers — changed) marks the index dirty;
//!   [`Index::publish`] then bumps the version by exactly one and stamps every hook that
//!   changed with that version (`served_from`), which is what `Ready` waits for.
//! - Versions only grow, also across [`Index::reset`] (a new leader session of the same
//!   process keeps its epoch, so its versions must keep growing).
//! - A breaker, once open for a hook's (uid, generation, reset token) — by
//!   [`Index::trip`] (a dispatcher's report) or by [`Index::apply`] of a hook whose status
//!   says so — stays open for that triple: a reconcile that read the hook before its
//!   breaker status was written cannot put it back into a snapshot. A new generation or
//!   reset token (CONTRACT §6.3), or a new uid, ends it.

use std::collections::BTreeMap;

use agenthooks_crds::snapshot::SnapshotHook;

/// Identity of a hook in the index: `namespace/name`.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct HookKey {
    /// The hook's namespace.
    pub namespace: String,
    /// The hook's name.
    pub name: String,
}

impl HookKey {
    /// Builds a key.
    pub fn new(namespace: impl Into<String>, name: impl Into<String>) -> HookKey {
        HookKey {
            namespace: namespace.into(),
            name: name.into(),
        }
    }
}

impl std::fmt::Display for HookKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.namespace, self.name)
    }
}

/// Why a hook is not accepted: the `reason` and `message` of `Accepted=False`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    /// CamelCase reason, e.g. `TenantMismatch`, `SecretNotFound`, `SealKeyMissing`.
    pub reason: String,
    /// What is wrong, naming the field, for a person.
    pub message: String,
}

/// Outcome of validating a hook in its namespace.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Passed every rule; goes into snapshots unless its breaker is open.
    Accepted,
    /// Refused; never published.
    Refused(Refusal),
}

impl Verdict {
    /// True for [`Verdict::Accepted`].
    pub fn is_accepted(&self) -> bool {
        matches!(self, Verdict::Accepted)
    }
}

/// One reconciled hook, as the reconciler hands it to the index.
#[derive(Debug, Clone, PartialEq)]
pub struct IndexedHook {
    /// What a dispatcher receives when the hook is published.
    pub hook: SnapshotHook,
    /// Validation outcome (including Secret and seal-key checks).
    pub verdict: Verdict,
    /// The breaker is open for this generation and reset token
    /// ([`crate::status::breaker_open`], or a trip recorded by [`Index::trip`]).
    pub breaker_open: bool,
    /// SHA-256 of each plain Secret value, parallel to `hook.sealed_headers`: lets a later
    /// reconcile keep the sealed string (random nonce) when the value did not change, so an
    /// unchanged Secret never bumps the snapshot version.
    pub secret_digests: Vec<[u8; 32]>,
}

impl IndexedHook {
    /// The key of this hook.
    pub fn key(&self) -> HookKey {
        HookKey::new(&self.hook.namespace, &self.hook.name)
    }

    /// Accepted and breaker closed.
    pub fn is_published(&self) -> bool {
        self.verdict.is_accepted() && !self.breaker_open
    }

    /// Same uid, generation and reset token: what a breaker's state is kept for.
    fn same_breaker_identity(&self, other: &IndexedHook) -> bool {
        self.hook.uid == other.hook.uid
            && self.hook.generation == other.hook.generation
            && self.hook.reset_token == other.hook.reset_token
    }
}

/// What [`Index::trip`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TripMatch {
    /// No hook under that key with that uid: the trip is ignored.
    Unknown,
    /// The hook is at another generation or reset token now: the trip is ignored.
    Stale,
    /// The breaker was already open (nothing changed).
    AlreadyOpen,
    /// Opened now; `published_changed` when that dropped the hook from the published set
    /// (the index is then dirty and wants a publish).
    Opened {
        /// The hook left the published set.
        published_changed: bool,
    },
}

#[derive(Debug, Clone)]
struct Entry {
    hook: IndexedHook,
    /// Version of the first snapshot holding this hook's current published content;
    /// `None` while that content is not yet published (or the hook is not published).
    served_from: Option<u64>,
}

/// Where a hook stands with respect to the published snapshots.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Publication {
    /// Refused: never published.
    NotAccepted,
    /// Accepted but left out because its breaker is open.
    BreakerOpen,
    /// Published from this snapshot version on (`None`: waiting for the next publish).
    Published {
        /// First snapshot version holding the hook's current content.
        served_from: Option<u64>,
    },
}

/// The index. See the module documentation for its rules.
#[derive(Debug, Default)]
pub struct Index {
    entries: BTreeMap<HookKey, Entry>,
    version: u64,
    dirty: bool,
}

impl Index {
    /// An empty index at version 0 with nothing pending.
    pub fn new() -> Index {
        Index::default()
    }

    /// The version of the last publish (0 before the first).
    pub fn version(&self) -> u64 {
        self.version
    }

    /// Whether changes wait for [`Index::publish`].
    pub fn is_dirty(&self) -> bool {
        self.dirty
    }

    /// Number of hooks (accepted or not).
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// No hooks at all.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Number of hooks in the published set.
    pub fn published_len(&self) -> usize {
        self.entries
            .values()
            .filter(|e| e.hook.is_published())
            .count()
    }

    /// The hook stored under `key`.
    pub fn get(&self, key: &HookKey) -> Option<&IndexedHook> {
        self.entries.get(key).map(|e| &e.hook)
    }

    /// Where the hook under `key` stands; `None` when the index does not hold it.
    pub fn publication(&self, key: &HookKey) -> Option<Publication> {
        let e = self.entries.get(key)?;
        Some(if !e.hook.verdict.is_accepted() {
            Publication::NotAccepted
        } else if e.hook.breaker_open {
            Publication::BreakerOpen
        } else {
            Publication::Published {
                served_from: e.served_from,
            }
        })
    }

    /// Stores `hook` (replacing what was under its key). Returns whether the published
    /// set changed (and so the index became dirty).
    ///
    /// A breaker open in the stored entry stays open when `hook` has the same uid,
    /// generation and reset token (see the module rules).
    pub fn apply(&mut self, mut hook: IndexedHook) -> bool {
        let key = hook.key();
        let old = self.entries.get(&key);
        if let Some(o) = old
            && o.hook.breaker_open
            && o.hook.same_breaker_identity(&hook)
        {
            hook.breaker_open = true;
        }
        let old_published = old.filter(|e| e.hook.is_published()).map(|e| &e.hook.hook);
        let new_published = hook.is_published().then_some(&hook.hook);
        let changed = old_published != new_published;
        let served_from = if changed {
            None
        } else {
            old.and_then(|e| e.served_from)
        };
        self.dirty |= changed;
        self.entries.insert(key, Entry { hook, served_from });
        changed
    }

    /// Opens the breaker of the hook under `key` when it has `uid`, `generation` and
    /// `reset_token` (a dispatcher's trip, CONTRACT §6.2). Opening drops the hook from the
    /// published set, so the next publish leaves it out of snapshots.
    pub fn trip(
        &mut self,
        key: &HookKey,
        uid: &str,
        generation: i64,
        reset_token: Option<&str>,
    ) -> TripMatch {
        let Some(e) = self.entries.get_mut(key).filter(|e| e.hook.hook.uid == uid) else {
            return TripMatch::Unknown;
        };
        if e.hook.hook.generation != generation || e.hook.hook.reset_token.as_deref() != reset_token
        {
            return TripMatch::Stale;
        }
        if e.hook.breaker_open {
            return TripMatch::AlreadyOpen;
        }
        let published_changed = e.hook.is_published();
        e.hook.breaker_open = true;
        e.served_from = None;
        self.dirty |= published_changed;
        TripMatch::Opened { published_changed }
    }

    /// Removes the hook under `key` if it has uid `uid` (`None`: whatever its uid), so a
    /// late deletion of an old object never removes its re-created namesake. Returns
    /// whether the published set changed.
    pub fn delete(&mut self, key: &HookKey, uid: Option<&str>) -> bool {
        let matches = self
            .entries
            .get(key)
            .is_some_and(|e| uid.is_none_or(|u| e.hook.hook.uid == u));
        if !matches {
            return false;
        }
        let removed = self.entries.remove(key).expect("checked above");
        let changed = removed.hook.is_published();
        self.dirty |= changed;
        changed
    }

    /// Keeps only the hooks for which `keep(key, uid)` holds (used after a re-list, when
    /// deletions may have been missed). Returns whether the published set changed.
    pub fn retain(&mut self, mut keep: impl FnMut(&HookKey, &str) -> bool) -> bool {
        let mut changed = false;
        self.entries.retain(|k, e| {
            let kept = keep(k, &e.hook.hook.uid);
            changed |= !kept && e.hook.is_published();
            kept
        });
        self.dirty |= changed;
        changed
    }

    /// Forgets every hook but keeps the version counter, and marks the index dirty so
    /// the next publish yields a new version (start of a leader session).
    pub fn reset(&mut self) {
        self.entries.clear();
        self.dirty = true;
    }

    /// If anything changed since the last publish: bumps the version by one, stamps the
    /// changed published hooks with it and returns it. Otherwise `None`.
    pub fn publish(&mut self) -> Option<u64> {
        if !self.dirty {
            return None;
        }
        self.version += 1;
        self.dirty = false;
        for e in self.entries.values_mut() {
            if e.hook.is_published() && e.served_from.is_none() {
                e.served_from = Some(self.version);
            }
        }
        Some(self.version)
    }

    /// The published hooks in resolution order (CONTRACT §3.2): priority descending,
    /// then creation time ascending, then namespace/name. Dispatchers re-sort; the fixed
    /// order only makes snapshots deterministic.
    pub fn published_hooks(&self) -> Vec<SnapshotHook> {
        let mut hooks: Vec<SnapshotHook> = self
            .entries
            .values()
            .filter(|e| e.hook.is_published())
            .map(|e| e.hook.hook.clone())
            .collect();
        hooks.sort_by(|a, b| {
            b.spec
                .priority
                .cmp(&a.spec.priority)
                .then_with(|| a.created_at.cmp(&b.created_at))
                .then_with(|| a.namespace.cmp(&b.namespace))
                .then_with(|| a.name.cmp(&b.name))
        });
        hooks
    }

    /// Every key with its uid and generation (for the ready pass).
    pub fn keys(&self) -> impl Iterator<Item = (&HookKey, &str, i64)> {
        self.entries
            .iter()
            .map(|(k, e)| (k, e.hook.hook.uid.as_str(), e.hook.hook.generation))
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use agenthooks_crds::AgentHookSpec;

    pub(crate) fn spec(priority: i32) -> AgentHookSpec {
        serde_json::from_value(serde_json::json!({
            "event": "pre_tool_use",
            "priority": priority,
            "handler": {"type": "http", "http": {"url": "https://policy.example.com/hook"}}
        }))
        .unwrap()
    }

    pub(crate) fn hook(ns: &str, name: &str, uid: &str, generation: i64) -> IndexedHook {
        IndexedHook {
            hook: SnapshotHook {
                uid: uid.into(),
                namespace: ns.into(),
                name: name.into(),
                generation,
                created_at: "2025-01-01T00:00:00Z".into(),
                namespace_tenant: ns.into(),
                spec: spec(0),
                sealed_headers: vec![],
                reset_token: None,
            },
            verdict: Verdict::Accepted,
            breaker_open: false,
            secret_digests: vec![],
        }
    }

    fn refused(mut h: IndexedHook) -> IndexedHook {
        h.verdict = Verdict::Refused(Refusal {
            reason: "TenantMismatch".into(),
            message: "spec.tenant: no".into(),
        });
        h
    }

    #[test]
    fn versions_grow_by_one_per_publish_and_only_on_change() {
        let mut idx = Index::new();
        assert_eq!(idx.publish(), None, "nothing pending at start");
        assert!(idx.apply(hook("a", "h1", "u1", 1)));
        assert!(idx.apply(hook("a", "h2", "u2", 1)));
        assert_eq!(
            idx.publish(),
            Some(1),
            "two changes, one publish, one version"
        );
        assert!(
            !idx.apply(hook("a", "h1", "u1", 1)),
            "same content is no change"
        );
        assert_eq!(idx.publish(), None);
        assert!(idx.apply(hook("a", "h1", "u1", 2)), "new generation");
        assert_eq!(idx.publish(), Some(2));
        assert!(idx.delete(&HookKey::new("a", "h2"), Some("u2")));
        assert_eq!(idx.publish(), Some(3));
        assert_eq!(idx.version(), 3);
    }

    #[test]
    fn served_from_marks_the_first_version_holding_the_current_content() {
        let mut idx = Index::new();
        let k1 = HookKey::new("a", "h1");
        let k2 = HookKey::new("a", "h2");
        idx.apply(hook("a", "h1", "u1", 1));
        assert_eq!(
            idx.publication(&k1),
            Some(Publication::Published { served_from: None })
        );
        idx.publish();
        idx.apply(hook("a", "h2", "u2", 1));
        idx.publish();
        assert_eq!(
            idx.publication(&k1),
            Some(Publication::Published {
                served_from: Some(1)
            })
        );
        assert_eq!(
            idx.publication(&k2),
            Some(Publication::Published {
                served_from: Some(2)
            })
        );
        // re-applying the same content keeps it
        idx.apply(hook("a", "h1", "u1", 1));
        assert_eq!(
            idx.publication(&k1),
            Some(Publication::Published {
                served_from: Some(1)
            })
        );
        // a new generation waits for the next publish
        idx.apply(hook("a", "h1", "u1", 2));
        assert_eq!(
            idx.publication(&k1),
            Some(Publication::Published { served_from: None })
        );
        idx.publish();
        assert_eq!(
            idx.publication(&k1),
            Some(Publication::Published {
                served_from: Some(3)
            })
        );
    }

    #[test]
    fn refused_and_breaker_open_hooks_are_not_published() {
        let mut idx = Index::new();
        assert!(
            !idx.apply(refused(hook("a", "bad", "u1", 1))),
            "a refused hook changes nothing published"
        );
        assert_eq!(idx.publish(), None);
        assert_eq!(
            idx.publication(&HookKey::new("a", "bad")),
            Some(Publication::NotAccepted)
        );
        assert!(idx.apply(hook("a", "bad", "u1", 2)), "fixed: now published");
        idx.publish();
        assert_eq!(idx.published_len(), 1);
        let mut open = hook("a", "bad", "u1", 2);
        open.breaker_open = true;
        assert!(idx.apply(open), "breaker open drops it");
        assert_eq!(idx.publish(), Some(2));
        assert!(idx.published_hooks().is_empty());
        assert_eq!(
            idx.publication(&HookKey::new("a", "bad")),
            Some(Publication::BreakerOpen)
        );
        assert!(
            !idx.delete(&HookKey::new("a", "bad"), None),
            "deleting an unpublished hook changes nothing published"
        );
        assert_eq!(idx.len(), 0);
    }

    #[test]
    fn a_trip_drops_the_hook_and_sticks_until_generation_or_token_change() {
        let mut idx = Index::new();
        let key = HookKey::new("a", "h");
        idx.apply(hook("a", "h", "u1", 2));
        idx.publish();
        assert_eq!(idx.trip(&key, "other", 2, None), TripMatch::Unknown);
        assert_eq!(
            idx.trip(&HookKey::new("a", "nope"), "u1", 2, None),
            TripMatch::Unknown
        );
        assert_eq!(idx.trip(&key, "u1", 1, None), TripMatch::Stale);
        assert_eq!(idx.trip(&key, "u1", 2, Some("x")), TripMatch::Stale);
        assert!(!idx.is_dirty(), "ignored trips change nothing");
        assert_eq!(
            idx.trip(&key, "u1", 2, None),
            TripMatch::Opened {
                published_changed: true
            }
        );
        assert_eq!(idx.trip(&key, "u1", 2, None), TripMatch::AlreadyOpen);
        assert_eq!(idx.publish(), Some(2));
        assert!(idx.published_hooks().is_empty());
        assert_eq!(idx.publication(&key), Some(Publication::BreakerOpen));

        // a reconcile that read the hook before its breaker status was written
        assert!(!idx.apply(hook("a", "h", "u1", 2)), "stays open");
        assert_eq!(idx.publication(&key), Some(Publication::BreakerOpen));

        // the reset annotation changed: back in
        let mut reset = hook("a", "h", "u1", 2);
        reset.hook.reset_token = Some("1".into());
        assert!(idx.apply(reset));
        assert_eq!(idx.publish(), Some(3));
        assert_eq!(idx.published_len(), 1);

        // tripped again at that token, then the spec changes: back in
        assert!(matches!(
            idx.trip(&key, "u1", 2, Some("1")),
            TripMatch::Opened { .. }
        ));
        let mut edited = hook("a", "h", "u1", 3);
        edited.hook.reset_token = Some("1".into());
        assert!(idx.apply(edited));
        assert_eq!(idx.published_len(), 1);
    }

    #[test]
    fn a_refused_hook_trip_changes_nothing_published() {
        let mut idx = Index::new();
        idx.apply(refused(hook("a", "h", "u1", 1)));
        assert_eq!(
            idx.trip(&HookKey::new("a", "h"), "u1", 1, None),
            TripMatch::Opened {
                published_changed: false
            }
        );
        assert!(!idx.is_dirty());
    }

    #[test]
    fn delete_of_an_old_uid_keeps_the_recreated_hook() {
        let mut idx = Index::new();
        idx.apply(hook("a", "h", "new-uid", 1));
        assert!(!idx.delete(&HookKey::new("a", "h"), Some("old-uid")));
        assert_eq!(idx.len(), 1);
        assert!(idx.delete(&HookKey::new("a", "h"), Some("new-uid")));
        assert!(idx.is_empty());
    }

    #[test]
    fn retain_prunes_and_reset_keeps_the_counter() {
        let mut idx = Index::new();
        idx.apply(hook("a", "h1", "u1", 1));
        idx.apply(hook("a", "h2", "u2", 1));
        idx.publish();
        assert!(idx.retain(|_, uid| uid == "u1"));
        assert_eq!(idx.len(), 1);
        assert_eq!(idx.publish(), Some(2));
        idx.reset();
        assert!(idx.is_empty());
        assert_eq!(
            idx.publish(),
            Some(3),
            "a reset always yields a new version"
        );
        assert_eq!(idx.publish(), None);
    }

    #[test]
    fn published_order_is_priority_then_age_then_name() {
        let mut idx = Index::new();
        let mut low = hook("b", "low", "u1", 1);
        low.hook.spec = spec(1);
        let mut high_new = hook("b", "high-new", "u2", 1);
        high_new.hook.spec = spec(100);
        high_new.hook.created_at = "2025-02-01T00:00:00Z".into();
        let mut high_old = hook("z", "high-old", "u3", 1);
        high_old.hook.spec = spec(100);
        let mut high_old_a = hook("a", "high-old", "u4", 1);
        high_old_a.hook.spec = spec(100);
        // insertion order must not matter
        for h in [low, high_new, high_old, high_old_a] {
            idx.apply(h);
        }
        let names: Vec<String> = idx
            .published_hooks()
            .iter()
            .map(|h| format!("{}/{}", h.namespace, h.name))
            .collect();
        assert_eq!(
            names,
            ["a/high-old", "z/high-old", "b/high-new", "b/low"],
            "priority desc, oldest first, then namespace/name"
        );
    }
}
