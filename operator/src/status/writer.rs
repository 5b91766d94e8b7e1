//! The one way this operator writes a status (CONVENTIONS "One writer, one patch path",
//! after linkerd's policy-controller status writer): every read-modify-write of an
//! AgentHook's or a TenantHookBudget's status — the reconcile's conditions, a breaker
//! trip, close or reset, the execution counts, a budget's settles and its reconcile — goes
//! through [`StatusWriter::write`], with one retry policy ([`RetryPolicy`], `backon`'s
//! jittered exponential backoff), one lease gate and one set of metrics.
//!
//! A write is a plan over the object: the caller's `plan` computes the status it wants
//! from the object as read ([`Plan::Write`], the JSON of the status fields this writer
//! owns) or says there is nothing to do ([`Plan::Skip`]). Then:
//!
//! 1. **Skip when nothing but timestamps would change**: when the object's status already
//!    holds every field of the wanted one, ignoring [`TIMESTAMP_FIELDS`]
//!    (`lastTransitionTime`, ...), nothing is sent ([`covers`]). A status left alone is
//!    never rewritten.
//! 2. **Lease-gated**: a patch is sent only while this replica leads (the `leader` of
//!    [`Serving`], which the Lease guard of [`crate::leader`] drives); otherwise the write
//!    ends with [`Error::NotLeader`], nothing sent.
//! 3. **One patch shape per write kind** ([`WriteKind`]): its field manager, server-side
//!    apply or JSON merge patch, and whether the patch carries the `resourceVersion` it was
//!    computed from as precondition ([`body`]). An apply is forced after a conflict (the
//!    fields are ours by contract).
//! 4. **Conflict**: a `409` is counted, and after the policy's pause the object is read
//!    again and the plan recomputed from the fresh object.
//! 5. **No answer** (a timeout, a transport error, a `5xx` or `408`:
//!    [`crate::report::api::may_have_landed`]): the patch may have been applied all the
//!    same. A write without precondition (an apply of fields it owns) just reads again and
//!    re-plans: applying the same fields twice changes nothing. A write with a precondition
//!    is **in doubt** ([`InDoubt`]): its precondition lets it land only as the version
//!    right after the one it was based on, so the next read tells exactly — still at that
//!    version: nothing landed, the plan is sent again with the same precondition (at most
//!    one of the two lands); moved on: the object's first change after that version (a
//!    watch from it) is ours exactly when it shows what was sent, and then the write is
//!    done; if the watch history no longer reaches back (`410 Gone`), the fresh object is
//!    compared instead (logged). While in doubt, a failed read is retried too.
//! 6. **Bounded**: at most [`RetryPolicy::max_attempts`] rounds (each a read or a cached
//!    object, then maybe a patch), every API call bounded by
//!    [`RetryPolicy::request_timeout`]. Past the bound the write fails
//!    ([`Error::StatusConflict`] when the last round met `409`, else the last error); a
//!    doubt still open is handed back to the caller, which may pass it to its next write of
//!    the same change (the budget's settle writer does).
//!
//! Any other failure (a read outside a doubt, `403`, `422`, `429`, ...) ends the write at
//! once with that error: the callers decide (requeue, drop, answer `504`).
//!
//! Metrics: `agenthooks_operator_status_writes_total{kind, outcome}` — one per write, by
//! [`WriteKind::label`] and [`Outcome::label`]-like outcome (`written`, `unchanged`,
//! `gone`, `conflict`, `failed`, `not_leader`) — and
//! `agenthooks_operator_status_write_conflicts_total{kind}`, every `409` met.
//!
//! The retry loop is written out rather than `backon::Retryable`, because a round's
//! decision depends on what earlier rounds left (a doubt, the patches sent); its pauses
//! are `backon`'s.

use std::fmt::Debug;
use std::future::Future;
use std::time::Duration;

use backon::{BackoffBuilder, ExponentialBuilder};
use futures::StreamExt;
use kube::api::{Patch, PatchParams, WatchEvent, WatchParams};
use kube::{Api, Resource};
use prometheus::IntCounterVec;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;
use tokio::sync::watch;

use crate::error::Error;
use crate::metrics::Metrics;
use crate::report::api::{bounded, may_have_landed};
use crate::shared::Serving;

