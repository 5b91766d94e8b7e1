//! Errors of the budget reconciler and its status writes.

/// What can go wrong while reconciling a budget or writing its status.
#[derive(Debug, thiserror::Error)]
pub enum BudgetError {
    /// A Kubernetes API call failed (transient: requeued, or answered 503 to a settle).
    #[error("Kubernetes API: {0}")]
    Kube(#[from] kube::Error),

    /// A status write failed ([`crate::status::writer`]): still 409 Conflict after every
    /// retry ([`crate::Error::StatusConflict`]), not sent because this replica does not
    /// lead ([`crate::Error::NotLeader`]), or an API failure or timeout
    /// ([`crate::Error::Kube`]).
    #[error("status write: {0}")]
    Status(#[from] crate::Error),

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
            BudgetError::Status(crate::Error::Kube(e)) if crate::report::api::is_timeout(e) => {
                "timeout"
            }
            BudgetError::Status(e) => e.metric_label(),
            BudgetError::MissingField(_) => "missing_field",
            BudgetError::StoreGone => "shutdown",
        }
    }
}
