//! The in-memory index of AgentHooks: every reconciled hook with its verdict, the set
//! published to dispatchers, and the snapshot version counter.
//!
//! Pure (no I/O, no clock): the reconciler feeds it with [`Index::apply`] and the watch
//! with [`Index::delete`] / [`Index::retain`]; [`Index::publish`] turns pending changes
//! into a new version. Tested by feeding it objects (linkerd policy-controller style).
//!
//! Rules:
//! - A hook is *published* when it is accepted (DESIGN "Sync"), whatever its breakers:
//!   a hook whose breaker is open for some tenants stays in the snapshot and carries them
//!   in [`SnapshotHook::open_breakers`] (CONTRACT §6.2–6.3), so one tenant's faults never
//!   take a guard away from the others. Disabled hooks are published too: dispatchers
//!   filter them.
//! - Any change of the published set (a hook added, removed, or its published content —
//!   generation, spec, tenant, sealed headers, open breakers — changed) marks the index
//!   dirty; [`Index::publish`] then bumps the version by exactly one, so a trip or a close
//!   reaches every dispatcher within one sync. It stamps every hook whose content *apart
//!   from its open breakers* changed with that version (`served_from`), which is what
//!   `Ready` waits for: a trip or a close does not make `Ready` flap (`CircuitOpen` says
//!   which tenants are open).
//! - Versions only grow, also across [`Index::reset`] (a new leader session of the same
//!   process keeps its epoch, so its versions must keep growing).
//! - A tenant's breaker, once open for a hook's (uid, generation, reset token) — by
//!   [`Index::trip`] (a dispatcher's report, or the merged window) or by [`Index::apply`]
//!   of a hook whose status says so — stays open for that triple until [`Index::close`]
//!   (a probe answered) removes it: a reconcile that read the hook before its breaker
//!   status was written cannot undo a trip, and one that read it before a close was
//!   written cannot undo the close (the index remembers, per tenant, the newest trip a
//!   close ended). A new generation or reset token (CONTRACT §6.4), or a new uid, starts
//!   with the breakers its status shows for it: none, as a reset clears them.
//! - At most [`MAX_OPEN_TENANTS`] tenants are open per hook: a further trip is refused
//!   here ([`TripMatch::TooMany`]); the dispatchers' own breakers still open (and fail
//!   closed) for it locally.
//! - The index also holds the [`TenantMap`] (CONTRACT §9.3, [`crate::tenants`]): which
//!   namespace holds each tenant. The reconciler reads a hook's tenant from it, and a
//!   change of it ([`Index::set_tenants`]) marks the index dirty like a hook change, since
//!   every snapshot carries it (`tenants`).
//! - The index remembers which hooks' published content may have changed since the last
//!   publish (and whether the tenant map did): [`Index::publish_changes`] hands over
//!   those only, so a publish costs what changed, not the whole set
//!   ([`crate::snapshot_builder::SnapshotLog`] turns them into the next version and the
//!   deltas dispatchers apply). After [`Index::reset`] the next publish lists every
//!   published hook and says so ([`PublishedChanges::complete`]).

use std::collections::{BTreeMap, BTreeSet};

use agenthooks_crds::snapshot::{OpenBreaker, SnapshotHook};
use agenthooks_crds::tenancy::{NamespaceTenant, TenantMap};

use crate::status::DesiredCondition;

/// Most tenants whose breaker the index keeps open per hook (as `status.breaker.open`).
pub const MAX_OPEN_TENANTS: usize = 256;

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
    /// Passed every rule; goes into snapshots (with its open breakers).
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
    /// What a dispatcher receives when the hook is published. Its `open_breakers` are the
    /// tenants whose breaker is open for this generation and reset token
    /// ([`crate::status::breaker_open`], or trips recorded by [`Index::trip`]).
    pub hook: SnapshotHook,
    /// Validation outcome (including Secret and seal-key checks).
    pub verdict: Verdict,
    /// SHA-256 of each plain Secret value, parallel to `hook.sealed_headers`: lets a later
    /// reconcile keep the sealed string (random nonce) when the value did not change, so an
    /// unchanged Secret never bumps the snapshot version.
    pub secret_digests: Vec<[u8; 32]>,
    /// The `Accepted` condition for this verdict and spec
    /// ([`crate::status::accepted_condition_for`]), computed once by the reconcile: the
    /// ready pass compares it with the recorded status without compiling the matcher
    /// again for every hook on every pass.
    pub accepted: DesiredCondition,
}

