//! Prometheus metrics of the budgets (CONTRACT §8.2 "budget remaining"), registered on
//! the operator's registry next to [`crate::metrics::Metrics`]. The budgets' status
//! writes are counted with every other status write, in
//! `agenthooks_operator_status_writes_total{kind="budget_settle"|"budget_reconcile"}` and
//! `agenthooks_operator_status_write_conflicts_total` ([`crate::status::writer`]).

use prometheus::{IntCounter, IntCounterVec, IntGaugeVec, Opts, Registry};

use super::ledger::TenantFigures;

/// The budget metrics.
#[derive(Clone, Debug)]
pub struct BudgetMetrics {
    /// `agenthooks_budget_remaining_tokens{tenant}`: `status.remaining` of the tenant's
    /// accepted budget in the current period (persisted figure; reservations in flight
    /// are in `agenthooks_budget_reserved_tokens`). Only the leader exports it.
    pub remaining_tokens: IntGaugeVec,
    /// `agenthooks_budget_state{tenant, state}`: 1 for the budget's current state (`Ok`,
    /// `Warning` below 20% remaining, `Exhausted` at 0; CONTRACT §5.5), 0 for the others,
    /// so an alert can fire on `agenthooks_budget_state{state="Warning"} == 1`.
    pub state: IntGaugeVec,
    /// `agenthooks_budget_reserved_tokens{tenant}`: tokens held by reservations in flight.
    pub reserved_tokens: IntGaugeVec,
    /// `agenthooks_budget_unwritten_tokens{tenant}`: tokens settled and counted against
    /// the budget but not yet written to `status.used` (a status write failing or in
    /// progress). Only the leader exports it.
    pub unwritten_tokens: IntGaugeVec,
    /// `agenthooks_budget_reservations_total{result}`: reserve answers, `granted`,
    /// `exhausted`, `not_found`, `unavailable` (the failover hold-off) or `too_many`.
    pub reservations_total: IntCounterVec,
    /// `agenthooks_budget_settles_total{result}`: settle answers, `written`, `released`,
    /// `duplicate`, `not_found`, `not_holder` (another dispatcher's reservation, 403),
    /// `mismatch` (another tenant's reservation, 409) or `failed`.
    pub settles_total: IntCounterVec,
    /// `agenthooks_budget_settle_overage_tokens_total{cap}`: tokens settles carried past
    /// their cap and that were not counted: `cap="reservation"` above the tokens the
    /// reservation held, `cap="absolute"` above [`super::ledger::MAX_CALL_TOKENS`] for an
    /// id this leader did not know.
    pub settle_overage_tokens_total: IntCounterVec,
    /// `agenthooks_budget_settle_write_failures_total`: failed status writes of settled
    /// tokens (each retried in the background while this replica leads).
    pub settle_write_failures_total: IntCounter,
    /// `agenthooks_budget_reservations_expired_total`: reservations released by their TTL
    /// (a dispatcher that reserved and never settled).
    pub reservations_expired_total: IntCounter,
    /// `agenthooks_budget_reconcile_errors_total{reason}`: failed budget reconciles.
    pub reconcile_errors_total: IntCounterVec,
}

impl BudgetMetrics {
    /// Creates the metrics (unregistered).
    ///
    /// Errors: [`prometheus::Error`] only for a malformed name (a bug).
    pub fn new() -> Result<BudgetMetrics, prometheus::Error> {
        let result =
            |name: &str, help: &str| IntCounterVec::new(Opts::new(name, help), &["result"]);
        let reservations_total = result(
            "agenthooks_budget_reservations_total",
            "Budget reserve answers by result (granted, exhausted, not_found, unavailable, too_many).",
        )?;
        let settles_total = result(
            "agenthooks_budget_settles_total",
            "Budget settle answers by result (written, released, duplicate, not_found, not_holder, mismatch, failed).",
        )?;
        for r in ["granted", "exhausted", "not_found", "unavailable"] {
            reservations_total.with_label_values(&[r]);
        }
        for r in [
            "written",
            "released",
            "duplicate",
            "not_holder",
            "mismatch",
            "failed",
        ] {
            settles_total.with_label_values(&[r]);
        }
        let settle_overage_tokens_total = IntCounterVec::new(
            Opts::new(
                "agenthooks_budget_settle_overage_tokens_total",
                "Tokens settles carried past their cap (the reservation, or the per-call maximum for an unknown id), not counted.",
            ),
            &["cap"],
        )?;
        for c in ["reservation", "absolute"] {
            settle_overage_tokens_total.with_label_values(&[c]);
        }
        Ok(BudgetMetrics {
            state: IntGaugeVec::new(
                Opts::new(
                    "agenthooks_budget_state",
                    "1 for each tenant budget's current state (Ok, Warning below 20% remaining, Exhausted at 0), 0 for the others.",
                ),
                &["tenant", "state"],
            )?,
            remaining_tokens: IntGaugeVec::new(
                Opts::new(
                    "agenthooks_budget_remaining_tokens",
                    "Tokens remaining in the current period of each tenant's budget (status.remaining).",
                ),
                &["tenant"],
            )?,
            reserved_tokens: IntGaugeVec::new(
                Opts::new(
                    "agenthooks_budget_reserved_tokens",
                    "Tokens held by budget reservations in flight, by tenant.",
                ),
                &["tenant"],
            )?,
            unwritten_tokens: IntGaugeVec::new(
                Opts::new(
                    "agenthooks_budget_unwritten_tokens",
                    "Tokens settled and counted against each tenant's budget, not yet written to status.used.",
                ),
                &["tenant"],
            )?,
            reservations_total,
            settles_total,
            settle_overage_tokens_total,
            settle_write_failures_total: IntCounter::new(
                "agenthooks_budget_settle_write_failures_total",
                "Failed status writes of settled tokens (retried in the background while this replica leads).",
            )?,
            reservations_expired_total: IntCounter::new(
                "agenthooks_budget_reservations_expired_total",
                "Budget reservations released by their TTL without a settle.",
            )?,
            reconcile_errors_total: IntCounterVec::new(
                Opts::new(
                    "agenthooks_budget_reconcile_errors_total",
                    "Failed TenantHookBudget reconciles by reason.",
                ),
                &["reason"],
            )?,
        })
    }

