//! Sub-agent depth for runtimes that do not send it (CONTRACT §4.5's `depth`; issue 13).
//!
//! No runtime's payload carries a depth or a parent: Claude Code and Codex send the
//! calling sub-agent's own `agent_id` only. The dispatcher rebuilds each session's tree
//! from what it sees: a sub-agent tool call (`tool_kind: subagent`: Claude Code's `Agent`,
//! Codex's `spawn_agent`) that is allowed from an agent at depth *d* is a pending spawn of
//! depth *d*; a `SubagentStart` of a new agent takes the deepest pending spawn and gets
//! its depth + 1; the new agent's calls carry its id and get its depth.
//!
//! Every guess errs deep, never shallow (a break-it review made a sub-agent look shallow
//! three ways, each closed here):
//! - A spawn the runtime then rejects (an unknown agent type) leaves a pending spawn no
//!   start takes. A start takes the *deepest* pending spawn, so a stale shallow one never
//!   makes a deep agent shallow; a stale deep one can only make a shallow agent deeper.
//! - `SubagentStop` forgets nothing: a runtime may keep a stopped sub-agent running
//!   (Claude Code, when a `SubagentStop` hook answers `block`), and its calls keep its
//!   depth.
//! - A start with no pending spawn (a spawning tool we do not know) is one deeper than
//!   the deepest agent the session knows (a stale pending spawn is taken first: that is
//!   the one way left to look shallow, and it needs a spawning tool we do not know); a call from an agent id the session does not
//!   know (evicted, or started before a restart) gets the deepest depth the session
//!   knows, and [`UNKNOWN_SUBAGENT_DEPTH`] in a session the dispatcher has not seen.
//!
//! Each guard applies at every depth, and the loop-depth rule refuses past 3.
//!
//! [`Session`] is the pure rule; [`SessionTree`] keeps one per (tenant, session), bounded.

use std::sync::Mutex;

use agenthooks_crds::HookEvent;
use hashlink::LruCache;

/// Depth of a call from a sub-agent of a session the dispatcher knows nothing of.
pub const UNKNOWN_SUBAGENT_DEPTH: i64 = 1;
/// Sessions remembered at once; the least recently used is forgotten first.
pub const MAX_SESSIONS: usize = 16_384;
/// Sub-agents remembered per session (least recently seen forgotten first).
pub const MAX_AGENTS_PER_SESSION: usize = 256;
/// Allowed spawns waiting for their `SubagentStart`, per session (oldest dropped first).
pub const MAX_PENDING_SPAWNS: usize = 64;

/// One session's sub-agents: the pure rule (see module docs).
pub struct Session {
    /// Depth of the spawner of each allowed spawn not started yet, oldest first.
    pending: Vec<i64>,
    /// Depth of each sub-agent seen, by the runtime's agent id.
    agents: LruCache<String, i64>,
    /// The deepest depth any agent of the session had.
    deepest: i64,
}

impl Default for Session {
    fn default() -> Self {
        Session {
            pending: Vec::new(),
            agents: LruCache::new(MAX_AGENTS_PER_SESSION),
            deepest: 0,
        }
    }
}

impl Session {
    /// The depth of an event from `runtime_agent` (`None`: the main thread, depth 0),
    /// and the bookkeeping of `SubagentStart`.
    pub fn depth_of(&mut self, event: HookEvent, runtime_agent: Option<&str>) -> i64 {
        let Some(agent) = runtime_agent else {
            return 0;
        };
        let known = self.agents.get(agent).copied();
        let depth = if event == HookEvent::SubagentStart {
            let parent = match self.pending.iter().enumerate().max_by_key(|(_, d)| **d) {
                Some((i, _)) => self.pending.remove(i),
                None => self.deepest,
            };
            parent.saturating_add(1).max(known.unwrap_or(0))
        } else {
            known.unwrap_or(self.deepest.max(UNKNOWN_SUBAGENT_DEPTH))
        };
        if known != Some(depth) {
            self.agents.insert(agent.to_string(), depth);
        }
        self.deepest = self.deepest.max(depth);
        depth
    }

