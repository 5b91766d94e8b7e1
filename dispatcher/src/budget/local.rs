//! The standalone budget ledger: the `TenantHookBudget` documents of `--hooks`, kept in
//! memory (CONTRACT §5.5; DESIGN "TenantHookBudget").
//!
//! The operator's rules, from the same functions (crds `rules::ledger`; the tests run
//! crds' case table through this ledger): a reservation is granted iff the budget's
//! tokens in the current UTC month, minus what is used and the reservations in flight,
//! cover it; a settle charges the real cost, at most what the reservation held (the
//! reservation is the call's bound: the excess is logged, not charged), and frees the
//! hold; `remaining` never shows below 0; a new UTC month starts at `used` 0 with the
//! configured total (crds `budget::status_at`). A settle of an id this ledger does not
//! hold (settled before: it has no previous leader) is answered `duplicate` and charges
//! nothing. Nothing is persisted: a restart starts every budget at `used` 0. One
//! `std::sync::Mutex`, held for a few instructions, never across an await.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use agenthooks_crds::budget::status_at;
use agenthooks_crds::report::SettleResponse;
use agenthooks_crds::rules::ledger::{self as rule, Admission};
use agenthooks_crds::{TenantHookBudgetSpec, TenantHookBudgetStatus};
use chrono::{DateTime, Utc};

use super::{BudgetRefusal, Grant, SettleError};

/// One TenantHookBudget document, with the tenant it applies to.
#[derive(Debug, Clone, PartialEq)]
pub struct LocalBudget {
    pub namespace: String,
    pub name: String,
    /// `spec.tenant` in the master namespace, else the namespace's tenant.
    pub tenant: String,
    pub spec: TenantHookBudgetSpec,
}

/// Why a set of budgets cannot make a ledger.
#[derive(Debug, thiserror::Error, PartialEq)]
#[error("tenant {tenant:?} has two TenantHookBudgets: {first} and {second}")]
pub struct DuplicateBudget {
    pub tenant: String,
    pub first: String,
    pub second: String,
}

/// The clock of the ledger (UTC now); tests pass their own.
pub type Clock = Arc<dyn Fn() -> DateTime<Utc> + Send + Sync>;

struct Entry {
    budget: LocalBudget,
    status: TenantHookBudgetStatus,
    /// Tokens held by reservations in flight.
    reserved: i64,
    reservations: HashMap<String, i64>,
}

/// Budgets by tenant, in memory.
pub struct LocalLedger {
    entries: Mutex<HashMap<String, Entry>>,
    clock: Clock,
}

impl LocalLedger {
    /// A ledger on the system clock. Errors: two budgets for one tenant.
    pub fn new(budgets: Vec<LocalBudget>) -> Result<LocalLedger, DuplicateBudget> {
        LocalLedger::with_clock(budgets, Arc::new(Utc::now))
    }

    /// A ledger on `clock`. Errors: two budgets for one tenant.
    pub fn with_clock(
        budgets: Vec<LocalBudget>,
        clock: Clock,
    ) -> Result<LocalLedger, DuplicateBudget> {
        let now = clock();
        let mut entries: HashMap<String, Entry> = HashMap::new();
        for b in budgets {
            if let Some(e) = entries.get(&b.tenant) {
                return Err(DuplicateBudget {
                    tenant: b.tenant.clone(),
                    first: format!("{}/{}", e.budget.namespace, e.budget.name),
                    second: format!("{}/{}", b.namespace, b.name),
                });
            }
            let status = status_at(&b.spec, None, now);
            entries.insert(
                b.tenant.clone(),
                Entry {
                    budget: b,
                    status,
                    reserved: 0,
                    reservations: HashMap::new(),
                },
            );
        }
        Ok(LocalLedger {
            entries: Mutex::new(entries),
            clock,
        })
    }

