//! The chain's rules, table-driven on the pure step: no process, no network, no clock.

use super::*;
use serde_json::json;

fn event(v: Value) -> Event {
    let mut base = json!({"event": "pre_tool_use", "tenant_id": "acme", "tool_name": "exec", "tool_input": {"cmd": "ls"}});
    base.as_object_mut()
        .unwrap()
        .extend(v.as_object().unwrap().clone());
    Event::parse(&serde_json::to_vec(&base).unwrap()).unwrap()
}

const TENANT: HookRule = HookRule::enforcing("tenant-acme/h", false, OnTimeout::Block);
const MASTER: HookRule = HookRule::enforcing("agenthooks-system/h", true, OnTimeout::Block);
const LENIENT: HookRule = HookRule::enforcing("tenant-acme/h", false, OnTimeout::Allow);

fn ran(outcome: Outcome) -> Ran<'static> {
    Ran {
        outcome,
        reason: None,
        error_kind: None,
        cut_by_budget: false,
        additional_context: None,
        updated_input: None,
        updated_tool_output: None,
    }
}

fn cont(context: Option<&str>, rewrite: Option<Value>, mutation_denied: bool) -> Step {
    Step::Continue {
        context: context.map(str::to_owned),
        rewrite,
        mutation_denied,
        ask: None,
        output_rewrite: None,
    }
}

fn block(reason: &str) -> Step {
    Step::Block {
        reason: reason.into(),
        budget_spent: false,
    }
}

#[test]
fn stop_and_continue_rules() {
    let e = event(json!({}));
    let cases: Vec<(&str, HookRule, Ran, Step)> = vec![
        (
            "allow goes on",
            TENANT,
            ran(Outcome::Allow),
            cont(None, None, false),
        ),
        (
            "block stops, with the hook's reason",
            TENANT,
            Ran {
                reason: Some("no rm"),
                ..ran(Outcome::Block)
            },
            block("no rm"),
        ),
        (
            "block without a reason names the hook",
            TENANT,
            ran(Outcome::Block),
            block("blocked by tenant-acme/h"),
        ),
        (
            "an error fails closed",
            LENIENT,
            Ran {
                reason: Some("exit 1"),
                ..ran(Outcome::Error)
            },
            block("exit 1"),
        ),
        (
            "a timeout with onTimeout: block stops",
            TENANT,
            Ran {
                reason: Some("no answer within 50 ms"),
                ..ran(Outcome::Timeout)
            },
            block("no answer within 50 ms"),
        ),
        (
            "a timeout with onTimeout: allow goes on",
            LENIENT,
            ran(Outcome::Timeout),
            cont(None, None, false),
        ),
        (
            "a timeout cut by the chain budget stops, even with onTimeout: allow",
            LENIENT,
            Ran {
                cut_by_budget: true,
                ..ran(Outcome::Timeout)
            },
            Step::Block {
                reason: CHAIN_BUDGET_EXCEEDED.into(),
                budget_spent: true,
            },
        ),
        (
            "an allow's context is collected",
            TENANT,
            Ran {
                additional_context: Some("be careful".into()),
                ..ran(Outcome::Allow)
            },
            cont(Some("be careful"), None, false),
        ),
        (
            "an empty context is not",
            TENANT,
            Ran {
                additional_context: Some(String::new()),
                ..ran(Outcome::Allow)
            },
            cont(None, None, false),
        ),
        (
            "a block's context is not collected",
            TENANT,
            Ran {
                additional_context: Some("x".into()),
                ..ran(Outcome::Block)
            },
            block("blocked by tenant-acme/h"),
        ),
        (
            "a rewrite from a tenant namespace is dropped and noted",
            TENANT,
            Ran {
                updated_input: Some(json!({"cmd": "rm -rf /"})),
                ..ran(Outcome::Allow)
            },
            cont(None, None, true),
        ),
        (
            "a rewrite from the master namespace is taken",
            MASTER,
            Ran {
                updated_input: Some(json!({"cmd": "ls -l"})),
                ..ran(Outcome::Allow)
            },
            cont(None, Some(json!({"cmd": "ls -l"})), false),
        ),
        (
            "a rewrite that is not an object is ignored",
            MASTER,
            Ran {
                updated_input: Some(json!("ls")),
                ..ran(Outcome::Allow)
            },
            cont(None, None, false),
        ),
        (
            "a rewrite offered with a block is not taken",
            MASTER,
            Ran {
                updated_input: Some(json!({"cmd": "ls -l"})),
                ..ran(Outcome::Block)
            },
            block("blocked by agenthooks-system/h"),
        ),
    ];
    for (name, rule, r, want) in cases {
        assert_eq!(step(&rule, r, &e), want, "{name}");
    }
}

