use std::sync::Arc;

use agenthooks_crds::snapshot::{
    OpenBreaker, RemovedHook, Snapshot, SnapshotDelta, SnapshotHook, digest, format_digest,
};
use agenthooks_crds::tenancy::NamespaceTenant;

use super::*;

const H: &str = "event: pre_tool_use\nhandler: {type: http, http: {url: 'https://a.example'}}\n";

fn hook(name: &str, uid: &str, generation: i64, matcher: &str) -> SnapshotHook {
    SnapshotHook {
        uid: uid.into(),
        namespace: "tenant-acme".into(),
        name: name.into(),
        generation,
        created_at: "2026-01-01T00:00:00Z".into(),
        namespace_tenant: "acme".into(),
        spec: serde_norway::from_str(&format!("{H}matcher: '{matcher}'\n")).unwrap(),
        reset_token: None,
        sealed_headers: vec![],
        open_breakers: vec![],
    }
}

fn digest_of(hooks: &[SnapshotHook]) -> String {
    let jsons: Vec<Vec<u8>> = hooks
        .iter()
        .map(|h| serde_json::to_vec(h).unwrap())
        .collect();
    format_digest(digest(jsons.iter().map(Vec::as_slice)))
}

fn tenants(tenant: &str) -> Vec<NamespaceTenant> {
    vec![NamespaceTenant {
        namespace: "tenant-acme".into(),
        tenant: tenant.into(),
        held_by: None,
    }]
}

/// A complete snapshot as the operator sends it (with its digest).
fn snapshot(version: u64, hooks: Vec<SnapshotHook>) -> Vec<u8> {
    serde_json::to_vec(&Snapshot {
        epoch: "ep".into(),
        version,
        master_namespace: "agenthooks-system".into(),
        digest: Some(digest_of(&hooks)),
        hooks,
        tenants: tenants("acme"),
    })
    .unwrap()
}

/// The delta from `base` that leaves `after` (removing `removed`, sending `upserts`).
fn delta(
    base: u64,
    version: u64,
    upserts: Vec<SnapshotHook>,
    removed: Vec<RemovedHook>,
    after: &[SnapshotHook],
) -> SnapshotDelta {
    SnapshotDelta {
        epoch: "ep".into(),
        base,
        version,
        hooks: upserts,
        removed,
        tenants: None,
        hook_count: after.len(),
        digest: digest_of(after),
    }
}

fn removed(name: &str, uid: &str) -> RemovedHook {
    RemovedHook {
        namespace: "tenant-acme".into(),
        name: name.into(),
        uid: uid.into(),
    }
}

fn json(d: &SnapshotDelta) -> Vec<u8> {
    serde_json::to_vec(d).unwrap()
}

fn sorted(mut hooks: Vec<SnapshotHook>) -> Vec<SnapshotHook> {
    hooks.sort_by(|a, b| a.name.cmp(&b.name));
    hooks
}

/// The sources of the hooks the set serves, sorted by name.
fn sources(s: &SyncedSet) -> Vec<SnapshotHook> {
    sorted(s.set().unwrap().iter().map(|h| h.source.clone()).collect())
}

/// What is held: (epoch, version, count, digest).
fn state(s: &SyncedSet) -> (String, u64, usize, u64) {
    (s.epoch().to_string(), s.version(), s.len(), s.digest())
}

fn held_at_1() -> SyncedSet {
    held_at_1_by(Edition::Lite)
}

fn held_at_1_by(edition: Edition) -> SyncedSet {
    let mut s = SyncedSet::new(edition);
    let body = snapshot(
        1,
        vec![hook("a", "ua", 1, "^a$"), hook("b", "ub", 1, "^b$")],
    );
    assert_eq!(s.absorb(&body).unwrap().absorbed, Absorbed::Snapshot);
    assert!(s.takes_deltas(), "the digests agree");
    s
}

#[test]
fn a_delta_leaves_what_the_complete_snapshot_of_its_version_holds() {
    let mut s = held_at_1();
    let after = vec![hook("a", "ua", 2, "^a2$"), hook("c", "uc", 1, "^c$")];
    let d = delta(
        1,
        2,
        vec![after[0].clone(), after[1].clone()],
        vec![removed("b", "ub")],
        &after,
    );
    let taken = s.absorb(&json(&d)).unwrap();
    assert_eq!(taken.absorbed, Absorbed::Delta);
    assert!(Arc::ptr_eq(&taken.set, s.set().unwrap()));
    assert_eq!(s.version(), 2);
    assert_eq!(sources(&s), after);
    let mut full = SyncedSet::new(Edition::Lite);
    full.absorb(&snapshot(2, after)).unwrap();
    assert_eq!(s.digest(), full.digest());
    assert_eq!(s.len(), 2);
    let keys = |s: &SyncedSet| -> Vec<String> {
        let set = s.set().unwrap();
        set.resolve(agenthooks_crds::HookEvent::PreToolUse, "acme", "x")
            .map(|h| format!("{}@{}", h.key, h.generation))
            .collect()
    };
    assert_eq!(keys(&s), keys(&full));
    assert_eq!(keys(&s), ["tenant-acme/a@2", "tenant-acme/c@1"]);

    // The tenant map travels whole, when it changed; else it stays.
    let d = delta(2, 3, vec![], vec![], &sources(&s));
    s.absorb(&json(&d)).unwrap();
    let set = s.set().unwrap();
    assert_eq!(set.tenants.tenant_of("tenant-acme"), Ok(Some("acme")));
    let mut d = delta(3, 4, vec![], vec![], &sources(&s));
    d.tenants = Some(tenants("acme-2"));
    s.absorb(&json(&d)).unwrap();
    let set = s.set().unwrap();
    assert_eq!(set.tenants.tenant_of("tenant-acme"), Ok(Some("acme-2")));
    assert_eq!(set.version, 4);
}

