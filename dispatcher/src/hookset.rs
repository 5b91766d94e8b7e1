//! The hooks a dispatcher serves, compiled once per hook version and indexed for
//! resolution (CONTRACT §3).
//!
//! A [`HookSet`] is immutable; a new snapshot or hooks file builds a new one and swaps
//! it in. Building reuses the compiled form of every hook whose (uid, generation,
//! namespace tenant, reset token) did not change, so regexes and CEL programs are
//! compiled once per hook version (DESIGN "Sync": incremental recompiling). The breaker
//! state and the execution counters go with the reused hook; a new reset token (the
//! `agenthooks.io/reset-breaker` annotation changed, CONTRACT §6.3) builds a new hook
//! with a closed breaker, even on a dispatcher that never saw a snapshot without it.

use std::collections::HashMap;
use std::sync::Arc;

use agenthooks_crds::agenthook::HookScope;
use agenthooks_crds::sealed::SealKey;
use agenthooks_crds::snapshot::{Snapshot, SnapshotHook};
use agenthooks_crds::validation::{
    CommandHookPolicy, CompiledHook, ValidationContext, ValidationErrors, validate,
};
use agenthooks_crds::{Edition, HookEvent};

use crate::report::counters::{HookCounters, HookIdentity};

/// One servable hook: the snapshot's description of it (identity, spec, sealed header
/// values) plus what was compiled from it. Dereferences to the [`SnapshotHook`].
#[derive(Debug)]
pub struct LoadedHook {
    pub source: SnapshotHook,
    pub compiled: CompiledHook,
    /// `namespace/name`, the name shown in responses and logs.
    pub key: String,
    /// Breaker state of this hook version on this dispatcher.
    pub breaker: crate::breaker::Breaker,
    /// Runs of this hook version by outcome, swept by the reporter (issue 3 point 4).
    pub counters: Arc<HookCounters>,
}

impl LoadedHook {
    /// Whether the hook is enabled and its agent rule admits `agent` (CONTRACT §3.1:
    /// `scope: agent` runs only for the listed `agentIds`). The tenant rule is the
    /// index's: [`HookSet::resolve`] only looks at global hooks and the event tenant's.
    pub fn admits_agent(&self, agent: &str) -> bool {
        self.spec.enabled
            && (self.spec.scope != HookScope::Agent
                || self.spec.agent_ids.iter().any(|a| a == agent))
    }

    /// Whether the hook applies to an event of `tenant` and `agent`: [`Self::admits_agent`]
    /// plus the tenant rule that resolution gets from the index (global hooks apply to
    /// every tenant). For a single hook outside resolution (dry runs).
    pub fn admits(&self, tenant: &str, agent: &str) -> bool {
        (self.spec.scope == HookScope::Global || self.compiled.tenant == tenant)
            && self.admits_agent(agent)
    }
}

impl std::ops::Deref for LoadedHook {
    type Target = SnapshotHook;
    fn deref(&self) -> &SnapshotHook {
        &self.source
    }
}

/// Ordering of CONTRACT §3.2: priority descending, then oldest first (creation time),
/// then `namespace/name`. Hooks with no creation time sort after those with one.
pub fn order(a: &LoadedHook, b: &LoadedHook) -> std::cmp::Ordering {
    b.spec
        .priority
        .cmp(&a.spec.priority)
        .then_with(
            || match (a.created_at.is_empty(), b.created_at.is_empty()) {
                (false, false) => a.created_at.cmp(&b.created_at),
                (x, y) => x.cmp(&y),
            },
        )
        .then_with(|| a.namespace.cmp(&b.namespace))
        .then_with(|| a.name.cmp(&b.name))
}

/// A hook that failed validation while building a set.
#[derive(Debug, thiserror::Error)]
#[error("{namespace}/{name}: {errors}")]
pub struct RejectedHook {
    pub namespace: String,
    pub name: String,
    pub errors: ValidationErrors,
}

/// Longest error text kept for an unavailable hook (and reported to the operator).
pub const MAX_UNAVAILABLE_ERROR_BYTES: usize = 1024;

