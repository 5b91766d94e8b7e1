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
//!
//! Hooks of a snapshot this dispatcher cannot load (CONTRACT §10.4) are told to the
//! operator in a `POST /v1/report` of their own (crds `Report::unavailable`, the whole
//! list), sent before the next poll whenever the list differs from the one the operator
//! acknowledged (and again after an epoch change): the poll that says "I hold version
//! N" follows the report of what of N this dispatcher cannot serve. A report that is not
//! acknowledged is retried before each poll.

use std::sync::Arc;
use std::time::{Duration, Instant};

use agenthooks_crds::report::{Report, ReportAck, UnavailableReport};
use agenthooks_crds::snapshot::Snapshot;
use tokio_util::sync::CancellationToken;

use crate::hookset::HookSet;
use crate::operator_urls::{Attempt, OperatorUrls, describe};
use crate::server::AppState;

/// Seconds the operator may hold a poll open.
pub const POLL_WAIT_SECONDS: u64 = 30;

/// Bound of one `POST /v1/report` attempt with the unavailable list, on one URL.
pub const UNAVAILABLE_REPORT_TIMEOUT: Duration = Duration::from_secs(5);

/// The hooks of `set` this dispatcher cannot load, in report form (sorted by
/// `namespace/name`; the error already cut to 1 KiB by the set).
pub fn unavailable_report(set: &HookSet) -> Vec<UnavailableReport> {
    set.unavailable()
        .iter()
        .map(|u| UnavailableReport {
            uid: u.uid.clone(),
            namespace: u.namespace.clone(),
            name: u.name.clone(),
            generation: u.generation,
            error: u.error.clone(),
        })
        .collect()
}

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
    let client = urls
        .client_builder()
        .timeout(Duration::from_secs(POLL_WAIT_SECONDS + 10))
        .connect_timeout(Duration::from_secs(2))
        .build()
        .expect("an HTTP client builds");
    let (mut epoch, mut version) = (String::new(), 0u64);
    let mut backoff = Duration::from_millis(250);
    // The unavailable list of the set served, and the last one the operator acknowledged
    // (`None`: never, or not in this epoch).
    let mut unavailable: Option<Vec<UnavailableReport>> = None;
    let mut acknowledged: Option<Vec<UnavailableReport>> = None;
    loop {
        if let Some(list) = &unavailable
            && acknowledged.as_ref() != Some(list)
        {
            let report = Report {
                dispatcher: dispatcher_id.clone(),
                report_id: uuid::Uuid::new_v4().to_string(),
                unavailable: Some(list.clone()),
                ..Default::default()
            };
            let sent = tokio::select! {
                _ = cancel.cancelled() => return,
                r = urls.post_json::<_, ReportAck>(&client, "/v1/report", &report, UNAVAILABLE_REPORT_TIMEOUT) => r,
            };
            match sent {
                Ok(_) => {
                    tracing::info!(
                        unavailable = list.len(),
                        version,
                        "operator acknowledged the hooks this dispatcher cannot load"
                    );
                    acknowledged = Some(list.clone());
                }
                Err(e) => {
                    state.engine.metrics.report_failures.inc();
                    tracing::warn!(error = %e, unavailable = list.len(), "reporting the hooks this dispatcher cannot load failed; retrying before the next poll");
                }
            }
        }
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
                let list = unavailable_report(&set);
                state.set_hooks(set);
                if snapshot.epoch != epoch {
                    // Another operator process: it knows nothing of this dispatcher.
                    acknowledged = None;
                }
                unavailable = Some(list);
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
