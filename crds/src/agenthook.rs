//! The `AgentHook` custom resource (DESIGN "API: AgentHook").
//!
//! Schema-level rules (enums, bounds, "exactly one handler block", "prompt needs a
//! filter", "agent scope iff agentIds") live here as OpenAPI bounds and CEL
//! `x-kubernetes-validations`, so the API server refuses such objects itself. Rules that
//! need code (regex and CEL compile, tenant of a namespace, edition) live in
//! [`crate::validation`].

// kube's `printcolumn(...)` repeats `type_ = ...` across columns, which clippy reads as
// duplicated attributes.
#![allow(clippy::duplicated_attributes)]

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::{CustomResource, KubeSchema};
use serde::{Deserialize, Serialize};

use crate::event::HookEvent;

/// Default per-hook timeout, in milliseconds (seed "Safeguards summary": 5 s).
pub const DEFAULT_TIMEOUT_MS: u64 = 5_000;
/// Largest per-hook timeout, in milliseconds (seed: max 10 s).
pub const MAX_TIMEOUT_MS: u64 = 10_000;
/// Default prompt per-turn cap (seed: 5).
pub const DEFAULT_MAX_INVOCATIONS_PER_TURN: u32 = 5;

/// Spec of an AgentHook: what runs at one lifecycle event, for whom, in which order.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[kube(
    group = "agenthooks.io",
    version = "v1alpha1",
    kind = "AgentHook",
    plural = "agenthooks",
    shortname = "ah",
    category = "agenthooks",
    namespaced,
    status = "AgentHookStatus",
    derive = "PartialEq",
    doc = "A lifecycle hook for LLM agents: what runs at one event, for which tenant or agents.",
    printcolumn(name = "Event", type_ = "string", json_path = ".spec.event"),
    printcolumn(name = "Scope", type_ = "string", json_path = ".spec.scope"),
    printcolumn(name = "Handler", type_ = "string", json_path = ".spec.handler.type"),
    printcolumn(name = "Priority", type_ = "integer", json_path = ".spec.priority"),
    printcolumn(
        name = "Accepted",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Accepted\")].status"
    ),
    printcolumn(
        name = "Ready",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Ready\")].status"
    ),
    printcolumn(
        name = "Circuit",
        type_ = "string",
        json_path = ".status.breaker.state"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[x_kube(validation = Rule::new("self.scope != 'agent' || size(self.agentIds) > 0").message("spec.agentIds: scope agent needs at least one agent id").field_path(".agentIds"))]
#[x_kube(validation = Rule::new("self.scope == 'agent' || size(self.agentIds) == 0").message("spec.agentIds: only scope agent takes agent ids").field_path(".agentIds"))]
#[x_kube(validation = Rule::new("self.handler.type != 'prompt' || self.matcher != '' || self.ifExpr != '' || (has(self.toolKinds) && size(self.toolKinds) > 0)").message("spec.matcher/spec.toolKinds/spec.ifExpr: a prompt hook needs a non-empty matcher, toolKinds or ifExpr (runaway-cost guard)").field_path(".matcher"))]
#[x_kube(validation = Rule::new("!has(self.blocking) || !self.blocking || self.event in ['post_tool_use', 'stop', 'subagent_stop']").message("spec.blocking: only post_tool_use, stop and subagent_stop hooks take blocking: true (the others always wait or never can)").field_path(".blocking"))]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct AgentHookSpec {
    /// The lifecycle event this hook runs at.
    pub event: HookEvent,
    /// Who the hook applies to: `global` (master namespace only), `tenant`, or `agent`.
    #[serde(default)]
    pub scope: HookScope,
    /// Tenant of the hook; defaults to the namespace's tenant and, outside the master
    /// namespace, must equal it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 253))]
    pub tenant: Option<String>,
    /// Agents the hook applies to; required (non-empty) iff `scope` is `agent`.
    #[serde(default)]
    #[schemars(length(max = 64), inner(length(min = 1, max = 253)))]
    pub agent_ids: Vec<String>,
    /// Higher runs first; ties: oldest first, then namespace/name.
    #[serde(default)]
    pub priority: i32,
    /// A disabled hook never runs.
    #[serde(default = "default_true")]
    pub enabled: bool,
    /// Regex on `tool_name` (Rust `regex` syntax, unanchored); empty matches all events,
    /// non-empty never matches an event without a tool name.
    #[serde(default)]
    #[schemars(length(max = 1024))]
    pub matcher: String,
    /// Tool kinds the hook applies to (the canonical tool vocabulary: `shell`,
    /// `file_read`, `file_write`, `file_edit`, `web_fetch`, `web_search`, `mcp`,
    /// `subagent`, `other`), whatever each runtime calls the tool; empty matches all
    /// events, non-empty never matches an event without a tool. Both this and `matcher`
    /// must match when both are set.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 9))]
    pub tool_kinds: Vec<crate::tool::ToolKind>,
    /// CEL over `{tool_name, tool_input, depth, tool_kind, tool}` (`tool`: the call's
    /// normalised `command`, `cwd`, `paths`, `urls`, `query`, `mcp_server`, `mcp_tool`,
    /// `agent_type`, each present, empty when unknown); must be boolean; empty matches all.
    #[serde(default)]
    #[schemars(length(max = 2048))]
    pub if_expr: String,
    /// Per-hook timeout in milliseconds; absent or 0 means 5000; at most 10000.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = 10000))]
    pub timeout_ms: Option<i64>,
    /// What a timeout means; default `block` for blocking events, `allow` otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub on_timeout: Option<OnTimeout>,
    /// What the hook's refusals do (Gatekeeper's words): `enforce` (default) applies them;
    /// `warn` lets the call go on with the reason added to `additionalContext` (the audit
    /// row and metrics still record the hook's own answer); `dryrun` runs the hook off the
    /// decision's critical path where it can and records what it would have decided, which
    /// never changes the answer. `warn` and `dryrun` hooks never rewrite the call.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enforcement_action: Option<EnforcementAction>,
    /// A `post_tool_use`, `stop` or `subagent_stop` hook the event waits for (issue 16),
    /// within the chain budget: `post_tool_use` may then withhold the tool's output
    /// (`block`) or rewrite it (`updatedToolOutput`), `stop`/`subagent_stop` may answer
    /// `block` ("keep working"; bounded per session, see `stop_count`). Hooks of those
    /// events without it run in the background as before. Only those three events take it
    /// (the others always wait or never can).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub blocking: Option<bool>,
    /// What the hook's own outage means on a blocking event: `block` (default, fail-closed)
    /// or `allow`, for a hook declared non-critical. Only an outage counts — the handler
    /// could not be reached, spawned or run (transport, 5xx, runner unavailable, an open
    /// breaker, a model provider's failure); an answer that is wrong, a safeguard (budget,
    /// per-turn cap, SSRF guard, chain budget) or an `ifExpr` error still blocks. Timeouts
    /// follow `onTimeout`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub on_error: Option<OnError>,
    /// Approvals out of band (issue 16): an `ask` of this hook becomes a `HookApproval`
    /// a person answers; the call is refused (`ApprovalPending <id>`) until it is approved,
    /// and the same call within `ttlSeconds` is then allowed (or refused) without asking
    /// again. Needs an operator (synced mode).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub approval: Option<crate::approval::ApprovalPolicy>,
    /// What runs.
    pub handler: HandlerSpec,
}

