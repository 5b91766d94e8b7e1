//! Runs one [`RunRequest`] on this host, under the per-run supervisor
//! ([`super::supervise`]): in the runner container, and in standalone mode in the
//! dispatcher itself (CONTRACT §10.1).
//!
//! Per run: a private directory (mode 0700, `TMPDIR` and `HOME` point at it, the working
//! directory when the hook names none, removed afterwards); the environment built from
//! nothing ([`build_env`] on this process's environment); stdout and stderr read as they
//! come, each capped at [`MAX_OUTPUT_BYTES`]; the timeout enforced here whatever the
//! caller did (capped at [`MAX_TIMEOUT_MS`]). Every way out — `sh` exiting, timeout,
//! output cap, the future being dropped — ends the whole process tree.

use std::ffi::OsString;
use std::io;
use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::time::Duration;

use agenthooks_crds::agenthook::MAX_TIMEOUT_MS;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::process::{Child, Command};

use super::protocol::{RunOutcome, RunRequest, Stream};
use super::supervise::{self, RunAs};
use crate::handlers::MAX_OUTPUT_BYTES;
use crate::handlers::command::build_env;

/// Time the supervisor is given past the timeout before it kills the run on its own.
const BACKSTOP_GRACE: Duration = Duration::from_secs(5);
/// Most time spent waiting for a killed supervisor to finish its kill and exit.
const REAP_WAIT: Duration = Duration::from_secs(6);

/// Where and as whom local runs happen.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LocalConfig {
    /// Parent of the per-run private directories (default: the process's temp dir).
    pub tmp_root: PathBuf,
    /// The uid/gid runs switch to (only when this process is root; see the runner's
    /// `--run-as-uid`). `None`: runs keep this process's uid.
    pub run_as: Option<RunAs>,
}

impl Default for LocalConfig {
    fn default() -> Self {
        LocalConfig {
            tmp_root: std::env::temp_dir(),
            run_as: None,
        }
    }
}

/// Runs `req` here. Never panics; every failure is a [`RunOutcome`].
pub async fn run(config: &LocalConfig, req: &RunRequest) -> RunOutcome {
    let timeout = Duration::from_millis(req.timeout_ms.min(MAX_TIMEOUT_MS));
    let deadline = tokio::time::Instant::now() + timeout;

    if let Some(cwd) = &req.cwd {
        match tokio::fs::metadata(cwd).await {
            Ok(m) if m.is_dir() => {}
            Ok(_) => {
                return RunOutcome::CwdMissing {
                    message: format!("working directory {cwd:?} is not a directory"),
                };
            }
            Err(e) => {
                return RunOutcome::CwdMissing {
                    message: format!(
                        "working directory {cwd:?} does not exist or is not reachable: {e}"
                    ),
                };
            }
        }
    }
    let private = match PrivateDir::create(&config.tmp_root, config.run_as) {
        Ok(d) => d,
        Err(e) => {
            return RunOutcome::SpawnFailed {
                message: format!(
                    "could not create the run's private directory under {}: {e}",
                    config.tmp_root.display()
                ),
            };
        }
    };

    let mut env = build_env(&req.allowed_env_vars, |n| std::env::var_os(n));
    env.retain(|(n, _)| n != "TMPDIR" && n != "HOME");
    env.push(("TMPDIR".into(), OsString::from(private.path())));
    env.push(("HOME".into(), OsString::from(private.path())));

    let mut cmd = Command::new("sh");
    cmd.arg("-c")
        .arg(&req.command)
        .env_clear()
        .envs(env)
        .current_dir(req.cwd.as_deref().map_or(private.path(), Path::new))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    supervise::install(&mut cmd, timeout + BACKSTOP_GRACE, config.run_as);

    let mut child = match cmd.spawn() {
        Ok(c) => c,
        Err(e) => {
            return RunOutcome::SpawnFailed {
                message: format!("could not start sh under its supervisor: {e}"),
            };
        }
    };
    let Some(pid) = child.id().and_then(|p| i32::try_from(p).ok()) else {
        return RunOutcome::SpawnFailed {
            message: "supervisor has no pid".into(),
        };
    };
    let mut stop = Stopper { pid, armed: true };
    let (Some(stdin), Some(stdout), Some(stderr)) =
        (child.stdin.take(), child.stdout.take(), child.stderr.take())
    else {
        return RunOutcome::SpawnFailed {
            message: "child pipes missing".into(),
        };
    };

    let collected = tokio::time::timeout_at(
        deadline,
        collect(&mut child, stdin, stdout, stderr, &req.stdin),
    )
    .await;
    let outcome = match collected {
        Err(_elapsed) => RunOutcome::Timeout,
        Ok(Err(Failure::TooLarge(stream))) => RunOutcome::OutputTooLarge { stream },
        Ok(Err(Failure::Io(e))) => RunOutcome::Failed {
            message: format!("could not collect command output: {e}"),
        },
        Ok(Ok((stdout, stderr, status))) => {
            // The supervisor exited after the tree was gone: nothing to stop.
            stop.armed = false;
            completed(status, stdout, stderr)
        }
    };
    if stop.armed {
        stop.stop();
        let _ = tokio::time::timeout(REAP_WAIT, child.wait()).await;
    }
    drop(private);
    outcome
}

