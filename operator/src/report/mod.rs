//! What dispatchers report to the operator's leader on its sync port (issue 3, crds
//! [`agenthooks_crds::report`]): breaker trips, observations and closes, and execution
//! counts.
//!
//! `POST /v1/report`, body [`agenthooks_crds::report::Report`] (JSON, at most
//! [`MAX_BODY_BYTES`]):
//!
//! ```json
//! {"dispatcher": "disp-a", "reportId": "5f0c...",
//!  "trips": [{"uid": "...", "namespace": "tenant-acme", "name": "block-exec",
//!             "generation": 3, "resetToken": "2", "tenant": "acme",
//!             "trippedAt": "2025-03-01T10:00:00Z", "failClosed": true,
//!             "reason": "0 timeouts and 5 errors of the handler in a row within 3 s ..."}],
//!  "closes": [{"uid": "...", "namespace": "tenant-acme", "name": "block-exec",
//!              "generation": 3, "resetToken": "2", "tenant": "acme",
//!              "openedAt": "2025-03-01T10:00:00Z", "closedAt": "2025-03-01T10:00:31Z"}],
//!  "executions": [{"uid": "...", "namespace": "tenant-acme", "name": "block-exec",
//!                  "allow": 10, "block": 5, "error": 0, "timeout": 0,
//!                  "lastExecutionTime": "2025-03-01T10:00:00.120Z", "lastDecision": "block"}]}
//! ```
//!
//! - `unavailable` ([`agenthooks_crds::report::UnavailableReport`], at most 10,000): when
//!   present, the complete list of hooks the dispatcher cannot load (uid, namespace,
//!   name, `generation` >= 1, `error` 1 byte to 1 KiB), replacing the one it sent
//!   before; kept in memory with the dispatcher's liveness (no API write): a hook
//!   reported at its current generation by a live dispatcher is `Ready=False`
//!   `HookUnavailable` (CONTRACT §10.4).
//! - `dispatcher` (1–253 characters) and `reportId` (1–128 characters, no control
//!   characters) are required; `trips`, `breaker`, `closes` and `executions` may be
//!   absent. Every trip, observation and close names a `tenant` (1–256 bytes, no control
//!   characters): a breaker is kept per hook and tenant (CONTRACT §6.3).
//! - Every hook is named by its `uid`, `namespace` (a DNS-1123 label) and `name` (a
//!   DNS-1123 subdomain).
//! - `breaker` ([`agenthooks_crds::report::BreakerObservation`]): per (hook, tenant) whose
//!   run of faults changed, the handler's last answer on the dispatcher (`lastAnswerAt`:
//!   an `allow` or a `block`) and the faults since (`run[].at` RFC 3339, `timeout` true or
//!   an error; at most 64), for the hook version (uid, generation, resetToken) it ran.
//! - A trip names the hook (uid, namespace, name), the `generation` and `resetToken`
//!   (the snapshot hook's `agenthooks.io/reset-breaker` value, absent when none) it
//!   tripped at, the `tenant`, `trippedAt` (RFC 3339), `failClosed` and a one-sentence
//!   `reason` (cut to 1 KiB).
//! - A close ([`agenthooks_crds::report::CloseReport`]) names the hook version and tenant
//!   whose breaker a half-open probe of the dispatcher closed, `openedAt` (when the trip it
//!   ended opened) and `closedAt` (RFC 3339).
//! - An execution entry holds one hook's counts since the dispatcher's last acknowledged
//!   report (each < 2^63), and its latest run (`lastExecutionTime` RFC 3339,
//!   `lastDecision` `allow|block|error|timeout`). Entries with the same uid add up.
//! - Reported times are not trusted blindly ([`times`]): any `lastAnswerAt`, `run[].at`,
//!   `trippedAt`, `openedAt`, `closedAt` or `lastExecutionTime` later than this replica's
//!   receipt of the report plus 2 s is taken as the receipt time, and so is a
//!   `trippedAt`, `openedAt`, `closedAt` or `lastExecutionTime` before 2000-01-01.
//!
//! Answers (JSON):
//! - `200` [`agenthooks_crds::report::ReportAck`] `{"trips", "executions", "duplicate"}`,
//!   only once everything in the report is persisted to the API server or written off:
//!   each trip and close recorded (or ignored: unknown uid, another generation or reset
//!   token, already open / not open; or its status write refused permanently, see below) and each hook's
//!   counts written to its `status.executions` or dropped (below). `trips` counts the
//!   trips this report opened, `executions` the hooks it wrote. A report already applied
//!   — same `dispatcher`, same `reportId`, same body — answers its acknowledgement again
//!   with `duplicate: true` and changes nothing (remembered 10 minutes, the last 10,000);
//!   a duplicate arriving while the first is still being applied waits for it.
//! - `400` `{"error"}` naming the field (`trips[0].generation: invalid type: ...`) for a
//!   body that does not parse or breaks a rule above; nothing is applied.
//! - `403` `{"error", "field": "dispatcher"}` when `dispatcher` is not the authenticated
//!   caller ([`crate::sync_auth`]): nothing is applied, no `reportId` recorded (a
//!   dispatcher reports only for itself, CONTRACT §9.4).
//! - `409` `{"error"}` when this dispatcher already used this `reportId` for another body
//!   (compared by SHA-256 of the parsed body); nothing is applied, and resending it never
//!   succeeds: the dispatcher must use a new id.
//! - `413` `{"error"}` for a body over [`MAX_BODY_BYTES`].
//! - `503` `{"error", "leader", "synced"}` when this replica is not the leader or has not
//!   finished its initial sync. Nothing was applied: try the next operator URL; what the
//!   report carries may go into a new report with a new id.
//! - `504` `{"error", "leader", "synced"}` when the report is not (fully) persisted yet:
//!   not within [`ReportConfig::ack_timeout`] (it goes on in the background), the API
//!   server failing transiently (`5xx`, timeouts), or leadership lost meanwhile. Part of
//!   it may be persisted: send the **same body with the same `reportId`** again (here or
//!   to the next leader): this replica remembers per report which hooks' counts it wrote
//!   and applies only the rest.
//!
//! So a dispatcher keeps a report (id and body fixed) until it gets its `200`, resending
//! it verbatim after a `504`, another `5xx` or a transport error after the request was
//! sent; only a `503` or a refused connection lets it fold the report into a new one.
//! Counts gathered meanwhile go into its next report, with a new id. Keep bodies under
//! [`MAX_BODY_BYTES`] (a `413` never succeeds on retry) and the client timeout above
//! [`DEFAULT_ACK_TIMEOUT`].
//!
//! Where counts can still be doubled (everything else is applied exactly once):
//! - across a leader change, a report the old leader persisted but could not acknowledge
//!   is applied again by the new leader (it has no memory of the report);
//! - a report id resent after this replica forgot it (10 minutes, or 10,000 newer
//!   reports) is applied again;
//! - within one status write, an unanswered patch is resolved exactly
//!   ([`executions`]: the hook's next version after the patch's precondition is ours or
//!   not), except when the API server keeps failing every read of that write afterwards,
//!   or its watch history no longer reaches back (both described in [`executions`]).
//!
//! What happens:
//! - A tenant's breaker of a hook trips (CONTRACT §6, rule in
//!   [`agenthooks_crds::rules::breaker`]: only faults count — timeouts and errors — never
//!   an `allow` or a `block`) either **by a dispatcher on its own sequence** (it opens its
//!   own breaker at once and reports the trip, accepted here as sent), or **by the
//!   operator on the time-merged sequence of all dispatchers** (the breaker observations
//!   below). Nothing else trips a hook.
//! - Breaker observations ([`crate::breaker_window`]): each one of a hook version the
//!   index holds, accepted and with that tenant's breaker not open, replaces that
//!   dispatcher's previous one for that tenant; when the runs merged by time over every
//!   dispatcher trip (5 faults in a row within 60 s, an answer anywhere resetting), the
//!   tenant's breaker trips as below, attributed to the reporting dispatcher, failing
//!   closed when any fault of the run was an error, with the merged run as reason. A
//!   (hook, tenant) tripped by a dispatcher's own trip is dropped from the windows; the
//!   windows are pruned on every report and every [`WINDOW_PRUNE_INTERVAL`] (old
//!   observations, and versions the index no longer holds: deleted, edited or refused).
//! - Trips ([`breaker`], CONTRACT §6.2, §6.5): a trip whose uid, generation and reset
//!   token match the hook in the index opens that tenant's breaker in the index and
//!   publishes a snapshot carrying it (`hooks[].openBreakers`; the hook stays in the
//!   snapshot for every other tenant) **at once**, before any status write
//!   (`agenthooks_operator_breaker_trip_publish_seconds` measures that path), so every
//!   dispatcher answers that tenant's events as the hook's fault within one sync. Then the
//!   tenant is added to `status.breaker.open` (`state: Open`, the newest trip's
//!   trippedAt, reason, dispatcher) with `CircuitOpen=True` (reason `BreakerTripped`) by
//!   field manager `agenthooks-operator-breaker`, a Warning Event `CircuitOpen` naming
//!   the tenant is emitted and `security.hook.circuit_breaker` logged — once per trip,
//!   whatever the number of dispatchers reporting it. A trip of a hook with 256 tenants
//!   open already is refused (`result="too_many"`); one a probe already closed is ignored
//!   (`already_closed`). A status write the API server refuses permanently
//!   ([`api::refusal`]: e.g. `403`, `422`) is logged as an error and counted
//!   (`agenthooks_operator_breaker_trips_total{result="refused"}`); the breaker stays open
//!   in the snapshots of this leader.
//! - Closes (CONTRACT §6.4): a close whose hook version matches removes the tenant's
//!   breaker from the index unless it opened after `openedAt` (a newer trip), publishes at
//!   once, then removes the tenant from `status.breaker.open`; when none is left the
//!   breaker is written `Closed` with `CircuitOpen=False` (reason `BreakerClosed`). A
//!   Normal Event `CircuitClosed`, the log key and
//!   `agenthooks_operator_breaker_closes_total{result}` follow.
//! - Executions ([`writer`], [`executions`]): counts of a hook the index does not hold
//!   under that namespace/name **with that uid** are acknowledged and dropped without any
//!   API call (`agenthooks_operator_execution_counts_dropped_total{reason="unknown_hook"}`).
//!   The others are merged per hook and written in batches at most once per hook per
//!   [`ReportConfig::write_interval`] (default 1 s), by read-modify-write with a
//!   `resourceVersion` precondition (field manager `agenthooks-operator-executions`,
//!   through the status writer [`crate::status::writer`]: a 409 is read again and
//!   retried, each read and patch bounded, nothing sent unless this replica leads), then
//!   every report whose counts were in the batch is acknowledged
//!   (`agenthooks_operator_status_writes_total{kind="executions",outcome="written"}`). A write the API
//!   server refuses permanently drops that hook's counts (logged as an error with the
//!   hook and the API error, counted with `reason="forbidden"|"invalid"|"refused"`) and
//!   the report is acknowledged: resending it could never succeed.
//!
//! Modules: [`validate`] (body rules), [`times`] (clamping reported times), [`dedup`]
//! (report ids), [`breaker`] (breaker status: trips, closes, resets), [`executions`] (count merge and write),
//! [`writer`] (group commit), [`api`] (timeouts and permanent refusals).

