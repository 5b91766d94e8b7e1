//! Tenancy (DESIGN "Tenancy and scope") and editions (DESIGN "Editions").

use std::collections::BTreeMap;

/// The tenant of a namespace: its label `agenthooks.io/tenant`, else its name.
pub fn namespace_tenant<'a>(
    namespace: &'a str,
    labels: Option<&'a BTreeMap<String, String>>,
) -> &'a str {
    labels
        .and_then(|l| l.get(crate::TENANT_LABEL))
        .map(String::as_str)
        .filter(|t| !t.is_empty())
        .unwrap_or(namespace)
}

/// A namespace as the tenancy rule sees it: its name, its `agenthooks.io/tenant` label
/// (if any) and its `metadata.creationTimestamp` (RFC 3339; only compared).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NamespaceClaim {
    pub namespace: String,
    pub label: Option<String>,
    pub created_at: String,
}

/// One namespace, the tenant it claims, and, when it lost that claim (CONTRACT §9.3,
/// reason [`TENANT_CONFLICT`]), the namespace that holds the tenant instead.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NamespaceTenant {
    pub namespace: String,
    pub tenant: String,
    /// The holder, when this namespace lost its claim: it then has no tenant at all.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub held_by: Option<String>,
}

/// Condition reason of a hook or budget whose namespace claims a tenant another
/// namespace holds (CONTRACT §9.3).
pub const TENANT_CONFLICT: &str = "TenantConflict";

/// Which namespace holds each tenant (CONTRACT §9.3: two namespaces never claim one
/// tenant). Every namespace claims its tenant ([`namespace_tenant`]: the label, else its
/// name); when several claim one tenant, one holds it and the others hold none:
///
/// 1. a claim by label beats a claim by name — only the platform team may set the label
///    (the chart's ValidatingAdmissionPolicy), while anyone who may create namespaces
///    makes name claims;
/// 2. then the oldest namespace (`creationTimestamp`), so a namespace created later can
///    never take a tenant away from the one that holds it;
/// 3. then the namespace name, so the answer never depends on list order.
///
/// [`TenantMap::resolve_with_master`] puts one rule before these: the master namespace
/// (global hooks) always holds the tenant it claims, so no label on another namespace can
/// take its hooks away.
///
/// Pure: the operator builds it from its namespace cache, dispatchers from the snapshot.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TenantMap {
    /// namespace → its claim.
    by_namespace: std::collections::HashMap<String, NamespaceTenant>,
    /// tenant → the namespace that holds it.
    holder: std::collections::HashMap<String, String>,
}

impl TenantMap {
    /// Resolves the claims of `namespaces` (each namespace once).
    pub fn resolve<'a>(namespaces: impl IntoIterator<Item = &'a NamespaceClaim>) -> TenantMap {
        TenantMap::resolve_with_master(namespaces, None)
    }

    /// [`TenantMap::resolve`], where the namespace `master` (the operator's
    /// `--master-namespace`, if given) beats every other claim of its tenant: its hooks
    /// are the platform's global guards, and a namespace labelled with the master
    /// namespace's tenant must not switch them off (the label loses instead).
    pub fn resolve_with_master<'a>(
        namespaces: impl IntoIterator<Item = &'a NamespaceClaim>,
        master: Option<&str>,
    ) -> TenantMap {
        use std::collections::HashMap;
        let claims: Vec<(&NamespaceClaim, String, bool)> = namespaces
            .into_iter()
            .map(|ns| {
                let tenant = match ns.label.as_deref().filter(|l| !l.is_empty()) {
                    Some(l) => (l.to_string(), false),
                    None => (ns.namespace.clone(), true),
                };
                (ns, tenant.0, tenant.1)
            })
            .collect();
        // tenant → best claim: (not master?, by name?, created, namespace); the smallest
        // wins.
        let mut best: HashMap<&str, (bool, bool, &str, &str)> = HashMap::new();
        for (ns, tenant, by_name) in &claims {
            let key = (
                Some(ns.namespace.as_str()) != master,
                *by_name,
                ns.created_at.as_str(),
                ns.namespace.as_str(),
            );
            best.entry(tenant.as_str())
                .and_modify(|b| *b = (*b).min(key))
                .or_insert(key);
        }
        TenantMap::from_entries(claims.iter().map(|(ns, tenant, _)| {
            let holder = best[tenant.as_str()].3;
            NamespaceTenant {
                namespace: ns.namespace.clone(),
                tenant: tenant.clone(),
                held_by: (holder != ns.namespace).then(|| holder.to_string()),
            }
        }))
    }

    /// The map of [`TenantMap::entries`] (as a snapshot carries it).
    pub fn from_entries(entries: impl IntoIterator<Item = NamespaceTenant>) -> TenantMap {
        let mut map = TenantMap::default();
        for e in entries {
            if e.held_by.is_none() {
                map.holder.insert(e.tenant.clone(), e.namespace.clone());
            }
            map.by_namespace.insert(e.namespace.clone(), e);
        }
        map
    }

    /// Every namespace and its claim, sorted by namespace (for the snapshot).
    pub fn entries(&self) -> Vec<NamespaceTenant> {
        let mut out: Vec<_> = self.by_namespace.values().cloned().collect();
        out.sort();
        out
    }

    /// Every namespace known, sorted.
    pub fn namespaces(&self) -> Vec<String> {
        let mut out: Vec<String> = self.by_namespace.keys().cloned().collect();
        out.sort();
        out
    }

    /// The tenant of `namespace`: `Ok(None)` for a namespace not known (yet),
    /// [`TenantConflict`] for one that lost its claim.
    pub fn tenant_of(&self, namespace: &str) -> Result<Option<&str>, TenantConflict> {
        match self.by_namespace.get(namespace) {
            None => Ok(None),
            Some(NamespaceTenant {
                tenant,
                held_by: None,
                ..
            }) => Ok(Some(tenant)),
            Some(NamespaceTenant {
                tenant,
                held_by: Some(holder),
                ..
            }) => Err(TenantConflict {
                namespace: namespace.to_string(),
                tenant: tenant.clone(),
                holder: holder.clone(),
            }),
        }
    }

    /// The namespace that holds `tenant`, if any.
    pub fn namespace_of(&self, tenant: &str) -> Option<&str> {
        self.holder.get(tenant).map(String::as_str)
    }

    /// Namespaces known.
    pub fn len(&self) -> usize {
        self.by_namespace.len()
    }

    /// No namespace known.
    pub fn is_empty(&self) -> bool {
        self.by_namespace.is_empty()
    }
}

