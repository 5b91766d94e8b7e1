//! One hook run: `matcher` on `tool_name`, then `ifExpr`, then the handler under the
//! hook's timeout (CONTRACT §4.1–4.2, §5).

use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::{Duration, Instant};

use agenthooks_crds::Edition;
use agenthooks_crds::agenthook::{EnforcementAction, HandlerType};
use agenthooks_crds::expr::{Bindings, EvalScope, IfExpr};
use agenthooks_crds::rules::breaker::Admission;
use agenthooks_crds::sealed::SealKey;
use bytes::Bytes;
use futures::FutureExt;
use serde::Serialize;

use crate::audit::sink::AuditSink;
use crate::budget::Budgets;
use crate::decision::outcome::ErrorKind;
use crate::event::Event;
use crate::handlers::http::HttpCaller;
use crate::handlers::prompt::{PromptEvaluator, PromptMetadata};
use crate::handlers::{HandlerResult, Outcome, command};
use crate::hookset::{LoadedHook, open_headers};
use crate::metrics::Metrics;
use crate::observer::{Live, RunObserver};
use crate::report::outbox::Outbox;
use crate::telemetry::Telemetry;

/// What every hook run needs from the process: one per dispatcher.
#[derive(Clone)]
pub struct Engine {
    pub http: HttpCaller,
    pub edition: Edition,
    /// Opens sealed header values at send time.
    pub seal_key: SealKey,
    pub metrics: Metrics,
    /// Chain budget of a blocking event (seed: 10 s).
    pub chain_budget: Duration,
    /// Bounds the non-blocking hook runs in flight.
    pub background: Arc<tokio::sync::Semaphore>,
    /// Trips and execution counters for the operator (inactive in standalone mode).
    pub outbox: Arc<Outbox>,
    /// Token budget accounting for handlers that call a paid model (CONTRACT §5.5):
    /// reserve before the call, settle after. Unconfigured (every reserve refused,
    /// `BudgetUnavailable`) until `main` sets the remote or local backend.
    pub budgets: Budgets,
    /// The prompt handler: providers, decision cache, per-turn counts (CONTRACT §5
    /// prompt). Unconfigured (every prompt hook blocks) until `main` loads a providers
    /// file.
    pub prompt: PromptEvaluator,
    /// A span per hook run (CONTRACT §8.1). Disabled (no span, one branch per run)
    /// unless `main` installed an OTLP exporter.
    pub telemetry: Telemetry,
    /// The audit trail: one `hook_executions` row per hook run, written off the decision
    /// path (CONTRACT §7). Disabled (nothing recorded) unless `main` started a writer.
    pub audit: AuditSink,
    /// Where command hooks run (CONTRACT §10.1): here under the per-run supervisor, or
    /// in the command runner container (`--command-runner unix:PATH`).
    pub command_runner: crate::sandbox::CommandRunner,
    /// Where an `ask` of a hook with `spec.approval` becomes an approval (synced mode:
    /// the operator); `None` refuses such asks as unavailable.
    pub approvals: Option<Arc<crate::approvals::ApprovalClient>>,
}

/// Chain budget of a blocking event (seed "Safeguards summary": 10 s, not overridable).
pub const CHAIN_BUDGET: Duration = Duration::from_secs(10);
/// Non-blocking hook runs in flight at most; past it new runs are shed and counted.
pub const BACKGROUND_SLOTS: usize = 1024;

impl Engine {
    /// An engine with the seed's chain budget.
    pub fn new(http: HttpCaller, edition: Edition, seal_key: SealKey) -> Engine {
        Engine {
            http,
            edition,
            seal_key,
            metrics: Metrics::new(),
            chain_budget: CHAIN_BUDGET,
            background: Arc::new(tokio::sync::Semaphore::new(BACKGROUND_SLOTS)),
            outbox: Arc::new(Outbox::default()),
            budgets: Budgets::unconfigured(),
            prompt: PromptEvaluator::unconfigured(),
            telemetry: Telemetry::disabled(),
            audit: AuditSink::disabled(),
            command_runner: Default::default(),
            approvals: None,
        }
    }
}