pub mod api;
pub mod breaker;
pub mod dedup;
pub mod executions;
pub mod times;
pub mod validate;
pub mod writer;

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use agenthooks_crds::AgentHook;
use agenthooks_crds::report::{CloseReport, ReportAck, TripReport};
use axum::Router;
use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{DefaultBodyLimit, Extension, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use k8s_openapi::api::core::v1::ObjectReference;
use kube::runtime::events::{Event as KubeEvent, EventType, Recorder, Reporter};
use kube::{Api, Client};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use crate::breaker_window::{BreakerWindows, HookVersion};
use crate::index::{CloseMatch, HookKey, TripMatch};
use crate::shared::{Serving, Shared, lock};
use crate::sync_auth::{SyncCaller, no_caller};
use breaker::{CloseWrite, TripWrite};
use dedup::{AttemptResult, Begin, Progress, ReportKey, ReportLog};
use validate::Checked;
use writer::{ExecutionWriter, HookOutcome};

/// Largest accepted body.
pub const MAX_BODY_BYTES: usize = 4 * 1024 * 1024;
/// Default of [`ReportConfig::write_interval`].
pub const DEFAULT_WRITE_INTERVAL: Duration = Duration::from_secs(1);
/// Default of [`ReportConfig::ack_timeout`].
pub const DEFAULT_ACK_TIMEOUT: Duration = Duration::from_secs(8);
/// How often the breaker windows are pruned besides on every report: observations older
/// than the window, and hook versions the index no longer holds published.
pub const WINDOW_PRUNE_INTERVAL: Duration = Duration::from_secs(30);

/// Settings of the report endpoint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReportConfig {
    /// Least time between two `status.executions` writes of one hook (batch interval).
    pub write_interval: Duration,
    /// How long a request waits for its report to be persisted before answering 504.
    pub ack_timeout: Duration,
}

