//! Budget accounting across dispatchers on the real API server (issue 3 point 3,
//! cases/README "Budgets and breakers across replicas"): 40 concurrent reservations of
//! 100 on 1,000 admit exactly 10; a forced 409 on the settle write is retried from a fresh
//! read and `used` stays exact; many concurrent settles through two writers (an old and
//! a new leader during a failover) sum exactly; releases, duplicates and bad requests;
//! settles capped at their reservation (or the per-call maximum) and refused for another
//! dispatcher's or tenant's reservation; settled tokens that stay counted while their
//! status write keeps failing, past the reservation TTL, and are written once it works.

mod budget_support;

use std::time::Duration;

use agenthooks_operator::budget;
use agenthooks_operator::budget::ledger::MAX_CALL_TOKENS;
use axum::http::StatusCode;
use budget_support::*;
use serde_json::{Value, json};

const WAIT: Duration = Duration::from_secs(20);
/// Settle writes sent, and the 409s they met (the operator's status write metrics).
const SETTLE_WRITES: &str =
    "agenthooks_operator_status_writes_total{kind=\"budget_settle\",outcome=\"written\"}";
const SETTLE_CONFLICTS: &str =
    "agenthooks_operator_status_write_conflicts_total{kind=\"budget_settle\"}";

async fn ready_budget(
    tokens: i64,
    prefix: &str,
) -> (
    &'static agenthooks_e2e::ControlPlane,
    String,
    String,
    String,
    Replica,
) {
    let cp = control_plane().await;
    let master = namespace(cp, "ah-budget-sys", None).await;
    let tenant = agenthooks_e2e::unique_name(prefix);
    let ns = namespace(cp, "tenant", Some(&tenant)).await;
    let r = Replica::leading(cp, &master).await;
    budget(cp, &ns, "b", tokens, None).await;
    wait_budget(cp, &ns, "b", WAIT, |v| v["status"]["remaining"] == tokens).await;
    // installed in the ledger: a reserve of 1 is granted, then released
    let v = r
        .reserve_until("probe", &tenant, 1, |v| v["granted"] == true)
        .await;
    let (status, _) = r
        .settle(
            "probe",
            &tenant,
            v["reservationId"].as_str().unwrap_or(""),
            0,
        )
        .await;
    assert_eq!(status, StatusCode::OK);
    (cp, master, tenant, ns, r)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn forty_concurrent_calls_of_100_on_1000_admit_ten_and_used_is_their_sum() {
    let _serial = serial().await;
    let (cp, _master, tenant, ns, r) = ready_budget(1000, "acme").await;
    let r = std::sync::Arc::new(r);
    let calls: Vec<_> = (0..40)
        .map(|i| {
            let r = r.clone();
            let tenant = tenant.clone();
            tokio::spawn(async move {
                let dispatcher = if i % 2 == 0 {
                    "dispatcher-a"
                } else {
                    "dispatcher-b"
                };
                (dispatcher, r.reserve(dispatcher, &tenant, 100).await)
            })
        })
        .collect();
    let mut granted = Vec::new();
    for call in calls {
        let (dispatcher, (status, v)) = call.await.expect("task");
        assert_eq!(status, StatusCode::OK, "{v}");
        let remaining = v["remaining"].as_i64().expect("remaining");
        assert!(remaining >= 0, "remaining never below zero: {v}");
        if v["granted"] == true {
            granted.push((
                dispatcher,
                v["reservationId"].as_str().expect("id").to_string(),
            ));
        } else {
            assert_eq!(
                v["reason"], "BudgetExhausted",
                "refused with a budget reason: {v}"
            );
        }
    }
    assert_eq!(granted.len(), 10, "exactly what the budget holds");

    // the calls cost 90 each: settled concurrently (each by the dispatcher that
    // reserved), used is their exact sum
    let settles: Vec<_> = granted
        .into_iter()
        .map(|(dispatcher, id)| {
            let r = r.clone();
            let tenant = tenant.clone();
            tokio::spawn(async move { r.settle(dispatcher, &tenant, &id, 90).await })
        })
        .collect();
    for s in settles {
        let (status, v) = s.await.expect("task");
        assert_eq!(status, StatusCode::OK, "{v}");
    }
    let v = get(cp, &ns, "b").await;
    assert_eq!(
        (
            v["status"]["used"].as_i64(),
            v["status"]["remaining"].as_i64()
        ),
        (Some(900), Some(100))
    );
    assert_eq!(v["status"]["state"], "Warning");
    // 100 left, nothing held
    let (_, v) = r.reserve("dispatcher-b", &tenant, 100).await;
    assert_eq!(
        (v["granted"].as_bool(), v["remaining"].as_i64()),
        (Some(true), Some(0)),
        "{v}"
    );
    assert_eq!(
        r.metric("agenthooks_budget_reservations_total{result=\"granted\"}"),
        12.0
    );
    assert_eq!(
        r.metric("agenthooks_budget_reservations_total{result=\"exhausted\"}"),
        30.0
    );
    if let Ok(r) = std::sync::Arc::try_unwrap(r) {
        r.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_conflicting_write_is_retried_from_a_fresh_read_and_used_stays_exact() {
    let _serial = serial().await;
    let (cp, _master, tenant, ns, r) = ready_budget(10_000, "conflict").await;
    let v = r
        .reserve_until("d1", &tenant, 500, |v| v["granted"] == true)
        .await;
    let (status, v) = r
        .settle(
            "d1",
            &tenant,
            v["reservationId"].as_str().unwrap_or(""),
            100,
        )
        .await;
    assert_eq!(
        (status, v["used"].as_i64()),
        (StatusCode::OK, Some(100)),
        "{v}"
    );
    let conflicts = r.metric(SETTLE_CONFLICTS);

    // another writer (an old leader, an administrator) adds 400 after our last write: our
    // writer's next write is based on the object it wrote, so it meets 409
    kubectl(
        cp,
        &[
            "-n",
            &ns,
            "patch",
            "tenanthookbudget",
            "b",
            "--subresource=status",
            "--type=merge",
            "-p",
            r#"{"status":{"used":500,"remaining":9500}}"#,
        ],
    )
    .await;
    let v = r
        .reserve_until("d1", &tenant, 50, |v| v["granted"] == true)
        .await;
    let (status, v) = r
        .settle("d1", &tenant, v["reservationId"].as_str().unwrap_or(""), 50)
        .await;
    assert_eq!(status, StatusCode::OK, "{v}");
    assert_eq!(
        v["used"], 550,
        "the retry added to the fresh 500, not to the stale 100: {v}"
    );
    assert!(
        r.metric(SETTLE_CONFLICTS) >= conflicts + 1.0,
        "the conflict was met and retried"
    );
    let v = get(cp, &ns, "b").await;
    assert_eq!(
        (
            v["status"]["used"].as_i64(),
            v["status"]["remaining"].as_i64()
        ),
        (Some(550), Some(9450))
    );
    r.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_settles_through_two_writers_sum_exactly() {
    let _serial = serial().await;
    let (cp, master, tenant, ns, old_leader) = ready_budget(10_000_000, "failover").await;
    // a second replica also believes it leads (the old leader has not noticed yet)
    let new_leader = Replica::leading(cp, &master).await;
    new_leader
        .reserve_until("probe", &tenant, 1, |v| v["granted"] == true)
        .await;
    let replicas = std::sync::Arc::new([old_leader, new_leader]);

    let tasks: Vec<_> = (0..8)
        .map(|t| {
            let replicas = replicas.clone();
            let tenant = tenant.clone();
            tokio::spawn(async move {
                let mut sum = 0i64;
                for i in 0..25 {
                    let tokens = (t * 25 + i) as i64 % 97 + 1;
                    let r = &replicas[(t + i) % 2];
                    // ids this replica never reserved (as after a failover): still counted
                    let id = format!("{:032x}", t * 1000 + i);
                    // a dispatcher retries an unacknowledged settle with the same id
                    let mut retried = 0;
                    let v = loop {
                        let (status, v) = r.settle(&format!("d{t}"), &tenant, &id, tokens).await;
                        if status == StatusCode::SERVICE_UNAVAILABLE && v["leader"] == true {
                            retried += 1;
                            assert!(retried < 10, "{v}");
                            continue;
                        }
                        assert_eq!(status, StatusCode::OK, "{v}");
                        break v;
                    };
                    assert!(retried > 0 || v["duplicate"] == false, "{v}");
                    sum += tokens;
                }
                sum
            })
        })
        .collect();
    let mut expected = 0;
    for t in tasks {
        expected += t.await.expect("task");
    }
    let v = get(cp, &ns, "b").await;
    assert_eq!(
        v["status"]["used"].as_i64(),
        Some(expected),
        "no lost update"
    );
    let writes: f64 = replicas.iter().map(|r| r.metric(SETTLE_WRITES)).sum();
    assert!(
        writes < 200.0,
        "settles were written in groups: {writes} writes for 200 settles"
    );
    eprintln!(
        "200 settles: {writes} writes, {} conflicts retried",
        replicas
            .iter()
            .map(|r| r.metric(SETTLE_CONFLICTS))
            .sum::<f64>()
    );
    if let Ok(replicas) = std::sync::Arc::try_unwrap(replicas) {
        for r in replicas {
            r.stop().await;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn release_duplicates_and_unknown_tenants() {
    let _serial = serial().await;
    let (cp, _master, tenant, ns, r) = ready_budget(1000, "release").await;
    let v = r
        .reserve_until("d1", &tenant, 1000, |v| v["granted"] == true)
        .await;
    let id = v["reservationId"].as_str().expect("id").to_string();
    let (_, v) = r.reserve("d1", &tenant, 1).await;
    assert_eq!(v["granted"], false, "all of it is held");

    // the call failed: release
    let (status, v) = r.settle("d1", &tenant, &id, 0).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(
        (
            v["used"].as_i64(),
            v["remaining"].as_i64(),
            v["duplicate"].as_bool()
        ),
        (Some(0), Some(1000), Some(false))
    );
    let v = r
        .reserve_until("d1", &tenant, 300, |v| v["granted"] == true)
        .await;
    let id = v["reservationId"].as_str().expect("id").to_string();

    // a settle retried after a lost answer counts once
    let (_, first) = r.settle("d1", &tenant, &id, 120).await;
    let (status, again) = r.settle("d1", &tenant, &id, 120).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(
        (first["used"].as_i64(), first["duplicate"].as_bool()),
        (Some(120), Some(false))
    );
    assert_eq!(
        (again["used"].as_i64(), again["duplicate"].as_bool()),
        (Some(120), Some(true))
    );
    assert_eq!(get(cp, &ns, "b").await["status"]["used"], 120);

    // a tenant without a budget: fail closed
    let (status, v) = r.reserve("d1", "no-such-tenant", 1).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(
        v,
        json!({"granted": false, "reason": "BudgetNotFound", "remaining": 0})
    );
    let (status, v) = r
        .settle("d1", "no-such-tenant", &format!("{:032x}", 7), 5)
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert_eq!(v["reason"], "BudgetNotFound");
    r.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn bad_requests_name_the_field() {
    let _serial = serial().await;
    let cp = control_plane().await;
    let master = namespace(cp, "ah-budget-sys", None).await;
    let r = Replica::leading(cp, &master).await;
    let reserve = |body: Value| {
        let r = &r;
        async move { r.post("/v1/budget/reserve", body).await }
    };
    for (body, field) in [
        (
            json!({"dispatcher": "d", "tenant": "t", "tokens": 0}),
            "tokens",
        ),
        (
            json!({"dispatcher": "d", "tenant": "t", "tokens": -5}),
            "tokens",
        ),
        (
            json!({"dispatcher": "", "tenant": "t", "tokens": 1}),
            "dispatcher",
        ),
        (
            json!({"dispatcher": "d", "tenant": "", "tokens": 1}),
            "tenant",
        ),
        (json!({"dispatcher": "d", "tokens": 1}), "tenant"),
        (
            json!({"dispatcher": "d", "tenant": "t", "tokens": "many"}),
            "tokens",
        ),
        (
            json!({"dispatcher": "d", "tenant": "t", "tokens": MAX_CALL_TOKENS + 1}),
            "tokens",
        ),
    ] {
        let (status, v) = reserve(body.clone()).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{body}: {v}");
        assert_eq!(v["field"], field, "{body}: {v}");
        assert!(
            v["error"].as_str().unwrap_or("").contains(field),
            "{body}: {v}"
        );
    }
    for (body, field) in [
        (
            json!({"dispatcher": "d", "tenant": "t", "reservationId": "0123456789abcdef0123456789abcdef", "tokens": -1}),
            "tokens",
        ),
        (
            json!({"dispatcher": "d", "tenant": "t", "reservationId": "", "tokens": 1}),
            "reservationId",
        ),
        (
            json!({"dispatcher": "d", "tenant": "t", "tokens": 1}),
            "reservationId",
        ),
        (
            json!({"dispatcher": "d", "tenant": "t", "reservationId": "x".repeat(253), "tokens": 1}),
            "reservationId",
        ),
        (
            json!({"dispatcher": "d", "tenant": "t", "reservationId": "0123456789ABCDEF0123456789ABCDEF", "tokens": 1}),
            "reservationId",
        ),
    ] {
        let (status, v) = r.post("/v1/budget/settle", body.clone()).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{body}: {v}");
        assert_eq!(v["field"], field, "{body}: {v}");
    }
    let big = json!({"dispatcher": "d", "tenant": "t", "tokens": 1, "hook": "x".repeat(70 * 1024)});
    let (status, v) = r.post("/v1/budget/reserve", big).await;
    assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE, "{v}");
    let (status, v) = r.post_raw("/v1/budget/settle", b"not json".to_vec()).await;
    assert_eq!(
        (status, v["field"].as_str()),
        (StatusCode::BAD_REQUEST, Some("body")),
        "{v}"
    );
    r.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_settle_counts_at_most_its_reservation_and_only_from_whoever_reserved() {
    let _serial = serial().await;
    let (cp, _master, tenant, ns, r) = ready_budget(10_000_000, "capped").await;
    let other_tenant = agenthooks_e2e::unique_name("other");
    let other_ns = namespace(cp, "tenant", Some(&other_tenant)).await;
    budget(cp, &other_ns, "b", 1000, None).await;
    r.reserve_until("d9", &other_tenant, 1, |v| v["granted"] == true)
        .await;
    let v = r
        .reserve_until("d1", &tenant, 300, |v| v["granted"] == true)
        .await;
    let id = v["reservationId"].as_str().expect("id").to_string();

    // another dispatcher: 403 naming reservationId (it does not hold it); the right one
    // naming another tenant: 409; nothing counted either way
    let (status, v) = r.settle("d2", &tenant, &id, 300).await;
    assert_eq!(
        (status, v["field"].as_str()),
        (StatusCode::FORBIDDEN, Some("reservationId")),
        "{v}"
    );
    let error = v["error"].as_str().unwrap_or("");
    assert!(
        error.contains("dispatcher d1, not d2"),
        "names both dispatchers: {v}"
    );
    let (status, v) = r.settle("d1", &other_tenant, &id, 300).await;
    assert_eq!(status, StatusCode::CONFLICT, "{v}");
    let error = v["error"].as_str().unwrap_or("");
    assert!(
        error.contains(&tenant) && error.contains(&other_tenant),
        "names both tenants: {v}"
    );
    assert_eq!(get(cp, &other_ns, "b").await["status"]["used"], 0);
    assert_eq!(
        r.metric("agenthooks_budget_settles_total{result=\"mismatch\"}"),
        1.0
    );
    assert_eq!(
        r.metric("agenthooks_budget_settles_total{result=\"not_holder\"}"),
        1.0
    );

    // its dispatcher settles far more than it reserved: 300 counted, the rest logged
    let (status, v) = r.settle("d1", &tenant, &id, 5_000).await;
    assert_eq!(
        (status, v["used"].as_i64()),
        (StatusCode::OK, Some(300)),
        "{v}"
    );
    assert_eq!(
        r.metric("agenthooks_budget_settle_overage_tokens_total{cap=\"reservation\"}"),
        4_700.0
    );
    // an id this leader never granted: at most the per-call maximum
    let (status, v) = r
        .settle("d1", &tenant, &format!("{:032x}", 0xfeed), 3_000_000)
        .await;
    assert_eq!(
        (status, v["used"].as_i64()),
        (StatusCode::OK, Some(300 + MAX_CALL_TOKENS)),
        "{v}"
    );
    assert_eq!(
        r.metric("agenthooks_budget_settle_overage_tokens_total{cap=\"absolute\"}"),
        (3_000_000 - MAX_CALL_TOKENS) as f64
    );
    assert_eq!(
        get(cp, &ns, "b").await["status"]["used"].as_i64(),
        Some(300 + MAX_CALL_TOKENS)
    );
    r.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn settled_tokens_stay_counted_while_their_write_fails_past_the_reservation_ttl() {
    let _serial = serial().await;
    let cp = control_plane().await;
    let master = namespace(cp, "ah-budget-sys", None).await;
    let tenant = agenthooks_e2e::unique_name("stuck");
    let ns = namespace(cp, "tenant", Some(&tenant)).await;
    let ttl = Duration::from_secs(2);
    let r = Replica::leading_with(
        cp,
        &master,
        budget::Settings {
            reservation_ttl: ttl,
            settle_wait: Duration::from_secs(2),
            write_retry_first: Duration::from_millis(100),
            write_retry_max: Duration::from_millis(500),
            ..no_hold_off()
        },
    )
    .await;
    budget(cp, &ns, "b", 1000, None).await;
    wait_budget(cp, &ns, "b", WAIT, |v| v["status"]["remaining"] == 1000).await;
    let v = r
        .reserve_until("d1", &tenant, 600, |v| v["granted"] == true)
        .await;
    let id = v["reservationId"].as_str().expect("id").to_string();

    // from now on the API server refuses every status write of this budget
    let deny = DenyStatusWrites::install(cp, &ns, "b").await;
    let (status, v) = r.settle("d1", &tenant, &id, 500).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{v}");
    assert!(
        v["error"].as_str().unwrap_or("").contains("stay counted"),
        "{v}"
    );
    // longer than the reservation's TTL: the 500 still count (before: the write's
    // failure uncounted them and the reservation expired, so 1,000 were free again)
    tokio::time::sleep(ttl * 2).await;
    let (_, v) = r.reserve("d2", &tenant, 501).await;
    assert_eq!(
        (
            v["granted"].as_bool(),
            v["reason"].as_str(),
            v["remaining"].as_i64()
        ),
        (Some(false), Some("BudgetExhausted"), Some(500)),
        "{v}"
    );
    assert_eq!(get(cp, &ns, "b").await["status"]["used"], 0, "not written");
    assert!(r.metric("agenthooks_budget_settle_write_failures_total") >= 2.0);
    assert_eq!(
        r.metric(&format!(
            "agenthooks_budget_unwritten_tokens{{tenant=\"{tenant}\"}}"
        )),
        500.0
    );
    // the dispatcher retries the settle (same id): it joins, still not written
    let (status, _) = r.settle("d1", &tenant, &id, 500).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);

    // writes work again: the background retry writes the 500 once
    deny.remove(&ns, "b").await;
    wait_budget(cp, &ns, "b", WAIT, |v| v["status"]["used"] == 500).await;
    let (status, v) = r.settle("d1", &tenant, &id, 500).await;
    assert_eq!(
        (status, v["used"].as_i64(), v["duplicate"].as_bool()),
        (StatusCode::OK, Some(500), Some(true)),
        "{v}"
    );
    let (_, v) = r.reserve("d2", &tenant, 500).await;
    assert_eq!(
        (v["granted"].as_bool(), v["remaining"].as_i64()),
        (Some(true), Some(0)),
        "{v}"
    );
    assert_eq!(
        r.metric(&format!(
            "agenthooks_budget_unwritten_tokens{{tenant=\"{tenant}\"}}"
        )),
        0.0
    );
    assert_eq!(get(cp, &ns, "b").await["status"]["used"], 500);
    r.stop().await;
}
