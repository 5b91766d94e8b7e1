//! The blocking chain's rules (CONTRACT §1.4, §4.1–4.5), pure.
//!
//! - [`depth`]: `depth > 3` runs no hook; a blocking event gets `block`
//!   ([`LOOP_DEPTH_EXCEEDED`]).
//! - [`slot`]: what the next hook gets of the chain budget: its own timeout, cut to what is
//!   left, or nothing ([`CHAIN_BUDGET_EXCEEDED`]).
//! - [`step`]: what the chain does after one hook run: `block` stops it (so do `error`, a
//!   `timeout` with `onTimeout: block`, and a timeout cut short by the chain budget); an
//!   `allow` goes on, its `additionalContext` collected, its `updatedInput` taken only from
//!   the master namespace and only within the input caps; an `ask` goes on too (a later
//!   `block` beats it) and is remembered. A hook's `enforcementAction` and `onError` bend
//!   these: `warn` turns its `block`/`ask` into a warning, `dryrun` changes nothing, and
//!   `onError: allow` lets its outage ([`ErrorKind::is_outage`]) pass.

use std::time::Duration;

use agenthooks_crds::agenthook::{EnforcementAction, OnError, OnTimeout};
use serde_json::Value;

use crate::decision::outcome::{ErrorKind, Outcome};
use crate::event::{Event, MAX_LOOP_DEPTH, MAX_TOOL_INPUT_BYTES, MAX_TOOL_INPUT_DEPTH};

/// Reason of a block for sub-agent depth over [`MAX_LOOP_DEPTH`] (CONTRACT §1.4).
pub const LOOP_DEPTH_EXCEEDED: &str = "LoopDepthExceeded";
/// Reason of a block when the chain budget runs out (CONTRACT §4.3).
pub const CHAIN_BUDGET_EXCEEDED: &str = "ChainBudgetExceeded";

/// What the depth rule says of an event (CONTRACT §1.4).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Depth {
    /// Hooks may run.
    Within,
    /// No hook runs; `blocks`: the event is answered `block` (blocking events).
    Exceeded { blocks: bool },
}

/// The depth rule: `depth > 3` runs no hook, and blocks a blocking event. A sub-agent
/// tool call (`tool_kind: subagent`) at depth 3 counts as the start it asks for, at
/// depth 4: it is refused where it can be, before the runtime starts the sub-agent (Claude
/// Code 2.1.332 does not let a `SubagentStart` hook stop one).
pub fn depth(event: &Event) -> Depth {
    let spawns = event.event == agenthooks_crds::HookEvent::PreToolUse
        && event
            .tool
            .as_ref()
            .is_some_and(|t| t.kind == agenthooks_crds::tool::ToolKind::Subagent);
    let depth = if spawns {
        event.depth.saturating_add(1)
    } else {
        event.depth
    };
    if depth > MAX_LOOP_DEPTH {
        Depth::Exceeded {
            blocks: event.event.is_blocking(),
        }
    } else {
        Depth::Within
    }
}

/// What the chain budget gives the next hook (CONTRACT §4.1, §4.3).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Slot {
    /// Run with `timeout`: the hook's own, or what is left of the chain budget when that is
    /// less (`cut_by_budget`).
    Run {
        timeout: Duration,
        cut_by_budget: bool,
    },
    /// Nothing is left: the chain stops with `block` ([`CHAIN_BUDGET_EXCEEDED`]) before
    /// this hook runs.
    Spent,
}

/// The slot of a hook whose own timeout is `own`, with `left` of the chain budget.
pub fn slot(left: Duration, own: Duration) -> Slot {
    if left.is_zero() {
        return Slot::Spent;
    }
    Slot::Run {
        timeout: own.min(left),
        cut_by_budget: left < own,
    }
}

/// What the chain needs to know of a hook to apply its rules.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HookRule<'a> {
    /// `namespace/name`, named in a block's default reason.
    pub key: &'a str,
    /// In the master namespace: may rewrite `tool_input` (CONTRACT §4.5).
    pub master: bool,
    /// `onTimeout`, resolved (CONTRACT §2.2).
    pub on_timeout: OnTimeout,
    /// `enforcementAction`, resolved (absent → `enforce`).
    pub enforcement: EnforcementAction,
    /// `onError`, resolved (absent → `block`).
    pub on_error: OnError,
    /// The event waits for the hook (a blocking event's, or `blocking: true`); a hook it
    /// does not wait for never changes the answer.
    pub waits: bool,
}

