//! The console's routes: each reads what it needs (the served set, the API routes as the
//! person, the API server as the person) and renders a view.

use std::sync::Arc;
use std::time::Instant;

use agenthooks_crds::tenancy::TenantMap;
use axum::body::Bytes;
use axum::extract::{Path, RawQuery, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, Uri, header};
use axum::response::{IntoResponse, Redirect, Response};
use chrono::{TimeDelta, Utc};
use maud::html;
use serde_json::{Value, json};

use super::catalog::{self, BudgetSummary, Filters, HookSummary};
use super::form::{FieldError, HookForm};
use super::kube::KubeError;
use super::session::{self, Session};
use super::views::hook::{HistoryView, TestResult};
use super::views::{self, layout};
use super::{Console, SignedIn, api, chart, check_post, html, safe_next};
use crate::identity::Authenticator;
use crate::server::Principal;

type C = State<Arc<Console>>;

/// Query pairs of a request, in order.
pub(super) fn pairs(q: Option<&str>) -> Vec<(String, String)> {
    url::form_urlencoded::parse(q.unwrap_or("").as_bytes())
        .into_owned()
        .collect()
}

/// The one value of `key` in `pairs`, `""` when absent.
pub(super) fn value<'a>(pairs: &'a [(String, String)], key: &str) -> &'a str {
    pairs
        .iter()
        .find(|(k, _)| k == key)
        .map_or("", |(_, v)| v.as_str())
}

/// Refuses query parameters other than `allowed`, naming the first.
pub(super) fn only(pairs: &[(String, String)], allowed: &[&str]) -> Result<(), (String, String)> {
    for (k, _) in pairs {
        if !allowed.contains(&k.as_str()) {
            return Err((
                k.clone(),
                format!(
                    "{k}: unknown parameter; this page takes {}",
                    allowed.join(", ")
                ),
            ));
        }
    }
    let mut seen: Vec<&str> = Vec::new();
    for (k, _) in pairs {
        if seen.contains(&k.as_str()) {
            return Err((k.clone(), format!("{k}: given twice")));
        }
        seen.push(k);
    }
    Ok(())
}

/// An error page: the alert names `field`.
pub(super) fn error_page(
    session: Option<&Session>,
    status: StatusCode,
    title: &str,
    field: &str,
    message: &str,
) -> Response {
    html(
        status,
        layout::page(title, session, layout::alert(field, message)),
    )
}

/// `GET /ui/`: the list, or sign-in.
pub async fn root(State(c): C, headers: HeaderMap, uri: Uri) -> Response {
    match c.session(&headers, &uri) {
        Ok(_) => Redirect::to("/ui/hooks").into_response(),
        Err(to_sign_in) => to_sign_in.into_response(),
    }
}

fn sign_in_mode(c: &Console) -> views::sign_in::Mode {
    match (&c.kube, c.app.authenticator()) {
        (Some(_), Some(Authenticator::Kubernetes(_))) => views::sign_in::Mode::Kubernetes,
        _ => views::sign_in::Mode::AdminToken {
            configured: c.app.admin_token().is_some(),
        },
    }
}

/// `GET /ui/sign-in?next=&reason=`.
pub async fn sign_in_page(State(c): C, RawQuery(q): RawQuery) -> Response {
    let p = pairs(q.as_deref());
    let reason = match value(&p, "reason") {
        "ended" => Some(
            "Your session ended (an hour idle, 12 hours old, or the token you signed in with expired). Sign in again.",
        ),
        "expired" => Some("Your token was refused or has expired. Sign in again."),
        "signed-out" => Some("You signed out."),
        "required" => Some("Sign in to continue."),
        _ => None,
    };
    let next = safe_next(value(&p, "next"));
    html(
        StatusCode::OK,
        layout::page(
            "Sign in",
            None,
            views::sign_in::render(sign_in_mode(&c), next, reason, None),
        ),
    )
}

