//! The breaker's status (CONTRACT §6.2–6.5): `status.breaker` and the `CircuitOpen`
//! condition, written by their own server-side-apply field manager [`FIELD_MANAGER`], so
//! the reconcile's apply (manager `agenthooks-operator`: `observedGeneration`, `Accepted`,
//! `Ready`) never removes them and they never remove its fields.
//!
//! A breaker is kept per tenant: `status.breaker.open` lists the open tenants (oldest
//! first, at most [`MAX_OPEN_TENANTS`]), `state` is `Open` while it is not empty, and
//! `trippedAt`, `reason`, `dispatcher` describe the newest trip.
//!
//! - [`record_trip`]: a tenant's breaker tripped (a dispatcher's report or the merged
//!   window); that tenant is added to (or refreshed in) `open`, `state: Open`,
//!   `CircuitOpen=True` (reason [`REASON_TRIPPED`]).
//! - [`record_close`]: a dispatcher's half-open probe answered; that tenant leaves
//!   `open` (unless its entry is a newer trip); when none is left `state: Closed` and
//!   `CircuitOpen=False` (reason [`REASON_CLOSED`]).
//! - [`reset`]: the spec or the `agenthooks.io/reset-breaker` annotation changed since;
//!   written `Closed` with no tenant open (the last trip's details kept),
//!   `CircuitOpen=False` (reason [`REASON_RESET`]).
//!
//! All are read-modify-writes of the status writer ([`crate::status::writer`], kinds
//! `breaker_trip`, `breaker_close`, `breaker_reset`) with the read
//! `metadata.resourceVersion` as precondition, so trips, closes and resets racing on the
//! same hook never undo each other: the loser meets `409 Conflict`, reads again and
//! decides again, within the writer's one retry policy; each read and patch is bounded by
//! its request timeout, and nothing is sent unless this replica leads. Nothing here
//! writes `spec`.

use agenthooks_crds::agenthook::{BreakerStatus, TenantBreakerStatus};
use agenthooks_crds::report::{CloseReport, TripReport};
use agenthooks_crds::rules::breaker::HALF_OPEN_AFTER_MS;
use agenthooks_crds::{AgentHook, AgentHookStatus, RESET_BREAKER_ANNOTATION};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::{Api, ResourceExt};

use super::executions::format_time;
use crate::error::Error;
use crate::index::MAX_OPEN_TENANTS;
use crate::status::writer::{Outcome, Plan, StatusWriter, WriteKind};
use crate::status::{
    BREAKER_CLOSED, BREAKER_OPEN, CIRCUIT_OPEN, CondStatus, DesiredCondition, breaker_needs_reset,
    find_condition, merge_condition, now, status_time_ms,
};

/// Field manager of `status.breaker` and the `CircuitOpen` condition.
pub const FIELD_MANAGER: &str = "agenthooks-operator-breaker";
/// `CircuitOpen=True` reason.
pub const REASON_TRIPPED: &str = "BreakerTripped";
/// `CircuitOpen=False` reason once a half-open probe closed the last open tenant.
pub const REASON_CLOSED: &str = "BreakerClosed";
/// `CircuitOpen=False` reason, and the reason of the Normal Event of a reset.
pub const REASON_RESET: &str = "BreakerReset";
/// Reason of the Warning Event of a trip.
pub const EVENT_REASON_OPEN: &str = "CircuitOpen";
/// Reason of the Normal Event of a close by a probe.
pub const EVENT_REASON_CLOSED: &str = "CircuitClosed";
/// A reported reason longer than this is cut (at a character boundary).
pub const MAX_REASON_BYTES: usize = 1024;
/// Open tenants named in the `CircuitOpen` message (the rest are counted).
pub const MAX_TENANTS_NAMED: usize = 5;

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

/// The `status.breaker.open` entry of `trip` reported by `dispatcher`: its tenant, time
/// (RFC 3339 UTC, ms; a time that does not parse is kept as sent), reason (cut to
/// [`MAX_REASON_BYTES`]) and `failClosed`.
pub fn tenant_entry(trip: &TripReport, dispatcher: &str) -> TenantBreakerStatus {
    let tripped_at = super::times::parse_utc(&trip.tripped_at)
        .map(format_time)
        .unwrap_or_else(|_| trip.tripped_at.clone());
    TenantBreakerStatus {
        tenant: trip.tenant.clone(),
        tripped_at,
        reason: Some(cut(&trip.reason, MAX_REASON_BYTES).to_string()),
        dispatcher: Some(dispatcher.to_string()),
        fail_closed: trip.fail_closed,
    }
}