impl<'a> HookRule<'a> {
    /// Whether this hook's answer can change the decision: the event waits for it and it
    /// is not `dryrun`. The others run off the decision's path where they can, and
    /// [`step`] takes nothing from them.
    pub fn decides(&self) -> bool {
        self.waits && self.enforcement != EnforcementAction::Dryrun
    }

    /// An enforcing hook that blocks on error, with `onTimeout` as given (tests, tables).
    pub const fn enforcing(key: &'a str, master: bool, on_timeout: OnTimeout) -> Self {
        HookRule {
            key,
            master,
            on_timeout,
            enforcement: EnforcementAction::Enforce,
            on_error: OnError::Block,
            waits: true,
        }
    }
}

/// One finished hook run, as the chain sees it.
#[derive(Debug, Clone, PartialEq)]
pub struct Ran<'a> {
    pub outcome: Outcome,
    /// The handler's reason, if any.
    pub reason: Option<&'a str>,
    /// Why an `error` (or a `timeout`).
    pub error_kind: Option<ErrorKind>,
    /// The run's timeout was cut short by the chain budget ([`Slot::Run`]).
    pub cut_by_budget: bool,
    pub additional_context: Option<String>,
    pub updated_input: Option<Value>,
    /// `updatedToolOutput` (`post_tool_use`).
    pub updated_tool_output: Option<Value>,
}

/// What the chain does after one hook run.
#[derive(Debug, Clone, PartialEq)]
pub enum Step {
    /// Stop with `block`. `reason`: what the agent is told; `budget_spent`: the run was a
    /// timeout cut short by the chain budget (its own reason becomes
    /// [`CHAIN_BUDGET_EXCEEDED`]).
    Block { reason: String, budget_spent: bool },
    /// Go on to the next hook.
    Continue {
        /// `additionalContext` to collect (non-empty, from an `allow`).
        context: Option<String>,
        /// The new `tool_input`, checked against the input caps: later hooks see it and
        /// the answer carries it.
        rewrite: Option<Value>,
        /// An `updatedInput` from outside the master namespace was dropped (log
        /// `hooks.mutation_denied`, noted in the run).
        mutation_denied: bool,
        /// The hook asks (its reason): the chain goes on, and answers `ask` at its end
        /// unless a later hook blocks.
        ask: Option<String>,
        /// The new `tool_output` (`post_tool_use`, master namespace, within the caps):
        /// later hooks see it and the answer carries it.
        output_rewrite: Option<Value>,
    },
}

impl Step {
    /// Go on with nothing taken from the run.
    pub const NOTHING: Step = Step::Continue {
        context: None,
        rewrite: None,
        mutation_denied: false,
        ask: None,
        output_rewrite: None,
    };
}