/// `POST /ui/sign-in`: the token is checked (admin token standalone, the API server in a
/// cluster); a session starts and the browser goes to `next`.
pub async fn sign_in(State(c): C, headers: HeaderMap, body: Bytes) -> Response {
    if let Err(refused) = check_post(&headers, None, "") {
        return refused.into_response();
    }
    let p = pairs(std::str::from_utf8(&body).ok());
    let token = value(&p, "token").trim().to_owned();
    let next = safe_next(value(&p, "next")).to_owned();
    let mode = sign_in_mode(&c);
    let refuse = |status: StatusCode, message: &str| {
        html(
            status,
            layout::page(
                "Sign in",
                None,
                views::sign_in::render(mode, &next, None, Some(message)),
            ),
        )
    };
    if token.is_empty() {
        return refuse(StatusCode::BAD_REQUEST, "token: paste a bearer token");
    }
    let (principal, name, kube_token, ttl) = match (&c.kube, c.app.authenticator()) {
        (Some(kube), Some(Authenticator::Kubernetes(_))) => match kube.sign_in(&token).await {
            Ok((user, ttl)) => {
                let name = user.name.to_string();
                (
                    Principal::Kubernetes(Arc::new(user)),
                    name,
                    Some(token),
                    ttl,
                )
            }
            Err(KubeError::Unauthorized) => {
                return refuse(
                    StatusCode::UNAUTHORIZED,
                    "token: the API server did not accept this token (expired, revoked, or for another audience)",
                );
            }
            Err(e) => return refuse(StatusCode::SERVICE_UNAVAILABLE, &format!("token: {e}")),
        },
        _ => match c.app.admin_token() {
            Some(admin) if admin.matches(&token) => {
                (Principal::Admin, "admin".to_owned(), None, None)
            }
            Some(_) => {
                return refuse(
                    StatusCode::UNAUTHORIZED,
                    "token: not this dispatcher's admin token",
                );
            }
            None => {
                return refuse(
                    StatusCode::UNAUTHORIZED,
                    "token: this dispatcher has no admin token (--admin-token-file), so nobody can sign in",
                );
            }
        },
    };
    match c
        .sessions
        .create(principal, name, kube_token, ttl, Instant::now())
    {
        Ok((id, _)) => {
            let mut r = Redirect::to(&next).into_response();
            if let Ok(v) = HeaderValue::from_str(&session::set_cookie(&id, c.secure(&headers))) {
                r.headers_mut().insert(header::SET_COOKIE, v);
            }
            r
        }
        Err(e) => refuse(
            StatusCode::SERVICE_UNAVAILABLE,
            &format!("token: no session could be made: {e}"),
        ),
    }
}

/// `POST /ui/sign-out`.
pub async fn sign_out(State(c): C, headers: HeaderMap, uri: Uri, body: Bytes) -> Response {
    let s = match c.session(&headers, &uri) {
        Ok(s) => s,
        Err(_) => return Redirect::to("/ui/sign-in").into_response(),
    };
    let p = pairs(std::str::from_utf8(&body).ok());
    if let Err(refused) = check_post(&headers, Some(&s), value(&p, "csrf")) {
        return refused.into_response();
    }
    if let Some(id) = session::cookie_value(&headers) {
        c.sessions.remove(&id);
    }
    let mut r = Redirect::to("/ui/sign-in?reason=signed-out").into_response();
    if let Ok(v) = HeaderValue::from_str(&session::clear_cookie(c.secure(&headers))) {
        r.headers_mut().insert(header::SET_COOKIE, v);
    }
    r
}

/// Every hook the person may see, every budget, notes on what is left out.
struct Catalog {
    hooks: Vec<HookSummary>,
    budgets: Vec<BudgetSummary>,
    notes: Vec<String>,
}

/// The catalog as `s` may see it. Errors: the answer to send (sign-in again on a refused
/// token, 503 when the API server cannot be asked).
async fn catalog(
    c: &Console,
    s: &Session,
    headers: &HeaderMap,
    uri: &Uri,
) -> Result<Catalog, Response> {
    match (&c.kube, &s.principal) {
        (Some(kube), Principal::Kubernetes(_)) => {
            let (set, none) = (c.app.hooks(), TenantMap::default());
            let tenants = set.as_ref().map_or(&none, |set| &set.tenants);
            match kube.catalog(s, tenants).await {
                Ok(k) => Ok(Catalog {
                    hooks: k.hooks,
                    budgets: k.budgets,
                    notes: k.notes,
                }),
                Err(KubeError::Unauthorized) => Err(c.expired(headers, uri)),
                Err(e) => Err(error_page(
                    Some(s),
                    StatusCode::SERVICE_UNAVAILABLE,
                    "Hooks",
                    "",
                    &e.to_string(),
                )),
            }
        }
        _ => {
            let Some(set) = c.app.hooks() else {
                return Err(error_page(
                    Some(s),
                    StatusCode::SERVICE_UNAVAILABLE,
                    "Hooks",
                    "",
                    "no hooks loaded yet",
                ));
            };
            let budgets = c
                .app
                .engine
                .budgets
                .local_ledger()
                .map(|l| {
                    l.budgets()
                        .into_iter()
                        .map(|(namespace, name, tenant, total, status)| BudgetSummary {
                            namespace,
                            name,
                            tenant,
                            monthly_tokens: total,
                            used: status.used,
                            remaining: status.remaining,
                            state: status.state.clone().unwrap_or_default(),
                            period: status.period.clone(),
                        })
                        .collect()
                })
                .unwrap_or_default();
            Ok(Catalog {
                hooks: catalog::standalone(&set),
                budgets,
                notes: Vec::new(),
            })
        }
    }
}

