//! The AgentHook reconciler (kube-runtime `Controller`, controller-rs skeleton).
//!
//! For each hook: resolve its namespace's tenant from the tenant map ([`crate::tenants`];
//! a namespace that lost its claim refuses the hook, reason `TenantConflict`), validate
//! it (cached by uid, generation and tenant), read and seal its Secret header values,
//! store the outcome in the
//! [`crate::index`], ask for a publish when the published set changed, and write
//! `observedGeneration`, `Accepted` and `Ready` by server-side apply when they change.
//! The tenants whose breaker `status.breaker.open` records for the hook's current
//! generation and reset annotation go into the index as the hook's open breakers (so the
//! index is rebuilt from status after a restart). A breaker recorded open that no longer
//! applies (the spec or the `agenthooks.io/reset-breaker` annotation changed, CONTRACT
//! §6.4) is written closed for every tenant (`CircuitOpen=False`, reason `BreakerReset`, a
//! Normal Event) by [`crate::report::breaker::reset`]; the snapshot carries no open
//! breaker for the new version as soon as the index sees the change, before that write.
//!
//! - [`session`]: the watches, the controller and its companions for one leader session.
//! - [`ready_pass`]: the initial-sync gate and the periodic `Ready` re-evaluation.
//! - [`triggers`]: the hook predicate and the namespace / Secret mappers (a namespace
//!   change re-queues the hooks of every namespace whose tenant claim it moved).
//! - [`secrets`]: Secret references, reads and sealing.

pub mod ready_pass;
pub mod secrets;
pub mod session;
pub mod triggers;

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use agenthooks_crds::snapshot::SnapshotHook;
use agenthooks_crds::tenancy::TenantConflict;
use agenthooks_crds::validation::{CommandHookPolicy, ValidationContext, validate};
use agenthooks_crds::{AgentHook, AgentHookSpec, RESET_BREAKER_ANNOTATION};
use k8s_openapi::api::core::v1::{Namespace, Secret};
use kube::api::PartialObjectMeta;
use kube::runtime::controller::Action;
use kube::runtime::events::{Event as KubeEvent, EventType, Recorder, Reporter};
use kube::runtime::reflector::Store;
use kube::{Api, Client, Resource, ResourceExt};
use tokio::sync::watch;

use crate::config::Config;
use crate::error::Error;
use crate::index::{HookKey, IndexedHook, Publication, Refusal, Verdict};
use crate::ready::{LiveDispatchers, ready_condition, settle_ready};
use crate::shared::{Shared, lock};
use crate::status::{
    self, ACCEPTED, DesiredCondition, READY, WriteOutcome, accepted_condition_for,
    breaker_needs_reset, breaker_open, find_condition,
};
use crate::tenants;

/// Requeue period of a reconciled hook: a safety net; nothing is written unless
/// something changed.
pub const RESYNC: Duration = Duration::from_secs(600);

/// How long the reconcile puts off writing `Ready=Unknown` `Pending` for a hook's
/// generation: the dispatchers usually load the snapshot that holds it well within this
/// time, and the ready pass then re-queues the hook, which writes `Accepted` and
/// `Ready=True` in one status write instead of two (with 10,000 hooks applied at once,
/// half the status writes). A `Pending` that lasts longer is written.
pub const PENDING_GRACE: Duration = Duration::from_secs(2);

/// Everything a reconcile needs, for one leader session.
pub struct Context {
    /// Shared state (index, tracker, metrics, settings).
    pub shared: Arc<Shared>,
    /// API client.
    pub client: Client,
    /// Namespace metadata (labels → tenant).
    pub namespaces: Store<PartialObjectMeta<Namespace>>,
    /// Event recorder (Events on `Accepted` transitions only).
    pub recorder: Recorder,
    /// Uids reconciled at least once during the initial sync (cleared once synced).
    pub attempted: Mutex<HashSet<String>>,
    /// When this session started serving (`None`: not yet); drives the Ready warm-up.
    pub serving_since: Mutex<Option<Instant>>,
    /// Set once the hook watch finished its first list (the hook store is complete).
    ///
    /// Readiness is signalled through watch channels fed from the event streams rather
    /// than `Store::wait_until_ready`, whose one-shot channel wakes only the last of
    /// several concurrent waiters (kube-runtime 5.0 `DelayedInit`), which left every
    /// reconcile but one waiting forever.
    pub hooks_listed: watch::Sender<bool>,
    /// Set once the namespace watch finished its first list.
    pub namespaces_listed: watch::Sender<bool>,
    /// Per hook uid, the generation whose `Ready=Pending` write is put off and since when
    /// ([`PENDING_GRACE`]).
    pub deferred: Mutex<Deferred>,
}

