//! The command runner as the chart starts it (CONTRACT §10.1; cases "Guards that cannot
//! be talked past"): `agenthooks-dispatcher command-runner --socket PATH` as a separate
//! process — as another uid when the test runs as root — and a dispatcher pointed at it
//! with `--command-runner unix:PATH`, holding a seal key, an admin token, an audit
//! database and spool, and a secret in its environment.
//!
//! The secrets sweep needs root (to give the runner another uid, as the chart does);
//! without root it says so and checks only what holds for one uid (environment, tree).

mod api_harness;

use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use agenthooks_dispatcher::sandbox::protocol::{
    MAX_RESPONSE_FRAME, RunOutcome, RunRequest, read_frame, write_frame,
};
use api_harness::Proc;
use serde_json::{Value, json};

/// The runner's uid when the test is root (the chart's runner uid).
const RUNNER_UID: u32 = 65533;
const SEAL_HEX: &str = "5ea15ea15ea15ea15ea15ea15ea15ea15ea15ea15ea15ea15ea15ea15ea15ea1";
const ADMIN_TOKEN: &str = "admin-token-never-seen-by-hooks-7f3a";
const ENV_SECRET: &str = "env-secret-never-seen-by-hooks-91c2";

fn is_root() -> bool {
    // SAFETY: no preconditions.
    unsafe { libc::geteuid() == 0 }
}

/// Layout: `base` (0711) holds `secrets/` (0700, the dispatcher's files), `sock/` and
/// `runner-tmp/` and `pub/` (the runner's; `pub/` is where the hook writes its findings).
struct Layout {
    _dir: tempfile::TempDir,
    base: PathBuf,
}

impl Layout {
    fn new() -> Layout {
        let dir = tempfile::tempdir().unwrap();
        let base = dir.path().to_path_buf();
        std::fs::set_permissions(&base, std::fs::Permissions::from_mode(0o711)).unwrap();
        let l = Layout { _dir: dir, base };
        std::fs::create_dir(l.p("secrets")).unwrap();
        std::fs::set_permissions(l.p("secrets"), std::fs::Permissions::from_mode(0o700)).unwrap();
        std::fs::create_dir(l.p("secrets/spool")).unwrap();
        for d in ["sock", "runner-tmp", "pub"] {
            std::fs::create_dir(l.p(d)).unwrap();
            if is_root() {
                std::os::unix::fs::chown(l.p(d), Some(RUNNER_UID), Some(RUNNER_UID)).unwrap();
            }
        }
        std::fs::set_permissions(l.p("pub"), std::fs::Permissions::from_mode(0o755)).unwrap();
        std::fs::write(l.p("secrets/seal.key"), SEAL_HEX).unwrap();
        std::fs::write(l.p("secrets/admin.token"), ADMIN_TOKEN).unwrap();
        for f in ["seal.key", "admin.token"] {
            std::fs::set_permissions(
                l.p(&format!("secrets/{f}")),
                std::fs::Permissions::from_mode(0o600),
            )
            .unwrap();
        }
        l
    }
    fn p(&self, rel: &str) -> PathBuf {
        self.base.join(rel)
    }
    fn socket(&self) -> PathBuf {
        self.p("sock/runner.sock")
    }
}