#[test]
fn a_rewrite_over_the_input_caps_blocks() {
    let e = event(json!({}));
    let big = "x".repeat(crate::event::MAX_TOOL_INPUT_BYTES + 1);
    let got = step(
        &MASTER,
        Ran {
            updated_input: Some(json!({ "cmd": big })),
            ..ran(Outcome::Allow)
        },
        &e,
    );
    match got {
        Step::Block {
            reason,
            budget_spent: false,
        } => assert!(reason.starts_with("updatedInput refused: "), "{reason}"),
        other => panic!("{other:?}"),
    }
}

#[test]
fn the_chain_budget_slot() {
    let s = Duration::from_secs;
    assert_eq!(slot(Duration::ZERO, s(5)), Slot::Spent);
    assert_eq!(
        slot(s(10), s(5)),
        Slot::Run {
            timeout: s(5),
            cut_by_budget: false
        }
    );
    assert_eq!(
        slot(s(5), s(5)),
        Slot::Run {
            timeout: s(5),
            cut_by_budget: false
        },
        "exactly enough is not cut"
    );
    assert_eq!(
        slot(Duration::from_millis(1500), s(5)),
        Slot::Run {
            timeout: Duration::from_millis(1500),
            cut_by_budget: true
        }
    );
}

#[test]
fn the_depth_rule() {
    for (d, ev, want) in [
        (0, "pre_tool_use", Depth::Within),
        (3, "pre_tool_use", Depth::Within),
        (4, "pre_tool_use", Depth::Exceeded { blocks: true }),
        (4, "user_prompt_submit", Depth::Exceeded { blocks: true }),
        (4, "subagent_start", Depth::Exceeded { blocks: true }),
        (4, "post_tool_use", Depth::Exceeded { blocks: false }),
        (9, "stop", Depth::Exceeded { blocks: false }),
    ] {
        assert_eq!(
            depth(&event(json!({"depth": d, "event": ev}))),
            want,
            "{ev} at {d}"
        );
    }
    // A sub-agent tool call asks for a start one deeper: refused at depth 3, whatever
    // the runtime calls the tool; other tools at depth 3 still run their hooks.
    for (d, tool, want) in [
        (2, "Agent", Depth::Within),
        (3, "Agent", Depth::Exceeded { blocks: true }),
        (3, "spawn_agent", Depth::Exceeded { blocks: true }),
        (3, "invoke_agent", Depth::Exceeded { blocks: true }),
        (3, "Bash", Depth::Within),
    ] {
        let e = event(json!({"depth": d, "event": "pre_tool_use", "tool_name": tool}));
        assert_eq!(depth(&e), want, "{tool} at {d}");
    }
    let post = event(json!({"depth": 3, "event": "post_tool_use", "tool_name": "Agent"}));
    assert_eq!(depth(&post), Depth::Within);
}

#[test]
fn contexts_join_in_order() {
    assert_eq!(joined_contexts(&[]), None);
    assert_eq!(
        joined_contexts(&["a".into(), "b".into()]).as_deref(),
        Some("a\n\nb")
    );
}

mod properties {
    use super::*;
    use proptest::prelude::*;

    fn outcome() -> impl Strategy<Value = Outcome> {
        prop_oneof![
            Just(Outcome::Allow),
            Just(Outcome::Block),
            Just(Outcome::Error),
            Just(Outcome::Timeout)
        ]
    }

