//! The leader's Pod label, for a leader-only sync Service.
//!
//! Only the synced leader serves the sync port (`GET /v1/snapshot`, `POST /v1/report`,
//! `POST /v1/budget/{reserve,settle}`); a standby answers `503` (crds `report` module).
//! Behind one Service over every replica, a dispatcher's call would land on a standby about
//! half the time, and a budget reserve there is refused (fail-closed). So while this
//! replica serves ([`crate::shared::Serving::ok`]: it leads and its session has synced)
//! its own Pod carries the label [`LEADER_LABEL`]` = "true"`, and the sync Service of the
//! shipped manifests (`<operator>-leader`) selects the operator's Pods *and* that label.
//! Readiness is left alone (a standby stays ready, so rollouts never wait on leadership).
//!
//! The rules, applied by [`plan`] on every pass:
//! - serving: the own Pod gets the label (and the annotation [`LEASE_ANNOTATION`] naming
//!   the Lease, `<namespace>/<name>`); every *other* Pod of the namespace that carries the
//!   label for the same Lease (a killed or partitioned old leader) loses it. A labelled Pod
//!   without the annotation counts as ours; one whose annotation names another Lease (a
//!   second release in the same namespace) is left alone, so two releases never strip
//!   each other's leader.
//! - not serving (standby, leadership lost, a session restarting, or just started: a
//!   restarted container keeps its Pod's labels): the own Pod loses the label; other
//!   Pods are never touched.
//! - on shutdown (`cancel`): the own Pod loses the label before [`run`] returns (one
//!   attempt, at most [`SHUTDOWN_TIMEOUT`]).
//!
//! A pass lists the labelled Pods (one `list` with a label selector, metadata only) and
//! patches what differs with a JSON merge patch under field manager [`FIELD_MANAGER`]; the
//! removal from another Pod carries that Pod's `resourceVersion` as a precondition (a
//! change since the list makes it `409`, and the next pass looks again). Passes run at
//! start, on every change of the serving state, and every `resync` (the Lease duration),
//! so a label removed by hand comes back. A failed pass is logged and retried with
//! exponential backoff (0.5 s, doubling, at most 30 s); it is never fatal.
//!
//! RBAC: `get`, `list`, `patch` on `pods` in the Pod's namespace (a Role; see
//! `config/rbac/operator.yaml`).

use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams, Patch, PatchParams};
use kube::core::PartialObjectMeta;
use kube::{Client, ResourceExt};
use serde_json::{Value, json};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use crate::config::{LeaseConfig, PodRef};
use crate::shared::Serving;

/// The label the leader's Pod carries; the leader-only sync Service selects it.
pub const LEADER_LABEL: &str = "agenthooks.io/leader";
/// Its value on the leader's Pod.
pub const LEADER_VALUE: &str = "true";
/// Annotation written with the label: the Lease (`<namespace>/<name>`) whose leader the Pod
/// runs, so a leader only clears the label of its own Lease's old leaders.
pub const LEASE_ANNOTATION: &str = "agenthooks.io/leader-lease";
/// Field manager of the label patches.
pub const FIELD_MANAGER: &str = "agenthooks-operator-leader-label";
/// Longest wait for the label removal on shutdown.
pub const SHUTDOWN_TIMEOUT: Duration = Duration::from_secs(5);
/// Longest a pass may take before it counts as failed.
pub const PASS_TIMEOUT: Duration = Duration::from_secs(10);
/// First retry delay after a failed pass; it doubles up to [`MAX_BACKOFF`].
pub const INITIAL_BACKOFF: Duration = Duration::from_millis(500);
/// Longest retry delay.
pub const MAX_BACKOFF: Duration = Duration::from_secs(30);

/// What [`run`] needs.
#[derive(Debug, Clone)]
pub struct LeaderLabel {
    /// This replica's Pod.
    pub pod: PodRef,
    /// The Lease, as `<namespace>/<name>` (the [`LEASE_ANNOTATION`] value).
    pub lease: String,
    /// Time between two passes when nothing changes.
    pub resync: Duration,
}