/// Fields a status write never counts as a change on their own: times that move with
/// every write of an otherwise equal status (conditions' `lastTransitionTime`, and the
/// usual names of update, heartbeat and probe times).
pub const TIMESTAMP_FIELDS: [&str; 4] = [
    "lastTransitionTime",
    "lastUpdateTime",
    "lastHeartbeatTime",
    "lastProbeTime",
];

/// The retry policy of every status write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Rounds at most (each a read or the cached object, then maybe a patch): the first
    /// and the retries after a conflict, a patch without answer, or a failed read while in
    /// doubt.
    pub max_attempts: u32,
    /// Pause before the first retry; each next pause doubles, with jitter (`backon`).
    pub first_delay: Duration,
    /// Longest pause between two rounds.
    pub max_delay: Duration,
    /// Limit of each read, patch or watch.
    pub request_timeout: Duration,
}

impl RetryPolicy {
    /// What the operator runs with: 6 rounds, pauses from 20 ms doubling up to 1 s
    /// (about 0.6 s in all before the jitter), 10 s per API call.
    pub const DEFAULT: RetryPolicy = RetryPolicy {
        max_attempts: 6,
        first_delay: Duration::from_millis(20),
        max_delay: Duration::from_secs(1),
        request_timeout: crate::report::api::REQUEST_TIMEOUT,
    };

    /// The pauses between rounds: `max_attempts - 1` of them.
    pub fn backoff(&self) -> impl Iterator<Item = Duration> + Send + use<> {
        ExponentialBuilder::default()
            .with_min_delay(self.first_delay)
            .with_max_delay(self.max_delay)
            .with_factor(2.0)
            .with_jitter()
            .with_max_times(self.max_attempts.saturating_sub(1) as usize)
            .build()
    }
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy::DEFAULT
    }
}

/// The status writes of the operator, each with its own field manager and patch shape.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum WriteKind {
    /// An AgentHook's `observedGeneration`, `Accepted` and `Ready` (the reconcile).
    Conditions,
    /// A tenant's breaker tripped: `status.breaker`, `CircuitOpen`.
    BreakerTrip,
    /// A half-open probe closed a tenant's breaker.
    BreakerClose,
    /// A breaker that no longer applies written closed (the reconcile).
    BreakerReset,
    /// `status.executions` counts added.
    Executions,
    /// Settled tokens added to a TenantHookBudget's `status.used`.
    BudgetSettle,
    /// A TenantHookBudget's status as it should show (the budget reconcile).
    BudgetReconcile,
}

/// How a write patches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PatchShape {
    /// Server-side apply of the fields this manager owns (with `apiVersion` and `kind`).
    Apply {
        /// Whether the apply carries the `resourceVersion` it was computed from.
        precondition: bool,
    },
    /// JSON merge patch with the `resourceVersion` it was computed from.
    Merge,
}

impl PatchShape {
    /// Whether the patch carries a `resourceVersion` precondition.
    pub fn precondition(self) -> bool {
        match self {
            PatchShape::Apply { precondition } => precondition,
            PatchShape::Merge => true,
        }
    }
}

impl WriteKind {
    /// Every kind (metric label order).
    pub const ALL: [WriteKind; 7] = [
        WriteKind::Conditions,
        WriteKind::BreakerTrip,
        WriteKind::BreakerClose,
        WriteKind::BreakerReset,
        WriteKind::Executions,
        WriteKind::BudgetSettle,
        WriteKind::BudgetReconcile,
    ];

    /// The `kind` label of the status write metrics.
    pub fn label(self) -> &'static str {
        match self {
            WriteKind::Conditions => "conditions",
            WriteKind::BreakerTrip => "breaker_trip",
            WriteKind::BreakerClose => "breaker_close",
            WriteKind::BreakerReset => "breaker_reset",
            WriteKind::Executions => "executions",
            WriteKind::BudgetSettle => "budget_settle",
            WriteKind::BudgetReconcile => "budget_reconcile",
        }
    }

    /// The field manager of its patches (the three AgentHook managers of
    /// [`crate::status`] never remove each other's fields).
    pub fn field_manager(self) -> &'static str {
        match self {
            WriteKind::Conditions | WriteKind::BudgetSettle | WriteKind::BudgetReconcile => {
                crate::FIELD_MANAGER
            }
            WriteKind::BreakerTrip | WriteKind::BreakerClose | WriteKind::BreakerReset => {
                crate::report::breaker::FIELD_MANAGER
            }
            WriteKind::Executions => crate::report::executions::FIELD_MANAGER,
        }
    }

    /// Its patch: the conditions are an apply of the reconcile's own fields (no
    /// precondition: it never reads before it writes); the breaker's applies and the
    /// read-modify-writes that add (counts, used tokens) or replace a whole status (the
    /// budget reconcile) carry the version they were computed from.
    pub fn shape(self) -> PatchShape {
        match self {
            WriteKind::Conditions => PatchShape::Apply {
                precondition: false,
            },
            WriteKind::BreakerTrip | WriteKind::BreakerClose | WriteKind::BreakerReset => {
                PatchShape::Apply { precondition: true }
            }
            WriteKind::Executions | WriteKind::BudgetSettle | WriteKind::BudgetReconcile => {
                PatchShape::Merge
            }
        }
    }
}

