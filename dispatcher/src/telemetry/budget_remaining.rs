//! `agenthooks_budget_remaining_tokens{tenant}` of the standalone ledger (CONTRACT §8.2
//! "budget remaining"). In synced mode the operator exports the same series from the
//! accepted budgets (`operator/src/budget/metrics.rs`); a standalone dispatcher has no
//! operator, so it exports its own.
//!
//! Read at scrape time from the ledger (rolled over to the current UTC month), so the
//! figure is right even when nothing was reserved since the month changed. Same meaning
//! as the operator's: the budget's `remaining` (tokens settled are counted, reservations
//! in flight are not subtracted).

use prometheus::core::{Collector, Desc, Describer};
use prometheus::proto::MetricFamily;
use prometheus::{IntGaugeVec, Opts};

use crate::budget::Budgets;

/// Metric name, as on the operator.
pub const NAME: &str = "agenthooks_budget_remaining_tokens";

/// A collector over the local ledger of `budgets`: one series per tenant with a budget.
pub struct BudgetRemaining {
    budgets: Budgets,
    opts: Opts,
    desc: Vec<Desc>,
}

impl BudgetRemaining {
    /// The tenants are the ledger's (those with a TenantHookBudget in the hooks files);
    /// a non-local `budgets` exports nothing.
    pub fn new(budgets: Budgets) -> BudgetRemaining {
        let opts = Opts::new(
            NAME,
            "Tokens left in the tenant's hook budget this UTC month (standalone ledger)",
        )
        .variable_label("tenant");
        let desc = vec![opts.describe().expect("a valid metric name")];
        BudgetRemaining {
            budgets,
            opts,
            desc,
        }
    }
}

impl Collector for BudgetRemaining {
    fn desc(&self) -> Vec<&Desc> {
        self.desc.iter().collect()
    }

    fn collect(&self) -> Vec<MetricFamily> {
        let Some(ledger) = self.budgets.local_ledger() else {
            return Vec::new();
        };
        let gauge = IntGaugeVec::new(self.opts.clone(), &["tenant"]).expect("a valid metric");
        for tenant in ledger.tenants() {
            if let Some((status, _reserved)) = ledger.status(&tenant) {
                gauge.with_label_values(&[&tenant]).set(status.remaining);
            }
        }
        gauge.collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::budget::local::LocalLedger;
    use crate::budget::local::tests::budget;
    use crate::metrics::Metrics;

    #[tokio::test]
    async fn remaining_follows_settles_per_tenant() {
        let ledger = LocalLedger::new(vec![budget("acme", 1000), budget("beta", 50)]).unwrap();
        let budgets = Budgets::local(ledger, None);
        let metrics = Metrics::new();
        metrics
            .registry
            .register(Box::new(BudgetRemaining::new(budgets.clone())))
            .unwrap();
        let text = metrics.render();
        assert!(
            text.contains("agenthooks_budget_remaining_tokens{tenant=\"acme\"} 1000\n"),
            "{text}"
        );
        assert!(
            text.contains("agenthooks_budget_remaining_tokens{tenant=\"beta\"} 50\n"),
            "{text}"
        );
        assert_eq!(
            text.matches("agenthooks_budget_remaining_tokens{").count(),
            2,
            "one series per budget: {text}"
        );

        let r = budgets.reserve("acme", 300, None).await.unwrap();
        r.settle(120).await.unwrap();
        let text = metrics.render();
        assert!(
            text.contains("agenthooks_budget_remaining_tokens{tenant=\"acme\"} 880\n"),
            "{text}"
        );
    }

    #[test]
    fn a_remote_backend_exports_nothing_here() {
        let metrics = Metrics::new();
        metrics
            .registry
            .register(Box::new(BudgetRemaining::new(Budgets::unconfigured())))
            .unwrap();
        assert!(!metrics.render().contains(NAME));
    }
}
