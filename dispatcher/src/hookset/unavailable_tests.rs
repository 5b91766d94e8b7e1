//! CONTRACT §10.4: hooks this dispatcher cannot load are kept as unavailable, and a
//! blocking event one of them could apply to is answered `block` `HookUnavailable`
//! before any hook runs; non-blocking events only log and count.

use super::*;
use crate::chain::{Verdict, decide, observe};
use crate::event::Event;
use crate::handlers::http::HttpCaller;
use crate::runner::Engine;

const MASTER: &str = "agenthooks-system";

fn hook(ns: &str, name: &str, yaml: &str) -> SnapshotHook {
    SnapshotHook {
        uid: format!("uid-{name}"),
        namespace: ns.into(),
        name: name.into(),
        generation: 3,
        created_at: "2026-01-01T00:00:00Z".into(),
        namespace_tenant: if ns == MASTER {
            MASTER.into()
        } else {
            ns.trim_start_matches("tenant-").into()
        },
        spec: serde_norway::from_str(yaml).unwrap(),
        sealed_headers: vec![],
        open_breakers: Vec::new(),
        reset_token: None,
    }
}

/// A hook whose matcher does not compile (the dispatcher's own regex compile refuses it).
fn broken(ns: &str, name: &str, event: &str, extra: &str) -> SnapshotHook {
    hook(
        ns,
        name,
        &format!(
            "event: {event}\nmatcher: '('\n{extra}\nhandler: {{type: command, command: {{command: 'exit 0'}}}}\n"
        ),
    )
}

/// A command hook that leaves `marker` behind when it runs.
fn touching(ns: &str, name: &str, event: &str, marker: &std::path::Path) -> SnapshotHook {
    hook(
        ns,
        name,
        &format!(
            "event: {event}\nhandler: {{type: command, command: {{command: 'touch {}'}}}}\n",
            marker.display()
        ),
    )
}

fn event(event: &str, tenant: &str, agent: &str) -> Event {
    let body = serde_json::json!({"event": event, "tenant_id": tenant, "agent_id": agent,
        "tool_name": "exec", "tool_input": {"cmd": "ls"}});
    Event::parse(&serde_json::to_vec(&body).unwrap()).unwrap()
}

fn engine() -> Engine {
    Engine::new(HttpCaller::new(vec![]), Edition::Lite, SealKey::generate())
}

fn blocked_by(engine: &Engine, event: &str, result: &str) -> u64 {
    engine
        .metrics
        .hook_unavailable_events
        .with_label_values(&[event, result])
        .get()
}

#[test]
fn a_refused_hook_is_kept_with_its_identity_and_error() {
    let (set, rejected) = HookSet::build(
        vec![broken(
            "tenant-a",
            "bad",
            "pre_tool_use",
            "scope: agent\nagentIds: [a1]",
        )],
        MASTER,
        Edition::Lite,
        1,
        None,
    );
    assert!(set.is_empty());
    assert_eq!(rejected.len(), 1);
    let u = &set.unavailable()[0];
    assert_eq!(
        (
            u.uid.as_str(),
            u.key.as_str(),
            u.generation,
            u.event,
            u.scope,
            u.tenant.as_str()
        ),
        (
            "uid-bad",
            "tenant-a/bad",
            3,
            HookEvent::PreToolUse,
            HookScope::Agent,
            "a"
        )
    );
    assert_eq!(u.agent_ids, ["a1"]);
    assert!(u.error.contains("matcher"), "{}", u.error);
    assert_eq!(u.error, rejected[0].errors.to_string());
}

#[test]
fn could_apply_follows_event_tenant_agent_and_enabled_not_the_matcher() {
    let (set, _) = HookSet::build(
        vec![
            broken("tenant-a", "tenant-hook", "pre_tool_use", ""),
            broken(
                "tenant-b",
                "agent-hook",
                "pre_tool_use",
                "scope: agent\nagentIds: [b1]",
            ),
            broken("tenant-c", "off", "pre_tool_use", "enabled: false"),
        ],
        MASTER,
        Edition::Lite,
        1,
        None,
    );
    let key = |e, t, a| set.unavailable_for(e, t, a).map(|u| u.key.as_str());
    assert_eq!(
        key(HookEvent::PreToolUse, "a", "any"),
        Some("tenant-a/tenant-hook")
    );
    assert_eq!(key(HookEvent::UserPromptSubmit, "a", "any"), None);
    assert_eq!(
        key(HookEvent::PreToolUse, "b", "b1"),
        Some("tenant-b/agent-hook")
    );
    assert_eq!(key(HookEvent::PreToolUse, "b", "b2"), None);
    assert_eq!(key(HookEvent::PreToolUse, "c", "x"), None, "disabled");
    assert_eq!(key(HookEvent::PreToolUse, "z", "x"), None);
}

