//! `POST /v1/test` (issue 5 point 3) on the real `agenthooks-dispatcher` binary with a
//! SQLite audit database: the admin token, a named hook, inline command and http specs,
//! CEL that does not match, invalid specs and events, the Standard edition, and that a
//! dry run writes no row and leaves execution metrics and the breaker alone. Prompt dry
//! runs go through the engine against the provider stand-in (a local server speaking
//! the providers' real wire formats, not a model): no cache, no turn, no budget.

mod api_harness;
mod provider_standin;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use agenthooks_crds::sealed::SealKey;
use agenthooks_crds::snapshot::SnapshotHook;
use agenthooks_crds::{Edition, TenantHookBudgetSpec};
use agenthooks_dispatcher::budget::Budgets;
use agenthooks_dispatcher::budget::local::{LocalBudget, LocalLedger};
use agenthooks_dispatcher::chain::{Verdict, decide};
use agenthooks_dispatcher::dry_run::{DryRunOptions, dry_run};
use agenthooks_dispatcher::event::Event;
use agenthooks_dispatcher::handlers::Outcome;
use agenthooks_dispatcher::handlers::http::HttpCaller;
use agenthooks_dispatcher::handlers::prompt::PromptEvaluator;
use agenthooks_dispatcher::handlers::prompt::config::ProvidersConfig;
use agenthooks_dispatcher::hookset::HookSet;
use agenthooks_dispatcher::runner::Engine;
use api_harness::{Files, TOKEN, start};
use provider_standin::{ProviderStandIn, Reply};
use serde_json::{Value, json};

const HOOKS: &str = r#"
apiVersion: agenthooks.io/v1alpha1
kind: AgentHook
metadata: {name: deny-rm, namespace: team-a}
spec:
  event: pre_tool_use
  matcher: "^Bash$"
  ifExpr: "tool_input.command.startsWith('rm')"
  handler: {type: command, command: {command: "echo 'rm refused' >&2; exit 2"}}
"#;

fn rm_event() -> Value {
    json!({"event": "pre_tool_use", "tenant_id": "team-a", "session_id": "s1", "agent_id": "a1",
           "tool_name": "Bash", "tool_input": {"command": "rm -rf /tmp/x"}})
}

fn manifest(ns: &str, spec: Value) -> Value {
    json!({"apiVersion": "agenthooks.io/v1alpha1", "kind": "AgentHook",
           "metadata": {"name": "inline", "namespace": ns}, "spec": spec})
}

/// The series a hook run moves: executions, durations, breaker trips, audit rows.
fn run_series(metrics: &str) -> Vec<String> {
    metrics
        .lines()
        .filter(|l| {
            !l.starts_with('#')
                && [
                    "agenthooks_executions_total",
                    "agenthooks_hook_duration_seconds_count",
                    "agenthooks_breaker_trips_total",
                    "agenthooks_audit_rows_written_total",
                    "agenthooks_handler_errors_total",
                ]
                .iter()
                .any(|n| l.starts_with(n))
        })
        .map(str::to_owned)
        .collect()
}

