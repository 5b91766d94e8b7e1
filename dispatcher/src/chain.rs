//! The blocking chain and the non-blocking path (CONTRACT §4; seed "Concepts").
//!
//! Blocking events: hooks run one at a time in resolution order under a chain budget
//! (10 s); the first `block`, `error`, blocking timeout or budget exhaustion stops the
//! chain with `block` (fail-closed). Non-blocking events answer `allow` at once and run
//! their hooks in the background, bounded, without a chain budget.

use std::sync::Arc;
use std::time::{Duration, Instant};

use agenthooks_crds::agenthook::OnTimeout;
use bytes::Bytes;
use serde::Serialize;
use serde_json::Value;

use crate::audit::sink::RunRecord;
use crate::event::{Event, MAX_LOOP_DEPTH};
use crate::handlers::Outcome;
use crate::hookset::{HOOK_UNAVAILABLE, HookSet};
use crate::runner::{Engine, HookRun, LazyScope, filters_match, run_hook, run_matched};

/// `allow` or `block`: the answer to the agent runtime.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Verdict {
    Allow,
    Block,
}

/// The response of `POST /v1/dispatch` (DESIGN "Dispatch API"; CONTRACT §4.4–4.6).
#[derive(Debug, Clone, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Decision {
    #[serde(rename = "event_id")]
    pub event_id: String,
    pub decision: Verdict,
    /// Why it blocked: the deciding hook's reason, or `LoopDepthExceeded`,
    /// `ChainBudgetExceeded`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// `namespace/name` of the hook that decided a block.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub deciding_hook: Option<String>,
    /// Contexts of allowing hooks, in order, joined by a blank line.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub additional_context: Option<String>,
    /// The rewritten `tool_input`, when a master-namespace hook rewrote it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub updated_input: Option<Value>,
    /// Each hook run, in order.
    pub hooks: Vec<HookRun>,
}

impl Decision {
    fn allow(event_id: &str) -> Decision {
        Decision {
            event_id: event_id.to_string(),
            decision: Verdict::Allow,
            reason: None,
            deciding_hook: None,
            additional_context: None,
            updated_input: None,
            hooks: Vec::new(),
        }
    }
}

/// Reason of a block for sub-agent depth over [`MAX_LOOP_DEPTH`] (CONTRACT §1.4).
pub const LOOP_DEPTH_EXCEEDED: &str = "LoopDepthExceeded";
/// Reason of a block when the chain budget runs out (CONTRACT §4.3).
pub const CHAIN_BUDGET_EXCEEDED: &str = "ChainBudgetExceeded";

/// Depth rule of CONTRACT §1.4; logs and counts. `true` when no hook may run.
fn depth_exceeded(engine: &Engine, event: &Event) -> bool {
    if event.depth > MAX_LOOP_DEPTH {
        engine.metrics.loop_depth_exceeded.inc();
        tracing::warn!(
            target: "security.hook.loop_depth_exceeded",
            depth = event.depth, max = MAX_LOOP_DEPTH, event = %event.event, session_id = %event.session_id,
            "security.hook.loop_depth_exceeded"
        );
        return true;
    }
    false
}

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