impl IndexedHook {
    /// The key of this hook.
    pub fn key(&self) -> HookKey {
        HookKey::new(&self.hook.namespace, &self.hook.name)
    }

    /// Accepted (so in every snapshot, open breakers included).
    pub fn is_published(&self) -> bool {
        self.verdict.is_accepted()
    }

    /// The open breakers of the hook's current version, one per tenant, in tenant order.
    pub fn open_breakers(&self) -> &[OpenBreaker] {
        &self.hook.open_breakers
    }

    /// Same uid, generation and reset token: what a breaker's state is kept for.
    fn same_breaker_identity(&self, other: &IndexedHook) -> bool {
        self.hook.uid == other.hook.uid
            && self.hook.generation == other.hook.generation
            && self.hook.reset_token == other.hook.reset_token
    }

    /// Whether `generation` and `reset_token` are this hook's current ones.
    fn matches(&self, generation: i64, reset_token: Option<&str>) -> bool {
        self.hook.generation == generation && self.hook.reset_token.as_deref() == reset_token
    }
}

/// What [`Index::trip`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TripMatch {
    /// No hook under that key with that uid: the trip is ignored.
    Unknown,
    /// The hook is at another generation or reset token now: the trip is ignored.
    Stale,
    /// A probe already closed this trip (or a newer one) of the tenant: ignored.
    AlreadyClosed,
    /// The hook already has [`MAX_OPEN_TENANTS`] other tenants open: refused here.
    TooMany,
    /// The tenant's breaker was already open from this time or later (nothing changed).
    AlreadyOpen,
    /// Opened (or moved to a later trip) now; `published_changed` when that changed the
    /// published content (the hook is accepted; the index is then dirty and wants a
    /// publish).
    Opened {
        /// The published content changed.
        published_changed: bool,
    },
}

/// What [`Index::close`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CloseMatch {
    /// No hook under that key with that uid: ignored.
    Unknown,
    /// The hook is at another generation or reset token now: ignored.
    Stale,
    /// The tenant's breaker is not open (nothing changed).
    NotOpen,
    /// The tenant's breaker opened after the closed trip (a newer trip, `since` ms): it
    /// stays open.
    Newer {
        /// When the open breaker opened, ms since the epoch.
        since_ms: i64,
    },
    /// Closed now; `published_changed` as in [`TripMatch::Opened`].
    Closed {
        /// The published content changed.
        published_changed: bool,
    },
}

#[derive(Debug, Clone)]
struct Entry {
    hook: IndexedHook,
    /// Version of the first snapshot holding this hook's current published content (open
    /// breakers aside); `None` while that content is not yet published (or the hook is not
    /// published).
    served_from: Option<u64>,
    /// Per tenant, the newest `opened_at` (ms) a close ended for the current breaker
    /// identity: a trip or a status entry at or before it is over. At most
    /// [`MAX_OPEN_TENANTS`] (the oldest goes first).
    closed: BTreeMap<String, i64>,
}

impl Entry {
    fn remember_close(&mut self, tenant: &str, opened_at_ms: i64) {
        let at = self
            .closed
            .entry(tenant.to_string())
            .or_insert(opened_at_ms);
        *at = (*at).max(opened_at_ms);
        while self.closed.len() > MAX_OPEN_TENANTS {
            let oldest = self
                .closed
                .iter()
                .min_by_key(|(_, at)| **at)
                .map(|(t, _)| t.clone());
            match oldest {
                Some(t) => self.closed.remove(&t),
                None => break,
            };
        }
    }
}

