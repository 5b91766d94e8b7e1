//! Validation verdicts cached by (uid, generation, namespace tenant) (DESIGN "Sync":
//! recompiling is incremental; an unchanged hook is not validated again).
//!
//! One entry per uid: a new generation or tenant replaces the old entry, so the cache
//! never holds more than one verdict per live hook. The verdict covers the spec rules of
//! [`agenthooks_crds::validation::validate`] only; Secret look-ups are not cached (their
//! content can change without the hook changing).

use std::collections::HashMap;

use crate::index::Verdict;

#[derive(Debug, Clone)]
struct Cached {
    generation: i64,
    tenant: String,
    verdict: Verdict,
}

/// The cache. Not thread-safe by itself; the reconciler keeps it behind a mutex.
#[derive(Debug, Default)]
pub struct ValidationCache {
    by_uid: HashMap<String, Cached>,
}

impl ValidationCache {
    /// An empty cache.
    pub fn new() -> ValidationCache {
        ValidationCache::default()
    }

    /// The verdict for (`uid`, `generation`, `tenant`); runs `validate` only when the
    /// cache has no verdict for exactly that key.
    pub fn get_or_validate(
        &mut self,
        uid: &str,
        generation: i64,
        tenant: &str,
        validate: impl FnOnce() -> Verdict,
    ) -> Verdict {
        if let Some(v) = self.get(uid, generation, tenant) {
            return v;
        }
        let verdict = validate();
        self.insert(uid, generation, tenant, verdict.clone());
        verdict
    }

    /// The cached verdict for exactly (`uid`, `generation`, `tenant`).
    pub fn get(&self, uid: &str, generation: i64, tenant: &str) -> Option<Verdict> {
        self.by_uid
            .get(uid)
            .filter(|c| c.generation == generation && c.tenant == tenant)
            .map(|c| c.verdict.clone())
    }

    /// Records the verdict for (`uid`, `generation`, `tenant`), replacing any other of `uid`.
    pub fn insert(&mut self, uid: &str, generation: i64, tenant: &str, verdict: Verdict) {
        self.by_uid.insert(
            uid.to_string(),
            Cached {
                generation,
                tenant: tenant.to_string(),
                verdict,
            },
        );
    }

    /// Drops the verdict of `uid` (the hook was deleted).
    pub fn forget(&mut self, uid: &str) {
        self.by_uid.remove(uid);
    }

    /// Keeps only the verdicts of uids for which `keep` holds.
    pub fn retain(&mut self, mut keep: impl FnMut(&str) -> bool) {
        self.by_uid.retain(|uid, _| keep(uid));
    }

    /// Drops every verdict.
    pub fn clear(&mut self) {
        self.by_uid.clear();
    }

    /// Number of cached verdicts.
    pub fn len(&self) -> usize {
        self.by_uid.len()
    }

    /// No verdicts cached.
    pub fn is_empty(&self) -> bool {
        self.by_uid.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::index::Refusal;

    #[test]
    fn validates_once_per_uid_generation_and_tenant() {
        let mut cache = ValidationCache::new();
        let runs = std::cell::Cell::new(0);
        let v = |cache: &mut ValidationCache, generation, tenant: &str| {
            cache.get_or_validate("u1", generation, tenant, || {
                runs.set(runs.get() + 1);
                Verdict::Accepted
            })
        };
        v(&mut cache, 1, "acme");
        v(&mut cache, 1, "acme");
        assert_eq!(runs.get(), 1, "same key: cached");
        v(&mut cache, 2, "acme");
        assert_eq!(runs.get(), 2, "new generation: validated again");
        v(&mut cache, 2, "other");
        assert_eq!(runs.get(), 3, "namespace tenant changed: validated again");
        assert_eq!(cache.len(), 1, "one entry per uid");
        cache.forget("u1");
        assert!(cache.is_empty());
    }

    #[test]
    fn refusals_are_cached_too() {
        let mut cache = ValidationCache::new();
        let refusal = Verdict::Refused(Refusal {
            reason: "InvalidMatcher".into(),
            message: "spec.matcher: bad".into(),
        });
        let got = cache.get_or_validate("u", 1, "t", || refusal.clone());
        assert_eq!(got, refusal);
        let again = cache.get_or_validate("u", 1, "t", || panic!("must not run again"));
        assert_eq!(again, refusal);
    }
}
