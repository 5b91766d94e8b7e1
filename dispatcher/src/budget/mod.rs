//! Token budget accounting offered to handlers that call a paid model (CONTRACT §5.5;
//! issue 3 point 3): reserve the call's bound before it, settle with the real cost
//! after, release on failure.
//!
//! ```text
//! let r = engine.budgets.reserve("acme", 1_200, Some("tenant-acme/judge")).await?;  // refused: block
//! match call_model().await {
//!     Ok(answer) => { r.settle(answer.tokens_used).await.ok(); }
//!     Err(_) => { r.release().await.ok(); }                       // settle(0)
//! }
//! ```
//!
//! Backends:
//! - [`remote`]: the operator leader's `POST /v1/budget/{reserve,settle}` (synced
//!   mode). No operator answering is a refusal, `BudgetUnavailable` (fail closed).
//! - [`local`]: an in-memory ledger of the `TenantHookBudget` documents of `--hooks`
//!   (standalone mode), same rules.
//! - unconfigured: every reserve is refused `BudgetUnavailable` (tests, `Engine::new`).
//!
//! Rule of both backends (crds `rules::ledger`, one set of functions for the operator's
//! ledger and [`local`]): a reservation of 1 to `MAX_CALL_TOKENS` (1,048,576) tokens is
//! granted iff what remains of the budget in its UTC month, minus the reservations in
//! flight, covers it, and a settle counts at most what its reservation held; so
//! concurrent callers never admit more than the budget holds, and never spend more.
//!
//! A [`Reservation`] dropped without settle or release is released in the background.

pub mod load;
pub mod local;
pub mod remote;

use std::sync::Arc;

use agenthooks_crds::report::{
    REASON_BUDGET_EXHAUSTED, REASON_BUDGET_NOT_FOUND, REASON_BUDGET_UNAVAILABLE, SettleResponse,
};
use agenthooks_crds::rules::ledger::{MAX_CALL_TOKENS, check_reserve, check_settle};

use crate::metrics::Metrics;
use local::LocalLedger;
use remote::RemoteBudgets;

/// Refusal reason of a reserve of `tokens` outside 1 to `MAX_CALL_TOKENS` (crds
/// `rules::ledger::check_reserve`; a caller bug; fails closed).
pub const REASON_INVALID_TOKENS: &str = "InvalidTokens";

/// Why a reservation was refused. The caller fails closed: a prompt hook of a blocking
/// event blocks with [`BudgetRefusal::reason`] as its reason.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum BudgetRefusal {
    /// The tenant has no TenantHookBudget.
    #[error("BudgetNotFound: tenant {tenant:?} has no TenantHookBudget")]
    NotFound { tenant: String },
    /// What remains after the reservations in flight cannot cover `tokens`.
    #[error("BudgetExhausted: {remaining} tokens left cannot cover {tokens}{}", budget.as_ref().map(|b| format!(" (budget {b})")).unwrap_or_default())]
    Exhausted {
        tokens: i64,
        remaining: i64,
        budget: Option<String>,
    },
    /// The budget could not be reached or read: no operator answered, or no backend.
    #[error("BudgetUnavailable: {detail}")]
    Unavailable { detail: String },
    /// `tokens` was not 1 to `MAX_CALL_TOKENS` (crds `rules::ledger`).
    #[error("InvalidTokens: a reservation holds 1 to {MAX_CALL_TOKENS} tokens, not {tokens}")]
    InvalidTokens { tokens: i64 },
}

impl BudgetRefusal {
    /// The CamelCase reason: `BudgetNotFound`, `BudgetExhausted`, `BudgetUnavailable` or
    /// `InvalidTokens` (crds `report` constants).
    pub fn reason(&self) -> &'static str {
        match self {
            BudgetRefusal::NotFound { .. } => REASON_BUDGET_NOT_FOUND,
            BudgetRefusal::Exhausted { .. } => REASON_BUDGET_EXHAUSTED,
            BudgetRefusal::Unavailable { .. } => REASON_BUDGET_UNAVAILABLE,
            BudgetRefusal::InvalidTokens { .. } => REASON_INVALID_TOKENS,
        }
    }
}

