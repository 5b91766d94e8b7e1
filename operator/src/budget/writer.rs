//! The group-commit writer of one budget: takes every queued settle of the budget
//! ([`Ledger::take_batch`](super::ledger::Ledger::take_batch)), adds their tokens to
//! `status.used` in one optimistic-concurrency write ([`commit`]), answers them all, and
//! goes on while settles queued up meanwhile; it stops when none is left. One writer
//! runs per budget (the ledger starts it with the first queued settle).
//!
//! A write that fails (API errors, conflicts past [`commit`]'s attempts, timeouts) is
//! retried in the background, the same batch again, with backoff from
//! [`Settings::write_retry_first`](super::Settings::write_retry_first) doubling to
//! [`Settings::write_retry_max`](super::Settings::write_retry_max), for as long as the
//! batch's budget is in this leader's ledger ([`Ledger::holds`](super::ledger::Ledger::holds)).
//! Meanwhile its tokens keep counting against what the budget has available; settles
//! that waited past their deadline were answered 503 and their retries (same id) join
//! the batch's answer. A write without answer is carried to the next attempt
//! ([`Unconfirmed`]), so a write that landed unseen is not applied twice. The writer
//! gives up only when the batch's budget leaves the ledger (leadership lost, budget
//! deleted or replaced): its waiters get `503` and retry wherever the budget is led now.

use std::sync::Arc;
use std::time::Instant;

use agenthooks_crds::TenantHookBudget;
use kube::Api;

use super::Budgets;
use super::commit::{Committed, Unconfirmed, commit};
use super::ledger::{Batch, BatchFailure, Observed};
use super::resolution::BudgetKey;
use super::status::{transitions, with_spend};
use crate::shared::lock;
use crate::status::writer::WriteKind;

/// The written object before and after a batch (for the Events of its transitions).
type Change = Option<(Arc<TenantHookBudget>, Arc<TenantHookBudget>)>;

/// Runs the writer of `key` for ledger session `session` until nothing is queued.
pub async fn run(budgets: Arc<Budgets>, key: BudgetKey, session: u64) {
    let api: Api<TenantHookBudget> = Api::namespaced(budgets.client.clone(), &key.namespace);
    let mut uid: Option<String> = None;
    loop {
        let Some(batch) = lock(&budgets.ledger).take_batch(&key, session, uid.as_deref()) else {
            return;
        };
        uid = Some(batch.uid.clone());
        let tenant = batch.tenant.clone();
        let (tokens, settles) = (batch.tokens, batch.len());
        let (result, changed) = write(&budgets, &api, &batch).await;
        match &result {
            Ok(o) => {
                tracing::debug!(budget = %key, settles, tokens, used = o.used, "settles written")
            }
            Err(e) => {
                tracing::warn!(budget = %key, settles, tokens, error = ?e, "settles not written; answered for a retry")
            }
        }
        let abandoned = matches!(result, Err(BatchFailure::Abandoned(_)));
        let deliveries = lock(&budgets.ledger).finish_batch(
            batch,
            result.as_ref().map_err(Clone::clone),
            Instant::now(),
        );
        budgets.refresh_tenant(&tenant);
        for (tx, outcome) in deliveries {
            // the asker may have gone (timeout, connection closed): nothing to do
            let _ = tx.send(outcome);
        }
        if let Some((before, after)) = changed {
            let notices = transitions(
                before.status.as_ref(),
                after.status.as_ref().unwrap_or(&Default::default()),
                after.spec.monthly_tokens,
            );
            if !notices.is_empty() {
                budgets.publish(&after, notices, "Settle").await;
            }
        }
        if abandoned {
            return;
        }
    }
}

/// Writes `batch` until it is written, its budget is gone (404), or the batch no longer
/// belongs to the ledger (abandoned).
async fn write(
    budgets: &Budgets,
    api: &Api<TenantHookBudget>,
    batch: &Batch,
) -> (Result<Observed, BatchFailure>, Change) {
    let settings = &budgets.settings;
    let status_writer = budgets.shared.status_writer();
    let mut base = Some(batch.base.clone());
    let mut unconfirmed: Option<Unconfirmed> = None;
    let mut pause = settings.write_retry_first;
    let mut failures = 0u32;
    loop {
        let committed = commit(
            &status_writer,
            WriteKind::BudgetSettle,
            api,
            &batch.key,
            base.take(),
            &mut unconfirmed,
            |b| Some(with_spend(b, batch.tokens, chrono::Utc::now())),
        )
        .await;
        let failure = match committed {
            Ok(Committed::Written { before, after }) => {
                if failures > 0 {
                    tracing::info!(budget = %batch.key, tokens = batch.tokens, failures, "settles written after failed attempts");
                }
                match Observed::of(after.clone(), &batch.tenant) {
                    Some(o) => return (Ok(o), Some((before, after))),
                    None => "the API server answered a budget without metadata".to_string(),
                }
            }
            // nothing to add (a batch of 0 tokens): the budget as it is answers the settles
            Ok(Committed::Unchanged(b)) => match Observed::of(b, &batch.tenant) {
                Some(o) => return (Ok(o), None),
                None => "budget without metadata".to_string(),
            },
            Ok(Committed::Gone) => return (Err(BatchFailure::Gone), None),
            Err(e) => e.to_string(),
        };
        failures += 1;
        budgets.metrics.settle_write_failures_total.inc();
        if !lock(&budgets.ledger).holds(batch) {
            return (Err(abandoned()), None);
        }
        tracing::warn!(budget = %batch.key, settles = batch.len(), tokens = batch.tokens, failures, retry_in_ms = pause.as_millis() as u64, error = %failure, "budget status write failed; the settled tokens stay counted and the write is retried");
        tokio::time::sleep(pause).await;
        pause = (pause * 2).min(settings.write_retry_max);
        if !lock(&budgets.ledger).holds(batch) {
            return (Err(abandoned()), None);
        }
    }
}

fn abandoned() -> BatchFailure {
    BatchFailure::Abandoned(
        "this replica no longer holds the budget (leadership changed, or the budget was deleted or replaced) before the settle was written; retry"
            .into(),
    )
}