/// A hook of the snapshot (or hooks file) this dispatcher could not load: its own
/// validation and compile (edition, regex, CEL) refused it. It is never dropped in
/// silence (CONTRACT §10.4): the set keeps it, and a blocking event it could apply to
/// ([`HookSet::unavailable_for`]) is answered `block` with reason
/// [`HOOK_UNAVAILABLE`] before any hook runs.
#[derive(Debug, Clone, PartialEq)]
pub struct UnavailableHook {
    pub uid: String,
    pub namespace: String,
    pub name: String,
    /// `namespace/name`, as for a loaded hook.
    pub key: String,
    pub generation: i64,
    pub event: HookEvent,
    pub scope: HookScope,
    /// `spec.tenant`, else the namespace's tenant (what the hook's tenant would be).
    pub tenant: String,
    pub agent_ids: Vec<String>,
    pub enabled: bool,
    /// Why it could not be loaded (the validation errors), cut to
    /// [`MAX_UNAVAILABLE_ERROR_BYTES`] on a character boundary.
    pub error: String,
}

/// Reason of a block answered for an unavailable hook (CONTRACT §10.4).
pub const HOOK_UNAVAILABLE: &str = "HookUnavailable";

impl UnavailableHook {
    fn new(s: &SnapshotHook, errors: &ValidationErrors) -> UnavailableHook {
        UnavailableHook {
            uid: s.uid.clone(),
            namespace: s.namespace.clone(),
            name: s.name.clone(),
            key: format!("{}/{}", s.namespace, s.name),
            generation: s.generation,
            event: s.spec.event,
            scope: s.spec.scope,
            tenant: s
                .spec
                .tenant
                .clone()
                .filter(|t| !t.is_empty())
                .unwrap_or_else(|| s.namespace_tenant.clone()),
            agent_ids: s.spec.agent_ids.clone(),
            enabled: s.spec.enabled,
            error: cut(&errors.to_string(), MAX_UNAVAILABLE_ERROR_BYTES),
        }
    }

    /// Whether the hook could apply to an event `event` of `tenant` and `agent`: same
    /// event, enabled, global or of that tenant, and for `scope: agent` one of its
    /// agents. Its `matcher` and `ifExpr` are not looked at (they may be what failed to
    /// compile): "could apply" errs on the side of applying.
    pub fn could_apply(&self, event: HookEvent, tenant: &str, agent: &str) -> bool {
        self.event == event
            && self.enabled
            && (self.scope == HookScope::Global || self.tenant == tenant)
            && (self.scope != HookScope::Agent || self.agent_ids.iter().any(|a| a == agent))
    }
}

/// `text` cut to at most `max` bytes on a character boundary.
pub fn cut(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_string();
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    text[..end].to_string()
}

/// The hooks of one event: global ones, and per tenant the tenant- and agent-scoped
/// ones; each list in resolution order, so resolving merges two sorted lists and never
/// looks at another tenant's hooks.
#[derive(Debug, Default)]
struct EventIndex {
    global: HookList,
    by_tenant: HashMap<String, HookList>,
}

impl EventIndex {
    fn lists_mut(&mut self) -> impl Iterator<Item = &mut HookList> {
        std::iter::once(&mut self.global).chain(self.by_tenant.values_mut())
    }
    fn all(&self) -> impl Iterator<Item = &Arc<LoadedHook>> {
        self.global
            .hooks
            .iter()
            .chain(self.by_tenant.values().flat_map(|l| l.hooks.iter()))
    }
}

/// One list of hooks in resolution order, with the index of their matchers
/// ([`crate::hookset::matchers`]) once it is long enough to pay for one.
#[derive(Debug, Default)]
struct HookList {
    hooks: Vec<Arc<LoadedHook>>,
    matchers: Option<matchers::MatcherIndex>,
}

/// Hooks indexed by event and tenant, each list in resolution order.
#[derive(Debug, Default)]
pub struct HookSet {
    by_event: [EventIndex; HookEvent::ALL.len()],
    /// (source, e.g. snapshot epoch/version or file path; version).
    pub version: u64,
    pub master_namespace: String,
    len: usize,
    /// Hooks of the input this dispatcher could not load, sorted by `namespace/name`.
    unavailable: Vec<UnavailableHook>,
    /// The namespaces' tenants of the snapshot (empty in standalone mode): which tenant
    /// a Kubernetes caller may act for (CONTRACT §9.2).
    pub tenants: agenthooks_crds::tenancy::TenantMap,
}

