//! The `prompt` handler: a model decides, through one forced `decide` tool call
//! (CONTRACT §5 prompt.1–6; seed "Handler reference / prompt"; issue 4).
//!
//! One run, in order:
//! 1. Resolve the hook's `model` alias (or `defaultModel`) in the providers file
//!    ([`config`]); none configured or an unknown alias → `block`.
//! 2. Decision cache ([`cache`]): a hit answers at once, without a provider call, without
//!    touching the budget or the per-turn cap.
//! 3. Per-turn cap ([`turns`]): past `maxInvocationsPerTurn` for (hook, `turn_id`) →
//!    `block`, reason `PerTurnCapReached`.
//! 4. Build the request ([`request`]): preamble, template, fenced canonical JSON of
//!    `tool_name` + `tool_input` (never `raw_input`), the one `decide` tool.
//! 5. Budget: reserve estimate + [`request::MAX_OUTPUT_TOKENS`] of the event's tenant
//!    through `engine.budgets`; a refusal → `block` with its reason (`BudgetExhausted`,
//!    `BudgetNotFound`, `BudgetUnavailable`) and the turn's count is given back.
//! 6. Call the provider ([`client`]) within the hook's timeout; read the answer
//!    ([`response`]). Settled in the background with the tokens the provider reports
//!    (input + output; the whole reservation when it reported none or may have counted
//!    without answering), released when the call failed before any usage. A run that
//!    ends in between (cancelled, cut, its task dropped) is charged the whole
//!    reservation, never released (CONTRACT §10.3).
//! 7. A valid `decide` → its decision (cached); anything else → `block`, logged on target
//!    `security.hook.prompt_parse_error` with its kind, counted. The model's
//!    `updated_input` is kept only for a master-namespace hook with `allowRewrite: true`
//!    and never when it reports `injection_detected` (CONTRACT §5 prompt.2); otherwise it
//!    is dropped (`prompt.rewriteDenied`, log `hooks.mutation_denied`, metric) and the
//!    decision stands. The cache key includes that setting.
//!
//! Every failure is a `block` (never `error`/`timeout`, which `onTimeout: allow` could
//! turn into an allow), with an `error_kind`: `prompt_unconfigured`,
//! `prompt_model_unknown`, `per_turn_cap`, `budget_exhausted`, `budget_not_found`,
//! `budget_unavailable`, `budget_invalid`, `fence_error`, a call failure kind
//! ([`client::CallFailure::kind`]) or a parse failure kind
//! ([`response::ParseFailure::kind`]). On a non-blocking event the chain answers `allow`
//! whatever the hook says (CONTRACT §1.2).

pub mod cache;
pub mod canonical;
pub mod client;
pub mod config;
pub mod request;
pub mod response;
pub mod turns;

use std::sync::Arc;
use std::time::Duration;

use agenthooks_crds::agenthook::PromptHandlerSpec;
use bytes::Bytes;
use serde_json::Value;
use tokio::time::Instant;

use crate::budget::{BudgetRefusal, Budgets, Reservation};
pub use crate::decision::outcome::PromptMetadata;
use crate::event::Event;
use crate::handlers::{ErrorKind, HandlerResult, Outcome, cut};
use crate::hookset::LoadedHook;
use crate::metrics::Metrics;
use cache::{CachedDecision, DecisionCache, cache_key};
use client::ProviderClient;
use config::{ProvidersConfig, ResolvedModel};
use request::{MAX_OUTPUT_TOKENS, estimate_input_tokens, prompt_text, request_body};
use turns::{DEFAULT_MAX_PER_TURN, PER_TURN_CAP_REACHED, TurnCaps, turn_key};

/// How a prompt run treats the dispatcher's shared state.
#[derive(Clone, Copy)]
enum Mode<'a> {
    /// A real run: decision cache, per-turn cap, tenant budget, metrics.
    Live {
        budgets: &'a Budgets,
        metrics: &'a Metrics,
    },
    /// A dry run (`POST /v1/test`, issue 5 point 3): the provider is called, but the
    /// decision cache is neither read nor filled, no turn is counted, no budget is
    /// reserved or settled, no metric is counted and no security log line is written.
    DryRun,
}

