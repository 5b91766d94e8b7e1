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

use axum::extract::rejection::PathRejection;
use axum::extract::{Path, RawQuery, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use chrono::SecondsFormat;
use serde::Serialize;
use serde_json::Value;

use super::access::{Principal, reader};
use super::{AppState, error};
use crate::audit::row::{AuditRow, detail_binding};
use crate::audit::store::{AuditStore, ExecutionParams, ExecutionQuery, StoreError};
use crate::decision::outcome::Outcome;
use crate::identity::Access;
use axum::Extension;

/// The query parameters `GET /v1/executions` takes (the fields of [`ExecutionParams`]).
pub(super) const LIST_PARAMS: [&str; 6] =
    ["namespace", "hook", "decision", "since", "limit", "cursor"];

/// `GET /v1/executions`: one page, newest first.
#[derive(Debug, Clone, PartialEq, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ExecutionPage {
    /// At most `limit` rows, highest id first.
    pub executions: Vec<ExecutionRow>,
    /// Give it as `cursor` for the next (older) page; `null` on the last page.
    pub next_cursor: Option<String>,
}

/// One audit row as the API shows it: one hook run (CONTRACT §7).
#[derive(Debug, Clone, PartialEq, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ExecutionRow {
    /// The row id (from 1): `GET /v1/executions/{id}`.
    pub id: Option<i64>,
    /// The AgentHook's `metadata.uid` at run time.
    pub hook_uid: String,
    /// The AgentHook's namespace.
    pub hook_namespace: String,
    /// The AgentHook's name.
    pub hook_name: String,
    /// The event's tenant.
    pub tenant: String,
    /// The event's `session_id`.
    pub session_id: String,
    /// The lifecycle event.
    pub event: agenthooks_crds::HookEvent,
    /// SHA-256 of the tool name and input: 64 lowercase hex characters.
    pub input_hash: String,
    /// What the hook itself came to (before `onTimeout` or the chain apply).
    pub decision: Outcome,
    /// Wall time of the run in milliseconds.
    pub duration_ms: u64,
    /// `<hook uid>:<event_id>`, unique.
    pub dedup_key: String,
    /// The redacted error summary (at most 256 bytes); `null` without an error.
    pub error: Option<String>,
    /// Whether a sealed full error is stored (`?errorDetail=true` opens it).
    pub has_error_detail: bool,
    /// The audit key id it is sealed with.
    pub error_detail_key_id: Option<String>,
    /// The run's metadata, snake_case keys as stored (CONTRACT §7.5).
    #[schemars(with = "serde_json::Map<String, Value>")]
    pub metadata: Value,
    /// When the run finished: RFC 3339, UTC, microseconds.
    #[schemars(extend("format" = "date-time"))]
    pub created_at: String,
}

/// `GET /v1/executions/{id}`: the row, and with `?errorDetail=true` its error detail.
#[derive(Debug, Clone, PartialEq, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ExecutionDetail {
    #[serde(flatten)]
    pub row: ExecutionRow,
    /// With `?errorDetail=true` only: the decrypted full error, `null` when it cannot be
    /// opened (then `errorDetailError` says why).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error_detail: Option<Option<String>>,
    /// Why `errorDetail` is `null`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error_detail_error: Option<String>,
}

/// The query `GET /v1/executions/{id}` takes.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DetailParams {
    /// `true`: add `errorDetail`, the decrypted full error (default `false`).
    pub error_detail: Option<bool>,
}

/// The path parameter of `GET /v1/executions/{id}`.
#[derive(Debug, Clone, PartialEq, Eq, serde::Deserialize, schemars::JsonSchema)]
pub struct RowId {
    /// A row id: an integer from 1.
    #[schemars(range(min = 1))]
    pub id: i64,
}

