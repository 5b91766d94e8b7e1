//! The snapshot the operator compiles and dispatchers serve (DESIGN "Sync").
//!
//! Served as JSON by `GET /v1/snapshot?after=<version>` on the operator's sync port.
//! Versions only grow while one operator process lives; a dispatcher that sees a smaller
//! version (a new leader) takes it as well, since it names a different `epoch`.
//!
//! A poll is answered with one of two bodies:
//!
//! - a [`Snapshot`]: complete, a dispatcher replaces its state with it. Always the answer
//!   to a dispatcher that does not ask for deltas, holds another epoch, holds a version
//!   older than the changes the operator still keeps (a *gap*), or asks for a full one
//!   ([`SnapshotQuery::full`]).
//! - a [`SnapshotDelta`], to a dispatcher that asks for deltas ([`SnapshotQuery::deltas`])
//!   and holds a version (`base`) of the current epoch whose changes the operator still
//!   keeps: the hooks added or changed since, the hooks removed since, and the tenant map
//!   if it changed. A delta costs what changed, not the whole set.
//!
//! Both carry the number of hooks and the [`digest`] of the set at their version. A
//! dispatcher applies a delta only to exactly the version it names as `base` of the same
//! epoch, and only if the result has that count and digest; otherwise it keeps serving
//! what it has and asks for a full snapshot: it never serves a half-applied set.
//!
//! The digest of a set is the wrapping sum of [`hook_digest`] over its hooks, each taken
//! over the exact bytes of the hook's JSON as sent (the operator serializes each hook
//! version once and sends the same bytes in snapshots and deltas), so it does not depend
//! on the order of the hooks nor on how either side would serialize them.

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::agenthook::AgentHookSpec;

/// Everything a dispatcher needs to decide.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct Snapshot {
    /// Random per operator process; with `version`, identifies a snapshot.
    pub epoch: String,
    /// Grows by one on every change the operator publishes.
    pub version: u64,
    /// The operator's master namespace (hooks there may rewrite input).
    pub master_namespace: String,
    /// Accepted hooks (enabled or not: the dispatcher filters), open breakers included:
    /// a hook whose breaker is open for a tenant stays here and carries it in
    /// [`SnapshotHook::open_breakers`] (CONTRACT §6.2).
    pub hooks: Vec<SnapshotHook>,
    /// Every namespace and the tenant it claims ([`crate::tenancy::TenantMap`]): a
    /// dispatcher authorizes callers by it (CONTRACT §9.2: a ServiceAccount acts for its
    /// namespace's tenant; RBAC in a tenant's namespace grants that tenant).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tenants: Vec<crate::tenancy::NamespaceTenant>,
    /// The [`digest`] of `hooks` as sent ([`format_digest`]); absent from an operator
    /// that serves no deltas.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub digest: Option<String>,
}

/// The changes from version `base` to `version` of one epoch: what a dispatcher holding
/// `base` applies to hold `version` (module documentation).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct SnapshotDelta {
    /// The operator process's epoch (as [`Snapshot::epoch`]).
    pub epoch: String,
    /// The version this delta applies to: the one the dispatcher said it holds.
    pub base: u64,
    /// The version the dispatcher holds once it applied the delta.
    pub version: u64,
    /// Every hook added or changed since `base`, complete: it replaces the hook of the
    /// same `namespace/name`, if any.
    #[serde(default)]
    pub hooks: Vec<SnapshotHook>,
    /// Every hook held at `base` and gone at `version`.
    #[serde(default)]
    pub removed: Vec<RemovedHook>,
    /// The whole tenant map ([`Snapshot::tenants`]) when it changed since `base`; absent
    /// when it did not.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tenants: Option<Vec<crate::tenancy::NamespaceTenant>>,
    /// Number of hooks at `version`.
    pub hook_count: usize,
    /// The [`digest`] of the hooks at `version` ([`format_digest`]).
    pub digest: String,
}

/// A hook a [`SnapshotDelta`] removes: the one of that `namespace/name` and uid.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq, PartialOrd, Ord)]
pub struct RemovedHook {
    pub namespace: String,
    pub name: String,
    pub uid: String,
}

/// The digest of one hook: the first 8 bytes (little endian) of the SHA-256 of its JSON as
/// sent. A set's digest is the wrapping sum of its hooks' ([`digest`]).
pub fn hook_digest(json: &[u8]) -> u64 {
    let sum = Sha256::digest(json);
    let mut first = [0u8; 8];
    first.copy_from_slice(&sum[..8]);
    u64::from_le_bytes(first)
}