impl Default for ReportConfig {
    fn default() -> Self {
        ReportConfig {
            write_interval: DEFAULT_WRITE_INTERVAL,
            ack_timeout: DEFAULT_ACK_TIMEOUT,
        }
    }
}

/// What the handler and the attempts share.
struct Core {
    shared: Arc<Shared>,
    client: Client,
    writer: Arc<ExecutionWriter>,
    log: Mutex<ReportLog>,
    windows: Mutex<BreakerWindows>,
    recorder: Recorder,
    ack_timeout: Duration,
}

/// Starts the execution writer and returns the `POST /v1/report` route, writing
/// executions at most once per hook per `shared.config.status_write_interval`
/// (`--status-write-interval-ms`).
pub fn start(shared: Arc<Shared>, client: Client, cancel: CancellationToken) -> Router {
    let config = ReportConfig {
        write_interval: shared.config.status_write_interval,
        ..ReportConfig::default()
    };
    start_with(shared, client, cancel, config)
}

/// Like [`start`] with explicit settings. Must be called inside a Tokio runtime (it
/// spawns the writer, which stops on `cancel`).
pub fn start_with(
    shared: Arc<Shared>,
    client: Client,
    cancel: CancellationToken,
    config: ReportConfig,
) -> Router {
    let writer = ExecutionWriter::new(config.write_interval);
    let write_client = client.clone();
    let status_writer = shared.status_writer();
    tokio::spawn(writer.clone().run(
        move |hook: writer::HookRef, counts: executions::Counts| {
            let api: Api<AgentHook> = Api::namespaced(write_client.clone(), &hook.namespace);
            let w = status_writer.clone();
            async move { executions::write(&w, &api, &hook.name, &hook.uid, &counts).await }
        },
        shared.serving.subscribe(),
        shared.metrics.clone(),
        cancel.clone(),
    ));
    let recorder = Recorder::new(
        client.clone(),
        Reporter {
            controller: crate::FIELD_MANAGER.into(),
            instance: Some(shared.config.lease.identity.clone()),
        },
    );
    let core = Arc::new(Core {
        shared,
        client,
        writer,
        log: Mutex::new(ReportLog::default()),
        windows: Mutex::new(BreakerWindows::new()),
        recorder,
        ack_timeout: config.ack_timeout,
    });
    tokio::spawn(prune_windows_every(
        core.clone(),
        WINDOW_PRUNE_INTERVAL,
        cancel,
    ));
    Router::new()
        .route("/v1/report", post(post_report))
        .layer(DefaultBodyLimit::max(MAX_BODY_BYTES))
        .with_state(core)
}

