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
//!
//! A change of a few hooks (a snapshot delta) need not build the whole set:
//! [`HookSet::apply`] makes anew only the lists the changed hooks leave or join and
//! shares every other list with the set it starts from, so one hook's edit costs the
//! lists it is in, not the set.

use std::collections::{HashMap, HashSet};
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
/// looks at another tenant's hooks. Lists are shared between the sets of successive
/// versions while they do not change ([`HookSet::apply`]).
#[derive(Debug, Default, Clone)]
struct EventIndex {
    global: Arc<HookList>,
    by_tenant: HashMap<String, Arc<HookList>>,
}

impl EventIndex {
    fn all(&self) -> impl Iterator<Item = &Arc<LoadedHook>> {
        self.global
            .hooks
            .iter()
            .chain(self.by_tenant.values().flat_map(|l| l.hooks.iter()))
    }

    fn list(&self, tenant: Option<&str>) -> Option<&Arc<HookList>> {
        match tenant {
            None => Some(&self.global),
            Some(t) => self.by_tenant.get(t),
        }
    }
}

/// One list of hooks in resolution order, with the index of their matchers
/// ([`crate::hookset::matchers`]) once it is long enough to pay for one.
#[derive(Debug, Default)]
struct HookList {
    hooks: Vec<Arc<LoadedHook>>,
    matchers: Option<matchers::MatcherIndex>,
}

impl HookList {
    /// The list of `hooks`, sorted into resolution order, with its matcher index.
    fn new(mut hooks: Vec<Arc<LoadedHook>>) -> HookList {
        hooks.sort_by(|a, b| order(a, b));
        let matchers = matchers::MatcherIndex::build(&hooks);
        HookList { hooks, matchers }
    }
}

/// Where a set keeps a hook: in one list of one event (the global list, or a tenant's),
/// or among the hooks it could not load. Whoever changes a set with [`HookSet::apply`]
/// names each hook it removes or replaces by its key and its slot, so that only the
/// lists of those slots are looked at.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Slot {
    /// In the list of `event`: the global one (`tenant: None`) or the tenant's.
    Listed {
        event: HookEvent,
        tenant: Option<String>,
    },
    /// An [`UnavailableHook`].
    Unavailable,
}

impl LoadedHook {
    /// Whether an `ask` of this hook becomes an approval a person answers: it has
    /// `spec.approval`, and its ask can decide (the event waits for it and it enforces).
    /// A `warn` or `dryrun` hook's ask is only reported, and asks nobody.
    pub fn asks_a_person(&self) -> bool {
        self.spec.approval.is_some()
            && self.compiled.waits
            && self.compiled.enforcement_action
                == agenthooks_crds::agenthook::EnforcementAction::Enforce
    }

    /// The slot of this hook in a set.
    pub fn slot(&self) -> Slot {
        Slot::Listed {
            event: self.spec.event,
            tenant: match self.spec.scope {
                HookScope::Global => None,
                HookScope::Tenant | HookScope::Agent => Some(self.compiled.tenant.clone()),
            },
        }
    }
}

/// What [`HookSet::apply`] made: the new set, the hooks of the change that it could not
/// load (kept as unavailable), and the slot of each hook of the change, in its order.
#[derive(Debug)]
pub struct Applied {
    pub set: HookSet,
    pub rejected: Vec<RejectedHook>,
    pub slots: Vec<Slot>,
}

/// Hooks indexed by event and tenant, each list in resolution order.
#[derive(Debug, Default)]
pub struct HookSet {
    by_event: [Arc<EventIndex>; HookEvent::ALL.len()],
    /// (source, e.g. snapshot epoch/version or file path; version).
    pub version: u64,
    pub master_namespace: String,
    len: usize,
    /// Hooks of the input this dispatcher could not load, sorted by `namespace/name`.
    unavailable: Arc<Vec<UnavailableHook>>,
    /// The namespaces' tenants of the snapshot (empty in standalone mode): which tenant
    /// a Kubernetes caller may act for (CONTRACT §9.2).
    pub tenants: Arc<agenthooks_crds::tenancy::TenantMap>,
}

/// Whether `previous`, a hook of the set served before, is the same version of the hook
/// `s` describes: same uid, generation, namespace tenant and reset token, same spec and
/// name. Such a hook is reused with its compiled form, breaker state and counters.
fn same_version(previous: &LoadedHook, s: &SnapshotHook) -> bool {
    previous.uid == s.uid
        && previous.generation == s.generation
        && previous.namespace_tenant == s.namespace_tenant
        && previous.reset_token == s.reset_token
        && previous.spec == s.spec
        && previous.namespace == s.namespace
        && previous.name == s.name
}