/// The `Ready=Pending` writes put off, per hook uid: (generation, since when). Entries
/// leave when the hook's `Ready` is anything but `Pending`; those of hooks that went away
/// meanwhile are dropped once the map has doubled since it was last pruned.
#[derive(Debug, Default)]
pub struct Deferred {
    by_uid: HashMap<String, (i64, Instant)>,
    prune_at: usize,
}

impl Deferred {
    /// Forgets hook `uid`.
    pub fn remove(&mut self, uid: &str) {
        self.by_uid.remove(uid);
    }

    /// How much longer the write of `ready` for generation `generation` of hook `uid` may
    /// wait: the rest of [`PENDING_GRACE`] from the first time a reconcile of this
    /// generation wanted to write `Ready=Unknown` `Pending`; `None` (write now) for any
    /// other `Ready` (the hook is then forgotten), or once the grace is over.
    pub fn grace_left(
        &mut self,
        uid: &str,
        generation: i64,
        ready: &DesiredCondition,
        now: Instant,
    ) -> Option<Duration> {
        if ready.status != status::CondStatus::Unknown || ready.reason != crate::ready::PENDING {
            self.remove(uid);
            return None;
        }
        let since = self.since(uid, generation, now);
        PENDING_GRACE
            .checked_sub(now.saturating_duration_since(since))
            .filter(|left| !left.is_zero())
    }

    /// Since when generation `generation` of hook `uid` has been waiting (from `now`,
    /// the first time).
    fn since(&mut self, uid: &str, generation: i64, now: Instant) -> Instant {
        if self.by_uid.len() >= self.prune_at.max(1024) {
            self.by_uid
                .retain(|_, (_, at)| now.saturating_duration_since(*at) < PENDING_GRACE * 30);
            self.prune_at = self.by_uid.len() * 2;
        }
        match self.by_uid.get(uid) {
            Some((g, at)) if *g == generation => *at,
            _ => {
                self.by_uid.insert(uid.to_string(), (generation, now));
                now
            }
        }
    }
}

impl Context {
    /// A context for a new session.
    pub fn new(
        shared: Arc<Shared>,
        client: Client,
        namespaces: Store<PartialObjectMeta<Namespace>>,
    ) -> Context {
        let recorder = Recorder::new(
            client.clone(),
            Reporter {
                controller: crate::FIELD_MANAGER.into(),
                instance: Some(shared.config.lease.identity.clone()),
            },
        );
        Context {
            shared,
            client,
            namespaces,
            recorder,
            attempted: Mutex::new(HashSet::new()),
            serving_since: Mutex::new(None),
            hooks_listed: watch::channel(false).0,
            namespaces_listed: watch::channel(false).0,
            deferred: Mutex::new(Deferred::default()),
        }
    }

    /// How much longer the write of `ready` for generation `generation` of hook `uid` may
    /// wait ([`Deferred::grace_left`]).
    pub fn pending_grace_left(
        &self,
        uid: &str,
        generation: i64,
        ready: &DesiredCondition,
        now: Instant,
    ) -> Option<Duration> {
        lock(&self.deferred).grace_left(uid, generation, ready, now)
    }

    /// Whether `Ready` is in its warm-up ([`crate::ready::settle_ready`]): before this
    /// session serves, and for one dispatcher TTL after.
    pub fn warming_up(&self, now: Instant) -> bool {
        lock(&self.serving_since)
            .is_none_or(|t| now.saturating_duration_since(t) < self.shared.config.dispatcher_ttl)
    }