/// A namespace that claims a tenant another namespace holds.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "namespace {namespace} claims tenant {tenant:?}, which namespace {holder} holds: it has no tenant (reason TenantConflict)"
)]
pub struct TenantConflict {
    pub namespace: String,
    pub tenant: String,
    pub holder: String,
}

/// Product edition: `lite` runs `command` hooks, `standard` never does (seed "Handler types").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Edition {
    #[default]
    Lite,
    Standard,
}

impl std::str::FromStr for Edition {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "lite" => Ok(Edition::Lite),
            "standard" => Ok(Edition::Standard),
            other => Err(format!("edition must be lite or standard, not {other:?}")),
        }
    }
}

impl std::fmt::Display for Edition {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Edition::Lite => "lite",
            Edition::Standard => "standard",
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn label_wins_over_namespace_name() {
        let mut labels = BTreeMap::new();
        assert_eq!(namespace_tenant("team-a", Some(&labels)), "team-a");
        labels.insert(crate::TENANT_LABEL.to_string(), "acme".to_string());
        assert_eq!(namespace_tenant("team-a", Some(&labels)), "acme");
        assert_eq!(namespace_tenant("team-a", None), "team-a");
    }

    fn ns(name: &str, label: Option<&str>, created: &str) -> NamespaceClaim {
        NamespaceClaim {
            namespace: name.into(),
            label: label.map(Into::into),
            created_at: created.into(),
        }
    }

    #[test]
    fn each_tenant_is_held_by_one_namespace() {
        // (namespaces, namespace asked, expected tenant or the holder it lost to)
        let t1 = "2026-01-01T00:00:00Z";
        let t2 = "2026-02-01T00:00:00Z";
        type Want = Result<Option<&'static str>, &'static str>;
        let cases: Vec<(Vec<NamespaceClaim>, &str, Want)> = vec![
            // Alone: the label, else the name.
            (
                vec![ns("team-a", Some("acme"), t1)],
                "team-a",
                Ok(Some("acme")),
            ),
            (vec![ns("acme", None, t1)], "acme", Ok(Some("acme"))),
            (vec![ns("acme", Some(""), t1)], "acme", Ok(Some("acme"))),
            (vec![ns("acme", None, t1)], "other", Ok(None)),
            // A label beats a name, whatever the ages.
            (
                vec![ns("acme", None, t1), ns("team-a", Some("acme"), t2)],
                "acme",
                Err("team-a"),
            ),
            (
                vec![ns("acme", None, t1), ns("team-a", Some("acme"), t2)],
                "team-a",
                Ok(Some("acme")),
            ),
            // Two labels: the oldest holds it; a later namespace never takes it.
            (
                vec![ns("a", Some("acme"), t2), ns("b", Some("acme"), t1)],
                "a",
                Err("b"),
            ),
            (
                vec![ns("a", Some("acme"), t2), ns("b", Some("acme"), t1)],
                "b",
                Ok(Some("acme")),
            ),
            // Same age: the name decides, never the order.
            (
                vec![ns("b", Some("acme"), t1), ns("a", Some("acme"), t1)],
                "b",
                Err("a"),
            ),
            (
                vec![ns("a", Some("acme"), t1), ns("b", Some("acme"), t1)],
                "b",
                Err("a"),
            ),
            // A namespace labelled with its own name claims by label.
            (
                vec![ns("acme", Some("acme"), t2), ns("x", Some("acme"), t1)],
                "acme",
                Err("x"),
            ),
            // Losing one tenant never affects another.
            (
                vec![
                    ns("a", Some("acme"), t1),
                    ns("b", Some("acme"), t2),
                    ns("c", None, t2),
                ],
                "c",
                Ok(Some("c")),
            ),
        ];
        for (i, (namespaces, asked, want)) in cases.iter().enumerate() {
            let map = TenantMap::resolve(namespaces);
            let got = map.tenant_of(asked).map_err(|c| c.holder.clone());
            let want = want.map_err(str::to_string);
            assert_eq!(got, want, "case {i}: {asked} in {namespaces:?}");
            // The snapshot's form gives the same answers.
            let again = TenantMap::from_entries(map.entries());
            assert_eq!(again, map, "case {i}");
        }
    }

