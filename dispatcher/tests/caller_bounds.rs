//! The real dispatcher binary against callers that try to grow its memory or slip out of
//! its accounting (CONTRACT §10.2–10.3; cases "Guards that cannot be talked past"):
//! a client that closes its connection while a prompt hook's provider call is in flight,
//! and `turn_id`s of a megabyte with fresh inputs.

mod api_harness;
mod provider_standin;

use std::time::Duration;

use agenthooks_dispatcher::handlers::prompt::request::{MAX_OUTPUT_TOKENS, estimate_input_tokens};
use api_harness::{Files, Proc, TOKEN, client, command, serve};
use provider_standin::{ProviderStandIn, Reply};
use serde_json::{Value, json};

const MONTHLY: i64 = 1_000_000;

/// A tenant-acme prompt judge on `exec` (1.5 s timeout) and the tenant's budget.
fn hooks() -> String {
    format!(
        "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: tenant-acme\n  labels: {{agenthooks.io/tenant: acme}}\n---\n\
         apiVersion: agenthooks.io/v1alpha1\nkind: AgentHook\nmetadata: {{name: judge, namespace: tenant-acme}}\n\
         spec:\n  event: pre_tool_use\n  matcher: '^exec$'\n  timeoutMs: 1500\n  handler:\n    type: prompt\n    prompt: {{promptTemplate: 'Block what deletes files.'}}\n---\n\
         apiVersion: agenthooks.io/v1alpha1\nkind: TenantHookBudget\nmetadata: {{name: tokens, namespace: tenant-acme}}\nspec: {{monthlyTokens: {MONTHLY}}}\n"
    )
}

/// The dispatcher with the stand-in as its one provider, a SQLite audit trail and the
/// admin token; its process (for RSS) and base URL.
async fn start(files: &Files, standin: &ProviderStandIn) -> (Proc, String) {
    std::fs::write(files.path("an.key"), "sk-ant-test\n").unwrap();
    std::fs::write(
        files.path("providers.yaml"),
        format!(
            "providers:\n  - {{name: an, kind: anthropic, baseUrl: '{}', apiKeyFile: {}}}\nmodels:\n  haiku: {{provider: an, model: claude-3-5-haiku-latest}}\ndefaultModel: haiku\n",
            standin.anthropic_base(),
            files.path("an.key").display()
        ),
    )
    .unwrap();
    let mut cmd = command(files.dir.path());
    cmd.args(["--hooks", files.path("hooks.yaml").to_str().unwrap()])
        .args([
            "--providers-file",
            files.path("providers.yaml").to_str().unwrap(),
        ])
        .args(["--audit-db", &files.audit_db()])
        .args(["--audit-spool-dir", files.path("spool").to_str().unwrap()])
        .args([
            "--admin-token-file",
            files.path("admin.token").to_str().unwrap(),
        ]);
    serve(cmd).await
}

/// `agenthooks_budget_remaining_tokens{tenant="acme"}` of `/metrics`.
async fn remaining(base: &str) -> Option<i64> {
    let text = client()
        .get(format!("{base}/metrics"))
        .send()
        .await
        .ok()?
        .text()
        .await
        .ok()?;
    text.lines()
        .find(|l| l.starts_with("agenthooks_budget_remaining_tokens{tenant=\"acme\"}"))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse::<f64>().ok())
        .map(|v| v as i64)
}

