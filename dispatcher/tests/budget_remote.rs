//! The remote budget backend (`POST /v1/budget/reserve`, `/v1/budget/settle`): grants
//! and refusals, fail closed when no operator answers, failover past a standby, settle
//! retried with the same reservation id until acknowledged, release of a dropped
//! reservation, and the 40 × 100 on 1,000 case over two dispatchers.
//!
//! The operator is [`operator_standin`]: a stand-in for our own operator protocol (crds
//! `report` wire types), not Kubernetes.

mod operator_standin;

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use agenthooks_dispatcher::budget::load::{LoadPlan, run};
use agenthooks_dispatcher::budget::remote::{RemoteBudgets, RemoteConfig};
use agenthooks_dispatcher::budget::{BudgetRefusal, Budgets, SettleError};
use agenthooks_dispatcher::metrics::Metrics;
use agenthooks_dispatcher::operator_urls::OperatorUrls;
use operator_standin::{Budget, Script, StandIn, dead_url, eventually};

fn config() -> RemoteConfig {
    RemoteConfig {
        reserve_timeout: Duration::from_millis(500),
        settle_timeout: Duration::from_millis(300),
        settle_deadline: Duration::from_secs(5),
        settle_backoff: Duration::from_millis(20),
        settle_backoff_max: Duration::from_millis(100),
    }
}

fn budgets<S: AsRef<str>>(urls: &[S], id: &str, config: RemoteConfig) -> (Budgets, Metrics) {
    let m = Metrics::new();
    let urls = Arc::new(OperatorUrls::parse(urls).unwrap());
    (
        Budgets::remote(RemoteBudgets::new(urls, id, config), Some(m.clone())),
        m,
    )
}

async fn operator(total: i64) -> StandIn {
    let op = StandIn::start().await;
    *op.state.budget.lock().unwrap() = Budget {
        tenant: "acme".into(),
        total,
        ..Default::default()
    };
    op
}

#[tokio::test]
async fn grants_and_refusals_map_to_reasons_and_settle_charges_the_real_cost() {
    let op = operator(1_000).await;
    let (b, m) = budgets(&[op.url.as_str()], "d1", config());
    let r = b
        .reserve("acme", 600, Some("tenant-acme/judge"))
        .await
        .unwrap();
    assert_eq!(
        (r.tokens(), r.remaining(), r.budget()),
        (600, 400, Some("ns/b"))
    );
    let req = op.state.reserves.lock().unwrap()[0].clone();
    assert_eq!(
        (
            req.dispatcher.as_str(),
            req.tenant.as_str(),
            req.tokens,
            req.hook.as_deref()
        ),
        ("d1", "acme", 600, Some("tenant-acme/judge"))
    );
    assert_eq!(
        b.reserve("acme", 401, None).await.unwrap_err(),
        BudgetRefusal::Exhausted {
            tokens: 401,
            remaining: 400,
            budget: Some("ns/b".into())
        }
    );
    assert_eq!(
        b.reserve("globex", 1, None).await.unwrap_err(),
        BudgetRefusal::NotFound {
            tenant: "globex".into()
        }
    );
    let id = r.id().to_string();
    let done = r.settle(750).await.unwrap();
    assert_eq!(
        (done.used, done.remaining, done.duplicate),
        (750, 250, false)
    );
    let s = op.state.settles.lock().unwrap()[0].clone();
    assert_eq!(
        (s.reservation_id, s.tokens, s.dispatcher.as_str()),
        (id, 750, "d1")
    );
    assert_eq!(m.budget_grants.get(), 1);
    assert_eq!(
        m.budget_refusals
            .with_label_values(&["BudgetExhausted"])
            .get(),
        1
    );
    assert_eq!(
        m.budget_refusals
            .with_label_values(&["BudgetNotFound"])
            .get(),
        1
    );
}

#[tokio::test]
async fn no_operator_answering_fails_closed() {
    // Nothing listens anywhere.
    let (b, m) = budgets(&[dead_url().await, dead_url().await], "d1", config());
    let e = b.reserve("acme", 1, None).await.unwrap_err();
    assert_eq!(e.reason(), "BudgetUnavailable", "{e}");
    // Every URL answers 503 (no leader).
    let a = operator(1_000).await;
    let c = operator(1_000).await;
    a.state.leader.store(false, Ordering::SeqCst);
    c.state.leader.store(false, Ordering::SeqCst);
    let (b2, _) = budgets(&[a.url.clone(), c.url.clone()], "d1", config());
    let e = b2.reserve("acme", 1, None).await.unwrap_err();
    assert_eq!(e.reason(), "BudgetUnavailable");
    assert!(e.to_string().contains("503"), "{e}");
    // An operator that does not answer in time.
    let slow = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let slow_url = format!("http://{}", slow.local_addr().unwrap());
    let mut cfg = config();
    cfg.reserve_timeout = Duration::from_millis(200);
    let (b3, _) = budgets(&[slow_url], "d1", cfg);
    let started = std::time::Instant::now();
    assert_eq!(
        b3.reserve("acme", 1, None).await.unwrap_err().reason(),
        "BudgetUnavailable"
    );
    assert!(started.elapsed() < Duration::from_secs(2));
    assert_eq!(
        m.budget_refusals
            .with_label_values(&["BudgetUnavailable"])
            .get(),
        1
    );
    assert_eq!(
        b.reserve("acme", 0, None).await.unwrap_err().reason(),
        "InvalidTokens"
    );
}

