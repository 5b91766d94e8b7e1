//! `status.executions` (issue 3 point 4): the counts dispatchers report, merged per hook
//! ([`Counts`], pure), and their read-modify-write into the hook's status ([`write()`]).
//!
//! Counts only ever add up; `lastExecutionTime` keeps the newest time seen and
//! `lastDecision` goes with it. Reported times are clamped to the report's receipt time
//! ([`super::times`]); a recorded time in the future (written before clamping existed)
//! loses to any reported one, so it cannot pin `lastDecision`.
//!
//! The write ([`write()`]) is a read-modify-write of the status writer
//! ([`crate::status::writer`], kind `executions`): it reads the hook, adds the counts to
//! what it holds, and sends a JSON merge patch of `status.executions` carrying the
//! `metadata.resourceVersion` it read, by field manager [`FIELD_MANAGER`]. A concurrent
//! writer (another operator replica during a failover, an admin, the reconcile or the
//! breaker manager of this one) makes it fail with `409 Conflict`; it then reads again
//! and adds the same counts to the fresh value, so no count is lost or counted twice.
//!
//! A patch without answer (timeout, transport error, `5xx`) may have been applied all the
//! same; the writer's in-doubt rule finds out exactly (the hook's first change after the
//! version the patch was based on is ours exactly when it shows the counts sent), so the
//! counts are never added twice by one [`write()`], whatever answers are lost. What
//! remains (documented, not closed): if the API server's watch history no longer reaches
//! back to that version (`410 Gone`, minutes later), the fresh status is compared with
//! what was sent instead, which can be wrong if someone else wrote since; and if the
//! outcome is still unknown when the writer's retries are used up, the write fails: the
//! counts go back to the batch (or to the dispatcher via a `504`) and are written again,
//! doubled if the lost patch did land.

use std::future::Future;
use std::sync::Mutex;
use std::time::Duration;

use agenthooks_crds::AgentHook;
use agenthooks_crds::agenthook::ExecutionsStatus;
use agenthooks_crds::report::ExecutionDelta;
use chrono::{DateTime, SecondsFormat, Utc};
use kube::Api;
use kube::api::{Patch, PatchParams};

use super::api::bounded;
use super::times;
use crate::error::Error;
use crate::shared::lock;
use crate::status::writer::{ObjectApi, Outcome, Plan, StatusTarget, StatusWriter, WriteKind};

/// Field manager of the `status.executions` patches.
pub const FIELD_MANAGER: &str = "agenthooks-operator-executions";

/// The decisions a hook run can end in (CONTRACT §7.1), as `lastDecision` spells them.
pub const DECISIONS: [&str; 5] = ["allow", "block", "ask", "error", "timeout"];

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
    /// Runs that asked for a person's decision.
    pub ask: u64,
    /// When the latest of these runs happened (`None`: not reported).
    pub last_time: Option<DateTime<Utc>>,
    /// The latest run's decision, one of [`DECISIONS`].
    pub last_decision: Option<String>,
}

