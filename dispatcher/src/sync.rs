//! Follows the operator's snapshots by long poll (DESIGN "Sync").
//!
//! `GET <operator>/v1/snapshot?after=<version>&epoch=<epoch>&dispatcher=<id>&timeoutSeconds=30&deltas=true`:
//! 200 with a complete snapshot or a delta from the version held when it differs from what
//! this dispatcher holds, 304 when nothing changed within the wait, 503 while the
//! operator is not (yet) leader. The hooks held are a [`SyncedSet`]: a complete snapshot
//! builds the set served anew (reusing every unchanged compiled hook), a delta changes
//! only the lists of the hooks it names ([`crate::hookset::HookSet::apply`]). Reading
//! the body, applying it and building the set run on a blocking thread, off the workers
//! that answer dispatches. A body that does not apply (unreadable, a delta for another
//! version, a result whose count or digest is not the operator's) changes nothing: the
//! dispatcher keeps serving its last set and asks for a complete snapshot at once
//! (`full=true`). Deltas are asked for once a complete snapshot's digest matched the one
//! computed here ([`SyncedSet::takes_deltas`]); an operator that sends none answers with
//! complete snapshots, which are always taken. Under a stream of changes the polls are
//! paced ([`BUILD_PACE`]). With
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

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use agenthooks_crds::report::{Report, ReportAck, UnavailableReport};
use bytes::Bytes;
use tokio_util::sync::CancellationToken;

use crate::hookset::HookSet;
use crate::operator_urls::{Attempt, OperatorUrls, describe};
use crate::server::AppState;
use crate::synced::{Absorbed, SyncError, SyncedSet, Taken};

/// Seconds the operator may hold a poll open.
pub const POLL_WAIT_SECONDS: u64 = 30;

/// After taking a delta that spans more than one version (changes came faster than this
/// dispatcher took them), the next poll waits this many times as long as taking it took
/// (at most [`MAX_PACE_WAIT`]): under a steady stream of changes (10,000 hooks applied at
/// once) rebuilding the set then takes at most a third of a core, each rebuild covering
/// the changes that came meanwhile. Changes that come one version at a time (edits, even
/// back to back) are taken at once.
pub const BUILD_PACE: u32 = 2;

/// Longest wait of [`BUILD_PACE`].
pub const MAX_PACE_WAIT: Duration = Duration::from_millis(500);

/// A take that ran at least this long (a complete snapshot, or a delta that remade long
/// hook lists) is followed by [`release_freed_memory`]; a one-hook delta (tens of
/// microseconds) is not.
pub const TRIM_AFTER: Duration = Duration::from_millis(10);

/// Hands the heap memory freed since (the set served before, a remade list's old
/// matcher index and the temporaries of building) back to the system: glibc keeps freed
/// memory in its arenas, and a stream of large takes (10,000 hooks applied at once) left
/// a synced dispatcher with 30 MiB more RSS than its live heap. A no-op off glibc.
/// Costs about a millisecond at 10,000 hooks; runs on a blocking thread.
pub fn release_freed_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim takes no pointer and is thread-safe (it locks each arena).
    unsafe {
        libc::malloc_trim(0);
    }
}

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
    Changed(Bytes),
    Unchanged,
}

