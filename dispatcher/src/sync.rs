//! Follows the operator's snapshots by long poll (DESIGN "Sync").
//!
//! `GET <operator>/v1/snapshot?after=<version>&epoch=<epoch>&dispatcher=<id>&timeoutSeconds=30`:
//! 200 with a [`Snapshot`] when it differs from what this dispatcher holds, 304 when
//! nothing changed within the wait, 503 while the operator is not (yet) leader. With
//! several operator URLs each poll goes to the one that answered last and moves on to
//! the next on a 503, an error or a timeout ([`OperatorUrls`]). On any failure the
//! dispatcher keeps serving its last good snapshot and retries with backoff (250 ms
//! doubling to 5 s). Until the first snapshot arrives it is not ready (`/readyz` and
//! `POST /v1/dispatch` answer 503): it never decides from an empty hook set.

use std::sync::Arc;
use std::time::{Duration, Instant};

use agenthooks_crds::snapshot::Snapshot;
use tokio_util::sync::CancellationToken;

use crate::hookset::HookSet;
use crate::operator_urls::{Attempt, OperatorUrls, describe, install_crypto_provider};
use crate::server::AppState;

/// Seconds the operator may hold a poll open.
pub const POLL_WAIT_SECONDS: u64 = 30;

/// What one poll of one operator URL came to.
enum Polled {
    Changed(Box<Snapshot>),
    Unchanged,
}

/// Polls the operator at `urls` until `cancel` fires, swapping each new snapshot into
/// `state`. Each poll tries the URLs in order from the one that answered last (a `200`
/// or `304`); a `503` (not the leader), an error or a timeout moves to the next. When no
/// URL answers it waits (250 ms doubling to 5 s) and tries them all again, serving the
/// last snapshot meanwhile.
pub async fn follow(
    state: Arc<AppState>,
    urls: Arc<OperatorUrls>,
    dispatcher_id: String,
    cancel: CancellationToken,
) {
    // No idle connections: behind a Service, a new connection per poll may reach another
    // operator replica, so a dispatcher never stays stuck on a standby answering 503.
    install_crypto_provider();
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(POLL_WAIT_SECONDS + 10))
        .connect_timeout(Duration::from_secs(2))
        .pool_max_idle_per_host(0)
        .no_proxy()
        .build()
        .expect("an HTTP client builds");
    let (mut epoch, mut version) = (String::new(), 0u64);
    let mut backoff = Duration::from_millis(250);
    loop {
        let poll = urls.call(|base| {
            let url = url::Url::parse_with_params(
                &OperatorUrls::endpoint(base, "/v1/snapshot"),
                &[
                    ("after", version.to_string()),
                    ("epoch", epoch.clone()),
                    ("dispatcher", dispatcher_id.clone()),
                    ("timeoutSeconds", POLL_WAIT_SECONDS.to_string()),
                ],
            );
            let req = url.map(|u| urls.authorize(client.get(u)));
            async move {
                match req {
                    Ok(req) => poll_once(req).await,
                    Err(e) => Attempt::Next(format!("bad URL: {e}")),
                }
            }
        });
        let outcome = tokio::select! {
            _ = cancel.cancelled() => return,
            r = poll => r,
        };
        match outcome {
            Ok(Polled::Changed(snapshot)) => {
                let started = Instant::now();
                let previous = state.hooks();
                let (set, rejected) =
                    HookSet::from_snapshot(&snapshot, state.engine.edition, previous.as_deref());
                for r in &rejected {
                    tracing::warn!(target: "security.hook.hook_unavailable", hook = %format!("{}/{}", r.namespace, r.name), error = %r.errors, "hook in snapshot cannot be loaded by this dispatcher; kept as unavailable: blocking events it could apply to are answered block (HookUnavailable)");
                }
                tracing::info!(
                    operator = %urls.current(),
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
            Ok(Polled::Unchanged) => backoff = Duration::from_millis(250),
            Err(e) => {
                state.engine.metrics.sync_errors.inc();
                tracing::warn!(error = %e, retry_in_ms = backoff.as_millis() as u64, "snapshot poll failed on every operator URL; serving the last snapshot");
                tokio::select! {
                    _ = cancel.cancelled() => return,
                    _ = tokio::time::sleep(backoff) => {}
                }
                backoff = (backoff * 2).min(Duration::from_secs(5));
            }
        }
    }
}

async fn poll_once(req: reqwest::RequestBuilder) -> Attempt<Polled> {
    let resp = match req.send().await {
        Ok(r) => r,
        Err(e) => return Attempt::Next(describe(&e)),
    };
    match resp.status().as_u16() {
        200 => match resp.bytes().await {
            Ok(body) => match serde_json::from_slice(&body) {
                Ok(s) => Attempt::Answered(Polled::Changed(Box::new(s))),
                Err(e) => Attempt::Next(format!("bad snapshot: {e}")),
            },
            Err(e) => Attempt::Next(format!("reading snapshot: {}", describe(&e))),
        },
        304 => Attempt::Answered(Polled::Unchanged),
        s => Attempt::Next(format!("answered {s}")),
    }
}