/// Where a hook stands with respect to the published snapshots.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Publication {
    /// Refused: never published.
    NotAccepted,
    /// Published from this snapshot version on (`None`: waiting for the next publish),
    /// open breakers or not.
    Published {
        /// First snapshot version holding the hook's current content.
        served_from: Option<u64>,
    },
}

/// `hook` without its open breakers: what `served_from` (and `Ready`) follows.
fn content_sans_breakers(hook: &SnapshotHook) -> SnapshotHook {
    SnapshotHook {
        open_breakers: Vec::new(),
        ..hook.clone()
    }
}

/// `old` and `new` merged per tenant (the later `since` wins; at equal `since`, fail
/// closed if either does), leaving out what a close ended (`since <= closed[tenant]`);
/// old entries first when more than [`MAX_OPEN_TENANTS`]; in tenant order.
fn merge_open(
    old: &[OpenBreaker],
    new: &[OpenBreaker],
    closed: &BTreeMap<String, i64>,
) -> Vec<OpenBreaker> {
    let mut by_tenant: BTreeMap<&str, OpenBreaker> = BTreeMap::new();
    for b in old.iter().chain(new) {
        if closed.get(&b.tenant).is_some_and(|c| b.since_ms <= *c) {
            continue;
        }
        let full = by_tenant.len() >= MAX_OPEN_TENANTS;
        match by_tenant.get_mut(b.tenant.as_str()) {
            Some(cur) if cur.since_ms > b.since_ms => {}
            Some(cur) if cur.since_ms == b.since_ms => cur.fail_closed |= b.fail_closed,
            Some(cur) => *cur = b.clone(),
            None if !full => {
                by_tenant.insert(&b.tenant, b.clone());
            }
            None => {}
        }
    }
    by_tenant.into_values().collect()
}

/// What changed in the published set since the last publish: what
/// [`Index::publish_changes`] hands to the snapshot log.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct PublishedChanges {
    /// The new version.
    pub version: u64,
    /// Every hook whose published content may have changed, by key: `Some` with its
    /// content when it is published now, `None` when it is not (deleted, refused).
    pub hooks: Vec<(HookKey, Option<SnapshotHook>)>,
    /// The whole tenant map, when it changed.
    pub tenants: Option<Vec<NamespaceTenant>>,
    /// `hooks` holds every published hook, and whatever it does not hold is not
    /// published (the first publish after [`Index::reset`]).
    pub complete: bool,
    /// The hooks this publish stamped with `served_from = version`: their `Ready` waits
    /// for every live dispatcher to hold this version.
    pub stamped: Vec<HookKey>,
}