fn completed(status: ExitStatus, stdout: Vec<u8>, stderr: Vec<u8>) -> RunOutcome {
    RunOutcome::Completed {
        exit_code: status.code(),
        signal: status.signal(),
        stdout,
        stderr,
    }
}

/// Sends `SIGTERM` to the supervisor (which kills the tree and exits), once, and on
/// drop if not done: a cancelled run must leave no process. Never `SIGKILL`: a killed
/// supervisor would let the tree go to init.
struct Stopper {
    pid: i32,
    armed: bool,
}

impl Stopper {
    fn stop(&mut self) {
        if self.armed && self.pid > 1 {
            // SAFETY: kill(2) on our own (unreaped, so not recycled) child's pid.
            unsafe {
                libc::kill(self.pid, libc::SIGTERM);
            }
        }
        self.armed = false;
    }
}

impl Drop for Stopper {
    fn drop(&mut self) {
        self.stop();
    }
}

/// A run's private directory: created 0700 (owned by `run_as` when given), removed on
/// drop.
struct PrivateDir(PathBuf);

impl PrivateDir {
    fn create(root: &Path, run_as: Option<RunAs>) -> io::Result<PrivateDir> {
        let path = root.join(format!("agenthooks-run-{}", uuid::Uuid::new_v4().simple()));
        std::fs::DirBuilder::new().mode(0o700).create(&path)?;
        let dir = PrivateDir(path);
        if let Some(who) = run_as {
            std::os::unix::fs::chown(&dir.0, Some(who.uid), Some(who.gid))?;
        }
        Ok(dir)
    }
    fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for PrivateDir {
    fn drop(&mut self) {
        if std::fs::remove_dir_all(&self.0).is_ok() {
            return;
        }
        // A hook may have left directories without write or search permission.
        make_removable(&self.0);
        if let Err(e) = std::fs::remove_dir_all(&self.0) {
            tracing::warn!(dir = %self.0.display(), error = %e, "could not remove a command run's private directory");
        }
    }
}

fn make_removable(dir: &Path) {
    let _ = std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700));
    if let Ok(entries) = std::fs::read_dir(dir) {
        for e in entries.flatten() {
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                make_removable(&e.path());
            }
        }
    }
}

/// Why collecting output stopped early.
enum Failure {
    TooLarge(Stream),
    Io(io::Error),
}

/// Writes stdin, reads stdout and stderr to EOF (capped) and waits for the exit status.
async fn collect(
    child: &mut Child,
    mut stdin: tokio::process::ChildStdin,
    stdout: tokio::process::ChildStdout,
    stderr: tokio::process::ChildStderr,
    event_json: &[u8],
) -> Result<(Vec<u8>, Vec<u8>, ExitStatus), Failure> {
    // Feeding stdin never decides the result: a child that exits without reading gives
    // EPIPE, which is ignored. After writing, stdin is closed so readers see EOF.
    let feed = async move {
        let _ = stdin.write_all(event_json).await;
        let _ = stdin.shutdown().await;
        drop(stdin);
        std::future::pending::<()>().await;
    };
    let main = async {
        let (out, err) = futures::future::try_join(
            read_capped(stdout, Stream::Stdout),
            read_capped(stderr, Stream::Stderr),
        )
        .await?;
        let status = child.wait().await.map_err(Failure::Io)?;
        Ok((out, err, status))
    };
    tokio::select! {
        r = main => r,
        () = feed => unreachable!("feed never completes"),
    }
}

/// Reads `r` to EOF, keeping at most [`MAX_OUTPUT_BYTES`]; one byte more is a failure.
async fn read_capped<R: AsyncRead + Unpin>(r: R, which: Stream) -> Result<Vec<u8>, Failure> {
    let mut buf = Vec::new();
    let limit = u64::try_from(MAX_OUTPUT_BYTES).unwrap_or(u64::MAX) + 1;
    r.take(limit)
        .read_to_end(&mut buf)
        .await
        .map_err(Failure::Io)?;
    if buf.len() > MAX_OUTPUT_BYTES {
        return Err(Failure::TooLarge(which));
    }
    Ok(buf)
}