/// Polls the budget until it shows `want` (5 s at most); the last value seen.
async fn wait_remaining(base: &str, want: i64) -> Option<i64> {
    let mut last = None;
    for _ in 0..200 {
        last = remaining(base).await;
        if last == Some(want) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    last
}

/// The audit rows of the judge, once there are `n` (5 s at most).
async fn judge_rows(base: &str, n: usize) -> Vec<Value> {
    let c = client();
    let mut last = Value::Null;
    for _ in 0..200 {
        let r = c
            .get(format!(
                "{base}/v1/executions?hook=tenant-acme/judge&limit=100"
            ))
            .bearer_auth(TOKEN)
            .send()
            .await
            .unwrap();
        last = serde_json::from_slice(&r.bytes().await.unwrap()).unwrap();
        let rows = last["executions"].as_array().cloned().unwrap_or_default();
        if rows.len() >= n {
            assert_eq!(rows.len(), n, "{last}");
            return rows;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    panic!("never {n} rows of the judge: {last}");
}

fn dispatch_body(event_id: &str, cmd: &str) -> String {
    json!({"event": "pre_tool_use", "event_id": event_id, "tenant_id": "acme", "session_id": event_id,
           "agent_id": "coder", "tool_name": "exec", "tool_input": {"cmd": cmd}})
    .to_string()
}

/// Sends a dispatch and gives up (drops the connection) after `after`.
async fn dispatch_and_hang_up(base: &str, body: String, after: Duration) {
    let c = reqwest::Client::builder().timeout(after).build().unwrap();
    let sent = c
        .post(format!("{base}/v1/dispatch"))
        .body(body)
        .send()
        .await;
    assert!(
        sent.is_err(),
        "the client hung up before the answer: {sent:?}"
    );
}

/// The case "a client closes its connection while a prompt hook's provider call is in
/// flight": the tenant's budget is charged the whole reservation and the run has its
/// audit row. The stand-in holds its answer past the hook's timeout, so the provider
/// never reports usage.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_hangs_up_mid_prompt_call_pays_the_whole_reservation_and_leaves_a_row() {
    let standin = ProviderStandIn::start().await;
    let files = Files::new(&hooks());
    let (_proc, base) = start(&files, &standin).await;
    assert_eq!(remaining(&base).await, Some(MONTHLY));

    standin.script([Reply::Slow(
        Duration::from_secs(5),
        Box::new(Reply::decide("allow", "too late")),
    )]);
    dispatch_and_hang_up(
        &base,
        dispatch_body("hangup-1", "rm -rf /"),
        Duration::from_millis(400),
    )
    .await;
    assert_eq!(standin.count(), 1, "the provider call was sent");
    let sent = &standin.requests()[0];
    let reservation = estimate_input_tokens(sent.raw.len()) + MAX_OUTPUT_TOKENS;
    assert_eq!(
        wait_remaining(&base, MONTHLY - reservation).await,
        Some(MONTHLY - reservation),
        "the whole reservation ({reservation} tokens) is charged"
    );
    let rows = judge_rows(&base, 1).await;
    assert_eq!(rows[0]["sessionId"], "hangup-1");
    assert_eq!(rows[0]["decision"], "error", "{}", rows[0]);
    assert!(
        rows[0]["error"]
            .as_str()
            .is_some_and(|e| e.contains("provider_timeout")),
        "{}",
        rows[0]
    );
}

/// A client that hangs up while the provider is still answering within the hook's
/// timeout: the run goes on, is charged what the provider reports, and leaves its row.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_whose_client_hung_up_finishes_and_is_charged_the_reported_usage() {
    let standin = ProviderStandIn::start().await;
    standin.set_usage(300, 40);
    let files = Files::new(&hooks());
    let (_proc, base) = start(&files, &standin).await;
    standin.script([Reply::Slow(
        Duration::from_millis(800),
        Box::new(Reply::decide("block", "deletes files")),
    )]);
    dispatch_and_hang_up(
        &base,
        dispatch_body("hangup-2", "rm -rf /"),
        Duration::from_millis(200),
    )
    .await;
    let rows = judge_rows(&base, 1).await;
    assert_eq!(rows[0]["sessionId"], "hangup-2");
    assert_eq!(rows[0]["decision"], "block", "{}", rows[0]);
    assert_eq!(rows[0]["metadata"]["prompt_tokens"], 340, "{}", rows[0]);
    assert_eq!(
        wait_remaining(&base, MONTHLY - 340).await,
        Some(MONTHLY - 340)
    );
}

/// Sends only the head of a `POST /v1/dispatch` announcing `len` body bytes; the answer
/// (head and body) as text.
async fn answer_to_head(base: &str, len: usize) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let addr = base.trim_start_matches("http://");
    let mut sock = tokio::net::TcpStream::connect(addr).await.unwrap();
    let head = format!(
        "POST /v1/dispatch HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {len}\r\n\r\n"
    );
    sock.write_all(head.as_bytes()).await.unwrap();
    let mut out = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(3), sock.read_to_end(&mut out)).await;
    String::from_utf8_lossy(&out).into_owned()
}

