//! Dispatchers prove who they are on the operator's sync port (CONTRACT §9.4, issue 12
//! part 4), on the real API server: each dispatcher's own ServiceAccount token for the
//! audience `agenthooks.io/sync` (TokenReview), RBAC `create` on `agenthooks/sync` in the
//! master namespace (SubjectAccessReview) through the operator's shipped RBAC
//! (`config/rbac/operator.yaml`: system:auth-delegator), and a dispatcher acts only for
//! itself: a settle of another's reservation, or a report or settle claiming another's
//! identity, is refused and changes nothing.

use std::time::Duration;

use agenthooks_e2e::stack::{
    DispatcherProc, OperatorProc, SyncIdentity, http_get, http_get_with, http_post_with,
    install_crds, log_dir, metric, operator_service_account_kubeconfig, tails,
};
use agenthooks_e2e::{ControlPlane, unique_name, wait_for};
use serde_json::{Value, json};

fn post(sync: &str, path: &str, body: &Value, me: Option<&SyncIdentity>) -> (u16, Value) {
    let auth = me.map(SyncIdentity::header);
    let extra: Vec<&str> = match &auth {
        Some(h) => vec!["-H", h],
        None => vec![],
    };
    let (code, text) = http_post_with(&format!("{sync}{path}"), body, &extra);
    (code, serde_json::from_str(&text).unwrap_or(Value::Null))
}

fn poll(sync: &str, dispatcher: &str, auth: Option<&str>) -> (u16, Value) {
    let url = format!(
        "{sync}/v1/snapshot?dispatcher={}&timeoutSeconds=0",
        dispatcher.replace('/', "%2F")
    );
    let extra: Vec<&str> = match auth {
        Some(h) => vec!["-H", h],
        None => vec![],
    };
    let (code, text) = http_get_with(&url, &extra);
    (code, serde_json::from_str(&text).unwrap_or(Value::Null))
}

fn budget_status(cp: &ControlPlane, ns: &str) -> Value {
    cp.kubectl_json(&["-n", ns, "get", "tenanthookbudget", "tokens"])["status"].clone()
}

