//! The operator's hooks as this dispatcher holds them: every hook of the last snapshot in
//! the snapshot's own form, keyed by `namespace/name`, so that a delta touching a few
//! hooks changes those only ([`agenthooks_crds::snapshot`] describes both bodies).
//!
//! Rules ([`SyncedSet::absorb`]):
//! - A complete snapshot replaces everything held.
//! - A delta applies only to the version it names as `base` of the epoch held; a removal
//!   only to the hook of that `namespace/name` *and uid*; and only if the result has the
//!   count and digest the delta names. Whatever fails, nothing held changes: the
//!   dispatcher keeps serving its last set and asks for a complete snapshot. It never
//!   serves a half-applied set.
//! - A digest is taken over each hook's JSON exactly as received. A complete snapshot
//!   whose digest does not match the one computed here is still taken (it is complete),
//!   but deltas are not asked for anymore ([`SyncedSet::takes_deltas`]): they could not
//!   be checked.
//!
//! [`SyncedSet::build`] turns what is held into a [`HookSet`] with
//! [`HookSet::build`], which reuses every unchanged compiled hook of the set served before
//! (its regexes, CEL programs, breaker state and counters).

use std::collections::HashMap;

use agenthooks_crds::Edition;
use agenthooks_crds::snapshot::{RemovedHook, SnapshotHook, format_digest, hook_digest};
use agenthooks_crds::tenancy::{NamespaceTenant, TenantMap};
use serde::Deserialize;
use serde_json::value::RawValue;

use crate::hookset::{HookSet, RejectedHook};

/// One hook held: the snapshot's description of it, and the digest of its JSON as
/// received.
#[derive(Debug, Clone)]
struct Held {
    source: SnapshotHook,
    digest: u64,
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

/// Each hook of a body, parsed, with its key and the digest of its JSON as received.
fn parse_hooks(raw: &[&RawValue], body: &'static str) -> Result<Vec<(String, Held)>, SyncError> {
    raw.iter()
        .map(|r| {
            let source: SnapshotHook = serde_json::from_str(r.get())
                .map_err(|source| SyncError::Unreadable { body, source })?;
            Ok((
                key(&source.namespace, &source.name),
                Held {
                    digest: hook_digest(r.get().as_bytes()),
                    source,
                },
            ))
        })
        .collect()
}

/// The hooks held from the operator (module documentation).
#[derive(Debug, Clone, Default)]
pub struct SyncedSet {
    epoch: String,
    version: u64,
    master_namespace: String,
    hooks: HashMap<String, Held>,
    tenants: Vec<NamespaceTenant>,
    digest: u64,
    /// The last complete snapshot's digest matched ours (or it had none and no delta
    /// came since): deltas can be checked.
    digests_agree: bool,
}

impl SyncedSet {
    /// Nothing held (epoch empty, version 0).
    pub fn new() -> SyncedSet {
        SyncedSet::default()
    }

    /// The epoch held (empty before the first snapshot).
    pub fn epoch(&self) -> &str {
        &self.epoch
    }

    /// The version held.
    pub fn version(&self) -> u64 {
        self.version
    }

    /// Number of hooks held.
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

    /// Takes a 200 answer of the operator: a complete snapshot replaces what is held; a
    /// delta is applied if it applies to exactly what is held and leaves the set the
    /// operator names (count and digest). On any error nothing held changed.
    pub fn absorb(&mut self, body: &[u8]) -> Result<Absorbed, SyncError> {
        let wire: Wire = serde_json::from_slice(body).map_err(|source| SyncError::Unreadable {
            body: "snapshot",
            source,
        })?;
        match wire.base {
            None => self.take_snapshot(wire).map(|()| Absorbed::Snapshot),
            Some(base) => self.apply_delta(base, wire).map(|()| Absorbed::Delta),
        }
    }

    fn take_snapshot(&mut self, wire: Wire) -> Result<(), SyncError> {
        let master_namespace = wire.master_namespace.ok_or(SyncError::NoMasterNamespace)?;
        let hooks: HashMap<String, Held> =
            parse_hooks(&wire.hooks, "snapshot")?.into_iter().collect();
        let digest = hooks
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
        *self = SyncedSet {
            epoch: wire.epoch,
            version: wire.version,
            master_namespace,
            hooks,
            tenants: wire.tenants.unwrap_or_default(),
            digest,
            digests_agree,
        };
        Ok(())
    }

    fn apply_delta(&mut self, base: u64, wire: Wire) -> Result<(), SyncError> {
        if wire.epoch != self.epoch || base != self.version || self.epoch.is_empty() {
            return Err(SyncError::WrongBase {
                epoch: wire.epoch,
                base,
                held_epoch: self.epoch.clone(),
                held_version: self.version,
            });
        }
        let (Some(want_count), Some(want_digest)) = (wire.hook_count, wire.digest) else {
            return Err(SyncError::NoDigest);
        };
        let upserts = parse_hooks(&wire.hooks, "delta")?;
        // The result's count and digest, computed before anything changes.
        let mut count = self.hooks.len();
        let mut digest = self.digest;
        let mut named = std::collections::HashSet::new();
        for r in &wire.removed {
            let k = key(&r.namespace, &r.name);
            match self.hooks.get(&k) {
                Some(h) if h.source.uid == r.uid && named.insert(k.clone()) => {
                    count -= 1;
                    digest = digest.wrapping_sub(h.digest);
                }
                Some(h) if h.source.uid == r.uid => return Err(SyncError::Duplicate(k)),
                _ => {
                    return Err(SyncError::UnknownRemoval {
                        namespace: r.namespace.clone(),
                        name: r.name.clone(),
                        uid: r.uid.clone(),
                    });
                }
            }
        }
        for (k, h) in &upserts {
            if !named.insert(k.clone()) {
                return Err(SyncError::Duplicate(k.clone()));
            }
            match self.hooks.get(k) {
                Some(old) => digest = digest.wrapping_sub(old.digest),
                None => count += 1,
            }
            digest = digest.wrapping_add(h.digest);
        }
        if count != want_count || format_digest(digest) != want_digest {
            return Err(SyncError::Mismatch {
                count,
                digest: format_digest(digest),
                want_count,
                want_digest,
            });
        }
        for r in &wire.removed {
            self.hooks.remove(&key(&r.namespace, &r.name));
        }
        self.hooks.extend(upserts);
        if let Some(t) = wire.tenants {
            self.tenants = t;
        }
        self.digest = digest;
        self.version = wire.version;
        Ok(())
    }

    /// The hooks held, as [`HookSet::build`] takes them (in no particular order: the set
    /// orders them).
    pub fn sources(&self) -> Vec<SnapshotHook> {
        self.hooks.values().map(|h| h.source.clone()).collect()
    }

    /// The set to serve: what is held, built by [`HookSet::build`] with this dispatcher's
    /// `edition`, reusing the compiled hooks of `previous`, with the tenant map held.
    pub fn build(
        &self,
        edition: Edition,
        previous: Option<&HookSet>,
    ) -> (HookSet, Vec<RejectedHook>) {
        let (mut set, rejected) = HookSet::build(
            self.sources(),
            &self.master_namespace,
            edition,
            self.version,
            previous,
        );
        set.tenants = TenantMap::from_entries(self.tenants.iter().cloned());
        (set, rejected)
    }
}

#[cfg(test)]
mod tests;
