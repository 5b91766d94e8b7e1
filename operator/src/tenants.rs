//! The operator's one source of a namespace's tenant (CONTRACT §9.3): a
//! [`TenantMap`] resolved from the watched namespaces' metadata — their
//! `agenthooks.io/tenant` label, name and `creationTimestamp` — with the master namespace
//! first ([`TenantMap::resolve_with_master`]). The hook reconciler, the budget reconciler
//! and the snapshot (`tenants`) all read a map built here; nothing else in the operator
//! decides a namespace's tenant.
//!
//! A namespace that lost its claim has no tenant: its hooks and budgets are refused with
//! reason [`TENANT_CONFLICT`] ([`conflict_message`]) until the claim is resolved.
//!
//! Pure (no I/O): fed with namespace metadata, tested without a cluster.

use std::collections::BTreeSet;

use agenthooks_crds::TENANT_LABEL;
use agenthooks_crds::tenancy::{NamespaceClaim, TenantConflict, TenantMap};
use k8s_openapi::api::core::v1::Namespace;
use kube::api::PartialObjectMeta;

pub use agenthooks_crds::tenancy::TENANT_CONFLICT;

/// The claim of namespace `meta` (`None` for an object without a name).
pub fn claim_of(meta: &PartialObjectMeta<Namespace>) -> Option<NamespaceClaim> {
    let m = &meta.metadata;
    Some(NamespaceClaim {
        namespace: m.name.clone()?,
        label: m.labels.as_ref().and_then(|l| l.get(TENANT_LABEL)).cloned(),
        created_at: m
            .creation_timestamp
            .as_ref()
            .map(|t| t.0.to_string())
            .unwrap_or_default(),
    })
}

/// The map of `namespaces` (each once), the namespace `master` holding its claim first.
pub fn resolve<'a>(
    namespaces: impl IntoIterator<Item = &'a PartialObjectMeta<Namespace>>,
    master: &str,
) -> TenantMap {
    let claims: Vec<NamespaceClaim> = namespaces.into_iter().filter_map(claim_of).collect();
    TenantMap::resolve_with_master(&claims, Some(master))
}

/// The namespaces whose claim differs between `old` and `new` (added, removed, another
/// tenant, or won or lost): whose hooks and budgets must be looked at again.
pub fn changed_namespaces(old: &TenantMap, new: &TenantMap) -> BTreeSet<String> {
    let before: BTreeSet<_> = old.entries().into_iter().collect();
    let after: BTreeSet<_> = new.entries().into_iter().collect();
    before
        .symmetric_difference(&after)
        .map(|e| e.namespace.clone())
        .collect()
}

