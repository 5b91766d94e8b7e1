//! The Approvals pages in process: standalone they say approvals need a cluster; in a
//! cluster (a stand-in API server) the list is the person's, pending first by default and
//! newest first, falling back per namespace; Approve is a JSON merge patch as the person in
//! their own name, behind the form's CSRF token; the API server's refusal is shown and the
//! approval stays pending; a decided approval has no buttons and is not patched again.

use std::sync::{Arc, Mutex};

use axum::body::Body;
use axum::http::{Request, StatusCode, header};
use axum::response::IntoResponse;
use serde_json::{Value, json};

use super::{Browser, cluster_state_at, state};
use agenthooks_crds::Edition;

/// The admission policy's refusal, as kube-apiserver words it (config/approvals/).
const POLICY_REFUSAL: &str = "hookapprovals.agenthooks.io \"ap-pending-new\" is forbidden: ValidatingAdmissionPolicy 'agenthooks-approval-decision' with binding 'agenthooks-approval-decision' denied request: spec.decision: bob may not approve calls in team-a (RBAC verb approve on hookapprovals.agenthooks.io; bind ClusterRole agenthooks-approver)";

/// A stand-in for kube-apiserver holding HookApprovals and one AgentHook with
/// `spec.approval` (`team-a/deploys`). People by token: `alice` (lists cluster-wide,
/// approves), `bob` (lists cluster-wide; the admission policy refuses his decisions),
/// `tina` (may list in `team-a` only). A merge patch with a decision in one's own name is
/// applied (another name is refused as the policy does); every patch is recorded with its
/// person and content type.
struct FakeApprovals {
    url: String,
    patches: Arc<Mutex<Vec<(String, String, Value)>>>,
}

fn approval(ns: &str, id: &str, requested: &str, expires: &str, decided: Option<&str>) -> Value {
    let mut spec = json!({"request": {
        "hook": format!("{ns}/deploys"), "hookUid": "u-deploys", "hookGeneration": 2,
        "tenant": ns, "sessionId": "s1", "toolName": "Deploy", "inputHash": "ab".repeat(32),
        "reason": "Deploy <needs> a person", "requestedAt": requested, "expiresAt": expires}});
    if let Some(by) = decided {
        spec["decision"] = json!("Approve");
        spec["decidedBy"] = json!(by);
        spec["note"] = json!("ship it");
    }
    json!({"apiVersion": "agenthooks.io/v1alpha1", "kind": "HookApproval",
           "metadata": {"name": id, "namespace": ns}, "spec": spec})
}