/// The open tenants `status` records for a hook at `generation` with reset annotation
/// `annotation` (none when `status.breaker` is not `Open` for them).
pub fn recorded_open(
    status: Option<&AgentHookStatus>,
    generation: i64,
    annotation: Option<&str>,
) -> Vec<TenantBreakerStatus> {
    status
        .and_then(|s| s.breaker.as_ref())
        .filter(|b| {
            b.state.as_deref() == Some(BREAKER_OPEN)
                && b.generation == Some(generation)
                && b.reset_annotation.as_deref() == annotation
        })
        .map(|b| b.open.clone())
        .unwrap_or_default()
}

/// What adding a trip to the open tenants gives.
#[derive(Debug, Clone, PartialEq)]
pub enum Added {
    /// The new list (oldest first).
    Changed(Vec<TenantBreakerStatus>),
    /// The tenant is already open from this trip or a later one.
    AlreadyOpen,
    /// [`MAX_OPEN_TENANTS`] other tenants are open.
    TooMany,
}

/// `open` with `entry` added: a tenant already open from a later time (or the same time,
/// failing closed if `entry` does) stays; an earlier entry of the tenant is replaced.
/// Oldest first (then by tenant).
pub fn add_tenant(mut open: Vec<TenantBreakerStatus>, entry: TenantBreakerStatus) -> Added {
    let at = status_time_ms(&entry.tripped_at);
    match open.iter().position(|t| t.tenant == entry.tenant) {
        Some(i) => {
            let cur = status_time_ms(&open[i].tripped_at);
            if cur > at || (cur == at && (open[i].fail_closed || !entry.fail_closed)) {
                return Added::AlreadyOpen;
            }
            open[i] = entry;
        }
        None if open.len() >= MAX_OPEN_TENANTS => return Added::TooMany,
        None => open.push(entry),
    }
    open.sort_by(|a, b| {
        status_time_ms(&a.tripped_at)
            .cmp(&status_time_ms(&b.tripped_at))
            .then_with(|| a.tenant.cmp(&b.tenant))
    });
    Added::Changed(open)
}

/// `status.breaker` for a hook at `generation` / `annotation` whose open tenants are
/// `open`: `Open` with the newest trip's time, reason and dispatcher while `open` is not
/// empty; else `Closed`, keeping `last`'s trip details.
pub fn breaker_status(
    open: Vec<TenantBreakerStatus>,
    last: Option<&BreakerStatus>,
    generation: i64,
    annotation: Option<&str>,
) -> BreakerStatus {
    let newest = open.iter().max_by_key(|t| status_time_ms(&t.tripped_at));
    let mut b = match newest {
        Some(t) => BreakerStatus {
            tripped_at: Some(t.tripped_at.clone()),
            reason: t.reason.clone(),
            dispatcher: t.dispatcher.clone(),
            ..Default::default()
        },
        None => last.cloned().unwrap_or_default(),
    };
    b.state = Some(
        if open.is_empty() {
            BREAKER_CLOSED
        } else {
            BREAKER_OPEN
        }
        .to_string(),
    );
    b.generation = Some(generation);
    b.reset_annotation = annotation.map(str::to_string);
    b.open = open;
    b
}

/// The note of the Warning Event (and log) of one tenant's trip.
pub fn trip_note(t: &TenantBreakerStatus) -> String {
    format!(
        "circuit breaker opened for tenant {:?} by dispatcher {} at {}: {}; its events are answered as an error of the hook (block on blocking events) without running the handler, until a probe {} s later finds the handler answering again, the spec changes or the {} annotation changes",
        t.tenant,
        t.dispatcher.as_deref().unwrap_or("(unknown)"),
        t.tripped_at,
        t.reason.as_deref().unwrap_or("(no reason given)"),
        HALF_OPEN_AFTER_MS / 1000,
        RESET_BREAKER_ANNOTATION,
    )
}

