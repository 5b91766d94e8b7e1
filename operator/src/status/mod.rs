//! Status of an AgentHook: condition helpers and server-side-apply writes
//! (CONVENTIONS habits 3 and 4).
//!
//! Three field managers of the operator share a hook's status, so that none of their
//! writes ever removes another's fields:
//!
//! | manager | fields | written by |
//! |---|---|---|
//! | [`crate::FIELD_MANAGER`] (`agenthooks-operator`) | `observedGeneration`, `Accepted`, `Ready` | [`write()`] (the reconcile) |
//! | [`crate::report::breaker::FIELD_MANAGER`] (`agenthooks-operator-breaker`) | `breaker`, `CircuitOpen` | [`crate::report::breaker`] (a reported trip; the reconcile's reset) |
//! | [`crate::report::executions::FIELD_MANAGER`] (`agenthooks-operator-executions`) | `executions` | [`crate::report::executions`] (batched counts) |
//!
//! Here: the reconcile's write, a server-side apply carrying `apiVersion`, `kind` and
//! both of its conditions (an apply that left one out would delete it), and the breaker
//! rule [`breaker_open`]. [`plan`] decides whether anything changes at all; a hook left
//! alone is never rewritten. `lastTransitionTime` moves only when a condition's status
//! changes.
//!
//! Every status write of the operator, of every manager above and of the budgets, goes
//! through one helper, [`writer`]: one retry policy, one lease gate, one set of metrics.

pub mod writer;

use agenthooks_crds::snapshot::OpenBreaker;
use agenthooks_crds::{AgentHook, AgentHookStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::{Api, ResourceExt};

use crate::error::Error;
use crate::index::Verdict;
use writer::{Outcome, Plan, StatusWriter, WriteKind};

/// Condition type set by validation (ours).
pub const ACCEPTED: &str = "Accepted";
/// Condition type set from dispatcher tracking (ours).
pub const READY: &str = "Ready";
/// Condition type of the breaker (CONTRACT §6.2), written by the breaker manager
/// ([`crate::report::breaker`]), never by [`write()`].
pub const CIRCUIT_OPEN: &str = "CircuitOpen";
/// `status.breaker.state` while some tenant's breaker is open.
pub const BREAKER_OPEN: &str = "Open";
/// `status.breaker.state` once no tenant's breaker is open (a probe answered, or a spec or
/// annotation change reset it).
pub const BREAKER_CLOSED: &str = "Closed";

/// `True`, `False` or `Unknown`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CondStatus {
    /// `True`.
    True,
    /// `False`.
    False,
    /// `Unknown`.
    Unknown,
}

impl CondStatus {
    /// The API word.
    pub fn as_str(self) -> &'static str {
        match self {
            CondStatus::True => "True",
            CondStatus::False => "False",
            CondStatus::Unknown => "Unknown",
        }
    }
}

/// A condition as the operator wants it, before times and generations are filled in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DesiredCondition {
    /// Condition type ([`ACCEPTED`] or [`READY`]).
    pub type_: &'static str,
    /// Its status.
    pub status: CondStatus,
    /// CamelCase reason.
    pub reason: String,
    /// Message for a person.
    pub message: String,
}

/// `Accepted`: `True`/`Accepted`, or `False` with the refusal's reason and message (the
/// message names the field, CONTRACT §2.7).
pub fn accepted_condition(verdict: &Verdict) -> DesiredCondition {
    match verdict {
        Verdict::Accepted => DesiredCondition {
            type_: ACCEPTED,
            status: CondStatus::True,
            reason: "Accepted".into(),
            message: "the hook passed validation".into(),
        },
        Verdict::Refused(r) => DesiredCondition {
            type_: ACCEPTED,
            status: CondStatus::False,
            reason: r.reason.clone(),
            message: r.message.clone(),
        },
    }
}

