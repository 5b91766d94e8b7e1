//! `leader_label::run` on the real API server (`agenthooks_e2e::ControlPlane::shared()`),
//! with the serving state driven by the test: plain Pod objects (no kubelet runs them)
//! stand for operator replicas.
//!
//! - not serving (or leader but not synced): the own Pod is not labelled and no other Pod
//!   is touched;
//! - serving: the own Pod gets `agenthooks.io/leader=true` and the Lease annotation under
//!   the field manager `agenthooks-operator-leader-label`; a stale leader of the same Lease
//!   (annotated, or labelled by hand without the annotation) loses the label; a leader of
//!   another Lease keeps it;
//! - a label removed by hand comes back within the resync; losing the serving state
//!   removes it; shutdown removes it;
//! - a Pod that does not exist yet is retried until it does (never fatal).

use std::collections::BTreeMap;
use std::time::Duration;

use agenthooks_e2e::{ControlPlane, unique_name};
use agenthooks_operator::config::PodRef;
use agenthooks_operator::leader_label::{self, FIELD_MANAGER, LEADER_LABEL, LeaderLabel};
use agenthooks_operator::shared::Serving;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::json;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

const LEASE: &str = "ns/agenthooks-operator";

async fn client(cp: &ControlPlane) -> kube::Client {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let kc = kube::config::Kubeconfig::read_from(&cp.kubeconfig).expect("kubeconfig");
    let config = kube::Config::from_custom_kubeconfig(kc, &Default::default())
        .await
        .expect("client config");
    kube::Client::try_from(config).expect("client")
}

/// A plain Pod named like an operator replica, with `labels` and `annotations`.
async fn create_pod(
    api: &Api<Pod>,
    name: &str,
    labels: &[(&str, &str)],
    annotations: &[(&str, &str)],
) {
    let map = |kv: &[(&str, &str)]| -> BTreeMap<String, String> {
        kv.iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    };
    let mut all_labels = map(labels);
    all_labels.insert(
        "app.kubernetes.io/name".into(),
        "agenthooks-operator".into(),
    );
    let pod: Pod = serde_json::from_value(json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": all_labels, "annotations": map(annotations)},
        "spec": {"containers": [{"name": "operator", "image": "agenthooks/operator:0.1.0"}]},
    }))
    .expect("pod");
    api.create(&PostParams::default(), &pod)
        .await
        .expect("create pod");
}

/// (label value, Lease annotation) of Pod `name`.
async fn leader_of(api: &Api<Pod>, name: &str) -> (Option<String>, Option<String>) {
    let pod = api.get(name).await.expect("get pod");
    let meta = pod.metadata;
    (
        meta.labels.and_then(|l| l.get(LEADER_LABEL).cloned()),
        meta.annotations
            .and_then(|a| a.get(leader_label::LEASE_ANNOTATION).cloned()),
    )
}

async fn labelled(api: &Api<Pod>, name: &str) -> bool {
    leader_of(api, name).await.0.as_deref() == Some("true")
}

