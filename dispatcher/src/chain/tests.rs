//! Chain tests with real command hooks (`sh -c`), no network.

use super::*;
use crate::handlers::http::HttpCaller;
use agenthooks_crds::Edition;
use agenthooks_crds::HookEvent;
use agenthooks_crds::sealed::SealKey;
use agenthooks_crds::snapshot::SnapshotHook;
use serde_json::json;

const MASTER: &str = "agenthooks-system";

fn engine() -> Engine {
    Engine::new(HttpCaller::new(vec![]), Edition::Lite, SealKey::generate())
}

/// A command hook in `ns` with extra spec lines.
fn cmd(ns: &str, name: &str, priority: i32, command: &str, extra: &str) -> SnapshotHook {
    let yaml = format!(
        "event: pre_tool_use\npriority: {priority}\n{extra}\nhandler: {{type: command, command: {{command: {}}}}}\n",
        serde_json::to_string(command).unwrap()
    );
    SnapshotHook {
        uid: format!("uid-{name}"),
        namespace: ns.into(),
        name: name.into(),
        generation: 1,
        created_at: "2026-01-01T00:00:00Z".into(),
        namespace_tenant: if ns == MASTER {
            MASTER.into()
        } else {
            "acme".into()
        },
        spec: serde_norway::from_str(&yaml).unwrap(),
        sealed_headers: vec![],
        open_breakers: Vec::new(),
        reset_token: None,
    }
}

fn set(sources: Vec<SnapshotHook>) -> HookSet {
    let (set, rejected) = HookSet::build(sources, MASTER, Edition::Lite, 1, None);
    assert!(rejected.is_empty(), "{rejected:?}");
    set
}

fn event(v: Value) -> Event {
    let mut base = json!({"event": "pre_tool_use", "tenant_id": "acme", "agent_id": "a1", "tool_name": "exec", "tool_input": {"cmd": "rm -rf /"}});
    base.as_object_mut()
        .unwrap()
        .extend(v.as_object().unwrap().clone());
    Event::parse(&serde_json::to_vec(&base).unwrap()).unwrap()
}

fn ran(d: &Decision) -> Vec<(&str, Outcome)> {
    d.hooks
        .iter()
        .map(|h| (h.hook.as_str(), h.decision))
        .collect()
}

#[tokio::test]
async fn all_allow_collects_context_in_order() {
    let s = set(vec![
        cmd(
            "tenant-acme",
            "second",
            10,
            r#"echo '{"additionalContext": "two"}'"#,
            "",
        ),
        cmd(
            "tenant-acme",
            "first",
            20,
            r#"echo '{"additionalContext": "one"}'"#,
            "",
        ),
        cmd("tenant-acme", "third", 5, "exit 0", ""),
    ]);
    let d = decide(&engine(), &s, event(json!({}))).await;
    assert_eq!(d.decision, Verdict::Allow);
    assert_eq!(d.additional_context.as_deref(), Some("one\n\ntwo"));
    assert_eq!(
        ran(&d),
        [
            ("tenant-acme/first", Outcome::Allow),
            ("tenant-acme/second", Outcome::Allow),
            ("tenant-acme/third", Outcome::Allow)
        ]
    );
}

#[tokio::test]
async fn first_block_stops_the_chain_and_names_the_hook() {
    let s = set(vec![
        cmd("tenant-acme", "allow-high", 100, "exit 0", ""),
        cmd(
            "tenant-acme",
            "blocker",
            50,
            "echo 'too dangerous' >&2; exit 2",
            "",
        ),
        cmd(
            "tenant-acme",
            "never",
            10,
            "touch /tmp/agenthooks-never-runs; exit 0",
            "",
        ),
    ]);
    let d = decide(&engine(), &s, event(json!({}))).await;
    assert_eq!(d.decision, Verdict::Block);
    assert_eq!(d.deciding_hook.as_deref(), Some("tenant-acme/blocker"));
    assert_eq!(d.reason.as_deref(), Some("too dangerous"));
    assert_eq!(
        ran(&d),
        [
            ("tenant-acme/allow-high", Outcome::Allow),
            ("tenant-acme/blocker", Outcome::Block)
        ]
    );
}