/// A local HTTP hook target: answers `answer` with 200 and counts requests.
async fn hook_target(answer: Value) -> (String, Arc<Mutex<Vec<Value>>>) {
    use axum::routing::post;
    let seen = Arc::new(Mutex::new(Vec::new()));
    let s2 = Arc::clone(&seen);
    let app = axum::Router::new().route(
        "/hook",
        post(move |body: axum::body::Bytes| {
            let seen = Arc::clone(&s2);
            let answer = answer.clone();
            async move {
                seen.lock()
                    .unwrap()
                    .push(serde_json::from_slice::<Value>(&body).unwrap_or(Value::Null));
                axum::Json(answer)
            }
        }),
    );
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    tokio::spawn(async move {
        let _ = axum::serve(l, app).await;
    });
    (format!("http://{addr}/hook"), seen)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dry_runs_on_the_binary() {
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
            "--http-allow-cidr",
            "127.0.0.1/32",
        ],
    )
    .await;
    let named = json!({"hook": "team-a/deny-rm", "event": rm_event()});

    // The admin token.
    let (code, body) = d.post("/v1/test", &named, None).await;
    assert_eq!(
        (code, &body["field"]),
        (403, &json!("authorization")),
        "{body}"
    );
    let (code, body) = d
        .post("/v1/test", &named, Some("wrong-token-wrong-token"))
        .await;
    assert_eq!(code, 403, "{body}");

    // A named hook.
    let metrics_before = run_series(&d.metrics().await);
    let (code, r) = d.post("/v1/test", &named, Some(TOKEN)).await;
    assert_eq!(code, 200, "{r}");
    assert_eq!(r["hook"], "team-a/deny-rm");
    assert_eq!(r["handler"], "command");
    assert_eq!((&r["ran"], &r["skipped"]), (&json!(true), &Value::Null));
    assert_eq!(
        (&r["decision"], &r["verdict"]),
        (&json!("block"), &json!("block"))
    );
    assert_eq!(r["reason"], "rm refused");
    assert_eq!(
        (&r["matcherMatched"], &r["celMatched"]),
        (&json!(true), &json!(true))
    );
    assert_eq!(r["stderr"], "rm refused\n");
    assert_eq!(r["stdout"], "");
    assert_eq!(
        (&r["statusCode"], &r["updatedInput"], &r["diff"]),
        (&Value::Null, &Value::Null, &Value::Null)
    );
    assert!(r["durationMs"].as_f64().unwrap() > 0.0);

    // A blocking hook dry-run 6 times: no row, no execution metric, no breaker trip.
    for _ in 0..5 {
        let (code, r) = d.post("/v1/test", &named, Some(TOKEN)).await;
        assert_eq!(
            (code, &r["decision"], &r["breakerOpen"]),
            (200, &json!("block"), &json!(false))
        );
    }
    tokio::time::sleep(Duration::from_millis(300)).await; // > the writer's 50 ms linger
    let (_, page) = d.get("/v1/executions", Some(TOKEN)).await;
    assert_eq!(page["executions"], json!([]), "a dry run writes no row");
    assert_eq!(run_series(&d.metrics().await), metrics_before);
    // The real dispatch still runs the hook (its breaker is closed) and writes its row.
    let (code, body) = d.post("/v1/dispatch", &rm_event(), None).await;
    assert_eq!(code, 200);
    assert_eq!(body["decision"], "block", "{body}");
    assert_eq!(body["hooks"][0]["hook"], "team-a/deny-rm");
    assert_eq!(body["hooks"][0]["decision"], "block");
    let rows = d.wait_rows("hook=team-a/deny-rm", 1).await;
    assert_eq!(rows[0]["decision"], "block");
    assert_ne!(run_series(&d.metrics().await), metrics_before);

    // An inline command spec in the master namespace that rewrites the input.
    let rewrite = manifest(
        "agenthooks-system",
        json!({"event": "pre_tool_use", "scope": "global", "matcher": "^Bash$",
               "handler": {"type": "command", "command": {"command":
                 "echo '{\"updatedInput\": {\"command\": \"rm -ri /tmp/x\", \"confirm\": true}}'"}}}),
    );
    let (code, r) = d
        .post(
            "/v1/test",
            &json!({"spec": rewrite, "event": rm_event()}),
            Some(TOKEN),
        )
        .await;
    assert_eq!(code, 200, "{r}");
    assert_eq!(
        (&r["decision"], &r["verdict"]),
        (&json!("allow"), &json!("allow"))
    );
    assert_eq!(r["hook"], "agenthooks-system/inline");
    assert_eq!(
        r["updatedInput"],
        json!({"command": "rm -ri /tmp/x", "confirm": true})
    );
    assert_eq!(
        r["diff"],
        json!([{"op": "replace", "path": "/command", "value": "rm -ri /tmp/x"},
               {"op": "add", "path": "/confirm", "value": true}])
    );
    assert_eq!(r["mutationDenied"], false);
    assert_eq!(r["celMatched"], Value::Null, "no ifExpr");

    // An inline http spec: the status code and the hook's answer.
    let (url, seen) = hook_target(json!({"decision": "block", "reason": "not on Fridays"})).await;
    let http = manifest(
        "team-a",
        json!({"event": "pre_tool_use", "handler": {"type": "http", "http": {"url": url,
               "headers": [{"name": "X-Test", "value": "1"}]}}}),
    );
    let (code, r) = d
        .post(
            "/v1/test",
            &json!({"spec": http, "event": rm_event()}),
            Some(TOKEN),
        )
        .await;
    assert_eq!(code, 200, "{r}");
    assert_eq!(
        (&r["statusCode"], &r["decision"]),
        (&json!(200), &json!("block"))
    );
    assert_eq!(r["reason"], "not on Fridays");
    assert_eq!(r["handler"], "http");
    assert_eq!(seen.lock().unwrap().len(), 1);
    assert_eq!(
        seen.lock().unwrap()[0]["tool_input"],
        json!({"command": "rm -rf /tmp/x"})
    );
    // The SSRF guard applies as usual.
    let metadata = manifest(
        "team-a",
        json!({"event": "pre_tool_use", "handler": {"type": "http", "http": {"url": "http://169.254.169.254/latest/meta-data"}}}),
    );
    let (code, r) = d
        .post(
            "/v1/test",
            &json!({"spec": metadata, "event": rm_event()}),
            Some(TOKEN),
        )
        .await;
    assert_eq!(code, 200, "{r}");
    assert_eq!(
        (&r["decision"], &r["errorKind"]),
        (&json!("error"), &json!("ssrf_blocked"))
    );
    assert!(r["error"].as_str().unwrap().contains("SSRF"), "{r}");

    // CEL that does not match: no run.
    let marker = files.path("ran");
    let cel = manifest(
        "team-a",
        json!({"event": "pre_tool_use", "ifExpr": "tool_input.command == 'ls'",
               "handler": {"type": "command", "command": {"command": format!("touch {}", marker.display())}}}),
    );
    let (code, r) = d
        .post(
            "/v1/test",
            &json!({"spec": cel, "event": rm_event()}),
            Some(TOKEN),
        )
        .await;
    assert_eq!(code, 200, "{r}");
    assert_eq!(
        (&r["celMatched"], &r["ran"], &r["decision"]),
        (&json!(false), &json!(false), &Value::Null)
    );
    assert_eq!(
        r["skipped"],
        "ifExpr \"tool_input.command == 'ls'\" is false for this event"
    );
    assert!(!marker.exists());
    // `force` runs it anyway.
    let (code, r) = d
        .post(
            "/v1/test",
            &json!({"spec": cel, "event": rm_event(), "force": true}),
            Some(TOKEN),
        )
        .await;
    assert_eq!(
        (code, &r["ran"], &r["celMatched"]),
        (200, &json!(true), &json!(false)),
        "{r}"
    );
    assert!(marker.exists());

    // Invalid inline specs: 400 naming the field (path in the request) and the rule.
    let bad = manifest(
        "team-a",
        json!({"event": "pre_tool_use", "timeoutMs": 20000, "handler": {"type": "command", "command": {"command": "true"}}}),
    );
    let (code, body) = d
        .post(
            "/v1/test",
            &json!({"spec": bad, "event": rm_event()}),
            Some(TOKEN),
        )
        .await;
    assert_eq!(code, 400, "{body}");
    assert_eq!(
        (&body["field"], &body["reason"]),
        (&json!("spec.spec.timeoutMs"), &json!("InvalidTimeout"))
    );
    assert_eq!(body["errors"][0]["field"], "spec.spec.timeoutMs");
    assert!(
        body["error"]
            .as_str()
            .unwrap()
            .starts_with("spec.spec.timeoutMs: "),
        "{body}"
    );
    let typo = manifest("team-a", json!({"event": "pre_tool_use", "handlr": {}}));
    let (code, body) = d
        .post(
            "/v1/test",
            &json!({"spec": typo, "event": rm_event()}),
            Some(TOKEN),
        )
        .await;
    assert_eq!(
        (code, &body["field"]),
        (400, &json!("spec.spec.handlr")),
        "{body}"
    );

    // Bad requests.
    for (req, status, field) in [
        (
            json!({"hook": "team-a/nope", "event": rm_event()}),
            404,
            "hook",
        ),
        (json!({"hook": "nope", "event": rm_event()}), 400, "hook"),
        (
            json!({"hook": "team-a/deny-rm", "spec": rewrite, "event": rm_event()}),
            400,
            "hook",
        ),
        (json!({"event": rm_event()}), 400, "hook"),
        (json!({"hook": "team-a/deny-rm"}), 400, "event"),
        (
            json!({"hook": "team-a/deny-rm", "event": {"event": "pre_tool_use", "depth": -1}}),
            400,
            "event.depth",
        ),
        (
            json!({"hook": "team-a/deny-rm", "event": [1]}),
            400,
            "event",
        ),
        (
            json!({"hook": "team-a/deny-rm", "event": rm_event(), "forse": true}),
            400,
            "body",
        ),
    ] {
        let (code, body) = d.post("/v1/test", &req, Some(TOKEN)).await;
        assert_eq!(
            (code, body["field"].as_str()),
            (status, Some(field)),
            "{req}: {body}"
        );
    }
    // The event is parsed from the exact text sent: a repeated key is refused.
    let raw = r#"{"hook": "team-a/deny-rm", "event": {"event": "pre_tool_use", "tool_input": {"a": 1, "a": 2}}}"#;
    let (code, body) = d.post_raw("/v1/test", raw.into(), Some(TOKEN)).await;
    assert_eq!(
        (code, &body["field"]),
        (400, &json!("event.tool_input.a")),
        "{body}"
    );

    // Still no row for any dry run, only the one real dispatch.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let (_, page) = d.get("/v1/executions", Some(TOKEN)).await;
    assert_eq!(page["executions"].as_array().unwrap().len(), 1, "{page}");
}