/// Why a settle (or release) did not go through.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum SettleError {
    /// `tokens` was below 0.
    #[error("a settle carries 0 or more tokens, not {tokens}")]
    InvalidTokens { tokens: i64 },
    /// The tenant has no budget on this backend (local ledger).
    #[error("tenant {tenant:?} has no budget to settle reservation {reservation_id}")]
    UnknownTenant {
        tenant: String,
        reservation_id: String,
    },
    /// The operator refused it (`404`: the tenant has no budget any more, nothing to
    /// count; `400`: a bad request); retrying would get the same answer.
    #[error("settle of reservation {reservation_id} refused: {detail}")]
    Refused {
        reservation_id: String,
        detail: String,
    },
    /// No operator acknowledged it before the deadline (remote); the operator expires
    /// the reservation on its own.
    #[error(
        "settle of reservation {reservation_id} not acknowledged within {deadline_ms} ms: {detail}"
    )]
    Unacknowledged {
        reservation_id: String,
        deadline_ms: u64,
        detail: String,
    },
}

/// A granted reservation, as a backend reports it.
#[derive(Debug, Clone, PartialEq)]
pub struct Grant {
    pub reservation_id: String,
    /// Tokens left after this reservation and every other one in flight (>= 0).
    pub remaining: i64,
    /// The budget, `namespace/name`.
    pub budget: Option<String>,
}

enum Backend {
    Unconfigured,
    Remote(RemoteBudgets),
    Local(LocalLedger),
}

/// The budget accounting of one dispatcher. Cheap to clone.
#[derive(Clone)]
pub struct Budgets {
    backend: Arc<Backend>,
    metrics: Option<Metrics>,
}

impl std::fmt::Debug for Budgets {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match &*self.backend {
            Backend::Unconfigured => "Budgets(unconfigured)",
            Backend::Remote(_) => "Budgets(remote)",
            Backend::Local(_) => "Budgets(local)",
        })
    }
}

impl Budgets {
    /// No backend: every reserve is refused `BudgetUnavailable`.
    pub fn unconfigured() -> Budgets {
        Budgets {
            backend: Arc::new(Backend::Unconfigured),
            metrics: None,
        }
    }

    /// The operator's endpoints (synced mode).
    pub fn remote(remote: RemoteBudgets, metrics: Option<Metrics>) -> Budgets {
        Budgets {
            backend: Arc::new(Backend::Remote(remote)),
            metrics,
        }
    }

    /// An in-memory ledger (standalone mode).
    pub fn local(ledger: LocalLedger, metrics: Option<Metrics>) -> Budgets {
        Budgets {
            backend: Arc::new(Backend::Local(ledger)),
            metrics,
        }
    }

    /// The local ledger, when this is one (tests and inspection).
    pub fn local_ledger(&self) -> Option<&LocalLedger> {
        match &*self.backend {
            Backend::Local(l) => Some(l),
            _ => None,
        }
    }

    /// Holds `tokens` (1 to `MAX_CALL_TOKENS`) of `tenant`'s budget for one call; `hook` (`namespace/name`)
    /// is for the operator's logs. Errors: [`BudgetRefusal`]; the caller fails closed.
    pub async fn reserve(
        &self,
        tenant: &str,
        tokens: i64,
        hook: Option<&str>,
    ) -> Result<Reservation, BudgetRefusal> {
        let result = if check_reserve(tokens).is_err() {
            Err(BudgetRefusal::InvalidTokens { tokens })
        } else {
            match &*self.backend {
                Backend::Unconfigured => Err(BudgetRefusal::Unavailable {
                    detail: "no budget backend is configured on this dispatcher".into(),
                }),
                Backend::Remote(r) => r.reserve(tenant, tokens, hook).await,
                Backend::Local(l) => l.reserve(tenant, tokens),
            }
        };
        if let Some(m) = &self.metrics {
            match &result {
                Ok(_) => m.budget_grants.inc(),
                Err(e) => m.budget_refusals.with_label_values(&[e.reason()]).inc(),
            }
        }
        match result {
            Ok(grant) => Ok(Reservation {
                budgets: self.clone(),
                tenant: tenant.to_string(),
                tokens,
                grant,
                done: false,
                charge_on_drop: 0,
            }),
            Err(refusal) => {
                // Counted by reason in agenthooks_budget_refusals_total; a log line per
                // refusal would flood the logs of an exhausted tenant.
                if matches!(refusal, BudgetRefusal::Unavailable { .. }) {
                    // The budget store did not answer: the call is refused (fail-closed)
                    // and the seed's key says so (seed "Metrics":
                    // `security.hook.budget_precheck_failed`).
                    tracing::warn!(target: "security.hook.budget_precheck_failed", tenant, tokens, hook = hook.unwrap_or(""), detail = %refusal, "security.hook.budget_precheck_failed");
                } else {
                    tracing::debug!(tenant, tokens, hook = hook.unwrap_or(""), reason = refusal.reason(), detail = %refusal, "budget reservation refused");
                }
                Err(refusal)
            }
        }
    }

