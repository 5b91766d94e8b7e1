//! Errors of the budget reconciler and its status writes.

/// What can go wrong while reconciling a budget or writing its status.
#[derive(Debug, thiserror::Error)]
pub enum BudgetError {
    /// A Kubernetes API call failed (transient: requeued, or answered 503 to a settle).
    #[error("Kubernetes API: {0}")]
    Kube(#[from] kube::Error),

    /// A status write met 409 Conflict (or no answer) on every attempt, each one
    /// computed from a fresh read.
    #[error("status write of {key} failed after {attempts} attempts (last: {last})")]
    Conflict {
        /// `namespace/name` of the budget.
        key: String,
        /// Attempts made.
        attempts: u32,
        /// The last failure.
        last: String,
    },

    /// An API call did not answer in time; its outcome is unknown.
    #[error("{what} of {key} timed out after {seconds} s")]
    Timeout {
        /// `get` or `patch`.
        what: &'static str,
        /// `namespace/name` of the budget.
        key: String,
        /// The limit.
        seconds: u64,
    },

    /// A budget object from the API server lacks a field every persisted object has.
    #[error("TenantHookBudget object without metadata.{0}")]
    MissingField(&'static str),

    /// The session's stores went away (leadership ended).
    #[error("the budget watch stores were dropped (session ending)")]
    StoreGone,
}

impl BudgetError {
    /// Short label for `agenthooks_budget_reconcile_errors_total{reason}`.
    pub fn metric_label(&self) -> &'static str {
        match self {
            BudgetError::Kube(kube::Error::Api(s)) if s.code == 403 => "forbidden",
            BudgetError::Kube(_) => "kube",
            BudgetError::Conflict { .. } => "conflict",
            BudgetError::Timeout { .. } => "timeout",
            BudgetError::MissingField(_) => "missing_field",
            BudgetError::StoreGone => "shutdown",
        }
    }
}