impl AgentHookSpec {
    /// `onTimeout` as it applies (CONTRACT §2.2): the spec's, else `block` for blocking
    /// events and `allow` for the others.
    pub fn effective_on_timeout(&self) -> OnTimeout {
        self.on_timeout.unwrap_or(if self.waits() {
            OnTimeout::Block
        } else {
            OnTimeout::Allow
        })
    }

    /// Whether the event waits for this hook: a blocking event's hooks, and a hook declared
    /// `blocking: true` (`post_tool_use`, `stop`, `subagent_stop`).
    pub fn waits(&self) -> bool {
        self.event.is_blocking() || (self.blocking == Some(true) && self.event.may_wait())
    }

    /// `timeoutMs` as it applies to a valid spec (CONTRACT §2.1): absent or 0 is
    /// [`DEFAULT_TIMEOUT_MS`].
    pub fn effective_timeout_ms(&self) -> u64 {
        match self.timeout_ms {
            None | Some(0) => DEFAULT_TIMEOUT_MS,
            Some(t) => t.max(0) as u64,
        }
    }
}

impl OnTimeout {
    /// `allow` or `block`.
    pub fn as_str(self) -> &'static str {
        match self {
            OnTimeout::Allow => "allow",
            OnTimeout::Block => "block",
        }
    }
}

fn default_true() -> bool {
    true
}

fn is_zero_i64(n: &i64) -> bool {
    *n == 0
}

