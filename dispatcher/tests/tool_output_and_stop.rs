//! Issue 16 points 5 and 6 on the real `agenthooks-dispatcher` binary: `post_tool_use`
//! hooks declared `blocking: true` rewrite (`updatedToolOutput`) or withhold (`block`) what a
//! tool returned, in `/v1/dispatch` and Claude Code's own shape; `stop` hooks declared
//! `blocking: true` keep an agent working, each seeing `stop_count`, exactly up to the bound,
//! and a new prompt starts the count again.

mod api_harness;

use api_harness::{Files, start};
use serde_json::{Value, json};

const HOOKS: &str = r#"
apiVersion: agenthooks.io/v1alpha1
kind: AgentHook
metadata: {name: redact-secrets, namespace: agenthooks-system}
spec:
  event: post_tool_use
  scope: global
  priority: 20
  blocking: true
  matcher: "^Bash$"
  ifExpr: "tool_input.command.contains('env')"
  handler: {type: command, command: {command: "echo '{\"updatedToolOutput\": {\"stdout\": \"[redacted]\"}}'"}}
---
apiVersion: agenthooks.io/v1alpha1
kind: AgentHook
metadata: {name: withhold-keys, namespace: team-a}
spec:
  event: post_tool_use
  priority: 10
  blocking: true
  matcher: "^Read$"
  handler: {type: command, command: {command: "echo 'private key material' >&2; exit 2"}}
---
apiVersion: agenthooks.io/v1alpha1
kind: AgentHook
metadata: {name: log-only, namespace: team-a}
spec:
  event: post_tool_use
  priority: 5
  handler: {type: command, command: {command: "exit 2"}}
---
apiVersion: agenthooks.io/v1alpha1
kind: AgentHook
metadata: {name: tests-must-pass, namespace: team-a}
spec:
  event: stop
  blocking: true
  handler: {type: command, command: {command: "c=$(grep -o '\"stop_count\":[0-9]*'); echo \"run the tests first ($c)\" >&2; exit 2"}}
"#;

fn post(tool: &str, command: &str) -> Value {
    json!({"event": "post_tool_use", "tenant_id": "team-a", "session_id": "s1", "agent_id": "a1",
           "tool_name": tool, "tool_input": {"command": command, "path": "/k"},
           "tool_output": {"stdout": "AWS_SECRET=abc"}})
}

