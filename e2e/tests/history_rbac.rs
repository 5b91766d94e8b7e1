//! History and dry runs authorized by Kubernetes RBAC (CONTRACT §9.5) on the real API
//! server: a dispatcher with `--kubernetes-callers`, running as a ServiceAccount with
//! exactly the RBAC of `config/rbac/dispatcher.yaml`, lets a tenant's runtime token read its
//! own namespace's audit rows once a RoleBinding of `agenthooks-history-reader` says so, and
//! dry-run its hooks once one of `agenthooks-tester` does; another namespace's rows are 403
//! to list and 404 to get, and the cluster-wide list needs a ClusterRoleBinding.
//!
//! The audit rows are written through the audit store API into the dispatcher's SQLite file
//! before it starts: with `--kubernetes-callers` a runtime's events need the snapshot's
//! namespace tenants (CONTRACT §9.3), which the operator does not fill yet, so dispatching
//! cannot make them here. What is under test is who may read them.

use std::time::Duration;

use agenthooks_crds::event::HookEvent;
use agenthooks_dispatcher::audit::row::{AuditRow, dedup_key};
use agenthooks_dispatcher::audit::store::AuditStore;
use agenthooks_dispatcher::handlers::Outcome;
use agenthooks_e2e::stack::{
    bindable_role, http_get_with, http_post_with, install_crds, kubernetes_callers_stack, log_dir,
    service_account_token, tails, wait_or_panic,
};
use agenthooks_e2e::{ControlPlane, unique_name, wait_for};
use serde_json::{Value, json};

/// The curl arguments sending `token` as a bearer token.
fn auth(token: &str) -> String {
    format!("Authorization: Bearer {token}")
}

/// `GET url+path` with `token` → (status, JSON body or Null).
fn get(url: &str, path: &str, token: Option<&str>) -> (u16, Value) {
    let header = token.map(auth);
    let extra: Vec<&str> = header.iter().flat_map(|h| ["-H", h.as_str()]).collect();
    let (code, body) = http_get_with(&format!("{url}{path}"), &extra);
    (code, serde_json::from_str(&body).unwrap_or(Value::Null))
}

/// `POST url/v1/test` with `token` → (status, JSON body or Null).
fn dry_run(url: &str, token: &str, body: &Value) -> (u16, Value) {
    let header = auth(token);
    let (code, body) = http_post_with(&format!("{url}/v1/test"), body, &["-H", &header]);
    (code, serde_json::from_str(&body).unwrap_or(Value::Null))
}

/// A RoleBinding (in `ns`; a ClusterRoleBinding for `None`) named `name` of ClusterRole
/// `role` to ServiceAccount `sa_ns/runtime`.
fn binding(name: &str, ns: Option<&str>, role: &str, sa_ns: &str) -> String {
    let (kind, meta) = match ns {
        Some(ns) => ("RoleBinding", format!("{{name: {name}, namespace: {ns}}}")),
        None => ("ClusterRoleBinding", format!("{{name: {name}}}")),
    };
    format!(
        "apiVersion: rbac.authorization.k8s.io/v1\nkind: {kind}\nmetadata: {meta}\nroleRef: {{apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: {role}}}\nsubjects: [{{kind: ServiceAccount, name: runtime, namespace: {sa_ns}}}]\n"
    )
}

/// `n` rows of hook `ns/guard`, events `<ns>-0..n`.
fn rows(ns: &str, n: usize) -> Vec<AuditRow> {
    (0..n)
        .map(|i| AuditRow {
            id: None,
            hook_uid: format!("uid-{ns}"),
            hook_namespace: ns.into(),
            hook_name: "guard".into(),
            tenant: ns.into(),
            session_id: format!("session-of-{ns}"),
            event: HookEvent::PreToolUse,
            input_hash: "ab".repeat(32),
            decision: Outcome::Block,
            duration_ms: 3,
            dedup_key: dedup_key(&format!("uid-{ns}"), &format!("{ns}-{i}")),
            error: Some(format!("refused in {ns}")),
            error_detail: None,
            metadata: json!({"caller": format!("system:serviceaccount:{ns}:runtime")}),
            created_at: chrono::Utc::now(),
        })
        .collect()
}

