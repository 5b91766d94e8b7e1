//! The API over a real loopback socket.

use super::*;
use crate::handlers::http::HttpCaller;
use agenthooks_crds::Edition;
use agenthooks_crds::sealed::SealKey;
use agenthooks_crds::snapshot::SnapshotHook;
use serde_json::{Value, json};

/// A state with a Lite engine, no SSRF allowlist, and no hooks yet.
fn new_state() -> Arc<AppState> {
    AppState::new(Engine::new(
        HttpCaller::new(vec![]),
        Edition::Lite,
        SealKey::generate(),
    ))
}

async fn serve_state(state: Arc<AppState>) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let stop = tokio_util::sync::CancellationToken::new();
    tokio::spawn(async move { serve(listener, router(state), stop).await.unwrap() });
    format!("http://{addr}")
}

fn hooks(cmd: &str) -> HookSet {
    hooks_for("pre_tool_use", cmd)
}

/// One tenant-acme command hook on `event`, matching tool `exec`.
fn hooks_for(event: &str, cmd: &str) -> HookSet {
    let spec = serde_norway::from_str(&format!(
        "event: {event}\nmatcher: '^exec$'\nhandler: {{type: command, command: {{command: {}}}}}",
        serde_json::to_string(cmd).unwrap()
    ))
    .unwrap();
    let src = SnapshotHook {
        uid: "u".into(),
        namespace: "tenant-acme".into(),
        name: "no-rm".into(),
        generation: 1,
        created_at: String::new(),
        namespace_tenant: "acme".into(),
        spec,
        sealed_headers: vec![],
        open_breakers: Vec::new(),
        reset_token: None,
    };
    HookSet::build(vec![src], "agenthooks-system", Edition::Lite, 7, None).0
}

async fn post(base: &str, body: impl Into<reqwest::Body>) -> (u16, Value) {
    let r = reqwest::Client::new()
        .post(format!("{base}/v1/dispatch"))
        .body(body)
        .send()
        .await
        .unwrap();
    let status = r.status().as_u16();
    (
        status,
        serde_json::from_slice(&r.bytes().await.unwrap()).unwrap_or(Value::Null),
    )
}

