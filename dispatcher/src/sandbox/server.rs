//! The command runner: `agenthooks-dispatcher command-runner --socket PATH`, a second
//! container of the dispatcher Pod (CONTRACT §10.1).
//!
//! It accepts one [`RunRequest`] per connection on a Unix socket, runs it with
//! [`local::run`] under its own limits (timeout capped at `MAX_TIMEOUT_MS`, outputs
//! capped, the whole tree killed — never trusting the dispatcher to have checked), and
//! answers one [`RunOutcome`]. A client that closes the connection before the answer
//! cancels the run (its tree is killed). At most `max_runs` runs at once; past it the
//! answer is `RunnerUnavailable` at once. A root runner gives every run in flight a uid
//! of its own ([`super::uids`]).

use std::os::unix::fs::{FileTypeExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use tokio::io::AsyncReadExt;
use tokio::net::{UnixListener, UnixStream};
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;

use super::local::{self, LocalConfig};
use super::protocol::{MAX_REQUEST_FRAME, RunOutcome, RunRequest, read_frame, write_frame};
use super::supervise::RunAs;
use super::uids::UidPool;

/// Most time a client may take to send its request.
const REQUEST_READ_TIMEOUT: Duration = Duration::from_secs(10);

/// How the runner serves.
#[derive(Debug)]
pub struct ServerConfig {
    /// The Unix socket to create (a stale socket there is replaced; any other file is
    /// an error). Mode 0660: the dispatcher reaches it through the shared group.
    pub socket: PathBuf,
    /// Runs in flight at most.
    pub max_runs: usize,
    /// Where runs' private directories go and as whom they run.
    pub local: LocalConfig,
    /// A root runner: each run in flight takes its own uid from this pool (`local.run_as`
    /// is then set per run).
    pub uids: Option<UidPool>,
}

/// Errors starting the runner.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error("--socket {path}: {source}")]
    Socket {
        path: String,
        source: std::io::Error,
    },
    #[error("--socket {0}: a file that is not a socket is in the way")]
    NotASocket(String),
}

/// Binds the socket and serves until `cancel`.
pub async fn serve(config: ServerConfig, cancel: CancellationToken) -> Result<(), ServeError> {
    let listener = bind(&config.socket)?;
    tracing::info!(socket = %config.socket.display(), max_runs = config.max_runs, tmp = %config.local.tmp_root.display(), run_as = ?config.local.run_as, uid_per_run = config.uids.is_some(), "command runner listening");
    let slots = Arc::new(Semaphore::new(config.max_runs.max(1)));
    let local = Arc::new(config.local);
    let uids = config.uids.map(Arc::new);
    loop {
        let conn = tokio::select! {
            () = cancel.cancelled() => break,
            c = listener.accept() => c,
        };
        let (conn, _) = match conn {
            Ok(c) => c,
            Err(e) => {
                tracing::warn!(error = %e, "command runner: accept failed");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let permit = Arc::clone(&slots).try_acquire_owned().ok();
        let local = Arc::clone(&local);
        let uids = uids.clone();
        let max = config.max_runs;
        tokio::spawn(async move {
            let Some(_permit) = permit else {
                return refuse(conn, format!("command runner busy: {max} runs in flight")).await;
            };
            let Some(pool) = uids else {
                return handle(conn, &local, None).await;
            };
            // Held until the run is over and its uid swept (the permit too).
            let Some(uid) = pool.take() else {
                return refuse(
                    conn,
                    "command runner: no run uid left (a sweep failed)".into(),
                )
                .await;
            };
            let own = LocalConfig {
                run_as: Some(RunAs { uid, gid: uid }),
                ..(*local).clone()
            };
            handle(conn, &own, Some((&pool, uid))).await;
        });
    }
    let _ = std::fs::remove_file(&config.socket);
    Ok(())
}

fn bind(path: &Path) -> Result<UnixListener, ServeError> {
    let shown = path.display().to_string();
    match std::fs::symlink_metadata(path) {
        Ok(m) if m.file_type().is_socket() => {
            let _ = std::fs::remove_file(path);
        }
        Ok(_) => return Err(ServeError::NotASocket(shown)),
        Err(_) => {}
    }
    let listener = UnixListener::bind(path).map_err(|source| ServeError::Socket {
        path: shown.clone(),
        source,
    })?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o660)).map_err(|source| {
        ServeError::Socket {
            path: shown,
            source,
        }
    })?;
    Ok(listener)
}

/// Answers `RunnerUnavailable` with `message` without reading the request.
async fn refuse(mut conn: UnixStream, message: String) {
    let _ = write_frame(&mut conn, &RunOutcome::RunnerUnavailable { message }).await;
}

/// One connection: read the request, run it unless the client goes away, then sweep the
/// run's uid when it has one of its own (`swept`: the pool and that uid), and only then
/// answer: when the answer arrives, nothing of the run is left, not even a process that
/// left its supervisor, and its uid is free for the next run. Every way out sweeps.
async fn handle(conn: UnixStream, local: &LocalConfig, swept: Option<(&UidPool, u32)>) {
    let (mut rd, mut wr) = conn.into_split();
    let req = match tokio::time::timeout(
        REQUEST_READ_TIMEOUT,
        read_frame::<_, RunRequest>(&mut rd, MAX_REQUEST_FRAME),
    )
    .await
    {
        Ok(Ok(r)) => Some(r),
        Ok(Err(e)) => {
            let bad = RunOutcome::RunnerUnavailable {
                message: format!("bad request: {e}"),
            };
            let _ = write_frame(&mut wr, &bad).await;
            None
        }
        Err(_) => None,
    };
    let outcome = match req {
        Some(req) => tokio::select! {
            o = local::run(local, &req) => Some(o),
            () = peer_gone(&mut rd) => {
                // Dropping the run above kills its tree.
                tracing::debug!("command runner: client went away; run cancelled");
                None
            }
        },
        None => None,
    };
    if let Some((pool, uid)) = swept {
        pool.give_back(uid).await;
    }
    if let Some(outcome) = outcome {
        let _ = write_frame(&mut wr, &outcome).await;
    }
}

/// Resolves when the client closes its end (or it fails).
async fn peer_gone(rd: &mut tokio::net::unix::OwnedReadHalf) {
    let mut buf = [0u8; 64];
    loop {
        match rd.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(_) => {}
        }
    }
}
