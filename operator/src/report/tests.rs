//! `POST /v1/report` without an API server: refusals, leadership, duplicates, and the
//! trip or close that reaches the snapshot before (and whatever happens to) its status
//! write. The
//! writes themselves are tested on the real API server (`operator/tests/report.rs`).

use super::*;
use crate::index::tests::hook;
use crate::metrics::Metrics;
use crate::shared::tests::config;
use agenthooks_crds::report::Report;
use agenthooks_crds::snapshot::Snapshot;
use axum::body::Body;
use axum::http::Request;
use http_body_util::BodyExt;
use serde_json::{Value, json};
use tower::ServiceExt;

/// A client for `http://127.0.0.1:{port}`.
fn client_at(port: u16) -> Client {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let url = format!("http://127.0.0.1:{port}").parse().unwrap();
    Client::try_from(kube::Config::new(url)).unwrap()
}

/// A client for an address nothing listens on: every API call fails at once.
fn dead_client() -> Client {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    client_at(port)
}

/// A client for a local port that counts the connections made to it (and closes each at
/// once, so every API call fails): proves that no API call is made.
fn counting_client() -> (Client, Arc<std::sync::atomic::AtomicUsize>) {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let connections = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counted = connections.clone();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            counted.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            drop(stream);
        }
    });
    (client_at(port), connections)
}

fn serving_shared() -> Arc<Shared> {
    let shared = Shared::new(config(), Metrics::new().unwrap());
    shared.set_leader(true);
    shared.set_synced(true);
    shared
}

/// A serving `Shared` whose index holds `hooks` (`(name, uid, generation)` in namespace
/// `ns`), published; with the version of that snapshot.
fn published(hooks: &[(&str, &str, i64)]) -> (Arc<Shared>, u64) {
    let shared = serving_shared();
    for (name, uid, generation) in hooks {
        lock(&shared.index).apply(hook("ns", name, uid, *generation));
    }
    shared.publish_now().unwrap();
    let version = shared.snapshots.borrow().version;
    (shared, version)
}

fn fast() -> ReportConfig {
    ReportConfig {
        write_interval: Duration::from_millis(10),
        ack_timeout: Duration::from_secs(5),
    }
}

/// POSTs `body` as the dispatcher it names (what the sync port's authentication leaves
/// in the request; `d` for a body naming none).
async fn post(app: &Router, body: impl AsRef<[u8]>) -> (StatusCode, Value) {
    let named = serde_json::from_slice::<Value>(body.as_ref())
        .ok()
        .and_then(|v| v["dispatcher"].as_str().map(str::to_string))
        .unwrap_or_else(|| "d".into());
    post_as(app, &named, body).await
}

/// POSTs `body` as authenticated dispatcher `caller`.
async fn post_as(app: &Router, caller: &str, body: impl AsRef<[u8]>) -> (StatusCode, Value) {
    let mut req = Request::post("/v1/report")
        .header("content-type", "application/json")
        .body(Body::from(body.as_ref().to_vec()))
        .unwrap();
    req.extensions_mut().insert(SyncCaller::new(caller));
    let resp = app.clone().oneshot(req).await.unwrap();
    let status = resp.status();
    let bytes = resp.into_body().collect().await.unwrap().to_bytes();
    (
        status,
        serde_json::from_slice(&bytes).unwrap_or(Value::Null),
    )
}

fn report_json(report: &Report) -> String {
    serde_json::to_string(report).unwrap()
}

fn count(shared: &Shared, result: &str) -> u64 {
    shared
        .metrics
        .reports_total
        .with_label_values(&[result])
        .get()
}

