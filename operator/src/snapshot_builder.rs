//! Turns the index's published changes into what dispatchers load: the next version of the
//! snapshot, kept as one serialized JSON per hook, and the deltas between versions
//! ([`agenthooks_crds::snapshot`] describes both bodies and the digest).
//!
//! The [`SnapshotLog`] holds, for the current version, every published hook's JSON
//! (serialized once per hook version, when it changes) with its digest, the tenant map's
//! JSON, the set's count and digest, and the changes of the recent versions. A publish
//! costs what changed. A poll is answered with:
//!
//! - a delta, when the dispatcher asks for deltas and holds a version of this epoch whose
//!   changes the log still keeps: the changes since, merged per hook (a hook added and
//!   removed since is not mentioned; one removed and added again is sent as it is now).
//!   Costs what changed since.
//! - otherwise the full snapshot, assembled from the hooks' JSON once per version and kept
//!   until the next publish (every dispatcher that needs it shares it).
//!
//! The log keeps the changes of at most [`MAX_HISTORY_VERSIONS`] versions and
//! [`MAX_HISTORY_HOOKS`] hook changes in all (the newest version always): a dispatcher
//! that holds an older version has a gap and gets a full snapshot.
//!
//! Publishing is coalesced: the reconciler asks for a publish after each change; the
//! publisher publishes at once when it has not published for [`PUBLISH_DEBOUNCE`] (an
//! edit after a quiet spell waits for nothing), else once that time has passed since its
//! last publish, with everything that changed meanwhile. Nothing is published before the
//! initial sync of a leader session completes (the sync server does not serve before
//! then either).

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use agenthooks_crds::snapshot::{RemovedHook, SnapshotHook, format_digest, hook_digest};
use agenthooks_crds::tenancy::NamespaceTenant;
use bytes::Bytes;
use tokio_util::sync::CancellationToken;

use crate::index::{HookKey, PublishedChanges};
use crate::shared::Shared;

/// Least time between two publishes of the publisher (changes within it are coalesced).
/// A change after a quiet spell is published at once, so this costs a single edit
/// nothing; while changes stream in (a bulk apply) it bounds the versions to ten a
/// second, and so the rebuilds of every dispatcher.
pub const PUBLISH_DEBOUNCE: Duration = Duration::from_millis(100);

/// Most versions whose changes the log keeps for deltas.
pub const MAX_HISTORY_VERSIONS: usize = 1024;

/// Most hook changes the log keeps for deltas, over all versions kept (the newest
/// version's are kept whatever their number).
pub const MAX_HISTORY_HOOKS: usize = 16_384;

/// The identity of a published snapshot: what every long poll compares with what its
/// dispatcher holds (the bodies come from the [`SnapshotLog`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Published {
    /// Random per operator process.
    pub epoch: String,
    /// Snapshot version (0: nothing published yet).
    pub version: u64,
    /// Number of hooks in it.
    pub hooks: usize,
}

/// One published hook version: its JSON as sent, and what identifies it.
#[derive(Debug)]
struct HookJson {
    uid: String,
    json: Bytes,
    digest: u64,
}

/// The changes of one version, per hook: its JSON after (`None`: removed), and whether
/// the log held the hook before the change.
#[derive(Debug, Default)]
struct VersionChanges {
    version: u64,
    hooks: Vec<(HookKey, Option<Arc<HookJson>>, Option<String>)>,
    tenants: bool,
}

/// Which body a poll got.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BodyKind {
    /// A complete [`agenthooks_crds::snapshot::Snapshot`].
    Snapshot,
    /// A [`agenthooks_crds::snapshot::SnapshotDelta`].
    Delta,
}

impl BodyKind {
    /// The `result` label of `agenthooks_operator_snapshot_polls_total`.
    pub fn label(self) -> &'static str {
        match self {
            BodyKind::Snapshot => "snapshot",
            BodyKind::Delta => "delta",
        }
    }
}

/// The published snapshot as per-hook JSON, and the recent changes (module docs).
#[derive(Debug)]
pub struct SnapshotLog {
    epoch: String,
    master_namespace: String,
    version: u64,
    hooks: BTreeMap<HookKey, Arc<HookJson>>,
    digest: u64,
    tenants: Vec<NamespaceTenant>,
    tenants_json: Bytes,
    history: VecDeque<VersionChanges>,
    history_hooks: usize,
    /// Most versions kept in `history`.
    max_versions: usize,
    /// The full body of `version`, once asked for.
    full: Option<Bytes>,
}

fn json_string(s: &str) -> String {
    serde_json::to_string(s).unwrap_or_else(|_| "\"\"".into())
}