    /// Registers every metric on `registry`.
    ///
    /// Errors: [`prometheus::Error`] when one is already registered there.
    pub fn register(&self, registry: &Registry) -> Result<(), prometheus::Error> {
        registry.register(Box::new(self.remaining_tokens.clone()))?;
        registry.register(Box::new(self.state.clone()))?;
        registry.register(Box::new(self.reserved_tokens.clone()))?;
        registry.register(Box::new(self.reservations_total.clone()))?;
        registry.register(Box::new(self.settles_total.clone()))?;
        registry.register(Box::new(self.unwritten_tokens.clone()))?;
        registry.register(Box::new(self.settle_overage_tokens_total.clone()))?;
        registry.register(Box::new(self.settle_write_failures_total.clone()))?;
        registry.register(Box::new(self.reservations_expired_total.clone()))?;
        registry.register(Box::new(self.reconcile_errors_total.clone()))?;
        Ok(())
    }

    /// Sets the gauges of one tenant.
    pub fn set(&self, f: &TenantFigures) {
        self.remaining_tokens
            .with_label_values(&[f.tenant.as_str()])
            .set(f.remaining);
        let now = agenthooks_crds::budget::BudgetState::of(f.total, f.remaining);
        for st in [
            agenthooks_crds::budget::BudgetState::Ok,
            agenthooks_crds::budget::BudgetState::Warning,
            agenthooks_crds::budget::BudgetState::Exhausted,
        ] {
            self.state
                .with_label_values(&[f.tenant.as_str(), st.as_str()])
                .set(i64::from(st == now));
        }
        self.reserved_tokens
            .with_label_values(&[f.tenant.as_str()])
            .set(f.reserved);
        self.unwritten_tokens
            .with_label_values(&[f.tenant.as_str()])
            .set(f.unpersisted);
    }

    /// Replaces the gauges with exactly `all` (tenants without a budget disappear).
    pub fn set_all(&self, all: &[TenantFigures]) {
        self.remaining_tokens.reset();
        self.state.reset();
        self.reserved_tokens.reset();
        self.unwritten_tokens.reset();
        for f in all {
            self.set(f);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_exposed_and_gauges_follow_the_ledger() {
        let registry = Registry::new();
        let m = BudgetMetrics::new().unwrap();
        m.register(&registry).unwrap();
        assert!(
            m.register(&registry).is_err(),
            "twice is a bug, and said so"
        );
        m.set_all(&[
            TenantFigures {
                tenant: "acme".into(),
                remaining: 150,
                total: 1000,
                reserved: 100,
                unpersisted: 7,
            },
            TenantFigures {
                tenant: "gone".into(),
                remaining: 1,
                total: 1000,
                reserved: 0,
                unpersisted: 0,
            },
        ]);
        m.set_all(&[TenantFigures {
            tenant: "acme".into(),
            remaining: 50,
            total: 1000,
            reserved: 0,
            unpersisted: 30,
        }]);
        m.reservations_total.with_label_values(&["granted"]).inc();
        let text = prometheus::TextEncoder::new()
            .encode_to_string(&registry.gather())
            .unwrap();
        for line in [
            "agenthooks_budget_remaining_tokens{tenant=\"acme\"} 50",
            "agenthooks_budget_state{state=\"Warning\",tenant=\"acme\"} 1",
            "agenthooks_budget_state{state=\"Ok\",tenant=\"acme\"} 0",
            "agenthooks_budget_state{state=\"Exhausted\",tenant=\"acme\"} 0",
            "agenthooks_budget_reserved_tokens{tenant=\"acme\"} 0",
            "agenthooks_budget_unwritten_tokens{tenant=\"acme\"} 30",
            "agenthooks_budget_settle_overage_tokens_total{cap=\"reservation\"} 0",
            "agenthooks_budget_settle_write_failures_total 0",
            "agenthooks_budget_settles_total{result=\"mismatch\"} 0",
            "agenthooks_budget_reservations_total{result=\"granted\"} 1",
            "agenthooks_budget_settles_total{result=\"written\"} 0",
        ] {
            assert!(text.contains(line), "missing {line} in\n{text}");
        }
        assert!(!text.contains("tenant=\"gone\""), "{text}");
    }
}
