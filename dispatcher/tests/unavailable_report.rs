//! CONTRACT §10.4 on the sync side: the hooks of a snapshot this dispatcher cannot load
//! are told to the operator (crds `Report::unavailable`, the whole list) before the poll
//! that says "I hold this version"; a report that fails is sent again before the next
//! poll; the list is sent again when it changes and after an epoch change (a new
//! operator process), and not otherwise.
//!
//! The dispatcher runs the Standard edition, so the stand-in's command hook
//! (`tenant-acme/guard`) is one it cannot load. The operator is [`operator_standin`],
//! whose `log` records polls and unavailable reports in arrival order.

mod operator_standin;

use std::sync::Arc;
use std::time::Duration;

use agenthooks_crds::Edition;
use agenthooks_crds::sealed::SealKey;
use agenthooks_dispatcher::handlers::http::HttpCaller;
use agenthooks_dispatcher::operator_urls::OperatorUrls;
use agenthooks_dispatcher::runner::Engine;
use agenthooks_dispatcher::server::{AppState, router, serve};
use agenthooks_dispatcher::sync;
use operator_standin::{Script, StandIn, eventually, snapshot};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

const GUARD: &str = "unavailable [tenant-acme/guard@1]";

/// A Standard dispatcher following `url`, serving on a loopback port.
async fn dispatcher(url: &str) -> (Arc<AppState>, String, CancellationToken) {
    let state = AppState::new(Engine::new(
        HttpCaller::new(vec![]),
        Edition::Standard,
        SealKey::generate(),
    ));
    state.set_authenticator(agenthooks_dispatcher::identity::Authenticator::Anonymous);
    let urls = Arc::new(OperatorUrls::parse(&[url]).unwrap());
    let cancel = CancellationToken::new();
    tokio::spawn(sync::follow(
        Arc::clone(&state),
        urls,
        "std-dispatcher".into(),
        cancel.clone(),
    ));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let (app, stop) = (router(Arc::clone(&state)), cancel.clone());
    tokio::spawn(async move {
        serve(agenthooks_tls::Incoming::Plain(listener), app, stop)
            .await
            .unwrap()
    });
    (state, base, cancel)
}

fn log(op: &StandIn) -> Vec<String> {
    op.state.log.lock().unwrap().clone()
}

/// Waits (at most 10 s) until the log holds `entry` followed by at least `then` more
/// entries; returns the log.
async fn log_past(op: &StandIn, entry: &str, then: usize) -> Vec<String> {
    let reached = eventually(Duration::from_secs(10), || {
        let l = log(op);
        l.iter()
            .position(|e| e == entry)
            .is_some_and(|i| l.len() > i + then)
    })
    .await;
    assert!(
        reached,
        "`{entry}` then {then} more not seen: {:?}",
        log(op)
    );
    log(op)
}

fn unavailable_reports(log: &[String]) -> Vec<&str> {
    log.iter()
        .filter(|e| e.starts_with("unavailable"))
        .map(String::as_str)
        .collect()
}

async fn dispatch(base: &str, tenant: &str) -> Value {
    let r = operator_standin::client()
        .post(format!("{base}/v1/dispatch"))
        .body(
            json!({"event": "pre_tool_use", "tenant_id": tenant, "agent_id": "a1",
                   "tool_name": "exec", "tool_input": {"cmd": "ls"}})
            .to_string(),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 200);
    serde_json::from_slice(&r.bytes().await.unwrap()).unwrap()
}

