//! The budget endpoints of whole operators (`agenthooks_operator::run`, Lease election
//! and all) over real HTTP on the real API server: the standby answers 503, the first
//! leader of a fresh Lease serves at once, and on a failover the new leader, which does
//! not know the old one's reservations, refuses reserves `BudgetUnavailable` for the
//! hold-off while it counts the settles of the old leader's calls, so no more than the
//! budget is admitted across the failover.

mod budget_support;

use std::time::Duration;

use agenthooks_e2e::procs::free_port;
use agenthooks_e2e::unique_name;
use agenthooks_operator::watch_health::{self, WatchHealth};
use budget_support::*;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

/// One operator process's worth, in process: its sync URL and its stop.
struct Operator {
    sync: String,
    /// The test's dispatcher on its sync port (ServiceAccount `MASTER/d1`).
    me: agenthooks_e2e::stack::SyncIdentity,
    cancel: CancellationToken,
    task: tokio::task::JoinHandle<Result<(), agenthooks_operator::Error>>,
}

async fn operator(
    cp: &'static agenthooks_e2e::ControlPlane,
    master: &str,
    lease: &str,
    identity: &str,
) -> Operator {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let mut cfg = config(master);
    let port = free_port();
    cfg.sync_addr = format!("127.0.0.1:{port}").parse().expect("addr");
    cfg.lease.name = lease.to_string();
    cfg.lease.identity = identity.to_string();
    cfg.lease.duration_seconds = 4;
    let kc = kube::config::Kubeconfig::read_from(&cp.kubeconfig).expect("kubeconfig");
    let kube_config = kube::Config::from_custom_kubeconfig(kc, &Default::default())
        .await
        .expect("client config");
    let health = WatchHealth::new();
    let client = watch_health::client(kube_config, &health).expect("client");
    let cancel = CancellationToken::new();
    let task = tokio::spawn(agenthooks_operator::run(
        cfg,
        client,
        health,
        cancel.clone(),
    ));
    let master = master.to_string();
    let me = blocking(move || agenthooks_e2e::stack::SyncIdentity::mint(cp, &master, "d1")).await;
    Operator {
        sync: format!("http://127.0.0.1:{port}"),
        me,
        cancel,
        task,
    }
}

async fn post(http: &reqwest::Client, op: &Operator, url: String, body: String) -> (u16, Value) {
    match http
        .post(url)
        .header("content-type", "application/json")
        .header("authorization", format!("Bearer {}", op.me.token))
        .body(body)
        .send()
        .await
    {
        Ok(resp) => {
            let status = resp.status().as_u16();
            let text = resp.text().await.unwrap_or_default();
            (status, serde_json::from_str(&text).unwrap_or(Value::Null))
        }
        Err(e) => (0, json!({ "error": e.to_string() })),
    }
}

async fn reserve(http: &reqwest::Client, op: &Operator, tenant: &str, tokens: i64) -> (u16, Value) {
    let body = json!({"dispatcher": op.me.id, "tenant": tenant, "tokens": tokens}).to_string();
    post(http, op, format!("{}/v1/budget/reserve", op.sync), body).await
}