impl<'a> Mode<'a> {
    fn metrics(self) -> Option<&'a Metrics> {
        match self {
            Mode::Live { metrics, .. } => Some(metrics),
            Mode::DryRun => None,
        }
    }
}

/// The prompt handler of one dispatcher: providers, client, cache and turn counts.
/// Cheap to clone.
#[derive(Clone, Default)]
pub struct PromptEvaluator {
    inner: Arc<Inner>,
}

#[derive(Default)]
struct Inner {
    /// `None`: no providers file; every prompt hook blocks (`prompt_unconfigured`).
    config: Option<ProvidersConfig>,
    client: ProviderClient,
    cache: DecisionCache,
    turns: TurnCaps,
}

impl std::fmt::Debug for PromptEvaluator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PromptEvaluator")
            .field(
                "providers_file",
                &self.inner.config.as_ref().map(|c| &c.file),
            )
            .finish()
    }
}

impl PromptEvaluator {
    /// No providers: every prompt hook fails closed.
    pub fn unconfigured() -> PromptEvaluator {
        PromptEvaluator::default()
    }

    /// The evaluator of a providers file, with the default cache and turn bounds.
    pub fn new(config: ProvidersConfig) -> PromptEvaluator {
        PromptEvaluator::with_parts(Some(config), DecisionCache::default(), TurnCaps::default())
    }

    /// Same with a cache and turn counter of one's own (tests shorten the TTL).
    pub fn with_parts(
        config: Option<ProvidersConfig>,
        cache: DecisionCache,
        turns: TurnCaps,
    ) -> PromptEvaluator {
        PromptEvaluator {
            inner: Arc::new(Inner {
                config,
                client: ProviderClient::new(),
                cache,
                turns,
            }),
        }
    }

    /// The decision cache (inspection and tests).
    pub fn cache(&self) -> &DecisionCache {
        &self.inner.cache
    }

    /// Turns whose evaluator calls are counted now (inspection and tests).
    pub fn turns_held(&self) -> usize {
        self.inner.turns.len()
    }

    /// Runs one prompt hook on `event` within `timeout` (see the module doc).
    pub async fn evaluate(
        &self,
        hook: &LoadedHook,
        spec: &PromptHandlerSpec,
        event: &Event,
        timeout: Duration,
        budgets: &Budgets,
        metrics: &Metrics,
    ) -> HandlerResult {
        self.run(hook, spec, event, timeout, Mode::Live { budgets, metrics })
            .await
    }

    /// A dry run of one prompt hook (`POST /v1/test`, issue 5 point 3): the same steps
    /// and answers as [`PromptEvaluator::evaluate`], except that it never reads or fills
    /// the decision cache (`cacheHit` is always false), never counts a per-turn call,
    /// reserves and settles no tenant budget (the provider's tokens are reported in the
    /// metadata, charged to nobody), and counts no metric.
    pub async fn evaluate_dry_run(
        &self,
        hook: &LoadedHook,
        spec: &PromptHandlerSpec,
        event: &Event,
        timeout: Duration,
    ) -> HandlerResult {
        self.run(hook, spec, event, timeout, Mode::DryRun).await
    }