fn json_error(status: StatusCode, message: impl Into<String>) -> Response {
    (
        status,
        axum::Json(serde_json::json!({ "error": message.into() })),
    )
        .into_response()
}

fn unavailable(serving: Serving, why: &str) -> Response {
    answer(StatusCode::SERVICE_UNAVAILABLE, serving, why)
}

/// Not (fully) persisted yet: resend the same report.
fn not_persisted(serving: Serving, why: &str) -> Response {
    answer(StatusCode::GATEWAY_TIMEOUT, serving, why)
}

fn answer(status: StatusCode, serving: Serving, why: &str) -> Response {
    (status, axum::Json(serving.error_body(why))).into_response()
}

async fn post_report(
    State(core): State<Arc<Core>>,
    caller: Option<Extension<SyncCaller>>,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    let Some(Extension(caller)) = caller else {
        return no_caller().into_response();
    };
    let received = Instant::now();
    let received_at = chrono::Utc::now();
    let count = |result: &str| {
        core.shared
            .metrics
            .reports_total
            .with_label_values(&[result])
            .inc()
    };
    let bytes = match body {
        Ok(b) => b,
        Err(e) if e.status() == StatusCode::PAYLOAD_TOO_LARGE => {
            count("too_large");
            return json_error(
                StatusCode::PAYLOAD_TOO_LARGE,
                format!("body: larger than {MAX_BODY_BYTES} bytes"),
            );
        }
        Err(e) => {
            count("bad_request");
            return json_error(StatusCode::BAD_REQUEST, format!("body: {}", e.body_text()));
        }
    };
    let parsed = validate::parse(&bytes).and_then(|report| {
        let digest = dedup::digest(&report);
        validate::check(report, received_at).map(|checked| (digest, checked))
    });
    let (digest, checked) = match parsed {
        Ok(c) => c,
        Err(message) => {
            count("bad_request");
            return json_error(StatusCode::BAD_REQUEST, message);
        }
    };
    if let Err(foreign) = caller.acts_for(&checked.report.dispatcher) {
        count("forbidden");
        return foreign.into_response();
    }
    let serving = core.shared.serving();
    if !serving.ok() {
        count("unavailable");
        let why = if serving.leader {
            "the operator has not finished its initial sync"
        } else {
            "this operator replica is not the leader"
        };
        return unavailable(serving, why);
    }
    let key = (
        checked.report.dispatcher.clone(),
        checked.report.report_id.clone(),
    );
    let begin = lock(&core.log).begin(&key, digest, received);
    let (mut rx, duplicate) = match begin {
        Begin::Mismatch => {
            count("conflict");
            return json_error(
                StatusCode::CONFLICT,
                format!(
                    "reportId {:?} of dispatcher {:?} was already used for another body; nothing applied (send new content under a new reportId)",
                    key.1, key.0
                ),
            );
        }
        Begin::Done(mut ack) => {
            count("duplicate");
            ack.duplicate = true;
            return (StatusCode::OK, axum::Json(ack)).into_response();
        }
        Begin::InFlight(rx) => (rx, true),
        Begin::Start { progress, done } => {
            let rx = done.subscribe();
            let at = Received {
                instant: received,
                time: received_at,
            };
            tokio::spawn(apply(core.clone(), key, checked, progress, done, at));
            (rx, false)
        }
    };
    let outcome = tokio::time::timeout(core.ack_timeout, async {
        rx.wait_for(Option::is_some).await.map(|v| v.clone())
    })
    .await;
    match outcome {
        Ok(Ok(Some(Ok(mut ack)))) => {
            count(if duplicate { "duplicate" } else { "applied" });
            ack.duplicate = duplicate;
            (StatusCode::OK, axum::Json(ack)).into_response()
        }
        Ok(Ok(Some(Err(why)))) => {
            count("not_persisted");
            not_persisted(
                core.shared.serving(),
                &format!(
                    "the report is not fully persisted ({why}); send it again with the same reportId"
                ),
            )
        }
        Ok(Ok(None)) | Ok(Err(_)) => {
            count("not_persisted");
            not_persisted(
                core.shared.serving(),
                "applying the report was interrupted; send it again with the same reportId",
            )
        }
        Err(_) => {
            count("not_persisted");
            not_persisted(
                core.shared.serving(),
                &format!(
                    "the report is not yet persisted after {} s; send it again with the same reportId",
                    core.ack_timeout.as_secs_f64()
                ),
            )
        }
    }
}