    proptest! {
        /// Over any sequence of hook outcomes, the chain ends `allow` only when every hook
        /// that ran allowed (or timed out with `onTimeout: allow`, and not cut by the
        /// budget); a `block` anywhere always stops it with `block`.
        #[test]
        fn a_block_anywhere_blocks(outcomes in proptest::collection::vec((outcome(), any::<bool>(), any::<bool>()), 0..40)) {
            let e = event(json!({}));
            let mut verdict_block = false;
            let mut saw_block = false;
            for (o, lenient, cut) in &outcomes {
                let rule = if *lenient { LENIENT } else { TENANT };
                saw_block |= *o == Outcome::Block;
                let r = Ran { cut_by_budget: *cut && *o == Outcome::Timeout, ..ran(*o) };
                if let Step::Block { .. } = step(&rule, r, &e) {
                    verdict_block = true;
                    break;
                }
                prop_assert!(matches!(o, Outcome::Allow | Outcome::Timeout));
            }
            if saw_block {
                prop_assert!(verdict_block);
            }
        }
    }
}

fn rule(enforcement: EnforcementAction, on_error: OnError) -> HookRule<'static> {
    HookRule {
        enforcement,
        on_error,
        ..MASTER
    }
}

fn failed(kind: ErrorKind) -> Ran<'static> {
    Ran {
        reason: Some("down"),
        error_kind: Some(kind),
        ..ran(Outcome::Error)
    }
}