#[test]
fn a_delta_for_another_version_or_epoch_changes_nothing() {
    let mut s = held_at_1();
    let before = state(&s);
    let after = vec![hook("a", "ua", 1, "^a$")];
    for (epoch, base) in [("ep", 0), ("ep", 2), ("other", 1)] {
        let mut d = delta(base, 3, vec![], vec![removed("b", "ub")], &after);
        d.epoch = epoch.into();
        let e = s.absorb(&json(&d)).unwrap_err();
        assert!(
            matches!(e, SyncError::WrongBase { .. }),
            "{epoch}/{base}: {e}"
        );
        assert_eq!(state(&s), before, "{epoch}/{base}");
    }
    // Nothing held yet: no delta applies.
    let mut empty = SyncedSet::new(Edition::Lite);
    let d = delta(0, 1, vec![hook("a", "ua", 1, "^a$")], vec![], &after);
    assert!(matches!(
        empty.absorb(&json(&d)),
        Err(SyncError::WrongBase { .. })
    ));
}

#[test]
fn a_delta_that_does_not_leave_the_operators_set_changes_nothing() {
    let mut s = held_at_1();
    let before = state(&s);
    let after = vec![hook("a", "ua", 1, "^a$")];
    // A removal of a hook not held, or held with another uid (deleted and created again).
    for r in [removed("zz", "uz"), removed("b", "other-uid")] {
        let d = delta(1, 2, vec![], vec![r], &after);
        let e = s.absorb(&json(&d)).unwrap_err();
        assert!(matches!(e, SyncError::UnknownRemoval { .. }), "{e}");
        assert_eq!(state(&s), before);
    }
    // A gap the operator did not see: the delta misses a change (b edited in between).
    let edited_b = hook("b", "ub", 2, "^b2$");
    let truth = vec![
        hook("a", "ua", 1, "^a$"),
        edited_b,
        hook("c", "uc", 1, "^c$"),
    ];
    let d = delta(1, 3, vec![truth[2].clone()], vec![], &truth);
    let e = s.absorb(&json(&d)).unwrap_err();
    assert!(matches!(e, SyncError::Mismatch { .. }), "{e}");
    assert_eq!(state(&s), before);
    // A count that is not the result's.
    let mut d = delta(1, 2, vec![], vec![removed("b", "ub")], &after);
    d.hook_count = 2;
    assert!(matches!(
        s.absorb(&json(&d)),
        Err(SyncError::Mismatch { .. })
    ));
    // A hook named twice.
    let d = delta(
        1,
        2,
        vec![hook("a", "ua", 2, "^x$"), hook("a", "ua", 3, "^y$")],
        vec![],
        &after,
    );
    assert!(matches!(s.absorb(&json(&d)), Err(SyncError::Duplicate(_))));
    // No digest.
    let mut v: serde_json::Value = serde_json::from_slice(&json(&delta(
        1,
        2,
        vec![],
        vec![removed("b", "ub")],
        &after,
    )))
    .unwrap();
    v.as_object_mut().unwrap().remove("digest");
    assert!(matches!(
        s.absorb(&serde_json::to_vec(&v).unwrap()),
        Err(SyncError::NoDigest)
    ));
    // Unreadable: not JSON, a hook that is not a hook.
    assert!(matches!(
        s.absorb(b"{not json"),
        Err(SyncError::Unreadable { .. })
    ));
    let bad = br#"{"epoch":"ep","base":1,"version":2,"hooks":[{"uid":1}],"removed":[],"hookCount":2,"digest":"0"}"#;
    let e = s.absorb(bad).unwrap_err();
    assert!(
        matches!(e, SyncError::Unreadable { body: "delta", .. }),
        "{e}"
    );
    assert_eq!(state(&s), before, "nothing of it was applied");
    // The right delta still applies afterwards.
    let d = delta(1, 2, vec![], vec![removed("b", "ub")], &after);
    assert_eq!(s.absorb(&json(&d)).unwrap().absorbed, Absorbed::Delta);
    assert_eq!(s.len(), 1);
    assert_eq!(s.set().unwrap().len(), 1);
}

