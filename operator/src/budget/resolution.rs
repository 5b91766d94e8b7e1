//! Which tenant a TenantHookBudget belongs to, and which budget of a tenant counts
//! (DESIGN "TenantHookBudget"; the tenancy rules of DESIGN "Tenancy and scope").
//!
//! - In the master namespace `spec.tenant` is required (else `TenantRequired`).
//! - Elsewhere the tenant is the namespace's (the tenant map, [`crate::tenants`]);
//!   `spec.tenant`, if set, must equal it (else `TenantMismatch`). A namespace that lost
//!   its tenant claim has no tenant: its budgets are refused with `TenantConflict`
//!   naming the namespace that holds it (CONTRACT §9.3).
//! - Of several budgets of one tenant the oldest counts (`creationTimestamp`, then
//!   `namespace/name`); the others are refused with `DuplicateBudget` naming it.
//!
//! Pure: fed with plain facts, tested without a cluster.

use std::collections::BTreeMap;
use std::fmt;

use agenthooks_crds::tenancy::TenantConflict;

pub use crate::tenants::TENANT_CONFLICT as REASON_TENANT_CONFLICT;

/// `Accepted=True` reason.
pub const REASON_ACCEPTED: &str = "Accepted";
/// A budget in the master namespace without `spec.tenant`.
pub const REASON_TENANT_REQUIRED: &str = "TenantRequired";
/// `spec.tenant` differs from the namespace's tenant.
pub const REASON_TENANT_MISMATCH: &str = "TenantMismatch";
/// The tenant already has an older budget.
pub const REASON_DUPLICATE_BUDGET: &str = "DuplicateBudget";

/// `namespace/name` of a budget.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct BudgetKey {
    /// Namespace.
    pub namespace: String,
    /// Name.
    pub name: String,
}

impl BudgetKey {
    /// The key of `namespace/name`.
    pub fn new(namespace: impl Into<String>, name: impl Into<String>) -> BudgetKey {
        BudgetKey {
            namespace: namespace.into(),
            name: name.into(),
        }
    }
}

impl fmt::Display for BudgetKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.namespace, self.name)
    }
}

/// What resolution needs to know of one budget.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BudgetFacts {
    /// Its key.
    pub key: BudgetKey,
    /// `metadata.creationTimestamp`, Unix seconds (`None` sorts as the newest).
    pub created: Option<i64>,
    /// `spec.tenant`.
    pub spec_tenant: Option<String>,
    /// The tenant of its namespace (from the tenant map: label `agenthooks.io/tenant`,
    /// else the name), or the conflict of a namespace that lost its claim.
    pub namespace_tenant: Result<String, TenantConflict>,
}

/// Whether a budget counts, and for which tenant.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// It is the budget of `tenant`.
    Accepted {
        /// The tenant it caps.
        tenant: String,
    },
    /// It does not count: `reason` is CamelCase, `message` names the field or the winner.
    Refused {
        /// [`REASON_TENANT_REQUIRED`], [`REASON_TENANT_MISMATCH`],
        /// [`REASON_TENANT_CONFLICT`] or [`REASON_DUPLICATE_BUDGET`].
        reason: &'static str,
        /// For a person.
        message: String,
    },
}

impl Verdict {
    /// The tenant of an accepted budget.
    pub fn tenant(&self) -> Option<&str> {
        match self {
            Verdict::Accepted { tenant } => Some(tenant),
            Verdict::Refused { .. } => None,
        }
    }
}

/// The tenant of a budget in `namespace` (whose own tenant is `namespace_tenant`, or
/// none when it lost its claim), or the refusal `(reason, message)`.
pub fn budget_tenant(
    namespace: &str,
    spec_tenant: Option<&str>,
    namespace_tenant: &Result<String, TenantConflict>,
    master_namespace: &str,
) -> Result<String, (&'static str, String)> {
    let spec_tenant = spec_tenant.filter(|t| !t.is_empty());
    if namespace == master_namespace {
        return spec_tenant.map(str::to_string).ok_or_else(|| {
            (
                REASON_TENANT_REQUIRED,
                format!(
                    "spec.tenant: required for a budget in the master namespace {master_namespace}"
                ),
            )
        });
    }
    let namespace_tenant = match namespace_tenant {
        Ok(t) => t.as_str(),
        Err(conflict) => {
            return Err((
                REASON_TENANT_CONFLICT,
                crate::tenants::conflict_message(conflict),
            ));
        }
    };
    match spec_tenant {
        Some(t) if t != namespace_tenant => Err((
            REASON_TENANT_MISMATCH,
            format!(
                "spec.tenant: {t:?} is not the tenant of namespace {namespace} ({namespace_tenant:?})"
            ),
        )),
        _ => Ok(namespace_tenant.to_string()),
    }
}

