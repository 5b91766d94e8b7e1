//! What the console lists: hooks and budgets as one summary shape, whether they come from
//! the hooks files this dispatcher serves (standalone) or from the API server as the
//! signed-in person ([`super::kube`]); and the list's filters. Pure.

use agenthooks_crds::HookEvent;
use agenthooks_crds::agenthook::{AgentHook, AgentHookSpec, HandlerType, HookScope};
use agenthooks_crds::budget::{BudgetState, TenantHookBudget};
use agenthooks_crds::tenancy::TenantMap;
use chrono::{DateTime, SecondsFormat, Utc};

use crate::hookset::{HookSet, LoadedHook, UnavailableHook};

/// A condition as the list shows it (Kubernetes API conventions).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cond {
    /// `True`, `False` or `Unknown`.
    pub status: String,
    /// CamelCase reason.
    pub reason: String,
    /// For people.
    pub message: String,
}

impl Cond {
    fn new(status: &str, reason: &str, message: impl Into<String>) -> Cond {
        Cond {
            status: status.into(),
            reason: reason.into(),
            message: message.into(),
        }
    }

    fn unknown() -> Cond {
        Cond::new("Unknown", "NotReported", "no condition reported yet")
    }
}

/// One open breaker of a hook.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OpenBreaker {
    pub tenant: String,
    /// RFC 3339.
    pub since: String,
    pub reason: Option<String>,
}

/// Runs of a hook by decision, and its last run.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Executions {
    pub allow: i64,
    pub block: i64,
    pub error: i64,
    pub timeout: i64,
    pub ask: i64,
    /// RFC 3339 and decision of the newest run.
    pub last: Option<(String, String)>,
}

/// One hook as the console shows it.
#[derive(Debug, Clone, PartialEq)]
pub struct HookSummary {
    pub namespace: String,
    pub name: String,
    /// The tenant whose events it takes when tenant- or agent-scoped (a global hook takes
    /// every tenant's): `spec.tenant`, else its namespace's ([`namespace_tenant`]).
    pub tenant: String,
    pub generation: i64,
    /// `None` for a hook this dispatcher could not load (only its identity is known).
    pub spec: Option<AgentHookSpec>,
    pub event: HookEvent,
    pub scope: HookScope,
    pub enabled: bool,
    pub accepted: Cond,
    pub ready: Cond,
    /// `True` while a breaker is open.
    pub circuit: Cond,
    pub open_breakers: Vec<OpenBreaker>,
    pub executions: Option<Executions>,
}

impl HookSummary {
    /// `namespace/name`.
    pub fn key(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }

    /// The handler's type, when the spec is known.
    pub fn handler(&self) -> Option<HandlerType> {
        self.spec.as_ref().map(|s| s.handler.type_)
    }

    /// From an AgentHook as the API server holds it (status as the operator wrote it);
    /// `tenants` are the namespaces' tenants of the served snapshot.
    pub fn of_object(hook: &AgentHook, tenants: &TenantMap) -> HookSummary {
        let namespace = hook.metadata.namespace.clone().unwrap_or_default();
        let status = hook.status.clone().unwrap_or_default();
        let cond = |t: &str| {
            status
                .conditions
                .iter()
                .find(|c| c.type_ == t)
                .map(|c| Cond::new(&c.status, &c.reason, c.message.clone()))
                .unwrap_or_else(Cond::unknown)
        };
        let open_breakers = status
            .breaker
            .as_ref()
            .map(|b| {
                b.open
                    .iter()
                    .map(|o| OpenBreaker {
                        tenant: o.tenant.clone(),
                        since: o.tripped_at.clone(),
                        reason: o.reason.clone(),
                    })
                    .collect()
            })
            .unwrap_or_default();
        let executions = status.executions.as_ref().map(|e| Executions {
            allow: e.allow,
            block: e.block,
            error: e.error,
            timeout: e.timeout,
            ask: e.ask,
            last: e.last_execution_time.clone().zip(e.last_decision.clone()),
        });
        let mut circuit = cond("CircuitOpen");
        if circuit.reason == "NotReported" {
            circuit = Cond::new("False", "Closed", "no breaker is open");
        }
        HookSummary {
            tenant: hook
                .spec
                .tenant
                .clone()
                .unwrap_or_else(|| namespace_tenant(tenants, &namespace)),
            namespace,
            name: hook.metadata.name.clone().unwrap_or_default(),
            generation: hook.metadata.generation.unwrap_or(0),
            event: hook.spec.event,
            scope: hook.spec.scope,
            enabled: hook.spec.enabled,
            spec: Some(hook.spec.clone()),
            accepted: cond("Accepted"),
            ready: cond("Ready"),
            circuit,
            open_breakers,
            executions,
        }
    }
}

