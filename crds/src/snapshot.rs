//! The snapshot the operator compiles and dispatchers serve (DESIGN "Sync").
//!
//! Served as JSON by `GET /v1/snapshot?after=<version>` on the operator's sync port. A
//! snapshot is complete (not a delta): a dispatcher replaces its state with it. Versions
//! only grow while one operator leader lives; a dispatcher that sees a smaller version
//! (a new leader) takes it as well, since it names a different `epoch`.

use serde::{Deserialize, Serialize};

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
}
