//! The blocking chain and the non-blocking path (CONTRACT §4; seed "Concepts").
//!
//! Blocking events: hooks run one at a time in resolution order under a chain budget
//! (10 s); the first `block`, `error`, blocking timeout or budget exhaustion stops the
//! chain with `block` (fail-closed). Non-blocking events answer `allow` at once and run
//! their hooks in the background, bounded, without a chain budget.

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use serde::Serialize;
use serde_json::Value;

use crate::decision::chain::{self as rules, Depth, HookRule, Ran, Slot, Step};
use crate::decision::outcome::ErrorKind;
use crate::decision::outcome::Outcome;
use crate::event::Event;
use crate::hookset::{HOOK_UNAVAILABLE, HookSet, LoadedHook};
use crate::observer::{InPlace, Live, RunObserver};
use crate::runner::{
    Engine, HookRun, LazyScope, Matcher, filters_match, run_matched, spawn_background,
};

/// `allow`, `ask` or `block`: the answer to the agent runtime. `ask` reaches only a
/// caller that accepts it ([`Decision::for_caller`]); the others get `block`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Verdict {
    Allow,
    Block,
    /// A hook wants a person to decide, and no hook blocked.
    Ask,
}

impl Verdict {
    /// The lowercase word of the response: `allow`, `block` or `ask`.
    pub fn as_str(self) -> &'static str {
        match self {
            Verdict::Allow => "allow",
            Verdict::Block => "block",
            Verdict::Ask => "ask",
        }
    }
}

/// The response of `POST /v1/dispatch` (DESIGN "Dispatch API"; CONTRACT §4.4–4.6).
#[derive(Debug, Clone, Serialize, PartialEq, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Decision {
    /// The event's `event_id` (generated when the request had none).
    #[serde(rename = "event_id")]
    pub event_id: String,
    /// `allow`, `block`, or `ask` (for a caller that accepts it).
    pub decision: Verdict,
    /// Why it blocked or asks: the deciding hook's reason, or `LoopDepthExceeded`,
    /// `ChainBudgetExceeded`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// `namespace/name` of the hook that decided a block or an ask.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub deciding_hook: Option<String>,
    /// Contexts of allowing hooks, in order, joined by a blank line.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub additional_context: Option<String>,
    /// The rewritten `tool_input`, when a master-namespace hook rewrote it.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(with = "Option<serde_json::Map<String, Value>>")]
    pub updated_input: Option<Value>,
    /// `post_tool_use`: the rewritten `tool_output` (what the model should see instead),
    /// when a master-namespace `blocking: true` hook rewrote it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub updated_tool_output: Option<Value>,
    /// Each hook run, in order.
    pub hooks: Vec<HookRun>,
}

impl Decision {
    /// `allow`, no hook run yet.
    pub fn allow(event_id: &str) -> Decision {
        Decision {
            event_id: event_id.to_string(),
            decision: Verdict::Allow,
            reason: None,
            deciding_hook: None,
            additional_context: None,
            updated_input: None,
            updated_tool_output: None,
            hooks: Vec::new(),
        }
    }

    /// The decision as a caller gets it: `ask` stays `ask` for a caller that accepts it
    /// (`accept: ["ask"]`, a native endpoint whose runtime can ask) and is `block`, with
    /// the same reason and deciding hook, for any other — fail-closed: a caller that
    /// cannot ask a person must not run the call.
    pub fn for_caller(mut self, accepts_ask: bool) -> Decision {
        if self.decision == Verdict::Ask && !accepts_ask {
            self.decision = Verdict::Block;
        }
        self
    }
}

pub use crate::decision::chain::{CHAIN_BUDGET_EXCEEDED, LOOP_DEPTH_EXCEEDED};