/// The `outcome` labels of `agenthooks_operator_status_writes_total`.
pub const OUTCOMES: [&str; 6] = [
    "written",
    "unchanged",
    "gone",
    "conflict",
    "failed",
    "not_leader",
];

/// The body of a status patch of `kind` for object `name` of kind `K`, computed from
/// version `resource_version`, setting `status`: an apply carries `apiVersion` and
/// `kind` (and `metadata.name` with the precondition when it has one); a merge patch
/// carries the precondition.
pub fn body<K: Resource<DynamicType = ()>>(
    kind: WriteKind,
    name: &str,
    resource_version: Option<&str>,
    status: Value,
) -> Value {
    match kind.shape() {
        PatchShape::Apply {
            precondition: false,
        } => serde_json::json!({
            "apiVersion": K::api_version(&()),
            "kind": K::kind(&()),
            "status": status,
        }),
        PatchShape::Apply { precondition: true } => serde_json::json!({
            "apiVersion": K::api_version(&()),
            "kind": K::kind(&()),
            "metadata": {"name": name, "resourceVersion": resource_version},
            "status": status,
        }),
        PatchShape::Merge => serde_json::json!({
            "metadata": {"resourceVersion": resource_version},
            "status": status,
        }),
    }
}

/// Whether `have` already holds everything in `want` (JSON): every field `want` sets has
/// the same value in `have` (a `null` in `want`: absent or `null` in `have`), objects
/// compared field by field, lists of objects that all have a `type` (conditions, a list
/// keyed by type) matched by type, other lists element by element. `ignore_timestamps`
/// skips [`TIMESTAMP_FIELDS`]; `lists_replaced` (a merge patch replaces lists whole)
/// also requires lists of the same length, so a condition `want` leaves out counts as a
/// change.
pub fn covers(have: &Value, want: &Value, ignore_timestamps: bool, lists_replaced: bool) -> bool {
    match want {
        Value::Object(w) => {
            let Value::Object(h) = have else {
                return false;
            };
            w.iter().all(|(k, wv)| {
                if ignore_timestamps && TIMESTAMP_FIELDS.contains(&k.as_str()) {
                    return true;
                }
                match h.get(k) {
                    None => wv.is_null(),
                    Some(hv) => covers(hv, wv, ignore_timestamps, lists_replaced),
                }
            })
        }
        Value::Array(w) => {
            let Value::Array(h) = have else {
                return false;
            };
            if lists_replaced && h.len() != w.len() {
                return false;
            }
            let typed = |v: &Value| v.get("type").and_then(Value::as_str).map(str::to_string);
            let keyed = !w.is_empty() && w.iter().all(|v| typed(v).is_some());
            if keyed {
                w.iter().all(|wv| {
                    h.iter().any(|hv| {
                        typed(hv) == typed(wv) && covers(hv, wv, ignore_timestamps, lists_replaced)
                    })
                })
            } else {
                h.len() == w.len()
                    && h.iter()
                        .zip(w)
                        .all(|(hv, wv)| covers(hv, wv, ignore_timestamps, lists_replaced))
            }
        }
        other => have == other,
    }
}

/// What a plan decided for the object it was given.
#[derive(Debug, Clone, PartialEq)]
pub enum Plan<T> {
    /// Nothing to write: the write ends [`Outcome::Unchanged`] with this answer.
    Skip(T),
    /// Write `status` (the JSON of the status fields this writer owns), then answer.
    Write {
        /// The status fields to set.
        status: Value,
        /// What the caller learns once they are written.
        answer: T,
    },
}

