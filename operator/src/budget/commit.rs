//! Read-modify-write of a TenantHookBudget's status under optimistic concurrency: a JSON
//! merge patch of `/status` carrying `metadata.resourceVersion` of the object it was
//! computed from, so the API server refuses it (409) if anyone wrote in between — an
//! old leader during a failover, an administrator, our own reconciler. On 409 the
//! object is read again and the status recomputed from it, at most [`MAX_ATTEMPTS`]
//! times in all: no update is ever lost.
//!
//! A request that fails without an answer (timeout, connection lost, a 5xx such as the
//! API server's own timeout) has an unknown outcome; the object is read again and, if
//! it already shows the status we sent on a newer resourceVersion, the write counts as
//! done (so a settle is not counted twice); otherwise it is retried like a conflict. A
//! write still without answer when [`commit`] gives up is handed back as [`Unconfirmed`]:
//! the caller passes it to its next [`commit`] of the same change, which first checks
//! whether it landed (the settle writer retries a batch for as long as it leads).

use std::sync::Arc;
use std::time::Duration;

use agenthooks_crds::TenantHookBudget;
use agenthooks_crds::budget::TenantHookBudgetStatus;
use kube::api::{Patch, PatchParams};
use kube::{Api, ResourceExt};

use super::error::BudgetError;
use super::ledger::newer;
use super::metrics::BudgetMetrics;
use super::resolution::BudgetKey;

/// Attempts of one status write in all (the first and the retries after a 409).
pub const MAX_ATTEMPTS: u32 = 6;
/// Limit of each API request of a write.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

/// A status write whose outcome is unknown (no answer, or a 5xx): what was sent, and the
/// resourceVersion it was based on.
#[derive(Debug, Clone, PartialEq)]
pub struct Unconfirmed {
    /// The status sent.
    pub status: TenantHookBudgetStatus,
    /// `metadata.resourceVersion` of the object it was computed from.
    pub based_on: String,
}

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

/// Writes the status `desired` computes from the current object, starting from `base`
/// (a cached object; `None` reads it first). `desired` returns `None` when nothing is to
/// change; it is called again on the fresh object after every conflict.
///
/// `unconfirmed`: a write of this same change from an earlier call whose outcome is
/// unknown. When set, the object is read first and, if it shows that write landed, the
/// call ends there (`Written`, `before` = `after` = the fresh object) instead of
/// applying the change a second time. On return it holds the last write of this call
/// if that one's outcome is unknown, else `None`.
///
/// Errors: [`BudgetError::Conflict`] when every attempt met 409 (or no answer),
/// [`BudgetError::Timeout`] when a read did not answer in time, [`BudgetError::Kube`] for
/// any other API failure.
pub async fn commit<F>(
    api: &Api<TenantHookBudget>,
    key: &BudgetKey,
    base: Option<Arc<TenantHookBudget>>,
    metrics: &BudgetMetrics,
    unconfirmed: &mut Option<Unconfirmed>,
    mut desired: F,
) -> Result<Committed, BudgetError>
where
    F: FnMut(&TenantHookBudget) -> Option<TenantHookBudgetStatus>,
{
    let mut current = match base.filter(|_| unconfirmed.is_none()) {
        Some(b) => b,
        None => match read(api, key).await? {
            Some(b) => b,
            None => return Ok(Committed::Gone),
        },
    };
    if let Some(u) = unconfirmed.take()
        && landed(&current, &u.status, &u.based_on)
    {
        tracing::info!(budget = %key, "an earlier status write without answer had landed");
        return Ok(Committed::Written {
            before: current.clone(),
            after: current,
        });
    }
    let params = PatchParams {
        field_manager: Some(crate::FIELD_MANAGER.to_string()),
        ..PatchParams::default()
    };
    let mut attempt = 1;
    loop {
        let Some(status) = desired(&current) else {
            return Ok(Committed::Unchanged(current));
        };
        let rv = current
            .resource_version()
            .ok_or(BudgetError::MissingField("resourceVersion"))?;
        let patch = serde_json::json!({
            "metadata": { "resourceVersion": rv },
            "status": status,
        });
        let sent = tokio::time::timeout(
            REQUEST_TIMEOUT,
            api.patch_status(&key.name, &params, &Patch::Merge(&patch)),
        )
        .await;
        // (what happened, whether the write may have landed all the same)
        let (why, unknown_outcome) = match sent {
            Ok(Ok(after)) => {
                return Ok(Committed::Written {
                    before: current,
                    after: Arc::new(after),
                });
            }
            Ok(Err(kube::Error::Api(s))) if s.code == 404 => return Ok(Committed::Gone),
            Ok(Err(kube::Error::Api(s))) if s.code == 409 => {
                metrics.status_conflicts_total.inc();
                (format!("409 Conflict: {}", s.message), false)
            }
            Ok(Err(kube::Error::Api(s))) if s.code >= 500 => (
                format!("{} from the API server: {}", s.code, s.message),
                true,
            ),
            Ok(Err(e @ kube::Error::Api(_))) => return Err(e.into()),
            Ok(Err(e)) => (format!("no answer: {e}"), true),
            Err(_) => (
                format!("no answer within {} s", REQUEST_TIMEOUT.as_secs()),
                true,
            ),
        };
        if attempt >= MAX_ATTEMPTS {
            if unknown_outcome {
                *unconfirmed = Some(Unconfirmed {
                    status,
                    based_on: rv,
                });
            }
            tracing::warn!(budget = %key, attempt, error = %why, "budget status write failed on every attempt");
            return Err(BudgetError::Conflict {
                key: key.to_string(),
                attempts: attempt,
                last: why,
            });
        }
        tracing::debug!(budget = %key, attempt, error = %why, "budget status write retried from a fresh read");
        tokio::time::sleep(Duration::from_millis(20 * u64::from(attempt))).await;
        attempt += 1;
        let fresh = match read(api, key).await {
            Ok(Some(b)) => b,
            Ok(None) => return Ok(Committed::Gone),
            Err(e) => {
                if unknown_outcome {
                    *unconfirmed = Some(Unconfirmed {
                        status,
                        based_on: rv,
                    });
                }
                return Err(e);
            }
        };
        if unknown_outcome && landed(&fresh, &status, &rv) {
            tracing::info!(budget = %key, "a status write without answer had landed");
            return Ok(Committed::Written {
                before: current,
                after: fresh,
            });
        }
        current = fresh;
    }
}