/// The row ids of a listing, and the namespaces they belong to.
fn listed(body: &Value) -> (Vec<i64>, Vec<String>) {
    let rows = body["executions"].as_array().expect("a listing");
    (
        rows.iter().map(|r| r["id"].as_i64().unwrap()).collect(),
        rows.iter()
            .map(|r| r["hookNamespace"].as_str().unwrap().to_string())
            .collect(),
    )
}

#[test]
fn tenants_read_and_test_their_own_namespace_by_rbac() {
    let cp = ControlPlane::shared();
    install_crds(cp);
    let logs = log_dir("history-rbac");
    let master = unique_name("hist-master");
    let ns_a = unique_name("hist-a");
    let ns_b = unique_name("hist-b");
    for ns in [&master, &ns_a, &ns_b] {
        cp.create_namespace(ns, &[]);
    }
    for ns in [&ns_a, &ns_b] {
        cp.kubectl_ok(&["create", "serviceaccount", "runtime", "-n", ns]);
        cp.apply_yaml(&format!(
            "apiVersion: agenthooks.io/v1alpha1\nkind: AgentHook\nmetadata: {{name: guard, namespace: {ns}}}\nspec:\n  event: pre_tool_use\n  matcher: '^exec$'\n  handler: {{type: command, command: {{command: 'echo {ns} says no >&2; exit 2'}}}}\n"
        ));
    }

    // Three rows of namespace a, two of namespace b, in the dispatcher's database.
    let db = format!("sqlite://{}", logs.join("audit.db").display());
    let (ids_a, ids_b) = tokio::runtime::Runtime::new().unwrap().block_on(async {
        let store = AuditStore::connect(&db).await.unwrap();
        assert_eq!(store.insert_batch(&rows(&ns_a, 3)).await.unwrap(), 3);
        assert_eq!(store.insert_batch(&rows(&ns_b, 2)).await.unwrap(), 2);
        let all = store.list(&Default::default()).await.unwrap().rows;
        store.close().await;
        let of = |ns: &str| -> Vec<i64> {
            all.iter()
                .filter(|r| r.hook_namespace == ns)
                .map(|r| r.id.unwrap())
                .collect()
        };
        (of(&ns_a), of(&ns_b))
    });
    assert_eq!((ids_a.len(), ids_b.len()), (3, 2));

    let (operator, d) = kubernetes_callers_stack(cp, "hist", &master, &["--audit-db", &db], &logs);
    let procs = [&operator.proc, &d.proc];
    let guard_a = format!("{ns_a}/guard");
    wait_or_panic(
        Duration::from_secs(60),
        "the dispatcher serves a's guard",
        &procs,
        || {
            d.served_generation(&guard_a).is_some()
                && d.served_generation(&format!("{ns_b}/guard")).is_some()
        },
    );
    let token_a = service_account_token(cp, &ns_a, "runtime", "agenthooks.io");
    let own = format!("/v1/executions?namespace={ns_a}");

    // No credential: 401 on every route; a token but no RoleBinding yet: 403 naming the
    // permission and the namespace.
    let (code, body) = get(&d.url, &own, None);
    assert_eq!(code, 401, "{body}\n{}", tails(&procs));
    let (code, body) = get(&d.url, &format!("/v1/executions/{}", ids_a[0]), None);
    assert_eq!(code, 401, "{body}");
    let (code, body) = get(&d.url, &own, Some(&token_a));
    assert_eq!(
        (code, body["field"].as_str()),
        (403, Some("namespace")),
        "{body}\n{}",
        tails(&procs)
    );
    let message = body["error"].as_str().unwrap();
    assert!(
        message.contains(&format!(
            "system:serviceaccount:{ns_a}:runtime may not list agenthooks/executions in namespace {ns_a}"
        )) && message.contains("agenthooks-history-reader"),
        "{body}"
    );

    // Bound to agenthooks-history-reader in its own namespace: its rows, only its rows.
    cp.apply_yaml(&binding(
        "runtime-history",
        Some(&ns_a),
        &bindable_role("agenthooks-history-reader"),
        &ns_a,
    ));
    wait_or_panic(
        Duration::from_secs(10),
        "the RoleBinding lets a list its namespace's rows",
        &procs,
        || get(&d.url, &own, Some(&token_a)).0 == 200,
    );
    let (code, body) = get(&d.url, &own, Some(&token_a));
    assert_eq!(code, 200, "{body}");
    let mut want = ids_a.clone();
    want.sort_by(|x, y| y.cmp(x));
    assert_eq!(listed(&body), (want.clone(), vec![ns_a.clone(); 3]));
    // hook=NS/NAME implies its namespace; with namespace too, the same one.
    for path in [
        format!("/v1/executions?hook={ns_a}/guard"),
        format!("/v1/executions?namespace={ns_a}&hook={ns_a}/guard&decision=block"),
    ] {
        let (code, body) = get(&d.url, &path, Some(&token_a));
        assert_eq!(
            (code, listed(&body).0),
            (200, want.clone()),
            "{path}: {body}"
        );
    }
    let (code, body) = get(
        &d.url,
        &format!("/v1/executions?namespace={ns_a}&hook={ns_b}/guard"),
        Some(&token_a),
    );
    assert_eq!(
        (code, body["field"].as_str()),
        (400, Some("namespace")),
        "{body}"
    );

    // Another namespace: 403 naming it (field namespace, or hook when hook named it);
    // every namespace at once: 403 saying cluster-wide.
    let (code, body) = get(
        &d.url,
        &format!("/v1/executions?namespace={ns_b}"),
        Some(&token_a),
    );
    assert_eq!(
        (code, body["field"].as_str()),
        (403, Some("namespace")),
        "{body}"
    );
    assert!(
        body["error"]
            .as_str()
            .unwrap()
            .contains(&format!("list agenthooks/executions in namespace {ns_b}")),
        "{body}"
    );
    assert!(!body.to_string().contains("session-of-"), "{body}");
    let (code, body) = get(
        &d.url,
        &format!("/v1/executions?hook={ns_b}/guard"),
        Some(&token_a),
    );
    assert_eq!(
        (code, body["field"].as_str()),
        (403, Some("hook")),
        "{body}"
    );
    let (code, body) = get(&d.url, "/v1/executions", Some(&token_a));
    assert_eq!(
        (code, body["field"].as_str()),
        (403, Some("namespace")),
        "{body}"
    );
    assert!(
        body["error"]
            .as_str()
            .unwrap()
            .contains("list agenthooks/executions cluster-wide"),
        "{body}"
    );

    // One row: its own (with errorDetail, the same permission); another namespace's row
    // is answered exactly as an id that does not exist.
    let (code, body) = get(
        &d.url,
        &format!("/v1/executions/{}", ids_a[0]),
        Some(&token_a),
    );
    assert_eq!(
        (code, body["id"].as_i64(), body["hookNamespace"].as_str()),
        (200, Some(ids_a[0]), Some(ns_a.as_str())),
        "{body}"
    );
    let (code, body) = get(
        &d.url,
        &format!("/v1/executions/{}?errorDetail=true", ids_a[0]),
        Some(&token_a),
    );
    assert_eq!((code, &body["errorDetail"]), (200, &Value::Null), "{body}");
    let unknown = ids_b.iter().chain(&ids_a).max().unwrap() + 1000;
    for id in [ids_b[0], unknown] {
        for query in ["", "?errorDetail=true"] {
            let (code, body) = get(
                &d.url,
                &format!("/v1/executions/{id}{query}"),
                Some(&token_a),
            );
            assert_eq!(
                (code, body),
                (
                    404,
                    json!({"error": format!("id: no execution {id}"), "field": "id"})
                ),
                "row {id}{query}"
            );
        }
    }

    // Dry runs: 403 in its own namespace until bound to agenthooks-tester, then 200; a
    // hook of another namespace stays 403, before it is even looked up.
    let event = json!({"event": "pre_tool_use", "tool_name": "exec", "tool_input": {"cmd": "ls"}});
    let named = json!({"hook": guard_a, "event": event, "force": true});
    let inline = json!({
        "spec": {"apiVersion": "agenthooks.io/v1alpha1", "kind": "AgentHook",
                 "metadata": {"name": "inline", "namespace": ns_a},
                 "spec": {"event": "pre_tool_use", "handler": {"type": "command", "command": {"command": "exit 0"}}}},
        "event": event, "force": true,
    });
    let (code, body) = dry_run(&d.url, &token_a, &named);
    assert_eq!(
        (code, body["field"].as_str()),
        (403, Some("hook")),
        "{body}"
    );
    assert!(
        body["error"]
            .as_str()
            .unwrap()
            .contains(&format!("create agenthooks/test in namespace {ns_a}")),
        "{body}"
    );
    let (code, body) = dry_run(&d.url, &token_a, &inline);
    assert_eq!(
        (code, body["field"].as_str()),
        (403, Some("spec.metadata.namespace")),
        "{body}"
    );
    cp.apply_yaml(&binding(
        "runtime-tester",
        Some(&ns_a),
        &bindable_role("agenthooks-tester"),
        &ns_a,
    ));
    wait_or_panic(
        Duration::from_secs(10),
        "the RoleBinding lets a dry-run its hooks",
        &procs,
        || dry_run(&d.url, &token_a, &named).0 == 200,
    );
    let (code, body) = dry_run(&d.url, &token_a, &named);
    assert_eq!(
        (
            code,
            body["hook"].as_str(),
            body["ran"].as_bool(),
            body["decision"].as_str()
        ),
        (200, Some(guard_a.as_str()), Some(true), Some("block")),
        "{body}"
    );
    assert_eq!(body["reason"], format!("{ns_a} says no"), "{body}");
    let (code, body) = dry_run(&d.url, &token_a, &inline);
    assert_eq!(
        (code, body["hook"].as_str(), body["decision"].as_str()),
        (200, Some(format!("{ns_a}/inline").as_str()), Some("allow")),
        "{body}"
    );
    let other = json!({"hook": format!("{ns_b}/guard"), "event": event, "force": true});
    let (code, body) = dry_run(&d.url, &token_a, &other);
    assert_eq!(
        (code, body["field"].as_str()),
        (403, Some("hook")),
        "{body}"
    );
    let nobody = json!({"hook": format!("{ns_b}/no-such-hook"), "event": event});
    let (code, body) = dry_run(&d.url, &token_a, &nobody);
    assert_eq!(
        (code, body["field"].as_str()),
        (403, Some("hook")),
        "another namespace's hook names tell nothing: {body}"
    );

    // The cluster-wide list needs a ClusterRoleBinding: b's runtime, bound so, reads every
    // row of this test's database.
    let token_b = service_account_token(cp, &ns_b, "runtime", "agenthooks.io");
    let (code, _) = get(&d.url, "/v1/executions", Some(&token_b));
    assert_eq!(code, 403);
    let cluster_binding = unique_name("hist-reader-all");
    cp.apply_yaml(&binding(
        &cluster_binding,
        None,
        &bindable_role("agenthooks-history-reader"),
        &ns_b,
    ));
    wait_or_panic(
        Duration::from_secs(10),
        "the ClusterRoleBinding lets b list every namespace",
        &procs,
        || get(&d.url, "/v1/executions", Some(&token_b)).0 == 200,
    );
    let (_, body) = get(&d.url, "/v1/executions", Some(&token_b));
    let (mut ids, _) = listed(&body);
    ids.sort();
    let mut every: Vec<i64> = ids_a.iter().chain(&ids_b).copied().collect();
    every.sort();
    assert_eq!(ids, every, "{body}");
    let (code, body) = get(
        &d.url,
        &format!("/v1/executions/{}", ids_a[1]),
        Some(&token_b),
    );
    assert_eq!(
        (code, body["hookNamespace"].as_str()),
        (200, Some(ns_a.as_str())),
        "{body}"
    );
    cp.kubectl_ok(&["delete", "clusterrolebinding", &cluster_binding]);

    // Revoking a's RoleBinding takes effect within the access cache (2 s here).
    cp.kubectl_ok(&["delete", "rolebinding", "runtime-history", "-n", &ns_a]);
    let revoked = std::time::Instant::now();
    assert!(
        wait_for(Duration::from_secs(10), || get(
            &d.url,
            &own,
            Some(&token_a)
        )
        .0 == 403),
        "deleting the RoleBinding revokes the reads\n{}",
        tails(&procs)
    );
    assert!(
        revoked.elapsed() < Duration::from_secs(5),
        "revoked within the access cache: {:?}",
        revoked.elapsed()
    );
    let row = format!("/v1/executions/{}", ids_a[0]);
    assert!(
        wait_for(Duration::from_secs(5), || get(&d.url, &row, Some(&token_a))
            .0
            == 404),
        "a row it may no longer read is unknown to it"
    );
}
