//! A stand-in for the operator's sync port, speaking OUR OWN operator protocol (the crds
//! `snapshot` and `report` wire types): `GET /v1/snapshot`, `POST /v1/report`,
//! `POST /v1/budget/reserve`, `POST /v1/budget/settle`. It is not Kubernetes: the
//! operator's side of these calls is tested in the operator crate and on the real API
//! server in e2e; here the dispatcher's side is tested against scripted answers
//! (`503` not leader, lost answers, timeouts) that a real operator gives only by chance.
//!
//! Its budget follows the protocol's rules in the simplest form: one tenant, grant iff
//! total − used − held covers the call, a settle id applied once.

#![allow(dead_code)]

use std::collections::{HashMap, HashSet, VecDeque};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use agenthooks_crds::report::{
    Report, ReportAck, ReserveRequest, ReserveResponse, SettleRequest, SettleResponse,
};
use agenthooks_crds::snapshot::{Snapshot, SnapshotHook, SnapshotQuery};
use axum::Json;
use axum::extract::{Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde_json::json;
use tokio_util::sync::CancellationToken;

/// What the stand-in does with the next report or settle.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Script {
    /// `503` not leader: nothing applied.
    NotLeader,
    /// `500` before applying anything.
    Fail,
    /// This status before applying anything (e.g. `400` a bad body, `404` no budget).
    Status(u16),
    /// Applies it, then answers only after this delay (a lost answer when the client's
    /// timeout is shorter).
    ApplyThenStall(Duration),
}

/// The stand-in's budget (one tenant).
#[derive(Debug, Default)]
pub struct Budget {
    pub tenant: String,
    pub total: i64,
    pub used: i64,
    pub held: HashMap<String, i64>,
    pub settled: HashSet<String>,
    /// Most tokens held at once (to check the bound).
    pub max_held: i64,
}

/// Everything the stand-in holds and saw.
#[derive(Default)]
pub struct StandInState {
    /// Answers `503` to every call when false.
    pub leader: AtomicBool,
    /// The snapshot served; `None` answers `503` (not synced yet).
    pub snapshot: Mutex<Option<Snapshot>>,
    /// Every report received, in order (retries included).
    pub reports: Mutex<Vec<Report>>,
    /// Reports applied, by id (each id once).
    pub applied: Mutex<HashMap<String, Report>>,
    /// Answers, in order, to the reports that carry execution counts.
    pub report_script: Mutex<VecDeque<Script>>,
    pub budget: Mutex<Budget>,
    pub reserves: Mutex<Vec<ReserveRequest>>,
    pub settles: Mutex<Vec<SettleRequest>>,
    pub settle_script: Mutex<VecDeque<Script>>,
    pub snapshot_polls: AtomicUsize,
    /// What reached the stand-in, in arrival order: `poll <epoch>/<after>` for each
    /// snapshot poll and `unavailable [<ns/name@generation>, ...]` for each report that
    /// carries an unavailable list (retries included).
    pub log: Mutex<Vec<String>>,
    /// Answers, in order, to the reports that carry an unavailable list.
    pub unavailable_script: Mutex<VecDeque<Script>>,
    /// Bodies answered `200` to the next snapshot polls, in order, whatever they hold
    /// (a delta, a broken one); `snapshot` answers once none is left.
    pub raw_answers: Mutex<VecDeque<String>>,
    /// Every snapshot poll's query, in arrival order.
    pub queries: Mutex<Vec<SnapshotQuery>>,
}

impl StandInState {
    /// Sum of applied execution counts of hook `uid`: (allow, block, error, timeout).
    pub fn applied_counts(&self, uid: &str) -> (u64, u64, u64, u64) {
        let applied = self.applied.lock().unwrap();
        let mut t = (0, 0, 0, 0);
        for r in applied.values() {
            for e in r.executions.iter().filter(|e| e.uid == uid) {
                t.0 += e.allow;
                t.1 += e.block;
                t.2 += e.error;
                t.3 += e.timeout;
            }
        }
        t
    }
}

/// A running stand-in.
pub struct StandIn {
    pub url: String,
    pub addr: SocketAddr,
    pub state: Arc<StandInState>,
    stop: CancellationToken,
    task: tokio::task::JoinHandle<()>,
}

impl StandIn {
    /// Starts on a free loopback port, leader, with no snapshot.
    pub async fn start() -> StandIn {
        let state = Arc::new(StandInState::default());
        state.leader.store(true, Ordering::SeqCst);
        StandIn::start_on("127.0.0.1:0".parse().unwrap(), state).await
    }