/// How a write ended (errors apart).
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome<K, T> {
    /// Nothing to write: the plan said so, or only timestamps would have changed.
    Unchanged {
        /// The object as last read (or as given).
        current: K,
        /// The plan's answer.
        answer: T,
    },
    /// Written (or a patch without answer was found to have landed).
    Written {
        /// The plan's answer for the status written.
        answer: T,
        /// The object the written status was computed from.
        before: K,
        /// The object after the write, when the API server's answer (or the object's
        /// history) showed it.
        after: Option<K>,
        /// Patches sent by this write (0: a doubt handed in had landed).
        patches: u32,
    },
    /// The object is gone (404), or its name now belongs to another uid.
    Gone,
}

impl<K, T> Outcome<K, T> {
    /// The `outcome` label.
    pub fn label(&self) -> &'static str {
        match self {
            Outcome::Unchanged { .. } => "unchanged",
            Outcome::Written { .. } => "written",
            Outcome::Gone => "gone",
        }
    }
}

/// A patch sent without answer: the version it was computed from, what it set, and the
/// answer of its plan.
#[derive(Debug, Clone, PartialEq)]
pub struct InDoubt<T> {
    /// `metadata.resourceVersion` of its precondition.
    pub based_on: String,
    /// The status fields it set.
    pub sent: Value,
    /// Its plan's answer (what the write answers if it landed).
    pub answer: T,
}

/// The API calls of one object's status writes: [`ObjectApi`] on the API server; tests
/// put a fake or a wrapper in its place.
pub trait StatusTarget<K>: Send + Sync {
    /// `namespace/name` (logs, errors).
    fn key(&self) -> String;
    /// The object's name.
    fn name(&self) -> &str;
    /// Reads the object: `None` when it is gone (or is another object of that name).
    fn read(&self) -> impl Future<Output = Result<Option<K>, kube::Error>> + Send;
    /// Sends patch number `attempt` (1, 2, ...) of the status; the object after, when the
    /// answer carries it.
    fn patch(
        &self,
        attempt: u32,
        params: PatchParams,
        patch: Patch<Value>,
    ) -> impl Future<Output = Result<Option<K>, kube::Error>> + Send;
    /// The object's first change after `version`: `Some` when modified, `None` when
    /// deleted or re-created.
    fn first_change_after(
        &self,
        version: &str,
    ) -> impl Future<Output = Result<Option<K>, kube::Error>> + Send;
}

/// One object of an [`Api`], named, and optionally pinned to a uid (a read that finds
/// another uid under the name finds nothing). Every call bounded by `timeout`.
#[derive(Clone)]
pub struct ObjectApi<'a, K> {
    api: &'a Api<K>,
    name: &'a str,
    uid: Option<&'a str>,
    timeout: Duration,
}

impl<'a, K> ObjectApi<'a, K> {
    /// Object `name` of `api`, calls bounded by `timeout` (usually the writer's
    /// [`RetryPolicy::request_timeout`]: [`StatusWriter::object`]).
    pub fn new(api: &'a Api<K>, name: &'a str, timeout: Duration) -> Self {
        ObjectApi {
            api,
            name,
            uid: None,
            timeout,
        }
    }

    /// Pinned to `uid`.
    pub fn with_uid(mut self, uid: &'a str) -> Self {
        self.uid = Some(uid);
        self
    }

    /// The API.
    pub fn api(&self) -> &'a Api<K> {
        self.api
    }
}

impl<K> StatusTarget<K> for ObjectApi<'_, K>
where
    K: Resource + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
{
    fn key(&self) -> String {
        format!("{}/{}", self.api.namespace().unwrap_or_default(), self.name)
    }

    fn name(&self) -> &str {
        self.name
    }

    async fn read(&self) -> Result<Option<K>, kube::Error> {
        let read = bounded(
            self.timeout,
            || format!("get {}", self.key()),
            self.api.get_opt(self.name),
        )
        .await?;
        Ok(read.filter(|o| self.uid.is_none() || o.meta().uid.as_deref() == self.uid))
    }

    async fn patch(
        &self,
        _attempt: u32,
        params: PatchParams,
        patch: Patch<Value>,
    ) -> Result<Option<K>, kube::Error> {
        bounded(
            self.timeout,
            || format!("patch {}/status", self.key()),
            self.api.patch_status(self.name, &params, &patch),
        )
        .await
        .map(Some)
    }

    async fn first_change_after(&self, version: &str) -> Result<Option<K>, kube::Error> {
        let seconds = u32::try_from(self.timeout.as_secs().max(1)).unwrap_or(u32::MAX);
        let params = WatchParams::default()
            .fields(&format!("metadata.name={}", self.name))
            .timeout(seconds);
        let next = bounded(
            self.timeout,
            || format!("watch {}", self.key()),
            first_change(self.api, &params, version),
        )
        .await?;
        Ok(next.filter(|o| self.uid.is_none() || o.meta().uid.as_deref() == self.uid))
    }
}

