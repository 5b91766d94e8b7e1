//! `POST /v1/budget/reserve` and `POST /v1/budget/settle` (wire types in
//! [`agenthooks_crds::report`]).
//!
//! Answers of both:
//! - `413 {"error"}` for a body over [`MAX_BODY_BYTES`];
//! - `401 {"error"}` without an authenticated caller, `403 {"error", "field":
//!   "dispatcher"}` when `dispatcher` is not the authenticated caller
//!   ([`crate::sync_auth`]): nothing reserved, settled or counted;
//! - `400 {"error", "field"}` for a body that is not the request's JSON or a bad field
//!   (`dispatcher`, `tenant`: 1–253 characters without control characters;
//!   `reservationId`: 32 lowercase hex digits, as a reserve answers; `tokens` 1 to [`MAX_CALL_TOKENS`](super::ledger::MAX_CALL_TOKENS) on reserve, >= 0 on settle);
//! - `503 {"error", "leader", "synced"}` on a replica that is not the synced leader or
//!   has not installed the budgets yet (the dispatcher tries its next operator URL).
//!
//! Reserve: `200` [`ReserveResponse`] whether granted or not (`reason`
//! `BudgetExhausted`, `BudgetNotFound`, or `BudgetUnavailable` during the failover
//! hold-off of a new leader: the dispatcher fails closed, so that prompt call is not
//! made and a blocking event blocks); `429 {"error"}` when the budget already holds
//! [`MAX_RESERVATIONS`] reservations.
//!
//! Settle: `200` [`agenthooks_crds::report::SettleResponse`] once the tokens are in
//! `status.used` (or at once for a duplicate or a release); tokens above the
//! reservation (or above [`MAX_CALL_TOKENS`](super::ledger::MAX_CALL_TOKENS) for an unknown id) are not counted, but
//! logged and added to `agenthooks_budget_settle_overage_tokens_total`;
//! `403 {"error", "field": "reservationId"}` when another dispatcher holds the
//! reservation, `409 {"error"}` when it was made for another tenant (nothing counted;
//! final; CONTRACT §9.4); `404 {"error", "reason": "BudgetNotFound"}` when the
//! tenant has no accepted budget (nothing to count: drop it); `503` when the write did
//! not finish within [`Settings::settle_wait`](super::Settings::settle_wait) (the tokens
//! stay counted and the write is retried in the background; retry with the same
//! `reservationId`: it is counted once, and answered `duplicate` once written) or this
//! replica lost the budget before writing it (retry: the new leader counts it).

use std::sync::Arc;
use std::time::{Duration, Instant};

