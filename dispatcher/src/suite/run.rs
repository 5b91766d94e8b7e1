//! One case through the dispatch chain, and its comparison with the expectation.

use std::time::{Duration, Instant};

use serde_json::Value;

use crate::chain::{Decision, Verdict, decide_with};
use crate::observer::Stubbed;
use crate::runner::Engine;

use super::file::{Case, Expectation, Suite};

/// What a case came to.
#[derive(Debug, Clone, PartialEq)]
pub enum CaseOutcome {
    /// The decision is what the case expects.
    Pass,
    /// The decision differs: one line per field that does (`decision: expected ask, got
    /// block`).
    Fail(Vec<String>),
    /// The case could not be decided as written (an http or prompt hook with no stub was
    /// reached, without `--allow-network`).
    Error(String),
}

/// A case's result, for the table and the JUnit report.
#[derive(Debug, Clone)]
pub struct CaseResult {
    pub name: String,
    pub expected: Verdict,
    /// The decision as `POST /v1/dispatch` would answer the case's event.
    pub got: Decision,
    pub outcome: CaseOutcome,
    /// Wall time of the decision.
    pub elapsed: Duration,
}

/// Decides `case` of `suite` as `POST /v1/dispatch` would, with `engine` (made for the
/// suite: its seal key, edition, budgets): the hooks the event selects run through
/// [`decide_with`] under [`Stubbed`] (stubs answer; `network` lets unstubbed http and
/// prompt hooks run for real). An event nothing waits for (non-blocking, and no
/// `blocking: true` hook selects it) is answered `allow`, as dispatch answers it (its hooks
/// still run, so their stubs and errors show); an `ask` is answered
/// `block` unless the event has `accept: [ask]` ([`Decision::for_caller`]).
pub async fn run_case(engine: &Engine, suite: &Suite, case: &Case, network: bool) -> CaseResult {
    let observer = Stubbed::new(case.stubs.clone(), network);
    let started = Instant::now();
    let mut decision =
        decide_with(engine, &observer, &suite.loaded.hooks, case.event.clone()).await;
    let elapsed = started.elapsed();
    // As dispatch: an event nothing waits for (a non-blocking event without a
    // `blocking: true` hook selecting it) is answered allow.
    if !crate::chain::waits_for(&suite.loaded.hooks, &case.event) {
        decision.decision = Verdict::Allow;
        decision.reason = None;
        decision.deciding_hook = None;
    }
    let asked = decision.decision == Verdict::Ask;
    let decision = decision.for_caller(case.event.accepts_ask());
    let refused_ask = asked && decision.decision != Verdict::Ask;
    let unstubbed = observer.unstubbed();
    let outcome = if !unstubbed.is_empty() {
        CaseOutcome::Error(format!(
            "{} reached with no stub: stub it (stubs[].hook, in the file or the case) or run with --allow-network",
            unstubbed.join(", ")
        ))
    } else {
        match differences(&case.expect, &decision, refused_ask) {
            d if d.is_empty() => CaseOutcome::Pass,
            d => CaseOutcome::Fail(d),
        }
    };
    CaseResult {
        name: case.name.clone(),
        expected: case.expect.decision,
        got: decision,
        outcome,
        elapsed,
    }
}

/// Where `got` differs from `expect`, one line per field, empty when it does not.
/// `refused_ask`: the chain said `ask` and the event does not accept it, so `got` is
/// `block` (said in the `decision` line, the usual cause of that difference).
pub fn differences(expect: &Expectation, got: &Decision, refused_ask: bool) -> Vec<String> {
    let mut out = Vec::new();
    if got.decision != expect.decision {
        let mut line = format!(
            "decision: expected {}, got {}",
            expect.decision.as_str(),
            got.decision.as_str()
        );
        if refused_ask {
            line.push_str(
                " (a hook asked, and the event has no accept: [ask], so /v1/dispatch answers block)",
            );
        }
        out.push(line);
    }
    if let Some(want) = &expect.deciding_hook
        && want.as_deref() != got.deciding_hook.as_deref()
    {
        out.push(format!(
            "decidingHook: expected {}, got {}",
            or_none(want.as_deref()),
            or_none(got.deciding_hook.as_deref())
        ));
    }
    matched(&mut out, "reason", &expect.reason, got.reason.as_deref());
    matched(
        &mut out,
        "additionalContext",
        &expect.additional_context,
        got.additional_context.as_deref(),
    );
    for (field, want, got) in [
        ("updatedInput", &expect.updated_input, &got.updated_input),
        (
            "updatedToolOutput",
            &expect.updated_tool_output,
            &got.updated_tool_output,
        ),
    ] {
        if let Some(want) = want
            && want.as_ref() != got.as_ref()
        {
            out.push(format!(
                "{field}: expected {}, got {}",
                json_or_none(want.as_ref()),
                json_or_none(got.as_ref())
            ));
        }
    }
    out
}

/// The regex check of `reason` or `additionalContext`.
fn matched(
    out: &mut Vec<String>,
    field: &str,
    want: &Option<Option<regex::Regex>>,
    got: Option<&str>,
) {
    match (want, got) {
        (None, _) | (Some(None), None) => {}
        (Some(Some(re)), Some(text)) if re.is_match(text) => {}
        (Some(Some(re)), Some(text)) => {
            out.push(format!("{field}: {text:?} does not match /{re}/"))
        }
        (Some(Some(re)), None) => {
            out.push(format!("{field}: expected a match of /{re}/, got none"))
        }
        (Some(None), Some(text)) => out.push(format!("{field}: expected none, got {text:?}")),
    }
}

fn or_none(s: Option<&str>) -> String {
    s.map_or_else(|| "none".into(), str::to_owned)
}

fn json_or_none(v: Option<&Value>) -> String {
    v.map_or_else(|| "none".into(), Value::to_string)
}
