//! End-to-end test harness for agenthooks: a **real** Kubernetes control plane
//! (etcd + kube-apiserver, never a fake API server) shared by the tests of a `cargo test` run.
//!
//! ```no_run
//! use agenthooks_e2e::{ControlPlane, wait_for};
//! use std::time::Duration;
//!
//! let cp = ControlPlane::shared();
//! let ns = agenthooks_e2e::unique_name("demo");
//! cp.create_namespace(&ns, &[("team", "a")]);
//! cp.apply_yaml(&format!("apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: c, namespace: {ns}}}\n"));
//! assert!(wait_for(Duration::from_secs(10), || cp.kubectl(&["-n", &ns, "get", "cm", "c"]).status.success()));
//! ```
//!
//! # Where the cluster comes from
//!
//! * If `AGENTHOOKS_E2E_KUBECONFIG` is set (non-empty), it names the kubeconfig of an existing
//!   cluster (any real cluster: kind, k3s, a dev cluster, ...). Nothing is started or stopped.
//! * Otherwise `e2e/controlplane/start.sh` starts etcd and kube-apiserver on free 127.0.0.1
//!   ports in a temp dir (`$TMPDIR/agenthooks-e2e-<owner pid>-<owner start time>`; the base dir
//!   can be changed with `AGENTHOOKS_E2E_TMPDIR`). `start.sh` runs `build.sh` first, which
//!   builds the binaries once and caches them in `~/.cache/agenthooks/controlplane/`.
//!
//! # Lifetime ("owner")
//!
//! The control plane belongs to an *owner* process:
//!
//! * under `cargo test` / `cargo nextest` (the test binary's parent is `cargo` or
//!   `cargo-nextest`) the owner is that cargo process, so **all test binaries and tests of the
//!   e2e crate in one `cargo test` run share one control plane** (a file lock next to the dir
//!   serialises the start; later binaries find it ready and reuse it);
//! * otherwise (test binary run by hand) the owner is the test process itself, and an `atexit`
//!   handler also stops it synchronously when the process exits.
//!
//! `start.sh` is given the owner pid and leaves a small detached watchdog that polls it once a
//! second; when the owner is gone (normal exit, panic, Ctrl-C, SIGKILL) the watchdog runs
//! `stop.sh` and deletes the dir. So CI never keeps etcd/kube-apiserver orphans around for more
//! than a few seconds after `cargo test` ends.
//!
//! # What this control plane is not
//!
//! Only etcd and kube-apiserver run: no kube-controller-manager, scheduler or kubelet. Pods are
//! never scheduled, Deployments never create ReplicaSets, garbage collection does not happen and
//! **deleted namespaces stay `Terminating` forever** — use [`unique_name`] for namespaces. The
//! `ServiceAccount` admission plugin is disabled (nothing creates the `default` ServiceAccount).
//! Authorization is RBAC; the kubeconfig user is an admin token in group `system:masters`,
//! which may impersonate (`kubectl --as=...`) to test what other identities are allowed to do.
//!
//! All helpers are blocking (they run `kubectl` as a child process). From `#[tokio::test]`
//! that is fine for the default current-thread runtime; use `spawn_blocking` if you need the
//! runtime to make progress meanwhile.

pub mod approvals;
pub mod argocd;
pub mod console;
pub mod node;
pub mod opa;
pub mod postgres;
pub mod procs;
pub mod runtimes;
pub mod stack;
pub mod standin;

use std::ffi::OsStr;
use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// Env var naming the kubeconfig of an existing cluster to test against instead of starting one.
pub const KUBECONFIG_ENV: &str = "AGENTHOOKS_E2E_KUBECONFIG";
/// Env var overriding the base directory of the harness-started control plane (default `$TMPDIR`).
pub const TMPDIR_ENV: &str = "AGENTHOOKS_E2E_TMPDIR";

/// Field manager used by [`ControlPlane::apply_yaml`] (server-side apply).
pub const FIELD_MANAGER: &str = "agenthooks-e2e";

/// A running Kubernetes API server the tests talk to. Get it with [`ControlPlane::shared`].
#[derive(Debug)]
pub struct ControlPlane {
    /// Admin kubeconfig (token user in `system:masters`; for an external cluster: whatever
    /// `AGENTHOOKS_E2E_KUBECONFIG` names). Usable from Rust with
    /// `kube::config::Kubeconfig::read_from(&cp.kubeconfig)`.
    pub kubeconfig: PathBuf,
    /// Directory of the harness-started control plane (logs in `dir/logs/`, ports in `dir/env`);
    /// `None` for an external cluster.
    pub dir: Option<PathBuf>,
    /// `kubectl` binary used by the helpers (`$KUBECTL`, else `/usr/bin/kubectl`, else `PATH`).
    pub kubectl_bin: PathBuf,
    /// Whether this process owns the control plane (stops it in an `atexit` handler).
    owned_by_this_process: bool,
}

