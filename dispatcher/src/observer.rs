//! The one seam where a hook run has effects (CONVENTIONS "a pure step, one driver, one
//! observer"): the driver ([`crate::chain`], [`crate::runner::run_matched`]) asks the
//! observer before a handler runs and hands it every finished run; everything a run leaves
//! behind — breaker, execution counters, reports to the operator, metrics, span, audit row,
//! logs — happens here and nowhere else.
//!
//! - [`Live`]: dispatch. The breaker admits or refuses the run (CONTRACT §6) and records it;
//!   counters, metrics, span and audit row follow.
//! - [`Dry`]: `POST /v1/test`. The handler always runs (an open breaker is only reported),
//!   prompt hooks run in the evaluator's dry-run mode (no budget, cache or per-turn count),
//!   and nothing is recorded.
//! - [`Stubbed`]: a policy test (`agenthooks-dispatcher test`, [`crate::suite`]). As
//!   [`Dry`], except that a stubbed hook's handler does not run — its stub answers — and
//!   an http or prompt hook without a stub does not reach the network unless allowed.
//!
//! All are static types: the driver is monomorphized for each, so the seam costs dispatch
//! nothing.

use std::sync::Arc;
use std::time::Duration;

use agenthooks_crds::rules::breaker::{Admission, RunClass, Transition};
use bytes::Bytes;

use crate::audit::sink::RunRecord;
use crate::decision::outcome::{HandlerResult, Outcome};
use crate::event::{Event, MAX_LOOP_DEPTH};
use crate::hookset::LoadedHook;
use crate::report::counters::unix_ms_now;
use crate::runner::Engine;
use crate::telemetry::span::HookSpan;

/// What a driver tells about the runs it drives.
pub trait RunObserver {
    /// What is kept from the start of a run to its end (the span).
    type Run;
    /// True for a dry run: prompt handlers run in dry-run mode.
    const DRY: bool;

    /// A hook whose filters matched is about to run on `event`: whether its handler may run
    /// (`None` when a filter errored: no handler, and the breaker is not asked).
    fn start(
        &self,
        hook: &LoadedHook,
        event: &Event,
        filter_ok: bool,
    ) -> (Option<Admission>, Self::Run);

    /// An answer for `hook`'s handler, given instead of running it (a test's stub), or
    /// `None` to run the handler. Asked only once the run was admitted. By default `None`.
    fn stub(&self, hook: &LoadedHook, event: &Event) -> Option<HandlerResult> {
        let _ = (hook, event);
        None
    }

    /// The run ended with `result` after `elapsed`. The effects below are the live
    /// observer's; by default (an observer that records nothing) each does nothing.
    #[allow(clippy::too_many_arguments)]
    fn finish(
        &self,
        run: Self::Run,
        hook: &Arc<LoadedHook>,
        event: &Event,
        event_json: &Bytes,
        admission: Option<Admission>,
        result: &HandlerResult,
        elapsed: Duration,
    ) {
        let _ = (run, hook, event, event_json, admission, result, elapsed);
    }

    /// The chain budget was spent before `hook` could run (the response lists it as a
    /// `timeout`).
    fn not_run(&self, hook: &Arc<LoadedHook>, event: &Event, event_json: &Bytes, reason: &str) {
        let _ = (hook, event, event_json, reason);
    }

    /// An `updatedInput` of `hook`, outside the master namespace, was dropped.
    fn mutation_denied(&self, hook: &LoadedHook, event: &Event) {
        let _ = (hook, event);
    }

    /// `event` is deeper than [`MAX_LOOP_DEPTH`]: no hook runs.
    fn depth_exceeded(&self, event: &Event) {
        let _ = event;
    }

    /// A blocking decision took `elapsed`.
    fn decided(&self, event: &Event, elapsed: Duration) {
        let _ = (event, elapsed);
    }

    /// A `dryrun` hook matched `event`: true when the observer runs it off the decision's
    /// critical path (the driver goes on without it), false to have the driver run it in
    /// place (its answer is recorded and changes nothing either way).
    fn shadow(&self, hook: &Arc<LoadedHook>, event: &Arc<Event>, event_json: &Bytes) -> bool;

