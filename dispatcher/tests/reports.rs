//! The reporter against an operator: trips sent at once, execution counts that survive
//! failed reports and snapshot swaps (no count lost, none doubled), the same `reportId`
//! on a retry that may have been applied, a new one after a `503`, failover between
//! operator URLs, and the pending cap.
//!
//! The operator is [`operator_standin`]: a stand-in for our own operator protocol (crds
//! `report` wire types), not Kubernetes. It applies a `reportId` once, as the operator
//! does, so the totals it applied must equal the runs made.

mod operator_standin;

use std::sync::Arc;
use std::time::{Duration, Instant};

use agenthooks_crds::Edition;
use agenthooks_crds::sealed::SealKey;
use agenthooks_crds::snapshot::SnapshotHook;
use agenthooks_dispatcher::chain::{decide, observe};
use agenthooks_dispatcher::event::Event;
use agenthooks_dispatcher::handlers::http::HttpCaller;
use agenthooks_dispatcher::hookset::HookSet;
use agenthooks_dispatcher::operator_urls::OperatorUrls;
use agenthooks_dispatcher::report::sender::{ReporterConfig, run};
use agenthooks_dispatcher::runner::{BACKGROUND_SLOTS, Engine};
use agenthooks_dispatcher::server::AppState;
use operator_standin::{Script, StandIn, dead_url, eventually};
use serde_json::json;
use tokio_util::sync::CancellationToken;

const MASTER: &str = "agenthooks-system";

/// A tenant-acme command hook `name` on `event` for tool `exec`, running `command`.
fn hook(name: &str, event: &str, command: &str, reset_token: Option<&str>) -> SnapshotHook {
    SnapshotHook {
        uid: format!("uid-{name}"),
        namespace: "tenant-acme".into(),
        name: name.into(),
        generation: 3,
        created_at: "2026-01-01T00:00:00Z".into(),
        namespace_tenant: "acme".into(),
        spec: serde_norway::from_str(&format!(
            "event: {event}\nmatcher: '^exec$'\nhandler: {{type: command, command: {{command: {}}}}}",
            serde_json::to_string(command).unwrap()
        ))
        .unwrap(),
        sealed_headers: vec![],
        open_breakers: Vec::new(),
        reset_token: reset_token.map(str::to_string),
    }
}

fn event(kind: &str) -> Event {
    Event::parse(
        json!({"event": kind, "tenant_id": "acme", "agent_id": "a1", "tool_name": "exec", "tool_input": {}})
            .to_string()
            .as_bytes(),
    )
    .unwrap()
}

struct Reporting {
    state: Arc<AppState>,
    stop: CancellationToken,
    task: tokio::task::JoinHandle<()>,
}

impl Reporting {
    /// A state whose reporter sends to `urls` every `interval` (attempt bound `timeout`).
    fn start<S: AsRef<str>>(
        urls: &[S],
        interval: Duration,
        timeout: Duration,
        cap: usize,
    ) -> Reporting {
        let state = AppState::new(Engine::new(
            HttpCaller::new(vec![]),
            Edition::Lite,
            SealKey::generate(),
        ));
        state.set_authenticator(agenthooks_dispatcher::identity::Authenticator::Anonymous);
        let urls = Arc::new(OperatorUrls::parse(urls).unwrap());
        let mut config = ReporterConfig::new("d-test");
        config.interval = interval;
        config.timeout = timeout;
        config.pending_cap = cap;
        state.engine.outbox.activate();
        let stop = CancellationToken::new();
        let task = tokio::spawn(run(
            Arc::clone(&state.engine.outbox),
            urls,
            state.engine.metrics.clone(),
            config,
            stop.clone(),
        ));
        Reporting { state, stop, task }
    }

    fn load(&self, sources: Vec<SnapshotHook>, version: u64) {
        let previous = self.state.hooks();
        let (set, rejected) =
            HookSet::build(sources, MASTER, Edition::Lite, version, previous.as_deref());
        assert!(rejected.is_empty(), "{rejected:?}");
        self.state.set_hooks(set);
    }

