use super::*;
use crate::agenthook::AgentHookSpec;

const MASTER: &str = "agenthooks-system";

fn spec(yaml: &str) -> AgentHookSpec {
    serde_norway::from_str(yaml).expect("test spec parses")
}

fn ctx(ns: &'static str, edition: Edition) -> ValidationContext<'static> {
    ValidationContext {
        namespace: ns,
        namespace_tenant: if ns == "tenant-acme" { "acme" } else { ns },
        master_namespace: MASTER,
        edition,
        command_hooks: CommandHookPolicy::AnyNamespace,
    }
}

fn lite(ns: &'static str) -> ValidationContext<'static> {
    ctx(ns, Edition::Lite)
}

fn reasons(r: Result<CompiledHook, ValidationErrors>) -> Vec<(&'static str, Reason)> {
    match r {
        Ok(_) => vec![],
        Err(e) => e.0.into_iter().map(|f| (f.field, f.reason)).collect(),
    }
}

const HTTP: &str =
    "event: pre_tool_use\nhandler: {type: http, http: {url: 'https://policy.example.com/hook'}}\n";

#[test]
fn defaults_timeout_5000_and_on_timeout_by_event() {
    let h = validate(&spec(HTTP), &lite("tenant-acme")).unwrap();
    assert_eq!(h.timeout_ms, 5000);
    assert_eq!(
        h.on_timeout,
        OnTimeout::Block,
        "blocking event defaults to block"
    );
    assert_eq!(h.tenant, "acme");
    assert!(!h.master);
    let s = spec(
        "event: post_tool_use\ntimeoutMs: 0\nhandler: {type: http, http: {url: 'https://x.example'}}",
    );
    let h = validate(&s, &lite("tenant-acme")).unwrap();
    assert_eq!(h.timeout_ms, 5000, "0 means the default");
    assert_eq!(
        h.on_timeout,
        OnTimeout::Allow,
        "non-blocking event defaults to allow"
    );
}

#[test]
fn timeout_bounds() {
    for (t, ok) in [(-1i64, false), (1, true), (10_000, true), (10_001, false)] {
        let mut s = spec(HTTP);
        s.timeout_ms = Some(t);
        let r = validate(&s, &lite("tenant-acme"));
        assert_eq!(r.is_ok(), ok, "timeoutMs {t}");
        if !ok {
            assert_eq!(reasons(r), vec![("spec.timeoutMs", Reason::InvalidTimeout)]);
        }
    }
}

#[test]
fn explicit_on_timeout_wins() {
    let mut s = spec(HTTP);
    s.on_timeout = Some(OnTimeout::Allow);
    assert_eq!(
        validate(&s, &lite("tenant-acme")).unwrap().on_timeout,
        OnTimeout::Allow
    );
}

#[test]
fn prompt_needs_filter_and_template() {
    let s = spec(
        "event: pre_tool_use\nhandler: {type: prompt, prompt: {promptTemplate: 'Is it safe?'}}",
    );
    assert_eq!(
        reasons(validate(&s, &lite("tenant-acme"))),
        vec![("spec.matcher", Reason::PromptNeedsFilter)]
    );
    let s = spec(
        "event: pre_tool_use\nmatcher: exec\nhandler: {type: prompt, prompt: {promptTemplate: '  '}}",
    );
    assert_eq!(
        reasons(validate(&s, &lite("tenant-acme"))),
        vec![("spec.handler.prompt.promptTemplate", Reason::InvalidField)]
    );
    let s = spec(
        "event: pre_tool_use\nifExpr: depth > 1\nhandler: {type: prompt, prompt: {promptTemplate: 'x', maxInvocationsPerTurn: 9}}",
    );
    assert_eq!(
        validate(&s, &lite("tenant-acme"))
            .unwrap()
            .max_invocations_per_turn,
        9
    );
    let s = spec(
        "event: pre_tool_use\nmatcher: exec\nhandler: {type: prompt, prompt: {promptTemplate: 'x'}}",
    );
    assert_eq!(
        validate(&s, &lite("tenant-acme"))
            .unwrap()
            .max_invocations_per_turn,
        5
    );
}

#[test]
fn exactly_the_named_handler_block() {
    let s = spec("event: pre_tool_use\nhandler: {type: http, command: {command: 'true'}}");
    assert_eq!(
        reasons(validate(&s, &lite("tenant-acme"))),
        vec![("spec.handler", Reason::HandlerMismatch)]
    );
    let s = spec(
        "event: pre_tool_use\nhandler: {type: http, http: {url: 'https://a.example'}, command: {command: 'true'}}",
    );
    assert_eq!(
        reasons(validate(&s, &lite("tenant-acme"))),
        vec![("spec.handler", Reason::HandlerMismatch)]
    );
}

#[test]
fn bad_regex_and_bad_cel_name_their_field() {
    let mut s = spec(HTTP);
    s.matcher = "(unclosed".into();
    s.if_expr = "tool_name ==".into();
    let e = validate(&s, &lite("tenant-acme")).unwrap_err();
    assert_eq!(e.0.len(), 2);
    assert_eq!(
        (e.0[0].field, e.0[0].reason),
        ("spec.matcher", Reason::InvalidMatcher)
    );
    assert_eq!(
        (e.0[1].field, e.0[1].reason),
        ("spec.ifExpr", Reason::InvalidIfExpr)
    );
    assert!(
        e.to_string()
            .starts_with("spec.matcher: \"(unclosed\" is not a valid regex"),
        "{e}"
    );
}

#[test]
fn matcher_is_unanchored() {
    let mut s = spec(HTTP);
    s.matcher = "mcp__github__.*".into();
    let h = validate(&s, &lite("tenant-acme")).unwrap();
    assert!(h.matcher.unwrap().is_match("xmcp__github__create_issue"));
}

#[test]
fn global_only_in_master_namespace() {
    let mut s = spec(HTTP);
    s.scope = HookScope::Global;
    assert_eq!(
        reasons(validate(&s, &lite("tenant-acme"))),
        vec![("spec.scope", Reason::GlobalOutsideMasterNamespace)]
    );
    let h = validate(&s, &lite(MASTER)).unwrap();
    assert!(h.master);
}

#[test]
fn agent_scope_iff_agent_ids() {
    let mut s = spec(HTTP);
    s.scope = HookScope::Agent;
    assert_eq!(
        reasons(validate(&s, &lite("tenant-acme"))),
        vec![("spec.agentIds", Reason::AgentIdsRequired)]
    );
    s.agent_ids = vec!["a1".into()];
    assert!(validate(&s, &lite("tenant-acme")).is_ok());
    s.scope = HookScope::Tenant;
    assert_eq!(
        reasons(validate(&s, &lite("tenant-acme"))),
        vec![("spec.agentIds", Reason::AgentIdsWithoutAgentScope)]
    );
}

#[test]
fn tenant_must_match_namespace_tenant_outside_master() {
    let mut s = spec(HTTP);
    s.tenant = Some("globex".into());
    assert_eq!(
        reasons(validate(&s, &lite("tenant-acme"))),
        vec![("spec.tenant", Reason::TenantMismatch)]
    );
    s.tenant = Some("acme".into());
    assert_eq!(validate(&s, &lite("tenant-acme")).unwrap().tenant, "acme");
    s.tenant = Some("globex".into());
    assert_eq!(
        validate(&s, &lite(MASTER)).unwrap().tenant,
        "globex",
        "the master namespace may name any tenant"
    );
}

#[test]
fn command_only_on_lite() {
    let s = spec("event: pre_tool_use\nhandler: {type: command, command: {command: 'exit 0'}}");
    assert!(validate(&s, &lite("tenant-acme")).is_ok());
    assert_eq!(
        reasons(validate(&s, &ctx("tenant-acme", Edition::Standard))),
        vec![("spec.handler.type", Reason::EditionForbidsCommand)]
    );
}

#[test]
fn url_rules() {
    for bad in [
        "file:///etc/passwd",
        "gopher://127.0.0.1:6379/_INFO",
        "http://[fe80::1%25eth0]/",
        "http://evil.example@127.0.0.1/",
        "http://user:pw@example.com/",
        "not a url",
    ] {
        assert!(check_hook_url(bad).is_err(), "{bad}");
        let mut s = spec(HTTP);
        s.handler.http.as_mut().unwrap().url = bad.into();
        assert_eq!(
            reasons(validate(&s, &lite("tenant-acme"))),
            vec![("spec.handler.http.url", Reason::InvalidUrl)],
            "{bad}"
        );
    }
    assert!(check_hook_url("https://policy.example.com/hook").is_ok());
}

#[test]
fn header_rules() {
    let base = "event: pre_tool_use\nhandler: {type: http, http: {url: 'https://a.example', headers: [HEADER]}}";
    let ok = spec(&base.replace(
        "HEADER",
        "{name: Authorization, valueFrom: {secretKeyRef: {name: tok, key: token}}}",
    ));
    assert!(validate(&ok, &lite("tenant-acme")).is_ok());
    for bad in [
        "{name: Host, value: x}",
        "{name: 'bad name', value: x}",
        "{name: X-A}",
        "{name: X-A, value: x, valueFrom: {secretKeyRef: {name: a, key: b}}}",
        "{name: X-A, value: \"a\\r\\nB: c\"}",
    ] {
        let s = spec(&base.replace("HEADER", bad));
        assert_eq!(
            reasons(validate(&s, &lite("tenant-acme"))),
            vec![("spec.handler.http.headers", Reason::InvalidHeader)],
            "{bad}"
        );
    }
}

#[test]
fn messages_name_the_field_and_rule() {
    let mut s = spec(HTTP);
    s.timeout_ms = Some(20_000);
    let e = validate(&s, &lite("tenant-acme")).unwrap_err();
    assert_eq!(
        e.to_string(),
        "spec.timeoutMs: 20000 ms is over the 10000 ms maximum"
    );
    assert_eq!(e.reason().as_str(), "InvalidTimeout");
}

#[test]
fn allow_rewrite_only_in_the_master_namespace() {
    const JUDGE: &str = "event: pre_tool_use\nmatcher: exec\nhandler: {type: prompt, prompt: {promptTemplate: 'x', allowRewrite: true}}";
    let e = validate(&spec(JUDGE), &lite("tenant-acme")).unwrap_err();
    assert_eq!(
        reasons(Err(e.clone())),
        vec![(
            "spec.handler.prompt.allowRewrite",
            Reason::RewriteOutsideMasterNamespace
        )]
    );
    assert_eq!(e.reason().as_str(), "RewriteOutsideMasterNamespace");
    let message = e.to_string();
    assert!(
        message.starts_with("spec.handler.prompt.allowRewrite: allowRewrite: true is accepted only in the master namespace \"agenthooks-system\""),
        "{message}"
    );
    assert!(message.contains("prompt.2"), "{message}");
    // Accepted in the master namespace, on Standard too.
    assert!(validate(&spec(JUDGE), &lite(MASTER)).is_ok());
    assert!(validate(&spec(JUDGE), &ctx(MASTER, Edition::Standard)).is_ok());
    // The default (absent) and an explicit false are accepted anywhere.
    let default = spec(
        "event: pre_tool_use\nmatcher: exec\nhandler: {type: prompt, prompt: {promptTemplate: 'x'}}",
    );
    assert!(!default.handler.prompt.as_ref().unwrap().allow_rewrite);
    assert!(validate(&default, &lite("tenant-acme")).is_ok());
    let off = spec(
        "event: pre_tool_use\nmatcher: exec\nhandler: {type: prompt, prompt: {promptTemplate: 'x', allowRewrite: false}}",
    );
    assert!(validate(&off, &lite("tenant-acme")).is_ok());
}

const COMMAND: &str =
    "event: pre_tool_use\nhandler: {type: command, command: {command: 'exit 0'}}\n";

#[test]
fn command_hooks_only_in_the_master_namespace_unless_allowed() {
    let master_only = |ns: &'static str| ValidationContext {
        command_hooks: CommandHookPolicy::MasterOnly,
        ..lite(ns)
    };
    let r = validate(&spec(COMMAND), &master_only("tenant-acme"));
    assert_eq!(
        reasons(r),
        vec![("spec.handler.type", Reason::CommandHookNotAllowed)]
    );
    let e = validate(&spec(COMMAND), &master_only("tenant-acme")).unwrap_err();
    assert_eq!(e.reason().as_str(), "CommandHookNotAllowed");
    assert!(e.to_string().contains("agenthooks-system"), "{e}");
    assert!(
        e.to_string().contains("--allow-tenant-command-hooks"),
        "{e}"
    );
    // The master namespace, and tenants when allowed, are fine.
    assert!(validate(&spec(COMMAND), &master_only(MASTER)).is_ok());
    assert!(validate(&spec(COMMAND), &lite("tenant-acme")).is_ok());
    // Other handlers are not concerned.
    assert!(validate(&spec(HTTP), &master_only("tenant-acme")).is_ok());
    // Standard refuses command everywhere, with its own reason only.
    let std_ctx = ValidationContext {
        command_hooks: CommandHookPolicy::MasterOnly,
        ..ctx("tenant-acme", Edition::Standard)
    };
    assert_eq!(
        reasons(validate(&spec(COMMAND), &std_ctx)),
        vec![("spec.handler.type", Reason::EditionForbidsCommand)]
    );
    assert_eq!(CommandHookPolicy::default(), CommandHookPolicy::MasterOnly);
}

/// Issue 16: `blocking` is for post_tool_use, stop and subagent_stop hooks, and makes the
/// event wait for them (with onTimeout block by default); the other events refuse it.
#[test]
fn blocking_is_for_post_tool_use_and_stops_only() {
    for (event, ok) in [
        ("post_tool_use", true),
        ("stop", true),
        ("subagent_stop", true),
        ("pre_tool_use", false),
        ("user_prompt_submit", false),
        ("session_start", false),
        ("subagent_start", false),
    ] {
        let s = spec(&format!(
            "event: {event}\nblocking: true\nhandler: {{type: http, http: {{url: 'https://x.example'}}}}"
        ));
        let r = validate(&s, &lite("tenant-acme"));
        assert_eq!(r.is_ok(), ok, "{event}");
        match r {
            Ok(h) => {
                assert!(h.waits, "{event}");
                assert_eq!(h.on_timeout, OnTimeout::Block, "{event} waits: fail-closed");
            }
            Err(_) => assert_eq!(
                reasons(validate(&s, &lite("tenant-acme"))),
                vec![("spec.blocking", Reason::InvalidField)]
            ),
        }
    }
    let s = spec(
        "event: stop\nblocking: false\nhandler: {type: http, http: {url: 'https://x.example'}}",
    );
    let h = validate(&s, &lite("tenant-acme")).unwrap();
    assert!(!h.waits);
    assert_eq!(h.on_timeout, OnTimeout::Allow);
}

#[test]
fn approval_ttl_bounds() {
    for (ttl, ok) in [
        (-1i64, false),
        (0, true),
        (60, true),
        (604_800, true),
        (604_801, false),
    ] {
        let s = spec(&format!(
            "event: pre_tool_use\napproval: {{ttlSeconds: {ttl}}}\nhandler: {{type: http, http: {{url: 'https://x.example'}}}}"
        ));
        let r = validate(&s, &lite("tenant-acme"));
        assert_eq!(r.is_ok(), ok, "ttlSeconds {ttl}");
        if !ok {
            assert_eq!(
                reasons(r),
                vec![("spec.approval.ttlSeconds", Reason::InvalidField)]
            );
        }
    }
}
