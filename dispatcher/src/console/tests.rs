//! The console's routes on a standalone dispatcher, in process: sign-in, sessions,
//! CSRF and origin, the list and its filters, the test panel, history paging, the form.
//! The browser tests (`e2e/tests/console.rs`) drive the same pages in Chromium.

use std::sync::Arc;

use agenthooks_crds::Edition;
use agenthooks_crds::sealed::SealKey;
use agenthooks_crds::snapshot::SnapshotHook;
use axum::body::Body;
use axum::http::{Request, StatusCode, header};
use tower::ServiceExt;

use crate::handlers::http::HttpCaller;
use crate::hookset::HookSet;
use crate::runner::Engine;
use crate::server::{AppState, admin, router};

mod approvals;

const ADMIN: &str = "console-admin-token-0123456789";

fn hook(ns: &str, name: &str, spec: &str) -> SnapshotHook {
    SnapshotHook {
        uid: format!("u-{name}"),
        namespace: ns.into(),
        name: name.into(),
        generation: 1,
        created_at: String::new(),
        namespace_tenant: if ns == "agenthooks-system" {
            ns.into()
        } else {
            "acme".into()
        },
        spec: serde_norway::from_str(spec).unwrap(),
        sealed_headers: vec![],
        open_breakers: Vec::new(),
        reset_token: None,
    }
}

fn state(edition: Edition) -> Arc<AppState> {
    let state = AppState::new(Engine::new(
        HttpCaller::new(vec![]),
        edition,
        SealKey::generate(),
    ));
    state.set_authenticator(crate::identity::Authenticator::Anonymous);
    state.set_admin_token(admin::AdminToken::new(ADMIN).unwrap());
    let (set, _) = HookSet::build(
        vec![
            hook(
                "agenthooks-system",
                "rm-guard",
                "event: pre_tool_use\nscope: global\npriority: 100\nmatcher: '^Bash$'\nhandler: {type: command, command: {command: 'echo destructive command refused >&2; exit 2'}}",
            ),
            hook(
                "agenthooks-system",
                "rewrite",
                "event: pre_tool_use\nscope: global\nhandler: {type: command, command: {command: 'echo ''{\"updatedInput\": {\"command\": \"ls -la ./build\"}}'''}}",
            ),
            hook(
                "tenant-acme",
                "notify",
                "event: stop\nhandler: {type: http, http: {url: 'https://policy.example/hook'}}",
            ),
        ],
        "agenthooks-system",
        edition,
        1,
        None,
    );
    state.set_hooks(set);
    state
}

/// A browser: keeps the session cookie, sends `Origin` on POSTs.
struct Browser {
    app: axum::Router,
    cookie: Option<String>,
}

struct Page {
    status: StatusCode,
    location: String,
    body: String,
}

impl Browser {
    fn new(state: Arc<AppState>) -> Browser {
        Browser {
            app: router(state),
            cookie: None,
        }
    }

    async fn send(&mut self, req: Request<Body>) -> Page {
        let r = self.app.clone().oneshot(req).await.unwrap();
        if let Some(c) = r.headers().get(header::SET_COOKIE) {
            let v = c.to_str().unwrap().split(';').next().unwrap().to_owned();
            self.cookie = (!v.ends_with('=')).then_some(v);
        }
        let status = r.status();
        let location = r
            .headers()
            .get(header::LOCATION)
            .map(|l| l.to_str().unwrap().to_owned())
            .unwrap_or_default();
        let csp = r.headers().get(header::CONTENT_SECURITY_POLICY).cloned();
        assert_eq!(csp.as_ref().map(|v| v.to_str().unwrap()), Some(super::CSP));
        let body = axum::body::to_bytes(r.into_body(), 1 << 24).await.unwrap();
        Page {
            status,
            location,
            body: String::from_utf8(body.to_vec()).unwrap(),
        }
    }