#[tokio::test]
async fn bad_bodies_are_400_naming_the_field_and_big_ones_413() {
    let shared = serving_shared();
    let cancel = CancellationToken::new();
    let app = start_with(shared.clone(), dead_client(), cancel.clone(), fast());
    let (status, body) = post(
        &app,
        r#"{"dispatcher":"d","reportId":"r","trips":[{"uid":1}]}"#,
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(
        body["error"]
            .as_str()
            .unwrap()
            .starts_with("trips[0].uid: invalid type"),
        "{body}"
    );
    let (status, body) = post(&app, r#"{"dispatcher":"d"}"#).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(
        body["error"].as_str().unwrap().contains("reportId"),
        "{body}"
    );
    let big = format!(
        r#"{{"dispatcher":"d","reportId":"r","pad":"{}"}}"#,
        "x".repeat(MAX_BODY_BYTES)
    );
    let (status, body) = post(&app, big).await;
    assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE);
    assert!(body["error"].as_str().unwrap().starts_with("body:"));
    assert_eq!(
        (count(&shared, "bad_request"), count(&shared, "too_large")),
        (2, 1)
    );
    cancel.cancel();
}

#[tokio::test]
async fn a_replica_that_is_not_the_synced_leader_answers_503_and_applies_nothing() {
    let shared = Shared::new(config(), Metrics::new().unwrap());
    lock(&shared.index).apply(hook("ns", "h", "u1", 1));
    let cancel = CancellationToken::new();
    let app = start_with(shared.clone(), dead_client(), cancel.clone(), fast());
    let trip = json!({"dispatcher": "d", "reportId": "r1", "trips": [{
        "uid": "u1", "namespace": "ns", "name": "h", "generation": 1, "tenant": "t1",
        "trippedAt": "2025-03-01T10:00:00Z", "reason": "5 timeouts"}]});
    let (status, body) = post(&app, trip.to_string()).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(
        (body["leader"].clone(), body["synced"].clone()),
        (json!(false), json!(false))
    );
    assert!(body["error"].as_str().unwrap().contains("not the leader"));
    shared.set_leader(true);
    let (status, body) = post(&app, trip.to_string()).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(
        (body["leader"].clone(), body["synced"].clone()),
        (json!(true), json!(false))
    );
    assert!(
        lock(&shared.index)
            .get(&HookKey::new("ns", "h"))
            .unwrap()
            .open_breakers()
            .is_empty(),
        "the trip was not applied"
    );
    assert_eq!(count(&shared, "unavailable"), 2);
    cancel.cancel();
}

#[tokio::test]
async fn an_applied_id_answers_duplicate_and_changes_nothing() {
    let shared = serving_shared();
    let cancel = CancellationToken::new();
    let app = start_with(shared.clone(), dead_client(), cancel.clone(), fast());
    // an empty report and a trip for an unknown hook need no API call
    let report = Report {
        dispatcher: "d".into(),
        report_id: "r1".into(),
        trips: vec![TripReport {
            uid: "nobody".into(),
            namespace: "ns".into(),
            name: "h".into(),
            generation: 1,
            reset_token: None,
            tenant: "t1".into(),
            tripped_at: "2025-03-01T10:00:00Z".into(),
            fail_closed: false,
            reason: "5 timeouts".into(),
        }],
        ..Default::default()
    };
    let (status, body) = post(&app, report_json(&report)).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(
        body,
        json!({"trips": 0, "executions": 0, "duplicate": false})
    );
    let (status, body) = post(&app, report_json(&report)).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(body["duplicate"], true);
    assert_eq!(
        shared
            .metrics
            .breaker_trips_total
            .with_label_values(&["unknown"])
            .get(),
        1,
        "the duplicate was not applied again"
    );
    assert_eq!(
        (count(&shared, "applied"), count(&shared, "duplicate")),
        (1, 1)
    );
    cancel.cancel();
}

/// The snapshot hook `name` of the current snapshot, with its open breakers as
/// `(tenant, since_ms, fail_closed)`; `None` when the hook is not in it.
fn snapshot_breakers(shared: &Shared, name: &str) -> Option<Vec<(String, i64, bool)>> {
    let snapshot: Snapshot = serde_json::from_slice(&shared.full_snapshot()).unwrap();
    snapshot.hooks.iter().find(|h| h.name == name).map(|h| {
        h.open_breakers
            .iter()
            .map(|b| (b.tenant.clone(), b.since_ms, b.fail_closed))
            .collect()
    })
}

fn ms(rfc3339: &str) -> i64 {
    times::parse_utc(rfc3339).unwrap().timestamp_millis()
}