    /// Starts on `addr` with `state` (to come back on the same port after [`StandIn::stop`]).
    pub async fn start_on(addr: SocketAddr, state: Arc<StandInState>) -> StandIn {
        let listener = tokio::net::TcpListener::bind(addr).await.unwrap();
        let addr = listener.local_addr().unwrap();
        let app = axum::Router::new()
            .route("/v1/snapshot", get(serve_snapshot))
            .route("/v1/report", post(report))
            .route("/v1/budget/reserve", post(reserve))
            .route("/v1/budget/settle", post(settle))
            .with_state(Arc::clone(&state));
        let stop = CancellationToken::new();
        let shutdown = stop.clone();
        let task = tokio::spawn(async move {
            axum::serve(listener, app)
                .with_graceful_shutdown(async move { shutdown.cancelled().await })
                .await
                .unwrap();
        });
        StandIn {
            url: format!("http://{addr}"),
            addr,
            state,
            stop,
            task,
        }
    }

    /// Stops listening (connections are refused from then on).
    pub async fn stop(self) -> Arc<StandInState> {
        self.stop.cancel();
        let _ = tokio::time::timeout(Duration::from_secs(5), self.task).await;
        self.state
    }
}

fn not_leader() -> Response {
    (
        StatusCode::SERVICE_UNAVAILABLE,
        Json(json!({"error": "this operator replica is not the leader", "leader": false, "synced": false})),
    )
        .into_response()
}

async fn serve_snapshot(
    State(s): State<Arc<StandInState>>,
    Query(q): Query<SnapshotQuery>,
) -> Response {
    s.snapshot_polls.fetch_add(1, Ordering::SeqCst);
    s.log
        .lock()
        .unwrap()
        .push(format!("poll {}/{}", q.epoch, q.after));
    s.queries.lock().unwrap().push(q.clone());
    if !s.leader.load(Ordering::SeqCst) {
        return not_leader();
    }
    let raw = s.raw_answers.lock().unwrap().pop_front();
    if let Some(body) = raw {
        return (
            [(axum::http::header::CONTENT_TYPE, "application/json")],
            body,
        )
            .into_response();
    }
    let current = s.snapshot.lock().unwrap().clone();
    match current {
        None => not_leader(),
        Some(snap) if snap.epoch == q.epoch && snap.version == q.after => {
            // A short long poll: nothing changed.
            tokio::time::sleep(Duration::from_millis(50)).await;
            StatusCode::NOT_MODIFIED.into_response()
        }
        Some(snap) => Json(snap).into_response(),
    }
}

fn status(code: u16) -> Response {
    (
        StatusCode::from_u16(code).unwrap(),
        Json(json!({"error": format!("scripted {code}")})),
    )
        .into_response()
}

async fn scripted(script: &Mutex<VecDeque<Script>>) -> Option<Script> {
    script.lock().unwrap().pop_front()
}

async fn report(State(s): State<Arc<StandInState>>, Json(r): Json<Report>) -> Response {
    if !s.leader.load(Ordering::SeqCst) {
        return not_leader();
    }
    s.reports.lock().unwrap().push(r.clone());
    if let Some(list) = &r.unavailable {
        let hooks: Vec<String> = list
            .iter()
            .map(|u| format!("{}/{}@{}", u.namespace, u.name, u.generation))
            .collect();
        s.log
            .lock()
            .unwrap()
            .push(format!("unavailable [{}]", hooks.join(", ")));
    }
    // Scripts shape the counts lane and the unavailable list's: the breaker lane's
    // reports (trips and breaker runs only) are answered normally.
    let step = if r.unavailable.is_some() {
        scripted(&s.unavailable_script).await
    } else if r.executions.is_empty() {
        None
    } else {
        scripted(&s.report_script).await
    };
    match step {
        Some(Script::NotLeader) => return not_leader(),
        Some(Script::Fail) => return StatusCode::INTERNAL_SERVER_ERROR.into_response(),
        Some(Script::Status(code)) => return status(code),
        _ => {}
    }
    let ack = {
        let mut applied = s.applied.lock().unwrap();
        let duplicate = applied.contains_key(&r.report_id);
        let ack = ReportAck {
            trips: if duplicate { 0 } else { r.trips.len() },
            executions: if duplicate { 0 } else { r.executions.len() },
            duplicate,
        };
        applied.entry(r.report_id.clone()).or_insert(r);
        ack
    };
    if let Some(Script::ApplyThenStall(d)) = step {
        tokio::time::sleep(d).await;
    }
    Json(ack).into_response()
}