    async fn get(&mut self, path: &str) -> Page {
        let mut req = Request::get(path);
        if let Some(c) = &self.cookie {
            req = req.header(header::COOKIE, c);
        }
        self.send(req.body(Body::empty()).unwrap()).await
    }

    async fn post(&mut self, path: &str, form: &[(&str, &str)]) -> Page {
        self.post_from(path, form, "http://console.test").await
    }

    async fn post_from(&mut self, path: &str, form: &[(&str, &str)], origin: &str) -> Page {
        let body: String = url::form_urlencoded::Serializer::new(String::new())
            .extend_pairs(form)
            .finish();
        let mut req = Request::post(path)
            .header(header::HOST, "console.test")
            .header(header::ORIGIN, origin)
            .header(header::CONTENT_TYPE, "application/x-www-form-urlencoded");
        if let Some(c) = &self.cookie {
            req = req.header(header::COOKIE, c);
        }
        self.send(req.body(Body::from(body)).unwrap()).await
    }

    async fn sign_in(&mut self) -> String {
        let p = self
            .post("/ui/sign-in", &[("token", ADMIN), ("next", "/ui/hooks")])
            .await;
        assert_eq!(
            (p.status, p.location.as_str()),
            (StatusCode::SEE_OTHER, "/ui/hooks")
        );
        self.csrf().await
    }

    async fn csrf(&mut self) -> String {
        let page = self.get("/ui/hooks/new").await;
        let at = page.body.find("name=\"csrf\" value=\"").unwrap() + 19;
        page.body[at..at + 64].to_owned()
    }
}