/// Issue 16: `ask`, `enforcementAction` and `onError` on one run.
#[test]
fn ask_warn_dryrun_and_on_error_rules() {
    use EnforcementAction::{Dryrun, Enforce, Warn};
    let e = event(json!({}));
    let enforce = rule(Enforce, OnError::Block);
    let lenient = rule(Enforce, OnError::Allow);
    let asking = Step::Continue {
        context: None,
        rewrite: None,
        mutation_denied: false,
        ask: Some("a person decides".into()),
        output_rewrite: None,
    };
    let rewrite = json!({"cmd": "ls -l"});
    let cases: Vec<(&str, HookRule, Ran, Step)> = vec![
        (
            "ask goes on, remembered with its reason",
            enforce,
            Ran {
                reason: Some("a person decides"),
                ..ran(Outcome::Ask)
            },
            asking.clone(),
        ),
        (
            "ask without a reason names the hook",
            enforce,
            ran(Outcome::Ask),
            Step::Continue {
                context: None,
                rewrite: None,
                mutation_denied: false,
                ask: Some("agenthooks-system/h asks for approval".into()),
                output_rewrite: None,
            },
        ),
        (
            "an asking master hook's rewrite is taken",
            enforce,
            Ran {
                updated_input: Some(rewrite.clone()),
                ..ran(Outcome::Ask)
            },
            Step::Continue {
                context: None,
                rewrite: Some(rewrite.clone()),
                mutation_denied: false,
                ask: Some("agenthooks-system/h asks for approval".into()),
                output_rewrite: None,
            },
        ),
        (
            "warn: a block is a warning",
            rule(Warn, OnError::Block),
            Ran {
                reason: Some("no rm"),
                ..ran(Outcome::Block)
            },
            cont(
                Some("warning: agenthooks-system/h would block: no rm"),
                None,
                false,
            ),
        ),
        (
            "warn: an ask is a warning",
            rule(Warn, OnError::Block),
            ran(Outcome::Ask),
            cont(Some("warning: agenthooks-system/h would ask"), None, false),
        ),
        (
            "warn: an allow's context is kept, its rewrite never taken",
            rule(Warn, OnError::Block),
            Ran {
                additional_context: Some("ctx".into()),
                updated_input: Some(rewrite.clone()),
                ..ran(Outcome::Allow)
            },
            cont(Some("ctx"), None, false),
        ),
        (
            "warn: an error still blocks (fail-closed)",
            rule(Warn, OnError::Block),
            failed(ErrorKind::Transport),
            block("down"),
        ),
        (
            "warn: a timeout follows onTimeout",
            rule(Warn, OnError::Block),
            ran(Outcome::Timeout),
            block("blocked by agenthooks-system/h"),
        ),
        (
            "dryrun: a block changes nothing",
            rule(Dryrun, OnError::Block),
            ran(Outcome::Block),
            Step::NOTHING,
        ),
        (
            "dryrun: an error changes nothing",
            rule(Dryrun, OnError::Block),
            failed(ErrorKind::CelEval),
            Step::NOTHING,
        ),
        (
            "dryrun: a rewrite and context are not taken",
            rule(Dryrun, OnError::Block),
            Ran {
                additional_context: Some("ctx".into()),
                updated_input: Some(rewrite.clone()),
                ..ran(Outcome::Allow)
            },
            Step::NOTHING,
        ),
        (
            "dryrun: a timeout cut by the chain budget changes nothing",
            rule(Dryrun, OnError::Block),
            Ran {
                cut_by_budget: true,
                ..ran(Outcome::Timeout)
            },
            Step::NOTHING,
        ),
        (
            "onError allow: an outage goes on",
            lenient,
            failed(ErrorKind::Http5xx),
            Step::NOTHING,
        ),
        (
            "onError allow: an open breaker goes on",
            lenient,
            failed(ErrorKind::CircuitOpen),
            Step::NOTHING,
        ),
        (
            "onError allow: a model provider's outage goes on",
            lenient,
            failed(ErrorKind::Prompt("provider_5xx")),
            Step::NOTHING,
        ),
        (
            "onError allow: a bad answer still blocks",
            lenient,
            failed(ErrorKind::BadDecision),
            block("down"),
        ),
        (
            "onError allow: an ifExpr error still blocks",
            lenient,
            failed(ErrorKind::CelEval),
            block("down"),
        ),
        (
            "onError allow: the per-turn cap still blocks",
            lenient,
            failed(ErrorKind::Prompt("per_turn_cap")),
            block("down"),
        ),
        (
            "onError allow: the SSRF guard still blocks",
            lenient,
            failed(ErrorKind::SsrfBlocked),
            block("down"),
        ),
        (
            "onError allow: an error without a kind blocks",
            lenient,
            Ran {
                reason: Some("down"),
                ..ran(Outcome::Error)
            },
            block("down"),
        ),
        (
            "onError allow: a timeout follows onTimeout, not onError",
            lenient,
            ran(Outcome::Timeout),
            block("blocked by agenthooks-system/h"),
        ),
        (
            "onError allow: a timeout cut by the chain budget blocks",
            lenient,
            Ran {
                cut_by_budget: true,
                ..ran(Outcome::Timeout)
            },
            Step::Block {
                reason: CHAIN_BUDGET_EXCEEDED.into(),
                budget_spent: true,
            },
        ),
    ];
    for (name, rule, ran, want) in cases {
        assert_eq!(step(&rule, ran, &e), want, "{name}");
    }
}

/// Exactly the kinds that say the handler could not be reached or run are outages.
#[test]
fn outage_kinds() {
    let outages: Vec<&str> = ErrorKind::FIXED
        .iter()
        .filter(|k| k.is_outage())
        .map(|k| k.as_str())
        .collect();
    assert_eq!(
        outages,
        [
            "spawn_failed",
            "runner_unavailable",
            "transport",
            "http_5xx",
            "panic",
            "circuit_open"
        ]
    );
    for (label, outage) in [
        ("client_unavailable", true),
        ("transport", true),
        ("provider_timeout", true),
        ("provider_rate_limited", true),
        ("provider_overloaded", true),
        ("provider_5xx", true),
        ("provider_4xx", false),
        ("per_turn_cap", false),
        ("budget_exhausted", false),
        ("budget_unavailable", false),
        ("prompt_unconfigured", false),
        ("free_text", false),
        ("bad_decision", false),
    ] {
        assert_eq!(ErrorKind::Prompt(label).is_outage(), outage, "{label}");
    }
}