/// Starts the runner the way the chart does: its own process, no secrets, an environment
/// of its own, and (as root) uid/gid [`RUNNER_UID`].
async fn start_runner(l: &Layout) -> Proc {
    let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_agenthooks-dispatcher"));
    cmd.args(["command-runner", "--socket"])
        .arg(l.socket())
        .arg("--tmp-dir")
        .arg(l.p("runner-tmp"))
        .env_clear()
        .env("PATH", "/usr/local/bin:/usr/bin:/bin")
        .current_dir(l.p("runner-tmp"));
    if is_root() {
        // std drops the supplementary groups when root sets a uid.
        cmd.uid(RUNNER_UID).gid(RUNNER_UID);
    }
    let proc = api_harness::spawn(cmd);
    for _ in 0..400 {
        if l.socket().exists() {
            return proc;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    panic!("the runner never created {}", l.socket().display());
}

/// Starts a dispatcher holding the secrets, pointed at the runner; (process, base URL).
async fn start_dispatcher(l: &Layout, hooks: &str) -> (Proc, String) {
    std::fs::write(l.p("secrets/hooks.yaml"), hooks).unwrap();
    let mut cmd = api_harness::command(&l.p("secrets"));
    cmd.arg("--hooks")
        .arg(l.p("secrets/hooks.yaml"))
        .arg("--seal-key-file")
        .arg(l.p("secrets/seal.key"))
        .arg("--admin-token-file")
        .arg(l.p("secrets/admin.token"))
        .arg(format!(
            "--audit-db=sqlite://{}",
            l.p("secrets/audit.db").display()
        ))
        .arg("--audit-spool-dir")
        .arg(l.p("secrets/spool"))
        .arg(format!("--command-runner=unix:{}", l.socket().display()))
        .env("DISPATCHER_SECRET", ENV_SECRET);
    api_harness::serve(cmd).await
}

fn hook(name: &str, command: &str, timeout_ms: u32) -> String {
    format!(
        "apiVersion: agenthooks.io/v1alpha1\nkind: AgentHook\nmetadata: {{name: {name}, namespace: team-a}}\n\
         spec:\n  event: pre_tool_use\n  timeoutMs: {timeout_ms}\n  handler:\n    type: command\n    command:\n      command: {command:?}\n      allowedEnvVars: [DISPATCHER_SECRET, PATH]\n"
    )
}

fn event() -> Value {
    json!({"event": "pre_tool_use", "tenant_id": "team-a", "session_id": "s1", "agent_id": "a1",
           "tool_name": "Bash", "tool_input": {"command": "ls"}})
}

async fn dispatch(base: &str) -> Value {
    let resp = api_harness::client()
        .post(format!("{base}/v1/dispatch"))
        .header("content-type", "application/json")
        .body(event().to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    serde_json::from_str(&resp.text().await.unwrap()).unwrap()
}

/// Lines that start three `sleep MARKER` processes trying to outlive the hook (`setsid`,
/// a double fork, both) and wait until all three wrote their pid to `pids`.
fn escapes(pids: &Path, marker: &str) -> String {
    let p = pids.display();
    format!(
        "setsid sh -c 'echo $$ >> {p}; exec sleep {marker}' </dev/null >/dev/null 2>&1 &\n\
         ( sh -c 'echo $$ >> {p}; exec sleep {marker}' </dev/null >/dev/null 2>&1 & )\n\
         setsid sh -c '( sh -c \"echo \\$\\$ >> {p}; exec sleep {marker}\" </dev/null >/dev/null 2>&1 & )' &\n\
         while [ \"$(wc -l < {p} 2>/dev/null || echo 0)\" -lt 3 ]; do sleep 0.01; done\n"
    )
}

fn marker() -> String {
    format!("600.{}", uuid::Uuid::new_v4().as_u128() % 1_000_000_007)
}

/// Live (not zombie) processes with `marker` as an argument.
fn processes_with_arg(marker: &str) -> Vec<(i32, String)> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        let Ok(cmdline) = std::fs::read(format!("/proc/{pid}/cmdline")) else {
            continue;
        };
        if !cmdline.split(|&b| b == 0).any(|a| a == marker.as_bytes()) {
            continue;
        }
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        let state = stat.rfind(')').and_then(|i| stat[i + 2..].chars().next());
        if !matches!(state, Some('Z' | 'X') | None) {
            found.push((pid, String::from_utf8_lossy(&cmdline).replace('\0', " ")));
        }
    }
    found
}

/// The case row: a command hook `cat`s the dispatcher's seal key, admin token, audit
/// database and spool, `/proc/<dispatcher>/environ`, `/proc/1/environ`, the
/// ServiceAccount token, and asks for the dispatcher's env secret; then `setsid sleep &`
/// and double forks. It reads nothing of them, and nothing of it runs after it returns.
#[tokio::test]
async fn a_command_hook_reads_none_of_the_dispatchers_secrets_and_leaves_nothing_running() {
    let l = Layout::new();
    let _runner = start_runner(&l).await;
    let script = l.p("pub/sweep.sh");
    let hooks = hook("sweep", &format!("sh {}", script.display()), 8000);
    let (dispatcher, base) = start_dispatcher(&l, &hooks).await;
    let dpid = dispatcher.0.id();

    let out = l.p("pub/read.txt");
    let m = marker();
    let targets = [
        l.p("secrets/seal.key"),
        l.p("secrets/admin.token"),
        l.p("secrets/audit.db"),
        l.p("secrets/spool"),
        l.p("secrets/hooks.yaml"),
        PathBuf::from(format!("/proc/{dpid}/environ")),
        PathBuf::from("/proc/1/environ"),
        PathBuf::from("/var/run/secrets/kubernetes.io/serviceaccount/token"),
    ];
    let mut body = String::new();
    for t in &targets {
        body.push_str(&format!(
            "echo '--- {t}' >> {o}; cat {t} >> {o} 2>&1; ls {t} >> {o} 2>&1\n",
            t = t.display(),
            o = out.display()
        ));
    }
    body.push_str(&format!(
        "cat {spool}/* >> {o} 2>&1\nenv > {pubd}/env.txt\nid -u > {pubd}/uid.txt\npwd > {pubd}/pwd.txt\n",
        spool = l.p("secrets/spool").display(),
        o = out.display(),
        pubd = l.p("pub").display()
    ));
    body.push_str(&escapes(&l.p("pub/pids"), &m));
    body.push_str("echo '{}'\n");
    std::fs::write(&script, body).unwrap();
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o644)).unwrap();

    let decision = dispatch(&base).await;
    assert_eq!(decision["decision"], "allow", "{decision}");
    // At once: the answer comes only after the run's whole tree is gone.
    let left = processes_with_arg(&m);
    assert!(
        left.is_empty(),
        "left running after the hook returned: {left:?}"
    );
    let pids = std::fs::read_to_string(l.p("pub/pids")).unwrap();
    assert_eq!(pids.lines().count(), 3, "all three escapes started: {pids}");

    let env = std::fs::read_to_string(l.p("pub/env.txt")).unwrap();
    assert!(
        !env.contains(ENV_SECRET),
        "the dispatcher's env reached the hook: {env}"
    );
    assert!(
        !env.contains("DISPATCHER_SECRET"),
        "allowedEnvVars take the runner's environment, not the dispatcher's: {env}"
    );
    let tmp = l.p("runner-tmp").display().to_string();
    assert!(
        env.contains(&format!("TMPDIR={tmp}/agenthooks-run-")),
        "{env}"
    );
    assert!(
        env.contains(&format!("HOME={tmp}/agenthooks-run-")),
        "{env}"
    );

    let read = std::fs::read_to_string(&out).unwrap();
    for t in &targets {
        assert!(read.contains(&format!("--- {}", t.display())), "{read}");
    }
    if !is_root() {
        eprintln!(
            "not root: the runner shares the test's uid, so the file part of the sweep is not checked"
        );
        return;
    }
    assert_eq!(
        std::fs::read_to_string(l.p("pub/uid.txt")).unwrap().trim(),
        RUNNER_UID.to_string()
    );
    for secret in [
        SEAL_HEX,
        ADMIN_TOKEN,
        ENV_SECRET,
        "SQLite format 3",
        "sweep",
    ] {
        assert!(!read.contains(secret), "the hook read {secret:?}:\n{read}");
    }
    assert!(
        read.matches("Permission denied").count() >= 6,
        "each dispatcher file and environ was refused:\n{read}"
    );
    // The private directory is gone after the run.
    let left: Vec<_> = std::fs::read_dir(l.p("runner-tmp"))
        .unwrap()
        .flatten()
        .collect();
    assert!(left.is_empty(), "{left:?}");
}

