//! Sub-agent depth for runtimes that do not send it (CONTRACT §4.5's `depth`; issue 13).
//!
//! No runtime's payload carries a depth or a parent: Claude Code and Codex send the
//! calling sub-agent's own `agent_id` only. The dispatcher rebuilds the tree per session
//! from what it sees: a sub-agent tool call (`tool_kind: subagent`, e.g. Claude Code's
//! `Agent`, Codex's `spawn_agent`) that is allowed from an agent at depth *d* is followed
//! by a `SubagentStart` of the new agent, which gets depth *d + 1*; the new agent's calls
//! carry its id and get its depth; `SubagentStop` forgets it. Spawns are matched to starts
//! first in, first out (parallel spawns from agents at different depths may swap; the
//! depth of each is still one of theirs).
//!
//! What is not known is not made up as zero: a call from a sub-agent id this dispatcher
//! never saw start (it restarted, or another replica saw the start) gets depth
//! [`UNKNOWN_SUBAGENT_DEPTH`], and a start with no spawn seen gets depth 1. Each guard
//! applies at every depth, so an underestimate only delays the loop-depth refusal.
//!
//! [`Session`] is the pure rule; [`SessionTree`] keeps one per (tenant, session), bounded.

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;

use agenthooks_crds::HookEvent;
use hashlink::LruCache;

/// Depth of a call from a sub-agent whose start was not seen.
pub const UNKNOWN_SUBAGENT_DEPTH: i64 = 1;
/// Sessions remembered at once; the least recently used is forgotten first.
pub const MAX_SESSIONS: usize = 16_384;
/// Sub-agents remembered per session; past it, new ones get [`UNKNOWN_SUBAGENT_DEPTH`]
/// (or their spawner's depth + 1, for their start) without being remembered.
pub const MAX_AGENTS_PER_SESSION: usize = 256;
/// Allowed spawns waiting for their `SubagentStart`, per session (oldest dropped first).
pub const MAX_PENDING_SPAWNS: usize = 64;

/// One session's sub-agents: the pure rule (see module docs).
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Session {
    /// Depth of the spawner of each allowed spawn not started yet, oldest first.
    pending: VecDeque<i64>,
    /// Depth of each started sub-agent, by the runtime's agent id.
    agents: HashMap<String, i64>,
}

impl Session {
    /// The depth of an event from `runtime_agent` (`None`: the main thread, depth 0),
    /// and the bookkeeping of `SubagentStart` and `SubagentStop`.
    pub fn depth_of(&mut self, event: HookEvent, runtime_agent: Option<&str>) -> i64 {
        let Some(agent) = runtime_agent else {
            return 0;
        };
        match event {
            HookEvent::SubagentStart => {
                let depth = self.pending.pop_front().map_or(1, |d| d.saturating_add(1));
                if self.agents.len() < MAX_AGENTS_PER_SESSION || self.agents.contains_key(agent) {
                    self.agents.insert(agent.to_string(), depth);
                }
                depth
            }
            HookEvent::SubagentStop => self.agents.remove(agent).unwrap_or(UNKNOWN_SUBAGENT_DEPTH),
            _ => self
                .agents
                .get(agent)
                .copied()
                .unwrap_or(UNKNOWN_SUBAGENT_DEPTH),
        }
    }

    /// A sub-agent tool call from depth `depth` was allowed: its `SubagentStart` comes next.
    pub fn spawn_allowed(&mut self, depth: i64) {
        if self.pending.len() == MAX_PENDING_SPAWNS {
            self.pending.pop_front();
        }
        self.pending.push_back(depth);
    }
}

/// Every session's [`Session`], by (tenant, session id), at most [`MAX_SESSIONS`].
pub struct SessionTree {
    sessions: Mutex<LruCache<(String, String), Session>>,
}

impl Default for SessionTree {
    fn default() -> Self {
        SessionTree {
            sessions: Mutex::new(LruCache::new(MAX_SESSIONS)),
        }
    }
}

impl SessionTree {
    /// [`Session::depth_of`] in the tenant's session. A call with no session id is taken
    /// as it is: the main thread's depth 0 unless it names a sub-agent.
    pub fn depth_of(
        &self,
        tenant: &str,
        session: &str,
        event: HookEvent,
        runtime_agent: Option<&str>,
    ) -> i64 {
        let mut sessions = self.sessions.lock().expect("session tree lock");
        let key = (tenant.to_string(), session.to_string());
        if sessions.get(&key).is_none() {
            if runtime_agent.is_none() {
                return 0;
            }
            sessions.insert(key.clone(), Session::default());
        }
        let s = sessions.get_mut(&key).expect("just inserted");
        s.depth_of(event, runtime_agent)
    }

