//! The group-commit writer of one budget: takes every queued settle of the budget
//! ([`Ledger::take_batch`](super::ledger::Ledger::take_batch)), adds their tokens to
//! `status.used` in one optimistic-concurrency write ([`commit`]), answers them all, and
//! goes on while settles queued up meanwhile; it stops when none is left. One writer
//! runs per budget (the ledger starts it with the first queued settle).

use std::sync::Arc;
use std::time::Instant;

use agenthooks_crds::TenantHookBudget;
use kube::Api;

use super::Budgets;
use super::commit::{Committed, commit};
use super::ledger::{BatchFailure, Observed};
use super::resolution::BudgetKey;
use super::status::{transitions, with_spend};
use crate::shared::lock;

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
        let tokens = batch.tokens;
        let settles = batch.len();
        let committed = commit(
            &api,
            &key,
            Some(batch.base.clone()),
            &budgets.metrics,
            |b| Some(with_spend(b, tokens, chrono::Utc::now())),
        )
        .await;
        let (result, changed) = match committed {
            Ok(Committed::Written { before, after }) => {
                budgets
                    .metrics
                    .status_writes_total
                    .with_label_values(&["settle"])
                    .inc();
                match Observed::of(after.clone(), &tenant) {
                    Some(o) => (Ok(o), Some((before, after))),
                    None => (
                        Err(BatchFailure::Error(
                            "the API server answered a budget without metadata".into(),
                        )),
                        None,
                    ),
                }
            }
            // `with_spend` of a positive amount always changes `used`
            Ok(Committed::Unchanged(b)) => match Observed::of(b, &tenant) {
                Some(o) => (Ok(o), None),
                None => (
                    Err(BatchFailure::Error("budget without metadata".into())),
                    None,
                ),
            },
            Ok(Committed::Gone) => (Err(BatchFailure::Gone), None),
            Err(e) => (Err(BatchFailure::Error(e.to_string())), None),
        };
        match &result {
            Ok(o) => {
                tracing::debug!(budget = %key, settles, tokens, used = o.used, "settles written")
            }
            Err(e) => {
                tracing::warn!(budget = %key, settles, tokens, error = ?e, "settles not written; answered for a retry")
            }
        }
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
    }
}