    #[test]
    fn the_master_namespace_always_holds_its_claim() {
        // (namespaces, namespace asked, expected tenant or the holder it lost to)
        let (t1, t2) = ("2026-01-01T00:00:00Z", "2026-02-01T00:00:00Z");
        const MASTER: &str = "agenthooks-system";
        type Want = Result<Option<&'static str>, &'static str>;
        let cases: Vec<(Vec<NamespaceClaim>, &str, Want)> = vec![
            // A label naming the master namespace's tenant loses to it, however old.
            (
                vec![ns(MASTER, None, t2), ns("evil", Some(MASTER), t1)],
                MASTER,
                Ok(Some(MASTER)),
            ),
            (
                vec![ns(MASTER, None, t2), ns("evil", Some(MASTER), t1)],
                "evil",
                Err(MASTER),
            ),
            // A labelled master namespace holds its label's tenant too.
            (
                vec![ns(MASTER, Some("ops"), t2), ns("ops", Some("ops"), t1)],
                MASTER,
                Ok(Some("ops")),
            ),
            (
                vec![ns(MASTER, Some("ops"), t2), ns("ops", Some("ops"), t1)],
                "ops",
                Err(MASTER),
            ),
            // Other tenants follow the usual rules.
            (
                vec![
                    ns(MASTER, None, t1),
                    ns("a", Some("acme"), t2),
                    ns("acme", None, t1),
                ],
                "acme",
                Err("a"),
            ),
        ];
        for (i, (namespaces, asked, want)) in cases.iter().enumerate() {
            let map = TenantMap::resolve_with_master(namespaces, Some(MASTER));
            let got = map.tenant_of(asked).map_err(|c| c.holder.clone());
            let want = want.map_err(str::to_string);
            assert_eq!(got, want, "case {i}: {asked} in {namespaces:?}");
            assert_eq!(TenantMap::from_entries(map.entries()), map, "case {i}");
        }
        // Without a master namespace, the label wins as before.
        let map = TenantMap::resolve(&[ns(MASTER, None, t2), ns("evil", Some(MASTER), t1)]);
        assert_eq!(map.namespace_of(MASTER), Some("evil"));
    }

    #[test]
    fn the_holder_of_a_tenant_is_found_and_a_conflict_names_both() {
        let map = TenantMap::resolve(&[
            ns("acme", None, "2026-01-01T00:00:00Z"),
            ns("team-a", Some("acme"), "2026-03-01T00:00:00Z"),
            ns("beta", None, "2026-01-01T00:00:00Z"),
        ]);
        assert_eq!(map.namespace_of("acme"), Some("team-a"));
        assert_eq!(map.namespace_of("beta"), Some("beta"));
        assert_eq!(map.namespace_of("gamma"), None);
        let conflict = map.tenant_of("acme").unwrap_err();
        assert_eq!(
            (conflict.tenant.as_str(), conflict.holder.as_str()),
            ("acme", "team-a")
        );
        assert!(conflict.to_string().contains("TenantConflict"));
        assert_eq!(map.len(), 3);
        let entries = map.entries();
        assert_eq!(entries[0].namespace, "acme");
        assert_eq!(entries[0].held_by.as_deref(), Some("team-a"));
    }

    #[test]
    fn edition_parses_two_words_only() {
        assert_eq!("lite".parse::<Edition>(), Ok(Edition::Lite));
        assert_eq!("standard".parse::<Edition>(), Ok(Edition::Standard));
        assert!("Standard".parse::<Edition>().is_err());
    }
}
