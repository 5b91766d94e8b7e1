//! The operator on a real API server when things go wrong (cases/README, "Operator — on
//! the real API server"):
//!
//! - its ClusterRole loses `watch` and `list` on AgentHooks: `/readyz` answers 503 naming
//!   the watch and its error, `agenthooks_operator_watch_errors_total` counts and
//!   `agenthooks_operator_watch_healthy` drops to 0; both recover when the verbs come back
//!   (shared control plane, the operator runs as a ServiceAccount bound by the shipped
//!   `config/rbac/operator.yaml`);
//! - kube-apiserver restarts: the watches resume or re-list and a new hook is accepted by
//!   the same operator process (a dedicated control plane, so the shared one never restarts);
//! - a hook left alone is reconciled at most a couple of times and never rewritten
//!   (a dedicated control plane, so no other test's hooks count in the metrics).

use std::ffi::OsString;
use std::os::unix::ffi::OsStringExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use agenthooks_e2e::procs::{Proc, bin, free_port};
use agenthooks_e2e::stack::{http_get, metric};
use agenthooks_e2e::{ControlPlane, unique_name, wait_for};
use serde_json::{Value, json};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn kubectl_bin() -> PathBuf {
    match std::env::var_os("KUBECTL") {
        Some(k) if !k.is_empty() => PathBuf::from(k),
        _ if Path::new("/usr/bin/kubectl").exists() => PathBuf::from("/usr/bin/kubectl"),
        _ => PathBuf::from("kubectl"),
    }
}

