//! Dry runs with real command hooks (`sh -c`), no network.

use super::*;
use crate::handlers::http::HttpCaller;
use serde_json::json;

const MASTER: &str = "agenthooks-system";

fn engine(edition: Edition) -> Engine {
    Engine::new(HttpCaller::new(vec![]), edition, SealKey::generate())
}

/// A manifest of a command hook in `ns`, with extra spec keys.
fn manifest(ns: &str, command: &str, extra: Value) -> Value {
    let mut spec = json!({"event": "pre_tool_use", "handler": {"type": "command", "command": {"command": command}}});
    spec.as_object_mut()
        .unwrap()
        .extend(extra.as_object().unwrap().clone());
    json!({"apiVersion": "agenthooks.io/v1alpha1", "kind": "AgentHook",
           "metadata": {"name": "h", "namespace": ns}, "spec": spec})
}

fn build(m: &Value, edition: Edition) -> Result<std::sync::Arc<LoadedHook>, InlineSpecError> {
    let key = SealKey::generate();
    inline_hook(
        m,
        &InlineContext {
            master_namespace: MASTER,
            edition,
            seal_key: &key,
            served: None,
            validate_only: false,
        },
    )
}

fn event(v: Value) -> Event {
    let mut base = json!({"event": "pre_tool_use", "tenant_id": "tenant-a", "agent_id": "a1", "tool_name": "Bash", "tool_input": {"command": "rm -rf /tmp/x"}});
    base.as_object_mut()
        .unwrap()
        .extend(v.as_object().unwrap().clone());
    Event::parse(&serde_json::to_vec(&base).unwrap()).unwrap()
}

const REWRITE: &str = r#"echo '{"updatedInput": {"command": "ls /tmp/x", "dryRun": true}}'"#;

#[tokio::test]
async fn a_master_rewrite_shows_updated_input_and_its_json_patch() {
    let e = engine(Edition::Lite);
    let h = build(
        &manifest(MASTER, REWRITE, json!({"scope": "global"})),
        Edition::Lite,
    )
    .unwrap();
    let r = dry_run(&e, &h, &event(json!({})), DryRunOptions::default()).await;
    assert!(r.ran && r.skipped.is_none(), "{r:?}");
    assert_eq!(r.decision, Some(Outcome::Allow));
    assert_eq!(r.verdict, Verdict::Allow);
    assert_eq!(r.hook, "agenthooks-system/h");
    assert_eq!(r.uid, "dry-run:agenthooks-system/h");
    assert_eq!(
        r.updated_input,
        Some(json!({"command": "ls /tmp/x", "dryRun": true}))
    );
    assert_eq!(
        r.diff,
        Some(json!([
            {"op": "replace", "path": "/command", "value": "ls /tmp/x"},
            {"op": "add", "path": "/dryRun", "value": true}
        ]))
    );
    assert!(!r.mutation_denied);
    assert_eq!(
        r.stdout.as_deref().map(str::trim),
        Some(REWRITE[6..REWRITE.len() - 1].trim())
    );
    assert_eq!(r.stderr.as_deref(), Some(""));
    assert_eq!(
        (r.status_code, r.error.as_deref(), r.error_kind),
        (None, None, None)
    );
    assert!(r.duration_ms > 0.0);
    // Nothing recorded anywhere.
    assert_eq!(h.counters.take().total(), 0);
}

#[tokio::test]
async fn a_tenant_rewrite_is_shown_but_marked_denied() {
    let e = engine(Edition::Lite);
    let h = build(&manifest("tenant-a", REWRITE, json!({})), Edition::Lite).unwrap();
    let r = dry_run(&e, &h, &event(json!({})), DryRunOptions::default()).await;
    assert_eq!(r.decision, Some(Outcome::Allow));
    assert!(r.mutation_denied);
    assert!(r.diff.is_some());
}

