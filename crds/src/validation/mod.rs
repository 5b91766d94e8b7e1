//! The one validation function (CONTRACT §2), used by the operator's reconciler, the
//! dispatcher when it loads a snapshot or a hooks file, and by `check`.
//!
//! It checks what the CRD schema cannot (regex and CEL compile, scope against the
//! namespace, tenant, edition) and re-checks what the schema says (so a hooks file, which
//! never met an API server, gets the same answers). On success it returns the compiled
//! hook; on failure every broken rule, each naming the field, the rule and what to do.

use std::fmt;

use crate::agenthook::{
    AgentHookSpec, DEFAULT_MAX_INVOCATIONS_PER_TURN, DEFAULT_TIMEOUT_MS, HandlerType, HookScope,
    MAX_TIMEOUT_MS, OnTimeout,
};
use crate::expr::IfExpr;
use crate::tenancy::Edition;

pub mod hook_url;
pub use hook_url::{UrlError, check_hook_url};

/// Where a hook lives and which rules apply to it.
#[derive(Debug, Clone, Copy)]
pub struct ValidationContext<'a> {
    /// The hook's namespace.
    pub namespace: &'a str,
    /// That namespace's tenant ([`crate::tenancy::namespace_tenant`]).
    pub namespace_tenant: &'a str,
    /// The master namespace (`--master-namespace`).
    pub master_namespace: &'a str,
    pub edition: Edition,
    /// Where command hooks are accepted on Lite (CONTRACT §10.1).
    pub command_hooks: CommandHookPolicy,
}

/// Which namespaces may hold command hooks on Lite (CONTRACT §10.1). A command hook runs
/// a shell in the platform's runner, so by default in a cluster only the master
/// namespace may have one; the platform team opts tenant namespaces in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum CommandHookPolicy {
    /// Only hooks in the master namespace (the operator's default; refusal reason
    /// `CommandHookNotAllowed`).
    #[default]
    MasterOnly,
    /// Any namespace (operator `--allow-tenant-command-hooks`; the dispatcher's own
    /// check, since a hooks file has no tenants and a snapshot was checked by the
    /// operator).
    AnyNamespace,
}

/// Reason of a refusal: the `reason` of the `Accepted=False` condition (CamelCase, as
/// Kubernetes API conventions want).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reason {
    InvalidTimeout,
    InvalidMatcher,
    InvalidIfExpr,
    HandlerMismatch,
    PromptNeedsFilter,
    GlobalOutsideMasterNamespace,
    RewriteOutsideMasterNamespace,
    TenantMismatch,
    AgentIdsRequired,
    AgentIdsWithoutAgentScope,
    EditionForbidsCommand,
    CommandHookNotAllowed,
    InvalidUrl,
    InvalidHeader,
    InvalidField,
}

impl Reason {
    /// The CamelCase word.
    pub fn as_str(self) -> &'static str {
        match self {
            Reason::InvalidTimeout => "InvalidTimeout",
            Reason::InvalidMatcher => "InvalidMatcher",
            Reason::InvalidIfExpr => "InvalidIfExpr",
            Reason::HandlerMismatch => "HandlerMismatch",
            Reason::PromptNeedsFilter => "PromptNeedsFilter",
            Reason::GlobalOutsideMasterNamespace => "GlobalOutsideMasterNamespace",
            Reason::RewriteOutsideMasterNamespace => "RewriteOutsideMasterNamespace",
            Reason::TenantMismatch => "TenantMismatch",
            Reason::AgentIdsRequired => "AgentIdsRequired",
            Reason::AgentIdsWithoutAgentScope => "AgentIdsWithoutAgentScope",
            Reason::EditionForbidsCommand => "EditionForbidsCommand",
            Reason::CommandHookNotAllowed => "CommandHookNotAllowed",
            Reason::InvalidUrl => "InvalidUrl",
            Reason::InvalidHeader => "InvalidHeader",
            Reason::InvalidField => "InvalidField",
        }
    }
}