/// The hooks this dispatcher serves from its hooks files (standalone), with the state
/// only it knows: loaded is Accepted and Ready, its own breakers, its own run counts
/// since it loaded each hook version. Sorted by namespace and name.
pub fn standalone(set: &HookSet) -> Vec<HookSummary> {
    let mut out: Vec<HookSummary> = set
        .iter()
        .map(|h| loaded(h))
        .chain(set.unavailable().iter().map(unavailable))
        .collect();
    out.sort_by(|a, b| (&a.namespace, &a.name).cmp(&(&b.namespace, &b.name)));
    out
}

/// One hook of [`standalone`], `namespace/name`, without summarising the others.
pub fn standalone_one(set: &HookSet, key: &str) -> Option<HookSummary> {
    set.get(key).map(|h| loaded(h)).or_else(|| {
        set.unavailable()
            .iter()
            .find(|u| u.key == key)
            .map(unavailable)
    })
}

/// A hook this dispatcher serves, as [`standalone`] shows it.
fn loaded(h: &LoadedHook) -> HookSummary {
    use agenthooks_crds::rules::breaker::{FAULT_THRESHOLD, HALF_OPEN_AFTER_MS, WINDOW_MS};
    let open: Vec<OpenBreaker> = h
        .breaker
        .open_tenants()
        .into_iter()
        .map(|(tenant, since)| OpenBreaker {
            tenant,
            since: rfc3339_ms(since),
            reason: Some(format!(
                "{FAULT_THRESHOLD} faults in a row within {} s",
                WINDOW_MS / 1000
            )),
        })
        .collect();
    let counts = h.counters.peek();
    let circuit = if open.is_empty() {
        Cond::new("False", "Closed", "no breaker is open")
    } else {
        let tenants: Vec<&str> = open.iter().map(|o| o.tenant.as_str()).collect();
        Cond::new(
            "True",
            "CircuitOpen",
            format!(
                "open for tenant {}: its events are refused (CircuitOpen), whatever onTimeout says, until a probe succeeds {} s after it opened",
                tenants.join(", "),
                HALF_OPEN_AFTER_MS / 1000
            ),
        )
    };
    HookSummary {
        namespace: h.namespace.clone(),
        name: h.name.clone(),
        tenant: h.compiled.tenant.clone(),
        generation: h.generation,
        event: h.spec.event,
        scope: h.spec.scope,
        enabled: h.spec.enabled,
        spec: Some(h.spec.clone()),
        accepted: if h.uid.starts_with(super::handlers::CONSOLE_UID_PREFIX) {
            Cond::new(
                "True",
                "Valid",
                "created in the console: served until this dispatcher restarts (Download YAML keeps it)",
            )
        } else {
            Cond::new("True", "Valid", "loaded from the hooks files")
        },
        ready: Cond::new("True", "Served", "served by this dispatcher"),
        circuit,
        open_breakers: open,
        executions: Some(Executions {
            allow: counts.by_outcome[0] as i64,
            block: counts.by_outcome[1] as i64,
            error: counts.by_outcome[2] as i64,
            timeout: counts.by_outcome[3] as i64,
            ask: counts.by_outcome[4] as i64,
            last: counts
                .last_run()
                .map(|(ms, o)| (rfc3339_ms(ms as i64), o.as_str().to_owned())),
        }),
    }
}

/// A hook this dispatcher could not load (CONTRACT §10.4).
fn unavailable(u: &UnavailableHook) -> HookSummary {
    HookSummary {
        namespace: u.namespace.clone(),
        name: u.name.clone(),
        tenant: u.tenant.clone(),
        generation: u.generation,
        spec: None,
        event: u.event,
        scope: u.scope,
        enabled: u.enabled,
        accepted: Cond::new("False", crate::hookset::HOOK_UNAVAILABLE, u.error.clone()),
        ready: Cond::new(
            "False",
            crate::hookset::HOOK_UNAVAILABLE,
            "not served: blocking events it could apply to are answered block",
        ),
        circuit: Cond::new("False", "Closed", "no breaker is open"),
        open_breakers: Vec::new(),
        executions: None,
    }
}

/// The tenant of namespace `ns` as `tenants` (the served snapshot's) has it: its label
/// `agenthooks.io/tenant`, else its name; the one it claims when it lost that claim (its
/// hooks and budgets are refused, TenantConflict); its name when not known yet.
pub fn namespace_tenant(tenants: &TenantMap, ns: &str) -> String {
    match tenants.tenant_of(ns) {
        Ok(Some(t)) => t.to_owned(),
        Ok(None) => ns.to_owned(),
        Err(conflict) => conflict.tenant,
    }
}

fn rfc3339_ms(ms: i64) -> String {
    DateTime::<Utc>::from_timestamp_millis(ms)
        .map(|t| t.to_rfc3339_opts(SecondsFormat::Secs, true))
        .unwrap_or_default()
}

