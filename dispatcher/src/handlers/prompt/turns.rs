//! The per-turn cap (CONTRACT §5 prompt.4): at most `maxInvocationsPerTurn` (default
//! [`DEFAULT_MAX_PER_TURN`]) evaluator calls per (hook uid, turn); cache hits are not
//! counted. The handler names a turn by (`tenant_id`, `session_id`, `turn_id`), so a
//! tenant or session reusing a predictable `turn_id` never spends another's cap. Past it a blocking event gets `block`, reason `PerTurnCapReached`.
//!
//! Memory is bounded (CONTRACT §10.2): a turn is held under a fixed-size key, the
//! SHA-256 of (hook uid, tenant, session, turn) ([`turn_key`]), never under the caller's
//! strings; a turn idle for [`TURN_IDLE_EXPIRY`] is forgotten, and at most
//! [`TURN_CAPACITY`] turns are held (past it the oldest started go first; forgetting a
//! turn early can only admit more calls, which the token budget still bounds).
//!
//! An event without `turn_id` is its own turn: nothing groups it with other calls, so
//! the cap does not apply to it (the budget does). Runtimes that want the cap send
//! `turn_id`. The count is per dispatcher replica.

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use sha2::{Digest, Sha256};

/// Evaluator calls per turn when the hook sets none (seed: 5).
pub const DEFAULT_MAX_PER_TURN: u32 = 5;
/// A turn not seen for this long is forgotten.
pub const TURN_IDLE_EXPIRY: Duration = Duration::from_secs(3600);
/// Most turns held.
pub const TURN_CAPACITY: usize = 100_000;

/// The block reason past the cap.
pub const PER_TURN_CAP_REACHED: &str = "PerTurnCapReached";

/// The key of one (hook, turn): 32 bytes of SHA-256, whatever the size of the ids.
pub type TurnKey = [u8; 32];

/// The key of hook `uid`'s turn `turn_id` in `tenant`'s `session`: a tenant or session
/// reusing the same `turn_id` never spends another's cap. Each part is length-prefixed,
/// so no two different tuples share a key.
pub fn turn_key(uid: &str, tenant: &str, session: &str, turn_id: &str) -> TurnKey {
    let mut h = Sha256::new();
    for part in [uid, tenant, session, turn_id] {
        h.update((part.len() as u64).to_be_bytes());
        h.update(part.as_bytes());
    }
    h.finalize().into()
}

struct Turn {
    calls: u32,
    last_seen: Instant,
    seq: u64,
}

#[derive(Default)]
struct State {
    turns: HashMap<TurnKey, Turn>,
    order: VecDeque<(TurnKey, u64)>,
    seq: u64,
}

/// Counts evaluator calls per (hook, turn). `Send + Sync`.
pub struct TurnCaps {
    state: Mutex<State>,
    idle: Duration,
    capacity: usize,
}

impl Default for TurnCaps {
    fn default() -> Self {
        TurnCaps::new(TURN_IDLE_EXPIRY, TURN_CAPACITY)
    }
}

impl TurnCaps {
    /// Caps with their own idle expiry and capacity (at least 1).
    pub fn new(idle: Duration, capacity: usize) -> TurnCaps {
        TurnCaps {
            state: Mutex::new(State::default()),
            idle,
            capacity: capacity.max(1),
        }
    }