    async fn run(
        &self,
        hook: &LoadedHook,
        spec: &PromptHandlerSpec,
        event: &Event,
        timeout: Duration,
        mode: Mode<'_>,
    ) -> HandlerResult {
        let deadline = Instant::now() + timeout;
        let Some(config) = &self.inner.config else {
            return blocked(
                "prompt_unconfigured",
                "no providers file is configured on this dispatcher (--providers-file); failing closed".into(),
                PromptMetadata::default(),
            );
        };
        let resolved = match config.resolve(spec.model.as_deref()) {
            Ok(r) => r,
            Err("") => {
                return blocked(
                    "prompt_model_unknown",
                    "the hook names no model and the providers file sets no defaultModel; failing closed".to_string(),
                    PromptMetadata::default(),
                );
            }
            Err(alias) => {
                return blocked(
                    "prompt_model_unknown",
                    format!(
                        "model alias {alias:?} is not under models in the providers file; failing closed"
                    ),
                    PromptMetadata::default(),
                );
            }
        };
        let mut meta = PromptMetadata {
            model: Some(resolved.model.to_owned()),
            ..PromptMetadata::default()
        };
        let tool_name = event.tool().unwrap_or("");
        let rewrite = RewritePolicy::of(hook, spec);
        let key = cache_key(
            &hook.uid,
            hook.generation,
            &event.tenant_id,
            tool_name,
            &event.tool_input,
            rewrite.allowed,
        );
        if let Mode::Live { metrics, .. } = mode
            && let Some(hit) = self.inner.cache.get(&key, std::time::Instant::now())
        {
            metrics.prompt_cache_hits.inc();
            return from_cached(&hit);
        }

        // Per-turn cap: counts evaluator calls, so only after a cache miss.
        let turn = event.turn_id.as_deref().filter(|t| !t.is_empty());
        let max = spec
            .max_invocations_per_turn
            .unwrap_or(DEFAULT_MAX_PER_TURN);
        // A turn belongs to one tenant's session: another tenant or session reusing the
        // same `turn_id` never spends this one's cap. Held under a fixed-size digest.
        let turn_key = match mode {
            Mode::Live { .. } => {
                turn.map(|t| turn_key(&hook.uid, &event.tenant_id, &event.session_id, t))
            }
            Mode::DryRun => None,
        };
        if let Some(turn_key) = &turn_key
            && !self
                .inner
                .turns
                .try_acquire(turn_key, max, std::time::Instant::now())
        {
            tracing::info!(hook = %hook.key, turn_id = turn, max, "prompt hook over its per-turn cap");
            return blocked("per_turn_cap", PER_TURN_CAP_REACHED.into(), meta);
        }
        // Under the key it was counted with (tenant, session, turn).
        let give_back_turn = || {
            if let Some(turn_key) = &turn_key {
                self.inner.turns.undo(turn_key);
            }
        };

        let text = match prompt_text(&spec.prompt_template, tool_name, &event.tool_input) {
            Ok(t) => t,
            Err(e) => {
                give_back_turn();
                return blocked("fence_error", e.to_string(), meta);
            }
        };
        let body = request_body(resolved.provider.kind, resolved.model, &text);
        let body = match serde_json::to_vec(&body) {
            Ok(b) => Bytes::from(b),
            Err(e) => {
                give_back_turn();
                return blocked(
                    "fence_error",
                    format!("request not serializable: {e}"),
                    meta,
                );
            }
        };
        let bound = estimate_input_tokens(body.len()).saturating_add(MAX_OUTPUT_TOKENS);
        // A dry run charges nobody: no reservation, nothing to settle.
        let reservation = match mode {
            Mode::DryRun => None,
            Mode::Live { budgets, .. } => {
                let reserve = budgets.reserve(&event.tenant_id, bound, Some(&hook.key));
                match tokio::time::timeout_at(deadline, reserve).await {
                    Ok(Ok(r)) => Some(r),
                    Ok(Err(refusal)) => {
                        give_back_turn();
                        tracing::debug!(hook = %hook.key, tenant = %event.tenant_id, tokens = bound, detail = %refusal, "prompt hook blocked by its budget");
                        return blocked(refusal_kind(&refusal), refusal.reason().into(), meta);
                    }
                    Err(_) => {
                        give_back_turn();
                        return blocked(
                            "budget_unavailable",
                            agenthooks_crds::report::REASON_BUDGET_UNAVAILABLE.into(),
                            meta,
                        );
                    }
                }
            }
        };

        // From here the request goes out: a run that ends without the provider's usage
        // (cancelled, cut, its task dropped) pays the whole reservation (CONTRACT §10.3).
        let mut reservation = reservation;
        if let Some(r) = reservation.as_mut() {
            r.charge_in_full_if_dropped();
        }
        let provider = resolved.provider;
        let answer = self.inner.client.call(provider, body, deadline).await;
        let answer = match answer {
            Ok(a) => a,
            Err(f) => {
                if let Some(metrics) = mode.metrics() {
                    metrics
                        .prompt_calls
                        .with_label_values(&[&provider.name, f.kind])
                        .inc();
                }
                if let Some(r) = reservation {
                    settle_in_background(r, if f.may_have_cost { None } else { Some(0) });
                }
                parse_error_log(hook, &resolved, f.kind, &f.detail, mode);
                // The provider's own words (which may echo keys or addresses) go to
                // the log line above, not to the agent.
                let status = f.status.map(|s| format!(", HTTP {s}")).unwrap_or_default();
                return blocked(
                    f.kind,
                    format!("evaluator call failed ({}{status}); failing closed", f.kind),
                    meta,
                );
            }
        };
        if let Some(metrics) = mode.metrics() {
            metrics
                .prompt_calls
                .with_label_values(&[&provider.name, "ok"])
                .inc();
        }
        let (parsed, usage) = response::parse(provider.kind, &answer.body);
        if let Some(u) = usage {
            let total = u.total();
            meta.tokens = Some(total);
            if let Some(metrics) = mode.metrics() {
                metrics
                    .prompt_tokens
                    .with_label_values(&[&provider.name])
                    .inc_by(u64::try_from(total).unwrap_or(0));
            }
        }
        if let Some(r) = reservation {
            settle_in_background(r, usage.map(|u| u.total()));
        }
        let decided = match parsed {
            Ok(d) => d,
            Err(pf) => {
                parse_error_log(hook, &resolved, pf.kind(), &pf.to_string(), mode);
                return blocked(
                    pf.kind(),
                    format!("evaluator answer unusable ({}); failing closed", pf.kind()),
                    meta,
                );
            }
        };
        let (updated_input, rewrite_denied) =
            rewrite.apply(decided.updated_input, decided.injection_detected);
        if rewrite_denied {
            if let Some(metrics) = mode.metrics() {
                metrics.mutation_denied.inc();
            }
            tracing::warn!(
                target: "hooks.mutation_denied",
                hook = %hook.key, event_id = %event.event_id,
                allow_rewrite = rewrite.allowed, injection_detected = decided.injection_detected,
                "hooks.mutation_denied: the prompt judge's updated_input was dropped (CONTRACT §5 prompt.2); its decision stands"
            );
        }
        let cached = CachedDecision {
            decision: decided.decision,
            reason: decided.reason,
            injection_detected: decided.injection_detected,
            updated_input,
            rewrite_denied,
            additional_context: decided.additional_context,
            model: resolved.model.to_owned(),
        };
        if cached.injection_detected && mode.metrics().is_some() {
            tracing::warn!(hook = %hook.key, event_id = %event.event_id, decision = cached.decision.as_str(), "prompt evaluator reports an injection attempt");
        }
        let mut result = decision_result(&cached);
        result.metadata.prompt = Some(PromptMetadata {
            injection_detected: Some(cached.injection_detected),
            rewrite_denied: cached.rewrite_denied,
            ..meta
        });
        if let Mode::Live { .. } = mode {
            self.inner
                .cache
                .insert(key, cached, std::time::Instant::now());
        }
        result
    }
}

