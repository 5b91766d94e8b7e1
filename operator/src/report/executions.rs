//! `status.executions` (issue 3 point 4): the counts dispatchers report, merged per hook
//! ([`Counts`], pure), and their read-modify-write into the hook's status ([`write()`]).
//!
//! Counts only ever add up; `lastExecutionTime` keeps the newest time seen and
//! `lastDecision` goes with it. The write reads the hook, adds the counts to what it
//! holds, and sends a JSON merge patch of `status.executions` carrying the
//! `metadata.resourceVersion` it read, by field manager [`FIELD_MANAGER`]. A concurrent
//! writer (another operator replica during a failover, an admin, the reconcile or the
//! breaker manager of this one) makes it fail with `409 Conflict`; it then reads again and
//! adds the same counts to the fresh value, so no count is lost or counted twice.

use std::future::Future;

use agenthooks_crds::AgentHook;
use agenthooks_crds::agenthook::ExecutionsStatus;
use agenthooks_crds::report::ExecutionDelta;
use chrono::{DateTime, SecondsFormat, Utc};
use kube::api::{Patch, PatchParams};
use kube::{Api, ResourceExt};

use crate::error::Error;

/// Field manager of the `status.executions` patches.
pub const FIELD_MANAGER: &str = "agenthooks-operator-executions";

/// How many times one hook's write is tried when it keeps meeting `409 Conflict`.
pub const MAX_WRITE_ATTEMPTS: u32 = 8;

/// The decisions a hook run can end in (CONTRACT §7.1), as `lastDecision` spells them.
pub const DECISIONS: [&str; 4] = ["allow", "block", "error", "timeout"];

/// Executions of one hook not yet written: counts by decision and the latest run.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Counts {
    /// Runs that allowed.
    pub allow: u64,
    /// Runs that blocked.
    pub block: u64,
    /// Runs that failed (CONTRACT §4.2).
    pub error: u64,
    /// Runs that timed out.
    pub timeout: u64,
    /// When the latest of these runs happened (`None`: not reported).
    pub last_time: Option<DateTime<Utc>>,
    /// The latest run's decision, one of [`DECISIONS`].
    pub last_decision: Option<String>,
}

impl Counts {
    /// The counts of a report entry, checked: `lastExecutionTime` must be RFC 3339 and
    /// `lastDecision` one of [`DECISIONS`]. `at` names the entry in the error (e.g.
    /// `executions[2]`).
    ///
    /// Errors: a message naming the field, for a 400.
    pub fn from_delta(d: &ExecutionDelta, at: &str) -> Result<Counts, String> {
        let last_time = match &d.last_execution_time {
            None => None,
            Some(t) => Some(parse_time(t).map_err(|e| {
                format!("{at}.lastExecutionTime: {t:?} is not an RFC 3339 time ({e})")
            })?),
        };
        if let Some(dec) = &d.last_decision
            && !DECISIONS.contains(&dec.as_str())
        {
            return Err(format!(
                "{at}.lastDecision: {dec:?} is not one of allow, block, error, timeout"
            ));
        }
        Ok(Counts {
            allow: d.allow,
            block: d.block,
            error: d.error,
            timeout: d.timeout,
            last_time,
            last_decision: d.last_decision.clone(),
        })
    }

    /// Nothing to write: no run counted and no last run.
    pub fn is_empty(&self) -> bool {
        self.allow == 0
            && self.block == 0
            && self.error == 0
            && self.timeout == 0
            && self.last_time.is_none()
            && self.last_decision.is_none()
    }

    /// Adds `other` (a later delta of the same hook): counts add up (saturating), the
    /// last run is the newer one ([`later_wins`]).
    pub fn add(&mut self, other: &Counts) {
        self.allow = self.allow.saturating_add(other.allow);
        self.block = self.block.saturating_add(other.block);
        self.error = self.error.saturating_add(other.error);
        self.timeout = self.timeout.saturating_add(other.timeout);
        if later_wins(
            self.last_time,
            other.last_time,
            other.last_decision.is_some(),
        ) {
            self.last_time = other.last_time;
            self.last_decision = other.last_decision.clone();
        }
    }
}

/// Whether the later-reported last run replaces the earlier one: the later time wins; a
/// run with a time beats one without; on a tie, or when neither has a time, the later
/// report wins unless it names no decision either.
pub fn later_wins(
    earlier: Option<DateTime<Utc>>,
    later: Option<DateTime<Utc>>,
    later_has_decision: bool,
) -> bool {
    match (earlier, later) {
        (Some(a), Some(b)) => b >= a,
        (Some(_), None) => false,
        (None, Some(_)) => true,
        (None, None) => later_has_decision,
    }
}

/// Parses an RFC 3339 time into UTC.
fn parse_time(t: &str) -> Result<DateTime<Utc>, chrono::ParseError> {
    DateTime::parse_from_rfc3339(t).map(|d| d.with_timezone(&Utc))
}