impl SnapshotLog {
    /// An empty log at version 0 of `epoch`, keeping the changes of
    /// [`MAX_HISTORY_VERSIONS`] versions.
    pub fn new(epoch: &str, master_namespace: &str) -> SnapshotLog {
        SnapshotLog::with_history(epoch, master_namespace, MAX_HISTORY_VERSIONS)
    }

    /// An empty log at version 0 of `epoch`, keeping the changes of `max_versions`
    /// versions (at least one).
    pub fn with_history(epoch: &str, master_namespace: &str, max_versions: usize) -> SnapshotLog {
        SnapshotLog {
            max_versions: max_versions.max(1),
            epoch: epoch.to_string(),
            master_namespace: master_namespace.to_string(),
            version: 0,
            hooks: BTreeMap::new(),
            digest: 0,
            tenants: Vec::new(),
            tenants_json: Bytes::from_static(b"[]"),
            history: VecDeque::new(),
            history_hooks: 0,
            full: None,
        }
    }

    /// What the log holds now.
    pub fn published(&self) -> Published {
        Published {
            epoch: self.epoch.clone(),
            version: self.version,
            hooks: self.hooks.len(),
        }
    }

    /// The current version.
    pub fn version(&self) -> u64 {
        self.version
    }

    /// The oldest version a delta can start from (a dispatcher holding an older one has a
    /// gap).
    pub fn oldest_base(&self) -> u64 {
        self.history
            .front()
            .map_or(self.version, |c| c.version.saturating_sub(1))
    }

    /// Takes the index's changes as version `changes.version`: serializes each changed
    /// hook (a hook whose JSON did not change is no change), drops the removed ones (and,
    /// for a [`PublishedChanges::complete`] list, every hook it does not hold), and
    /// records the changes for deltas.
    ///
    /// Errors: [`serde_json::Error`] if a hook did not serialize (plain data: not
    /// expected); the log is then unchanged.
    pub fn publish(&mut self, changes: PublishedChanges) -> Result<Published, serde_json::Error> {
        // Serialize first, so a failure leaves the log as it was.
        let mut serialized: Vec<(HookKey, Option<Arc<HookJson>>)> =
            Vec::with_capacity(changes.hooks.len());
        for (key, hook) in changes.hooks {
            let json = match hook {
                Some(h) => Some(Arc::new(hook_json(&h)?)),
                None => None,
            };
            serialized.push((key, json));
        }
        let tenants_json = match &changes.tenants {
            Some(t) => Some(Bytes::from(serde_json::to_vec(t)?)),
            None => None,
        };

        let mut record = VersionChanges {
            version: changes.version,
            ..Default::default()
        };
        if changes.complete {
            let listed: std::collections::BTreeSet<&HookKey> =
                serialized.iter().map(|(k, _)| k).collect();
            let gone: Vec<HookKey> = self
                .hooks
                .keys()
                .filter(|k| !listed.contains(k))
                .cloned()
                .collect();
            for key in gone {
                serialized.push((key, None));
            }
        }
        for (key, json) in serialized {
            let before = self.hooks.get(&key);
            let same = match (before, &json) {
                (Some(b), Some(j)) => b.json == j.json,
                (None, None) => true,
                _ => false,
            };
            if same {
                continue;
            }
            let held_uid = before.map(|b| b.uid.clone());
            if let Some(b) = before {
                self.digest = self.digest.wrapping_sub(b.digest);
            }
            match &json {
                Some(j) => {
                    self.digest = self.digest.wrapping_add(j.digest);
                    self.hooks.insert(key.clone(), j.clone());
                }
                None => {
                    self.hooks.remove(&key);
                }
            }
            record.hooks.push((key, json, held_uid));
        }
        if let (Some(tenants), Some(json)) = (changes.tenants, tenants_json)
            && json != self.tenants_json
        {
            self.tenants = tenants;
            self.tenants_json = json;
            record.tenants = true;
        }
        if changes.version != self.version + 1 {
            // A version the log never took: no delta may span it.
            self.history.clear();
            self.history_hooks = 0;
        }
        self.version = changes.version;
        self.full = None;
        self.history_hooks += record.hooks.len();
        self.history.push_back(record);
        while self.history.len() > 1
            && (self.history.len() > self.max_versions || self.history_hooks > MAX_HISTORY_HOOKS)
        {
            if let Some(old) = self.history.pop_front() {
                self.history_hooks -= old.hooks.len();
            }
        }
        Ok(self.published())
    }

    /// The body for a dispatcher that holds (`epoch`, `after`): a delta when it takes
    /// deltas (`deltas`) and the log still has the changes since `after` of this epoch,
    /// else the full snapshot.
    pub fn answer(&mut self, epoch: &str, after: u64, deltas: bool) -> (Bytes, BodyKind) {
        if deltas && epoch == self.epoch && after < self.version && after >= self.oldest_base() {
            return (self.delta_since(after), BodyKind::Delta);
        }
        (self.full(), BodyKind::Snapshot)
    }

