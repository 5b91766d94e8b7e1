//! `GET /v1/executions[/{id}]` on the real `agenthooks-dispatcher` binary with a SQLite
//! audit database (issue 5 point 2): paging with a stable cursor while new rows arrive,
//! filters, every 400 field, 404, the error detail behind the admin token, a rotated-out
//! key, and audit off.

mod api_harness;

use std::collections::HashSet;

use api_harness::{Files, TOKEN, start};
use serde_json::{Value, json};

const HOOKS: &str = r#"
apiVersion: agenthooks.io/v1alpha1
kind: AgentHook
metadata: {name: allow-all, namespace: team-a}
spec:
  event: pre_tool_use
  priority: 10
  handler: {type: command, command: {command: "exit 0"}}
---
apiVersion: agenthooks.io/v1alpha1
kind: AgentHook
metadata: {name: deny-rm, namespace: team-a}
spec:
  event: pre_tool_use
  priority: 5
  matcher: "^Bash$"
  ifExpr: "tool_input.command.startsWith('rm')"
  handler: {type: command, command: {command: "echo 'rm refused' >&2; exit 2"}}
---
apiVersion: agenthooks.io/v1alpha1
kind: AgentHook
metadata: {name: fails, namespace: team-a}
spec:
  event: pre_tool_use
  priority: 1
  matcher: "^Fail$"
  handler: {type: command, command: {command: "echo 'upstream refused the token of bob@example.com' >&2; exit 3"}}
"#;

fn event(tool: &str, input: Value, session: &str) -> Value {
    json!({"event": "pre_tool_use", "tenant_id": "team-a", "session_id": session, "agent_id": "a1",
           "tool_name": tool, "tool_input": input})
}