#[tokio::test]
async fn filters_that_do_not_match_skip_the_handler_unless_forced() {
    let e = engine(Edition::Lite);
    let dir = tempfile::tempdir().unwrap();
    let marker = dir.path().join("ran");
    let cmd = format!("touch {}; exit 2", marker.display());
    let h = build(
        &manifest(
            "tenant-a",
            &cmd,
            json!({"matcher": "^Bash$", "ifExpr": "tool_input.command.startsWith('rm')"}),
        ),
        Edition::Lite,
    )
    .unwrap();

    // CEL false: not run.
    let r = dry_run(
        &e,
        &h,
        &event(json!({"tool_input": {"command": "ls"}})),
        DryRunOptions::default(),
    )
    .await;
    assert!(!r.ran);
    assert_eq!((r.matcher_matched, r.cel_matched), (true, Some(false)));
    assert_eq!(r.decision, None);
    assert_eq!(r.verdict, Verdict::Allow);
    assert!(
        r.skipped.as_deref().unwrap().starts_with("ifExpr "),
        "{r:?}"
    );
    assert!(!marker.exists(), "the handler did not run");

    // Matcher miss: not run; CEL still reported.
    let r = dry_run(
        &e,
        &h,
        &event(json!({"tool_name": "Read"})),
        DryRunOptions::default(),
    )
    .await;
    assert!(!r.ran);
    assert_eq!((r.matcher_matched, r.cel_matched), (false, Some(true)));
    assert_eq!(
        r.skipped.as_deref(),
        Some(r#"matcher "^Bash$" does not match tool_name "Read""#)
    );

    // Another tenant, another event kind: skipped, each saying why.
    for (sample, why) in [
        (
            json!({"tenant_id": "tenant-b"}),
            r#"the hook applies to tenant "tenant-a", not tenant_id "tenant-b""#,
        ),
        (
            json!({"event": "post_tool_use"}),
            "the hook is for event pre_tool_use, not post_tool_use",
        ),
    ] {
        let r = dry_run(&e, &h, &event(sample), DryRunOptions::default()).await;
        assert!(!r.ran, "{r:?}");
        assert_eq!(r.skipped.as_deref(), Some(why));
        assert_eq!(r.scope_matched, !why.contains("tenant"));
        assert_eq!(r.event_matched, !why.contains("event "));
        assert_eq!((r.decision, r.verdict), (None, Verdict::Allow));
    }
    assert!(!marker.exists());

    // Forced: runs anyway and reports the filters.
    let r = dry_run(
        &e,
        &h,
        &event(json!({"tool_input": {"command": "ls"}})),
        DryRunOptions { force: true },
    )
    .await;
    assert!(r.ran);
    assert_eq!(r.cel_matched, Some(false));
    assert_eq!(
        (r.decision, r.verdict),
        (Some(Outcome::Block), Verdict::Block)
    );
    assert!(marker.exists());

    // Everything matches: it runs and blocks.
    let r = dry_run(&e, &h, &event(json!({})), DryRunOptions::default()).await;
    assert!(r.ran);
    assert_eq!(
        (r.decision, r.verdict),
        (Some(Outcome::Block), Verdict::Block)
    );
    assert_eq!(
        r.reason.as_deref(),
        Some("blocked by command hook (exit 2)")
    );
}

#[tokio::test]
async fn no_if_expr_is_null_and_a_non_blocking_event_never_blocks() {
    let e = engine(Edition::Lite);
    let mut m = manifest("tenant-a", "exit 2", json!({}));
    m["spec"]["event"] = json!("post_tool_use");
    let h = build(&m, Edition::Lite).unwrap();
    let r = dry_run(
        &e,
        &h,
        &event(json!({"event": "post_tool_use"})),
        DryRunOptions::default(),
    )
    .await;
    assert_eq!(r.cel_matched, None);
    assert_eq!(
        (r.decision, r.verdict),
        (Some(Outcome::Block), Verdict::Allow)
    );
}

#[tokio::test]
async fn a_depth_over_three_runs_nothing_and_blocks() {
    let e = engine(Edition::Lite);
    let h = build(&manifest("tenant-a", "exit 0", json!({})), Edition::Lite).unwrap();
    let r = dry_run(
        &e,
        &h,
        &event(json!({"depth": 4})),
        DryRunOptions::default(),
    )
    .await;
    assert!(!r.ran);
    assert_eq!(r.verdict, Verdict::Block);
    assert_eq!(r.reason.as_deref(), Some(LOOP_DEPTH_EXCEEDED));
}

#[tokio::test]
async fn blocking_dry_runs_never_touch_the_breaker_counters_or_metrics() {
    let e = engine(Edition::Lite);
    let h = build(&manifest("tenant-a", "exit 2", json!({})), Edition::Lite).unwrap();
    let before = e.metrics.render();
    for _ in 0..6 {
        let r = dry_run(&e, &h, &event(json!({})), DryRunOptions::default()).await;
        assert_eq!(r.decision, Some(Outcome::Block));
        assert!(!r.breaker_open);
    }
    assert!(!h.breaker.is_open("tenant-a"));
    assert!(h.breaker.take_observations().is_empty());
    assert_eq!(h.counters.take().total(), 0);
    assert_eq!(e.metrics.render(), before);
}

#[tokio::test]
async fn a_cel_error_is_an_error_outcome_without_a_run() {
    let e = engine(Edition::Lite);
    let h = build(
        &manifest(
            "tenant-a",
            "exit 0",
            json!({"ifExpr": "tool_input.missing.field == 1"}),
        ),
        Edition::Lite,
    )
    .unwrap();
    let r = dry_run(&e, &h, &event(json!({})), DryRunOptions::default()).await;
    assert!(!r.ran);
    assert_eq!(r.cel_matched, None);
    assert_eq!(
        (r.decision, r.error_kind),
        (Some(Outcome::Error), Some(ErrorKind::CelEval))
    );
    assert_eq!(r.verdict, Verdict::Block);
    assert!(r.error.is_some());
}

#[test]
fn invalid_inline_specs_name_the_field_and_rule() {
    let bad_timeout = manifest("tenant-a", "exit 0", json!({"timeoutMs": 60_000}));
    let e = build(&bad_timeout, Edition::Lite).unwrap_err();
    assert_eq!(e.0[0].field, "spec.timeoutMs");
    assert_eq!(e.0[0].reason, "InvalidTimeout");

    let e = build(
        &manifest("tenant-a", "exit 0", json!({})),
        Edition::Standard,
    )
    .unwrap_err();
    assert_eq!(e.0[0].reason, "EditionForbidsCommand");

    let e = build(
        &manifest("tenant-a", "exit 0", json!({"bogus": 1})),
        Edition::Lite,
    )
    .unwrap_err();
    assert_eq!(e.0[0].field, "spec.bogus");
    assert!(e.0[0].message.contains("unknown field `bogus`"), "{e}");

    let mut m = manifest("tenant-a", "exit 0", json!({}));
    m["spec"]["handler"].as_object_mut().unwrap().remove("type");
    let e = build(&m, Edition::Lite).unwrap_err();
    assert_eq!(e.0[0].field, "spec.handler.type");

    let mut m = manifest("tenant-a", "exit 0", json!({}));
    m["kind"] = json!("Pod");
    assert_eq!(build(&m, Edition::Lite).unwrap_err().0[0].field, "kind");
    m["kind"] = json!("AgentHook");
    m["metadata"]["name"] = json!("");
    assert_eq!(
        build(&m, Edition::Lite).unwrap_err().0[0].field,
        "metadata.name"
    );
    assert_eq!(
        build(&json!([1]), Edition::Lite).unwrap_err().0[0].field,
        ""
    );

    let m = json!({"apiVersion": "agenthooks.io/v1alpha1", "kind": "AgentHook", "metadata": {"name": "h", "namespace": "tenant-a"},
        "spec": {"event": "pre_tool_use", "handler": {"type": "http", "http": {"url": "https://hooks.example/x",
        "headers": [{"name": "X-Key", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}}]}}}});
    let e = build(&m, Edition::Lite).unwrap_err();
    assert_eq!(e.0[0].field, "spec.handler.http.headers[0].valueFrom");
}

