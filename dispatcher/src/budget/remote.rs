//! The operator-backed budget: `POST /v1/budget/reserve` and `POST /v1/budget/settle` on
//! the operator leader's sync port (crds `report` module), over every `--operator-url`
//! in turn ([`OperatorUrls`]).
//!
//! - reserve: one pass over the URLs, each bounded by `reserve_timeout`. No `200` from
//!   any of them (connection errors, timeouts, `503` not leader) is a refusal
//!   `BudgetUnavailable`: fail closed, never a call on an unknown budget.
//! - settle: retried with backoff (`settle_backoff` doubling to `settle_backoff_max`),
//!   always with the same reservation id (the operator applies an id once), until a
//!   `200` or `settle_deadline`; a refusal (`404` the tenant has no budget any more,
//!   `400`) ends it at once.

use std::sync::Arc;
use std::time::Duration;

use agenthooks_crds::report::{
    REASON_BUDGET_EXHAUSTED, REASON_BUDGET_NOT_FOUND, ReserveRequest, ReserveResponse,
    SettleRequest, SettleResponse,
};
use tokio::time::Instant;

use super::{BudgetRefusal, Grant, SettleError};
use crate::operator_urls::{OperatorUrls, PostError};

/// Timeouts and retries of the remote budget.
#[derive(Debug, Clone)]
pub struct RemoteConfig {
    /// Bound of one reserve attempt on one URL (default 2 s).
    pub reserve_timeout: Duration,
    /// Bound of one settle attempt on one URL (default 35 s: the operator answers once
    /// `status.used` is written, or `503` after waiting 30 s for that write).
    pub settle_timeout: Duration,
    /// Settle retries stop after this long (default 120 s).
    pub settle_deadline: Duration,
    /// First pause between settle passes (default 100 ms), doubling.
    pub settle_backoff: Duration,
    /// Longest pause between settle passes (default 2 s).
    pub settle_backoff_max: Duration,
}

impl Default for RemoteConfig {
    fn default() -> Self {
        RemoteConfig {
            reserve_timeout: Duration::from_secs(2),
            settle_timeout: Duration::from_secs(35),
            settle_deadline: Duration::from_secs(120),
            settle_backoff: Duration::from_millis(100),
            settle_backoff_max: Duration::from_secs(2),
        }
    }
}

/// The operator's budget endpoints, as this dispatcher calls them.
pub struct RemoteBudgets {
    urls: Arc<OperatorUrls>,
    dispatcher: String,
    client: reqwest::Client,
    config: RemoteConfig,
}

impl RemoteBudgets {
    /// Calls the operator at `urls` as `dispatcher`.
    pub fn new(
        urls: Arc<OperatorUrls>,
        dispatcher: impl Into<String>,
        config: RemoteConfig,
    ) -> Self {
        RemoteBudgets {
            client: urls.fresh_client(Duration::from_secs(1)),
            urls,
            dispatcher: dispatcher.into(),
            config,
        }
    }

    pub(super) async fn reserve(
        &self,
        tenant: &str,
        tokens: i64,
        hook: Option<&str>,
    ) -> Result<Grant, BudgetRefusal> {
        let req = ReserveRequest {
            dispatcher: self.dispatcher.clone(),
            tenant: tenant.to_string(),
            tokens,
            hook: hook.map(str::to_string),
        };
        let answer: ReserveResponse = self
            .urls
            .post_json(
                &self.client,
                "/v1/budget/reserve",
                &req,
                self.config.reserve_timeout,
            )
            .await
            .map_err(|e| BudgetRefusal::Unavailable {
                detail: e.to_string(),
            })?;
        match (answer.granted, answer.reservation_id) {
            (true, Some(id)) if !id.is_empty() => Ok(Grant {
                reservation_id: id,
                remaining: answer.remaining.max(0),
                budget: answer.budget,
            }),
            (true, _) => Err(BudgetRefusal::Unavailable {
                detail: "the operator granted a reservation without an id".into(),
            }),
            (false, _) => Err(match answer.reason.as_deref() {
                Some(REASON_BUDGET_NOT_FOUND) => BudgetRefusal::NotFound {
                    tenant: tenant.into(),
                },
                Some(REASON_BUDGET_EXHAUSTED) => BudgetRefusal::Exhausted {
                    tokens,
                    remaining: answer.remaining.max(0),
                    budget: answer.budget,
                },
                other => BudgetRefusal::Unavailable {
                    detail: format!("the operator refused with reason {other:?}"),
                },
            }),
        }
    }

    pub(super) async fn settle(
        &self,
        tenant: &str,
        reservation_id: &str,
        tokens: i64,
    ) -> Result<SettleResponse, SettleError> {
        let req = SettleRequest {
            dispatcher: self.dispatcher.clone(),
            tenant: tenant.to_string(),
            reservation_id: reservation_id.to_string(),
            tokens,
        };
        let deadline = Instant::now() + self.config.settle_deadline;
        let mut backoff = self.config.settle_backoff;
        let mut attempts = 0u32;
        loop {
            attempts += 1;
            let left = deadline.saturating_duration_since(Instant::now());
            let pass = self.urls.post_json::<_, SettleResponse>(
                &self.client,
                "/v1/budget/settle",
                &req,
                self.config
                    .settle_timeout
                    .min(left.max(Duration::from_millis(1))),
            );
            let detail = match tokio::time::timeout_at(deadline, pass).await {
                Ok(Ok(answer)) => return Ok(answer),
                Ok(Err(e @ PostError::Refused { .. })) => {
                    // `404`: the tenant has no budget any more, nothing to count; `400`:
                    // a bad request. Either way a retry gets the same answer.
                    return Err(SettleError::Refused {
                        reservation_id: reservation_id.into(),
                        detail: e.to_string(),
                    });
                }
                Ok(Err(e)) => e.to_string(),
                Err(_) => "deadline reached during an attempt".to_string(),
            };
            let now = Instant::now();
            if now + backoff >= deadline {
                return Err(SettleError::Unacknowledged {
                    reservation_id: reservation_id.into(),
                    deadline_ms: self.config.settle_deadline.as_millis() as u64,
                    detail: format!("{attempts} attempts; last: {detail}"),
                });
            }
            tracing::warn!(tenant, reservation_id, tokens, attempts, retry_in_ms = backoff.as_millis() as u64, error = %detail, "budget settle not acknowledged; retrying");
            tokio::time::sleep(backoff).await;
            backoff = (backoff * 2).min(self.config.settle_backoff_max);
        }
    }
}