/// Reason of `Accepted: True` when the hook's `spec.matcher` selects one runtime's tool
/// of a kind only ([`agenthooks_crds::tool::matcher_warning`]): accepted, with a warning.
pub const MATCHER_NAMES_ONE_RUNTIME: &str = "MatcherNamesOneRuntime";

/// [`accepted_condition`] for this hook: an accepted hook whose matcher names one
/// runtime's tool only is still `True`, with reason [`MATCHER_NAMES_ONE_RUNTIME`] and
/// the warning as its message (a condition for people, not a refusal).
pub fn accepted_condition_for(
    verdict: &Verdict,
    spec: &agenthooks_crds::AgentHookSpec,
) -> DesiredCondition {
    let accepted = accepted_condition(verdict);
    if !verdict.is_accepted() || spec.matcher.is_empty() {
        return accepted;
    }
    let Ok(matcher) = agenthooks_crds::expr::compile_regex(&spec.matcher) else {
        return accepted;
    };
    match agenthooks_crds::tool::matcher_warning(&matcher, &spec.tool_kinds) {
        Some(warning) => DesiredCondition {
            reason: MATCHER_NAMES_ONE_RUNTIME.into(),
            message: format!("the hook passed validation; warning: {warning}"),
            ..accepted
        },
        None => accepted,
    }
}

/// The current time as a Kubernetes `Time`, in whole seconds (what the API keeps).
pub fn now() -> Time {
    let secs = chrono::Utc::now().timestamp();
    Time(
        k8s_openapi::jiff::Timestamp::from_second(secs)
            .unwrap_or(k8s_openapi::jiff::Timestamp::UNIX_EPOCH),
    )
}

/// The condition to write for `desired`, given the one currently recorded:
/// `lastTransitionTime` is kept when the status did not change, else it is `now`.
pub fn merge_condition(
    current: Option<&Condition>,
    desired: &DesiredCondition,
    generation: i64,
    now: &Time,
) -> Condition {
    let last_transition_time = match current {
        Some(c) if c.status == desired.status.as_str() => c.last_transition_time.clone(),
        _ => now.clone(),
    };
    Condition {
        type_: desired.type_.to_string(),
        status: desired.status.as_str().to_string(),
        reason: desired.reason.clone(),
        message: desired.message.clone(),
        observed_generation: Some(generation),
        last_transition_time,
    }
}

/// Whether the recorded condition already says what `desired` says, for `generation`.
pub fn condition_matches(
    current: Option<&Condition>,
    desired: &DesiredCondition,
    generation: i64,
) -> bool {
    current.is_some_and(|c| {
        c.status == desired.status.as_str()
            && c.reason == desired.reason
            && c.message == desired.message
            && c.observed_generation == Some(generation)
    })
}

/// The recorded condition of type `type_`.
pub fn find_condition<'a>(
    status: Option<&'a AgentHookStatus>,
    type_: &str,
) -> Option<&'a Condition> {
    status.and_then(|s| s.conditions.iter().find(|c| c.type_ == type_))
}

/// A status write: what [`plan`] decided to apply.
#[derive(Debug, Clone, PartialEq)]
pub struct StatusPatch {
    /// `status.observedGeneration`.
    pub observed_generation: i64,
    /// Our conditions, complete (times filled in).
    pub conditions: Vec<Condition>,
    /// Types whose status changed (for Events on transitions only).
    pub transitioned: Vec<&'static str>,
}

impl StatusPatch {
    /// Our part of `status` (the apply adds `apiVersion` and `kind`:
    /// [`writer::body`] of [`WriteKind::Conditions`]).
    pub fn status_body(&self) -> serde_json::Value {
        serde_json::json!({
            "observedGeneration": self.observed_generation,
            "conditions": self.conditions,
        })
    }
}