    /// `hook` has `spec.approval` and its run answered `ask` (`result`): the run's outcome
    /// once the approval is asked for or read ([`crate::approvals::apply`]). By default the
    /// `ask` stands (a dry run creates no approval).
    fn approval<'a>(
        &'a self,
        hook: &'a Arc<LoadedHook>,
        event: &'a Event,
        result: HandlerResult,
    ) -> impl std::future::Future<Output = HandlerResult> + Send + 'a {
        let _ = (hook, event);
        std::future::ready(result)
    }
}

/// Asks the engine's approval client where the approval of `hook`'s `ask` on `event` stands.
async fn ask_approval(
    engine: &Engine,
    hook: &LoadedHook,
    event: &Event,
    result: HandlerResult,
) -> HandlerResult {
    let Some(client) = &engine.approvals else {
        return crate::approvals::apply(
            result,
            Err("approvals need an operator (synced mode); this dispatcher has none".into()),
        );
    };
    let req = agenthooks_crds::approval::ApprovalRequest {
        dispatcher: client.dispatcher().to_owned(),
        hook_namespace: hook.namespace.clone(),
        hook_name: hook.name.clone(),
        hook_uid: hook.uid.clone(),
        hook_generation: hook.generation,
        tenant: event.tenant_id.clone(),
        session_id: event.session_id.clone(),
        tool_name: event.tool().unwrap_or("").to_owned(),
        input_hash: crate::audit::input_hash::input_hash(
            event.tool().unwrap_or(""),
            &event.tool_input,
        ),
        reason: result.reason.clone().unwrap_or_default(),
    };
    let answer = client.ask(&req).await;
    crate::approvals::apply(result, answer)
}

/// Dispatch: every effect of a run.
pub struct Live<'a>(pub &'a Engine);

impl RunObserver for Live<'_> {
    type Run = HookSpan;
    const DRY: bool = false;

    fn start(
        &self,
        hook: &LoadedHook,
        event: &Event,
        filter_ok: bool,
    ) -> (Option<Admission>, HookSpan) {
        // `hook.<handler>.<event>`, child of the caller's span (CONTRACT §8.1).
        let span = self.0.telemetry.hook_span(hook, event);
        // A CEL error is the event's, not the handler's: it neither asks nor counts (§6.1).
        let admission =
            filter_ok.then(|| hook.breaker.admit(&event.tenant_id, unix_ms_now() as i64));
        (admission, span)
    }

    fn finish(
        &self,
        span: HookSpan,
        hook: &Arc<LoadedHook>,
        event: &Event,
        event_json: &Bytes,
        admission: Option<Admission>,
        result: &HandlerResult,
        elapsed: Duration,
    ) {
        let engine = self.0;
        let handler = hook.spec.handler.type_;
        let unix_ms = unix_ms_now();
        hook.counters.record(result.outcome, unix_ms);
        if let Some(admission) = admission {
            observe_breaker(
                engine,
                hook,
                &event.tenant_id,
                admission,
                crate::breaker::class_of(result),
                unix_ms,
            );
        }
        engine.metrics.record_run(
            result.outcome,
            handler,
            event.event,
            elapsed,
            result.error_kind,
        );
        tracing::debug!(
            hook = %hook.key, handler = handler.as_str(), event = %event.event, decision = result.outcome.as_str(),
            duration_ms = elapsed.as_secs_f64() * 1000.0, "hook.{}.{}", handler.as_str(), event.event
        );
        if engine.audit.is_enabled() {
            // Moves and refcounts only; the row is built by the audit writer. The span's
            // trace id is the row's `metadata.trace_id` (CONTRACT §7.5).
            engine.audit.record(RunRecord {
                trace_id: span.trace_id_hex(),
                ..RunRecord::of_run(
                    hook,
                    event,
                    event_json,
                    result,
                    elapsed,
                    admission.is_none(),
                )
            });
        }
        span.end(result.outcome, elapsed, result.error_kind);
    }

    fn not_run(&self, hook: &Arc<LoadedHook>, event: &Event, event_json: &Bytes, reason: &str) {
        if self.0.audit.is_enabled() {
            self.0.audit.record(RunRecord::not_run(
                hook,
                event,
                event_json,
                Outcome::Timeout,
                &format!("{reason}: the chain budget was spent before this hook could run"),
            ));
        }
    }

    fn mutation_denied(&self, hook: &LoadedHook, event: &Event) {
        self.0.metrics.mutation_denied.inc();
        tracing::warn!(target: "hooks.mutation_denied", hook = %hook.key, event_id = %event.event_id, "hooks.mutation_denied");
    }

    fn depth_exceeded(&self, event: &Event) {
        self.0.metrics.loop_depth_exceeded.inc();
        tracing::warn!(
            target: "security.hook.loop_depth_exceeded",
            depth = event.depth, max = MAX_LOOP_DEPTH, event = %event.event, session_id = %event.session_id,
            "security.hook.loop_depth_exceeded"
        );
    }

    fn decided(&self, event: &Event, elapsed: Duration) {
        self.0.metrics.record_decision(event.event, elapsed);
    }

    fn shadow(&self, hook: &Arc<LoadedHook>, event: &Arc<Event>, event_json: &Bytes) -> bool {
        // Shed when the background slots are full: a dryrun run is never worth a stall.
        crate::runner::spawn_background(self.0, hook, event, event_json);
        true
    }

    fn approval<'a>(
        &'a self,
        hook: &'a Arc<LoadedHook>,
        event: &'a Event,
        result: HandlerResult,
    ) -> impl std::future::Future<Output = HandlerResult> + Send + 'a {
        ask_approval(self.0, hook, event, result)
    }
}