/// Whether a prompt hook's judge may rewrite the call (CONTRACT §5 prompt.2).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct RewritePolicy {
    /// `allowRewrite: true` on a master-namespace hook. The validation refuses the
    /// opt-in elsewhere; this re-checks it, so a hooks file or snapshot that slipped past
    /// it still never rewrites.
    allowed: bool,
}

impl RewritePolicy {
    fn of(hook: &LoadedHook, spec: &PromptHandlerSpec) -> RewritePolicy {
        RewritePolicy {
            allowed: spec.allow_rewrite && hook.compiled.master,
        }
    }

    /// The `updated_input` the chain may apply, and whether a proposed one was dropped:
    /// kept only when allowed and the model reported no injection.
    fn apply(self, proposed: Option<Value>, injection_detected: bool) -> (Option<Value>, bool) {
        match proposed {
            Some(v) if self.allowed && !injection_detected => (Some(v), false),
            Some(_) => (None, true),
            None => (None, false),
        }
    }
}

/// The hook could not get (or was not allowed) a decision from the model: an `error`
/// with a machine kind, the reason and the prompt metadata. A blocking event's chain
/// answers `block` with this reason (fail-closed, CONTRACT §4; §5 prompt.2, .4, .5), and
/// the circuit breaker does not count it (CONTRACT §6.1: errors neither count nor reset) —
/// otherwise five provider failures, refused budgets or capped turns would trip the hook and
/// let the next calls through unchecked.
fn blocked(kind: &'static str, reason: String, meta: PromptMetadata) -> HandlerResult {
    let mut r = HandlerResult::error(ErrorKind::Prompt(kind), reason);
    r.metadata.prompt = Some(meta);
    r
}

