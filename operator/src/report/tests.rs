//! `POST /v1/report` without an API server: refusals, leadership, duplicates, and the
//! trip that leaves the snapshot before (and whatever happens to) its status write. The
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

/// A client for an address nothing listens on: every API call fails at once.
fn dead_client() -> Client {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let url = format!("http://127.0.0.1:{port}").parse().unwrap();
    Client::try_from(kube::Config::new(url)).unwrap()
}

fn serving_shared() -> Arc<Shared> {
    let shared = Shared::new(config(), Metrics::new().unwrap());
    shared.set_leader(true);
    shared.set_synced(true);
    shared
}

fn fast() -> ReportConfig {
    ReportConfig {
        write_interval: Duration::from_millis(10),
        ack_timeout: Duration::from_secs(5),
    }
}

async fn post(app: &Router, body: impl Into<Body>) -> (StatusCode, Value) {
    let resp = app
        .clone()
        .oneshot(
            Request::post("/v1/report")
                .header("content-type", "application/json")
                .body(body.into())
                .unwrap(),
        )
        .await
        .unwrap();
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
        "uid": "u1", "namespace": "ns", "name": "h", "generation": 1,
        "trippedAt": "2025-03-01T10:00:00Z", "reason": "5 blocks"}]});
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
    assert_eq!(
        lock(&shared.index).published_len(),
        1,
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
            tripped_at: "2025-03-01T10:00:00Z".into(),
            reason: "5 blocks".into(),
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

#[tokio::test]
async fn a_trip_leaves_the_snapshot_before_its_status_write() {
    let shared = serving_shared();
    lock(&shared.index).apply(hook("ns", "h", "u1", 2));
    lock(&shared.index).apply(hook("ns", "other", "u2", 1));
    shared.publish_now().unwrap();
    let before = shared.snapshots.borrow().version;
    let cancel = CancellationToken::new();
    let app = start_with(shared.clone(), dead_client(), cancel.clone(), fast());
    let trip = |generation: i64, token: Option<&str>| TripReport {
        uid: "u1".into(),
        namespace: "ns".into(),
        name: "h".into(),
        generation,
        reset_token: token.map(str::to_string),
        tripped_at: "2025-03-01T10:00:00Z".into(),
        reason: "5 blocks in a row".into(),
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
    let published = shared.snapshots.borrow().clone();
    assert_eq!(published.version, before + 1);
    let snapshot: Snapshot = serde_json::from_slice(&published.body).unwrap();
    let names: Vec<&str> = snapshot.hooks.iter().map(|h| h.name.as_str()).collect();
    assert_eq!(names, ["other"], "the tripped hook is out");
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
    assert_eq!(
        shared
            .metrics
            .breaker_trips_total
            .with_label_values(&["failed"])
            .get(),
        1
    );
    // the retry (same id) tries the status write again but publishes nothing new
    let (status, _) = post(&app, report_json(&live)).await;
    assert_eq!(status, StatusCode::GATEWAY_TIMEOUT);
    assert_eq!(shared.snapshots.borrow().version, before + 1);
    assert_eq!(
        shared
            .metrics
            .breaker_trips_total
            .with_label_values(&["failed"])
            .get(),
        2
    );
    cancel.cancel();
}

#[tokio::test]
async fn runs_merged_over_three_dispatchers_trip_the_hook() {
    let shared = serving_shared();
    lock(&shared.index).apply(hook("ns", "h", "u1", 1));
    shared.publish_now().unwrap();
    let before = shared.snapshots.borrow().version;
    let cancel = CancellationToken::new();
    let app = start_with(shared.clone(), dead_client(), cancel.clone(), fast());
    let t0 = chrono::Utc::now() - chrono::Duration::seconds(10);
    let at = |s: i64| executions::format_time(t0 + chrono::Duration::seconds(s));
    let observation = |generation: i64, run: &[i64]| {
        json!({"uid": "u1", "namespace": "ns", "name": "h", "generation": generation,
               "run": run.iter().map(|s| json!({"at": at(*s)})).collect::<Vec<_>>()})
    };
    let report = |d: &str, obs: Value| {
        json!({"dispatcher": d, "reportId": format!("{d}-{}", uuid::Uuid::new_v4()), "breaker": [obs]})
            .to_string()
    };
    // observations of another generation are not counted
    let (status, _) = post(&app, report("d0", observation(7, &[0, 1, 2, 3, 4]))).await;
    assert_eq!(status, StatusCode::OK);
    // two blocks on each of three dispatchers, interleaved in time
    let (status, _) = post(&app, report("d1", observation(1, &[0, 3]))).await;
    assert_eq!(status, StatusCode::OK);
    let (status, _) = post(&app, report("d2", observation(1, &[1, 4]))).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(
        shared.snapshots.borrow().version,
        before,
        "four do not trip"
    );
    // the fifth trips; its status write fails here (no API server) but the hook is out
    let fifth = report("d3", observation(1, &[2, 5]));
    let (status, body) = post(&app, fifth.clone()).await;
    assert_eq!(status, StatusCode::GATEWAY_TIMEOUT, "{body}");
    assert_eq!(shared.snapshots.borrow().version, before + 1);
    assert_eq!(shared.snapshots.borrow().hooks, 0);
    assert_eq!(
        lock(&shared.index).publication(&HookKey::new("ns", "h")),
        Some(crate::index::Publication::BreakerOpen)
    );
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
    cancel.cancel();
}

#[tokio::test]
async fn counts_that_cannot_be_written_answer_504() {
    let shared = serving_shared();
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