impl Counts {
    /// The counts of a report entry received at `received`, checked: `lastExecutionTime`
    /// must be RFC 3339 and `lastDecision` one of [`DECISIONS`]; a `lastExecutionTime`
    /// after `received` (+ skew) or before 2000 is taken as `received`
    /// ([`times::clamp`]). `at` names the entry in the error (e.g. `executions[2]`).
    ///
    /// Errors: a message naming the field, for a 400.
    pub fn from_delta(
        d: &ExecutionDelta,
        at: &str,
        received: DateTime<Utc>,
    ) -> Result<Counts, String> {
        let last_time = match &d.last_execution_time {
            None => None,
            Some(t) => Some(times::clamp(
                super::times::parse_utc(t).map_err(|e| {
                    format!("{at}.lastExecutionTime: {t:?} is not an RFC 3339 time ({e})")
                })?,
                received,
            )),
        };
        if let Some(dec) = &d.last_decision
            && !DECISIONS.contains(&dec.as_str())
        {
            return Err(format!(
                "{at}.lastDecision: {dec:?} is not one of allow, block, ask, error, timeout"
            ));
        }
        Ok(Counts {
            allow: d.allow,
            block: d.block,
            error: d.error,
            timeout: d.timeout,
            ask: d.ask,
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
            && self.ask == 0
            && self.last_time.is_none()
            && self.last_decision.is_none()
    }

    /// Runs counted (all decisions, saturating): what a drop metric adds.
    pub fn runs(&self) -> u64 {
        self.allow
            .saturating_add(self.block)
            .saturating_add(self.error)
            .saturating_add(self.timeout)
            .saturating_add(self.ask)
    }

    /// Adds `other` (a later delta of the same hook): counts add up (saturating), the
    /// last run is the newer one ([`later_wins`]).
    pub fn add(&mut self, other: &Counts) {
        self.allow = self.allow.saturating_add(other.allow);
        self.block = self.block.saturating_add(other.block);
        self.error = self.error.saturating_add(other.error);
        self.timeout = self.timeout.saturating_add(other.timeout);
        self.ask = self.ask.saturating_add(other.ask);
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

/// An RFC 3339 UTC time as written to status (`Z`, fractional seconds only when set).
pub fn format_time(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(SecondsFormat::AutoSi, true)
}

/// `current` (the hook's recorded `status.executions`) plus `add`, at `now`: counts added
/// (saturating at `i64::MAX`), the last run the newer of the two. A recorded
/// `lastExecutionTime` that does not parse, or lies in the future of `now`
/// ([`times::is_future`]), loses to any reported one.
pub fn merge(
    current: Option<&ExecutionsStatus>,
    add: &Counts,
    now: DateTime<Utc>,
) -> ExecutionsStatus {
    let cur = current.cloned().unwrap_or_default();
    let plus = |c: i64, a: u64| c.saturating_add(i64::try_from(a).unwrap_or(i64::MAX));
    let cur_time = cur
        .last_execution_time
        .as_deref()
        .and_then(|t| super::times::parse_utc(t).ok())
        .filter(|t| !times::is_future(*t, now));
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
        ask: plus(cur.ask, add.ask),
        last_execution_time,
        last_decision,
    }
}

/// What [`write()`] did.
#[derive(Debug, Clone, PartialEq)]
pub enum ExecWrite {
    /// Written; `executions` is what the hook's status now holds, after `attempts`
    /// patches (`attempts - 1` met 409 or got no answer; 0: nothing to change).
    Written {
        /// The written `status.executions`.
        executions: ExecutionsStatus,
        /// Patches sent.
        attempts: u32,
    },
    /// The hook is gone, or its name now belongs to another uid: the counts are dropped.
    Gone,
}

/// Sends one `status.executions` merge patch (field manager [`FIELD_MANAGER`]) of hook
/// `name`, bounded by `timeout` ([`bounded`]): the patch [`write()`] sends, for tests that
/// wrap it ([`write_with`]).
///
/// Errors: the API answer, or [`super::api::TimedOut`] as [`kube::Error::Service`].
pub async fn send_patch(
    api: &Api<AgentHook>,
    name: &str,
    body: &serde_json::Value,
    timeout: Duration,
) -> Result<(), kube::Error> {
    let params = PatchParams {
        field_manager: Some(FIELD_MANAGER.to_string()),
        ..Default::default()
    };
    bounded(
        timeout,
        || format!("patch agenthook {name}/status"),
        api.patch_status(name, &params, &Patch::Merge(body)),
    )
    .await
    .map(|_| ())
}

/// Adds `add` to `status.executions` of hook `name` (uid `uid`) in `api`'s namespace,
/// through `w` (module documentation).
///
/// Errors: [`Error::StatusConflict`] when every attempt met 409; [`Error::NotLeader`]
/// when this replica no longer leads; [`Error::MissingField`] for a hook without
/// `resourceVersion`; [`Error::Kube`] for any other API failure (a permanent refusal
/// such as `403`/`422`: [`super::api::refusal`]), a timeout, or a patch whose outcome
/// stayed unknown.
pub async fn write(
    w: &StatusWriter,
    api: &Api<AgentHook>,
    name: &str,
    uid: &str,
    add: &Counts,
) -> Result<ExecWrite, Error> {
    write_to(w, &w.object(api, name).with_uid(uid), add).await
}

/// [`write()`] with each merge patch sent by `send(attempt, body)` (attempt 1, 2, ...)
/// instead of the writer's own call: tests wrap [`send_patch`] to change the hook
/// meanwhile or to lose an answer.
///
/// Errors: as [`write()`].
pub async fn write_with<S, SFut>(
    w: &StatusWriter,
    api: &Api<AgentHook>,
    name: &str,
    uid: &str,
    add: &Counts,
    send: S,
) -> Result<ExecWrite, Error>
where
    S: FnMut(u32, serde_json::Value) -> SFut + Send,
    SFut: Future<Output = Result<(), kube::Error>> + Send,
{
    let target = Sending {
        object: w.object(api, name).with_uid(uid),
        send: Mutex::new(send),
    };
    write_to(w, &target, add).await
}

async fn write_to(
    w: &StatusWriter,
    target: &impl StatusTarget<AgentHook>,
    add: &Counts,
) -> Result<ExecWrite, Error> {
    let outcome = w
        .write(
            WriteKind::Executions,
            target,
            None,
            &mut None,
            |hook: &AgentHook| {
                let executions = merge(
                    hook.status.as_ref().and_then(|s| s.executions.as_ref()),
                    add,
                    Utc::now(),
                );
                Plan::Write {
                    status: serde_json::json!({ "executions": executions }),
                    answer: executions,
                }
            },
        )
        .await?;
    Ok(match outcome {
        Outcome::Written {
            answer, patches, ..
        } => ExecWrite::Written {
            executions: answer,
            attempts: patches,
        },
        Outcome::Unchanged { answer, .. } => ExecWrite::Written {
            executions: answer,
            attempts: 0,
        },
        Outcome::Gone => ExecWrite::Gone,
    })
}

/// A hook whose status patches go through a test's `send` (reads and history as the API
/// server's).
struct Sending<'a, S> {
    object: ObjectApi<'a, AgentHook>,
    send: Mutex<S>,
}

impl<S, SFut> StatusTarget<AgentHook> for Sending<'_, S>
where
    S: FnMut(u32, serde_json::Value) -> SFut + Send,
    SFut: Future<Output = Result<(), kube::Error>> + Send,
{
    fn key(&self) -> String {
        self.object.key()
    }

    fn name(&self) -> &str {
        self.object.name()
    }

    fn read(&self) -> impl Future<Output = Result<Option<AgentHook>, kube::Error>> + Send {
        self.object.read()
    }

    fn patch(
        &self,
        attempt: u32,
        _params: PatchParams,
        patch: Patch<serde_json::Value>,
    ) -> impl Future<Output = Result<Option<AgentHook>, kube::Error>> + Send {
        let body = match patch {
            Patch::Merge(b) | Patch::Apply(b) => b,
            _ => serde_json::Value::Null,
        };
        let sent = {
            let mut send = lock(&self.send);
            (*send)(attempt, body)
        };
        async move { sent.await.map(|()| None) }
    }

    fn first_change_after(
        &self,
        version: &str,
    ) -> impl Future<Output = Result<Option<AgentHook>, kube::Error>> + Send {
        self.object.first_change_after(version)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(s: &str) -> Option<DateTime<Utc>> {
        Some(super::times::parse_utc(s).unwrap())
    }

    /// "now" of the tests: after every time they use.
    fn now() -> DateTime<Utc> {
        at("2025-03-02T00:00:00Z").unwrap()
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
                &counts(1, 2, Some(("2025-03-01T10:00:00.250Z", "block"))),
                now()
            ),
            ExecutionsStatus {
                allow: 1,
                block: 2,
                error: 0,
                timeout: 0,
                ask: 0,
                last_execution_time: Some("2025-03-01T10:00:00.250Z".into()),
                last_decision: Some("block".into()),
            }
        );
        let recorded = ExecutionsStatus {
            allow: 10,
            block: 1,
            error: 2,
            timeout: 3,
            ask: 0,
            last_execution_time: Some("2025-03-01T11:00:00+01:00".into()),
            last_decision: Some("error".into()),
        };
        let older = merge(
            Some(&recorded),
            &counts(5, 0, Some(("2025-03-01T09:59:59Z", "allow"))),
            now(),
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
            now(),
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
            now(),
        );
        assert_eq!(fixed.last_decision.as_deref(), Some("block"));
        let huge = merge(
            Some(&ExecutionsStatus {
                allow: i64::MAX - 1,
                ..Default::default()
            }),
            &counts(u64::MAX, 0, None),
            now(),
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
            one_by_one = Some(merge(one_by_one.as_ref(), d, now()));
        }
        // one batched write
        let mut batch = Counts::default();
        for d in &deltas {
            batch.add(d);
        }
        assert_eq!(merge(None, &batch, now()), one_by_one.unwrap());
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
        assert_eq!(
            Counts::from_delta(&d, "executions[0]", now())
                .unwrap()
                .allow,
            1
        );
        d.last_decision = Some("maybe".into());
        let e = Counts::from_delta(&d, "executions[3]", now()).unwrap_err();
        assert!(e.starts_with("executions[3].lastDecision:"), "{e}");
        d.last_decision = None;
        d.last_execution_time = Some("10:00".into());
        let e = Counts::from_delta(&d, "executions[0]", now()).unwrap_err();
        assert!(e.starts_with("executions[0].lastExecutionTime:"), "{e}");
        assert!(Counts::default().is_empty());
        assert!(!counts(0, 0, Some(("2025-03-01T10:00:00Z", "allow"))).is_empty());
    }

    #[test]
    fn a_last_run_in_year_9999_does_not_pin_last_decision() {
        let received = at("2025-03-01T10:00:00Z").unwrap();
        let forged = ExecutionDelta {
            uid: "u".into(),
            namespace: "n".into(),
            name: "h".into(),
            block: 1,
            last_execution_time: Some("9999-12-31T23:59:59Z".into()),
            last_decision: Some("block".into()),
            ..Default::default()
        };
        let c = Counts::from_delta(&forged, "executions[0]", received).unwrap();
        assert_eq!(c.last_time, Some(received), "taken as the receipt time");
        let mut ancient = forged.clone();
        ancient.last_execution_time = Some("1970-01-01T00:00:00Z".into());
        let c2 = Counts::from_delta(&ancient, "executions[0]", received).unwrap();
        assert_eq!(
            c2.last_time,
            Some(received),
            "before 2000: the receipt time"
        );
        // A real run a second later wins over the forged one, in a batch and in status.
        let mut batch = c.clone();
        let real = counts(1, 0, Some(("2025-03-01T10:00:01Z", "allow")));
        batch.add(&real);
        assert_eq!(batch.last_decision.as_deref(), Some("allow"));
        let status = merge(None, &c, received);
        let after = merge(
            Some(&status),
            &real,
            received + chrono::Duration::seconds(1),
        );
        assert_eq!(after.last_decision.as_deref(), Some("allow"));
        assert_eq!(
            after.last_execution_time.as_deref(),
            Some("2025-03-01T10:00:01Z")
        );
        // A year-9999 time recorded before clamping existed loses too (heals the hook).
        let pinned = ExecutionsStatus {
            block: 4,
            last_execution_time: Some("9999-12-31T23:59:59Z".into()),
            last_decision: Some("block".into()),
            ..Default::default()
        };
        let healed = merge(
            Some(&pinned),
            &real,
            received + chrono::Duration::seconds(1),
        );
        assert_eq!(healed.last_decision.as_deref(), Some("allow"));
        assert_eq!((healed.allow, healed.block), (1, 4));
        let untouched = merge(Some(&pinned), &counts(1, 0, None), received);
        assert_eq!(
            untouched.last_execution_time.as_deref(),
            Some("9999-12-31T23:59:59Z"),
            "nothing newer reported: left as recorded"
        );
    }
}
