//! The failover hold-off: for [`FAILOVER_HOLD_OFF`] after this replica starts leading,
//! its ledger refuses every reserve with `BudgetUnavailable` (fail closed) while it
//! accepts settles ([`Ledger::hold_off`](super::ledger::Ledger::hold_off)).
//!
//! Why: reservations live in the leader's memory only, so a new leader does not know
//! the ones a previous leader granted. Those are bounded in time by the hook call that
//! made them: a hook's timeout is at most 10 s and the whole blocking chain at most
//! 10 s (CONTRACT §4), and a previous leader granted nothing after this replica took the
//! Lease (it steps down before the Lease can expire, `crate::leader`). So once the
//! hold-off has passed, every call reserved with a previous leader has ended, and its
//! settle has been counted here or is still to come (and is counted when it comes).
//!
//! The hold-off is skipped only when no earlier leader can have granted anything: this
//! process has not led before, and the Lease shows this identity as its first holder
//! (`leaseTransitions` at most 1, `acquireTime` after this process started). A Lease
//! that cannot be read keeps the hold-off.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use kube::Api;

use super::Budgets;
use crate::shared::lock;

/// How long a new leader refuses reserves (12 s: just over the 10 s a hook call, and
/// the whole blocking chain, may last; CONTRACT §4).
pub const FAILOVER_HOLD_OFF: Duration = Duration::from_secs(12);

/// Limit of the Lease read.
pub const LEASE_READ_TIMEOUT: Duration = Duration::from_secs(5);

/// Whether `lease`, read while `identity` leads, shows that no one held it before:
/// `identity` holds it, it changed hands at most once (kube-lease-manager counts the
/// first acquisition as a transition), and `identity` acquired it at or after
/// `started_micros` (Unix microseconds, this process's start: a process restarted
/// under the same identity finds the old `acquireTime`).
pub fn first_holder(lease: &Lease, identity: &str, started_micros: i64) -> bool {
    let Some(spec) = lease.spec.as_ref() else {
        return false;
    };
    spec.holder_identity.as_deref() == Some(identity)
        && spec.lease_transitions.unwrap_or(0) <= 1
        && spec
            .acquire_time
            .as_ref()
            .is_some_and(|t| t.0.as_microsecond() >= started_micros)
}

/// For ledger session `session`, which holds off until [`FAILOVER_HOLD_OFF`] has
/// passed: ends the hold-off at once if this replica is the Lease's first leader and
/// `led_before` is false. Errors reading the Lease are logged; the hold-off stays.
pub async fn lift_if_first_leader(budgets: Arc<Budgets>, session: u64, led_before: bool) {
    if led_before {
        tracing::info!(
            hold_off_seconds = budgets.settings.hold_off.as_secs_f64(),
            "budget reserves held off: this replica led before and forgot its reservations"
        );
        return;
    }
    let cfg = &budgets.shared.config.lease;
    let leases: Api<Lease> = Api::namespaced(budgets.client.clone(), &cfg.namespace);
    let lease = match tokio::time::timeout(LEASE_READ_TIMEOUT, leases.get(&cfg.name)).await {
        Ok(Ok(l)) => l,
        Ok(Err(e)) => {
            tracing::info!(error = %e, lease = %cfg.name, hold_off_seconds = budgets.settings.hold_off.as_secs_f64(), "budget reserves held off: the Lease could not be read");
            return;
        }
        Err(_) => {
            tracing::info!(lease = %cfg.name, hold_off_seconds = budgets.settings.hold_off.as_secs_f64(), "budget reserves held off: the Lease read timed out");
            return;
        }
    };
    if first_holder(&lease, &cfg.identity, budgets.started_micros) {
        if lock(&budgets.ledger).end_hold_off(session) {
            tracing::info!("first leader of the Lease: no budget hold-off");
        }
    } else {
        tracing::info!(
            hold_off_seconds = budgets.settings.hold_off.as_secs_f64(),
            transitions = lease.spec.as_ref().and_then(|s| s.lease_transitions),
            "budget reserves held off after a change of leader: reservations of the previous leader may be in flight"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::coordination::v1::LeaseSpec;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;

    fn lease(holder: Option<&str>, transitions: Option<i32>, acquired_micros: i64) -> Lease {
        Lease {
            metadata: Default::default(),
            spec: Some(LeaseSpec {
                holder_identity: holder.map(str::to_string),
                lease_transitions: transitions,
                acquire_time: Some(MicroTime(
                    k8s_openapi::jiff::Timestamp::from_microsecond(acquired_micros).unwrap(),
                )),
                ..Default::default()
            }),
        }
    }

    #[test]
    fn only_a_first_acquisition_by_this_process_skips_the_hold_off() {
        let started = 1_700_000_000_000_000;
        assert!(first_holder(
            &lease(Some("me"), Some(1), started + 5),
            "me",
            started
        ));
        assert!(
            first_holder(&lease(Some("me"), None, started), "me", started),
            "between the acquisition and the transition count"
        );
        assert!(
            !first_holder(&lease(Some("me"), Some(2), started + 5), "me", started),
            "someone held it before"
        );
        assert!(
            !first_holder(&lease(Some("me"), Some(1), started - 1), "me", started),
            "acquired by an earlier process of the same identity"
        );
        assert!(!first_holder(
            &lease(Some("other"), Some(1), started + 5),
            "me",
            started
        ));
        assert!(!first_holder(
            &lease(None, Some(1), started + 5),
            "me",
            started
        ));
        assert!(!first_holder(&Lease::default(), "me", started));
    }
}