/// Decides a blocking event (CONTRACT §4). `event.event` should be blocking; a
/// non-blocking event passed here is run the same way, which `check` uses to show
/// every hook's outcome.
pub async fn decide(engine: &Engine, set: &HookSet, mut event: Event) -> Decision {
    let started = Instant::now();
    let mut decision = Decision::allow(&event.event_id);
    if depth_exceeded(engine, &event) {
        if event.event.is_blocking() {
            decision.decision = Verdict::Block;
            decision.reason = Some(LOOP_DEPTH_EXCEEDED.into());
        }
        return decision;
    }
    if let Some(refused) = refuse_unavailable(engine, set, &event) {
        return refused;
    }
    let deadline = started + engine.chain_budget;
    // Serialized when the first hook matches, again after an input rewrite.
    let mut event_json: Option<Bytes> = None;
    let mut scope = LazyScope::default();
    let mut contexts: Vec<String> = Vec::new();
    // The agent id is held by the resolver while the event may be rewritten.
    let agent = event.agent_id.clone();
    for hook in set.resolve(event.event, &event.tenant_id, &agent) {
        // Filters first: a hook that does not match costs no clock read and no I/O.
        let filter = match filters_match(hook, &event, &mut scope) {
            Ok(false) => continue,
            Ok(true) => Ok(()),
            Err(e) => Err(e),
        };
        let now = Instant::now();
        let left = deadline.saturating_duration_since(now);
        if left.is_zero() {
            decision.decision = Verdict::Block;
            decision.reason = Some(CHAIN_BUDGET_EXCEEDED.into());
            decision.deciding_hook = Some(hook.key.clone());
            // The hook that found no budget left is listed, so the response names it.
            decision.hooks.push(HookRun {
                hook: hook.key.clone(),
                handler: hook.spec.handler.type_.as_str(),
                decision: Outcome::Timeout,
                duration_ms: 0.0,
                reason: Some(CHAIN_BUDGET_EXCEEDED.into()),
                error_kind: Some("chain_budget"),
                mutation_denied: false,
                prompt: None,
                result: None,
            });
            // And it gets its audit row (decision `timeout`), as the response lists it.
            if engine.audit.is_enabled() {
                let json = event_json.get_or_insert_with(|| {
                    Bytes::from(serde_json::to_vec(&event).expect("an event serializes"))
                });
                engine.audit.record(RunRecord::not_run(
                    hook,
                    &event,
                    json,
                    Outcome::Timeout,
                    "ChainBudgetExceeded: the chain budget was spent before this hook could run",
                ));
            }
            break;
        }
        let own = Duration::from_millis(hook.compiled.timeout_ms);
        let cut_by_budget = left < own;
        let timeout = own.min(left);
        let json = event_json.get_or_insert_with(|| {
            Bytes::from(serde_json::to_vec(&event).expect("an event serializes"))
        });
        let mut run = run_matched(engine, hook, &event, json, timeout, filter).await;
        let result = run.result.take().expect("run_matched fills result");
        let stop = match run.decision {
            Outcome::Allow => false,
            Outcome::Block | Outcome::Error => true,
            Outcome::Timeout if cut_by_budget => {
                run.reason = Some(CHAIN_BUDGET_EXCEEDED.into());
                true
            }
            Outcome::Timeout => hook.compiled.on_timeout == OnTimeout::Block,
        };
        if stop {
            decision.decision = Verdict::Block;
            decision.reason = run
                .reason
                .clone()
                .or_else(|| Some(format!("blocked by {}", hook.key)));
            decision.deciding_hook = Some(hook.key.clone());
            decision.hooks.push(run);
            break;
        }
        if run.decision == Outcome::Allow {
            if let Some(ctx) = result.additional_context.filter(|c| !c.is_empty()) {
                contexts.push(ctx);
            }
            if let Some(new_input) = result.updated_input {
                if !hook.compiled.master {
                    // CONTRACT §4.5: only master-namespace hooks may rewrite input.
                    run.mutation_denied = true;
                    engine.metrics.mutation_denied.inc();
                    tracing::warn!(target: "hooks.mutation_denied", hook = %hook.key, event_id = %event.event_id, "hooks.mutation_denied");
                } else if new_input.is_object() {
                    let previous = std::mem::replace(&mut event.tool_input, new_input);
                    if let Err(e) = event.check() {
                        // A rewrite over the caps is refused like any oversized input.
                        event.tool_input = previous;
                        decision.decision = Verdict::Block;
                        decision.reason = Some(format!("updatedInput refused: {e}"));
                        decision.deciding_hook = Some(hook.key.clone());
                        decision.hooks.push(run);
                        break;
                    }
                    decision.updated_input = Some(event.tool_input.clone());
                    event_json = None;
                    scope.reset();
                }
            }
        }
        decision.hooks.push(run);
    }
    if decision.decision == Verdict::Allow && !contexts.is_empty() {
        decision.additional_context = Some(contexts.join("\n\n"));
    }
    engine
        .metrics
        .record_decision(event.event, started.elapsed());
    decision
}

/// Answers a non-blocking event at once and runs its hooks in the background, each in
/// its own task, at most [`crate::runner::BACKGROUND_SLOTS`] in flight (CONTRACT §1.2).
/// Returns the `allow` decision and the number of hook runs started.
pub fn observe(engine: &Engine, set: Arc<HookSet>, event: Event) -> (Decision, usize) {
    let decision = Decision::allow(&event.event_id);
    if depth_exceeded(engine, &event) {
        return (decision, 0);
    }
    let _ = refuse_unavailable(engine, &set, &event);
    let event = Arc::new(event);
    let event_json = Bytes::from(serde_json::to_vec(&*event).expect("an event serializes"));
    let mut started = 0;
    for hook in set.resolve(event.event, &event.tenant_id, &event.agent_id) {
        let Ok(permit) = Arc::clone(&engine.background).try_acquire_owned() else {
            engine.metrics.background_shed.inc();
            tracing::warn!(hook = %hook.key, event = %event.event, "background hook queue full; run shed");
            continue;
        };
        let (engine, hook, event, event_json) = (
            engine.clone(),
            Arc::clone(hook),
            Arc::clone(&event),
            event_json.clone(),
        );
        started += 1;
        tokio::spawn(async move {
            let mut scope = LazyScope::default();
            let timeout = Duration::from_millis(hook.compiled.timeout_ms);
            let _ = run_hook(&engine, &hook, &event, &event_json, &mut scope, timeout).await;
            drop(permit);
        });
    }
    (decision, started)
}

#[cfg(test)]
mod tests;