/// An RFC 3339 UTC time as written to status (`Z`, fractional seconds only when set).
pub fn format_time(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(SecondsFormat::AutoSi, true)
}

/// `current` (the hook's recorded `status.executions`) plus `add`: counts added
/// (saturating at `i64::MAX`), the last run the newer of the two. A recorded
/// `lastExecutionTime` that does not parse loses to any reported one.
pub fn merge(current: Option<&ExecutionsStatus>, add: &Counts) -> ExecutionsStatus {
    let cur = current.cloned().unwrap_or_default();
    let plus = |c: i64, a: u64| c.saturating_add(i64::try_from(a).unwrap_or(i64::MAX));
    let cur_time = cur
        .last_execution_time
        .as_deref()
        .and_then(|t| parse_time(t).ok());
    let (last_execution_time, last_decision) =
        if later_wins(cur_time, add.last_time, add.last_decision.is_some()) {
            (add.last_time.map(format_time), add.last_decision.clone())
        } else {
            (cur.last_execution_time, cur.last_decision)
        };
    ExecutionsStatus {
        allow: plus(cur.allow, add.allow),
        block: plus(cur.block, add.block),
        error: plus(cur.error, add.error),
        timeout: plus(cur.timeout, add.timeout),
        last_execution_time,
        last_decision,
    }
}

/// What [`write()`] did.
#[derive(Debug, Clone, PartialEq)]
pub enum ExecWrite {
    /// Written; `executions` is what the hook's status now holds, after `attempts`
    /// patches (`attempts - 1` met 409).
    Written {
        /// The written `status.executions`.
        executions: ExecutionsStatus,
        /// Patches sent.
        attempts: u32,
    },
    /// The hook is gone, or its name now belongs to another uid: the counts are dropped.
    Gone,
}

