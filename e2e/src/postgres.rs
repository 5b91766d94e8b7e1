//! A private, **real** PostgreSQL server for tests (issue 5: "e2e/integration tests on a real
//! PostgreSQL (Debian's package, started by the harness)").
//!
//! [`PgServer::new`] runs Debian's binaries (`/usr/lib/postgresql/<version>/bin`, the
//! highest version installed, or the directory named by `AGENTHOOKS_PG_BIN`) in a fresh
//! temp dir: `initdb` (trust auth for local connections, UTF8, C locale), `postgres`
//! listening on a free `127.0.0.1` port with its unix socket inside the temp dir, and
//! `createdb agenthooks`. [`PgServer::url`] is `postgres://postgres@127.0.0.1:<port>/agenthooks`.
//!
//! ```no_run
//! let pg = agenthooks_e2e::postgres::PgServer::new().unwrap();
//! let url = pg.url();
//! pg.kill();              // SIGKILL the postmaster: a crash
//! pg.start().unwrap();    // same data dir and port; crash recovery runs
//! pg.stop().unwrap();     // fast shutdown (also done on drop)
//! ```
//!
//! Running as root (CI containers): PostgreSQL refuses to run as root, so `initdb` and
//! `postgres` run as the `postgres` system user (created by Debian's package), with the temp
//! dir chowned to it. The temp dir's parent (`$TMPDIR`, default `/tmp`) must let that user
//! through.
//!
//! The server runs in its own process group (a Ctrl-C to `cargo test` does not reach it) and
//! is stopped when the [`PgServer`] is dropped. A small watchdog shell stops it and removes
//! the temp dir if the test process dies without dropping it (panic=abort, SIGKILL, a
//! `static`), so no `postgres` outlives a test run by more than a second or so.
//!
//! All methods block (they wait for child processes); from async tests call them through
//! `tokio::task::spawn_blocking` or `block_in_place`.
//!
//! Server settings are PostgreSQL's defaults (fsync on): only `initdb --no-sync` skips the
//! flushes of the freshly created cluster.

use std::fs;
use std::io::{Read, Seek, SeekFrom};
use std::net::TcpListener;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow, bail};

/// Env var naming the directory of the PostgreSQL binaries (`initdb`, `postgres`,
/// `createdb`) instead of the newest `/usr/lib/postgresql/<version>/bin`.
pub const PG_BIN_ENV: &str = "AGENTHOOKS_PG_BIN";

/// The database [`PgServer::new`] creates and [`PgServer::url`] names.
pub const DATABASE: &str = "agenthooks";

/// The superuser created by `initdb` (trust auth, no password).
pub const SUPERUSER: &str = "postgres";

/// How long [`PgServer::start`] waits for "ready to accept connections".
const START_TIMEOUT: Duration = Duration::from_secs(30);

/// How long [`PgServer::stop`] waits for a fast shutdown before SIGKILL.
const STOP_TIMEOUT: Duration = Duration::from_secs(30);

/// A private PostgreSQL server (see the module docs).
#[derive(Debug)]
pub struct PgServer {
    /// Temp dir: `data/` (the cluster), `sock/` (unix socket), `postgres.log`.
    dir: tempfile::TempDir,
    bin: PathBuf,
    port: u16,
    /// `listen_addresses`: 127.0.0.1 and those of [`PgServer::new_listening`].
    listen: String,
    /// `(uid, gid)` of the `postgres` user when this process runs as root.
    run_as: Option<(u32, u32)>,
    postmaster: Mutex<Option<Child>>,
    watchdog: Mutex<Option<Child>>,
}

/// How long each phase of [`PgServer::new`] took.
#[derive(Debug, Clone, Copy)]
pub struct StartTimings {
    /// `initdb` of the fresh cluster.
    pub initdb: Duration,
    /// `postgres` until ready to accept connections.
    pub start: Duration,
    /// `createdb agenthooks`.
    pub createdb: Duration,
}

static SHARED: OnceLock<PgServer> = OnceLock::new();