/// One broken rule.
#[derive(Debug, Clone, PartialEq)]
pub struct FieldError {
    /// JSON path of the field, e.g. `spec.timeoutMs`.
    pub field: &'static str,
    pub reason: Reason,
    /// What is wrong and what to do, for a person.
    pub message: String,
}

impl fmt::Display for FieldError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.field, self.message)
    }
}

/// Every broken rule of one hook (never empty).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub struct ValidationErrors(pub Vec<FieldError>);

impl ValidationErrors {
    /// The reason of the first error (the condition's reason).
    pub fn reason(&self) -> Reason {
        self.0.first().map_or(Reason::InvalidField, |e| e.reason)
    }
}

impl fmt::Display for ValidationErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, e) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str("; ")?;
            }
            write!(f, "{e}")?;
        }
        Ok(())
    }
}

/// A validated hook with everything compiled: what the dispatcher runs.
#[derive(Debug)]
pub struct CompiledHook {
    /// The hook's effective tenant (`spec.tenant` or the namespace's).
    pub tenant: String,
    /// Lives in the master namespace (may rewrite input, may be global).
    pub master: bool,
    /// Effective timeout in milliseconds (absent or 0 → 5000).
    pub timeout_ms: u64,
    /// Effective `onTimeout` (absent → block for blocking events, allow otherwise).
    pub on_timeout: OnTimeout,
    /// `spec.enforcementAction` (absent → `enforce`).
    pub enforcement_action: crate::agenthook::EnforcementAction,
    /// `spec.onError` (absent → `block`).
    pub on_error: crate::agenthook::OnError,
    /// The event waits for this hook ([`AgentHookSpec::waits`]).
    pub waits: bool,
    /// Compiled `matcher`, `None` when empty.
    pub matcher: Option<std::sync::Arc<crate::expr::LazyRegex>>,
    /// Compiled `ifExpr`, `None` when empty.
    pub if_expr: Option<std::sync::Arc<IfExpr>>,
    /// `spec.toolKinds`, sorted and without repeats; empty matches every event.
    pub tool_kinds: Vec<crate::tool::ToolKind>,
    /// Effective prompt per-turn cap.
    pub max_invocations_per_turn: u32,
}