/// The verdict of every budget in `budgets`: each tenant's oldest valid budget is
/// accepted, the other valid ones are `DuplicateBudget`.
pub fn resolve(budgets: &[BudgetFacts], master_namespace: &str) -> BTreeMap<BudgetKey, Verdict> {
    let mut verdicts = BTreeMap::new();
    // tenant -> (created, key) of the oldest so far
    let mut winners: BTreeMap<String, (Option<i64>, &BudgetKey)> = BTreeMap::new();
    let mut candidates = Vec::new();
    for b in budgets {
        match budget_tenant(
            &b.key.namespace,
            b.spec_tenant.as_deref(),
            &b.namespace_tenant,
            master_namespace,
        ) {
            Err((reason, message)) => {
                verdicts.insert(b.key.clone(), Verdict::Refused { reason, message });
            }
            Ok(tenant) => {
                let older = |w: &(Option<i64>, &BudgetKey)| {
                    sort_key(b.created, &b.key) < sort_key(w.0, w.1)
                };
                if winners.get(&tenant).is_none_or(older) {
                    winners.insert(tenant.clone(), (b.created, &b.key));
                }
                candidates.push((b, tenant));
            }
        }
    }
    for (b, tenant) in candidates {
        let winner = winners.get(&tenant).map(|w| w.1);
        let verdict = if winner == Some(&b.key) {
            Verdict::Accepted { tenant }
        } else {
            Verdict::Refused {
                reason: REASON_DUPLICATE_BUDGET,
                message: format!(
                    "tenant {tenant:?} already has budget {} (the oldest budget of a tenant counts)",
                    winner.map(ToString::to_string).unwrap_or_default()
                ),
            }
        };
        verdicts.insert(b.key.clone(), verdict);
    }
    verdicts
}

/// Oldest first; a missing timestamp sorts last; ties by `namespace/name`.
fn sort_key(created: Option<i64>, key: &BudgetKey) -> (bool, i64, &BudgetKey) {
    (created.is_none(), created.unwrap_or(0), key)
}

#[cfg(test)]
mod tests {
    use super::*;

    const MASTER: &str = "agenthooks-system";

    fn facts(
        ns: &str,
        name: &str,
        created: i64,
        spec: Option<&str>,
        ns_tenant: &str,
    ) -> BudgetFacts {
        BudgetFacts {
            key: BudgetKey::new(ns, name),
            created: Some(created),
            spec_tenant: spec.map(str::to_string),
            namespace_tenant: Ok(ns_tenant.into()),
        }
    }

    fn conflict(ns: &str, tenant: &str, holder: &str) -> Result<String, TenantConflict> {
        Err(TenantConflict {
            namespace: ns.into(),
            tenant: tenant.into(),
            holder: holder.into(),
        })
    }