/// Scope of a hook (seed "Scopes").
#[derive(
    Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Default, schemars::JsonSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum HookScope {
    Global,
    #[default]
    Tenant,
    Agent,
}

/// Decision taken when a hook times out.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum OnTimeout {
    Allow,
    Block,
}

/// What a hook's refusals do (`spec.enforcementAction`; Gatekeeper's `enforcementAction`).
#[derive(
    Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Default, Hash, schemars::JsonSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum EnforcementAction {
    /// A `block` blocks, an `ask` asks.
    #[default]
    Enforce,
    /// A `block` or an `ask` becomes a warning in `additionalContext`; the call goes on.
    Warn,
    /// The hook's answer is recorded and never changes the decision.
    Dryrun,
}

impl EnforcementAction {
    /// `enforce`, `warn` or `dryrun`.
    pub fn as_str(self) -> &'static str {
        match self {
            EnforcementAction::Enforce => "enforce",
            EnforcementAction::Warn => "warn",
            EnforcementAction::Dryrun => "dryrun",
        }
    }
}

/// What a hook's outage means on a blocking event (`spec.onError`).
#[derive(
    Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Default, schemars::JsonSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum OnError {
    /// Fail closed: the chain stops with `block`.
    #[default]
    Block,
    /// The chain goes on as if the hook had allowed (no context, no rewrite).
    Allow,
}

/// Handler type (seed "Handler types").
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum HandlerType {
    Command,
    Http,
    Prompt,
}

impl HandlerType {
    /// `command`, `http` or `prompt`.
    pub fn as_str(self) -> &'static str {
        match self {
            HandlerType::Command => "command",
            HandlerType::Http => "http",
            HandlerType::Prompt => "prompt",
        }
    }
}

/// The handler: `type` plus exactly the matching block.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[x_kube(validation = Rule::new("has(self.command) == (self.type == 'command') && has(self.http) == (self.type == 'http') && has(self.prompt) == (self.type == 'prompt')").message("spec.handler: exactly the block named by spec.handler.type must be set (command, http or prompt)"))]
#[serde(deny_unknown_fields)]
pub struct HandlerSpec {
    /// `command` (Lite only), `http` or `prompt`.
    #[serde(rename = "type")]
    pub type_: HandlerType,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub command: Option<CommandHandlerSpec>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub http: Option<HttpHandlerSpec>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompt: Option<PromptHandlerSpec>,
}

/// `command` handler: `sh -c <command>` with the event on stdin (CONTRACT §5 command).
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CommandHandlerSpec {
    #[schemars(length(min = 1, max = 4096))]
    pub command: String,
    /// Environment variables passed through from the dispatcher; nothing else is.
    #[serde(default)]
    #[schemars(length(max = 64), inner(length(min = 1, max = 256)))]
    pub allowed_env_vars: Vec<String>,
    /// Working directory; must exist when the hook runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 4096))]
    pub cwd: Option<String>,
    /// The hook language the command speaks: `agenthooks` (default: our event JSON on
    /// stdin; exit 2 blocks, stdout `{"continue": false}`, `additionalContext`,
    /// `updatedInput`) or `claude-code` (a team's existing Claude Code hook, unchanged:
    /// Claude Code's payload on stdin, its answers read — `decision: "block"`,
    /// `hookSpecificOutput.permissionDecision`, `additionalContext`, `updatedInput`).
    #[serde(default, skip_serializing_if = "CommandDialect::is_default")]
    pub dialect: CommandDialect,
}

/// The hook language of a command hook (`spec.handler.command.dialect`).
#[derive(
    Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, schemars::JsonSchema,
)]
#[serde(rename_all = "kebab-case")]
pub enum CommandDialect {
    /// Our event JSON in, our answers out.
    #[default]
    Agenthooks,
    /// Claude Code's hook payload in, its answers out.
    ClaudeCode,
}

impl CommandDialect {
    /// Whether this is the default (`agenthooks`): not written out.
    pub fn is_default(&self) -> bool {
        *self == CommandDialect::Agenthooks
    }
}

/// `http` handler: POST of the event JSON (CONTRACT §5 http).
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct HttpHandlerSpec {
    /// `http://` or `https://` URL, no userinfo.
    #[schemars(length(min = 1, max = 2048))]
    pub url: String,
    #[serde(default)]
    #[schemars(length(max = 32))]
    pub headers: Vec<HttpHeader>,
}