#[tokio::test]
async fn pages_need_a_session_and_the_admin_token_signs_in() {
    let mut b = Browser::new(state(Edition::Lite));
    let p = b.get("/ui/hooks?event=stop").await;
    assert_eq!(p.status, StatusCode::SEE_OTHER);
    assert_eq!(
        p.location,
        "/ui/sign-in?next=%2Fui%2Fhooks%3Fevent%3Dstop&reason=required"
    );
    let p = b.get("/ui").await;
    assert_eq!(
        (p.status, p.location.as_str()),
        (
            StatusCode::SEE_OTHER,
            "/ui/sign-in?next=%2Fui%2F&reason=required"
        )
    );

    let bad = b
        .post(
            "/ui/sign-in",
            &[("token", "wrong-token-0123456789"), ("next", "/ui/hooks")],
        )
        .await;
    assert_eq!(bad.status, StatusCode::UNAUTHORIZED);
    assert!(bad.body.contains(r#"id="sign-in-error""#), "{}", bad.body);
    assert!(b.cookie.is_none());

    // next= never leads off the console.
    let p = b
        .post(
            "/ui/sign-in",
            &[("token", ADMIN), ("next", "//evil.example/x")],
        )
        .await;
    assert_eq!(
        (p.status, p.location.as_str()),
        (StatusCode::SEE_OTHER, "/ui/hooks")
    );
    let list = b.get("/ui/hooks").await;
    assert_eq!(list.status, StatusCode::OK);
    assert!(
        list.body
            .contains(r#"<span data-testid="whoami">admin</span>"#),
        "{}",
        list.body
    );

    // Signing out ends the session on the server, not only in the browser.
    let kept = b.cookie.clone();
    let csrf = b.csrf().await;
    let out = b.post("/ui/sign-out", &[("csrf", &csrf)]).await;
    assert_eq!(out.location, "/ui/sign-in?reason=signed-out");
    b.cookie = kept;
    assert_eq!(b.get("/ui/hooks").await.status, StatusCode::SEE_OTHER);
}

#[tokio::test]
async fn a_post_without_the_forms_token_or_from_another_site_is_refused() {
    let mut b = Browser::new(state(Edition::Lite));
    let csrf = b.sign_in().await;
    let event = r#"{"event":"pre_tool_use","tenant_id":"acme","agent_id":"a","tool_name":"Bash","tool_input":{"command":"rm -rf /"}}"#;
    let p = b
        .post(
            "/ui/hooks/agenthooks-system/rm-guard/test",
            &[("event", event)],
        )
        .await;
    assert_eq!(p.status, StatusCode::FORBIDDEN);
    assert!(p.body.starts_with("csrf:"), "{}", p.body);
    let p = b
        .post_from(
            "/ui/hooks/agenthooks-system/rm-guard/test",
            &[("csrf", &csrf), ("event", event)],
            "https://evil.example",
        )
        .await;
    assert_eq!(p.status, StatusCode::FORBIDDEN);
    assert!(p.body.starts_with("Origin:"), "{}", p.body);
    let ok = b
        .post(
            "/ui/hooks/agenthooks-system/rm-guard/test",
            &[("csrf", &csrf), ("event", event)],
        )
        .await;
    assert_eq!(ok.status, StatusCode::OK);
}

#[tokio::test]
async fn the_list_shows_conditions_and_filters_name_bad_values() {
    let mut b = Browser::new(state(Edition::Lite));
    b.sign_in().await;
    let all = b.get("/ui/hooks").await;
    for key in [
        "agenthooks-system/rm-guard",
        "agenthooks-system/rewrite",
        "tenant-acme/notify",
    ] {
        assert!(
            all.body.contains(&format!(r#"data-hook="{key}""#)),
            "{key}: {}",
            all.body
        );
    }
    assert!(
        all.body
            .contains(r#"data-status="True" title="loaded from the hooks files">Valid"#),
        "{}",
        all.body
    );
    let http = b.get("/ui/hooks?handler=http&event=").await;
    assert!(http.body.contains(r#"data-hook="tenant-acme/notify""#));
    assert!(
        !http
            .body
            .contains(r#"data-hook="agenthooks-system/rm-guard""#)
    );
    let none = b.get("/ui/hooks?state=circuit-open").await;
    assert!(
        none.body.contains(r#"data-testid="no-hooks""#),
        "{}",
        none.body
    );
    let bad = b.get("/ui/hooks?event=pre_tool").await;
    assert_eq!(bad.status, StatusCode::BAD_REQUEST);
    assert!(
        bad.body.contains(r#"role="alert" data-field="event""#),
        "{}",
        bad.body
    );
    let unknown = b.get("/ui/hooks?colour=red").await;
    assert!(
        unknown.body.contains(r#"data-field="colour""#),
        "{}",
        unknown.body
    );
}

#[tokio::test]
async fn the_test_panel_shows_a_block_with_stderr_and_a_rewrite_with_its_diff() {
    let mut b = Browser::new(state(Edition::Lite));
    let csrf = b.sign_in().await;
    let form = b.get("/ui/hooks/agenthooks-system/rm-guard/test").await;
    assert!(
        form.body
            .contains("&quot;tool_name&quot;: &quot;Bash&quot;"),
        "sample event: {}",
        form.body
    );

    let event = r#"{"event":"pre_tool_use","tenant_id":"acme","agent_id":"a","tool_name":"Bash","tool_input":{"command":"rm -rf /"}}"#;
    let p = b
        .post(
            "/ui/hooks/agenthooks-system/rm-guard/test",
            &[("csrf", &csrf), ("event", event)],
        )
        .await;
    assert!(
        p.body.contains(
            r#"data-testid="decision"><span class="decision" data-decision="block">block"#
        ),
        "{}",
        p.body
    );
    assert!(
        p.body
            .contains(r#"<pre data-testid="stderr">destructive command refused"#),
        "{}",
        p.body
    );

    let p = b
        .post(
            "/ui/hooks/agenthooks-system/rewrite/test",
            &[("csrf", &csrf), ("event", event)],
        )
        .await;
    assert!(p.body.contains(r#"data-testid="diff""#), "{}", p.body);
    assert!(
        p.body.contains(
            r#"<span class="del"><del>  &quot;command&quot;: &quot;rm -rf /&quot;</del>"#
        ),
        "{}",
        p.body
    );
    assert!(
        p.body.contains(
            r#"<span class="add"><ins>  &quot;command&quot;: &quot;ls -la ./build&quot;</ins>"#
        ),
        "{}",
        p.body
    );

    let bad = b
        .post(
            "/ui/hooks/agenthooks-system/rewrite/test",
            &[("csrf", &csrf), ("event", "{not json")],
        )
        .await;
    assert_eq!(bad.status, StatusCode::BAD_REQUEST);
    assert!(bad.body.contains(r#"data-field="event""#), "{}", bad.body);
    let bad_event = b
        .post(
            "/ui/hooks/agenthooks-system/rewrite/test",
            &[("csrf", &csrf), ("event", r#"{"event":"lunch"}"#)],
        )
        .await;
    assert_eq!(bad_event.status, StatusCode::BAD_REQUEST);
    assert!(
        bad_event.body.contains(r#"data-field="event.event""#),
        "{}",
        bad_event.body
    );
    let missing = b.get("/ui/hooks/agenthooks-system/nope").await;
    assert_eq!(missing.status, StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn every_tab_of_a_hook_the_person_may_not_read_is_the_same_404() {
    let mut b = Browser::new(state(Edition::Lite));
    let csrf = b.sign_in().await;
    let event = r#"{"event":"pre_tool_use","tool_name":"Bash","tool_input":{"command":"ls"}}"#;
    for page in [
        b.get("/ui/hooks/tenant-other/nope").await,
        b.get("/ui/hooks/tenant-other/nope/test").await,
        b.get("/ui/hooks/tenant-other/nope/history").await,
        b.post(
            "/ui/hooks/tenant-other/nope/test",
            &[("csrf", &csrf), ("event", event)],
        )
        .await,
    ] {
        assert_eq!(page.status, StatusCode::NOT_FOUND, "{}", page.body);
        assert!(
            page.body.contains(r#"role="alert" data-field="hook""#),
            "{}",
            page.body
        );
        assert!(!page.body.contains("data-execution"), "{}", page.body);
    }
    let bad = b
        .get("/ui/hooks/agenthooks-system/rm-guard/history?decision=maybe")
        .await;
    assert_eq!(bad.status, StatusCode::BAD_REQUEST, "{}", bad.body);
    assert!(
        bad.body.contains(r#"data-field="decision""#),
        "{}",
        bad.body
    );
}

#[tokio::test]
async fn the_form_refuses_with_the_field_named_and_command_is_greyed_out_on_standard() {
    let mut b = Browser::new(state(Edition::Lite));
    let csrf = b.sign_in().await;
    let base = [
        ("csrf", csrf.as_str()),
        ("namespace", "tenant-acme"),
        ("name", "guard"),
        ("event", "pre_tool_use"),
        ("scope", "tenant"),
        ("handler", "http"),
        ("httpUrl", "https://policy.example/hook"),
        ("enabled", "true"),
    ];
    let mut slow = base.to_vec();
    slow.extend([("timeoutMs", "20000"), ("action", "validate")]);
    let p = b.post("/ui/hooks/new", &slow).await;
    assert_eq!(p.status, StatusCode::BAD_REQUEST);
    assert!(
        p.body.contains(r#"data-field="spec.timeoutMs""#),
        "{}",
        p.body
    );
    assert!(p.body.contains(r#"aria-invalid="true""#), "{}", p.body);

    let mut ok = base.to_vec();
    ok.push(("action", "validate"));
    let p = b.post("/ui/hooks/new", &ok).await;
    assert_eq!(p.status, StatusCode::OK, "{}", p.body);
    assert!(
        p.body
            .contains(r#"<pre data-testid="yaml">apiVersion: agenthooks.io/v1alpha1"#),
        "{}",
        p.body
    );

    let mut dl = base.to_vec();
    dl.push(("action", "download"));
    let p = b.post("/ui/hooks/new", &dl).await;
    assert!(
        p.body
            .starts_with("apiVersion: agenthooks.io/v1alpha1\nkind: AgentHook\n"),
        "{}",
        p.body
    );

    // Standalone apply: served at once, in memory; the files' hooks are never replaced.
    let mut apply = base.to_vec();
    apply.push(("action", "apply"));
    let p = b.post("/ui/hooks/new", &apply).await;
    assert_eq!(
        (p.status, p.location.as_str()),
        (StatusCode::SEE_OTHER, "/ui/hooks/tenant-acme/guard")
    );
    let list = b.get("/ui/hooks").await;
    assert!(
        list.body.contains(r#"data-hook="tenant-acme/guard""#),
        "{}",
        list.body
    );
    assert!(
        list.body.contains("created in the console"),
        "{}",
        list.body
    );
    let again = b.post("/ui/hooks/new", &apply).await;
    assert_eq!(
        again.status,
        StatusCode::SEE_OTHER,
        "a console hook is replaced"
    );
    let mut clash = base.to_vec();
    clash.retain(|(k, _)| !matches!(*k, "namespace" | "name"));
    clash.extend([
        ("namespace", "agenthooks-system"),
        ("name", "rm-guard"),
        ("action", "apply"),
    ]);
    let p = b.post("/ui/hooks/new", &clash).await;
    assert_eq!(p.status, StatusCode::CONFLICT);
    assert!(
        p.body.contains(r#"data-field="metadata.name""#),
        "{}",
        p.body
    );

    let mut std = Browser::new(state(Edition::Standard));
    let csrf = std.sign_in().await;
    let form = std.get("/ui/hooks/new").await;
    assert!(
        form.body
            .contains(r#"id="handler-command" name="handler" value="command" disabled"#),
        "{}",
        form.body
    );
    assert!(form.body.contains("EditionForbidsCommand"), "{}", form.body);
    let p = std
        .post(
            "/ui/hooks/new",
            &[
                ("csrf", &csrf),
                ("namespace", "agenthooks-system"),
                ("name", "c"),
                ("event", "stop"),
                ("scope", "tenant"),
                ("handler", "command"),
                ("command", "true"),
                ("action", "validate"),
            ],
        )
        .await;
    assert_eq!(p.status, StatusCode::BAD_REQUEST);
    assert!(
        p.body.contains("EditionForbidsCommand") || p.body.contains("Standard"),
        "{}",
        p.body
    );
}

/// A stand-in for kube-apiserver as a console in a cluster asks it: SelfSubjectReview
/// names the person of a token in `accepted` (401 for any other), every
/// SubjectAccessReview is allowed. AgentHook and TenantHookBudget lists: empty
/// cluster-wide; with `only`, the person may list in that namespace alone (403 elsewhere
/// and cluster-wide), where one hook `guard` lives, and each namespaced list takes 20 ms
/// (`peak`: the most answered at once).
struct FakeApiServer {
    url: String,
    accepted: Arc<std::sync::Mutex<Vec<String>>>,
    peak: Arc<std::sync::atomic::AtomicUsize>,
}

async fn fake_api_server(accepted: &[&str], only: Option<&'static str>) -> FakeApiServer {
    use axum::response::IntoResponse;
    use std::sync::atomic::{AtomicUsize, Ordering};
    let tokens = Arc::new(std::sync::Mutex::new(
        accepted.iter().map(|t| t.to_string()).collect::<Vec<_>>(),
    ));
    let (peak, now) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let (known, top) = (Arc::clone(&tokens), Arc::clone(&peak));
    let app = axum::Router::new().fallback(move |req: Request<Body>| {
        let (known, top, now) = (Arc::clone(&known), Arc::clone(&top), Arc::clone(&now));
        async move {
            let token = req
                .headers()
                .get(header::AUTHORIZATION)
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.strip_prefix("Bearer "))
                .unwrap_or("")
                .to_owned();
            let path = req.uri().path().to_owned();
            let body = axum::body::to_bytes(req.into_body(), 1 << 20).await.unwrap();
            let json = |status: StatusCode, v: serde_json::Value| {
                (status, [(header::CONTENT_TYPE, "application/json")], v.to_string()).into_response()
            };
            if path.ends_with("/subjectaccessreviews") {
                let mut review: serde_json::Value = serde_json::from_slice(&body).unwrap();
                review["status"] = serde_json::json!({"allowed": true});
                return json(StatusCode::CREATED, review);
            }
            if !known.lock().unwrap().contains(&token) {
                return json(
                    StatusCode::UNAUTHORIZED,
                    serde_json::json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
                                       "message": "Unauthorized", "reason": "Unauthorized", "code": 401}),
                );
            }
            if path.ends_with("/selfsubjectreviews") {
                return json(
                    StatusCode::CREATED,
                    serde_json::json!({"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview",
                        "status": {"userInfo": {"username": "system:serviceaccount:tenant-acme:alice", "uid": "u-alice",
                                                "groups": ["system:serviceaccounts", "system:authenticated"]}}}),
                );
            }
            let forbidden = || {
                json(
                    StatusCode::FORBIDDEN,
                    serde_json::json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
                        "message": "forbidden: User \"alice\" cannot list resource", "reason": "Forbidden", "code": 403}),
                )
            };
            let mut items = vec![];
            if let Some(only) = only {
                // /apis/agenthooks.io/v1alpha1[/namespaces/NS]/agenthooks
                let Some(ns) = path.split("/namespaces/").nth(1).and_then(|r| r.split('/').next())
                else {
                    return forbidden();
                };
                let at_once = now.fetch_add(1, Ordering::SeqCst) + 1;
                top.fetch_max(at_once, Ordering::SeqCst);
                tokio::time::sleep(std::time::Duration::from_millis(20)).await;
                now.fetch_sub(1, Ordering::SeqCst);
                if ns != only {
                    return forbidden();
                }
                if path.ends_with("/agenthooks") {
                    items.push(serde_json::json!({
                        "apiVersion": "agenthooks.io/v1alpha1", "kind": "AgentHook",
                        "metadata": {"name": "guard", "namespace": ns, "generation": 1},
                        "spec": {"event": "pre_tool_use", "matcher": "^exec$",
                                 "handler": {"type": "http", "http": {"url": "https://p.example/h"}}},
                        "status": {"conditions": [
                            {"type": "Accepted", "status": "True", "reason": "Accepted", "message": "the hook passed validation",
                             "lastTransitionTime": "2026-01-01T00:00:00Z"}]}}));
                }
            }
            json(
                StatusCode::OK,
                serde_json::json!({"apiVersion": "agenthooks.io/v1alpha1", "kind": "List", "metadata": {}, "items": items}),
            )
        }
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    FakeApiServer {
        url,
        accepted: tokens,
        peak,
    }
}

/// A dispatcher with `--kubernetes-callers` whose API server is `api`, following a
/// snapshot that knows `namespaces` (each its own tenant).
fn cluster_state(api: &FakeApiServer, namespaces: &[&str]) -> Arc<AppState> {
    cluster_state_at(&api.url, namespaces)
}

/// [`cluster_state`] with the API server at `url`.
fn cluster_state_at(url: &str, namespaces: &[&str]) -> Arc<AppState> {
    crate::operator_urls::install_crypto_provider();
    let config = kube::Config::new(url.parse().unwrap());
    let client = kube::Client::try_from(config.clone()).unwrap();
    let state = AppState::new(Engine::new(
        HttpCaller::new(vec![]),
        Edition::Lite,
        SealKey::generate(),
    ));
    state.set_authenticator(crate::identity::Authenticator::Kubernetes(Box::new(
        crate::identity::KubeCallers::new(client, "agenthooks.io", Default::default()),
    )));
    state.set_console_kube(config);
    let (mut set, _) = HookSet::build(vec![], "agenthooks-system", Edition::Lite, 1, None);
    set.tenants = std::sync::Arc::new(agenthooks_crds::tenancy::TenantMap::from_entries(
        namespaces
            .iter()
            .map(|ns| agenthooks_crds::tenancy::NamespaceTenant {
                namespace: ns.to_string(),
                tenant: ns.to_string(),
                held_by: None,
            }),
    ));
    state.set_hooks(set);
    state
}

/// Signs in to `b` with `token` (accepted by the stand-in API server).
async fn sign_in_as(b: &mut Browser, token: &str) {
    let p = b
        .post("/ui/sign-in", &[("token", token), ("next", "/ui/hooks")])
        .await;
    assert_eq!(
        (p.status, p.location.as_str()),
        (StatusCode::SEE_OTHER, "/ui/hooks"),
        "{}",
        p.body
    );
}

#[tokio::test]
async fn in_a_cluster_a_person_who_may_not_list_cluster_wide_sees_their_namespaces_asked_at_once() {
    let others: Vec<String> = (0..40).map(|i| format!("tenant-{i:02}")).collect();
    let mut namespaces: Vec<&str> = others.iter().map(String::as_str).collect();
    namespaces.push("tenant-acme");
    let api = fake_api_server(&["alice-token"], Some("tenant-acme")).await;
    let mut b = Browser::new(cluster_state(&api, &namespaces));
    sign_in_as(&mut b, "alice-token").await;
    let list = b.get("/ui/hooks").await;
    assert_eq!(list.status, StatusCode::OK, "{}", list.body);
    assert!(
        list.body.contains(r#"data-hook="tenant-acme/guard""#),
        "{}",
        list.body
    );
    assert!(
        list.body.contains(
            "You may not list AgentHooks cluster-wide: showing the namespaces you may list."
        ),
        "{}",
        list.body
    );
    for ns in &others {
        assert!(
            !list.body.contains(ns.as_str()),
            "{ns} is never named: {}",
            list.body
        );
    }
    let peak = api.peak.load(std::sync::atomic::Ordering::SeqCst);
    assert!(
        peak > 1,
        "the namespaces are asked at once, not one by one (at most {peak} at a time)"
    );
}

#[tokio::test]
async fn in_a_cluster_a_revoked_token_ends_the_session_on_a_page_that_reads_only_history() {
    let api = fake_api_server(&["alice-token"], None).await;
    let mut b = Browser::new(cluster_state(&api, &[]));
    sign_in_as(&mut b, "alice-token").await;
    let list = b.get("/ui/hooks").await;
    assert_eq!(list.status, StatusCode::OK, "{}", list.body);
    assert!(
        list.body
            .contains("system:serviceaccount:tenant-acme:alice"),
        "{}",
        list.body
    );
    // While the token holds, the page asks the audit trail (off here: its refusal).
    let row = b.get("/ui/executions/1").await;
    assert_ne!(row.status, StatusCode::SEE_OTHER, "{}", row.body);

    // The token is revoked (its ServiceAccount deleted): RBAC on the name would still
    // allow the read, the API server no longer accepts the token.
    api.accepted.lock().unwrap().clear();
    let row = b.get("/ui/executions/1").await;
    assert_eq!(
        (row.status, row.location.as_str()),
        (
            StatusCode::SEE_OTHER,
            "/ui/sign-in?next=%2Fui%2Fexecutions%2F1&reason=expired"
        ),
        "{}",
        row.body
    );
    let after = b.get("/ui/hooks").await;
    assert_eq!(
        after.location, "/ui/sign-in?next=%2Fui%2Fhooks&reason=required",
        "the session ended"
    );
    let again = b.post("/ui/sign-in", &[("token", "alice-token")]).await;
    assert_eq!(again.status, StatusCode::UNAUTHORIZED, "{}", again.body);
}

#[test]
fn next_stays_a_plain_console_path() {
    use super::safe_next;
    assert_eq!(safe_next("/ui/hooks?event=stop"), "/ui/hooks?event=stop");
    assert_eq!(
        safe_next("/ui/hooks/tenant-acme/guard/test"),
        "/ui/hooks/tenant-acme/guard/test"
    );
    for bad in [
        "//evil.example/x",
        "/ui//evil.example",
        "/ui/..//evil.com",
        "/ui/../v1/executions",
        "/ui/%2e%2e/v1/executions",
        "/ui/\u{1}",
        "/ui/\r\nX-Evil: 1",
        "/ui\\evil",
        "https://evil.example/ui/",
        "/ui/sign-out",
    ] {
        assert_eq!(safe_next(bad), "/ui/hooks", "{bad:?}");
    }
}

#[tokio::test]
async fn cookies_are_secure_behind_a_tls_proxy_and_names_are_the_api_servers() {
    let mut b = Browser::new(state(Edition::Lite));
    let body = format!("token={ADMIN}&next=/ui/hooks");
    let r = b
        .app
        .clone()
        .oneshot(
            Request::post("/ui/sign-in")
                .header(header::CONTENT_TYPE, "application/x-www-form-urlencoded")
                .header("x-forwarded-proto", "https")
                .body(Body::from(body))
                .unwrap(),
        )
        .await
        .unwrap();
    let cookie = r
        .headers()
        .get(header::SET_COOKIE)
        .unwrap()
        .to_str()
        .unwrap();
    assert!(cookie.ends_with("; Secure"), "{cookie}");
    let csrf = b.sign_in().await;
    for (field, ns, name) in [
        ("metadata.name", "tenant-acme", "a/b"),
        ("metadata.name", "tenant-acme", "Bad Name<script>"),
        ("metadata.namespace", "../x", "guard"),
    ] {
        let p = b
            .post(
                "/ui/hooks/new",
                &[
                    ("csrf", &csrf),
                    ("namespace", ns),
                    ("name", name),
                    ("event", "stop"),
                    ("scope", "tenant"),
                    ("handler", "http"),
                    ("httpUrl", "https://p.example/h"),
                    ("action", "download"),
                ],
            )
            .await;
        assert_eq!(p.status, StatusCode::BAD_REQUEST, "{name}: {}", p.body);
        assert!(
            p.body.contains(&format!(r#"data-field="{field}""#)),
            "{name}: {}",
            p.body
        );
    }
}

/// An open breaker on this dispatcher shows on the list and the overview, with the tenant
/// and why (standalone: the dispatcher's own breaker state).
#[tokio::test]
async fn an_open_breaker_is_shown_with_its_tenant_and_reason() {
    use crate::decision::outcome::Outcome;
    let state = state(Edition::Lite);
    let set = state.hooks().unwrap();
    let guard = set.get("agenthooks-system/rm-guard").unwrap();
    let now = chrono::Utc::now().timestamp_millis();
    for i in 0..agenthooks_crds::rules::breaker::FAULT_THRESHOLD as i64 {
        let a = guard.breaker.admit("acme", now + i);
        guard.breaker.record("acme", a, Outcome::Error, now + i);
    }
    assert!(guard.breaker.is_open("acme"));
    let mut b = Browser::new(state);
    b.sign_in().await;
    let open = b.get("/ui/hooks?state=circuit-open").await;
    assert!(
        open.body
            .contains(r#"data-hook="agenthooks-system/rm-guard""#),
        "{}",
        open.body
    );
    assert!(
        !open
            .body
            .contains(r#"data-hook="agenthooks-system/rewrite""#),
        "{}",
        open.body
    );
    assert!(open.body.contains("Open · acme"), "{}", open.body);
    let overview = b.get("/ui/hooks/agenthooks-system/rm-guard").await;
    assert!(
        overview
            .body
            .contains("Open for tenant <strong>acme</strong>"),
        "{}",
        overview.body
    );
    assert!(
        overview.body.contains("5 faults in a row within 60 s"),
        "{}",
        overview.body
    );
    assert!(
        overview.body.contains("whatever onTimeout says"),
        "{}",
        overview.body
    );
}