#[tokio::test]
async fn an_error_fails_closed() {
    let s = set(vec![cmd(
        "tenant-acme",
        "broken",
        1,
        "echo policy >&2; exit 1",
        "",
    )]);
    let d = decide(&engine(), &s, event(json!({}))).await;
    assert_eq!(d.decision, Verdict::Block);
    assert_eq!(ran(&d), [("tenant-acme/broken", Outcome::Error)]);
}

#[tokio::test]
async fn timeout_follows_on_timeout() {
    let s = set(vec![cmd(
        "tenant-acme",
        "slow",
        1,
        "sleep 5",
        "timeoutMs: 200",
    )]);
    let d = decide(&engine(), &s, event(json!({}))).await;
    assert_eq!(
        d.decision,
        Verdict::Block,
        "default onTimeout of a blocking event is block"
    );
    assert_eq!(ran(&d), [("tenant-acme/slow", Outcome::Timeout)]);

    let s = set(vec![
        cmd(
            "tenant-acme",
            "slow",
            2,
            "sleep 5",
            "timeoutMs: 200\nonTimeout: allow",
        ),
        cmd("tenant-acme", "after", 1, "exit 0", ""),
    ]);
    let d = decide(&engine(), &s, event(json!({}))).await;
    assert_eq!(d.decision, Verdict::Allow);
    assert_eq!(
        ran(&d),
        [
            ("tenant-acme/slow", Outcome::Timeout),
            ("tenant-acme/after", Outcome::Allow)
        ]
    );
}

#[tokio::test]
async fn an_exhausted_budget_lists_the_hook_it_stopped_at() {
    let mut e = engine();
    // No budget left before the first hook starts (e.g. spent evaluating filters).
    e.chain_budget = Duration::ZERO;
    let s = set(vec![cmd("tenant-acme", "never-started", 1, "exit 0", "")]);
    let d = decide(&e, &s, event(json!({}))).await;
    assert_eq!(d.decision, Verdict::Block);
    assert_eq!(
        d.deciding_hook.as_deref(),
        Some("tenant-acme/never-started")
    );
    assert_eq!(d.hooks.len(), 1);
    let last = d.hooks.last().unwrap();
    assert_eq!(
        (last.hook.as_str(), last.decision, last.reason.as_deref()),
        (
            "tenant-acme/never-started",
            Outcome::Timeout,
            Some(CHAIN_BUDGET_EXCEEDED)
        )
    );
}

#[tokio::test]
async fn chain_budget_running_out_blocks() {
    let mut e = engine();
    e.chain_budget = Duration::from_millis(400);
    let s = set(vec![
        cmd(
            "tenant-acme",
            "slow-but-allowed",
            2,
            "sleep 5",
            "timeoutMs: 300\nonTimeout: allow",
        ),
        cmd(
            "tenant-acme",
            "second",
            1,
            "sleep 5",
            "timeoutMs: 1000\nonTimeout: allow",
        ),
    ]);
    let started = Instant::now();
    let d = decide(&e, &s, event(json!({}))).await;
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(d.decision, Verdict::Block);
    assert_eq!(d.reason.as_deref(), Some(CHAIN_BUDGET_EXCEEDED));
    assert_eq!(d.deciding_hook.as_deref(), Some("tenant-acme/second"));
}

#[tokio::test]
async fn updated_input_only_from_the_master_namespace() {
    // master rewrites; the next hook sees the rewrite on stdin and blocks unless it does
    let s = set(vec![
        cmd(
            MASTER,
            "rewriter",
            100,
            r#"echo '{"updatedInput": {"cmd": "ls"}}'"#,
            "scope: global",
        ),
        cmd(
            "tenant-acme",
            "checker",
            10,
            r#"grep -q '"cmd":"ls"' || exit 2"#,
            "",
        ),
    ]);
    let d = decide(&engine(), &s, event(json!({}))).await;
    assert_eq!(d.decision, Verdict::Allow, "{d:?}");
    assert_eq!(d.updated_input, Some(json!({"cmd": "ls"})));

    let s = set(vec![
        cmd(
            "tenant-acme",
            "tenant-rewriter",
            100,
            r#"echo '{"updatedInput": {"cmd": "ls"}}'"#,
            "",
        ),
        cmd(
            "tenant-acme",
            "checker",
            10,
            r#"grep -q '"cmd":"rm -rf /"' || exit 2"#,
            "",
        ),
    ]);
    let d = decide(&engine(), &s, event(json!({}))).await;
    assert_eq!(d.decision, Verdict::Allow, "{d:?}");
    assert_eq!(d.updated_input, None);
    assert!(d.hooks[0].mutation_denied);
}

