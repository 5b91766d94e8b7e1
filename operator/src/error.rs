//! The library's one error type (CONVENTIONS habit 6: one `thiserror` enum per binary,
//! each variant with a metric label).

use std::net::SocketAddr;

/// Everything that can go wrong in the operator library.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A Kubernetes API call failed (transient unless the reconciler decides otherwise).
    #[error("Kubernetes API: {0}")]
    Kube(#[from] kube::Error),

    /// A status write still met 409 Conflict after every deliberate retry
    /// ([`crate::status::writer`]).
    #[error("status write of {key} still conflicted after {attempts} attempts: {source}")]
    StatusConflict {
        /// `namespace/name` of the object.
        key: String,
        /// Attempts made.
        attempts: u32,
        /// The last conflict.
        #[source]
        source: kube::Error,
    },

    /// A status write was due while this replica does not hold the leader Lease: nothing
    /// was sent ([`crate::status::writer`]).
    #[error("status write of {key} not sent: this replica does not lead")]
    NotLeader {
        /// `namespace/name` of the object.
        key: String,
    },

    /// An object from the API server lacks a field every persisted object has.
    #[error("{kind} object without metadata.{field}")]
    MissingField {
        /// Kind of the object.
        kind: &'static str,
        /// The missing metadata field.
        field: &'static str,
    },

    /// The `--seal-key-file` could not be read.
    #[error("reading seal key file {path}: {source}")]
    SealKeyFile {
        /// The path given.
        path: String,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },

    /// The `--seal-key-file` does not hold a key (32 raw bytes or 64 hex characters).
    #[error("seal key file {path}: {source}")]
    SealKey {
        /// The path given.
        path: String,
        /// Why the content is not a key.
        #[source]
        source: agenthooks_crds::sealed::SealError,
    },

    /// A listener could not be bound.
    #[error("binding the {what} server to {addr}: {source}")]
    Bind {
        /// Which server (`sync` or `metrics`).
        what: &'static str,
        /// The address asked for.
        addr: SocketAddr,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },

    /// The sync port's certificate or key cannot be used (`--sync-tls-cert-file`,
    /// `--sync-tls-key-file`; the message names the flag).
    #[error(transparent)]
    Tls(#[from] agenthooks_tls::TlsError),

    /// A server stopped with an I/O error.
    #[error("the {what} server failed: {source}")]
    Serve {
        /// Which server.
        what: &'static str,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },

    /// Leader election failed (building the lease manager).
    #[error("leader election: {0}")]
    Lease(#[from] kube_lease_manager::LeaseManagerError),

    /// A snapshot could not be serialized (never expected: the types are plain data).
    #[error("serializing a snapshot: {0}")]
    Json(#[from] serde_json::Error),

    /// A metric could not be registered.
    #[error("registering metrics: {0}")]
    Metrics(#[from] prometheus::Error),

    /// A hook's namespace is neither in the namespace cache nor on the API server (it is
    /// being deleted with its namespace): requeued until the hook is gone.
    #[error("namespace {0} not found")]
    NamespaceNotFound(String),

    /// The watch stores went away: the leader session is ending.
    #[error("the watch stores were dropped (session ending)")]
    StoreGone,

    /// A hook's validation, run off the controller's task, did not finish (it panicked,
    /// or the runtime is shutting down).
    #[error("validating the hook did not finish: {0}")]
    ValidationTask(String),
}

impl Error {
    /// Short label for `agenthooks_operator_reconcile_errors_total{reason}`.
    pub fn metric_label(&self) -> &'static str {
        match self {
            Error::Kube(kube::Error::Api(s)) if s.code == 409 => "conflict",
            Error::Kube(kube::Error::Api(s)) if s.code == 403 => "forbidden",
            Error::Kube(_) => "kube",
            Error::StatusConflict { .. } => "conflict",
            Error::NotLeader { .. } => "not_leader",
            Error::MissingField { .. } => "missing_field",
            Error::SealKeyFile { .. } | Error::SealKey { .. } => "seal_key",
            Error::Bind { .. } | Error::Serve { .. } => "server",
            Error::Tls(_) => "tls",
            Error::Lease(_) => "lease",
            Error::Json(_) => "json",
            Error::Metrics(_) => "metrics",
            Error::NamespaceNotFound(_) => "namespace_not_found",
            Error::StoreGone => "shutdown",
            Error::ValidationTask(_) => "validation_task",
        }
    }
}