/// The first change of the object(s) `params` selects after `version`: `Some(object)` when
/// modified, `None` when deleted or re-created.
async fn first_change<K>(
    api: &Api<K>,
    params: &WatchParams,
    version: &str,
) -> Result<Option<K>, kube::Error>
where
    K: Clone + DeserializeOwned + Debug + Send + 'static,
{
    let events = api.watch(params, version).await?;
    let mut events = std::pin::pin!(events);
    while let Some(event) = events.next().await {
        match event? {
            WatchEvent::Modified(o) => return Ok(Some(o)),
            WatchEvent::Added(_) | WatchEvent::Deleted(_) => return Ok(None),
            WatchEvent::Bookmark(_) => {}
            WatchEvent::Error(s) => return Err(kube::Error::Api(s)),
        }
    }
    Err(kube::Error::Service(
        "the watch ended without an event".into(),
    ))
}

/// The status writer: the lease gate, the metrics and the retry policy every status write
/// shares. Cheap to clone.
#[derive(Debug, Clone)]
pub struct StatusWriter {
    leader: watch::Receiver<Serving>,
    writes: IntCounterVec,
    conflicts: IntCounterVec,
    policy: RetryPolicy,
}

/// What a round of a write ended in, when it did not end the write.
enum Retry {
    /// `409 Conflict`.
    Conflict(kube::Error),
    /// A patch without answer, or a failed read while in doubt.
    NoAnswer(kube::Error),
    /// A patch without answer of a write without precondition: read again and re-plan.
    Replan(kube::Error),
}

impl StatusWriter {
    /// A writer counting in `metrics`, writing only while `leader` says this replica
    /// leads, with [`RetryPolicy::DEFAULT`].
    pub fn new(metrics: &Metrics, leader: watch::Receiver<Serving>) -> StatusWriter {
        StatusWriter {
            leader,
            writes: metrics.status_writes_total.clone(),
            conflicts: metrics.status_write_conflicts_total.clone(),
            policy: RetryPolicy::DEFAULT,
        }
    }

    /// The same writer with `policy`.
    pub fn with_policy(mut self, policy: RetryPolicy) -> StatusWriter {
        self.policy = policy;
        self
    }

    /// Its retry policy.
    pub fn policy(&self) -> &RetryPolicy {
        &self.policy
    }

    /// Whether this replica leads now (a patch is sent only then).
    pub fn is_leader(&self) -> bool {
        self.leader.borrow().leader
    }

    /// Object `name` of `api`, its calls bounded by this writer's request timeout.
    pub fn object<'a, K>(&self, api: &'a Api<K>, name: &'a str) -> ObjectApi<'a, K> {
        ObjectApi::new(api, name, self.policy.request_timeout)
    }

    /// Writes the status of `target`'s object as `plan` computes it from the object:
    /// starting from `start` (a cached object) or, without one (or with a `doubt` handed
    /// in), from a read. See the module documentation for the rules.
    ///
    /// `doubt`: a patch of this same change from an earlier write whose outcome stayed
    /// unknown (`None` for a new change). On return it holds this write's patch when its
    /// outcome stayed unknown, else `None`.
    ///
    /// Errors: [`Error::NotLeader`] when a patch was due while this replica does not lead;
    /// [`Error::StatusConflict`] when every round met `409`; [`Error::MissingField`] for
    /// an object without `resourceVersion` where the patch needs one; [`Error::Kube`] for
    /// any other API failure, a call that did not answer within the request timeout, or a
    /// patch whose outcome stayed unknown past the bound.
    pub async fn write<K, T, P>(
        &self,
        kind: WriteKind,
        target: &impl StatusTarget<K>,
        start: Option<K>,
        doubt: &mut Option<InDoubt<T>>,
        mut plan: P,
    ) -> Result<Outcome<K, T>, Error>
    where
        K: Resource<DynamicType = ()> + Clone + Serialize + Debug + Send + Sync,
        T: Clone + Send,
        P: FnMut(&K) -> Plan<T> + Send,
    {
        let result = self.run(kind, target, start, doubt, &mut plan).await;
        let outcome = match &result {
            Ok(o) => o.label(),
            Err(Error::NotLeader { .. }) => "not_leader",
            Err(Error::StatusConflict { .. }) => "conflict",
            Err(_) => "failed",
        };
        self.writes
            .with_label_values(&[kind.label(), outcome])
            .inc();
        if let Err(e) = &result {
            tracing::debug!(kind = kind.label(), object = %target.key(), error = %e, in_doubt = doubt.is_some(), "status write failed");
        }
        result
    }