#[tokio::test]
async fn reserve_and_settle_move_past_a_standby_to_the_leader() {
    let standby = operator(1_000).await;
    standby.state.leader.store(false, Ordering::SeqCst);
    let leader = operator(1_000).await;
    let (b, _) = budgets(&[standby.url.clone(), leader.url.clone()], "d1", config());
    let r = b.reserve("acme", 100, None).await.unwrap();
    r.settle(80).await.unwrap();
    assert_eq!(leader.state.budget.lock().unwrap().used, 80);
    assert!(standby.state.reserves.lock().unwrap().is_empty());
}

#[tokio::test]
async fn settle_is_retried_with_the_same_id_until_acknowledged_and_applied_once() {
    let op = operator(1_000).await;
    op.state.settle_script.lock().unwrap().extend([
        Script::NotLeader,
        Script::Fail,
        // Applied, but the answer comes after the attempt's timeout: a lost answer.
        Script::ApplyThenStall(Duration::from_millis(600)),
    ]);
    let (b, _) = budgets(&[op.url.as_str()], "d1", config());
    let r = b.reserve("acme", 100, None).await.unwrap();
    let id = r.id().to_string();
    let done = r.settle(90).await.unwrap();
    assert!(
        done.duplicate,
        "the retry after a lost answer finds it applied"
    );
    let settles = op.state.settles.lock().unwrap().clone();
    assert_eq!(settles.len(), 4);
    assert!(
        settles
            .iter()
            .all(|s| s.reservation_id == id && s.tokens == 90)
    );
    assert_eq!(op.state.budget.lock().unwrap().used, 90, "applied once");
}

#[tokio::test]
async fn a_refused_settle_is_not_retried() {
    let op = operator(1_000).await;
    op.state
        .settle_script
        .lock()
        .unwrap()
        .push_back(Script::Status(404));
    let (b, m) = budgets(&[op.url.as_str()], "d1", config());
    let r = b.reserve("acme", 100, None).await.unwrap();
    let e = r.settle(100).await.unwrap_err();
    assert!(matches!(e, SettleError::Refused { .. }), "{e}");
    assert!(e.to_string().contains("404"), "{e}");
    assert_eq!(op.state.settles.lock().unwrap().len(), 1, "no retry");
    assert_eq!(m.budget_settle_failures.get(), 1);
}

#[tokio::test]
async fn a_settle_nobody_acknowledges_gives_up_at_its_deadline() {
    let op = operator(1_000).await;
    let mut cfg = config();
    cfg.settle_deadline = Duration::from_millis(400);
    let (b, m) = budgets(&[op.url.as_str()], "d1", cfg);
    let r = b.reserve("acme", 100, None).await.unwrap();
    op.state.leader.store(false, Ordering::SeqCst);
    let started = std::time::Instant::now();
    let e = r.settle(100).await.unwrap_err();
    assert!(matches!(e, SettleError::Unacknowledged { .. }), "{e}");
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(m.budget_settle_failures.get(), 1);
}

#[tokio::test]
async fn a_reservation_dropped_unsettled_is_released_in_the_background() {
    let op = operator(100).await;
    let (b, _) = budgets(&[op.url.as_str()], "d1", config());
    let r = b.reserve("acme", 100, None).await.unwrap();
    assert_eq!(
        b.reserve("acme", 1, None).await.unwrap_err().reason(),
        "BudgetExhausted"
    );
    drop(r);
    let state = Arc::clone(&op.state);
    assert!(
        eventually(Duration::from_secs(5), || {
            let s = state.settles.lock().unwrap();
            s.len() == 1 && s[0].tokens == 0
        })
        .await,
        "released with a settle of 0"
    );
    assert!(b.reserve("acme", 100, None).await.is_ok());
    assert_eq!(op.state.budget.lock().unwrap().used, 0);
}

/// Case "Budgets and breakers across replicas": 1,000 tokens, two dispatchers, 40
/// concurrent calls reserving 100 each: exactly 10 admitted, never more held than the
/// budget, the rest refused with a budget reason, `used` = the settled sum.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forty_reservations_of_100_over_two_dispatchers_admit_exactly_ten() {
    let op = operator(1_000).await;
    let plan = LoadPlan {
        tenant: "acme".into(),
        calls: 20,
        concurrency: 20,
        reserve: 100,
        settle: 100,
        hold: Duration::from_millis(300),
    };
    let (d1, _) = budgets(&[op.url.as_str()], "d1", config());
    let (d2, _) = budgets(&[op.url.as_str()], "d2", config());
    let (s1, s2) = tokio::join!(run(&d1, &plan), run(&d2, &plan));
    assert_eq!(s1.granted + s2.granted, 10);
    assert_eq!(s1.refused + s2.refused, 30);
    assert_eq!(
        s1.refused_reasons
            .get("BudgetExhausted")
            .copied()
            .unwrap_or(0)
            + s2.refused_reasons
                .get("BudgetExhausted")
                .copied()
                .unwrap_or(0),
        30
    );
    assert_eq!(s1.errors + s2.errors, 0);
    assert_eq!(s1.settled_tokens + s2.settled_tokens, 1_000);
    let b = op.state.budget.lock().unwrap();
    assert_eq!((b.used, b.max_held), (1_000, 1_000));
}
