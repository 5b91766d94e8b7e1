//! The status writer against a fake object store that answers each patch as a test
//! scripts it (the writes themselves on the real API server: `operator/tests/report.rs`,
//! `operator/tests/budget_*.rs`).

use std::collections::VecDeque;
use std::sync::Mutex;

use agenthooks_crds::budget::TenantHookBudgetStatus;
use agenthooks_crds::{TenantHookBudget, TenantHookBudgetSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};

use super::*;
use crate::report::api::tests::api_error;

/// How the fake answers one patch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Answer {
    /// Applied (if its precondition holds, else 409).
    Apply,
    /// Another writer adds 100 to `used` first, so the patch meets 409.
    OtherWritesFirst,
    /// Applied, but the answer is lost (504).
    LostAfterApply,
    /// Not applied, no answer (504).
    LostBeforeApply,
    /// Another writer adds 100 to `used`; ours is not applied, no answer (504).
    OtherWritesThenLost,
    /// Refused with this code.
    Refuse(u16),
}

#[derive(Debug)]
struct Store {
    object: TenantHookBudget,
    /// Every version, oldest first (for `first_change_after`).
    history: Vec<TenantHookBudget>,
    script: VecDeque<Answer>,
    reads: u32,
    patches: Vec<(u32, bool, Value)>,
}

/// One budget in a fake store.
struct Fake(Mutex<Store>);

fn budget(used: i64, conditions: Vec<Condition>) -> TenantHookBudget {
    let mut b = TenantHookBudget::new(
        "b",
        TenantHookBudgetSpec {
            tenant: None,
            monthly_tokens: 1_000,
        },
    );
    b.metadata.namespace = Some("ns".into());
    b.metadata.uid = Some("u1".into());
    b.metadata.resource_version = Some("10".into());
    b.status = Some(TenantHookBudgetStatus {
        period: Some("2026-11".into()),
        used,
        remaining: 1_000 - used,
        conditions,
        ..Default::default()
    });
    b
}

/// RFC 7386 merge of `patch` into `target`.
fn merge(target: &mut Value, patch: &Value) {
    match (target, patch) {
        (Value::Object(t), Value::Object(p)) => {
            for (k, v) in p {
                if v.is_null() {
                    t.remove(k);
                } else {
                    merge(t.entry(k.clone()).or_insert(Value::Null), v);
                }
            }
        }
        (t, p) => *t = p.clone(),
    }
}

impl Fake {
    fn new(object: TenantHookBudget, script: &[Answer]) -> Fake {
        Fake(Mutex::new(Store {
            history: vec![object.clone()],
            object,
            script: script.iter().copied().collect(),
            reads: 0,
            patches: Vec::new(),
        }))
    }

    fn store(&self) -> std::sync::MutexGuard<'_, Store> {
        self.0.lock().unwrap()
    }

    fn used(&self) -> i64 {
        self.store().object.status.as_ref().unwrap().used
    }

    /// (reads, patches) so far.
    fn calls(&self) -> (u32, usize) {
        let s = self.store();
        (s.reads, s.patches.len())
    }
}

impl Store {
    /// Applies `status` as a new version.
    fn write(&mut self, status: &Value) {
        let mut v = serde_json::to_value(&self.object).unwrap();
        merge(&mut v["status"], status);
        let rv: u64 = self
            .object
            .metadata
            .resource_version
            .as_ref()
            .unwrap()
            .parse()
            .unwrap();
        v["metadata"]["resourceVersion"] = Value::String((rv + 1).to_string());
        self.object = serde_json::from_value(v).unwrap();
        self.history.push(self.object.clone());
    }
}

impl StatusTarget<TenantHookBudget> for Fake {
    fn key(&self) -> String {
        "ns/b".into()
    }

    fn name(&self) -> &str {
        "b"
    }

    async fn read(&self) -> Result<Option<TenantHookBudget>, kube::Error> {
        let mut s = self.store();
        s.reads += 1;
        Ok(Some(s.object.clone()))
    }

