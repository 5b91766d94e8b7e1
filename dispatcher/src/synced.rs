//! The operator's hooks as this dispatcher holds them: the set it serves, built from the
//! last snapshot and the deltas since, and per hook (keyed by `namespace/name`) what a
//! delta needs checked — its uid, the digest of its JSON as received, and where the set
//! keeps it ([`agenthooks_crds::snapshot`] describes both bodies).
//!
//! Rules ([`SyncedSet::absorb`]):
//! - A complete snapshot replaces everything held: the set is built anew with
//!   [`HookSet::build`], reusing every unchanged compiled hook of the set held before
//!   (its regexes, CEL programs, breaker state and counters).
//! - A delta applies only to the version it names as `base` of the epoch held; a removal
//!   only to the hook of that `namespace/name` *and uid*; and only if the result has the
//!   count and digest the delta names. Whatever fails, nothing held changes: the
//!   dispatcher keeps serving its last set and asks for a complete snapshot. It never
//!   serves a half-applied set. A delta that applies changes the set with
//!   [`HookSet::apply`]: only the lists of the hooks it names are made anew.
//! - A digest is taken over each hook's JSON exactly as received. A complete snapshot
//!   whose digest does not match the one computed here is still taken (it is complete),
//!   but deltas are not asked for anymore ([`SyncedSet::takes_deltas`]): they could not
//!   be checked.
//!
//! Each hook is held once: in the set served (its source and compiled form). What is
//! held beside it per hook is its uid, digest and [`Slot`].

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use agenthooks_crds::Edition;
use agenthooks_crds::snapshot::{RemovedHook, SnapshotHook, format_digest, hook_digest};
use agenthooks_crds::tenancy::{NamespaceTenant, TenantMap};
use serde::Deserialize;
use serde_json::value::RawValue;

use crate::hookset::{HookSet, RejectedHook, Slot};

/// What is held of one hook beside the set: its uid, the digest of its JSON as received,
/// and where the set keeps it.
#[derive(Debug, Clone)]
struct Held {
    uid: String,
    digest: u64,
    slot: Slot,
}

/// What a 200 answer of the operator was.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Absorbed {
    /// A complete snapshot, taken.
    Snapshot,
    /// A delta, applied.
    Delta,
}

impl Absorbed {
    /// The `body` label of `agenthooks_sync_updates_total`.
    pub fn label(self) -> &'static str {
        match self {
            Absorbed::Snapshot => "snapshot",
            Absorbed::Delta => "delta",
        }
    }
}

/// Why an answer of the operator was not taken (nothing held changed).
#[derive(Debug, thiserror::Error)]
pub enum SyncError {
    /// The body is not a snapshot or a delta.
    #[error("unreadable {body}: {source}")]
    Unreadable {
        /// `snapshot` or `delta`, as far as it could tell.
        body: &'static str,
        /// The JSON error.
        #[source]
        source: serde_json::Error,
    },
    /// A complete snapshot without `masterNamespace`.
    #[error("snapshot without masterNamespace")]
    NoMasterNamespace,
    /// A delta for another version or epoch than the one held.
    #[error("delta from {epoch}/{base}, but this dispatcher holds {held_epoch}/{held_version}")]
    WrongBase {
        /// The delta's epoch.
        epoch: String,
        /// The delta's base.
        base: u64,
        /// The epoch held.
        held_epoch: String,
        /// The version held.
        held_version: u64,
    },
    /// A delta without the count and digest of its result.
    #[error("delta without hookCount and digest")]
    NoDigest,
    /// A delta removes a hook this dispatcher does not hold (or holds with another uid).
    #[error("delta removes {namespace}/{name} (uid {uid}), which is not held")]
    UnknownRemoval {
        /// The hook's namespace.
        namespace: String,
        /// The hook's name.
        name: String,
        /// The uid the delta names.
        uid: String,
    },
    /// A delta names a hook twice.
    #[error("delta names {0} twice")]
    Duplicate(String),
    /// The result of a delta is not the set the operator holds.
    #[error(
        "the delta would leave {count} hooks with digest {digest}; the operator's set has {want_count} with digest {want_digest}"
    )]
    Mismatch {
        /// Hooks after the delta.
        count: usize,
        /// Their digest.
        digest: String,
        /// The operator's count.
        want_count: usize,
        /// The operator's digest.
        want_digest: String,
    },
}

impl SyncError {
    /// The `body` label of `agenthooks_sync_updates_total` for the refused answer.
    pub fn body_label(&self) -> &'static str {
        match self {
            SyncError::Unreadable { body, .. } => body,
            SyncError::NoMasterNamespace => "snapshot",
            _ => "delta",
        }
    }
}