/// Validates `spec` in `ctx` (CONTRACT §2) and compiles it.
///
/// Errors: every broken rule, each with the field, a CamelCase reason and a message.
pub fn validate(
    spec: &AgentHookSpec,
    ctx: &ValidationContext<'_>,
) -> Result<CompiledHook, ValidationErrors> {
    let mut errors = Vec::new();
    let mut err = |field: &'static str, reason: Reason, message: String| {
        errors.push(FieldError {
            field,
            reason,
            message,
        });
    };

    // §2.1 timeoutMs
    let timeout_ms = match spec.timeout_ms {
        None | Some(0) => DEFAULT_TIMEOUT_MS,
        Some(t) if t < 0 => {
            err(
                "spec.timeoutMs",
                Reason::InvalidTimeout,
                format!(
                    "{t} is negative; use 1..{MAX_TIMEOUT_MS} ms, or 0 / omit it for the 5000 ms default"
                ),
            );
            DEFAULT_TIMEOUT_MS
        }
        Some(t) if t as u64 > MAX_TIMEOUT_MS => {
            err(
                "spec.timeoutMs",
                Reason::InvalidTimeout,
                format!("{t} ms is over the {MAX_TIMEOUT_MS} ms maximum"),
            );
            DEFAULT_TIMEOUT_MS
        }
        Some(t) => t as u64,
    };
    // §2.2 onTimeout
    let on_timeout = spec.effective_on_timeout();
    // issue 16: approval
    if let Some(ttl) = spec.approval.as_ref().and_then(|a| a.ttl_seconds)
        && !(0..=crate::approval::MAX_APPROVAL_TTL_SECONDS).contains(&ttl)
    {
        err(
            "spec.approval.ttlSeconds",
            Reason::InvalidField,
            format!(
                "{ttl} is outside 0..={} seconds (0 or absent: 3600)",
                crate::approval::MAX_APPROVAL_TTL_SECONDS
            ),
        );
    }
    // issue 16: blocking
    if spec.blocking.is_some() && !spec.event.may_wait() {
        err(
            "spec.blocking",
            Reason::InvalidField,
            format!(
                "{} hooks cannot set blocking: only post_tool_use, stop and subagent_stop hooks may be declared blocking",
                spec.event.as_str()
            ),
        );
    }

    // exactly one handler block, the one named by type
    let h = &spec.handler;
    let blocks = [
        (HandlerType::Command, h.command.is_some()),
        (HandlerType::Http, h.http.is_some()),
        (HandlerType::Prompt, h.prompt.is_some()),
    ];
    let set: Vec<&str> = blocks
        .iter()
        .filter(|(_, s)| *s)
        .map(|(t, _)| t.as_str())
        .collect();
    if set != [h.type_.as_str()] {
        err(
            "spec.handler",
            Reason::HandlerMismatch,
            format!(
                "handler.type is {} but the blocks set are [{}]; set exactly handler.{}",
                h.type_.as_str(),
                set.join(", "),
                h.type_.as_str()
            ),
        );
    }

    // §2.4 matcher and ifExpr
    let matcher = if spec.matcher.is_empty() {
        None
    } else {
        match crate::expr::shared_regex(&spec.matcher) {
            Ok(re) => Some(re),
            Err(e) => {
                err(
                    "spec.matcher",
                    Reason::InvalidMatcher,
                    format!("{:?} is not a valid regex: {e}", spec.matcher),
                );
                None
            }
        }
    };
    let if_expr = if spec.if_expr.is_empty() {
        None
    } else {
        match IfExpr::shared(&spec.if_expr) {
            Ok(e) => Some(e),
            Err(e) => {
                err(
                    "spec.ifExpr",
                    Reason::InvalidIfExpr,
                    format!("the expression {e}"),
                );
                None
            }
        }
    };

    // §2.3 prompt
    let mut max_invocations_per_turn = DEFAULT_MAX_INVOCATIONS_PER_TURN;
    if h.type_ == HandlerType::Prompt {
        if spec.matcher.is_empty() && spec.if_expr.is_empty() && spec.tool_kinds.is_empty() {
            err(
                "spec.matcher",
                Reason::PromptNeedsFilter,
                "a prompt hook needs a non-empty matcher, toolKinds or ifExpr, so the model is not called on every event".into(),
            );
        }
        if let Some(p) = &h.prompt {
            if p.prompt_template.trim().is_empty() {
                err(
                    "spec.handler.prompt.promptTemplate",
                    Reason::InvalidField,
                    "must not be empty".into(),
                );
            }
            if let Some(n) = p.max_invocations_per_turn {
                if n == 0 {
                    err(
                        "spec.handler.prompt.maxInvocationsPerTurn",
                        Reason::InvalidField,
                        "must be at least 1".into(),
                    );
                }
                max_invocations_per_turn = n.max(1);
            }
        }
    }

    // command
    if let Some(c) = &h.command {
        if h.type_ == HandlerType::Command && ctx.edition == Edition::Standard {
            err(
                "spec.handler.type",
                Reason::EditionForbidsCommand,
                "the command handler runs only on the Lite edition; use http or prompt on Standard"
                    .into(),
            );
        }
        if h.type_ == HandlerType::Command
            && ctx.edition == Edition::Lite
            && ctx.command_hooks == CommandHookPolicy::MasterOnly
            && ctx.namespace != ctx.master_namespace
        {
            err(
                "spec.handler.type",
                Reason::CommandHookNotAllowed,
                format!(
                    "command hooks are accepted only in the master namespace {:?} here; use an http or prompt hook, or ask the platform team to allow tenant namespaces (operator --allow-tenant-command-hooks, Helm value operator.allowTenantCommandHooks)",
                    ctx.master_namespace
                ),
            );
        }
        if c.command.trim().is_empty() {
            err(
                "spec.handler.command.command",
                Reason::InvalidField,
                "must not be empty".into(),
            );
        }
        for v in &c.allowed_env_vars {
            if v.is_empty() || v.contains('=') || v.contains('\0') {
                err(
                    "spec.handler.command.allowedEnvVars",
                    Reason::InvalidField,
                    format!("{v:?} is not an environment variable name"),
                );
            }
        }
    }

    // http
    if let Some(hh) = &h.http {
        if let Err(e) = check_hook_url(&hh.url) {
            err(
                "spec.handler.http.url",
                Reason::InvalidUrl,
                format!("{:?}: {e}", hh.url),
            );
        }
        for header in &hh.headers {
            if let Err(m) = check_header(header) {
                err("spec.handler.http.headers", Reason::InvalidHeader, m);
            }
        }
    }

    // §2.5 scope and tenant
    let master = ctx.namespace == ctx.master_namespace;
    // §5 prompt.2: only a master-namespace judge may opt in to rewriting the call.
    if let Some(p) = &h.prompt
        && p.allow_rewrite
        && !master
    {
        err(
            "spec.handler.prompt.allowRewrite",
            Reason::RewriteOutsideMasterNamespace,
            format!(
                "allowRewrite: true is accepted only in the master namespace {:?} (CONTRACT §5 prompt.2: a tenant's judge decides allow or block, it never rewrites the call); remove it or create the hook there",
                ctx.master_namespace
            ),
        );
    }
    match spec.scope {
        HookScope::Global if !master => err(
            "spec.scope",
            Reason::GlobalOutsideMasterNamespace,
            format!(
                "scope global is accepted only in the master namespace {:?}; use scope tenant here, or create the hook there",
                ctx.master_namespace
            ),
        ),
        HookScope::Agent if spec.agent_ids.is_empty() => err(
            "spec.agentIds",
            Reason::AgentIdsRequired,
            "scope agent needs at least one agent id".into(),
        ),
        HookScope::Global | HookScope::Tenant if !spec.agent_ids.is_empty() => err(
            "spec.agentIds",
            Reason::AgentIdsWithoutAgentScope,
            "agentIds are used only with scope agent; remove them or set scope: agent".into(),
        ),
        _ => {}
    }
    let tenant = match &spec.tenant {
        Some(t) if !t.is_empty() => {
            if !master && t != ctx.namespace_tenant {
                err(
                    "spec.tenant",
                    Reason::TenantMismatch,
                    format!(
                        "{t:?} is not this namespace's tenant {:?}; omit spec.tenant or create the hook in the tenant's namespace",
                        ctx.namespace_tenant
                    ),
                );
            }
            t.clone()
        }
        _ => ctx.namespace_tenant.to_string(),
    };

    let mut tool_kinds = spec.tool_kinds.clone();
    tool_kinds.sort();
    tool_kinds.dedup();

    if !errors.is_empty() {
        return Err(ValidationErrors(errors));
    }
    Ok(CompiledHook {
        tenant,
        master,
        timeout_ms,
        on_timeout,
        enforcement_action: spec.enforcement_action.unwrap_or_default(),
        on_error: spec.on_error.unwrap_or_default(),
        waits: spec.waits(),
        matcher,
        if_expr,
        tool_kinds,
        max_invocations_per_turn,
    })
}

/// Request headers the dispatcher sets itself; a hook may not configure them (lowercase).
pub const RESERVED_HEADERS: [&str; 5] = [
    "host",
    "content-length",
    "content-type",
    "transfer-encoding",
    "connection",
];

/// Header rules: a valid token name, not one the dispatcher sets itself.
fn check_header(h: &crate::agenthook::HttpHeader) -> Result<(), String> {
    let name = h.name.as_str();
    let token = !name.is_empty()
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b));
    if !token {
        return Err(format!("{name:?} is not a valid header name"));
    }
    if RESERVED_HEADERS
        .iter()
        .any(|r| name.eq_ignore_ascii_case(r))
    {
        return Err(format!(
            "{name:?} is set by the dispatcher and cannot be configured"
        ));
    }
    if h.value.is_some() == h.value_from.is_some() {
        return Err(format!(
            "header {name:?}: set exactly one of value or valueFrom"
        ));
    }
    if let Some(v) = &h.value
        && v.bytes().any(|b| b == b'\r' || b == b'\n' || b == 0)
    {
        return Err(format!(
            "header {name:?}: the value holds a line break or NUL"
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests;