#[tokio::test]
async fn depth_over_three_blocks_without_running_hooks() {
    let s = set(vec![cmd("tenant-acme", "allow", 1, "exit 0", "")]);
    let e = engine();
    let d = decide(&e, &s, event(json!({"depth": 4}))).await;
    assert_eq!(d.decision, Verdict::Block);
    assert_eq!(d.reason.as_deref(), Some(LOOP_DEPTH_EXCEEDED));
    assert!(d.hooks.is_empty());
    assert_eq!(e.metrics.loop_depth_exceeded.get(), 1);
    let d = decide(&e, &s, event(json!({"depth": 3}))).await;
    assert_eq!(d.decision, Verdict::Allow);
    assert_eq!(d.hooks.len(), 1);
}

#[tokio::test]
async fn same_decision_at_every_allowed_depth() {
    let s = set(vec![cmd(
        "tenant-acme",
        "no-rm",
        1,
        r#"grep -q 'rm -rf' && exit 2; exit 0"#,
        "",
    )]);
    for depth in [0, 1, 3] {
        let d = decide(&engine(), &s, event(json!({"depth": depth}))).await;
        assert_eq!(d.decision, Verdict::Block, "depth {depth}");
    }
}

#[tokio::test]
async fn matcher_and_if_expr_filter_and_cel_errors_fail_closed() {
    let s = set(vec![
        cmd(
            "tenant-acme",
            "shell-only",
            3,
            "exit 2",
            "matcher: '^shell$'",
        ),
        cmd(
            "tenant-acme",
            "short-cmd",
            2,
            "exit 2",
            "ifExpr: 'size(tool_input.cmd) > 100'",
        ),
        cmd("tenant-acme", "allow", 1, "exit 0", ""),
    ]);
    let d = decide(&engine(), &s, event(json!({}))).await;
    assert_eq!(d.decision, Verdict::Allow);
    assert_eq!(
        ran(&d),
        [("tenant-acme/allow", Outcome::Allow)],
        "filtered hooks do not run"
    );

    let s = set(vec![cmd(
        "tenant-acme",
        "bad-key",
        1,
        "exit 0",
        "ifExpr: 'tool_input.missing == \"x\"'",
    )]);
    let d = decide(&engine(), &s, event(json!({}))).await;
    assert_eq!(d.decision, Verdict::Block);
    assert_eq!(d.hooks[0].error_kind, Some(ErrorKind::CelEval));
}

#[tokio::test]
async fn a_matcher_never_fires_without_a_tool_name() {
    let mut ev = event(json!({"event": "user_prompt_submit"}));
    ev.tool_name = None;
    let mut src = cmd("tenant-acme", "any-tool", 1, "exit 2", "matcher: '.*'");
    src.spec.event = HookEvent::UserPromptSubmit;
    let s2 = set(vec![src]);
    let d = decide(&engine(), &s2, ev).await;
    assert_eq!(d.decision, Verdict::Allow);
    assert!(d.hooks.is_empty());
}

#[tokio::test]
async fn standard_edition_never_spawns_even_if_loaded() {
    let s = set(vec![cmd(
        "tenant-acme",
        "cmd",
        1,
        "touch /tmp/agenthooks-standard-spawned; exit 0",
        "",
    )]);
    let mut e = engine();
    e.edition = Edition::Standard;
    let _ = std::fs::remove_file("/tmp/agenthooks-standard-spawned");
    let d = decide(&e, &s, event(json!({}))).await;
    assert_eq!(d.decision, Verdict::Block);
    assert_eq!(
        d.hooks[0].error_kind,
        Some(ErrorKind::EditionForbidsCommand)
    );
    assert!(!std::path::Path::new("/tmp/agenthooks-standard-spawned").exists());
}

#[tokio::test]
async fn non_blocking_events_answer_allow_at_once() {
    let mut src = cmd("tenant-acme", "slow-blocker", 1, "sleep 2; exit 2", "");
    src.spec.event = HookEvent::PostToolUse;
    let s = Arc::new(set(vec![src]));
    let e = engine();
    let started = Instant::now();
    let (d, n) = observe(&e, Arc::clone(&s), event(json!({"event": "post_tool_use"})));
    assert!(started.elapsed() < Duration::from_millis(200));
    assert_eq!((d.decision, n), (Verdict::Allow, 1));
    let (d, n) = observe(&e, s, event(json!({"event": "post_tool_use", "depth": 4})));
    assert_eq!(
        (d.decision, n),
        (Verdict::Allow, 0),
        "depth over 3 runs no hook"
    );
}

