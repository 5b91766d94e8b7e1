//! Leader election through a `coordination.k8s.io/v1` Lease, with `kube-lease-manager`
//! (CONVENTIONS habit 8).
//!
//! [`run`] keeps a lease manager running and reports leadership on a watch channel.
//! Because the lease manager keeps saying "leader" while its renewals fail (it only
//! retries), a guard re-reads the Lease every grace period while leading and reports
//! leadership only while the Lease names this identity and has not expired
//! (`renewTime + leaseDurationSeconds`, checked against the last successful read), so a
//! replica cut off from the API server steps down on its own before another may take over.

use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use kube::{Api, Client};
use kube_lease_manager::LeaseManagerBuilder;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use crate::config::LeaseConfig;

/// Field manager of the Lease writes.
pub const LEASE_FIELD_MANAGER: &str = "agenthooks-operator-lease";

/// Grace period (seconds) used with a lease duration: renewals happen this long before
/// expiry, and the guard re-reads the Lease this often. A third of the duration, at least 1.
pub fn grace_seconds(duration_seconds: u64) -> u64 {
    (duration_seconds / 3).max(1)
}

fn now_micros() -> i64 {
    chrono::Utc::now().timestamp_micros()
}

/// When `lease`, as read, stops being held by `identity`: `renewTime +
/// leaseDurationSeconds` in Unix microseconds, or `None` when another identity (or
/// nobody) holds it or a field is missing.
pub fn held_until(lease: &Lease, identity: &str) -> Option<i64> {
    let spec = lease.spec.as_ref()?;
    if spec.holder_identity.as_deref() != Some(identity) {
        return None;
    }
    let renew = spec.renew_time.as_ref()?.0.as_microsecond();
    let duration = i64::from(spec.lease_duration_seconds?);
    Some(renew + duration * 1_000_000)
}

/// Runs leader election until `cancel`, sending `true` on `leader` while this replica
/// leads and `false` otherwise. On `cancel` it sends `false`, then releases the Lease
/// (waiting at most 5 s).
pub async fn run(
    client: Client,
    cfg: LeaseConfig,
    leader: watch::Sender<bool>,
    cancel: CancellationToken,
) {
    let duration = cfg.duration_seconds.max(3);
    let grace = grace_seconds(duration);
    let leases: Api<Lease> = Api::namespaced(client.clone(), &cfg.namespace);
    let mut backoff = Duration::from_secs(1);
    loop {
        if cancel.is_cancelled() {
            leader.send_replace(false);
            return;
        }
        let built = LeaseManagerBuilder::new(client.clone(), &cfg.name)
            .with_namespace(&cfg.namespace)
            .with_identity(&cfg.identity)
            .with_duration(duration)
            .with_grace(grace)
            .with_field_manager(LEASE_FIELD_MANAGER)
            .build()
            .await;
        let manager = match built {
            Ok(m) => m,
            Err(e) => {
                tracing::error!(error = %e, lease = %cfg.name, namespace = %cfg.namespace, "cannot set up leader election; retrying");
                tokio::select! {
                    _ = cancel.cancelled() => { leader.send_replace(false); return; }
                    _ = tokio::time::sleep(backoff) => {}
                }
                backoff = (backoff * 2).min(Duration::from_secs(30));
                continue;
            }
        };
        backoff = Duration::from_secs(1);
        tracing::info!(identity = %cfg.identity, lease = %cfg.name, namespace = %cfg.namespace, duration, "leader election started");
        let (mut rx, handle) = manager.watch().await;
        let mut lib_leader = *rx.borrow_and_update();
        let mut valid_until: Option<i64> = None;
        let mut check = tokio::time::interval(Duration::from_secs(grace));
        check.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut effective = false;
        loop {
            tokio::select! {
                _ = cancel.cancelled() => {
                    leader.send_replace(false);
                    drop(rx);
                    match tokio::time::timeout(Duration::from_secs(5), handle).await {
                        Ok(Ok(Ok(_))) => tracing::info!("lease released"),
                        Ok(Ok(Err(e))) => tracing::warn!(error = %e, "releasing the lease failed"),
                        Ok(Err(e)) => tracing::warn!(error = %e, "lease task failed"),
                        Err(_) => tracing::warn!("releasing the lease timed out"),
                    }
                    return;
                }
                changed = rx.changed() => {
                    if changed.is_err() {
                        tracing::error!("lease manager stopped; restarting leader election");
                        leader.send_replace(false);
                        break;
                    }
                    lib_leader = *rx.borrow_and_update();
                    valid_until = None;
                    if lib_leader {
                        check.reset_immediately();
                    }
                }
                _ = check.tick(), if lib_leader => {
                    match leases.get(&cfg.name).await {
                        Ok(lease) => valid_until = held_until(&lease, &cfg.identity),
                        Err(e) => tracing::warn!(error = %e, "cannot read the lease; leadership holds until its last known expiry"),
                    }
                }
            }
            // Until the first read after acquiring, the acquisition itself is the proof.
            let now = now_micros();
            let guard_ok = match valid_until {
                Some(t) => now < t,
                None => lib_leader,
            };
            let next = lib_leader && guard_ok;
            if next != effective {
                effective = next;
                if effective {
                    tracing::info!(identity = %cfg.identity, "became the leader");
                } else {
                    tracing::warn!(identity = %cfg.identity, "no longer the leader");
                }
                leader.send_replace(effective);
            }
        }
        if cancel.is_cancelled() {
            return;
        }
        tokio::select! {
            _ = cancel.cancelled() => return,
            _ = tokio::time::sleep(backoff) => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::coordination::v1::LeaseSpec;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;

    fn lease(holder: &str, renew_secs: i64, duration: i32) -> Lease {
        Lease {
            spec: Some(LeaseSpec {
                holder_identity: Some(holder.into()),
                renew_time: Some(MicroTime(
                    k8s_openapi::jiff::Timestamp::from_second(renew_secs).unwrap(),
                )),
                lease_duration_seconds: Some(duration),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    #[test]
    fn held_until_is_renew_plus_duration_for_our_identity_only() {
        assert_eq!(held_until(&lease("me", 100, 15), "me"), Some(115_000_000));
        assert_eq!(held_until(&lease("other", 100, 15), "me"), None);
        assert_eq!(held_until(&Lease::default(), "me"), None);
    }

    #[test]
    fn grace_is_a_third_at_least_one() {
        assert_eq!(grace_seconds(15), 5);
        assert_eq!(grace_seconds(3), 1);
        assert_eq!(grace_seconds(2), 1);
    }
}