/// `GET /ui/hooks?namespace=&event=&handler=&state=`.
pub async fn list(
    State(c): C,
    SignedIn(s): SignedIn,
    headers: HeaderMap,
    uri: Uri,
    RawQuery(q): RawQuery,
) -> Response {
    let cat = match catalog(&c, &s, &headers, &uri).await {
        Ok(cat) => cat,
        Err(r) => return r,
    };
    let (filters, error) = match Filters::parse(&pairs(q.as_deref())) {
        Ok(f) => (f, None),
        Err(bad) => (Filters::default(), Some((bad.field, bad.message))),
    };
    let mut namespaces: Vec<String> = cat.hooks.iter().map(|h| h.namespace.clone()).collect();
    namespaces.sort();
    namespaces.dedup();
    let shown: Vec<HookSummary> = if error.is_some() {
        Vec::new()
    } else {
        cat.hooks.into_iter().filter(|h| filters.keep(h)).collect()
    };
    let status = if error.is_some() {
        StatusCode::BAD_REQUEST
    } else {
        StatusCode::OK
    };
    let view = views::list::ListView {
        hooks: &shown,
        namespaces: &namespaces,
        filters: &filters,
        budgets: &cat.budgets,
        notes: &cat.notes,
        error,
    };
    html(
        status,
        layout::page("Hooks", Some(&s), views::list::render(&view)),
    )
}

/// The hook `namespace/name` as `s` may see it; 404 (the same for "not there" and "not
/// yours") otherwise.
async fn one_hook(
    c: &Console,
    s: &Session,
    headers: &HeaderMap,
    uri: &Uri,
    ns: &str,
    name: &str,
) -> Result<HookSummary, Response> {
    let key = format!("{ns}/{name}");
    let found = match (&c.kube, &s.principal) {
        (Some(kube), Principal::Kubernetes(_)) => {
            let (set, none) = (c.app.hooks(), TenantMap::default());
            let tenants = set.as_ref().map_or(&none, |set| &set.tenants);
            match kube.hook(s, ns, name, tenants).await {
                Ok(h) => h,
                Err(KubeError::Unauthorized) => return Err(c.expired(headers, uri)),
                Err(e) => {
                    return Err(error_page(
                        Some(s),
                        StatusCode::SERVICE_UNAVAILABLE,
                        &key,
                        "",
                        &e.to_string(),
                    ));
                }
            }
        }
        _ => c
            .app
            .hooks()
            .and_then(|set| catalog::standalone_one(&set, &key)),
    };
    found.ok_or_else(|| {
        error_page(
            Some(s),
            StatusCode::NOT_FOUND,
            &key,
            "hook",
            &format!("hook: no hook {key} that you may read"),
        )
    })
}

