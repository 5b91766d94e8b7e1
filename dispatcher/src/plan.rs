//! What dispatch would run for an event, decided without running anything: the depth
//! rule, the unavailable-hook rule, resolution, the matcher index and each hook's
//! `toolKinds` and `ifExpr` — the engine's own cost per decision, without handlers
//! (`agenthooks-dispatcher bench` and the engine benchmarks time it). It calls the
//! functions dispatch calls ([`crate::chain::decide`]); a chain may still stop earlier
//! than planned (a hook blocks or times out) or run differently after a master-namespace
//! hook rewrites `tool_input`: the plan assumes every hook allows unchanged.

use std::sync::Arc;

use crate::decision::chain::{self as rules, Depth, LOOP_DEPTH_EXCEEDED};
use crate::event::Event;
use crate::hookset::{HOOK_UNAVAILABLE, HookSet, LoadedHook};
use crate::runner::{LazyScope, Matcher, filters_match};

pub mod bench;

/// One hook the chain would run, with what its filters said: `Err` is a CEL evaluation
/// error (the hook's `error` outcome, which stops a blocking chain).
#[derive(Debug)]
pub struct Planned<'a> {
    pub hook: &'a Arc<LoadedHook>,
    pub filter: Result<(), String>,
}

/// What dispatch would do with an event before any handler runs.
#[derive(Debug)]
pub enum Plan<'a> {
    /// Answered `block` before any hook runs (`LoopDepthExceeded`, `HookUnavailable`
    /// naming `hook`).
    Refused {
        reason: &'static str,
        hook: Option<&'a str>,
    },
    /// These hooks run, in order (none: `allow`). For a blocking event the list stops at
    /// the first filter error, as the chain would.
    Run(Vec<Planned<'a>>),
}

impl Plan<'_> {
    /// `namespace/name` of each hook that would run (empty when refused).
    pub fn keys(&self) -> Vec<&str> {
        match self {
            Plan::Refused { .. } => Vec::new(),
            Plan::Run(hooks) => hooks.iter().map(|p| p.hook.key.as_str()).collect(),
        }
    }
}

/// The plan of `event` on `set` (see the module docs). Pure: no clock, no I/O.
pub fn plan<'a>(set: &'a HookSet, event: &'a Event) -> Plan<'a> {
    let blocking = event.event.is_blocking();
    if let Depth::Exceeded { blocks } = rules::depth(event) {
        return if blocks {
            Plan::Refused {
                reason: LOOP_DEPTH_EXCEEDED,
                hook: None,
            }
        } else {
            Plan::Run(Vec::new())
        };
    }
    if blocking && let Some(u) = set.unavailable_for(event.event, &event.tenant_id, &event.agent_id)
    {
        return Plan::Refused {
            reason: HOOK_UNAVAILABLE,
            hook: Some(&u.key),
        };
    }
    let mut scope = LazyScope::default();
    let mut run = Vec::new();
    for hook in set.select(event.event, &event.tenant_id, &event.agent_id, event.tool()) {
        match filters_match(hook, event, &mut scope, Matcher::Applied) {
            Ok(false) => {}
            Ok(true) => run.push(Planned {
                hook,
                filter: Ok(()),
            }),
            Err(e) => {
                run.push(Planned {
                    hook,
                    filter: Err(e),
                });
                if blocking {
                    break;
                }
            }
        }
    }
    Plan::Run(run)
}

#[cfg(test)]
mod tests {
    use super::*;
    use agenthooks_crds::Edition;
    use agenthooks_crds::snapshot::SnapshotHook;

    use crate::hookset::tests::source;

    const H: &str =
        "event: pre_tool_use\nhandler: {type: http, http: {url: 'https://a.example'}}\n";

    fn hook(name: &str, extra: &str) -> SnapshotHook {
        source(
            "tenant-acme",
            name,
            &format!("{H}{extra}"),
            "2026-01-01T00:00:00Z",
        )
    }

    fn event(json: serde_json::Value) -> Event {
        Event::parse(json.to_string().as_bytes()).unwrap()
    }

    #[test]
    fn plans_the_hooks_whose_filters_select_the_event_in_order() {
        let (set, _) = HookSet::build(
            vec![
                hook(
                    "rm",
                    "matcher: exec\nifExpr: tool_input.cmd.startsWith('rm')\n",
                ),
                hook("any-exec", "matcher: '^exec$'\npriority: 5\n"),
                hook("write", "matcher: Write\n"),
                hook(
                    "bad-cel",
                    "matcher: exec\nifExpr: tool_input.nope == 1\npriority: -1\n",
                ),
            ],
            "agenthooks-system",
            Edition::Lite,
            1,
            None,
        );
        let rm = event(
            serde_json::json!({"event": "pre_tool_use", "tenant_id": "acme",
            "agent_id": "a", "tool_name": "exec", "tool_input": {"cmd": "rm -rf /"}}),
        );
        let plan = plan(&set, &rm);
        assert_eq!(
            plan.keys(),
            [
                "tenant-acme/any-exec",
                "tenant-acme/rm",
                "tenant-acme/bad-cel"
            ]
        );
        let Plan::Run(hooks) = plan else { panic!() };
        let err = hooks[2].filter.as_ref().unwrap_err();
        assert!(err.starts_with("ifExpr evaluation error"), "{err}");
        let ls = event(
            serde_json::json!({"event": "pre_tool_use", "tenant_id": "acme",
            "agent_id": "a", "tool_name": "exec", "tool_input": {"cmd": "ls", "nope": 1}}),
        );
        assert_eq!(
            super::plan(&set, &ls).keys(),
            ["tenant-acme/any-exec", "tenant-acme/bad-cel"]
        );
        let deep = event(
            serde_json::json!({"event": "pre_tool_use", "tenant_id": "acme",
            "agent_id": "a", "tool_name": "exec", "tool_input": {}, "depth": 9}),
        );
        assert!(matches!(
            super::plan(&set, &deep),
            Plan::Refused {
                reason: LOOP_DEPTH_EXCEEDED,
                hook: None
            }
        ));
    }
}
