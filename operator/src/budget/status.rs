//! The status a TenantHookBudget should show, and the transitions worth an Event
//! (CONVENTIONS habit 3: `observedGeneration`, conditions keyed by type with
//! `lastTransitionTime` moving only on a real transition; Events on transitions only).
//!
//! The figures come from [`agenthooks_crds::budget::status_at`] (UTC month periods,
//! rollover keeping the configured total, `remaining` never below 0, Ok / Warning below
//! 20% / Exhausted at 0). Pure.

use agenthooks_crds::TenantHookBudget;
use agenthooks_crds::budget::{BudgetState, TenantHookBudgetStatus, status_at};
use chrono::{DateTime, Utc};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};

use super::resolution::{REASON_ACCEPTED, Verdict};
use crate::status::{ACCEPTED, CondStatus, DesiredCondition, merge_condition};

/// Event reason: the budget fell below 20% remaining.
pub const EVENT_WARNING: &str = "BudgetWarning";
/// Event reason: nothing remains; prompt hooks of blocking events are blocked.
pub const EVENT_EXHAUSTED: &str = "BudgetExhausted";
/// Event reason: back to 20% or more remaining (total raised).
pub const EVENT_OK: &str = "BudgetOk";
/// Event reason: a new UTC month started (used back to 0, total kept).
pub const EVENT_NEW_PERIOD: &str = "NewPeriod";

/// The `Accepted` condition for `verdict`.
pub fn accepted_condition(verdict: &Verdict) -> DesiredCondition {
    match verdict {
        Verdict::Accepted { tenant } => DesiredCondition {
            type_: ACCEPTED,
            status: CondStatus::True,
            reason: REASON_ACCEPTED.into(),
            message: format!("the token budget of tenant {tenant:?}"),
        },
        Verdict::Refused { reason, message } => DesiredCondition {
            type_: ACCEPTED,
            status: CondStatus::False,
            reason: (*reason).into(),
            message: message.clone(),
        },
    }
}

/// The full status `budget` should show at `now`: the figures of
/// [`status_at`], `observedGeneration` = its generation, and `Accepted` for `verdict`
/// (its `lastTransitionTime` kept unless its status changes; then `now_time`).
pub fn desired(
    budget: &TenantHookBudget,
    verdict: &Verdict,
    now: DateTime<Utc>,
    now_time: &Time,
) -> TenantHookBudgetStatus {
    let recorded = budget.status.as_ref();
    let generation = budget.metadata.generation.unwrap_or(0);
    let mut s = status_at(&budget.spec, recorded, now);
    s.observed_generation = Some(generation);
    let want = accepted_condition(verdict);
    let merged = merge_condition(find(recorded, ACCEPTED), &want, generation, now_time);
    match s.conditions.iter_mut().find(|c| c.type_ == ACCEPTED) {
        Some(c) => *c = merged,
        None => s.conditions.push(merged),
    }
    s
}

/// The status `budget` should show once `tokens` more are spent at `now`: the figures
/// of [`status_at`] (a settle landing in a new month resets `used` first) plus
/// `tokens`; conditions and `observedGeneration` as recorded.
pub fn with_spend(
    budget: &TenantHookBudget,
    tokens: i64,
    now: DateTime<Utc>,
) -> TenantHookBudgetStatus {
    let mut s = status_at(&budget.spec, budget.status.as_ref(), now);
    s.used = s.used.saturating_add(tokens);
    s.remaining = agenthooks_crds::rules::ledger::remaining(budget.spec.monthly_tokens, s.used);
    s.state = Some(
        BudgetState::of(budget.spec.monthly_tokens, s.remaining)
            .as_str()
            .to_string(),
    );
    s
}

/// Whether `budget`'s recorded status differs from what it should show.
pub fn needs_write(
    budget: &TenantHookBudget,
    verdict: &Verdict,
    now: DateTime<Utc>,
    now_time: &Time,
) -> bool {
    budget.status.as_ref() != Some(&desired(budget, verdict, now, now_time))
}

fn find<'a>(status: Option<&'a TenantHookBudgetStatus>, type_: &str) -> Option<&'a Condition> {
    status.and_then(|s| s.conditions.iter().find(|c| c.type_ == type_))
}

/// An Event to publish on the budget.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Notice {
    /// Warning (else Normal).
    pub warning: bool,
    /// CamelCase reason.
    pub reason: String,
    /// For a person.
    pub note: String,
}