/// Whether `fresh` shows a write of `sent` based on resourceVersion `based_on`: its status
/// is `sent` and its resourceVersion newer (a write whose answer was lost had landed).
pub fn landed(fresh: &TenantHookBudget, sent: &TenantHookBudgetStatus, based_on: &str) -> bool {
    fresh.status.as_ref() == Some(sent)
        && newer(fresh.resource_version().as_deref(), Some(based_on))
}

/// Reads the budget (`None` when it does not exist).
async fn read(
    api: &Api<TenantHookBudget>,
    key: &BudgetKey,
) -> Result<Option<Arc<TenantHookBudget>>, BudgetError> {
    match tokio::time::timeout(REQUEST_TIMEOUT, api.get_status(&key.name)).await {
        Ok(Ok(b)) => Ok(Some(Arc::new(b))),
        Ok(Err(kube::Error::Api(s))) if s.code == 404 => Ok(None),
        Ok(Err(e)) => Err(e.into()),
        Err(_) => Err(BudgetError::Timeout {
            what: "get",
            key: key.to_string(),
            seconds: REQUEST_TIMEOUT.as_secs(),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use agenthooks_crds::TenantHookBudgetSpec;

    fn budget(rv: &str, used: i64) -> TenantHookBudget {
        let mut b = TenantHookBudget::new(
            "b",
            TenantHookBudgetSpec {
                tenant: None,
                monthly_tokens: 1000,
            },
        );
        b.metadata.resource_version = Some(rv.into());
        b.status = Some(TenantHookBudgetStatus {
            used,
            ..Default::default()
        });
        b
    }

    #[test]
    fn a_lost_answer_counts_as_written_only_when_the_status_shows_it() {
        let sent = budget("0", 150).status.unwrap();
        assert!(landed(&budget("12", 150), &sent, "10"));
        assert!(
            !landed(&budget("10", 100), &sent, "10"),
            "nothing written since: retry"
        );
        assert!(
            !landed(&budget("12", 170), &sent, "10"),
            "someone else wrote: retry from it"
        );
    }
}
