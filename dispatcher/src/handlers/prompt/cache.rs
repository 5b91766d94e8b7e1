//! The decision cache (CONTRACT §5 prompt.3; seed "Decision cache"): a valid `decide`
//! answer is kept for [`CACHE_TTL`] under
//! `sha256(hook uid, 0, generation, 0, tool_name, 0, canonical tool_input)`, so a new
//! generation (any spec edit) misses. At most [`CACHE_CAPACITY`] entries; past it the
//! oldest inserted go first. Failures (parse errors, provider errors, refusals) are
//! never cached.
//!
//! A small map rather than a cache crate: the needs are a TTL and a cap, the lock is
//! held for a hash lookup only (never across an await), and `moka` would bring its
//! crossbeam/epoch machinery into the dispatcher (and a `Cargo.lock` change) for it.

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use serde_json::Value;
use sha2::{Digest, Sha256};

use super::canonical::canonical_json;

/// How long a decision is reused (seed: 60 s).
pub const CACHE_TTL: Duration = Duration::from_secs(60);
/// Most entries held.
pub const CACHE_CAPACITY: usize = 10_000;

/// A cache key: 32 bytes of SHA-256.
pub type CacheKey = [u8; 32];

/// The key of one (hook version, tenant, tool call, rewrite setting): CONTRACT §5
/// prompt.3's sha256(hook uid, version, tool_name, canonical tool_input), with the
/// event's tenant added so a global hook's decision (and the tokens it cost) is never
/// served to another tenant, and the effective `allowRewrite` (§5 prompt.2) so a decision
/// whose rewrite was dropped is never served where it would be applied, or the reverse.
pub fn cache_key(
    uid: &str,
    generation: i64,
    tenant: &str,
    tool_name: &str,
    tool_input: &Value,
    allow_rewrite: bool,
) -> CacheKey {
    let mut h = Sha256::new();
    h.update(uid.as_bytes());
    h.update([0]);
    h.update(generation.to_be_bytes());
    h.update([0]);
    h.update(tenant.as_bytes());
    h.update([0]);
    h.update(tool_name.as_bytes());
    h.update([0]);
    h.update(canonical_json(tool_input).as_bytes());
    h.update([0, u8::from(allow_rewrite)]);
    h.finalize().into()
}

/// What a hit answers with.
#[derive(Debug, Clone, PartialEq)]
pub struct CachedDecision {
    /// `Allow`, `Block` or `Ask`.
    pub decision: crate::decision::outcome::Outcome,
    pub reason: String,
    pub injection_detected: bool,
    /// The rewrite the chain may apply (already filtered by the hook's `allowRewrite`
    /// and `injection_detected`, CONTRACT §5 prompt.2).
    pub updated_input: Option<Value>,
    /// The model proposed a rewrite that was dropped.
    pub rewrite_denied: bool,
    pub additional_context: Option<String>,
    /// The provider model that decided.
    pub model: String,
}

struct Entry {
    value: std::sync::Arc<CachedDecision>,
    inserted: Instant,
    seq: u64,
}

#[derive(Default)]
struct State {
    map: HashMap<CacheKey, Entry>,
    /// Keys in insertion order with the `seq` they were inserted under (a stale pair,
    /// whose key was replaced since, is skipped when popped).
    order: VecDeque<(CacheKey, u64)>,
    seq: u64,
}

/// TTL + capacity cache of decisions. `Send + Sync`.
pub struct DecisionCache {
    state: Mutex<State>,
    ttl: Duration,
    capacity: usize,
}

impl Default for DecisionCache {
    fn default() -> Self {
        DecisionCache::new(CACHE_TTL, CACHE_CAPACITY)
    }
}

impl DecisionCache {
    /// A cache with its own TTL and capacity (at least 1).
    pub fn new(ttl: Duration, capacity: usize) -> DecisionCache {
        DecisionCache {
            state: Mutex::new(State::default()),
            ttl,
            capacity: capacity.max(1),
        }
    }

    /// The decision under `key` if inserted less than the TTL before `now`.
    pub fn get(&self, key: &CacheKey, now: Instant) -> Option<std::sync::Arc<CachedDecision>> {
        let state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        let e = state.map.get(key)?;
        (now.saturating_duration_since(e.inserted) < self.ttl).then(|| e.value.clone())
    }