#[test]
fn a_snapshot_whose_digest_is_not_ours_is_taken_but_no_delta_is_asked_for() {
    let mut s = SyncedSet::new(Edition::Lite);
    let hooks = vec![hook("a", "ua", 1, "^a$")];
    let mut v: serde_json::Value = serde_json::from_slice(&snapshot(4, hooks.clone())).unwrap();
    v["digest"] = "0000000000000000".into();
    assert_eq!(
        s.absorb(&serde_json::to_vec(&v).unwrap()).unwrap().absorbed,
        Absorbed::Snapshot
    );
    assert_eq!((s.version(), s.len()), (4, 1));
    assert!(!s.takes_deltas());
    // An operator that sends no digest (no deltas either).
    v.as_object_mut().unwrap().remove("digest");
    s.absorb(&serde_json::to_vec(&v).unwrap()).unwrap();
    assert!(!s.takes_deltas());
    // A snapshot is always complete: it replaces whatever is held, at any version.
    s.absorb(&snapshot(2, vec![])).unwrap();
    assert_eq!((s.version(), s.len()), (2, 0));
    assert!(s.takes_deltas());
}

#[test]
fn unchanged_hooks_keep_their_compiled_form_and_breakers_across_a_delta() {
    let mut s = held_at_1();
    let first = Arc::clone(s.set().unwrap());
    assert_eq!(first.len(), 2);
    // b's breaker opens for tenant acme (the operator's trip); a is edited.
    let mut b = hook("b", "ub", 1, "^b$");
    b.open_breakers = vec![OpenBreaker {
        tenant: "acme".into(),
        since_ms: 1,
        fail_closed: true,
    }];
    let a2 = hook("a", "ua", 2, "^a2$");
    let after = vec![a2.clone(), b.clone()];
    s.absorb(&json(&delta(1, 2, vec![a2, b], vec![], &after)))
        .unwrap();
    let second = Arc::clone(s.set().unwrap());
    let b_before = first.get("tenant-acme/b").unwrap();
    let b_after = second.get("tenant-acme/b").unwrap();
    assert!(
        Arc::ptr_eq(b_before, b_after),
        "same version: the compiled hook is reused"
    );
    assert!(
        b_after.breaker.is_open("acme"),
        "and follows the operator's open breakers"
    );
    assert!(!Arc::ptr_eq(
        first.get("tenant-acme/a").unwrap(),
        second.get("tenant-acme/a").unwrap()
    ));
    assert_eq!(second.get("tenant-acme/a").unwrap().generation, 2);
}

#[test]
fn a_hook_this_edition_cannot_load_is_kept_unavailable() {
    let mut s = held_at_1_by(Edition::Standard);
    let mut cmd = hook("cmd", "uc", 1, "^c$");
    cmd.spec = serde_norway::from_str(
        "event: pre_tool_use\nhandler: {type: command, command: {command: 'exit 0'}}",
    )
    .unwrap();
    let after = vec![
        hook("a", "ua", 1, "^a$"),
        hook("b", "ub", 1, "^b$"),
        cmd.clone(),
    ];
    let taken = s
        .absorb(&json(&delta(1, 2, vec![cmd.clone()], vec![], &after)))
        .unwrap();
    assert_eq!((taken.set.len(), taken.rejected.len()), (2, 1));
    assert_eq!(taken.set.unavailable()[0].key, "tenant-acme/cmd");
    assert_eq!(s.len(), 3, "held, and unavailable");

    // An unchanged hook's delta (a's breaker news) does not report cmd again.
    let taken = s
        .absorb(&json(&delta(2, 3, vec![after[0].clone()], vec![], &after)))
        .unwrap();
    assert!(taken.rejected.is_empty());
    assert_eq!(taken.set.unavailable().len(), 1);

    // Fixed (an http hook now): loaded, no longer unavailable.
    let fixed = hook("cmd", "uc", 2, "^c$");
    let after = vec![after[0].clone(), after[1].clone(), fixed.clone()];
    let taken = s
        .absorb(&json(&delta(3, 4, vec![fixed], vec![], &after)))
        .unwrap();
    assert_eq!((taken.set.len(), taken.set.unavailable().len()), (3, 0));

    // Broken again, then removed: gone from the unavailable list too.
    let after_broken = vec![after[0].clone(), after[1].clone(), cmd.clone()];
    s.absorb(&json(&delta(4, 5, vec![cmd], vec![], &after_broken)))
        .unwrap();
    assert_eq!(s.set().unwrap().unavailable().len(), 1);
    let taken = s
        .absorb(&json(&delta(
            5,
            6,
            vec![],
            vec![removed("cmd", "uc")],
            &after_broken[..2],
        )))
        .unwrap();
    assert_eq!((taken.set.len(), taken.set.unavailable().len()), (2, 0));
    assert_eq!(s.len(), 2);
}
