//! `agenthooks-dispatcher budget-load`: N reserve → hold → settle cycles through the
//! same [`Budgets`] code the handlers use, C at a time; the e2e test runs several of
//! these processes against one budget to check that `used` equals the sum of settled
//! costs and that no more is admitted than the budget holds (issue 3 point 3).

use std::collections::BTreeMap;
use std::time::Duration;

use futures::StreamExt;
use serde::Serialize;

use super::Budgets;

/// What to run.
#[derive(Debug, Clone)]
pub struct LoadPlan {
    pub tenant: String,
    /// Cycles in all.
    pub calls: usize,
    /// Cycles in flight at most.
    pub concurrency: usize,
    /// Tokens reserved per cycle.
    pub reserve: i64,
    /// Tokens settled per granted cycle.
    pub settle: i64,
    /// Pause between a grant and its settle (the "call").
    pub hold: Duration,
}

/// The one JSON line `budget-load` prints.
#[derive(Debug, Clone, Default, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct LoadSummary {
    /// Reservations granted.
    pub granted: u64,
    /// Reservations refused.
    pub refused: u64,
    /// Refusals by reason (`BudgetExhausted`, `BudgetNotFound`, `BudgetUnavailable`).
    pub refused_reasons: BTreeMap<String, u64>,
    /// Tokens of the settles the backend acknowledged.
    pub settled_tokens: i64,
    /// Settles not acknowledged (their tokens are not in `settledTokens`).
    pub errors: u64,
}

enum CycleOutcome {
    Settled(i64),
    Refused(&'static str),
    SettleFailed,
}

/// Runs `plan` on `budgets`.
pub async fn run(budgets: &Budgets, plan: &LoadPlan) -> LoadSummary {
    let hook = "budget-load";
    let outcomes: Vec<CycleOutcome> = futures::stream::iter(0..plan.calls)
        .map(|_| async move {
            match budgets
                .reserve(&plan.tenant, plan.reserve, Some(hook))
                .await
            {
                Err(refusal) => CycleOutcome::Refused(refusal.reason()),
                Ok(reservation) => {
                    if !plan.hold.is_zero() {
                        tokio::time::sleep(plan.hold).await;
                    }
                    match reservation.settle(plan.settle).await {
                        Ok(_) => CycleOutcome::Settled(plan.settle),
                        Err(_) => CycleOutcome::SettleFailed,
                    }
                }
            }
        })
        .buffer_unordered(plan.concurrency.max(1))
        .collect()
        .await;
    let mut summary = LoadSummary::default();
    for o in outcomes {
        match o {
            CycleOutcome::Settled(tokens) => {
                summary.granted += 1;
                summary.settled_tokens += tokens;
            }
            CycleOutcome::SettleFailed => {
                summary.granted += 1;
                summary.errors += 1;
            }
            CycleOutcome::Refused(reason) => {
                summary.refused += 1;
                *summary
                    .refused_reasons
                    .entry(reason.to_string())
                    .or_default() += 1;
            }
        }
    }
    summary
}