fn ids(rows: &[Value]) -> Vec<i64> {
    rows.iter().map(|r| r["id"].as_i64().unwrap()).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn history_pages_filters_refusals_and_error_detail() {
    let files = Files::new(HOOKS);
    let k1 = format!("k1={}", files.path("k1.key").display());
    let token_file = files.path("admin.token");
    let db = files.audit_db();
    let d = start(
        &files,
        &[
            "--audit-db",
            &db,
            "--audit-key-file",
            &k1,
            "--admin-token-file",
            token_file.to_str().unwrap(),
        ],
    )
    .await;
    let before = chrono::Utc::now() - chrono::Duration::seconds(1);

    // 30 reads (allow-all), 2 rm (allow-all + deny-rm), 1 failing call (allow-all + fails).
    for i in 0..30 {
        let (code, body) = d
            .post(
                "/v1/dispatch",
                &event("Read", json!({"path": format!("/f{i}")}), "s-read"),
                None,
            )
            .await;
        assert_eq!((code, &body["decision"]), (200, &json!("allow")), "{body}");
    }
    for _ in 0..2 {
        let (_, body) = d
            .post(
                "/v1/dispatch",
                &event("Bash", json!({"command": "rm -rf /tmp/x"}), "s-rm"),
                None,
            )
            .await;
        assert_eq!(body["decision"], "block", "{body}");
    }
    let (_, body) = d
        .post("/v1/dispatch", &event("Fail", json!({}), "s-fail"), None)
        .await;
    assert_eq!(body["decision"], "block", "{body}");
    let all = d.wait_rows("", 36).await;
    let all_ids = ids(&all);
    let mut sorted = all_ids.clone();
    sorted.sort_by(|a, b| b.cmp(a));
    assert_eq!(all_ids, sorted, "newest (highest id) first");

    // Row shape: camelCase, error detail never listed.
    let fail_row = all.iter().find(|r| r["hookName"] == "fails").unwrap();
    let keys: Vec<&str> = fail_row
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    let mut keys = keys.clone();
    keys.sort();
    assert_eq!(
        keys,
        [
            "createdAt",
            "decision",
            "dedupKey",
            "durationMs",
            "error",
            "errorDetailKeyId",
            "event",
            "hasErrorDetail",
            "hookName",
            "hookNamespace",
            "hookUid",
            "id",
            "inputHash",
            "metadata",
            "sessionId",
            "tenant"
        ]
    );
    assert_eq!(fail_row["hookNamespace"], "team-a");
    assert_eq!(fail_row["hookUid"], "standalone:team-a/fails");
    assert_eq!(fail_row["tenant"], "team-a");
    assert_eq!(fail_row["sessionId"], "s-fail");
    assert_eq!(fail_row["event"], "pre_tool_use");
    assert_eq!(fail_row["decision"], "error");
    assert_eq!(fail_row["hasErrorDetail"], true);
    assert_eq!(fail_row["errorDetailKeyId"], "k1");
    assert_eq!(fail_row["inputHash"].as_str().unwrap().len(), 64);
    assert_eq!(fail_row["metadata"]["matcher_matched"], true);
    let error = fail_row["error"].as_str().unwrap();
    assert!(
        error.contains("[REDACTED]") && !error.contains("bob@example.com"),
        "{error}"
    );
    assert!(chrono::DateTime::parse_from_rfc3339(fail_row["createdAt"].as_str().unwrap()).is_ok());
    let allow_row = all.iter().find(|r| r["hookName"] == "allow-all").unwrap();
    assert_eq!(
        (
            &allow_row["error"],
            &allow_row["hasErrorDetail"],
            &allow_row["errorDetailKeyId"]
        ),
        (&Value::Null, &json!(false), &Value::Null)
    );

    // Paging, limit 10, while new rows arrive between pages: exactly the 36 rows seen at
    // the start, in order, no duplicates, no gaps.
    let (code, p1) = d.get("/v1/executions?limit=10", Some(TOKEN)).await;
    assert_eq!(code, 200);
    let mut paged = ids(p1["executions"].as_array().unwrap());
    let mut cursor = p1["nextCursor"].as_str().unwrap().to_owned();
    for i in 0..5 {
        d.post(
            "/v1/dispatch",
            &event("Read", json!({"path": format!("/new{i}")}), "s-new"),
            None,
        )
        .await;
    }
    d.wait_rows("", 41).await;
    loop {
        let (code, p) = d
            .get(
                &format!("/v1/executions?limit=10&cursor={cursor}"),
                Some(TOKEN),
            )
            .await;
        assert_eq!(code, 200, "{p}");
        paged.extend(ids(p["executions"].as_array().unwrap()));
        match p["nextCursor"].as_str() {
            Some(c) => cursor = c.to_owned(),
            None => break,
        }
    }
    assert_eq!(paged, all_ids, "pages hold the first listing, unshifted");
    assert_eq!(paged.iter().collect::<HashSet<_>>().len(), 36);
    let (_, p) = d.get("/v1/executions?limit=36", Some(TOKEN)).await;
    assert_eq!(p["executions"].as_array().unwrap().len(), 36);
    assert!(
        p["nextCursor"].is_string(),
        "41 rows now: another page exists"
    );

    // Filters.
    let deny = d.wait_rows("hook=team-a/deny-rm", 2).await;
    assert!(
        deny.iter()
            .all(|r| r["decision"] == "block" && r["hookName"] == "deny-rm")
    );
    assert_eq!(deny[0]["error"], "rm refused");
    assert_eq!(d.wait_rows("decision=block", 2).await.len(), 2);
    assert_eq!(
        d.wait_rows("decision=error", 1).await[0]["hookName"],
        "fails"
    );
    assert_eq!(
        d.wait_rows("hook=team-a/allow-all&decision=allow", 38)
            .await
            .len(),
        38
    );
    assert_eq!(d.wait_rows("hook=team-a/nobody", 0).await.len(), 0);
    // namespace: the rows of that namespace's hooks (the admin token reads every one).
    assert_eq!(d.wait_rows("namespace=team-a", 41).await.len(), 41);
    assert_eq!(d.wait_rows("namespace=team-b", 0).await.len(), 0);
    assert_eq!(
        ids(&d.wait_rows("namespace=team-a&hook=team-a/deny-rm", 2).await),
        ids(&deny)
    );
    let since = |t: chrono::DateTime<chrono::Utc>| {
        t.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
            .replace('+', "%2B")
    };
    assert_eq!(
        d.wait_rows(&format!("since={}", since(before)), 41)
            .await
            .len(),
        41
    );
    let future = chrono::Utc::now() + chrono::Duration::hours(1);
    assert_eq!(
        d.wait_rows(&format!("since={}", since(future)), 0)
            .await
            .len(),
        0
    );

    // Every bad parameter is a 400 naming it.
    for (query, field) in [
        ("hook=deny-rm", "hook"),
        ("hook=a/b/c", "hook"),
        ("decision=deny", "decision"),
        ("since=yesterday", "since"),
        ("since=2026-11-30", "since"),
        ("limit=0", "limit"),
        ("limit=501", "limit"),
        ("limit=ten", "limit"),
        ("cursor=nope", "cursor"),
        ("namespace=Team-A", "namespace"),
        ("namespace=", "namespace"),
        ("namespace=team-b&hook=team-a/deny-rm", "namespace"),
        ("namespace=team-a&namespace=team-a", "namespace"),
        ("cursor=", "cursor"),
        ("decison=block", "decison"),
        ("limit=5&limit=6", "limit"),
    ] {
        let (code, body) = d.get(&format!("/v1/executions?{query}"), Some(TOKEN)).await;
        assert_eq!(
            (code, body["field"].as_str()),
            (400, Some(field)),
            "{query}: {body}"
        );
        assert!(
            body["error"]
                .as_str()
                .unwrap()
                .starts_with(&format!("{field}: ")),
            "{body}"
        );
    }
    let (code, body) = d.get("/v1/executions?limit=500", Some(TOKEN)).await;
    assert_eq!(code, 200, "{body}");

    // One row; 404; 400 for a bad id.
    let id = fail_row["id"].as_i64().unwrap();
    let (code, row) = d.get(&format!("/v1/executions/{id}"), Some(TOKEN)).await;
    assert_eq!(code, 200);
    assert_eq!(&row, fail_row);
    let (code, body) = d.get("/v1/executions/999999", Some(TOKEN)).await;
    assert_eq!((code, &body["field"]), (404, &json!("id")), "{body}");
    let (code, body) = d.get("/v1/executions/abc", Some(TOKEN)).await;
    assert_eq!((code, &body["field"]), (400, &json!("id")), "{body}");
    let (code, body) = d
        .get(&format!("/v1/executions/{id}?errorDetail=yes"), Some(TOKEN))
        .await;
    assert_eq!(
        (code, &body["field"]),
        (400, &json!("errorDetail")),
        "{body}"
    );

    // Every read needs the admin token: rows name every tenant's sessions and errors.
    for path in ["/v1/executions".to_string(), format!("/v1/executions/{id}")] {
        let (code, body) = d.get(&path, None).await;
        assert_eq!(code, 403, "{path}: {body}");
        assert!(!body.to_string().contains("s-fail"), "{body}");
        let (code, _) = d.get(&path, Some("not-the-admin-token-at-all")).await;
        assert_eq!(code, 403, "{path}");
    }

    // Error detail: 403 without or with a wrong token; decrypted with the token.
    let detail = format!("/v1/executions/{id}?errorDetail=true");
    let (code, body) = d.get(&detail, None).await;
    assert_eq!(code, 403, "{body}");
    assert!(
        body["error"]
            .as_str()
            .unwrap()
            .contains("Authorization: Bearer"),
        "{body}"
    );
    assert!(!body.to_string().contains("bob@"), "{body}");
    let (code, body) = d.get(&detail, Some("not-the-admin-token-at-all")).await;
    assert_eq!(code, 403, "{body}");
    assert!(
        body["error"]
            .as_str()
            .unwrap()
            .contains("not this dispatcher's admin token")
    );
    let (code, body) = d.get(&detail, Some(TOKEN)).await;
    assert_eq!(code, 200, "{body}");
    assert_eq!(
        body["errorDetail"],
        "command exited with status 3: upstream refused the token of bob@example.com"
    );
    assert!(body.get("errorDetailError").is_none(), "{body}");
    assert_eq!(body["id"], id);
    // A row without detail says so.
    let allow_id = allow_row["id"].as_i64().unwrap();
    let (code, body) = d
        .get(
            &format!("/v1/executions/{allow_id}?errorDetail=true"),
            Some(TOKEN),
        )
        .await;
    assert_eq!((code, &body["errorDetail"]), (200, &Value::Null), "{body}");
    assert!(
        body["errorDetailError"]
            .as_str()
            .unwrap()
            .contains("no error detail")
    );
    drop(d);

    // The same database under another key only: the row, with a clear errorDetailError.
    let k2 = format!("k2={}", files.path("k2.key").display());
    let d = start(
        &files,
        &[
            "--audit-db",
            &db,
            "--audit-key-file",
            &k2,
            "--admin-token-file",
            token_file.to_str().unwrap(),
        ],
    )
    .await;
    let (code, body) = d.get(&detail, Some(TOKEN)).await;
    assert_eq!(code, 200, "{body}");
    assert_eq!(body["errorDetail"], Value::Null);
    assert_eq!(
        body["errorDetailError"],
        "no audit key with id \"k1\" is loaded"
    );
    assert_eq!(body["hookName"], "fails");
    assert!(!body.to_string().contains("bob@"), "{body}");
    // Rows survive the restart (41 of them, the 5 late ones flushed on SIGTERM at most).
    let (_, p) = d.get("/v1/executions?limit=500", Some(TOKEN)).await;
    assert_eq!(p["executions"].as_array().unwrap().len(), 41);
    drop(d);

    // Audit off: 503 saying so. No admin token: 403 saying how to enable it.
    let d = start(
        &files,
        &[
            "--audit-db",
            "off",
            "--admin-token-file",
            token_file.to_str().unwrap(),
        ],
    )
    .await;
    let (code, body) = d.get("/v1/executions", Some(TOKEN)).await;
    assert_eq!(code, 503, "{body}");
    assert!(
        body["error"].as_str().unwrap().contains("audit is off"),
        "{body}"
    );
    drop(d);
    let d = start(&files, &["--audit-db", "off"]).await;
    for path in ["/v1/executions", detail.as_str()] {
        let (code, body) = d.get(path, Some(TOKEN)).await;
        assert_eq!(code, 403, "{path}: {body}");
    }
    let (code, body) = d.get(&detail, Some(TOKEN)).await;
    assert_eq!(code, 403, "{body}");
    assert!(
        body["error"]
            .as_str()
            .unwrap()
            .contains("--admin-token-file"),
        "{body}"
    );
}