use agenthooks_crds::budget::period_of;
use agenthooks_crds::report::{
    REASON_BUDGET_EXHAUSTED, REASON_BUDGET_NOT_FOUND, ReserveRequest, ReserveResponse,
    SettleRequest,
};
use agenthooks_crds::rules::ledger::{
    check_reserve as check_reserve_tokens, check_settle as check_settle_tokens,
};
use axum::Router;
use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{DefaultBodyLimit, Extension, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use serde::de::DeserializeOwned;

use super::Budgets;
use super::ledger::{MAX_RESERVATIONS, ReserveOutcome, SettleOutcome, SettleStep};
use super::writer;
use crate::shared::{Serving, lock};
use crate::sync_auth::{SyncCaller, SyncRefusal, no_caller};

/// Largest request body accepted.
pub const MAX_BODY_BYTES: usize = 64 * 1024;
/// Longest id, tenant or dispatcher name accepted.
pub const MAX_NAME_LEN: usize = 253;
/// Longest `hook` accepted (`namespace/name`).
pub const MAX_HOOK_LEN: usize = 507;
/// How long a settle waits for its write before answering 503, by default (the
/// dispatcher's attempt waits 35 s).
pub const SETTLE_WAIT: Duration = Duration::from_secs(30);

/// The two routes, sharing `budgets`.
pub fn router(budgets: Arc<Budgets>) -> Router {
    Router::new()
        .route("/v1/budget/reserve", post(reserve))
        .route("/v1/budget/settle", post(settle))
        .layer(DefaultBodyLimit::max(MAX_BODY_BYTES))
        .with_state(budgets)
}

/// A JSON answer (small, so it can travel in a `Result`).
struct Answer(StatusCode, serde_json::Value);

impl IntoResponse for Answer {
    fn into_response(self) -> Response {
        (self.0, axum::Json(self.1)).into_response()
    }
}

fn json(status: StatusCode, body: serde_json::Value) -> Answer {
    Answer(status, body)
}

fn bad_request(field: &str, message: String) -> Answer {
    json(
        StatusCode::BAD_REQUEST,
        serde_json::json!({ "error": message, "field": field }),
    )
}

fn unavailable(serving: Serving, why: &str) -> Answer {
    json(StatusCode::SERVICE_UNAVAILABLE, serving.error_body(why))
}

/// The body as `T`, or the answer refusing it (413, or 400 naming the field).
fn parse<T: DeserializeOwned>(body: Result<Bytes, BytesRejection>) -> Result<T, Answer> {
    let bytes = body.map_err(|e| {
        let status = e.status();
        json(status, serde_json::json!({ "error": e.body_text() }))
    })?;
    match axum::Json::<T>::from_bytes(&bytes) {
        Ok(axum::Json(v)) => Ok(v),
        Err(e) => {
            let text = e.body_text();
            // serde names the path: "tokens: invalid type..." or "missing field `tenant`"
            let field = text
                .rsplit_once("missing field `")
                .and_then(|(_, rest)| rest.split('`').next())
                .or_else(|| {
                    text.split_once(": ")
                        .and_then(|(_, rest)| rest.split_once(": "))
                        .map(|(path, _)| path)
                        .filter(|p| !p.contains(' '))
                })
                .unwrap_or("body")
                .to_string();
            Err(bad_request(&field, text))
        }
    }
}

/// A name: 1..=`max` characters, no control characters.
fn check_name(field: &str, value: &str, max: usize) -> Result<(), Answer> {
    if value.is_empty() {
        return Err(bad_request(
            field,
            format!("{field}: required, must not be empty"),
        ));
    }
    if value.len() > max {
        return Err(bad_request(
            field,
            format!("{field}: {} bytes; at most {max}", value.len()),
        ));
    }
    if value.chars().any(char::is_control) {
        return Err(bad_request(
            field,
            format!("{field}: holds control characters"),
        ));
    }
    Ok(())
}

fn check_serving(budgets: &Budgets) -> Result<(), Answer> {
    let s = budgets.serving();
    if s.ok() {
        return Ok(());
    }
    Err(unavailable(
        s,
        if s.leader {
            "the operator has not finished its initial sync"
        } else {
            "this operator replica is not the leader"
        },
    ))
}

fn check_reserve(req: &ReserveRequest) -> Result<(), Answer> {
    check_name(
        "dispatcher",
        &req.dispatcher,
        crate::sync_auth::MAX_DISPATCHER_ID_LEN,
    )?;
    check_name("tenant", &req.tenant, MAX_NAME_LEN)?;
    if let Some(h) = &req.hook {
        check_name("hook", h, MAX_HOOK_LEN)?;
    }
    check_reserve_tokens(req.tokens).map_err(|e| bad_request("tokens", format!("tokens: {e}")))
}

/// A `reservationId` is what a reserve answered: 32 lowercase hex digits (a v4 UUID,
/// simple form: every operator version issued these). Anything else is refused (`400`)
/// before it is looked up, so a dispatcher cannot fill the leader's books of settled
/// ids with long made-up ones.
fn check_reservation_id(id: &str) -> Result<(), Answer> {
    if id.len() == 32 && id.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')) {
        Ok(())
    } else {
        Err(bad_request(
            "reservationId",
            format!(
                "reservationId: {:?} is not a reservation id (32 lowercase hex digits, as a reserve answers)",
                id.chars().take(64).collect::<String>()
            ),
        ))
    }
}

