//! Wires the operator together under one cancellation token: the sync and metrics
//! servers, leader election, and a leader session (controller, publisher, ready pass)
//! for as long as this replica leads.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use kube::Client;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::config::Config;
use crate::error::Error;
use crate::leader_label::{self, LeaderLabel};
use crate::metrics::Metrics;
use crate::reconcile::session;
use crate::shared::Shared;
use crate::sync_server::SyncState;
use crate::watch_health::WatchHealth;
use crate::{admin_server, leader, sync_server};
use crate::{budget, report, sync_auth};

async fn bind(addr: SocketAddr, what: &'static str) -> Result<tokio::net::TcpListener, Error> {
    tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|source| Error::Bind { what, addr, source })
}

/// Runs the operator until `cancel` (SIGTERM/SIGINT in the binary) or a server fails.
///
/// Binds both listeners first (so a taken port fails fast), then starts leader election;
/// while this replica leads it runs a leader session, and stops it as soon as
/// leadership is lost. With [`Config::pod`] set, it labels that Pod as the leader while
/// this replica serves ([`crate::leader_label`]). On `cancel`: stops serving (waiting long
/// polls answer 503), stops the session, releases the Lease, removes the leader label and
/// waits for the servers.
///
/// `watch_health` tracks the session's watches for `/readyz` and the metrics; pass the
/// one whose [`crate::watch_health::WatchStartLayer`] is in `client`
/// ([`crate::watch_health::client`]), so a watch that starts working again after failing
/// is seen even before an object changes.
///
/// Errors: [`Error::Bind`] when a listener cannot be bound, [`Error::Metrics`] on a
/// metrics registration bug, or the first server failure.
pub async fn run(
    config: Config,
    client: Client,
    watch_health: Arc<WatchHealth>,
    cancel: CancellationToken,
) -> Result<(), Error> {
    let metrics = Metrics::new()?;
    // A certificate that cannot be used fails start-up, naming the flag.
    let sync_cert = match &config.sync_tls {
        Some(files) => Some(agenthooks_tls::ServerCert::load(files.clone())?),
        None => None,
    };
    let sync_listener =
        agenthooks_tls::Incoming::new(bind(config.sync_addr, "sync").await?, sync_cert.as_ref())?;
    let metrics_listener = bind(config.metrics_addr, "metrics").await?;
    let shared = Shared::with_watch_health(config, metrics, watch_health);
    tracing::info!(
        epoch = %shared.epoch,
        master_namespace = %shared.config.master_namespace,
        edition = %shared.config.edition,
        seal_key = shared.config.seal_key.is_some(),
        sync_audience = %shared.config.sync_auth.audience,
        identity = %shared.config.lease.identity,
        watch_grace_seconds = shared.config.watch_grace.as_secs(),
        watch_timeout_seconds = shared.config.watch_timeout_seconds,
        "agenthooks operator starting"
    );
    match &sync_cert {
        Some(cert) => {
            tracing::info!(cert = %cert.files().cert.display(), key = %cert.files().key.display(), reload_seconds = agenthooks_tls::RELOAD_INTERVAL.as_secs(), "sync port speaks TLS");
            cert.spawn_reloader("sync", agenthooks_tls::RELOAD_INTERVAL, cancel.clone());
        }
        None => tracing::warn!("{}", crate::admin_server::PLAIN_SYNC_WARNING),
    }

    let sync = spawn_server(
        cancel.clone(),
        sync_server::serve(
            sync_listener,
            sync_auth::limit(
                sync_auth::protect(
                    sync_server::router(SyncState::from_shared(&shared, cancel.clone()))
                        .merge(report::start(
                            shared.clone(),
                            client.clone(),
                            cancel.clone(),
                        ))
                        .merge(budget::start(
                            shared.clone(),
                            client.clone(),
                            cancel.clone(),
                        ))
                        .merge(crate::approvals::router(client.clone())),
                    Arc::new(sync_auth::SyncAuth::new(
                        agenthooks_kube_review::Reviewer::new(
                            client.clone(),
                            shared.config.sync_auth.audience.clone(),
                            shared.config.sync_auth.cache,
                        ),
                        shared
                            .config
                            .sync_auth
                            .namespace
                            .clone()
                            .unwrap_or_else(|| shared.config.master_namespace.clone()),
                    )),
                ),
                shared.config.sync_auth.max_concurrent_requests,
            ),
            cancel.clone(),
        ),
    );
    let admin = spawn_server(
        cancel.clone(),
        admin_server::serve(metrics_listener, shared.clone(), cancel.clone()),
    );

    let (leader_tx, leader_rx) = watch::channel(false);
    let lease = tokio::spawn(leader::run(
        client.clone(),
        shared.config.lease.clone(),
        leader_tx,
        cancel.clone(),
    ));
    let label = match shared.config.pod.clone() {
        Some(pod) => Some(tokio::spawn(leader_label::run(
            client.clone(),
            LeaderLabel::new(pod, &shared.config.lease),
            shared.serving.subscribe(),
            cancel.clone(),
        ))),
        None => {
            tracing::info!(
                "no --pod-name/--pod-namespace: the leader's Pod is not labelled ({})",
                leader_label::LEADER_LABEL
            );
            None
        }
    };

    lead_while_leader(shared.clone(), client, leader_rx, cancel.clone()).await;

    cancel.cancel();
    if tokio::time::timeout(Duration::from_secs(10), lease)
        .await
        .is_err()
    {
        tracing::warn!("leader election did not stop in time");
    }
    if let Some(label) = label
        && tokio::time::timeout(Duration::from_secs(10), label)
            .await
            .is_err()
    {
        tracing::warn!("the leader label task did not stop in time");
    }
    let mut first_error = None;
    for (what, handle) in [("sync", sync), ("metrics", admin)] {
        match tokio::time::timeout(Duration::from_secs(10), handle).await {
            Ok(Ok(Ok(()))) => {}
            Ok(Ok(Err(e))) => {
                tracing::error!(error = %e, "{what} server failed");
                first_error.get_or_insert(e);
            }
            Ok(Err(e)) => tracing::error!(error = %e, "{what} server task failed"),
            Err(_) => tracing::warn!("{what} server did not stop in time"),
        }
    }
    tracing::info!("agenthooks operator stopped");
    first_error.map_or(Ok(()), Err)
}