    /// Number of budgets.
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    /// No budget at all.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The tenants with a budget (no order).
    pub fn tenants(&self) -> Vec<String> {
        self.lock().keys().cloned().collect()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Entry>> {
        self.entries.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Every budget as it shows now (rolled over to the current month): namespace, name,
    /// tenant, `spec.monthlyTokens` and status, sorted by namespace and name.
    pub fn budgets(&self) -> Vec<(String, String, String, i64, TenantHookBudgetStatus)> {
        let now = (self.clock)();
        let mut entries = self.lock();
        let mut out: Vec<_> = entries
            .values_mut()
            .map(|e| {
                e.roll(now);
                (
                    e.budget.namespace.clone(),
                    e.budget.name.clone(),
                    e.budget.tenant.clone(),
                    e.budget.spec.monthly_tokens,
                    e.status.clone(),
                )
            })
            .collect();
        out.sort_by(|a, b| (&a.0, &a.1).cmp(&(&b.0, &b.1)));
        out
    }

    /// The status `tenant`'s budget shows now (rolled over to the current month), and
    /// the tokens held in flight.
    pub fn status(&self, tenant: &str) -> Option<(TenantHookBudgetStatus, i64)> {
        let now = (self.clock)();
        let mut entries = self.lock();
        let e = entries.get_mut(tenant)?;
        e.roll(now);
        Some((e.status.clone(), e.reserved))
    }

    /// Holds `tokens` (1 to crds' `MAX_CALL_TOKENS`, checked by the caller) of `tenant`'s
    /// budget, when what its month has left after the reservations in flight covers it
    /// (crds `rules::ledger::admit`).
    pub fn reserve(&self, tenant: &str, tokens: i64) -> Result<Grant, BudgetRefusal> {
        let now = (self.clock)();
        let mut entries = self.lock();
        let Some(e) = entries.get_mut(tenant) else {
            return Err(BudgetRefusal::NotFound {
                tenant: tenant.into(),
            });
        };
        e.roll(now);
        let available = rule::available(e.budget.spec.monthly_tokens, e.status.used, 0, e.reserved);
        let budget = Some(format!("{}/{}", e.budget.namespace, e.budget.name));
        let remaining = match rule::admit(tokens, available) {
            Admission::Granted { remaining } => remaining,
            Admission::Exhausted { remaining } => {
                return Err(BudgetRefusal::Exhausted {
                    tokens,
                    remaining,
                    budget,
                });
            }
        };
        let id = uuid::Uuid::new_v4().to_string();
        e.reserved += tokens;
        e.reservations.insert(id.clone(), tokens);
        Ok(Grant {
            reservation_id: id,
            remaining,
            budget,
        })
    }

    /// Charges `tokens` (>= 0, checked by the caller) for reservation `id`, at most what
    /// it held (crds `rules::ledger::charge`: the excess is logged, not charged), and
    /// frees its hold. A reservation settled before answers `duplicate: true` and changes
    /// nothing.
    pub fn settle(
        &self,
        tenant: &str,
        id: &str,
        tokens: i64,
    ) -> Result<SettleResponse, SettleError> {
        let now = (self.clock)();
        let mut entries = self.lock();
        let Some(e) = entries.get_mut(tenant) else {
            return Err(SettleError::UnknownTenant {
                tenant: tenant.into(),
                reservation_id: id.into(),
            });
        };
        e.roll(now);
        let duplicate = match e.reservations.remove(id) {
            Some(held) => {
                e.reserved -= held;
                let charge = rule::charge(tokens, Some(held));
                if charge.is_capped() {
                    tracing::info!(
                        tenant,
                        reservation_id = id,
                        claimed = charge.claimed,
                        counted = charge.counted,
                        overage = charge.overage(),
                        "a settle carried more tokens than its reservation held; the excess is not charged"
                    );
                }
                e.status.used = e.status.used.saturating_add(charge.counted);
                e.status = status_at(&e.budget.spec, Some(&e.status), now);
                false
            }
            None => true,
        };
        Ok(SettleResponse {
            used: e.status.used,
            remaining: e.status.remaining,
            state: e.status.state.clone().unwrap_or_default(),
            duplicate,
        })
    }
}

impl Entry {
    /// Moves to the period of `now` (a new UTC month: used 0, same total).
    fn roll(&mut self, now: DateTime<Utc>) {
        self.status = status_at(&self.budget.spec, Some(&self.status), now);
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::budget::Budgets;
    use chrono::TimeZone;
    use std::sync::atomic::{AtomicI64, Ordering};

    /// `tenant-<tenant>/monthly`, `total` tokens a month (also used by the
    /// `budget_remaining` collector's tests).
    pub(crate) fn budget(tenant: &str, total: i64) -> LocalBudget {
        LocalBudget {
            namespace: format!("tenant-{tenant}"),
            name: "monthly".into(),
            tenant: tenant.into(),
            spec: TenantHookBudgetSpec {
                tenant: None,
                monthly_tokens: total,
            },
        }
    }

    fn ledger(total: i64) -> LocalLedger {
        LocalLedger::new(vec![budget("acme", total)]).unwrap()
    }

    #[test]
    fn exactly_covering_is_granted_one_token_short_is_refused() {
        let l = ledger(1_000);
        let g = l.reserve("acme", 600).unwrap();
        assert_eq!(g.remaining, 400);
        assert_eq!(g.budget.as_deref(), Some("tenant-acme/monthly"));
        assert_eq!(
            l.reserve("acme", 401).unwrap_err(),
            BudgetRefusal::Exhausted {
                tokens: 401,
                remaining: 400,
                budget: Some("tenant-acme/monthly".into())
            },
            "one token short, counting the reservation in flight"
        );
        let exact = l.reserve("acme", 400).unwrap();
        assert_eq!(exact.remaining, 0, "exactly covering is granted");
        assert_eq!(
            l.reserve("acme", 1).unwrap_err().reason(),
            "BudgetExhausted"
        );
        // Releasing frees the hold; settling charges the real cost.
        let r = l.settle("acme", &exact.reservation_id, 0).unwrap();
        assert_eq!((r.used, r.remaining, r.duplicate), (0, 1_000, false));
        let r = l.settle("acme", &g.reservation_id, 550).unwrap();
        assert_eq!((r.used, r.remaining, r.state.as_str()), (550, 450, "Ok"));
        let again = l.settle("acme", &g.reservation_id, 550).unwrap();
        assert_eq!(
            (again.used, again.duplicate),
            (550, true),
            "a settle applies once"
        );
        assert_eq!(l.status("acme").unwrap().1, 0, "nothing held");
    }

    #[test]
    fn no_budget_is_not_found_and_a_settle_counts_at_most_its_reservation() {
        let l = ledger(100);
        assert_eq!(
            l.reserve("globex", 1).unwrap_err(),
            BudgetRefusal::NotFound {
                tenant: "globex".into()
            }
        );
        let g = l.reserve("acme", 90).unwrap();
        let r = l.settle("acme", &g.reservation_id, 130).unwrap();
        assert_eq!(
            (r.used, r.remaining, r.state.as_str()),
            (90, 10, "Warning"),
            "a settle counts at most its reservation (the call's bound)"
        );
        let g = l.reserve("acme", 10).unwrap();
        let r = l.settle("acme", &g.reservation_id, 10).unwrap();
        assert_eq!(
            (r.used, r.remaining, r.state.as_str()),
            (100, 0, "Exhausted")
        );
        assert_eq!(
            l.reserve("acme", 1).unwrap_err(),
            BudgetRefusal::Exhausted {
                tokens: 1,
                remaining: 0,
                budget: Some("tenant-acme/monthly".into())
            }
        );

        assert!(matches!(
            l.settle("globex", "x", 1),
            Err(SettleError::UnknownTenant { .. })
        ));
    }

    #[test]
    fn warning_below_twenty_percent() {
        let l = ledger(1_000);
        let g = l.reserve("acme", 801).unwrap();
        let r = l.settle("acme", &g.reservation_id, 800).unwrap();
        assert_eq!(
            (r.remaining, r.state.as_str()),
            (200, "Ok"),
            "exactly 20% is Ok"
        );
        let g = l.reserve("acme", 1).unwrap();
        let r = l.settle("acme", &g.reservation_id, 1).unwrap();
        assert_eq!((r.remaining, r.state.as_str()), (199, "Warning"));
    }

    #[test]
    fn two_budgets_for_one_tenant_are_refused() {
        let mut b = budget("acme", 1);
        b.namespace = "agenthooks-system".into();
        let e = LocalLedger::new(vec![budget("acme", 1), b]).err().unwrap();
        assert_eq!(e.tenant, "acme");
        assert_eq!(e.second, "agenthooks-system/monthly");
    }

    #[test]
    fn a_new_utc_month_starts_a_new_period_with_the_configured_total() {
        let at = Arc::new(AtomicI64::new(
            Utc.with_ymd_and_hms(2026, 11, 30, 23, 59, 59)
                .unwrap()
                .timestamp(),
        ));
        let clock = {
            let at = Arc::clone(&at);
            Arc::new(move || Utc.timestamp_opt(at.load(Ordering::SeqCst), 0).unwrap())
        };
        let l = LocalLedger::with_clock(vec![budget("acme", 1_000)], clock).unwrap();
        let g = l.reserve("acme", 1_000).unwrap();
        let r = l.settle("acme", &g.reservation_id, 1_000).unwrap();
        assert_eq!((r.remaining, r.state.as_str()), (0, "Exhausted"));
        assert_eq!(
            l.reserve("acme", 1).unwrap_err().reason(),
            "BudgetExhausted"
        );
        let held = l.status("acme").unwrap();
        assert_eq!(held.0.period.as_deref(), Some("2026-11"));

        at.store(
            Utc.with_ymd_and_hms(2026, 12, 1, 0, 0, 0)
                .unwrap()
                .timestamp(),
            Ordering::SeqCst,
        );
        let (s, _) = l.status("acme").unwrap();
        assert_eq!(
            (s.period.as_deref(), s.used, s.remaining, s.state.as_deref()),
            (Some("2026-12"), 0, 1_000, Some("Ok"))
        );
        // A reservation held across the boundary is charged to the month it settles in.
        let g = l.reserve("acme", 700).unwrap();
        at.store(
            Utc.with_ymd_and_hms(2027, 1, 1, 0, 0, 1)
                .unwrap()
                .timestamp(),
            Ordering::SeqCst,
        );
        assert_eq!(
            l.reserve("acme", 301).unwrap_err().reason(),
            "BudgetExhausted",
            "the hold stays counted in the new month"
        );
        let r = l.settle("acme", &g.reservation_id, 650).unwrap();
        assert_eq!((r.used, r.remaining), (650, 350));
        assert_eq!(
            l.status("acme").unwrap().0.period.as_deref(),
            Some("2027-01")
        );
    }

    /// Case "Budgets and breakers across replicas": 1,000 tokens, 40 concurrent calls
    /// reserving 100 each: exactly 10 admitted, the rest refused with a budget reason.
    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn forty_concurrent_hundreds_on_a_thousand_admit_exactly_ten() {
        let budgets = Budgets::local(ledger(1_000), None);
        let barrier = Arc::new(tokio::sync::Barrier::new(40));
        let tasks: Vec<_> = (0..40)
            .map(|_| {
                let (b, barrier) = (budgets.clone(), Arc::clone(&barrier));
                tokio::spawn(async move {
                    barrier.wait().await;
                    let r = b.reserve("acme", 100, Some("tenant-acme/judge")).await;
                    tokio::time::sleep(std::time::Duration::from_millis(20)).await;
                    match r {
                        Ok(r) => {
                            assert!(r.remaining() >= 0);
                            r.settle(100).await.map(|_| None).unwrap()
                        }
                        Err(e) => Some(e.reason()),
                    }
                })
            })
            .collect();
        let mut granted = 0;
        for t in tasks {
            match t.await.unwrap() {
                None => granted += 1,
                Some(reason) => assert_eq!(reason, "BudgetExhausted"),
            }
        }
        assert_eq!(granted, 10);
        let (s, held) = budgets.local_ledger().unwrap().status("acme").unwrap();
        assert_eq!((s.used, s.remaining, held), (1_000, 0, 0));
    }

    #[tokio::test]
    async fn a_reservation_dropped_unsettled_is_released() {
        let budgets = Budgets::local(ledger(100), None);
        let r = budgets.reserve("acme", 100, None).await.unwrap();
        assert_eq!(
            budgets.reserve("acme", 1, None).await.unwrap_err().reason(),
            "BudgetExhausted"
        );
        drop(r);
        let (s, held) = budgets.local_ledger().unwrap().status("acme").unwrap();
        assert_eq!((s.used, held), (0, 0));
        assert!(budgets.reserve("acme", 100, None).await.is_ok());
        assert_eq!(
            budgets.reserve("acme", 0, None).await.unwrap_err().reason(),
            "InvalidTokens"
        );
        let above = agenthooks_crds::rules::ledger::MAX_CALL_TOKENS + 1;
        assert_eq!(
            budgets.reserve("acme", above, None).await.unwrap_err(),
            BudgetRefusal::InvalidTokens { tokens: above },
            "more than one call may hold, as the operator refuses it"
        );
    }

    /// crds' case table (CONTRACT §5.5: one corpus every ledger answers alike) through this
    /// ledger, by the dispatcher's own front door ([`Budgets::reserve`],
    /// [`crate::budget::Reservation::settle`]), on a clock the steps move.
    #[tokio::test]
    async fn the_shared_budget_cases_give_the_same_answers_here() {
        use agenthooks_crds::rules::ledger::cases::{CASES, Reserved, Step};
        let at = |t: &str| {
            DateTime::parse_from_rfc3339(t)
                .unwrap()
                .with_timezone(&Utc)
                .timestamp()
        };
        for case in CASES {
            let now = Arc::new(AtomicI64::new(at(case.start)));
            let clock: Clock = {
                let now = Arc::clone(&now);
                Arc::new(move || Utc.timestamp_opt(now.load(Ordering::SeqCst), 0).unwrap())
            };
            let mut b = budget("acme", 0);
            b.spec.monthly_tokens = case.total;
            let l = LocalLedger::with_clock(vec![b], clock).unwrap();
            // the status the case starts from (this ledger persists nothing of its own)
            l.lock().get_mut("acme").unwrap().status = TenantHookBudgetStatus {
                period: Some(case.recorded_period.into()),
                used: case.used,
                ..Default::default()
            };
            let budgets = Budgets::local(l, None);
            let mut grants = Vec::new();
            for (i, step) in case.steps.iter().enumerate() {
                let what = format!("{}: step {i}", case.name);
                match *step {
                    Step::At(t) => now.store(at(t), Ordering::SeqCst),
                    Step::Reserve { tokens, expect } => {
                        let got = match budgets.reserve("acme", tokens, None).await {
                            Ok(r) => {
                                let remaining = r.remaining();
                                grants.push(Some(r));
                                Reserved::Granted { remaining }
                            }
                            Err(BudgetRefusal::Exhausted { remaining, .. }) => {
                                Reserved::Exhausted { remaining }
                            }
                            Err(e) => panic!("{what}: {e}"),
                        };
                        assert_eq!(got, expect, "{what}");
                    }
                    Step::Settle {
                        grant,
                        tokens,
                        expect,
                    } => {
                        let r = grants[grant].take().expect("settled once");
                        let r = r.settle(tokens).await.unwrap();
                        assert_eq!(
                            (r.used, r.remaining, r.state.as_str(), r.duplicate),
                            (expect.used, expect.remaining, expect.state.as_str(), false),
                            "{what}"
                        );
                    }
                }
            }
        }
    }
}
