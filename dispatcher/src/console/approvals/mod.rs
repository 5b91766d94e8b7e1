//! The Approvals pages (docs/approvals.md, docs/console.md): the HookApprovals the
//! signed-in person may list, one approval with its request, and Approve / Reject as that
//! person. Everything is asked of the API server with the person's own token
//! ([`kube`]); the API server decides who may answer (RBAC verb `approve`, and
//! `decidedBy` held to the person's name by the admission policy), and its refusal is
//! shown as it words it. Standalone there are no approvals (no operator makes them): the
//! page says so.

pub mod kube;
pub mod summary;

use std::sync::Arc;

use agenthooks_crds::approval::{ApprovalDecision, ApprovalState};
use axum::body::Bytes;
use axum::extract::{Path, RawQuery, State};
use axum::http::{HeaderMap, StatusCode, Uri};
use axum::response::{IntoResponse, Redirect, Response};

use super::handlers::{enc, error_page, only, pairs, value};
use super::kube::{KubeConsole, KubeError};
use super::session::Session;
use super::views::{approvals as view, layout};
use super::{Console, SignedIn, check_post, html};
use summary::{ApprovalFilters, ApprovalSummary};

type C = State<Arc<Console>>;

/// The page title of the list.
const TITLE: &str = "Approvals";

/// The namespaces the dispatcher knows (its snapshot's tenant map): where the list asks
/// one by one when the person may not list cluster-wide.
fn known_namespaces(c: &Console) -> Vec<String> {
    c.app
        .hooks()
        .map_or_else(Vec::new, |set| set.tenants.namespaces())
}

fn now_unix() -> i64 {
    chrono::Utc::now().timestamp()
}

/// The standalone page: approvals need a cluster.
fn standalone(s: &Session, status: StatusCode) -> Response {
    html(status, layout::page(TITLE, Some(s), view::standalone()))
}

/// The answer to a failed request to the API server: sign-in again when it refused the
/// token, else the error on a page (503 when it could not be asked).
fn failed(
    c: &Console,
    s: &Session,
    headers: &HeaderMap,
    uri: &Uri,
    title: &str,
    e: KubeError,
) -> Response {
    match e {
        KubeError::Unauthorized => c.expired(headers, uri),
        KubeError::Refused {
            status,
            field,
            message,
        } => error_page(
            Some(s),
            StatusCode::from_u16(status).unwrap_or(StatusCode::BAD_GATEWAY),
            title,
            &field,
            &message,
        ),
        e @ KubeError::Unavailable(_) => error_page(
            Some(s),
            StatusCode::SERVICE_UNAVAILABLE,
            title,
            "",
            &e.to_string(),
        ),
    }
}

/// `GET /ui/approvals?state=&namespace=&hook=`: newest first, pending by default.
pub async fn list(
    State(c): C,
    SignedIn(s): SignedIn,
    headers: HeaderMap,
    uri: Uri,
    RawQuery(q): RawQuery,
) -> Response {
    let Some(kube) = c.kube_for(&s) else {
        return standalone(&s, StatusCode::OK);
    };
    let listed = match kube::list(kube, &s, &known_namespaces(&c)).await {
        Ok(l) => l,
        Err(e) => return failed(&c, &s, &headers, &uri, TITLE, e),
    };
    let now = now_unix();
    let mut all: Vec<ApprovalSummary> = listed
        .items
        .iter()
        .map(|a| ApprovalSummary::of_object(a, now))
        .collect();
    summary::newest_first(&mut all);
    let mut namespaces: Vec<String> = all.iter().map(|a| a.namespace.clone()).collect();
    namespaces.sort();
    namespaces.dedup();
    let (filters, error) = match ApprovalFilters::parse(&pairs(q.as_deref())) {
        Ok(f) => (f, None),
        Err(bad) => (ApprovalFilters::default(), Some((bad.field, bad.message))),
    };
    let shown: Vec<ApprovalSummary> = if error.is_some() {
        Vec::new()
    } else {
        all.into_iter().filter(|a| filters.keep(a)).collect()
    };
    let notes: Vec<String> = listed
        .per_namespace
        .then(|| {
            "You may not list HookApprovals cluster-wide: showing the namespaces you may list."
                .to_owned()
        })
        .into_iter()
        .collect();
    let status = if error.is_some() {
        StatusCode::BAD_REQUEST
    } else {
        StatusCode::OK
    };
    let v = view::ListView {
        approvals: &shown,
        namespaces: &namespaces,
        filters: &filters,
        notes: &notes,
        error,
    };
    html(status, layout::page(TITLE, Some(&s), view::list(&v)))
}

