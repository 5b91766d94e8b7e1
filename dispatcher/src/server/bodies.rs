//! The JSON bodies the routes answer that are the server's own (the engine's
//! [`crate::chain::Decision`] and [`crate::dry_run::DryRunReport`] live with the engine):
//! the error bodies, `GET /v1/hooks` and `GET /readyz`. Each is `Serialize` for the
//! answer and `JsonSchema` for the OpenAPI document ([`super::openapi`]), so the two
//! cannot say different things.

use agenthooks_crds::HookEvent;
use serde::Serialize;

use crate::audit::sink::AuditStatus;
use crate::dry_run::SpecFieldError;
use crate::hookset::HookSet;

/// The body of every 4xx answer: what was wrong and which part of the request it was.
#[derive(Debug, Clone, PartialEq, Serialize, schemars::JsonSchema)]
pub struct ClientError {
    /// What was wrong, for people; most messages start with the field (`tenant_id: …`).
    pub error: String,
    /// The part of the request at fault, never empty: a key or path of the JSON body
    /// (`event`, `tool_input.a[3]`, `event.tool_name`, `spec.spec.timeoutMs`), `body` for
    /// the body as a whole, a query parameter (`limit`, or `query` for an unknown one on a
    /// native hook route), a path parameter (`id`, `dialect`), `authorization` for the
    /// credential, `path` for a route that does not exist, `method` for one it does not take.
    #[schemars(length(min = 1))]
    pub field: String,
    /// `POST /v1/test` with an invalid inline manifest: the first broken rule's reason
    /// (`InvalidTimeout`, `InvalidField`, ...).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<&'static str>,
    /// `POST /v1/test` with an invalid inline manifest: every broken rule, `field` a path
    /// in the request body.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub errors: Option<Vec<SpecFieldError>>,
}

/// The body of a 5xx answer. A decision route's 5xx means no decision: the caller treats
/// it as `block`.
#[derive(Debug, Clone, PartialEq, Serialize, schemars::JsonSchema)]
pub struct ServerError {
    /// What went wrong and what to do (`no hooks loaded yet; treat as block`, `over 1024
    /// concurrent requests on this port; treat as block`, `audit is off ...`).
    pub error: String,
    /// `""`: no part of the request is at fault.
    pub field: String,
}

/// `GET /v1/hooks`: the hooks served and the ones this dispatcher could not load.
#[derive(Debug, Clone, PartialEq, Serialize, schemars::JsonSchema)]
pub struct HookList {
    /// Version of the snapshot or hooks file served.
    pub version: u64,
    /// The hooks served, by `hook`.
    pub hooks: Vec<ServedHook>,
    /// Hooks that could not be loaded (CONTRACT §10.4): the blocking events they could
    /// apply to are answered `block`.
    pub unavailable: Vec<UnavailableHook>,
}

/// One hook served.
#[derive(Debug, Clone, PartialEq, Serialize, schemars::JsonSchema)]
pub struct ServedHook {
    /// `namespace/name`.
    pub hook: String,
    /// The AgentHook's `metadata.uid`.
    pub uid: String,
    /// The AgentHook's `metadata.generation` served.
    pub generation: i64,
    /// The event it runs at.
    pub event: HookEvent,
    /// `command`, `http` or `prompt`.
    pub handler: &'static str,
    /// Higher runs first.
    pub priority: i32,
}

/// One hook this dispatcher could not load.
#[derive(Debug, Clone, PartialEq, Serialize, schemars::JsonSchema)]
pub struct UnavailableHook {
    /// `namespace/name`.
    pub hook: String,
    /// The AgentHook's `metadata.uid`.
    pub uid: String,
    /// The generation that could not be loaded.
    pub generation: i64,
    /// The event it would run at.
    pub event: HookEvent,
    /// Always `HookUnavailable`.
    pub reason: &'static str,
    /// Why it could not be loaded.
    pub error: String,
}

impl HookList {
    /// The listing of `set`, each list sorted by `hook`.
    pub fn of(set: &HookSet) -> HookList {
        let mut hooks: Vec<ServedHook> = set
            .iter()
            .map(|h| ServedHook {
                hook: h.key.clone(),
                uid: h.uid.clone(),
                generation: h.generation,
                event: h.spec.event,
                handler: h.spec.handler.type_.as_str(),
                priority: h.spec.priority,
            })
            .collect();
        hooks.sort_by(|a, b| a.hook.cmp(&b.hook));
        let unavailable: Vec<UnavailableHook> = set
            .unavailable()
            .iter()
            .map(|u| UnavailableHook {
                hook: u.key.clone(),
                uid: u.uid.clone(),
                generation: u.generation,
                event: u.event,
                reason: crate::hookset::HOOK_UNAVAILABLE,
                error: u.error.clone(),
            })
            .collect();
        HookList {
            version: set.version,
            hooks,
            unavailable,
        }
    }
}

/// `GET /readyz`: 200 `{"ready": true, ...}` once hooks are loaded; 503 `{"ready": false}`
/// before, and `{"ready": false, "draining": true}` once shutting down.
#[derive(Debug, Clone, PartialEq, Default, Serialize, schemars::JsonSchema)]
pub struct Readiness {
    /// Whether decisions are served with loaded hooks.
    pub ready: bool,
    /// Version of the hooks served.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub version: Option<u64>,
    /// How many hooks are served.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hooks: Option<usize>,
    /// How callers are known: `anonymous`, `callers-file`, `kubernetes`, or `none` (every
    /// dispatch refused).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(extend("enum" = ["anonymous", "callers-file", "kubernetes", "none"]))]
    pub callers: Option<&'static str>,
    /// With `--allow-anonymous`: that callers are not authenticated.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub warning: Option<&'static str>,
    /// The audit trail's state (absent when audit is off); never makes the dispatcher unready.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub audit: Option<AuditStatus>,
    /// Shutting down: decisions are still served, new traffic should go elsewhere.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub draining: bool,
}