    async fn settle_id(
        &self,
        tenant: &str,
        reservation_id: &str,
        tokens: i64,
    ) -> Result<SettleResponse, SettleError> {
        let result = if check_settle(tokens).is_err() {
            Err(SettleError::InvalidTokens { tokens })
        } else {
            match &*self.backend {
                // Unreachable: an unconfigured backend grants nothing.
                Backend::Unconfigured => Err(SettleError::UnknownTenant {
                    tenant: tenant.into(),
                    reservation_id: reservation_id.into(),
                }),
                Backend::Remote(r) => r.settle(tenant, reservation_id, tokens).await,
                Backend::Local(l) => l.settle(tenant, reservation_id, tokens),
            }
        };
        if let Err(e) = &result {
            if let Some(m) = &self.metrics {
                m.budget_settle_failures.inc();
            }
            // Seed "Metrics": `security.hook.budget_deduct_failed`.
            tracing::error!(target: "security.hook.budget_deduct_failed", tenant, reservation_id, tokens, error = %e, "security.hook.budget_deduct_failed");
        }
        result
    }
}

/// Tokens held for one call. Settle it with the real cost, or release it when the call
/// failed before the provider counted anything; dropped unsettled, it is released in
/// the background — or, once [`Reservation::charge_in_full_if_dropped`] was called (the
/// provider request went out), charged in full (CONTRACT §10.3).
#[derive(Debug)]
pub struct Reservation {
    budgets: Budgets,
    tenant: String,
    tokens: i64,
    grant: Grant,
    done: bool,
    /// Tokens charged when dropped unsettled: 0 (released) until the call was sent.
    charge_on_drop: i64,
}

impl Reservation {
    /// The id the backend gave it (sent again on settle).
    pub fn id(&self) -> &str {
        &self.grant.reservation_id
    }

    /// Tokens held.
    pub fn tokens(&self) -> i64 {
        self.tokens
    }

    /// The tenant charged.
    pub fn tenant(&self) -> &str {
        &self.tenant
    }

    /// Tokens left after this and every other reservation in flight, when granted.
    pub fn remaining(&self) -> i64 {
        self.grant.remaining
    }

    /// The budget charged, `namespace/name`, when the backend named it.
    pub fn budget(&self) -> Option<&str> {
        self.grant.budget.as_deref()
    }

    /// Charges `actual` tokens (>= 0; counted at most up to what was held, the call's
    /// bound, by both backends) and frees the hold.
    /// Remote: retried with backoff, same reservation id, until acknowledged or the
    /// settle deadline. Errors: [`SettleError`].
    pub async fn settle(mut self, actual: i64) -> Result<SettleResponse, SettleError> {
        self.done = true;
        self.budgets
            .settle_id(&self.tenant, &self.grant.reservation_id, actual)
            .await
    }

    /// Marks the provider request as sent (CONTRACT §10.3): from now on, a reservation
    /// dropped without a settle (the run was cancelled, cut by a timeout, its task
    /// dropped) charges the whole reservation instead of releasing it, because the
    /// provider may have counted tokens nobody will report.
    pub fn charge_in_full_if_dropped(&mut self) {
        self.charge_on_drop = self.tokens;
    }

    /// Frees the hold without charging anything: `settle(0)` (the call failed before
    /// the provider counted tokens).
    pub async fn release(self) -> Result<SettleResponse, SettleError> {
        self.settle(0).await
    }
}

impl Drop for Reservation {
    fn drop(&mut self) {
        if self.done {
            return;
        }
        let budgets = self.budgets.clone();
        let tenant = std::mem::take(&mut self.tenant);
        let id = std::mem::take(&mut self.grant.reservation_id);
        let tokens = self.charge_on_drop;
        if tokens > 0 {
            tracing::info!(tenant, reservation_id = %id, tokens, "a prompt call ended without the provider's usage after it was sent; charging the whole reservation");
        }
        if let Backend::Local(l) = &*budgets.backend {
            let _ = l.settle(&tenant, &id, tokens);
            return;
        }
        match tokio::runtime::Handle::try_current() {
            Ok(rt) => {
                rt.spawn(async move {
                    let _ = budgets.settle_id(&tenant, &id, tokens).await;
                });
            }
            Err(_) => tracing::error!(
                tenant, reservation_id = %id,
                "a reservation was dropped outside a runtime; the operator expires it"
            ),
        }
    }
}