/// Decides the status write for a hook at `generation` whose recorded status is
/// `current`: `None` when `observedGeneration` and every desired condition already hold
/// (nothing to write), else the full patch.
pub fn plan(
    current: Option<&AgentHookStatus>,
    generation: i64,
    desired: &[DesiredCondition],
    now: &Time,
) -> Option<StatusPatch> {
    let observed_ok = current.and_then(|s| s.observed_generation) == Some(generation);
    let all_match = desired
        .iter()
        .all(|d| condition_matches(find_condition(current, d.type_), d, generation));
    if observed_ok && all_match {
        return None;
    }
    let mut transitioned = Vec::new();
    let conditions = desired
        .iter()
        .map(|d| {
            let cur = find_condition(current, d.type_);
            if cur.is_none_or(|c| c.status != d.status.as_str()) {
                transitioned.push(d.type_);
            }
            merge_condition(cur, d, generation, now)
        })
        .collect();
    Some(StatusPatch {
        observed_generation: generation,
        conditions,
        transitioned,
    })
}

/// The open breakers recorded for what the hook is now (CONTRACT §6.3–6.4), one per
/// tenant in tenant order (the index's order): the entries of `status.breaker.open` when
/// `status.breaker` has `state: Open`, was written at `generation` (the hook's current
/// `metadata.generation`) and with `reset_annotation` equal to the hook's current
/// `agenthooks.io/reset-breaker` annotation (`None` when absent; absent on both sides
/// counts as equal); otherwise none. A spec edit (new generation) or an annotation change
/// therefore closes every tenant without anything writing status first. After an operator
/// restart the index is rebuilt from this. `since_ms` is `trippedAt` in ms since the epoch
/// (0 when it does not parse: the dispatchers then probe at once). The `CircuitOpen`
/// condition only mirrors `status.breaker` and is not read; a legacy `Open` without
/// `open` entries (written before breakers were kept per tenant) opens nothing.
pub fn breaker_open(
    status: Option<&AgentHookStatus>,
    generation: i64,
    reset_annotation: Option<&str>,
) -> Vec<OpenBreaker> {
    let Some(b) = status.and_then(|s| s.breaker.as_ref()).filter(|b| {
        b.state.as_deref() == Some(BREAKER_OPEN)
            && b.generation == Some(generation)
            && b.reset_annotation.as_deref() == reset_annotation
    }) else {
        return Vec::new();
    };
    let mut open: Vec<OpenBreaker> = b
        .open
        .iter()
        .map(|t| OpenBreaker {
            tenant: t.tenant.clone(),
            since_ms: status_time_ms(&t.tripped_at),
            fail_closed: t.fail_closed,
        })
        .collect();
    open.sort();
    open.dedup_by(|a, b| a.tenant == b.tenant);
    open
}

/// A `trippedAt` of `status.breaker.open[]` in ms since the epoch (0 when it does not
/// parse).
pub fn status_time_ms(tripped_at: &str) -> i64 {
    crate::report::times::parse_utc(tripped_at).map_or(0, |t| t.timestamp_millis())
}

/// Whether the recorded status still shows an open breaker (`breaker.state: Open` or
/// `CircuitOpen=True`) although [`breaker_open`] finds none open for what the hook is now:
/// the reconcile then writes it closed ([`crate::report::breaker::reset`]).
pub fn breaker_needs_reset(
    status: Option<&AgentHookStatus>,
    generation: i64,
    reset_annotation: Option<&str>,
) -> bool {
    let recorded_open = status
        .and_then(|s| s.breaker.as_ref())
        .is_some_and(|b| b.state.as_deref() == Some(BREAKER_OPEN))
        || find_condition(status, CIRCUIT_OPEN).is_some_and(|c| c.status == "True");
    recorded_open && breaker_open(status, generation, reset_annotation).is_empty()
}

/// What [`write()`] did.
#[derive(Debug, Clone, PartialEq)]
pub enum WriteOutcome {
    /// Nothing to change; no request made.
    Unchanged,
    /// Applied this patch.
    Written(StatusPatch),
    /// The hook is gone (404).
    Gone,
}