impl HookSet {
    /// Builds a set, validating each hook with this dispatcher's edition (so a Standard
    /// dispatcher never loads a command hook, whatever its input says) and reusing the
    /// compiled hooks of `previous` (with their breaker state and counters) when (uid,
    /// generation, tenant, reset token) match.
    ///
    /// Returns the set of the hooks that validated and the rejected ones; the set also
    /// keeps each rejected hook as an [`UnavailableHook`] (CONTRACT §10.4).
    pub fn build(
        sources: Vec<SnapshotHook>,
        master_namespace: &str,
        edition: Edition,
        version: u64,
        previous: Option<&HookSet>,
    ) -> (HookSet, Vec<RejectedHook>) {
        type ReuseKey<'a> = (&'a str, i64, &'a str, Option<&'a str>);
        let reuse: HashMap<ReuseKey, &Arc<LoadedHook>> = previous
            .map(|p| {
                p.iter()
                    .map(|h| {
                        (
                            (
                                h.uid.as_str(),
                                h.generation,
                                h.namespace_tenant.as_str(),
                                h.reset_token.as_deref(),
                            ),
                            h,
                        )
                    })
                    .collect()
            })
            .unwrap_or_default();
        let mut by_event: [EventIndex; HookEvent::ALL.len()] = Default::default();
        let mut rejected = Vec::new();
        let mut unavailable = Vec::new();
        let mut len = 0;
        for s in sources {
            let key = (
                s.uid.as_str(),
                s.generation,
                s.namespace_tenant.as_str(),
                s.reset_token.as_deref(),
            );
            let hook = match reuse.get(&key) {
                Some(h) if h.spec == s.spec && h.namespace == s.namespace && h.name == s.name => {
                    // Same version: its breakers stay, following what the operator says
                    // is open now (CONTRACT §6.5).
                    h.breaker.follow(&s.open_breakers);
                    Arc::clone(h)
                }
                _ => {
                    let ctx = ValidationContext {
                        namespace: &s.namespace,
                        namespace_tenant: &s.namespace_tenant,
                        master_namespace,
                        edition,
                        // A hooks file has no tenants; a snapshot holds only what the
                        // operator accepted under its own setting (CONTRACT §10.1).
                        command_hooks: CommandHookPolicy::AnyNamespace,
                    };
                    match validate(&s.spec, &ctx) {
                        Ok(compiled) => Arc::new(LoadedHook {
                            breaker: {
                                let b = crate::breaker::Breaker::default();
                                b.follow(&s.open_breakers);
                                b
                            },
                            key: format!("{}/{}", s.namespace, s.name),
                            counters: Arc::new(HookCounters::new(HookIdentity {
                                uid: s.uid.clone(),
                                namespace: s.namespace.clone(),
                                name: s.name.clone(),
                            })),
                            source: s,
                            compiled,
                        }),
                        Err(errors) => {
                            unavailable.push(UnavailableHook::new(&s, &errors));
                            rejected.push(RejectedHook {
                                namespace: s.namespace,
                                name: s.name,
                                errors,
                            });
                            continue;
                        }
                    }
                }
            };
            len += 1;
            let index = &mut by_event[hook.spec.event as usize];
            match hook.spec.scope {
                HookScope::Global => index.global.hooks.push(hook),
                HookScope::Tenant | HookScope::Agent => index
                    .by_tenant
                    .entry(hook.compiled.tenant.clone())
                    .or_default()
                    .hooks
                    .push(hook),
            }
        }
        for index in &mut by_event {
            for list in index.lists_mut() {
                list.hooks.sort_by(|a, b| order(a, b));
                list.matchers = matchers::MatcherIndex::build(&list.hooks);
            }
        }
        unavailable.sort_by(|a: &UnavailableHook, b| a.key.cmp(&b.key));
        (
            HookSet {
                by_event,
                version,
                master_namespace: master_namespace.to_string(),
                len,
                unavailable,
                tenants: Default::default(),
            },
            rejected,
        )
    }

    /// Builds a set from an operator snapshot.
    pub fn from_snapshot(
        snapshot: &Snapshot,
        edition: Edition,
        previous: Option<&HookSet>,
    ) -> (HookSet, Vec<RejectedHook>) {
        let (mut set, rejected) = HookSet::build(
            snapshot.hooks.clone(),
            &snapshot.master_namespace,
            edition,
            snapshot.version,
            previous,
        );
        set.tenants =
            agenthooks_crds::tenancy::TenantMap::from_entries(snapshot.tenants.iter().cloned());
        (set, rejected)
    }

    /// Hooks for `event` that apply to `tenant` and `agent`, in resolution order
    /// (CONTRACT §3.1–3.2).
    pub fn resolve<'a>(&'a self, event: HookEvent, tenant: &str, agent: &'a str) -> Resolved<'a> {
        let index = &self.by_event[event as usize];
        let tenant_hooks = index
            .by_tenant
            .get(tenant)
            .map(|l| l.hooks.as_slice())
            .unwrap_or_default();
        Resolved {
            global: Cursor::all(&index.global.hooks),
            tenant: Cursor::all(tenant_hooks),
            agent,
        }
    }

    /// The hooks of [`HookSet::resolve`] whose `matcher` matches `tool` (CONTRACT §3.3;
    /// no tool matches no matcher), in resolution order. Their `toolKinds` and `ifExpr`
    /// are left to the caller. A long list is looked up through its matcher index, so
    /// the cost grows with the hooks whose matcher can match, not with the list.
    pub fn select<'a>(
        &'a self,
        event: HookEvent,
        tenant: &str,
        agent: &'a str,
        tool: Option<&'a str>,
    ) -> Resolved<'a> {
        let index = &self.by_event[event as usize];
        Resolved {
            global: Cursor::select(&index.global, tool),
            tenant: match index.by_tenant.get(tenant) {
                Some(list) => Cursor::select(list, tool),
                None => Cursor::all(&[]),
            },
            agent,
        }
    }

    /// Every hook, any event.
    pub fn iter(&self) -> impl Iterator<Item = &Arc<LoadedHook>> {
        self.by_event.iter().flat_map(EventIndex::all)
    }

    /// Number of hooks served.
    pub fn len(&self) -> usize {
        self.len
    }

    /// No hook at all.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The first unavailable hook (by `namespace/name`) that could apply to an event
    /// `event` of `tenant` and `agent` ([`UnavailableHook::could_apply`]). A blocking
    /// event with one is answered `block` [`HOOK_UNAVAILABLE`] before any hook runs.
    pub fn unavailable_for(
        &self,
        event: HookEvent,
        tenant: &str,
        agent: &str,
    ) -> Option<&UnavailableHook> {
        self.unavailable
            .iter()
            .find(|u| u.could_apply(event, tenant, agent))
    }

    /// The hooks this dispatcher could not load, sorted by `namespace/name`.
    pub fn unavailable(&self) -> &[UnavailableHook] {
        &self.unavailable
    }

    /// Finds a hook by `namespace/name`.
    pub fn get(&self, key: &str) -> Option<&Arc<LoadedHook>> {
        self.iter().find(|h| h.key == key)
    }
}

