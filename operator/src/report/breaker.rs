//! The breaker's status (CONTRACT §6.2–6.3): `status.breaker` and the `CircuitOpen`
//! condition, written by their own server-side-apply field manager [`FIELD_MANAGER`], so
//! the reconcile's apply (manager `agenthooks-operator`: `observedGeneration`, `Accepted`,
//! `Ready`) never removes them and they never remove its fields.
//!
//! - [`record_trip`]: a dispatcher reported a trip; written `Open` with who, when and why,
//!   `CircuitOpen=True` (reason [`REASON_TRIPPED`]).
//! - [`reset`]: the spec or the `agenthooks.io/reset-breaker` annotation changed since;
//!   written `Closed` (the last trip's details kept), `CircuitOpen=False` (reason
//!   [`REASON_RESET`]).
//!
//! Both are read-modify-writes with the read `metadata.resourceVersion` as precondition,
//! so a trip and a reset racing on the same hook never undo each other: the loser meets
//! `409 Conflict`, reads again and decides again. Each read and patch is bounded by
//! [`REQUEST_TIMEOUT`]. Nothing here writes `spec`.

use agenthooks_crds::agenthook::BreakerStatus;
use agenthooks_crds::report::TripReport;
use agenthooks_crds::{AgentHook, RESET_BREAKER_ANNOTATION};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::api::{Patch, PatchParams};
use kube::{Api, ResourceExt};

use super::api::{REQUEST_TIMEOUT, bounded};
use super::executions::format_time;
use crate::error::Error;
use crate::status::{
    BREAKER_CLOSED, BREAKER_OPEN, CIRCUIT_OPEN, CondStatus, DesiredCondition, breaker_needs_reset,
    breaker_open, find_condition, merge_condition, now,
};

/// Field manager of `status.breaker` and the `CircuitOpen` condition.
pub const FIELD_MANAGER: &str = "agenthooks-operator-breaker";
/// `CircuitOpen=True` reason.
pub const REASON_TRIPPED: &str = "BreakerTripped";
/// `CircuitOpen=False` reason, and the reason of the Normal Event of a reset.
pub const REASON_RESET: &str = "BreakerReset";
/// Reason of the Warning Event of a trip.
pub const EVENT_REASON_OPEN: &str = "CircuitOpen";
/// A reported reason longer than this is cut (at a character boundary).
pub const MAX_REASON_BYTES: usize = 1024;
/// Patches tried when they keep meeting `409 Conflict`.
pub const MAX_WRITE_ATTEMPTS: u32 = 6;

