//! Issue 16 on the real `agenthooks-dispatcher` binary with a SQLite audit database: a hook
//! that asks (`/v1/dispatch` with and without `accept: ["ask"]`, Claude Code's native
//! route with `ask` and `?ask=defer`), a `warn` hook, a `dryrun` hook and `onError: allow`,
//! each as the agent sees it and as the audit trail and metrics record it.

mod api_harness;

use api_harness::{Files, start};
use serde_json::{Value, json};

const HOOKS: &str = r#"
apiVersion: agenthooks.io/v1alpha1
kind: AgentHook
metadata: {name: approve-deploys, namespace: team-a}
spec:
  event: pre_tool_use
  priority: 30
  matcher: "^Deploy$"
  handler: {type: command, command: {command: "echo '{\"decision\": \"ask\", \"reason\": \"deploys need a person\"}'"}}
---
apiVersion: agenthooks.io/v1alpha1
kind: AgentHook
metadata: {name: new-rm-guard, namespace: team-a}
spec:
  event: pre_tool_use
  priority: 20
  matcher: "^Bash$"
  enforcementAction: warn
  handler: {type: command, command: {command: "echo 'rm is risky' >&2; exit 2"}}
---
apiVersion: agenthooks.io/v1alpha1
kind: AgentHook
metadata: {name: shadow-everything, namespace: team-a}
spec:
  event: pre_tool_use
  priority: 10
  enforcementAction: dryrun
  handler: {type: command, command: {command: "exit 2"}}
---
apiVersion: agenthooks.io/v1alpha1
kind: AgentHook
metadata: {name: optional-enricher, namespace: team-a}
spec:
  event: pre_tool_use
  priority: 5
  onError: allow
  handler: {type: command, command: {command: "/nonexistent/enricher"}}
"#;

fn event(tool: &str, accept: Option<Value>) -> Value {
    let mut e = json!({"event": "pre_tool_use", "tenant_id": "team-a", "session_id": "s1",
                       "agent_id": "a1", "tool_name": tool, "tool_input": {"command": "x"}});
    if let Some(a) = accept {
        e["accept"] = a;
    }
    e
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ask_warn_dryrun_and_on_error_end_to_end() {
    let files = Files::new(HOOKS);
    let token_file = files.path("admin.token");
    let db = files.audit_db();
    let d = start(
        &files,
        &[
            "--audit-db",
            &db,
            "--admin-token-file",
            token_file.to_str().unwrap(),
        ],
    )
    .await;

    // A caller that does not say it can ask gets the ask as a block.
    let (code, body) = d.post("/v1/dispatch", &event("Deploy", None), None).await;
    assert_eq!(code, 200, "{body}");
    assert_eq!(
        (&body["decision"], &body["reason"], &body["decidingHook"]),
        (
            &json!("block"),
            &json!("deploys need a person"),
            &json!("team-a/approve-deploys")
        ),
        "{body}"
    );
    // One that does gets the ask.
    let (_, body) = d
        .post("/v1/dispatch", &event("Deploy", Some(json!(["ask"]))), None)
        .await;
    assert_eq!(body["decision"], "ask", "{body}");
    assert_eq!(body["reason"], "deploys need a person");
    // An answer the API does not know is refused, naming the field.
    let (code, body) = d
        .post(
            "/v1/dispatch",
            &event("Deploy", Some(json!(["maybe"]))),
            None,
        )
        .await;
    assert_eq!(code, 400, "{body}");
    assert!(body.to_string().contains("accept"), "{body}");

    // Claude Code's own route: its ask, or defer for a headless run.
    let payload = json!({"hook_event_name": "PreToolUse", "session_id": "s1", "tool_name": "Deploy", "tool_input": {}});
    for (query, how) in [("", "ask"), ("&ask=defer", "defer")] {
        let (code, body) = d
            .post(
                &format!("/v1/hooks/claude-code?tenant_id=team-a{query}"),
                &payload,
                None,
            )
            .await;
        assert_eq!(code, 200, "{body}");
        assert_eq!(
            body["hookSpecificOutput"]["permissionDecision"], how,
            "{body}"
        );
        assert_eq!(
            body["hookSpecificOutput"]["permissionDecisionReason"],
            "agenthooks: deploys need a person (hook team-a/approve-deploys)"
        );
    }

    // warn: the call goes on with the warning; the outage of an onError: allow hook does
    // not block; the dryrun hook's block changes nothing.
    let (_, body) = d.post("/v1/dispatch", &event("Bash", None), None).await;
    assert_eq!(body["decision"], "allow", "{body}");
    assert_eq!(
        body["additionalContext"],
        "warning: team-a/new-rm-guard would block: rm is risky"
    );
    let hooks: Vec<(&str, &str, Option<&str>)> = body["hooks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| {
            (
                h["hook"].as_str().unwrap(),
                h["decision"].as_str().unwrap(),
                h["enforcementAction"].as_str(),
            )
        })
        .collect();
    assert_eq!(
        hooks,
        [
            ("team-a/new-rm-guard", "block", Some("warn")),
            ("team-a/optional-enricher", "error", None)
        ],
        "the dryrun hook runs off the decision's path"
    );

    // The audit trail records what each hook decided, and how it was enforced.
    // 2 Deploy calls to /v1/dispatch (the refused `maybe` never ran) + 2 native.
    let asks = d.wait_rows("decision=ask", 4).await;
    assert!(asks.iter().all(|r| r["hookName"] == "approve-deploys"));
    let warn = d.wait_rows("hook=team-a/new-rm-guard", 1).await;
    assert_eq!(
        (
            &warn[0]["decision"],
            &warn[0]["metadata"]["enforcement_action"]
        ),
        (&json!("block"), &json!("warn"))
    );
    // The 4 Deploy calls and the Bash call.
    let shadow = d.wait_rows("hook=team-a/shadow-everything", 5).await;
    assert!(
        shadow
            .iter()
            .all(|r| r["decision"] == "block" && r["metadata"]["enforcement_action"] == "dryrun"),
        "{shadow:?}"
    );
    let metrics = d.metrics().await;
    let line = metrics
        .lines()
        .find(|l| {
            l.starts_with("agenthooks_executions_total")
                && l.contains("decision=\"ask\"")
                && l.contains("event=\"pre_tool_use\"")
                && l.contains("handler=\"command\"")
        })
        .unwrap_or_else(|| panic!("no ask series in {metrics}"));
    assert!(line.ends_with(" 4"), "{line}");
}