    /// The `Ready` condition of `hook` for `publication` with the `live` dispatchers,
    /// settled for the warm-up ([`crate::ready::settle_ready`]).
    pub fn desired_ready(
        &self,
        hook: &AgentHook,
        publication: Publication,
        live: &LiveDispatchers,
        now: Instant,
    ) -> DesiredCondition {
        settle_ready(
            ready_condition(
                publication,
                live,
                hook.metadata.uid.as_deref().unwrap_or_default(),
                hook.metadata.generation.unwrap_or(0),
            ),
            find_condition(hook.status.as_ref(), READY),
            hook.metadata.generation.unwrap_or(0),
            self.warming_up(now),
        )
    }

    /// The live dispatchers now.
    pub fn live_dispatchers(&self, now: Instant) -> LiveDispatchers {
        lock(&self.shared.tracker).live(&self.shared.epoch, now)
    }

    /// The tenant of namespace `ns` from the tenant map ([`crate::tenants`], kept in the
    /// index and recomputed on every namespace change), or the [`TenantConflict`] of a
    /// namespace that lost its claim. A namespace the map does not hold yet (the
    /// namespace watch is behind the hook watch) is read from the API server and
    /// resolved with the cached ones.
    ///
    /// Errors: [`Error::StoreGone`] when the session ends, [`Error::Kube`] when the read
    /// fails, [`Error::NamespaceNotFound`] when the namespace does not exist.
    async fn namespace_tenant(&self, ns: &str) -> Result<Result<String, TenantConflict>, Error> {
        self.namespaces_listed
            .subscribe()
            .wait_for(|listed| *listed)
            .await
            .map_err(|_| Error::StoreGone)?;
        match lock(&self.shared.index).tenants().tenant_of(ns) {
            Ok(Some(tenant)) => return Ok(Ok(tenant.to_string())),
            Err(conflict) => return Ok(Err(conflict)),
            Ok(None) => {}
        }
        let api: Api<Namespace> = Api::all(self.client.clone());
        let meta = api
            .get_metadata_opt(ns)
            .await?
            .ok_or_else(|| Error::NamespaceNotFound(ns.to_string()))?;
        let cached = self.namespaces.state();
        let others = cached
            .iter()
            .map(|m| m.as_ref())
            .filter(|m| m.metadata.name.as_deref() != Some(ns));
        let map = tenants::resolve(
            others.chain(std::iter::once(&meta)),
            &self.shared.config.master_namespace,
        );
        match map.tenant_of(ns) {
            Ok(tenant) => Ok(Ok(tenant.unwrap_or(ns).to_string())),
            Err(conflict) => Ok(Err(conflict)),
        }
    }
}

/// The spec rules' verdict (CONTRACT §2) for a hook in `namespace` of tenant `tenant`:
/// `Accepted`, or `Refused` with the first error's reason and every error's text (each
/// naming its field).
pub fn spec_verdict(
    spec: &AgentHookSpec,
    namespace: &str,
    tenant: &str,
    config: &Config,
) -> Verdict {
    let ctx = ValidationContext {
        namespace,
        namespace_tenant: tenant,
        master_namespace: &config.master_namespace,
        edition: config.edition,
        command_hooks: if config.allow_tenant_command_hooks {
            CommandHookPolicy::AnyNamespace
        } else {
            CommandHookPolicy::MasterOnly
        },
    };
    match validate(spec, &ctx) {
        Ok(_) => Verdict::Accepted,
        Err(errors) => Verdict::Refused(Refusal {
            reason: errors.reason().as_str().to_string(),
            message: errors.to_string(),
        }),
    }
}

/// The verdict of a hook in a namespace that lost its tenant claim: `Accepted=False`,
/// reason [`tenants::TENANT_CONFLICT`], the message naming the namespace, the tenant and
/// the namespace that holds it.
pub fn tenant_conflict_verdict(conflict: &TenantConflict) -> Verdict {
    Verdict::Refused(Refusal {
        reason: tenants::TENANT_CONFLICT.to_string(),
        message: tenants::conflict_message(conflict),
    })
}

/// What one reconcile decided (for metrics and logs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Accepted (published, open breakers or not).
    Accepted,
    /// Refused.
    Refused,
    /// Being deleted; dropped from the index.
    Deleting,
}