    /// [`Session::spawn_allowed`] in the tenant's session.
    pub fn spawn_allowed(&self, tenant: &str, session: &str, depth: i64) {
        let mut sessions = self.sessions.lock().expect("session tree lock");
        let key = (tenant.to_string(), session.to_string());
        if sessions.get(&key).is_none() {
            sessions.insert(key.clone(), Session::default());
        }
        if let Some(s) = sessions.get_mut(&key) {
            s.spawn_allowed(depth);
        }
    }

    /// Sessions remembered now.
    pub fn len(&self) -> usize {
        self.sessions.lock().expect("session tree lock").len()
    }

    /// Whether no session is remembered.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use HookEvent::*;

    #[test]
    fn three_nested_spawns_give_depths_one_two_three_and_stops_forget() {
        let mut s = Session::default();
        assert_eq!(s.depth_of(PreToolUse, None), 0);
        s.spawn_allowed(0);
        assert_eq!(s.depth_of(SubagentStart, Some("a")), 1);
        assert_eq!(s.depth_of(PreToolUse, Some("a")), 1);
        s.spawn_allowed(1);
        assert_eq!(s.depth_of(SubagentStart, Some("b")), 2);
        s.spawn_allowed(2);
        assert_eq!(s.depth_of(SubagentStart, Some("c")), 3);
        assert_eq!(s.depth_of(PreToolUse, Some("c")), 3);
        assert_eq!(s.depth_of(SubagentStop, Some("c")), 3);
        assert_eq!(s.depth_of(PreToolUse, Some("c")), UNKNOWN_SUBAGENT_DEPTH);
        assert_eq!(s.depth_of(PreToolUse, Some("b")), 2);
    }

    #[test]
    fn what_was_not_seen_is_never_depth_zero() {
        let mut s = Session::default();
        // A start without a spawn seen, a call from an agent never started.
        assert_eq!(s.depth_of(SubagentStart, Some("x")), 1);
        assert_eq!(
            s.depth_of(PreToolUse, Some("never-started")),
            UNKNOWN_SUBAGENT_DEPTH
        );
        assert_eq!(
            s.depth_of(SubagentStop, Some("never-started")),
            UNKNOWN_SUBAGENT_DEPTH
        );
    }

    #[test]
    fn pending_spawns_and_agents_are_bounded() {
        let mut s = Session::default();
        for d in 0..(MAX_PENDING_SPAWNS as i64 + 10) {
            s.spawn_allowed(d);
        }
        assert_eq!(s.pending.len(), MAX_PENDING_SPAWNS);
        assert_eq!(s.pending.front(), Some(&10));
        let mut s = Session::default();
        for i in 0..MAX_AGENTS_PER_SESSION + 5 {
            s.spawn_allowed(2);
            assert_eq!(s.depth_of(SubagentStart, Some(&format!("a{i}"))), 3);
        }
        assert_eq!(s.agents.len(), MAX_AGENTS_PER_SESSION);
        assert_eq!(s.depth_of(PreToolUse, Some("a3")), 3);
        assert_eq!(
            s.depth_of(
                PreToolUse,
                Some(&format!("a{}", MAX_AGENTS_PER_SESSION + 1))
            ),
            UNKNOWN_SUBAGENT_DEPTH
        );
    }

    #[test]
    fn sessions_are_per_tenant() {
        let tree = SessionTree::default();
        tree.spawn_allowed("acme", "s", 2);
        assert_eq!(tree.depth_of("acme", "s", SubagentStart, Some("a")), 3);
        // The same session id in another tenant knows nothing of it.
        assert_eq!(
            tree.depth_of("globex", "s", PreToolUse, Some("a")),
            UNKNOWN_SUBAGENT_DEPTH
        );
        assert_eq!(tree.depth_of("acme", "s", PreToolUse, Some("a")), 3);
        // The main thread of an unknown session is remembered by nothing.
        assert_eq!(tree.depth_of("acme", "other", PreToolUse, None), 0);
        assert_eq!(tree.len(), 2);
    }
}