extern "C" fn stop_shared_at_exit() {
    if let Some(pg) = SHARED.get() {
        pg.shutdown();
        let _ = fs::remove_dir_all(pg.dir.path());
    }
}

impl PgServer {
    /// Creates a cluster in a fresh temp dir, starts it on a free loopback port and creates
    /// the database [`DATABASE`]. Takes about a second or two. Errors say what is missing
    /// (no binaries: run `scripts/install-deps.sh`; root without a `postgres` user) or
    /// carry the failing tool's output / the server log tail.
    pub fn new() -> Result<PgServer> {
        Self::new_timed().map(|(pg, _)| pg)
    }

    /// [`PgServer::new`], also listening on `addresses` (e.g. a node's bridge address, for
    /// Pods) and letting clients from `cidrs` in without a password (`host all all CIDR
    /// trust` in pg_hba.conf). For tests only: trust means anyone there is the superuser.
    pub fn new_listening(addresses: &[&str], cidrs: &[&str]) -> Result<PgServer> {
        Self::start_new(addresses, cidrs).map(|(pg, _)| pg)
    }

    /// [`PgServer::new`], also returning how long each phase took.
    pub fn new_timed() -> Result<(PgServer, StartTimings)> {
        Self::start_new(&[], &[])
    }

    fn start_new(addresses: &[&str], cidrs: &[&str]) -> Result<(PgServer, StartTimings)> {
        let bin = find_bin_dir()?;
        let run_as = if unsafe { libc::geteuid() } == 0 {
            Some(postgres_user()?)
        } else {
            None
        };
        let dir = tempfile::Builder::new()
            .prefix("agenthooks-pg-")
            .tempdir()
            .context("create the PostgreSQL temp dir")?;
        fs::create_dir(dir.path().join("sock")).context("create the socket dir")?;
        if let Some((uid, gid)) = run_as {
            for p in [dir.path().to_owned(), dir.path().join("sock")] {
                chown(&p, uid, gid)?;
            }
        }
        let port = free_port()?;
        let listen = std::iter::once("127.0.0.1")
            .chain(addresses.iter().copied())
            .collect::<Vec<_>>()
            .join(",");
        let pg = PgServer {
            dir,
            bin,
            port,
            listen,
            run_as,
            postmaster: Mutex::new(None),
            watchdog: Mutex::new(None),
        };

        let t0 = Instant::now();
        let out = pg
            .command("initdb")
            .arg("-D")
            .arg(pg.data_dir())
            .args([
                "--auth=trust",
                "--encoding=UTF8",
                "--locale=C",
                "--no-sync",
                "--no-instructions",
            ])
            .arg(format!("--username={SUPERUSER}"))
            .stdin(Stdio::null())
            .output()
            .context("run initdb")?;
        if !out.status.success() {
            bail!(
                "initdb failed ({}):\n{}{}",
                out.status,
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
        }
        let initdb = t0.elapsed();
        if !cidrs.is_empty() {
            let hba = pg.data_dir().join("pg_hba.conf");
            let mut conf = fs::read_to_string(&hba).context("read pg_hba.conf")?;
            for cidr in cidrs {
                conf.push_str(&format!("host all all {cidr} trust\n"));
            }
            fs::write(&hba, conf).context("write pg_hba.conf")?;
        }

        pg.spawn_watchdog()?;
        let t1 = Instant::now();
        pg.start()?;
        let start = t1.elapsed();

        let t2 = Instant::now();
        pg.create_database(DATABASE)?;
        let createdb = t2.elapsed();
        Ok((
            pg,
            StartTimings {
                initdb,
                start,
                createdb,
            },
        ))
    }

    /// One server per test process, started on first use and stopped (dir removed) when the
    /// process exits. Give each test its own database ([`PgServer::create_database`]).
    /// Panics if the server cannot be started.
    pub fn shared() -> &'static PgServer {
        SHARED.get_or_init(|| {
            let (pg, t) = PgServer::new_timed().unwrap_or_else(|e| panic!("PostgreSQL: {e:#}"));
            eprintln!(
                "[agenthooks-e2e] PostgreSQL on 127.0.0.1:{} ready in {:.2}s (initdb {:.2}s, start {:.2}s, createdb {:.2}s)",
                pg.port,
                (t.initdb + t.start + t.createdb).as_secs_f64(),
                t.initdb.as_secs_f64(),
                t.start.as_secs_f64(),
                t.createdb.as_secs_f64()
            );
            // SAFETY: registers a plain extern "C" fn without captured state.
            unsafe { libc::atexit(stop_shared_at_exit) };
            pg
        })
    }

