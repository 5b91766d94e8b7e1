//! Issue 3 point 5 on the dispatcher's side: a dispatcher started while no operator runs
//! is not ready and never decides from an empty hook set; once a snapshot arrives it is
//! ready; when the operator goes away it keeps serving its last snapshot. Also: several
//! operator URLs, failover on `503` (not leader) and on a dead URL.
//!
//! The operator is [`operator_standin`]: a stand-in for our own operator protocol (crds
//! `snapshot` wire type), not Kubernetes.

mod operator_standin;

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use agenthooks_crds::Edition;
use agenthooks_crds::sealed::SealKey;
use agenthooks_dispatcher::handlers::http::HttpCaller;
use agenthooks_dispatcher::operator_urls::OperatorUrls;
use agenthooks_dispatcher::runner::Engine;
use agenthooks_dispatcher::server::{AppState, router, serve};
use agenthooks_dispatcher::sync;
use operator_standin::{StandIn, dead_url, eventually, snapshot};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

fn event() -> Value {
    json!({"event": "pre_tool_use", "tenant_id": "acme", "agent_id": "a1", "tool_name": "exec", "tool_input": {"cmd": "rm -rf /"}})
}

/// (status of /readyz, status and body of a dispatch).
async fn probe(c: &reqwest::Client, base: &str) -> (u16, u16, Value) {
    let ready = c
        .get(format!("{base}/readyz"))
        .send()
        .await
        .unwrap()
        .status()
        .as_u16();
    let r = c
        .post(format!("{base}/v1/dispatch"))
        .body(event().to_string())
        .send()
        .await
        .unwrap();
    let status = r.status().as_u16();
    let body = serde_json::from_slice(&r.bytes().await.unwrap()).unwrap_or(Value::Null);
    (ready, status, body)
}

/// Probes every 25 ms until `done` holds (at most 10 s); returns the last probe.
async fn probe_until(
    c: &reqwest::Client,
    base: &str,
    done: impl Fn(&(u16, u16, Value)) -> bool,
) -> (u16, u16, Value) {
    let mut last = probe(c, base).await;
    for _ in 0..400 {
        if done(&last) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
        last = probe(c, base).await;
    }
    last
}

/// A synced dispatcher on a loopback port following `urls`.
async fn dispatcher<S: AsRef<str>>(urls: &[S]) -> (String, CancellationToken) {
    let state = AppState::new(Engine::new(
        HttpCaller::new(vec![]),
        Edition::Lite,
        SealKey::generate(),
    ));
    state.set_authenticator(agenthooks_dispatcher::identity::Authenticator::Anonymous);
    let urls = Arc::new(OperatorUrls::parse(urls).unwrap());
    let cancel = CancellationToken::new();
    tokio::spawn(sync::follow(
        Arc::clone(&state),
        urls,
        "test-dispatcher".into(),
        cancel.clone(),
    ));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let stop = cancel.clone();
    tokio::spawn(async move {
        serve(
            agenthooks_tls::Incoming::Plain(listener),
            router(state),
            stop,
        )
        .await
        .unwrap()
    });
    (base, cancel)
}

#[tokio::test]
async fn not_ready_without_an_operator_ready_on_the_first_snapshot_and_kept_when_it_leaves() {
    let c = operator_standin::client();
    let dead = dead_url().await;
    // The stand-in is up but not synced yet: 503 to every poll.
    let op = StandIn::start().await;
    let (base, cancel) = dispatcher(&[format!("{dead},{}", op.url)]).await;

    // No snapshot yet: not ready, and a dispatch is 503 (the caller treats it as block),
    // never a decision from an empty set; held over several poll rounds.
    assert!(
        eventually(Duration::from_secs(5), || op
            .state
            .snapshot_polls
            .load(Ordering::SeqCst)
            >= 2)
        .await,
        "the dispatcher polls"
    );
    for _ in 0..3 {
        let (ready, status, body) = probe(&c, &base).await;
        assert_eq!((ready, status), (503, 503), "{body}");
        assert!(
            body["error"].as_str().unwrap().contains("no hooks loaded"),
            "{body}"
        );
        assert!(body.get("decision").is_none(), "{body}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    // The first snapshot arrives: ready, and decisions come from it.
    *op.state.snapshot.lock().unwrap() = Some(snapshot("e1", 1, "first"));
    let (ready, status, body) = probe_until(&c, &base, |(r, _, _)| *r == 200).await;
    assert_eq!((ready, status), (200, 200), "{body}");
    assert_eq!(body["decision"], "allow");
    assert_eq!(body["additionalContext"], "first");

    // The operator goes away (connections refused): still ready, same decisions.
    let state = op.stop().await;
    let polls = state.snapshot_polls.load(Ordering::SeqCst);
    for _ in 0..5 {
        let (ready, status, body) = probe(&c, &base).await;
        assert_eq!((ready, status), (200, 200), "{body}");
        assert_eq!(
            body["additionalContext"], "first",
            "the last snapshot is served"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert_eq!(state.snapshot_polls.load(Ordering::SeqCst), polls);
    cancel.cancel();
}

#[tokio::test]
async fn polls_move_past_a_standby_and_follow_a_new_leader() {
    let c = operator_standin::client();
    let a = StandIn::start().await;
    let b = StandIn::start().await;
    // a is a standby (503 not leader), b the leader.
    a.state.leader.store(false, Ordering::SeqCst);
    *b.state.snapshot.lock().unwrap() = Some(snapshot("epoch-b", 4, "from-b"));
    *a.state.snapshot.lock().unwrap() = Some(snapshot("epoch-a", 1, "from-a"));
    let (base, cancel) = dispatcher(&[a.url.clone(), b.url.clone()]).await;
    let (_, _, got) = probe_until(&c, &base, |(_, s, _)| *s == 200).await;
    assert_eq!(got["additionalContext"], "from-b", "{got}");
    // While b answers, the polls stick with b: a sees no new poll.
    let a_polls = a.state.snapshot_polls.load(Ordering::SeqCst);
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert_eq!(
        a.state.snapshot_polls.load(Ordering::SeqCst),
        a_polls,
        "sticks with b"
    );
    assert!(
        b.state.snapshot_polls.load(Ordering::SeqCst) >= 3,
        "b's long polls go on"
    );

    // Failover: b steps down, a takes over with its own epoch (a smaller version).
    b.state.leader.store(false, Ordering::SeqCst);
    a.state.leader.store(true, Ordering::SeqCst);
    let mut switched = false;
    for _ in 0..200 {
        let (ready, status, body) = probe(&c, &base).await;
        assert_eq!(
            (ready, status),
            (200, 200),
            "ready throughout the failover: {body}"
        );
        if body["additionalContext"] == "from-a" {
            switched = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    assert!(switched, "the new leader's snapshot is served");
    cancel.cancel();
}