/// The hooks of one event for one tenant and agent, in resolution order: a merge of the
/// global list and the tenant's list, skipping disabled hooks and agent hooks of other
/// agents (and, from [`HookSet::select`], hooks whose matcher does not match).
pub struct Resolved<'a> {
    global: Cursor<'a>,
    tenant: Cursor<'a>,
    agent: &'a str,
}

/// A walk over one list: every hook, or the positions a matcher lookup picked.
enum Cursor<'a> {
    All(&'a [Arc<LoadedHook>]),
    /// Hooks tested one by one against the tool name (a short list).
    Scan(&'a [Arc<LoadedHook>], Option<&'a str>),
    /// Positions picked by the list's matcher index, ascending.
    Picked(&'a [Arc<LoadedHook>], std::vec::IntoIter<u32>),
}

impl<'a> Cursor<'a> {
    fn all(hooks: &'a [Arc<LoadedHook>]) -> Self {
        Cursor::All(hooks)
    }

    fn select(list: &'a HookList, tool: Option<&'a str>) -> Self {
        match &list.matchers {
            Some(index) => Cursor::Picked(&list.hooks, index.pick(tool).into_iter()),
            None => Cursor::Scan(&list.hooks, tool),
        }
    }

    /// The next hook of this list, without taking it.
    fn peek(&mut self) -> Option<&'a Arc<LoadedHook>> {
        match self {
            Cursor::All(hooks) => hooks.first(),
            Cursor::Scan(hooks, tool) => loop {
                let (first, rest) = hooks.split_first()?;
                let matches = match &first.compiled.matcher {
                    None => true,
                    Some(re) => tool.is_some_and(|t| re.is_match(t)),
                };
                if matches {
                    return Some(first);
                }
                *hooks = rest;
            },
            Cursor::Picked(hooks, positions) => {
                positions.as_slice().first().map(|&i| &hooks[i as usize])
            }
        }
    }

    fn advance(&mut self) {
        match self {
            Cursor::All(hooks) | Cursor::Scan(hooks, _) => {
                *hooks = hooks.get(1..).unwrap_or_default();
            }
            Cursor::Picked(_, positions) => {
                positions.next();
            }
        }
    }
}

