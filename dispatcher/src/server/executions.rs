//! The audit history API (issue 5 point 2; CONTRACT §7; DESIGN "Dispatch API"):
//! `GET /v1/executions` and `GET /v1/executions/{id}`.
//!
//! `GET /v1/executions?namespace=NS&hook=NS/NAME&decision=block&since=RFC3339&limit=N&cursor=C`
//! answers `{"executions": [row...], "nextCursor": "..." | null}`, newest first (highest
//! id first). `nextCursor` names the last row of the page; the next page holds only
//! older rows, so rows written meanwhile never shift a page (no duplicates, no gaps).
//! Filters combine with AND; `namespace` keeps the rows of hooks in that namespace;
//! `hook` matches by namespace and name (and implies its namespace: `namespace` too must
//! name the same one), so rows of a deleted hook stay findable. `limit` is 1..=500
//! (default 50). Unknown or repeated parameters and bad values are 400 `{"error",
//! "field"}` naming the parameter.
//!
//! A row, camelCase like the rest of this API (`metadata` keeps the snake_case keys of
//! CONTRACT §7.5 as stored):
//! `{"id", "hookUid", "hookNamespace", "hookName", "tenant", "sessionId", "event",
//! "inputHash", "decision", "durationMs", "dedupKey", "error", "hasErrorDetail",
//! "errorDetailKeyId", "metadata", "createdAt"}` — `error` is the redacted summary;
//! `error_detail` itself is never listed, only whether it exists and its key id.
//!
//! `GET /v1/executions/{id}` answers one row (404 when unknown). With
//! `?errorDetail=true` it adds `errorDetail` (the decrypted full error). A detail that cannot
//! be opened (its key id is no longer loaded, a wrong key, no key at all) gives the row
//! with `errorDetail: null` and `errorDetailError` saying why: never a 500, never
//! ciphertext or plaintext of another key.
//!
//! Who may read (CONTRACT §9.5, [`super::access`]): rows name the tenants, sessions and
//! errors of every tenant, and the dispatch port is reachable by every tenant's agents.
//! - With `--kubernetes-callers`, Kubernetes RBAC on the caller's ServiceAccount (or
//!   other) token: the list needs `list` on `agenthooks/executions` in the namespace it
//!   reads (`namespace`, or `hook`'s), or cluster-wide without one (403 `{"error",
//!   "field"}` naming the permission, the namespace and the parameter); one row needs
//!   `get` on `agenthooks/executions` in the row's `hookNamespace` — and its
//!   `errorDetail=true` the same — else it is answered exactly as an unknown id (404), so
//!   the ids of other namespaces' rows tell nothing.
//! - Standalone, the admin bearer token (`--admin-token-file`; 403 otherwise, checked
//!   before anything is read) for every row.
//!
//! 503 when audit is off on this dispatcher or its database has not answered yet.

use std::sync::Arc;