async fn fake_approvals() -> FakeApprovals {
    let store = Arc::new(Mutex::new(vec![
        approval(
            "team-a",
            "ap-pending-old",
            "2026-01-01T00:00:00Z",
            "2099-01-01T00:00:00Z",
            None,
        ),
        approval(
            "team-a",
            "ap-pending-new",
            "2026-01-02T00:00:00Z",
            "2099-01-01T00:00:00Z",
            None,
        ),
        approval(
            "team-a",
            "ap-approved",
            "2026-01-03T00:00:00Z",
            "2099-01-01T00:00:00Z",
            Some("carol"),
        ),
        approval(
            "team-a",
            "ap-expired",
            "2000-01-01T00:00:00Z",
            "2000-01-01T01:00:00Z",
            None,
        ),
        approval(
            "team-b",
            "ap-other",
            "2026-01-04T00:00:00Z",
            "2099-01-01T00:00:00Z",
            None,
        ),
    ]));
    let patches = Arc::new(Mutex::new(Vec::new()));
    let (store2, patches2) = (Arc::clone(&store), Arc::clone(&patches));
    let app = axum::Router::new().fallback(move |req: Request<Body>| {
        let (store, patches) = (Arc::clone(&store2), Arc::clone(&patches2));
        async move {
            let json_answer = |status: StatusCode, v: Value| {
                (status, [(header::CONTENT_TYPE, "application/json")], v.to_string()).into_response()
            };
            let status = |code: u16, reason: &str, message: &str| {
                json_answer(
                    StatusCode::from_u16(code).unwrap(),
                    json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
                           "message": message, "reason": reason, "code": code}),
                )
            };
            let user = match req
                .headers()
                .get(header::AUTHORIZATION)
                .and_then(|v| v.to_str().ok())
            {
                Some("Bearer alice-token") => "alice",
                Some("Bearer bob-token") => "bob",
                Some("Bearer tina-token") => "tina",
                _ => return status(401, "Unauthorized", "Unauthorized"),
            };
            let (method, path) = (req.method().clone(), req.uri().path().to_owned());
            let kind = req
                .headers()
                .get(header::CONTENT_TYPE)
                .and_then(|v| v.to_str().ok())
                .unwrap_or("")
                .to_owned();
            let body = axum::body::to_bytes(req.into_body(), 1 << 20).await.unwrap();
            if path.ends_with("/selfsubjectreviews") {
                return json_answer(
                    StatusCode::CREATED,
                    json!({"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview",
                           "status": {"userInfo": {"username": user, "groups": ["system:authenticated"]}}}),
                );
            }
            let forbidden = || status(403, "Forbidden", &format!("hookapprovals.agenthooks.io is forbidden: User \"{user}\" cannot list resource \"hookapprovals\""));
            if path == "/apis/agenthooks.io/v1alpha1/namespaces/team-a/agenthooks/deploys" {
                return json_answer(
                    StatusCode::OK,
                    json!({"apiVersion": "agenthooks.io/v1alpha1", "kind": "AgentHook",
                           "metadata": {"name": "deploys", "namespace": "team-a", "generation": 2},
                           "spec": {"event": "pre_tool_use", "matcher": "^Deploy$", "approval": {"ttlSeconds": 600},
                                    "handler": {"type": "http", "http": {"url": "https://p.example/h"}}}}),
                );
            }
            let Some(rest) = path.strip_prefix("/apis/agenthooks.io/v1alpha1/") else {
                return status(404, "NotFound", "not found");
            };
            let parts: Vec<&str> = rest.split('/').collect();
            let list = |items: Vec<Value>| {
                json_answer(
                    StatusCode::OK,
                    json!({"apiVersion": "agenthooks.io/v1alpha1", "kind": "HookApprovalList", "metadata": {}, "items": items}),
                )
            };
            let all = store.lock().unwrap().clone();
            let in_ns = |ns: &str| -> Vec<Value> {
                all.iter().filter(|a| a["metadata"]["namespace"] == ns).cloned().collect()
            };
            match parts.as_slice() {
                ["hookapprovals"] if user == "tina" => forbidden(),
                ["hookapprovals"] => list(all.clone()),
                ["namespaces", ns, "hookapprovals", ..] if user == "tina" && *ns != "team-a" => forbidden(),
                ["namespaces", ns, "hookapprovals"] => list(in_ns(ns)),
                ["namespaces", ns, "hookapprovals", id] => {
                    let Some(found) = in_ns(ns).into_iter().find(|a| a["metadata"]["name"] == *id) else {
                        return status(404, "NotFound", &format!("hookapprovals.agenthooks.io \"{id}\" not found"));
                    };
                    if method == axum::http::Method::GET {
                        return json_answer(StatusCode::OK, found);
                    }
                    let patch: Value = serde_json::from_slice(&body).unwrap();
                    patches.lock().unwrap().push((user.to_owned(), kind, patch.clone()));
                    if user == "bob" {
                        return status(403, "Forbidden", POLICY_REFUSAL);
                    }
                    if patch["spec"]["decidedBy"] != user {
                        return status(403, "Forbidden", &format!("spec.decidedBy: must be your own user name, {user}"));
                    }
                    let mut store = store.lock().unwrap();
                    let a = store
                        .iter_mut()
                        .find(|a| a["metadata"]["name"] == *id && a["metadata"]["namespace"] == *ns)
                        .unwrap();
                    for (k, v) in patch["spec"].as_object().unwrap() {
                        a["spec"][k] = v.clone();
                    }
                    json_answer(StatusCode::OK, a.clone())
                }
                _ => status(404, "NotFound", "not found"),
            }
        }
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    FakeApprovals { url, patches }
}

/// A browser signed in as the person of `token` on a dispatcher whose snapshot knows
/// team-a and team-b.
async fn person(api: &FakeApprovals, token: &str) -> Browser {
    let mut b = Browser::new(cluster_state_at(&api.url, &["team-a", "team-b"]));
    super::sign_in_as(&mut b, token).await;
    b
}

/// The `data-approval` of every row, in order.
fn rows(body: &str) -> Vec<String> {
    body.split("data-approval=\"")
        .skip(1)
        .map(|rest| rest.split('"').next().unwrap().to_owned())
        .collect()
}

/// The page's CSRF token (its forms carry it).
fn csrf_of(body: &str) -> String {
    let at = body.find("name=\"csrf\" value=\"").unwrap() + 19;
    body[at..at + 64].to_owned()
}