/// A hook whose tree left its process group and that overruns its timeout: the runner
/// kills all of it; the event is blocked (onTimeout defaults to block).
#[tokio::test]
async fn the_runner_kills_a_timed_out_tree() {
    let l = Layout::new();
    let _runner = start_runner(&l).await;
    let script = l.p("pub/slow.sh");
    let m = marker();
    std::fs::write(
        &script,
        format!("{}sleep 30\n", escapes(&l.p("pub/pids"), &m)),
    )
    .unwrap();
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o644)).unwrap();
    let hooks = hook("slow", &format!("sh {}", script.display()), 1500);
    let (_dispatcher, base) = start_dispatcher(&l, &hooks).await;
    let started = Instant::now();
    let decision = dispatch(&base).await;
    assert_eq!(decision["decision"], "block", "{decision}");
    assert_eq!(decision["hooks"][0]["decision"], "timeout", "{decision}");
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(
        std::fs::read_to_string(l.p("pub/pids"))
            .unwrap()
            .lines()
            .count(),
        3
    );
    let left = processes_with_arg(&m);
    assert!(left.is_empty(), "left running after the timeout: {left:?}");
}

/// The runner checks the limits itself: a timeout above the 10 s maximum is cut to it,
/// and a frame that is not a request is refused.
#[tokio::test]
async fn the_runner_enforces_its_own_limits() {
    let l = Layout::new();
    let _runner = start_runner(&l).await;
    let req = RunRequest {
        command: "sleep 30".into(),
        allowed_env_vars: vec![],
        cwd: None,
        timeout_ms: 60_000,
        stdin: vec![],
    };
    let started = Instant::now();
    let mut conn = tokio::net::UnixStream::connect(l.socket()).await.unwrap();
    write_frame(&mut conn, &req).await.unwrap();
    let out: RunOutcome = read_frame(&mut conn, MAX_RESPONSE_FRAME).await.unwrap();
    let took = started.elapsed();
    assert_eq!(out, RunOutcome::Timeout);
    assert!(
        took >= Duration::from_millis(9_900) && took < Duration::from_secs(13),
        "{took:?}"
    );

    let mut conn = tokio::net::UnixStream::connect(l.socket()).await.unwrap();
    use tokio::io::AsyncWriteExt;
    conn.write_all(&4u32.to_be_bytes()).await.unwrap();
    conn.write_all(b"{\"x\"").await.unwrap();
    let out: RunOutcome = read_frame(&mut conn, MAX_RESPONSE_FRAME).await.unwrap();
    match out {
        RunOutcome::RunnerUnavailable { message } => {
            assert!(message.starts_with("bad request:"), "{message}")
        }
        o => panic!("expected a refusal, got {o:?}"),
    }
}

