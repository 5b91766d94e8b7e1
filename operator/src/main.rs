//! `agenthooks-operator`: reconciles AgentHooks, compiles snapshots and syncs them to
//! dispatchers. See the library documentation for the parts.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use agenthooks_crds::{DEFAULT_MASTER_NAMESPACE, Edition};
use agenthooks_operator::config::{
    DEFAULT_WATCH_GRACE, DEFAULT_WATCH_TIMEOUT_SECONDS, default_identity, load_seal_key, own_pod,
};
use agenthooks_operator::watch_health::{self, WatchHealth};
use agenthooks_operator::{Config, LeaseConfig};
use anyhow::Context as _;
use clap::Parser;
use tokio_util::sync::CancellationToken;

/// Reconciles AgentHooks, compiles the accepted ones into versioned snapshots and
/// serves them to dispatchers by long poll. Kubeconfig: in-cluster, or $KUBECONFIG /
/// ~/.kube/config.
#[derive(Debug, Parser)]
#[command(name = "agenthooks-operator", version, about)]
struct Args {
    /// Namespace whose hooks may be global and may rewrite tool input.
    #[arg(long, default_value = DEFAULT_MASTER_NAMESPACE)]
    master_namespace: String,
    /// Product edition: lite runs command hooks, standard refuses them.
    #[arg(long, default_value = "lite")]
    edition: Edition,
    /// Lite: accept command hooks in tenant namespaces too. Off by default: a command
    /// hook runs a shell in the platform's runner, so only the master namespace may
    /// have one; others get Accepted=False (CommandHookNotAllowed).
    #[arg(long)]
    allow_tenant_command_hooks: bool,
    /// Address of the dispatchers' long-poll server (GET /v1/snapshot).
    #[arg(long, default_value = "127.0.0.1:9090")]
    sync_addr: SocketAddr,
    /// PEM certificate chain of the sync port (e.g. a mounted Secret's tls.crt). With
    /// --sync-tls-key-file the sync port speaks TLS; the files are re-read every 10 s and
    /// a new valid pair is served from the next connection on (a bad one is logged and
    /// the previous pair kept). Without both: plain HTTP, with a warning.
    #[arg(long, value_name = "PATH", env = "AGENTHOOKS_SYNC_TLS_CERT_FILE")]
    sync_tls_cert_file: Option<PathBuf>,
    /// PEM private key of --sync-tls-cert-file (e.g. a mounted Secret's tls.key).
    #[arg(long, value_name = "PATH", env = "AGENTHOOKS_SYNC_TLS_KEY_FILE")]
    sync_tls_key_file: Option<PathBuf>,
    /// Address of /healthz, /readyz and /metrics.
    #[arg(long, default_value = "127.0.0.1:9091")]
    metrics_addr: SocketAddr,
    /// File holding the 32-byte snapshot seal key (raw, or 64 hex characters). Needed
    /// only by hooks with valueFrom headers; without it they get Accepted=False
    /// (SealKeyMissing).
    #[arg(long)]
    seal_key_file: Option<PathBuf>,
    /// Audience of the dispatchers' projected ServiceAccount tokens on the sync port
    /// (verified by TokenReview; RBAC create on agenthooks/sync in the master namespace
    /// authorizes them).
    #[arg(long, default_value = agenthooks_kube_review::SYNC_AUDIENCE)]
    sync_audience: String,
    /// Namespace where RBAC must let a dispatcher create agenthooks/sync (a RoleBinding of
    /// the ClusterRole agenthooks-sync there); default: the master namespace.
    #[arg(long)]
    sync_rbac_namespace: Option<String>,
    /// Seconds a dispatcher's verified token is trusted without asking the API server
    /// again (never past the token's own expiry).
    #[arg(long, default_value_t = 120, value_parser = clap::value_parser!(u64).range(0..=3600))]
    sync_token_cache_seconds: u64,
    /// Seconds an RBAC "allowed" (create agenthooks/sync) is kept: revoking a
    /// dispatcher's RoleBinding takes effect within this time.
    #[arg(long, default_value_t = 60, value_parser = clap::value_parser!(u64).range(0..=3600))]
    sync_access_cache_seconds: u64,
    /// Seconds a refused token or an RBAC "denied" is kept.
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u64).range(0..=3600))]
    sync_denied_cache_seconds: u64,
    /// Requests the sync port serves at once (long polls included: one per dispatcher);
    /// past it a request is answered 503 at once (the dispatcher tries its next operator
    /// URL and keeps its snapshot), before its token costs a TokenReview.
    #[arg(long, default_value_t = agenthooks_operator::config::DEFAULT_SYNC_MAX_CONCURRENT_REQUESTS,
          value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=1_000_000))]
    sync_max_concurrent_requests: usize,
    /// Name of the leader-election Lease.
    #[arg(long, default_value = "agenthooks-operator")]
    lease_name: String,
    /// Namespace of the Lease (default: the master namespace).
    #[arg(long)]
    lease_namespace: Option<String>,
    /// Lease duration in seconds (how long a silent leader keeps the lock).
    #[arg(long, default_value_t = 15, value_parser = clap::value_parser!(u64).range(3..=300))]
    lease_duration_seconds: u64,
    /// Holder identity in the Lease (default: <hostname>_<pid>).
    #[arg(long)]
    identity: Option<String>,
    /// A dispatcher not seen polling for this many seconds is no longer live.
    #[arg(long, default_value_t = 30, value_parser = clap::value_parser!(u64).range(1..=3600))]
    dispatcher_ttl_seconds: u64,
    /// A watch (AgentHooks, Namespaces, Secrets) that keeps failing for this many seconds
    /// (e.g. 403 after the operator's Role lost `watch`) fails /readyz until it recovers.
    #[arg(long, default_value_t = DEFAULT_WATCH_GRACE.as_secs(), value_parser = clap::value_parser!(u64).range(1..=3600))]
    watch_grace_seconds: u64,
    /// Server-side timeout of each watch request. The API server checks permissions when
    /// a watch starts, so a lost permission shows at the latest this long after.
    #[arg(long, default_value_t = DEFAULT_WATCH_TIMEOUT_SECONDS, value_parser = clap::value_parser!(u32).range(1..=3600))]
    watch_timeout_seconds: u32,
    /// Least milliseconds between two `status.executions` writes of one hook (counts
    /// from every dispatcher are merged into each write).
    #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(u64).range(10..=60_000))]
    status_write_interval_ms: u64,
    /// Most snapshot versions whose changes are kept to answer dispatchers with deltas; a
    /// dispatcher that holds an older version gets the full snapshot.
    #[arg(long, default_value_t = agenthooks_operator::snapshot_builder::MAX_HISTORY_VERSIONS as u64, value_parser = clap::value_parser!(u64).range(1..=65_536))]
    snapshot_history_versions: u64,
    /// This replica's Pod name (the Downward API's metadata.name). With --pod-namespace, the
    /// Pod carries the label agenthooks.io/leader=true while this replica is the synced
    /// leader, so a Service can select the leader only; without both, nothing is labelled.
    #[arg(long, env = "POD_NAME")]
    pod_name: Option<String>,
    /// This replica's Pod namespace (the Downward API's metadata.namespace); see --pod-name.
    #[arg(long, env = "POD_NAMESPACE")]
    pod_namespace: Option<String>,
    /// Log format: text or json (filter with RUST_LOG, default info).
    #[arg(long, default_value = "text", value_parser = ["text", "json"])]
    log_format: String,
}

