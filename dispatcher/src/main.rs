//! `agenthooks-dispatcher`: serve decisions (standalone on a hooks file, or synced from
//! the operator), or `check` one event against a hooks file.
//!
//! Exit codes of `check`: 0 allow, 2 block, 1 error (bad hooks, bad event).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;

use agenthooks_crds::sealed::SealKey;
use agenthooks_crds::{DEFAULT_MASTER_NAMESPACE, Edition};
use agenthooks_dispatcher::chain::{Verdict, decide};
use agenthooks_dispatcher::event::Event;
use agenthooks_dispatcher::handlers::http::HttpCaller;
use agenthooks_dispatcher::runner::Engine;
use agenthooks_dispatcher::server::{AppState, router};
use agenthooks_dispatcher::{manifests, sync};
use anyhow::{Context, bail};
use clap::{Args, Parser, Subcommand};
use tokio_util::sync::CancellationToken;

#[derive(Parser)]
#[command(
    name = "agenthooks-dispatcher",
    version,
    about = "Lifecycle hooks for LLM agents: the decision service"
)]
#[command(args_conflicts_with_subcommands = true)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
    #[command(flatten)]
    serve: ServeArgs,
}

#[derive(Subcommand)]
enum Command {
    /// Prints the decision for one event as JSON; exit 0 allow, 2 block, 1 error.
    Check(CheckArgs),
}

#[derive(Args, Clone)]
struct Common {
    /// lite runs command hooks; standard never does.
    #[arg(long, default_value = "lite", env = "AGENTHOOKS_EDITION")]
    edition: Edition,
    /// Namespace whose hooks may be global and may rewrite input.
    #[arg(long, default_value = DEFAULT_MASTER_NAMESPACE)]
    master_namespace: String,
    /// CIDR that http hooks may reach despite the SSRF guard (repeatable).
    #[arg(long = "http-allow-cidr", value_name = "CIDR")]
    http_allow_cidr: Vec<ipnet::IpNet>,
}

#[derive(Args)]
struct ServeArgs {
    /// Standalone mode: AgentHook manifests (file, multi-document file, or directory).
    #[arg(long, conflicts_with = "operator_url")]
    hooks: Option<PathBuf>,
    /// Synced mode: the operator's sync URL, e.g. http://127.0.0.1:9090.
    #[arg(long)]
    operator_url: Option<String>,
    /// Address to listen on.
    #[arg(long, default_value = "127.0.0.1:8080")]
    listen: SocketAddr,
    /// Key shared with the operator for sealed header values (32 bytes or 64 hex).
    #[arg(long)]
    seal_key_file: Option<PathBuf>,
    /// Stable id reported to the operator (default: hostname-pid).
    #[arg(long)]
    dispatcher_id: Option<String>,
    #[command(flatten)]
    common: Common,
}

#[derive(Args)]
struct CheckArgs {
    /// AgentHook manifests (file, multi-document file, or directory).
    #[arg(long)]
    hooks: PathBuf,
    /// The event, as the JSON body of POST /v1/dispatch.
    #[arg(long)]
    event: PathBuf,
    #[command(flatten)]
    common: Common,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()),
        )
        .with_writer(std::io::stderr)
        .init();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("a tokio runtime");
    match cli.command {
        Some(Command::Check(args)) => match runtime.block_on(check(args)) {
            Ok(Verdict::Allow) => ExitCode::from(0),
            Ok(Verdict::Block) => ExitCode::from(2),
            Err(e) => {
                eprintln!("error: {e:#}");
                ExitCode::from(1)
            }
        },
        None => match runtime.block_on(serve(cli.serve)) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("error: {e:#}");
                ExitCode::from(1)
            }
        },
    }
}

async fn check(args: CheckArgs) -> anyhow::Result<Verdict> {
    let key = SealKey::generate();
    let set = manifests::load(
        &args.hooks,
        &args.common.master_namespace,
        args.common.edition,
        &key,
    )?;
    let body = std::fs::read(&args.event).with_context(|| format!("{}", args.event.display()))?;
    let event =
        Event::parse(&body).map_err(|e| anyhow::anyhow!("{}: {e}", args.event.display()))?;
    let blocking = event.event.is_blocking();
    let engine = Engine::new(
        HttpCaller::new(args.common.http_allow_cidr),
        args.common.edition,
        key,
    );
    let mut decision = decide(&engine, &set, event).await;
    if !blocking {
        // Non-blocking events never block (CONTRACT §1.2); the hooks' outcomes are shown.
        decision.decision = Verdict::Allow;
        decision.reason = None;
        decision.deciding_hook = None;
    }
    println!("{}", serde_json::to_string_pretty(&decision)?);
    Ok(decision.decision)
}

async fn serve(args: ServeArgs) -> anyhow::Result<()> {
    let key = match &args.seal_key_file {
        Some(p) => {
            SealKey::from_bytes(&std::fs::read(p).with_context(|| format!("{}", p.display()))?)
                .with_context(|| format!("{}", p.display()))?
        }
        None => SealKey::generate(),
    };
    let engine = Engine::new(
        HttpCaller::new(args.common.http_allow_cidr.clone()),
        args.common.edition,
        key.clone(),
    );
    let state = AppState::new(engine);
    let cancel = CancellationToken::new();
    match (&args.hooks, &args.operator_url) {
        (Some(path), None) => {
            let set = manifests::load(
                path,
                &args.common.master_namespace,
                args.common.edition,
                &key,
            )?;
            tracing::info!(hooks = set.len(), path = %path.display(), edition = %args.common.edition, "standalone: hooks loaded");
            state.set_hooks(set);
        }
        (None, Some(url)) => {
            let id = args
                .dispatcher_id
                .clone()
                .unwrap_or_else(|| format!("{}-{}", hostname(), std::process::id()));
            tracing::info!(operator = %url, dispatcher = %id, "synced mode: following the operator");
            tokio::spawn(sync::follow(state.clone(), url.clone(), id, cancel.clone()));
        }
        _ => bail!("give --hooks PATH (standalone) or --operator-url URL (synced)"),
    }
    let listener = tokio::net::TcpListener::bind(args.listen)
        .await
        .with_context(|| format!("listen on {}", args.listen))?;
    tracing::info!(addr = %listener.local_addr()?, "dispatcher listening");
    let shutdown = cancel.clone();
    tokio::spawn(async move {
        shutdown_signal().await;
        shutdown.cancel();
    });
    agenthooks_dispatcher::server::serve(listener, router(state), cancel).await?;
    Ok(())
}

async fn shutdown_signal() {
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .expect("SIGTERM handler");
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term.recv() => {}
    }
}

fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| "dispatcher".into())
}