/// The `Accepted=False` message of a hook or budget in a namespace that lost its claim:
/// names the namespace, the tenant and the namespace that holds it.
pub fn conflict_message(c: &TenantConflict) -> String {
    format!(
        "namespace {} claims tenant {:?}, which namespace {} holds (one namespace per tenant: \
         an {TENANT_LABEL} label beats a claim by name, then the oldest namespace): nothing \
         here runs for that tenant until the platform team resolves the claim",
        c.namespace, c.tenant, c.holder
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    const MASTER: &str = "agenthooks-system";

    fn ns(name: &str, label: Option<&str>, created: i64) -> PartialObjectMeta<Namespace> {
        let mut m = PartialObjectMeta::<Namespace>::default();
        m.metadata.name = Some(name.into());
        m.metadata.creation_timestamp = Some(Time(
            k8s_openapi::jiff::Timestamp::from_second(created).unwrap(),
        ));
        if let Some(l) = label {
            m.metadata.labels = Some([(TENANT_LABEL.to_string(), l.to_string())].into());
        }
        m
    }

    #[test]
    fn a_claim_is_the_label_name_and_creation_time() {
        let c = claim_of(&ns("team-a", Some("acme"), 1_767_225_600)).unwrap();
        assert_eq!(
            c,
            NamespaceClaim {
                namespace: "team-a".into(),
                label: Some("acme".into()),
                created_at: "2026-01-01T00:00:00Z".into(),
            }
        );
        let mut other = ns("x", None, 0);
        other.metadata.labels = Some([("team".to_string(), "a".to_string())].into());
        assert_eq!(claim_of(&other).unwrap().label, None, "another label");
        assert_eq!(claim_of(&PartialObjectMeta::<Namespace>::default()), None);
    }

    #[test]
    fn the_map_follows_the_rule_and_the_master_namespace_wins() {
        // (namespaces, namespace asked, its tenant or the namespace it lost to)
        type Want = Result<Option<&'static str>, &'static str>;
        let cases: Vec<(Vec<PartialObjectMeta<Namespace>>, &str, Want)> = vec![
            (
                vec![ns("tenant-acme", Some("acme"), 100)],
                "tenant-acme",
                Ok(Some("acme")),
            ),
            (vec![ns("globex", None, 100)], "globex", Ok(Some("globex"))),
            (vec![], "unknown", Ok(None)),
            // The older label holds; the younger one loses, whatever the list order.
            (
                vec![
                    ns("team-b", Some("acme"), 200),
                    ns("tenant-acme", Some("acme"), 100),
                ],
                "team-b",
                Err("tenant-acme"),
            ),
            (
                vec![
                    ns("tenant-acme", Some("acme"), 100),
                    ns("team-b", Some("acme"), 200),
                ],
                "tenant-acme",
                Ok(Some("acme")),
            ),
            // A label beats a name, even an older one.
            (
                vec![ns("acme", None, 100), ns("team-b", Some("acme"), 200)],
                "acme",
                Err("team-b"),
            ),
            // Nothing beats the master namespace's claim.
            (
                vec![ns(MASTER, None, 200), ns("x", Some(MASTER), 100)],
                MASTER,
                Ok(Some(MASTER)),
            ),
            (
                vec![ns(MASTER, None, 200), ns("x", Some(MASTER), 100)],
                "x",
                Err(MASTER),
            ),
        ];
        for (i, (namespaces, asked, want)) in cases.iter().enumerate() {
            let map = resolve(namespaces, MASTER);
            let got = map.tenant_of(asked).map_err(|c| c.holder.clone());
            assert_eq!(got, want.map_err(str::to_string), "case {i}: {asked}");
        }
    }

    #[test]
    fn changes_name_every_namespace_whose_claim_moved() {
        let a = ns("tenant-acme", Some("acme"), 100);
        let b = ns("team-b", None, 200);
        let c = ns("other", None, 50);
        let before = resolve([&a, &b, &c], MASTER);
        assert!(changed_namespaces(&before, &before).is_empty());
        // team-b labelled acme: only team-b moves (it claims acme and loses).
        let b_acme = ns("team-b", Some("acme"), 200);
        let after = resolve([&a, &b_acme, &c], MASTER);
        assert_eq!(
            changed_namespaces(&before, &after),
            BTreeSet::from(["team-b".to_string()])
        );
        // tenant-acme deleted: team-b now holds acme (and tenant-acme is gone).
        let later = resolve([&b_acme, &c], MASTER);
        assert_eq!(
            changed_namespaces(&after, &later),
            BTreeSet::from(["team-b".to_string(), "tenant-acme".to_string()])
        );
        // A new namespace is a change of its own only.
        let d = ns("new", None, 300);
        assert_eq!(
            changed_namespaces(&later, &resolve([&b_acme, &c, &d], MASTER)),
            BTreeSet::from(["new".to_string()])
        );
    }

    #[test]
    fn the_conflict_message_names_namespace_tenant_and_holder() {
        let map = resolve(
            &[
                ns("tenant-acme", Some("acme"), 100),
                ns("team-b", Some("acme"), 200),
            ],
            MASTER,
        );
        let c = map.tenant_of("team-b").unwrap_err();
        assert_eq!(
            conflict_message(&c),
            "namespace team-b claims tenant \"acme\", which namespace tenant-acme holds (one \
             namespace per tenant: an agenthooks.io/tenant label beats a claim by name, then the \
             oldest namespace): nothing here runs for that tenant until the platform team \
             resolves the claim"
        );
        assert_eq!(TENANT_CONFLICT, "TenantConflict");
    }
}