#[tokio::test]
async fn a_trip_and_a_close_reach_the_snapshot_before_their_status_writes() {
    let (shared, before) = published(&[("h", "u1", 2), ("other", "u2", 1)]);
    let cancel = CancellationToken::new();
    let app = start_with(shared.clone(), dead_client(), cancel.clone(), fast());
    let trip = |generation: i64, token: Option<&str>| TripReport {
        uid: "u1".into(),
        namespace: "ns".into(),
        name: "h".into(),
        generation,
        reset_token: token.map(str::to_string),
        tenant: "ta".into(),
        tripped_at: "2025-03-01T10:00:00Z".into(),
        fail_closed: true,
        reason: "5 errors in a row".into(),
    };
    // stale generation and stale reset token: acknowledged, nothing changes
    let stale = Report {
        dispatcher: "d".into(),
        report_id: "stale".into(),
        trips: vec![trip(1, None), trip(2, Some("old"))],
        ..Default::default()
    };
    let (status, body) = post(&app, report_json(&stale)).await;
    assert_eq!((status, body["trips"].clone()), (StatusCode::OK, json!(0)));
    assert_eq!(shared.snapshots.borrow().version, before);

    // the API server is unreachable: the status write fails, the snapshot moved anyway
    let live = Report {
        dispatcher: "d".into(),
        report_id: "live".into(),
        trips: vec![trip(2, None)],
        ..Default::default()
    };
    let (status, body) = post(&app, report_json(&live)).await;
    assert_eq!(status, StatusCode::GATEWAY_TIMEOUT, "{body}");
    assert!(
        body["error"].as_str().unwrap().contains("same reportId"),
        "{body}"
    );
    assert_eq!(shared.snapshots.borrow().version, before + 1);
    assert_eq!(
        snapshot_breakers(&shared, "h"),
        Some(vec![("ta".to_string(), ms("2025-03-01T10:00:00Z"), true)]),
        "the tripped hook stays, with tenant ta open (fail-closed)"
    );
    assert_eq!(snapshot_breakers(&shared, "other"), Some(vec![]));
    assert_eq!(
        shared
            .metrics
            .breaker_trip_publish_seconds
            .get_sample_count(),
        1
    );
    assert!(
        shared.metrics.breaker_trip_publish_seconds.get_sample_sum() < 0.5,
        "publishing is not behind any API call"
    );
    let trips = |result: &str| {
        shared
            .metrics
            .breaker_trips_total
            .with_label_values(&[result])
            .get()
    };
    assert_eq!(trips("failed"), 1);
    // the retry (same id) tries the status write again but publishes nothing new
    let (status, _) = post(&app, report_json(&live)).await;
    assert_eq!(status, StatusCode::GATEWAY_TIMEOUT);
    assert_eq!(shared.snapshots.borrow().version, before + 1);
    assert_eq!(trips("failed"), 2);

    // a close older than the trip changes nothing; the probe's close removes it
    let close = |opened_at: &str| CloseReport {
        uid: "u1".into(),
        namespace: "ns".into(),
        name: "h".into(),
        generation: 2,
        reset_token: None,
        tenant: "ta".into(),
        opened_at: opened_at.into(),
        closed_at: "2025-03-01T10:00:31Z".into(),
    };
    let closes = |result: &str| {
        shared
            .metrics
            .breaker_closes_total
            .with_label_values(&[result])
            .get()
    };
    let old = Report {
        dispatcher: "d2".into(),
        report_id: "old-close".into(),
        closes: vec![close("2025-03-01T09:59:00Z")],
        ..Default::default()
    };
    let (status, body) = post(&app, report_json(&old)).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(closes("newer"), 1);
    assert_eq!(shared.snapshots.borrow().version, before + 1);
    let probe = Report {
        dispatcher: "d2".into(),
        report_id: "close".into(),
        closes: vec![close("2025-03-01T10:00:00Z")],
        ..Default::default()
    };
    let (status, _) = post(&app, report_json(&probe)).await;
    assert_eq!(
        status,
        StatusCode::GATEWAY_TIMEOUT,
        "its status write fails here"
    );
    assert_eq!(shared.snapshots.borrow().version, before + 2);
    assert_eq!(
        snapshot_breakers(&shared, "h"),
        Some(vec![]),
        "closed everywhere"
    );
    assert_eq!(closes("failed"), 1);
    // the trip's report resent late cannot reopen what the probe closed
    let (status, _) = post(
        &app,
        report_json(&Report {
            report_id: "late".into(),
            ..live.clone()
        }),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(trips("already_closed"), 1);
    assert_eq!(shared.snapshots.borrow().version, before + 2);
    cancel.cancel();
}

#[tokio::test]
async fn faults_of_tenant_a_merged_over_three_dispatchers_trip_a_only() {
    let (shared, before) = published(&[("h", "u1", 1)]);
    let cancel = CancellationToken::new();
    let app = start_with(shared.clone(), dead_client(), cancel.clone(), fast());
    let t0 = chrono::Utc::now() - chrono::Duration::seconds(10);
    let at = |s: i64| executions::format_time(t0 + chrono::Duration::seconds(s));
    let observation = |generation: i64, tenant: &str, answer: Option<i64>, run: &[i64]| {
        let mut o = json!({"uid": "u1", "namespace": "ns", "name": "h", "generation": generation,
               "tenant": tenant,
               "run": run.iter().map(|s| json!({"at": at(*s), "timeout": true})).collect::<Vec<_>>()});
        if let Some(a) = answer {
            o["lastAnswerAt"] = json!(at(a));
        }
        o
    };
    let report = |d: &str, obs: Vec<Value>| {
        json!({"dispatcher": d, "reportId": format!("{d}-{}", uuid::Uuid::new_v4()), "breaker": obs})
            .to_string()
    };
    // answers (allows and blocks alike) from every dispatcher and tenant never trip
    for i in 0..20 {
        let obs = vec![
            observation(1, "ta", Some(i % 9), &[]),
            observation(1, "tb", Some(i % 9), &[]),
        ];
        let (status, _) = post(&app, report(&format!("d{}", i % 3), obs)).await;
        assert_eq!(status, StatusCode::OK);
    }
    assert_eq!(
        shared.snapshots.borrow().version,
        before,
        "answers never trip"
    );
    // observations of another generation are not counted
    let (status, _) = post(
        &app,
        report("d0", vec![observation(7, "ta", None, &[0, 1, 2, 3, 4])]),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    // faults of ta on three dispatchers, interleaved in time, and four of tb
    let (status, _) = post(
        &app,
        report(
            "d1",
            vec![
                observation(1, "ta", Some(0), &[1, 3]),
                observation(1, "tb", Some(0), &[1, 3]),
            ],
        ),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    let (status, _) = post(
        &app,
        report(
            "d2",
            vec![
                observation(1, "ta", Some(0), &[2, 4]),
                observation(1, "tb", Some(0), &[2, 4]),
            ],
        ),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(
        shared.snapshots.borrow().version,
        before,
        "four do not trip"
    );
    // the fifth fault of ta trips ta; its status write fails here (no API server)
    let fifth = report("d3", vec![observation(1, "ta", Some(0), &[5])]);
    let (status, body) = post(&app, fifth.clone()).await;
    assert_eq!(status, StatusCode::GATEWAY_TIMEOUT, "{body}");
    assert_eq!(shared.snapshots.borrow().version, before + 1);
    assert_eq!(
        shared.snapshots.borrow().hooks,
        1,
        "the hook stays in the snapshot"
    );
    let since = (t0 + chrono::Duration::seconds(5)).timestamp_millis();
    assert_eq!(
        snapshot_breakers(&shared, "h"),
        Some(vec![("ta".to_string(), since, false)]),
        "ta open (timeouts only: fail_closed false), tb not"
    );
    assert!(matches!(
        lock(&shared.index).publication(&HookKey::new("ns", "h")),
        Some(crate::index::Publication::Published { .. })
    ));
    let failed = || {
        shared
            .metrics
            .breaker_trips_total
            .with_label_values(&["failed"])
            .get()
    };
    assert_eq!(failed(), 1);
    // the same report again: the trip it decided is written again (the windows forgot the
    // run once it tripped)
    let (status, _) = post(&app, fifth).await;
    assert_eq!(status, StatusCode::GATEWAY_TIMEOUT);
    assert_eq!(failed(), 2, "the retry tried the status write again");
    assert_eq!(shared.snapshots.borrow().version, before + 1);
    // ta's further faults are not observed while it is open; tb's fifth trips tb
    let (status, _) = post(
        &app,
        report("d3", vec![observation(1, "tb", Some(0), &[6])]),
    )
    .await;
    assert_eq!(status, StatusCode::GATEWAY_TIMEOUT);
    let tenants: Vec<String> = snapshot_breakers(&shared, "h")
        .unwrap()
        .into_iter()
        .map(|(t, _, _)| t)
        .collect();
    assert_eq!(tenants, ["ta", "tb"]);
    cancel.cancel();
}

#[tokio::test]
async fn counts_that_cannot_be_written_answer_504() {
    let shared = serving_shared();
    lock(&shared.index).apply(hook("ns", "h", "u1", 1));
    let cancel = CancellationToken::new();
    let app = start_with(shared.clone(), dead_client(), cancel.clone(), fast());
    let body = json!({"dispatcher": "d", "reportId": "r", "executions": [
        {"uid": "u1", "namespace": "ns", "name": "h", "allow": 3}]});
    let (status, answer) = post(&app, body.to_string()).await;
    assert_eq!(status, StatusCode::GATEWAY_TIMEOUT, "{answer}");
    assert!(
        answer["error"]
            .as_str()
            .unwrap()
            .contains("status.executions of ns/h"),
        "{answer}"
    );
    assert_eq!(
        shared.metrics.execution_status_write_errors_total.get(),
        u64::from(writer::MAX_FAILED_BATCHES)
    );
    assert_eq!(count(&shared, "not_persisted"), 1);
    cancel.cancel();
}

#[tokio::test]
async fn a_slow_report_answers_504_and_goes_on_and_its_retry_waits_for_it() {
    let shared = serving_shared();
    lock(&shared.index).apply(hook("ns", "h", "u1", 1));
    let cancel = CancellationToken::new();
    let config = ReportConfig {
        write_interval: Duration::from_millis(300),
        ack_timeout: Duration::from_millis(50),
    };
    let app = start_with(shared.clone(), dead_client(), cancel.clone(), config);
    let body = json!({"dispatcher": "d", "reportId": "slow", "executions": [
        {"uid": "u1", "namespace": "ns", "name": "h", "allow": 3}]})
    .to_string();
    let (status, answer) = post(&app, body.clone()).await;
    assert_eq!(status, StatusCode::GATEWAY_TIMEOUT);
    assert!(
        answer["error"]
            .as_str()
            .unwrap()
            .contains("not yet persisted"),
        "{answer}"
    );
    // the retry finds the first attempt still running and waits for it
    let (status, _) = post(&app, body.clone()).await;
    assert_eq!(status, StatusCode::GATEWAY_TIMEOUT);
    let errors = || shared.metrics.execution_status_write_errors_total.get();
    let deadline = Instant::now() + Duration::from_secs(5);
    while errors() < u64::from(writer::MAX_FAILED_BATCHES) && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert_eq!(
        errors(),
        u64::from(writer::MAX_FAILED_BATCHES),
        "the attempt went on after its request was answered"
    );
    cancel.cancel();
}

#[tokio::test]
async fn counts_of_made_up_hooks_are_dropped_without_any_api_call() {
    let shared = serving_shared();
    lock(&shared.index).apply(hook("ns", "real", "u-real", 1));
    let (client, connections) = counting_client();
    let cancel = CancellationToken::new();
    let app = start_with(shared.clone(), client, cancel.clone(), fast());
    let mut executions: Vec<Value> = (0..3_000)
        .map(|i| {
            json!({"uid": format!("made-up-{i}"), "namespace": format!("ns-{}", i % 7),
                   "name": format!("hook-{i}"), "allow": 2, "block": 1})
        })
        .collect();
    // the right name with another uid is made up too
    executions.push(json!({"uid": "not-u-real", "namespace": "ns", "name": "real", "allow": 5}));
    let body = json!({"dispatcher": "d", "reportId": "made-up", "executions": executions});
    let (status, ack) = post(&app, body.to_string()).await;
    assert_eq!(status, StatusCode::OK, "{ack}");
    assert_eq!(
        ack,
        json!({"trips": 0, "executions": 0, "duplicate": false})
    );
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert_eq!(
        connections.load(std::sync::atomic::Ordering::SeqCst),
        0,
        "no API call"
    );
    assert_eq!(
        shared
            .metrics
            .execution_counts_dropped_total
            .with_label_values(&["unknown_hook"])
            .get(),
        3_000 * 3 + 5
    );
    assert_eq!(shared.metrics.execution_status_write_errors_total.get(), 0);
    cancel.cancel();
}

#[tokio::test]
async fn names_that_are_not_kubernetes_names_are_400() {
    let shared = serving_shared();
    let cancel = CancellationToken::new();
    let app = start_with(shared.clone(), dead_client(), cancel.clone(), fast());
    for (hook, field) in [
        (
            json!({"uid": "u", "namespace": "NS", "name": "h"}),
            "executions[0].namespace",
        ),
        (
            json!({"uid": "u", "namespace": "ns", "name": "h/../x"}),
            "executions[0].name",
        ),
    ] {
        let mut entry = hook.clone();
        entry["allow"] = json!(1);
        let body = json!({"dispatcher": "d", "reportId": "r", "executions": [entry]});
        let (status, answer) = post(&app, body.to_string()).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{answer}");
        assert!(
            answer["error"].as_str().unwrap().starts_with(field),
            "{answer}"
        );
    }
    cancel.cancel();
}

#[tokio::test]
async fn a_report_id_reused_for_another_body_is_409_and_ids_are_per_dispatcher() {
    let shared = serving_shared();
    let cancel = CancellationToken::new();
    let app = start_with(shared.clone(), dead_client(), cancel.clone(), fast());
    let report = |dispatcher: &str, allow: u64| {
        json!({"dispatcher": dispatcher, "reportId": "r1", "executions": [
            {"uid": "nobody", "namespace": "ns", "name": "h", "allow": allow}]})
    };
    let (status, ack) = post(&app, report("d", 1).to_string()).await;
    assert_eq!(
        (status, ack["duplicate"].clone()),
        (StatusCode::OK, json!(false))
    );
    // the same body again, formatted differently: a duplicate
    let (status, ack) = post(&app, serde_json::to_string_pretty(&report("d", 1)).unwrap()).await;
    assert_eq!(
        (status, ack["duplicate"].clone()),
        (StatusCode::OK, json!(true))
    );
    // the same id with other counts: refused, not silently dropped
    let (status, answer) = post(&app, report("d", 2).to_string()).await;
    assert_eq!(status, StatusCode::CONFLICT, "{answer}");
    let why = answer["error"].as_str().unwrap();
    assert!(why.contains("r1") && why.contains("another body"), "{why}");
    // another dispatcher's r1 is another report
    let (status, ack) = post(&app, report("e", 2).to_string()).await;
    assert_eq!(
        (status, ack["duplicate"].clone()),
        (StatusCode::OK, json!(false))
    );
    assert_eq!(
        (count(&shared, "conflict"), count(&shared, "applied")),
        (1, 2)
    );
    assert_eq!(
        shared
            .metrics
            .execution_counts_dropped_total
            .with_label_values(&["unknown_hook"])
            .get(),
        1 + 2,
        "the 409 applied nothing"
    );
    cancel.cancel();
}

#[tokio::test]
async fn a_last_answer_in_year_9999_does_not_hold_the_merged_breaker_closed() {
    let (shared, before) = published(&[("h", "u1", 1)]);
    let cancel = CancellationToken::new();
    let app = start_with(shared.clone(), dead_client(), cancel.clone(), fast());
    let observation = |last_answer: Option<&str>, run: Vec<String>| {
        let mut o = json!({"uid": "u1", "namespace": "ns", "name": "h", "generation": 1,
                           "tenant": "t1",
                           "run": run.iter().map(|at| json!({"at": at})).collect::<Vec<_>>()});
        if let Some(a) = last_answer {
            o["lastAnswerAt"] = json!(a);
        }
        o
    };
    let report = |d: &str, obs: Value| {
        json!({"dispatcher": d, "reportId": format!("{d}-{}", uuid::Uuid::new_v4()), "breaker": [obs]})
            .to_string()
    };
    let (status, _) = post(
        &app,
        report("d1", observation(Some("9999-12-31T23:59:59Z"), vec![])),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    tokio::time::sleep(Duration::from_millis(20)).await;
    let base = chrono::Utc::now();
    let at = |ms: i64| executions::format_time(base + chrono::Duration::milliseconds(ms));
    let (status, _) = post(&app, report("d2", observation(None, vec![at(0), at(100)]))).await;
    assert_eq!(status, StatusCode::OK);
    let (status, body) = post(
        &app,
        report("d3", observation(None, vec![at(200), at(300), at(400)])),
    )
    .await;
    assert_eq!(
        status,
        StatusCode::GATEWAY_TIMEOUT,
        "tripped (its status write fails here): {body}"
    );
    assert_eq!(shared.snapshots.borrow().version, before + 1);
    assert_eq!(
        snapshot_breakers(&shared, "h").map(|b| b.len()),
        Some(1),
        "t1 open"
    );
    cancel.cancel();
}

#[tokio::test]
async fn the_windows_forget_hooks_tripped_locally_deleted_or_edited() {
    let (shared, _) = published(&[("a", "ua", 1), ("b", "ub", 1), ("c", "uc", 1)]);
    let cancel = CancellationToken::new();
    let (client, _connections) = counting_client();
    let core = Arc::new(Core {
        shared: shared.clone(),
        client: client.clone(),
        writer: ExecutionWriter::new(Duration::from_millis(10)),
        log: Mutex::new(ReportLog::default()),
        windows: Mutex::new(BreakerWindows::new()),
        recorder: Recorder::new(
            client,
            Reporter {
                controller: "test".into(),
                instance: None,
            },
        ),
        ack_timeout: Duration::from_secs(1),
    });
    let now = chrono::Utc::now();
    let one_block = |name: &str, uid: &str| agenthooks_crds::report::BreakerObservation {
        uid: uid.into(),
        namespace: "ns".into(),
        name: name.into(),
        generation: 1,
        reset_token: None,
        tenant: "t1".into(),
        last_answer_at: None,
        run: vec![agenthooks_crds::report::RunOutcome {
            at: executions::format_time(now),
            timeout: false,
        }],
    };
    {
        let mut w = lock(&core.windows);
        for (name, uid) in [("a", "ua"), ("b", "ub"), ("c", "uc")] {
            w.observe("d1", &one_block(name, uid), now).unwrap();
        }
    }
    assert_eq!(prune_windows(&core, now), 3, "all current");
    // b deleted, c edited (generation 2): their windows go; a stays
    lock(&shared.index).delete(&HookKey::new("ns", "b"), None);
    lock(&shared.index).apply(hook("ns", "c", "uc", 2));
    assert_eq!(prune_windows(&core, now), 1);
    // a trips locally on a dispatcher: its window goes with the report
    let trip = json!({"dispatcher": "d2", "reportId": "t", "trips": [{
        "uid": "ua", "namespace": "ns", "name": "a", "generation": 1, "tenant": "t1",
        "trippedAt": executions::format_time(now), "reason": "5 errors"}]});
    let checked =
        validate::check(validate::parse(trip.to_string().as_bytes()).unwrap(), now).unwrap();
    let key = ("d2".to_string(), "t".to_string());
    let Begin::Start { progress, done } = lock(&core.log).begin(&key, [0; 32], Instant::now())
    else {
        panic!("a new report")
    };
    let mut rx = done.subscribe();
    tokio::spawn(apply(
        core.clone(),
        key,
        checked,
        progress,
        done,
        Received {
            instant: Instant::now(),
            time: now,
        },
    ));
    rx.wait_for(Option::is_some).await.unwrap();
    assert!(
        lock(&core.windows).is_empty(),
        "forgotten on the local trip"
    );
    // and old observations go by time
    lock(&core.windows)
        .observe("d1", &one_block("c", "uc"), now)
        .unwrap();
    assert_eq!(
        lock(&core.windows).prune(now + chrono::Duration::seconds(61)),
        0
    );
    cancel.cancel();
}

#[tokio::test]
async fn an_unavailable_list_is_kept_per_dispatcher_and_replaced_by_the_next() {
    let shared = serving_shared();
    let cancel = CancellationToken::new();
    let app = start_with(shared.clone(), dead_client(), cancel.clone(), fast());
    let entry = agenthooks_crds::report::UnavailableReport {
        uid: "u1".into(),
        namespace: "tenant-a".into(),
        name: "cmd".into(),
        generation: 2,
        error: "handler.type: command hooks need the lite edition".into(),
    };
    let report = Report {
        dispatcher: "std".into(),
        report_id: "u-1".into(),
        unavailable: Some(vec![entry.clone()]),
        ..Default::default()
    };
    let (status, body) = post(&app, report_json(&report)).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let live = |shared: &Shared| {
        crate::shared::lock(&shared.tracker).live(&shared.epoch, std::time::Instant::now())
    };
    assert_eq!(
        live(&shared).unavailable("u1", 2),
        vec![("std", entry.error.as_str())]
    );
    // The same id again: a duplicate, nothing changes.
    let (_, body) = post(&app, report_json(&report)).await;
    assert_eq!(body["duplicate"], true);
    // A report without the field leaves the list; an empty list clears it.
    let (status, _) = post(
        &app,
        report_json(&Report {
            dispatcher: "std".into(),
            report_id: "other".into(),
            ..Default::default()
        }),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(live(&shared).unavailable("u1", 2).len(), 1);
    let (status, _) = post(
        &app,
        report_json(&Report {
            dispatcher: "std".into(),
            report_id: "u-2".into(),
            unavailable: Some(vec![]),
            ..Default::default()
        }),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    assert!(live(&shared).unavailable("u1", 2).is_empty());
    cancel.cancel();
}

/// CONTRACT §9.4: a report naming another dispatcher than its authenticated caller is
/// 403 naming `dispatcher`, and nothing of it happens: no trip, no count, no unavailable
/// list, no API call, and its `reportId` is not recorded (the named dispatcher's own
/// report with that id is applied afterwards).
#[tokio::test]
async fn a_report_for_another_dispatcher_is_403_and_changes_nothing() {
    let (shared, before) = published(&[("h", "u1", 2)]);
    let cancel = CancellationToken::new();
    let (client, connections) = counting_client();
    let app = start_with(shared.clone(), client, cancel.clone(), fast());
    let forged = json!({"dispatcher": "ns/disp-a", "reportId": "r1",
        "trips": [{"uid": "u1", "namespace": "ns", "name": "h", "generation": 2,
            "tenant": "t1", "trippedAt": "2025-03-01T10:00:00Z", "failClosed": false,
            "reason": "forged"}],
        "executions": [{"uid": "u1", "namespace": "ns", "name": "h", "allow": 5}],
        "unavailable": [{"uid": "u1", "namespace": "ns", "name": "h", "generation": 2,
            "error": "forged"}]});
    let (status, answer) = post_as(&app, "ns/disp-b", forged.to_string()).await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{answer}");
    assert_eq!(
        answer,
        json!({"error": "dispatcher: this caller is ns/disp-b, not ns/disp-a", "field": "dispatcher"})
    );
    assert_eq!(
        (count(&shared, "forbidden"), count(&shared, "applied")),
        (1, 0)
    );
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(
        connections.load(std::sync::atomic::Ordering::SeqCst),
        0,
        "no API call"
    );
    assert_eq!(
        shared.snapshots.borrow().version,
        before,
        "nothing republished"
    );
    assert_eq!(snapshot_breakers(&shared, "h"), Some(vec![]), "no trip");
    assert!(
        lock(&shared.index)
            .get(&HookKey::new("ns", "h"))
            .unwrap()
            .open_breakers()
            .is_empty()
    );
    // The named dispatcher's own r1 (another body) is a new report, not a 409.
    let own = json!({"dispatcher": "ns/disp-a", "reportId": "r1"});
    let (status, ack) = post_as(&app, "ns/disp-a", own.to_string()).await;
    assert_eq!(status, StatusCode::OK, "{ack}");
    assert_eq!(ack["duplicate"], false);
    assert_eq!(count(&shared, "conflict"), 0);
    cancel.cancel();
}