    #[test]
    fn tenant_rules_master_requires_spec_tenant_elsewhere_it_must_match() {
        let acme = Ok("acme".to_string());
        let master = Ok(MASTER.to_string());
        let lost = conflict("team-b", "acme", "tenant-acme");
        // (namespace, spec.tenant, namespace's tenant, tenant or refusal reason)
        type Case<'a> = (
            &'a str,
            Option<&'a str>,
            &'a Result<String, TenantConflict>,
            Result<&'a str, &'a str>,
        );
        let cases: Vec<Case> = vec![
            ("tenant-acme", None, &acme, Ok("acme")),
            ("tenant-acme", Some("acme"), &acme, Ok("acme")),
            ("tenant-acme", Some(""), &acme, Ok("acme")),
            ("tenant-acme", Some("globex"), &acme, Err("TenantMismatch")),
            (MASTER, None, &master, Err("TenantRequired")),
            (MASTER, Some(""), &master, Err("TenantRequired")),
            (MASTER, Some("acme"), &master, Ok("acme")),
            // A namespace that lost its claim has no tenant, spec.tenant or not.
            ("team-b", None, &lost, Err("TenantConflict")),
            ("team-b", Some("acme"), &lost, Err("TenantConflict")),
        ];
        for (ns, spec, ns_tenant, want) in cases {
            let got = budget_tenant(ns, spec, ns_tenant, MASTER);
            assert_eq!(
                got.as_ref().map(String::as_str).map_err(|e| e.0),
                want,
                "{ns} {spec:?} {ns_tenant:?}: {got:?}"
            );
        }
        let (_, message) =
            budget_tenant("tenant-acme", Some("globex"), &acme, MASTER).expect_err("mismatch");
        assert!(message.starts_with("spec.tenant: \"globex\""), "{message}");
        let (_, message) = budget_tenant(MASTER, None, &master, MASTER).expect_err("required");
        assert!(message.starts_with("spec.tenant: required"), "{message}");
        let (_, message) = budget_tenant("team-b", None, &lost, MASTER).expect_err("conflict");
        assert!(
            message.starts_with(
                "namespace team-b claims tenant \"acme\", which namespace tenant-acme holds"
            ),
            "{message}"
        );
    }

    #[test]
    fn a_budget_in_a_namespace_that_lost_its_claim_never_competes() {
        let mut loser = facts("team-b", "b", 100, None, "acme");
        loser.namespace_tenant = conflict("team-b", "acme", "tenant-acme");
        let holder = facts("tenant-acme", "a", 200, None, "acme");
        let v = resolve(&[loser.clone(), holder.clone()], MASTER);
        assert_eq!(
            v[&holder.key].tenant(),
            Some("acme"),
            "the older loser never wins"
        );
        assert!(matches!(
            v[&loser.key],
            Verdict::Refused {
                reason: "TenantConflict",
                ..
            }
        ));
    }

    #[test]
    fn the_oldest_budget_of_a_tenant_wins_then_namespace_and_name() {
        let budgets = [
            facts("tenant-acme", "b", 200, None, "acme"),
            facts(MASTER, "acme", 100, Some("acme"), MASTER),
            facts("tenant-acme", "a", 200, None, "acme"),
            facts("team-x", "x", 300, None, "globex"),
            facts("team-y", "y", 300, None, "globex"),
            facts(MASTER, "nobody", 1, None, MASTER),
        ];
        let v = resolve(&budgets, MASTER);
        assert_eq!(
            v[&BudgetKey::new(MASTER, "acme")],
            Verdict::Accepted {
                tenant: "acme".into()
            }
        );
        for loser in ["a", "b"] {
            match &v[&BudgetKey::new("tenant-acme", loser)] {
                Verdict::Refused { reason, message } => {
                    assert_eq!(*reason, "DuplicateBudget");
                    assert!(message.contains("agenthooks-system/acme"), "{message}");
                }
                other => panic!("{loser}: {other:?}"),
            }
        }
        // same second: namespace/name decides
        assert_eq!(v[&BudgetKey::new("team-x", "x")].tenant(), Some("globex"));
        assert_eq!(v[&BudgetKey::new("team-y", "y")].tenant(), None);
        // a refused budget never competes
        assert!(matches!(
            v[&BudgetKey::new(MASTER, "nobody")],
            Verdict::Refused {
                reason: "TenantRequired",
                ..
            }
        ));
    }

    #[test]
    fn a_missing_timestamp_sorts_as_newest_and_a_deleted_winner_hands_over() {
        let mut a = facts("n1", "a", 0, None, "t");
        a.created = None;
        let b = facts("n2", "b", 500, None, "t");
        let v = resolve(&[a.clone(), b.clone()], MASTER);
        assert_eq!(v[&b.key].tenant(), Some("t"));
        assert_eq!(v[&a.key].tenant(), None);
        let v = resolve(&[a.clone()], MASTER);
        assert_eq!(v[&a.key].tenant(), Some("t"), "alone, it counts");
    }
}