impl LeaderLabel {
    /// For `pod`, leading through `lease`; resyncs every Lease duration.
    pub fn new(pod: PodRef, lease: &LeaseConfig) -> LeaderLabel {
        LeaderLabel {
            pod,
            lease: format!("{}/{}", lease.namespace, lease.name),
            resync: Duration::from_secs(lease.duration_seconds.max(1)),
        }
    }
}

/// A Pod that carries [`LEADER_LABEL`], as listed.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct LabelledPod {
    /// `metadata.name`.
    pub name: String,
    /// The label's value.
    pub value: String,
    /// The [`LEASE_ANNOTATION`], if any.
    pub lease: Option<String>,
    /// `metadata.resourceVersion` when listed.
    pub resource_version: Option<String>,
}

impl LabelledPod {
    fn from_meta(meta: &PartialObjectMeta<Pod>) -> LabelledPod {
        LabelledPod {
            name: meta.name_any(),
            value: meta.labels().get(LEADER_LABEL).cloned().unwrap_or_default(),
            lease: meta.annotations().get(LEASE_ANNOTATION).cloned(),
            resource_version: meta.resource_version(),
        }
    }
}

/// What to do with the own Pod.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OwnChange {
    /// Set the label (and the Lease annotation).
    Label,
    /// Remove the label (and the annotation).
    Unlabel,
}

/// What one pass changes.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Plan {
    /// The own Pod's change; `None` when it already is as it should be.
    pub own: Option<OwnChange>,
    /// Other Pods that lose the label (stale leaders of the same Lease).
    pub unlabel: Vec<LabelledPod>,
}

/// The rules of the module docs: what to change given the own Pod's name, the Lease
/// (`<namespace>/<name>`), whether this replica serves, and the Pods carrying the label.
pub fn plan(own_pod: &str, lease: &str, serving: bool, labelled: &[LabelledPod]) -> Plan {
    let mine = labelled.iter().find(|p| p.name == own_pod);
    let own = match (serving, mine) {
        (true, Some(p)) if p.value == LEADER_VALUE && p.lease.as_deref() == Some(lease) => None,
        (true, _) => Some(OwnChange::Label),
        (false, Some(_)) => Some(OwnChange::Unlabel),
        (false, None) => None,
    };
    let unlabel = if serving {
        labelled
            .iter()
            .filter(|p| p.name != own_pod && p.lease.as_deref().is_none_or(|l| l == lease))
            .cloned()
            .collect()
    } else {
        Vec::new()
    };
    Plan { own, unlabel }
}

/// JSON merge patch setting the label and the Lease annotation.
pub fn label_patch(lease: &str) -> Value {
    json!({"metadata": {
        "labels": {LEADER_LABEL: LEADER_VALUE},
        "annotations": {LEASE_ANNOTATION: lease},
    }})
}

/// JSON merge patch removing the label and the annotation; with `resource_version` the
/// API server applies it only to that version of the Pod (else `409 Conflict`).
pub fn unlabel_patch(resource_version: Option<&str>) -> Value {
    let mut patch = json!({"metadata": {
        "labels": {LEADER_LABEL: null},
        "annotations": {LEASE_ANNOTATION: null},
    }});
    if let Some(rv) = resource_version {
        patch["metadata"]["resourceVersion"] = json!(rv);
    }
    patch
}

