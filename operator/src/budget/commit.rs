//! Read-modify-write of a TenantHookBudget's status under optimistic concurrency, through
//! the operator's one status writer ([`crate::status::writer`]; kinds `budget_settle` and
//! `budget_reconcile`): a JSON merge patch of `/status` carrying `metadata.resourceVersion`
//! of the object it was computed from, so the API server refuses it (409) if anyone wrote
//! in between — an old leader during a failover, an administrator, our own reconciler. On
//! 409 the object is read again and the status recomputed from it, within the writer's
//! retry policy: no update is ever lost. Nothing is sent unless this replica leads, and a
//! status that would change in nothing but timestamps is not written.
//!
//! A request that fails without an answer (timeout, connection lost, a 5xx such as the
//! API server's own timeout) has an unknown outcome; the writer finds out whether it
//! landed (the budget's first change after the version the write was based on is ours
//! exactly when it shows the status sent), so a settle is not counted twice. A write still
//! without answer when [`commit`] gives up is handed back as [`Unconfirmed`]: the caller
//! passes it to its next [`commit`] of the same change, which first finds out whether it
//! landed (the settle writer retries a batch for as long as it leads).

use std::sync::Arc;

use agenthooks_crds::TenantHookBudget;
use agenthooks_crds::budget::TenantHookBudgetStatus;
use kube::Api;

use super::error::BudgetError;
use super::resolution::BudgetKey;
use crate::status::writer::{InDoubt, Outcome, Plan, StatusWriter, WriteKind};

/// A status write whose outcome is unknown (no answer, or a 5xx): the version it was based
/// on and the status it sent.
pub type Unconfirmed = InDoubt<()>;

/// What [`commit`] did.
#[derive(Debug, Clone)]
pub enum Committed {
    /// Nothing to change (the object as last read).
    Unchanged(Arc<TenantHookBudget>),
    /// Written: the object the status was computed from, and the object after.
    Written {
        /// As read before the write.
        before: Arc<TenantHookBudget>,
        /// As the API server answered the write.
        after: Arc<TenantHookBudget>,
    },
    /// The budget does not exist (404).
    Gone,
}

/// Writes the status `desired` computes from the current object, as `kind`
/// ([`WriteKind::BudgetSettle`] or [`WriteKind::BudgetReconcile`]) through `w`, starting
/// from `base` (a cached object; `None` reads it first). `desired` returns `None` when
/// nothing is to change; it is called again on the fresh object after every conflict.
///
/// `unconfirmed`: a write of this same change from an earlier call whose outcome is
/// unknown. When set, the object is read first and, if it shows that write landed, the
/// call ends there (`Written`) instead of applying the change a second time. On return it
/// holds the last write of this call if that one's outcome is unknown, else `None`.
///
/// Errors: [`BudgetError::Status`] with [`crate::Error::StatusConflict`] when every
/// attempt met 409, [`crate::Error::NotLeader`] when this replica no longer leads, or
/// [`crate::Error::Kube`] for any other API failure (a timeout included).
pub async fn commit<F>(
    w: &StatusWriter,
    kind: WriteKind,
    api: &Api<TenantHookBudget>,
    key: &BudgetKey,
    base: Option<Arc<TenantHookBudget>>,
    unconfirmed: &mut Option<Unconfirmed>,
    mut desired: F,
) -> Result<Committed, BudgetError>
where
    F: FnMut(&TenantHookBudget) -> Option<TenantHookBudgetStatus> + Send,
{
    let target = w.object(api, &key.name);
    let start = base.map(Arc::unwrap_or_clone);
    let outcome = w
        .write(
            kind,
            &target,
            start,
            unconfirmed,
            |b: &TenantHookBudget| match desired(b) {
                None => Plan::Skip(()),
                Some(status) => Plan::Write {
                    status: serde_json::json!(status),
                    answer: (),
                },
            },
        )
        .await?;
    Ok(match outcome {
        Outcome::Unchanged { current, .. } => Committed::Unchanged(Arc::new(current)),
        Outcome::Written { before, after, .. } => {
            let before = Arc::new(before);
            Committed::Written {
                after: after.map_or_else(|| before.clone(), Arc::new),
                before,
            }
        }
        Outcome::Gone => Committed::Gone,
    })
}
