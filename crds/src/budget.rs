//! The `TenantHookBudget` custom resource (DESIGN "TenantHookBudget").

// kube's `printcolumn(...)` repeats `type_ = ...` across columns, which clippy reads as
// duplicated attributes.
#![allow(clippy::duplicated_attributes)]

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::{CustomResource, KubeSchema};
use serde::{Deserialize, Serialize};

/// Default monthly token budget of a tenant (seed: 1,000,000).
pub const DEFAULT_MONTHLY_TOKENS: i64 = 1_000_000;

/// Spec of a tenant's monthly token budget for LLM-evaluated hooks.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[kube(
    group = "agenthooks.io",
    version = "v1alpha1",
    kind = "TenantHookBudget",
    plural = "tenanthookbudgets",
    shortname = "thb",
    category = "agenthooks",
    namespaced,
    status = "TenantHookBudgetStatus",
    derive = "PartialEq",
    doc = "A tenant's monthly token budget for prompt hooks.",
    printcolumn(name = "Period", type_ = "string", json_path = ".status.period"),
    printcolumn(name = "Used", type_ = "integer", json_path = ".status.used"),
    printcolumn(name = "Remaining", type_ = "integer", json_path = ".status.remaining"),
    printcolumn(name = "State", type_ = "string", json_path = ".status.state"),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct TenantHookBudgetSpec {
    /// Tenant, when the budget lives in the master namespace; else the namespace's tenant.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 253))]
    pub tenant: Option<String>,
    /// Tokens a month (UTC); default 1,000,000.
    #[serde(default = "default_monthly_tokens")]
    #[schemars(range(min = 0))]
    pub monthly_tokens: i64,
}

fn default_monthly_tokens() -> i64 {
    DEFAULT_MONTHLY_TOKENS
}

/// Status of a budget.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct TenantHookBudgetStatus {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// UTC month, `YYYY-MM`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub period: Option<String>,
    #[serde(default)]
    pub used: i64,
    #[serde(default)]
    pub remaining: i64,
    /// `Ok`, `Warning` (below 20% remaining) or `Exhausted` (0).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[x_kube(merge_strategy = ListMerge::Map(vec!["type".into()]))]
    pub conditions: Vec<Condition>,
}

/// Percentage of the monthly total below which a budget is in `Warning` (seed: "warn at
/// 20% remaining"; CONTRACT §5.5: Warning *below* 20%, so exactly 20% is still `Ok`).
pub const WARNING_PERCENT: i64 = 20;

/// State of a budget (status `state`, printer column State).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BudgetState {
    /// 20% or more remaining.
    Ok,
    /// Below 20% remaining, above 0.
    Warning,
    /// Nothing remaining: prompt hooks of blocking events are blocked.
    Exhausted,
}

impl BudgetState {
    /// `Ok`, `Warning` or `Exhausted` (the status word).
    pub fn as_str(self) -> &'static str {
        match self {
            BudgetState::Ok => "Ok",
            BudgetState::Warning => "Warning",
            BudgetState::Exhausted => "Exhausted",
        }
    }

    /// State for `remaining` tokens of a monthly `total` (both clamped at 0).
    pub fn of(total: i64, remaining: i64) -> BudgetState {
        let (total, remaining) = (total.max(0), remaining.max(0));
        if remaining == 0 {
            BudgetState::Exhausted
        } else if (remaining as i128) * 100 < (total as i128) * WARNING_PERCENT as i128 {
            BudgetState::Warning
        } else {
            BudgetState::Ok
        }
    }
}

/// The budget period containing `now`: its UTC month, `YYYY-MM`.
pub fn period_of(now: chrono::DateTime<chrono::Utc>) -> String {
    now.format("%Y-%m").to_string()
}

/// The first instant of the UTC month after `now` (when the next period starts).
pub fn next_period_start(now: chrono::DateTime<chrono::Utc>) -> chrono::DateTime<chrono::Utc> {
    use chrono::{Datelike, TimeZone};
    let (y, m) = if now.month() == 12 {
        (now.year() + 1, 1)
    } else {
        (now.year(), now.month() + 1)
    };
    chrono::Utc
        .with_ymd_and_hms(y, m, 1, 0, 0, 0)
        .single()
        .expect("the first of a month exists")
}