#[test]
fn a_standard_dispatcher_keeps_a_command_hook_as_unavailable() {
    let (set, _) = HookSet::build(
        vec![hook(
            "tenant-a",
            "cmd",
            "event: pre_tool_use\nhandler: {type: command, command: {command: 'exit 0'}}",
        )],
        MASTER,
        Edition::Standard,
        1,
        None,
    );
    let u = set
        .unavailable_for(HookEvent::PreToolUse, "a", "x")
        .unwrap();
    assert!(u.error.contains("command"), "{}", u.error);
}

#[test]
fn the_error_is_cut_to_one_kib_on_a_char_boundary() {
    let long = "é".repeat(1000);
    let cut = cut(&long, MAX_UNAVAILABLE_ERROR_BYTES);
    assert_eq!(cut.len(), 1024);
    assert_eq!(super::cut("short", 1024), "short");
    assert_eq!(super::cut("aé", 2), "a");
}

#[tokio::test]
async fn tenant_a_unavailable_blocks_a_before_any_hook_runs_not_b_not_non_blocking() {
    let dir = tempfile::tempdir().unwrap();
    let a_marker = dir.path().join("a-ran");
    let b_marker = dir.path().join("b-ran");
    let post_marker = dir.path().join("a-post-ran");
    let (set, _) = HookSet::build(
        vec![
            broken("tenant-a", "bad", "pre_tool_use", ""),
            broken("tenant-a", "bad-post", "post_tool_use", ""),
            touching("tenant-a", "a-guard", "pre_tool_use", &a_marker),
            touching("tenant-a", "a-post", "post_tool_use", &post_marker),
            touching("tenant-b", "b-guard", "pre_tool_use", &b_marker),
        ],
        MASTER,
        Edition::Lite,
        1,
        None,
    );
    let engine = engine();

    let d = decide(&engine, &set, event("pre_tool_use", "a", "a1")).await;
    assert_eq!(d.decision, Verdict::Block);
    assert_eq!(d.reason.as_deref(), Some("HookUnavailable"));
    assert_eq!(d.deciding_hook.as_deref(), Some("tenant-a/bad"));
    assert!(d.hooks.is_empty(), "no hook runs: {:?}", d.hooks);
    assert!(!a_marker.exists(), "a-guard must not have run");
    assert_eq!(blocked_by(&engine, "pre_tool_use", "blocked"), 1);

    let d = decide(&engine, &set, event("pre_tool_use", "b", "b1")).await;
    assert_eq!(d.decision, Verdict::Allow, "{d:?}");
    assert_eq!(d.hooks.len(), 1);
    assert!(b_marker.exists(), "b's hook ran");
    assert_eq!(blocked_by(&engine, "pre_tool_use", "blocked"), 1);

    // Non-blocking: answered allow at once, the loaded hooks still run, counted skipped.
    let set = Arc::new(set);
    let (d, started) = observe(&engine, Arc::clone(&set), event("post_tool_use", "a", "a1"));
    assert_eq!(
        (d.decision, d.reason.clone(), started),
        (Verdict::Allow, None, 1)
    );
    assert_eq!(blocked_by(&engine, "post_tool_use", "skipped"), 1);
    for _ in 0..100 {
        if post_marker.exists() {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    assert!(
        post_marker.exists(),
        "the loaded non-blocking hook still ran"
    );
}

#[tokio::test]
async fn a_global_unavailable_hook_blocks_every_tenant() {
    let (set, _) = HookSet::build(
        vec![broken(
            MASTER,
            "global-bad",
            "user_prompt_submit",
            "scope: global",
        )],
        MASTER,
        Edition::Lite,
        1,
        None,
    );
    let engine = engine();
    for tenant in ["a", "b", "anyone"] {
        let d = decide(&engine, &set, event("user_prompt_submit", tenant, "x")).await;
        assert_eq!(
            (d.decision, d.reason.as_deref(), d.deciding_hook.as_deref()),
            (
                Verdict::Block,
                Some("HookUnavailable"),
                Some("agenthooks-system/global-bad")
            ),
            "tenant {tenant}"
        );
    }
    let d = decide(&engine, &set, event("pre_tool_use", "a", "x")).await;
    assert_eq!(d.decision, Verdict::Allow, "another event is not held");
    assert_eq!(blocked_by(&engine, "user_prompt_submit", "blocked"), 3);
}