const STANDARD_HOOKS: &str = r#"
apiVersion: agenthooks.io/v1alpha1
kind: AgentHook
metadata: {name: remote, namespace: team-a}
spec:
  event: pre_tool_use
  handler: {type: http, http: {url: "http://169.254.169.254/x"}}
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn standard_refuses_inline_commands_and_no_token_refuses_everything() {
    let files = Files::new(STANDARD_HOOKS);
    let token_file = files.path("admin.token");
    let d = start(
        &files,
        &[
            "--edition",
            "standard",
            "--audit-db",
            "off",
            "--admin-token-file",
            token_file.to_str().unwrap(),
        ],
    )
    .await;
    let cmd = manifest(
        "team-a",
        json!({"event": "pre_tool_use", "handler": {"type": "command", "command": {"command": "true"}}}),
    );
    let (code, body) = d
        .post(
            "/v1/test",
            &json!({"spec": cmd, "event": rm_event()}),
            Some(TOKEN),
        )
        .await;
    assert_eq!(
        (code, &body["reason"]),
        (400, &json!("EditionForbidsCommand")),
        "{body}"
    );
    assert_eq!(body["field"], "spec.spec.handler.type");
    // A named http hook runs (and meets the SSRF guard).
    let (code, r) = d
        .post(
            "/v1/test",
            &json!({"hook": "team-a/remote", "event": rm_event()}),
            Some(TOKEN),
        )
        .await;
    assert_eq!(
        (code, &r["errorKind"]),
        (200, &json!("ssrf_blocked")),
        "{r}"
    );
    drop(d);

    let d = start(&files, &["--edition", "standard", "--audit-db", "off"]).await;
    let (code, body) = d
        .post(
            "/v1/test",
            &json!({"hook": "team-a/remote", "event": rm_event()}),
            Some(TOKEN),
        )
        .await;
    assert_eq!(code, 403, "{body}");
    let msg = body["error"].as_str().unwrap();
    assert!(
        msg.contains("--admin-token-file") && msg.contains("AGENTHOOKS_ADMIN_TOKEN_FILE"),
        "{msg}"
    );
}