static SHARED: OnceLock<Result<ControlPlane, String>> = OnceLock::new();

fn controlplane_script(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("controlplane")
        .join(name)
}

fn kubectl_bin() -> PathBuf {
    match std::env::var_os("KUBECTL") {
        Some(k) if !k.is_empty() => PathBuf::from(k),
        _ if Path::new("/usr/bin/kubectl").exists() => PathBuf::from("/usr/bin/kubectl"),
        _ => PathBuf::from("kubectl"),
    }
}

/// Start time (clock ticks since boot, field 22 of `/proc/PID/stat`) identifying a process
/// across pid reuse.
fn proc_start_time(pid: u32) -> Option<u64> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = &stat[stat.rfind(')')? + 2..];
    rest.split_whitespace().nth(19)?.parse().ok()
}

/// The process whose lifetime bounds the control plane: the parent `cargo` (so all test binaries
/// of one `cargo test` share it) or, when not run by cargo, this process.
fn owner_pid() -> u32 {
    let me = std::process::id();
    let parent = std::os::unix::process::parent_id();
    let comm = fs::read_to_string(format!("/proc/{parent}/comm")).unwrap_or_default();
    match comm.trim() {
        "cargo" | "cargo-nextest" => parent,
        _ => me,
    }
}

extern "C" fn stop_at_exit() {
    if let Some(Ok(cp)) = SHARED.get()
        && cp.owned_by_this_process
        && let Some(dir) = &cp.dir
    {
        let _ = Command::new(controlplane_script("stop.sh"))
            .arg(dir)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
        let _ = fs::remove_dir_all(dir);
        let mut lock = dir.clone().into_os_string();
        lock.push(".lock");
        let _ = fs::remove_file(lock);
    }
}