/// The digest of a set of hooks, from each hook's JSON as sent (order does not matter).
pub fn digest<'a>(hooks: impl IntoIterator<Item = &'a [u8]>) -> u64 {
    hooks
        .into_iter()
        .fold(0u64, |acc, h| acc.wrapping_add(hook_digest(h)))
}

/// A digest as it travels: 16 lowercase hex digits.
pub fn format_digest(digest: u64) -> String {
    format!("{digest:016x}")
}

/// One accepted hook.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct SnapshotHook {
    pub uid: String,
    pub namespace: String,
    pub name: String,
    /// `metadata.generation`: the hook's version.
    pub generation: i64,
    /// `metadata.creationTimestamp`, RFC 3339 (ties in priority: oldest first).
    pub created_at: String,
    /// The tenant of the hook's namespace, resolved by the operator.
    pub namespace_tenant: String,
    pub spec: AgentHookSpec,
    /// The hook's `agenthooks.io/reset-breaker` annotation value. A dispatcher keeps a
    /// hook's breaker state only while (uid, generation, reset token) stay the same, so a
    /// reset reaches it even if it never saw the snapshot without the hook.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reset_token: Option<String>,
    /// Header values from Secrets, sealed with the sync key ([`crate::sealed`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub sealed_headers: Vec<SealedHeader>,
    /// The tenants for which this hook version's breaker is open, one entry per tenant
    /// (CONTRACT §6.2–6.5): every dispatcher answers those tenants' events as the hook's
    /// fault and probes after [`crate::rules::breaker::HALF_OPEN_AFTER_MS`].
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub open_breakers: Vec<OpenBreaker>,
}

/// An open breaker of one hook for one tenant.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq, PartialOrd, Ord)]
#[serde(rename_all = "camelCase")]
pub struct OpenBreaker {
    pub tenant: String,
    /// When it opened, milliseconds since the Unix epoch.
    pub since_ms: i64,
    /// As [`crate::report::TripReport::fail_closed`].
    #[serde(default)]
    pub fail_closed: bool,
}

/// A header whose value came from a Secret.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct SealedHeader {
    pub name: String,
    pub sealed: String,
}

/// Query of a long poll: return at once if the operator's version differs from `after`
/// (or `epoch` differs), else wait up to `timeoutSeconds` for a change.
#[derive(Debug, Clone, Serialize, Deserialize, Default)]
#[serde(rename_all = "camelCase")]
pub struct SnapshotQuery {
    #[serde(default)]
    pub after: u64,
    #[serde(default)]
    pub epoch: String,
    /// Seconds to wait for a change; at most 60.
    #[serde(default)]
    pub timeout_seconds: Option<u64>,
    /// Who is asking (for Ready tracking): the dispatcher's stable id.
    #[serde(default)]
    pub dispatcher: String,
    /// The dispatcher takes a [`SnapshotDelta`] when the operator can send one.
    #[serde(default)]
    pub deltas: bool,
    /// The dispatcher wants a complete [`Snapshot`] even if a delta could be sent (its
    /// last delta did not apply). `after` and `epoch` still say what it serves.
    #[serde(default)]
    pub full: bool,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_digest_of_a_set_ignores_order_and_follows_every_byte() {
        let (a, b, c) = (&b"{\"a\":1}"[..], &b"{\"b\":2}"[..], &b"{\"b\":3}"[..]);
        assert_eq!(digest([a, b]), digest([b, a]));
        assert_ne!(digest([a, b]), digest([a, c]));
        assert_eq!(digest([a, b]), hook_digest(a).wrapping_add(hook_digest(b)));
        // Removing a hook is subtracting its digest.
        assert_eq!(digest([a, b]).wrapping_sub(hook_digest(b)), digest([a]));
        assert_eq!(digest(std::iter::empty::<&[u8]>()), 0);
        assert_eq!(format_digest(0xab), "00000000000000ab");
    }

    #[test]
    fn old_queries_and_snapshots_still_parse() {
        let q: SnapshotQuery = serde_json::from_value(serde_json::json!({"after": 3})).unwrap();
        assert!(!q.deltas && !q.full);
        let s: Snapshot = serde_json::from_value(serde_json::json!({
            "epoch": "e", "version": 1, "masterNamespace": "m", "hooks": []
        }))
        .unwrap();
        assert_eq!(s.digest, None);
    }
}