fn init_tracing(format: &str) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt().with_env_filter(filter);
    if format == "json" {
        builder.json().init();
    } else {
        builder.init();
    }
}

async fn shutdown_signal(cancel: CancellationToken) {
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(e) => {
                tracing::warn!(error = %e, "cannot listen for SIGTERM");
                std::future::pending::<()>().await;
            }
        }
    };
    tokio::select! {
        _ = term => tracing::info!("SIGTERM: shutting down"),
        _ = tokio::signal::ctrl_c() => tracing::info!("SIGINT: shutting down"),
        _ = cancel.cancelled() => return,
    }
    cancel.cancel();
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    init_tracing(&args.log_format);
    let _ = rustls::crypto::ring::default_provider().install_default();

    let seal_key = match &args.seal_key_file {
        Some(path) => Some(load_seal_key(&path.to_string_lossy())?),
        None => None,
    };
    let sync_tls = agenthooks_tls::PemFiles::from_flags(
        args.sync_tls_cert_file,
        args.sync_tls_key_file,
        "--sync-tls-cert-file",
        "--sync-tls-key-file",
    )?;
    let pod = own_pod(args.pod_name, args.pod_namespace).unwrap_or_else(|e| {
        tracing::warn!("{e}");
        None
    });
    let config = Config {
        lease: LeaseConfig {
            name: args.lease_name,
            namespace: args
                .lease_namespace
                .unwrap_or_else(|| args.master_namespace.clone()),
            identity: args.identity.unwrap_or_else(default_identity),
            duration_seconds: args.lease_duration_seconds,
        },
        master_namespace: args.master_namespace,
        edition: args.edition,
        allow_tenant_command_hooks: args.allow_tenant_command_hooks,
        sync_addr: args.sync_addr,
        metrics_addr: args.metrics_addr,
        sync_tls,
        seal_key,
        sync_auth: agenthooks_operator::config::SyncAuthConfig {
            audience: args.sync_audience,
            namespace: args.sync_rbac_namespace.filter(|n| !n.is_empty()),
            cache: agenthooks_kube_review::CacheConfig {
                token_ttl: Duration::from_secs(args.sync_token_cache_seconds),
                allowed_ttl: Duration::from_secs(args.sync_access_cache_seconds),
                denied_ttl: Duration::from_secs(args.sync_denied_cache_seconds),
                ..Default::default()
            },
            max_concurrent_requests: args.sync_max_concurrent_requests,
        },
        dispatcher_ttl: Duration::from_secs(args.dispatcher_ttl_seconds),
        watch_grace: Duration::from_secs(args.watch_grace_seconds),
        watch_timeout_seconds: args.watch_timeout_seconds,
        status_write_interval: Duration::from_millis(args.status_write_interval_ms),
        snapshot_history_versions: args.snapshot_history_versions as usize,
        pod,
    };
    let kube_config = kube::Config::infer()
        .await
        .context("loading the Kubernetes client configuration (in-cluster, or KUBECONFIG)")?;
    let health = WatchHealth::new();
    let client =
        watch_health::client(kube_config, &health).context("building a Kubernetes client")?;

    let cancel = CancellationToken::new();
    tokio::spawn(shutdown_signal(cancel.clone()));
    agenthooks_operator::run(config, client, health, cancel).await?;
    Ok(())
}