/// Keeps the label where [`plan`] says until `cancel`, then removes it from the own Pod
/// (see the module docs). `serving` is [`crate::shared::Shared::serving`]'s receiver.
/// Never fails: API errors are logged and retried.
pub async fn run(
    client: Client,
    label: LeaderLabel,
    mut serving: watch::Receiver<Serving>,
    cancel: CancellationToken,
) {
    let labeller = Labeller {
        api: Api::namespaced(client, &label.pod.namespace),
        label,
    };
    tracing::info!(
        pod = %labeller.label.pod.name,
        namespace = %labeller.label.pod.namespace,
        label = LEADER_LABEL,
        "labelling this Pod while it serves as the leader"
    );
    // Unknown at start: a restarted container keeps its Pod's labels.
    let mut own_labelled = true;
    let mut wait = Duration::ZERO;
    let mut backoff = INITIAL_BACKOFF;
    loop {
        tokio::select! {
            _ = cancel.cancelled() => break,
            changed = serving.changed() => if changed.is_err() { break; },
            _ = tokio::time::sleep(wait) => {}
        }
        // Seen: a change during the pass wakes the next iteration.
        let _ = serving.borrow_and_update();
        let pass = tokio::time::timeout(PASS_TIMEOUT, labeller.pass(&serving, &mut own_labelled));
        let result = tokio::select! {
            _ = cancel.cancelled() => break,
            r = pass => r,
        };
        match result {
            Ok(Ok(())) => {
                backoff = INITIAL_BACKOFF;
                wait = labeller.label.resync;
            }
            Ok(Err(e)) => {
                tracing::warn!(error = %e, retry_in = ?backoff, "cannot update the leader label (retrying)");
                wait = backoff;
                backoff = (backoff * 2).min(MAX_BACKOFF);
            }
            Err(_) => {
                tracing::warn!(timeout = ?PASS_TIMEOUT, retry_in = ?backoff, "updating the leader label timed out (retrying)");
                wait = backoff;
                backoff = (backoff * 2).min(MAX_BACKOFF);
            }
        }
    }
    if own_labelled {
        let name = &labeller.label.pod.name;
        match tokio::time::timeout(SHUTDOWN_TIMEOUT, labeller.patch(name, unlabel_patch(None)))
            .await
        {
            Ok(Ok(())) => tracing::info!(pod = %name, "leader label removed on shutdown"),
            Ok(Err(e)) => {
                tracing::warn!(error = %e, pod = %name, "cannot remove the leader label on shutdown")
            }
            Err(_) => {
                tracing::warn!(pod = %name, "removing the leader label on shutdown timed out")
            }
        }
    }
}

struct Labeller {
    api: Api<Pod>,
    label: LeaderLabel,
}