/// Adds `add` to `status.executions` of hook `name` (uid `uid`) in `api`'s namespace:
/// read, [`merge`], then a merge patch with the read `resourceVersion` (field manager
/// [`FIELD_MANAGER`]); on `409 Conflict` read again and retry, up to
/// [`MAX_WRITE_ATTEMPTS`] patches.
///
/// `between_read_and_write(attempt)` runs after each read and before its patch (attempt
/// 1, 2, ...): production passes a no-op; tests use it to change the hook meanwhile and
/// force the conflict.
///
/// Errors: [`Error::StatusConflict`] when every attempt met 409; [`Error::MissingField`]
/// for a hook without `resourceVersion`; [`Error::Kube`] for any other API failure.
pub async fn write<F, Fut>(
    api: &Api<AgentHook>,
    name: &str,
    uid: &str,
    add: &Counts,
    mut between_read_and_write: F,
) -> Result<ExecWrite, Error>
where
    F: FnMut(u32) -> Fut,
    Fut: Future<Output = ()>,
{
    let params = PatchParams {
        field_manager: Some(FIELD_MANAGER.to_string()),
        ..Default::default()
    };
    let mut attempt = 1;
    loop {
        let Some(hook) = api.get_opt(name).await? else {
            return Ok(ExecWrite::Gone);
        };
        if hook.uid().as_deref() != Some(uid) {
            return Ok(ExecWrite::Gone);
        }
        let rv = hook.resource_version().ok_or(Error::MissingField {
            kind: "AgentHook",
            field: "resourceVersion",
        })?;
        let executions = merge(
            hook.status.as_ref().and_then(|s| s.executions.as_ref()),
            add,
        );
        between_read_and_write(attempt).await;
        let body = serde_json::json!({
            "metadata": {"resourceVersion": rv},
            "status": {"executions": executions},
        });
        match api.patch_status(name, &params, &Patch::Merge(&body)).await {
            Ok(_) => {
                return Ok(ExecWrite::Written {
                    executions,
                    attempts: attempt,
                });
            }
            Err(kube::Error::Api(s)) if s.code == 404 => return Ok(ExecWrite::Gone),
            Err(kube::Error::Api(s)) if s.code == 409 => {
                let key = format!("{}/{name}", hook.namespace().unwrap_or_default());
                tracing::debug!(
                    hook = %key,
                    attempt,
                    message = %s.message,
                    "status.executions write conflicted; reading again"
                );
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

#[cfg(test)]
mod tests {
    use super::*;

    fn at(s: &str) -> Option<DateTime<Utc>> {
        Some(parse_time(s).unwrap())
    }

    fn counts(allow: u64, block: u64, last: Option<(&str, &str)>) -> Counts {
        Counts {
            allow,
            block,
            last_time: last.and_then(|(t, _)| at(t)),
            last_decision: last.map(|(_, d)| d.to_string()),
            ..Default::default()
        }
    }

    #[test]
    fn deltas_add_up_and_keep_the_newest_run() {
        let mut c = counts(2, 1, Some(("2025-03-01T10:00:05Z", "block")));
        c.add(&counts(3, 0, Some(("2025-03-01T10:00:01Z", "allow"))));
        assert_eq!((c.allow, c.block), (5, 1));
        assert_eq!(c.last_time, at("2025-03-01T10:00:05Z"), "older run loses");
        assert_eq!(c.last_decision.as_deref(), Some("block"));
        c.add(&counts(
            0,
            0,
            Some(("2025-03-01T12:00:05+02:00", "timeout")),
        ));
        assert_eq!(
            c.last_time,
            at("2025-03-01T10:00:05Z"),
            "same instant in another zone: a tie, the later report wins"
        );
        assert_eq!(c.last_decision.as_deref(), Some("timeout"));
        c.add(&counts(1, 0, None));
        assert_eq!(c.allow, 6);
        assert_eq!(
            c.last_decision.as_deref(),
            Some("timeout"),
            "a delta without a last run keeps it"
        );
        let mut big = Counts {
            error: u64::MAX,
            ..Default::default()
        };
        big.add(&Counts {
            error: 5,
            ..Default::default()
        });
        assert_eq!(big.error, u64::MAX, "saturates");
    }

    #[test]
    fn merge_into_status_adds_and_keeps_the_newest() {
        assert_eq!(
            merge(
                None,
                &counts(1, 2, Some(("2025-03-01T10:00:00.250Z", "block")))
            ),
            ExecutionsStatus {
                allow: 1,
                block: 2,
                error: 0,
                timeout: 0,
                last_execution_time: Some("2025-03-01T10:00:00.250Z".into()),
                last_decision: Some("block".into()),
            }
        );
        let recorded = ExecutionsStatus {
            allow: 10,
            block: 1,
            error: 2,
            timeout: 3,
            last_execution_time: Some("2025-03-01T11:00:00+01:00".into()),
            last_decision: Some("error".into()),
        };
        let older = merge(
            Some(&recorded),
            &counts(5, 0, Some(("2025-03-01T09:59:59Z", "allow"))),
        );
        assert_eq!(
            (older.allow, older.block, older.error, older.timeout),
            (15, 1, 2, 3)
        );
        assert_eq!(
            older.last_execution_time.as_deref(),
            Some("2025-03-01T11:00:00+01:00"),
            "the recorded (newer) run and its text stay"
        );
        assert_eq!(older.last_decision.as_deref(), Some("error"));
        let newer = merge(
            Some(&recorded),
            &counts(0, 1, Some(("2025-03-01T10:00:01Z", "block"))),
        );
        assert_eq!(newer.block, 2);
        assert_eq!(
            newer.last_execution_time.as_deref(),
            Some("2025-03-01T10:00:01Z")
        );
        assert_eq!(newer.last_decision.as_deref(), Some("block"));
        let garbage = ExecutionsStatus {
            last_execution_time: Some("yesterday".into()),
            last_decision: Some("allow".into()),
            ..Default::default()
        };
        let fixed = merge(
            Some(&garbage),
            &counts(0, 1, Some(("2025-03-01T10:00:01Z", "block"))),
        );
        assert_eq!(fixed.last_decision.as_deref(), Some("block"));
        let huge = merge(
            Some(&ExecutionsStatus {
                allow: i64::MAX - 1,
                ..Default::default()
            }),
            &counts(u64::MAX, 0, None),
        );
        assert_eq!(huge.allow, i64::MAX);
    }

    #[test]
    fn merging_in_any_grouping_gives_the_same_status() {
        let deltas = [
            counts(1, 0, Some(("2025-03-01T10:00:03Z", "allow"))),
            counts(0, 2, Some(("2025-03-01T10:00:09Z", "block"))),
            counts(4, 0, Some(("2025-03-01T10:00:01Z", "allow"))),
        ];
        // one write per delta
        let mut one_by_one: Option<ExecutionsStatus> = None;
        for d in &deltas {
            one_by_one = Some(merge(one_by_one.as_ref(), d));
        }
        // one batched write
        let mut batch = Counts::default();
        for d in &deltas {
            batch.add(d);
        }
        assert_eq!(merge(None, &batch), one_by_one.unwrap());
    }

    #[test]
    fn deltas_are_checked_naming_the_field() {
        let mut d = ExecutionDelta {
            uid: "u".into(),
            namespace: "n".into(),
            name: "h".into(),
            allow: 1,
            last_execution_time: Some("2025-03-01T10:00:00Z".into()),
            last_decision: Some("allow".into()),
            ..Default::default()
        };
        assert_eq!(Counts::from_delta(&d, "executions[0]").unwrap().allow, 1);
        d.last_decision = Some("maybe".into());
        let e = Counts::from_delta(&d, "executions[3]").unwrap_err();
        assert!(e.starts_with("executions[3].lastDecision:"), "{e}");
        d.last_decision = None;
        d.last_execution_time = Some("10:00".into());
        let e = Counts::from_delta(&d, "executions[0]").unwrap_err();
        assert!(e.starts_with("executions[0].lastExecutionTime:"), "{e}");
        assert!(Counts::default().is_empty());
        assert!(!counts(0, 0, Some(("2025-03-01T10:00:00Z", "allow"))).is_empty());
    }
}