/// Issue 16 point 5: `updatedToolOutput` follows `updatedInput`'s rules; a hook the event
/// does not wait for never changes anything.
#[test]
fn tool_output_rewrites_and_hooks_not_waited_for() {
    let post = event(json!({"event": "post_tool_use", "tool_output": {"stdout": "AWS_SECRET=x"}}));
    let redacted = json!({"stdout": "[redacted]"});
    let rewrite = |rule: HookRule<'static>, output: Value| {
        step(
            &rule,
            Ran {
                updated_tool_output: Some(output),
                ..ran(Outcome::Allow)
            },
            &post,
        )
    };
    let out = |o: Option<Value>, denied: bool| Step::Continue {
        context: None,
        rewrite: None,
        mutation_denied: denied,
        ask: None,
        output_rewrite: o,
    };
    assert_eq!(
        rewrite(MASTER, redacted.clone()),
        out(Some(redacted.clone()), false)
    );
    assert_eq!(
        rewrite(TENANT, redacted.clone()),
        Step::Block {
            reason: format!(
                "updatedToolOutput refused: only a hook in the master namespace may rewrite a tool's output, and {} wanted it changed: withheld",
                TENANT.key
            ),
            budget_spent: false,
        }
    );
    assert_eq!(
        rewrite(
            rule(EnforcementAction::Warn, OnError::Block),
            redacted.clone()
        ),
        out(None, false)
    );
    let huge = json!({"stdout": "x".repeat(crate::event::MAX_TOOL_INPUT_BYTES)});
    assert!(matches!(
        rewrite(MASTER, huge),
        Step::Block { reason, .. } if reason.starts_with("updatedToolOutput refused: ")
    ));
    // In another shape than the tool's output it is refused (the runtime would drop it
    // and show the original), naming where.
    assert_eq!(
        rewrite(MASTER, json!("[redacted]")),
        Step::Block {
            reason: "updatedToolOutput refused: $ must stay an object like the tool's output, not a string".into(),
            budget_spent: false,
        }
    );
    assert_eq!(
        rewrite(MASTER, json!({"stdout": 1})),
        Step::Block {
            reason: "updatedToolOutput refused: $.stdout must stay a string like the tool's output, not a number".into(),
            budget_spent: false,
        }
    );
    // Only post_tool_use takes it.
    let pre = event(json!({}));
    assert_eq!(
        step(
            &MASTER,
            Ran {
                updated_tool_output: Some(redacted),
                ..ran(Outcome::Allow)
            },
            &pre
        ),
        out(None, false)
    );
    // Not waited for (a non-blocking event's hook without blocking: true): nothing counts.
    let background = HookRule {
        waits: false,
        ..MASTER
    };
    for o in [
        Outcome::Block,
        Outcome::Error,
        Outcome::Ask,
        Outcome::Timeout,
    ] {
        assert_eq!(step(&background, ran(o), &post), Step::NOTHING, "{o:?}");
    }
}

/// A `tool_output` over the caps reaches no hook: an enforcing hook that waits for the
/// event withholds it whatever it answered; a `warn` or background hook changes nothing.
#[test]
fn an_unread_output_is_withheld_by_a_hook_that_must_read_it() {
    let huge = "x".repeat(crate::event::MAX_TOOL_INPUT_BYTES + 1);
    let post = event(json!({"event": "post_tool_use", "tool_output": {"stdout": huge}}));
    assert_eq!(post.tool_output, None);
    assert!(post.tool_output_unread);
    assert_eq!(
        step(&MASTER, ran(Outcome::Allow), &post),
        Step::Block {
            reason: format!(
                "tool_output unread (over 262144 bytes or 32 levels deep): withheld, as {} must read it",
                MASTER.key
            ),
            budget_spent: false,
        }
    );
    let warn = rule(EnforcementAction::Warn, OnError::Block);
    assert!(matches!(
        step(&warn, ran(Outcome::Allow), &post),
        Step::Continue { .. }
    ));
    let background = HookRule {
        waits: false,
        ..MASTER
    };
    assert_eq!(step(&background, ran(Outcome::Allow), &post), Step::NOTHING);
}