#[test]
fn each_dispatcher_proves_its_identity_and_acts_only_for_itself() {
    let cp = ControlPlane::shared();
    install_crds(cp);
    let master = unique_name("ah-syncid");
    let tenant = unique_name("syncid");
    let ns = unique_name("syncid-acme");
    cp.create_namespace(&master, &[]);
    cp.create_namespace(&ns, &[("agenthooks.io/tenant", &tenant)]);
    cp.apply_yaml(&format!(
        "apiVersion: agenthooks.io/v1alpha1\nkind: TenantHookBudget\nmetadata: {{name: tokens, namespace: {ns}}}\nspec: {{monthlyTokens: 1000}}\n"
    ));
    cp.apply_yaml(&format!(
        "apiVersion: agenthooks.io/v1alpha1\nkind: AgentHook\nmetadata: {{name: counted, namespace: {ns}}}\nspec:\n  event: pre_tool_use\n  handler: {{type: http, http: {{url: 'https://policy.example.com/hook'}}}}\n"
    ));
    let logs = log_dir("ah-syncid");
    // The operator runs with the shipped RBAC only: TokenReview and SubjectAccessReview
    // come from its system:auth-delegator binding.
    let kubeconfig = operator_service_account_kubeconfig(cp, &master, &logs);
    let op = OperatorProc::start(
        &kubeconfig,
        &master,
        &unique_name("agenthooks-operator"),
        "syncid-op",
        &[],
        &logs,
    );
    op.wait_serving();
    let sync = op.sync.clone();
    let procs = [&op.proc];
    // A's token is bound to a Pod object (the pod-name extra path); B's to its account.
    let a = SyncIdentity::pod_bound(cp, &master, "disp-a");
    let b = SyncIdentity::mint(cp, &master, "disp-b");
    assert_eq!(a.id, format!("{master}/disp-a-pod"));
    assert_eq!(b.id, format!("{master}/disp-b"));

    // --- authentication and RBAC ---------------------------------------------------------
    let (code, body) = poll(&sync, &a.id, None);
    assert_eq!(code, 401, "an unauthenticated poll: {body}");
    assert!(
        body["error"]
            .as_str()
            .unwrap()
            .contains("missing `Authorization"),
        "{body}"
    );
    let out = std::process::Command::new("curl")
        .args(["-s", "-D", "-", "-o", "/dev/null", "--cacert"])
        .arg(&agenthooks_e2e::stack::test_pki().ca)
        .arg(format!("{sync}/v1/dispatchers"))
        .output()
        .unwrap();
    let headers = String::from_utf8_lossy(&out.stdout).to_ascii_lowercase();
    assert!(
        headers.contains("www-authenticate: bearer realm=\"agenthooks-sync\""),
        "{headers}"
    );
    let caller_token = SyncIdentity::for_audience(
        cp,
        &master,
        "disp-c",
        agenthooks_e2e::stack::CALLER_AUDIENCE,
    );
    let (code, body) = poll(&sync, &caller_token.id, Some(&caller_token.header()));
    assert_eq!(code, 401, "a token of another audience: {body}");
    let unbound = SyncIdentity::unbound(cp, &master, "not-a-dispatcher");
    let (code, body) = poll(&sync, &unbound.id, Some(&unbound.header()));
    assert_eq!(
        code, 403,
        "a ServiceAccount without agenthooks-sync: {body}"
    );
    let why = body["error"].as_str().unwrap();
    assert!(
        why.contains(&format!(
            "may not create agenthooks/sync in namespace {master}"
        )) && why.contains("ClusterRole agenthooks-sync"),
        "{why}"
    );
    // A is known by its Pod (the TokenReview's pod-name extra), not its ServiceAccount.
    let (code, body) = poll(&sync, &format!("{master}/disp-a"), Some(&a.header()));
    assert_eq!(code, 403, "A polling as its ServiceAccount: {body}");
    assert_eq!(
        body["error"],
        format!("dispatcher: this caller is {master}/disp-a-pod, not {master}/disp-a")
    );
    let (code, body) = poll(&sync, &a.id, Some(&a.header()));
    assert_eq!(code, 200, "A polling as its Pod: {body}");
    assert!(body["version"].is_u64(), "{body}");
    let (code, body) = poll(&sync, &b.id, Some(&a.header()));
    assert_eq!(code, 403, "A polling as B: {body}");
    assert_eq!(
        body,
        json!({"error": format!("dispatcher: this caller is {}, not {}", a.id, b.id), "field": "dispatcher"})
    );

    // --- budgets: only the holder settles -------------------------------------------------
    let reserve = |me: &SyncIdentity, tokens: i64| {
        post(
            &sync,
            "/v1/budget/reserve",
            &json!({"dispatcher": me.id, "tenant": tenant, "tokens": tokens}),
            Some(me),
        )
    };
    let mut granted = Value::Null;
    assert!(
        wait_for(Duration::from_secs(60), || {
            let (code, v) = reserve(&a, 400);
            granted = v;
            code == 200 && granted["granted"] == true
        }),
        "A's reserve: {granted}\n{}",
        tails(&procs)
    );
    let id = granted["reservationId"].as_str().unwrap().to_string();
    assert_eq!(granted["remaining"], 600);
    let settle_body = |me: &SyncIdentity, tokens: i64| json!({"dispatcher": me.id, "tenant": tenant, "reservationId": id, "tokens": tokens});
    // B settles A's reservation as itself: 403 naming reservationId.
    let (code, body) = post(&sync, "/v1/budget/settle", &settle_body(&b, 400), Some(&b));
    assert_eq!(code, 403, "{body}");
    assert_eq!(body["field"], "reservationId", "{body}");
    assert_eq!(
        body["error"],
        format!(
            "reservationId: reservation {id} is held by dispatcher {}, not {}; nothing counted",
            a.id, b.id
        )
    );
    // B settles it claiming to be A: 403 naming dispatcher.
    let (code, body) = post(&sync, "/v1/budget/settle", &settle_body(&a, 400), Some(&b));
    assert_eq!(
        (code, body["field"].clone()),
        (403, json!("dispatcher")),
        "{body}"
    );
    // A's reservation is still held (only 600 left), nothing was counted.
    let (code, v) = reserve(&b, 601);
    assert_eq!(code, 200);
    assert_eq!(
        (v["granted"].clone(), v["remaining"].clone()),
        (json!(false), json!(600)),
        "{v}"
    );
    std::thread::sleep(Duration::from_millis(500));
    let st = budget_status(cp, &ns);
    assert_eq!(st["used"].as_i64().unwrap_or(0), 0, "nothing counted: {st}");
    // A settles its own: counted.
    let (code, body) = post(&sync, "/v1/budget/settle", &settle_body(&a, 100), Some(&a));
    assert_eq!(code, 200, "{body}");
    assert_eq!(
        (body["used"].clone(), body["remaining"].clone()),
        (json!(100), json!(900))
    );
    assert!(wait_for(Duration::from_secs(10), || budget_status(cp, &ns)
        ["used"]
        == 100));

    // --- reports: B claiming to be A counts nothing ---------------------------------------
    let hook = cp.kubectl_json(&["-n", &ns, "get", "agenthook", "counted"]);
    let forged = json!({"dispatcher": a.id, "reportId": unique_name("r"),
        "executions": [{"uid": hook["metadata"]["uid"], "namespace": ns, "name": "counted",
            "allow": 7}]});
    let (code, body) = post(&sync, "/v1/report", &forged, Some(&b));
    assert_eq!(code, 403, "{body}");
    assert_eq!(
        body,
        json!({"error": format!("dispatcher: this caller is {}, not {}", b.id, a.id), "field": "dispatcher"})
    );
    std::thread::sleep(Duration::from_secs(2));
    let hook = cp.kubectl_json(&["-n", &ns, "get", "agenthook", "counted"]);
    assert!(
        hook["status"]["executions"].is_null(),
        "nothing counted: {}",
        hook["status"]
    );
    let (_, metrics) = http_get(&format!("{}/metrics", op.admin));
    assert_eq!(
        metric(
            &metrics,
            "agenthooks_operator_reports_total",
            "result=\"forbidden\""
        ),
        1.0
    );
    assert_eq!(
        metric(
            &metrics,
            "agenthooks_operator_reports_total",
            "result=\"applied\""
        ),
        0.0
    );
    // A's own report with the same id is applied.
    let (code, body) = post(&sync, "/v1/report", &forged, Some(&a));
    assert_eq!(
        (code, body["duplicate"].clone()),
        (200, json!(false)),
        "{body}"
    );

    // --- dispatcher processes ---------------------------------------------------------------
    // A dispatcher with A's Pod-bound token: its id is read from the token (MASTER/disp-a)
    // and the operator serves it.
    let d = DispatcherProc::start_as(&[&sync], "syncid-a", &a, &master, &[], &[], &logs);
    assert_eq!(d.id, a.id);
    // One whose explicit --dispatcher-id differs from its token is refused: never ready.
    let other = SyncIdentity::mint(cp, &master, "disp-d");
    let liar = DispatcherProc::start_as(
        &[&sync],
        "syncid-liar",
        &other,
        &master,
        &["--dispatcher-id", "someone-else"],
        &[],
        &logs,
    );
    assert!(
        wait_for(Duration::from_secs(30), || d.readyz() == 200),
        "A's dispatcher not ready\n{}",
        tails(&[&d.proc, &op.proc])
    );
    let (code, listed) = http_get_with(&format!("{sync}/v1/dispatchers"), &["-H", &a.header()]);
    assert_eq!(code, 200, "{listed}");
    let listed: Value = serde_json::from_str(&listed).unwrap();
    let ids: Vec<&str> = listed["dispatchers"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|x| x["id"].as_str())
        .collect();
    assert!(ids.contains(&a.id.as_str()), "{ids:?}");
    assert!(!ids.contains(&"someone-else"), "{ids:?}");
    assert_ne!(
        liar.readyz(),
        200,
        "a dispatcher speaking for another is never served"
    );
    let (_, metrics) = http_get(&format!("{}/metrics", op.admin));
    assert!(
        metric(
            &metrics,
            "agenthooks_operator_snapshot_polls_total",
            "result=\"forbidden\""
        ) >= 2.0,
        "the liar's polls are refused"
    );
}