/// Resident memory of a process, in KiB.
fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap()
}

/// The case "`turn_id` of 1 MiB, 10,000 times with fresh inputs → 400, memory flat"
/// (scaled down): ids over 256 bytes are a 400 naming `turn_id`, a body over the cap a
/// 413, and neither calls the provider, spends budget or keeps anything.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn megabyte_turn_ids_are_refused_and_keep_nothing() {
    let standin = ProviderStandIn::start().await;
    let files = Files::new(&hooks());
    let (proc, base) = start(&files, &standin).await;
    let c = client();
    let post = |body: String| {
        let c = c.clone();
        let url = format!("{base}/v1/dispatch");
        async move {
            let r = c.post(url).body(body).send().await.unwrap();
            let status = r.status().as_u16();
            (
                status,
                serde_json::from_slice(&r.bytes().await.unwrap()).unwrap_or(Value::Null),
            )
        }
    };
    let with_turn = |i: usize, turn_len: usize| {
        let mut v: Value =
            serde_json::from_str(&dispatch_body(&format!("e{i}"), &format!("ls {i}"))).unwrap();
        v["turn_id"] = json!("t".repeat(turn_len));
        v.to_string()
    };
    // Just over the id limit: 400 naming the field.
    let (status, body) = post(with_turn(0, 300)).await;
    assert_eq!(
        (status, body["field"].as_str()),
        (400, Some("turn_id")),
        "{body}"
    );
    assert_eq!(
        body["error"],
        "turn_id: is 300 bytes, longer than the 256-byte limit on ids (CONTRACT §10.2)"
    );
    // 1 MiB of turn_id is over the body cap: 413 on its Content-Length, before a byte of
    // it is read (so only the head is sent: a client writing on into the connection the
    // server closed may see a reset instead of the answer).
    let oversized = with_turn(0, 1 << 20);
    let head = answer_to_head(&base, oversized.len()).await;
    assert!(head.starts_with("HTTP/1.1 413"), "{head}");
    assert!(head.contains(r#""field":"body""#), "{head}");

    // A megabyte (10^6 bytes, under the body cap) with fresh inputs: parsed, refused,
    // nothing kept. Measured before the fix: ~2 MB of RSS per request, never released.
    let pid = proc.0.id();
    for i in 0..20 {
        assert_eq!(post(with_turn(i, 1_000_000)).await.0, 400);
    }
    let before = rss_kib(pid);
    for i in 20..220 {
        let (status, body) = post(with_turn(i, 1_000_000)).await;
        assert_eq!((status, body["field"].as_str()), (400, Some("turn_id")));
    }
    let grown = rss_kib(pid).saturating_sub(before);
    assert!(
        grown < 32 * 1024,
        "RSS grew by {grown} KiB over 200 refused requests"
    );
    assert_eq!(standin.count(), 0, "no provider call for a refused request");
    assert_eq!(remaining(&base).await, Some(MONTHLY), "no budget spent");
    // A valid turn still works after all that.
    let (status, body) = post(with_turn(999, 256)).await;
    assert_eq!(
        (status, body["decision"].as_str()),
        (200, Some("allow")),
        "{body}"
    );
    assert_eq!(standin.count(), 1);
    drop(proc);
}
