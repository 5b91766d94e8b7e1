//! The API over a real loopback socket.

use super::tests_support::{callers, serve_state};
use super::*;
use crate::handlers::http::HttpCaller;
use agenthooks_crds::Edition;
use agenthooks_crds::sealed::SealKey;
use agenthooks_crds::snapshot::SnapshotHook;
use serde_json::{Value, json};

/// A state with a Lite engine, no SSRF allowlist, and no hooks yet.
fn new_state() -> Arc<AppState> {
    let state = AppState::new(Engine::new(
        HttpCaller::new(vec![]),
        Edition::Lite,
        SealKey::generate(),
    ));
    state.set_authenticator(crate::identity::Authenticator::Anonymous);
    state
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

/// Shutting down: unready at once (so the Service drops the Pod), deciding until the port
/// closes (so no request sent meanwhile is lost).
#[tokio::test]
async fn a_draining_server_is_unready_and_still_decides() {
    let state = new_state();
    state.set_hooks(hooks(
        r#"grep -q 'rm -rf' && { echo 'no rm' >&2; exit 2; }; exit 0"#,
    ));
    let base = serve_state(Arc::clone(&state)).await;
    let c = reqwest::Client::new();
    let readyz = || async {
        let r = c.get(format!("{base}/readyz")).send().await.unwrap();
        let status = r.status().as_u16();
        (
            status,
            serde_json::from_slice::<Value>(&r.bytes().await.unwrap()).unwrap(),
        )
    };
    assert_eq!(readyz().await.0, 200);
    assert!(!state.is_draining());

    state.start_draining();
    assert!(state.is_draining());
    assert_eq!(
        readyz().await,
        (503, json!({"ready": false, "draining": true}))
    );
    let ev = json!({"event": "pre_tool_use", "tenant_id": "acme", "tool_name": "exec", "tool_input": {"cmd": "rm -rf /"}});
    let (status, d) = post(&base, ev.to_string()).await;
    assert_eq!((status, d["decision"].as_str()), (200, Some("block")));
    assert_eq!(
        c.get(format!("{base}/healthz"))
            .send()
            .await
            .unwrap()
            .status(),
        200,
        "alive: not restarted while it drains"
    );
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
    assert_eq!(
        (&ready["ready"], &ready["version"], &ready["hooks"]),
        (&json!(true), &json!(7), &json!(1))
    );
    assert_eq!(ready["callers"], "anonymous");

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

/// Posts `body` to `/v1/dispatch` on its own connection: (status, JSON body, time taken).
async fn post_alone(base: &str, body: String) -> (u16, Value, std::time::Duration) {
    let started = std::time::Instant::now();
    let c = reqwest::Client::builder()
        .pool_max_idle_per_host(0)
        .build()
        .unwrap();
    let r = c
        .post(format!("{base}/v1/dispatch"))
        .body(body)
        .send()
        .await
        .unwrap();
    let status = r.status().as_u16();
    let body = serde_json::from_slice(&r.bytes().await.unwrap()).unwrap_or(Value::Null);
    (status, body, started.elapsed())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn past_the_concurrency_limit_requests_get_503_at_once_and_are_counted() {
    let engine = Engine::new(HttpCaller::new(vec![]), Edition::Lite, SealKey::generate());
    let state = AppState::with_request_limit(engine, 2);
    state.set_authenticator(crate::identity::Authenticator::Anonymous);
    assert_eq!(state.max_requests(), 2);
    // Every matching call holds its request for a second.
    state.set_hooks(hooks("sleep 1; exit 0"));
    let base = serve_state(Arc::clone(&state)).await;
    let ev = json!({"event": "pre_tool_use", "tenant_id": "acme", "tool_name": "exec"}).to_string();
    let mut calls = Vec::new();
    for _ in 0..6 {
        let (base, ev) = (base.clone(), ev.clone());
        calls.push(tokio::spawn(async move { post_alone(&base, ev).await }));
        // In order, so the first two hold the slots when the others arrive.
        tokio::time::sleep(std::time::Duration::from_millis(30)).await;
    }
    // The last one had time to be answered; the first two still run.
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    // The probes are never shed while the port is full.
    let c = reqwest::Client::new();
    assert_eq!(
        c.get(format!("{base}/healthz"))
            .send()
            .await
            .unwrap()
            .status(),
        200
    );
    let metrics = c
        .get(format!("{base}/metrics"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        metrics.contains("agenthooks_requests_shed_total 4"),
        "{metrics}"
    );
    let mut answers = Vec::new();
    for call in calls {
        answers.push(call.await.unwrap());
    }
    let served: Vec<_> = answers.iter().filter(|a| a.0 == 200).collect();
    let shed: Vec<_> = answers.iter().filter(|a| a.0 == 503).collect();
    assert_eq!((served.len(), shed.len()), (2, 4), "{answers:?}");
    for (_, body, took) in &shed {
        assert_eq!(
            body,
            &json!({"error": "over 2 concurrent requests on this port; treat as block", "field": ""})
        );
        assert!(
            *took < std::time::Duration::from_millis(500),
            "a shed request is answered at once, not queued: {took:?}"
        );
    }
    for (_, body, took) in &served {
        assert_eq!(body["decision"], "allow");
        assert!(*took >= std::time::Duration::from_millis(900), "{took:?}");
    }
    assert_eq!(state.engine.metrics.requests_shed.get(), 4);
    // The slots came back: the port serves again.
    let (status, body, _) = post_alone(&base, ev).await;
    assert_eq!((status, body["decision"].as_str()), (200, Some("allow")));
    assert!(state.wait_idle(std::time::Duration::from_secs(1)).await);
}

/// Reads one HTTP response head from `sock` (up to the blank line), within `within`.
async fn response_head(sock: &mut tokio::net::TcpStream, within: std::time::Duration) -> String {
    use tokio::io::AsyncReadExt;
    let mut buf = Vec::new();
    let mut chunk = [0u8; 1024];
    let read = async {
        loop {
            let n = sock.read(&mut chunk).await.unwrap_or(0);
            if n == 0 {
                break;
            }
            buf.extend_from_slice(&chunk[..n]);
            if buf.windows(4).any(|w| w == b"\r\n\r\n") {
                break;
            }
        }
    };
    tokio::time::timeout(within, read)
        .await
        .expect("a response in time");
    String::from_utf8_lossy(&buf).into_owned()
}

#[tokio::test]
async fn a_content_length_over_the_cap_is_refused_before_any_byte_is_read() {
    use tokio::io::AsyncWriteExt;
    let state = new_state();
    state.set_hooks(hooks("exit 0"));
    let base = serve_state(state).await;
    let addr = base.trim_start_matches("http://").to_string();
    // (`POST /v1/test` reads its body the same way, after checking the admin token.)
    for path in ["/v1/dispatch"] {
        let mut sock = tokio::net::TcpStream::connect(&addr).await.unwrap();
        // 100 MiB announced, nothing sent: reading it would wait for the body deadline.
        sock.write_all(
            format!("POST {path} HTTP/1.1\r\nHost: x\r\nContent-Length: 104857600\r\n\r\n")
                .as_bytes(),
        )
        .await
        .unwrap();
        let started = std::time::Instant::now();
        let head = response_head(&mut sock, BODY_READ_TIMEOUT / 2).await;
        assert!(head.starts_with("HTTP/1.1 413"), "{path}: {head}");
        assert!(
            started.elapsed() < std::time::Duration::from_secs(2),
            "{path}: {:?}",
            started.elapsed()
        );
    }
}

#[tokio::test]
async fn a_chunked_body_stops_being_read_at_the_cap() {
    use tokio::io::AsyncWriteExt;
    let state = new_state();
    state.set_hooks(hooks("exit 0"));
    let base = serve_state(state).await;
    let addr = base.trim_start_matches("http://").to_string();
    let sock = tokio::net::TcpStream::connect(&addr).await.unwrap();
    let (mut rd, mut wr) = sock.into_split();
    wr.write_all(b"POST /v1/dispatch HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n")
        .await
        .unwrap();
    // An endless body: 64 KiB chunks until the server stops taking them (never the
    // final chunk). The answer must come while the body is still "being sent".
    let sent = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counter = Arc::clone(&sent);
    let writer = tokio::spawn(async move {
        let chunk = vec![b' '; 64 * 1024];
        let head = format!("{:x}\r\n", chunk.len());
        for _ in 0..1024 {
            let ok = wr.write_all(head.as_bytes()).await.is_ok()
                && wr.write_all(&chunk).await.is_ok()
                && wr.write_all(b"\r\n").await.is_ok();
            if !ok {
                break;
            }
            counter.fetch_add(chunk.len(), std::sync::atomic::Ordering::Relaxed);
        }
    });
    let mut head = Vec::new();
    let mut buf = [0u8; 1024];
    tokio::time::timeout(std::time::Duration::from_secs(5), async {
        use tokio::io::AsyncReadExt;
        while !head.windows(4).any(|w| w == b"\r\n\r\n") {
            let n = rd.read(&mut buf).await.unwrap_or(0);
            if n == 0 {
                break;
            }
            head.extend_from_slice(&buf[..n]);
        }
    })
    .await
    .expect("an answer before the body ends");
    let head = String::from_utf8_lossy(&head);
    assert!(head.starts_with("HTTP/1.1 413"), "{head}");
    writer.abort();
    let sent = sent.load(std::sync::atomic::Ordering::Relaxed);
    assert!(
        sent < 64 * 1024 * 1024,
        "the server kept reading: {sent} bytes"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_blocking_chain_outlives_a_client_that_goes_away() {
    let marker = std::env::temp_dir().join(format!("agenthooks-outlived-{}", std::process::id()));
    let _ = std::fs::remove_file(&marker);
    let state = AppState::with_request_limit(
        Engine::new(HttpCaller::new(vec![]), Edition::Lite, SealKey::generate()),
        1,
    );
    state.set_authenticator(crate::identity::Authenticator::Anonymous);
    // The hook is still running when the client gives up; it finishes all the same.
    state.set_hooks(hooks(&format!(
        "sleep 0.6; touch {}; exit 2",
        marker.display()
    )));
    let base = serve_state(Arc::clone(&state)).await;
    let ev = json!({"event": "pre_tool_use", "tenant_id": "acme", "tool_name": "exec"}).to_string();
    let c = reqwest::Client::builder()
        .timeout(std::time::Duration::from_millis(150))
        .build()
        .unwrap();
    let gave_up = c
        .post(format!("{base}/v1/dispatch"))
        .body(ev.clone())
        .send()
        .await;
    assert!(gave_up.is_err(), "the client gave up before the answer");
    assert!(!marker.exists(), "the hook had not finished yet");
    // The chain keeps the port's one slot while it runs: a second request is shed.
    let (status, body, _) = post_alone(&base, ev.clone()).await;
    assert_eq!((status, body["field"].as_str()), (503, Some("")), "{body}");
    assert!(state.wait_idle(std::time::Duration::from_secs(3)).await);
    assert!(marker.exists(), "the hook run that started finished");
    let runs = state
        .engine
        .metrics
        .executions
        .with_label_values(&["block", "command", "pre_tool_use"])
        .get();
    assert_eq!(runs, 1, "the run was recorded");
    let _ = std::fs::remove_file(&marker);
}

/// CONTRACT §10.4 over the API: a Standard dispatcher given a command hook lists it as
/// unavailable, blocks its tenant's blocking events `HookUnavailable`, counts it, and its
/// dry run says why.
#[tokio::test]
async fn an_unavailable_hook_is_listed_blocks_and_its_dry_run_says_so() {
    let state = AppState::new(Engine::new(
        HttpCaller::new(vec![]),
        Edition::Standard,
        SealKey::generate(),
    ));
    state.set_authenticator(crate::identity::Authenticator::Anonymous);
    let src = SnapshotHook {
        uid: "u-cmd".into(),
        namespace: "tenant-acme".into(),
        name: "cmd".into(),
        generation: 4,
        created_at: String::new(),
        namespace_tenant: "acme".into(),
        spec: serde_norway::from_str(
            "event: pre_tool_use\nhandler: {type: command, command: {command: 'exit 0'}}",
        )
        .unwrap(),
        sealed_headers: vec![],
        open_breakers: Vec::new(),
        reset_token: None,
    };
    let (set, _) = HookSet::build(vec![src], "agenthooks-system", Edition::Standard, 2, None);
    state.set_hooks(set);
    const TOKEN: &str = "0123456789abcdef0123456789abcdef";
    state.set_admin_token(admin::AdminToken::new(TOKEN).unwrap());
    let base = serve_state(Arc::clone(&state)).await;
    let c = reqwest::Client::new();

    let listed: Value = serde_json::from_slice(
        &c.get(format!("{base}/v1/hooks"))
            .send()
            .await
            .unwrap()
            .bytes()
            .await
            .unwrap(),
    )
    .unwrap();
    assert_eq!(listed["hooks"], json!([]));
    let u = &listed["unavailable"][0];
    assert_eq!(
        (
            &u["hook"],
            &u["uid"],
            &u["generation"],
            &u["event"],
            &u["reason"]
        ),
        (
            &json!("tenant-acme/cmd"),
            &json!("u-cmd"),
            &json!(4),
            &json!("pre_tool_use"),
            &json!("HookUnavailable")
        )
    );
    assert!(u["error"].as_str().unwrap().contains("command"), "{u}");

    let event = |tenant: &str| {
        json!({"event": "pre_tool_use", "tenant_id": tenant, "agent_id": "a", "tool_name": "exec", "tool_input": {}}).to_string()
    };
    let (status, d) = post(&base, event("acme")).await;
    assert_eq!(status, 200);
    assert_eq!(
        (&d["decision"], &d["reason"], &d["decidingHook"]),
        (
            &json!("block"),
            &json!("HookUnavailable"),
            &json!("tenant-acme/cmd")
        )
    );
    let (_, d) = post(&base, event("globex")).await;
    assert_eq!(d["decision"], "allow", "another tenant is not held: {d}");

    let metrics = c
        .get(format!("{base}/metrics"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        metrics.contains("agenthooks_hooks_unavailable 1"),
        "{metrics}"
    );
    assert!(
        metrics.contains(
            r#"agenthooks_hook_unavailable_events_total{event="pre_tool_use",result="blocked"} 1"#
        ),
        "{metrics}"
    );

    let r = c
        .post(format!("{base}/v1/test"))
        .bearer_auth(TOKEN)
        .body(json!({"hook": "tenant-acme/cmd", "event": serde_json::from_str::<Value>(&event("acme")).unwrap()}).to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 422);
    let body: Value = serde_json::from_slice(&r.bytes().await.unwrap()).unwrap();
    assert_eq!(body["field"], "hook");
    assert!(
        body["error"].as_str().unwrap().contains("HookUnavailable"),
        "{body}"
    );
}

/// A callers file: `acme-runtime` for acme only, `platform` for acme and beta.
async fn post_as(base: &str, auth: Option<&str>, body: &Value) -> (u16, Value, Option<String>) {
    let mut req = reqwest::Client::new()
        .post(format!("{base}/v1/dispatch"))
        .body(body.to_string());
    if let Some(a) = auth {
        req = req.header("authorization", a);
    }
    let r = req.send().await.unwrap();
    let status = r.status().as_u16();
    let challenge = r
        .headers()
        .get("www-authenticate")
        .map(|v| v.to_str().unwrap().to_string());
    let body = serde_json::from_slice(&r.bytes().await.unwrap()).unwrap_or(Value::Null);
    (status, body, challenge)
}

/// CONTRACT §9.1–9.2 through the API: 401 without a credential that verifies, 403
/// naming `tenant_id` for a tenant the caller may not act for — and then nothing runs —,
/// 400 when the tenant must be named, the caller's only tenant when it is not.
#[tokio::test]
async fn callers_prove_who_they_are_and_act_only_for_their_tenants() {
    let dir = tempfile::tempdir().unwrap();
    let ran = dir.path().join("ran");
    let state = AppState::new(Engine::new(
        HttpCaller::new(vec![]),
        Edition::Lite,
        SealKey::generate(),
    ));
    state.set_authenticator(crate::identity::Authenticator::Callers(callers()));
    // The acme hook leaves a mark each time it runs, and blocks.
    state.set_hooks(hooks(&format!(
        "echo x >> {}; echo 'acme says no' >&2; exit 2",
        ran.display()
    )));
    let base = serve_state(Arc::clone(&state)).await;
    let runs = || {
        std::fs::read_to_string(&ran)
            .map(|s| s.lines().count())
            .unwrap_or(0)
    };
    let ev = |tenant: Option<&str>| {
        let mut e = json!({"event": "pre_tool_use", "tool_name": "exec", "tool_input": {}});
        if let Some(t) = tenant {
            e["tenant_id"] = json!(t);
        }
        e
    };

    // No credential, a wrong one, another scheme: 401 with a challenge; nothing runs.
    for auth in [
        None,
        Some("Bearer nope"),
        Some("Basic YWNtZS10b2tlbg=="),
        Some("Bearer "),
    ] {
        let (status, body, challenge) = post_as(&base, auth, &ev(Some("acme"))).await;
        assert_eq!(status, 401, "{auth:?}: {body}");
        assert_eq!(body["field"], "authorization", "{body}");
        assert_eq!(challenge.as_deref(), Some("Bearer realm=\"agenthooks\""));
    }
    assert_eq!(runs(), 0);

    // Another tenant: 403 naming tenant_id, and nothing runs for it.
    let acme = Some("Bearer acme-token");
    let (status, body, _) = post_as(&base, acme, &ev(Some("beta"))).await;
    assert_eq!(
        (status, body["field"].as_str()),
        (403, Some("tenant_id")),
        "{body}"
    );
    assert_eq!(
        body["error"],
        "tenant_id: caller acme-runtime may not act for tenant \"beta\""
    );
    assert_eq!(runs(), 0);

    // Its own tenant, named or not: the acme hook runs and blocks.
    for tenant in [Some("acme"), None] {
        let (status, body, _) = post_as(&base, acme, &ev(tenant)).await;
        assert_eq!(
            (status, body["decision"].as_str()),
            (200, Some("block")),
            "{body}"
        );
        assert_eq!(body["reason"], "acme says no");
    }
    assert_eq!(runs(), 2);

    // A caller of several tenants must name one; beta has no hooks.
    let platform = Some("Bearer platform-token");
    let (status, body, _) = post_as(&base, platform, &ev(None)).await;
    assert_eq!(
        (status, body["field"].as_str()),
        (400, Some("tenant_id")),
        "{body}"
    );
    let (status, body, _) = post_as(&base, platform, &ev(Some("beta"))).await;
    assert_eq!(
        (status, body["decision"].as_str()),
        (200, Some("allow")),
        "{body}"
    );
    // The credential is checked before the body is read: a bad body without one is 401.
    let (status, _, _) = post_as(&base, None, &json!("not an event")).await;
    assert_eq!(status, 401);
    assert_eq!(runs(), 2);

    let r: Value = serde_json::from_slice(
        &reqwest::get(format!("{base}/readyz"))
            .await
            .unwrap()
            .bytes()
            .await
            .unwrap(),
    )
    .unwrap();
    assert_eq!(r["callers"], "callers-file");
    assert!(r.get("warning").is_none(), "{r}");
}

/// A state nobody told how to authenticate refuses every call; an anonymous one says so
/// in /readyz.
#[tokio::test]
async fn no_authenticator_refuses_everyone_and_anonymous_is_loud() {
    let state = AppState::new(Engine::new(
        HttpCaller::new(vec![]),
        Edition::Lite,
        SealKey::generate(),
    ));
    state.set_hooks(hooks("exit 0"));
    let base = serve_state(Arc::clone(&state)).await;
    let ev = json!({"event": "pre_tool_use", "tenant_id": "acme", "tool_name": "exec"});
    let (status, body, _) = post_as(&base, Some("Bearer anything"), &ev).await;
    assert_eq!(status, 401, "{body}");

    let state = new_state();
    state.set_hooks(hooks("exit 0"));
    let base = serve_state(Arc::clone(&state)).await;
    let (status, body, _) = post_as(&base, None, &ev).await;
    assert_eq!(
        (status, body["decision"].as_str()),
        (200, Some("allow")),
        "{body}"
    );
    let r: Value = serde_json::from_slice(
        &reqwest::get(format!("{base}/readyz"))
            .await
            .unwrap()
            .bytes()
            .await
            .unwrap(),
    )
    .unwrap();
    assert_eq!(r["callers"], "anonymous");
    assert!(
        r["warning"].as_str().unwrap().contains("not authenticated"),
        "{r}"
    );
}

/// `GET`/`POST` `path` with an optional bearer token → (status, body, WWW-Authenticate).
async fn call(base: &str, post: bool, path: &str, token: Option<&str>) -> (u16, Value, bool) {
    let c = reqwest::Client::new();
    let mut req = if post {
        c.post(format!("{base}{path}")).body(
            json!({"hook": "tenant-acme/no-rm", "event": {"event": "pre_tool_use", "tool_name": "exec", "tool_input": {}}})
                .to_string(),
        )
    } else {
        c.get(format!("{base}{path}"))
    };
    if let Some(t) = token {
        req = req.bearer_auth(t);
    }
    let r = req.send().await.unwrap();
    let status = r.status().as_u16();
    let challenged = r.headers().contains_key("www-authenticate");
    (
        status,
        serde_json::from_slice(&r.bytes().await.unwrap()).unwrap_or(Value::Null),
        challenged,
    )
}

const ADMIN: &str = "0123456789abcdef0123456789abcdef";
const GUARDED: [(bool, &str); 4] = [
    (false, "/v1/executions"),
    (false, "/v1/executions?namespace=tenant-acme"),
    (false, "/v1/executions/1"),
    (true, "/v1/test"),
];

/// CONTRACT §9.5: with `--kubernetes-callers`, history and dry runs ask the API server
/// who the caller is (401 without a token), and the admin token opens nothing even if one
/// were loaded (the binary refuses the pair at start). No API server listens here, so a
/// token that must be reviewed is 503.
#[tokio::test]
async fn with_kubernetes_callers_history_and_dry_runs_never_take_the_admin_token() {
    crate::operator_urls::install_crypto_provider();
    let dead = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let client =
        kube::Client::try_from(kube::Config::new(format!("http://{dead}").parse().unwrap()))
            .unwrap();
    let state = AppState::new(Engine::new(
        HttpCaller::new(vec![]),
        Edition::Lite,
        SealKey::generate(),
    ));
    state.set_authenticator(crate::identity::Authenticator::Kubernetes(Box::new(
        crate::identity::KubeCallers::new(client, "agenthooks.io", Default::default()),
    )));
    state.set_admin_token(admin::AdminToken::new(ADMIN).unwrap());
    state.set_hooks(hooks("exit 0"));
    let base = serve_state(state).await;
    for (post, path) in GUARDED {
        let (status, body, challenged) = call(&base, post, path, None).await;
        assert_eq!((status, challenged), (401, true), "{path}: {body}");
        let (status, body, _) = call(&base, post, path, Some(ADMIN)).await;
        assert_eq!(status, 503, "{path}: the token goes to TokenReview: {body}");
        assert!(
            body["error"]
                .as_str()
                .unwrap()
                .contains("could not review the token"),
            "{path}: {body}"
        );
    }
}

/// Standalone (`--callers-file`): history and dry runs take the admin token, as before
/// CONTRACT §9.5; a caller's dispatch token is not it.
#[tokio::test]
async fn standalone_history_and_dry_runs_take_the_admin_token_only() {
    let state = AppState::new(Engine::new(
        HttpCaller::new(vec![]),
        Edition::Lite,
        SealKey::generate(),
    ));
    state.set_authenticator(crate::identity::Authenticator::Callers(callers()));
    state.set_admin_token(admin::AdminToken::new(ADMIN).unwrap());
    state.set_hooks(hooks("echo no >&2; exit 2"));
    let base = serve_state(state).await;
    for (post, path) in GUARDED {
        for token in [None, Some("acme-token")] {
            let (status, body, _) = call(&base, post, path, token).await;
            assert_eq!(
                (status, body["field"].as_str()),
                (403, Some("authorization")),
                "{path} {token:?}: {body}"
            );
        }
        // Past the gate: audit is off here (503 saying so), the dry run runs.
        let (status, body, _) = call(&base, post, path, Some(ADMIN)).await;
        if post {
            assert_eq!(
                (status, &body["hook"]),
                (200, &json!("tenant-acme/no-rm")),
                "{body}"
            );
        } else {
            assert_eq!(status, 503, "{path}: {body}");
            assert!(
                body["error"].as_str().unwrap().contains("audit is off"),
                "{path}: {body}"
            );
        }
    }
}

/// CONTRACT §9.1 and the fail-closed rule: when the API server cannot review a caller's
/// token, a blocking event is answered 503 "treat as block" and no hook runs — a failure
/// of identity never lets a call through, and never runs a hook for an unknown caller.
#[tokio::test]
async fn an_api_server_that_cannot_review_the_caller_answers_block_and_runs_nothing() {
    crate::operator_urls::install_crypto_provider();
    let dead = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let client =
        kube::Client::try_from(kube::Config::new(format!("http://{dead}").parse().unwrap()))
            .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let ran = dir.path().join("ran");
    let state = AppState::new(Engine::new(
        HttpCaller::new(vec![]),
        Edition::Lite,
        SealKey::generate(),
    ));
    state.set_authenticator(crate::identity::Authenticator::Kubernetes(Box::new(
        crate::identity::KubeCallers::new(client, "agenthooks.io", Default::default()),
    )));
    state.set_hooks(hooks(&format!("touch {}; exit 0", ran.display())));
    let base = serve_state(state).await;
    let ev = json!({"event": "pre_tool_use", "tenant_id": "acme", "tool_name": "exec"});
    for _ in 0..3 {
        let (status, body, _) = post_as(&base, Some("Bearer some-token"), &ev).await;
        assert_eq!(status, 503, "{body}");
        assert!(
            body["error"].as_str().unwrap().ends_with("treat as block"),
            "{body}"
        );
        assert!(body.get("decision").is_none(), "never a decision: {body}");
    }
    assert!(!ran.exists(), "no hook ran for a caller nobody vouched for");
}

/// `--tls-cert-file/--tls-key-file`: the dispatch port serves HTTPS with the same
/// bounds and graceful shutdown; a client of another CA is refused.
#[tokio::test]
async fn the_dispatch_port_serves_tls() {
    use rcgen::{BasicConstraints, CertificateParams, IsCa, Issuer, KeyPair};
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca_key = KeyPair::generate().unwrap();
    let ca_pem = ca_params.self_signed(&ca_key).unwrap().pem();
    let issuer = Issuer::new(ca_params, ca_key);
    let leaf_key = KeyPair::generate().unwrap();
    let leaf = CertificateParams::new(vec!["localhost".to_string()])
        .unwrap()
        .signed_by(&leaf_key, &issuer)
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let files = agenthooks_tls::PemFiles {
        cert: dir.path().join("tls.crt"),
        key: dir.path().join("tls.key"),
        cert_flag: "--tls-cert-file",
        key_flag: "--tls-key-file",
    };
    std::fs::write(&files.cert, leaf.pem()).unwrap();
    std::fs::write(&files.key, leaf_key.serialize_pem()).unwrap();
    let ca_file = dir.path().join("ca.crt");
    std::fs::write(&ca_file, &ca_pem).unwrap();
    let cert = agenthooks_tls::ServerCert::load(files).unwrap();

    let state = new_state();
    state.set_hooks(hooks(
        r#"grep -q 'rm -rf' && { echo 'no rm' >&2; exit 2; }; exit 0"#,
    ));
    let tcp = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = tcp.local_addr().unwrap().port();
    let listener = agenthooks_tls::Incoming::new(tcp, Some(&cert)).unwrap();
    let stop = tokio_util::sync::CancellationToken::new();
    let server = tokio::spawn(serve(listener, router(Arc::clone(&state)), stop.clone()));

    crate::operator_urls::install_crypto_provider();
    let trusting = agenthooks_tls::client_config_trusting("--ca", &ca_file).unwrap();
    let client = reqwest::Client::builder()
        .tls_backend_preconfigured(trusting)
        .no_proxy()
        .build()
        .unwrap();
    let base = format!("https://localhost:{port}");
    let ev = json!({"event": "pre_tool_use", "tenant_id": "acme", "tool_name": "exec", "tool_input": {"cmd": "rm -rf /"}});
    let r = client
        .post(format!("{base}/v1/dispatch"))
        .body(ev.to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 200);
    let d: Value = serde_json::from_slice(&r.bytes().await.unwrap()).unwrap();
    assert_eq!(d["decision"], "block");
    let r = client.get(format!("{base}/readyz")).send().await.unwrap();
    assert_eq!(r.status().as_u16(), 200);

    // Plain HTTP on the TLS port gets no answer; a client without the CA is refused.
    assert!(
        reqwest::Client::new()
            .get(format!("http://127.0.0.1:{port}/readyz"))
            .send()
            .await
            .is_err()
    );
    let e = reqwest::Client::new()
        .get(format!("{base}/readyz"))
        .send()
        .await
        .unwrap_err();
    assert!(
        crate::operator_urls::describe(&e).contains("invalid peer certificate"),
        "{}",
        crate::operator_urls::describe(&e)
    );

    stop.cancel();
    tokio::time::timeout(std::time::Duration::from_secs(5), server)
        .await
        .expect("graceful shutdown")
        .unwrap()
        .unwrap();
}
