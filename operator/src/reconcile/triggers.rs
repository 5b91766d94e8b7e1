//! What makes an AgentHook reconcile: its own changes that matter, a change of its
//! namespace's tenant claim, the Secrets its headers read.

use std::collections::BTreeSet;
use std::hash::{DefaultHasher, Hash, Hasher};

use agenthooks_crds::{AgentHook, RESET_BREAKER_ANNOTATION};
use kube::ResourceExt;
use kube::runtime::reflector::{ObjectRef, Store};

use super::secrets::secret_names;
use crate::status::breaker_open;

/// Predicate of the hook watch: a hash of what the reconciler reads from the hook apart
/// from its own status writes — `metadata.generation`, the open breakers
/// ([`breaker_open`]: the tenants recorded open for this generation and annotation), and
/// the reset-breaker annotation.
///
/// So: a spec edit or an annotation change reconciles (and the reconcile closes a breaker
/// that no longer applies); a recorded trip or close reconciles once (the index takes the
/// status's open breakers, e.g. after a leader change). The
/// operator's other status writes — `Accepted`/`Ready`, the breaker reset (which writes
/// `Closed` only once [`breaker_open`] is already false) and the batched
/// `status.executions` — leave the hash unchanged, so they never trigger a reconcile
/// (no feedback loop).
pub fn hook_trigger(hook: &AgentHook) -> Option<u64> {
    let generation = hook.metadata.generation;
    let annotation = hook.annotations().get(RESET_BREAKER_ANNOTATION);
    let mut h = DefaultHasher::new();
    generation.hash(&mut h);
    for b in breaker_open(
        hook.status.as_ref(),
        generation.unwrap_or(0),
        annotation.map(String::as_str),
    ) {
        (b.tenant, b.since_ms, b.fail_closed).hash(&mut h);
    }
    annotation.hash(&mut h);
    Some(h.finish())
}

/// Every hook of the namespaces `namespaces` (their tenant claim moved: a label, a
/// namespace added or deleted elsewhere).
pub fn hooks_in_namespaces(
    store: &Store<AgentHook>,
    namespaces: &BTreeSet<String>,
) -> Vec<ObjectRef<AgentHook>> {
    if namespaces.is_empty() {
        return Vec::new();
    }
    store
        .state()
        .iter()
        .filter(|h| {
            h.metadata
                .namespace
                .as_ref()
                .is_some_and(|ns| namespaces.contains(ns))
        })
        .map(|h| ObjectRef::from_obj(&**h))
        .collect()
}

