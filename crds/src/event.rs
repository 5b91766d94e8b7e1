//! The seven lifecycle events (seed "Events"; CONTRACT §1.1–1.2).

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// A lifecycle event of the agent loop. Serialized in snake_case, as in the seed.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize, JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum HookEvent {
    SessionStart,
    UserPromptSubmit,
    PreToolUse,
    PostToolUse,
    Stop,
    SubagentStart,
    SubagentStop,
}

impl HookEvent {
    /// Every event, in the seed's table order.
    pub const ALL: [HookEvent; 7] = [
        HookEvent::SessionStart,
        HookEvent::UserPromptSubmit,
        HookEvent::PreToolUse,
        HookEvent::PostToolUse,
        HookEvent::Stop,
        HookEvent::SubagentStart,
        HookEvent::SubagentStop,
    ];

    /// Blocking events wait for the chain's decision: `user_prompt_submit`,
    /// `pre_tool_use`, `subagent_start` (seed table, CONTRACT §1.2).
    pub fn is_blocking(self) -> bool {
        matches!(
            self,
            HookEvent::UserPromptSubmit | HookEvent::PreToolUse | HookEvent::SubagentStart
        )
    }

    /// Non-blocking events whose hooks may be declared `blocking: true` (issue 16):
    /// `post_tool_use` (tool-output control), `stop` and `subagent_stop` (stop control).
    pub fn may_wait(self) -> bool {
        matches!(
            self,
            HookEvent::PostToolUse | HookEvent::Stop | HookEvent::SubagentStop
        )
    }

    /// The snake_case name (`pre_tool_use`).
    pub fn as_str(self) -> &'static str {
        match self {
            HookEvent::SessionStart => "session_start",
            HookEvent::UserPromptSubmit => "user_prompt_submit",
            HookEvent::PreToolUse => "pre_tool_use",
            HookEvent::PostToolUse => "post_tool_use",
            HookEvent::Stop => "stop",
            HookEvent::SubagentStart => "subagent_start",
            HookEvent::SubagentStop => "subagent_stop",
        }
    }

    /// Parses a snake_case name; `None` for anything else.
    pub fn parse(s: &str) -> Option<HookEvent> {
        HookEvent::ALL.into_iter().find(|e| e.as_str() == s)
    }
}

impl std::fmt::Display for HookEvent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exactly_three_events_block() {
        let blocking: Vec<_> = HookEvent::ALL
            .into_iter()
            .filter(|e| e.is_blocking())
            .collect();
        assert_eq!(
            blocking,
            vec![
                HookEvent::UserPromptSubmit,
                HookEvent::PreToolUse,
                HookEvent::SubagentStart
            ]
        );
    }

    #[test]
    fn names_round_trip_in_snake_case() {
        for e in HookEvent::ALL {
            assert_eq!(HookEvent::parse(e.as_str()), Some(e));
            assert_eq!(serde_json::to_value(e).unwrap(), e.as_str());
        }
        assert_eq!(HookEvent::parse("PreToolUse"), None);
    }
}