/// `GET /ui/hooks/{namespace}/{name}`: the overview.
pub async fn overview(
    State(c): C,
    SignedIn(s): SignedIn,
    headers: HeaderMap,
    uri: Uri,
    Path((ns, name)): Path<(String, String)>,
) -> Response {
    let h = match one_hook(&c, &s, &headers, &uri, &ns, &name).await {
        Ok(h) => h,
        Err(r) => return r,
    };
    let now = Utc::now();
    let since = (now - TimeDelta::hours(24)).to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
    let path = format!(
        "/v1/executions?hook={}&since={}&limit=500",
        enc(&h.key()),
        enc(&since)
    );
    let answer = api::call(&c.api, &s, Method::GET, &path, None).await;
    let rows: Vec<Value> = answer.body["executions"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let runs: Vec<(chrono::DateTime<Utc>, String)> = rows
        .iter()
        .filter_map(|r| {
            let at = chrono::DateTime::parse_from_rfc3339(r["createdAt"].as_str()?).ok()?;
            Some((at.with_timezone(&Utc), r["decision"].as_str()?.to_owned()))
        })
        .collect();
    let buckets = chart::buckets(runs.iter().map(|(t, d)| (*t, d.as_str())), now, 24);
    let body = html! {
        (views::hook::overview(&h, &buckets, rows.first()))
        @if !answer.status.is_success() {
            p.note role="status" data-testid="history-unavailable" { "History not shown: " (answer.refusal().1) }
        }
    };
    html(StatusCode::OK, layout::page(&h.key(), Some(&s), body))
}

/// A sample event the hook selects: its event, a tenant it applies to, and for tool
/// events a shell call.
fn sample_event(h: &HookSummary) -> Value {
    let spec = h.spec.as_ref();
    let tenant = h.tenant.clone();
    let agent = spec
        .and_then(|s| s.agent_ids.first().cloned())
        .unwrap_or_else(|| "console-agent".into());
    let mut e = json!({
        "event": h.event.as_str(),
        "session_id": "console-test",
        "tenant_id": tenant,
        "agent_id": agent,
    });
    match h.event {
        agenthooks_crds::HookEvent::PreToolUse | agenthooks_crds::HookEvent::PostToolUse => {
            e["tool_name"] = json!("Bash");
            e["tool_input"] = json!({"command": "ls -la"});
        }
        agenthooks_crds::HookEvent::UserPromptSubmit => {
            e["raw_input"] = json!("Summarise the open pull requests.");
        }
        _ => {}
    }
    e
}

/// `GET /ui/hooks/{namespace}/{name}/test`.
pub async fn test_form(
    State(c): C,
    SignedIn(s): SignedIn,
    headers: HeaderMap,
    uri: Uri,
    Path((ns, name)): Path<(String, String)>,
) -> Response {
    let h = match one_hook(&c, &s, &headers, &uri, &ns, &name).await {
        Ok(h) => h,
        Err(r) => return r,
    };
    let sample = serde_json::to_string_pretty(&sample_event(&h)).unwrap_or_default();
    let body = views::hook::test(&h.key(), &s.csrf, &sample, false, None);
    html(
        StatusCode::OK,
        layout::page(&format!("Test {}", h.key()), Some(&s), body),
    )
}

/// `POST /ui/hooks/{namespace}/{name}/test`: `POST /v1/test` as the person.
pub async fn test_run(
    State(c): C,
    SignedIn(s): SignedIn,
    headers: HeaderMap,
    uri: Uri,
    Path((ns, name)): Path<(String, String)>,
    body: Bytes,
) -> Response {
    let p = pairs(std::str::from_utf8(&body).ok());
    if let Err(refused) = check_post(&headers, Some(&s), value(&p, "csrf")) {
        return refused.into_response();
    }
    if let Err((field, message)) = only(&p, &["csrf", "event", "force"]) {
        return error_page(Some(&s), StatusCode::BAD_REQUEST, "Test", &field, &message);
    }
    // As the Test tab's page: 404 for a hook the person may not read.
    let key = match one_hook(&c, &s, &headers, &uri, &ns, &name).await {
        Ok(h) => h.key(),
        Err(r) => return r,
    };
    let text = value(&p, "event");
    let force = value(&p, "force") == "true";
    let title = format!("Test {key}");
    let (status, result) = match serde_json::from_str::<Value>(text) {
        Err(e) => (
            StatusCode::BAD_REQUEST,
            TestResult::Refused {
                field: "event".into(),
                message: format!("event: not JSON: {e}"),
            },
        ),
        Ok(event) => {
            let req = json!({"hook": key, "event": event, "force": force});
            let answer = api::call(&c.api, &s, Method::POST, "/v1/test", Some(&req)).await;
            if answer.status.is_success() {
                let input = event.get("tool_input").cloned().unwrap_or(json!({}));
                (
                    StatusCode::OK,
                    TestResult::Report {
                        report: answer.body,
                        input,
                    },
                )
            } else {
                let (field, message) = answer.refusal();
                (answer.status, TestResult::Refused { field, message })
            }
        }
    };
    let page = views::hook::test(&key, &s.csrf, text, force, Some(&result));
    html(status, layout::page(&title, Some(&s), page))
}

/// `GET /ui/hooks/{namespace}/{name}/history?decision=&since=&cursor=&limit=`.
pub async fn history(
    State(c): C,
    SignedIn(s): SignedIn,
    headers: HeaderMap,
    uri: Uri,
    Path((ns, name)): Path<(String, String)>,
    RawQuery(q): RawQuery,
) -> Response {
    // A hook the person may not read gets the overview's 404 before any history is asked
    // for (the API's answer would name the permission and the namespace).
    let key = match one_hook(&c, &s, &headers, &uri, &ns, &name).await {
        Ok(h) => h.key(),
        Err(r) => return r,
    };
    let title = format!("History of {key}");
    let p = pairs(q.as_deref());
    let mut error = only(&p, &["decision", "since", "cursor", "limit"]).err();
    let mut status = if error.is_some() {
        StatusCode::BAD_REQUEST
    } else {
        StatusCode::OK
    };
    let (decision, since_local, cursor, limit) = (
        value(&p, "decision"),
        value(&p, "since"),
        value(&p, "cursor"),
        value(&p, "limit"),
    );
    // `datetime-local` sends `YYYY-MM-DDTHH:MM` (or with seconds): read as UTC.
    let since = match since_local.len() {
        0 => String::new(),
        16 => format!("{since_local}:00Z"),
        _ if since_local.ends_with('Z') || since_local.contains('+') => since_local.to_owned(),
        _ => format!("{since_local}Z"),
    };
    let mut rows = Vec::new();
    let mut next = None;
    if error.is_none() {
        let mut path = format!(
            "/v1/executions?hook={}&limit={}",
            enc(&key),
            if limit.is_empty() { "20" } else { limit }
        );
        for (k, v) in [
            ("decision", decision),
            ("since", since.as_str()),
            ("cursor", cursor),
        ] {
            if !v.is_empty() {
                path.push_str(&format!("&{k}={}", enc(v)));
            }
        }
        let answer = api::call(&c.api, &s, Method::GET, &path, None).await;
        if answer.status.is_success() {
            rows = answer.body["executions"]
                .as_array()
                .cloned()
                .unwrap_or_default();
            next = answer.body["nextCursor"].as_str().map(|cur| {
                let mut q = String::new();
                for (k, v) in [
                    ("decision", decision),
                    ("since", since_local),
                    ("limit", limit),
                    ("cursor", cur),
                ] {
                    if !v.is_empty() {
                        q.push_str(&format!(
                            "{}{k}={}",
                            if q.is_empty() { "" } else { "&" },
                            enc(v)
                        ));
                    }
                }
                q
            });
        } else {
            // The API's own status: 400 for a bad filter, 403 when RBAC does not let the
            // person read this namespace's history.
            status = answer.status;
            error = Some(answer.refusal());
        }
    }
    let view = HistoryView {
        key: &key,
        decision,
        since: since_local,
        rows: &rows,
        next,
        error,
    };
    html(
        status,
        layout::page(&title, Some(&s), views::hook::history(&view)),
    )
}

/// `GET /ui/executions/{id}`: one row, with its error detail when the API opens it for
/// the person.
pub async fn execution(
    State(c): C,
    SignedIn(s): SignedIn,
    headers: HeaderMap,
    uri: Uri,
    Path(id): Path<String>,
) -> Response {
    let title = format!("Execution {id}");
    // Only the audit trail is read here, authorized by RBAC on the person's name, which
    // outlives a revoked token: the API server is asked whether the token still holds.
    if let Some(kube) = c.kube_for(&s) {
        match kube.check(&s).await {
            Ok(()) => {}
            Err(KubeError::Unauthorized) => return c.expired(&headers, &uri),
            Err(e) => {
                return error_page(
                    Some(&s),
                    StatusCode::SERVICE_UNAVAILABLE,
                    &title,
                    "",
                    &e.to_string(),
                );
            }
        }
    }
    let answer = api::call(
        &c.api,
        &s,
        Method::GET,
        &format!("/v1/executions/{}?errorDetail=true", enc(&id)),
        None,
    )
    .await;
    if !answer.status.is_success() {
        let (field, message) = answer.refusal();
        return error_page(Some(&s), answer.status, &title, &field, &message);
    }
    html(
        StatusCode::OK,
        layout::page(&title, Some(&s), views::hook::execution(&answer.body)),
    )
}

/// Why command hooks cannot be chosen here, if so (Standard edition), and where they are
/// accepted.
fn command_rules(c: &Console) -> (Option<&'static str>, String) {
    let master = c
        .app
        .hooks()
        .map(|s| s.master_namespace.clone())
        .unwrap_or_else(|| "agenthooks-system".into());
    let disabled = (c.app.engine.edition == agenthooks_crds::Edition::Standard)
        .then_some("Command hooks are not available on the Standard edition (EditionForbidsCommand): use an http or prompt handler.");
    let note = if c.kube.is_some() {
        format!(
            "Command hooks run in the dispatcher's command runner; they are accepted in the master namespace ({master}) only, unless the platform team allows tenant namespaces (CommandHookNotAllowed)."
        )
    } else {
        "Command hooks run on this dispatcher's machine, in a private directory with an empty environment.".to_owned()
    };
    (disabled, note)
}

/// `GET /ui/hooks/new`.
pub async fn new_form(
    State(c): C,
    SignedIn(s): SignedIn,
    headers: HeaderMap,
    uri: Uri,
    RawQuery(q): RawQuery,
) -> Response {
    let p = pairs(q.as_deref());
    let ns = match value(&p, "namespace") {
        "" => c
            .app
            .hooks()
            .map(|s| s.master_namespace.clone())
            .unwrap_or_default(),
        ns => ns.to_owned(),
    };
    let form = HookForm::new_default(&ns);
    render_form(
        &c,
        &s,
        &headers,
        &uri,
        &form,
        &[],
        None,
        None,
        StatusCode::OK,
    )
    .await
}

/// `GET /ui/hooks/{namespace}/{name}/edit`: the form filled from the hook's spec; it
/// posts to `/ui/hooks/new` like a new one (server-side apply updates the hook).
pub async fn edit_form(
    State(c): C,
    SignedIn(s): SignedIn,
    headers: HeaderMap,
    uri: Uri,
    Path((ns, name)): Path<(String, String)>,
) -> Response {
    let h = match one_hook(&c, &s, &headers, &uri, &ns, &name).await {
        Ok(h) => h,
        Err(r) => return r,
    };
    let Some(spec) = &h.spec else {
        return error_page(
            Some(&s),
            StatusCode::CONFLICT,
            &h.key(),
            "hook",
            &format!(
                "hook: {} could not be loaded here, so its spec is not known: edit its manifest",
                h.key()
            ),
        );
    };
    let (form, hidden) = HookForm::from_spec(&ns, &name, spec);
    let secrets = secrets_for(&c, &s, &headers, &uri, &form).await;
    let secrets = match secrets {
        Ok(list) => list,
        Err(r) => return r,
    };
    let (command_disabled, command_note) = command_rules(&c);
    let view = views::new_hook::FormView {
        form: &form,
        csrf: &s.csrf,
        command_disabled,
        command_note: &command_note,
        secrets: &secrets,
        errors: &[],
        yaml: None,
        can_apply: true,
        status: None,
        editing: Some(&hidden),
    };
    html(
        StatusCode::OK,
        layout::page(
            &format!("Edit {}", h.key()),
            Some(&s),
            views::new_hook::render(&view),
        ),
    )
}

/// The hook Secrets of the form's namespace the person may list (cluster), or none.
async fn secrets_for(
    c: &Console,
    s: &Session,
    headers: &HeaderMap,
    uri: &Uri,
    form: &HookForm,
) -> Result<Vec<String>, Response> {
    match (&c.kube, &s.principal) {
        (Some(kube), Principal::Kubernetes(_)) if !form.namespace.is_empty() => {
            match kube.hook_secrets(s, &form.namespace).await {
                Ok(list) => Ok(list),
                Err(KubeError::Unauthorized) => Err(c.expired(headers, uri)),
                Err(_) => Ok(Vec::new()),
            }
        }
        _ => Ok(Vec::new()),
    }
}

#[allow(clippy::too_many_arguments)]
async fn render_form(
    c: &Console,
    s: &Session,
    headers: &HeaderMap,
    uri: &Uri,
    form: &HookForm,
    errors: &[FieldError],
    yaml: Option<&str>,
    status_note: Option<&str>,
    status: StatusCode,
) -> Response {
    let secrets = match secrets_for(c, s, headers, uri, form).await {
        Ok(list) => list,
        Err(r) => return r,
    };
    let (command_disabled, command_note) = command_rules(c);
    let view = views::new_hook::FormView {
        form,
        csrf: &s.csrf,
        command_disabled,
        command_note: &command_note,
        secrets: &secrets,
        errors,
        yaml,
        can_apply: true,
        status: status_note,
        editing: None,
    };
    html(
        status,
        layout::page("New hook", Some(s), views::new_hook::render(&view)),
    )
}

/// `POST /ui/hooks/new`: validate (the shared validation, and in a cluster a server-side
/// dry run as the person), then show the YAML, send it as a file, or apply it.
pub async fn new_submit(
    State(c): C,
    SignedIn(s): SignedIn,
    headers: HeaderMap,
    uri: Uri,
    body: Bytes,
) -> Response {
    let form = match HookForm::parse(pairs(std::str::from_utf8(&body).ok())) {
        Ok(f) => f,
        Err(e) => {
            return error_page(
                Some(&s),
                StatusCode::BAD_REQUEST,
                "New hook",
                &e.field,
                &e.message,
            );
        }
    };
    if let Err(refused) = check_post(&headers, Some(&s), &form.csrf) {
        return refused.into_response();
    }
    let action = form.action.clone();
    if !matches!(action.as_str(), "validate" | "apply" | "download") {
        let e = [FieldError {
            field: "action".into(),
            message: format!("action: {action:?} is not one of validate, apply, download"),
        }];
        return render_form(
            &c,
            &s,
            &headers,
            &uri,
            &form,
            &e,
            None,
            None,
            StatusCode::BAD_REQUEST,
        )
        .await;
    }
    let manifest = match form.manifest() {
        Ok(m) => m,
        Err(errors) => {
            return render_form(
                &c,
                &s,
                &headers,
                &uri,
                &form,
                &errors,
                None,
                None,
                StatusCode::BAD_REQUEST,
            )
            .await;
        }
    };
    if let Err(errors) = validate(&c, &manifest) {
        return render_form(
            &c,
            &s,
            &headers,
            &uri,
            &form,
            &errors,
            None,
            None,
            StatusCode::BAD_REQUEST,
        )
        .await;
    }
    if let Some(kube) = c.kube_for(&s) {
        // The API server's own checks (schema, CEL rules, admission policies, RBAC) as
        // the person, before anything is written.
        let dry_run = action != "apply";
        match kube.apply(&s, &manifest, dry_run, form.editing).await {
            Ok(()) => {}
            Err(KubeError::Unauthorized) => return c.expired(&headers, &uri),
            Err(KubeError::Refused {
                status,
                field,
                message,
            }) => {
                let errors = [FieldError { field, message }];
                let code = StatusCode::from_u16(status).unwrap_or(StatusCode::BAD_REQUEST);
                return render_form(&c, &s, &headers, &uri, &form, &errors, None, None, code).await;
            }
            Err(e) => {
                let errors = [FieldError {
                    field: String::new(),
                    message: e.to_string(),
                }];
                return render_form(
                    &c,
                    &s,
                    &headers,
                    &uri,
                    &form,
                    &errors,
                    None,
                    None,
                    StatusCode::SERVICE_UNAVAILABLE,
                )
                .await;
            }
        }
        if action == "apply" {
            return Redirect::to(&format!(
                "/ui/hooks/{}/{}",
                enc(form.namespace.trim()),
                enc(form.name.trim())
            ))
            .into_response();
        }
    } else if action == "apply" {
        return match apply_standalone(&c, &manifest).await {
            Ok(()) => Redirect::to(&format!(
                "/ui/hooks/{}/{}",
                enc(form.namespace.trim()),
                enc(form.name.trim())
            ))
            .into_response(),
            Err(e) => {
                render_form(
                    &c,
                    &s,
                    &headers,
                    &uri,
                    &form,
                    &[e],
                    None,
                    None,
                    StatusCode::CONFLICT,
                )
                .await
            }
        };
    }
    let yaml = serde_norway::to_string(&manifest).unwrap_or_default();
    if action == "download" {
        let file = format!("{}.yaml", form.name.trim());
        let mut r = yaml.into_response();
        r.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/yaml"),
        );
        if let Ok(v) = HeaderValue::from_str(&format!("attachment; filename=\"{file}\"")) {
            r.headers_mut().insert(header::CONTENT_DISPOSITION, v);
        }
        return r;
    }
    let note = if c.kube_for(&s).is_some() {
        "Valid: the API server accepted it in a dry run as you."
    } else {
        "Valid. Apply serves it on this dispatcher until it restarts (the hooks files stay as they are); Download YAML keeps it."
    };
    render_form(
        &c,
        &s,
        &headers,
        &uri,
        &form,
        &[],
        Some(&yaml),
        Some(note),
        StatusCode::OK,
    )
    .await
}