/// The same fail-closed rules through a long list, which dispatch reads through the matcher
/// index and whose `ifExpr`s take the fast path: a CEL error on a blocking event still
/// blocks, and a refusing hook refuses every retry of the call, however its input varies.
#[tokio::test]
async fn through_the_matcher_index_and_the_fast_path_errors_and_refusals_still_block() {
    let mut hooks: Vec<SnapshotHook> = (0..30)
        .map(|i| {
            cmd(
                "tenant-acme",
                &format!("other-{i}"),
                0,
                "exit 2",
                &format!("matcher: '^tool{i}$'"),
            )
        })
        .collect();
    hooks.push(cmd(
        "tenant-acme",
        "block-rm",
        2,
        "echo 'no rm' >&2; exit 2",
        "matcher: '^exec$'\nifExpr: 'tool_input.cmd.startsWith(\"rm\")'",
    ));
    hooks.push(cmd(
        "tenant-acme",
        "typed",
        1,
        "exit 0",
        "matcher: 'exec'\nifExpr: 'tool_input.n > 3'",
    ));
    let s = set(hooks);
    let e = engine();
    for (i, cmd) in ["rm -rf /", "rm x", "rm", "rm\t-rf /home"]
        .iter()
        .enumerate()
    {
        let d = decide(&e, &s, event(json!({"tool_input": {"cmd": cmd, "n": i}}))).await;
        assert_eq!(
            (d.decision, d.reason.as_deref(), d.deciding_hook.as_deref()),
            (Verdict::Block, Some("no rm"), Some("tenant-acme/block-rm")),
            "{cmd}"
        );
    }
    // `typed` reads tool_input.n as a number: a string there is CEL's error, never false.
    let d = decide(
        &e,
        &s,
        event(json!({"tool_input": {"cmd": "ls", "n": "9"}})),
    )
    .await;
    assert_eq!(d.decision, Verdict::Block);
    assert_eq!(d.deciding_hook.as_deref(), Some("tenant-acme/typed"));
    assert_eq!(d.hooks.last().unwrap().error_kind, Some(ErrorKind::CelEval));
    // Missing, the same.
    let d = decide(&e, &s, event(json!({"tool_input": {"cmd": "ls"}}))).await;
    assert_eq!(d.decision, Verdict::Block);
    let d = decide(&e, &s, event(json!({"tool_input": {"cmd": "ls", "n": 1}}))).await;
    assert_eq!((d.decision, ran(&d)), (Verdict::Allow, vec![]));
    assert_eq!(e.metrics.breaker_trips.get(), 0);
}

#[tokio::test]
async fn a_refused_call_retried_any_number_of_times_is_refused_every_time() {
    // The talk-past of the seed's rule: five refused `rm -rf` tripped the breaker and the
    // sixth ran. Blocks are answers; they never count.
    let s = set(vec![cmd(
        "tenant-acme",
        "block-rm-rf",
        1,
        "grep -q 'rm -rf' && { echo 'no rm -rf' >&2; exit 2; }; exit 0",
        "",
    )]);
    let e = engine();
    for i in 0..10 {
        let input = if i % 2 == 0 {
            json!({"tool_input": {"cmd": "rm -rf /"}})
        } else {
            json!({"tool_input": {"cmd": format!("rm -rf /home/{i}")}})
        };
        let d = decide(&e, &s, event(input)).await;
        assert_eq!(
            (d.decision, d.reason.as_deref()),
            (Verdict::Block, Some("no rm -rf")),
            "attempt {i}"
        );
    }
    assert_eq!(e.metrics.breaker_trips.get(), 0);
    let d = decide(&e, &s, event(json!({"tool_input": {"cmd": "ls"}}))).await;
    assert_eq!(d.decision, Verdict::Allow, "a harmless call right after");
}

