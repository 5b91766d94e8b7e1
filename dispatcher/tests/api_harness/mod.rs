//! The `agenthooks-dispatcher` binary as a process, for the history and dry-run API tests:
//! a hooks file, an admin token, an audit key and a SQLite audit database in a temp dir.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use serde_json::Value;

/// The admin token the tests configure.
pub const TOKEN: &str = "test-admin-token-0123456789abcdef";

/// A running dispatcher; SIGTERM (then SIGKILL) when dropped.
pub struct Dispatcher {
    child: Child,
    pub base: String,
    pub client: reqwest::Client,
}

impl Drop for Dispatcher {
    fn drop(&mut self) {
        // SIGTERM first, so the audit writer flushes; SIGKILL if it lingers.
        unsafe {
            libc::kill(self.child.id() as i32, libc::SIGTERM);
        }
        for _ in 0..100 {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
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

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Starts the binary with `--hooks <dir>/hooks.yaml`, `--listen` on a free port and
/// `args`, and waits until it is ready.
pub async fn start(files: &Files, args: &[&str]) -> Dispatcher {
    let port = free_port();
    let hooks = files.path("hooks.yaml");
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_agenthooks-dispatcher"));
    cmd.args(["--hooks", hooks.to_str().unwrap()])
        .args(["--listen", &format!("127.0.0.1:{port}")])
        .args(["--audit-spool-dir", files.path("spool").to_str().unwrap()])
        .args(args)
        .env_remove("AGENTHOOKS_ADMIN_TOKEN_FILE")
        .env_remove("AGENTHOOKS_AUDIT_DB")
        .env_remove("AGENTHOOKS_AUDIT_KEY_FILES")
        .current_dir(files.dir.path())
        .stdout(Stdio::null())
        .stderr(if std::env::var_os("TEST_DISPATCHER_LOGS").is_some() {
            Stdio::inherit()
        } else {
            Stdio::null()
        });
    // The client first: nothing may panic between the spawn and the guard that kills it.
    let client = client();
    let d = Dispatcher {
        child: cmd.spawn().unwrap(),
        base: format!("http://127.0.0.1:{port}"),
        client,
    };
    for _ in 0..400 {
        let ready = d.client.get(format!("{}/readyz", d.base)).send().await;
        if ready.is_ok_and(|r| r.status() == 200) {
            return d;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    panic!("the dispatcher never became ready ({args:?})");
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