impl ControlPlane {
    /// The control plane shared by every test of this `cargo test` run, started on first use
    /// (see the crate docs for where it comes from and when it is stopped).
    ///
    /// Blocks until the API server's `/readyz` is ok (a few seconds once the binaries are
    /// built; the very first run builds them, which takes many minutes). Panics with the
    /// `start.sh` output (including the kube-apiserver log tail) if it cannot be started;
    /// the failure is remembered, so later tests fail fast with the same message.
    pub fn shared() -> &'static ControlPlane {
        match SHARED.get_or_init(Self::init) {
            Ok(cp) => cp,
            Err(e) => panic!("agenthooks e2e control plane unavailable: {e}"),
        }
    }

    fn init() -> Result<ControlPlane, String> {
        let kubectl_bin = kubectl_bin();
        if let Some(kc) = std::env::var_os(KUBECONFIG_ENV).filter(|v| !v.is_empty()) {
            let cp = ControlPlane {
                kubeconfig: PathBuf::from(kc),
                dir: None,
                kubectl_bin,
                owned_by_this_process: false,
            };
            if !cp.kubeconfig.is_file() {
                return Err(format!(
                    "{KUBECONFIG_ENV}={} is not a file",
                    cp.kubeconfig.display()
                ));
            }
            let out = cp.kubectl(&["--request-timeout=10s", "get", "--raw", "/readyz"]);
            if !out.status.success() {
                return Err(format!(
                    "cluster from {KUBECONFIG_ENV}={} is not ready: {}",
                    cp.kubeconfig.display(),
                    String::from_utf8_lossy(&out.stderr).trim()
                ));
            }
            eprintln!(
                "[agenthooks-e2e] using existing cluster from {}",
                cp.kubeconfig.display()
            );
            return Ok(cp);
        }

        let owner = owner_pid();
        let owner_start = proc_start_time(owner).ok_or("cannot read /proc (Linux only)")?;
        let base = std::env::var_os(TMPDIR_ENV)
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
            .unwrap_or_else(std::env::temp_dir);
        fs::create_dir_all(&base).map_err(|e| format!("{}: {e}", base.display()))?;
        let dir = base.join(format!("agenthooks-e2e-{owner}-{owner_start}"));
        let lock_path = base.join(format!("agenthooks-e2e-{owner}-{owner_start}.lock"));
        let lock = fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&lock_path)
            .map_err(|e| format!("{}: {e}", lock_path.display()))?;
        // Serialises test processes of the same owner; released when `lock` is dropped.
        lock.lock()
            .map_err(|e| format!("lock {}: {e}", lock_path.display()))?;

        let owned_by_this_process = owner == std::process::id();
        let cp = ControlPlane {
            kubeconfig: dir.join("kubeconfig"),
            dir: Some(dir.clone()),
            kubectl_bin,
            owned_by_this_process,
        };

        if cp.kubeconfig.is_file()
            && cp
                .kubectl(&["--request-timeout=5s", "get", "--raw", "/readyz"])
                .status
                .success()
        {
            eprintln!(
                "[agenthooks-e2e] reusing control plane in {}",
                dir.display()
            );
            return Ok(cp);
        }
        if dir.exists() {
            // Half-started or dead leftover of this owner: clean it up first.
            let _ = Command::new(controlplane_script("stop.sh"))
                .arg(&dir)
                .output();
            let _ = fs::remove_dir_all(&dir);
        }

        let started = Instant::now();
        let out = Command::new(controlplane_script("start.sh"))
            .arg(&dir)
            .env("AGENTHOOKS_E2E_OWNER_PID", owner.to_string())
            .env("AGENTHOOKS_E2E_REMOVE_DIR", "1")
            .env("KUBECTL", &cp.kubectl_bin)
            .stdin(Stdio::null())
            .output()
            .map_err(|e| format!("cannot run start.sh: {e}"))?;
        if owned_by_this_process {
            // Registered even on failure: start.sh cleans up after itself, the dir remains.
            // SAFETY: registering a plain extern "C" fn without captured state.
            unsafe { libc::atexit(stop_at_exit) };
        }
        if !out.status.success() {
            return Err(format!(
                "start.sh {} failed ({}):\n{}{}",
                dir.display(),
                out.status,
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            ));
        }
        eprintln!(
            "[agenthooks-e2e] control plane started in {:.1}s (dir {}, owner pid {owner})",
            started.elapsed().as_secs_f64(),
            dir.display()
        );
        drop(lock);
        Ok(cp)
    }

    /// Runs `kubectl --kubeconfig <kubeconfig> ARGS...` and returns its output (never panics on
    /// a non-zero exit; check `status`). Panics only if kubectl cannot be executed.
    pub fn kubectl<S: AsRef<OsStr>>(&self, args: &[S]) -> Output {
        self.kubectl_cmd(args)
            .stdin(Stdio::null())
            .output()
            .unwrap_or_else(|e| panic!("cannot run {}: {e}", self.kubectl_bin.display()))
    }

    /// Like [`kubectl`](Self::kubectl) with `stdin` fed to the process (e.g. `-f -`).
    pub fn kubectl_stdin<S: AsRef<OsStr>>(&self, args: &[S], stdin: &str) -> Output {
        let mut child = self
            .kubectl_cmd(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot run {}: {e}", self.kubectl_bin.display()));
        let mut pipe = child.stdin.take().expect("stdin piped");
        let input = stdin.to_owned();
        // Written from a thread so a large input cannot deadlock against a full stdout pipe.
        let writer = std::thread::spawn(move || {
            let _ = pipe.write_all(input.as_bytes());
        });
        let out = child.wait_with_output().expect("wait for kubectl");
        let _ = writer.join();
        out
    }

    /// Runs kubectl, panics (with stdout/stderr) unless it exits 0, and returns stdout.
    pub fn kubectl_ok<S: AsRef<OsStr>>(&self, args: &[S]) -> String {
        let out = self.kubectl(args);
        expect_success(&out, &format!("kubectl {}", display_args(args)));
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// Runs kubectl with `-o json` appended and parses stdout; panics on failure.
    pub fn kubectl_json<S: AsRef<OsStr>>(&self, args: &[S]) -> serde_json::Value {
        let mut all: Vec<&OsStr> = args.iter().map(AsRef::as_ref).collect();
        all.extend([OsStr::new("-o"), OsStr::new("json")]);
        let stdout = self.kubectl_ok(&all);
        serde_json::from_str(&stdout)
            .unwrap_or_else(|e| panic!("kubectl {}: bad JSON ({e}): {stdout}", display_args(args)))
    }

    /// Applies one or more YAML (or JSON) documents with server-side apply
    /// (`kubectl apply --server-side --force-conflicts --field-manager=agenthooks-e2e -f -`),
    /// panicking with kubectl's output on failure. Returns kubectl's stdout.
    ///
    /// Server-side apply avoids the 256 KiB `last-applied-configuration` annotation limit that
    /// large CRDs hit with client-side apply. After applying a CRD, call
    /// [`wait_for_crd`](Self::wait_for_crd) before creating its objects.
    pub fn apply_yaml(&self, yaml: &str) -> String {
        let out = self.try_apply_yaml(yaml);
        expect_success(&out, &format!("kubectl apply of:\n{yaml}\n"));
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// Like [`apply_yaml`](Self::apply_yaml) but returns the output instead of panicking, for
    /// tests that expect the API server (validation, admission, RBAC) to reject the object.
    pub fn try_apply_yaml(&self, yaml: &str) -> Output {
        let manager = format!("--field-manager={FIELD_MANAGER}");
        self.kubectl_stdin(
            &[
                "apply",
                "--server-side",
                "--force-conflicts",
                &manager,
                "-f",
                "-",
            ],
            yaml,
        )
    }

    /// Creates (or updates) namespace `name` with the given labels. Idempotent.
    ///
    /// Namespaces cannot really be deleted on the harness control plane (no namespace
    /// controller), so give each test its own name from [`unique_name`].
    pub fn create_namespace(&self, name: &str, labels: &[(&str, &str)]) {
        let labels: serde_json::Map<String, serde_json::Value> = labels
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).into()))
            .collect();
        let ns = serde_json::json!({
            "apiVersion": "v1",
            "kind": "Namespace",
            "metadata": { "name": name, "labels": labels },
        });
        self.apply_yaml(&ns.to_string());
    }

    /// Waits until CRD `name` (e.g. `agenthooks.agenthooks.io`) is `Established`, so its
    /// resources can be created. Panics after `timeout`.
    pub fn wait_for_crd(&self, name: &str, timeout: Duration) {
        let ok = wait_for(timeout, || {
            let out = self.kubectl(&[
                "get",
                "crd",
                name,
                "-o",
                "jsonpath={.status.conditions[?(@.type==\"Established\")].status}",
            ]);
            out.status.success() && String::from_utf8_lossy(&out.stdout).trim() == "True"
        });
        assert!(ok, "CRD {name} not Established within {timeout:?}");
    }

    /// The last `lines` lines of the kube-apiserver log (harness-started control plane only);
    /// handy in assertion messages.
    pub fn apiserver_log_tail(&self, lines: usize) -> String {
        let Some(dir) = &self.dir else {
            return String::new();
        };
        let log = fs::read_to_string(dir.join("logs/kube-apiserver.log")).unwrap_or_default();
        let all: Vec<&str> = log.lines().collect();
        all[all.len().saturating_sub(lines)..].join("\n")
    }

    fn kubectl_cmd<S: AsRef<OsStr>>(&self, args: &[S]) -> Command {
        let mut cmd = Command::new(&self.kubectl_bin);
        cmd.arg("--kubeconfig").arg(&self.kubeconfig);
        cmd.args(args);
        cmd
    }
}