impl<'a> Iterator for Resolved<'a> {
    type Item = &'a Arc<LoadedHook>;

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            let (g, t) = (self.global.peek(), self.tenant.peek());
            let (hook, take_global) = match (g, t) {
                (None, None) => return None,
                (Some(g), None) => (g, true),
                (None, Some(t)) => (t, false),
                (Some(g), Some(t)) if order(g, t).is_le() => (g, true),
                (Some(_), Some(t)) => (t, false),
            };
            if take_global {
                self.global.advance();
            } else {
                self.tenant.advance();
            }
            if hook.admits_agent(self.agent) {
                return Some(hook);
            }
        }
    }
}

/// Opens a hook's sealed headers for one send (CONTRACT §5 http.1). An unopenable value
/// is an error (the hook fails closed), never a request without the header.
pub fn open_headers(hook: &LoadedHook, key: &SealKey) -> Result<Vec<(String, String)>, String> {
    hook.sealed_headers
        .iter()
        .map(|h| {
            let raw = key
                .open(&h.sealed)
                .map_err(|e| format!("header {}: {e}", h.name))?;
            String::from_utf8(raw)
                .map(|v| (h.name.clone(), v))
                .map_err(|_| format!("header {}: value is not UTF-8", h.name))
        })
        .collect()
}

mod matchers;