#[tokio::test]
async fn not_ready_until_hooks_are_loaded_then_decides() {
    let state = new_state();
    let base = serve_state(Arc::clone(&state)).await;
    let c = reqwest::Client::new();
    assert_eq!(
        c.get(format!("{base}/readyz"))
            .send()
            .await
            .unwrap()
            .status(),
        503
    );
    assert_eq!(
        c.get(format!("{base}/healthz"))
            .send()
            .await
            .unwrap()
            .status(),
        200
    );
    let ev = json!({"event": "pre_tool_use", "tenant_id": "acme", "tool_name": "exec", "tool_input": {"cmd": "rm -rf /"}});
    assert_eq!(
        post(&base, ev.to_string()).await.0,
        503,
        "never a decision from an empty state"
    );

    state.set_hooks(hooks(
        r#"grep -q 'rm -rf' && { echo 'no rm' >&2; exit 2; }; exit 0"#,
    ));
    let ready: Value = serde_json::from_slice(
        &c.get(format!("{base}/readyz"))
            .send()
            .await
            .unwrap()
            .bytes()
            .await
            .unwrap(),
    )
    .unwrap();
    assert_eq!(ready, json!({"ready": true, "version": 7, "hooks": 1}));

    let (status, d) = post(&base, ev.to_string()).await;
    assert_eq!(status, 200);
    assert_eq!(d["decision"], "block");
    assert_eq!(d["reason"], "no rm");
    assert_eq!(d["decidingHook"], "tenant-acme/no-rm");
    assert_eq!(d["hooks"][0]["decision"], "block");
    assert!(
        d["event_id"].as_str().unwrap().len() == 36,
        "generated event id returned"
    );

    let ok = json!({"event": "pre_tool_use", "tenant_id": "acme", "event_id": "e1", "tool_name": "exec", "tool_input": {"cmd": "ls"}});
    let (status, d) = post(&base, ok.to_string()).await;
    assert_eq!(
        (status, d["decision"].as_str(), d["event_id"].as_str()),
        (200, Some("allow"), Some("e1"))
    );

    let metrics = c
        .get(format!("{base}/metrics"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(metrics.contains(r#"agenthooks_executions_total{decision="block",event="pre_tool_use",handler="command"} 1"#), "{metrics}");
}

#[tokio::test]
async fn bad_requests_are_400_and_413_naming_the_field() {
    let state = new_state();
    state.set_hooks(hooks("exit 0"));
    let base = serve_state(state).await;
    let (s, b) = post(&base, r#"{"event": "pre_tool_call"}"#).await;
    assert_eq!((s, b["field"].as_str()), (400, Some("event")));
    let (s, b) = post(&base, "{nope").await;
    assert_eq!(s, 400, "{b}");
    let (s, b) = post(&base, json!({"event": "stop", "depth": "x"}).to_string()).await;
    assert_eq!((s, b["field"].as_str()), (400, Some("depth")));
    let items: Vec<u32> = (0..2000).collect();
    let (s, b) = post(
        &base,
        json!({"event": "pre_tool_use", "tool_input": {"items": items}}).to_string(),
    )
    .await;
    assert_eq!((s, b["field"].as_str()), (413, Some("tool_input.items")));
    let (s, b) = post(&base, vec![b' '; MAX_BODY_BYTES + 10]).await;
    assert_eq!((s, b["field"].as_str()), (413, Some("body")));
}

#[tokio::test]
async fn refused_event_shapes_answer_with_status_field_and_message() {
    let state = new_state();
    state.set_hooks(hooks("exit 0"));
    let base = serve_state(state).await;
    let deep = format!(
        r#"{{"event":"pre_tool_use","tool_name":"exec","tool_input":{{"d":{}1{}}}}}"#,
        "[".repeat(300),
        "]".repeat(300)
    );
    for (body, status, field, error) in [
        (
            r#"["pre_tool_use","exec"]"#.to_owned(),
            400,
            "body",
            "body: must be a JSON object",
        ),
        (
            r#"{"event":"pre_tool_use","tool_name":"exec","tool_input":{"cmd":"rm -rf /x","cmd":"ls"}}"#
                .to_owned(),
            400,
            "tool_input.cmd",
            "tool_input.cmd: duplicate key",
        ),
        ("{nope".to_owned(), 400, "body", "body: key must be a string"),
        (
            deep,
            413,
            "tool_input",
            "tool_input: nests deeper than 32 levels",
        ),
        (
            r#"{"event":"pre_tool_use","tool_name":"exec\u0000"}"#.to_owned(),
            400,
            "tool_name",
            "tool_name: contains a control character (U+0000)",
        ),
        (
            r#"{"event":"pre_tool_use","session_id":"s\nforged log line"}"#.to_owned(),
            400,
            "session_id",
            "session_id: contains a control character (U+000A)",
        ),
    ] {
        let (s, b) = post(&base, body.clone()).await;
        assert_eq!(
            (s, b["field"].as_str(), b["error"].as_str()),
            (status, Some(field), Some(error)),
            "{body}"
        );
    }
}

#[tokio::test]
async fn non_blocking_events_answer_allow_even_when_their_hook_blocks() {
    let marker = std::env::temp_dir().join(format!("agenthooks-observed-{}", std::process::id()));
    let _ = std::fs::remove_file(&marker);
    let state = new_state();
    // The hook runs (it leaves a marker) and blocks; the answer is still allow, at once.
    state.set_hooks(hooks_for(
        "post_tool_use",
        &format!("touch {}; exit 2", marker.display()),
    ));
    let base = serve_state(state).await;
    let started = std::time::Instant::now();
    let (s, d) = post(
        &base,
        json!({"event": "post_tool_use", "tenant_id": "acme", "tool_name": "exec"}).to_string(),
    )
    .await;
    assert_eq!((s, d["decision"].as_str()), (200, Some("allow")));
    assert!(started.elapsed() < std::time::Duration::from_secs(2));
    let mut ran = false;
    for _ in 0..50 {
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        if marker.exists() {
            ran = true;
            break;
        }
    }
    assert!(ran, "the background hook should have run");
    let _ = std::fs::remove_file(&marker);
}

#[tokio::test]
async fn a_client_that_never_finishes_its_headers_is_disconnected() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let state = new_state();
    let base = serve_state(state).await;
    let addr = base.trim_start_matches("http://").to_string();
    let mut sock = tokio::net::TcpStream::connect(&addr).await.unwrap();
    sock.write_all(b"POST /v1/dispatch HTTP/1.1\r\nHost: x\r\n")
        .await
        .unwrap();
    let started = std::time::Instant::now();
    let mut buf = Vec::new();
    // The server closes the connection (after a 408 or nothing) once the deadline passes.
    let read = tokio::time::timeout(HEADER_READ_TIMEOUT * 3, sock.read_to_end(&mut buf)).await;
    assert!(
        read.is_ok(),
        "connection still open after {:?}",
        started.elapsed()
    );
    assert!(started.elapsed() >= HEADER_READ_TIMEOUT - std::time::Duration::from_millis(500));
}

#[tokio::test]
async fn a_body_shorter_than_its_content_length_gets_408() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let state = new_state();
    state.set_hooks(hooks("exit 0"));
    let base = serve_state(state).await;
    let addr = base.trim_start_matches("http://").to_string();
    let mut sock = tokio::net::TcpStream::connect(&addr).await.unwrap();
    sock.write_all(
        b"POST /v1/dispatch HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{\"event\"",
    )
    .await
    .unwrap();
    let mut buf = vec![0u8; 512];
    let n = tokio::time::timeout(BODY_READ_TIMEOUT * 2, sock.read(&mut buf))
        .await
        .unwrap()
        .unwrap();
    assert!(
        String::from_utf8_lossy(&buf[..n]).starts_with("HTTP/1.1 408"),
        "{}",
        String::from_utf8_lossy(&buf[..n])
    );
}
