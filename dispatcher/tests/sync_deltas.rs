//! Issue 15 point 5 on the dispatcher's side, against [`operator_standin`] (our own
//! operator protocol, not Kubernetes) answering scripted bodies: a complete snapshot, then
//! a delta that applies, then deltas that do not (a wrong digest, another base, an
//! unreadable body). A delta that does not apply changes nothing served: the dispatcher
//! keeps deciding from its last set and asks for a complete snapshot at once
//! (`full=true`), which it takes.

mod operator_standin;

use std::sync::Arc;
use std::time::Duration;

use agenthooks_crds::Edition;
use agenthooks_crds::sealed::SealKey;
use agenthooks_crds::snapshot::{Snapshot, SnapshotDelta, digest, format_digest};
use agenthooks_dispatcher::handlers::http::HttpCaller;
use agenthooks_dispatcher::operator_urls::OperatorUrls;
use agenthooks_dispatcher::runner::Engine;
use agenthooks_dispatcher::server::{AppState, router, serve};
use agenthooks_dispatcher::sync;
use operator_standin::{StandIn, eventually, snapshot};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

/// `snapshot(epoch, version, mark)` with the guard at `generation`, and its digest as the
/// operator sends it.
fn full(version: u64, generation: i64, mark: &str) -> Snapshot {
    let mut s = snapshot("e1", version, mark);
    s.hooks[0].generation = generation;
    s.digest = Some(digest_of(&s));
    s
}

fn digest_of(s: &Snapshot) -> String {
    let jsons: Vec<Vec<u8>> = s
        .hooks
        .iter()
        .map(|h| serde_json::to_vec(h).unwrap())
        .collect();
    format_digest(digest(jsons.iter().map(Vec::as_slice)))
}

/// The delta from `base` to the set of `to`.
fn delta(base: u64, to: &Snapshot) -> SnapshotDelta {
    SnapshotDelta {
        epoch: to.epoch.clone(),
        base,
        version: to.version,
        hooks: to.hooks.clone(),
        removed: vec![],
        tenants: None,
        hook_count: to.hooks.len(),
        digest: to.digest.clone().unwrap(),
    }
}

/// The guard's `additionalContext` on an `exec` call.
async fn mark(c: &reqwest::Client, base: &str) -> Value {
    let r = c
        .post(format!("{base}/v1/dispatch"))
        .body(
            json!({"event": "pre_tool_use", "tenant_id": "acme", "agent_id": "a1", "tool_name": "exec", "tool_input": {}})
                .to_string(),
        )
        .send()
        .await
        .unwrap();
    let body: Value = serde_json::from_slice(&r.bytes().await.unwrap()).unwrap_or(Value::Null);
    body["additionalContext"].clone()
}

/// Asks for a dispatch every 20 ms until the mark is `want` (at most 10 s); every mark seen
/// on the way must be one of `allowed`.
async fn until_mark(c: &reqwest::Client, base: &str, want: &str, allowed: &[&str]) {
    for _ in 0..500 {
        let m = mark(c, base).await;
        if m == want {
            return;
        }
        // `null`: no hooks loaded yet (503).
        assert!(
            allowed
                .iter()
                .any(|a| m == *a || (m.is_null() && *a == "null")),
            "served {m} on the way to {want}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("never served {want}");
}

#[tokio::test]
async fn a_delta_that_does_not_apply_changes_nothing_and_a_full_snapshot_follows() {
    let c = operator_standin::client();
    let op = StandIn::start().await;
    *op.state.snapshot.lock().unwrap() = Some(full(1, 1, "first"));
    let state = AppState::new(Engine::new(
        HttpCaller::new(vec![]),
        Edition::Lite,
        SealKey::generate(),
    ));
    state.set_authenticator(agenthooks_dispatcher::identity::Authenticator::Anonymous);
    let cancel = CancellationToken::new();
    tokio::spawn(sync::follow(
        Arc::clone(&state),
        Arc::new(OperatorUrls::parse(&[op.url.as_str()]).unwrap()),
        "test-dispatcher".into(),
        cancel.clone(),
    ));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(serve(
        agenthooks_tls::Incoming::Plain(listener),
        router(Arc::clone(&state)),
        cancel.clone(),
    ));
    let updates = |body: &str, result: &str| {
        state
            .engine
            .metrics
            .sync_updates
            .with_label_values(&[body, result])
            .get()
    };
    let queries = || op.state.queries.lock().unwrap().clone();

    // The complete snapshot: its digest matches, so the next polls take deltas.
    until_mark(&c, &base, "first", &["null"]).await;
    assert!(
        eventually(Duration::from_secs(5), || queries()
            .iter()
            .any(|q| q.after == 1 && q.deltas))
        .await,
        "asks for deltas once it holds version 1"
    );

    // A delta that applies.
    // (The scripted answer first: a poll in between must not find the new snapshot.)
    let second = full(2, 2, "second");
    op.state
        .raw_answers
        .lock()
        .unwrap()
        .push_back(serde_json::to_string(&delta(1, &second)).unwrap());
    *op.state.snapshot.lock().unwrap() = Some(second.clone());
    until_mark(&c, &base, "second", &["first"]).await;
    assert_eq!(
        (
            updates("snapshot", "applied"),
            updates("delta", "applied"),
            updates("delta", "rejected")
        ),
        (1, 1, 0)
    );
    assert_eq!(state.hooks().unwrap().version, 2);

    // A delta whose result is not the operator's set (a wrong digest): refused, version 2
    // still served, and the next poll asks for a complete snapshot, which is taken.
    let third = full(3, 3, "third");
    let mut wrong = delta(2, &third);
    wrong.digest = "0123456789abcdef".into();
    op.state
        .raw_answers
        .lock()
        .unwrap()
        .push_back(serde_json::to_string(&wrong).unwrap());
    *op.state.snapshot.lock().unwrap() = Some(third.clone());
    until_mark(&c, &base, "third", &["second"]).await;
    assert_eq!(updates("delta", "rejected"), 1);
    assert_eq!(updates("snapshot", "applied"), 2, "the complete one");
    let asked_full = queries()
        .iter()
        .any(|q| q.full && q.after == 2 && q.epoch == "e1");
    assert!(
        asked_full,
        "asked for a complete snapshot, saying it still holds 2: {:?}",
        queries()
    );

    // A delta from another base, and a body that is no JSON: refused, nothing changes.
    let fourth = full(4, 4, "fourth");
    let mut other_base = delta(2, &fourth);
    other_base.base = 7;
    op.state
        .raw_answers
        .lock()
        .unwrap()
        .extend([serde_json::to_string(&other_base).unwrap(), "{oops".into()]);
    assert!(
        eventually(Duration::from_secs(10), || op
            .state
            .raw_answers
            .lock()
            .unwrap()
            .is_empty())
        .await
    );
    assert!(
        eventually(Duration::from_secs(10), || updates("delta", "rejected")
            + updates("snapshot", "rejected")
            == 3)
        .await
    );
    for _ in 0..10 {
        assert_eq!(mark(&c, &base).await, "third");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(state.hooks().unwrap().version, 3);
    cancel.cancel();
}