#[cfg(test)]
mod unavailable_tests;

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A snapshot hook of `ns/name` with `yaml` as its spec (tests across the crate).
    pub(crate) fn source(ns: &str, name: &str, yaml: &str, created_at: &str) -> SnapshotHook {
        SnapshotHook {
            uid: format!("uid-{ns}-{name}"),
            namespace: ns.into(),
            name: name.into(),
            generation: 1,
            created_at: created_at.into(),
            namespace_tenant: ns.trim_start_matches("tenant-").into(),
            spec: serde_norway::from_str(yaml).unwrap(),
            sealed_headers: vec![],
            open_breakers: Vec::new(),
            reset_token: None,
        }
    }

    const H: &str =
        "event: pre_tool_use\nhandler: {type: http, http: {url: 'https://a.example'}}\n";

    fn keys(set: &HookSet, tenant: &str, agent: &str) -> Vec<String> {
        set.resolve(HookEvent::PreToolUse, tenant, agent)
            .map(|h| h.key.clone())
            .collect()
    }

    #[test]
    fn resolution_by_scope_tenant_and_agent() {
        let sources = vec![
            source(
                "agenthooks-system",
                "global",
                &format!("{H}scope: global\n"),
                "2026-01-01T00:00:00Z",
            ),
            source("tenant-acme", "acme-all", H, "2026-01-01T00:00:00Z"),
            source(
                "tenant-acme",
                "acme-a1",
                &format!("{H}scope: agent\nagentIds: [a1]\n"),
                "2026-01-01T00:00:00Z",
            ),
            source("tenant-globex", "globex-all", H, "2026-01-01T00:00:00Z"),
            source(
                "tenant-acme",
                "disabled",
                &format!("{H}enabled: false\n"),
                "2026-01-01T00:00:00Z",
            ),
            source(
                "tenant-acme",
                "other-event",
                "event: stop\nhandler: {type: http, http: {url: 'https://a.example'}}",
                "2026-01-01T00:00:00Z",
            ),
        ];
        let (set, rejected) = HookSet::build(sources, "agenthooks-system", Edition::Lite, 1, None);
        assert!(rejected.is_empty());
        assert_eq!(
            keys(&set, "acme", "a1"),
            [
                "agenthooks-system/global",
                "tenant-acme/acme-a1",
                "tenant-acme/acme-all"
            ]
        );
        assert_eq!(
            keys(&set, "acme", "a2"),
            ["agenthooks-system/global", "tenant-acme/acme-all"]
        );
        assert_eq!(
            keys(&set, "globex", "a1"),
            ["agenthooks-system/global", "tenant-globex/globex-all"]
        );
        assert_eq!(keys(&set, "initech", "a1"), ["agenthooks-system/global"]);
    }

    #[test]
    fn order_is_priority_then_oldest_then_name_never_input_order() {
        let mk = |name: &str, prio: i32, at: &str| {
            source("tenant-acme", name, &format!("{H}priority: {prio}\n"), at)
        };
        let a = vec![
            mk("b-old", 10, "2026-01-01T00:00:00Z"),
            mk("high", 100, "2026-03-01T00:00:00Z"),
            mk("a-new", 10, "2026-02-01T00:00:00Z"),
            mk("c-old", 10, "2026-01-01T00:00:00Z"),
            mk("low", -5, "2025-01-01T00:00:00Z"),
        ];
        let mut b = a.clone();
        b.reverse();
        for sources in [a, b] {
            let (set, _) = HookSet::build(sources, "agenthooks-system", Edition::Lite, 1, None);
            assert_eq!(
                keys(&set, "acme", "x"),
                [
                    "tenant-acme/high",
                    "tenant-acme/b-old",
                    "tenant-acme/c-old",
                    "tenant-acme/a-new",
                    "tenant-acme/low"
                ]
            );
        }
    }

    #[test]
    fn standard_edition_never_loads_a_command_hook() {
        let sources = vec![source(
            "tenant-acme",
            "cmd",
            "event: pre_tool_use\nhandler: {type: command, command: {command: 'exit 0'}}",
            "",
        )];
        let (set, rejected) = HookSet::build(
            sources.clone(),
            "agenthooks-system",
            Edition::Standard,
            1,
            None,
        );
        assert!(set.is_empty());
        assert_eq!(
            rejected[0].errors.reason().as_str(),
            "EditionForbidsCommand"
        );
        let (set, rejected) = HookSet::build(sources, "agenthooks-system", Edition::Lite, 1, None);
        assert_eq!((set.len(), rejected.len()), (1, 0));
    }

    #[test]
    fn unchanged_hooks_keep_their_compiled_form() {
        let s = vec![source(
            "tenant-acme",
            "h",
            &format!("{H}matcher: exec\n"),
            "",
        )];
        let (first, _) = HookSet::build(s.clone(), "agenthooks-system", Edition::Lite, 1, None);
        let (second, _) = HookSet::build(
            s.clone(),
            "agenthooks-system",
            Edition::Lite,
            2,
            Some(&first),
        );
        let a = first.get("tenant-acme/h").unwrap();
        let b = second.get("tenant-acme/h").unwrap();
        assert!(
            Arc::ptr_eq(a, b),
            "same uid+generation must reuse the compiled hook"
        );
        let mut edited = s;
        edited[0].generation = 2;
        edited[0].spec.matcher = "shell".into();
        let (third, _) =
            HookSet::build(edited, "agenthooks-system", Edition::Lite, 3, Some(&second));
        let c = third.get("tenant-acme/h").unwrap();
        assert!(!Arc::ptr_eq(b, c));
        assert!(c.compiled.matcher.as_ref().unwrap().is_match("shell"));
    }

    #[test]
    fn a_new_reset_token_closes_the_breaker_an_unchanged_one_keeps_it() {
        use crate::handlers::Outcome;
        let mut s = source("tenant-acme", "h", H, "");
        s.reset_token = Some("r1".into());
        let (first, _) =
            HookSet::build(vec![s.clone()], "agenthooks-system", Edition::Lite, 1, None);
        let h = first.get("tenant-acme/h").unwrap();
        for i in 0..crate::breaker::FAULT_THRESHOLD as i64 {
            let a = h.breaker.admit("acme", i);
            h.breaker.record("acme", a, Outcome::Timeout, i);
        }
        h.counters.record(Outcome::Block, 1);
        assert!(h.breaker.is_open("acme"));

        // Same uid, generation, tenant and token: the open breaker and the counts stay.
        let (same, _) = HookSet::build(
            vec![s.clone()],
            "agenthooks-system",
            Edition::Lite,
            2,
            Some(&first),
        );
        let kept = same.get("tenant-acme/h").unwrap();
        assert!(Arc::ptr_eq(h, kept));
        assert!(kept.breaker.is_open("acme"));

        // The annotation changed (this dispatcher never saw a snapshot without the
        // hook): a new hook version with a closed breaker and fresh counters.
        let mut reset = s.clone();
        reset.reset_token = Some("r2".into());
        let (after, _) = HookSet::build(
            vec![reset],
            "agenthooks-system",
            Edition::Lite,
            3,
            Some(&same),
        );
        let fresh = after.get("tenant-acme/h").unwrap();
        assert!(!Arc::ptr_eq(kept, fresh));
        assert!(
            !fresh.breaker.is_open("acme"),
            "a reset closes the local breaker"
        );
        assert!(fresh.counters.take().is_empty());
        assert_eq!(
            h.counters.take().total(),
            1,
            "the old version's counts stay with it"
        );

        // A token appearing where there was none is a change too.
        let mut none = s;
        none.reset_token = None;
        let (a, _) = HookSet::build(
            vec![none.clone()],
            "agenthooks-system",
            Edition::Lite,
            1,
            None,
        );
        none.reset_token = Some("x".into());
        let (b, _) = HookSet::build(vec![none], "agenthooks-system", Edition::Lite, 2, Some(&a));
        assert!(!Arc::ptr_eq(
            a.get("tenant-acme/h").unwrap(),
            b.get("tenant-acme/h").unwrap()
        ));
    }

    #[test]
    fn headers_open_only_with_the_key() {
        let key = SealKey::generate();
        let mut s = source("tenant-acme", "h", H, "");
        s.sealed_headers = vec![agenthooks_crds::snapshot::SealedHeader {
            name: "Authorization".into(),
            sealed: key.seal(b"Bearer t"),
        }];
        let (set, _) = HookSet::build(vec![s], "agenthooks-system", Edition::Lite, 1, None);
        let h = set.get("tenant-acme/h").unwrap();
        assert_eq!(
            open_headers(h, &key).unwrap(),
            vec![("Authorization".to_string(), "Bearer t".to_string())]
        );
        assert!(open_headers(h, &SealKey::generate()).is_err());
    }

    /// The indexed selection equals resolution followed by each hook's own matcher test,
    /// on random hook sets (long lists, many distinct patterns, shared ones, none) and
    /// events: same hooks, same order (issue 15 check).
    mod indexed_selection {
        use super::*;
        use proptest::prelude::*;

        const PATTERNS: &[&str] = &[
            "",
            "exec",
            "^exec$",
            "Bash|Edit",
            "mcp__github__.*",
            "^mcp__",
            "Write$",
            "e.e",
            "[A-Z]",
            "x*",
            "^$",
            "Read",
            "Gr?ep",
            "notebook",
            ".",
            "(?i)bash",
            "^Note",
        ];
        const TOOLS: &[Option<&str>] = &[
            None,
            Some("exec"),
            Some("Bash"),
            Some("Edit"),
            Some("mcp__github__create"),
            Some("Write"),
            Some("NotebookWrite"),
            Some("read"),
            Some(""),
            Some("Grep"),
            Some("Gep"),
            Some("bash"),
        ];

        fn hook(
            i: usize,
            (pattern, scope, tenant, prio, age): (usize, u8, bool, i32, u8),
        ) -> SnapshotHook {
            let ns = if scope == 0 {
                "agenthooks-system".to_string()
            } else if tenant {
                "tenant-acme".to_string()
            } else {
                "tenant-globex".to_string()
            };
            let mut yaml = format!("{H}priority: {prio}\n");
            if !PATTERNS[pattern].is_empty() {
                yaml.push_str(&format!("matcher: '{}'\n", PATTERNS[pattern]));
            }
            match scope {
                0 => yaml.push_str("scope: global\n"),
                2 => yaml.push_str("scope: agent\nagentIds: [a1]\n"),
                _ => {}
            }
            source(
                &ns,
                &format!("h{i}"),
                &yaml,
                &format!("2026-01-01T00:00:{:02}Z", age % 60),
            )
        }

        proptest! {
            #![proptest_config(ProptestConfig::with_cases(64))]
            #[test]
            fn equals_resolve_then_matcher(
                hooks in prop::collection::vec(
                    (0..PATTERNS.len(), 0u8..3, any::<bool>(), -2i32..3, any::<u8>()), 0..80),
                events in prop::collection::vec((0..TOOLS.len(), any::<bool>(), any::<bool>()), 1..12),
            ) {
                let sources: Vec<_> = hooks.into_iter().enumerate().map(|(i, h)| hook(i, h)).collect();
                let (set, rejected) = HookSet::build(sources, "agenthooks-system", Edition::Lite, 1, None);
                prop_assert!(rejected.is_empty());
                for (tool, acme, a1) in events {
                    let tool = TOOLS[tool];
                    let tenant = if acme { "acme" } else { "globex" };
                    let agent = if a1 { "a1" } else { "a2" };
                    let plain: Vec<&str> = set
                        .resolve(HookEvent::PreToolUse, tenant, agent)
                        .filter(|h| match &h.compiled.matcher {
                            None => true,
                            Some(re) => tool.is_some_and(|t| re.is_match(t)),
                        })
                        .map(|h| h.key.as_str())
                        .collect();
                    let indexed: Vec<&str> = set
                        .select(HookEvent::PreToolUse, tenant, agent, tool)
                        .map(|h| h.key.as_str())
                        .collect();
                    prop_assert_eq!(indexed, plain, "tool {:?} tenant {} agent {}", tool, tenant, agent);
                }
            }
        }

        #[test]
        fn long_lists_are_indexed_and_many_patterns_share_one_set() {
            let sources: Vec<_> = (0..40)
                .map(|i| {
                    hook(
                        i,
                        (
                            1 + i % PATTERNS.len().saturating_sub(1),
                            1,
                            true,
                            0,
                            i as u8,
                        ),
                    )
                })
                .collect();
            let (set, _) = HookSet::build(sources, "agenthooks-system", Edition::Lite, 1, None);
            let list = &set.by_event[HookEvent::PreToolUse as usize].by_tenant["acme"];
            let index = list.matchers.as_ref().expect("40 hooks are indexed");
            assert_eq!(index.patterns(), PATTERNS.len() - 1);
            assert!(index.uses_set());
            // Hooks with the same pattern share its compiled regex.
            let exec: Vec<_> = list
                .hooks
                .iter()
                .filter(|h| h.spec.matcher == "exec")
                .collect();
            assert!(exec.len() >= 2);
            assert!(Arc::ptr_eq(
                exec[0].compiled.matcher.as_ref().unwrap(),
                exec[1].compiled.matcher.as_ref().unwrap()
            ));
            let short: Vec<_> = (0..5).map(|i| hook(i, (1, 1, true, 0, 0))).collect();
            let (set, _) = HookSet::build(short, "agenthooks-system", Edition::Lite, 1, None);
            assert!(
                set.by_event[HookEvent::PreToolUse as usize].by_tenant["acme"]
                    .matchers
                    .is_none()
            );
        }
    }
}