    /// Counts one call in the turn `key` ([`turn_key`]) if fewer than `max` were
    /// counted; `false` when the cap is reached (nothing counted).
    pub fn try_acquire(&self, key: &TurnKey, max: u32, now: Instant) -> bool {
        let mut guard = self.state.lock().unwrap_or_else(|p| p.into_inner());
        let state = &mut *guard;
        let key = *key;
        if let Some(t) = state.turns.get_mut(&key) {
            if now.saturating_duration_since(t.last_seen) < self.idle {
                t.last_seen = now;
                if t.calls >= max {
                    return false;
                }
                t.calls += 1;
                return true;
            }
            // Idle past the expiry: a new turn under the same id.
            state.turns.remove(&key);
        }
        state.seq += 1;
        let seq = state.seq;
        state.order.push_back((key, seq));
        state.turns.insert(
            key,
            Turn {
                calls: 1,
                last_seen: now,
                seq,
            },
        );
        while let Some((k, s)) = state.order.front() {
            let live = state.turns.get(k).filter(|t| t.seq == *s);
            match live {
                None => {
                    state.order.pop_front();
                }
                Some(t)
                    if now.saturating_duration_since(t.last_seen) >= self.idle
                        || state.turns.len() > self.capacity =>
                {
                    if let Some((k, _)) = state.order.pop_front() {
                        state.turns.remove(&k);
                    }
                }
                Some(_) => break,
            }
        }
        // Stale slots of turns started again behind a live front: never more than the cap.
        if state.order.len() > 2 * self.capacity {
            let turns = &state.turns;
            state
                .order
                .retain(|(k, s)| turns.get(k).is_some_and(|t| t.seq == *s));
        }
        max >= 1
    }

    /// Gives back a call counted by [`TurnCaps::try_acquire`] that never reached the
    /// provider (the budget refused it).
    pub fn undo(&self, key: &TurnKey) {
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(t) = state.turns.get_mut(key) {
            t.calls = t.calls.saturating_sub(1);
        }
    }

    /// Turns held.
    pub fn len(&self) -> usize {
        self.state
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .turns
            .len()
    }

    /// No turn held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn k(uid: &str, turn: &str) -> TurnKey {
        turn_key(uid, "acme", "s1", turn)
    }

    #[test]
    fn the_cap_counts_per_hook_and_turn() {
        let c = TurnCaps::default();
        let t = Instant::now();
        for _ in 0..5 {
            assert!(c.try_acquire(&k("h1", "turn-1"), 5, t));
        }
        assert!(!c.try_acquire(&k("h1", "turn-1"), 5, t));
        assert!(!c.try_acquire(&k("h1", "turn-1"), 5, t));
        assert!(c.try_acquire(&k("h1", "turn-2"), 5, t));
        assert!(c.try_acquire(&k("h2", "turn-1"), 5, t));
        c.undo(&k("h1", "turn-1"));
        assert!(c.try_acquire(&k("h1", "turn-1"), 5, t));
        assert!(!c.try_acquire(&k("h1", "turn-1"), 5, t));
    }

    #[test]
    fn keys_are_fixed_size_and_keep_tenants_sessions_and_parts_apart() {
        let a = turn_key("h", "acme", "s1", "t1");
        assert_eq!(a, turn_key("h", "acme", "s1", "t1"));
        assert_ne!(a, turn_key("h", "beta", "s1", "t1"));
        assert_ne!(a, turn_key("h", "acme", "s2", "t1"));
        assert_ne!(a, turn_key("h2", "acme", "s1", "t1"));
        // Length prefixes: moving bytes from one part to the next is another key.
        assert_ne!(turn_key("h", "ab", "c", "t"), turn_key("h", "a", "bc", "t"));
        // A megabyte of turn id is still a 32-byte key.
        let big = "x".repeat(1 << 20);
        assert_eq!(turn_key("h", "acme", "s1", &big).len(), 32);
    }

    #[test]
    fn an_idle_turn_is_forgotten_and_memory_is_capped() {
        let c = TurnCaps::new(Duration::from_secs(3600), 3);
        let t0 = Instant::now();
        assert!(c.try_acquire(&k("h", "a"), 1, t0));
        assert!(!c.try_acquire(&k("h", "a"), 1, t0 + Duration::from_secs(3599)));
        // Seen at 3599 s: idle again only an hour after that.
        assert!(!c.try_acquire(&k("h", "a"), 1, t0 + Duration::from_secs(7000)));
        assert!(c.try_acquire(&k("h", "a"), 1, t0 + Duration::from_secs(10_600)));
        for i in 0..10 {
            c.try_acquire(
                &k("h", &format!("t{i}")),
                1,
                t0 + Duration::from_secs(10_600),
            );
        }
        assert_eq!(c.len(), 3);
    }
}
