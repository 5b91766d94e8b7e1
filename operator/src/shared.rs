//! State shared by the controller, the publisher, the ready pass and the servers.

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Instant;

use kube::runtime::watcher;
use tokio::sync::{Notify, watch};

use crate::config::Config;
use crate::error::Error;
use crate::index::Index;
use crate::metrics::Metrics;
use crate::ready::{DispatcherTracker, Stamps};
use crate::snapshot_builder::{Published, SnapshotLog};
use crate::status::writer::StatusWriter;
use crate::validation_cache::ValidationCache;
use crate::watch_health::{WatchHealth, WatchStatus, Watched};

/// Whether this replica may serve snapshots: it leads and its leader session finished
/// its initial sync.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct Serving {
    /// Holds the Lease.
    pub leader: bool,
    /// The initial list of the current leader session has been reconciled and published.
    pub synced: bool,
}

impl Serving {
    /// Leader and synced.
    pub fn ok(self) -> bool {
        self.leader && self.synced
    }

    /// The JSON body a sync-port call answers when it cannot be served here (503 on a
    /// replica that is not the synced leader; see `agenthooks_crds::report`):
    /// `{"error": why, "leader": bool, "synced": bool}`.
    pub fn error_body(self, why: &str) -> serde_json::Value {
        serde_json::json!({ "error": why, "leader": self.leader, "synced": self.synced })
    }
}

/// Locks a mutex, taking the data even if another thread panicked while holding it (the
/// operator never panics on purpose; a poisoned lock must not take everything down).
pub fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// The shared state.
#[derive(Debug)]
pub struct Shared {
    /// Settings.
    pub config: Config,
    /// Random per process; names every snapshot it publishes.
    pub epoch: String,
    /// Metrics.
    pub metrics: Metrics,
    /// The hook index.
    pub index: Mutex<Index>,
    /// Validation verdicts.
    pub validation: Mutex<ValidationCache>,
    /// The identity of the last published snapshot (long polls wait on it).
    pub snapshots: watch::Sender<Arc<Published>>,
    /// The published snapshot's hooks as JSON and the recent changes: the bodies of
    /// polls (full snapshots and deltas).
    pub log: Arc<Mutex<SnapshotLog>>,
    /// The hooks each publish stamped with its version, for the ready pass.
    pub stamps: Mutex<Stamps>,
    /// Leader / synced.
    pub serving: watch::Sender<Serving>,
    /// Which dispatcher holds what.
    pub tracker: Arc<Mutex<DispatcherTracker>>,
    /// Signalled when the tracker learns something that can move a `Ready`.
    pub tracker_changed: Arc<Notify>,
    /// Signalled when the index changed and a publish is wanted.
    pub publish_requested: Notify,
    /// Health of the leader session's watches (also fed by the API client's
    /// [`crate::watch_health::WatchStartLayer`]).
    pub watch_health: Arc<WatchHealth>,
}

impl Shared {
    /// Fresh state: empty index, version 0 published (empty), not serving, every watch
    /// healthy.
    pub fn new(config: Config, metrics: Metrics) -> Arc<Shared> {
        Shared::with_watch_health(config, metrics, WatchHealth::new())
    }

    /// Like [`Shared::new`], tracking watch health in `watch_health` (the one the API
    /// client's layer feeds).
    pub fn with_watch_health(
        config: Config,
        metrics: Metrics,
        watch_health: Arc<WatchHealth>,
    ) -> Arc<Shared> {
        let epoch = uuid::Uuid::new_v4().simple().to_string();
        let log = SnapshotLog::with_history(
            &epoch,
            &config.master_namespace,
            config.snapshot_history_versions,
        );
        let empty = log.published();
        let tracker = DispatcherTracker::new(config.dispatcher_ttl);
        Arc::new(Shared {
            config,
            epoch,
            metrics,
            index: Mutex::new(Index::new()),
            validation: Mutex::new(ValidationCache::new()),
            snapshots: watch::channel(Arc::new(empty)).0,
            log: Arc::new(Mutex::new(log)),
            stamps: Mutex::new(Stamps::default()),
            serving: watch::channel(Serving::default()).0,
            tracker: Arc::new(Mutex::new(tracker)),
            tracker_changed: Arc::new(Notify::new()),
            publish_requested: Notify::new(),
            watch_health,
        })
    }