#[tokio::test]
async fn the_list_is_reported_before_the_next_poll_and_again_only_when_it_changes() {
    let op = StandIn::start().await;
    *op.state.snapshot.lock().unwrap() = Some(snapshot("e1", 1, "m"));
    let (state, base, cancel) = dispatcher(&op.url).await;

    // First poll gets version 1; the report of what of it cannot be loaded comes before
    // the poll that claims it; nothing more is reported while nothing changes.
    let l = log_past(&op, "poll e1/1", 10).await;
    assert_eq!(l[..3], ["poll /0", GUARD, "poll e1/1"], "{l:?}");
    assert_eq!(unavailable_reports(&l), [GUARD], "{l:?}");
    let report = op.state.reports.lock().unwrap()[0].clone();
    assert_eq!(report.dispatcher, "std-dispatcher");
    assert!(report.executions.is_empty() && report.trips.is_empty());
    let list = report.unavailable.unwrap();
    assert_eq!(list.len(), 1);
    let u = &list[0];
    assert_eq!(
        (u.uid.as_str(), u.namespace.as_str(), u.name.as_str()),
        ("uid-guard", "tenant-acme", "guard")
    );
    assert!(u.error.contains("runs only on the Lite edition"), "{u:?}");

    // Served as unavailable: the tenant's blocking event is refused, another's allowed.
    let v = dispatch(&base, "acme").await;
    assert_eq!(
        (&v["decision"], &v["reason"], &v["decidingHook"]),
        (
            &json!("block"),
            &json!("HookUnavailable"),
            &json!("tenant-acme/guard")
        ),
        "{v}"
    );
    assert_eq!(dispatch(&base, "globex").await["decision"], "allow");

    // A new version with the same list: not reported again.
    *op.state.snapshot.lock().unwrap() = Some(snapshot("e1", 2, "m"));
    let l = log_past(&op, "poll e1/2", 10).await;
    assert_eq!(unavailable_reports(&l), [GUARD], "{l:?}");

    // A version without the hook: the (empty) list differs, and is reported before the
    // poll that claims version 3.
    let mut empty = snapshot("e1", 3, "m");
    empty.hooks.clear();
    *op.state.snapshot.lock().unwrap() = Some(empty);
    let l = log_past(&op, "poll e1/3", 10).await;
    let at = l.iter().position(|e| e == "poll e1/3").unwrap();
    assert_eq!(l[at - 1], "unavailable []", "{l:?}");
    assert_eq!(unavailable_reports(&l), [GUARD, "unavailable []"], "{l:?}");
    assert_eq!(dispatch(&base, "acme").await["decision"], "allow");
    assert_eq!(state.engine.metrics.report_failures.get(), 0);
    cancel.cancel();
}

#[tokio::test]
async fn a_report_that_fails_is_sent_again_before_each_poll_until_acknowledged() {
    let op = StandIn::start().await;
    op.state
        .unavailable_script
        .lock()
        .unwrap()
        .extend([Script::Fail, Script::NotLeader]);
    *op.state.snapshot.lock().unwrap() = Some(snapshot("e1", 1, "m"));
    let (state, _base, cancel) = dispatcher(&op.url).await;

    // 500, then 503: each failure is retried before the next poll (the polls go on, the
    // snapshot is served meanwhile); once acknowledged, no more reports.
    let l = log_past(&op, "poll e1/1", 12).await;
    assert_eq!(
        l[..7],
        [
            "poll /0",
            GUARD,
            "poll e1/1",
            GUARD,
            "poll e1/1",
            GUARD,
            "poll e1/1"
        ],
        "{l:?}"
    );
    assert_eq!(unavailable_reports(&l), [GUARD; 3], "{l:?}");
    assert_eq!(state.engine.metrics.report_failures.get(), 2);
    let applied = op.state.applied.lock().unwrap();
    assert_eq!(applied.len(), 1, "only the third attempt is applied");
    cancel.cancel();
}

#[tokio::test]
async fn an_epoch_change_makes_the_list_sent_again() {
    let op = StandIn::start().await;
    *op.state.snapshot.lock().unwrap() = Some(snapshot("e1", 5, "m"));
    let (_state, _base, cancel) = dispatcher(&op.url).await;
    let l = log_past(&op, "poll e1/5", 5).await;
    assert_eq!(unavailable_reports(&l), [GUARD], "{l:?}");

    // A new operator process (another epoch, a lower version) with the same hooks: it
    // knows nothing of this dispatcher, so the same list is sent to it before the poll
    // that claims its version.
    *op.state.snapshot.lock().unwrap() = Some(snapshot("e2", 1, "m"));
    let l = log_past(&op, "poll e2/1", 10).await;
    let at = l.iter().position(|e| e == "poll e2/1").unwrap();
    assert_eq!(l[at - 2..=at], ["poll e1/5", GUARD, "poll e2/1"], "{l:?}");
    assert_eq!(unavailable_reports(&l), [GUARD; 2], "{l:?}");
    cancel.cancel();
}