#[tokio::test]
async fn five_faults_open_the_breaker_of_that_tenant_only_and_it_answers_as_the_fault() {
    let dir = tempfile::tempdir().unwrap();
    let runs = dir.path().join("runs");
    let command = format!("echo x >> {}; exit 1", runs.display());
    let mut global = cmd(MASTER, "guard", 2, &command, "scope: global");
    global.namespace_tenant = MASTER.into();
    let s = set(vec![global, cmd("tenant-acme", "after", 1, "exit 0", "")]);
    let e = engine();
    let count = || {
        std::fs::read_to_string(&runs)
            .map(|t| t.lines().count())
            .unwrap_or(0)
    };
    for i in 0..crate::breaker::FAULT_THRESHOLD {
        let d = decide(&e, &s, event(json!({}))).await;
        assert_eq!(d.decision, Verdict::Block, "an error fails closed ({i})");
        assert_eq!(d.hooks[0].error_kind, Some(ErrorKind::ExitStatus));
    }
    assert_eq!(e.metrics.breaker_trips.get(), 1);
    assert_eq!(count(), 5);
    // Open for acme: answered at once as the hook's fault, handler not run.
    let d = decide(&e, &s, event(json!({}))).await;
    assert_eq!(
        (
            d.decision,
            d.reason.as_deref(),
            d.deciding_hook.as_deref(),
            d.hooks[0].decision,
            d.hooks[0].error_kind
        ),
        (
            Verdict::Block,
            Some("CircuitOpen"),
            Some("agenthooks-system/guard"),
            Outcome::Error,
            Some(crate::handlers::ErrorKind::CircuitOpen)
        )
    );
    assert_eq!(count(), 5, "the handler did not run");
    // Another tenant's events still run the handler.
    let d = decide(&e, &s, event(json!({"tenant_id": "globex"}))).await;
    assert_eq!(
        (d.decision, d.hooks[0].error_kind),
        (Verdict::Block, Some(ErrorKind::ExitStatus))
    );
    assert_eq!(count(), 6);
    // A new generation (spec edit) starts closed.
    let mut edited = cmd(MASTER, "guard", 2, &command, "scope: global");
    edited.namespace_tenant = MASTER.into();
    edited.generation = 2;
    let (s2, _) = HookSet::build(vec![edited], MASTER, Edition::Lite, 2, Some(&s));
    let d = decide(&e, &s2, event(json!({}))).await;
    assert_eq!(d.hooks[0].error_kind, Some(ErrorKind::ExitStatus));
    assert_eq!(count(), 7);
}

#[tokio::test]
async fn a_runner_with_no_room_blocks_but_never_opens_a_breaker() {
    // Review finding: one tenant filling the shared command runner made another tenant's
    // runs `runner_unavailable`, which counted as faults and opened that tenant's breaker
    // of a global guard. The handler never started: it is not the hook's fault.
    let dir = tempfile::tempdir().unwrap();
    let mut global = cmd(MASTER, "guard", 2, "exit 0", "scope: global");
    global.namespace_tenant = MASTER.into();
    let s = set(vec![global]);
    let mut e = engine();
    e.command_runner = crate::sandbox::CommandRunner::Remote(dir.path().join("no-runner.sock"));
    for i in 0..3 * crate::breaker::FAULT_THRESHOLD {
        let d = decide(&e, &s, event(json!({}))).await;
        assert_eq!(
            (d.decision, d.hooks[0].decision, d.hooks[0].error_kind),
            (
                Verdict::Block,
                Outcome::Error,
                Some(ErrorKind::RunnerUnavailable)
            ),
            "fails closed, never CircuitOpen ({i})"
        );
    }
    assert!(
        !s.get("agenthooks-system/guard")
            .unwrap()
            .breaker
            .is_open("acme")
    );
    assert_eq!(e.metrics.breaker_trips.get(), 0);
}

