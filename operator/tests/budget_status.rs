//! The TenantHookBudget reconciler on the real API server (issue 3 point 2): status and
//! printer columns, Warning below 20% and Exhausted at 0 with their Events, tenant rules
//! and duplicate budgets, the monthly rollover, no writes for a budget left alone, and
//! nothing done once leadership is lost.

mod budget_support;

use std::time::Duration;

use axum::http::StatusCode;
use budget_support::*;
use serde_json::Value;

const WAIT: Duration = Duration::from_secs(20);

fn status_is(v: &Value, used: i64, remaining: i64, state: &str) -> bool {
    let s = &v["status"];
    s["used"] == used && s["remaining"] == remaining && s["state"] == state
}

/// Reserves and settles `tokens` (one call), asserting both answers.
async fn spend(r: &Replica, tenant: &str, tokens: i64) -> Value {
    let v = r
        .reserve_until("d1", tenant, tokens, |v| v["granted"] == true)
        .await;
    let id = v["reservationId"].as_str().expect("id").to_string();
    let (status, v) = r.settle("d1", tenant, &id, tokens).await;
    assert_eq!(status, StatusCode::OK, "{v}");
    v
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn status_printer_columns_states_and_events() {
    let _serial = serial().await;
    let cp = control_plane().await;
    let master = namespace(cp, "ah-budget-sys", None).await;
    let tenant = agenthooks_e2e::unique_name("acme");
    let ns = namespace(cp, "tenant", Some(&tenant)).await;
    let r = Replica::leading(cp, &master).await;
    budget(cp, &ns, "monthly", 1000, None).await;

    let v = wait_budget(cp, &ns, "monthly", WAIT, |v| status_is(v, 0, 1000, "Ok")).await;
    assert_eq!(v["status"]["period"], this_period().as_str());
    assert_eq!(v["status"]["observedGeneration"], 1);
    let acc = accepted(&v);
    assert_eq!(
        (acc["status"].as_str(), acc["reason"].as_str()),
        (Some("True"), Some("Accepted"))
    );
    assert!(
        acc["message"].as_str().unwrap_or("").contains(&tenant),
        "{acc}"
    );

    // printer columns, as a person sees them
    let t = table(cp, &ns, "monthly").await;
    assert_eq!(
        row(&t, 0),
        ["NAME", "PERIOD", "USED", "REMAINING", "STATE", "AGE"],
        "{t}"
    );
    assert_eq!(
        row(&t, 1)[..5],
        ["monthly", &this_period(), "0", "1000", "Ok"],
        "{t}"
    );

    // 850 spent: 150 left is below 20% -> Warning
    let answer = spend(&r, &tenant, 850).await;
    assert_eq!(
        (answer["used"].as_i64(), answer["remaining"].as_i64()),
        (Some(850), Some(150))
    );
    assert_eq!(answer["state"], "Warning");
    let v = get(cp, &ns, "monthly").await;
    assert!(
        status_is(&v, 850, 150, "Warning"),
        "the settle answered after the write: {}",
        v["status"]
    );
    let t = table(cp, &ns, "monthly").await;
    assert_eq!(
        row(&t, 1)[..5],
        ["monthly", &this_period(), "850", "150", "Warning"],
        "{t}"
    );

    // the rest: Exhausted, and a reserve is refused with the budget's reason
    let answer = spend(&r, &tenant, 150).await;
    assert_eq!(answer["state"], "Exhausted");
    assert!(status_is(
        &get(cp, &ns, "monthly").await,
        1000,
        0,
        "Exhausted"
    ));
    let (status, v) = r.reserve("d2", &tenant, 1).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(
        (
            v["granted"].as_bool(),
            v["reason"].as_str(),
            v["remaining"].as_i64()
        ),
        (Some(false), Some("BudgetExhausted"), Some(0))
    );
    assert_eq!(v["budget"], format!("{ns}/monthly"));

    // raising the total is a spec change: Ok again, observedGeneration 2
    budget(cp, &ns, "monthly", 2000, None).await;
    let v = wait_budget(cp, &ns, "monthly", WAIT, |v| status_is(v, 1000, 1000, "Ok")).await;
    assert_eq!(v["status"]["observedGeneration"], 2);

    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let reasons = event_reasons(cp, &ns, "monthly").await;
        let want = ["Accepted", "BudgetWarning", "BudgetExhausted", "BudgetOk"];
        if reasons == want {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "events {reasons:?}, want {want:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert_eq!(
        r.metric(&format!(
            "agenthooks_budget_remaining_tokens{{tenant=\"{tenant}\"}}"
        )),
        1000.0
    );
    r.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn tenant_rules_and_the_oldest_duplicate_wins() {
    let _serial = serial().await;
    let cp = control_plane().await;
    let master = namespace(cp, "ah-budget-sys", None).await;
    let tenant = agenthooks_e2e::unique_name("globex");
    let ns = namespace(cp, "tenant", Some(&tenant)).await;
    let r = Replica::leading(cp, &master).await;

    // master namespace without spec.tenant; a tenant namespace naming another tenant
    budget(cp, &master, "no-tenant", 1000, None).await;
    budget(cp, &ns, "other", 1000, Some("someone-else")).await;
    let v = wait_budget(cp, &master, "no-tenant", WAIT, |v| {
        accepted(v)["status"] == "False"
    })
    .await;
    assert_eq!(accepted(&v)["reason"], "TenantRequired");
    assert!(
        accepted(&v)["message"]
            .as_str()
            .unwrap_or("")
            .starts_with("spec.tenant")
    );
    let v = wait_budget(cp, &ns, "other", WAIT, |v| accepted(v)["status"] == "False").await;
    assert_eq!(accepted(&v)["reason"], "TenantMismatch");
    assert!(
        accepted(&v)["message"]
            .as_str()
            .unwrap_or("")
            .contains("someone-else")
    );

    // two valid budgets of one tenant: the oldest wins, the other names it
    budget(cp, &master, "first", 300, Some(&tenant)).await;
    tokio::time::sleep(Duration::from_millis(1100)).await; // creationTimestamp has seconds
    budget(cp, &ns, "second", 5000, None).await;
    wait_budget(cp, &master, "first", WAIT, |v| {
        accepted(v)["status"] == "True"
    })
    .await;
    let v = wait_budget(cp, &ns, "second", WAIT, |v| {
        accepted(v)["reason"] == "DuplicateBudget"
    })
    .await;
    assert!(
        accepted(&v)["message"]
            .as_str()
            .unwrap_or("")
            .contains(&format!("{master}/first")),
        "{}",
        accepted(&v)
    );
    let first = format!("{master}/first");
    let v = r
        .reserve_until("d1", &tenant, 301, |v| v["budget"] == first.as_str())
        .await;
    assert_eq!(
        (v["granted"].as_bool(), v["reason"].as_str()),
        (Some(false), Some("BudgetExhausted")),
        "{v}"
    );

    // the winner goes away: the other one takes over
    kubectl(cp, &["-n", &master, "delete", "tenanthookbudget", "first"]).await;
    wait_budget(cp, &ns, "second", WAIT, |v| accepted(v)["status"] == "True").await;
    let v = r
        .reserve_until("d1", &tenant, 301, |v| v["granted"] == true)
        .await;
    assert_eq!(v["budget"], format!("{ns}/second"));
    let reasons = event_reasons(cp, &ns, "second").await;
    assert_eq!(
        reasons.first().map(String::as_str),
        Some("DuplicateBudget"),
        "{reasons:?}"
    );
    assert!(reasons.iter().any(|r| r == "Accepted"), "{reasons:?}");
    r.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_new_month_starts_a_new_period_and_keeps_the_total() {
    let _serial = serial().await;
    let cp = control_plane().await;
    let master = namespace(cp, "ah-budget-sys", None).await;
    let tenant = agenthooks_e2e::unique_name("initech");
    let ns = namespace(cp, "tenant", Some(&tenant)).await;
    let r = Replica::leading(cp, &master).await;
    budget(cp, &ns, "b", 1000, None).await;
    wait_budget(cp, &ns, "b", WAIT, |v| status_is(v, 0, 1000, "Ok")).await;
    spend(&r, &tenant, 400).await;

    // the recorded status is from an older month (as if the operator had been away)
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
            r#"{"status":{"period":"2000-01","used":990,"remaining":10,"state":"Warning"}}"#,
        ],
    )
    .await;
    let v = wait_budget(cp, &ns, "b", WAIT, |v| {
        v["status"]["period"] == this_period().as_str()
    })
    .await;
    assert!(
        status_is(&v, 0, 1000, "Ok"),
        "used back to 0, the total kept: {}",
        v["status"]
    );
    let deadline = tokio::time::Instant::now() + WAIT;
    while !event_reasons(cp, &ns, "b")
        .await
        .iter()
        .any(|r| r == "NewPeriod")
    {
        assert!(tokio::time::Instant::now() < deadline, "no NewPeriod event");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    // a settle landing on an old period resets used first
    let v = r
        .reserve_until("d1", &tenant, 100, |v| v["granted"] == true)
        .await;
    let id = v["reservationId"].as_str().expect("granted").to_string();
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
            r#"{"status":{"period":"2000-02","used":500,"remaining":500,"state":"Ok"}}"#,
        ],
    )
    .await;
    let (status, v) = r.settle("d1", &tenant, &id, 70).await;
    assert_eq!(status, StatusCode::OK, "{v}");
    assert_eq!(v["used"], 70, "{v}");
    let v = get(cp, &ns, "b").await;
    assert_eq!(
        (v["status"]["period"].as_str(), v["status"]["used"].as_i64()),
        (Some(this_period().as_str()), Some(70))
    );
    r.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_budget_left_alone_is_not_rewritten() {
    let _serial = serial().await;
    let cp = control_plane().await;
    let master = namespace(cp, "ah-budget-sys", None).await;
    let tenant = agenthooks_e2e::unique_name("hooli");
    let ns = namespace(cp, "tenant", Some(&tenant)).await;
    let r = Replica::leading(cp, &master).await;
    budget(cp, &ns, "b", 1000, None).await;
    wait_budget(cp, &ns, "b", WAIT, |v| status_is(v, 0, 1000, "Ok")).await;
    r.reserve_until("d1", &tenant, 1, |v| v["granted"] == true)
        .await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let writes = r.metric(
        "agenthooks_operator_status_writes_total{kind=\"budget_reconcile\",outcome=\"written\"}",
    );
    let rv = get(cp, &ns, "b").await["metadata"]["resourceVersion"].clone();

    // changes that wake the routing pass and the watches, none of them the budget's status
    namespace(cp, "unrelated", None).await;
    kubectl(
        cp,
        &["-n", &ns, "annotate", "tenanthookbudget", "b", "note=hello"],
    )
    .await;
    let rv_annotated = get(cp, &ns, "b").await["metadata"]["resourceVersion"].clone();
    assert_ne!(rv, rv_annotated);
    tokio::time::sleep(Duration::from_secs(4)).await;
    let v = get(cp, &ns, "b").await;
    assert_eq!(
        v["metadata"]["resourceVersion"], rv_annotated,
        "no status write: {}",
        v["status"]
    );
    assert_eq!(
        r.metric(
            "agenthooks_operator_status_writes_total{kind=\"budget_reconcile\",outcome=\"written\"}"
        ),
        writes
    );
    r.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn losing_leadership_stops_the_reconciler_and_the_endpoints() {
    let _serial = serial().await;
    let cp = control_plane().await;
    let master = namespace(cp, "ah-budget-sys", None).await;
    let tenant = agenthooks_e2e::unique_name("umbrella");
    let ns = namespace(cp, "tenant", Some(&tenant)).await;
    let r = Replica::leading(cp, &master).await;
    budget(cp, &ns, "b", 1000, None).await;
    wait_budget(cp, &ns, "b", WAIT, |v| status_is(v, 0, 1000, "Ok")).await;
    r.reserve_until("d1", &tenant, 1000, |v| v["granted"] == true)
        .await;

    r.shared.set_leader(false);
    let (status, v) = r.reserve("d1", &tenant, 1).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(
        (v["leader"].as_bool(), v["synced"].as_bool()),
        (Some(false), Some(false)),
        "{v}"
    );
    assert!(
        v["error"].as_str().unwrap_or("").contains("not the leader"),
        "{v}"
    );
    let (status, _) = r.settle("d1", &tenant, &format!("{:032x}", 1), 1).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);

    budget(cp, &ns, "b", 3000, None).await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(
        get(cp, &ns, "b").await["status"]["observedGeneration"],
        1,
        "a standby writes nothing"
    );

    // leading again: the spec change is caught up, and the reservation held before is
    // forgotten (reservations are the leader's memory)
    r.shared.set_leader(true);
    r.shared.set_synced(true);
    wait_budget(cp, &ns, "b", WAIT, |v| {
        v["status"]["observedGeneration"] == 2 && status_is(v, 0, 3000, "Ok")
    })
    .await;
    r.reserve_until("d1", &tenant, 3000, |v| v["granted"] == true)
        .await;
    r.stop().await;
}