    /// `postgres://postgres@127.0.0.1:<port>/agenthooks`.
    pub fn url(&self) -> String {
        self.url_for(DATABASE)
    }

    /// The URL of database `db` on this server.
    pub fn url_for(&self, db: &str) -> String {
        format!("postgres://{SUPERUSER}@127.0.0.1:{}/{db}", self.port)
    }

    /// The TCP port (fixed for the server's life, across restarts).
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The cluster's data directory.
    pub fn data_dir(&self) -> PathBuf {
        self.dir.path().join("data")
    }

    /// Creates database `name` (`createdb`; letters, digits and `_` are safe) and returns its
    /// URL. Errors carry createdb's output.
    pub fn create_database(&self, name: &str) -> Result<String> {
        let out = Command::new(self.bin.join("createdb"))
            .args([
                "-h",
                "127.0.0.1",
                "-p",
                &self.port.to_string(),
                "-U",
                SUPERUSER,
            ])
            .arg(name)
            .stdin(Stdio::null())
            .output()
            .context("run createdb")?;
        if !out.status.success() {
            bail!(
                "createdb {name} failed ({}): {}",
                out.status,
                String::from_utf8_lossy(&out.stderr).trim()
            );
        }
        Ok(self.url_for(name))
    }

    /// Whether the postmaster this handle started is still running.
    pub fn is_running(&self) -> bool {
        let mut guard = lock(&self.postmaster);
        match guard.as_mut() {
            Some(child) => matches!(child.try_wait(), Ok(None)),
            None => false,
        }
    }

