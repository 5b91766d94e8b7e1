//! The project's own binaries as child processes of a test: the operator and dispatchers.
//!
//! Binaries are taken from the cargo target directory of the running test
//! (`target/<profile>/agenthooks-operator`, `.../agenthooks-dispatcher`); `make test`
//! builds them before the tests run, and [`bin`] builds them if they are missing.
//! `AGENTHOOKS_E2E_BIN_DIR` names another directory to take them from (a bench run
//! against the binaries of an earlier commit).

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::Once;
use std::time::{Duration, Instant};

/// Env var naming a directory to take the operator and dispatcher binaries from instead.
pub const BIN_DIR_ENV: &str = "AGENTHOOKS_E2E_BIN_DIR";

/// Path of a workspace binary, building the workspace's binaries once if it is missing
/// (from [`BIN_DIR_ENV`] when set: nothing is built then).
pub fn bin(name: &str) -> PathBuf {
    if let Some(dir) = std::env::var_os(BIN_DIR_ENV).filter(|d| !d.is_empty()) {
        let path = PathBuf::from(dir).join(name);
        assert!(
            path.exists(),
            "{} not found ({BIN_DIR_ENV})",
            path.display()
        );
        return path;
    }
    let exe = std::env::current_exe().expect("current exe");
    // target/<profile>/deps/<test> → target/<profile>
    let dir = exe
        .parent()
        .and_then(Path::parent)
        .expect("target profile dir")
        .to_path_buf();
    let path = dir.join(name);
    static BUILD: Once = Once::new();
    if !path.exists() {
        BUILD.call_once(|| {
            let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
            let status = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
                .args([
                    "build",
                    "-p",
                    "agenthooks-operator",
                    "-p",
                    "agenthooks-dispatcher",
                    "--bins",
                ])
                .current_dir(root)
                .status()
                .expect("run cargo build");
            assert!(status.success(), "cargo build of the binaries failed");
        });
    }
    assert!(path.exists(), "{} not found", path.display());
    path
}

/// A free TCP port on 127.0.0.1 (bound then released; good enough for tests).
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Pids of live children, killed at process exit: a [`Proc`] kept in a `static` (shared
/// by the tests of a binary) is never dropped, and must not outlive the test run.
static LIVE: std::sync::Mutex<Vec<u32>> = std::sync::Mutex::new(Vec::new());

extern "C" fn kill_live_children() {
    let pids = LIVE.lock().map(|l| l.clone()).unwrap_or_default();
    for pid in pids {
        unsafe { libc::kill(pid as i32, libc::SIGKILL) };
    }
}

fn track(pid: u32) {
    static HOOK: Once = Once::new();
    HOOK.call_once(|| unsafe {
        libc::atexit(kill_live_children);
    });
    if let Ok(mut l) = LIVE.lock() {
        l.push(pid);
    }
}

fn untrack(pid: u32) {
    if let Ok(mut l) = LIVE.lock() {
        l.retain(|p| *p != pid);
    }
}

/// A child process killed (SIGKILL) and reaped when dropped, or at process exit. Its output goes to a log
/// file whose tail [`Proc::log_tail`] shows on failure.
pub struct Proc {
    pub name: String,
    child: Option<Child>,
    pub log: PathBuf,
}

impl Proc {
    /// Starts `bin args...` with `env`, logging to `<log_dir>/<name>.log`, in a working
    /// directory of its own, `<log_dir>/<name>.cwd`: a dispatcher keeps its default audit
    /// database and spool (locked by one process) there.
    pub fn start(
        name: &str,
        bin: &Path,
        args: &[String],
        env: &[(&str, &str)],
        log_dir: &Path,
    ) -> Proc {
        let cwd = log_dir.join(format!("{name}.cwd"));
        std::fs::create_dir_all(&cwd).unwrap();
        Proc::start_in(name, bin, args, env, log_dir, &cwd)
    }

    /// [`Proc::start`] in the working directory `cwd`. `RUST_LOG` is the test's own, or
    /// `info`, unless `env` sets it; `AGENTHOOKS_AUDIT_DB` is never inherited.
    pub fn start_in(
        name: &str,
        bin: &Path,
        args: &[String],
        env: &[(&str, &str)],
        log_dir: &Path,
        cwd: &Path,
    ) -> Proc {
        std::fs::create_dir_all(log_dir).unwrap();
        let log = log_dir.join(format!("{name}.log"));
        let out = std::fs::File::create(&log).unwrap();
        let child = Command::new(bin)
            .current_dir(cwd)
            .args(args)
            .env(
                "RUST_LOG",
                std::env::var("RUST_LOG").unwrap_or_else(|_| "info".into()),
            )
            .env_remove("AGENTHOOKS_AUDIT_DB")
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(out.try_clone().unwrap())
            .stderr(out)
            .spawn()
            .unwrap_or_else(|e| panic!("start {}: {e}", bin.display()));
        track(child.id());
        Proc {
            name: name.to_string(),
            child: Some(child),
            log,
        }
    }

    /// Sends SIGTERM and waits up to `timeout` for exit; then SIGKILL.
    pub fn stop(&mut self, timeout: Duration) {
        if let Some(mut c) = self.child.take() {
            untrack(c.id());
            unsafe { libc::kill(c.id() as i32, libc::SIGTERM) };
            let deadline = Instant::now() + timeout;
            while Instant::now() < deadline {
                if let Ok(Some(_)) = c.try_wait() {
                    return;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Sends `signal` (e.g. `libc::SIGTERM`) without waiting; nothing once stopped.
    pub fn signal(&self, signal: i32) {
        if let Some(c) = &self.child {
            unsafe { libc::kill(c.id() as i32, signal) };
        }
    }

    /// Its exit status once it has exited (then it counts as stopped); `None` while it runs.
    pub fn try_exit(&mut self) -> Option<ExitStatus> {
        let status = self.child.as_mut()?.try_wait().ok()??;
        if let Some(c) = self.child.take() {
            untrack(c.id());
        }
        Some(status)
    }

    /// Its pid (`None` once stopped).
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// Whether the process is still running.
    pub fn running(&mut self) -> bool {
        matches!(self.child.as_mut().map(|c| c.try_wait()), Some(Ok(None)))
    }

    /// The last `lines` lines of its log.
    pub fn log_tail(&self, lines: usize) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let all: Vec<&str> = text.lines().collect();
        all[all.len().saturating_sub(lines)..].join("\n")
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            untrack(c.id());
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}