/// `check`: every effect of [`Live`], but every hook runs in place — `dryrun` hooks and
/// those a non-blocking event does not wait for too — so the decision printed lists each
/// hook's outcome before the process exits.
pub struct InPlace<'a>(pub &'a Engine);

impl RunObserver for InPlace<'_> {
    type Run = HookSpan;
    const DRY: bool = false;

    fn start(
        &self,
        hook: &LoadedHook,
        event: &Event,
        filter_ok: bool,
    ) -> (Option<Admission>, HookSpan) {
        Live(self.0).start(hook, event, filter_ok)
    }
    fn finish(
        &self,
        span: HookSpan,
        hook: &Arc<LoadedHook>,
        event: &Event,
        event_json: &Bytes,
        admission: Option<Admission>,
        result: &HandlerResult,
        elapsed: Duration,
    ) {
        Live(self.0).finish(span, hook, event, event_json, admission, result, elapsed)
    }
    fn not_run(&self, hook: &Arc<LoadedHook>, event: &Event, event_json: &Bytes, reason: &str) {
        Live(self.0).not_run(hook, event, event_json, reason)
    }
    fn mutation_denied(&self, hook: &LoadedHook, event: &Event) {
        Live(self.0).mutation_denied(hook, event)
    }
    fn depth_exceeded(&self, event: &Event) {
        Live(self.0).depth_exceeded(event)
    }
    fn decided(&self, event: &Event, elapsed: Duration) {
        Live(self.0).decided(event, elapsed)
    }
    fn shadow(&self, _: &Arc<LoadedHook>, _: &Arc<Event>, _: &Bytes) -> bool {
        false
    }
    fn approval<'a>(
        &'a self,
        hook: &'a Arc<LoadedHook>,
        event: &'a Event,
        result: HandlerResult,
    ) -> impl std::future::Future<Output = HandlerResult> + Send + 'a {
        ask_approval(self.0, hook, event, result)
    }
}