/// The unavailable-hook rule of CONTRACT §10.4 for one event: when a hook this
/// dispatcher could not load could apply to it ([`HookSet::unavailable_for`]), logs
/// `security.hook.hook_unavailable`, counts it, and for a blocking event returns the
/// `block` decision (reason [`HOOK_UNAVAILABLE`], that hook deciding) to answer before any
/// hook runs. A non-blocking event gets `None`: the other hooks run, nothing runs for
/// the unavailable one.
pub fn refuse_unavailable(engine: &Engine, set: &HookSet, event: &Event) -> Option<Decision> {
    let hook = set.unavailable_for(event.event, &event.tenant_id, &event.agent_id)?;
    let blocking = event.event.is_blocking();
    engine
        .metrics
        .hook_unavailable_events
        .with_label_values(&[
            event.event.as_str(),
            if blocking { "blocked" } else { "skipped" },
        ])
        .inc();
    tracing::warn!(
        target: "security.hook.hook_unavailable",
        hook = %hook.key, generation = hook.generation, event = %event.event,
        tenant = %event.tenant_id, event_id = %event.event_id, blocked = blocking, error = %hook.error,
        "security.hook.hook_unavailable"
    );
    blocking.then(|| Decision {
        decision: Verdict::Block,
        reason: Some(HOOK_UNAVAILABLE.into()),
        deciding_hook: Some(hook.key.clone()),
        ..Decision::allow(&event.event_id)
    })
}

/// Decides an event the caller waits for (CONTRACT §4): a blocking event, or a
/// non-blocking one with `blocking: true` hooks ([`waits_for`]); the hooks it does not wait
/// for (and `dryrun` hooks) run in the background.
pub async fn decide(engine: &Engine, set: &HookSet, event: Event) -> Decision {
    decide_with(engine, &Live(engine), set, event).await
}

/// [`decide`] with every hook run in place, none in the background (`check`: the decision
/// printed lists each hook's outcome).
pub async fn decide_in_place(engine: &Engine, set: &HookSet, event: Event) -> Decision {
    decide_with(engine, &InPlace(engine), set, event).await
}

/// Whether the caller waits for hooks on `event`: a blocking event always; a
/// non-blocking one when a hook declared `blocking: true` selects it (issue 16).
pub fn waits_for(set: &HookSet, event: &Event) -> bool {
    waits_for_any(
        event,
        set.select(event.event, &event.tenant_id, &event.agent_id, event.tool())
            .map(|h| &**h),
    )
}

/// [`waits_for`]'s rule over the hooks that select `event` (a dry run's one hook).
pub fn waits_for_any<'a>(event: &Event, mut hooks: impl Iterator<Item = &'a LoadedHook>) -> bool {
    event.event.is_blocking() || (event.event.may_wait() && hooks.any(|h| h.compiled.waits))
}

/// [`decide`] under `observer`: the hooks of `set` that `event` selects, through
/// [`drive`]. Dispatch is `decide_with(engine, &Live(engine), ..)`; `check` gives
/// [`InPlace`], a policy test ([`crate::suite`]) [`crate::observer::Stubbed`].
pub async fn decide_with<O: RunObserver>(
    engine: &Engine,
    observer: &O,
    set: &HookSet,
    event: Event,
) -> Decision {
    // A hook this dispatcher could not load blocks what it could apply to (CONTRACT §10.4),
    // after the depth rule (the driver's first).
    if rules::depth(&event) == Depth::Within
        && let Some(refused) = refuse_unavailable(engine, set, &event)
    {
        return refused;
    }
    // The agent id and tool name are held by the resolver while the event may be
    // rewritten (a rewrite changes tool_input only).
    let agent = event.agent_id.clone();
    let tool = event.tool().map(str::to_string);
    let hooks = set.select(event.event, &event.tenant_id, &agent, tool.as_deref());
    drive(
        engine,
        observer,
        hooks,
        event,
        Filters::Apply(Matcher::Applied),
    )
    .await
}