/// When a report arrived: for latency metrics and for clamping reported times.
#[derive(Debug, Clone, Copy)]
struct Received {
    instant: Instant,
    time: chrono::DateTime<chrono::Utc>,
}

/// Applies one attempt at a report (in its own task, so a client that goes away does not
/// stop it half-way), records the result in the log and sends it on `done`.
async fn apply(
    core: Arc<Core>,
    key: ReportKey,
    checked: Checked,
    mut progress: Progress,
    done: watch::Sender<Option<AttemptResult>>,
    received: Received,
) {
    let Checked { report, executions } = checked;
    let metrics = &core.shared.metrics;

    // 0. The hooks the dispatcher cannot load (CONTRACT §10.4): kept in memory with its
    //    liveness; the ready pass turns them into `Ready=False HookUnavailable`.
    if let Some(list) = &report.unavailable {
        let set = lock(&core.shared.tracker).set_unavailable(
            &report.dispatcher,
            list.clone(),
            received.instant,
        );
        match set {
            Ok(changed) => {
                if changed {
                    tracing::info!(dispatcher = %report.dispatcher, unavailable = list.len(), "dispatcher reports the hooks it cannot load");
                    core.shared.tracker_changed.notify_one();
                }
            }
            Err(crate::ready::TooManyDispatchers) => {
                let result: AttemptResult = Err(
                    "unavailable: too many distinct dispatcher ids are tracked; retry later".into(),
                );
                lock(&core.log).finish(&key, &result, progress, Instant::now());
                done.send_replace(Some(result));
                return;
            }
        }
    }
    let trips_count = |result: &str| {
        metrics
            .breaker_trips_total
            .with_label_values(&[result])
            .inc()
    };
    let mut failures: Vec<String> = Vec::new();

    // 1. Trips and closes reach the snapshot first: reported trips and those the merged
    //    runs decide (now, or in an earlier attempt at this report whose status write
    //    failed), then the closes of half-open probes.
    let mut global = std::mem::take(&mut progress.decided_trips);
    global.extend(observe_runs(&core, &report, received.time));
    let mut to_write: Vec<&TripReport> = Vec::new();
    for trip in report.trips.iter().chain(&global) {
        match open_in_index(&core.shared, trip, received.instant) {
            TripMatch::Unknown => trips_count("unknown"),
            TripMatch::Stale => trips_count("stale"),
            TripMatch::AlreadyClosed => trips_count("already_closed"),
            TripMatch::TooMany => {
                trips_count("too_many");
                tracing::warn!(
                    hook = %format!("{}/{}", trip.namespace, trip.name), tenant = %trip.tenant,
                    max = crate::index::MAX_OPEN_TENANTS,
                    "breaker trip refused: the hook has the most open tenants already; the dispatchers' own breakers still answer that tenant's events as the hook's fault"
                );
            }
            TripMatch::AlreadyOpen | TripMatch::Opened { .. } => to_write.push(trip),
        }
    }
    if !report.trips.is_empty() {
        // A (hook, tenant) a dispatcher tripped on its own is open: its merged run is moot.
        let mut windows = lock(&core.windows);
        for trip in &to_write {
            windows.forget(&trip.uid, &trip.tenant);
        }
    }
    let closes_count = |result: &str| {
        metrics
            .breaker_closes_total
            .with_label_values(&[result])
            .inc()
    };
    let mut closes_to_write: Vec<&CloseReport> = Vec::new();
    for close in &report.closes {
        match close_in_index(&core.shared, close, received.instant) {
            CloseMatch::Unknown => closes_count("unknown"),
            CloseMatch::Stale => closes_count("stale"),
            CloseMatch::Newer { .. } => closes_count("newer"),
            // Not open in the index: the status may still show it (an earlier attempt at
            // this report closed it in the index, its status write failed).
            CloseMatch::NotOpen | CloseMatch::Closed { .. } => closes_to_write.push(close),
        }
    }
    // 2. Counts of hooks the index holds (with that uid) go to the next batch; the rest
    //    is acknowledged and dropped without any API call.
    let executions: Vec<_> = executions
        .into_iter()
        .filter(|(hook, _)| !progress.persisted.contains(&hook.uid))
        .collect();
    let (known, unknown) = split_known(&core.shared, executions);
    if !unknown.is_empty() {
        let runs: u64 = unknown.iter().map(|(_, c)| c.runs()).sum();
        metrics
            .execution_counts_dropped_total
            .with_label_values(&["unknown_hook"])
            .inc_by(runs);
        tracing::info!(
            dispatcher = %report.dispatcher, report_id = %report.report_id, hooks = unknown.len(), runs,
            first = %unknown.first().map(|(h, _)| format!("{}/{} (uid {})", h.namespace, h.name, h.uid)).unwrap_or_default(),
            "execution counts of hooks this operator does not hold (unknown namespace/name or uid) dropped"
        );
        progress
            .persisted
            .extend(unknown.into_iter().map(|(h, _)| h.uid));
    }
    let receivers: Vec<_> = known
        .into_iter()
        .map(|(hook, counts)| (hook.uid.clone(), core.writer.submit(hook, counts)))
        .collect();
    // 3. Breaker status, Events.
    let status_writer = core.shared.status_writer();
    for trip in to_write {
        let api: Api<AgentHook> = Api::namespaced(core.client.clone(), &trip.namespace);
        let hook = format!("{}/{}", trip.namespace, trip.name);
        match breaker::record_trip(&status_writer, &api, &report.dispatcher, trip).await {
            Ok(TripWrite::Recorded { entry, note }) => {
                progress.trips += 1;
                trips_count("recorded");
                tracing::warn!(
                    target: "security.hook.circuit_breaker",
                    hook = %hook,
                    tenant = %entry.tenant,
                    dispatcher = %report.dispatcher,
                    generation = trip.generation,
                    tripped_at = %entry.tripped_at,
                    fail_closed = entry.fail_closed,
                    reason = entry.reason.as_deref().unwrap_or_default(),
                    "security.hook.circuit_breaker: breaker opened for a tenant; its events are answered as an error of the hook (block on blocking events)"
                );
                publish_event(
                    &core,
                    ObjectRef::of(trip),
                    EventType::Warning,
                    breaker::EVENT_REASON_OPEN,
                    "TripBreaker",
                    note,
                )
                .await;
            }
            Ok(TripWrite::AlreadyOpen) => trips_count("already_open"),
            Ok(TripWrite::TooMany) => trips_count("too_many"),
            Ok(TripWrite::Stale) => trips_count("stale"),
            Ok(TripWrite::Gone) => trips_count("unknown"),
            Err(e) if api::refusal(&e).is_some() => {
                trips_count("refused");
                tracing::error!(
                    hook = %hook, uid = %trip.uid, tenant = %trip.tenant, error = %e,
                    "the API server refused to write the open breaker (it would refuse it again): the tenant's breaker is open in this leader's snapshots, but its status does not show the trip"
                );
            }
            Err(e) => {
                trips_count("failed");
                tracing::warn!(hook = %hook, error = %e, "writing an open breaker failed");
                failures.push(format!("trip of {hook}: {e}"));
            }
        }
    }
    for close in closes_to_write {
        let api: Api<AgentHook> = Api::namespaced(core.client.clone(), &close.namespace);
        let hook = format!("{}/{}", close.namespace, close.name);
        match breaker::record_close(&status_writer, &api, &report.dispatcher, close).await {
            Ok(CloseWrite::Recorded { left, note }) => {
                closes_count("recorded");
                tracing::info!(
                    target: "security.hook.circuit_breaker",
                    hook = %hook,
                    tenant = %close.tenant,
                    dispatcher = %report.dispatcher,
                    generation = close.generation,
                    opened_at = %close.opened_at,
                    closed_at = %close.closed_at,
                    still_open = left,
                    "security.hook.circuit_breaker: breaker closed for a tenant; a half-open probe found the handler answering"
                );
                publish_event(
                    &core,
                    ObjectRef::of(close),
                    EventType::Normal,
                    breaker::EVENT_REASON_CLOSED,
                    "CloseBreaker",
                    note,
                )
                .await;
            }
            Ok(CloseWrite::NotOpen) => closes_count("not_open"),
            Ok(CloseWrite::Newer) => closes_count("newer"),
            Ok(CloseWrite::Stale) => closes_count("stale"),
            Ok(CloseWrite::Gone) => closes_count("unknown"),
            Err(e) if api::refusal(&e).is_some() => {
                closes_count("refused");
                tracing::error!(
                    hook = %hook, uid = %close.uid, tenant = %close.tenant, error = %e,
                    "the API server refused to write the closed breaker (it would refuse it again): the tenant's breaker is closed in this leader's snapshots, but its status still shows it open"
                );
            }
            Err(e) => {
                closes_count("failed");
                tracing::warn!(hook = %hook, error = %e, "writing a closed breaker failed");
                failures.push(format!("close of {hook}: {e}"));
            }
        }
    }
    // 4. Wait for the batch holding the counts.
    for (uid, rx) in receivers {
        match rx.await {
            Ok(HookOutcome::Written) => {
                progress.executions += 1;
                progress.persisted.insert(uid);
            }
            Ok(HookOutcome::Gone) | Ok(HookOutcome::Dropped(_)) => {
                progress.persisted.insert(uid);
            }
            Ok(HookOutcome::Failed(why)) => failures.push(why),
            Err(_) => failures.push("the execution writer stopped".to_string()),
        }
    }
    progress.decided_trips = global;
    let result: AttemptResult = if failures.is_empty() {
        Ok(ReportAck {
            trips: progress.trips,
            executions: progress.executions,
            duplicate: false,
        })
    } else {
        Err(failures.join("; "))
    };
    lock(&core.log).finish(&key, &result, progress, Instant::now());
    done.send_replace(Some(result));
}