impl Labeller {
    /// One pass: list the labelled Pods, apply [`plan`]. `own_labelled` tracks whether the
    /// own Pod may carry the label (so shutdown knows whether to remove it).
    async fn pass(
        &self,
        serving: &watch::Receiver<Serving>,
        own_labelled: &mut bool,
    ) -> Result<(), kube::Error> {
        let want = serving.borrow().ok();
        let listed = self
            .api
            .list_metadata(&ListParams::default().labels(LEADER_LABEL))
            .await?;
        let labelled: Vec<LabelledPod> = listed.items.iter().map(LabelledPod::from_meta).collect();
        let own = &self.label.pod.name;
        *own_labelled = labelled.iter().any(|p| &p.name == own);
        let plan = plan(own, &self.label.lease, want, &labelled);
        match plan.own {
            Some(OwnChange::Label) => {
                *own_labelled = true;
                self.patch(own, label_patch(&self.label.lease)).await?;
                tracing::info!(pod = %own, "labelled this Pod as the leader ({LEADER_LABEL}={LEADER_VALUE})");
            }
            Some(OwnChange::Unlabel) => {
                self.patch(own, unlabel_patch(None)).await?;
                *own_labelled = false;
                tracing::info!(pod = %own, "removed the leader label from this Pod");
            }
            None => {}
        }
        for stale in &plan.unlabel {
            if !serving.borrow().ok() {
                // Stepped down meanwhile: the next pass decides again.
                break;
            }
            match self
                .patch(
                    &stale.name,
                    unlabel_patch(stale.resource_version.as_deref()),
                )
                .await
            {
                Ok(()) => {
                    tracing::info!(pod = %stale.name, "removed the leader label from a former leader's Pod")
                }
                Err(kube::Error::Api(s)) if s.is_not_found() => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    async fn patch(&self, name: &str, body: Value) -> Result<(), kube::Error> {
        let params = PatchParams {
            field_manager: Some(FIELD_MANAGER.to_string()),
            ..Default::default()
        };
        self.api
            .patch_metadata(name, &params, &Patch::Merge(&body))
            .await
            .map(|_| ())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LEASE: &str = "agenthooks-system/agenthooks-operator";

    fn pod(name: &str, lease: Option<&str>) -> LabelledPod {
        LabelledPod {
            name: name.into(),
            value: LEADER_VALUE.into(),
            lease: lease.map(str::to_string),
            resource_version: Some(format!("rv-{name}")),
        }
    }

    fn names(plan: &Plan) -> Vec<&str> {
        plan.unlabel.iter().map(|p| p.name.as_str()).collect()
    }

    #[test]
    fn the_serving_leader_labels_itself_once() {
        let p = plan("op-a", LEASE, true, &[]);
        assert_eq!(p.own, Some(OwnChange::Label));
        assert!(p.unlabel.is_empty());
        // already labelled for this Lease: nothing to do
        assert_eq!(
            plan("op-a", LEASE, true, &[pod("op-a", Some(LEASE))]),
            Plan::default()
        );
        // labelled without the annotation, for another Lease, or with another value:
        // patched to the right label and annotation
        for mine in [
            pod("op-a", None),
            pod("op-a", Some("other/lease")),
            LabelledPod {
                value: "false".into(),
                ..pod("op-a", Some(LEASE))
            },
        ] {
            assert_eq!(
                plan("op-a", LEASE, true, std::slice::from_ref(&mine)).own,
                Some(OwnChange::Label),
                "{mine:?}"
            );
        }
    }

    #[test]
    fn the_serving_leader_clears_stale_leaders_of_its_lease_only() {
        let labelled = [
            pod("op-a", Some(LEASE)),
            pod("op-old", Some(LEASE)),
            pod("op-by-hand", None),
            pod("other-release-op", Some("agenthooks-system/other-operator")),
        ];
        let p = plan("op-a", LEASE, true, &labelled);
        assert_eq!(p.own, None);
        assert_eq!(names(&p), ["op-old", "op-by-hand"]);
        // the removal carries the resourceVersion seen in the list
        assert_eq!(p.unlabel[0].resource_version.as_deref(), Some("rv-op-old"));
    }

    #[test]
    fn a_replica_that_does_not_serve_unlabels_itself_and_nothing_else() {
        let labelled = [pod("op-a", Some(LEASE)), pod("op-b", Some(LEASE))];
        let p = plan("op-a", LEASE, false, &labelled);
        assert_eq!(p.own, Some(OwnChange::Unlabel));
        assert!(p.unlabel.is_empty(), "a standby never touches other Pods");
        // not labelled: nothing to do
        assert_eq!(
            plan("op-c", LEASE, false, &labelled),
            Plan::default(),
            "a standby leaves the leader's label alone"
        );
        // a label from another Lease on the own Pod goes too (this replica serves none)
        assert_eq!(
            plan("op-a", LEASE, false, &[pod("op-a", Some("x/y"))]).own,
            Some(OwnChange::Unlabel)
        );
    }

    #[test]
    fn patches_set_and_clear_label_and_annotation() {
        assert_eq!(
            label_patch(LEASE),
            json!({"metadata": {
                "labels": {"agenthooks.io/leader": "true"},
                "annotations": {"agenthooks.io/leader-lease": LEASE},
            }})
        );
        assert_eq!(
            unlabel_patch(None),
            json!({"metadata": {
                "labels": {"agenthooks.io/leader": null},
                "annotations": {"agenthooks.io/leader-lease": null},
            }})
        );
        assert_eq!(
            unlabel_patch(Some("42"))["metadata"]["resourceVersion"],
            "42"
        );
    }

    #[test]
    fn lease_names_namespace_and_name_and_resync_is_the_duration() {
        let l = LeaderLabel::new(
            PodRef {
                name: "op-a".into(),
                namespace: "ns".into(),
            },
            &LeaseConfig {
                name: "agenthooks-operator".into(),
                namespace: "ns".into(),
                identity: "op-a".into(),
                duration_seconds: 15,
            },
        );
        assert_eq!(l.lease, "ns/agenthooks-operator");
        assert_eq!(l.resync, Duration::from_secs(15));
    }
}
