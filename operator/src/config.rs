//! Settings of the operator (the binary builds them from its flags).

use std::net::SocketAddr;
use std::time::Duration;

use agenthooks_crds::sealed::SealKey;
use agenthooks_crds::tenancy::Edition;

use crate::error::Error;

/// Everything the operator needs to run.
#[derive(Debug, Clone)]
pub struct Config {
    /// Namespace whose hooks may be `global` and rewrite input (`--master-namespace`).
    pub master_namespace: String,
    /// `lite` or `standard` (`--edition`); Standard refuses the command handler.
    pub edition: Edition,
    /// Lite: accept command hooks outside the master namespace
    /// (`--allow-tenant-command-hooks`; default false: `CommandHookNotAllowed`,
    /// CONTRACT §10.1).
    pub allow_tenant_command_hooks: bool,
    /// Address of the dispatchers' long-poll server (`--sync-addr`).
    pub sync_addr: SocketAddr,
    /// Address of `/healthz`, `/readyz`, `/metrics` (`--metrics-addr`).
    pub metrics_addr: SocketAddr,
    /// The sync port's certificate and key (`--sync-tls-cert-file`,
    /// `--sync-tls-key-file`), re-read when they change; `None`: plain HTTP, with a
    /// warning at start and in `/readyz` (CONTRACT §9.4).
    pub sync_tls: Option<agenthooks_tls::PemFiles>,
    /// Key sealing Secret header values in snapshots (`--seal-key-file`); without it a
    /// hook with a `valueFrom` header is refused with reason `SealKeyMissing`. It only
    /// seals: dispatchers authenticate with their own tokens ([`Config::sync_auth`]).
    pub seal_key: Option<SealKey>,
    /// How dispatchers are authenticated on the sync port ([`crate::sync_auth`]).
    pub sync_auth: SyncAuthConfig,
    /// Leader election.
    pub lease: LeaseConfig,
    /// A dispatcher not seen polling for this long is no longer live
    /// (`--dispatcher-ttl-seconds`, default 30 s).
    pub dispatcher_ttl: Duration,
    /// A watch (AgentHooks, Namespaces, Secrets) that keeps failing for longer than this
    /// fails readiness (`--watch-grace-seconds`, default 10 s).
    pub watch_grace: Duration,
    /// Server-side timeout of each watch request (`--watch-timeout-seconds`, default 290
    /// as in kube-runtime). The API server checks authorization when a watch starts, so
    /// a permission lost while a watch runs shows within this time.
    pub watch_timeout_seconds: u32,
    /// Least time between two `status.executions` writes of one hook, whatever the
    /// number of dispatchers and the decision rate (`--status-write-interval-ms`, default
    /// 1000).
    pub status_write_interval: Duration,
    /// Most snapshot versions whose changes are kept for deltas
    /// (`--snapshot-history-versions`, default
    /// [`crate::snapshot_builder::MAX_HISTORY_VERSIONS`]): a dispatcher that holds an older
    /// version gets a full snapshot.
    pub snapshot_history_versions: usize,
    /// This replica's own Pod (`--pod-name`, `--pod-namespace`; the Downward API in the
    /// shipped manifests). While this replica is the synced leader it carries the label
    /// `agenthooks.io/leader: "true"`, which the leader-only sync Service selects (see
    /// [`crate::leader_label`]). `None` (run outside a cluster): no Pod is labelled.
    pub pod: Option<PodRef>,
}

/// The sync port's authentication of dispatchers (CONTRACT §9.4).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SyncAuthConfig {
    /// The audience a dispatcher's token must be for (`--sync-audience`, default
    /// [`agenthooks_kube_review::SYNC_AUDIENCE`]).
    pub audience: String,
    /// Where RBAC is asked (`--sync-rbac-namespace`): `create` `agenthooks/sync` in this
    /// namespace; `None`: the master namespace.
    pub namespace: Option<String>,
    /// How long TokenReview and SubjectAccessReview answers are kept
    /// (`--sync-token-cache-seconds`, `--sync-access-cache-seconds`,
    /// `--sync-denied-cache-seconds`).
    pub cache: agenthooks_kube_review::CacheConfig,
    /// Requests the sync port serves at once (`--sync-max-concurrent-requests`); past it
    /// a request is answered 503 at once, before its token is looked at
    /// ([`crate::sync_auth::limit`]).
    pub max_concurrent_requests: usize,
}

/// Default of [`SyncAuthConfig::max_concurrent_requests`]: every dispatcher holds one
/// long poll and now and then a report or a budget call, so this serves several hundred
/// dispatchers.
pub const DEFAULT_SYNC_MAX_CONCURRENT_REQUESTS: usize = 2048;

impl Default for SyncAuthConfig {
    /// Audience `agenthooks.io/sync`, the dispatcher's cache defaults.
    fn default() -> Self {
        SyncAuthConfig {
            audience: agenthooks_kube_review::SYNC_AUDIENCE.to_string(),
            namespace: None,
            cache: Default::default(),
            max_concurrent_requests: DEFAULT_SYNC_MAX_CONCURRENT_REQUESTS,
        }
    }
}