/// Every hook of namespace `ns` with a header read from Secret `secret`.
pub fn hooks_using_secret(
    store: &Store<AgentHook>,
    ns: &str,
    secret: &str,
) -> Vec<ObjectRef<AgentHook>> {
    store
        .state()
        .iter()
        .filter(|h| h.namespace().as_deref() == Some(ns) && secret_names(&h.spec).contains(secret))
        .map(|h| ObjectRef::from_obj(&**h))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::status::{BREAKER_CLOSED, BREAKER_OPEN};
    use agenthooks_crds::AgentHookStatus;
    use agenthooks_crds::agenthook::{BreakerStatus, ExecutionsStatus};
    use kube::runtime::watcher::Event;

    fn obj(ns: &str, name: &str, generation: i64, secret: Option<&str>) -> AgentHook {
        let mut spec = crate::index::tests::spec(0);
        if let Some(s) = secret {
            spec.handler.http.as_mut().unwrap().headers = serde_json::from_value(serde_json::json!([
                {"name": "Authorization", "valueFrom": {"secretKeyRef": {"name": s, "key": "k"}}}
            ]))
            .unwrap();
        }
        let mut h = AgentHook::new(name, spec);
        h.metadata.namespace = Some(ns.into());
        h.metadata.uid = Some(format!("{ns}-{name}"));
        h.metadata.generation = Some(generation);
        h
    }

    fn breaker(state: &str, generation: i64, annotation: Option<&str>) -> BreakerStatus {
        BreakerStatus {
            state: Some(state.into()),
            tripped_at: Some("2025-01-01T00:00:00Z".into()),
            reason: Some("5 timeouts in a row".into()),
            dispatcher: Some("d1".into()),
            generation: Some(generation),
            reset_annotation: annotation.map(str::to_string),
            open: vec![agenthooks_crds::agenthook::TenantBreakerStatus {
                tenant: "t1".into(),
                tripped_at: "2025-01-01T00:00:00Z".into(),
                ..Default::default()
            }],
        }
    }

    fn with_status(h: &AgentHook, status: AgentHookStatus) -> AgentHook {
        let mut h = h.clone();
        h.status = Some(status);
        h
    }

    #[test]
    fn status_writes_do_not_trigger_but_spec_and_breaker_do() {
        let h = obj("a", "h", 1, None);
        let base = hook_trigger(&h);
        let ours = with_status(
            &h,
            AgentHookStatus {
                observed_generation: Some(1),
                conditions: crate::status::plan(
                    None,
                    1,
                    &[crate::status::accepted_condition(
                        &crate::index::Verdict::Accepted,
                    )],
                    &crate::status::now(),
                )
                .unwrap()
                .conditions,
                ..Default::default()
            },
        );
        assert_eq!(hook_trigger(&ours), base, "our own status write");
        let counted = with_status(
            &h,
            AgentHookStatus {
                executions: Some(ExecutionsStatus {
                    allow: 7,
                    ..Default::default()
                }),
                ..Default::default()
            },
        );
        assert_eq!(hook_trigger(&counted), base, "an executions write");
        let mut edited = h.clone();
        edited.metadata.generation = Some(2);
        assert_ne!(hook_trigger(&edited), base);
        let tripped = with_status(
            &h,
            AgentHookStatus {
                breaker: Some(breaker(BREAKER_OPEN, 1, None)),
                ..Default::default()
            },
        );
        assert_ne!(hook_trigger(&tripped), base, "a trip for this generation");
        let stale = with_status(
            &h,
            AgentHookStatus {
                breaker: Some(breaker(BREAKER_OPEN, 0, None)),
                ..Default::default()
            },
        );
        assert_eq!(hook_trigger(&stale), base, "a trip of an older generation");
    }

    #[test]
    fn annotation_changes_trigger_and_the_reset_write_does_not() {
        let mut h = obj("a", "h", 1, None);
        h.status = Some(AgentHookStatus {
            breaker: Some(breaker(BREAKER_OPEN, 1, None)),
            ..Default::default()
        });
        let open = hook_trigger(&h);
        let mut annotated = h.clone();
        annotated
            .annotations_mut()
            .insert(RESET_BREAKER_ANNOTATION.into(), "1".into());
        let reset_asked = hook_trigger(&annotated);
        assert_ne!(reset_asked, open, "the annotation change reconciles");
        // the reconcile writes the breaker closed: no further trigger
        annotated.status = Some(AgentHookStatus {
            breaker: Some(breaker(BREAKER_CLOSED, 1, None)),
            ..Default::default()
        });
        assert_eq!(hook_trigger(&annotated), reset_asked, "no write loop");
        // tripped again under the new annotation: reconciles once more
        annotated.status = Some(AgentHookStatus {
            breaker: Some(breaker(BREAKER_OPEN, 1, Some("1"))),
            ..Default::default()
        });
        assert_ne!(hook_trigger(&annotated), reset_asked);
    }

    #[test]
    fn namespace_and_secret_mappers() {
        let (reader, mut writer) = kube::runtime::reflector::store::<AgentHook>();
        for h in [
            obj("a", "h1", 1, Some("tok")),
            obj("a", "h2", 1, None),
            obj("b", "h3", 1, Some("tok")),
        ] {
            writer.apply_watcher_event(&Event::Apply(h));
        }
        let names = |nss: &[&str]| {
            let set: BTreeSet<String> = nss.iter().map(|s| s.to_string()).collect();
            let mut names: Vec<String> = hooks_in_namespaces(&reader, &set)
                .into_iter()
                .map(|r| format!("{}/{}", r.namespace.unwrap_or_default(), r.name))
                .collect();
            names.sort();
            names
        };
        assert_eq!(names(&["a"]), ["a/h1", "a/h2"]);
        assert_eq!(names(&["a", "b"]), ["a/h1", "a/h2", "b/h3"]);
        assert!(names(&["c"]).is_empty());
        assert!(names(&[]).is_empty());
        let users: Vec<String> = hooks_using_secret(&reader, "a", "tok")
            .into_iter()
            .map(|r| r.name)
            .collect();
        assert_eq!(users, ["h1"], "same namespace only");
        assert!(hooks_using_secret(&reader, "a", "other").is_empty());
    }
}