#[tokio::test]
async fn an_open_breaker_blocks_even_when_on_timeout_allows() {
    // Review finding: a caller chose inputs that made an `onTimeout: allow` guard slow; five
    // timeouts opened its breaker, and an open breaker answering as a timeout let the
    // refused call through without asking the handler. It answers as an error now.
    let guard = "in=$(cat); case \"$in\" in *SLOW*) sleep 5;; *danger*) echo refused >&2; exit 2;; esac; exit 0";
    let s = set(vec![
        cmd(
            "tenant-acme",
            "guard",
            2,
            guard,
            "timeoutMs: 50\nonTimeout: allow",
        ),
        cmd("tenant-acme", "after", 1, "exit 0", ""),
    ]);
    let e = engine();
    for i in 0..crate::breaker::FAULT_THRESHOLD {
        let d = decide(
            &e,
            &s,
            event(json!({"tool_input": {"cmd": format!("SLOW {i}")}})),
        )
        .await;
        assert_eq!(ran(&d)[0], ("tenant-acme/guard", Outcome::Timeout));
        assert_eq!(
            d.decision,
            Verdict::Allow,
            "onTimeout: allow, as configured"
        );
    }
    let started = Instant::now();
    let d = decide(&e, &s, event(json!({"tool_input": {"cmd": "danger"}}))).await;
    assert!(
        started.elapsed() < Duration::from_millis(40),
        "answered at once"
    );
    assert_eq!(
        (d.decision, d.reason.as_deref(), ran(&d)),
        (
            Verdict::Block,
            Some("CircuitOpen"),
            vec![("tenant-acme/guard", Outcome::Error)]
        )
    );
}

#[tokio::test]
async fn a_hook_cut_short_by_the_chain_budget_is_not_faulted() {
    // Review finding: a slow hook ahead of a guard spent the chain budget; the guard's cut
    // timeouts counted as its faults and opened its breaker. They do not count now.
    let s = set(vec![
        cmd(
            "tenant-acme",
            "slow-first",
            2,
            "sleep 5",
            "timeoutMs: 50\nonTimeout: allow",
        ),
        cmd(
            "tenant-acme",
            "guard",
            1,
            "sleep 5",
            "timeoutMs: 5000\nonTimeout: allow",
        ),
    ]);
    let mut e = engine();
    e.chain_budget = Duration::from_millis(70);
    for i in 0..crate::breaker::FAULT_THRESHOLD {
        let d = decide(&e, &s, event(json!({}))).await;
        assert_eq!(
            (d.decision, d.reason.as_deref(), d.hooks.len()),
            (Verdict::Block, Some(CHAIN_BUDGET_EXCEEDED), 2),
            "round {i}: {d:?}"
        );
        assert_eq!(d.hooks[1].decision, Outcome::Timeout, "the guard was cut");
    }
    let slow = s.get("tenant-acme/slow-first").unwrap();
    let guard = s.get("tenant-acme/guard").unwrap();
    assert!(slow.breaker.is_open("acme"), "its own timeouts are faults");
    assert!(
        !guard.breaker.is_open("acme"),
        "cut short by the budget: not the guard's fault"
    );
}

/// A decision's future stays small: handler futures are boxed where they run, so the
/// future of a decision that runs no handler is not kilobytes copied around (it was 8.3 KB).
#[test]
fn a_decisions_future_does_not_hold_a_handlers_future_inline() {
    let engine = engine();
    let set = HookSet::default();
    let event = crate::event::Event::parse(
        br#"{"event":"pre_tool_use","tool_name":"exec","tool_input":{}}"#,
    )
    .unwrap();
    let f = decide(&engine, &set, event);
    assert!(
        std::mem::size_of_val(&f) < 4096,
        "{} bytes",
        std::mem::size_of_val(&f)
    );
}

// ---- issue 16: ask, enforcementAction, onError through the driver ----------------------

const ASK: &str = r#"echo '{"decision": "ask", "reason": "a person decides"}'"#;