/// One request header: a literal `value` or a `valueFrom.secretKeyRef`.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[x_kube(validation = Rule::new("has(self.value) != has(self.valueFrom)").message("spec.handler.http.headers[]: set exactly one of value or valueFrom"))]
pub struct HttpHeader {
    #[schemars(length(min = 1, max = 256))]
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 8192))]
    pub value: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value_from: Option<HeaderValueSource>,
}

/// Where a header value comes from: a Secret whose owner opted in to hook use.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct HeaderValueSource {
    pub secret_key_ref: SecretKeyRef,
}

/// A key of a Secret in the hook's namespace. The Secret must carry the label
/// `agenthooks.io/hook-secret: "true"`, its owner's opt-in (CONTRACT §9.6): permission to
/// create an AgentHook is not permission to read the namespace's Secrets. Without it the
/// hook is `Accepted=False` with reason `SecretNotOptedIn`, naming the Secret; labelling the
/// Secret accepts the hook, removing the label refuses it again (the value is no longer
/// sent). The value is sealed into the snapshots the dispatchers receive; one trailing line
/// break is dropped.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct SecretKeyRef {
    /// Name of the Secret (in the hook's namespace).
    #[schemars(length(min = 1, max = 253))]
    pub name: String,
    /// Key inside the Secret's `data`.
    #[schemars(length(min = 1, max = 253))]
    pub key: String,
}

/// `prompt` handler: an LLM decides through a `decide` tool call (CONTRACT §5 prompt).
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PromptHandlerSpec {
    #[schemars(length(min = 1, max = 16384))]
    pub prompt_template: String,
    /// Model alias (e.g. `haiku`) resolved by the dispatcher's provider configuration.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 253))]
    pub model: Option<String>,
    /// Evaluator calls allowed per `turn_id`; default 5.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 1000))]
    pub max_invocations_per_turn: Option<u32>,
    /// Whether the model's `updated_input` may rewrite the tool call (CONTRACT §5
    /// prompt.2). Default `false`: the judge only decides allow/block and any rewrite it
    /// proposes is dropped. `true` is accepted only in the master namespace, and even then
    /// a rewrite is never applied when the model reports `injection_detected`.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub allow_rewrite: bool,
}

/// Status of an AgentHook, written by the operator and dispatchers.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct AgentHookStatus {
    /// The `metadata.generation` the conditions describe.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// `Accepted`, `Ready`, `CircuitOpen` (Kubernetes API conventions).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[x_kube(merge_strategy = ListMerge::Map(vec!["type".into()]))]
    pub conditions: Vec<Condition>,
    /// Circuit-breaker state, when it has tripped.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub breaker: Option<BreakerStatus>,
    /// Execution counts by decision.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub executions: Option<ExecutionsStatus>,
}

/// Breaker state (CONTRACT §6). A breaker is kept per tenant: `open` lists the tenants
/// whose events the hook answers as its fault; `state` is `Open` while that list is not
/// empty. The other fields describe the newest trip.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct BreakerStatus {
    /// `Open` (some tenant's breaker is open) or `Closed`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tripped_at: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// The dispatcher that tripped it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dispatcher: Option<String>,
    /// The `metadata.generation` that tripped: a new generation closes the breaker.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub generation: Option<i64>,
    /// The `agenthooks.io/reset-breaker` annotation value when it tripped: a different
    /// value closes the breaker (CONTRACT §6.3).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reset_annotation: Option<String>,
    /// The open breakers, one per tenant, oldest first (at most 256).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 256))]
    pub open: Vec<TenantBreakerStatus>,
}

/// One tenant's open breaker of a hook.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct TenantBreakerStatus {
    #[schemars(length(max = 256))]
    pub tenant: String,
    /// When it opened (RFC 3339 UTC).
    pub tripped_at: String,
    /// Why (one sentence).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// The dispatcher that tripped it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dispatcher: Option<String>,
    /// The run that opened it had an error (informational: while open, events are always
    /// answered as an error of the hook, `block` on blocking events).
    #[serde(default)]
    pub fail_closed: bool,
}

/// Execution counts (CONTRACT §7, issue "execution status").
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ExecutionsStatus {
    #[serde(default)]
    pub allow: i64,
    #[serde(default)]
    pub block: i64,
    #[serde(default)]
    pub error: i64,
    #[serde(default)]
    pub timeout: i64,
    /// Runs that asked for a person's decision (issue 16); absent while there are none.
    #[serde(default, skip_serializing_if = "is_zero_i64")]
    pub ask: i64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_execution_time: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_decision: Option<String>,
}