/// `POST /ui/hooks/validate`: the form's live validation (the script sends the form as
/// it is filled in). The same checks as "Validate" — the shared validation, and in a
/// cluster a server-side dry run as the person — answered as JSON: `{"valid", "errors":
/// [{"field", "message"}], "yaml"}`; 401 `{"signIn": URL}` once the session is gone.
pub async fn validate_live(State(c): C, headers: HeaderMap, uri: Uri, body: Bytes) -> Response {
    let s = match c.session(&headers, &uri) {
        Ok(s) => s,
        Err(_) => {
            return (
                StatusCode::UNAUTHORIZED,
                axum::Json(json!({"signIn": "/ui/sign-in?next=%2Fui%2Fhooks%2Fnew&reason=ended"})),
            )
                .into_response();
        }
    };
    let form = match HookForm::parse(pairs(std::str::from_utf8(&body).ok())) {
        Ok(f) => f,
        Err(e) => return live(StatusCode::BAD_REQUEST, &[e], None),
    };
    if let Err(refused) = check_post(&headers, Some(&s), &form.csrf) {
        return refused.into_response();
    }
    let manifest = match form.manifest() {
        Ok(m) => m,
        Err(errors) => return live(StatusCode::OK, &errors, None),
    };
    if let Err(errors) = validate(&c, &manifest) {
        return live(StatusCode::OK, &errors, None);
    }
    if let Some(kube) = c.kube_for(&s) {
        match kube.apply(&s, &manifest, true, form.editing).await {
            Ok(()) => {}
            Err(KubeError::Unauthorized) => {
                return (
                    StatusCode::UNAUTHORIZED,
                    axum::Json(
                        json!({"signIn": "/ui/sign-in?next=%2Fui%2Fhooks%2Fnew&reason=expired"}),
                    ),
                )
                    .into_response();
            }
            Err(KubeError::Refused { field, message, .. }) => {
                return live(StatusCode::OK, &[FieldError { field, message }], None);
            }
            Err(e) => {
                return live(
                    StatusCode::SERVICE_UNAVAILABLE,
                    &[FieldError {
                        field: String::new(),
                        message: e.to_string(),
                    }],
                    None,
                );
            }
        }
    }
    let yaml = serde_norway::to_string(&manifest).unwrap_or_default();
    live(StatusCode::OK, &[], Some(&yaml))
}