#[tokio::test]
async fn block_beats_ask_beats_allow_and_the_first_ask_decides() {
    let asked = set(vec![
        cmd("tenant-acme", "allow", 30, "exit 0", ""),
        cmd("tenant-acme", "asker", 20, ASK, ""),
        cmd(
            "tenant-acme",
            "second-asker",
            15,
            r#"echo '{"decision": "ask", "reason": "me too"}'"#,
            "",
        ),
        cmd(
            "tenant-acme",
            "context",
            10,
            r#"echo '{"additionalContext": "ctx"}'"#,
            "",
        ),
    ]);
    let d = decide(&engine(), &asked, event(json!({}))).await;
    assert_eq!(
        (
            d.decision,
            d.reason.as_deref(),
            d.deciding_hook.as_deref(),
            d.additional_context.as_deref()
        ),
        (
            Verdict::Ask,
            Some("a person decides"),
            Some("tenant-acme/asker"),
            Some("ctx")
        )
    );
    assert_eq!(
        ran(&d),
        [
            ("tenant-acme/allow", Outcome::Allow),
            ("tenant-acme/asker", Outcome::Ask),
            ("tenant-acme/second-asker", Outcome::Ask),
            ("tenant-acme/context", Outcome::Allow)
        ],
        "an ask does not stop the chain: a later hook may still block"
    );
    // A caller that cannot ask gets a block, same reason and hook.
    let refused = d.clone().for_caller(false);
    assert_eq!(
        (
            refused.decision,
            refused.reason.as_deref(),
            refused.deciding_hook.as_deref()
        ),
        (
            Verdict::Block,
            Some("a person decides"),
            Some("tenant-acme/asker")
        )
    );
    assert_eq!(d.clone().for_caller(true).decision, Verdict::Ask);

    let blocked = set(vec![
        cmd("tenant-acme", "asker", 20, ASK, ""),
        cmd("tenant-acme", "blocker", 10, "echo 'no' >&2; exit 2", ""),
    ]);
    let d = decide(&engine(), &blocked, event(json!({}))).await;
    assert_eq!(
        (d.decision, d.deciding_hook.as_deref(), d.reason.as_deref()),
        (Verdict::Block, Some("tenant-acme/blocker"), Some("no"))
    );
    assert_eq!(d.additional_context, None);
}

#[tokio::test]
async fn a_warn_hook_warns_and_never_blocks_or_rewrites() {
    let s = set(vec![
        cmd(
            "agenthooks-system",
            "new-guard",
            20,
            r#"echo '{"continue": false, "stopReason": "rm is risky"}'"#,
            "scope: global\nenforcementAction: warn",
        ),
        cmd(
            "agenthooks-system",
            "rewriter",
            10,
            r#"echo '{"updatedInput": {"cmd": "ls"}}'"#,
            "scope: global\nenforcementAction: warn",
        ),
    ]);
    let d = decide(&engine(), &s, event(json!({}))).await;
    assert_eq!(d.decision, Verdict::Allow, "{d:?}");
    assert_eq!(
        d.additional_context.as_deref(),
        Some("warning: agenthooks-system/new-guard would block: rm is risky"),
        "{d:?}"
    );
    assert_eq!(d.updated_input, None);
    assert_eq!(
        ran(&d),
        [
            ("agenthooks-system/new-guard", Outcome::Block),
            ("agenthooks-system/rewriter", Outcome::Allow)
        ]
    );
    assert!(
        d.hooks
            .iter()
            .all(|h| h.enforcement_action == agenthooks_crds::agenthook::EnforcementAction::Warn)
    );
    let body = serde_json::to_value(&d).unwrap();
    assert_eq!(body["hooks"][0]["enforcementAction"], "warn");
}