fn stop(session: &str) -> Value {
    json!({"event": "stop", "tenant_id": "team-a", "session_id": session, "agent_id": "a1",
           "stop_count": 99})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tool_output_control_and_a_bounded_stop_loop() {
    let files = Files::new(HOOKS);
    let d = start(&files, &["--stop-block-limit", "3"]).await;

    // A master hook rewrites what the model will see; the non-blocking log-only hook
    // runs in the background and never changes the answer.
    let (code, body) = d.post("/v1/dispatch", &post("Bash", "env"), None).await;
    assert_eq!(code, 200, "{body}");
    assert_eq!(body["decision"], "allow", "{body}");
    assert_eq!(body["updatedToolOutput"], json!({"stdout": "[redacted]"}));
    let ran: Vec<&str> = body["hooks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| h["hook"].as_str().unwrap())
        .collect();
    assert_eq!(ran, ["agenthooks-system/redact-secrets"]);
    // A block withholds it, with the reason for the model.
    let (_, body) = d.post("/v1/dispatch", &post("Read", "cat"), None).await;
    assert_eq!(
        (&body["decision"], &body["reason"]),
        (&json!("block"), &json!("private key material")),
        "{body}"
    );
    // No blocking hook selects it: answered at once, as before.
    let (_, body) = d.post("/v1/dispatch", &post("Grep", "x"), None).await;
    assert_eq!(body["decision"], "allow");
    assert_eq!(body["hooks"], json!([]));

    // Claude Code's own shapes.
    let cc = |tool: &str, command: &str| {
        json!({"hook_event_name": "PostToolUse", "session_id": "s1", "tool_name": tool,
               "tool_input": {"command": command}, "tool_response": {"stdout": "AWS_SECRET=abc"}})
    };
    let (_, body) = d
        .post(
            "/v1/hooks/claude-code?tenant_id=team-a",
            &cc("Bash", "env"),
            None,
        )
        .await;
    assert_eq!(
        body,
        json!({"hookSpecificOutput": {"hookEventName": "PostToolUse", "updatedToolOutput": {"stdout": "[redacted]"}}})
    );
    let (_, body) = d
        .post(
            "/v1/hooks/claude-code?tenant_id=team-a",
            &cc("Read", "cat"),
            None,
        )
        .await;
    let text = "agenthooks: private key material (hook team-a/withhold-keys)";
    assert_eq!(
        body,
        json!({"decision": "block", "reason": text, "hookSpecificOutput": {
            "hookEventName": "PostToolUse",
            "updatedToolOutput": {"stdout": format!("[withheld by agenthooks] {text}")}}})
    );

    // An output over the caps reaches no hook: where a hook must judge it, it is withheld
    // (in Claude Code's shape too); where none must, the event is answered as always.
    let huge = "x".repeat(300 * 1024);
    let mut big = post("Bash", "env");
    big["tool_output"] = json!({"stdout": huge});
    let (code, body) = d.post("/v1/dispatch", &big, None).await;
    assert_eq!(code, 200, "{body}");
    assert_eq!(body["decision"], "block", "{body}");
    assert_eq!(
        body["reason"],
        "tool_output unread (over 262144 bytes or 32 levels deep): withheld, as agenthooks-system/redact-secrets must read it"
    );
    let mut unjudged = post("Grep", "x");
    unjudged["tool_output"] = json!({"stdout": huge});
    let (_, body) = d.post("/v1/dispatch", &unjudged, None).await;
    assert_eq!(body["decision"], "allow", "{body}");
    let mut cc_big = cc("Bash", "env");
    cc_big["tool_response"] = json!({"stdout": huge, "stderr": "", "interrupted": false});
    let (_, body) = d
        .post("/v1/hooks/claude-code?tenant_id=team-a", &cc_big, None)
        .await;
    let withheld = &body["hookSpecificOutput"]["updatedToolOutput"];
    assert_eq!(withheld["stderr"], "", "{body}");
    assert_eq!(withheld["interrupted"], false, "{body}");
    assert!(
        withheld["stdout"].as_str().is_some_and(
            |s| s.starts_with("[withheld by agenthooks] agenthooks: tool_output unread")
        ),
        "{body}"
    );

    // Stop control: refused 3 times (the hook sees 0, 1, 2 — never the caller's 99), then
    // stopping is allowed.
    for n in 0..3 {
        let (_, body) = d.post("/v1/dispatch", &stop("s1"), None).await;
        assert_eq!(
            (&body["decision"], &body["reason"]),
            (
                &json!("block"),
                &json!(format!("run the tests first (\"stop_count\":{n})"))
            ),
            "{body}"
        );
    }
    let (_, body) = d.post("/v1/dispatch", &stop("s1"), None).await;
    assert_eq!(body["decision"], "allow", "the bound: {body}");
    assert!(
        d.metrics()
            .await
            .lines()
            .any(|l| l == "agenthooks_stop_bound_reached_total 1")
    );
    // Another session has its own count; a new prompt starts s1's again.
    let (_, body) = d.post("/v1/dispatch", &stop("s2"), None).await;
    assert_eq!(body["decision"], "block");
    let prompt = json!({"event": "user_prompt_submit", "tenant_id": "team-a", "session_id": "s1",
                        "agent_id": "a1", "tool_input": {"prompt": "go on"}});
    let (_, body) = d.post("/v1/dispatch", &prompt, None).await;
    assert_eq!(body["decision"], "allow");
    // Claude Code's Stop: decision block keeps it working.
    let (_, body) = d
        .post(
            "/v1/hooks/claude-code?tenant_id=team-a",
            &json!({"hook_event_name": "Stop", "session_id": "s1", "stop_hook_active": false}),
            None,
        )
        .await;
    assert_eq!(
        body,
        json!({"decision": "block", "reason": "agenthooks: run the tests first (\"stop_count\":0) (hook team-a/tests-must-pass)"})
    );
}

/// A prompt that is refused does not start the session's stop count again (the tester's
/// case): only one that goes through does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_a_prompt_that_goes_through_resets_the_stop_count() {
    let files = Files::new(HOOKS);
    let d = start(&files, &["--stop-block-limit", "1"]).await;
    let (_, body) = d.post("/v1/dispatch", &stop("s9"), None).await;
    assert_eq!(body["decision"], "block");
    let (_, body) = d.post("/v1/dispatch", &stop("s9"), None).await;
    assert_eq!(body["decision"], "allow", "the bound (1)");
    // Refused for depth: the count stays.
    let refused = json!({"event": "user_prompt_submit", "tenant_id": "team-a", "session_id": "s9",
                         "agent_id": "a1", "depth": 9, "tool_input": {"prompt": "x"}});
    let (_, body) = d.post("/v1/dispatch", &refused, None).await;
    assert_eq!(body["decision"], "block", "{body}");
    let (_, body) = d.post("/v1/dispatch", &stop("s9"), None).await;
    assert_eq!(body["decision"], "allow", "still past the bound");
    let prompt = json!({"event": "user_prompt_submit", "tenant_id": "team-a", "session_id": "s9",
                        "agent_id": "a1", "tool_input": {"prompt": "go on"}});
    let (_, body) = d.post("/v1/dispatch", &prompt, None).await;
    assert_eq!(body["decision"], "allow");
    let (_, body) = d.post("/v1/dispatch", &stop("s9"), None).await;
    assert_eq!(body["decision"], "block", "a new turn");
}