/// Spawns a server; its failure cancels everything.
fn spawn_server(
    cancel: CancellationToken,
    server: impl Future<Output = Result<(), Error>> + Send + 'static,
) -> JoinHandle<Result<(), Error>> {
    tokio::spawn(async move {
        let result = server.await;
        if result.is_err() {
            cancel.cancel();
        }
        result
    })
}

/// Runs a leader session each time `leader` turns true, stopping it when it turns false.
async fn lead_while_leader(
    shared: Arc<Shared>,
    client: Client,
    mut leader: watch::Receiver<bool>,
    cancel: CancellationToken,
) {
    loop {
        tokio::select! {
            _ = cancel.cancelled() => return,
            r = leader.wait_for(|l| *l) => if r.is_err() { return; },
        }
        shared.set_leader(true);
        let session_cancel = cancel.child_token();
        let mut task = tokio::spawn(session::run(
            shared.clone(),
            client.clone(),
            session_cancel.clone(),
        ));
        let ended_by_itself = tokio::select! {
            _ = cancel.cancelled() => false,
            _ = leader.wait_for(|l| !*l) => false,
            _ = &mut task => true,
        };
        shared.set_leader(false);
        session_cancel.cancel();
        if !ended_by_itself
            && tokio::time::timeout(Duration::from_secs(10), &mut task)
                .await
                .is_err()
        {
            tracing::warn!("leader session did not stop in time; aborting it");
            task.abort();
        }
        if cancel.is_cancelled() {
            return;
        }
        if ended_by_itself {
            tracing::error!("leader session ended unexpectedly; restarting it");
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
    }
}