#[tokio::test]
async fn a_dryrun_hook_runs_off_the_critical_path_and_never_changes_the_answer() {
    let dir = tempfile::tempdir().unwrap();
    let marker = dir.path().join("ran");
    let s = set(vec![
        cmd(
            "tenant-acme",
            "shadow",
            20,
            &format!("touch {}; exit 2", marker.display()),
            "enforcementAction: dryrun",
        ),
        cmd("tenant-acme", "allow", 10, "exit 0", ""),
    ]);
    let e = engine();
    let d = decide(&e, &s, event(json!({}))).await;
    assert_eq!(d.decision, Verdict::Allow);
    assert_eq!(
        ran(&d),
        [("tenant-acme/allow", Outcome::Allow)],
        "the dryrun hook is not awaited by the decision"
    );
    // ... but it runs, and its would-be block is counted on its hook.
    let shadow = s
        .select(HookEvent::PreToolUse, "acme", "a1", Some("exec"))
        .find(|h| h.name == "shadow")
        .unwrap()
        .clone();
    for _ in 0..200 {
        if shadow.counters.peek().by_outcome[1] == 1 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(marker.exists(), "the dryrun hook ran");
    assert_eq!(shadow.counters.peek().by_outcome, [0, 1, 0, 0, 0]);

    // A dry run shows it in place, and still allows.
    let hooks: Vec<_> = s
        .select(HookEvent::PreToolUse, "acme", "a1", Some("exec"))
        .cloned()
        .collect();
    let d = drive(
        &e,
        &crate::observer::Dry,
        hooks.iter(),
        event(json!({})),
        Filters::Apply(Matcher::Applied),
    )
    .await;
    assert_eq!(d.decision, Verdict::Allow);
    assert_eq!(
        ran(&d),
        [
            ("tenant-acme/shadow", Outcome::Block),
            ("tenant-acme/allow", Outcome::Allow)
        ]
    );
}

#[tokio::test]
async fn on_error_allow_lets_an_outage_pass_and_nothing_else() {
    let missing = "/nonexistent/agenthooks-hook";
    let lenient = set(vec![cmd(
        "tenant-acme",
        "down",
        10,
        missing,
        "onError: allow",
    )]);
    let d = decide(&engine(), &lenient, event(json!({}))).await;
    assert_eq!(d.decision, Verdict::Allow);
    assert_eq!(ran(&d), [("tenant-acme/down", Outcome::Error)]);

    let strict = set(vec![cmd("tenant-acme", "down", 10, missing, "")]);
    let d = decide(&engine(), &strict, event(json!({}))).await;
    assert_eq!(d.decision, Verdict::Block);

    // An error that is an answer, not an outage (exit 1), still blocks.
    let answer = set(vec![cmd(
        "tenant-acme",
        "bad",
        10,
        "exit 1",
        "onError: allow",
    )]);
    let d = decide(&engine(), &answer, event(json!({}))).await;
    assert_eq!(d.decision, Verdict::Block);
    // So does an ifExpr error: the agent's input must not open a guard.
    let cel = set(vec![cmd(
        "tenant-acme",
        "cel",
        10,
        "exit 0",
        "onError: allow\nifExpr: 'tool_input.cmd.size() > tool_input.missing'",
    )]);
    let d = decide(&engine(), &cel, event(json!({}))).await;
    assert_eq!(d.decision, Verdict::Block);
}

/// Asking for an approval counts within the hook's slot (so within the chain budget): an
/// operator that never answers makes the call unavailable by the hook's timeout, a
/// refusal, not a wait of the approval call's own 5 s.
#[tokio::test]
async fn an_approval_is_asked_within_the_hooks_timeout() {
    // An operator that takes the connection and never answers.
    let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", silent.local_addr().unwrap());
    let mut e = engine();
    e.approvals = Some(Arc::new(crate::approvals::ApprovalClient::new(
        Arc::new(crate::operator_urls::OperatorUrls::parse(&[url.as_str()]).unwrap()),
        "dispatcher-0".into(),
    )));
    let s = set(vec![cmd(
        "tenant-acme",
        "asks",
        10,
        r#"echo '{"decision": "ask", "reason": "a person decides"}'"#,
        "timeoutMs: 400\napproval: {ttlSeconds: 60}",
    )]);
    let started = std::time::Instant::now();
    let d = decide(&e, &s, event(json!({}))).await;
    let took = started.elapsed();
    assert_eq!(d.decision, Verdict::Block);
    assert_eq!(
        d.reason.as_deref(),
        Some("ApprovalUnavailable: no answer within the hook's timeout (400 ms)")
    );
    assert!(took < Duration::from_secs(2), "took {took:?}");
    drop(silent);
}

/// A `warn` or `dryrun` hook with `spec.approval` that answers ask asks nobody: a warn
/// hook's ask is a warning ("would ask"), a dryrun hook's changes nothing, and neither
/// reaches the operator (no connection is ever made to it).
#[tokio::test]
async fn a_warn_or_dryrun_hooks_ask_asks_no_person() {
    let operator = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    operator.set_nonblocking(true).unwrap();
    let url = format!("http://{}", operator.local_addr().unwrap());
    let mut e = engine();
    e.approvals = Some(Arc::new(crate::approvals::ApprovalClient::new(
        Arc::new(crate::operator_urls::OperatorUrls::parse(&[url.as_str()]).unwrap()),
        "dispatcher-0".into(),
    )));
    for (action, context) in [
        (
            "warn",
            Some("warning: tenant-acme/asks would ask: a person decides"),
        ),
        ("dryrun", None),
    ] {
        let s = set(vec![cmd(
            "tenant-acme",
            "asks",
            10,
            ASK,
            &format!("enforcementAction: {action}\napproval: {{ttlSeconds: 60}}"),
        )]);
        let d = decide_in_place(&e, &s, event(json!({}))).await;
        assert_eq!(d.decision, Verdict::Allow, "{action}: {d:?}");
        assert_eq!(d.additional_context.as_deref(), context, "{action}");
        assert!(
            operator.accept().is_err(),
            "{action}: the operator was asked"
        );
    }
}