/// One hook's line in the response (CONTRACT §4.6).
#[derive(Debug, Clone, Serialize, PartialEq, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct HookRun {
    /// `namespace/name`.
    pub hook: String,
    /// `command`, `http` or `prompt`.
    pub handler: &'static str,
    /// What the run came to: `allow|block|error|timeout`.
    pub decision: Outcome,
    /// Wall time of the run in milliseconds.
    pub duration_ms: f64,
    /// The handler's reason (a block's or an error's).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Why an `error` or a `timeout`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error_kind: Option<ErrorKind>,
    /// `updatedInput` was offered and dropped: by a hook outside the master namespace
    /// (CONTRACT §4.5), or by a prompt judge not allowed to rewrite (§5 prompt.2).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub mutation_denied: bool,
    /// A prompt run's model, tokens, `injectionDetected` and `cacheHit`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub prompt: Option<PromptMetadata>,
    /// The hook's `enforcementAction` when it is not `enforce`: `decision` is then what the
    /// hook would have decided, and did not (`dryrun`) or only as a warning (`warn`).
    #[serde(skip_serializing_if = "is_enforce")]
    #[schemars(with = "Option<EnforcementAction>")]
    pub enforcement_action: EnforcementAction,
    #[serde(skip)]
    pub result: Option<HandlerResult>,
}

/// The CEL values of one event, converted only as its hooks' `ifExpr`s read them
/// ([`EvalScope`]); reset when `tool_input` is rewritten.
#[derive(Debug, Default)]
pub struct LazyScope(EvalScope);

impl LazyScope {
    /// Drops the converted values (after `tool_input` changed).
    pub fn reset(&mut self) {
        self.0.reset();
    }

    /// Evaluates `expr` on `event` (CONTRACT §4.2).
    pub fn evaluate(&mut self, expr: &IfExpr, event: &Event) -> Result<bool, String> {
        let bindings = Bindings {
            tool_name: event.tool().unwrap_or(""),
            tool_input: &event.tool_input,
            depth: event.depth,
            facts: event.tool.as_ref(),
        };
        expr.evaluate(&bindings, &mut self.0)
    }
}

/// Whether [`filters_match`] tests the hook's `matcher`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Matcher {
    /// Test it.
    Test,
    /// It was applied already ([`crate::hookset::HookSet::select`]).
    Applied,
}

/// Whether the hook's filters select this event (CONTRACT §3.3, §4.2). `Err` is a CEL
/// evaluation error or non-boolean result: an error outcome for the hook.
pub fn filters_match(
    hook: &LoadedHook,
    event: &Event,
    scope: &mut LazyScope,
    matcher: Matcher,
) -> Result<bool, String> {
    if let (Matcher::Test, Some(re)) = (matcher, &hook.compiled.matcher) {
        match event.tool() {
            Some(tool) if re.is_match(tool) => {}
            _ => return Ok(false),
        }
    }
    let kinds = &hook.compiled.tool_kinds;
    if !kinds.is_empty() && !event.tool.as_ref().is_some_and(|t| kinds.contains(&t.kind)) {
        return Ok(false);
    }
    match &hook.compiled.if_expr {
        Some(expr) => scope.evaluate(expr, event),
        None => Ok(true),
    }
}

/// Runs one hook whose filters matched, with `timeout` (the hook's own, cut to what is
/// left of the chain budget). Never panics outward: a panic in a handler is an error.
pub async fn run_handler(
    engine: &Engine,
    hook: &LoadedHook,
    event: &Event,
    event_json: &Bytes,
    timeout: Duration,
) -> HandlerResult {
    let fut = async {
        match hook.spec.handler.type_ {
            HandlerType::Command => {
                // Defense in depth (seed "Edition gating"): never spawn on Standard,
                // whatever the snapshot says.
                if engine.edition == Edition::Standard {
                    return HandlerResult::error(
                        ErrorKind::EditionForbidsCommand,
                        "EditionForbidsCommand: the command handler never runs on the Standard edition",
                    );
                }
                let Some(c) = &hook.spec.handler.command else {
                    return HandlerResult::error(ErrorKind::BadSpec, "handler.command is missing");
                };
                if c.dialect == agenthooks_crds::agenthook::CommandDialect::ClaudeCode {
                    let payload = crate::dialect::claude_code_payload(event);
                    let stdin = serde_json::to_vec(&payload).expect("a payload serializes");
                    return command::run(&engine.command_runner, c, &stdin, timeout).await;
                }
                command::run(&engine.command_runner, c, event_json, timeout).await
            }
            HandlerType::Http => {
                let Some(h) = &hook.spec.handler.http else {
                    return HandlerResult::error(ErrorKind::BadSpec, "handler.http is missing");
                };
                let headers = match open_headers(hook, &engine.seal_key) {
                    Ok(h) => h,
                    Err(e) => return HandlerResult::error(ErrorKind::HeaderUnseal, e),
                };
                engine
                    .http
                    .call(&h.url, &headers, event_json.clone(), timeout)
                    .await
            }
            HandlerType::Prompt => {
                let Some(p) = &hook.spec.handler.prompt else {
                    return HandlerResult::error(ErrorKind::BadSpec, "handler.prompt is missing");
                };
                engine
                    .prompt
                    .evaluate(hook, p, event, timeout, &engine.budgets, &engine.metrics)
                    .await
            }
        }
    };
    guarded(fut, timeout).await
}