/// Both bodies of a poll, read in one pass: `base` tells a delta from a snapshot.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Wire<'a> {
    epoch: String,
    version: u64,
    #[serde(default)]
    base: Option<u64>,
    #[serde(default)]
    master_namespace: Option<String>,
    #[serde(default, borrow)]
    hooks: Vec<&'a RawValue>,
    #[serde(default)]
    removed: Vec<RemovedHook>,
    #[serde(default)]
    tenants: Option<Vec<NamespaceTenant>>,
    #[serde(default)]
    hook_count: Option<usize>,
    #[serde(default)]
    digest: Option<String>,
}

fn key(namespace: &str, name: &str) -> String {
    format!("{namespace}/{name}")
}

/// One hook of a body, parsed: its key, its source, and the digest of its JSON as
/// received.
struct Parsed {
    key: String,
    source: SnapshotHook,
    digest: u64,
}

/// Each hook of a body, parsed.
fn parse_hooks(raw: &[&RawValue], body: &'static str) -> Result<Vec<Parsed>, SyncError> {
    raw.iter()
        .map(|r| {
            let source: SnapshotHook = serde_json::from_str(r.get())
                .map_err(|source| SyncError::Unreadable { body, source })?;
            Ok(Parsed {
                key: key(&source.namespace, &source.name),
                digest: hook_digest(r.get().as_bytes()),
                source,
            })
        })
        .collect()
}

/// What taking an answer made ([`SyncedSet::absorb`]).
#[derive(Debug)]
pub struct Taken {
    /// Which body it was.
    pub absorbed: Absorbed,
    /// The set to serve now (also kept by the [`SyncedSet`]).
    pub set: Arc<HookSet>,
    /// The hooks of the answer this dispatcher could not load (the set keeps them as
    /// unavailable): every one of a snapshot, the added or changed ones of a delta.
    pub rejected: Vec<RejectedHook>,
}

/// The hooks held from the operator (module documentation).
#[derive(Debug)]
pub struct SyncedSet {
    /// This dispatcher's edition: every set is built with it.
    edition: Edition,
    epoch: String,
    version: u64,
    hooks: HashMap<String, Held>,
    /// The set built from what is held; `None` before the first snapshot.
    set: Option<Arc<HookSet>>,
    digest: u64,
    /// The last complete snapshot's digest matched ours (or it had none and no delta
    /// came since): deltas can be checked.
    digests_agree: bool,
}

impl SyncedSet {
    /// Nothing held (epoch empty, version 0); sets will be built with `edition`.
    pub fn new(edition: Edition) -> SyncedSet {
        SyncedSet {
            edition,
            epoch: String::new(),
            version: 0,
            hooks: HashMap::new(),
            set: None,
            digest: 0,
            digests_agree: false,
        }
    }

    /// The epoch held (empty before the first snapshot).
    pub fn epoch(&self) -> &str {
        &self.epoch
    }

    /// The version held.
    pub fn version(&self) -> u64 {
        self.version
    }

    /// Number of hooks held (the unavailable ones included).
    pub fn len(&self) -> usize {
        self.hooks.len()
    }

    /// No hook held.
    pub fn is_empty(&self) -> bool {
        self.hooks.is_empty()
    }

    /// The digest of the hooks held ([`agenthooks_crds::snapshot::digest`]).
    pub fn digest(&self) -> u64 {
        self.digest
    }

    /// Whether to ask the operator for deltas: a complete snapshot was taken and its
    /// digest matched the one computed here.
    pub fn takes_deltas(&self) -> bool {
        self.digests_agree
    }

    /// The set built from what is held (`None` before the first snapshot).
    pub fn set(&self) -> Option<&Arc<HookSet>> {
        self.set.as_ref()
    }

    /// Takes a 200 answer of the operator: a complete snapshot replaces what is held; a
    /// delta is applied if it applies to exactly what is held and leaves the set the
    /// operator names (count and digest). Returns the set to serve. On any error nothing
    /// held changed.
    pub fn absorb(&mut self, body: &[u8]) -> Result<Taken, SyncError> {
        let wire: Wire = serde_json::from_slice(body).map_err(|source| SyncError::Unreadable {
            body: "snapshot",
            source,
        })?;
        let (absorbed, rejected) = match wire.base {
            None => (Absorbed::Snapshot, self.take_snapshot(wire)?),
            Some(base) => (Absorbed::Delta, self.apply_delta(base, wire)?),
        };
        Ok(Taken {
            absorbed,
            set: Arc::clone(self.set.as_ref().expect("a set was built")),
            rejected,
        })
    }