fn display_args<S: AsRef<OsStr>>(args: &[S]) -> String {
    args.iter()
        .map(|a| a.as_ref().to_string_lossy().into_owned())
        .collect::<Vec<_>>()
        .join(" ")
}

fn expect_success(out: &Output, what: &str) {
    assert!(
        out.status.success(),
        "{what} failed ({}):\nstdout: {}\nstderr: {}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Condition `type_` of an object's `status.conditions` (Kubernetes API conventions), if
/// present.
pub fn condition(obj: &serde_json::Value, type_: &str) -> Option<serde_json::Value> {
    obj["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == type_)
        .cloned()
}

/// Polls `condition` every 200 ms until it returns true (→ `true`) or `timeout` elapses
/// (→ `false`; the condition is always checked once more at the deadline).
pub fn wait_for(timeout: Duration, mut condition: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + timeout;
    loop {
        if condition() {
            return true;
        }
        let now = Instant::now();
        if now >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(200).min(deadline - now));
    }
}

/// Async version of [`wait_for`] for `#[tokio::test]`s: awaits `condition()` every 200 ms.
pub async fn wait_for_async<F, Fut>(timeout: Duration, mut condition: F) -> bool
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        if condition().await {
            return true;
        }
        let now = tokio::time::Instant::now();
        if now >= deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(200).min(deadline - now)).await;
    }
}

/// A name unique across tests, test binaries and repeated runs against the same cluster:
/// `<prefix>-<pid>-<counter>-<random>` (lowercase, a valid DNS-1123 label if `prefix` is one
/// and at most 40 characters).
pub fn unique_name(prefix: &str) -> String {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    format!("{prefix}-{}-{n}-{:04x}", std::process::id(), nanos & 0xffff)
}

/// The repository's root.
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// `helm`: `$HELM` if set, else the binary `e2e/controlplane/build-helm.sh` builds once.
pub fn helm_bin() -> PathBuf {
    static HELM: OnceLock<PathBuf> = OnceLock::new();
    HELM.get_or_init(|| {
        if let Some(h) = std::env::var_os("HELM").filter(|h| !h.is_empty()) {
            return PathBuf::from(h);
        }
        let out = Command::new(repo_root().join("e2e/controlplane/build-helm.sh"))
            .stdin(Stdio::null())
            .output()
            .expect("run e2e/controlplane/build-helm.sh");
        assert!(
            out.status.success(),
            "build-helm.sh: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        PathBuf::from(
            String::from_utf8_lossy(&out.stdout)
                .lines()
                .last()
                .unwrap_or_default()
                .trim(),
        )
    })
    .clone()
}