/// Execution counts per hook, as [`validate::check`] merged them.
type HookCounts = Vec<(writer::HookRef, executions::Counts)>;

/// Splits execution counts into those of hooks the index holds under that namespace/name
/// with that uid, and the rest.
fn split_known(shared: &Shared, executions: HookCounts) -> (HookCounts, HookCounts) {
    if executions.is_empty() {
        return (Vec::new(), Vec::new());
    }
    let index = lock(&shared.index);
    executions.into_iter().partition(|(hook, _)| {
        index
            .get(&HookKey::new(&hook.namespace, &hook.name))
            .is_some_and(|h| h.hook.uid == hook.uid)
    })
}

/// Every `every`, until `cancel`: prunes the breaker windows of observations older than
/// the window and of hook versions the index no longer holds published (deleted, edited,
/// reset, or open).
async fn prune_windows_every(core: Arc<Core>, every: Duration, cancel: CancellationToken) {
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = cancel.cancelled() => return,
            _ = tick.tick() => {}
        }
        prune_windows(&core, chrono::Utc::now());
    }
}

/// Prunes the windows (see [`prune_windows_every`]); returns the hook versions left.
fn prune_windows(core: &Core, now: chrono::DateTime<chrono::Utc>) -> usize {
    let tracked = {
        let mut windows = lock(&core.windows);
        windows.prune(now);
        windows.versions()
    };
    if tracked.is_empty() {
        return 0;
    }
    // Only versions found stale are dropped: one observed meanwhile is left alone.
    let stale: HashSet<HookVersion> = {
        let index = lock(&core.shared.index);
        tracked
            .into_iter()
            .filter(|((uid, generation, token), namespace, name)| {
                !index.get(&HookKey::new(namespace, name)).is_some_and(|h| {
                    h.hook.uid == *uid
                        && h.hook.generation == *generation
                        && h.hook.reset_token == *token
                        && h.is_published()
                })
            })
            .map(|(v, _, _)| v)
            .collect()
    };
    let mut windows = lock(&core.windows);
    windows.retain(|v, _, _| !stale.contains(v));
    windows.len()
}

