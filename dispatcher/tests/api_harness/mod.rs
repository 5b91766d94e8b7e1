//! The `agenthooks-dispatcher` binary as a child process of a test: [`command`] in a
//! directory of the test's own, [`spawn`] under a [`Proc`] guard, [`serve`] on a free port
//! until `/readyz` answers 200. On top of those, for the history and dry-run API tests,
//! [`start`]: a hooks file, an admin token, an audit key and a SQLite audit database in a
//! temp dir ([`Files`]).

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::Duration;

use serde_json::Value;

/// The admin token the tests configure.
pub const TOKEN: &str = "test-admin-token-0123456789abcdef";

/// A child process; SIGTERM (so the audit writer flushes), then SIGKILL if it lingers,
/// when dropped.
pub struct Proc(pub Child);

impl Drop for Proc {
    fn drop(&mut self) {
        self.sigterm();
        for _ in 0..100 {
            if let Ok(Some(_)) = self.0.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl Proc {
    pub fn sigterm(&self) {
        // SAFETY: signalling our own child by its pid.
        unsafe {
            libc::kill(self.0.id() as i32, libc::SIGTERM);
        }
    }

    /// SIGTERM, then the exit status; panics when it has not exited `within`.
    pub async fn terminate(&mut self, within: Duration) -> ExitStatus {
        self.sigterm();
        let deadline = tokio::time::Instant::now() + within;
        loop {
            if let Some(s) = self.0.try_wait().unwrap() {
                return s;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "no exit within {within:?} of SIGTERM"
            );
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
    }
}

/// The binary, run in `dir` (the default audit database and spool live in the working
/// directory), without the environment's audit, admin and OTLP settings.
pub fn command(dir: &Path) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_agenthooks-dispatcher"));
    cmd.current_dir(dir);
    for var in [
        "AGENTHOOKS_ADMIN_TOKEN_FILE",
        "AGENTHOOKS_AUDIT_DB",
        "AGENTHOOKS_AUDIT_KEY_FILES",
        "OTEL_EXPORTER_OTLP_ENDPOINT",
        "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
        "OTEL_SDK_DISABLED",
    ] {
        cmd.env_remove(var);
    }
    // Synced mode needs the dispatcher's own token for the operator; the stand-in operators
    // do not verify it (the real one does: e2e/tests/sync_identity.rs).
    cmd.env("AGENTHOOKS_OPERATOR_TOKEN_FILE", operator_token_file(dir));
    cmd
}

/// The claims of [`operator_token_file`]'s token: dispatcher `tests/dispatcher`.
pub const STANDIN_TOKEN_IDENTITY: &str = "tests/dispatcher";

/// Writes (once) into `dir` an unsigned ServiceAccount-like JWT naming
/// [`STANDIN_TOKEN_IDENTITY`], for `--operator-token-file`.
pub fn operator_token_file(dir: &Path) -> std::path::PathBuf {
    use base64::Engine;
    let path = dir.join("operator.token");
    if !path.exists() {
        let enc = |v: &[u8]| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(v);
        let claims = serde_json::json!({"aud": ["agenthooks.io/sync"], "kubernetes.io": {
            "namespace": "tests", "serviceaccount": {"name": "dispatcher"}}});
        let token = format!(
            "{}.{}.unsigned",
            enc(br#"{"alg":"none"}"#),
            enc(claims.to_string().as_bytes())
        );
        std::fs::write(&path, token).unwrap();
    }
    path
}

/// Adds `--allow-anonymous` to a serving command that names no way to know its callers
/// (the tests of other things than identity call without a credential).
pub fn anonymous_unless_told(cmd: &mut Command) {
    let args: Vec<String> = cmd
        .get_args()
        .map(|a| a.to_string_lossy().into_owned())
        .collect();
    let subcommand = args
        .first()
        .is_some_and(|a| ["check", "budget-load", "command-runner", "hook"].contains(&a.as_str()));
    let told = args.iter().any(|a| {
        [
            "--callers-file",
            "--kubernetes-callers",
            "--allow-anonymous",
        ]
        .iter()
        .any(|f| a == f || a.starts_with(&format!("{f}=")))
    });
    if !subcommand && !told {
        cmd.arg("--allow-anonymous");
    }
}

/// Spawns `cmd` under a guard; its output is dropped unless `TEST_DISPATCHER_LOGS` is
/// set. A serving command without a callers flag gets `--allow-anonymous`.
pub fn spawn(mut cmd: Command) -> Proc {
    anonymous_unless_told(&mut cmd);
    let logs = std::env::var_os("TEST_DISPATCHER_LOGS").is_some();
    cmd.stdout(Stdio::null()).stderr(if logs {
        Stdio::inherit()
    } else {
        Stdio::null()
    });
    Proc(cmd.spawn().unwrap())
}

/// Spawns `cmd` with `--listen` on a free port and waits until it is ready: the process
/// and its base URL.
pub async fn serve(mut cmd: Command) -> (Proc, String) {
    let port = free_port();
    cmd.args(["--listen", &format!("127.0.0.1:{port}")]);
    // The client first: nothing may panic between the spawn and the guard that kills it.
    let c = client();
    let proc = spawn(cmd);
    let base = format!("http://127.0.0.1:{port}");
    wait_ready(&c, &base).await;
    (proc, base)
}

/// Polls `GET <base>/readyz` until it answers 200 (10 s at most).
pub async fn wait_ready(c: &reqwest::Client, base: &str) {
    for _ in 0..400 {
        let ready = c.get(format!("{base}/readyz")).send().await;
        if ready.is_ok_and(|r| r.status() == 200) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    panic!("{base} never became ready");
}

/// A running dispatcher with its files' settings.
pub struct Dispatcher {
    proc: Proc,
    pub base: String,
    pub client: reqwest::Client,
}

/// Files of one test: hooks, admin token, audit keys, audit database.
pub struct Files {
    pub dir: tempfile::TempDir,
}

impl Files {
    pub fn new(hooks_yaml: &str) -> Files {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("hooks.yaml"), hooks_yaml).unwrap();
        std::fs::write(dir.path().join("admin.token"), format!("{TOKEN}\n")).unwrap();
        // Two AES-256 keys (64 hex characters each).
        std::fs::write(dir.path().join("k1.key"), "11".repeat(32)).unwrap();
        std::fs::write(dir.path().join("k2.key"), "22".repeat(32)).unwrap();
        Files { dir }
    }
    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }
    pub fn audit_db(&self) -> String {
        format!("sqlite://{}", self.path("audit.db").display())
    }
}

/// A plain HTTP client (the crate's rustls provider installed first).
pub fn client() -> reqwest::Client {
    agenthooks_dispatcher::operator_urls::install_crypto_provider();
    reqwest::Client::builder().no_proxy().build().unwrap()
}

pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Starts the binary with `--hooks <dir>/hooks.yaml`, `--listen` on a free port and
/// `args`, and waits until it is ready.
pub async fn start(files: &Files, args: &[&str]) -> Dispatcher {
    let mut cmd = command(files.dir.path());
    cmd.args(["--hooks", files.path("hooks.yaml").to_str().unwrap()])
        .args(["--audit-spool-dir", files.path("spool").to_str().unwrap()])
        .args(args);
    let (proc, base) = serve(cmd).await;
    Dispatcher {
        proc,
        base,
        client: client(),
    }
}

impl Dispatcher {
    /// GET `path`, with `Authorization: Bearer <token>` when given: (status, JSON body).
    pub async fn get(&self, path: &str, token: Option<&str>) -> (u16, Value) {
        let mut req = self.client.get(format!("{}{path}", self.base));
        if let Some(t) = token {
            req = req.bearer_auth(t);
        }
        send(req).await
    }

    /// POST the raw `body` to `path`: (status, JSON body).
    pub async fn post_raw(&self, path: &str, body: String, token: Option<&str>) -> (u16, Value) {
        let mut req = self
            .client
            .post(format!("{}{path}", self.base))
            .header("content-type", "application/json")
            .body(body);
        if let Some(t) = token {
            req = req.bearer_auth(t);
        }
        send(req).await
    }

    pub async fn post(&self, path: &str, body: &Value, token: Option<&str>) -> (u16, Value) {
        self.post_raw(path, body.to_string(), token).await
    }

    /// `/metrics` text.
    pub async fn metrics(&self) -> String {
        self.client
            .get(format!("{}/metrics", self.base))
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap()
    }

    /// Polls `GET /v1/executions?<query>&limit=500` until it holds `n` rows; returns them.
    pub async fn wait_rows(&self, query: &str, n: usize) -> Vec<Value> {
        let mut last = Value::Null;
        for _ in 0..200 {
            let (code, body) = self
                .get(&format!("/v1/executions?limit=500&{query}"), Some(TOKEN))
                .await;
            assert_eq!(code, 200, "{body}");
            let rows = body["executions"].as_array().unwrap().clone();
            if rows.len() >= n {
                assert_eq!(rows.len(), n, "more rows than expected for {query}: {body}");
                return rows;
            }
            last = body;
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
        panic!("never {n} rows for {query}: {last}");
    }
}

async fn send(req: reqwest::RequestBuilder) -> (u16, Value) {
    let r = req.send().await.expect("the dispatcher answers");
    let code = r.status().as_u16();
    let bytes = r.bytes().await.unwrap_or_default();
    (code, serde_json::from_slice(&bytes).unwrap_or(Value::Null))
}

/// Writes `text` to `path` (helper for extra files).
pub fn write(path: &Path, text: &str) {
    std::fs::write(path, text).unwrap();
}