    /// The full snapshot of the current version (assembled once per version).
    pub fn full(&mut self) -> Bytes {
        if let Some(body) = &self.full {
            return body.clone();
        }
        let size: usize = self.hooks.values().map(|h| h.json.len() + 1).sum();
        let mut out = Vec::with_capacity(size + self.tenants_json.len() + 256);
        out.extend_from_slice(
            format!(
                "{{\"epoch\":{},\"version\":{},\"masterNamespace\":{},\"hooks\":[",
                json_string(&self.epoch),
                self.version,
                json_string(&self.master_namespace)
            )
            .as_bytes(),
        );
        for (i, h) in self.hooks.values().enumerate() {
            if i > 0 {
                out.push(b',');
            }
            out.extend_from_slice(&h.json);
        }
        out.extend_from_slice(b"],\"tenants\":");
        out.extend_from_slice(&self.tenants_json);
        out.extend_from_slice(
            format!(",\"digest\":\"{}\"}}", format_digest(self.digest)).as_bytes(),
        );
        let body = Bytes::from(out);
        self.full = Some(body.clone());
        body
    }

    /// The delta from `after` (at least [`SnapshotLog::oldest_base`]) to the current
    /// version: per hook, its JSON now if it changed, or its removal if the log held it
    /// at `after` and no longer does; the tenant map if it changed.
    fn delta_since(&self, after: u64) -> Bytes {
        // Per hook: (the uid held at `after`, the JSON now).
        let mut merged: BTreeMap<&HookKey, (Option<&str>, Option<&Arc<HookJson>>)> =
            BTreeMap::new();
        let mut tenants = false;
        for change in self.history.iter().filter(|c| c.version > after) {
            tenants |= change.tenants;
            for (key, json, held) in &change.hooks {
                let entry = merged.entry(key).or_insert((held.as_deref(), None));
                entry.1 = json.as_ref();
            }
        }
        let mut out = Vec::with_capacity(256);
        out.extend_from_slice(
            format!(
                "{{\"epoch\":{},\"base\":{after},\"version\":{},\"hooks\":[",
                json_string(&self.epoch),
                self.version
            )
            .as_bytes(),
        );
        let mut first = true;
        for (_, now) in merged.values() {
            if let Some(j) = now {
                if !first {
                    out.push(b',');
                }
                first = false;
                out.extend_from_slice(&j.json);
            }
        }
        out.extend_from_slice(b"],\"removed\":");
        let removed: Vec<RemovedHook> = merged
            .iter()
            .filter_map(|(key, (held, now))| match (held, now) {
                (Some(uid), None) => Some(RemovedHook {
                    namespace: key.namespace.clone(),
                    name: key.name.clone(),
                    uid: uid.to_string(),
                }),
                _ => None,
            })
            .collect();
        out.extend_from_slice(
            serde_json::to_string(&removed)
                .unwrap_or_else(|_| "[]".into())
                .as_bytes(),
        );
        if tenants {
            out.extend_from_slice(b",\"tenants\":");
            out.extend_from_slice(&self.tenants_json);
        }
        out.extend_from_slice(
            format!(
                ",\"hookCount\":{},\"digest\":\"{}\"}}",
                self.hooks.len(),
                format_digest(self.digest)
            )
            .as_bytes(),
        );
        Bytes::from(out)
    }
}

fn hook_json(hook: &SnapshotHook) -> Result<HookJson, serde_json::Error> {
    let json = serde_json::to_vec(hook)?;
    Ok(HookJson {
        uid: hook.uid.clone(),
        digest: hook_digest(&json),
        json: Bytes::from(json),
    })
}

/// Publishes pending index changes until `cancel`: on a publish request, at once if the
/// last publish is [`PUBLISH_DEBOUNCE`] old, else when it is; only once the session has
/// synced.
pub async fn run_publisher(shared: Arc<Shared>, cancel: CancellationToken) {
    let mut last: Option<tokio::time::Instant> = None;
    loop {
        tokio::select! {
            _ = cancel.cancelled() => return,
            _ = shared.publish_requested.notified() => {}
        }
        if let Some(at) = last {
            tokio::select! {
                _ = cancel.cancelled() => return,
                _ = tokio::time::sleep_until(at + PUBLISH_DEBOUNCE) => {}
            }
        }
        if !shared.serving().synced {
            continue;
        }
        last = Some(tokio::time::Instant::now());
        if let Err(e) = shared.publish_now() {
            tracing::error!(error = %e, "publishing a snapshot failed");
        }
    }
}

#[cfg(test)]
mod tests;