#[test]
fn the_namespace_tenant_comes_from_the_served_hooks() {
    let served = SnapshotHook {
        uid: "u".into(),
        namespace: "team-a".into(),
        name: "other".into(),
        generation: 1,
        created_at: String::new(),
        namespace_tenant: "acme".into(),
        spec: serde_json::from_value(json!({"event": "stop", "handler": {"type": "command", "command": {"command": "true"}}})).unwrap(),
        sealed_headers: vec![],
        open_breakers: Vec::new(),
        reset_token: None,
    };
    let (set, _) = HookSet::build(vec![served], MASTER, Edition::Lite, 1, None);
    let key = SealKey::generate();
    let ctx = InlineContext {
        master_namespace: MASTER,
        edition: Edition::Lite,
        seal_key: &key,
        served: Some(&set),
        validate_only: false,
    };
    let h = inline_hook(&manifest("team-a", "true", json!({"tenant": "acme"})), &ctx).unwrap();
    assert_eq!(h.compiled.tenant, "acme");
    let e = inline_hook(&manifest("team-b", "true", json!({"tenant": "acme"})), &ctx).unwrap_err();
    assert_eq!(e.0[0].reason, "TenantMismatch");
}

/// One table of single-hook cases through dispatch (the driver with the live observer) and
/// the dry run (the same driver, recording nothing): they must agree on the verdict, the
/// reason, the hook's outcome and kind, and the rewrite (issue 10 point 7).
#[tokio::test]
async fn dispatch_and_the_dry_run_agree_on_every_case() {
    use crate::chain::{Filters, drive};
    // A rewrite over the input caps, made by the command (an argument that long would not
    // even start: the kernel caps one argument at 128 KiB).
    let over_caps = format!(
        r#"printf '{{"updatedInput": {{"command": "'; head -c {} /dev/zero | tr '\0' x; printf '"}}}}'"#,
        crate::event::MAX_TOOL_INPUT_BYTES + 1
    );
    let cases: Vec<(&str, Value, Value, u64)> = vec![
        ("exit 0", json!({}), json!({}), 10_000),
        ("echo no >&2; exit 2", json!({}), json!({}), 10_000),
        ("exit 1", json!({}), json!({}), 10_000),
        ("echo '{\"continue\": false}'", json!({}), json!({}), 10_000),
        (
            "echo '{\"additionalContext\": \"careful\"}'",
            json!({}),
            json!({}),
            10_000,
        ),
        ("sleep 2", json!({"timeoutMs": 100}), json!({}), 10_000),
        (
            "sleep 2",
            json!({"timeoutMs": 100, "onTimeout": "allow"}),
            json!({}),
            10_000,
        ),
        // the chain budget cuts the hook's own timeout: dispatch and dry run alike
        (
            "sleep 2",
            json!({"timeoutMs": 5000, "onTimeout": "allow"}),
            json!({}),
            150,
        ),
        (REWRITE, json!({}), json!({}), 10_000),
        (REWRITE, json!({"scope": "global"}), json!({}), 10_000),
        (&over_caps, json!({"scope": "global"}), json!({}), 10_000),
        (
            "exit 0",
            json!({"ifExpr": "int(tool_input.command) > 0"}),
            json!({}),
            10_000,
        ),
        (
            "exit 2",
            json!({}),
            json!({"event": "post_tool_use"}),
            10_000,
        ),
    ];
    // What each case must give (the verdict the caller gets, the hook's outcome), in order.
    use Outcome::{Allow, Block, Error, Timeout};
    let expected = [
        (Verdict::Allow, Allow),
        (Verdict::Block, Block),
        (Verdict::Block, Error),
        (Verdict::Block, Block),
        (Verdict::Allow, Allow),
        (Verdict::Block, Timeout),
        (Verdict::Allow, Timeout),
        (Verdict::Block, Timeout),
        (Verdict::Allow, Allow),
        (Verdict::Allow, Allow),
        (Verdict::Block, Allow),
        (Verdict::Block, Error),
        (Verdict::Allow, Block),
    ];
    assert_eq!(cases.len(), expected.len());
    for ((command, extra, sample, budget_ms), (want_verdict, want_outcome)) in
        cases.into_iter().zip(expected)
    {
        let mut e = engine(Edition::Lite);
        e.chain_budget = std::time::Duration::from_millis(budget_ms);
        let ns = if extra.get("scope").is_some() {
            MASTER
        } else {
            "tenant-a"
        };
        let mut extra = extra;
        if sample.get("event").is_some() {
            extra["event"] = sample["event"].clone();
        }
        let h = build(&manifest(ns, command, extra.clone()), Edition::Lite).unwrap();
        let ev = event(sample.clone());
        let blocking = ev.event.is_blocking();
        // In place: a non-blocking event's hook runs in the driver, as the dry run runs it.
        let live = drive(
            &e,
            &crate::observer::InPlace(&e),
            std::iter::once(&h),
            ev.clone(),
            Filters::Apply(crate::runner::Matcher::Test),
        )
        .await;
        let dry = dry_run(&e, &h, &ev, DryRunOptions::default()).await;
        let run = &live.hooks[0];
        let live_verdict = if blocking {
            live.decision
        } else {
            Verdict::Allow
        };
        let case = format!("{:.120} {extra} {sample}", command);
        assert_eq!(
            (live_verdict, run.decision),
            (want_verdict, want_outcome),
            "expected: {case}"
        );
        assert_eq!(dry.verdict, live_verdict, "verdict: {case}");
        assert_eq!(
            dry.reason.as_deref(),
            live.reason.as_deref().or(run.reason.as_deref()),
            "reason: {case}"
        );
        assert_eq!(dry.decision, Some(run.decision), "outcome: {case}");
        assert_eq!(dry.error_kind, run.error_kind, "kind: {case}");
        assert_eq!(dry.mutation_denied, run.mutation_denied, "denied: {case}");
        if blocking && live.decision == Verdict::Allow {
            assert_eq!(
                dry.additional_context, live.additional_context,
                "context: {case}"
            );
            if live.updated_input.is_some() {
                assert_eq!(dry.updated_input, live.updated_input, "rewrite: {case}");
            }
        }
    }
}