async fn settle(
    http: &reqwest::Client,
    op: &Operator,
    tenant: &str,
    id: &str,
    tokens: i64,
) -> (u16, Value) {
    let body =
        json!({"dispatcher": op.me.id, "tenant": tenant, "reservationId": id, "tokens": tokens})
            .to_string();
    post(http, op, format!("{}/v1/budget/settle", op.sync), body).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_new_leader_holds_reserves_off_until_the_old_leaders_calls_have_ended() {
    let cp = control_plane().await;
    let master = namespace(cp, "ah-budget-sys", None).await;
    let tenant = unique_name("failover");
    let ns = namespace(cp, "tenant", Some(&tenant)).await;
    budget(cp, &ns, "b", 100_000, None).await;
    let _ = rustls::crypto::ring::default_provider().install_default();
    let http = reqwest::Client::new();
    let lease = unique_name("budget-lease");

    // the first leader of a fresh Lease has no one's reservations to wait for
    let a = operator(cp, &master, &lease, "replica-a").await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(40);
    let held = loop {
        let (status, v) = reserve(&http, &a, &tenant, 99_000).await;
        assert_ne!(
            v["reason"], "BudgetUnavailable",
            "no hold-off for a first leader: {v}"
        );
        if status == 200 && v["granted"] == true {
            break v;
        }
        assert!(tokio::time::Instant::now() < deadline, "{status} {v}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let held_id = held["reservationId"].as_str().expect("id").to_string();
    assert_eq!(held["remaining"], 1000);

    let b = operator(cp, &master, &lease, "replica-b").await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    let standby = loop {
        let (status, v) = reserve(&http, &b, &tenant, 1).await;
        if status == 503 {
            break v;
        }
        assert!(
            status == 0 && tokio::time::Instant::now() < deadline,
            "{status} {v}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(
        (standby["leader"].as_bool(), standby["synced"].as_bool()),
        (Some(false), Some(false)),
        "{standby}"
    );
    assert!(standby["error"].as_str().is_some());

    // over real HTTP: the 64 KiB limit and the field named
    let big =
        json!({"dispatcher": "d1", "tenant": tenant, "tokens": 1, "hook": "h".repeat(65 * 1024)});
    let (status, _) = post(
        &http,
        &a,
        format!("{}/v1/budget/reserve", a.sync),
        big.to_string(),
    )
    .await;
    assert_eq!(status, 413);
    let (status, v) = reserve(&http, &a, &tenant, 0).await;
    assert_eq!((status, v["field"].as_str()), (400, Some("tokens")), "{v}");
    let (_, v) = reserve(&http, &a, &tenant, 1001).await;
    assert_eq!(
        (v["granted"].as_bool(), v["reason"].as_str()),
        (Some(false), Some("BudgetExhausted"))
    );

    // the leader stops (releasing the Lease) while its 99,000 are in flight; the standby
    // takes over with an empty ledger
    let stopped_at = tokio::time::Instant::now();
    a.cancel.cancel();
    let stopped = tokio::time::timeout(Duration::from_secs(20), a.task).await;
    assert!(matches!(stopped, Ok(Ok(Ok(())))), "{stopped:?}");
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    let first = loop {
        let (status, v) = reserve(&http, &b, &tenant, 99_000).await;
        if status == 200 {
            break v;
        }
        assert!(
            (status == 503 || status == 0) && tokio::time::Instant::now() < deadline,
            "{status} {v}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(
        (first["granted"].as_bool(), first["reason"].as_str()),
        (Some(false), Some("BudgetUnavailable")),
        "a new leader refuses reserves at first (fail closed): {first}"
    );

    // the old leader's call ends and settles with the new leader during the hold-off:
    // its id is unknown there and still counts
    let (status, v) = settle(&http, &b, &tenant, &held_id, 99_000).await;
    assert_eq!(
        (status, v["used"].as_i64(), v["duplicate"].as_bool()),
        (200, Some(99_000), Some(false)),
        "{v}"
    );
    assert!(
        stopped_at.elapsed() < agenthooks_operator::budget::hold_off::FAILOVER_HOLD_OFF,
        "the settle was taken during the hold-off"
    );

    // after the hold-off: what the old leader's call spent is known, so the new leader
    // admits only what is left (before: another 99,000 granted on a 100,000 budget)
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    let after = loop {
        let (status, v) = reserve(&http, &b, &tenant, 99_000).await;
        assert_eq!(status, 200, "{v}");
        if v["reason"] != "BudgetUnavailable" {
            break v;
        }
        assert!(tokio::time::Instant::now() < deadline, "{v}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert!(
        stopped_at.elapsed() >= agenthooks_operator::budget::hold_off::FAILOVER_HOLD_OFF,
        "the hold-off lasted {:?} after the old leader stopped",
        stopped_at.elapsed()
    );
    assert_eq!(
        (
            after["granted"].as_bool(),
            after["reason"].as_str(),
            after["remaining"].as_i64()
        ),
        (Some(false), Some("BudgetExhausted"), Some(1000)),
        "{after}"
    );
    let (_, v) = reserve(&http, &b, &tenant, 1000).await;
    assert_eq!(v["granted"], true, "{v}");
    let id = v["reservationId"].as_str().expect("id").to_string();
    let (status, v) = settle(&http, &b, &tenant, &id, 1000).await;
    assert_eq!(
        (status, v["used"].as_i64(), v["remaining"].as_i64()),
        (200, Some(100_000), Some(0)),
        "{v}"
    );
    assert_eq!(v["state"], "Exhausted");
    let s = get(cp, &ns, "b").await["status"].clone();
    assert_eq!(
        (
            s["used"].as_i64(),
            s["remaining"].as_i64(),
            s["state"].as_str()
        ),
        (Some(100_000), Some(0), Some("Exhausted"))
    );

    b.cancel.cancel();
    let stopped = tokio::time::timeout(Duration::from_secs(20), b.task).await;
    assert!(matches!(stopped, Ok(Ok(Ok(())))), "{stopped:?}");
}
