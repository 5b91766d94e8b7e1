//! Issue 5 "Durability: nothing lost", end to end: the real `agenthooks-dispatcher` binary
//! in standalone mode with an http (or command) hook, writing `hook_executions` rows into a
//! real PostgreSQL from Debian's package (`agenthooks_e2e::postgres::PgServer`, started by
//! the harness) or its default SQLite file. No Kubernetes needed.
//!
//! 1. PostgreSQL SIGKILLed for 10 s in the middle of 2,000 events at 100/s: every decision
//!    is answered as usual, and afterwards every run's row is in the table exactly once.
//! 2. SIGTERM in the middle of load with the database up: every run answered before the
//!    exit has its row in PostgreSQL by the time the process has exited (the shutdown
//!    flush). With the database down at SIGTERM: the rows are in the spool when the
//!    process exits, and the next start writes them.
//! 3. The same event (same `event_id`) twice → one row.
//! 4. No `--audit-db`: rows go to `agenthooks-audit.db` (SQLite) in the working directory.
//! 5. `--audit-key-file`: a failing hook's row has `error` redacted and cut to 256 bytes and
//!    `error_detail` sealed with the key's id; without a key `error_detail` is NULL.

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::process::ExitStatus;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use agenthooks_dispatcher::audit::error_detail::ErrorDetailKey;
use agenthooks_dispatcher::audit::redact::error_summary;
use agenthooks_dispatcher::audit::store::{AuditStore, ExecutionQuery};
use agenthooks_e2e::postgres::PgServer;
use agenthooks_e2e::procs::{Proc, bin, free_port};
use agenthooks_e2e::stack::{hook_server, metric};
use serde_json::{Value, json};

/// The uid standalone mode gives the hook of [`http_hooks`] (`standalone:<ns>/<name>`).
const HOOK_UID: &str = "standalone:agenthooks-system/audit-allow";

/// A dispatcher child process (a [`Proc`]: SIGKILLed on drop, output in
/// `<cwd>/<name>.log`) and its URL.
struct Dispatcher {
    proc: Proc,
    url: String,
}