/// Loads one hook: `previous` (the hook of the same `namespace/name` in the set served
/// before, if any) when it is the same version ([`same_version`]), else validated and
/// compiled with `edition`. A hook that does not validate comes back as the
/// [`UnavailableHook`] and [`RejectedHook`] to keep and report.
fn load(
    s: SnapshotHook,
    previous: Option<&Arc<LoadedHook>>,
    master_namespace: &str,
    edition: Edition,
) -> Result<Arc<LoadedHook>, Box<(UnavailableHook, RejectedHook)>> {
    if let Some(h) = previous.filter(|h| same_version(h, &s)) {
        // Same version: its breakers stay, following what the operator says is open now
        // (CONTRACT §6.5).
        h.breaker.follow(&s.open_breakers);
        return Ok(Arc::clone(h));
    }
    let ctx = ValidationContext {
        namespace: &s.namespace,
        namespace_tenant: &s.namespace_tenant,
        master_namespace,
        edition,
        // A hooks file has no tenants; a snapshot holds only what the operator accepted
        // under its own setting (CONTRACT §10.1).
        command_hooks: CommandHookPolicy::AnyNamespace,
    };
    match validate(&s.spec, &ctx) {
        Ok(compiled) => Ok(Arc::new(LoadedHook {
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
        })),
        Err(errors) => Err(Box::new((
            UnavailableHook::new(&s, &errors),
            RejectedHook {
                namespace: s.namespace,
                name: s.name,
                errors,
            },
        ))),
    }
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
        type Lists = (Vec<Arc<LoadedHook>>, HashMap<String, Vec<Arc<LoadedHook>>>);
        let mut lists: [Lists; HookEvent::ALL.len()] = Default::default();
        let mut rejected = Vec::new();
        let mut unavailable = Vec::new();
        let mut len = 0;
        for s in sources {
            let previous = reuse
                .get(&(
                    s.uid.as_str(),
                    s.generation,
                    s.namespace_tenant.as_str(),
                    s.reset_token.as_deref(),
                ))
                .copied();
            let hook = match load(s, previous, master_namespace, edition) {
                Ok(hook) => hook,
                Err(bad) => {
                    let (u, r) = *bad;
                    unavailable.push(u);
                    rejected.push(r);
                    continue;
                }
            };
            len += 1;
            let (global, by_tenant) = &mut lists[hook.spec.event as usize];
            match hook.spec.scope {
                HookScope::Global => global.push(hook),
                HookScope::Tenant | HookScope::Agent => by_tenant
                    .entry(hook.compiled.tenant.clone())
                    .or_default()
                    .push(hook),
            }
        }
        let by_event = lists.map(|(global, by_tenant)| {
            Arc::new(EventIndex {
                global: Arc::new(HookList::new(global)),
                by_tenant: by_tenant
                    .into_iter()
                    .map(|(t, hooks)| (t, Arc::new(HookList::new(hooks))))
                    .collect(),
            })
        });
        unavailable.sort_by(|a: &UnavailableHook, b| a.key.cmp(&b.key));
        (
            HookSet {
                by_event,
                version,
                master_namespace: master_namespace.to_string(),
                len,
                unavailable: Arc::new(unavailable),
                tenants: Default::default(),
            },
            rejected,
        )
    }

    /// The set at `version` after a change: the hooks `removed` (each by its key and the
    /// slot this set keeps it in, as [`LoadedHook::slot`] or [`Slot::Unavailable`] told)
    /// are gone, and `upserts` are added (a hook replacing one of this set names it in
    /// `removed`). The result is the set [`HookSet::build`] would make of this set's
    /// hooks with the change, given this set as `previous` — the same hooks in the same
    /// order, the same hooks reused — but only the lists of the slots the change touches
    /// are made anew; every other list is shared with this set. Tenants and the master
    /// namespace stay this set's.
    ///
    /// Each key of `removed` must be held by this set in that slot, and each hook of
    /// `upserts` must be absent from it or named in `removed`: a key that is not there
    /// is ignored, a duplicate would be served twice.
    pub fn apply(
        &self,
        removed: &[(&str, &Slot)],
        upserts: Vec<SnapshotHook>,
        edition: Edition,
        version: u64,
    ) -> Applied {
        // The lists the change touches: per (event, tenant) the keys leaving it.
        let mut gone: HashMap<(HookEvent, Option<&str>), HashSet<&str>> = HashMap::new();
        let mut gone_unavailable: HashSet<&str> = HashSet::new();
        for (key, slot) in removed {
            match slot {
                Slot::Listed { event, tenant } => gone
                    .entry((*event, tenant.as_deref()))
                    .or_default()
                    .insert(key),
                Slot::Unavailable => gone_unavailable.insert(key),
            };
        }
        // The hooks leaving, by key: an upsert of the same version reuses its hook.
        let mut leaving: HashMap<&str, &Arc<LoadedHook>> = HashMap::new();
        for ((event, tenant), keys) in &gone {
            if let Some(list) = self.by_event[*event as usize].list(*tenant) {
                leaving.extend(
                    list.hooks
                        .iter()
                        .filter(|h| keys.contains(&h.key.as_str()))
                        .map(|h| (h.key.as_str(), h)),
                );
            }
        }
        let mut added: HashMap<(HookEvent, Option<String>), Vec<Arc<LoadedHook>>> = HashMap::new();
        let mut rejected = Vec::new();
        let mut new_unavailable = Vec::new();
        let mut slots = Vec::with_capacity(upserts.len());
        let mut len = self.len;
        for s in upserts {
            let previous = leaving
                .get(format!("{}/{}", s.namespace, s.name).as_str())
                .copied();
            match load(s, previous, &self.master_namespace, edition) {
                Ok(hook) => {
                    let slot = hook.slot();
                    let Slot::Listed { event, tenant } = &slot else {
                        unreachable!("a loaded hook is listed")
                    };
                    added
                        .entry((*event, tenant.clone()))
                        .or_default()
                        .push(hook);
                    slots.push(slot);
                    len += 1;
                }
                Err(bad) => {
                    let (u, r) = *bad;
                    new_unavailable.push(u);
                    rejected.push(r);
                    slots.push(Slot::Unavailable);
                }
            }
        }
        len -= leaving.len();
        // The touched lists, per event.
        let mut touched: HashMap<HookEvent, HashSet<Option<&str>>> = HashMap::new();
        for (event, tenant) in gone.keys() {
            touched.entry(*event).or_default().insert(*tenant);
        }
        for (event, tenant) in added.keys() {
            touched.entry(*event).or_default().insert(tenant.as_deref());
        }
        let mut by_event = self.by_event.clone();
        for (event, tenants) in touched {
            let index = Arc::make_mut(&mut by_event[event as usize]);
            for tenant in tenants {
                let old = self.by_event[event as usize].list(tenant);
                let keys = gone.get(&(event, tenant));
                let mut hooks: Vec<Arc<LoadedHook>> = old
                    .map(|l| {
                        l.hooks
                            .iter()
                            .filter(|h| keys.is_none_or(|k| !k.contains(&h.key.as_str())))
                            .cloned()
                            .collect()
                    })
                    .unwrap_or_default();
                if let Some(new) = added.get(&(event, tenant.map(str::to_string))) {
                    hooks.extend(new.iter().cloned());
                }
                // The kept hooks are in order already: sorting finds one run and merges
                // the added ones into it.
                let list = Arc::new(HookList::new(hooks));
                match tenant {
                    None => index.global = list,
                    Some(t) if list.hooks.is_empty() => {
                        index.by_tenant.remove(t);
                    }
                    Some(t) => {
                        index.by_tenant.insert(t.to_string(), list);
                    }
                }
            }
        }
        let unavailable = if gone_unavailable.is_empty() && new_unavailable.is_empty() {
            Arc::clone(&self.unavailable)
        } else {
            let mut u: Vec<UnavailableHook> = self
                .unavailable
                .iter()
                .filter(|u| !gone_unavailable.contains(&u.key.as_str()))
                .cloned()
                .chain(new_unavailable)
                .collect();
            u.sort_by(|a, b| a.key.cmp(&b.key));
            Arc::new(u)
        };
        Applied {
            set: HookSet {
                by_event,
                version,
                master_namespace: self.master_namespace.clone(),
                len,
                unavailable,
                tenants: Arc::clone(&self.tenants),
            },
            rejected,
            slots,
        }
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
        set.tenants = Arc::new(agenthooks_crds::tenancy::TenantMap::from_entries(
            snapshot.tenants.iter().cloned(),
        ));
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
        self.by_event.iter().flat_map(|index| index.all())
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

    /// [`HookSet::apply`] makes the set [`HookSet::build`] makes of the same hooks with the
    /// set before as `previous`, on random sets and random sequences of changes (adds,
    /// edits, resends of an unchanged hook, removals; hooks this edition cannot load;
    /// lists long enough for a matcher index): the same hooks in the same order for every
    /// event, tenant, agent and tool, the same hook objects reused, the same unavailable
    /// list, and every list the change did not touch shared with the set before.
    mod apply_equals_build {
        use super::*;
        use proptest::prelude::*;

        const NAMESPACES: [&str; 3] = ["agenthooks-system", "tenant-acme", "tenant-globex"];
        const EVENTS: [HookEvent; 2] = [HookEvent::PreToolUse, HookEvent::Stop];
        const PATTERNS: [&str; 6] = ["", "exec", "^Bash$", "e.e", "Write|Edit", "(?i)bash"];
        const TOOLS: [Option<&str>; 5] =
            [None, Some("exec"), Some("Bash"), Some("Edit"), Some("eve")];

        /// (event, scope, pattern, priority, age, command handler).
        type Params = (usize, u8, usize, i32, u8, bool);

        fn params() -> impl Strategy<Value = Params> {
            (
                0..EVENTS.len(),
                0u8..3,
                0..PATTERNS.len(),
                -1i32..2,
                0u8..4,
                prop::bool::weighted(0.15),
            )
        }

        /// Hook `n` (its namespace follows from `n`) as `params` say.
        fn make(n: usize, incarnation: usize, generation: i64, p: Params) -> SnapshotHook {
            let (event, scope, pattern, prio, age, command) = p;
            let handler = if command {
                "{type: command, command: {command: 'exit 0'}}"
            } else {
                "{type: http, http: {url: 'https://a.example'}}"
            };
            let mut yaml = format!(
                "event: {}\nhandler: {handler}\npriority: {prio}\n",
                EVENTS[event].as_str()
            );
            if !PATTERNS[pattern].is_empty() {
                yaml.push_str(&format!("matcher: '{}'\n", PATTERNS[pattern]));
            }
            // A global hook outside the master namespace does not validate: unavailable.
            match scope {
                0 => yaml.push_str("scope: global\n"),
                2 => yaml.push_str("scope: agent\nagentIds: [a1]\n"),
                _ => {}
            }
            let mut s = source(
                NAMESPACES[n % NAMESPACES.len()],
                &format!("h{n}"),
                &yaml,
                &format!("2026-01-01T00:00:0{age}Z"),
            );
            s.uid = format!("uid-{n}-{incarnation}");
            s.generation = generation;
            s
        }

        /// Where `set` keeps each hook, by key.
        fn slots(set: &HookSet) -> HashMap<String, Slot> {
            set.iter()
                .map(|h| (h.key.clone(), h.slot()))
                .chain(
                    set.unavailable()
                        .iter()
                        .map(|u| (u.key.clone(), Slot::Unavailable)),
                )
                .collect()
        }

        fn contains(set: &HookSet, hook: &Arc<LoadedHook>) -> bool {
            set.iter().any(|h| Arc::ptr_eq(h, hook))
        }

        /// Both sets serve the same hooks, in the same order, reusing the same ones of
        /// `before`.
        fn same(applied: &HookSet, built: &HookSet, before: &HookSet) -> Result<(), TestCaseError> {
            prop_assert_eq!(applied.len(), built.len());
            prop_assert_eq!(applied.unavailable(), built.unavailable());
            prop_assert_eq!(applied.version, built.version);
            for event in EVENTS {
                for tenant in ["acme", "globex", "initech"] {
                    for agent in ["a1", "a2"] {
                        for tool in TOOLS {
                            let a: Vec<_> = applied.select(event, tenant, agent, tool).collect();
                            let b: Vec<_> = built.select(event, tenant, agent, tool).collect();
                            let keys = |v: &[&Arc<LoadedHook>]| {
                                v.iter()
                                    .map(|h| (h.key.clone(), h.generation))
                                    .collect::<Vec<_>>()
                            };
                            prop_assert_eq!(
                                keys(&a),
                                keys(&b),
                                "{:?} {} {} {:?}",
                                event,
                                tenant,
                                agent,
                                tool
                            );
                            for (x, y) in a.iter().zip(&b) {
                                prop_assert!(
                                    Arc::ptr_eq(x, y)
                                        || (!contains(before, x) && !contains(before, y)),
                                    "{} reused on one side only",
                                    x.key
                                );
                            }
                        }
                    }
                    let a: Vec<_> = applied
                        .resolve(event, tenant, "a1")
                        .map(|h| h.key.clone())
                        .collect();
                    let b: Vec<_> = built
                        .resolve(event, tenant, "a1")
                        .map(|h| h.key.clone())
                        .collect();
                    prop_assert_eq!(a, b);
                }
            }
            Ok(())
        }

        proptest! {
            #![proptest_config(ProptestConfig::with_cases(48))]
            #[test]
            fn apply_makes_what_build_makes(
                initial in prop::collection::vec((0usize..60, params()), 0..60),
                steps in prop::collection::vec(
                    prop::collection::vec((0usize..60, 0u8..4, params()), 1..8), 1..8),
            ) {
                let edition = Edition::Standard;
                // What the set holds: hook number → (incarnation, source).
                let mut held: HashMap<usize, (usize, SnapshotHook)> = HashMap::new();
                for (n, p) in initial {
                    held.entry(n).or_insert_with(|| (0, make(n, 0, 1, p)));
                }
                let (mut set, _) = HookSet::build(
                    held.values().map(|(_, s)| s.clone()).collect(),
                    "agenthooks-system", edition, 1, None,
                );
                for (i, ops) in steps.into_iter().enumerate() {
                    let version = i as u64 + 2;
                    let before_slots = slots(&set);
                    let mut named = HashSet::new();
                    let mut removed: Vec<(String, Slot)> = Vec::new();
                    let mut upserts = Vec::new();
                    for (n, action, p) in ops {
                        if !named.insert(n) {
                            continue; // a change names a hook once
                        }
                        let key = |s: &SnapshotHook| format!("{}/{}", s.namespace, s.name);
                        match (held.get(&n).cloned(), action) {
                            // Removed.
                            (Some((_, old)), 0) => {
                                let k = key(&old);
                                removed.push((k.clone(), before_slots[&k].clone()));
                                held.remove(&n);
                            }
                            // Sent again unchanged, its breaker news aside.
                            (Some((inc, mut old)), 1) => {
                                let k = key(&old);
                                removed.push((k.clone(), before_slots[&k].clone()));
                                old.open_breakers = vec![agenthooks_crds::snapshot::OpenBreaker {
                                    tenant: "acme".into(), since_ms: 1, fail_closed: false,
                                }];
                                upserts.push(old.clone());
                                held.insert(n, (inc, old));
                            }
                            // Edited: a new generation.
                            (Some((inc, old)), _) => {
                                let k = key(&old);
                                removed.push((k.clone(), before_slots[&k].clone()));
                                let new = make(n, inc, old.generation + 1, p);
                                upserts.push(new.clone());
                                held.insert(n, (inc, new));
                            }
                            // Added (again: a new uid).
                            (None, _) => {
                                let inc = n * 100 + i + 1;
                                let new = make(n, inc, 1, p);
                                upserts.push(new.clone());
                                held.insert(n, (inc, new));
                            }
                        }
                    }
                    let removed_refs: Vec<(&str, &Slot)> =
                        removed.iter().map(|(k, s)| (k.as_str(), s)).collect();
                    let applied = set.apply(&removed_refs, upserts.clone(), edition, version);
                    let (built, _) = HookSet::build(
                        held.values().map(|(_, s)| s.clone()).collect(),
                        "agenthooks-system", edition, version, Some(&set),
                    );
                    same(&applied.set, &built, &set)?;
                    // The slots it tells are where the set keeps the hooks.
                    let after = slots(&applied.set);
                    prop_assert_eq!(applied.slots.len(), upserts.len());
                    for (u, slot) in upserts.iter().zip(&applied.slots) {
                        prop_assert_eq!(&after[&format!("{}/{}", u.namespace, u.name)], slot);
                    }
                    prop_assert_eq!(after, slots(&built));
                    // Lists the change did not touch are the set's before.
                    let touched: HashSet<Slot> = removed
                        .iter()
                        .map(|(_, s)| s.clone())
                        .chain(applied.slots.iter().cloned())
                        .collect();
                    for (e, index) in set.by_event.iter().enumerate() {
                        let new = &applied.set.by_event[e];
                        let lists = std::iter::once((None, &index.global))
                            .chain(index.by_tenant.iter().map(|(t, l)| (Some(t.clone()), l)));
                        for (tenant, list) in lists {
                            let slot = Slot::Listed { event: HookEvent::ALL[e], tenant: tenant.clone() };
                            if !touched.contains(&slot) {
                                prop_assert!(Arc::ptr_eq(list, new.list(tenant.as_deref()).unwrap()));
                            }
                        }
                    }
                    set = applied.set;
                }
            }
        }
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
            // Whole-name patterns: looked up by name, not tested (`exact_names`).
            "^Bash$",
            "^(Write|Edit)$",
            r"\Amcp__github__create\z",
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