// --- prompt hooks, through the engine, against the provider stand-in ---

fn providers(s: &ProviderStandIn) -> ProvidersConfig {
    let yaml = format!(
        "providers:\n  - {{name: an, kind: anthropic, baseUrl: '{}', apiKeyFile: an.key}}\nmodels:\n  haiku: {{provider: an, model: claude-3-5-haiku-latest}}\ndefaultModel: haiku\n",
        s.anthropic_base()
    );
    ProvidersConfig::parse(&yaml, std::path::Path::new("providers.yaml"), |_| {
        Ok("sk-ant-test".into())
    })
    .unwrap()
}

#[tokio::test]
async fn a_prompt_dry_run_uses_no_cache_no_turn_and_no_budget() {
    let s = ProviderStandIn::start().await;
    s.set_usage(300, 20);
    let mut e = Engine::new(
        HttpCaller::new(vec![]),
        Edition::Standard,
        SealKey::generate(),
    );
    e.prompt = PromptEvaluator::new(providers(&s));
    e.budgets = Budgets::local(
        LocalLedger::new(vec![LocalBudget {
            namespace: "tenant-acme".into(),
            name: "tokens".into(),
            tenant: "acme".into(),
            spec: TenantHookBudgetSpec {
                tenant: None,
                monthly_tokens: 100_000,
            },
        }])
        .unwrap(),
        None,
    );
    let source = SnapshotHook {
        uid: "uid-judge".into(),
        namespace: "tenant-acme".into(),
        name: "judge".into(),
        generation: 1,
        created_at: String::new(),
        namespace_tenant: "acme".into(),
        spec: serde_json::from_value(json!({"event": "pre_tool_use", "matcher": "^exec$",
            "handler": {"type": "prompt", "prompt": {"promptTemplate": "Block deletes.", "maxInvocationsPerTurn": 1}}}))
        .unwrap(),
        sealed_headers: vec![],
        open_breakers: Vec::new(),
        reset_token: None,
    };
    let (set, rejected) = HookSet::build(
        vec![source],
        "agenthooks-system",
        Edition::Standard,
        1,
        None,
    );
    assert!(rejected.is_empty(), "{rejected:?}");
    let hook = set.get("tenant-acme/judge").unwrap();
    let event = Event::parse(
        &serde_json::to_vec(&json!({"event": "pre_tool_use", "event_id": "e1", "tenant_id": "acme", "session_id": "s",
            "turn_id": "t1", "tool_name": "exec", "tool_input": {"cmd": "rm -rf /"}}))
        .unwrap(),
    )
    .unwrap();
    let metrics_before = e.metrics.render();
    s.script([
        Reply::decide("block", "deletes files"),
        Reply::decide("block", "deletes files"),
    ]);
    for _ in 0..2 {
        let r = dry_run(&e, hook, &event, DryRunOptions::default()).await;
        assert!(r.ran);
        assert_eq!(
            (r.decision, r.verdict),
            (Some(Outcome::Block), Verdict::Block)
        );
        assert_eq!(r.reason.as_deref(), Some("deletes files"));
        let p = r.prompt.unwrap();
        assert_eq!(p.model.as_deref(), Some("claude-3-5-haiku-latest"));
        assert_eq!(p.tokens, Some(320));
        assert!(!p.cache_hit);
    }
    // Both reached the provider: no cache read, and the per-turn cap of 1 was not spent.
    assert_eq!(s.count(), 2);
    assert_eq!(e.prompt.cache().len(), 0, "no cache fill");
    let (status, reserved) = e.budgets.local_ledger().unwrap().status("acme").unwrap();
    assert_eq!(
        (status.used, reserved),
        (0, 0),
        "no budget reserved or settled"
    );
    assert_eq!(e.metrics.render(), metrics_before, "no metric moved");

    // A real run of the same turn still has its one call, and then fills the cache.
    s.script([Reply::decide("allow", "fine")]);
    let d = decide(&e, &set, event.clone()).await;
    assert_eq!(d.decision, Verdict::Allow, "{d:?}");
    assert_eq!(s.count(), 3);
    assert_eq!(e.prompt.cache().len(), 1);
}