/// One budget as the console shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BudgetSummary {
    pub namespace: String,
    pub name: String,
    pub tenant: String,
    pub monthly_tokens: i64,
    pub used: i64,
    pub remaining: i64,
    /// `Ok`, `Warning` or `Exhausted`.
    pub state: String,
    pub period: Option<String>,
}

impl BudgetSummary {
    /// From a TenantHookBudget as the API server holds it.
    pub fn of_object(b: &TenantHookBudget, tenant: String) -> BudgetSummary {
        let status = b.status.clone().unwrap_or_default();
        BudgetSummary {
            namespace: b.metadata.namespace.clone().unwrap_or_default(),
            name: b.metadata.name.clone().unwrap_or_default(),
            tenant,
            monthly_tokens: b.spec.monthly_tokens,
            used: status.used,
            remaining: status.remaining,
            state: status.state.unwrap_or_else(|| {
                BudgetState::of(b.spec.monthly_tokens, status.remaining)
                    .as_str()
                    .to_owned()
            }),
            period: status.period,
        }
    }
}

/// The list's filters (`GET /ui/hooks?namespace=&event=&handler=&state=`); an empty value
/// is no filter.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Filters {
    pub namespace: Option<String>,
    pub event: Option<HookEvent>,
    pub handler: Option<HandlerType>,
    pub state: Option<StateFilter>,
}

/// The `state` filter's values.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StateFilter {
    Accepted,
    Rejected,
    Ready,
    NotReady,
    CircuitOpen,
    Disabled,
}

impl StateFilter {
    /// Every value, as written in the query.
    pub const ALL: [(&'static str, StateFilter); 6] = [
        ("accepted", StateFilter::Accepted),
        ("rejected", StateFilter::Rejected),
        ("ready", StateFilter::Ready),
        ("not-ready", StateFilter::NotReady),
        ("circuit-open", StateFilter::CircuitOpen),
        ("disabled", StateFilter::Disabled),
    ];
}

/// A bad query parameter: its name and what is wrong.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BadParam {
    pub field: String,
    pub message: String,
}

impl Filters {
    /// Reads the filters from query pairs. Errors: an unknown or repeated parameter, or
    /// a value outside the parameter's set, naming the parameter.
    pub fn parse(pairs: &[(String, String)]) -> Result<Filters, BadParam> {
        let mut f = Filters::default();
        let mut seen: Vec<&str> = Vec::new();
        for (k, v) in pairs {
            if seen.contains(&k.as_str()) {
                return Err(bad(k, format!("{k}: given twice")));
            }
            seen.push(k);
            if v.is_empty() {
                continue;
            }
            match k.as_str() {
                "namespace" => {
                    if !crate::audit::store::is_namespace_name(v) {
                        return Err(bad(k, format!("namespace: {v:?} is not a namespace name")));
                    }
                    f.namespace = Some(v.clone());
                }
                "event" => {
                    f.event = Some(HookEvent::parse(v).ok_or_else(|| {
                        bad(
                            k,
                            format!(
                                "event: {v:?} is not one of {}",
                                HookEvent::ALL.map(|e| e.as_str()).join(", ")
                            ),
                        )
                    })?)
                }
                "handler" => {
                    f.handler = Some(match v.as_str() {
                        "command" => HandlerType::Command,
                        "http" => HandlerType::Http,
                        "prompt" => HandlerType::Prompt,
                        _ => {
                            return Err(bad(
                                k,
                                format!("handler: {v:?} is not one of command, http, prompt"),
                            ));
                        }
                    })
                }
                "state" => {
                    f.state = Some(
                        StateFilter::ALL
                            .iter()
                            .find(|(name, _)| name == v)
                            .map(|(_, s)| *s)
                            .ok_or_else(|| {
                                bad(
                                    k,
                                    format!(
                                        "state: {v:?} is not one of {}",
                                        StateFilter::ALL.map(|(n, _)| n).join(", ")
                                    ),
                                )
                            })?,
                    )
                }
                other => {
                    return Err(bad(
                        other,
                        format!(
                            "{other}: unknown parameter; the list takes namespace, event, handler and state"
                        ),
                    ));
                }
            }
        }
        Ok(f)
    }

    /// Whether `h` passes every filter.
    pub fn keep(&self, h: &HookSummary) -> bool {
        self.namespace.as_ref().is_none_or(|n| *n == h.namespace)
            && self.event.is_none_or(|e| e == h.event)
            && self.handler.is_none_or(|t| h.handler() == Some(t))
            && self.state.is_none_or(|s| match s {
                StateFilter::Accepted => h.accepted.status == "True",
                StateFilter::Rejected => h.accepted.status == "False",
                StateFilter::Ready => h.ready.status == "True",
                StateFilter::NotReady => h.ready.status != "True",
                StateFilter::CircuitOpen => h.circuit.status == "True",
                StateFilter::Disabled => !h.enabled,
            })
    }
}