/// Takes `body` into `held`, which builds the set to serve (on a blocking thread).
fn take(held: &Mutex<SyncedSet>, body: &[u8]) -> Result<Taken, SyncError> {
    held.lock().unwrap_or_else(|p| p.into_inner()).absorb(body)
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
    let held = Arc::new(Mutex::new(SyncedSet::new(state.engine.edition)));
    let (mut epoch, mut version) = (String::new(), 0u64);
    // The last answer did not apply: ask for a complete snapshot.
    let mut want_full = false;
    let mut takes_deltas = false;
    // Not before this instant: the pace of rebuilds (BUILD_PACE).
    let mut next_poll = Instant::now();
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
        if let Some(wait) = next_poll.checked_duration_since(Instant::now()) {
            tokio::select! {
                _ = cancel.cancelled() => return,
                _ = tokio::time::sleep(wait) => {}
            }
        }
        let poll = urls.call(|base| {
            let mut params = vec![
                ("after", version.to_string()),
                ("epoch", epoch.clone()),
                ("dispatcher", dispatcher_id.clone()),
                ("timeoutSeconds", POLL_WAIT_SECONDS.to_string()),
            ];
            if takes_deltas {
                params.push(("deltas", "true".into()));
            }
            if want_full {
                params.push(("full", "true".into()));
            }
            let url =
                url::Url::parse_with_params(&OperatorUrls::endpoint(base, "/v1/snapshot"), &params);
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
            Ok(Polled::Changed(body)) => {
                let started = Instant::now();
                let taking = Arc::clone(&held);
                let taken = tokio::task::spawn_blocking(move || take(&taking, &body)).await;
                let failure = match taken {
                    Ok(Ok(t)) => Ok(t),
                    Ok(Err(e)) => {
                        state
                            .engine
                            .metrics
                            .sync_updates
                            .with_label_values(&[e.body_label(), "rejected"])
                            .inc();
                        Err(e.to_string())
                    }
                    Err(e) => Err(format!("taking the answer failed: {e}")),
                };
                let taken = match failure {
                    Ok(t) => t,
                    Err(e) => {
                        tracing::warn!(error = %e, version, "the operator's answer does not apply to the hooks held; serving them still and asking for a complete snapshot");
                        if want_full {
                            // A complete snapshot was asked for and did not apply either:
                            // wait before asking again.
                            state.engine.metrics.sync_errors.inc();
                            tokio::select! {
                                _ = cancel.cancelled() => return,
                                _ = tokio::time::sleep(backoff) => {}
                            }
                            backoff = (backoff * 2).min(Duration::from_secs(5));
                        }
                        want_full = true;
                        continue;
                    }
                };
                want_full = false;
                let (new_epoch, new_version) = {
                    let h = held.lock().unwrap_or_else(|p| p.into_inner());
                    takes_deltas = h.takes_deltas();
                    (h.epoch().to_string(), h.version())
                };
                state
                    .engine
                    .metrics
                    .sync_updates
                    .with_label_values(&[taken.absorbed.label(), "applied"])
                    .inc();
                for r in &taken.rejected {
                    tracing::warn!(target: "security.hook.hook_unavailable", hook = %format!("{}/{}", r.namespace, r.name), error = %r.errors, "hook in snapshot cannot be loaded by this dispatcher; kept as unavailable: blocking events it could apply to are answered block (HookUnavailable)");
                }
                let set = taken.set;
                if taken.absorbed == Absorbed::Snapshot {
                    tracing::info!(
                        operator = %urls.current(),
                        version = new_version,
                        hooks = set.len(),
                        "snapshot loaded"
                    );
                } else {
                    tracing::debug!(
                        operator = %urls.current(),
                        version = new_version,
                        hooks = set.len(),
                        "delta applied"
                    );
                }
                let list = unavailable_report(&set);
                state.set_hooks(set);
                if new_epoch != epoch {
                    // Another operator process: it knows nothing of this dispatcher.
                    acknowledged = None;
                }
                unavailable = Some(list);
                let took = started.elapsed();
                state.engine.metrics.sync_lag.observe(took.as_secs_f64());
                if took >= TRIM_AFTER {
                    tokio::task::spawn_blocking(release_freed_memory);
                }
                let streaming = taken.absorbed == Absorbed::Delta
                    && new_epoch == epoch
                    && new_version > version + 1;
                if streaming {
                    next_poll = Instant::now() + (took * BUILD_PACE).min(MAX_PACE_WAIT);
                }
                epoch = new_epoch;
                version = new_version;
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
        // Read here, parsed by `take` off the workers that answer dispatches.
        200 => match resp.bytes().await {
            Ok(body) => Attempt::Answered(Polled::Changed(body)),
            Err(e) => Attempt::Next(format!("reading snapshot: {}", describe(&e))),
        },
        304 => Attempt::Answered(Polled::Unchanged),
        s => Attempt::Next(format!("answered {s}")),
    }
}