/// A directory for process logs, kept after the test (small) so a failure can be read.
fn log_dir(prefix: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(unique_name(prefix));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

// ---- kubectl ---------------------------------------------------------------------------

/// `kubectl --kubeconfig <kubeconfig>`.
#[derive(Clone, Debug)]
struct Kube {
    kubeconfig: PathBuf,
}

impl Kube {
    fn run(&self, args: &[&str], stdin: Option<&str>) -> Output {
        let mut child = Command::new(kubectl_bin())
            .arg("--kubeconfig")
            .arg(&self.kubeconfig)
            .args(args)
            .stdin(if stdin.is_some() {
                Stdio::piped()
            } else {
                Stdio::null()
            })
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("run kubectl");
        if let Some(input) = stdin {
            use std::io::Write;
            let mut pipe = child.stdin.take().unwrap();
            pipe.write_all(input.as_bytes()).unwrap();
        }
        child.wait_with_output().unwrap()
    }

    fn ok(&self, args: &[&str]) -> String {
        let out = self.run(args, None);
        assert!(
            out.status.success(),
            "kubectl {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    fn apply(&self, yaml: &str) {
        let out = self.run(
            &[
                "apply",
                "--server-side",
                "--force-conflicts",
                "--field-manager=agenthooks-e2e",
                "-f",
                "-",
            ],
            Some(yaml),
        );
        assert!(
            out.status.success(),
            "apply of\n{yaml}\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    fn crds(&self) {
        let crd = root().join("config/crd/agenthooks.yaml");
        self.ok(&[
            "apply",
            "--server-side",
            "--force-conflicts",
            "-f",
            crd.to_str().unwrap(),
        ]);
        for name in [
            "agenthooks.agenthooks.io",
            "tenanthookbudgets.agenthooks.io",
        ] {
            self.ok(&[
                "wait",
                "--for=condition=Established",
                "--timeout=30s",
                "crd",
                name,
            ]);
        }
    }

    fn namespace(&self, name: &str) {
        self.apply(
            &json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
                .to_string(),
        );
    }

    fn hook(&self, ns: &str, name: &str) {
        self.apply(&format!(
            "apiVersion: agenthooks.io/v1alpha1\nkind: AgentHook\nmetadata: {{name: {name}, namespace: {ns}}}\nspec:\n  event: pre_tool_use\n  handler: {{type: http, http: {{url: 'https://policy.example.com/hook'}}}}\n"
        ));
    }

    fn hook_json(&self, ns: &str, name: &str) -> Option<Value> {
        let out = self.run(
            &[
                "--request-timeout=5s",
                "-n",
                ns,
                "get",
                "agenthook",
                name,
                "-o",
                "json",
            ],
            None,
        );
        if !out.status.success() {
            return None;
        }
        serde_json::from_slice(&out.stdout).ok()
    }

    fn condition(&self, ns: &str, name: &str, type_: &str) -> Option<Value> {
        condition_of(&self.hook_json(ns, name)?, type_)
    }

    fn wait_condition(&self, ns: &str, name: &str, type_: &str, status: &str, timeout: Duration) {
        let ok = wait_for(timeout, || {
            self.condition(ns, name, type_)
                .is_some_and(|c| c["status"] == status)
        });
        assert!(
            ok,
            "{ns}/{name}: want {type_}={status} within {timeout:?}, have {:?}",
            self.condition(ns, name, type_)
        );
    }
}

fn condition_of(hook: &Value, type_: &str) -> Option<Value> {
    hook["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == type_)
        .cloned()
}

/// Watches the operator runs (AgentHooks, Namespaces, Secrets, TenantHookBudgets), each
/// with an `agenthooks_operator_watch_healthy` series.
const WATCHES: f64 = 4.0;

// ---- HTTP and metrics ------------------------------------------------------------------

// `http_get` and `metric` are the shared ones of `agenthooks_e2e::stack`.

// ---- processes -------------------------------------------------------------------------

struct Operator {
    proc: Proc,
    metrics: String,
    sync: String,
}

impl Operator {
    fn start(kubeconfig: &Path, master: &str, extra: &[&str], logs: &Path) -> Operator {
        let sync_port = free_port();
        let metrics_port = free_port();
        let mut args: Vec<String> = vec![
            "--master-namespace".into(),
            master.into(),
            "--sync-addr".into(),
            format!("127.0.0.1:{sync_port}"),
            "--metrics-addr".into(),
            format!("127.0.0.1:{metrics_port}"),
            "--lease-name".into(),
            unique_name("agenthooks-operator"),
            "--lease-namespace".into(),
            master.into(),
        ];
        args.extend(extra.iter().map(|s| s.to_string()));
        args.extend(agenthooks_e2e::stack::test_pki().sync_tls_flags());
        let proc = Proc::start(
            "operator",
            &bin("agenthooks-operator"),
            &args,
            &[("KUBECONFIG", kubeconfig.to_str().unwrap())],
            logs,
        );
        Operator {
            proc,
            metrics: format!("http://127.0.0.1:{metrics_port}"),
            sync: agenthooks_e2e::stack::sync_url(sync_port),
        }
    }

    fn readyz(&self) -> (u16, Value) {
        let (code, body) = http_get(&format!("{}/readyz", self.metrics));
        (code, serde_json::from_str(&body).unwrap_or(Value::Null))
    }

    fn metrics(&self) -> String {
        http_get(&format!("{}/metrics", self.metrics)).1
    }

    fn wait_ready(&self, timeout: Duration) {
        let ok = wait_for(timeout, || self.readyz().0 == 200);
        assert!(
            ok,
            "operator not ready within {timeout:?}: {:?}\n{}",
            self.readyz(),
            self.proc.log_tail(40)
        );
    }
}

/// etcd + kube-apiserver of our own (`e2e/controlplane/start.sh`), stopped with
/// `stop.sh` and deleted on drop — panics included. Its watchdog (owner: this test
/// process) stops it too if the test process is killed.
struct DedicatedControlPlane {
    dir: PathBuf,
    kube: Kube,
    /// kube-apiservers started by [`DedicatedControlPlane::restart_apiserver`], reaped on drop.
    restarted: Vec<Child>,
}

impl DedicatedControlPlane {
    fn start(prefix: &str) -> DedicatedControlPlane {
        let dir = std::env::temp_dir().join(unique_name(prefix));
        let cp = DedicatedControlPlane {
            kube: Kube {
                kubeconfig: dir.join("kubeconfig"),
            },
            dir,
            restarted: Vec::new(),
        };
        let started = Instant::now();
        let out = Command::new(root().join("e2e/controlplane/start.sh"))
            .arg(&cp.dir)
            .env("AGENTHOOKS_E2E_OWNER_PID", std::process::id().to_string())
            .env("AGENTHOOKS_E2E_REMOVE_DIR", "1")
            .env("KUBECTL", kubectl_bin())
            .stdin(Stdio::null())
            .output()
            .expect("run start.sh");
        assert!(
            out.status.success(),
            "start.sh {} failed:\n{}{}",
            cp.dir.display(),
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        eprintln!(
            "[operator_resilience] dedicated control plane in {} started in {:.1}s",
            cp.dir.display(),
            started.elapsed().as_secs_f64()
        );
        cp
    }

    fn pids(&self) -> String {
        std::fs::read_to_string(self.dir.join("pids")).unwrap()
    }

    fn apiserver_pid(&self) -> u32 {
        self.pids()
            .lines()
            .find_map(|l| l.strip_prefix("kube-apiserver "))
            .and_then(|p| p.trim().parse().ok())
            .expect("kube-apiserver in pids")
    }

    /// Whether `pid` is alive and its command line names our dir (a zombie or a recycled
    /// pid is not ours).
    fn ours(&self, pid: u32) -> bool {
        std::fs::read(format!("/proc/{pid}/cmdline"))
            .map(|c| String::from_utf8_lossy(&c).contains(self.dir.to_str().unwrap()))
            .unwrap_or(false)
    }

    /// Stops kube-apiserver only (SIGTERM, SIGKILL after 15 s), leaves it down for
    /// `down`, starts it again with the command line it had (read from /proc before
    /// stopping it), records the new pid for stop.sh, and waits for its /readyz.
    fn restart_apiserver(&mut self, down: Duration) -> Duration {
        let pid = self.apiserver_pid();
        let raw = std::fs::read(format!("/proc/{pid}/cmdline")).expect("apiserver cmdline");
        let args: Vec<OsString> = raw
            .split(|b| *b == 0)
            .filter(|a| !a.is_empty())
            .map(|a| OsString::from_vec(a.to_vec()))
            .collect();
        assert!(self.ours(pid), "pid {pid} is not our kube-apiserver");

        let stopping = Instant::now();
        unsafe { libc::kill(pid as i32, libc::SIGTERM) };
        if !wait_for(Duration::from_secs(15), || !self.ours(pid)) {
            unsafe { libc::kill(pid as i32, libc::SIGKILL) };
            assert!(wait_for(Duration::from_secs(5), || !self.ours(pid)));
        }
        std::thread::sleep(down);

        let log = std::fs::OpenOptions::new()
            .append(true)
            .open(self.dir.join("logs/kube-apiserver.log"))
            .unwrap();
        let child = Command::new(&args[0])
            .args(&args[1..])
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .process_group(0)
            .spawn()
            .expect("restart kube-apiserver");
        let new_pid = child.id();
        self.restarted.push(child);
        let pids: String = self
            .pids()
            .lines()
            .map(|l| {
                if l.starts_with("kube-apiserver ") {
                    format!("kube-apiserver {new_pid}\n")
                } else {
                    format!("{l}\n")
                }
            })
            .collect();
        std::fs::write(self.dir.join("pids"), pids).unwrap();

        let ready = wait_for(Duration::from_secs(60), || {
            self.kube
                .run(&["--request-timeout=2s", "get", "--raw", "/readyz"], None)
                .status
                .success()
        });
        assert!(ready, "restarted kube-apiserver not ready within 60 s");
        stopping.elapsed()
    }
}

impl Drop for DedicatedControlPlane {
    fn drop(&mut self) {
        let _ = Command::new(root().join("e2e/controlplane/stop.sh"))
            .arg(&self.dir)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
        for mut c in self.restarted.drain(..) {
            let _ = c.kill();
            let _ = c.wait();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

// ---- the cases -------------------------------------------------------------------------

/// Writes a kubeconfig for `token`, same cluster as `admin`.
fn token_kubeconfig(admin: &Kube, token: &str, path: &Path) -> PathBuf {
    let mut kc: Value =
        serde_json::from_str(&admin.ok(&["config", "view", "--minify", "--raw", "-o", "json"]))
            .unwrap();
    kc["users"][0]["user"] = json!({ "token": token });
    std::fs::write(path, kc.to_string()).unwrap();
    path.to_path_buf()
}

fn set_hook_verbs(kube: &Kube, role: &str, verbs: &[&str]) {
    let patch = json!([
        {"op": "test", "path": "/rules/0/resources", "value": ["agenthooks"]},
        {"op": "replace", "path": "/rules/0/verbs", "value": verbs},
    ]);
    kube.ok(&[
        "patch",
        "clusterrole",
        role,
        "--type=json",
        "-p",
        &patch.to_string(),
    ]);
}

#[test]
fn losing_watch_on_agenthooks_fails_readiness_until_it_comes_back() {
    let test_started = Instant::now();
    let cp = ControlPlane::shared();
    let kube = Kube {
        kubeconfig: cp.kubeconfig.clone(),
    };
    kube.crds();
    let ns = unique_name("ah-rbac");
    kube.namespace(&ns);
    let role = unique_name("ah-operator");
    let rbac = std::fs::read_to_string(root().join("config/rbac/operator.yaml"))
        .unwrap()
        .replace("agenthooks-operator", &role)
        .replace("agenthooks-system", &ns);
    kube.apply(&rbac);
    let token = kube.ok(&["create", "token", &role, "-n", &ns, "--duration=1h"]);
    let logs = log_dir("ah-resilience-rbac");
    let kubeconfig = token_kubeconfig(&kube, token.trim(), &logs.join("operator.kubeconfig"));
    let as_sa = Kube {
        kubeconfig: kubeconfig.clone(),
    };
    assert_eq!(
        as_sa.ok(&[
            "auth",
            "whoami",
            "-o",
            "jsonpath={.status.userInfo.username}"
        ]),
        format!("system:serviceaccount:{ns}:{role}")
    );

    // short watches so a lost permission shows within seconds (the API server checks it
    // when a watch starts); a long dispatcher TTL keeps this operator from moving the
    // Ready of other tests' hooks on the shared control plane.
    let mut op = Operator::start(
        &kubeconfig,
        &ns,
        &[
            "--watch-grace-seconds",
            "3",
            "--watch-timeout-seconds",
            "2",
            "--dispatcher-ttl-seconds",
            "3600",
        ],
        &logs,
    );
    op.wait_ready(Duration::from_secs(30));
    let m = op.metrics();
    assert_eq!(
        metric(&m, "agenthooks_operator_watch_healthy", ""),
        WATCHES,
        "{m}"
    );

    let revoked = Instant::now();
    set_hook_verbs(&kube, &role, &["get"]);
    let unready = wait_for(Duration::from_secs(30), || {
        let (code, body) = op.readyz();
        code == 503 && body["failing"] == json!(["agenthooks"])
    });
    let (code, body) = op.readyz();
    assert!(
        unready,
        "readyz should fail naming agenthooks: {code} {body}\n{}",
        op.proc.log_tail(30)
    );
    let revoke_to_unready = revoked.elapsed();
    let reason = body["reason"].as_str().unwrap_or_default();
    assert!(
        reason.contains("watch agenthooks failing") && reason.contains("forbidden"),
        "{body}"
    );
    let hooks = body["watches"]
        .as_array()
        .unwrap()
        .iter()
        .find(|w| w["resource"] == "agenthooks")
        .unwrap();
    assert_eq!(hooks["healthy"], false, "{body}");
    assert!(
        hooks["error"].as_str().unwrap().contains("forbidden"),
        "{body}"
    );
    let m = op.metrics();
    assert!(
        metric(
            &m,
            "agenthooks_operator_watch_errors_total",
            "resource=\"agenthooks\""
        ) >= 1.0,
        "{m}"
    );
    assert_eq!(
        metric(
            &m,
            "agenthooks_operator_watch_healthy",
            "resource=\"agenthooks\""
        ),
        0.0,
        "{m}"
    );
    assert_eq!(
        metric(
            &m,
            "agenthooks_operator_watch_healthy",
            "resource=\"namespaces\""
        ),
        1.0,
        "only the hook watch fails: {m}"
    );

    let restored = Instant::now();
    set_hook_verbs(&kube, &role, &["get", "list", "watch"]);
    let ready = wait_for(Duration::from_secs(45), || op.readyz().0 == 200);
    assert!(
        ready,
        "readyz should recover: {:?}\n{}",
        op.readyz(),
        op.proc.log_tail(30)
    );
    let restore_to_ready = restored.elapsed();
    let m = op.metrics();
    assert_eq!(
        metric(&m, "agenthooks_operator_watch_healthy", ""),
        WATCHES,
        "{m}"
    );
    assert!(op.proc.running(), "the operator never restarts");

    // the hook watch works again: a new hook is reconciled
    let hook_ns = unique_name("ah-rbac-hooks");
    kube.namespace(&hook_ns);
    kube.hook(&hook_ns, "after-restore");
    kube.wait_condition(
        &hook_ns,
        "after-restore",
        "Accepted",
        "True",
        Duration::from_secs(20),
    );

    drop(op);
    for kind in ["clusterrolebinding", "clusterrole"] {
        let _ = kube.run(&["delete", kind, &role, "--ignore-not-found"], None);
    }
    println!(
        "E2E-FIGURE revoke_watch_to_unready_ms={} restore_watch_to_ready_ms={} test_ms={}",
        revoke_to_unready.as_millis(),
        restore_to_ready.as_millis(),
        test_started.elapsed().as_millis()
    );
}

#[test]
fn an_api_server_restart_is_survived_by_the_same_operator_process() {
    let test_started = Instant::now();
    let mut cp = DedicatedControlPlane::start("ah-resilience-restart");
    let kube = cp.kube.clone();
    kube.crds();
    let master = "agenthooks-system";
    let ns = "team-a";
    kube.namespace(master);
    kube.namespace(ns);
    kube.hook(ns, "before");
    let logs = log_dir("ah-resilience-restart-logs");
    // A Lease longer than the outage: the leader session (and its watches) must live
    // through it, so what is tested is the watches recovering by themselves, not a new
    // session listing from scratch. (With the default 15 s Lease a long outage makes the
    // replica step down and start a new session when it leads again, which works too.)
    // Short watches: a stopping kube-apiserver refuses new connections at once but waits
    // (up to 60 s) for the watches it serves to end before it exits.
    let mut op = Operator::start(
        &kube.kubeconfig,
        master,
        &[
            "--watch-grace-seconds",
            "3",
            "--lease-duration-seconds",
            "60",
            "--watch-timeout-seconds",
            "5",
        ],
        &logs,
    );
    op.wait_ready(Duration::from_secs(30));
    kube.wait_condition(ns, "before", "Accepted", "True", Duration::from_secs(20));
    let pid = op.proc.pid().unwrap();

    let restart = cp.restart_apiserver(Duration::from_secs(3));
    let restarted = Instant::now();
    kube.hook(ns, "after");
    kube.wait_condition(ns, "after", "Accepted", "True", Duration::from_secs(60));
    let restart_to_accepted = restarted.elapsed();
    assert!(op.proc.running(), "the operator must not exit");
    assert_eq!(op.proc.pid(), Some(pid), "same operator process");
    assert_eq!(
        kube.condition(ns, "before", "Accepted").unwrap()["status"],
        "True"
    );

    // both published; a deletion after the restart still reaches the snapshot
    let hooks_in_snapshot = |op: &Operator| metric(&op.metrics(), "agenthooks_snapshot_hooks", "");
    assert!(
        wait_for(Duration::from_secs(20), || hooks_in_snapshot(&op) == 2.0),
        "snapshot should hold both hooks: {}",
        op.metrics()
    );
    kube.ok(&["-n", ns, "delete", "agenthook", "before"]);
    assert!(
        wait_for(Duration::from_secs(20), || hooks_in_snapshot(&op) == 1.0),
        "a deletion after the restart must reach the snapshot: {}",
        op.metrics()
    );

    // the outage was seen (errors counted) and readiness is back
    let ready = wait_for(Duration::from_secs(45), || op.readyz().0 == 200);
    assert!(ready, "readyz after the restart: {:?}", op.readyz());
    let m = op.metrics();
    assert!(
        metric(&m, "agenthooks_operator_watch_errors_total", "") >= 1.0,
        "the outage should count as watch errors: {m}"
    );
    assert_eq!(
        metric(&m, "agenthooks_operator_watch_healthy", ""),
        WATCHES,
        "{m}"
    );
    let log = std::fs::read_to_string(&op.proc.log).unwrap_or_default();
    assert_eq!(
        log.matches("leader session starting").count(),
        1,
        "the watches must recover inside the session that was running\n{}",
        op.proc.log_tail(40)
    );
    let gone = log.contains("410") || log.contains("too old resource version");
    assert_eq!(op.proc.pid(), Some(pid));
    drop(op);
    drop(cp);
    println!(
        "E2E-FIGURE apiserver_restart_ms={} restart_to_new_hook_accepted_ms={} saw_410_gone={gone} test_ms={}",
        restart.as_millis(),
        restart_to_accepted.as_millis(),
        test_started.elapsed().as_millis()
    );
}

#[test]
fn a_hook_left_alone_is_neither_reconciled_again_nor_rewritten() {
    const IDLE: Duration = Duration::from_secs(20);
    let test_started = Instant::now();
    let cp = DedicatedControlPlane::start("ah-resilience-idle");
    let kube = cp.kube.clone();
    kube.crds();
    let master = "agenthooks-system";
    let ns = "team-a";
    kube.namespace(master);
    kube.namespace(ns);
    let logs = log_dir("ah-resilience-idle-logs");
    let mut op = Operator::start(&kube.kubeconfig, master, &[], &logs);
    op.wait_ready(Duration::from_secs(30));
    let dispatcher_port = free_port();
    // The dispatcher's own identity on the sync port (config/rbac's agenthooks-sync).
    kube.apply(&format!(
        "apiVersion: v1\nkind: ServiceAccount\nmetadata: {{name: idle-dispatcher, namespace: {master}}}\n---\napiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRole\nmetadata: {{name: agenthooks-sync}}\nrules: [{{apiGroups: [agenthooks.io], resources: [agenthooks/sync], verbs: [create]}}]\n---\napiVersion: rbac.authorization.k8s.io/v1\nkind: RoleBinding\nmetadata: {{name: idle-dispatcher-sync, namespace: {master}}}\nroleRef: {{apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: agenthooks-sync}}\nsubjects: [{{kind: ServiceAccount, name: idle-dispatcher, namespace: {master}}}]\n"
    ));
    let token = logs.join("idle-dispatcher.sync-token");
    std::fs::write(
        &token,
        kube.ok(&[
            "create",
            "token",
            "idle-dispatcher",
            "-n",
            master,
            "--audience",
            "agenthooks.io/sync",
            "--duration=1h",
        ])
        .trim(),
    )
    .unwrap();
    let _dispatcher = Proc::start(
        "dispatcher",
        &bin("agenthooks-dispatcher"),
        &[
            "--operator-url".into(),
            op.sync.clone(),
            "--listen".into(),
            format!("127.0.0.1:{dispatcher_port}"),
            "--operator-token-file".into(),
            token.to_str().unwrap().into(),
            "--master-namespace".into(),
            master.into(),
            "--allow-anonymous".into(),
            "--operator-ca-file".into(),
            agenthooks_e2e::stack::test_pki()
                .ca
                .to_string_lossy()
                .into_owned(),
        ],
        &[],
        &logs,
    );

    kube.hook(ns, "quiet");
    kube.wait_condition(ns, "quiet", "Accepted", "True", Duration::from_secs(20));
    // Ready=True: the dispatcher polls and serves it (the steady state with a live poller)
    kube.wait_condition(ns, "quiet", "Ready", "True", Duration::from_secs(30));
    std::thread::sleep(Duration::from_secs(1));

    let before = kube.hook_json(ns, "quiet").unwrap();
    let m = op.metrics();
    let reconciles_before = metric(&m, "agenthooks_operator_reconcile_total", "");
    // every status write of any kind that was sent (`unchanged` ones send nothing)
    let written = |m: &str| {
        metric(
            m,
            "agenthooks_operator_status_writes_total",
            "outcome=\"written\"",
        )
    };
    let writes_before = written(&m);
    std::thread::sleep(IDLE);
    let after = kube.hook_json(ns, "quiet").unwrap();
    let m = op.metrics();
    let reconciles = metric(&m, "agenthooks_operator_reconcile_total", "") - reconciles_before;
    let writes = written(&m) - writes_before;

    assert!(
        reconciles <= 2.0,
        "{reconciles} reconciles of an untouched hook in {IDLE:?}\n{m}"
    );
    assert_eq!(writes, 0.0, "no status write while nothing changes");
    assert_eq!(
        before["metadata"]["resourceVersion"], after["metadata"]["resourceVersion"],
        "an untouched hook must not be rewritten"
    );
    for type_ in ["Accepted", "Ready"] {
        let (b, a) = (
            condition_of(&before, type_).unwrap(),
            condition_of(&after, type_).unwrap(),
        );
        assert_eq!(
            b["lastTransitionTime"], a["lastTransitionTime"],
            "{type_} lastTransitionTime moved without a transition"
        );
        assert_eq!(a["status"], "True", "{type_}: {a}");
    }
    assert!(op.proc.running());
    println!(
        "E2E-FIGURE idle_seconds={} idle_reconciles={reconciles} idle_status_writes={writes} test_ms={}",
        IDLE.as_secs(),
        test_started.elapsed().as_millis()
    );
}