    async fn run<K, T, P>(
        &self,
        kind: WriteKind,
        target: &impl StatusTarget<K>,
        start: Option<K>,
        doubt: &mut Option<InDoubt<T>>,
        plan: &mut P,
    ) -> Result<Outcome<K, T>, Error>
    where
        K: Resource<DynamicType = ()> + Clone + Serialize + Debug + Send + Sync,
        T: Clone + Send,
        P: FnMut(&K) -> Plan<T> + Send,
    {
        let shape = kind.shape();
        let mut pauses = self.policy.backoff();
        let mut cached = start.filter(|_| doubt.is_none());
        let mut patches: u32 = 0;
        let mut round: u32 = 0;
        loop {
            round += 1;
            let retry = match self
                .round(kind, target, &mut cached, doubt, plan, &mut patches)
                .await
            {
                Ok(Ok(done)) => return Ok(done),
                Ok(Err(retry)) => retry,
                Err(e) => return Err(e),
            };
            let Some(pause) = pauses.next() else {
                return Err(match retry {
                    Retry::Conflict(source) => {
                        tracing::warn!(kind = kind.label(), object = %target.key(), rounds = round, "status write still conflicted after every retry");
                        Error::StatusConflict {
                            key: target.key(),
                            attempts: round,
                            source,
                        }
                    }
                    Retry::NoAnswer(e) | Retry::Replan(e) => {
                        if doubt.is_some() {
                            tracing::warn!(kind = kind.label(), object = %target.key(), error = %e, "the outcome of a status patch stays unknown after every retry");
                        }
                        Error::Kube(e)
                    }
                });
            };
            match &retry {
                Retry::Conflict(e) => {
                    tracing::debug!(kind = kind.label(), object = %target.key(), round, error = %e, retry_in_ms = pause.as_millis() as u64, "status write conflicted; reading again")
                }
                Retry::NoAnswer(e) | Retry::Replan(e) => {
                    tracing::warn!(kind = kind.label(), object = %target.key(), round, error = %e, in_doubt = shape.precondition(), retry_in_ms = pause.as_millis() as u64, "status write without answer; reading again")
                }
            }
            tokio::time::sleep(pause).await;
        }
    }