use axum::extract::{Path, RawQuery, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use chrono::SecondsFormat;
use serde_json::{Value, json};

use super::access::reader;
use super::{AppState, error};
use crate::audit::row::{AuditRow, detail_binding};
use crate::audit::store::{AuditStore, ExecutionParams, ExecutionQuery, StoreError};
use crate::identity::Access;

/// The query parameters `GET /v1/executions` takes.
const LIST_PARAMS: [&str; 6] = ["namespace", "hook", "decision", "since", "limit", "cursor"];

/// `GET /v1/executions`.
pub(super) async fn list(
    State(state): State<Arc<AppState>>,
    RawQuery(q): RawQuery,
    headers: HeaderMap,
) -> Response {
    // Rows name tenants, sessions and errors of every tenant: who is asking is checked
    // before anything else (a caller without a credential learns nothing).
    const WHAT: &str = "GET /v1/executions";
    let reader = match reader(&state, &headers, WHAT).await {
        Ok(r) => r,
        Err(refused) => return refused,
    };
    let pairs = match query_pairs(q.as_deref(), &LIST_PARAMS) {
        Ok(p) => p,
        Err(bad) => return bad.response(),
    };
    let mut params = ExecutionParams::default();
    for (k, v) in pairs {
        let slot = match k.as_str() {
            "namespace" => &mut params.namespace,
            "hook" => &mut params.hook,
            "decision" => &mut params.decision,
            "since" => &mut params.since,
            "limit" => &mut params.limit,
            _ => &mut params.cursor,
        };
        *slot = Some(v);
    }
    let query = match ExecutionQuery::from_params(&params) {
        Ok(q) => q,
        Err(e) => return error(StatusCode::BAD_REQUEST, e.field, e.to_string()),
    };
    // The rows of one namespace (the query reads only those), or of every namespace.
    let scope = query.scope().unwrap_or("");
    let field = if query.namespace.is_none() && query.hook.is_some() {
        "hook"
    } else {
        "namespace"
    };
    if let Err(forbidden) = reader
        .require(&Access::list_executions(scope), WHAT, field)
        .await
    {
        return forbidden;
    }
    let store = match store(&state) {
        Ok(s) => s,
        Err(off) => return unavailable(off),
    };
    match store.list(&query).await {
        Ok(page) => axum::Json(json!({
            "executions": page.rows.iter().map(row_json).collect::<Vec<_>>(),
            "nextCursor": page.next_cursor,
        }))
        .into_response(),
        Err(e) => store_error(&e),
    }
}

/// `GET /v1/executions/{id}`.
pub(super) async fn get_one(
    State(state): State<Arc<AppState>>,
    Path(id): Path<String>,
    RawQuery(q): RawQuery,
    headers: HeaderMap,
) -> Response {
    let reader = match reader(&state, &headers, "GET /v1/executions/{id}").await {
        Ok(r) => r,
        Err(refused) => return refused,
    };
    let pairs = match query_pairs(q.as_deref(), &["errorDetail"]) {
        Ok(p) => p,
        Err(bad) => return bad.response(),
    };
    let want_detail = match pairs.first().map(|(_, v)| v.as_str()) {
        None | Some("false") => false,
        Some("true") => true,
        Some(other) => {
            return error(
                StatusCode::BAD_REQUEST,
                "errorDetail",
                format!("errorDetail: expected true or false, got {other:?}"),
            );
        }
    };
    let id = match id.parse::<i64>() {
        Ok(id) if id >= 1 => id,
        _ => {
            return error(
                StatusCode::BAD_REQUEST,
                "id",
                format!("id: expected a row id (an integer from 1), got {id:?}"),
            );
        }
    };
    let store = match store(&state) {
        Ok(s) => s,
        Err(off) => return unavailable(off),
    };
    let row = match store.get(id).await {
        Ok(Some(r)) => r,
        Ok(None) => return no_execution(id),
        Err(e) => return store_error(&e),
    };
    // A row of a namespace the reader may not read is answered as an unknown id: its
    // existence tells nothing. The error detail needs the same permission.
    match reader
        .may(&Access::get_execution(&row.hook_namespace))
        .await
    {
        Ok(true) => {}
        Ok(false) => return no_execution(id),
        Err(unavailable) => return unavailable,
    }
    let mut body = row_json(&row);
    if want_detail {
        let (detail, why) = open_detail(&state, &row);
        body["errorDetail"] = detail.map_or(Value::Null, Value::String);
        if let Some(why) = why {
            body["errorDetailError"] = Value::String(why);
        }
    }
    axum::Json(body).into_response()
}

/// 404 for an id with no row — or a row the reader may not read: the same answer.
fn no_execution(id: i64) -> Response {
    error(
        StatusCode::NOT_FOUND,
        "id",
        format!("id: no execution {id}"),
    )
}

/// The decrypted `error_detail`, or why there is none (never an error response).
fn open_detail(state: &AppState, row: &AuditRow) -> (Option<String>, Option<String>) {
    let Some(sealed) = &row.error_detail else {
        return (
            None,
            Some(
                "this row has no error detail (the run had no error, or no --audit-key-file was set when it was written)"
                    .into(),
            ),
        );
    };
    let Some(keys) = state.engine.audit.keys() else {
        return (
            None,
            Some(format!(
                "error detail sealed with audit key {:?} cannot be opened: this dispatcher has no --audit-key-file",
                sealed.key_id
            )),
        );
    };
    match keys.open(sealed, detail_binding(&row.dedup_key)) {
        Ok(plain) => (Some(plain), None),
        // Messages of AuditKeyError carry no key material or plaintext.
        Err(e) => (None, Some(e.to_string())),
    }
}

/// One row as the API shows it (see the module docs).
fn row_json(r: &AuditRow) -> Value {
    json!({
        "id": r.id,
        "hookUid": r.hook_uid,
        "hookNamespace": r.hook_namespace,
        "hookName": r.hook_name,
        "tenant": r.tenant,
        "sessionId": r.session_id,
        "event": r.event,
        "inputHash": r.input_hash,
        "decision": r.decision.as_str(),
        "durationMs": r.duration_ms,
        "dedupKey": r.dedup_key,
        "error": r.error,
        "hasErrorDetail": r.error_detail.is_some(),
        "errorDetailKeyId": r.error_detail.as_ref().map(|d| d.key_id.as_str()),
        "metadata": r.metadata,
        "createdAt": r.created_at.to_rfc3339_opts(SecondsFormat::Micros, true),
    })
}

/// The audit store, or the 503 message that says why there is none.
fn store(state: &AppState) -> Result<&AuditStore, &'static str> {
    let audit = &state.engine.audit;
    match audit.store() {
        Some(s) => Ok(s),
        None if !audit.is_enabled() => Err(
            "audit is off on this dispatcher (--audit-db off): there is no history to read; start it with --audit-db sqlite://PATH or postgres://...",
        ),
        None => Err(
            "the audit database has not answered since this dispatcher started; try again (GET /readyz tells the audit state)",
        ),
    }
}

