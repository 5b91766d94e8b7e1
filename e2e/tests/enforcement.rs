//! Shadow roll-out (issue 16 point 3) on the real API server: an operator and two synced
//! dispatchers; an AgentHook with `enforcementAction: dryrun` runs on real traffic and its
//! would-be blocks are counted in `status.executions` while every call is allowed; then
//! `kubectl apply` switches it to `enforce` and both dispatchers refuse the next call
//! within one sync. `warn` in between: allowed, with the hook's reason as a warning.

use std::time::{Duration, Instant};

use agenthooks_e2e::stack::{Fleet, tails};
use agenthooks_e2e::wait_for;
use serde_json::{Value, json};

fn hook(ns: &str, action: &str) -> String {
    format!(
        r#"apiVersion: agenthooks.io/v1alpha1
kind: AgentHook
metadata: {{name: new-rm-guard, namespace: {ns}}}
spec:
  event: pre_tool_use
  matcher: "^Bash$"
  ifExpr: "tool_input.command.startsWith('rm ')"
  enforcementAction: {action}
  handler: {{type: command, command: {{command: "echo 'rm is not allowed here' >&2; exit 2"}}}}
"#
    )
}

fn rm(tenant: &str) -> Value {
    json!({"event": "pre_tool_use", "tenant_id": tenant, "session_id": "s1", "agent_id": "a1",
           "tool_name": "Bash", "tool_input": {"command": "rm -rf build"}})
}

#[test]
fn a_dryrun_hook_is_counted_then_enforced_after_one_apply() {
    let f = Fleet::start("enf", 2, &["--report-interval-ms", "200"]);
    let procs: Vec<_> = std::iter::once(&f.operator.proc)
        .chain(f.dispatchers.iter().map(|d| &d.proc))
        .collect();
    let ns = f.tenant_ns.clone();
    let key = format!("{ns}/new-rm-guard");
    f.cp.apply_yaml(&hook(&ns, "dryrun"));
    assert!(
        wait_for(Duration::from_secs(60), || f
            .dispatchers
            .iter()
            .all(|d| d.served_generation(&key) == Some(1))),
        "not served\n{}",
        tails(&procs)
    );

    // dryrun: every call allowed, the hook not in the answer (it runs off the path).
    for d in &f.dispatchers {
        for _ in 0..3 {
            let (code, body) = d.dispatch(&rm(&f.tenant));
            assert_eq!((code, &body["decision"]), (200, &json!("allow")), "{body}");
            assert_eq!(body["hooks"], json!([]), "{body}");
        }
    }
    // ... and its six would-be blocks counted in status.
    let counted = wait_for(Duration::from_secs(30), || {
        let st = &f
            .cp
            .kubectl_json(&["-n", &ns, "get", "agenthook", "new-rm-guard"])["status"]["executions"];
        st["block"] == 6 && st["allow"] == 0
    });
    assert!(
        counted,
        "would-be blocks not counted: {}\n{}",
        f.cp.kubectl_json(&["-n", &ns, "get", "agenthook", "new-rm-guard"])["status"],
        tails(&procs)
    );

    // warn: allowed, with the reason as a warning.
    f.cp.apply_yaml(&hook(&ns, "warn"));
    assert!(wait_for(Duration::from_secs(30), || f
        .dispatchers
        .iter()
        .all(|d| d.served_generation(&key) == Some(2))));
    let (_, body) = f.dispatchers[0].dispatch(&rm(&f.tenant));
    assert_eq!(body["decision"], "allow", "{body}");
    assert_eq!(
        body["additionalContext"],
        format!("warning: {key} would block: rm is not allowed here")
    );

    // enforce: one apply, and both dispatchers refuse within one sync.
    let applied = Instant::now();
    f.cp.apply_yaml(&hook(&ns, "enforce"));
    let enforced = wait_for(Duration::from_secs(30), || {
        f.dispatchers.iter().all(|d| {
            let (_, body) = d.dispatch(&rm(&f.tenant));
            body["decision"] == "block"
        })
    });
    assert!(enforced, "not enforced\n{}", tails(&procs));
    eprintln!(
        "E2E-FIGURE dryrun_to_enforce_ms={}",
        applied.elapsed().as_millis()
    );
    for d in &f.dispatchers {
        let (_, body) = d.dispatch(&rm(&f.tenant));
        assert_eq!(
            (&body["decision"], &body["reason"], &body["decidingHook"]),
            (
                &json!("block"),
                &json!("rm is not allowed here"),
                &json!(key)
            )
        );
    }
}