/// A Pod by namespace and name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodRef {
    /// `metadata.name` (`--pod-name`, env `POD_NAME`).
    pub name: String,
    /// `metadata.namespace` (`--pod-namespace`, env `POD_NAMESPACE`).
    pub namespace: String,
}

/// Only one of `--pod-name` and `--pod-namespace` was given: the Pod cannot be labelled.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{given} is set but {missing} is not: the leader's Pod is not labelled")]
pub struct PodFlagMissing {
    /// The flag that was given.
    pub given: &'static str,
    /// The flag that is missing.
    pub missing: &'static str,
}

/// This replica's Pod from `--pod-name` and `--pod-namespace` (empty values count as
/// absent): `Some` when both are given, `None` when neither is (labelling off).
///
/// Errors: [`PodFlagMissing`] when exactly one is given (the binary warns and runs with
/// labelling off: a stray `POD_NAME` in a developer's environment must not stop it).
pub fn own_pod(
    name: Option<String>,
    namespace: Option<String>,
) -> Result<Option<PodRef>, PodFlagMissing> {
    let name = name.filter(|n| !n.is_empty());
    let namespace = namespace.filter(|n| !n.is_empty());
    match (name, namespace) {
        (Some(name), Some(namespace)) => Ok(Some(PodRef { name, namespace })),
        (None, None) => Ok(None),
        (Some(_), None) => Err(PodFlagMissing {
            given: "--pod-name",
            missing: "--pod-namespace",
        }),
        (None, Some(_)) => Err(PodFlagMissing {
            given: "--pod-namespace",
            missing: "--pod-name",
        }),
    }
}

/// Default of [`Config::watch_grace`].
pub const DEFAULT_WATCH_GRACE: Duration = Duration::from_secs(10);
/// Default of [`Config::watch_timeout_seconds`].
pub const DEFAULT_WATCH_TIMEOUT_SECONDS: u32 = 290;

/// Which Lease to hold, as whom.
#[derive(Debug, Clone)]
pub struct LeaseConfig {
    /// Lease name (`--lease-name`).
    pub name: String,
    /// Lease namespace (`--lease-namespace`, default the master namespace).
    pub namespace: String,
    /// Holder identity (`--identity`, default `<hostname>_<pid>`).
    pub identity: String,
    /// Lease duration in seconds: how long a leader that stopped renewing keeps the lock.
    pub duration_seconds: u64,
}

/// Loads a seal key from `path`: 32 raw bytes or 64 hex characters (see
/// [`agenthooks_crds::sealed::SealKey::from_bytes`]).
///
/// Errors: [`Error::SealKeyFile`] when the file cannot be read, [`Error::SealKey`] when it
/// does not hold a key.
pub fn load_seal_key(path: &str) -> Result<SealKey, Error> {
    let raw = std::fs::read(path).map_err(|source| Error::SealKeyFile {
        path: path.to_string(),
        source,
    })?;
    SealKey::from_bytes(&raw).map_err(|source| Error::SealKey {
        path: path.to_string(),
        source,
    })
}

/// The default holder identity: `<hostname>_<pid>` (hostname from the kernel, else
/// `$HOSTNAME`, else `agenthooks-operator`).
pub fn default_identity() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|h| h.trim().to_string())
        .filter(|h| !h.is_empty())
        .or_else(|| std::env::var("HOSTNAME").ok().filter(|h| !h.is_empty()))
        .unwrap_or_else(|| "agenthooks-operator".to_string());
    format!("{host}_{}", std::process::id())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seal_key_file_hex_and_errors() {
        let dir = std::env::temp_dir().join(format!("ah-op-key-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let good = dir.join("good");
        std::fs::write(&good, format!("{}\n", "ab".repeat(32))).unwrap();
        assert!(load_seal_key(good.to_str().unwrap()).is_ok());
        let bad = dir.join("bad");
        std::fs::write(&bad, "short").unwrap();
        assert!(matches!(
            load_seal_key(bad.to_str().unwrap()),
            Err(Error::SealKey { .. })
        ));
        assert!(matches!(
            load_seal_key(dir.join("missing").to_str().unwrap()),
            Err(Error::SealKeyFile { .. })
        ));
        std::fs::remove_dir_all(dir).ok();
    }

    #[test]
    fn own_pod_needs_both_flags() {
        let s = |v: &str| Some(v.to_string());
        assert_eq!(
            own_pod(s("op-0"), s("agenthooks-system")),
            Ok(Some(PodRef {
                name: "op-0".into(),
                namespace: "agenthooks-system".into()
            }))
        );
        assert_eq!(own_pod(None, None), Ok(None));
        assert_eq!(own_pod(s(""), s("")), Ok(None), "empty is absent");
        assert_eq!(
            own_pod(s("op-0"), s("")).unwrap_err().missing,
            "--pod-namespace"
        );
        assert_eq!(
            own_pod(None, s("agenthooks-system")).unwrap_err().missing,
            "--pod-name"
        );
    }

    #[test]
    fn identity_names_host_and_pid() {
        let id = default_identity();
        assert!(id.ends_with(&format!("_{}", std::process::id())));
    }
}