    /// One round: the object (cached or read), a doubt resolved, the plan, the patch.
    /// `Ok(Ok(_))` ends the write, `Ok(Err(_))` asks for another round.
    async fn round<K, T, P>(
        &self,
        kind: WriteKind,
        target: &impl StatusTarget<K>,
        cached: &mut Option<K>,
        doubt: &mut Option<InDoubt<T>>,
        plan: &mut P,
        patches: &mut u32,
    ) -> Result<Result<Outcome<K, T>, Retry>, Error>
    where
        K: Resource<DynamicType = ()> + Clone + Serialize + Debug + Send + Sync,
        T: Clone + Send,
        P: FnMut(&K) -> Plan<T> + Send,
    {
        let shape = kind.shape();
        let current = match cached.take() {
            Some(o) => o,
            None => match target.read().await {
                Ok(Some(o)) => o,
                Ok(None) => {
                    *doubt = None;
                    return Ok(Ok(Outcome::Gone));
                }
                Err(e) if doubt.is_some() => return Ok(Err(Retry::NoAnswer(e))),
                Err(e) => return Err(e.into()),
            },
        };
        let version = current.meta().resource_version.clone();
        if let Some(d) = doubt.take() {
            if version.as_deref() == Some(d.based_on.as_str()) {
                // Nothing landed yet: the plan goes again with the same precondition, so
                // at most one of the two patches can land.
                *doubt = Some(d);
            } else if let Some(after) = self.landed(target, &d, &current).await {
                tracing::info!(kind = kind.label(), object = %target.key(), "a status patch without answer had landed");
                return Ok(Ok(Outcome::Written {
                    answer: d.answer,
                    before: current,
                    after: Some(after),
                    patches: *patches,
                }));
            }
            // else: the object moved on without it; planned afresh from what it is now
        }
        let (status, answer) = match plan(&current) {
            Plan::Skip(answer) => {
                *doubt = None;
                return Ok(Ok(Outcome::Unchanged { current, answer }));
            }
            Plan::Write { status, answer } => (status, answer),
        };
        let have = serde_json::to_value(&current)
            .ok()
            .and_then(|mut v| v.get_mut("status").map(Value::take))
            .unwrap_or(Value::Null);
        if covers(&have, &status, true, shape == PatchShape::Merge) {
            *doubt = None;
            return Ok(Ok(Outcome::Unchanged { current, answer }));
        }
        if !self.is_leader() {
            return Err(Error::NotLeader { key: target.key() });
        }
        let precondition = if shape.precondition() {
            Some(version.ok_or(Error::MissingField {
                kind: "status target",
                field: "resourceVersion",
            })?)
        } else {
            None
        };
        let body = body::<K>(kind, target.name(), precondition.as_deref(), status.clone());
        let (params, patch) = match shape {
            // These fields are ours by contract: after a conflict (another manager held
            // them, e.g. an admin's edit), the apply takes them over.
            PatchShape::Apply { .. } if *patches > 0 => (
                PatchParams::apply(kind.field_manager()).force(),
                Patch::Apply(body),
            ),
            PatchShape::Apply { .. } => {
                (PatchParams::apply(kind.field_manager()), Patch::Apply(body))
            }
            PatchShape::Merge => (
                PatchParams {
                    field_manager: Some(kind.field_manager().to_string()),
                    ..Default::default()
                },
                Patch::Merge(body),
            ),
        };
        *patches += 1;
        match target.patch(*patches, params, patch).await {
            Ok(after) => {
                *doubt = None;
                Ok(Ok(Outcome::Written {
                    answer,
                    before: current,
                    after,
                    patches: *patches,
                }))
            }
            Err(kube::Error::Api(s)) if s.code == 404 => {
                *doubt = None;
                Ok(Ok(Outcome::Gone))
            }
            Err(kube::Error::Api(s)) if s.code == 409 => {
                self.conflicts.with_label_values(&[kind.label()]).inc();
                // A doubt stays: the conflict may be with our own unanswered patch.
                Ok(Err(Retry::Conflict(kube::Error::Api(s))))
            }
            Err(e) if may_have_landed(&e) => match precondition {
                Some(based_on) => {
                    *doubt = Some(InDoubt {
                        based_on,
                        sent: status,
                        answer,
                    });
                    Ok(Err(Retry::NoAnswer(e)))
                }
                None => Ok(Err(Retry::Replan(e))),
            },
            Err(e) => {
                *doubt = None;
                Err(e.into())
            }
        }
    }

    /// Whether the patch in `doubt` landed, given that the object (`fresh`) has moved past
    /// the version it was based on: `Some(object after it)` when the object's first change
    /// after that version shows what was sent; when the history cannot be read (e.g.
    /// `410 Gone`), judged from `fresh` (logged).
    async fn landed<K, T>(
        &self,
        target: &impl StatusTarget<K>,
        doubt: &InDoubt<T>,
        fresh: &K,
    ) -> Option<K>
    where
        K: Resource + Clone + Serialize,
    {
        let shows = |o: &K| {
            let have = serde_json::to_value(o)
                .ok()
                .and_then(|mut v| v.get_mut("status").map(Value::take))
                .unwrap_or(Value::Null);
            covers(&have, &doubt.sent, false, false)
        };
        match target.first_change_after(&doubt.based_on).await {
            Ok(Some(next)) => shows(&next).then_some(next),
            Ok(None) => None,
            Err(e) => {
                let guess = shows(fresh);
                tracing::warn!(object = %target.key(), error = %e, landed = guess, "the object's history after an unanswered status patch could not be read; judged from its current status");
                guess.then(|| fresh.clone())
            }
        }
    }
}

#[cfg(test)]
mod tests;