fn live(status: StatusCode, errors: &[FieldError], yaml: Option<&str>) -> Response {
    let errors: Vec<Value> = errors
        .iter()
        .map(|e| json!({"field": e.field, "message": e.message}))
        .collect();
    (
        status,
        axum::Json(json!({"valid": errors.is_empty(), "errors": errors, "yaml": yaml})),
    )
        .into_response()
}

/// The uid prefix of hooks created in the console of a standalone dispatcher.
pub const CONSOLE_UID_PREFIX: &str = "console:";

/// Standalone "Apply": the hook is served at once beside the hooks files' hooks, kept in
/// memory until the dispatcher restarts (the console never writes the hooks files;
/// "Download YAML" keeps it). A hook of the files is never replaced; a console hook of
/// the same name is, with the next generation. Header values from Secrets are refused
/// here (standalone Secrets come from the hooks files).
async fn apply_standalone(c: &Console, manifest: &Value) -> Result<(), FieldError> {
    let _one_at_a_time = c.apply_lock.lock().await;
    let Some(set) = c.app.hooks() else {
        return Err(FieldError {
            field: "action".into(),
            message: "action: no hooks loaded yet".into(),
        });
    };
    let (ns, name) = (
        manifest["metadata"]["namespace"].as_str().unwrap_or(""),
        manifest["metadata"]["name"].as_str().unwrap_or(""),
    );
    let key = format!("{ns}/{name}");
    let previous = set.get(&key);
    if let Some(p) = previous
        && !p.uid.starts_with(CONSOLE_UID_PREFIX)
    {
        return Err(FieldError {
            field: "metadata.name".into(),
            message: format!(
                "metadata.name: {key} comes from this dispatcher's hooks files, which the console does not change: edit the file, or choose another name"
            ),
        });
    }
    let mut manifest = manifest.clone();
    manifest["metadata"]["uid"] = json!(format!("{CONSOLE_UID_PREFIX}{key}"));
    manifest["metadata"]["generation"] = json!(previous.map_or(1, |p| p.generation + 1));
    let ctx = crate::dry_run::InlineContext {
        master_namespace: &set.master_namespace,
        edition: c.app.engine.edition,
        seal_key: &c.app.engine.seal_key,
        served: Some(&set),
        validate_only: false,
    };
    let hook = crate::dry_run::inline_hook(&manifest, &ctx).map_err(|e| {
        let first = e.0.into_iter().next();
        FieldError {
            field: first.as_ref().map_or("spec".into(), |f| f.field.clone()),
            message: first.map_or_else(String::new, |f| format!("{}: {}", f.field, f.message)),
        }
    })?;
    let sources: Vec<_> = set
        .iter()
        .filter(|h| h.key != key)
        .map(|h| h.source.clone())
        .chain(std::iter::once(hook.source.clone()))
        .collect();
    let (next, rejected) = crate::hookset::HookSet::build(
        sources,
        &set.master_namespace,
        c.app.engine.edition,
        set.version + 1,
        Some(&set),
    );
    if let Some(r) = rejected.into_iter().next() {
        return Err(FieldError {
            field: "spec".into(),
            message: format!("{}/{}: {}", r.namespace, r.name, r.errors),
        });
    }
    c.app.set_hooks(next);
    tracing::info!(hook = %key, "console: hook applied in memory (standalone)");
    Ok(())
}