/// The status a budget should show at `now`: the recorded `used` within the current
/// period, or a fresh period (used 0) when the recorded one is another month. The
/// configured total is kept across the rollover; `remaining` never goes below 0 (rule:
/// [`crate::rules::ledger::used_in`] and [`crate::rules::ledger::remaining`]).
pub fn status_at(
    spec: &TenantHookBudgetSpec,
    recorded: Option<&TenantHookBudgetStatus>,
    now: chrono::DateTime<chrono::Utc>,
) -> TenantHookBudgetStatus {
    use crate::rules::ledger::{remaining, used_in};
    let period = period_of(now);
    let used = recorded.map_or(0, |s| used_in(s.period.as_deref(), s.used, &period));
    let remaining = remaining(spec.monthly_tokens, used);
    TenantHookBudgetStatus {
        observed_generation: recorded.and_then(|s| s.observed_generation),
        period: Some(period),
        used,
        remaining,
        state: Some(
            BudgetState::of(spec.monthly_tokens, remaining)
                .as_str()
                .to_string(),
        ),
        conditions: recorded.map(|s| s.conditions.clone()).unwrap_or_default(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::{TimeZone, Utc};

    fn spec(total: i64) -> TenantHookBudgetSpec {
        TenantHookBudgetSpec {
            tenant: None,
            monthly_tokens: total,
        }
    }

    #[test]
    fn default_total_is_one_million() {
        let s: TenantHookBudgetSpec = serde_json::from_str("{}").unwrap();
        assert_eq!(s.monthly_tokens, 1_000_000);
    }

    #[test]
    fn state_edges_exactly_twenty_percent_and_zero() {
        assert_eq!(
            BudgetState::of(1_000_000, 200_000),
            BudgetState::Ok,
            "exactly 20% is not below 20%"
        );
        assert_eq!(BudgetState::of(1_000_000, 199_999), BudgetState::Warning);
        assert_eq!(BudgetState::of(1_000_000, 1), BudgetState::Warning);
        assert_eq!(BudgetState::of(1_000_000, 0), BudgetState::Exhausted);
        assert_eq!(
            BudgetState::of(1_000_000, -5),
            BudgetState::Exhausted,
            "overspend clamps to 0"
        );
        assert_eq!(
            BudgetState::of(0, 0),
            BudgetState::Exhausted,
            "a zero budget is exhausted"
        );
        assert_eq!(BudgetState::of(10, 2), BudgetState::Ok);
        assert_eq!(BudgetState::of(10, 1), BudgetState::Warning);
    }

    #[test]
    fn status_within_a_period_keeps_used_and_never_goes_below_zero() {
        let now = Utc.with_ymd_and_hms(2026, 11, 15, 12, 0, 0).unwrap();
        let recorded = TenantHookBudgetStatus {
            period: Some("2026-11".into()),
            used: 850_000,
            ..Default::default()
        };
        let s = status_at(&spec(1_000_000), Some(&recorded), now);
        assert_eq!(
            (s.used, s.remaining, s.state.as_deref()),
            (850_000, 150_000, Some("Warning"))
        );
        let over = TenantHookBudgetStatus {
            period: Some("2026-11".into()),
            used: 1_200_000,
            ..Default::default()
        };
        let s = status_at(&spec(1_000_000), Some(&over), now);
        assert_eq!((s.remaining, s.state.as_deref()), (0, Some("Exhausted")));
    }

    #[test]
    fn a_new_utc_month_starts_a_new_period_with_the_configured_total() {
        let recorded = TenantHookBudgetStatus {
            period: Some("2026-11".into()),
            used: 1_000_000,
            ..Default::default()
        };
        let last_second = Utc.with_ymd_and_hms(2026, 11, 30, 23, 59, 59).unwrap();
        let s = status_at(&spec(1_000_000), Some(&recorded), last_second);
        assert_eq!(
            (s.period.as_deref(), s.remaining, s.state.as_deref()),
            (Some("2026-11"), 0, Some("Exhausted"))
        );
        let first_second = Utc.with_ymd_and_hms(2026, 12, 1, 0, 0, 0).unwrap();
        let s = status_at(&spec(1_000_000), Some(&recorded), first_second);
        assert_eq!(
            (s.period.as_deref(), s.used, s.remaining, s.state.as_deref()),
            (Some("2026-12"), 0, 1_000_000, Some("Ok"))
        );
        // a local-time midnight elsewhere does not roll over: the period is UTC
        let utc_late = Utc.with_ymd_and_hms(2026, 11, 30, 22, 0, 0).unwrap();
        assert_eq!(period_of(utc_late), "2026-11");
    }

    #[test]
    fn next_period_start_crosses_years() {
        let dec = Utc.with_ymd_and_hms(2026, 12, 31, 23, 0, 0).unwrap();
        assert_eq!(
            next_period_start(dec),
            Utc.with_ymd_and_hms(2027, 1, 1, 0, 0, 0).unwrap()
        );
        let feb = Utc.with_ymd_and_hms(2028, 2, 29, 0, 0, 0).unwrap();
        assert_eq!(
            next_period_start(feb),
            Utc.with_ymd_and_hms(2028, 3, 1, 0, 0, 0).unwrap()
        );
        assert_eq!(
            period_of(Utc.with_ymd_and_hms(2027, 1, 1, 0, 0, 0).unwrap()),
            "2027-01"
        );
    }
}