impl Dispatcher {
    /// Starts `agenthooks-dispatcher --hooks HOOKS --listen ... EXTRA...` in `cwd` and
    /// waits for `/readyz`.
    async fn start(name: &str, hooks: &Path, extra: &[String], cwd: &Path) -> Dispatcher {
        let port = free_port();
        let mut args: Vec<String> = vec![
            "--hooks".into(),
            hooks.display().to_string(),
            "--listen".into(),
            format!("127.0.0.1:{port}"),
            "--http-allow-cidr".into(),
            "127.0.0.0/8".into(),
            "--allow-anonymous".into(),
        ];
        args.extend_from_slice(extra);
        let proc = Proc::start_in(
            name,
            &bin("agenthooks-dispatcher"),
            &args,
            &[("RUST_LOG", "info")],
            cwd,
            cwd,
        );
        let d = Dispatcher {
            proc,
            url: format!("http://127.0.0.1:{port}"),
        };
        let client = client();
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Ok(r) = client.get(format!("{}/readyz", d.url)).send().await
                && r.status() == 200
            {
                return d;
            }
            assert!(
                Instant::now() < deadline,
                "{name} not ready in 30 s:\n{}",
                d.proc.log_tail(30)
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Waits for the process to exit (after a signal).
    async fn wait_exit(&mut self, timeout: Duration) -> ExitStatus {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(status) = self.proc.try_exit() {
                return status;
            }
            assert!(
                Instant::now() < deadline,
                "no exit within {timeout:?}:\n{}",
                self.proc.log_tail(30)
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    async fn get(&self, path: &str) -> (u16, String) {
        let r = client()
            .get(format!("{}{path}", self.url))
            .send()
            .await
            .unwrap();
        (r.status().as_u16(), r.text().await.unwrap())
    }

    async fn metrics(&self) -> String {
        self.get("/metrics").await.1
    }

    async fn readyz(&self) -> (u16, Value) {
        let (code, body) = self.get("/readyz").await;
        (code, serde_json::from_str(&body).unwrap_or(Value::Null))
    }
}

/// A hooks file with one global http hook answering allow (`audit-allow`, uid
/// [`HOOK_UID`]) that calls `url`.
fn http_hooks(dir: &Path, url: &str) -> PathBuf {
    let path = dir.join("hooks.yaml");
    std::fs::write(
        &path,
        format!(
            "apiVersion: agenthooks.io/v1alpha1\nkind: AgentHook\nmetadata: {{name: audit-allow, namespace: agenthooks-system}}\nspec:\n  event: pre_tool_use\n  scope: global\n  matcher: '^Bash$'\n  handler:\n    type: http\n    http: {{url: '{url}'}}\n"
        ),
    )
    .unwrap();
    path
}

fn event(id: &str) -> Value {
    json!({"event": "pre_tool_use", "event_id": id, "session_id": "s-1", "tenant_id": "acme",
           "agent_id": "a1", "tool_name": "Bash", "tool_input": {"command": "ls", "id": id}})
}

/// `POST /v1/dispatch` → (status, body); status 0 when nothing answered.
async fn dispatch(client: &reqwest::Client, url: &str, ev: &Value) -> (u16, Value) {
    match client
        .post(format!("{url}/v1/dispatch"))
        .header("content-type", "application/json")
        .body(ev.to_string())
        .timeout(Duration::from_secs(15))
        .send()
        .await
    {
        Ok(r) => {
            let code = r.status().as_u16();
            let body = r.bytes().await.unwrap_or_default();
            (code, serde_json::from_slice(&body).unwrap_or(Value::Null))
        }
        Err(_) => (0, Value::Null),
    }
}

fn client() -> reqwest::Client {
    let _ = rustls::crypto::ring::default_provider().install_default();
    reqwest::Client::builder()
        .pool_max_idle_per_host(64)
        .build()
        .unwrap()
}

/// An answer is "as usual": 200, allow, the one hook ran and allowed.
fn assert_allowed(id: &str, code: u16, body: &Value) {
    assert_eq!(code, 200, "{id}: {body}");
    assert_eq!(body["decision"], "allow", "{id}: {body}");
    assert_eq!(body["hooks"][0]["decision"], "allow", "{id}: {body}");
}

/// Every `dedup_key` in the table, and how many rows there are.
async fn stored_keys(url: &str) -> (Vec<String>, i64) {
    let store = AuditStore::connect(url).await.unwrap();
    let keys: Vec<(String,)> = match &store {
        AuditStore::Postgres(pool) => {
            sqlx::query_as("SELECT dedup_key FROM hook_executions ORDER BY id")
                .fetch_all(pool)
                .await
                .unwrap()
        }
        AuditStore::Sqlite(pool) => {
            sqlx::query_as("SELECT dedup_key FROM hook_executions ORDER BY id")
                .fetch_all(pool)
                .await
                .unwrap()
        }
    };
    store.close().await;
    let n = keys.len() as i64;
    (keys.into_iter().map(|(k,)| k).collect(), n)
}

/// Waits until the table holds `n` rows (or `timeout`); returns the keys.
async fn wait_rows(url: &str, n: usize, timeout: Duration) -> Vec<String> {
    let deadline = Instant::now() + timeout;
    loop {
        let (keys, _) = stored_keys(url).await;
        if keys.len() >= n || Instant::now() >= deadline {
            return keys;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

fn key(id: &str) -> String {
    format!("{HOOK_UID}:{id}")
}

/// Asserts `keys` holds each of `want` exactly once and nothing else.
fn assert_exactly_once(keys: &[String], want: &HashSet<String>) {
    let unique: HashSet<&String> = keys.iter().collect();
    assert_eq!(unique.len(), keys.len(), "a dedup key appears twice");
    let got: HashSet<String> = keys.iter().cloned().collect();
    let missing: Vec<_> = want.difference(&got).take(5).collect();
    let extra: Vec<_> = got.difference(want).take(5).collect();
    assert!(
        missing.is_empty() && extra.is_empty(),
        "{} rows for {} runs; missing e.g. {missing:?}, unexpected e.g. {extra:?}",
        keys.len(),
        want.len()
    );
}

/// The spool files (`*.jsonl`) in the spool directory `spool`.
fn spool_files(spool: &Path) -> Vec<PathBuf> {
    std::fs::read_dir(spool)
        .unwrap_or_else(|e| panic!("{}: {e}", spool.display()))
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "jsonl"))
        .collect()
}

fn blocking<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    std::thread::spawn(f).join().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn postgres_killed_for_ten_seconds_mid_load_loses_no_row() {
    const N: usize = 2_000;
    const RATE: f64 = 100.0;
    let dir = tempfile::tempdir().unwrap();
    let pg = Arc::new(blocking(|| PgServer::new().expect("PostgreSQL")));
    let url = pg.url();
    let (hook_url, hits) = hook_server(json!({"decision": "allow"}));
    let hooks = http_hooks(dir.path(), &hook_url);
    let d = Dispatcher::start(
        "dispatcher",
        &hooks,
        &["--audit-db".into(), url.clone()],
        dir.path(),
    )
    .await;

    let client = client();
    let started = Instant::now();
    let mut tasks = Vec::with_capacity(N);
    let mut interval = tokio::time::interval(Duration::from_secs_f64(1.0 / RATE));
    interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
    let mut killed_at = None;
    let mut restarted_at = None;
    let mut state_during_outage = None;
    for i in 0..N {
        interval.tick().await;
        let at = started.elapsed();
        if killed_at.is_none() && at >= Duration::from_secs(5) {
            let p = Arc::clone(&pg);
            blocking(move || p.kill());
            killed_at = Some(at);
            eprintln!("[audit_durability] PostgreSQL SIGKILLed at {at:?}, after {i} events");
        }
        // The first write after the kill fails once the pool gives up on a connection
        // (5 s): sample the state a little later, still inside the outage.
        if killed_at.is_some() && state_during_outage.is_none() && at >= Duration::from_secs(13) {
            state_during_outage = Some(d.readyz().await);
        }
        if restarted_at.is_none() && at >= Duration::from_secs(15) {
            let p = Arc::clone(&pg);
            blocking(move || p.start()).expect("restart PostgreSQL");
            restarted_at = Some(at);
            eprintln!("[audit_durability] PostgreSQL restarted at {at:?}, after {i} events");
        }
        let (client, base) = (client.clone(), d.url.clone());
        tasks.push(tokio::spawn(async move {
            let id = format!("kill-{i}");
            let (code, body) = dispatch(&client, &base, &event(&id)).await;
            (id, code, body)
        }));
    }
    let mut want = HashSet::new();
    for t in tasks {
        let (id, code, body) = t.await.unwrap();
        assert_allowed(&id, code, &body);
        want.insert(key(&id));
    }
    let load_secs = started.elapsed().as_secs_f64();
    assert!(restarted_at.is_some(), "the load ended before the restart");
    assert_eq!(hits.load(Ordering::SeqCst), N, "every run reached the hook");

    // While PostgreSQL was down: still ready, the audit trail spooling.
    let (code, body) = state_during_outage.expect("readyz sampled during the outage");
    assert_eq!(code, 200, "{body}");
    assert_eq!(body["audit"]["state"], "spooling", "{body}");
    assert_eq!(body["audit"]["backend"], "postgres", "{body}");

    let keys = wait_rows(&url, N, Duration::from_secs(60)).await;
    assert_exactly_once(&keys, &want);
    let m = d.metrics().await;
    assert!(
        metric(&m, "agenthooks_audit_write_failures_total", "") >= 1.0,
        "{m}"
    );
    assert_eq!(
        metric(&m, "agenthooks_audit_rows_written_total", ""),
        N as f64
    );
    assert_eq!(metric(&m, "agenthooks_audit_rows_dropped_total", ""), 0.0);
    let deadline = Instant::now() + Duration::from_secs(10);
    while metric(&d.metrics().await, "agenthooks_audit_spool_rows", "") != 0.0 {
        assert!(Instant::now() < deadline, "the spool did not empty");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(d.readyz().await.1["audit"]["state"], "ok");
    let spooled = spool_files(&dir.path().join("agenthooks-audit.spool"));
    assert_eq!(
        spooled,
        Vec::<PathBuf>::new(),
        "replayed spool files are deleted"
    );
    eprintln!(
        "[audit_durability] {N} events in {load_secs:.1} s, PostgreSQL down {:?}..{:?}: {} rows, each once",
        killed_at.unwrap(),
        restarted_at.unwrap(),
        keys.len()
    );
    drop(d);
    blocking(move || drop(pg));
}

/// Sends events from `workers` loops as fast as they are answered until `stop`, returning
/// the ids answered with an allow and the ids sent.
async fn load_until(
    url: &str,
    prefix: &str,
    workers: usize,
    stop: Arc<AtomicBool>,
) -> (HashSet<String>, HashSet<String>) {
    let client = client();
    let mut tasks = Vec::new();
    for w in 0..workers {
        let (client, url, stop, prefix) = (
            client.clone(),
            url.to_owned(),
            Arc::clone(&stop),
            prefix.to_owned(),
        );
        tasks.push(tokio::spawn(async move {
            let mut answered = HashSet::new();
            let mut sent = HashSet::new();
            for i in 0.. {
                if stop.load(Ordering::SeqCst) {
                    break;
                }
                let id = format!("{prefix}-{w}-{i}");
                sent.insert(id.clone());
                let (code, body) = dispatch(&client, &url, &event(&id)).await;
                if code == 0 {
                    break; // the dispatcher is gone
                }
                assert_allowed(&id, code, &body);
                answered.insert(id);
            }
            (answered, sent)
        }));
    }
    let mut answered = HashSet::new();
    let mut sent = HashSet::new();
    for t in tasks {
        let (a, s) = t.await.unwrap();
        answered.extend(a);
        sent.extend(s);
    }
    (answered, sent)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sigterm_mid_load_flushes_every_answered_run_into_postgres() {
    let dir = tempfile::tempdir().unwrap();
    let url = blocking(|| {
        PgServer::shared()
            .create_database(&format!("durability_term_{}", std::process::id()))
            .unwrap()
    });
    let (hook_url, _) = hook_server(json!({"decision": "allow"}));
    let hooks = http_hooks(dir.path(), &hook_url);
    let mut d = Dispatcher::start(
        "dispatcher",
        &hooks,
        &["--audit-db".into(), url.clone()],
        dir.path(),
    )
    .await;
    let stop = Arc::new(AtomicBool::new(false));
    let load = tokio::spawn({
        let (url, stop) = (d.url.clone(), Arc::clone(&stop));
        async move { load_until(&url, "term", 4, stop).await }
    });
    tokio::time::sleep(Duration::from_millis(1500)).await;
    d.proc.signal(libc::SIGTERM);
    let status = d.wait_exit(Duration::from_secs(40)).await;
    stop.store(true, Ordering::SeqCst);
    let (answered, sent) = load.await.unwrap();
    assert!(status.success(), "{status}:\n{}", d.proc.log_tail(20));
    assert!(answered.len() > 100, "only {} answered", answered.len());

    // Read only after the exit: what the process left behind.
    let (keys, n) = stored_keys(&url).await;
    let unique: HashSet<&String> = keys.iter().collect();
    assert_eq!(unique.len() as i64, n, "a dedup key appears twice");
    let stored: HashSet<String> = keys.into_iter().collect();
    let missing: Vec<&String> = answered
        .iter()
        .filter(|id| !stored.contains(&key(id)))
        .take(5)
        .collect();
    assert!(
        missing.is_empty(),
        "answered runs without a row after exit: {missing:?} ({} answered, {n} rows)\n{}",
        answered.len(),
        d.proc.log_tail(10)
    );
    let sent_keys: HashSet<String> = sent.iter().map(|id| key(id)).collect();
    assert!(stored.is_subset(&sent_keys), "rows of runs never sent");
    let log = std::fs::read_to_string(&d.proc.log).unwrap();
    assert!(
        log.contains("audit queue flushed"),
        "{}",
        d.proc.log_tail(20)
    );
    let left = spool_files(&dir.path().join("agenthooks-audit.spool"));
    assert_eq!(
        left,
        Vec::<PathBuf>::new(),
        "the database was up: nothing spooled"
    );
    eprintln!(
        "[audit_durability] SIGTERM mid-load: {} answered, {n} rows after exit",
        answered.len()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sigterm_with_postgres_down_spools_and_the_next_start_writes_the_rows() {
    let dir = tempfile::tempdir().unwrap();
    let pg = Arc::new(blocking(|| PgServer::new().expect("PostgreSQL")));
    let url = pg.url();
    let (hook_url, _) = hook_server(json!({"decision": "allow"}));
    let hooks = http_hooks(dir.path(), &hook_url);
    let args = ["--audit-db".to_string(), url.clone()];
    let mut d = Dispatcher::start("first", &hooks, &args, dir.path()).await;
    let client = client();
    let mut want = HashSet::new();
    for i in 0..50 {
        let id = format!("down-{i}");
        let (code, body) = dispatch(&client, &d.url, &event(&id)).await;
        assert_allowed(&id, code, &body);
        want.insert(key(&id));
    }
    assert_eq!(wait_rows(&url, 50, Duration::from_secs(10)).await.len(), 50);
    let p = Arc::clone(&pg);
    blocking(move || p.kill());
    for i in 50..150 {
        let id = format!("down-{i}");
        let (code, body) = dispatch(&client, &d.url, &event(&id)).await;
        assert_allowed(&id, code, &body);
        want.insert(key(&id));
    }
    d.proc.signal(libc::SIGTERM);
    let status = d.wait_exit(Duration::from_secs(40)).await;
    assert!(status.success(), "{status}:\n{}", d.proc.log_tail(20));
    // The 100 runs of the outage wait in the spool (some may have been spooled before
    // the SIGTERM, the rest by the shutdown flush).
    let spooled: usize = spool_files(&dir.path().join("agenthooks-audit.spool"))
        .into_iter()
        .map(|p| {
            std::fs::read_to_string(p)
                .unwrap()
                .lines()
                .filter(|l| !l.is_empty())
                .count()
        })
        .sum();
    assert_eq!(spooled, 100, "{}", d.proc.log_tail(20));

    let p = Arc::clone(&pg);
    blocking(move || p.start()).expect("restart PostgreSQL");
    let again = Dispatcher::start("second", &hooks, &args, dir.path()).await;
    let keys = wait_rows(&url, 150, Duration::from_secs(30)).await;
    assert_exactly_once(&keys, &want);
    let deadline = Instant::now() + Duration::from_secs(10);
    while metric(&again.metrics().await, "agenthooks_audit_spool_rows", "") != 0.0 {
        assert!(Instant::now() < deadline, "the spool did not empty");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    drop(again);
    blocking(move || drop(pg));
}

/// A crash (SIGKILL) while the database is failing loses at most what waited in memory
/// for the write timeout (2 s): runs answered more than that before the crash are in the
/// spool and reach the database at the next start.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sigkill_during_an_outage_loses_nothing_older_than_the_write_timeout() {
    let dir = tempfile::tempdir().unwrap();
    let pg = Arc::new(blocking(|| PgServer::new().expect("PostgreSQL")));
    let url = pg.url();
    let (hook_url, _) = hook_server(json!({"decision": "allow"}));
    let hooks = http_hooks(dir.path(), &hook_url);
    let args = ["--audit-db".to_string(), url.clone()];
    let mut d = Dispatcher::start("first", &hooks, &args, dir.path()).await;
    let client = client();
    let (code, body) = dispatch(&client, &d.url, &event("warm")).await;
    assert_allowed("warm", code, &body);
    assert_eq!(wait_rows(&url, 1, Duration::from_secs(10)).await.len(), 1);
    let p = Arc::clone(&pg);
    blocking(move || p.kill());
    let mut want = HashSet::from([key("warm")]);
    for i in 0..60 {
        let id = format!("crash-{i}");
        let (code, body) = dispatch(&client, &d.url, &event(&id)).await;
        assert_allowed(&id, code, &body);
        want.insert(key(&id));
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    // Longer than the write timeout plus a batch window: every run above is spooled.
    tokio::time::sleep(Duration::from_millis(3_000)).await;
    let (_, ready) = d.readyz().await;
    assert_eq!(ready["audit"]["state"], "spooling", "{ready}");
    d.proc.signal(libc::SIGKILL);
    let _ = d.wait_exit(Duration::from_secs(5)).await;

    let p = Arc::clone(&pg);
    blocking(move || p.start()).expect("restart PostgreSQL");
    let again = Dispatcher::start("second", &hooks, &args, dir.path()).await;
    let keys = wait_rows(&url, want.len(), Duration::from_secs(30)).await;
    assert_exactly_once(&keys, &want);
    drop(again);
    blocking(move || drop(pg));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_same_event_twice_leaves_one_row() {
    let dir = tempfile::tempdir().unwrap();
    let url = blocking(|| {
        PgServer::shared()
            .create_database(&format!("durability_dup_{}", std::process::id()))
            .unwrap()
    });
    let (hook_url, hits) = hook_server(json!({"decision": "allow"}));
    let hooks = http_hooks(dir.path(), &hook_url);
    let d = Dispatcher::start(
        "dispatcher",
        &hooks,
        &["--audit-db".into(), url.clone()],
        dir.path(),
    )
    .await;
    let client = client();
    // Twice at once (one batch), then once more after its row is written (another batch).
    for id in ["dup", "dup", "marker-1"] {
        let (code, body) = dispatch(&client, &d.url, &event(id)).await;
        assert_allowed(id, code, &body);
    }
    wait_rows(&url, 2, Duration::from_secs(10)).await;
    for id in ["dup", "marker-2"] {
        let (code, body) = dispatch(&client, &d.url, &event(id)).await;
        assert_allowed(id, code, &body);
    }
    let keys = wait_rows(&url, 3, Duration::from_secs(10)).await;
    // The writer is first in, first out: marker-2's row means dup's third run was handled.
    assert_eq!(hits.load(Ordering::SeqCst), 5, "the hook ran each time");
    assert_eq!(keys, [key("dup"), key("marker-1"), key("marker-2")]);
    let m = d.metrics().await;
    assert_eq!(metric(&m, "agenthooks_audit_rows_written_total", ""), 3.0);
    assert_eq!(metric(&m, "agenthooks_audit_rows_dropped_total", ""), 0.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_audit_db_rows_go_to_sqlite_in_the_working_directory() {
    let cwd = tempfile::tempdir().unwrap();
    let (hook_url, _) = hook_server(json!({"decision": "allow"}));
    let hooks = http_hooks(cwd.path(), &hook_url);
    let mut d = Dispatcher::start("dispatcher", &hooks, &[], cwd.path()).await;
    let (code, ready) = d.readyz().await;
    assert_eq!((code, &ready["audit"]["backend"]), (200, &json!("sqlite")));
    let client = client();
    for id in ["sq-1", "sq-2", "sq-3"] {
        let (code, body) = dispatch(&client, &d.url, &event(id)).await;
        assert_allowed(id, code, &body);
    }
    d.proc.signal(libc::SIGTERM);
    assert!(d.wait_exit(Duration::from_secs(30)).await.success());
    let file = cwd.path().join("agenthooks-audit.db");
    assert!(file.is_file(), "{} missing", file.display());
    assert!(cwd.path().join("agenthooks-audit.spool").is_dir());
    let store = AuditStore::connect(&format!("sqlite://{}", file.display()))
        .await
        .unwrap();
    let page = store.list(&ExecutionQuery::default()).await.unwrap();
    let keys: Vec<&str> = page.rows.iter().map(|r| r.dedup_key.as_str()).collect();
    // Newest first.
    assert_eq!(keys, [key("sq-3"), key("sq-2"), key("sq-1")]);
    let row = &page.rows[2];
    assert_eq!(
        (row.hook_namespace.as_str(), row.hook_name.as_str()),
        ("agenthooks-system", "audit-allow")
    );
    assert_eq!(
        (row.tenant.as_str(), row.session_id.as_str()),
        ("acme", "s-1")
    );
    assert_eq!(row.decision.as_str(), "allow");
    assert_eq!(
        row.input_hash,
        agenthooks_dispatcher::audit::input_hash::input_hash(
            "Bash",
            &json!({"command": "ls", "id": "sq-1"})
        )
    );
    assert_eq!(row.metadata["matcher_matched"], true);
    assert_eq!(row.metadata["http_status"], 200);
    assert_eq!(row.error, None);
    store.close().await;
}

/// A global command hook that fails (exit 1) with a secret-bearing, long stderr.
fn failing_hooks(dir: &Path) -> PathBuf {
    let path = dir.join("failing.yaml");
    let cmd = format!(
        "echo 'upstream refused: Authorization: Bearer abcdefghijklmnopqrstuvwxyz0123456789 for bob@example.com {}' >&2; exit 1",
        "x".repeat(400)
    );
    std::fs::write(
        &path,
        format!(
            "apiVersion: agenthooks.io/v1alpha1\nkind: AgentHook\nmetadata: {{name: audit-fail, namespace: agenthooks-system}}\nspec:\n  event: pre_tool_use\n  scope: global\n  handler:\n    type: command\n    command: {{command: {}}}\n",
            serde_json::to_string(&cmd).unwrap()
        ),
    )
    .unwrap();
    path
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn error_detail_is_sealed_with_the_key_id_and_absent_without_a_key() {
    let dir = tempfile::tempdir().unwrap();
    let hooks = failing_hooks(dir.path());
    let key_path = dir.path().join("audit.key");
    std::fs::write(&key_path, "5a".repeat(32)).unwrap();
    let key = ErrorDetailKey::from_file("k-2026", &key_path).unwrap();
    let client = client();
    for (name, with_key) in [("keyed", true), ("keyless", false)] {
        let db = dir.path().join(format!("{name}.db"));
        let url = format!("sqlite://{}", db.display());
        let mut args = vec![
            "--audit-db".to_string(),
            url.clone(),
            "--audit-spool-dir".into(),
            dir.path()
                .join(format!("{name}.spool"))
                .display()
                .to_string(),
        ];
        if with_key {
            args.push("--audit-key-file".into());
            args.push(format!("k-2026={}", key_path.display()));
        }
        let mut d = Dispatcher::start(name, &hooks, &args, dir.path()).await;
        let id = format!("fail-{name}");
        let (code, body) = dispatch(&client, &d.url, &event(&id)).await;
        assert_eq!(code, 200, "{body}");
        assert_eq!(body["decision"], "block", "an error fails closed: {body}");
        assert_eq!(body["hooks"][0]["decision"], "error", "{body}");
        let reason = body["hooks"][0]["reason"].as_str().unwrap().to_owned();
        assert!(reason.contains("bob@example.com"), "{reason}");
        d.proc.signal(libc::SIGTERM);
        assert!(d.wait_exit(Duration::from_secs(30)).await.success());

        let store = AuditStore::connect(&url).await.unwrap();
        let page = store.list(&ExecutionQuery::default()).await.unwrap();
        assert_eq!(page.rows.len(), 1, "{name}");
        let row = &page.rows[0];
        assert_eq!(row.decision.as_str(), "error");
        assert_eq!(
            row.dedup_key,
            format!("standalone:agenthooks-system/audit-fail:{id}")
        );
        let error = row.error.as_deref().expect("error column");
        assert_eq!(error, error_summary(&reason));
        assert!(error.len() <= 256, "{} bytes", error.len());
        assert!(!error.contains("bob@example.com") && !error.contains("abcdefghijklmnop"));
        assert!(error.contains("[REDACTED]"), "{error}");
        if with_key {
            let sealed = row.error_detail.as_ref().expect("error_detail sealed");
            assert_eq!(sealed.key_id, "k-2026");
            assert_eq!(
                key.open(sealed, &row.dedup_key).unwrap(),
                reason,
                "the full error, unredacted"
            );
            assert!(!sealed.ciphertext.contains("bob"));
        } else {
            assert_eq!(row.error_detail, None, "no key, no error detail");
        }
        store.close().await;
    }
}