/// A safety net over a handler's own timeout handling (250 ms past `timeout` it is a
/// `timeout`), and over panics (an `error`, kind `panic`). Every handler run goes
/// through it, dry runs included.
pub(crate) async fn guarded(
    fut: impl std::future::Future<Output = HandlerResult>,
    timeout: Duration,
) -> HandlerResult {
    let guarded = AssertUnwindSafe(fut).catch_unwind();
    match tokio::time::timeout(timeout + Duration::from_millis(250), guarded).await {
        Ok(Ok(r)) => r,
        Ok(Err(_)) => HandlerResult::error(ErrorKind::Panic, "the handler panicked"),
        Err(_) => HandlerResult::timeout(timeout.as_millis() as u64),
    }
}

/// Runs a hook whose filters were evaluated (`filter` is `Err` for a CEL error, which is
/// the hook's outcome without running it) with `slot` (its timeout, and whether the chain
/// budget cut it short) under `observer`, which admits the run (the
/// breaker, CONTRACT §6), may answer for the handler (a test's stub,
/// [`RunObserver::stub`]) and records what the run left behind. Dispatch, the dry run and
/// policy tests all come here ([`crate::observer`]).
pub async fn run_matched<O: RunObserver>(
    engine: &Engine,
    observer: &O,
    hook: &Arc<LoadedHook>,
    event: &Event,
    event_json: &Bytes,
    slot: (Duration, bool),
    filter: Result<(), String>,
) -> HookRun {
    let (timeout, cut_by_budget) = slot;
    let (admission, run) = observer.start(hook, event, filter.is_ok());
    let started = Instant::now();
    let result = match (filter, admission) {
        (Err(e), _) => HandlerResult::error(ErrorKind::CelEval, e),
        (Ok(()), Some(Admission::Refuse { .. })) => HandlerResult::circuit_open(),
        (Ok(()), _) => match observer.stub(hook, event) {
            Some(answer) => answer,
            None if O::DRY => run_handler_dry(engine, hook, event, event_json, timeout).await,
            None => run_handler(engine, hook, event, event_json, timeout).await,
        },
    };
    // An `ask` of a hook with `spec.approval` becomes (or finds) an approval: the run is
    // what it stands at (issue 16 point 2; `crate::approvals`). Asking counts within the
    // hook's slot, so the chain budget holds: no answer by its end is unavailable.
    let result = if result.outcome == Outcome::Ask && hook.asks_a_person() {
        let left = timeout.saturating_sub(started.elapsed());
        // Boxed: a rare path that would otherwise grow every decision's future.
        Box::pin(approval_within(
            observer,
            hook,
            event,
            result,
            (left, timeout),
        ))
        .await
    } else {
        result
    };
    let elapsed = started.elapsed();
    // A timeout cut short by the chain budget says nothing of the handler: another hook
    // spent the budget. Its kind says so (the breaker does not count it, §6.1).
    let mut result = result;
    if cut_by_budget && result.outcome == Outcome::Timeout {
        result.error_kind = Some(ErrorKind::ChainBudget);
    }
    observer.finish(run, hook, event, event_json, admission, &result, elapsed);
    HookRun {
        hook: hook.key.clone(),
        handler: hook.spec.handler.type_.as_str(),
        decision: result.outcome,
        duration_ms: (elapsed.as_secs_f64() * 1000.0 * 1000.0).round() / 1000.0,
        reason: result.reason.clone(),
        error_kind: result.error_kind,
        // A prompt judge's dropped rewrite (CONTRACT §5 prompt.2) is a denied mutation too.
        mutation_denied: result
            .metadata
            .prompt
            .as_ref()
            .is_some_and(|p| p.rewrite_denied),
        prompt: result.metadata.prompt.clone(),
        enforcement_action: hook.compiled.enforcement_action,
        result: Some(result),
    }
}

fn is_enforce(a: &EnforcementAction) -> bool {
    *a == EnforcementAction::Enforce
}