/// As root the runner refuses to start unless runs switch to another uid.
#[test]
fn a_root_runner_needs_a_run_uid() {
    if !is_root() {
        eprintln!("not root: nothing to check");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_agenthooks-dispatcher"))
        .args(["command-runner", "--socket"])
        .arg(dir.path().join("s.sock"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--run-as-uid"), "{err}");
}

/// First uid of the per-run range in the test below (the chart's default range is 65533..).
const RUN_UID_BASE: u32 = 64_200;

/// Runs `req` on the runner's socket and returns its outcome.
async fn run_on(socket: &Path, req: RunRequest) -> RunOutcome {
    let mut conn = tokio::net::UnixStream::connect(socket).await.unwrap();
    write_frame(&mut conn, &req).await.unwrap();
    read_frame(&mut conn, MAX_RESPONSE_FRAME).await.unwrap()
}

/// Runs `req` and asserts it completed with exit code 0.
async fn run_ok(socket: &Path, req: RunRequest) {
    let out = run_on(socket, req).await;
    assert!(
        matches!(
            out,
            RunOutcome::Completed {
                exit_code: Some(0),
                ..
            }
        ),
        "{out:?}"
    );
}

fn sh(command: String, timeout_ms: u64, stdin: &[u8]) -> RunRequest {
    RunRequest {
        command,
        allowed_env_vars: vec![],
        cwd: None,
        timeout_ms,
        stdin: stdin.to_vec(),
    }
}

/// Starts a root runner giving each run its own uid from `base` (4 of them; each test
/// its own range, since tests run at once and a sweep kills everything of its uid).
async fn start_uid_per_run_runner(l: &Layout, base: u32) -> Proc {
    let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_agenthooks-dispatcher"));
    cmd.args(["command-runner", "--max-runs", "4", "--socket"])
        .arg(l.socket())
        .arg("--tmp-dir")
        .arg(l.p("runner-tmp"))
        .arg(format!("--run-as-uid={base}"))
        .env_clear()
        .env("PATH", "/usr/local/bin:/usr/bin:/bin");
    let proc = api_harness::spawn(cmd);
    for _ in 0..400 {
        if l.socket().exists() {
            return proc;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    panic!("the runner never created {}", l.socket().display());
}

/// Review finding: a file a run leaves outside its private directory (in `/dev/shm`, or
/// the shared temp root) was read by the next run on the same uid, and files were made
/// world-readable. Runs now create files 0600, and a uid's files at the top of the
/// scratch directories go with its sweep.
#[tokio::test]
async fn a_run_finds_nothing_the_previous_run_on_its_uid_left() {
    if !is_root() {
        eprintln!("not root: a uid per run needs a root runner; nothing to check");
        return;
    }
    let l = Layout::new();
    std::fs::set_permissions(l.p("pub"), std::fs::Permissions::from_mode(0o777)).unwrap();
    std::fs::set_permissions(l.p("runner-tmp"), std::fs::Permissions::from_mode(0o1777)).unwrap();
    let _runner = start_uid_per_run_runner(&l, RUN_UID_BASE + 10).await;
    let m = uuid::Uuid::new_v4().simple().to_string();
    let (pubd, tmp) = (
        l.p("pub").display().to_string(),
        l.p("runner-tmp").display().to_string(),
    );
    let plant = sh(
        format!(
            "id -u > {pubd}/first.uid; echo planted > /dev/shm/ah-{m}; echo planted > {tmp}/ah-{m}; mkdir {tmp}/ah-dir-{m}; stat -c %a {tmp}/ah-{m} > {pubd}/mode"
        ),
        5_000,
        b"{}",
    );
    run_ok(&l.socket(), plant).await;
    assert_eq!(
        std::fs::read_to_string(l.p("pub/mode")).unwrap().trim(),
        "600"
    );
    let look = sh(
        format!(
            "id -u > {pubd}/second.uid; cat /dev/shm/ah-{m} {tmp}/ah-{m} > {pubd}/seen 2>&1; ls -d {tmp}/ah-dir-{m} >> {pubd}/seen 2>&1; exit 0"
        ),
        5_000,
        b"{}",
    );
    run_ok(&l.socket(), look).await;
    assert_eq!(
        std::fs::read_to_string(l.p("pub/first.uid")).unwrap(),
        std::fs::read_to_string(l.p("pub/second.uid")).unwrap(),
        "the second run reuses the swept uid"
    );
    let seen = std::fs::read_to_string(l.p("pub/seen")).unwrap();
    assert!(!seen.contains("planted"), "{seen}");
    assert_eq!(seen.matches("No such file").count(), 3, "{seen}");
    assert!(!Path::new(&format!("/dev/shm/ah-{m}")).exists());
}

/// CONTRACT §10.1 "nor to another run's files", with tenants' command hooks allowed (the
/// chart then starts the runner as root with `--run-as-uid`): two runs at once get two
/// uids; the second reads neither the first's private directory, nor its stdin (the
/// event) through `/proc`, nor its environment; when both are over, no process of any
/// run uid is left.
#[tokio::test]
async fn concurrent_runs_have_their_own_uids_and_cannot_read_each_other() {
    if !is_root() {
        eprintln!("not root: a uid per run needs a root runner; nothing to check");
        return;
    }
    let l = Layout::new();
    std::fs::set_permissions(l.p("pub"), std::fs::Permissions::from_mode(0o777)).unwrap();
    let _runner = start_uid_per_run_runner(&l, RUN_UID_BASE).await;
    let pubd = l.p("pub").display().to_string();
    let secret = format!("run-a-secret-{}", uuid::Uuid::new_v4().simple());
    let m = marker();
    // A: keeps its stdin (the event) unread on fd 0, writes a file into its private
    // directory, says where, and waits for B to finish looking (or 8 s).
    let a = sh(
        format!(
            "umask 022; echo {secret} > \"$TMPDIR/file\"; id -u > {pubd}/a.uid; echo \"$TMPDIR\" > {pubd}/a.tmp; echo $$ > {pubd}/a.pid; \
             sh -c 'exec sleep {m}' </dev/null >/dev/null 2>&1 & \
             i=0; while [ ! -e {pubd}/b.done ] && [ $i -lt 800 ]; do sleep 0.01; i=$((i+1)); done; echo '{{}}'"
        ),
        9_000,
        format!("{{\"tool_input\": \"{secret}-stdin\"}}").as_bytes(),
    );
    // B: once A is ready, tries A's file, directory, stdin, environment and cwd.
    let b = sh(
        format!(
            "while [ ! -s {pubd}/a.pid ]; do sleep 0.01; done; id -u > {pubd}/b.uid; \
             d=$(cat {pubd}/a.tmp); p=$(cat {pubd}/a.pid); \
             {{ cat \"$d/file\"; ls \"$d\"; cat /proc/$p/fd/0; cat /proc/$p/environ; ls /proc/$p/cwd/; kill -0 $p && echo signalled; }} > {pubd}/b.out 2>&1; \
             touch {pubd}/b.done; exit 0"
        ),
        9_000,
        b"{}",
    );
    let socket = l.socket();
    tokio::join!(run_ok(&socket, a), run_ok(&socket, b));
    let uid = |f: &str| {
        std::fs::read_to_string(l.p(f))
            .unwrap()
            .trim()
            .parse::<u32>()
            .unwrap()
    };
    let (ua, ub) = (uid("pub/a.uid"), uid("pub/b.uid"));
    assert_ne!(ua, ub, "two runs at once share a uid");
    for u in [ua, ub] {
        assert!((RUN_UID_BASE..RUN_UID_BASE + 4).contains(&u), "{u}");
    }
    let seen = std::fs::read_to_string(l.p("pub/b.out")).unwrap();
    assert!(!seen.contains(&secret), "B read A's run:\n{seen}");
    assert!(!seen.contains("signalled"), "B could signal A:\n{seen}");
    assert!(
        seen.matches("Permission denied").count() + seen.matches("Operation not permitted").count()
            >= 4,
        "{seen}"
    );
    // Nothing of either run is left, on any run uid.
    assert!(processes_with_arg(&m).is_empty());
    let mut left = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(status) = std::fs::read_to_string(e.path().join("status")) else {
            continue;
        };
        let uid = status
            .lines()
            .find_map(|l| l.strip_prefix("Uid:"))
            .and_then(|u| u.split_whitespace().next()?.parse::<u32>().ok());
        if uid.is_some_and(|u| (RUN_UID_BASE..RUN_UID_BASE + 4).contains(&u))
            && !status.contains("State:\tZ")
        {
            left.push(status.lines().next().unwrap_or_default().to_string());
        }
    }
    assert!(left.is_empty(), "processes of run uids left: {left:?}");
}