fn unavailable(message: &str) -> Response {
    error(StatusCode::SERVICE_UNAVAILABLE, "", message.to_owned())
}

/// A store error as an answer: 400 for a bad query, 500 for a corrupt row, else 503
/// (the database is unreachable or failing; try again).
fn store_error(e: &StoreError) -> Response {
    match e {
        StoreError::Query(q) => error(StatusCode::BAD_REQUEST, q.field, q.to_string()),
        StoreError::Corrupt { .. } => error(StatusCode::INTERNAL_SERVER_ERROR, "", e.to_string()),
        _ => {
            tracing::warn!(error = %e, "audit history read failed");
            error(StatusCode::SERVICE_UNAVAILABLE, "", e.to_string())
        }
    }
}

/// A query parameter refused by [`query_pairs`]: (field, message).
struct BadParam(String, String);

impl BadParam {
    fn response(self) -> Response {
        error(StatusCode::BAD_REQUEST, &self.0, self.1)
    }
}

/// Decodes `query` into (name, value) pairs, refusing names outside `allowed` and names
/// given twice (400 naming the parameter).
fn query_pairs(query: Option<&str>, allowed: &[&str]) -> Result<Vec<(String, String)>, BadParam> {
    let mut out: Vec<(String, String)> = Vec::new();
    for (k, v) in url::form_urlencoded::parse(query.unwrap_or("").as_bytes()) {
        let Some(name) = allowed.iter().find(|a| **a == k) else {
            let shown: String = k.chars().take(64).collect();
            let message = format!(
                "{shown}: unknown query parameter; expected {}",
                allowed.join(", ")
            );
            return Err(BadParam(shown, message));
        };
        if out.iter().any(|(n, _)| n == name) {
            return Err(BadParam(
                (*name).to_owned(),
                format!("{name}: given more than once"),
            ));
        }
        out.push(((*name).to_owned(), v.into_owned()));
    }
    Ok(out)
}