    async fn patch(
        &self,
        attempt: u32,
        params: PatchParams,
        patch: Patch<Value>,
    ) -> Result<Option<TenantHookBudget>, kube::Error> {
        let mut s = self.store();
        let body = match patch {
            Patch::Merge(b) | Patch::Apply(b) => b,
            _ => unreachable!("the writer sends merge patches and applies only"),
        };
        s.patches.push((attempt, params.force, body.clone()));
        let answer = s.script.pop_front().unwrap_or(Answer::Apply);
        if matches!(
            answer,
            Answer::OtherWritesFirst | Answer::OtherWritesThenLost
        ) {
            let used = s.object.status.as_ref().unwrap().used + 100;
            s.write(&serde_json::json!({ "used": used }));
        }
        if let Answer::Refuse(code) = answer {
            return Err(api_error(code));
        }
        if matches!(
            answer,
            Answer::LostBeforeApply | Answer::OtherWritesThenLost
        ) {
            return Err(api_error(504));
        }
        let rv = body["metadata"]["resourceVersion"]
            .as_str()
            .map(str::to_string);
        if rv.is_some() && rv != s.object.metadata.resource_version {
            return Err(api_error(409));
        }
        s.write(&body["status"]);
        if answer == Answer::LostAfterApply {
            return Err(api_error(504));
        }
        Ok(Some(s.object.clone()))
    }

    async fn first_change_after(
        &self,
        version: &str,
    ) -> Result<Option<TenantHookBudget>, kube::Error> {
        let after: u64 = version.parse().unwrap();
        Ok(self
            .store()
            .history
            .iter()
            .find(|o| {
                o.metadata
                    .resource_version
                    .as_ref()
                    .unwrap()
                    .parse::<u64>()
                    .unwrap()
                    > after
            })
            .cloned())
    }
}

fn writer(leader: bool) -> (StatusWriter, Metrics, watch::Sender<Serving>) {
    let metrics = Metrics::new().unwrap();
    let (tx, rx) = watch::channel(Serving {
        leader,
        synced: leader,
    });
    (StatusWriter::new(&metrics, rx), metrics, tx)
}

fn writes(m: &Metrics, kind: WriteKind, outcome: &str) -> u64 {
    m.status_writes_total
        .with_label_values(&[kind.label(), outcome])
        .get()
}

fn conflicts(m: &Metrics, kind: WriteKind) -> u64 {
    m.status_write_conflicts_total
        .with_label_values(&[kind.label()])
        .get()
}

/// Adds `tokens` to `used` (the settle writer's plan).
fn spend(tokens: i64) -> impl FnMut(&TenantHookBudget) -> Plan<i64> + Send {
    move |b| {
        let used = b.status.as_ref().map_or(0, |s| s.used) + tokens;
        Plan::Write {
            status: serde_json::json!({ "used": used }),
            answer: used,
        }
    }
}

fn accepted(at: i64, reason: &str) -> Condition {
    Condition {
        type_: "Accepted".into(),
        status: "True".into(),
        reason: reason.into(),
        message: "m".into(),
        observed_generation: Some(1),
        last_transition_time: Time(k8s_openapi::jiff::Timestamp::from_second(at).unwrap()),
    }
}

#[tokio::test(start_paused = true)]
async fn nothing_but_a_timestamp_changed_is_not_written() {
    let (w, m, _tx) = writer(true);
    let recorded = budget(100, vec![accepted(100, "Accepted")]);
    let fake = Fake::new(recorded.clone(), &[]);
    let want = |at: i64, reason: &'static str| {
        move |b: &TenantHookBudget| {
            let mut s = b.status.clone().unwrap();
            s.conditions = vec![accepted(at, reason)];
            Plan::Write {
                status: serde_json::to_value(&s).unwrap(),
                answer: (),
            }
        }
    };
    let o = w
        .write(
            WriteKind::BudgetReconcile,
            &fake,
            Some(recorded.clone()),
            &mut None,
            want(999, "Accepted"),
        )
        .await
        .unwrap();
    assert!(matches!(o, Outcome::Unchanged { .. }), "{o:?}");
    assert_eq!(fake.calls(), (0, 0), "no API call at all");
    assert_eq!(writes(&m, WriteKind::BudgetReconcile, "unchanged"), 1);

    // the same write when something besides the time changed
    let o = w
        .write(
            WriteKind::BudgetReconcile,
            &fake,
            Some(recorded),
            &mut None,
            want(999, "Renamed"),
        )
        .await
        .unwrap();
    assert!(matches!(o, Outcome::Written { patches: 1, .. }), "{o:?}");
    assert_eq!(writes(&m, WriteKind::BudgetReconcile, "written"), 1);
    let c = fake.store().object.status.clone().unwrap().conditions[0].clone();
    assert_eq!(
        (c.reason.as_str(), c.last_transition_time.0.as_second()),
        ("Renamed", 999)
    );

    // a plan that says nothing to do is not written either, and needs no leadership
    let (w, m, _tx) = writer(false);
    let o = w
        .write(
            WriteKind::BudgetSettle,
            &fake,
            None,
            &mut None,
            |_: &TenantHookBudget| Plan::Skip("nothing"),
        )
        .await
        .unwrap();
    assert!(
        matches!(
            o,
            Outcome::Unchanged {
                answer: "nothing",
                ..
            }
        ),
        "{o:?}"
    );
    assert_eq!(writes(&m, WriteKind::BudgetSettle, "unchanged"), 1);
}