/// Polls `f` every 100 ms for up to `timeout`.
async fn eventually<F, Fut>(timeout: Duration, what: &str, mut f: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let deadline = tokio::time::Instant::now() + timeout;
    while tokio::time::Instant::now() < deadline {
        if f().await {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("{what} (within {timeout:?})");
}

fn serving(leader: bool, synced: bool) -> Serving {
    Serving { leader, synced }
}

fn start(
    client: &kube::Client,
    ns: &str,
    pod: &str,
    rx: watch::Receiver<Serving>,
) -> (CancellationToken, tokio::task::JoinHandle<()>) {
    let cancel = CancellationToken::new();
    let label = LeaderLabel {
        pod: PodRef {
            name: pod.into(),
            namespace: ns.into(),
        },
        lease: LEASE.into(),
        resync: Duration::from_secs(1),
    };
    let task = tokio::spawn(leader_label::run(client.clone(), label, rx, cancel.clone()));
    (cancel, task)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_label_follows_the_serving_state_and_clears_stale_leaders() {
    let cp = tokio::task::spawn_blocking(ControlPlane::shared)
        .await
        .unwrap();
    let ns = unique_name("ah-leader-label");
    let ns2 = ns.clone();
    tokio::task::spawn_blocking(move || cp.create_namespace(&ns2, &[]))
        .await
        .unwrap();
    let client = client(cp).await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    let ours = [(leader_label::LEASE_ANNOTATION, LEASE)];
    let theirs = [(
        leader_label::LEASE_ANNOTATION,
        "ns/another-release-operator",
    )];
    let leader = [(LEADER_LABEL, "true")];
    create_pod(&pods, "op-a", &[], &[]).await;
    create_pod(&pods, "op-b", &[], &[]).await;
    create_pod(&pods, "op-old", &leader, &ours).await;
    create_pod(&pods, "op-by-hand", &leader, &[]).await;
    create_pod(&pods, "other-release-op", &leader, &theirs).await;

    let (tx, rx) = watch::channel(Serving::default());
    let (cancel, task) = start(&client, &ns, "op-a", rx);

    // A standby, then a leader still syncing: nothing labelled, nothing cleared (two
    // resyncs pass meanwhile).
    tokio::time::sleep(Duration::from_millis(1200)).await;
    tx.send_replace(serving(true, false));
    tokio::time::sleep(Duration::from_millis(1200)).await;
    assert!(!labelled(&pods, "op-a").await, "labelled before serving");
    for stale in ["op-old", "op-by-hand", "other-release-op"] {
        assert!(labelled(&pods, stale).await, "{stale} touched by a standby");
    }

    // Serving: labelled with the Lease annotation; the stale leaders of this Lease lose it.
    tx.send_replace(serving(true, true));
    eventually(
        Duration::from_secs(5),
        "op-a labelled, stale leaders cleared",
        || async {
            leader_of(&pods, "op-a").await == (Some("true".into()), Some(LEASE.into()))
                && !labelled(&pods, "op-old").await
                && !labelled(&pods, "op-by-hand").await
        },
    )
    .await;
    assert_eq!(
        leader_of(&pods, "op-old").await,
        (None, None),
        "annotation removed too"
    );
    assert!(
        labelled(&pods, "other-release-op").await,
        "another Lease's leader kept"
    );
    assert!(!labelled(&pods, "op-b").await);
    let managers: Vec<String> = pods
        .get("op-a")
        .await
        .unwrap()
        .metadata
        .managed_fields
        .unwrap_or_default()
        .into_iter()
        .filter_map(|m| m.manager)
        .collect();
    assert!(managers.iter().any(|m| m == FIELD_MANAGER), "{managers:?}");

    // Removed by hand: back within the resync (1 s here).
    let by_hand = PatchParams::default();
    pods.patch_metadata(
        "op-a",
        &by_hand,
        &Patch::Merge(json!({"metadata": {"labels": {LEADER_LABEL: null}}})),
    )
    .await
    .unwrap();
    assert!(!labelled(&pods, "op-a").await);
    eventually(
        Duration::from_secs(4),
        "label back after a manual removal",
        || labelled(&pods, "op-a"),
    )
    .await;

    // Leadership lost: removed.
    tx.send_replace(serving(false, false));
    eventually(
        Duration::from_secs(3),
        "label removed on losing leadership",
        || async { !labelled(&pods, "op-a").await },
    )
    .await;
    assert_eq!(leader_of(&pods, "op-a").await, (None, None));

    // Serving again, then shutdown: removed before run returns.
    tx.send_replace(serving(true, true));
    eventually(Duration::from_secs(3), "labelled again", || {
        labelled(&pods, "op-a")
    })
    .await;
    cancel.cancel();
    tokio::time::timeout(Duration::from_secs(10), task)
        .await
        .expect("run stops after cancel")
        .unwrap();
    assert_eq!(
        leader_of(&pods, "op-a").await,
        (None, None),
        "removed on shutdown"
    );
    assert!(labelled(&pods, "other-release-op").await);

    // A Pod that appears only later: retried (with backoff) until it exists.
    let (tx, rx) = watch::channel(serving(true, true));
    let (cancel, task) = start(&client, &ns, "op-late", rx);
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert!(!task.is_finished(), "a missing Pod is not fatal");
    create_pod(&pods, "op-late", &[], &[]).await;
    eventually(
        Duration::from_secs(10),
        "op-late labelled once it exists",
        || labelled(&pods, "op-late"),
    )
    .await;
    assert!(labelled(&pods, "other-release-op").await);
    drop(tx);
    // The sender gone counts as the end: the label is removed too.
    tokio::time::timeout(Duration::from_secs(10), task)
        .await
        .expect("run stops when the serving channel closes")
        .unwrap();
    assert!(!labelled(&pods, "op-late").await);
    drop(cancel);
}