/// The shared validation of the operator and the hooks files, on the form's manifest.
fn validate(c: &Console, manifest: &Value) -> Result<(), Vec<FieldError>> {
    let set = c.app.hooks();
    let master = set
        .as_ref()
        .map(|s| s.master_namespace.clone())
        .unwrap_or_else(|| "agenthooks-system".into());
    let ctx = crate::dry_run::InlineContext {
        master_namespace: &master,
        edition: c.app.engine.edition,
        seal_key: &c.app.engine.seal_key,
        served: set.as_deref(),
        validate_only: true,
    };
    crate::dry_run::inline_hook(manifest, &ctx)
        .map(|_| ())
        .map_err(|e| {
            e.0.into_iter()
                .map(|f| FieldError {
                    message: if f.message.starts_with(&f.field) {
                        f.message
                    } else {
                        format!("{}: {}", f.field, f.message)
                    },
                    field: f.field,
                })
                .collect()
        })
}

/// Anything else under `/ui/`.
pub async fn not_found(State(c): C, headers: HeaderMap, uri: Uri) -> Response {
    let s = c.session(&headers, &uri).ok();
    error_page(
        s.as_deref(),
        StatusCode::NOT_FOUND,
        "Not found",
        "path",
        &format!("path: no console page /ui{}", uri.path()),
    )
}

/// `s` form-urlencoded, for a path segment or a query value.
pub(super) fn enc(s: &str) -> String {
    url::form_urlencoded::byte_serialize(s.as_bytes()).collect()
}