#[tokio::test(start_paused = true)]
async fn a_conflict_is_read_again_and_recomputed_until_written() {
    let (w, m, _tx) = writer(true);
    let fake = Fake::new(
        budget(0, vec![]),
        &[Answer::OtherWritesFirst, Answer::OtherWritesFirst],
    );
    let start = tokio::time::Instant::now();
    let o = w
        .write(WriteKind::BudgetSettle, &fake, None, &mut None, spend(7))
        .await
        .unwrap();
    let Outcome::Written {
        answer, patches, ..
    } = o
    else {
        panic!("{o:?}")
    };
    assert_eq!((answer, patches), (207, 3), "computed from the fresh 200");
    assert_eq!(
        fake.used(),
        207,
        "the other writer's 200 and our 7, each once"
    );
    let s = fake.store();
    assert_eq!(s.reads, 3, "every round read the object again");
    assert_eq!(
        s.patches
            .iter()
            .map(|(n, _, b)| (
                *n,
                b["metadata"]["resourceVersion"]
                    .as_str()
                    .unwrap()
                    .to_string()
            ))
            .collect::<Vec<_>>(),
        [(1, "10".into()), (2, "11".into()), (3, "12".into())],
        "each patch carries the version it was computed from"
    );
    assert!(
        start.elapsed() >= RetryPolicy::DEFAULT.first_delay,
        "paused between rounds"
    );
    assert_eq!(conflicts(&m, WriteKind::BudgetSettle), 2);
    assert_eq!(writes(&m, WriteKind::BudgetSettle, "written"), 1);
}

#[tokio::test(start_paused = true)]
async fn an_apply_is_forced_after_a_conflict() {
    // a conditions-like apply of an AgentHook... here the budget's fields; the shape is
    // what matters: no precondition, forced from the second patch on
    let (w, _m, _tx) = writer(true);
    let fake = Fake::new(budget(0, vec![]), &[Answer::Refuse(409)]);
    let o = w
        .write(WriteKind::Conditions, &fake, None, &mut None, spend(1))
        .await
        .unwrap();
    assert!(matches!(o, Outcome::Written { patches: 2, .. }), "{o:?}");
    let s = fake.store();
    assert_eq!(
        s.patches
            .iter()
            .map(|(n, force, _)| (*n, *force))
            .collect::<Vec<_>>(),
        [(1, false), (2, true)]
    );
    assert!(s.patches[0].2.get("metadata").is_none(), "no precondition");
    assert_eq!(s.patches[0].2["kind"], "TenantHookBudget");
}