/// Reconciles one hook. Errors are transient API failures; [`error_policy`] requeues.
pub async fn reconcile(hook: Arc<AgentHook>, ctx: Arc<Context>) -> Result<Action, Error> {
    let result = reconcile_hook(&hook, &ctx).await;
    let requeue = match &result {
        Ok((_, Some(wait))) => *wait + Duration::from_millis(50),
        _ => RESYNC,
    };
    let result = result.map(|(outcome, _)| outcome);
    if !ctx.shared.serving().synced
        && let Some(uid) = hook.uid()
    {
        lock(&ctx.attempted).insert(uid);
    }
    let m = &ctx.shared.metrics;
    match &result {
        Ok(Outcome::Accepted) => m.reconcile_total.with_label_values(&["accepted"]).inc(),
        Ok(Outcome::Refused) => m.reconcile_total.with_label_values(&["refused"]).inc(),
        Ok(Outcome::Deleting) => {}
        Err(e) => {
            m.reconcile_total.with_label_values(&["error"]).inc();
            m.reconcile_errors_total
                .with_label_values(&[e.metric_label()])
                .inc();
        }
    }
    result.map(|_| Action::requeue(requeue))
}

/// Requeues a failed reconcile: soon for conflicts, later for everything else.
pub fn error_policy(hook: Arc<AgentHook>, error: &Error, _ctx: Arc<Context>) -> Action {
    tracing::warn!(
        hook = %format!("{}/{}", hook.namespace().unwrap_or_default(), hook.name_any()),
        error = %error,
        "reconcile failed; requeueing"
    );
    match error {
        Error::StatusConflict { .. } => Action::requeue(Duration::from_secs(1)),
        Error::StoreGone => Action::await_change(),
        _ => Action::requeue(Duration::from_secs(5)),
    }
}

