//! The `agenthooks-dispatcher` binary as a process. Synced mode: several operator URLs
//! (repeated and comma-separated), not ready while no operator runs, ready on the first
//! snapshot, still serving when the operator leaves, and on SIGTERM one last report with
//! the counts of the runs it made. Standalone mode: nothing reported, the local breaker
//! still trips. The `budget-load` subcommand.
//!
//! The operator is [`operator_standin`]: a stand-in for our own operator protocol (crds
//! `snapshot` and `report` wire types), not Kubernetes.

mod api_harness;
mod operator_standin;

use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use api_harness::{command, free_port, serve, spawn};
use operator_standin::{Budget, StandIn, StandInState, client, dead_url};
use serde_json::{Value, json};

/// The dispatcher binary, run in a fresh directory of its own: the default audit
/// database and spool (`agenthooks-audit.db`, `agenthooks-audit.spool/`) live in the
/// working directory, and a spool is locked by one process.
fn dispatcher_command() -> Command {
    command(&tempfile::tempdir().unwrap().keep())
}

async fn status(c: &reqwest::Client, url: &str, body: Option<&Value>) -> (u16, Value) {
    let req = match body {
        Some(b) => c.post(url).body(b.to_string()),
        None => c.get(url),
    };
    match req.send().await {
        Ok(r) => {
            let s = r.status().as_u16();
            (
                s,
                serde_json::from_slice(&r.bytes().await.unwrap_or_default()).unwrap_or(Value::Null),
            )
        }
        Err(_) => (0, Value::Null),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dispatcher_process_waits_for_its_operator_serves_without_it_and_flushes_on_sigterm() {
    let c = client();
    let dead = dead_url().await;
    let op_port = free_port();
    let listen = free_port();
    let mut cmd = dispatcher_command();
    cmd.args([
        "--operator-url",
        &dead,
        "--operator-url",
        &format!(" ,http://127.0.0.1:{op_port}/"),
        "--listen",
        &format!("127.0.0.1:{listen}"),
        "--dispatcher-id",
        "bin-1",
        "--report-interval-ms",
        "600000",
    ]);
    let mut proc = spawn(cmd);
    let base = format!("http://127.0.0.1:{listen}");
    let event = json!({"event": "pre_tool_use", "tenant_id": "acme", "tool_name": "exec", "tool_input": {}});

    // Up, but no operator anywhere: not ready, no decision.
    let mut up = false;
    for _ in 0..200 {
        if status(&c, &format!("{base}/healthz"), None).await.0 == 200 {
            up = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    assert!(up, "the process listens");
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(status(&c, &format!("{base}/readyz"), None).await.0, 503);
    let (code, body) = status(&c, &format!("{base}/v1/dispatch"), Some(&event)).await;
    assert_eq!(code, 503, "{body}");

    // The operator comes up on the second URL: ready, decisions from its snapshot.
    let state = Arc::new(StandInState::default());
    state.leader.store(true, Ordering::SeqCst);
    *state.snapshot.lock().unwrap() = Some(operator_standin::snapshot("e1", 1, "synced"));
    let op = StandIn::start_on(
        format!("127.0.0.1:{op_port}").parse().unwrap(),
        Arc::clone(&state),
    )
    .await;
    let mut ready = false;
    for _ in 0..400 {
        if status(&c, &format!("{base}/readyz"), None).await.0 == 200 {
            ready = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    assert!(ready, "ready once the snapshot arrived");
    for _ in 0..3 {
        let (code, body) = status(&c, &format!("{base}/v1/dispatch"), Some(&event)).await;
        assert_eq!(
            (code, &body["additionalContext"]),
            (200, &json!("synced")),
            "{body}"
        );
    }

    // The operator leaves: the dispatcher keeps serving its last snapshot.
    let state = op.stop().await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(status(&c, &format!("{base}/readyz"), None).await.0, 200);
    let (code, body) = status(&c, &format!("{base}/v1/dispatch"), Some(&event)).await;
    assert_eq!(
        (code, &body["additionalContext"]),
        (200, &json!("synced")),
        "{body}"
    );
    // The interval was not reached: no counts reported yet (only the list of hooks this
    // dispatcher cannot load, empty, which follows each new snapshot: CONTRACT §10.4).
    assert!(
        state
            .reports
            .lock()
            .unwrap()
            .iter()
            .all(|r| r.executions.is_empty()
                && r.trips.is_empty()
                && r.unavailable.as_ref().is_some_and(Vec::is_empty)),
        "interval not reached: no counts reported yet"
    );

    // It comes back; SIGTERM: the last flush reports the four runs, then exit 0.
    let _op = StandIn::start_on(
        format!("127.0.0.1:{op_port}").parse().unwrap(),
        Arc::clone(&state),
    )
    .await;
    let exit = proc.terminate(Duration::from_secs(5)).await;
    assert!(exit.success(), "{exit:?}");
    // The counts arrive in one final report (a breaker observation held while the
    // operator was away may go just before it, in its own lane).
    let reports: Vec<_> = state
        .reports
        .lock()
        .unwrap()
        .iter()
        .filter(|r| !r.executions.is_empty())
        .cloned()
        .collect();
    assert_eq!(reports.len(), 1, "one final report of counts: {reports:?}");
    assert_eq!(reports[0].dispatcher, "bin-1");
    assert_eq!(state.applied_counts("uid-guard"), (4, 0, 0, 0));
    let e = &reports[0].executions[0];
    assert_eq!(
        (e.namespace.as_str(), e.name.as_str()),
        ("tenant-acme", "guard")
    );
    assert_eq!(e.last_decision.as_deref(), Some("allow"));
    assert!(
        e.last_execution_time
            .as_deref()
            .is_some_and(|t| t.ends_with('Z'))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn budget_load_prints_one_json_line_and_refuses_bad_flags() {
    let op = StandIn::start().await;
    *op.state.budget.lock().unwrap() = Budget {
        tenant: "acme".into(),
        total: 1_000,
        ..Default::default()
    };
    let dead = dead_url().await;
    let urls = format!("{dead},{}", op.url);
    let out = tokio::task::spawn_blocking(move || {
        dispatcher_command()
            .args([
                "budget-load",
                "--operator-url",
                &urls,
                "--dispatcher-id",
                "load-1",
                "--tenant",
                "acme",
                "--calls",
                "15",
                "--concurrency",
                "15",
                "--reserve",
                "100",
                "--settle",
                "90",
                "--hold-ms",
                "200",
            ])
            .output()
            .unwrap()
    })
    .await
    .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    assert_eq!(text.lines().count(), 1, "{text}");
    let v: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(
        v,
        json!({"granted": 10, "refused": 5, "refusedReasons": {"BudgetExhausted": 5}, "settledTokens": 900, "errors": 0})
    );
    assert_eq!(op.state.budget.lock().unwrap().used, 900);
    assert!(
        op.state
            .reserves
            .lock()
            .unwrap()
            .iter()
            .all(|r| r.dispatcher == "load-1")
    );

    // No operator at all: it runs, and every call is refused BudgetUnavailable.
    let dead2 = dead_url().await;
    let out = dispatcher_command()
        .args([
            "budget-load",
            "--operator-url",
            &dead2,
            "--dispatcher-id",
            "x",
            "--tenant",
            "acme",
            "--calls",
            "3",
            "--reserve",
            "1",
            "--settle",
            "1",
        ])
        .output()
        .unwrap();
    assert!(out.status.success());
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["refusedReasons"], json!({"BudgetUnavailable": 3}));

    // Could not run at all: exit 1 and a message.
    for bad in [
        vec!["--operator-url", "ftp://x"],
        vec!["--operator-url", "http://x", "--reserve", "0"],
    ] {
        let mut args = vec![
            "budget-load",
            "--dispatcher-id",
            "x",
            "--tenant",
            "t",
            "--calls",
            "1",
            "--settle",
            "1",
        ];
        if !bad.contains(&"--reserve") {
            args.extend(["--reserve", "1"]);
        }
        args.extend(bad.iter().copied());
        let out = dispatcher_command().args(&args).output().unwrap();
        assert_eq!(out.status.code(), Some(1), "{args:?}");
        assert!(String::from_utf8_lossy(&out.stderr).contains("error:"));
    }
}

#[test]
fn serve_flags_are_checked_before_anything_runs() {
    // A bad URL among several is named.
    let out = dispatcher_command()
        .args([
            "--operator-url",
            "http://ok:1,ftp://nope",
            "--listen",
            "127.0.0.1:0",
            "--allow-anonymous",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("ftp://nope") && err.contains("http or https"),
        "{err}"
    );
    // Standalone and synced at once is refused.
    let out = dispatcher_command()
        .args([
            "--hooks",
            "/nonexistent",
            "--operator-url",
            "http://a:1",
            "--allow-anonymous",
        ])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("cannot be used with"));
    // Synced mode without the dispatcher's own token for the operator: refused at start,
    // naming the flag (CONTRACT §9.4: the seal key no longer authenticates anything).
    let out = dispatcher_command()
        .env_remove("AGENTHOOKS_OPERATOR_TOKEN_FILE")
        .args([
            "--operator-url",
            "http://127.0.0.1:1",
            "--listen",
            "127.0.0.1:0",
            "--allow-anonymous",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(
            "synced mode needs --operator-token-file (env AGENTHOOKS_OPERATOR_TOKEN_FILE)"
        ),
        "{err}"
    );
    // A token file that cannot be read is named.
    let out = dispatcher_command()
        .env("AGENTHOOKS_OPERATOR_TOKEN_FILE", "/nonexistent/token")
        .args([
            "--operator-url",
            "http://127.0.0.1:1",
            "--listen",
            "127.0.0.1:0",
            "--allow-anonymous",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("--operator-token-file /nonexistent/token"),
        "{err}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn standalone_reports_nothing_and_its_breaker_still_trips_closed() {
    let dir = tempfile::tempdir().unwrap();
    let hooks = dir.path().join("hooks.yaml");
    std::fs::write(
        &hooks,
        "apiVersion: agenthooks.io/v1alpha1\nkind: AgentHook\nmetadata: {name: no, namespace: tenant-acme}\nspec:\n  event: pre_tool_use\n  matcher: '^exec$'\n  handler: {type: command, command: {command: 'exit 1'}}\n---\napiVersion: agenthooks.io/v1alpha1\nkind: TenantHookBudget\nmetadata: {name: b, namespace: tenant-acme}\nspec: {monthlyTokens: 100}\n",
    )
    .unwrap();
    let mut cmd = dispatcher_command();
    cmd.args(["--hooks", hooks.to_str().unwrap()]);
    let (_proc, base) = serve(cmd).await;
    let c = client();
    let event = json!({"event": "pre_tool_use", "tenant_id": "tenant-acme", "tool_name": "exec", "tool_input": {}});
    let mut decisions = Vec::new();
    for _ in 0..7 {
        let (code, body) = status(&c, &format!("{base}/v1/dispatch"), Some(&event)).await;
        assert_eq!(code, 200, "{body}");
        decisions.push((
            body["decision"].as_str().unwrap().to_string(),
            body["hooks"][0]["errorKind"].as_str().unwrap().to_string(),
        ));
    }
    // Five handler errors trip the breaker; it then answers as the fault, never allow.
    let faulted = ("block".to_string(), "exit_status".to_string());
    let open = ("block".to_string(), "circuit_open".to_string());
    assert_eq!(
        decisions,
        [
            faulted.clone(),
            faulted.clone(),
            faulted.clone(),
            faulted.clone(),
            faulted,
            open.clone(),
            open
        ]
    );
    let r = c.get(format!("{base}/metrics")).send().await.unwrap();
    let text = r.text().await.unwrap();
    for line in [
        "agenthooks_breaker_trips_total 1",
        "agenthooks_reports_total 0",
        "agenthooks_report_failures_total 0",
        "agenthooks_report_pending_hooks 0",
    ] {
        assert!(text.lines().any(|l| l == line), "{line} in\n{text}");
    }
}

/// `--shutdown-delay-seconds`: on SIGTERM the process is unready at once and still decides
/// until the delay is over, then exits 0; without it, SIGTERM closes the port at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_with_a_shutdown_delay_is_unready_first_and_decides_until_the_delay_ends() {
    let dir = tempfile::tempdir().unwrap();
    let hooks = dir.path().join("hooks.yaml");
    std::fs::write(
        &hooks,
        "apiVersion: agenthooks.io/v1alpha1\nkind: AgentHook\nmetadata: {name: no-rm, namespace: tenant-acme}\nspec:\n  event: pre_tool_use\n  matcher: '^exec$'\n  handler: {type: command, command: {command: \"grep -q 'rm -rf' && exit 2; exit 0\"}}\n",
    )
    .unwrap();
    let c = client();
    let rm = json!({"event": "pre_tool_use", "tenant_id": "tenant-acme", "tool_name": "exec", "tool_input": {"cmd": "rm -rf /"}});

    let mut cmd = dispatcher_command();
    cmd.args([
        "--hooks",
        hooks.to_str().unwrap(),
        "--audit-db",
        "off",
        "--shutdown-delay-seconds",
        "2",
    ]);
    let (mut proc, base) = serve(cmd).await;
    let t = std::time::Instant::now();
    proc.sigterm();
    let mut readyz = status(&c, &format!("{base}/readyz"), None).await;
    while readyz.0 == 200 && t.elapsed() < Duration::from_secs(1) {
        tokio::time::sleep(Duration::from_millis(10)).await;
        readyz = status(&c, &format!("{base}/readyz"), None).await;
    }
    assert_eq!(readyz, (503, json!({"ready": false, "draining": true})));
    let mut decided = 0;
    while t.elapsed() < Duration::from_millis(1500) {
        let (code, body) = status(&c, &format!("{base}/v1/dispatch"), Some(&rm)).await;
        assert_eq!((code, body["decision"].as_str()), (200, Some("block")));
        decided += 1;
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(decided >= 5, "decided {decided} times during the delay");
    // (no second SIGTERM: it would cut the delay short)
    let exit = loop {
        if let Some(s) = proc.0.try_wait().unwrap() {
            break s;
        }
        assert!(
            t.elapsed() < Duration::from_secs(10),
            "no exit 10 s after SIGTERM"
        );
        tokio::time::sleep(Duration::from_millis(25)).await;
    };
    assert!(exit.success(), "{exit:?}");
    assert!(
        t.elapsed() >= Duration::from_secs(2),
        "exited after the delay: {:?}",
        t.elapsed()
    );
    assert_eq!(
        status(&c, &format!("{base}/readyz"), None).await.0,
        0,
        "the port is closed"
    );

    // No delay (the default): the port closes at once.
    let mut cmd = dispatcher_command();
    cmd.args(["--hooks", hooks.to_str().unwrap(), "--audit-db", "off"]);
    let (mut proc, base) = serve(cmd).await;
    let t = std::time::Instant::now();
    let exit = proc.terminate(Duration::from_secs(10)).await;
    assert!(exit.success(), "{exit:?}");
    assert!(t.elapsed() < Duration::from_secs(2), "{:?}", t.elapsed());
    assert_eq!(status(&c, &format!("{base}/readyz"), None).await.0, 0);
}

/// The dispatcher does not serve without knowing its callers (CONTRACT §9.1), and a bad
/// callers file stops it at start, naming the file and the field.
#[test]
fn callers_must_be_named_and_a_bad_callers_file_stops_the_start() {
    let dir = tempfile::tempdir().unwrap();
    let hooks = dir.path().join("hooks.yaml");
    std::fs::write(&hooks, "").unwrap();
    let out = dispatcher_command()
        .args([
            "--hooks",
            hooks.to_str().unwrap(),
            "--listen",
            "127.0.0.1:0",
        ])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("--callers-file") && err.contains("--allow-anonymous"),
        "{err}"
    );
    let callers = dir.path().join("callers.yaml");
    std::fs::write(
        &callers,
        "callers:\n  - name: a\n    tokenSha256: nothex\n    tenants: [acme]\n",
    )
    .unwrap();
    let out = dispatcher_command()
        .args([
            "--hooks",
            hooks.to_str().unwrap(),
            "--listen",
            "127.0.0.1:0",
        ])
        .arg("--callers-file")
        .arg(&callers)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(&format!("{}: callers[0].tokenSha256", callers.display())),
        "{err}"
    );
    // Two ways at once are refused.
    let out = dispatcher_command()
        .args(["--hooks", hooks.to_str().unwrap(), "--allow-anonymous"])
        .arg("--callers-file")
        .arg(&callers)
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("cannot be used with"));
}

/// The admin token is for standalone mode only (CONTRACT §9.5): `--admin-token-file` (as a
/// flag or from the environment) with `--kubernetes-callers` stops the start, before any
/// API server is asked.
#[test]
fn the_admin_token_is_refused_with_kubernetes_callers() {
    let dir = tempfile::tempdir().unwrap();
    let token = dir.path().join("admin.token");
    std::fs::write(&token, "0123456789abcdef0123456789abcdef").unwrap();
    let token = token.to_str().unwrap();
    for (flag, env) in [(Some(token), None), (None, Some(token))] {
        let mut cmd = dispatcher_command();
        cmd.args([
            "--operator-url",
            "http://127.0.0.1:1",
            "--listen",
            "127.0.0.1:0",
            "--kubernetes-callers",
        ])
        .env("KUBECONFIG", dir.path().join("no-such-kubeconfig"));
        if let Some(f) = flag {
            cmd.args(["--admin-token-file", f]);
        }
        if let Some(e) = env {
            cmd.env("AGENTHOOKS_ADMIN_TOKEN_FILE", e);
        }
        let out = cmd.output().unwrap();
        assert_eq!(out.status.code(), Some(1), "{flag:?} {env:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains(&format!(
                "--admin-token-file {token} (env AGENTHOOKS_ADMIN_TOKEN_FILE) cannot be used with --kubernetes-callers: the admin token is for standalone mode only"
            )),
            "{err}"
        );
    }
}
