//! Stop control's bound (issue 16 point 6): a `stop` or `subagent_stop` hook declared
//! `blocking: true` may answer `block` ("keep working"), and this counts how many times a
//! session's stop was refused since its last prompt. Handlers get the count as
//! `stop_count`; once it reaches the limit (`--stop-block-limit`, default
//! [`DEFAULT_STOP_BLOCK_LIMIT`]) the stop hooks run in the background and stopping is
//! allowed, so a hook (or a model arguing with one) can never keep an agent looping.
//!
//! Counted per (tenant, session, event) on this dispatcher, in a bounded LRU
//! ([`MAX_STOP_SESSIONS`]); a `user_prompt_submit` of the session starts the count again.
//! With several dispatcher replicas and no session affinity, each counts its own: the loop
//! stays bounded (by the limit times the replicas).

use std::sync::Mutex;
use std::sync::atomic::{AtomicU32, Ordering};

use agenthooks_crds::HookEvent;
use hashlink::LruCache;

/// Refused stops per session before stopping is allowed (issue 16: "default 3").
pub const DEFAULT_STOP_BLOCK_LIMIT: u32 = 3;
/// Sessions whose refused stops are remembered at once; the least recently used is
/// forgotten first (a forgotten session starts at 0 again, still bounded per turn).
pub const MAX_STOP_SESSIONS: usize = 16_384;

/// Whether the waiting stop hooks may still refuse, after `count` refusals with `limit`.
pub fn may_refuse(count: u32, limit: u32) -> bool {
    count < limit
}

/// Refused stops by (tenant, session, event).
pub struct StopCounts {
    map: Mutex<LruCache<(String, String, HookEvent), u32>>,
    limit: AtomicU32,
}

impl Default for StopCounts {
    fn default() -> Self {
        StopCounts {
            map: Mutex::new(LruCache::new(MAX_STOP_SESSIONS)),
            limit: AtomicU32::new(DEFAULT_STOP_BLOCK_LIMIT),
        }
    }
}

impl StopCounts {
    fn lock(&self) -> std::sync::MutexGuard<'_, LruCache<(String, String, HookEvent), u32>> {
        self.map.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The limit (`--stop-block-limit`).
    pub fn limit(&self) -> u32 {
        self.limit.load(Ordering::Relaxed)
    }

    /// Sets the limit; 0 lets every stop through.
    pub fn set_limit(&self, limit: u32) {
        self.limit.store(limit, Ordering::Relaxed);
    }

    /// Refusals so far of `event` (`stop`, `subagent_stop`) in the tenant's session.
    pub fn count(&self, tenant: &str, session: &str, event: HookEvent) -> u32 {
        self.lock()
            .get(&(tenant.to_owned(), session.to_owned(), event))
            .copied()
            .unwrap_or(0)
    }

    /// One more refusal of `event` in the tenant's session.
    pub fn refused(&self, tenant: &str, session: &str, event: HookEvent) {
        let mut map = self.lock();
        let key = (tenant.to_owned(), session.to_owned(), event);
        let n = map.get(&key).copied().unwrap_or(0).saturating_add(1);
        map.insert(key, n);
    }

    /// A new prompt in the tenant's session: its counts start again.
    pub fn prompted(&self, tenant: &str, session: &str) {
        let mut map = self.lock();
        for event in [HookEvent::Stop, HookEvent::SubagentStop] {
            map.remove(&(tenant.to_owned(), session.to_owned(), event));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_per_session_and_event_until_the_next_prompt() {
        let s = StopCounts::default();
        assert_eq!(s.limit(), 3);
        for _ in 0..3 {
            s.refused("acme", "s1", HookEvent::Stop);
        }
        s.refused("acme", "s1", HookEvent::SubagentStop);
        assert_eq!(s.count("acme", "s1", HookEvent::Stop), 3);
        assert_eq!(s.count("acme", "s1", HookEvent::SubagentStop), 1);
        assert_eq!(s.count("acme", "s2", HookEvent::Stop), 0, "another session");
        assert_eq!(s.count("other", "s1", HookEvent::Stop), 0, "another tenant");
        assert!(!may_refuse(
            s.count("acme", "s1", HookEvent::Stop),
            s.limit()
        ));
        assert!(may_refuse(
            s.count("acme", "s1", HookEvent::SubagentStop),
            s.limit()
        ));
        s.prompted("acme", "s1");
        assert_eq!(s.count("acme", "s1", HookEvent::Stop), 0);
        assert_eq!(s.count("acme", "s1", HookEvent::SubagentStop), 0);
        s.set_limit(0);
        assert!(
            !may_refuse(0, s.limit()),
            "limit 0: every stop goes through"
        );
    }
}