    /// Records one item of watch `w`'s stream: an error counts in
    /// `agenthooks_operator_watch_errors_total` and starts (or extends) a failing streak;
    /// an object event or a finished list ends it.
    pub fn observe_watch<K>(&self, w: Watched, item: &Result<watcher::Event<K>, watcher::Error>) {
        match item {
            Err(e) => {
                self.metrics
                    .watch_errors_total
                    .with_label_values(&[w.label()])
                    .inc();
                let text = e.to_string();
                tracing::warn!(watch = %w, error = %text, "watch error (retrying with backoff)");
                self.watch_health.error(w, &text, Instant::now());
            }
            Ok(watcher::Event::Apply(_) | watcher::Event::Delete(_) | watcher::Event::InitDone) => {
                self.watch_health.ok(w)
            }
            Ok(watcher::Event::Init | watcher::Event::InitApply(_)) => {}
        }
    }

    /// Every watch's status at `now` (unhealthy past [`Config::watch_grace`]); sets
    /// `agenthooks_operator_watch_healthy`.
    pub fn watch_report(&self, now: Instant) -> Vec<WatchStatus> {
        let report = self.watch_health.report(now, self.config.watch_grace);
        for (w, s) in Watched::ALL.iter().zip(&report) {
            self.metrics
                .watch_healthy
                .with_label_values(&[w.label()])
                .set(i64::from(s.healthy));
        }
        report
    }

    /// Current leader / synced state.
    pub fn serving(&self) -> Serving {
        *self.serving.borrow()
    }

    /// The status writer of this replica ([`crate::status::writer`]): it sends a patch
    /// only while [`Serving::leader`], and counts in [`Metrics`].
    pub fn status_writer(&self) -> StatusWriter {
        StatusWriter::new(&self.metrics, self.serving.subscribe())
    }

    /// Records leadership (and drops `synced` when leadership is lost).
    pub fn set_leader(&self, leader: bool) {
        self.metrics.leader.set(i64::from(leader));
        self.serving.send_if_modified(|s| {
            let next = Serving {
                leader,
                synced: s.synced && leader,
            };
            let changed = *s != next;
            *s = next;
            changed
        });
    }

    /// Records whether the current leader session has synced (never true without
    /// leadership).
    pub fn set_synced(&self, synced: bool) {
        self.serving.send_if_modified(|s| {
            let synced = synced && s.leader;
            let changed = s.synced != synced;
            s.synced = synced;
            changed
        });
    }

    /// Publishes pending index changes now: bumps the version, turns the changed hooks
    /// into the snapshot log's next version ([`SnapshotLog::publish`]: what changed is
    /// serialized, nothing else) and wakes every waiting poll. Returns the new version,
    /// or `None` when nothing was pending.
    ///
    /// Errors: [`Error::Json`] if a hook did not serialize: nothing is published, and the
    /// next publish lists every hook again.
    pub fn publish_now(&self) -> Result<Option<u64>, Error> {
        let mut index = lock(&self.index);
        let Some(mut changes) = index.publish_changes() else {
            return Ok(None);
        };
        let version = changes.version;
        let changed = changes.hooks.len();
        let stamped = std::mem::take(&mut changes.stamped);
        let published = match lock(&self.log).publish(changes) {
            Ok(p) => p,
            Err(e) => {
                index.republish_all();
                return Err(e.into());
            }
        };
        self.metrics.snapshot_version.set(version as i64);
        self.metrics.snapshot_hooks.set(published.hooks as i64);
        tracing::info!(
            version,
            hooks = published.hooks,
            changed,
            namespaces = index.tenants().len(),
            "published snapshot"
        );
        lock(&self.stamps).record(version, stamped);
        self.snapshots.send_replace(Arc::new(published));
        drop(index);
        // served_from moved for the changed hooks: let the ready pass look again.
        self.tracker_changed.notify_one();
        Ok(Some(version))
    }