/// Feeds the report's breaker observations of hook versions the index holds (accepted,
/// that tenant's breaker closed), received at `now`, to the windows; returns the trips
/// they decide.
fn observe_runs(
    core: &Core,
    report: &agenthooks_crds::report::Report,
    now: chrono::DateTime<chrono::Utc>,
) -> Vec<TripReport> {
    if report.breaker.is_empty() {
        return Vec::new();
    }
    let current: Vec<bool> = {
        let index = lock(&core.shared.index);
        report
            .breaker
            .iter()
            .map(|o| {
                index
                    .get(&HookKey::new(&o.namespace, &o.name))
                    .is_some_and(|h| {
                        h.hook.uid == o.uid
                            && h.hook.generation == o.generation
                            && h.hook.reset_token == o.reset_token
                            && h.is_published()
                            && !h.open_breakers().iter().any(|b| b.tenant == o.tenant)
                    })
            })
            .collect()
    };
    let mut windows = lock(&core.windows);
    windows.prune(now);
    let mut trips = Vec::new();
    for (obs, current) in report.breaker.iter().zip(current) {
        if !current {
            continue;
        }
        match windows.observe(&report.dispatcher, obs, now) {
            Ok(Some(t)) => trips.push(TripReport {
                uid: obs.uid.clone(),
                namespace: obs.namespace.clone(),
                name: obs.name.clone(),
                generation: obs.generation,
                reset_token: obs.reset_token.clone(),
                tenant: t.tenant.clone(),
                tripped_at: executions::format_time(t.tripped_at),
                fail_closed: t.fail_closed,
                reason: t.reason(),
            }),
            Ok(None) => {}
            Err(e) => tracing::warn!(error = %e, "breaker observation refused"),
        }
    }
    trips
}

