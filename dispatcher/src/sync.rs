//! Follows the operator's snapshots by long poll (DESIGN "Sync").
//!
//! `GET <operator>/v1/snapshot?after=<version>&epoch=<epoch>&dispatcher=<id>&timeoutSeconds=30`:
//! 200 with a [`Snapshot`] when it differs from what this dispatcher holds, 304 when
//! nothing changed within the wait, 503 while the operator is not (yet) leader. On any
//! failure the dispatcher keeps serving its last good snapshot and retries with backoff
//! (250 ms doubling to 5 s). Until the first snapshot arrives it is not ready.

use std::sync::Arc;
use std::time::{Duration, Instant};

use agenthooks_crds::snapshot::Snapshot;
use tokio_util::sync::CancellationToken;

use crate::hookset::HookSet;
use crate::server::AppState;

/// Seconds the operator may hold a poll open.
pub const POLL_WAIT_SECONDS: u64 = 30;

/// Polls `operator` until `cancel` fires, swapping each new snapshot into `state`.
pub async fn follow(
    state: Arc<AppState>,
    operator: String,
    dispatcher_id: String,
    cancel: CancellationToken,
) {
    // No idle connections: behind a Service, a new connection per poll may reach another
    // operator replica, so a dispatcher never stays stuck on a standby answering 503.
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(POLL_WAIT_SECONDS + 10))
        .pool_max_idle_per_host(0)
        .build()
        .expect("an HTTP client builds");
    let base = operator.trim_end_matches('/').to_string();
    let (mut epoch, mut version) = (String::new(), 0u64);
    let mut backoff = Duration::from_millis(250);
    loop {
        let url = url::Url::parse_with_params(
            &format!("{base}/v1/snapshot"),
            &[
                ("after", version.to_string()),
                ("epoch", epoch.clone()),
                ("dispatcher", dispatcher_id.clone()),
                ("timeoutSeconds", POLL_WAIT_SECONDS.to_string()),
            ],
        );
        let req = match url {
            Ok(u) => client.get(u),
            Err(e) => {
                tracing::error!(operator = %base, error = %e, "the operator URL does not parse; not syncing");
                return;
            }
        };
        let outcome = tokio::select! {
            _ = cancel.cancelled() => return,
            r = poll_once(req) => r,
        };
        match outcome {
            Ok(Some(snapshot)) => {
                let started = Instant::now();
                let previous = state.hooks();
                let (set, rejected) =
                    HookSet::from_snapshot(&snapshot, state.engine.edition, previous.as_deref());
                for r in &rejected {
                    tracing::warn!(hook = %format!("{}/{}", r.namespace, r.name), error = %r.errors, "hook in snapshot refused by this dispatcher");
                }
                tracing::info!(
                    version = snapshot.version,
                    hooks = set.len(),
                    "snapshot loaded"
                );
                state.set_hooks(set);
                state
                    .engine
                    .metrics
                    .sync_lag
                    .observe(started.elapsed().as_secs_f64());
                epoch = snapshot.epoch;
                version = snapshot.version;
                backoff = Duration::from_millis(250);
            }
            Ok(None) => backoff = Duration::from_millis(250),
            Err(e) => {
                state.engine.metrics.sync_errors.inc();
                tracing::warn!(error = %e, retry_in_ms = backoff.as_millis() as u64, "snapshot poll failed; serving the last snapshot");
                tokio::select! {
                    _ = cancel.cancelled() => return,
                    _ = tokio::time::sleep(backoff) => {}
                }
                backoff = (backoff * 2).min(Duration::from_secs(5));
            }
        }
    }
}

async fn poll_once(req: reqwest::RequestBuilder) -> Result<Option<Snapshot>, String> {
    let resp = req
        .send()
        .await
        .map_err(|e| format!("operator unreachable: {e}"))?;
    match resp.status().as_u16() {
        200 => {
            let body = resp
                .bytes()
                .await
                .map_err(|e| format!("reading snapshot: {e}"))?;
            serde_json::from_slice(&body)
                .map(Some)
                .map_err(|e| format!("bad snapshot: {e}"))
        }
        304 => Ok(None),
        s => Err(format!("operator answered {s}")),
    }
}
