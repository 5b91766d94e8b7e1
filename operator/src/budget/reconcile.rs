//! The TenantHookBudget reconciler: writes the status a budget should show
//! ([`super::status::desired`]: `observedGeneration`, period, used, remaining, state,
//! `Accepted`) when it differs from the recorded one — never otherwise, so a budget left
//! alone is never rewritten (the status writer skips a status that would change in
//! nothing but timestamps) — through the optimistic-concurrency write of
//! [`super::commit`] (its `used` is never overwritten with a stale value), publishes
//! Events on transitions, and requeues at the start of the next UTC month so a new
//! period begins even without any spend.

use std::sync::Arc;
use std::time::Duration;

use agenthooks_crds::TenantHookBudget;
use agenthooks_crds::budget::next_period_start;
use chrono::{DateTime, Utc};
use kube::runtime::controller::Action;
use kube::{Api, ResourceExt};

use super::commit::{Committed, commit};
use super::error::BudgetError;
use super::ledger::Observed;
use super::resolution::BudgetKey;
use super::session::SessionCtx;
use super::status::{desired, transitions};
use crate::shared::lock;
use crate::status::writer::WriteKind;

/// Longest requeue of a reconciled budget (a safety net against a clock that jumped;
/// a reconcile that changes nothing writes nothing).
pub const MAX_REQUEUE: Duration = Duration::from_secs(3600);

/// How long to wait at `now` before the next reconcile: until one second past the start
/// of the next UTC month, at most [`MAX_REQUEUE`].
pub fn requeue_after(now: DateTime<Utc>) -> Duration {
    let until = (next_period_start(now) - now)
        .to_std()
        .unwrap_or(Duration::ZERO);
    (until + Duration::from_secs(1)).min(MAX_REQUEUE)
}

/// Reconciles one budget. Errors are transient; [`error_policy`] requeues.
pub async fn reconcile(
    budget: Arc<TenantHookBudget>,
    ctx: Arc<SessionCtx>,
) -> Result<Action, BudgetError> {
    let result = reconcile_budget(&budget, &ctx).await;
    if let Err(e) = &result {
        ctx.budgets
            .metrics
            .reconcile_errors_total
            .with_label_values(&[e.metric_label()])
            .inc();
    }
    result.map(|()| Action::requeue(requeue_after(Utc::now())))
}

/// Requeues a failed reconcile: soon after conflicts, later for everything else.
pub fn error_policy(
    budget: Arc<TenantHookBudget>,
    error: &BudgetError,
    _ctx: Arc<SessionCtx>,
) -> Action {
    tracing::warn!(
        budget = %format!("{}/{}", budget.namespace().unwrap_or_default(), budget.name_any()),
        error = %error,
        "budget reconcile failed; requeueing"
    );
    match error {
        BudgetError::Status(crate::Error::StatusConflict { .. }) => {
            Action::requeue(Duration::from_secs(1))
        }
        BudgetError::StoreGone => Action::await_change(),
        _ => Action::requeue(Duration::from_secs(5)),
    }
}

async fn reconcile_budget(
    budget: &Arc<TenantHookBudget>,
    ctx: &SessionCtx,
) -> Result<(), BudgetError> {
    ctx.listed().await?;
    let ns = budget
        .namespace()
        .ok_or(BudgetError::MissingField("namespace"))?;
    let key = BudgetKey::new(ns.clone(), budget.name_any());
    if budget.metadata.deletion_timestamp.is_some() {
        return Ok(());
    }
    let Some(verdict) = ctx.verdict_of(&key) else {
        tracing::debug!(budget = %key, "budget gone from the store");
        return Ok(());
    };
    let api: Api<TenantHookBudget> = Api::namespaced(ctx.budgets.client.clone(), &ns);
    let committed = commit(
        &ctx.budgets.shared.status_writer(),
        WriteKind::BudgetReconcile,
        &api,
        &key,
        Some(budget.clone()),
        // a reconcile computes its status afresh each time: nothing to carry over
        &mut None,
        // written only when it differs from the recorded one in more than timestamps
        |b| Some(desired(b, &verdict, Utc::now(), &crate::status::now())),
    )
    .await?;
    if let Committed::Written { before, after } = committed {
        let status = after.status.clone().unwrap_or_default();
        tracing::info!(budget = %key, period = ?status.period, used = status.used, remaining = status.remaining, state = ?status.state, tenant = ?verdict.tenant(), "budget status written");
        if let Some(tenant) = verdict.tenant()
            && let Some(o) = Observed::of(after.clone(), tenant)
        {
            lock(&ctx.budgets.ledger).observe_write(&o);
            ctx.budgets.refresh_tenant(tenant);
        }
        let notices = transitions(before.status.as_ref(), &status, after.spec.monthly_tokens);
        if !notices.is_empty() {
            ctx.budgets.publish(&after, notices, "Reconcile").await;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    #[test]
    fn requeue_lands_just_past_the_next_utc_month() {
        let late = Utc.with_ymd_and_hms(2026, 11, 30, 23, 59, 0).unwrap();
        assert_eq!(requeue_after(late), Duration::from_secs(61));
        let early = Utc.with_ymd_and_hms(2026, 11, 2, 0, 0, 0).unwrap();
        assert_eq!(
            requeue_after(early),
            MAX_REQUEUE,
            "a safety net far from the boundary"
        );
        let new_year = Utc.with_ymd_and_hms(2026, 12, 31, 23, 59, 59).unwrap();
        assert_eq!(requeue_after(new_year), Duration::from_secs(2));
    }
}