fn check_settle(req: &SettleRequest) -> Result<(), Answer> {
    check_name(
        "dispatcher",
        &req.dispatcher,
        crate::sync_auth::MAX_DISPATCHER_ID_LEN,
    )?;
    check_name("tenant", &req.tenant, MAX_NAME_LEN)?;
    check_reservation_id(&req.reservation_id)?;
    check_settle_tokens(req.tokens).map_err(|e| bad_request("tokens", format!("tokens: {e}")))
}

/// The caller's own request, or the answer refusing it (401 without a caller, 403 when
/// `dispatcher` names another).
fn check_caller(
    caller: Option<Extension<SyncCaller>>,
    dispatcher: &str,
) -> Result<(), SyncRefusal> {
    let Some(Extension(caller)) = caller else {
        return Err(no_caller());
    };
    caller.acts_for(dispatcher).map_err(SyncRefusal::from)
}

async fn reserve(
    State(budgets): State<Arc<Budgets>>,
    caller: Option<Extension<SyncCaller>>,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    let req: ReserveRequest = match parse(body) {
        Ok(r) => r,
        Err(resp) => return resp.into_response(),
    };
    if let Err(resp) = check_reserve(&req) {
        return resp.into_response();
    }
    if let Err(refused) = check_caller(caller, &req.dispatcher) {
        return refused.into_response();
    }
    if let Err(resp) = check_serving(&budgets) {
        return resp.into_response();
    }
    let period = period_of(chrono::Utc::now());
    let (outcome, expired, figures) = {
        let mut ledger = lock(&budgets.ledger);
        let outcome = ledger.reserve(&req, Instant::now(), &period);
        (
            outcome,
            ledger.take_expired(),
            ledger.figures_of(&req.tenant, &period),
        )
    };
    budgets.metrics.reservations_expired_total.inc_by(expired);
    if let Some(f) = &figures {
        budgets.metrics.set(f);
    }
    let m = &budgets.metrics.reservations_total;
    let answered = match outcome {
        ReserveOutcome::Granted {
            reservation_id,
            remaining,
            budget,
        } => {
            m.with_label_values(&["granted"]).inc();
            tracing::debug!(tenant = %req.tenant, dispatcher = %req.dispatcher, hook = ?req.hook, tokens = req.tokens, remaining, reservation = %reservation_id, "budget reservation granted");
            json(
                StatusCode::OK,
                serde_json::to_value(ReserveResponse {
                    granted: true,
                    reservation_id: Some(reservation_id),
                    reason: None,
                    remaining,
                    budget: Some(budget.to_string()),
                })
                .unwrap_or_default(),
            )
        }
        ReserveOutcome::Refused {
            reason,
            remaining,
            budget,
        } => {
            m.with_label_values(&[match reason {
                REASON_BUDGET_NOT_FOUND => "not_found",
                REASON_BUDGET_EXHAUSTED => "exhausted",
                _ => "unavailable",
            }])
            .inc();
            tracing::info!(tenant = %req.tenant, dispatcher = %req.dispatcher, hook = ?req.hook, tokens = req.tokens, remaining, reason, "budget reservation refused");
            json(
                StatusCode::OK,
                serde_json::to_value(ReserveResponse {
                    granted: false,
                    reservation_id: None,
                    reason: Some(reason.to_string()),
                    remaining,
                    budget: budget.map(|b| b.to_string()),
                })
                .unwrap_or_default(),
            )
        }
        ReserveOutcome::TooMany { budget } => {
            m.with_label_values(&["too_many"]).inc();
            json(
                StatusCode::TOO_MANY_REQUESTS,
                serde_json::json!({
                    "error": format!("budget {budget} already holds {MAX_RESERVATIONS} reservations in flight; settle or release some")
                }),
            )
        }
    };
    answered.into_response()
}