    async fn decide(&self) -> String {
        let set = self.state.hooks().unwrap();
        let d = decide(&self.state.engine, &set, event("pre_tool_use")).await;
        serde_json::to_value(&d).unwrap()["decision"]
            .as_str()
            .unwrap()
            .to_string()
    }

    /// A non-blocking event; waits until its background runs are done.
    async fn observe(&self) {
        let set = self.state.hooks().unwrap();
        observe(&self.state.engine, set, event("post_tool_use"));
        let bg = Arc::clone(&self.state.engine.background);
        assert!(
            eventually(Duration::from_secs(10), || bg.available_permits()
                == BACKGROUND_SLOTS)
            .await
        );
    }

    /// Stops the reporter and waits for its final flush.
    async fn stop(self) {
        self.stop.cancel();
        tokio::time::timeout(Duration::from_secs(10), self.task)
            .await
            .unwrap()
            .unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_trip_is_reported_at_once_with_its_hook_version() {
    let op = StandIn::start().await;
    // An interval far longer than the test: only the trip can cause the report.
    let r = Reporting::start(
        &[op.url.as_str()],
        Duration::from_secs(600),
        Duration::from_secs(5),
        1000,
    );
    r.load(
        vec![hook(
            "always-fails",
            "pre_tool_use",
            "exit 1",
            Some("reset-7"),
        )],
        1,
    );
    for _ in 0..5 {
        assert_eq!(r.decide().await, "block");
    }
    let tripped = Instant::now();
    let state = Arc::clone(&op.state);
    assert!(
        eventually(Duration::from_secs(5), || state
            .applied
            .lock()
            .unwrap()
            .values()
            .any(|rep| !rep.trips.is_empty()))
        .await,
        "trip reported"
    );
    let latency = tripped.elapsed();
    assert!(
        latency < Duration::from_millis(1500),
        "trip to report: {latency:?}"
    );
    let applied = op.state.applied.lock().unwrap().clone();
    let trip = applied
        .values()
        .flat_map(|rep| rep.trips.clone())
        .next()
        .unwrap();
    assert_eq!(
        (
            trip.uid.as_str(),
            trip.namespace.as_str(),
            trip.name.as_str(),
            trip.generation,
            trip.reset_token.as_deref()
        ),
        (
            "uid-always-fails",
            "tenant-acme",
            "always-fails",
            3,
            Some("reset-7")
        )
    );
    assert!(
        trip.reason
            .starts_with("0 timeouts and 5 errors of the handler in a row"),
        "{}",
        trip.reason
    );
    let at = chrono::DateTime::parse_from_rfc3339(&trip.tripped_at).unwrap();
    assert!((chrono::Utc::now() - at.to_utc()).num_seconds().abs() < 10);
    assert!(trip.tripped_at.ends_with('Z'));
    assert!(
        applied.values().all(|rep| rep.dispatcher == "d-test"),
        "reports name the dispatcher"
    );
    assert_eq!((trip.tenant.as_str(), trip.fail_closed), ("acme", true));
    // The run of faults went out too, per tenant (the operator counts it across
    // dispatchers).
    let run = applied
        .values()
        .flat_map(|rep| rep.breaker.clone())
        .max_by_key(|o| o.run.len())
        .unwrap();
    assert_eq!((run.generation, run.tenant.as_str()), (3, "acme"));
    assert!(run.run.iter().all(|o| !o.timeout), "errors, not timeouts");
    // A sixth event does not run the open hook and is refused as its error.
    assert_eq!(r.decide().await, "block");
    r.stop().await;
    assert_eq!(op.state.applied_counts("uid-always-fails"), (0, 0, 6, 0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn counts_survive_failed_reports_and_snapshot_swaps_exactly() {
    let op = StandIn::start().await;
    op.state.report_script.lock().unwrap().extend([
        Script::NotLeader, // nothing applied: merged, new id
        Script::Fail,      // 500: may be applied, same id
        Script::ApplyThenStall(Duration::from_millis(800)), // applied, answer lost: same id
    ]);
    let r = Reporting::start(
        &[op.url.as_str()],
        Duration::from_millis(100),
        Duration::from_millis(300),
        1000,
    );
    r.load(
        vec![
            hook("a", "pre_tool_use", "exit 0", None),
            hook("b", "pre_tool_use", "exit 0", None),
            hook("bg", "post_tool_use", "exit 0", None),
        ],
        1,
    );
    for _ in 0..4 {
        assert_eq!(r.decide().await, "allow");
        r.observe().await;
        tokio::time::sleep(Duration::from_millis(60)).await;
    }
    // b leaves; a stays (same version, same counters); c arrives.
    r.load(
        vec![
            hook("a", "pre_tool_use", "exit 0", None),
            hook("c", "pre_tool_use", "exit 0", None),
            hook("bg", "post_tool_use", "exit 0", None),
        ],
        2,
    );
    for _ in 0..3 {
        assert_eq!(r.decide().await, "allow");
        r.observe().await;
        tokio::time::sleep(Duration::from_millis(60)).await;
    }
    r.stop().await;
    let s = &op.state;
    assert_eq!(s.applied_counts("uid-a"), (7, 0, 0, 0));
    assert_eq!(
        s.applied_counts("uid-b"),
        (4, 0, 0, 0),
        "counted although dropped"
    );
    assert_eq!(s.applied_counts("uid-c"), (3, 0, 0, 0));
    assert_eq!(
        s.applied_counts("uid-bg"),
        (7, 0, 0, 0),
        "non-blocking runs count"
    );

    let reports: Vec<_> = s
        .reports
        .lock()
        .unwrap()
        .iter()
        .filter(|r| !r.executions.is_empty())
        .cloned()
        .collect();
    assert!(reports.len() >= 5, "{reports:#?}");
    assert_ne!(
        reports[0].report_id, reports[1].report_id,
        "after a 503: a new id"
    );
    assert!(
        reports[1].executions.iter().all(|e| {
            let before = reports[0].executions.iter().find(|b| b.uid == e.uid);
            before.is_none_or(|b| e.allow >= b.allow)
        }),
        "the refused batch is merged into the next"
    );
    assert_eq!(
        reports[2], reports[1],
        "after a 500: the same batch, same id"
    );
    // After a lost answer the same batch goes again, as often as answers are lost (a
    // resend can itself time out on a loaded machine), then a new batch with a new id.
    let resent = reports[3..]
        .iter()
        .take_while(|r| r.report_id == reports[2].report_id)
        .count();
    assert!(resent >= 1, "after a lost answer: the same batch, same id");
    assert!(
        reports[3..3 + resent].iter().all(|r| *r == reports[2]),
        "resent unchanged"
    );
    assert!(
        reports.len() > 3 + resent,
        "then a new batch with a new id: {reports:#?}"
    );
}

/// A trip never waits behind counts: the operator answers a report of counts only once
/// it has written them (up to a second or more), so the breaker has its own lane.
#[tokio::test]
async fn a_trip_is_not_held_up_by_a_slow_report_of_counts() {
    let op = StandIn::start().await;
    op.state
        .report_script
        .lock()
        .unwrap()
        .push_back(Script::ApplyThenStall(Duration::from_secs(3)));
    let r = Reporting::start(
        &[op.url.as_str()],
        Duration::from_millis(100),
        Duration::from_secs(5),
        1000,
    );
    r.load(
        vec![hook("always-fails", "pre_tool_use", "exit 1", None)],
        1,
    );
    assert_eq!(r.decide().await, "block");
    let state = Arc::clone(&op.state);
    assert!(
        eventually(Duration::from_secs(2), || state
            .reports
            .lock()
            .unwrap()
            .iter()
            .any(|rep| !rep.executions.is_empty()))
        .await,
        "the counts went out (and their answer now stalls)"
    );
    let stalled = Instant::now();
    for _ in 0..4 {
        assert_eq!(r.decide().await, "block");
    }
    let tripped = Instant::now();
    assert!(
        eventually(Duration::from_secs(2), || state
            .applied
            .lock()
            .unwrap()
            .values()
            .any(|rep| !rep.trips.is_empty()))
        .await,
        "trip reported while the counts' answer stalls"
    );
    let latency = tripped.elapsed();
    assert!(
        latency < Duration::from_millis(1500) && stalled.elapsed() < Duration::from_secs(3),
        "trip to report took {latency:?}"
    );
    r.stop().await;
}

#[tokio::test]
async fn reports_go_past_dead_and_standby_urls_and_stick_with_the_leader() {
    let standby = StandIn::start().await;
    standby
        .state
        .leader
        .store(false, std::sync::atomic::Ordering::SeqCst);
    let leader = StandIn::start().await;
    let dead = dead_url().await;
    let r = Reporting::start(
        &[format!("{dead},{}", standby.url), leader.url.clone()],
        Duration::from_millis(50),
        Duration::from_secs(2),
        1000,
    );
    r.load(vec![hook("a", "pre_tool_use", "exit 0", None)], 1);
    for _ in 0..3 {
        r.decide().await;
        tokio::time::sleep(Duration::from_millis(120)).await;
    }
    r.stop().await;
    assert_eq!(leader.state.applied_counts("uid-a"), (3, 0, 0, 0));
    assert!(leader.state.reports.lock().unwrap().len() >= 2);
    assert!(standby.state.reports.lock().unwrap().is_empty());
}

#[tokio::test]
async fn a_report_the_operator_refuses_is_dropped_and_the_next_ones_go_on() {
    let op = StandIn::start().await;
    op.state
        .report_script
        .lock()
        .unwrap()
        .push_back(Script::Status(400));
    let r = Reporting::start(
        &[op.url.as_str()],
        Duration::from_millis(50),
        Duration::from_secs(2),
        1000,
    );
    r.load(vec![hook("a", "pre_tool_use", "exit 0", None)], 1);
    r.decide().await;
    let m = r.state.engine.metrics.clone();
    assert!(
        eventually(Duration::from_secs(5), || m.report_dropped_executions.get()
            == 1)
        .await
    );
    r.decide().await;
    r.decide().await;
    r.stop().await;
    let reports = op.state.reports.lock().unwrap().clone();
    assert_ne!(reports[0].report_id, reports[1].report_id, "not resent");
    assert_eq!(
        op.state.applied_counts("uid-a"),
        (2, 0, 0, 0),
        "the refused run is lost, counted"
    );
    assert_eq!(m.report_failures.get(), 1);
}

#[tokio::test]
async fn past_the_pending_cap_counts_are_dropped_and_counted() {
    let dead = dead_url().await;
    let r = Reporting::start(
        &[dead],
        Duration::from_millis(30),
        Duration::from_millis(200),
        1,
    );
    r.load(vec![hook("a", "pre_tool_use", "exit 0", None)], 1);
    r.decide().await;
    let m = r.state.engine.metrics.clone();
    assert!(eventually(Duration::from_secs(5), || m.report_failures.get() >= 1).await);
    // A second hook arrives while the first one's counts wait: no room for it.
    r.load(
        vec![
            hook("a", "pre_tool_use", "exit 0", None),
            hook("b", "pre_tool_use", "exit 0", None),
        ],
        2,
    );
    r.decide().await;
    assert!(
        eventually(Duration::from_secs(5), || m.report_dropped_executions.get()
            == 1)
        .await
    );
    assert_eq!(m.report_pending_hooks.get(), 1);
    let text = m.render();
    for name in [
        "agenthooks_report_failures_total",
        "agenthooks_report_pending_hooks 1",
        "agenthooks_report_dropped_executions_total 1",
    ] {
        assert!(text.contains(name), "{name} in\n{text}");
    }
    r.stop().await;
}