/// A [`BadParam`] naming `field`.
pub(crate) fn bad(field: &str, message: String) -> BadParam {
    BadParam {
        field: field.to_owned(),
        message,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pairs(q: &str) -> Vec<(String, String)> {
        url::form_urlencoded::parse(q.as_bytes())
            .into_owned()
            .collect()
    }

    fn hook(ns: &str, name: &str, event: HookEvent, handler: &str) -> HookSummary {
        let spec: AgentHookSpec = serde_json::from_value(serde_json::json!({
            "event": event.as_str(),
            "handler": match handler {
                "http" => serde_json::json!({"type": "http", "http": {"url": "https://p.example/h"}}),
                _ => serde_json::json!({"type": "command", "command": {"command": "true"}}),
            }
        }))
        .unwrap();
        HookSummary {
            namespace: ns.into(),
            name: name.into(),
            tenant: ns.into(),
            generation: 1,
            event,
            scope: spec.scope,
            enabled: spec.enabled,
            spec: Some(spec),
            accepted: Cond::new("True", "Valid", ""),
            ready: Cond::new("True", "Served", ""),
            circuit: Cond::new("False", "Closed", ""),
            open_breakers: vec![],
            executions: None,
        }
    }

    #[test]
    fn filters_combine_and_empty_values_are_no_filter() {
        let a = hook("acme", "a", HookEvent::PreToolUse, "command");
        let b = hook("acme", "b", HookEvent::UserPromptSubmit, "http");
        let mut c = hook("other", "c", HookEvent::PreToolUse, "http");
        c.circuit = Cond::new("True", "CircuitOpen", "open");
        c.enabled = false;
        let all = [a, b, c];
        let names = |q: &str| -> Vec<String> {
            let f = Filters::parse(&pairs(q)).unwrap();
            all.iter()
                .filter(|h| f.keep(h))
                .map(|h| h.name.clone())
                .collect()
        };
        assert_eq!(names(""), ["a", "b", "c"]);
        assert_eq!(names("namespace=&event=&handler=&state="), ["a", "b", "c"]);
        assert_eq!(names("event=pre_tool_use"), ["a", "c"]);
        assert_eq!(names("event=pre_tool_use&handler=http"), ["c"]);
        assert_eq!(names("namespace=acme&handler=http"), ["b"]);
        assert_eq!(names("state=circuit-open"), ["c"]);
        assert_eq!(names("state=disabled"), ["c"]);
        assert_eq!(names("state=rejected"), Vec::<String>::new());
    }

    #[test]
    fn a_hooks_tenant_is_its_namespaces_label_else_its_name() {
        use agenthooks_crds::tenancy::NamespaceTenant;
        let tenants = TenantMap::from_entries([
            NamespaceTenant {
                namespace: "team-a".into(),
                tenant: "acme".into(),
                held_by: None,
            },
            NamespaceTenant {
                namespace: "team-a-copy".into(),
                tenant: "acme".into(),
                held_by: Some("team-a".into()),
            },
        ]);
        let object = |ns: &str, tenant: Option<&str>| -> AgentHook {
            let mut spec = serde_json::json!({"event": "stop",
                "handler": {"type": "http", "http": {"url": "https://p.example/h"}}});
            if let Some(t) = tenant {
                spec["tenant"] = serde_json::json!(t);
            }
            serde_json::from_value(serde_json::json!({
                "apiVersion": "agenthooks.io/v1alpha1", "kind": "AgentHook",
                "metadata": {"name": "guard", "namespace": ns}, "spec": spec}))
            .unwrap()
        };
        let tenant = |ns, t| HookSummary::of_object(&object(ns, t), &tenants).tenant;
        assert_eq!(tenant("team-a", None), "acme", "the namespace's label");
        assert_eq!(tenant("team-a-copy", None), "acme", "the claim it lost");
        assert_eq!(
            tenant("team-b", None),
            "team-b",
            "a namespace not known yet: its name"
        );
        assert_eq!(
            tenant("agenthooks-system", Some("globex")),
            "globex",
            "spec.tenant"
        );
    }

    #[test]
    fn bad_parameters_are_named() {
        let err = |q: &str| Filters::parse(&pairs(q)).unwrap_err();
        assert_eq!(err("event=pre_tool").field, "event");
        assert!(err("event=pre_tool").message.contains("pre_tool_use"));
        assert_eq!(err("handler=shell").field, "handler");
        assert_eq!(err("state=open").field, "state");
        assert_eq!(err("namespace=Not_A_Name").field, "namespace");
        assert_eq!(err("color=red").field, "color");
        assert_eq!(err("event=stop&event=stop").field, "event");
    }
}