/// The `CircuitOpen=True` message of a breaker open for the tenants in `b.open`: how many,
/// the first [`MAX_TENANTS_NAMED`] (oldest first), and the newest trip.
pub fn open_message(b: &BreakerStatus) -> String {
    let mut named: Vec<String> = b
        .open
        .iter()
        .take(MAX_TENANTS_NAMED)
        .map(|t| format!("{:?}", t.tenant))
        .collect();
    if b.open.len() > MAX_TENANTS_NAMED {
        named.push(format!("and {} more", b.open.len() - MAX_TENANTS_NAMED));
    }
    format!(
        "circuit breaker open for {} tenant(s) ({}): their events are answered as an error of the hook (block on blocking events) without running the handler (other tenants run it); newest trip by dispatcher {} at {}: {}; a probe {} s after a trip closes it when the handler answers; a spec edit or a change of the {} annotation closes all",
        b.open.len(),
        named.join(", "),
        b.dispatcher.as_deref().unwrap_or("(unknown)"),
        b.tripped_at.as_deref().unwrap_or("(unknown time)"),
        b.reason.as_deref().unwrap_or("(no reason given)"),
        HALF_OPEN_AFTER_MS / 1000,
        RESET_BREAKER_ANNOTATION,
    )
}

/// The note of the Normal Event (and log) of a close by `close`'s probe reported by
/// `dispatcher`, `left` tenants still open.
pub fn close_note(close: &CloseReport, dispatcher: &str, left: usize) -> String {
    format!(
        "circuit breaker closed for tenant {:?}: a half-open probe on dispatcher {dispatcher} found the handler answering at {} (open since {}); {left} tenant(s) still open",
        close.tenant, close.closed_at, close.opened_at,
    )
}