    /// A sub-agent tool call from depth `depth` was allowed: its `SubagentStart` comes next.
    pub fn spawn_allowed(&mut self, depth: i64) {
        if self.pending.len() == MAX_PENDING_SPAWNS {
            self.pending.remove(0);
        }
        self.pending.push(depth);
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
    /// [`Session::depth_of`] in the tenant's session. A call from the main thread (no
    /// runtime agent id) is depth 0 and touches nothing: no lock, no allocation.
    pub fn depth_of(
        &self,
        tenant: &str,
        session: &str,
        event: HookEvent,
        runtime_agent: Option<&str>,
    ) -> i64 {
        if runtime_agent.is_none() {
            return 0;
        }
        self.with_session(tenant, session, |s| s.depth_of(event, runtime_agent))
    }

    /// [`Session::spawn_allowed`] in the tenant's session.
    pub fn spawn_allowed(&self, tenant: &str, session: &str, depth: i64) {
        self.with_session(tenant, session, |s| s.spawn_allowed(depth))
    }

    /// Runs `f` on the tenant's session, made when missing (the lock is held for `f` only,
    /// which never awaits).
    fn with_session<R>(&self, tenant: &str, session: &str, f: impl FnOnce(&mut Session) -> R) -> R {
        let mut sessions = self.sessions.lock().expect("session tree lock");
        let key = (tenant.to_string(), session.to_string());
        if let Some(s) = sessions.get_mut(&key) {
            return f(s);
        }
        let mut s = Session::default();
        let out = f(&mut s);
        sessions.insert(key, s);
        out
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
    fn three_nested_spawns_give_depths_one_two_three() {
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
        assert_eq!(s.depth_of(PreToolUse, Some("b")), 2);
    }

    /// The break-it review's three ways to look shallow, each answered deep.
    #[test]
    fn no_sequence_makes_a_sub_agent_shallower() {
        // 1. A spawn the runtime rejected stays pending at depth 0; the real spawn from
        // depth 3 still starts at depth 4.
        let mut s = Session::default();
        for (parent, child) in [(None, "r1"), (Some("r1"), "r2"), (Some("r2"), "r3")] {
            let d = s.depth_of(PreToolUse, parent);
            s.spawn_allowed(d);
            s.depth_of(SubagentStart, Some(child));
        }
        let main = s.depth_of(PreToolUse, None);
        s.spawn_allowed(main); // rejected by the runtime: no start follows
        let r3 = s.depth_of(PreToolUse, Some("r3"));
        s.spawn_allowed(r3);
        assert_eq!(s.depth_of(SubagentStart, Some("r4")), 4);
        assert_eq!(s.depth_of(PreToolUse, Some("r4")), 4);
        // 2. A stop forgets nothing: the agent's calls after it keep its depth.
        assert_eq!(s.depth_of(SubagentStop, Some("r3")), 3);
        assert_eq!(s.depth_of(PreToolUse, Some("r3")), 3);
        // 3. A start with no spawn pending, an id never seen: the deepest the session knows.
        let mut deep = Session::default();
        deep.spawn_allowed(2);
        deep.depth_of(SubagentStart, Some("c"));
        assert_eq!(deep.depth_of(SubagentStart, Some("x")), 4);
        // (A stale pending spawn is taken by a start that has none of its own: a start
        // through a spawning tool we do not know. Known spawning tools always have one.)
        assert_eq!(s.depth_of(SubagentStart, Some("y")), 1);
        let mut fresh = Session::default();
        fresh.spawn_allowed(0);
        fresh.depth_of(SubagentStart, Some("a"));
        assert_eq!(fresh.depth_of(PreToolUse, Some("never-started")), 1);
        assert_eq!(fresh.depth_of(SubagentStart, Some("b")), 2);
        assert_eq!(fresh.depth_of(PreToolUse, Some("unknown")), 2);
        // A start seen again never lowers what is known.
        assert_eq!(fresh.depth_of(SubagentStart, Some("b")), 3);
    }

    #[test]
    fn what_was_not_seen_is_never_depth_zero() {
        let mut s = Session::default();
        assert_eq!(
            s.depth_of(PreToolUse, Some("never-started")),
            UNKNOWN_SUBAGENT_DEPTH
        );
        assert_eq!(s.depth_of(SubagentStart, Some("x")), 2);
    }

    #[test]
    fn pending_spawns_and_agents_are_bounded() {
        let mut s = Session::default();
        for d in 0..(MAX_PENDING_SPAWNS as i64 + 10) {
            s.spawn_allowed(d % 3);
        }
        assert_eq!(s.pending.len(), MAX_PENDING_SPAWNS);
        let mut s = Session::default();
        for i in 0..MAX_AGENTS_PER_SESSION + 5 {
            s.spawn_allowed(0);
            assert_eq!(s.depth_of(SubagentStart, Some(&format!("a{i}"))), 1);
        }
        assert_eq!(s.agents.len(), MAX_AGENTS_PER_SESSION);
        // Forgotten: the deepest the session knows (1 here), not 0.
        assert_eq!(s.depth_of(PreToolUse, Some("a0")), 1);
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