    fn take_snapshot(&mut self, wire: Wire) -> Result<Vec<RejectedHook>, SyncError> {
        let master_namespace = wire.master_namespace.ok_or(SyncError::NoMasterNamespace)?;
        // One hook per key (the last one sent, should a key come twice).
        let parsed: HashMap<String, Parsed> = parse_hooks(&wire.hooks, "snapshot")?
            .into_iter()
            .map(|p| (p.key.clone(), p))
            .collect();
        let digest = parsed
            .values()
            .fold(0u64, |acc, h| acc.wrapping_add(h.digest));
        let digests_agree = match &wire.digest {
            Some(d) if *d == format_digest(digest) => true,
            Some(d) => {
                tracing::warn!(
                    operator = %d,
                    computed = %format_digest(digest),
                    "the snapshot's digest is not the one computed here: taken as it is complete, but deltas cannot be checked and are not asked for"
                );
                false
            }
            None => false,
        };
        let mut held: HashMap<String, (String, u64)> = HashMap::with_capacity(parsed.len());
        let mut sources = Vec::with_capacity(parsed.len());
        for (k, p) in parsed {
            held.insert(k, (p.source.uid.clone(), p.digest));
            sources.push(p.source);
        }
        let (mut set, rejected) = HookSet::build(
            sources,
            &master_namespace,
            self.edition,
            wire.version,
            self.set.as_deref(),
        );
        set.tenants = Arc::new(TenantMap::from_entries(wire.tenants.unwrap_or_default()));
        let mut slots: HashMap<&str, Slot> = set
            .iter()
            .map(|h| (h.key.as_str(), h.slot()))
            .chain(
                set.unavailable()
                    .iter()
                    .map(|u| (u.key.as_str(), Slot::Unavailable)),
            )
            .collect();
        let hooks = held
            .into_iter()
            .map(|(k, (uid, digest))| {
                let slot = slots.remove(k.as_str()).expect("the set holds every hook");
                (k, Held { uid, digest, slot })
            })
            .collect();
        *self = SyncedSet {
            edition: self.edition,
            epoch: wire.epoch,
            version: wire.version,
            hooks,
            set: Some(Arc::new(set)),
            digest,
            digests_agree,
        };
        Ok(rejected)
    }

    fn apply_delta(&mut self, base: u64, wire: Wire) -> Result<Vec<RejectedHook>, SyncError> {
        let Some(set) = self
            .set
            .as_ref()
            .filter(|_| wire.epoch == self.epoch && base == self.version && !self.epoch.is_empty())
        else {
            return Err(SyncError::WrongBase {
                epoch: wire.epoch,
                base,
                held_epoch: self.epoch.clone(),
                held_version: self.version,
            });
        };
        let (Some(want_count), Some(want_digest)) = (wire.hook_count, wire.digest) else {
            return Err(SyncError::NoDigest);
        };
        let upserts = parse_hooks(&wire.hooks, "delta")?;
        // The result's count and digest, computed before anything changes.
        let mut count = self.hooks.len();
        let mut digest = self.digest;
        let mut named = HashSet::new();
        // Every hook leaving the set (removed or replaced), with its slot.
        let mut leaving: Vec<(&str, &Slot)> = Vec::new();
        let removed_keys: Vec<String> = wire
            .removed
            .iter()
            .map(|r| key(&r.namespace, &r.name))
            .collect();
        for (r, k) in wire.removed.iter().zip(&removed_keys) {
            match self.hooks.get_key_value(k) {
                Some((k, h)) if h.uid == r.uid && named.insert(k.as_str()) => {
                    count -= 1;
                    digest = digest.wrapping_sub(h.digest);
                    leaving.push((k, &h.slot));
                }
                Some((k, h)) if h.uid == r.uid => return Err(SyncError::Duplicate(k.clone())),
                _ => {
                    return Err(SyncError::UnknownRemoval {
                        namespace: r.namespace.clone(),
                        name: r.name.clone(),
                        uid: r.uid.clone(),
                    });
                }
            }
        }
        for p in &upserts {
            if !named.insert(p.key.as_str()) {
                return Err(SyncError::Duplicate(p.key.clone()));
            }
            match self.hooks.get_key_value(&p.key) {
                Some((k, old)) => {
                    digest = digest.wrapping_sub(old.digest);
                    leaving.push((k, &old.slot));
                }
                None => count += 1,
            }
            digest = digest.wrapping_add(p.digest);
        }
        if count != want_count || format_digest(digest) != want_digest {
            return Err(SyncError::Mismatch {
                count,
                digest: format_digest(digest),
                want_count,
                want_digest,
            });
        }
        let (keys, sources): (Vec<(String, String, u64)>, Vec<SnapshotHook>) = upserts
            .into_iter()
            .map(|p| ((p.key, p.source.uid.clone(), p.digest), p.source))
            .unzip();
        let mut applied = set.apply(&leaving, sources, self.edition, wire.version);
        if let Some(t) = wire.tenants {
            applied.set.tenants = Arc::new(TenantMap::from_entries(t));
        }
        for k in &removed_keys {
            self.hooks.remove(k);
        }
        for ((k, uid, digest), slot) in keys.into_iter().zip(applied.slots) {
            self.hooks.insert(k, Held { uid, digest, slot });
        }
        self.set = Some(Arc::new(applied.set));
        self.digest = digest;
        self.version = wire.version;
        Ok(applied.rejected)
    }
}

#[cfg(test)]
mod tests;
