//! Turns the index's published set into the snapshot dispatchers load
//! ([`agenthooks_crds::snapshot::Snapshot`]), serialized once per version.
//!
//! Changes are coalesced: the reconciler asks for a publish after each change, the
//! publisher waits [`PUBLISH_DEBOUNCE`] for more, then publishes once. Nothing is
//! published before the initial sync of a leader session completes (the sync server
//! does not serve before then either).

use std::sync::Arc;
use std::time::Duration;

use agenthooks_crds::snapshot::{Snapshot, SnapshotHook};
use agenthooks_crds::tenancy::NamespaceTenant;
use bytes::Bytes;
use tokio_util::sync::CancellationToken;

use crate::shared::Shared;

/// How long the publisher waits for further changes before publishing.
pub const PUBLISH_DEBOUNCE: Duration = Duration::from_millis(25);

/// A published snapshot: its identity and its JSON body, shared by every poll.
#[derive(Debug, Clone, PartialEq)]
pub struct Published {
    /// Random per operator process.
    pub epoch: String,
    /// Snapshot version (0: nothing published yet).
    pub version: u64,
    /// Number of hooks in it.
    pub hooks: usize,
    /// The [`Snapshot`] as JSON.
    pub body: Bytes,
}

/// Builds and serializes the snapshot (epoch, version, master namespace, hooks in the
/// given order, and every namespace's tenant claim: [`crate::index::Index::published_tenants`]).
///
/// Errors: [`serde_json::Error`] only if serialization failed (plain data: not expected).
pub fn build(
    epoch: &str,
    version: u64,
    master_namespace: &str,
    hooks: Vec<SnapshotHook>,
    tenants: Vec<NamespaceTenant>,
) -> Result<Published, serde_json::Error> {
    let count = hooks.len();
    let snapshot = Snapshot {
        epoch: epoch.to_string(),
        version,
        master_namespace: master_namespace.to_string(),
        hooks,
        tenants,
    };
    Ok(Published {
        epoch: epoch.to_string(),
        version,
        hooks: count,
        body: Bytes::from(serde_json::to_vec(&snapshot)?),
    })
}

/// Publishes pending index changes until `cancel`: waits for a publish request, lets
/// changes settle for [`PUBLISH_DEBOUNCE`], then publishes if the session has synced.
pub async fn run_publisher(shared: Arc<Shared>, cancel: CancellationToken) {
    loop {
        tokio::select! {
            _ = cancel.cancelled() => return,
            _ = shared.publish_requested.notified() => {}
        }
        tokio::select! {
            _ = cancel.cancelled() => return,
            _ = tokio::time::sleep(PUBLISH_DEBOUNCE) => {}
        }
        if !shared.serving().synced {
            continue;
        }
        if let Err(e) = shared.publish_now() {
            tracing::error!(error = %e, "publishing a snapshot failed");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::index::tests::hook;

    #[test]
    fn body_is_the_snapshot_json() {
        let hooks = vec![hook("tenant-a", "h", "u1", 2).hook];
        let tenants = vec![
            NamespaceTenant {
                namespace: "team-b".into(),
                tenant: "a".into(),
                held_by: Some("tenant-a".into()),
            },
            NamespaceTenant {
                namespace: "tenant-a".into(),
                tenant: "a".into(),
                held_by: None,
            },
        ];
        let p = build("ep", 7, "agenthooks-system", hooks.clone(), tenants.clone()).unwrap();
        assert_eq!((p.epoch.as_str(), p.version, p.hooks), ("ep", 7, 1));
        let back: Snapshot = serde_json::from_slice(&p.body).unwrap();
        assert_eq!(back.version, 7);
        assert_eq!(back.epoch, "ep");
        assert_eq!(back.master_namespace, "agenthooks-system");
        assert_eq!(back.hooks, hooks);
        assert_eq!(back.tenants, tenants);
        let v: serde_json::Value = serde_json::from_slice(&p.body).unwrap();
        assert!(v.get("masterNamespace").is_some(), "camelCase on the wire");
        assert_eq!(v["hooks"][0]["namespaceTenant"], "tenant-a");
        assert_eq!(
            v["tenants"],
            serde_json::json!([
                {"namespace": "team-b", "tenant": "a", "heldBy": "tenant-a"},
                {"namespace": "tenant-a", "tenant": "a"},
            ])
        );
    }
}