async fn reserve(State(s): State<Arc<StandInState>>, Json(r): Json<ReserveRequest>) -> Response {
    if !s.leader.load(Ordering::SeqCst) {
        return not_leader();
    }
    s.reserves.lock().unwrap().push(r.clone());
    let mut b = s.budget.lock().unwrap();
    if b.tenant != r.tenant {
        return Json(ReserveResponse {
            granted: false,
            reservation_id: None,
            reason: Some("BudgetNotFound".into()),
            remaining: 0,
            budget: None,
        })
        .into_response();
    }
    let held: i64 = b.held.values().sum();
    let available = b.total - b.used - held;
    if available < r.tokens {
        return Json(ReserveResponse {
            granted: false,
            reservation_id: None,
            reason: Some("BudgetExhausted".into()),
            remaining: available.max(0),
            budget: Some("ns/b".into()),
        })
        .into_response();
    }
    let id = uuid::Uuid::new_v4().to_string();
    b.held.insert(id.clone(), r.tokens);
    b.max_held = b.max_held.max(held + r.tokens);
    Json(ReserveResponse {
        granted: true,
        reservation_id: Some(id),
        reason: None,
        remaining: available - r.tokens,
        budget: Some("ns/b".into()),
    })
    .into_response()
}

async fn settle(State(s): State<Arc<StandInState>>, Json(r): Json<SettleRequest>) -> Response {
    if !s.leader.load(Ordering::SeqCst) {
        return not_leader();
    }
    s.settles.lock().unwrap().push(r.clone());
    let step = scripted(&s.settle_script).await;
    match step {
        Some(Script::NotLeader) => return not_leader(),
        Some(Script::Fail) => return StatusCode::INTERNAL_SERVER_ERROR.into_response(),
        Some(Script::Status(code)) => return status(code),
        _ => {}
    }
    let answer = {
        let mut b = s.budget.lock().unwrap();
        let duplicate = !b.settled.insert(r.reservation_id.clone());
        if !duplicate {
            b.held.remove(&r.reservation_id);
            b.used += r.tokens;
        }
        SettleResponse {
            used: b.used,
            remaining: (b.total - b.used).max(0),
            state: "Ok".into(),
            duplicate,
        }
    };
    if let Some(Script::ApplyThenStall(d)) = step {
        tokio::time::sleep(d).await;
    }
    Json(answer).into_response()
}

/// A snapshot with one tenant-acme command hook on `pre_tool_use` for tool `exec` that
/// allows with `additionalContext` `mark` (an allow, so the breaker never trips).
pub fn snapshot(epoch: &str, version: u64, mark: &str) -> Snapshot {
    let command = format!(r#"echo '{{"additionalContext": "{mark}"}}'"#);
    let spec = serde_norway::from_str(&format!(
        "event: pre_tool_use\nmatcher: '^exec$'\nhandler: {{type: command, command: {{command: {}}}}}",
        serde_json::to_string(&command).unwrap()
    ))
    .unwrap();
    Snapshot {
        epoch: epoch.into(),
        version,
        master_namespace: "agenthooks-system".into(),
        hooks: vec![SnapshotHook {
            uid: "uid-guard".into(),
            namespace: "tenant-acme".into(),
            name: "guard".into(),
            generation: 1,
            created_at: "2026-01-01T00:00:00Z".into(),
            namespace_tenant: "acme".into(),
            spec,
            reset_token: None,
            sealed_headers: vec![],
            open_breakers: Vec::new(),
        }],
        tenants: Vec::new(),
        digest: None,
    }
}

/// A plain client for the tests' own requests (installs the crypto provider first).
pub fn client() -> reqwest::Client {
    agenthooks_dispatcher::operator_urls::install_crypto_provider();
    reqwest::Client::new()
}

/// A URL where nothing listens (a port bound then released).
pub async fn dead_url() -> String {
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    drop(l);
    format!("http://{addr}")
}

/// Polls `f` every 20 ms until it is true or `timeout` passes; returns whether it held.
pub async fn eventually(timeout: Duration, mut f: impl FnMut() -> bool) -> bool {
    let until = tokio::time::Instant::now() + timeout;
    loop {
        if f() {
            return true;
        }
        if tokio::time::Instant::now() > until {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