/// `s` cut to at most `max` bytes at a character boundary.
pub fn cut(s: &str, max: usize) -> &str {
    if s.len() <= max {
        return s;
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

/// `status.breaker` of a trip reported by `dispatcher`: `Open`, with its time (RFC 3339
/// UTC; a time that does not parse is kept as sent), reason (cut to
/// [`MAX_REASON_BYTES`]), generation and reset token.
pub fn open_breaker(trip: &TripReport, dispatcher: &str) -> BreakerStatus {
    let tripped_at = super::times::parse_utc(&trip.tripped_at)
        .map(format_time)
        .unwrap_or_else(|_| trip.tripped_at.clone());
    BreakerStatus {
        state: Some(BREAKER_OPEN.to_string()),
        tripped_at: Some(tripped_at),
        reason: Some(cut(&trip.reason, MAX_REASON_BYTES).to_string()),
        dispatcher: Some(dispatcher.to_string()),
        generation: Some(trip.generation),
        reset_annotation: trip.reset_token.clone(),
    }
}

/// The `CircuitOpen=True` message (and Event note) of an open breaker.
pub fn open_message(b: &BreakerStatus) -> String {
    format!(
        "circuit breaker opened by dispatcher {} at {}: {}; the hook is left out of snapshots until its spec or its {} annotation changes",
        b.dispatcher.as_deref().unwrap_or("(unknown)"),
        b.tripped_at.as_deref().unwrap_or("(unknown time)"),
        b.reason.as_deref().unwrap_or("(no reason given)"),
        RESET_BREAKER_ANNOTATION,
    )
}

/// The `CircuitOpen=False` message (and Event note) of a breaker closed for a hook now at
/// `generation` with reset annotation `annotation`, given what it was tripped at.
pub fn reset_message(
    tripped: Option<&BreakerStatus>,
    generation: i64,
    annotation: Option<&str>,
) -> String {
    let shown = |a: Option<&str>| a.map_or("(none)".to_string(), |a| format!("{a:?}"));
    let why = match tripped {
        Some(b) if b.generation != Some(generation) => format!(
            "the spec changed (generation {} -> {generation})",
            b.generation
                .map_or("(unknown)".to_string(), |g| g.to_string())
        ),
        Some(b) if b.reset_annotation.as_deref() != annotation => format!(
            "the {RESET_BREAKER_ANNOTATION} annotation changed ({} -> {})",
            shown(b.reset_annotation.as_deref()),
            shown(annotation)
        ),
        _ => "it no longer applies to the hook".to_string(),
    };
    format!("circuit breaker closed: {why}; the hook is served again")
}

fn condition(
    current: &AgentHook,
    desired: &DesiredCondition,
    generation: i64,
    at: &Time,
) -> Condition {
    merge_condition(
        find_condition(current.status.as_ref(), CIRCUIT_OPEN),
        desired,
        generation,
        at,
    )
}

/// The server-side-apply body of the breaker manager, with `resourceVersion` as
/// precondition.
pub fn apply_body(
    name: &str,
    resource_version: &str,
    breaker: &BreakerStatus,
    circuit_open: &Condition,
) -> serde_json::Value {
    serde_json::json!({
        "apiVersion": format!("{}/{}", agenthooks_crds::GROUP, agenthooks_crds::VERSION),
        "kind": "AgentHook",
        "metadata": {"name": name, "resourceVersion": resource_version},
        "status": {
            "breaker": breaker,
            "conditions": [circuit_open],
        }
    })
}

/// What [`record_trip`] did.
#[derive(Debug, Clone, PartialEq)]
pub enum TripWrite {
    /// Written open: the breaker status and the condition's message.
    Recorded {
        /// The written `status.breaker`.
        breaker: BreakerStatus,
        /// The `CircuitOpen=True` message (use it for the Event).
        message: String,
    },
    /// The status already shows the breaker open for this generation and annotation.
    AlreadyOpen,
    /// The hook is at another generation or reset annotation now: ignored.
    Stale,
    /// The hook is gone, or its name has another uid: ignored.
    Gone,
}

/// What [`reset`] did.
#[derive(Debug, Clone, PartialEq)]
pub enum ResetOutcome {
    /// Written closed; `message` says why (use it for the Event).
    Closed {
        /// The `CircuitOpen=False` message.
        message: String,
    },
    /// Nothing to do (closed already, or open and still applying).
    Unchanged,
    /// The hook is gone.
    Gone,
}

fn annotation(hook: &AgentHook) -> Option<&str> {
    hook.annotations()
        .get(RESET_BREAKER_ANNOTATION)
        .map(String::as_str)
}

fn params(attempt: u32) -> PatchParams {
    let p = PatchParams::apply(FIELD_MANAGER);
    // These fields are ours by contract: after a conflict (another manager held them,
    // e.g. an admin's edit), take them over.
    if attempt > 1 { p.force() } else { p }
}

/// Writes the trip `trip` reported by `dispatcher` on hook `trip.namespace/trip.name`:
/// reads the hook; if it still has the trip's uid, generation and reset annotation and its
/// status does not already show the breaker open for them, applies `Open` +
/// `CircuitOpen=True` with the read `resourceVersion`; on `409` reads again (up to
/// [`MAX_WRITE_ATTEMPTS`] patches).
///
/// Errors: [`Error::StatusConflict`] when every attempt met 409; [`Error::Kube`] for any
/// other API failure or a call that did not answer within [`REQUEST_TIMEOUT`]
/// ([`super::api::TimedOut`]).
pub async fn record_trip(
    api: &Api<AgentHook>,
    dispatcher: &str,
    trip: &TripReport,
) -> Result<TripWrite, Error> {
    let mut attempt = 1;
    loop {
        let read = bounded(
            REQUEST_TIMEOUT,
            || format!("get agenthook {}/{}", trip.namespace, trip.name),
            api.get_opt(&trip.name),
        );
        let Some(hook) = read.await? else {
            return Ok(TripWrite::Gone);
        };
        if hook.uid().as_deref() != Some(trip.uid.as_str()) {
            return Ok(TripWrite::Gone);
        }
        let generation = hook.metadata.generation.unwrap_or(0);
        let current_annotation = annotation(&hook);
        if generation != trip.generation || current_annotation != trip.reset_token.as_deref() {
            return Ok(TripWrite::Stale);
        }
        if breaker_open(hook.status.as_ref(), generation, current_annotation) {
            return Ok(TripWrite::AlreadyOpen);
        }
        let breaker = open_breaker(trip, dispatcher);
        let message = open_message(&breaker);
        let desired = DesiredCondition {
            type_: CIRCUIT_OPEN,
            status: CondStatus::True,
            reason: REASON_TRIPPED.to_string(),
            message: message.clone(),
        };
        let cond = condition(&hook, &desired, generation, &now());
        let rv = hook.resource_version().unwrap_or_default();
        let body = apply_body(&trip.name, &rv, &breaker, &cond);
        let (pp, patch) = (params(attempt), Patch::Apply(&body));
        let sent = bounded(
            REQUEST_TIMEOUT,
            || format!("patch agenthook {}/{}/status", trip.namespace, trip.name),
            api.patch_status(&trip.name, &pp, &patch),
        );
        match sent.await {
            Ok(_) => return Ok(TripWrite::Recorded { breaker, message }),
            Err(kube::Error::Api(s)) if s.code == 404 => return Ok(TripWrite::Gone),
            Err(kube::Error::Api(s)) if s.code == 409 => {
                let key = format!("{}/{}", trip.namespace, trip.name);
                tracing::debug!(hook = %key, attempt, message = %s.message, "breaker write conflicted; reading again");
                if attempt >= MAX_WRITE_ATTEMPTS {
                    return Err(Error::StatusConflict {
                        key,
                        attempts: attempt,
                        source: kube::Error::Api(s),
                    });
                }
                attempt += 1;
            }
            Err(e) => return Err(e.into()),
        }
    }
}

/// Writes the breaker of `hook` closed when its status shows it open but it no longer
/// applies ([`breaker_needs_reset`]): `Closed` (the last trip's details kept) and
/// `CircuitOpen=False` (reason [`REASON_RESET`]), with `hook`'s `resourceVersion` as
/// precondition; on `409` reads the hook again and decides again (up to
/// [`MAX_WRITE_ATTEMPTS`] patches).
///
/// Errors: [`Error::StatusConflict`] when every attempt met 409; [`Error::Kube`] for any
/// other API failure or a call that did not answer within [`REQUEST_TIMEOUT`]
/// ([`super::api::TimedOut`]).
pub async fn reset(api: &Api<AgentHook>, hook: &AgentHook) -> Result<ResetOutcome, Error> {
    let name = hook.name_any();
    let mut current = hook.clone();
    let mut attempt = 1;
    loop {
        let generation = current.metadata.generation.unwrap_or(0);
        let ann = annotation(&current);
        let status = current.status.as_ref();
        if !breaker_needs_reset(status, generation, ann) {
            return Ok(ResetOutcome::Unchanged);
        }
        let tripped = status.and_then(|s| s.breaker.as_ref());
        let message = reset_message(tripped, generation, ann);
        let mut breaker = tripped.cloned().unwrap_or_default();
        breaker.state = Some(BREAKER_CLOSED.to_string());
        let desired = DesiredCondition {
            type_: CIRCUIT_OPEN,
            status: CondStatus::False,
            reason: REASON_RESET.to_string(),
            message: message.clone(),
        };
        let cond = condition(&current, &desired, generation, &now());
        let rv = current.resource_version().unwrap_or_default();
        let body = apply_body(&name, &rv, &breaker, &cond);
        let (pp, patch) = (params(attempt), Patch::Apply(&body));
        let sent = bounded(
            REQUEST_TIMEOUT,
            || format!("patch agenthook {name}/status"),
            api.patch_status(&name, &pp, &patch),
        );
        match sent.await {
            Ok(_) => return Ok(ResetOutcome::Closed { message }),
            Err(kube::Error::Api(s)) if s.code == 404 => return Ok(ResetOutcome::Gone),
            Err(kube::Error::Api(s)) if s.code == 409 => {
                let key = format!("{}/{name}", hook.namespace().unwrap_or_default());
                tracing::debug!(hook = %key, attempt, message = %s.message, "breaker reset conflicted; reading again");
                if attempt >= MAX_WRITE_ATTEMPTS {
                    return Err(Error::StatusConflict {
                        key,
                        attempts: attempt,
                        source: kube::Error::Api(s),
                    });
                }
                attempt += 1;
                let read = bounded(
                    REQUEST_TIMEOUT,
                    || format!("get agenthook {name}"),
                    api.get_opt(&name),
                );
                match read.await? {
                    Some(fresh) if fresh.uid() == hook.uid() => current = fresh,
                    _ => return Ok(ResetOutcome::Gone),
                }
            }
            Err(e) => return Err(e.into()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn trip() -> TripReport {
        TripReport {
            uid: "u1".into(),
            namespace: "ns".into(),
            name: "h".into(),
            generation: 3,
            reset_token: Some("a".into()),
            tripped_at: "2025-03-01T11:00:00.5+01:00".into(),
            reason: "5 blocks in a row within 2 s".into(),
        }
    }

    #[test]
    fn an_open_breaker_names_who_when_why_and_what_it_applies_to() {
        let b = open_breaker(&trip(), "disp-1");
        assert_eq!(b.state.as_deref(), Some("Open"));
        assert_eq!(b.tripped_at.as_deref(), Some("2025-03-01T10:00:00.500Z"));
        assert_eq!(b.dispatcher.as_deref(), Some("disp-1"));
        assert_eq!(b.generation, Some(3));
        assert_eq!(b.reset_annotation.as_deref(), Some("a"));
        let m = open_message(&b);
        assert!(
            m.contains("disp-1") && m.contains("5 blocks in a row"),
            "{m}"
        );
        let mut long = trip();
        long.reason = "é".repeat(MAX_REASON_BYTES);
        let b = open_breaker(&long, "d");
        let r = b.reason.unwrap();
        assert!(r.len() <= MAX_REASON_BYTES && r.chars().all(|c| c == 'é'));
    }

    #[test]
    fn the_apply_body_holds_only_breaker_fields_and_the_precondition() {
        let b = open_breaker(&trip(), "d");
        let cond = merge_condition(
            None,
            &DesiredCondition {
                type_: CIRCUIT_OPEN,
                status: CondStatus::True,
                reason: REASON_TRIPPED.into(),
                message: "m".into(),
            },
            3,
            &now(),
        );
        let body = apply_body("h", "42", &b, &cond);
        assert_eq!(body["apiVersion"], "agenthooks.io/v1alpha1");
        assert_eq!(body["kind"], "AgentHook");
        assert_eq!(body["metadata"]["resourceVersion"], "42");
        assert_eq!(body["status"]["breaker"]["state"], "Open");
        assert_eq!(body["status"]["breaker"]["resetAnnotation"], "a");
        let conds = body["status"]["conditions"].as_array().unwrap();
        assert_eq!(conds.len(), 1);
        assert_eq!(conds[0]["type"], "CircuitOpen");
        assert_eq!(conds[0]["observedGeneration"], 3);
        assert!(body["status"].get("observedGeneration").is_none());
        assert!(body.get("spec").is_none());
    }

    #[test]
    fn reset_messages_say_what_changed() {
        let b = open_breaker(&trip(), "d");
        assert!(reset_message(Some(&b), 4, Some("a")).contains("generation 3 -> 4"));
        let m = reset_message(Some(&b), 3, Some("b"));
        assert!(m.contains("annotation changed (\"a\" -> \"b\")"), "{m}");
        let m = reset_message(Some(&b), 3, None);
        assert!(m.contains("(\"a\" -> (none))"), "{m}");
    }
}