/// Writes the desired conditions of `hook` if they change anything, through `w`
/// ([`WriteKind::Conditions`]: an apply of the reconcile's own fields, planned first
/// from `hook` as cached, with no request when [`plan`] finds nothing to change; a
/// conflict is read again, re-planned and the apply forced, as every status write).
///
/// Errors: [`Error::StatusConflict`] when every attempt met 409, [`Error::NotLeader`]
/// when a write was due on a replica that does not lead, [`Error::Kube`] for any other
/// API failure.
pub async fn write(
    w: &StatusWriter,
    api: &Api<AgentHook>,
    hook: &AgentHook,
    desired: &[DesiredCondition],
) -> Result<WriteOutcome, Error> {
    let name = hook.name_any();
    let uid = hook.uid();
    let generation = hook.metadata.generation.unwrap_or(0);
    let mut target = w.object(api, &name);
    if let Some(uid) = uid.as_deref() {
        target = target.with_uid(uid);
    }
    let outcome = w
        .write(
            WriteKind::Conditions,
            &target,
            Some(hook.clone()),
            &mut None,
            |h: &AgentHook| match plan(h.status.as_ref(), generation, desired, &now()) {
                None => Plan::Skip(None),
                Some(p) => Plan::Write {
                    status: p.status_body(),
                    answer: Some(p),
                },
            },
        )
        .await?;
    Ok(match outcome {
        Outcome::Written {
            answer: Some(p), ..
        } => WriteOutcome::Written(p),
        Outcome::Written { answer: None, .. } | Outcome::Unchanged { .. } => {
            WriteOutcome::Unchanged
        }
        Outcome::Gone => WriteOutcome::Gone,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::index::Refusal;
    use agenthooks_crds::agenthook::{BreakerStatus, TenantBreakerStatus};

    fn t(secs: i64) -> Time {
        Time(k8s_openapi::jiff::Timestamp::from_second(secs).unwrap())
    }

    #[test]
    fn a_matcher_naming_one_runtimes_tool_is_accepted_with_a_warning() {
        let spec = |extra: &str| -> agenthooks_crds::AgentHookSpec {
            let mut v = serde_json::json!({"event": "pre_tool_use", "handler": {"type": "http", "http": {"url": "https://p.example/"}}});
            for line in extra.lines() {
                let (k, val) = line.split_once(": ").unwrap();
                v[k] = match val {
                    "[shell]" => serde_json::json!(["shell"]),
                    other => serde_json::json!(other.trim_matches('\'')),
                };
            }
            serde_json::from_value(v).unwrap()
        };
        let c = accepted_condition_for(&Verdict::Accepted, &spec("matcher: '^Bash$'"));
        assert_eq!(
            (c.status, c.reason.as_str()),
            (CondStatus::True, MATCHER_NAMES_ONE_RUNTIME)
        );
        assert!(c.message.starts_with("the hook passed validation; warning: spec.matcher \"^Bash$\" names one runtime's tool"), "{}", c.message);
        assert!(
            c.message.contains("spec.toolKinds: [shell]"),
            "{}",
            c.message
        );
        for fine in [
            "toolKinds: [shell]",
            "matcher: '^Bash$'\ntoolKinds: [shell]",
            "matcher: '^exec$'",
            "",
        ] {
            let c = accepted_condition_for(&Verdict::Accepted, &spec(fine));
            assert_eq!(c, accepted_condition(&Verdict::Accepted), "{fine:?}");
        }
        // A refusal stays the refusal.
        let refused = Verdict::Refused(Refusal {
            reason: "InvalidTimeout".into(),
            message: "m".into(),
        });
        assert_eq!(
            accepted_condition_for(&refused, &spec("matcher: '^Bash$'")),
            accepted_condition(&refused)
        );
    }

    fn ready(status: CondStatus, reason: &str) -> DesiredCondition {
        DesiredCondition {
            type_: READY,
            status,
            reason: reason.into(),
            message: "m".into(),
        }
    }

    fn applied(patch: &StatusPatch) -> AgentHookStatus {
        AgentHookStatus {
            observed_generation: Some(patch.observed_generation),
            conditions: patch.conditions.clone(),
            ..Default::default()
        }
    }

    #[test]
    fn a_hook_left_alone_is_not_rewritten() {
        let desired = [
            accepted_condition(&Verdict::Accepted),
            ready(CondStatus::Unknown, "Pending"),
        ];
        let first = plan(None, 1, &desired, &t(100)).expect("first write");
        assert_eq!(first.transitioned, [ACCEPTED, READY]);
        let status = applied(&first);
        assert_eq!(
            plan(Some(&status), 1, &desired, &t(200)),
            None,
            "nothing changed"
        );
    }

    #[test]
    fn last_transition_time_moves_only_when_status_changes() {
        let d1 = [
            accepted_condition(&Verdict::Accepted),
            ready(CondStatus::Unknown, "Pending"),
        ];
        let s1 = applied(&plan(None, 1, &d1, &t(100)).unwrap());
        // same status, other reason: written, time kept
        let d2 = [
            accepted_condition(&Verdict::Accepted),
            ready(CondStatus::Unknown, "NoDispatchers"),
        ];
        let p2 = plan(Some(&s1), 1, &d2, &t(200)).unwrap();
        assert!(p2.transitioned.is_empty());
        let r2 = p2.conditions.iter().find(|c| c.type_ == READY).unwrap();
        assert_eq!(r2.last_transition_time, t(100));
        assert_eq!(r2.reason, "NoDispatchers");
        // new generation, same statuses: observedGeneration moves, times kept
        let s2 = applied(&p2);
        let p3 = plan(Some(&s2), 2, &d2, &t(300)).unwrap();
        assert!(
            p3.conditions
                .iter()
                .all(|c| c.last_transition_time == t(100))
        );
        assert!(
            p3.conditions
                .iter()
                .all(|c| c.observed_generation == Some(2))
        );
        // status change: time moves for that condition only
        let s3 = applied(&p3);
        let d4 = [
            accepted_condition(&Verdict::Accepted),
            ready(CondStatus::True, "Served"),
        ];
        let p4 = plan(Some(&s3), 2, &d4, &t(400)).unwrap();
        assert_eq!(p4.transitioned, [READY]);
        let acc = p4.conditions.iter().find(|c| c.type_ == ACCEPTED).unwrap();
        let rdy = p4.conditions.iter().find(|c| c.type_ == READY).unwrap();
        assert_eq!(acc.last_transition_time, t(100));
        assert_eq!(rdy.last_transition_time, t(400));
    }

    #[test]
    fn refusal_carries_reason_and_message() {
        let c = accepted_condition(&Verdict::Refused(Refusal {
            reason: "TenantMismatch".into(),
            message: "spec.tenant: \"x\" is not this namespace's tenant".into(),
        }));
        assert_eq!(c.status, CondStatus::False);
        assert_eq!(c.reason, "TenantMismatch");
        assert!(c.message.starts_with("spec.tenant"));
    }

    #[test]
    fn other_managers_conditions_are_left_out_of_the_patch() {
        let mut status =
            applied(&plan(None, 1, &[accepted_condition(&Verdict::Accepted)], &t(1)).unwrap());
        status.conditions.push(Condition {
            type_: CIRCUIT_OPEN.into(),
            status: "True".into(),
            reason: "Tripped".into(),
            message: String::new(),
            observed_generation: Some(1),
            last_transition_time: t(5),
        });
        let p = plan(
            Some(&status),
            1,
            &[
                accepted_condition(&Verdict::Accepted),
                ready(CondStatus::False, "CircuitOpen"),
            ],
            &t(9),
        )
        .unwrap();
        assert!(p.conditions.iter().all(|c| c.type_ != CIRCUIT_OPEN));
        let body = writer::body::<AgentHook>(WriteKind::Conditions, "h", None, p.status_body());
        assert_eq!(body["apiVersion"], "agenthooks.io/v1alpha1");
        assert_eq!(body["kind"], "AgentHook");
        assert_eq!(body["status"]["observedGeneration"], 1);
        assert!(body.get("spec").is_none() && body.get("metadata").is_none());
    }

    fn open_breaker(generation: Option<i64>, annotation: Option<&str>) -> AgentHookStatus {
        let tenant = |tenant: &str, at: &str, fail_closed| TenantBreakerStatus {
            tenant: tenant.into(),
            tripped_at: at.into(),
            fail_closed,
            ..Default::default()
        };
        AgentHookStatus {
            breaker: Some(BreakerStatus {
                state: Some(BREAKER_OPEN.into()),
                generation,
                reset_annotation: annotation.map(str::to_string),
                open: vec![
                    tenant("tb", "2025-03-01T10:00:00.250Z", true),
                    tenant("ta", "junk", false),
                ],
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    fn opens(v: &[OpenBreaker]) -> Vec<(&str, i64, bool)> {
        v.iter()
            .map(|b| (b.tenant.as_str(), b.since_ms, b.fail_closed))
            .collect()
    }

    #[test]
    fn breaker_open_needs_state_generation_and_annotation() {
        assert!(breaker_open(None, 1, None).is_empty());
        let s = open_breaker(Some(1), None);
        assert_eq!(
            opens(&breaker_open(Some(&s), 1, None)),
            [("ta", 0, false), ("tb", 1_740_823_200_250, true)],
            "None == None; tenant order; an unparsable time is 0"
        );
        assert!(
            breaker_open(Some(&s), 2, None).is_empty(),
            "a new generation closes every tenant"
        );
        assert!(
            breaker_open(Some(&s), 1, Some("1")).is_empty(),
            "an annotation set since closes it"
        );
        let s = open_breaker(Some(3), Some("a"));
        assert_eq!(breaker_open(Some(&s), 3, Some("a")).len(), 2);
        assert!(
            breaker_open(Some(&s), 3, Some("b")).is_empty(),
            "annotation changed"
        );
        assert!(
            breaker_open(Some(&s), 3, None).is_empty(),
            "annotation removed"
        );
        let no_generation = open_breaker(None, None);
        assert!(
            breaker_open(Some(&no_generation), 1, None).is_empty(),
            "no recorded generation: not for this generation"
        );
        let mut closed = open_breaker(Some(1), None);
        closed.breaker.as_mut().unwrap().state = Some(BREAKER_CLOSED.into());
        assert!(breaker_open(Some(&closed), 1, None).is_empty());
        let mut legacy = open_breaker(Some(1), None);
        legacy.breaker.as_mut().unwrap().open.clear();
        assert!(
            breaker_open(Some(&legacy), 1, None).is_empty(),
            "seed-era Open: no tenant"
        );
        assert!(
            breaker_needs_reset(Some(&legacy), 1, None),
            "written closed"
        );
    }

    #[test]
    fn the_condition_alone_never_opens_but_asks_for_a_reset() {
        let mut s = AgentHookStatus::default();
        s.conditions.push(Condition {
            type_: CIRCUIT_OPEN.into(),
            status: "True".into(),
            reason: "BreakerTripped".into(),
            message: String::new(),
            observed_generation: Some(1),
            last_transition_time: t(5),
        });
        assert!(breaker_open(Some(&s), 1, None).is_empty());
        assert!(breaker_needs_reset(Some(&s), 1, None));
    }

    #[test]
    fn reset_is_needed_only_when_a_recorded_open_no_longer_applies() {
        assert!(!breaker_needs_reset(None, 1, None));
        let s = open_breaker(Some(1), None);
        assert!(!breaker_needs_reset(Some(&s), 1, None), "still applies");
        assert!(breaker_needs_reset(Some(&s), 2, None), "spec edited");
        assert!(
            breaker_needs_reset(Some(&s), 1, Some("x")),
            "annotation set"
        );
        let mut closed = s.clone();
        closed.breaker.as_mut().unwrap().state = Some(BREAKER_CLOSED.into());
        assert!(
            !breaker_needs_reset(Some(&closed), 2, None),
            "already closed"
        );
    }
}