    /// The full snapshot body of the current version (what a new dispatcher gets).
    pub fn full_snapshot(&self) -> bytes::Bytes {
        lock(&self.log).full()
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::config::LeaseConfig;
    use std::time::Duration;

    pub(crate) fn config() -> Config {
        Config {
            master_namespace: "agenthooks-system".into(),
            edition: Default::default(),
            allow_tenant_command_hooks: false,
            sync_addr: "127.0.0.1:0".parse().unwrap(),
            metrics_addr: "127.0.0.1:0".parse().unwrap(),
            sync_tls: None,
            seal_key: None,
            sync_auth: Default::default(),
            lease: LeaseConfig {
                name: "l".into(),
                namespace: "agenthooks-system".into(),
                identity: "me".into(),
                duration_seconds: 15,
            },
            dispatcher_ttl: Duration::from_secs(30),
            watch_grace: Duration::from_secs(10),
            watch_timeout_seconds: 290,
            status_write_interval: std::time::Duration::from_secs(1),
            snapshot_history_versions: crate::snapshot_builder::MAX_HISTORY_VERSIONS,
            pod: None,
        }
    }

    #[test]
    fn publish_now_bumps_and_sends() {
        let shared = Shared::new(config(), Metrics::new().unwrap());
        let rx = shared.snapshots.subscribe();
        assert_eq!(rx.borrow().version, 0);
        assert_eq!(shared.publish_now().unwrap(), None, "nothing pending");
        lock(&shared.index).apply(crate::index::tests::hook("a", "h", "u", 1));
        assert_eq!(shared.publish_now().unwrap(), Some(1));
        assert_eq!(rx.borrow().version, 1);
        assert_eq!(rx.borrow().hooks, 1);
        assert_eq!(rx.borrow().epoch, shared.epoch);

        // A new tenant map alone is published too, and the snapshot carries it.
        let claim = agenthooks_crds::tenancy::NamespaceClaim {
            namespace: "a".into(),
            label: Some("acme".into()),
            created_at: "2026-01-01T00:00:00Z".into(),
        };
        let moved =
            lock(&shared.index).set_tenants(agenthooks_crds::tenancy::TenantMap::resolve(&[claim]));
        assert_eq!(moved.into_iter().collect::<Vec<_>>(), ["a"]);
        assert_eq!(shared.publish_now().unwrap(), Some(2));
        let snapshot: agenthooks_crds::snapshot::Snapshot =
            serde_json::from_slice(&shared.full_snapshot()).unwrap();
        assert_eq!(
            snapshot.tenants,
            vec![agenthooks_crds::tenancy::NamespaceTenant {
                namespace: "a".into(),
                tenant: "acme".into(),
                held_by: None,
            }]
        );
    }

    #[test]
    fn watch_errors_count_and_fail_past_the_grace() {
        let shared = Shared::new(config(), Metrics::new().unwrap());
        let err: Result<watcher::Event<()>, _> = Err(watcher::Error::NoResourceVersion);
        shared.observe_watch(Watched::AgentHooks, &err);
        shared.observe_watch(Watched::AgentHooks, &err);
        let errors = |w: Watched| {
            shared
                .metrics
                .watch_errors_total
                .with_label_values(&[w.label()])
                .get()
        };
        let healthy = |w: Watched| {
            shared
                .metrics
                .watch_healthy
                .with_label_values(&[w.label()])
                .get()
        };
        assert_eq!(
            (errors(Watched::AgentHooks), errors(Watched::Secrets)),
            (2, 0)
        );
        let now = Instant::now();
        assert!(shared.watch_report(now).iter().all(|s| s.healthy));
        let later = now + shared.config.watch_grace + Duration::from_secs(1);
        let report = shared.watch_report(later);
        assert!(!report[0].healthy && report[1].healthy && report[2].healthy);
        assert_eq!(healthy(Watched::AgentHooks), 0);
        assert_eq!(healthy(Watched::Namespaces), 1);

        // the start of a re-list does not heal it, its end does
        shared.observe_watch(Watched::AgentHooks, &Ok(watcher::Event::<()>::Init));
        assert!(!shared.watch_report(later).iter().all(|s| s.healthy));
        shared.observe_watch(Watched::AgentHooks, &Ok(watcher::Event::<()>::InitDone));
        assert!(shared.watch_report(later).iter().all(|s| s.healthy));
        assert_eq!(healthy(Watched::AgentHooks), 1);
        assert_eq!(
            errors(Watched::AgentHooks),
            2,
            "the counter never goes back"
        );
    }

    #[test]
    fn losing_leadership_drops_synced() {
        let shared = Shared::new(config(), Metrics::new().unwrap());
        shared.set_leader(true);
        shared.set_synced(true);
        assert!(shared.serving().ok());
        shared.set_leader(false);
        assert_eq!(shared.serving(), Serving::default());
    }

    #[test]
    fn error_body_names_why_leader_and_synced() {
        let serving = Serving {
            leader: true,
            synced: false,
        };
        assert_eq!(
            serving.error_body("not synced yet"),
            serde_json::json!({ "error": "not synced yet", "leader": true, "synced": false })
        );
    }
}