/// The Events a status change from `before` to `after` is worth (on a budget of
/// `total` tokens): an `Accepted` transition (Normal `Accepted`, or Warning with the
/// refusal's reason), a new period (Normal [`EVENT_NEW_PERIOD`]), and a state change
/// (Warning [`EVENT_WARNING`] / [`EVENT_EXHAUSTED`], Normal [`EVENT_OK`]; a first status
/// that is `Ok` is no transition). Nothing when nothing moved.
pub fn transitions(
    before: Option<&TenantHookBudgetStatus>,
    after: &TenantHookBudgetStatus,
    total: i64,
) -> Vec<Notice> {
    let mut out = Vec::new();
    if let Some(c) = find(Some(after), ACCEPTED)
        && find(before, ACCEPTED).is_none_or(|b| b.status != c.status)
    {
        out.push(Notice {
            warning: c.status != "True",
            reason: c.reason.clone(),
            note: c.message.clone(),
        });
    }
    let before_period = before.and_then(|s| s.period.as_deref());
    let new_period = before_period.is_some() && before_period != after.period.as_deref();
    let before_state = before.and_then(|s| s.state.as_deref()).unwrap_or("Ok");
    let after_state = after.state.as_deref().unwrap_or("Ok");
    if new_period {
        out.push(Notice {
            warning: false,
            reason: EVENT_NEW_PERIOD.into(),
            note: format!(
                "period {} started: {} of {total} tokens used",
                after.period.as_deref().unwrap_or(""),
                after.used
            ),
        });
    }
    if before_state != after_state && !(new_period && after_state == "Ok") {
        let (warning, reason, note) = match after_state {
            "Warning" => (
                true,
                EVENT_WARNING,
                format!(
                    "{} of {total} tokens remaining in {} (below 20%)",
                    after.remaining,
                    after.period.as_deref().unwrap_or("")
                ),
            ),
            "Exhausted" => (
                true,
                EVENT_EXHAUSTED,
                format!(
                    "no tokens remaining in {} ({} used of {total}): prompt hooks of blocking events are blocked",
                    after.period.as_deref().unwrap_or(""),
                    after.used
                ),
            ),
            _ => (
                false,
                EVENT_OK,
                format!(
                    "{} of {total} tokens remaining in {}",
                    after.remaining,
                    after.period.as_deref().unwrap_or("")
                ),
            ),
        };
        out.push(Notice {
            warning,
            reason: reason.into(),
            note,
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use agenthooks_crds::TenantHookBudgetSpec;
    use chrono::TimeZone;

    fn t(secs: i64) -> Time {
        Time(k8s_openapi::jiff::Timestamp::from_second(secs).unwrap())
    }

    fn budget(
        total: i64,
        generation: i64,
        status: Option<TenantHookBudgetStatus>,
    ) -> TenantHookBudget {
        let mut b = TenantHookBudget::new(
            "b",
            TenantHookBudgetSpec {
                tenant: None,
                monthly_tokens: total,
            },
        );
        b.metadata.generation = Some(generation);
        b.status = status;
        b
    }

    fn acme() -> Verdict {
        Verdict::Accepted {
            tenant: "acme".into(),
        }
    }

    fn nov(day: u32) -> DateTime<Utc> {
        Utc.with_ymd_and_hms(2026, 11, day, 12, 0, 0).unwrap()
    }

    #[test]
    fn a_budget_left_alone_needs_no_write() {
        let b = budget(1000, 1, None);
        assert!(needs_write(&b, &acme(), nov(1), &t(1)));
        let s = desired(&b, &acme(), nov(1), &t(1));
        assert_eq!(
            (
                s.observed_generation,
                s.period.as_deref(),
                s.used,
                s.remaining,
                s.state.as_deref()
            ),
            (Some(1), Some("2026-11"), 0, 1000, Some("Ok"))
        );
        assert_eq!(s.conditions.len(), 1);
        assert_eq!(
            (
                s.conditions[0].status.as_str(),
                s.conditions[0].reason.as_str()
            ),
            ("True", "Accepted")
        );
        let b = budget(1000, 1, Some(s));
        assert!(
            !needs_write(&b, &acme(), nov(20), &t(999)),
            "same month, nothing moved"
        );
        let mut b2 = b.clone();
        b2.metadata.generation = Some(2);
        assert!(needs_write(&b2, &acme(), nov(20), &t(999)), "a spec edit");
        assert!(
            needs_write(
                &b,
                &acme(),
                Utc.with_ymd_and_hms(2026, 12, 1, 0, 0, 0).unwrap(),
                &t(999)
            ),
            "a new month"
        );
    }

    #[test]
    fn accepted_keeps_its_transition_time_until_its_status_changes() {
        let s = desired(&budget(1000, 1, None), &acme(), nov(1), &t(100));
        let refused = Verdict::Refused {
            reason: "DuplicateBudget",
            message: "tenant \"acme\" already has budget a/b".into(),
        };
        let s2 = desired(&budget(1000, 1, Some(s.clone())), &refused, nov(2), &t(200));
        assert_eq!(s2.conditions[0].last_transition_time, t(200));
        assert_eq!(s2.conditions[0].reason, "DuplicateBudget");
        let s3 = desired(
            &budget(1000, 2, Some(s.clone())),
            &Verdict::Accepted {
                tenant: "acme".into(),
            },
            nov(3),
            &t(300),
        );
        assert_eq!(s3.conditions[0].last_transition_time, t(100));
        assert_eq!(s3.conditions[0].observed_generation, Some(2));
    }

    #[test]
    fn spend_adds_to_used_and_a_new_month_resets_first() {
        let recorded = TenantHookBudgetStatus {
            observed_generation: Some(3),
            period: Some("2026-11".into()),
            used: 700,
            remaining: 300,
            state: Some("Ok".into()),
            conditions: vec![],
        };
        let b = budget(1000, 3, Some(recorded));
        let s = with_spend(&b, 250, nov(30));
        assert_eq!(
            (s.used, s.remaining, s.state.as_deref()),
            (950, 50, Some("Warning"))
        );
        assert_eq!(s.observed_generation, Some(3));
        let s = with_spend(&b, 400, nov(30));
        assert_eq!(
            (s.used, s.remaining, s.state.as_deref()),
            (1100, 0, Some("Exhausted"))
        );
        let dec = Utc.with_ymd_and_hms(2026, 12, 1, 0, 0, 0).unwrap();
        let s = with_spend(&b, 250, dec);
        assert_eq!(
            (s.period.as_deref(), s.used, s.remaining, s.state.as_deref()),
            (Some("2026-12"), 250, 750, Some("Ok"))
        );
    }

    fn st(period: &str, used: i64, remaining: i64, state: &str) -> TenantHookBudgetStatus {
        TenantHookBudgetStatus {
            period: Some(period.into()),
            used,
            remaining,
            state: Some(state.into()),
            ..Default::default()
        }
    }

    fn reasons(n: &[Notice]) -> Vec<(&str, bool)> {
        n.iter().map(|n| (n.reason.as_str(), n.warning)).collect()
    }

    #[test]
    fn events_on_transitions_only() {
        let ok = st("2026-11", 100, 900, "Ok");
        assert!(transitions(Some(&ok), &st("2026-11", 200, 800, "Ok"), 1000).is_empty());
        assert!(
            transitions(None, &ok, 1000).is_empty(),
            "a first Ok is no transition"
        );
        let warn = st("2026-11", 850, 150, "Warning");
        let n = transitions(Some(&ok), &warn, 1000);
        assert_eq!(reasons(&n), [("BudgetWarning", true)]);
        assert!(n[0].note.contains("150 of 1000"), "{}", n[0].note);
        assert!(transitions(Some(&warn), &st("2026-11", 900, 100, "Warning"), 1000).is_empty());
        let ex = st("2026-11", 1000, 0, "Exhausted");
        assert_eq!(
            reasons(&transitions(Some(&warn), &ex, 1000)),
            [("BudgetExhausted", true)]
        );
        assert_eq!(
            reasons(&transitions(
                Some(&ex),
                &st("2026-11", 1000, 1000, "Ok"),
                2000
            )),
            [("BudgetOk", false)]
        );
        assert_eq!(
            reasons(&transitions(Some(&ex), &st("2026-12", 0, 1000, "Ok"), 1000)),
            [("NewPeriod", false)],
            "a new month says so, once"
        );
        assert_eq!(
            reasons(&transitions(None, &st("2026-11", 0, 0, "Exhausted"), 0)),
            [("BudgetExhausted", true)]
        );
    }

    #[test]
    fn accepted_transitions_are_events() {
        let s = desired(&budget(1000, 1, None), &acme(), nov(1), &t(1));
        assert_eq!(reasons(&transitions(None, &s, 1000)), [("Accepted", false)]);
        let refused = desired(
            &budget(1000, 1, Some(s.clone())),
            &Verdict::Refused {
                reason: "TenantMismatch",
                message: "spec.tenant: x".into(),
            },
            nov(1),
            &t(2),
        );
        assert_eq!(
            reasons(&transitions(Some(&s), &refused, 1000)),
            [("TenantMismatch", true)]
        );
        assert!(transitions(Some(&refused), &refused, 1000).is_empty());
    }
}