#[tokio::test]
async fn standalone_the_page_says_approvals_need_a_cluster() {
    let mut b = Browser::new(state(Edition::Lite));
    b.sign_in().await;
    let p = b.get("/ui/approvals").await;
    assert_eq!(p.status, StatusCode::OK, "{}", p.body);
    assert!(
        p.body.contains(r#"data-testid="approvals-need-a-cluster""#),
        "{}",
        p.body
    );
    assert!(
        p.body.contains("<code>docs/approvals.md</code>"),
        "{}",
        p.body
    );
    assert!(!p.body.contains(r#"role="alert""#), "no error: {}", p.body);
    assert!(
        p.body.contains(r#"<a href="/ui/approvals">Approvals</a>"#),
        "the nav links it: {}",
        p.body
    );
    let one = b.get("/ui/approvals/tenant-acme/ap-1").await;
    assert_eq!(one.status, StatusCode::NOT_FOUND);
    assert!(
        one.body
            .contains(r#"data-testid="approvals-need-a-cluster""#),
        "{}",
        one.body
    );
    // A hook without spec.approval: no approvals line on its overview.
    let overview = b.get("/ui/hooks/tenant-acme/notify").await;
    assert_eq!(overview.status, StatusCode::OK);
    assert!(
        !overview.body.contains(r#"data-testid="approval""#),
        "{}",
        overview.body
    );
}

#[tokio::test]
async fn the_list_is_pending_newest_first_by_default_and_filters_by_state_and_namespace() {
    let api = fake_approvals().await;
    let mut b = person(&api, "alice-token").await;
    let p = b.get("/ui/approvals").await;
    assert_eq!(p.status, StatusCode::OK, "{}", p.body);
    assert_eq!(
        rows(&p.body),
        [
            "team-b/ap-other",
            "team-a/ap-pending-new",
            "team-a/ap-pending-old"
        ]
    );
    assert!(
        p.body
            .contains(r#"<option value="pending" selected>pending</option>"#),
        "{}",
        p.body
    );
    assert!(
        p.body
            .contains("<td data-col=\"reason\">Deploy &lt;needs&gt; a person</td>"),
        "{}",
        p.body
    );
    let all = b.get("/ui/approvals?state=all").await;
    assert_eq!(
        rows(&all.body),
        [
            "team-b/ap-other",
            "team-a/ap-approved",
            "team-a/ap-pending-new",
            "team-a/ap-pending-old",
            "team-a/ap-expired"
        ]
    );
    let approved = b.get("/ui/approvals?state=approved").await;
    assert_eq!(rows(&approved.body), ["team-a/ap-approved"]);
    assert!(
        approved
            .body
            .contains(r#"<td data-col="decided-by">carol</td>"#),
        "{}",
        approved.body
    );
    assert_eq!(
        rows(&b.get("/ui/approvals?state=expired").await.body),
        ["team-a/ap-expired"]
    );
    let ns = b.get("/ui/approvals?namespace=team-a").await;
    assert_eq!(
        rows(&ns.body),
        ["team-a/ap-pending-new", "team-a/ap-pending-old"]
    );
    let hook = b.get("/ui/approvals?state=all&hook=team-b/deploys").await;
    assert_eq!(rows(&hook.body), ["team-b/ap-other"]);
    let bad = b.get("/ui/approvals?state=done").await;
    assert_eq!(bad.status, StatusCode::BAD_REQUEST);
    assert!(
        bad.body.contains(r#"role="alert" data-field="state""#),
        "{}",
        bad.body
    );
    assert!(rows(&bad.body).is_empty());
}

#[tokio::test]
async fn a_person_who_may_not_list_cluster_wide_sees_the_namespaces_they_may_list() {
    let api = fake_approvals().await;
    let mut b = person(&api, "tina-token").await;
    let p = b.get("/ui/approvals?state=all").await;
    assert_eq!(p.status, StatusCode::OK, "{}", p.body);
    assert_eq!(
        rows(&p.body),
        [
            "team-a/ap-approved",
            "team-a/ap-pending-new",
            "team-a/ap-pending-old",
            "team-a/ap-expired"
        ]
    );
    assert!(
        p.body.contains(
            "You may not list HookApprovals cluster-wide: showing the namespaces you may list."
        ),
        "{}",
        p.body
    );
    assert!(
        !p.body.contains("team-b"),
        "team-b is never named: {}",
        p.body
    );
    let other = b.get("/ui/approvals/team-b/ap-other").await;
    assert_eq!(other.status, StatusCode::NOT_FOUND, "{}", other.body);
    assert!(
        other.body.contains(r#"data-field="approval""#),
        "{}",
        other.body
    );
}

#[tokio::test]
async fn approving_is_a_merge_patch_as_the_person_in_their_own_name_behind_the_forms_token() {
    let api = fake_approvals().await;
    let mut b = person(&api, "alice-token").await;
    let page = b.get("/ui/approvals/team-a/ap-pending-new").await;
    assert_eq!(page.status, StatusCode::OK, "{}", page.body);
    assert!(
        page.body.contains(r#"value="Approve">Approve</button>"#),
        "{}",
        page.body
    );
    assert!(
        page.body.contains(r#"<dd data-field="inputHash"><code>"#),
        "{}",
        page.body
    );
    assert!(
        page.body
            .contains(r#"<strong data-testid="answer-as">alice</strong>"#),
        "{}",
        page.body
    );
    let csrf = csrf_of(&page.body);
    let path = "/ui/approvals/team-a/ap-pending-new";

    // Without the form's token, or from another site: refused before the API server.
    let p = b.post(path, &[("decision", "Approve")]).await;
    assert_eq!(p.status, StatusCode::FORBIDDEN, "{}", p.body);
    let p = b
        .post_from(
            path,
            &[("csrf", &csrf), ("decision", "Approve")],
            "https://evil.example",
        )
        .await;
    assert_eq!(p.status, StatusCode::FORBIDDEN, "{}", p.body);
    let p = b
        .post(path, &[("csrf", &csrf), ("decision", "Maybe")])
        .await;
    assert_eq!(p.status, StatusCode::BAD_REQUEST, "{}", p.body);
    assert!(api.patches.lock().unwrap().is_empty());

    let p = b
        .post(
            path,
            &[
                ("csrf", &csrf),
                ("decision", "Approve"),
                ("note", "ship it"),
            ],
        )
        .await;
    assert_eq!(
        (p.status, p.location.as_str()),
        (StatusCode::SEE_OTHER, path),
        "{}",
        p.body
    );
    assert_eq!(
        api.patches.lock().unwrap().clone(),
        [(
            "alice".to_owned(),
            "application/merge-patch+json".to_owned(),
            json!({"spec": {"decision": "Approve", "decidedBy": "alice", "note": "ship it"}})
        )]
    );
    let after = b.get(path).await;
    assert!(
        after.body.contains(r#"data-state="Approved""#),
        "{}",
        after.body
    );
    assert!(
        after
            .body
            .contains(r#"<dd data-testid="decided-by">alice</dd>"#),
        "{}",
        after.body
    );
    assert!(
        after
            .body
            .contains(r#"<dd data-testid="note"><pre>ship it</pre></dd>"#),
        "{}",
        after.body
    );
    assert!(
        !after.body.contains(r#"name="decision""#),
        "no buttons once decided: {}",
        after.body
    );

    // Decided: answered again (a stale page), it is refused here and not patched.
    let again = b
        .post(path, &[("csrf", &csrf), ("decision", "Reject")])
        .await;
    assert_eq!(again.status, StatusCode::CONFLICT, "{}", again.body);
    assert!(
        again
            .body
            .contains("this approval is Approved already (by alice)"),
        "{}",
        again.body
    );
    assert_eq!(api.patches.lock().unwrap().len(), 1);
    // Expired: no buttons, not answerable.
    let expired = b.get("/ui/approvals/team-a/ap-expired").await;
    assert!(
        expired.body.contains(r#"data-state="Expired""#),
        "{}",
        expired.body
    );
    assert!(
        !expired.body.contains(r#"name="decision""#),
        "{}",
        expired.body
    );
}

#[tokio::test]
async fn the_api_servers_refusal_is_shown_and_the_approval_stays_pending() {
    let api = fake_approvals().await;
    let mut b = person(&api, "bob-token").await;
    let path = "/ui/approvals/team-a/ap-pending-new";
    let page = b.get(path).await;
    let csrf = csrf_of(&page.body);
    let p = b
        .post(
            path,
            &[("csrf", &csrf), ("decision", "Approve"), ("note", "lgtm")],
        )
        .await;
    assert_eq!(p.status, StatusCode::FORBIDDEN, "{}", p.body);
    let escaped = POLICY_REFUSAL.replace('"', "&quot;");
    assert!(
        p.body.contains(&format!(
            r#"<p class="error" role="alert" id="decide-error" data-field="decision" data-testid="decide-error">{escaped}</p>"#
        )),
        "{}",
        p.body
    );
    assert!(p.body.contains(r#"data-state="Pending""#), "{}", p.body);
    assert!(
        p.body.contains(">lgtm</textarea>"),
        "the note is kept: {}",
        p.body
    );
    assert_eq!(api.patches.lock().unwrap()[0].2["spec"]["decidedBy"], "bob");
    let after = b.get(path).await;
    assert!(
        after.body.contains(r#"data-state="Pending""#),
        "{}",
        after.body
    );
    assert!(
        after.body.contains(r#"value="Approve">Approve</button>"#),
        "{}",
        after.body
    );
}

#[tokio::test]
async fn a_hooks_overview_links_its_pending_approvals() {
    let api = fake_approvals().await;
    let mut b = person(&api, "alice-token").await;
    let p = b.get("/ui/hooks/team-a/deploys").await;
    assert_eq!(p.status, StatusCode::OK, "{}", p.body);
    assert!(
        p.body.contains(r#"<a href="/ui/approvals?state=pending&amp;namespace=team-a&amp;hook=team-a/deploys">its pending approvals</a>"#),
        "{}",
        p.body
    );
    assert!(p.body.contains("answerable for 600 s"), "{}", p.body);
}