/// Reconciles one hook: its outcome, and how soon to look again when its status write
/// was put off ([`PENDING_GRACE`]).
async fn reconcile_hook(
    hook: &AgentHook,
    ctx: &Context,
) -> Result<(Outcome, Option<Duration>), Error> {
    let missing = |field| Error::MissingField {
        kind: "AgentHook",
        field,
    };
    let ns = hook.namespace().ok_or_else(|| missing("namespace"))?;
    let name = hook.metadata.name.clone().ok_or_else(|| missing("name"))?;
    let uid = hook.uid().ok_or_else(|| missing("uid"))?;
    let generation = hook.metadata.generation.unwrap_or(0);
    let key = HookKey::new(&ns, &name);
    let shared = &ctx.shared;
    tracing::debug!(hook = %key, generation, "reconciling");

    if hook.metadata.deletion_timestamp.is_some() {
        if lock(&shared.index).delete(&key, Some(&uid)) {
            shared.publish_requested.notify_one();
        }
        lock(&ctx.deferred).remove(&uid);
        return Ok((Outcome::Deleting, None));
    }

    let (tenant, conflict) = match ctx.namespace_tenant(&ns).await? {
        Ok(tenant) => (tenant, None),
        Err(conflict) => (conflict.tenant.clone(), Some(conflict)),
    };
    tracing::trace!(hook = %key, %tenant, conflict = conflict.is_some(), "namespace tenant");
    // Validate outside the lock (CEL compiles take a while); cache by uid+generation+tenant.
    let cached = lock(&shared.validation).get(&uid, generation, &tenant);
    let spec_verdict = match (conflict, cached) {
        // The namespace lost its claim (CONTRACT §9.3): nothing in it is served.
        (Some(conflict), _) => tenant_conflict_verdict(&conflict),
        (None, Some(v)) => v,
        (None, None) => {
            tracing::debug!(hook = %key, generation, %tenant, "validating");
            // Regex and CEL compiles take a while: off the controller's task, so other
            // reconciles (waiting on the API server) go on meanwhile.
            let (spec, ns_, tenant_, config) = (
                hook.spec.clone(),
                ns.clone(),
                tenant.clone(),
                shared.config.clone(),
            );
            let v =
                tokio::task::spawn_blocking(move || spec_verdict(&spec, &ns_, &tenant_, &config))
                    .await
                    .map_err(|e| Error::ValidationTask(e.to_string()))?;
            lock(&shared.validation).insert(&uid, generation, &tenant, v.clone());
            v
        }
    };

    let (verdict, sealed_headers, secret_digests) = match spec_verdict {
        Verdict::Refused(r) => (Verdict::Refused(r), Vec::new(), Vec::new()),
        Verdict::Accepted => {
            let refs = secrets::secret_refs(&hook.spec);
            if refs.is_empty() {
                (Verdict::Accepted, Vec::new(), Vec::new())
            } else if let Err(r) = secrets::require_key(&refs, shared.config.seal_key.as_ref()) {
                (Verdict::Refused(r), Vec::new(), Vec::new())
            } else {
                let api: Api<Secret> = Api::namespaced(ctx.client.clone(), &ns);
                let fetched = secrets::fetch(&api, &secrets::secret_names(&hook.spec)).await?;
                let previous = lock(&shared.index)
                    .get(&key)
                    .filter(|p| p.hook.uid == uid)
                    .cloned();
                match secrets::seal(
                    &refs,
                    &fetched,
                    &ns,
                    shared.config.seal_key.as_ref(),
                    previous.as_ref(),
                ) {
                    Ok((sealed, digests)) => (Verdict::Accepted, sealed, digests),
                    Err(r) => (Verdict::Refused(r), Vec::new(), Vec::new()),
                }
            }
        }
    };

    let reset_token = hook.annotations().get(RESET_BREAKER_ANNOTATION).cloned();
    let accepted = accepted_condition_for(&verdict, &hook.spec);
    let indexed = IndexedHook {
        hook: SnapshotHook {
            uid: uid.clone(),
            namespace: ns.clone(),
            name: name.clone(),
            generation,
            created_at: hook
                .metadata
                .creation_timestamp
                .as_ref()
                .map(|t| t.0.to_string())
                .unwrap_or_default(),
            namespace_tenant: tenant,
            spec: hook.spec.clone(),
            sealed_headers,
            reset_token: reset_token.clone(),
            open_breakers: breaker_open(hook.status.as_ref(), generation, reset_token.as_deref()),
        },
        verdict: verdict.clone(),
        secret_digests,
        accepted: accepted.clone(),
    };
    let (changed, publication) = {
        let mut index = lock(&shared.index);
        let changed = index.apply(indexed);
        let publication = index
            .publication(&key)
            .unwrap_or(Publication::Published { served_from: None });
        (changed, publication)
    };
    if changed {
        tracing::info!(hook = %key, generation, accepted = verdict.is_accepted(), "hook changed in the published set");
        shared.publish_requested.notify_one();
    }

    let now = Instant::now();
    let desired = [
        accepted,
        ctx.desired_ready(hook, publication, &ctx.live_dispatchers(now), now),
    ];
    let api: Api<AgentHook> = Api::namespaced(ctx.client.clone(), &ns);
    // Before the conditions' apply, whose write would make this read-modify-write's
    // resourceVersion stale.
    if breaker_needs_reset(hook.status.as_ref(), generation, reset_token.as_deref()) {
        reset_breaker(ctx, &api, hook, &key).await?;
    }
    let outcome = if verdict.is_accepted() {
        Outcome::Accepted
    } else {
        Outcome::Refused
    };
    if let Some(wait) = ctx.pending_grace_left(&uid, generation, &desired[1], now)
        && status::plan(hook.status.as_ref(), generation, &desired, &status::now()).is_some()
    {
        tracing::debug!(hook = %key, generation, wait_ms = wait.as_millis() as u64, "Ready would say Pending; the dispatchers are loading it: status write put off");
        return Ok((outcome, Some(wait)));
    }
    match status::write(&shared.status_writer(), &api, hook, &desired).await? {
        WriteOutcome::Written(patch) => {
            tracing::debug!(hook = %key, generation, transitioned = ?patch.transitioned, "status written");
            if patch.transitioned.contains(&ACCEPTED) {
                publish_accepted_event(ctx, hook, &verdict).await;
            }
        }
        WriteOutcome::Unchanged => {}
        WriteOutcome::Gone => tracing::debug!(hook = %key, "hook gone before its status write"),
    }

    if let Verdict::Refused(r) = &verdict {
        tracing::info!(hook = %key, generation, reason = %r.reason, message = %r.message, "hook refused");
    }
    Ok((outcome, None))
}