/// Whether the driver applies each hook's `matcher` and `ifExpr`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Filters {
    /// As dispatch does: a hook whose filters do not select the event is skipped, a CEL
    /// error is the hook's `error`. [`Matcher::Applied`] for hooks that come from
    /// [`HookSet::select`], which applied their `matcher` already.
    Apply(Matcher),
    /// Run every hook given (a forced dry run).
    Skip,
}

/// The one driver of the blocking chain (CONTRACT §4): runs `hooks` in order on `event`
/// under the pure rules of [`crate::decision::chain`], awaiting each handler, and hands
/// every run to `observer`. Dispatch ([`decide`]) and the dry run
/// ([`crate::dry_run::dry_run`]) are this function with different observers.
pub async fn drive<'h, O: RunObserver>(
    engine: &Engine,
    observer: &O,
    hooks: impl IntoIterator<Item = &'h Arc<LoadedHook>>,
    mut event: Event,
    filters: Filters,
) -> Decision {
    let started = Instant::now();
    let mut decision = Decision::allow(&event.event_id);
    if let Depth::Exceeded { blocks } = rules::depth(&event) {
        observer.depth_exceeded(&event);
        if blocks {
            decision.decision = Verdict::Block;
            decision.reason = Some(LOOP_DEPTH_EXCEEDED.into());
        }
        return decision;
    }
    let deadline = started + engine.chain_budget;
    // Serialized when the first hook matches, again after an input rewrite.
    let mut event_json: Option<Bytes> = None;
    let mut scope = LazyScope::default();
    let mut contexts: Vec<String> = Vec::new();
    let mut asked: Option<(String, String)> = None;
    // The event as hooks run off the decision's path see it: made once per version.
    let mut shadow_event: Option<Arc<Event>> = None;
    for hook in hooks {
        // Filters first: a hook that does not match costs no clock read and no I/O.
        let filter = match filters {
            Filters::Skip => Ok(()),
            Filters::Apply(matcher) => match filters_match(hook, &event, &mut scope, matcher) {
                Ok(false) => continue,
                Ok(true) => Ok(()),
                Err(e) => Err(e),
            },
        };
        let own = Duration::from_millis(hook.compiled.timeout_ms);
        let json = event_json.get_or_insert_with(|| {
            Bytes::from(serde_json::to_vec(&event).expect("an event serializes"))
        });
        let rule = HookRule {
            key: &hook.key,
            master: hook.compiled.master,
            on_timeout: hook.compiled.on_timeout,
            enforcement: hook.compiled.enforcement_action,
            on_error: hook.compiled.on_error,
            waits: hook.compiled.waits,
        };
        // A dryrun hook, or one the event does not wait for (a non-blocking event's hook
        // without `blocking: true`), never changes the answer: where the observer can, it
        // runs off the decision's critical path, on the event as this hook would have seen
        // it (one shared copy per version of the event).
        if !rule.decides() && filter.is_ok() {
            let shared = shadow_event.get_or_insert_with(|| Arc::new(event.clone()));
            if observer.shadow(hook, shared, json) {
                continue;
            }
        }
        let left = deadline.saturating_duration_since(Instant::now());
        let (timeout, cut_by_budget) = match rules::slot(left, own) {
            Slot::Run {
                timeout,
                cut_by_budget,
            } => (timeout, cut_by_budget),
            // A dryrun hook never changes the answer, not even by finding no budget left;
            // nor does a hook the event does not wait for.
            Slot::Spent if !rule.decides() => continue,
            Slot::Spent => {
                decision.decision = Verdict::Block;
                decision.reason = Some(CHAIN_BUDGET_EXCEEDED.into());
                decision.deciding_hook = Some(hook.key.clone());
                // The hook that found no budget left is listed, so the response names it,
                // and it gets its audit row (decision `timeout`).
                decision.hooks.push(HookRun {
                    hook: hook.key.clone(),
                    handler: hook.spec.handler.type_.as_str(),
                    decision: Outcome::Timeout,
                    duration_ms: 0.0,
                    reason: Some(CHAIN_BUDGET_EXCEEDED.into()),
                    error_kind: Some(ErrorKind::ChainBudget),
                    mutation_denied: false,
                    prompt: None,
                    enforcement_action: hook.compiled.enforcement_action,
                    result: None,
                });
                observer.not_run(hook, &event, json, CHAIN_BUDGET_EXCEEDED);
                break;
            }
        };
        // Boxed: a handler's future is large (kilobytes), and inline it would make every
        // decision's future that large, copied whole even when no hook runs.
        let mut run = Box::pin(run_matched(
            engine,
            observer,
            hook,
            &event,
            json,
            (timeout, cut_by_budget),
            filter,
        ))
        .await;
        let result = run.result.take().expect("run_matched fills result");
        let ran = Ran {
            outcome: result.outcome,
            reason: result.reason.as_deref(),
            error_kind: result.error_kind,
            cut_by_budget,
            additional_context: result.additional_context.clone(),
            updated_input: result.updated_input.clone(),
            updated_tool_output: result.updated_tool_output.clone(),
        };
        let step = rules::step(&rule, ran, &event);
        run.result = Some(result);
        match step {
            Step::Block {
                reason,
                budget_spent,
            } => {
                if budget_spent {
                    run.reason = Some(CHAIN_BUDGET_EXCEEDED.into());
                }
                decision.decision = Verdict::Block;
                decision.reason = Some(reason);
                decision.deciding_hook = Some(hook.key.clone());
                decision.hooks.push(run);
                break;
            }
            Step::Continue {
                context,
                rewrite,
                mutation_denied,
                ask,
                output_rewrite,
            } => {
                contexts.extend(context);
                if let Some(reason) = ask
                    && asked.is_none()
                {
                    asked = Some((reason, hook.key.clone()));
                }
                if mutation_denied {
                    run.mutation_denied = true;
                    observer.mutation_denied(hook, &event);
                }
                if let Some(new_input) = rewrite {
                    event.tool_input = new_input;
                    event.refresh_tool();
                    decision.updated_input = Some(event.tool_input.clone());
                    event_json = None;
                    shadow_event = None;
                    scope.reset();
                }
                if let Some(new_output) = output_rewrite {
                    decision.updated_tool_output = Some(new_output.clone());
                    event.tool_output = Some(new_output);
                    event_json = None;
                    shadow_event = None;
                }
            }
        }
        decision.hooks.push(run);
    }
    if decision.decision == Verdict::Allow {
        // block beats ask beats allow: the first asking hook decides, if nothing blocked.
        if let Some((reason, hook)) = asked {
            decision.decision = Verdict::Ask;
            decision.reason = Some(reason);
            decision.deciding_hook = Some(hook);
        }
        decision.additional_context = rules::joined_contexts(&contexts);
    }
    observer.decided(&event, started.elapsed());
    decision
}

/// Answers a non-blocking event at once and runs its hooks in the background, each in
/// its own task, at most [`crate::runner::BACKGROUND_SLOTS`] in flight (CONTRACT §1.2).
/// Returns the `allow` decision and the number of hook runs started.
pub fn observe(engine: &Engine, set: Arc<HookSet>, event: Event) -> (Decision, usize) {
    let decision = Decision::allow(&event.event_id);
    if let Depth::Exceeded { .. } = rules::depth(&event) {
        Live(engine).depth_exceeded(&event);
        return (decision, 0);
    }
    let _ = refuse_unavailable(engine, &set, &event);
    let event = Arc::new(event);
    let event_json = Bytes::from(serde_json::to_vec(&*event).expect("an event serializes"));
    let mut started = 0;
    for hook in set.select(event.event, &event.tenant_id, &event.agent_id, event.tool()) {
        started += usize::from(spawn_background(engine, hook, &event, &event_json));
    }
    (decision, started)
}

#[cfg(test)]
mod tests;