/// The `CircuitOpen=False` message once a probe closed the last open tenant.
pub fn closed_message(close: &CloseReport, dispatcher: &str) -> String {
    format!(
        "circuit breaker closed: a half-open probe on dispatcher {dispatcher} found the handler answering again at {} (tenant {:?}); no tenant is open",
        close.closed_at, close.tenant,
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
    format!("circuit breaker closed for every tenant: {why}; the handler runs again for all")
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

/// The breaker manager's part of `status`: `breaker` and the `CircuitOpen` condition
/// (the apply adds `apiVersion`, `kind` and the `resourceVersion` precondition:
/// [`crate::status::writer::body`]).
pub fn status_body(breaker: &BreakerStatus, circuit_open: &Condition) -> serde_json::Value {
    serde_json::json!({
        "breaker": breaker,
        "conditions": [circuit_open],
    })
}

/// What [`record_trip`] did.
#[derive(Debug, Clone, PartialEq)]
pub enum TripWrite {
    /// Written: the tenant's entry and the Event note.
    Recorded {
        /// The tenant's `status.breaker.open` entry as written.
        entry: TenantBreakerStatus,
        /// The Warning Event's note ([`trip_note`]).
        note: String,
    },
    /// The status already shows the tenant open from this trip or a later one.
    AlreadyOpen,
    /// [`MAX_OPEN_TENANTS`] other tenants are open already: not written.
    TooMany,
    /// The hook is at another generation or reset annotation now: ignored.
    Stale,
    /// The hook is gone, or its name has another uid: ignored.
    Gone,
}

/// What [`record_close`] did.
#[derive(Debug, Clone, PartialEq)]
pub enum CloseWrite {
    /// Written: the tenant left `open`; `left` tenants are still open (0: `Closed`).
    Recorded {
        /// Tenants still open.
        left: usize,
        /// The Normal Event's note ([`close_note`]).
        note: String,
    },
    /// The status does not show the tenant open.
    NotOpen,
    /// The tenant's entry is a trip newer than the one the probe ended: it stays.
    Newer,
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

/// The write of `breaker` and `desired` (its `CircuitOpen`) on `hook` at `generation`,
/// answering `then`: `lastTransitionTime` kept unless the condition's status changes.
fn write_plan<T>(
    hook: &AgentHook,
    generation: i64,
    breaker: &BreakerStatus,
    desired: &DesiredCondition,
    then: T,
) -> Plan<T> {
    Plan::Write {
        status: status_body(breaker, &condition(hook, desired, generation, &now())),
        answer: then,
    }
}

/// Writes hook `namespace/name` pinned to `uid` through `w` as `kind`: `plan` (hook,
/// generation, annotation) decides from each read; `gone` when the hook is absent or has
/// another uid.
async fn read_modify_write<T: Clone + Send>(
    w: &StatusWriter,
    kind: WriteKind,
    api: &Api<AgentHook>,
    name: &str,
    uid: &str,
    gone: impl Fn() -> T,
    mut plan: impl FnMut(&AgentHook, i64, Option<&str>) -> Plan<T> + Send,
) -> Result<T, Error> {
    let target = w.object(api, name).with_uid(uid);
    let outcome = w
        .write(kind, &target, None, &mut None, |hook: &AgentHook| {
            plan(
                hook,
                hook.metadata.generation.unwrap_or(0),
                annotation(hook),
            )
        })
        .await?;
    Ok(match outcome {
        Outcome::Written { answer, .. } | Outcome::Unchanged { answer, .. } => answer,
        Outcome::Gone => gone(),
    })
}

fn tripped_condition(b: &BreakerStatus) -> DesiredCondition {
    DesiredCondition {
        type_: CIRCUIT_OPEN,
        status: CondStatus::True,
        reason: REASON_TRIPPED.to_string(),
        message: open_message(b),
    }
}

/// Writes `trip` (one tenant's, reported by `dispatcher` or decided by the merged window)
/// on hook `trip.namespace/trip.name`: when it still has the trip's uid, generation and
/// reset annotation, adds the tenant to `status.breaker.open` ([`add_tenant`]; nothing
/// when it is already open from this trip or later, or [`MAX_OPEN_TENANTS`] others are),
/// `state: Open` with the newest trip's fields, `CircuitOpen=True` ([`REASON_TRIPPED`]).
///
/// Errors: [`Error::StatusConflict`] when every attempt met 409; [`Error::NotLeader`]
/// when this replica no longer leads; [`Error::Kube`] for any other API failure or a call
/// that did not answer within the writer's request timeout ([`super::api::TimedOut`]).
pub async fn record_trip(
    w: &StatusWriter,
    api: &Api<AgentHook>,
    dispatcher: &str,
    trip: &TripReport,
) -> Result<TripWrite, Error> {
    let entry = tenant_entry(trip, dispatcher);
    read_modify_write(
        w,
        WriteKind::BreakerTrip,
        api,
        &trip.name,
        &trip.uid,
        || TripWrite::Gone,
        |hook, generation, ann| {
            if generation != trip.generation || ann != trip.reset_token.as_deref() {
                return Plan::Skip(TripWrite::Stale);
            }
            let status = hook.status.as_ref();
            let open = match add_tenant(recorded_open(status, generation, ann), entry.clone()) {
                Added::Changed(open) => open,
                Added::AlreadyOpen => return Plan::Skip(TripWrite::AlreadyOpen),
                Added::TooMany => return Plan::Skip(TripWrite::TooMany),
            };
            let last = status.and_then(|s| s.breaker.as_ref());
            let breaker = breaker_status(open, last, generation, ann);
            let desired = tripped_condition(&breaker);
            let note = trip_note(&entry);
            write_plan(
                hook,
                generation,
                &breaker,
                &desired,
                TripWrite::Recorded {
                    entry: entry.clone(),
                    note,
                },
            )
        },
    )
    .await
}

/// Writes `close` (a half-open probe of `dispatcher` answered) on hook
/// `close.namespace/close.name`: when it still has the close's uid, generation and reset
/// annotation and the tenant is open from `close.opened_at` or earlier, removes the tenant
/// from `status.breaker.open`; `CircuitOpen` stays `True` while others are open, else the
/// breaker is written `Closed` and `CircuitOpen=False` ([`REASON_CLOSED`]).
///
/// Errors: as [`record_trip`].
pub async fn record_close(
    w: &StatusWriter,
    api: &Api<AgentHook>,
    dispatcher: &str,
    close: &CloseReport,
) -> Result<CloseWrite, Error> {
    let opened_at = status_time_ms(&close.opened_at);
    read_modify_write(
        w,
        WriteKind::BreakerClose,
        api,
        &close.name,
        &close.uid,
        || CloseWrite::Gone,
        |hook, generation, ann| {
            if generation != close.generation || ann != close.reset_token.as_deref() {
                return Plan::Skip(CloseWrite::Stale);
            }
            let status = hook.status.as_ref();
            let mut open = recorded_open(status, generation, ann);
            let Some(i) = open.iter().position(|t| t.tenant == close.tenant) else {
                return Plan::Skip(CloseWrite::NotOpen);
            };
            if status_time_ms(&open[i].tripped_at) > opened_at {
                return Plan::Skip(CloseWrite::Newer);
            }
            open.remove(i);
            let left = open.len();
            let last = status.and_then(|s| s.breaker.as_ref());
            let breaker = breaker_status(open, last, generation, ann);
            let desired = if left == 0 {
                DesiredCondition {
                    type_: CIRCUIT_OPEN,
                    status: CondStatus::False,
                    reason: REASON_CLOSED.to_string(),
                    message: closed_message(close, dispatcher),
                }
            } else {
                tripped_condition(&breaker)
            };
            let note = close_note(close, dispatcher, left);
            write_plan(
                hook,
                generation,
                &breaker,
                &desired,
                CloseWrite::Recorded { left, note },
            )
        },
    )
    .await
}

/// Writes the breaker of `hook` closed when its status shows it open but it no longer
/// applies ([`breaker_needs_reset`]): `Closed` with no tenant open (the last trip's
/// details kept) and `CircuitOpen=False` (reason [`REASON_RESET`]), through `w`
/// ([`WriteKind::BreakerReset`]), planned first from `hook` as cached with its
/// `resourceVersion` as precondition; on `409` the hook is read again and the reset
/// decided again.
///
/// Errors: [`Error::StatusConflict`] when every attempt met 409; [`Error::NotLeader`]
/// when this replica no longer leads; [`Error::Kube`] for any other API failure or a call
/// that did not answer within the writer's request timeout ([`super::api::TimedOut`]).
pub async fn reset(
    w: &StatusWriter,
    api: &Api<AgentHook>,
    hook: &AgentHook,
) -> Result<ResetOutcome, Error> {
    let name = hook.name_any();
    let uid = hook.uid();
    let mut target = w.object(api, &name);
    if let Some(uid) = uid.as_deref() {
        target = target.with_uid(uid);
    }
    let outcome = w
        .write(
            WriteKind::BreakerReset,
            &target,
            Some(hook.clone()),
            &mut None,
            |current: &AgentHook| {
                let generation = current.metadata.generation.unwrap_or(0);
                let ann = annotation(current);
                let status = current.status.as_ref();
                if !breaker_needs_reset(status, generation, ann) {
                    return Plan::Skip(ResetOutcome::Unchanged);
                }
                let tripped = status.and_then(|s| s.breaker.as_ref());
                let message = reset_message(tripped, generation, ann);
                let mut breaker = tripped.cloned().unwrap_or_default();
                breaker.state = Some(BREAKER_CLOSED.to_string());
                breaker.open.clear();
                let desired = DesiredCondition {
                    type_: CIRCUIT_OPEN,
                    status: CondStatus::False,
                    reason: REASON_RESET.to_string(),
                    message: message.clone(),
                };
                write_plan(
                    current,
                    generation,
                    &breaker,
                    &desired,
                    ResetOutcome::Closed { message },
                )
            },
        )
        .await?;
    Ok(match outcome {
        Outcome::Written { answer, .. } | Outcome::Unchanged { answer, .. } => answer,
        Outcome::Gone => ResetOutcome::Gone,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn trip(tenant: &str, at: &str) -> TripReport {
        TripReport {
            uid: "u1".into(),
            namespace: "ns".into(),
            name: "h".into(),
            generation: 3,
            reset_token: Some("a".into()),
            tenant: tenant.into(),
            tripped_at: at.into(),
            fail_closed: false,
            reason: "5 timeouts and 0 errors of the handler in a row within 2 s".into(),
        }
    }

    fn close(tenant: &str, opened_at: &str) -> CloseReport {
        CloseReport {
            uid: "u1".into(),
            namespace: "ns".into(),
            name: "h".into(),
            generation: 3,
            reset_token: Some("a".into()),
            tenant: tenant.into(),
            opened_at: opened_at.into(),
            closed_at: "2025-03-01T10:01:00Z".into(),
        }
    }

    fn tenants(open: &[TenantBreakerStatus]) -> Vec<(&str, &str)> {
        open.iter()
            .map(|t| (t.tenant.as_str(), t.tripped_at.as_str()))
            .collect()
    }

    #[test]
    fn a_tenant_entry_names_who_when_why_and_how_it_answers() {
        let mut t = trip("acme", "2025-03-01T11:00:00.5+01:00");
        t.fail_closed = true;
        let e = tenant_entry(&t, "disp-1");
        assert_eq!(e.tenant, "acme");
        assert_eq!(e.tripped_at, "2025-03-01T10:00:00.500Z");
        assert_eq!(e.dispatcher.as_deref(), Some("disp-1"));
        assert!(e.fail_closed);
        let n = trip_note(&e);
        assert!(
            n.contains("tenant \"acme\"")
                && n.contains("disp-1")
                && n.contains("5 timeouts and 0 errors")
                && n.contains("answered as an error of the hook (block on blocking events)")
                && n.contains("30 s"),
            "{n}"
        );
        let mut long = trip("acme", "2025-03-01T10:00:00Z");
        long.reason = "é".repeat(MAX_REASON_BYTES);
        let r = tenant_entry(&long, "d").reason.unwrap();
        assert!(r.len() <= MAX_REASON_BYTES && r.chars().all(|c| c == 'é'));
    }

    #[test]
    fn tenants_are_added_refreshed_kept_and_capped() {
        let a = tenant_entry(&trip("a", "2025-03-01T10:00:05Z"), "d1");
        let b = tenant_entry(&trip("b", "2025-03-01T10:00:01Z"), "d2");
        let Added::Changed(open) = add_tenant(vec![], a.clone()) else {
            panic!("added")
        };
        let Added::Changed(open) = add_tenant(open, b.clone()) else {
            panic!("added")
        };
        assert_eq!(
            tenants(&open),
            [("b", "2025-03-01T10:00:01Z"), ("a", "2025-03-01T10:00:05Z")],
            "oldest first"
        );
        assert_eq!(add_tenant(open.clone(), a.clone()), Added::AlreadyOpen);
        let older = tenant_entry(&trip("a", "2025-03-01T10:00:00Z"), "d3");
        assert_eq!(add_tenant(open.clone(), older), Added::AlreadyOpen);
        let mut same_fail_closed = a.clone();
        same_fail_closed.fail_closed = true;
        let Added::Changed(o) = add_tenant(open.clone(), same_fail_closed) else {
            panic!("fail-closed at the same time refreshes")
        };
        assert!(o.iter().find(|t| t.tenant == "a").unwrap().fail_closed);
        let later = tenant_entry(&trip("b", "2025-03-01T10:00:09Z"), "d3");
        let Added::Changed(o) = add_tenant(open.clone(), later) else {
            panic!("a later trip replaces")
        };
        assert_eq!(
            tenants(&o),
            [("a", "2025-03-01T10:00:05Z"), ("b", "2025-03-01T10:00:09Z")]
        );
        let full: Vec<_> = (0..MAX_OPEN_TENANTS)
            .map(|i| tenant_entry(&trip(&format!("t{i}"), "2025-03-01T10:00:00Z"), "d"))
            .collect();
        assert_eq!(add_tenant(full.clone(), a), Added::TooMany);
        let again = tenant_entry(&trip("t7", "2025-03-01T10:00:01Z"), "d");
        assert!(matches!(add_tenant(full, again), Added::Changed(_)));
    }

    #[test]
    fn the_status_shows_the_newest_trip_and_closed_when_none_is_open() {
        let a = tenant_entry(&trip("a", "2025-03-01T10:00:05Z"), "d1");
        let mut b = tenant_entry(&trip("b", "2025-03-01T10:00:01Z"), "d2");
        b.reason = Some("older".into());
        let open = breaker_status(vec![b, a], None, 3, Some("a"));
        assert_eq!(open.state.as_deref(), Some("Open"));
        assert_eq!(open.tripped_at.as_deref(), Some("2025-03-01T10:00:05Z"));
        assert_eq!(open.dispatcher.as_deref(), Some("d1"));
        assert_eq!(
            (open.generation, open.reset_annotation.as_deref()),
            (Some(3), Some("a"))
        );
        let m = open_message(&open);
        assert!(
            m.starts_with("circuit breaker open for 2 tenant(s) (\"b\", \"a\")")
                && m.contains("other tenants run it")
                && m.contains("by dispatcher d1 at 2025-03-01T10:00:05Z"),
            "{m}"
        );
        let closed = breaker_status(vec![], Some(&open), 3, Some("a"));
        assert_eq!(closed.state.as_deref(), Some("Closed"));
        assert!(closed.open.is_empty());
        assert_eq!(closed.dispatcher.as_deref(), Some("d1"), "last trip kept");
        let many: Vec<_> = (0..8)
            .map(|i| tenant_entry(&trip(&format!("t{i}"), "2025-03-01T10:00:00Z"), "d"))
            .collect();
        let m = open_message(&breaker_status(many, None, 1, None));
        assert!(
            m.contains("8 tenant(s) (\"t0\", \"t1\", \"t2\", \"t3\", \"t4\", and 3 more)"),
            "{m}"
        );
        let c = close("a", "2025-03-01T10:00:05Z");
        let n = close_note(&c, "d9", 1);
        assert!(
            n.contains("tenant \"a\"")
                && n.contains("dispatcher d9")
                && n.contains("1 tenant(s) still open"),
            "{n}"
        );
        assert!(closed_message(&c, "d9").contains("no tenant is open"));
    }

    #[test]
    fn recorded_open_applies_to_the_current_generation_and_annotation_only() {
        let a = tenant_entry(&trip("a", "2025-03-01T10:00:05Z"), "d1");
        let status = agenthooks_crds::AgentHookStatus {
            breaker: Some(breaker_status(vec![a], None, 3, Some("a"))),
            ..Default::default()
        };
        assert_eq!(recorded_open(Some(&status), 3, Some("a")).len(), 1);
        assert!(recorded_open(Some(&status), 4, Some("a")).is_empty());
        assert!(recorded_open(Some(&status), 3, None).is_empty());
        assert!(recorded_open(None, 3, Some("a")).is_empty());
    }

    #[test]
    fn the_apply_body_holds_only_breaker_fields_and_the_precondition() {
        let b = breaker_status(
            vec![tenant_entry(&trip("a", "2025-03-01T10:00:05Z"), "d")],
            None,
            3,
            Some("a"),
        );
        let cond = merge_condition(None, &tripped_condition(&b), 3, &now());
        let apply_body = |name: &str, rv: &str, b: &BreakerStatus, cond: &Condition| {
            crate::status::writer::body::<AgentHook>(
                WriteKind::BreakerTrip,
                name,
                Some(rv),
                status_body(b, cond),
            )
        };
        let body = apply_body("h", "42", &b, &cond);
        assert_eq!(body["apiVersion"], "agenthooks.io/v1alpha1");
        assert_eq!(body["kind"], "AgentHook");
        assert_eq!(body["metadata"]["resourceVersion"], "42");
        assert_eq!(body["status"]["breaker"]["state"], "Open");
        assert_eq!(body["status"]["breaker"]["resetAnnotation"], "a");
        assert_eq!(body["status"]["breaker"]["open"][0]["tenant"], "a");
        assert_eq!(body["status"]["breaker"]["open"][0]["failClosed"], false);
        let conds = body["status"]["conditions"].as_array().unwrap();
        assert_eq!(conds.len(), 1);
        assert_eq!(conds[0]["type"], "CircuitOpen");
        assert_eq!(conds[0]["reason"], "BreakerTripped");
        assert_eq!(conds[0]["observedGeneration"], 3);
        assert!(body["status"].get("observedGeneration").is_none());
        assert!(body.get("spec").is_none());
        let closed = breaker_status(vec![], Some(&b), 3, Some("a"));
        let body = apply_body("h", "43", &closed, &cond);
        assert!(
            body["status"]["breaker"].get("open").is_none(),
            "an empty list is dropped by the apply"
        );
    }

    #[test]
    fn reset_messages_say_what_changed() {
        let b = breaker_status(
            vec![tenant_entry(&trip("a", "2025-03-01T10:00:05Z"), "d")],
            None,
            3,
            Some("a"),
        );
        assert!(reset_message(Some(&b), 4, Some("a")).contains("generation 3 -> 4"));
        let m = reset_message(Some(&b), 3, Some("b"));
        assert!(m.contains("annotation changed (\"a\" -> \"b\")"), "{m}");
        let m = reset_message(Some(&b), 3, None);
        assert!(m.contains("(\"a\" -> (none))"), "{m}");
    }
}