    /// Starts the server on the existing data dir and port (after [`PgServer::stop`] or
    /// [`PgServer::kill`]; a no-op when it runs). Waits until it accepts connections
    /// (crash recovery included). Retries while the port or the shared memory of a killed
    /// server's last backends is still held (they exit on their own within a moment).
    pub fn start(&self) -> Result<()> {
        let mut guard = lock(&self.postmaster);
        if let Some(child) = guard.as_mut()
            && matches!(child.try_wait(), Ok(None))
        {
            return Ok(());
        }
        *guard = None;
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            let log_start = fs::metadata(self.log_path()).map(|m| m.len()).unwrap_or(0);
            let mut child = self.spawn_postmaster()?;
            match self.wait_ready(&mut child, deadline) {
                Ok(()) => {
                    *guard = Some(child);
                    return Ok(());
                }
                Err(Exited) => {
                    let log = self.log_since(log_start);
                    let transient = log.contains("pre-existing shared memory block")
                        || log.contains("could not bind")
                        || log.contains("could not create any TCP/IP sockets")
                        || log.contains("lock file");
                    if !transient || Instant::now() >= deadline {
                        bail!(
                            "postgres on port {} exited during start:\n{}",
                            self.port,
                            tail(&log, 30)
                        );
                    }
                    std::thread::sleep(Duration::from_millis(200));
                }
                Err(TimedOut) => {
                    let _ = child.kill();
                    let _ = child.wait();
                    bail!(
                        "postgres on port {} not ready within {START_TIMEOUT:?}:\n{}",
                        self.port,
                        self.log_tail(30)
                    );
                }
            }
        }
    }

    /// Fast shutdown (SIGINT: open transactions are rolled back, connections closed, a
    /// checkpoint written); waits for the postmaster to exit, SIGKILL after 30 s. A no-op
    /// when not running.
    pub fn stop(&self) -> Result<()> {
        let Some(mut child) = lock(&self.postmaster).take() else {
            return Ok(());
        };
        signal(&child, libc::SIGINT);
        let deadline = Instant::now() + STOP_TIMEOUT;
        loop {
            if child.try_wait().context("wait for postgres")?.is_some() {
                return Ok(());
            }
            if Instant::now() >= deadline {
                let _ = child.kill();
                let _ = child.wait();
                bail!("postgres did not shut down within {STOP_TIMEOUT:?}; killed it");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// SIGKILLs the postmaster, as a crash: no shutdown checkpoint; its backends notice
    /// and exit on their own. The next [`PgServer::start`] runs crash recovery. A no-op
    /// when not running.
    pub fn kill(&self) {
        if let Some(mut child) = lock(&self.postmaster).take() {
            signal(&child, libc::SIGKILL);
            let _ = child.wait();
        }
    }

    /// The last `lines` lines of the server log (for assertion messages).
    pub fn log_tail(&self, lines: usize) -> String {
        tail(&self.log_since(0), lines)
    }

    fn log_path(&self) -> PathBuf {
        self.dir.path().join("postgres.log")
    }

    fn log_since(&self, offset: u64) -> String {
        let mut s = String::new();
        if let Ok(mut f) = fs::File::open(self.log_path()) {
            let _ = f.seek(SeekFrom::Start(offset));
            let mut buf = Vec::new();
            let _ = f.read_to_end(&mut buf);
            s = String::from_utf8_lossy(&buf).into_owned();
        }
        s
    }

    /// A command for binary `prog`, run as the `postgres` user when we are root.
    fn command(&self, prog: &str) -> Command {
        let mut cmd = Command::new(self.bin.join(prog));
        if let Some((uid, gid)) = self.run_as {
            // std also drops root's supplementary groups (setgroups(0)) before exec.
            cmd.uid(uid).gid(gid);
        }
        cmd.env("LC_ALL", "C").env_remove("PGDATA");
        cmd
    }

    fn spawn_postmaster(&self) -> Result<Child> {
        let log = fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.log_path())
            .context("open postgres.log")?;
        let log2 = log.try_clone().context("dup postgres.log")?;
        let mut cmd = self.command("postgres");
        cmd.arg("-D")
            .arg(self.data_dir())
            .args(["-p", &self.port.to_string()])
            .arg("-k")
            .arg(self.dir.path().join("sock"))
            .args(["-c", &format!("listen_addresses={}", self.listen)])
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(log2)
            .process_group(0);
        cmd.spawn()
            .with_context(|| format!("spawn {}", self.bin.join("postgres").display()))
    }

    /// Waits until `postmaster.pid` names `child` and says `ready` (PostgreSQL writes the
    /// status on its 8th line once it accepts connections).
    fn wait_ready(&self, child: &mut Child, deadline: Instant) -> Result<(), NotReady> {
        let pid_file = self.data_dir().join("postmaster.pid");
        let want_pid = child.id().to_string();
        loop {
            if !matches!(child.try_wait(), Ok(None)) {
                return Err(Exited);
            }
            if let Ok(s) = fs::read_to_string(&pid_file) {
                let lines: Vec<&str> = s.lines().collect();
                if lines.first().map(|l| l.trim()) == Some(want_pid.as_str())
                    && lines.get(7).map(|l| l.trim()) == Some("ready")
                {
                    return Ok(());
                }
            }
            if Instant::now() >= deadline {
                return Err(TimedOut);
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// A detached shell that stops the server and removes the dir once this process is gone.
    fn spawn_watchdog(&self) -> Result<()> {
        let script = r#"
while kill -0 "$1" 2>/dev/null; do sleep 0.5; done
pid=$(head -n 1 "$2/data/postmaster.pid" 2>/dev/null)
if [ -n "$pid" ] && kill -INT "$pid" 2>/dev/null; then
  i=0; while kill -0 "$pid" 2>/dev/null && [ $i -lt 100 ]; do sleep 0.1; i=$((i+1)); done
  kill -KILL "$pid" 2>/dev/null
fi
rm -rf "$2"
"#;
        let child = Command::new("sh")
            .args(["-c", script, "agenthooks-pg-watchdog"])
            .arg(std::process::id().to_string())
            .arg(self.dir.path())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .process_group(0)
            .spawn()
            .context("spawn the PostgreSQL watchdog (sh)")?;
        *lock(&self.watchdog) = Some(child);
        Ok(())
    }

    /// Stops the server and the watchdog; errors ignored (drop, exit).
    fn shutdown(&self) {
        let _ = self.stop();
        if let Some(mut w) = lock(&self.watchdog).take() {
            let _ = w.kill();
            let _ = w.wait();
        }
    }
}

impl Drop for PgServer {
    fn drop(&mut self) {
        self.shutdown();
    }
}

/// Why [`PgServer::wait_ready`] gave up.
enum NotReady {
    Exited,
    TimedOut,
}
use NotReady::{Exited, TimedOut};

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

fn signal(child: &Child, sig: libc::c_int) {
    let pid = child.id() as libc::pid_t;
    // SAFETY: signals our own child, whose pid is not reaped yet (we hold its `Child`).
    unsafe { libc::kill(pid, sig) };
}

fn tail(s: &str, lines: usize) -> String {
    let all: Vec<&str> = s.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

/// `$AGENTHOOKS_PG_BIN`, else the highest `/usr/lib/postgresql/<version>/bin` with `initdb`.
fn find_bin_dir() -> Result<PathBuf> {
    if let Some(dir) = std::env::var_os(PG_BIN_ENV).filter(|v| !v.is_empty()) {
        let dir = PathBuf::from(dir);
        if !dir.join("initdb").is_file() {
            bail!("{PG_BIN_ENV}={} has no initdb", dir.display());
        }
        return Ok(dir);
    }
    let root = Path::new("/usr/lib/postgresql");
    let mut best: Option<(u32, PathBuf)> = None;
    for entry in fs::read_dir(root).into_iter().flatten().flatten() {
        let Some(version) = entry
            .file_name()
            .to_str()
            .and_then(|v| v.split('.').next()?.parse::<u32>().ok())
        else {
            continue;
        };
        let bin = entry.path().join("bin");
        if bin.join("initdb").is_file() && best.as_ref().is_none_or(|(v, _)| version > *v) {
            best = Some((version, bin));
        }
    }
    best.map(|(_, bin)| bin).ok_or_else(|| {
        anyhow!(
            "no PostgreSQL server binaries: /usr/lib/postgresql/<version>/bin/initdb not found. \
             Install Debian's postgresql package (scripts/install-deps.sh) or set {PG_BIN_ENV}"
        )
    })
}

/// uid and gid of the `postgres` system user.
fn postgres_user() -> Result<(u32, u32)> {
    let name = c"postgres";
    // SAFETY: getpwnam with a valid C string; the result is read before any other call.
    let pw = unsafe { libc::getpwnam(name.as_ptr()) };
    if pw.is_null() {
        bail!(
            "running as root, and PostgreSQL refuses root: no `postgres` user to run it as \
             (Debian's postgresql package creates it; scripts/install-deps.sh installs it)"
        );
    }
    // SAFETY: non-null pointer from getpwnam.
    let (uid, gid) = unsafe { ((*pw).pw_uid, (*pw).pw_gid) };
    Ok((uid, gid))
}

fn chown(path: &Path, uid: u32, gid: u32) -> Result<()> {
    std::os::unix::fs::chown(path, Some(uid), Some(gid))
        .with_context(|| format!("chown {} to the postgres user", path.display()))
}

/// A free loopback TCP port (bound and released; PostgreSQL binds it right after).
fn free_port() -> Result<u16> {
    let l = TcpListener::bind("127.0.0.1:0").context("find a free port")?;
    Ok(l.local_addr()?.port())
}