/// The chain's rule for one run of the hook `rule` on `event` (CONTRACT §4.3–4.5), with
/// the hook's `enforcementAction` and `onError` (issue 16):
///
/// | run | enforce | warn | dryrun |
/// |---|---|---|---|
/// | `block` | stop, `block` | go on, reason as a warning | go on |
/// | `ask` | go on, remembered | go on, reason as a warning | go on |
/// | `allow` | go on (context, master rewrite) | go on (context) | go on |
/// | `error`, outage, `onError: allow` | go on | go on | go on |
/// | `error`, otherwise | stop, `block` | stop, `block` | go on |
/// | `timeout` | `onTimeout` | `onTimeout` | go on |
///
/// A timeout cut short by the chain budget stops the chain whatever the hook says,
/// except for a `dryrun` hook, which never changes the answer; neither does a hook the
/// event does not wait for (a non-blocking event's hook without `blocking: true`).
///
/// `updatedToolOutput` (`post_tool_use`) follows `updatedInput`'s rules: taken only from
/// the master namespace (another's withholds the output), within the caps, never from a
/// `warn` hook; and it keeps the shape
/// of `tool_output` ([`super::output_shape`]). A `tool_output` over the caps reaches no
/// hook ([`Event::tool_output_unread`]): an enforcing hook that waits for the event
/// withholds it, whatever it answered.
pub fn step(rule: &HookRule<'_>, ran: Ran<'_>, event: &Event) -> Step {
    if !rule.decides() {
        return Step::NOTHING;
    }
    let block = |reason: Option<&str>| Step::Block {
        reason: reason
            .map(str::to_owned)
            .unwrap_or_else(|| format!("blocked by {}", rule.key)),
        budget_spent: false,
    };
    let warn = rule.enforcement == EnforcementAction::Warn;
    // An output over the caps reached no hook: one that must judge it cannot, so the
    // output is withheld rather than let through unread.
    if event.tool_output_unread && !warn {
        return Step::Block {
            reason: format!(
                "tool_output unread (over {MAX_TOOL_INPUT_BYTES} bytes or {MAX_TOOL_INPUT_DEPTH} levels deep): withheld, as {} must read it",
                rule.key
            ),
            budget_spent: false,
        };
    }
    let mut ask = None;
    match ran.outcome {
        Outcome::Block | Outcome::Ask if warn => {
            let verb = if ran.outcome == Outcome::Block {
                "would block"
            } else {
                "would ask"
            };
            let why = ran.reason.map(str::trim).filter(|r| !r.is_empty());
            return Step::Continue {
                context: Some(match why {
                    Some(why) => format!("warning: {} {verb}: {why}", rule.key),
                    None => format!("warning: {} {verb}", rule.key),
                }),
                rewrite: None,
                mutation_denied: false,
                ask: None,
                output_rewrite: None,
            };
        }
        Outcome::Block => return block(ran.reason),
        Outcome::Error
            if rule.on_error == OnError::Allow
                && ran.error_kind.is_some_and(ErrorKind::is_outage) =>
        {
            return Step::NOTHING;
        }
        Outcome::Error => return block(ran.reason),
        Outcome::Timeout if ran.cut_by_budget => {
            return Step::Block {
                reason: CHAIN_BUDGET_EXCEEDED.to_string(),
                budget_spent: true,
            };
        }
        Outcome::Timeout if rule.on_timeout == OnTimeout::Block => return block(ran.reason),
        Outcome::Timeout => return Step::NOTHING,
        Outcome::Ask => {
            ask = Some(
                ran.reason
                    .map(str::to_owned)
                    .unwrap_or_else(|| format!("{} asks for approval", rule.key)),
            );
        }
        Outcome::Allow => {}
    }
    let context = ran.additional_context.filter(|c| !c.is_empty());
    let (rewrite, mutation_denied) = match ran.updated_input {
        None => (None, false),
        // A warning hook never changes the call.
        Some(_) if warn => (None, false),
        Some(_) if !rule.master => (None, true),
        Some(new_input) if new_input.is_object() => {
            // A rewrite over the caps is refused like any oversized input.
            if let Err(e) = crate::event::check_tool_input(&new_input) {
                return Step::Block {
                    reason: format!("updatedInput refused: {e}"),
                    budget_spent: false,
                };
            }
            (Some(new_input), false)
        }
        // Not an object: not a tool input; ignored.
        Some(_) => (None, false),
    };
    let output_rewrite = match ran.updated_tool_output {
        None => None,
        Some(_) if warn || event.event != agenthooks_crds::HookEvent::PostToolUse => None,
        // Only the master namespace rewrites; a tenant's hook that wanted the output
        // changed has said it must not be shown as it is: withheld (a block it may give).
        Some(_) if !rule.master => {
            return Step::Block {
                reason: format!(
                    "updatedToolOutput refused: only a hook in the master namespace may rewrite a tool's output, and {} wanted it changed: withheld",
                    rule.key
                ),
                budget_spent: false,
            };
        }
        Some(new_output) => {
            // In another shape the runtime would drop it and show the original.
            if let Err(e) = super::output_shape::check(event.tool_output.as_ref(), &new_output) {
                return Step::Block {
                    reason: format!("updatedToolOutput refused: {e}"),
                    budget_spent: false,
                };
            }
            if let Err(e) = crate::event::check_tool_output(&new_output) {
                return Step::Block {
                    reason: format!("updatedToolOutput refused: {e}"),
                    budget_spent: false,
                };
            }
            Some(new_output)
        }
    };
    Step::Continue {
        context,
        rewrite,
        mutation_denied,
        ask,
        output_rewrite,
    }
}

/// The contexts of the allowing hooks, in order, joined by a blank line (CONTRACT §4.4);
/// `None` when there are none.
pub fn joined_contexts(contexts: &[String]) -> Option<String> {
    (!contexts.is_empty()).then(|| contexts.join("\n\n"))
}

#[cfg(test)]
mod tests;