/// Publishes the snapshot at once after a trip or a close changed it (`what` for the log);
/// on failure asks the publisher to retry.
fn publish_after(shared: &Shared, key: &HookKey, tenant: &str, what: &str, received: Instant) {
    match shared.publish_now() {
        Ok(version) => {
            let took = received.elapsed();
            shared
                .metrics
                .breaker_trip_publish_seconds
                .observe(took.as_secs_f64());
            tracing::info!(hook = %key, tenant, version = ?version, micros = took.as_micros() as u64, "breaker {what}; published the snapshot");
        }
        Err(e) => {
            tracing::error!(hook = %key, tenant, error = %e, "publishing after a breaker {what} failed; the publisher will retry");
            shared.publish_requested.notify_one();
        }
    }
}

/// Opens the trip's tenant breaker in the index and, when that changed the published
/// content, publishes the snapshot carrying it right away. A `trippedAt` that does not
/// parse (the validator refuses those) counts as the receipt time.
fn open_in_index(shared: &Shared, trip: &TripReport, received: Instant) -> TripMatch {
    let key = HookKey::new(&trip.namespace, &trip.name);
    let since_ms = times::parse_utc(&trip.tripped_at).map_or_else(
        |_| chrono::Utc::now().timestamp_millis(),
        |t| t.timestamp_millis(),
    );
    let found = lock(&shared.index).trip(
        &key,
        &trip.uid,
        trip.generation,
        trip.reset_token.as_deref(),
        &trip.tenant,
        since_ms,
        trip.fail_closed,
    );
    if let TripMatch::Opened {
        published_changed: true,
    } = found
    {
        publish_after(shared, &key, &trip.tenant, "tripped", received);
    }
    found
}

/// Closes the close's tenant breaker in the index and, when that changed the published
/// content, publishes the snapshot without it right away.
fn close_in_index(shared: &Shared, close: &CloseReport, received: Instant) -> CloseMatch {
    let key = HookKey::new(&close.namespace, &close.name);
    let opened_at_ms =
        times::parse_utc(&close.opened_at).map_or(i64::MIN, |t| t.timestamp_millis());
    let found = lock(&shared.index).close(
        &key,
        &close.uid,
        close.generation,
        close.reset_token.as_deref(),
        &close.tenant,
        opened_at_ms,
    );
    if let CloseMatch::Closed {
        published_changed: true,
    } = found
    {
        publish_after(shared, &key, &close.tenant, "closed", received);
    }
    found
}

/// The hook an Event is about.
struct ObjectRef {
    uid: String,
    namespace: String,
    name: String,
}

impl ObjectRef {
    fn of(hook: &impl HookNamed) -> ObjectRef {
        let (uid, namespace, name) = hook.named();
        ObjectRef {
            uid: uid.to_string(),
            namespace: namespace.to_string(),
            name: name.to_string(),
        }
    }
}

/// A report entry naming a hook (uid, namespace, name).
trait HookNamed {
    fn named(&self) -> (&str, &str, &str);
}

impl HookNamed for TripReport {
    fn named(&self) -> (&str, &str, &str) {
        (&self.uid, &self.namespace, &self.name)
    }
}

impl HookNamed for CloseReport {
    fn named(&self) -> (&str, &str, &str) {
        (&self.uid, &self.namespace, &self.name)
    }
}

/// An Event of a recorded trip (Warning) or close (Normal) on `hook`. Failures are
/// logged, never fatal.
async fn publish_event(
    core: &Core,
    hook: ObjectRef,
    type_: EventType,
    reason: &str,
    action: &str,
    note: String,
) {
    let reference = ObjectReference {
        api_version: Some(format!(
            "{}/{}",
            agenthooks_crds::GROUP,
            agenthooks_crds::VERSION
        )),
        kind: Some("AgentHook".into()),
        name: Some(hook.name),
        namespace: Some(hook.namespace),
        uid: Some(hook.uid),
        ..Default::default()
    };
    let event = KubeEvent {
        type_,
        reason: reason.into(),
        note: Some(breaker::cut(&note, 1000).to_string()),
        action: action.into(),
        secondary: None,
    };
    if let Err(e) = core.recorder.publish(&event, &reference).await {
        tracing::warn!(error = %e, "publishing an Event failed");
    }
}

#[cfg(test)]
mod tests;