/// `GET /v1/executions`.
pub(super) async fn list(
    State(state): State<Arc<AppState>>,
    RawQuery(q): RawQuery,
    principal: Option<Extension<Principal>>,
    headers: HeaderMap,
) -> Response {
    // Rows name tenants, sessions and errors of every tenant: who is asking is checked
    // before anything else (a caller without a credential learns nothing).
    const WHAT: &str = "GET /v1/executions";
    let principal = principal.map(|Extension(p)| p);
    let reader = match reader(&state, &headers, principal.as_ref(), WHAT).await {
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
        Ok(page) => axum::Json(ExecutionPage {
            executions: page.rows.iter().map(ExecutionRow::of).collect(),
            next_cursor: page.next_cursor,
        })
        .into_response(),
        Err(e) => store_error(&e),
    }
}

/// `GET /v1/executions/{id}`.
pub(super) async fn get_one(
    State(state): State<Arc<AppState>>,
    id: Result<Path<String>, PathRejection>,
    RawQuery(q): RawQuery,
    principal: Option<Extension<Principal>>,
    headers: HeaderMap,
) -> Response {
    let principal = principal.map(|Extension(p)| p);
    let reader = match reader(
        &state,
        &headers,
        principal.as_ref(),
        "GET /v1/executions/{id}",
    )
    .await
    {
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
    // A path segment that is not UTF-8 once decoded is not an id either.
    let id = id.map(|p| p.0).unwrap_or_default();
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
    let mut body = ExecutionDetail {
        row: ExecutionRow::of(&row),
        error_detail: None,
        error_detail_error: None,
    };
    if want_detail {
        let (detail, why) = open_detail(&state, &row);
        body.error_detail = Some(detail);
        body.error_detail_error = why;
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

impl ExecutionRow {
    /// One stored row as the API shows it (see the module docs).
    fn of(r: &AuditRow) -> ExecutionRow {
        ExecutionRow {
            id: r.id,
            hook_uid: r.hook_uid.clone(),
            hook_namespace: r.hook_namespace.clone(),
            hook_name: r.hook_name.clone(),
            tenant: r.tenant.clone(),
            session_id: r.session_id.clone(),
            event: r.event,
            input_hash: r.input_hash.clone(),
            decision: r.decision,
            duration_ms: r.duration_ms,
            dedup_key: r.dedup_key.clone(),
            error: r.error.clone(),
            has_error_detail: r.error_detail.is_some(),
            error_detail_key_id: r.error_detail.as_ref().map(|d| d.key_id.clone()),
            metadata: r.metadata.clone(),
            created_at: r.created_at.to_rfc3339_opts(SecondsFormat::Micros, true),
        }
    }
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
            // A 4xx names its field: the parameter, or `query` for one without a name
            // (`?=false`).
            let shown: String = k.chars().take(64).collect();
            let (field, what) = if shown.is_empty() {
                ("query".to_owned(), "a query parameter without a name")
            } else {
                (shown, "unknown query parameter")
            };
            let message = format!("{field}: {what}; expected {}", allowed.join(", "));
            return Err(BadParam(field, message));
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

#[cfg(test)]
mod tests {
    use super::*;

    fn refused(query: &str) -> (String, String) {
        let BadParam(field, message) = query_pairs(Some(query), &["errorDetail"]).unwrap_err();
        (field, message)
    }

    #[test]
    fn query_pairs_name_the_parameter_or_query_for_a_nameless_one() {
        assert_eq!(
            query_pairs(Some("errorDetail=true"), &["errorDetail"]).ok(),
            Some(vec![("errorDetail".to_owned(), "true".to_owned())])
        );
        assert_eq!(
            refused("=false"),
            (
                "query".to_owned(),
                "query: a query parameter without a name; expected errorDetail".to_owned()
            )
        );
        assert_eq!(
            refused("x=1"),
            (
                "x".to_owned(),
                "x: unknown query parameter; expected errorDetail".to_owned()
            )
        );
        assert_eq!(
            refused("errorDetail=true&errorDetail=false"),
            (
                "errorDetail".to_owned(),
                "errorDetail: given more than once".to_owned()
            )
        );
    }
}