/// Writes a breaker that no longer applies closed, with a Normal `BreakerReset` Event
/// when this write closed it.
async fn reset_breaker(
    ctx: &Context,
    api: &Api<AgentHook>,
    hook: &AgentHook,
    key: &HookKey,
) -> Result<(), Error> {
    use crate::report::breaker::{self, ResetOutcome};
    match breaker::reset(&ctx.shared.status_writer(), api, hook).await? {
        ResetOutcome::Closed { message } => {
            ctx.shared.metrics.breaker_resets_total.inc();
            tracing::info!(
                target: "security.hook.circuit_breaker",
                hook = %key,
                generation = hook.metadata.generation.unwrap_or(0),
                %message,
                "security.hook.circuit_breaker: breaker closed"
            );
            let event = KubeEvent {
                type_: EventType::Normal,
                reason: breaker::REASON_RESET.into(),
                note: Some(message),
                action: "ResetBreaker".into(),
                secondary: None,
            };
            if let Err(e) = ctx.recorder.publish(&event, &hook.object_ref(&())).await {
                tracing::warn!(error = %e, "publishing an Event failed");
            }
        }
        ResetOutcome::Unchanged => {}
        ResetOutcome::Gone => tracing::debug!(hook = %key, "hook gone before its breaker reset"),
    }
    Ok(())
}