/// Approval `ns/id` as the person may read it; 404 (the same for "not there" and "not
/// yours") otherwise.
async fn one(
    c: &Console,
    kube: &KubeConsole,
    s: &Session,
    headers: &HeaderMap,
    uri: &Uri,
    ns: &str,
    id: &str,
) -> Result<ApprovalSummary, Response> {
    let title = format!("Approval {ns}/{id}");
    match kube::get(kube, s, ns, id).await {
        Ok(Some(a)) => Ok(ApprovalSummary::of_object(&a, now_unix())),
        Ok(None) => Err(error_page(
            Some(s),
            StatusCode::NOT_FOUND,
            &title,
            "approval",
            &format!("approval: no approval {ns}/{id} that you may read"),
        )),
        Err(e) => Err(failed(c, s, headers, uri, &title, e)),
    }
}

/// One approval's page, with a refusal to show and the note to keep.
fn detail_page(
    s: &Session,
    a: &ApprovalSummary,
    status: StatusCode,
    error: Option<(String, String)>,
    note: &str,
) -> Response {
    let v = view::DetailView {
        approval: a,
        csrf: &s.csrf,
        person: &s.name,
        error,
        note,
    };
    html(
        status,
        layout::page(&format!("Approval {}", a.key()), Some(s), view::detail(&v)),
    )
}

/// `GET /ui/approvals/{namespace}/{id}`.
pub async fn detail(
    State(c): C,
    SignedIn(s): SignedIn,
    headers: HeaderMap,
    uri: Uri,
    Path((ns, id)): Path<(String, String)>,
) -> Response {
    let Some(kube) = c.kube_for(&s) else {
        return standalone(&s, StatusCode::NOT_FOUND);
    };
    match one(&c, kube, &s, &headers, &uri, &ns, &id).await {
        Ok(a) => detail_page(&s, &a, StatusCode::OK, None, ""),
        Err(r) => r,
    }
}

/// `POST /ui/approvals/{namespace}/{id}` (`csrf`, `decision` = `Approve` or `Reject`,
/// `note`): the merge patch as the person, then back to the page (303); a refusal is
/// shown on the page with the API server's status.
pub async fn decide(
    State(c): C,
    SignedIn(s): SignedIn,
    headers: HeaderMap,
    uri: Uri,
    Path((ns, id)): Path<(String, String)>,
    body: Bytes,
) -> Response {
    let p = pairs(std::str::from_utf8(&body).ok());
    if let Err(refused) = check_post(&headers, Some(&s), value(&p, "csrf")) {
        return refused.into_response();
    }
    let title = format!("Approval {ns}/{id}");
    if let Err((field, message)) = only(&p, &["csrf", "decision", "note"]) {
        return error_page(Some(&s), StatusCode::BAD_REQUEST, &title, &field, &message);
    }
    let Some(kube) = c.kube_for(&s) else {
        return standalone(&s, StatusCode::NOT_FOUND);
    };
    let a = match one(&c, kube, &s, &headers, &uri, &ns, &id).await {
        Ok(a) => a,
        Err(r) => return r,
    };
    let note = value(&p, "note");
    let decision = match value(&p, "decision") {
        "Approve" => ApprovalDecision::Approve,
        "Reject" => ApprovalDecision::Reject,
        other => {
            let message = format!("decision: {other:?} is not Approve or Reject");
            return detail_page(
                &s,
                &a,
                StatusCode::BAD_REQUEST,
                Some(("decision".into(), message)),
                note,
            );
        }
    };
    if !a.answerable() {
        let message = match a.state {
            ApprovalState::Expired => {
                "decision: this approval expired; it can no longer be answered".to_owned()
            }
            state => format!(
                "decision: this approval is {} already (by {}); a decision never changes",
                state.as_str(),
                a.decided_by.as_deref().unwrap_or("someone")
            ),
        };
        return detail_page(
            &s,
            &a,
            StatusCode::CONFLICT,
            Some(("decision".into(), message)),
            note,
        );
    }
    match kube::decide(kube, &s, &ns, &id, decision, note).await {
        Ok(_) => Redirect::to(&format!("/ui/approvals/{}/{}", enc(&ns), enc(&id))).into_response(),
        Err(KubeError::Unauthorized) => c.expired(&headers, &uri),
        Err(KubeError::Refused {
            status,
            field,
            message,
        }) => {
            tracing::info!(approval = %id, namespace = %ns, person = %s.name, status, "console: an answer to an approval was refused");
            let code = StatusCode::from_u16(status).unwrap_or(StatusCode::BAD_REQUEST);
            detail_page(&s, &a, code, Some((field, message)), note)
        }
        Err(e @ KubeError::Unavailable(_)) => detail_page(
            &s,
            &a,
            StatusCode::SERVICE_UNAVAILABLE,
            Some(("decision".into(), e.to_string())),
            note,
        ),
    }
}
