//! The dispatcher against its own OpenAPI document: schemathesis (PyPI, pinned in
//! `scripts/install-deps.sh`, installed by `bash scripts/install-deps.sh schemathesis`)
//! reads `GET /openapi.json` from a standalone dispatcher — hooks loaded, a callers file,
//! an admin token, an audit database — and sends every route generated valid and invalid
//! requests with the caller's and the admin's token. It fails on any 5xx, a status,
//! content type, header or body the document does not describe, an invalid request
//! accepted, and (`openapi_fuzz/checks.py`) a 4xx whose JSON body names no `field`.
//!
//! The dispatcher runs the Standard edition: generated inline manifests of `POST /v1/test`
//! never run a command on this machine. Its hooks answer at once (an `http` hook the SSRF
//! guard refuses, a `prompt` hook without providers), so no request waits on a timeout.
//!
//! Without schemathesis the test fails, saying how to install it, unless
//! `AGENTHOOKS_SKIP_SCHEMATHESIS=1` (a machine without Python; docs/api.md).
//! `AGENTHOOKS_SCHEMATHESIS=PATH` runs another binary; `AGENTHOOKS_FUZZ_EXAMPLES` (default
//! 100 per operation) and `AGENTHOOKS_FUZZ_SEED` (default 1) change the run.

mod api_harness;

use std::path::{Path, PathBuf};
use std::time::Instant;

use api_harness::{Files, TOKEN, start};

const HOOKS: &str = r#"
apiVersion: v1
kind: Namespace
metadata:
  name: tenant-acme
  labels: {agenthooks.io/tenant: acme}
---
apiVersion: agenthooks.io/v1alpha1
kind: AgentHook
metadata: {name: policy-service, namespace: tenant-acme}
spec:
  event: pre_tool_use
  toolKinds: [shell]
  timeoutMs: 1000
  handler:
    type: http
    http: {url: "http://127.0.0.1:9/decide"}
---
apiVersion: agenthooks.io/v1alpha1
kind: AgentHook
metadata: {name: judge-prompts, namespace: tenant-acme}
spec:
  event: user_prompt_submit
  ifExpr: 'has(tool_input.prompt)'
  timeoutMs: 1000
  handler:
    type: prompt
    prompt: {promptTemplate: "Is this prompt safe?"}
---
apiVersion: agenthooks.io/v1alpha1
kind: AgentHook
metadata: {name: audit-stops, namespace: tenant-acme}
spec:
  event: stop
  handler:
    type: http
    http: {url: "http://127.0.0.1:9/stop"}
"#;

const CALLER_TOKEN: &str = "fuzz-caller-token-0123456789";

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The version `scripts/install-deps.sh schemathesis` installs (`SCHEMATHESIS_VERSION=`).
fn pinned_version() -> String {
    let script = std::fs::read_to_string(workspace().join("scripts/install-deps.sh")).unwrap();
    script
        .lines()
        .find_map(|l| l.strip_prefix("SCHEMATHESIS_VERSION="))
        .expect("scripts/install-deps.sh pins SCHEMATHESIS_VERSION")
        .trim()
        .to_owned()
}

/// The schemathesis binary, `None` when it is not installed.
fn schemathesis() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("AGENTHOOKS_SCHEMATHESIS") {
        return Some(PathBuf::from(p));
    }
    let tools = match std::env::var_os("AGENTHOOKS_TOOLS_DIR") {
        Some(d) => PathBuf::from(d),
        None => PathBuf::from(std::env::var_os("HOME")?).join(".cache/agenthooks/tools"),
    };
    let exe = tools
        .join(format!("schemathesis-{}", pinned_version()))
        .join("bin/schemathesis");
    exe.is_file().then_some(exe)
}

fn env_or(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn schemathesis_finds_nothing_the_openapi_document_does_not_allow() {
    let Some(exe) = schemathesis() else {
        if std::env::var("AGENTHOOKS_SKIP_SCHEMATHESIS").as_deref() == Ok("1") {
            eprintln!("AGENTHOOKS_SKIP_SCHEMATHESIS=1: the OpenAPI fuzz test did not run");
            return;
        }
        panic!(
            "schemathesis {} is not installed: run `bash scripts/install-deps.sh schemathesis` (or set AGENTHOOKS_SKIP_SCHEMATHESIS=1 on a machine without Python; docs/api.md)",
            pinned_version()
        );
    };
    let files = Files::new(HOOKS);
    let callers = files.path("callers.yaml");
    std::fs::write(
        &callers,
        format!(
            "callers:\n  - name: fuzzer\n    tokenSha256: {}\n    tenants: [acme]\n",
            agenthooks_dispatcher::identity::callers_file::token_sha256(CALLER_TOKEN)
        ),
    )
    .unwrap();
    let k1 = format!("k1={}", files.path("k1.key").display());
    let db = files.audit_db();
    let d = start(
        &files,
        &[
            "--edition",
            "standard",
            "--callers-file",
            callers.to_str().unwrap(),
            "--admin-token-file",
            files.path("admin.token").to_str().unwrap(),
            "--audit-db",
            &db,
            "--audit-key-file",
            &k1,
        ],
    )
    .await;
    // A few rows, so the history routes have something to page through.
    for cmd in ["ls", "rm -rf /"] {
        let event = serde_json::json!({"event": "pre_tool_use", "tool_name": "Bash", "tool_input": {"command": cmd}});
        let (code, body) = d.post("/v1/dispatch", &event, Some(CALLER_TOKEN)).await;
        assert_eq!(code, 200, "{body}");
    }

    let here = workspace().join("dispatcher/tests/openapi_fuzz");
    let examples = env_or("AGENTHOOKS_FUZZ_EXAMPLES", 100).to_string();
    let seed = env_or("AGENTHOOKS_FUZZ_SEED", 1).to_string();
    let started = Instant::now();
    let out = tokio::process::Command::new(&exe)
        .arg("--config-file")
        .arg(here.join("schemathesis.toml"))
        .arg("--no-color")
        .args(["run", &format!("{}/openapi.json", d.base)])
        .args([
            "--checks",
            "not_a_server_error,status_code_conformance,content_type_conformance,response_headers_conformance,response_schema_conformance,negative_data_rejection,client_error_names_its_field",
        ])
        .args(["--phases", "examples,coverage,fuzzing"])
        .args(["--max-examples", &examples, "--seed", &seed])
        .env("SCHEMATHESIS_HOOKS", here.join("checks.py"))
        .env("AGENTHOOKS_FUZZ_CALLER_TOKEN", CALLER_TOKEN)
        .env("AGENTHOOKS_FUZZ_ADMIN_TOKEN", TOKEN)
        .current_dir(files.dir.path())
        .kill_on_drop(true)
        .output()
        .await
        .unwrap();
    let took = started.elapsed();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    eprintln!("schemathesis ran {:.1} s:\n{stdout}", took.as_secs_f64());
    assert!(
        out.status.success(),
        "schemathesis failed ({}) in {:.1} s:\n{stdout}\n{stderr}",
        out.status,
        took.as_secs_f64()
    );
    // It did test every operation (a typo in the config would test none and pass): all
    // but `GET /openapi.json`, the document it reads, which schemathesis leaves out.
    assert!(stdout.contains("9 selected / 9 total"), "{stdout}");
}