/// Hands one handler run to the hook's breaker for `tenant` and reports what changed
/// (CONTRACT §6.5): a trip and a probe's close go to the operator at once (it publishes them
/// to every dispatcher), a changed run of faults soon (its merged window).
fn observe_breaker(
    engine: &Engine,
    hook: &LoadedHook,
    tenant: &str,
    admission: Admission,
    class: RunClass,
    unix_ms: u64,
) {
    let recorded = hook
        .breaker
        .record(tenant, admission, class, unix_ms as i64);
    match &recorded.transition {
        Transition::None => {}
        Transition::RunChanged | Transition::Reopened { .. } => engine.outbox.run_changed(),
        Transition::Tripped(trip) => {
            engine.metrics.breaker_trips.inc();
            engine.outbox.trip(hook, tenant, trip);
            tracing::warn!(
                target: "security.hook.circuit_breaker",
                hook = %hook.key, uid = %hook.uid, generation = hook.generation, tenant, state = "open",
                fail_closed = trip.fail_closed, reason = %trip.reason(),
                "security.hook.circuit_breaker"
            );
        }
        Transition::Closed { since } => {
            engine.metrics.breaker_closes.inc();
            engine.outbox.close(hook, tenant, *since, unix_ms as i64);
            tracing::info!(
                target: "security.hook.circuit_breaker",
                hook = %hook.key, uid = %hook.uid, generation = hook.generation, tenant, state = "closed",
                opened_at_ms = since, "security.hook.circuit_breaker: a probe answered; breaker closed"
            );
        }
    }
}

/// A dry run: the handler runs, nothing is recorded.
pub struct Dry;

impl RunObserver for Dry {
    type Run = ();
    const DRY: bool = true;

    fn start(&self, _: &LoadedHook, _: &Event, filter_ok: bool) -> (Option<Admission>, ()) {
        (filter_ok.then_some(Admission::Run), ())
    }
    /// A dry run shows every hook's answer: a dryrun hook runs in place.
    fn shadow(&self, _: &Arc<LoadedHook>, _: &Arc<Event>, _: &Bytes) -> bool {
        false
    }
}

/// A policy test case (`agenthooks-dispatcher test`, [`crate::suite`]): records nothing,
/// like [`Dry`]; a hook with a stub (keyed by `namespace/name`) is answered by it without
/// its handler running; a command hook without one runs for real (it is local); an http
/// or prompt hook without one runs for real only when `network` is true, and otherwise
/// is answered `error` (kind `bad_spec`) and listed in [`Stubbed::unstubbed`], so the
/// case can be reported as an error naming it — a suite never depends on the network by
/// accident. A `dryrun` hook is skipped (dispatch runs it off the decision's path and it
/// never changes the answer), so it needs no stub.
#[derive(Debug, Default)]
pub struct Stubbed {
    stubs: std::collections::HashMap<String, HandlerResult>,
    network: bool,
    unstubbed: std::sync::Mutex<Vec<String>>,
}

impl Stubbed {
    /// An observer answering `stubs` (hook `namespace/name` → its handler's answer).
    pub fn new(stubs: std::collections::HashMap<String, HandlerResult>, network: bool) -> Self {
        Stubbed {
            stubs,
            network,
            unstubbed: Default::default(),
        }
    }

    /// The http and prompt hooks that were reached with no stub and not run
    /// (`namespace/name (handler)`), in the order they were reached.
    pub fn unstubbed(&self) -> Vec<String> {
        self.unstubbed
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }
}

impl RunObserver for Stubbed {
    type Run = ();
    const DRY: bool = true;

    fn start(&self, _: &LoadedHook, _: &Event, filter_ok: bool) -> (Option<Admission>, ()) {
        (filter_ok.then_some(Admission::Run), ())
    }
    fn stub(&self, hook: &LoadedHook, _: &Event) -> Option<HandlerResult> {
        if let Some(answer) = self.stubs.get(&hook.key) {
            return Some(answer.clone());
        }
        let handler = hook.spec.handler.type_;
        if self.network || handler == agenthooks_crds::agenthook::HandlerType::Command {
            return None;
        }
        self.unstubbed
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(format!("{} ({})", hook.key, handler.as_str()));
        Some(HandlerResult::error(
            crate::decision::outcome::ErrorKind::BadSpec,
            format!(
                "no stub for this {} hook, and the test runs without --allow-network",
                handler.as_str()
            ),
        ))
    }
    /// Skipped, as dispatch skips it on the decision's path: it never changes the answer.
    fn shadow(&self, _: &Arc<LoadedHook>, _: &Arc<Event>, _: &Bytes) -> bool {
        true
    }
}