#[tokio::test(start_paused = true)]
async fn conflicts_past_the_bound_give_up_with_a_counted_failure() {
    let (w, m, _tx) = writer(true);
    let max = RetryPolicy::DEFAULT.max_attempts;
    let fake = Fake::new(budget(0, vec![]), &[Answer::OtherWritesFirst; 20]);
    let e = w
        .write(WriteKind::BudgetSettle, &fake, None, &mut None, spend(7))
        .await
        .unwrap_err();
    match &e {
        Error::StatusConflict { key, attempts, .. } => {
            assert_eq!((key.as_str(), *attempts), ("ns/b", max))
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(e.metric_label(), "conflict");
    assert_eq!(fake.store().patches.len(), max as usize, "bounded");
    assert_eq!(fake.used(), 100 * i64::from(max), "none of ours landed");
    assert_eq!(conflicts(&m, WriteKind::BudgetSettle), u64::from(max));
    assert_eq!(writes(&m, WriteKind::BudgetSettle, "conflict"), 1);
    assert_eq!(writes(&m, WriteKind::BudgetSettle, "written"), 0);

    // a permanent refusal is not retried
    let fake = Fake::new(budget(0, vec![]), &[Answer::Refuse(403)]);
    let e = w
        .write(WriteKind::BudgetSettle, &fake, None, &mut None, spend(7))
        .await
        .unwrap_err();
    assert!(crate::report::api::refusal(&e).is_some(), "{e}");
    assert_eq!(fake.store().patches.len(), 1);
    assert_eq!(writes(&m, WriteKind::BudgetSettle, "failed"), 1);
}

#[tokio::test(start_paused = true)]
async fn nothing_is_sent_while_this_replica_does_not_lead() {
    let (w, m, tx) = writer(false);
    let fake = Fake::new(budget(0, vec![]), &[]);
    let e = w
        .write(WriteKind::BudgetSettle, &fake, None, &mut None, spend(7))
        .await
        .unwrap_err();
    assert!(
        matches!(&e, Error::NotLeader { key } if key == "ns/b"),
        "{e}"
    );
    assert_eq!(e.metric_label(), "not_leader");
    assert!(fake.store().patches.is_empty());
    assert_eq!(fake.used(), 0);
    assert_eq!(writes(&m, WriteKind::BudgetSettle, "not_leader"), 1);

    // leadership lost between two rounds: the retry is not sent
    tx.send_replace(Serving {
        leader: true,
        synced: true,
    });
    let fake = Fake::new(budget(0, vec![]), &[Answer::OtherWritesFirst]);
    let lose = {
        let tx = &tx;
        move |b: &TenantHookBudget| {
            let plan = spend(7)(b);
            if b.metadata.resource_version.as_deref() != Some("10") {
                tx.send_replace(Serving::default());
            }
            plan
        }
    };
    let e = w
        .write(WriteKind::BudgetSettle, &fake, None, &mut None, lose)
        .await
        .unwrap_err();
    assert!(matches!(e, Error::NotLeader { .. }), "{e}");
    assert_eq!(
        fake.store().patches.len(),
        1,
        "only the first, while leading"
    );
}

#[tokio::test(start_paused = true)]
async fn a_patch_whose_answer_is_lost_is_counted_once() {
    let (w, m, _tx) = writer(true);
    // landed: found in the history, not sent again
    let fake = Fake::new(budget(0, vec![]), &[Answer::LostAfterApply]);
    let o = w
        .write(WriteKind::BudgetSettle, &fake, None, &mut None, spend(7))
        .await
        .unwrap();
    assert!(
        matches!(
            o,
            Outcome::Written {
                answer: 7,
                patches: 1,
                ..
            }
        ),
        "{o:?}"
    );
    assert_eq!((fake.used(), fake.calls().1), (7, 1));

    // not landed, nothing else written: the same patch again, same precondition
    let fake = Fake::new(budget(0, vec![]), &[Answer::LostBeforeApply]);
    let o = w
        .write(WriteKind::BudgetSettle, &fake, None, &mut None, spend(7))
        .await
        .unwrap();
    assert!(matches!(o, Outcome::Written { patches: 2, .. }), "{o:?}");
    assert_eq!(fake.used(), 7);
    let versions: Vec<_> = fake
        .store()
        .patches
        .iter()
        .map(|(_, _, b)| b["metadata"]["resourceVersion"].clone())
        .collect();
    assert_eq!(versions, ["10", "10"]);

    // not landed, someone else wrote meanwhile: planned afresh from what they wrote
    let fake = Fake::new(budget(0, vec![]), &[Answer::OtherWritesThenLost]);
    let o = w
        .write(WriteKind::BudgetSettle, &fake, None, &mut None, spend(7))
        .await
        .unwrap();
    assert!(
        matches!(
            o,
            Outcome::Written {
                answer: 107,
                patches: 2,
                ..
            }
        ),
        "{o:?}"
    );
    assert_eq!(
        fake.used(),
        107,
        "the other writer's 100 and our 7, each once"
    );

    // still unknown past the bound: handed back, and the next write finds it landed
    let fake = Fake::new(budget(0, vec![]), &[Answer::LostBeforeApply; 10]);
    let mut doubt = None;
    let e = w
        .write(WriteKind::BudgetSettle, &fake, None, &mut doubt, spend(7))
        .await
        .unwrap_err();
    assert!(
        matches!(&e, Error::Kube(kube::Error::Api(s)) if s.code == 504),
        "{e}"
    );
    let d = doubt.clone().expect("the doubt is handed back");
    assert_eq!((d.based_on.as_str(), d.answer), ("10", 7));
    assert_eq!(fake.used(), 0);
    // the lost patch lands late; the next write of the same change finds it
    fake.store().write(&d.sent);
    let o = w
        .write(WriteKind::BudgetSettle, &fake, None, &mut doubt, spend(7))
        .await
        .unwrap();
    assert!(
        matches!(
            o,
            Outcome::Written {
                answer: 7,
                patches: 0,
                ..
            }
        ),
        "{o:?}"
    );
    assert_eq!(fake.used(), 7, "counted once");
    assert!(doubt.is_none());
    assert_eq!(writes(&m, WriteKind::BudgetSettle, "failed"), 1);
}

#[test]
fn covers_compares_the_fields_sent_and_keys_conditions_by_type() {
    let have = serde_json::json!({
        "used": 5,
        "period": "2026-11",
        "conditions": [
            {"type": "Accepted", "status": "True", "lastTransitionTime": "2026-11-01T00:00:00Z"},
            {"type": "Ready", "status": "False", "lastTransitionTime": "2026-11-01T00:00:00Z"}
        ]
    });
    let cases: &[(Value, bool, bool, bool)] = &[
        // (want, ignore timestamps, lists replaced) -> covered
        (serde_json::json!({"used": 5}), true, false, true),
        (serde_json::json!({"used": 6}), true, false, false),
        (serde_json::json!({"state": null}), true, false, true),
        (serde_json::json!({"state": "Ok"}), true, false, false),
        (
            serde_json::json!({"conditions": [{"type": "Ready", "status": "False", "lastTransitionTime": "2030-01-01T00:00:00Z"}]}),
            true,
            false,
            true,
        ),
        (
            serde_json::json!({"conditions": [{"type": "Ready", "status": "False", "lastTransitionTime": "2030-01-01T00:00:00Z"}]}),
            false,
            false,
            false,
        ),
        (
            serde_json::json!({"conditions": [{"type": "Ready", "status": "False"}]}),
            true,
            true,
            false,
        ),
        (
            serde_json::json!({"conditions": [{"type": "Ready", "status": "True"}]}),
            true,
            false,
            false,
        ),
    ];
    for (want, ignore, replaced, covered) in cases {
        assert_eq!(covers(&have, want, *ignore, *replaced), *covered, "{want}");
    }
    assert!(!covers(
        &Value::Null,
        &serde_json::json!({"used": 1}),
        true,
        false
    ));
    assert!(covers(
        &serde_json::json!([1, 2]),
        &serde_json::json!([1, 2]),
        true,
        true
    ));
    assert!(!covers(
        &serde_json::json!([1, 2]),
        &serde_json::json!([2, 1]),
        true,
        false
    ));
}

#[test]
fn each_kind_has_its_manager_and_patch_shape() {
    let rows: Vec<_> = WriteKind::ALL
        .iter()
        .map(|k| (k.label(), k.field_manager(), k.shape()))
        .collect();
    let apply = |precondition| PatchShape::Apply { precondition };
    assert_eq!(
        rows,
        [
            ("conditions", "agenthooks-operator", apply(false)),
            ("breaker_trip", "agenthooks-operator-breaker", apply(true)),
            ("breaker_close", "agenthooks-operator-breaker", apply(true)),
            ("breaker_reset", "agenthooks-operator-breaker", apply(true)),
            (
                "executions",
                "agenthooks-operator-executions",
                PatchShape::Merge
            ),
            ("budget_settle", "agenthooks-operator", PatchShape::Merge),
            ("budget_reconcile", "agenthooks-operator", PatchShape::Merge),
        ]
    );
    let status = serde_json::json!({"used": 1});
    let merge = body::<TenantHookBudget>(WriteKind::BudgetSettle, "b", Some("7"), status.clone());
    assert_eq!(
        merge,
        serde_json::json!({"metadata": {"resourceVersion": "7"}, "status": {"used": 1}})
    );
    let apply = body::<TenantHookBudget>(WriteKind::BreakerTrip, "b", Some("7"), status.clone());
    assert_eq!(apply["apiVersion"], "agenthooks.io/v1alpha1");
    assert_eq!(
        apply["metadata"],
        serde_json::json!({"name": "b", "resourceVersion": "7"})
    );
    let own = body::<TenantHookBudget>(WriteKind::Conditions, "b", None, status);
    assert!(own.get("metadata").is_none() && own.get("spec").is_none());
}

#[test]
fn the_policy_pauses_at_most_its_bound_and_grows() {
    let p = RetryPolicy::DEFAULT;
    let pauses: Vec<Duration> = p.backoff().collect();
    assert_eq!(pauses.len(), p.max_attempts as usize - 1);
    assert!(
        pauses
            .iter()
            .all(|d| *d >= p.first_delay && *d <= p.max_delay * 2),
        "{pauses:?}"
    );
    let one = RetryPolicy {
        max_attempts: 1,
        ..p
    };
    assert_eq!(one.backoff().count(), 0, "one attempt: no retry");
}
