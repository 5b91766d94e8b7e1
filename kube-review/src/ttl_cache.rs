//! A bounded map whose entries expire: hashlink's LRU under a mutex, each value with
//! its deadline. The clock is the caller's (`now`), so tests need no waiting.

use std::hash::Hash;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use hashlink::LruCache;

/// At most `capacity` entries (the least recently used goes first); an entry is gone
/// once its deadline has passed.
pub struct TtlCache<K: Hash + Eq, V: Clone> {
    entries: Mutex<LruCache<K, (V, Instant)>>,
}

impl<K: Hash + Eq, V: Clone> TtlCache<K, V> {
    /// An empty cache of at most `capacity` (at least 1) entries.
    pub fn new(capacity: usize) -> Self {
        TtlCache {
            entries: Mutex::new(LruCache::new(capacity.max(1))),
        }
    }

    /// The value of `key` if it has not expired at `now`.
    pub fn get(&self, key: &K, now: Instant) -> Option<V> {
        let mut entries = self.entries.lock().unwrap_or_else(|p| p.into_inner());
        match entries.get(key) {
            Some((v, until)) if *until > now => Some(v.clone()),
            Some(_) => {
                entries.remove(key);
                None
            }
            None => None,
        }
    }

    /// Keeps `value` for `key` until `now + ttl` (not at all for a zero `ttl`).
    pub fn insert(&self, key: K, value: V, now: Instant, ttl: Duration) {
        if ttl.is_zero() {
            return;
        }
        let mut entries = self.entries.lock().unwrap_or_else(|p| p.into_inner());
        entries.insert(key, (value, now + ttl));
    }

    /// Entries held (expired ones not yet looked at included).
    pub fn len(&self) -> usize {
        self.entries.lock().unwrap_or_else(|p| p.into_inner()).len()
    }

    /// Whether it holds no entry (expired ones not yet looked at count as held).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_expire_and_the_bound_holds() {
        let t0 = Instant::now();
        let c = TtlCache::new(2);
        c.insert(1, "a", t0, Duration::from_secs(10));
        assert_eq!(c.get(&1, t0 + Duration::from_secs(9)), Some("a"));
        assert_eq!(
            c.get(&1, t0 + Duration::from_secs(10)),
            None,
            "expired at the deadline"
        );
        assert_eq!(c.len(), 0, "an expired entry is dropped when seen");
        assert!(c.is_empty());
        c.insert(1, "a", t0, Duration::from_secs(10));
        c.insert(2, "b", t0, Duration::from_secs(10));
        c.get(&1, t0);
        c.insert(3, "c", t0, Duration::from_secs(10));
        assert_eq!(c.len(), 2);
        assert_eq!(c.get(&2, t0), None, "the least recently used went");
        assert_eq!((c.get(&1, t0), c.get(&3, t0)), (Some("a"), Some("c")));
        c.insert(4, "d", t0, Duration::ZERO);
        assert_eq!(c.get(&4, t0), None, "a zero ttl keeps nothing");
    }
}