/// The handler alone, as [`run_handler`] runs it, except that a prompt hook goes through
/// the evaluator's dry-run mode (no budget, cache or per-turn count). Command and http
/// handlers record nothing themselves.
async fn run_handler_dry(
    engine: &Engine,
    hook: &LoadedHook,
    event: &Event,
    event_json: &Bytes,
    timeout: Duration,
) -> HandlerResult {
    let prompt = match (hook.spec.handler.type_, &hook.spec.handler.prompt) {
        (HandlerType::Prompt, Some(p)) => p,
        _ => return run_handler(engine, hook, event, event_json, timeout).await,
    };
    guarded(
        engine.prompt.evaluate_dry_run(hook, prompt, event, timeout),
        timeout,
    )
    .await
}

/// The outcome of `hook`'s `ask` once its approval is asked for ([`RunObserver::approval`]),
/// within `left` of the hook's slot (`timeout`, named in the refusal): asking counts
/// within the hook's timeout, so the chain budget holds, and no answer by then is
/// `ApprovalUnavailable`.
async fn approval_within<O: RunObserver>(
    observer: &O,
    hook: &Arc<LoadedHook>,
    event: &Event,
    result: HandlerResult,
    (left, timeout): (Duration, Duration),
) -> HandlerResult {
    let ask = result.clone();
    match tokio::time::timeout(left, observer.approval(hook, event, result)).await {
        Ok(r) => r,
        Err(_) => crate::approvals::apply(
            ask,
            Err(format!(
                "no answer within the hook's timeout ({} ms)",
                timeout.as_millis()
            )),
        ),
    }
}

/// Filters, then (when they select the event) [`run_matched`] under the live observer.
/// `None` when skipped. The non-blocking path.
pub async fn run_hook(
    engine: &Engine,
    hook: &Arc<LoadedHook>,
    event: &Event,
    event_json: &Bytes,
    scope: &mut LazyScope,
    matcher: Matcher,
    timeout: Duration,
) -> Option<HookRun> {
    let filter = match filters_match(hook, event, scope, matcher) {
        Ok(false) => return None,
        Ok(true) => Ok(()),
        Err(e) => Err(e),
    };
    Some(
        run_matched(
            engine,
            &Live(engine),
            hook,
            event,
            event_json,
            (timeout, false),
            filter,
        )
        .await,
    )
}

/// Runs `hook` on `event` in its own task, off the caller's path, with the hook's own
/// timeout and its filters (its `matcher` applied already), when one of the
/// [`BACKGROUND_SLOTS`] is free (CONTRACT §1.2). Returns false when the run was shed (counted
/// in `agenthooks_background_shed_total`). Non-blocking events' hooks and `dryrun` hooks
/// run here.
pub fn spawn_background(
    engine: &Engine,
    hook: &Arc<LoadedHook>,
    event: &Arc<Event>,
    event_json: &Bytes,
) -> bool {
    let Ok(permit) = Arc::clone(&engine.background).try_acquire_owned() else {
        engine.metrics.background_shed.inc();
        tracing::warn!(hook = %hook.key, event = %event.event, "background hook queue full; run shed");
        return false;
    };
    let (engine, hook, event, event_json) = (
        engine.clone(),
        Arc::clone(hook),
        Arc::clone(event),
        event_json.clone(),
    );
    tokio::spawn(async move {
        let mut scope = LazyScope::default();
        let timeout = Duration::from_millis(hook.compiled.timeout_ms);
        let _ = run_hook(
            &engine,
            &hook,
            &event,
            &event_json,
            &mut scope,
            Matcher::Applied,
            timeout,
        )
        .await;
        drop(permit);
    });
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn the_guard_turns_a_panic_into_an_error_and_a_hang_into_a_timeout() {
        let r = guarded(async { panic!("boom") }, Duration::from_millis(50)).await;
        assert_eq!(
            (r.outcome, r.error_kind, r.reason.as_deref()),
            (
                Outcome::Error,
                Some(ErrorKind::Panic),
                Some("the handler panicked")
            )
        );
        let r = guarded(std::future::pending(), Duration::from_millis(20)).await;
        assert_eq!(
            (r.outcome, r.error_kind, r.reason.as_deref()),
            (
                Outcome::Timeout,
                Some(ErrorKind::Timeout),
                Some("no answer within 20 ms")
            )
        );
        let r = guarded(async { HandlerResult::allow() }, Duration::from_millis(20)).await;
        assert_eq!(r.outcome, Outcome::Allow);
    }
}