async fn settle(
    State(budgets): State<Arc<Budgets>>,
    caller: Option<Extension<SyncCaller>>,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    let req: SettleRequest = match parse(body) {
        Ok(r) => r,
        Err(resp) => return resp.into_response(),
    };
    if let Err(resp) = check_settle(&req) {
        return resp.into_response();
    }
    if let Err(refused) = check_caller(caller, &req.dispatcher) {
        return refused.into_response();
    }
    if let Err(resp) = check_serving(&budgets) {
        return resp.into_response();
    }
    let period = period_of(chrono::Utc::now());
    let (step, session) = {
        let mut ledger = lock(&budgets.ledger);
        (
            ledger.settle(&req, Instant::now(), &period),
            ledger.session(),
        )
    };
    let outcome = match step {
        SettleStep::Done(o) => {
            if matches!(&o, SettleOutcome::Persisted(r) if !r.duplicate) {
                budgets
                    .metrics
                    .settles_total
                    .with_label_values(&["released"])
                    .inc();
                budgets.refresh_tenant(&req.tenant);
                return answer(&budgets, o, false).into_response();
            }
            o
        }
        SettleStep::Wait {
            answer: rx,
            spawn_writer,
            capped,
        } => {
            if let Some(c) = capped {
                budgets
                    .metrics
                    .settle_overage_tokens_total
                    .with_label_values(&[c.cap.label()])
                    .inc_by(u64::try_from(c.overage()).unwrap_or(0));
                tracing::warn!(tenant = %req.tenant, dispatcher = %req.dispatcher, reservation = %req.reservation_id, claimed = c.claimed, counted = c.counted, cap = c.cap.label(), "budget settle above its cap; the excess is not counted");
            }
            if let Some(key) = spawn_writer {
                tokio::spawn(writer::run(budgets.clone(), key, session));
            }
            budgets.refresh_tenant(&req.tenant);
            let wait = budgets.settings.settle_wait;
            match tokio::time::timeout(wait, rx).await {
                Ok(Ok(o)) => o,
                Ok(Err(_)) => SettleOutcome::Failed(
                    "this replica no longer holds the budget (leadership changed, or the budget was deleted or replaced) before the settle was written; retry".into(),
                ),
                Err(_) => SettleOutcome::Failed(format!(
                    "the budget status write did not finish within {} ms; the tokens stay counted and the write is retried; retry with the same reservationId",
                    wait.as_millis()
                )),
            }
        }
    };
    answer(&budgets, outcome, true).into_response()
}

fn answer(budgets: &Budgets, outcome: SettleOutcome, count: bool) -> Answer {
    let result = match &outcome {
        SettleOutcome::Persisted(r) if r.duplicate => "duplicate",
        SettleOutcome::Persisted(_) => "written",
        SettleOutcome::NotFound => "not_found",
        SettleOutcome::NotHolder(_) => "not_holder",
        SettleOutcome::Mismatch(_) => "mismatch",
        SettleOutcome::Failed(_) => "failed",
    };
    if count {
        budgets
            .metrics
            .settles_total
            .with_label_values(&[result])
            .inc();
    }
    match outcome {
        SettleOutcome::Persisted(r) => {
            json(StatusCode::OK, serde_json::to_value(r).unwrap_or_default())
        }
        SettleOutcome::NotFound => json(
            StatusCode::NOT_FOUND,
            serde_json::json!({
                "error": "the tenant has no accepted TenantHookBudget; nothing to count",
                "reason": REASON_BUDGET_NOT_FOUND,
            }),
        ),
        SettleOutcome::NotHolder(why) => {
            tracing::warn!(error = %why, "budget settle refused: another dispatcher's reservation");
            json(
                StatusCode::FORBIDDEN,
                serde_json::json!({ "error": why, "field": "reservationId" }),
            )
        }
        SettleOutcome::Mismatch(why) => {
            tracing::warn!(error = %why, "budget settle refused: another dispatcher's or tenant's reservation");
            json(StatusCode::CONFLICT, serde_json::json!({ "error": why }))
        }
        SettleOutcome::Failed(why) => unavailable(budgets.serving(), &why),
    }
}