/// An Event on an `Accepted` transition (CONVENTIONS: Events on transitions only).
/// Failures are logged, never fatal.
async fn publish_accepted_event(ctx: &Context, hook: &AgentHook, verdict: &Verdict) {
    let (type_, reason, note) = match verdict {
        Verdict::Accepted => (
            EventType::Normal,
            "Accepted".to_string(),
            "the hook passed validation".to_string(),
        ),
        Verdict::Refused(r) => (EventType::Warning, r.reason.clone(), r.message.clone()),
    };
    let mut note = note;
    if note.len() > 1000 {
        let mut cut = 1000;
        while !note.is_char_boundary(cut) {
            cut -= 1;
        }
        note.truncate(cut);
    }
    let event = KubeEvent {
        type_,
        reason,
        note: Some(note),
        action: "Validate".into(),
        secondary: None,
    };
    if let Err(e) = ctx.recorder.publish(&event, &hook.object_ref(&())).await {
        tracing::warn!(error = %e, "publishing an Event failed");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::shared::tests::config;

    #[test]
    fn a_pending_ready_waits_the_grace_once_per_generation() {
        let t0 = Instant::now();
        let ready = |status, reason: &str| DesiredCondition {
            type_: READY,
            status,
            reason: reason.into(),
            message: String::new(),
        };
        let pending = ready(status::CondStatus::Unknown, crate::ready::PENDING);
        let served = ready(status::CondStatus::True, "Served");
        let mut d = Deferred::default();
        assert_eq!(d.grace_left("u", 1, &pending, t0), Some(PENDING_GRACE));
        let later = t0 + PENDING_GRACE / 2;
        assert_eq!(
            d.grace_left("u", 1, &pending, later),
            Some(PENDING_GRACE / 2)
        );
        assert_eq!(
            d.grace_left("u", 1, &pending, t0 + PENDING_GRACE),
            None,
            "over: write"
        );
        assert_eq!(
            d.grace_left("u", 2, &pending, t0 + PENDING_GRACE),
            Some(PENDING_GRACE),
            "a new generation waits again"
        );
        assert_eq!(
            d.grace_left("u", 2, &served, later),
            None,
            "anything else: at once"
        );
        assert_eq!(
            d.grace_left("u", 2, &pending, t0 + PENDING_GRACE * 3),
            Some(PENDING_GRACE),
            "forgotten once it was written otherwise"
        );
        let no_dispatchers = ready(status::CondStatus::Unknown, "NoDispatchers");
        assert_eq!(d.grace_left("v", 1, &no_dispatchers, t0), None);
        // Hooks that went away are pruned, not kept for ever.
        for i in 0..5000 {
            d.grace_left(&format!("gone-{i}"), 1, &pending, t0);
        }
        let much_later = t0 + PENDING_GRACE * 60;
        for i in 0..4000 {
            d.grace_left(&format!("new-{i}"), 1, &pending, much_later);
        }
        assert!(d.by_uid.len() <= 4000, "{}", d.by_uid.len());
    }

    #[test]
    fn verdict_names_reason_and_field() {
        let cfg = config();
        let spec: AgentHookSpec = serde_json::from_value(serde_json::json!({
            "event": "pre_tool_use",
            "tenant": "someone-else",
            "handler": {"type": "http", "http": {"url": "https://policy.example.com/hook"}}
        }))
        .unwrap();
        match spec_verdict(&spec, "tenant-acme", "acme", &cfg) {
            Verdict::Refused(r) => {
                assert_eq!(r.reason, "TenantMismatch");
                assert!(r.message.starts_with("spec.tenant:"), "{}", r.message);
            }
            v => panic!("expected a refusal, got {v:?}"),
        }
        let ok: AgentHookSpec = serde_json::from_value(serde_json::json!({
            "event": "pre_tool_use",
            "handler": {"type": "http", "http": {"url": "https://policy.example.com/hook"}}
        }))
        .unwrap();
        assert_eq!(
            spec_verdict(&ok, "tenant-acme", "acme", &cfg),
            Verdict::Accepted
        );
    }

    #[test]
    fn a_namespace_that_lost_its_claim_refuses_its_hooks_naming_the_holder() {
        let conflict = TenantConflict {
            namespace: "team-b".into(),
            tenant: "acme".into(),
            holder: "tenant-acme".into(),
        };
        match tenant_conflict_verdict(&conflict) {
            Verdict::Refused(r) => {
                assert_eq!(r.reason, "TenantConflict");
                for name in ["team-b", "\"acme\"", "tenant-acme"] {
                    assert!(r.message.contains(name), "{name} in {}", r.message);
                }
                let c = status::accepted_condition(&Verdict::Refused(r.clone()));
                assert_eq!(
                    (c.status, c.reason.as_str()),
                    (status::CondStatus::False, "TenantConflict")
                );
            }
            v => panic!("expected a refusal, got {v:?}"),
        }
    }

    #[test]
    fn standard_edition_refuses_command() {
        let mut cfg = config();
        cfg.edition = agenthooks_crds::Edition::Standard;
        let spec: AgentHookSpec = serde_json::from_value(serde_json::json!({
            "event": "pre_tool_use",
            "handler": {"type": "command", "command": {"command": "true"}}
        }))
        .unwrap();
        match spec_verdict(&spec, "t", "t", &cfg) {
            Verdict::Refused(r) => assert_eq!(r.reason, "EditionForbidsCommand"),
            v => panic!("expected a refusal, got {v:?}"),
        }
    }

    #[test]
    fn tenant_command_hooks_are_refused_unless_allowed() {
        let spec: AgentHookSpec = serde_json::from_value(serde_json::json!({
            "event": "pre_tool_use",
            "handler": {"type": "command", "command": {"command": "true"}}
        }))
        .unwrap();
        let mut cfg = config();
        assert!(!cfg.allow_tenant_command_hooks, "refused by default");
        match spec_verdict(&spec, "tenant-acme", "acme", &cfg) {
            Verdict::Refused(r) => {
                assert_eq!(r.reason, "CommandHookNotAllowed");
                assert!(r.message.starts_with("spec.handler.type:"), "{}", r.message);
            }
            v => panic!("expected a refusal, got {v:?}"),
        }
        assert_eq!(
            spec_verdict(
                &spec,
                &cfg.master_namespace.clone(),
                "agenthooks-system",
                &cfg
            ),
            Verdict::Accepted,
            "the master namespace may"
        );
        cfg.allow_tenant_command_hooks = true;
        assert_eq!(
            spec_verdict(&spec, "tenant-acme", "acme", &cfg),
            Verdict::Accepted
        );
    }
}