#[tokio::test]
async fn a_dry_run_knows_the_chain_budget() {
    // Missing before the one driver: a hook cut short by the chain budget.
    let mut e = engine(Edition::Lite);
    e.chain_budget = std::time::Duration::from_millis(100);
    let h = build(
        &manifest(
            "tenant-a",
            "sleep 2",
            json!({"timeoutMs": 5000, "onTimeout": "allow"}),
        ),
        Edition::Lite,
    )
    .unwrap();
    let r = dry_run(&e, &h, &event(json!({})), DryRunOptions::default()).await;
    assert_eq!(
        (r.verdict, r.reason.as_deref(), r.decision),
        (
            Verdict::Block,
            Some(crate::chain::CHAIN_BUDGET_EXCEEDED),
            Some(Outcome::Timeout)
        )
    );
}

/// A dry run reads the tool facts and `toolKinds` as dispatch does: `tool.command` in
/// `ifExpr` is the call's command, and a call of another kind is skipped, naming the kinds.
#[tokio::test]
async fn tool_facts_and_tool_kinds_select_as_in_dispatch() {
    let e = engine(Edition::Lite);
    let h = build(
        &manifest(
            MASTER,
            "echo refused >&2; exit 2",
            json!({"scope": "global", "toolKinds": ["shell"], "ifExpr": "tool.command.contains(\"rm -rf\")"}),
        ),
        Edition::Lite,
    )
    .unwrap();
    let r = dry_run(&e, &h, &event(json!({})), DryRunOptions::default()).await;
    assert_eq!(
        (r.ran, r.cel_matched, r.matcher_matched),
        (true, Some(true), true),
        "{r:?}"
    );
    assert_eq!(r.decision, Some(Outcome::Block));
    let read = event(json!({"tool_name": "Read", "tool_input": {"file_path": "/etc/hosts"}}));
    let r = dry_run(&e, &h, &read, DryRunOptions::default()).await;
    assert!(!r.ran && !r.matcher_matched, "{r:?}");
    assert_eq!(
        r.skipped.as_deref(),
        Some(r#"toolKinds ["shell"] do not include this call's kind "file_read""#)
    );
}

/// A `blocking: true` post-tool-use or stop hook is waited for, so its dry run answers as
/// dispatch does: a refused rewrite or a block is `block`, a redaction shows the output
/// the chain would give (they were all `allow`, with no output shown).
#[tokio::test]
async fn blocking_output_and_stop_hooks_answer_as_dispatch() {
    let e = engine(Edition::Lite);
    let post = |command: &str| {
        build(
            &manifest(
                MASTER,
                command,
                json!({"event": "post_tool_use", "scope": "global", "blocking": true}),
            ),
            Edition::Lite,
        )
        .unwrap()
    };
    let output = event(json!({"event": "post_tool_use", "tool_output": {"stdout": "K=1"}}));
    let redact = post(r#"echo '{"updatedToolOutput": {"stdout": "[r]"}}'"#);
    let r = dry_run(&e, &redact, &output, DryRunOptions::default()).await;
    assert_eq!(r.verdict, Verdict::Allow, "{r:?}");
    assert_eq!(r.updated_tool_output, Some(json!({"stdout": "[r]"})));
    let wrong_shape = post(r#"echo '{"updatedToolOutput": "[r]"}'"#);
    let r = dry_run(&e, &wrong_shape, &output, DryRunOptions::default()).await;
    assert_eq!(r.verdict, Verdict::Block, "{r:?}");
    assert_eq!(
        r.reason.as_deref(),
        Some(
            "updatedToolOutput refused: $ must stay an object like the tool's output, not a string"
        )
    );
    let stop = build(
        &manifest(
            MASTER,
            "echo keep going >&2; exit 2",
            json!({"event": "stop", "scope": "global", "blocking": true}),
        ),
        Edition::Lite,
    )
    .unwrap();
    let r = dry_run(
        &e,
        &stop,
        &event(json!({"event": "stop"})),
        DryRunOptions::default(),
    )
    .await;
    assert_eq!(
        (r.verdict, r.reason.as_deref()),
        (Verdict::Block, Some("keep going")),
        "{r:?}"
    );
}