/// The index. See the module documentation for its rules.
#[derive(Debug, Default)]
pub struct Index {
    entries: BTreeMap<HookKey, Entry>,
    tenants: TenantMap,
    version: u64,
    dirty: bool,
    /// Keys whose published content may have changed since the last publish.
    changed: BTreeSet<HookKey>,
    /// The tenant map changed since the last publish.
    tenants_changed: bool,
    /// Every key counts as changed (since [`Index::reset`]).
    all_changed: bool,
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
        } else {
            Publication::Published {
                served_from: e.served_from,
            }
        })
    }

    /// Stores `hook` (replacing what was under its key). Returns whether the published
    /// set changed (and so the index became dirty).
    ///
    /// When the stored entry has the same uid, generation and reset token, its open
    /// breakers are kept and merged with `hook`'s, and status entries a close already
    /// ended are left out (see the module rules).
    pub fn apply(&mut self, mut hook: IndexedHook) -> bool {
        let key = hook.key();
        let old = self.entries.get(&key);
        let closed = old
            .filter(|o| o.hook.same_breaker_identity(&hook))
            .map(|o| o.closed.clone())
            .unwrap_or_default();
        let kept: &[OpenBreaker] = old
            .filter(|o| o.hook.same_breaker_identity(&hook))
            .map_or(&[], |o| o.hook.hook.open_breakers.as_slice());
        hook.hook.open_breakers = merge_open(kept, &hook.hook.open_breakers, &closed);
        let old_published = old.filter(|e| e.hook.is_published()).map(|e| &e.hook.hook);
        let new_published = hook.is_published().then_some(&hook.hook);
        let changed = old_published != new_published;
        let content_changed =
            old_published.map(content_sans_breakers) != new_published.map(content_sans_breakers);
        let served_from = if content_changed {
            None
        } else {
            old.and_then(|e| e.served_from)
        };
        self.dirty |= changed;
        if changed {
            self.changed.insert(key.clone());
        }
        self.entries.insert(
            key,
            Entry {
                hook,
                served_from,
                closed,
            },
        );
        changed
    }

    /// Opens `tenant`'s breaker of the hook under `key` from `since_ms` (ms since the
    /// epoch; `fail_closed`: the tripping run had an error, informational) when the hook has `uid`,
    /// `generation` and `reset_token` (a dispatcher's trip or the merged window's,
    /// CONTRACT §6.2). An entry of the tenant that opened later stays; one that opened
    /// earlier moves to this trip. The hook stays published: the next publish carries the
    /// open breaker to every dispatcher.
    #[allow(clippy::too_many_arguments)]
    pub fn trip(
        &mut self,
        key: &HookKey,
        uid: &str,
        generation: i64,
        reset_token: Option<&str>,
        tenant: &str,
        since_ms: i64,
        fail_closed: bool,
    ) -> TripMatch {
        let Some(e) = self.entries.get_mut(key).filter(|e| e.hook.hook.uid == uid) else {
            return TripMatch::Unknown;
        };
        if !e.hook.matches(generation, reset_token) {
            return TripMatch::Stale;
        }
        if e.closed.get(tenant).is_some_and(|c| since_ms <= *c) {
            return TripMatch::AlreadyClosed;
        }
        let open = &mut e.hook.hook.open_breakers;
        let full = open.len() >= MAX_OPEN_TENANTS;
        match open.iter_mut().find(|b| b.tenant == tenant) {
            Some(b)
                if b.since_ms > since_ms
                    || (b.since_ms == since_ms && (b.fail_closed || !fail_closed)) =>
            {
                return TripMatch::AlreadyOpen;
            }
            Some(b) if b.since_ms == since_ms => b.fail_closed = true,
            Some(b) => {
                b.since_ms = since_ms;
                b.fail_closed = fail_closed;
            }
            None if full => return TripMatch::TooMany,
            None => {
                let at = open.partition_point(|b| b.tenant.as_str() < tenant);
                open.insert(
                    at,
                    OpenBreaker {
                        tenant: tenant.to_string(),
                        since_ms,
                        fail_closed,
                    },
                );
            }
        }
        let published_changed = e.hook.is_published();
        self.dirty |= published_changed;
        if published_changed {
            self.changed.insert(key.clone());
        }
        TripMatch::Opened { published_changed }
    }

    /// Closes `tenant`'s breaker of the hook under `key` when the hook has `uid`,
    /// `generation` and `reset_token` and the breaker opened at or before `opened_at_ms`
    /// (the trip a dispatcher's half-open probe ended, CONTRACT §6.4); a breaker that
    /// opened later (a newer trip) stays open. Remembered, so a later trip or status entry
    /// at or before `opened_at_ms` cannot reopen it.
    pub fn close(
        &mut self,
        key: &HookKey,
        uid: &str,
        generation: i64,
        reset_token: Option<&str>,
        tenant: &str,
        opened_at_ms: i64,
    ) -> CloseMatch {
        let Some(e) = self.entries.get_mut(key).filter(|e| e.hook.hook.uid == uid) else {
            return CloseMatch::Unknown;
        };
        if !e.hook.matches(generation, reset_token) {
            return CloseMatch::Stale;
        }
        e.remember_close(tenant, opened_at_ms);
        let open = &mut e.hook.hook.open_breakers;
        let Some(at) = open.iter().position(|b| b.tenant == tenant) else {
            return CloseMatch::NotOpen;
        };
        if open[at].since_ms > opened_at_ms {
            return CloseMatch::Newer {
                since_ms: open[at].since_ms,
            };
        }
        open.remove(at);
        let published_changed = e.hook.is_published();
        self.dirty |= published_changed;
        if published_changed {
            self.changed.insert(key.clone());
        }
        CloseMatch::Closed { published_changed }
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
        if changed {
            self.changed.insert(key.clone());
        }
        changed
    }

    /// Keeps only the hooks for which `keep(key, uid)` holds (used after a re-list, when
    /// deletions may have been missed). Returns whether the published set changed.
    pub fn retain(&mut self, mut keep: impl FnMut(&HookKey, &str) -> bool) -> bool {
        let mut changed = false;
        let mut removed = Vec::new();
        self.entries.retain(|k, e| {
            let kept = keep(k, &e.hook.hook.uid);
            if !kept && e.hook.is_published() {
                changed = true;
                removed.push(k.clone());
            }
            kept
        });
        self.dirty |= changed;
        self.changed.extend(removed);
        changed
    }

    /// Forgets every hook and the tenant map but keeps the version counter, and marks
    /// the index dirty so the next publish yields a new version (start of a leader
    /// session).
    pub fn reset(&mut self) {
        self.entries.clear();
        self.tenants = TenantMap::default();
        self.dirty = true;
        self.changed.clear();
        self.all_changed = true;
        self.tenants_changed = true;
    }

    /// Marks every published hook and the tenant map as changed, so the next publish lists
    /// them all ([`PublishedChanges::complete`]): after a publish whose changes could not
    /// be taken.
    pub fn republish_all(&mut self) {
        self.dirty = true;
        self.all_changed = true;
        self.tenants_changed = true;
    }

    /// Which namespace holds each tenant, as last set.
    pub fn tenants(&self) -> &TenantMap {
        &self.tenants
    }

    /// Replaces the tenant map; returns the namespaces whose claim changed
    /// ([`crate::tenants::changed_namespaces`]). Any change marks the index dirty (the
    /// snapshot carries the map).
    pub fn set_tenants(&mut self, map: TenantMap) -> BTreeSet<String> {
        let changed = crate::tenants::changed_namespaces(&self.tenants, &map);
        if !changed.is_empty() {
            self.tenants = map;
            self.dirty = true;
            self.tenants_changed = true;
        }
        changed
    }

    /// Every namespace and its claim, sorted by namespace (the snapshot's `tenants`).
    pub fn published_tenants(&self) -> Vec<NamespaceTenant> {
        self.tenants.entries()
    }

    /// If anything changed since the last publish: bumps the version by one, stamps the
    /// changed published hooks with it and returns it. Otherwise `None`.
    pub fn publish(&mut self) -> Option<u64> {
        self.publish_changes().map(|c| c.version)
    }

    /// [`Index::publish`], handing over what changed: the hooks whose published content
    /// may have changed since the last publish (each with its content now, or `None`),
    /// the tenant map if it changed, and the hooks stamped with the new version. Costs
    /// what changed, except for the first publish after [`Index::reset`], which lists
    /// every published hook ([`PublishedChanges::complete`]).
    pub fn publish_changes(&mut self) -> Option<PublishedChanges> {
        if !self.dirty {
            return None;
        }
        self.version += 1;
        self.dirty = false;
        let version = self.version;
        let complete = std::mem::take(&mut self.all_changed);
        let keys: Vec<HookKey> = if complete {
            self.changed.clear();
            self.entries
                .iter()
                .filter(|(_, e)| e.hook.is_published())
                .map(|(k, _)| k.clone())
                .collect()
        } else {
            std::mem::take(&mut self.changed).into_iter().collect()
        };
        let mut hooks = Vec::with_capacity(keys.len());
        let mut stamped = Vec::new();
        for key in keys {
            let published = match self.entries.get_mut(&key) {
                Some(e) if e.hook.is_published() => {
                    if e.served_from.is_none() {
                        e.served_from = Some(version);
                        stamped.push(key.clone());
                    }
                    Some(e.hook.hook.clone())
                }
                _ => None,
            };
            hooks.push((key, published));
        }
        let tenants = std::mem::take(&mut self.tenants_changed).then(|| self.tenants.entries());
        Some(PublishedChanges {
            version,
            hooks,
            tenants,
            complete,
            stamped,
        })
    }

    /// The published hooks in resolution order (CONTRACT §3.2): priority descending,
    /// then creation time ascending, then namespace/name. Dispatchers re-sort; the fixed
    /// order only makes snapshots deterministic. Each carries its open breakers.
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
                open_breakers: vec![],
            },
            verdict: Verdict::Accepted,
            secret_digests: vec![],
            accepted: crate::status::accepted_condition(&Verdict::Accepted),
        }
    }

    fn refused(mut h: IndexedHook) -> IndexedHook {
        h.verdict = Verdict::Refused(Refusal {
            reason: "TenantMismatch".into(),
            message: "spec.tenant: no".into(),
        });
        h.accepted = crate::status::accepted_condition(&h.verdict);
        h
    }

    #[test]
    fn a_tenant_map_change_is_published_and_names_the_namespaces_it_moved() {
        use agenthooks_crds::tenancy::NamespaceClaim;
        let claim = |ns: &str, label: Option<&str>, at: &str| NamespaceClaim {
            namespace: ns.into(),
            label: label.map(Into::into),
            created_at: at.into(),
        };
        let (t1, t2) = ("2026-01-01T00:00:00Z", "2026-02-01T00:00:00Z");
        let mut idx = Index::new();
        let first = TenantMap::resolve(&[claim("tenant-acme", Some("acme"), t1)]);
        assert_eq!(
            idx.set_tenants(first.clone()),
            BTreeSet::from(["tenant-acme".to_string()])
        );
        assert!(idx.is_dirty());
        assert_eq!(idx.publish(), Some(1));
        assert!(
            idx.set_tenants(first).is_empty(),
            "the same map is no change"
        );
        assert_eq!(idx.publish(), None);
        let second = TenantMap::resolve(&[
            claim("tenant-acme", Some("acme"), t1),
            claim("team-b", Some("acme"), t2),
        ]);
        assert_eq!(
            idx.set_tenants(second),
            BTreeSet::from(["team-b".to_string()])
        );
        assert_eq!(idx.publish(), Some(2));
        let published = idx.published_tenants();
        assert_eq!(
            published,
            vec![
                NamespaceTenant {
                    namespace: "team-b".into(),
                    tenant: "acme".into(),
                    held_by: Some("tenant-acme".into()),
                },
                NamespaceTenant {
                    namespace: "tenant-acme".into(),
                    tenant: "acme".into(),
                    held_by: None,
                },
            ]
        );
        assert!(idx.tenants().tenant_of("team-b").is_err());
        idx.reset();
        assert!(
            idx.tenants().is_empty(),
            "a new session starts without a map"
        );
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
    fn refused_hooks_are_not_published() {
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
        assert!(idx.delete(&HookKey::new("a", "bad"), None));
        assert_eq!(idx.len(), 0);
    }

    fn open(tenant: &str, since_ms: i64, fail_closed: bool) -> OpenBreaker {
        OpenBreaker {
            tenant: tenant.into(),
            since_ms,
            fail_closed,
        }
    }

    #[test]
    fn a_trip_keeps_the_hook_published_with_that_tenant_open_only() {
        let mut idx = Index::new();
        let key = HookKey::new("a", "h");
        idx.apply(hook("a", "h", "u1", 2));
        assert_eq!(idx.publish(), Some(1));
        assert_eq!(
            idx.trip(&key, "other", 2, None, "ta", 10, false),
            TripMatch::Unknown
        );
        assert_eq!(
            idx.trip(&HookKey::new("a", "nope"), "u1", 2, None, "ta", 10, false),
            TripMatch::Unknown
        );
        assert_eq!(
            idx.trip(&key, "u1", 1, None, "ta", 10, false),
            TripMatch::Stale
        );
        assert_eq!(
            idx.trip(&key, "u1", 2, Some("x"), "ta", 10, false),
            TripMatch::Stale
        );
        assert!(!idx.is_dirty(), "ignored trips change nothing");
        assert_eq!(
            idx.trip(&key, "u1", 2, None, "ta", 10, false),
            TripMatch::Opened {
                published_changed: true
            }
        );
        assert_eq!(
            idx.trip(&key, "u1", 2, None, "ta", 10, false),
            TripMatch::AlreadyOpen
        );
        assert_eq!(
            idx.trip(&key, "u1", 2, None, "ta", 9, true),
            TripMatch::AlreadyOpen,
            "older trip"
        );
        assert_eq!(idx.publish(), Some(2), "a trip bumps the version");
        let hooks = idx.published_hooks();
        assert_eq!(hooks.len(), 1, "the hook stays in the snapshot");
        assert_eq!(hooks[0].open_breakers, [open("ta", 10, false)]);
        assert_eq!(
            idx.publication(&key),
            Some(Publication::Published {
                served_from: Some(1)
            }),
            "open breakers do not move served_from (Ready does not flap)"
        );
        // Same time, now failing closed; then a later trip of that tenant; then tenant b.
        assert!(matches!(
            idx.trip(&key, "u1", 2, None, "ta", 10, true),
            TripMatch::Opened { .. }
        ));
        assert!(matches!(
            idx.trip(&key, "u1", 2, None, "ta", 20, false),
            TripMatch::Opened { .. }
        ));
        assert!(matches!(
            idx.trip(&key, "u1", 2, None, "a-first", 15, true),
            TripMatch::Opened { .. }
        ));
        assert_eq!(idx.publish(), Some(3));
        assert_eq!(
            idx.get(&key).unwrap().open_breakers(),
            [open("a-first", 15, true), open("ta", 20, false)],
            "tenant order; a later trip replaces the earlier one"
        );
    }

    #[test]
    fn a_stale_reconcile_undoes_neither_a_trip_nor_a_close() {
        let mut idx = Index::new();
        let key = HookKey::new("a", "h");
        idx.apply(hook("a", "h", "u1", 2));
        idx.publish();
        idx.trip(&key, "u1", 2, None, "ta", 10, false);
        idx.publish();
        // A reconcile that read the hook before the trip's status was written.
        assert!(!idx.apply(hook("a", "h", "u1", 2)), "stays open");
        assert_eq!(
            idx.get(&key).unwrap().open_breakers(),
            [open("ta", 10, false)]
        );
        // A reconcile reading status with another tenant open adds it.
        let mut from_status = hook("a", "h", "u1", 2);
        from_status.hook.open_breakers = vec![open("tb", 5, true)];
        assert!(idx.apply(from_status));
        assert_eq!(
            idx.get(&key).unwrap().open_breakers(),
            [open("ta", 10, false), open("tb", 5, true)]
        );
        idx.publish();
        // A probe closes ta's trip.
        assert_eq!(
            idx.close(&key, "other", 2, None, "ta", 10),
            CloseMatch::Unknown
        );
        assert_eq!(idx.close(&key, "u1", 3, None, "ta", 10), CloseMatch::Stale);
        assert_eq!(
            idx.close(&key, "u1", 2, None, "tc", 10),
            CloseMatch::NotOpen
        );
        assert!(!idx.is_dirty());
        assert_eq!(
            idx.close(&key, "u1", 2, None, "ta", 9),
            CloseMatch::Newer { since_ms: 10 },
            "a close older than the trip"
        );
        assert_eq!(
            idx.close(&key, "u1", 2, None, "ta", 10),
            CloseMatch::Closed {
                published_changed: true
            }
        );
        assert_eq!(idx.publish(), Some(4), "a close bumps the version");
        assert_eq!(
            idx.get(&key).unwrap().open_breakers(),
            [open("tb", 5, true)]
        );
        // A reconcile that read the status before the close was written, and a late trip
        // report of the closed trip, do not reopen it; a newer trip does.
        let mut stale = hook("a", "h", "u1", 2);
        stale.hook.open_breakers = vec![open("ta", 10, false), open("tb", 5, true)];
        assert!(!idx.apply(stale));
        assert_eq!(
            idx.get(&key).unwrap().open_breakers(),
            [open("tb", 5, true)]
        );
        assert_eq!(
            idx.trip(&key, "u1", 2, None, "ta", 10, false),
            TripMatch::AlreadyClosed
        );
        assert!(matches!(
            idx.trip(&key, "u1", 2, None, "ta", 11, false),
            TripMatch::Opened { .. }
        ));
    }

    #[test]
    fn a_new_generation_reset_token_or_uid_starts_with_what_its_status_says() {
        let mut idx = Index::new();
        let key = HookKey::new("a", "h");
        idx.apply(hook("a", "h", "u1", 2));
        idx.trip(&key, "u1", 2, None, "ta", 10, false);
        idx.trip(&key, "u1", 2, None, "tb", 10, false);
        idx.close(&key, "u1", 2, None, "tb", 10);
        idx.publish();
        // The reset annotation changed: none open (status shows none for the new token).
        let mut reset = hook("a", "h", "u1", 2);
        reset.hook.reset_token = Some("1".into());
        assert!(idx.apply(reset.clone()));
        assert!(idx.get(&key).unwrap().open_breakers().is_empty());
        assert_eq!(
            idx.publication(&key),
            Some(Publication::Published { served_from: None })
        );
        // The closes of the old version are forgotten too: tb may trip at any time.
        assert!(matches!(
            idx.trip(&key, "u1", 2, Some("1"), "tb", 10, false),
            TripMatch::Opened { .. }
        ));
        // A spec edit: none open.
        let mut edited = hook("a", "h", "u1", 3);
        edited.hook.reset_token = Some("1".into());
        assert!(idx.apply(edited));
        assert!(idx.get(&key).unwrap().open_breakers().is_empty());
        // A re-created hook (new uid) with open breakers in its status (after a restart).
        let mut recreated = hook("a", "h", "u2", 1);
        recreated.hook.open_breakers = vec![open("tz", 1, false), open("ty", 2, true)];
        idx.apply(recreated);
        assert_eq!(
            idx.get(&key).unwrap().open_breakers(),
            [open("ty", 2, true), open("tz", 1, false)]
        );
    }

    #[test]
    fn open_tenants_are_capped() {
        let mut idx = Index::new();
        let key = HookKey::new("a", "h");
        idx.apply(hook("a", "h", "u1", 1));
        for i in 0..MAX_OPEN_TENANTS {
            let t = format!("t{i:03}");
            assert!(matches!(
                idx.trip(&key, "u1", 1, None, &t, 1, false),
                TripMatch::Opened { .. }
            ));
        }
        assert_eq!(
            idx.trip(&key, "u1", 1, None, "one-more", 1, false),
            TripMatch::TooMany
        );
        assert!(
            matches!(
                idx.trip(&key, "u1", 1, None, "t000", 2, false),
                TripMatch::Opened { .. }
            ),
            "an open tenant may still move on"
        );
        assert_eq!(
            idx.get(&key).unwrap().open_breakers().len(),
            MAX_OPEN_TENANTS
        );
        let mut many = hook("a", "h", "u2", 1);
        many.hook.open_breakers = (0..300)
            .map(|i| open(&format!("s{i:03}"), 1, false))
            .collect();
        idx.apply(many);
        assert_eq!(
            idx.get(&key).unwrap().open_breakers().len(),
            MAX_OPEN_TENANTS,
            "status entries too"
        );
    }

    #[test]
    fn a_refused_hook_trip_changes_nothing_published() {
        let mut idx = Index::new();
        idx.apply(refused(hook("a", "h", "u1", 1)));
        assert_eq!(
            idx.trip(&HookKey::new("a", "h"), "u1", 1, None, "t", 1, false),
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