    /// Keeps `value` under `key` from `now`; drops expired entries and, past the
    /// capacity, the oldest.
    pub fn insert(&self, key: CacheKey, value: CachedDecision, now: Instant) {
        let mut guard = self.state.lock().unwrap_or_else(|p| p.into_inner());
        let state = &mut *guard;
        state.seq += 1;
        let seq = state.seq;
        state.map.insert(
            key,
            Entry {
                value: std::sync::Arc::new(value),
                inserted: now,
                seq,
            },
        );
        state.order.push_back((key, seq));
        while let Some(&(k, s)) = state.order.front() {
            let live = state.map.get(&k).filter(|e| e.seq == s);
            let expired =
                live.is_some_and(|e| now.saturating_duration_since(e.inserted) >= self.ttl);
            if live.is_none() {
                state.order.pop_front();
            } else if expired || state.map.len() > self.capacity {
                state.order.pop_front();
                state.map.remove(&k);
            } else {
                break;
            }
        }
        // Stale slots of replaced keys behind a live front: never more than the cap.
        if state.order.len() > 2 * self.capacity {
            let map = &state.map;
            state
                .order
                .retain(|(k, s)| map.get(k).is_some_and(|e| e.seq == *s));
        }
    }

    /// Entries held (expired ones not yet dropped included).
    pub fn len(&self) -> usize {
        self.state
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .map
            .len()
    }

    /// No entry.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn d(reason: &str) -> CachedDecision {
        CachedDecision {
            decision: crate::decision::outcome::Outcome::Allow,
            reason: reason.into(),
            injection_detected: false,
            updated_input: None,
            rewrite_denied: false,
            additional_context: None,
            model: "m".into(),
        }
    }

    #[test]
    fn the_key_changes_with_generation_tool_and_input_not_with_key_order() {
        let a = cache_key("u1", 1, "acme", "exec", &json!({"a": 1, "b": 2}), false);
        assert_eq!(
            a,
            cache_key(
                "u1",
                1,
                "acme",
                "exec",
                &serde_json::from_str(r#"{"b":2,"a":1}"#).unwrap(),
                false
            )
        );
        assert_ne!(
            a,
            cache_key("u1", 1, "acme", "exec", &json!({"a": 1, "b": 2}), true),
            "the rewrite setting is part of the key (CONTRACT §5 prompt.2)"
        );
        assert_ne!(
            a,
            cache_key("u1", 2, "acme", "exec", &json!({"a": 1, "b": 2}), false)
        );
        assert_ne!(
            a,
            cache_key("u2", 1, "acme", "exec", &json!({"a": 1, "b": 2}), false)
        );
        assert_ne!(
            a,
            cache_key("u1", 1, "acme", "shell", &json!({"a": 1, "b": 2}), false)
        );
        assert_ne!(
            a,
            cache_key("u1", 1, "acme", "exec", &json!({"a": 1, "b": 3}), false)
        );
        assert_ne!(
            a,
            cache_key("u1", 1, "beta", "exec", &json!({"a": 1, "b": 2}), false),
            "another tenant never shares a decision"
        );
        // The separators keep ("u1", "exec") apart from ("u1e", "xec").
        assert_ne!(
            cache_key("u1", 1, "acme", "exec", &json!({}), false),
            cache_key("u1e", 1, "acme", "xec", &json!({}), false)
        );
    }

    #[test]
    fn entries_expire_after_the_ttl() {
        let c = DecisionCache::new(Duration::from_secs(60), 10);
        let t0 = Instant::now();
        c.insert([1; 32], d("x"), t0);
        assert_eq!(
            c.get(&[1; 32], t0 + Duration::from_secs(59))
                .unwrap()
                .reason,
            "x"
        );
        assert!(c.get(&[1; 32], t0 + Duration::from_secs(60)).is_none());
        assert!(c.get(&[2; 32], t0).is_none());
        // An insert later drops the expired entry.
        c.insert([2; 32], d("y"), t0 + Duration::from_secs(61));
        assert_eq!(c.len(), 1);
    }

    #[test]
    fn past_the_capacity_the_oldest_go_first() {
        let c = DecisionCache::new(Duration::from_secs(60), 3);
        let t0 = Instant::now();
        for i in 0..5u8 {
            c.insert([i; 32], d(&i.to_string()), t0);
        }
        assert_eq!(c.len(), 3);
        assert!(c.get(&[0; 32], t0).is_none());
        assert!(c.get(&[1; 32], t0).is_none());
        assert_eq!(c.get(&[4; 32], t0).unwrap().reason, "4");
        // Replacing a key keeps one entry for it; its stale order slot is skipped.
        c.insert([4; 32], d("4b"), t0);
        c.insert([5; 32], d("5"), t0);
        assert_eq!(c.len(), 3);
        assert_eq!(c.get(&[4; 32], t0).unwrap().reason, "4b");
        assert!(c.get(&[2; 32], t0).is_none());
        // One key replaced many times behind a live front: its stale order slots are
        // dropped too, so the cache's memory stays bounded by its capacity.
        for i in 0..1000 {
            c.insert([5; 32], d(&i.to_string()), t0);
        }
        assert_eq!(c.len(), 3);
        assert!(c.state.lock().unwrap().order.len() <= 2 * 3);
    }
}