fn decision_result(d: &CachedDecision) -> HandlerResult {
    let mut r = match d.decision {
        Outcome::Allow => {
            let mut r = HandlerResult::allow();
            r.reason = Some(cut(d.reason.clone()));
            r
        }
        Outcome::Ask => HandlerResult::ask(d.reason.clone()),
        _ => HandlerResult::block(d.reason.clone()),
    };
    debug_assert!(matches!(
        r.outcome,
        Outcome::Allow | Outcome::Block | Outcome::Ask
    ));
    r.updated_input = d.updated_input.clone();
    r.additional_context = d.additional_context.clone();
    r
}

fn from_cached(d: &CachedDecision) -> HandlerResult {
    let mut r = decision_result(d);
    r.metadata.prompt = Some(PromptMetadata {
        model: Some(d.model.clone()),
        tokens: Some(0),
        injection_detected: Some(d.injection_detected),
        cache_hit: true,
        rewrite_denied: d.rewrite_denied,
    });
    r
}

fn refusal_kind(r: &BudgetRefusal) -> &'static str {
    match r {
        BudgetRefusal::Exhausted { .. } => "budget_exhausted",
        BudgetRefusal::NotFound { .. } => "budget_not_found",
        BudgetRefusal::Unavailable { .. } => "budget_unavailable",
        BudgetRefusal::InvalidTokens { .. } => "budget_invalid",
    }
}

/// Settles off the decision path (a remote settle may retry for many seconds): with
/// `tokens`, or the whole reservation when `None` (the provider may have counted
/// tokens it did not report).
///
/// The charge is at most the reservation (the call's bound, CONTRACT §5.5), as the
/// operator also enforces: a provider reporting absurd usage cannot empty the month.
fn settle_in_background(reservation: Reservation, tokens: Option<i64>) {
    let bound = reservation.tokens();
    let reported = tokens.unwrap_or(bound);
    if reported > bound {
        tracing::warn!(
            reported,
            charged = bound,
            "provider reported more tokens than the call's reservation; charging the reservation"
        );
    }
    let tokens = reported.min(bound);
    tokio::spawn(async move {
        // Failures are logged and counted by the budget module.
        let _ = reservation.settle(tokens).await;
    });
}

/// Live runs count the failure and log it on the security target; a dry run logs it at
/// debug level only (its caller sees the kind in the answer).
fn parse_error_log(
    hook: &LoadedHook,
    model: &ResolvedModel<'_>,
    kind: &'static str,
    detail: &str,
    mode: Mode<'_>,
) {
    let Some(metrics) = mode.metrics() else {
        tracing::debug!(
            hook = %hook.key, kind, provider = %model.provider.name, model = model.model,
            detail = %cut(detail.to_owned()), "prompt dry run: evaluator call or answer failed"
        );
        return;
    };
    metrics.prompt_parse_errors.with_label_values(&[kind]).inc();
    tracing::warn!(
        target: "security.hook.prompt_parse_error",
        hook = %hook.key, uid = %hook.uid, generation = hook.generation, kind,
        provider = %model.provider.name, model = model.model, detail = %cut(detail.to_owned()),
        "security.hook.prompt_parse_error"
    );
}
