use super::*;

fn trip(b: &Breaker, tenant: &str, at: i64) -> Trip {
    for i in 0..FAULT_THRESHOLD as i64 - 1 {
        let a = b.admit(tenant, at + i);
        assert_eq!(a, Admission::Run);
        assert_eq!(
            b.record(tenant, a, Outcome::Timeout, at + i).transition,
            Transition::RunChanged
        );
    }
    let last = at + FAULT_THRESHOLD as i64 - 1;
    let a = b.admit(tenant, last);
    match b.record(tenant, a, Outcome::Error, last).transition {
        Transition::Tripped(t) => t,
        other => panic!("expected a trip, got {other:?}"),
    }
}

#[test]
fn blocks_never_trip_however_many() {
    let b = Breaker::default();
    for i in 0..1000 {
        let a = b.admit("acme", i);
        assert_eq!(a, Admission::Run, "event {i}");
        assert!(!b.record("acme", a, Outcome::Block, i).report_soon());
    }
    assert!(
        !b.tracked.load(Ordering::Acquire),
        "answers alone keep the fast path"
    );
    assert!(b.take_observations().is_empty());
}

#[test]
fn one_tenants_faults_open_only_that_tenants_breaker() {
    let b = Breaker::default();
    let t = trip(&b, "acme", 1_000);
    assert_eq!((t.timeouts, t.errors, t.fail_closed), (4, 1, true));
    assert_eq!(
        b.admit("acme", 2_000),
        Admission::Refuse {
            fail_closed: true,
            since: 1_004
        }
    );
    assert!(b.is_open("acme"));
    assert_eq!(b.admit("globex", 2_000), Admission::Run);
    assert!(!b.is_open("globex"));
}

#[test]
fn the_probe_after_thirty_seconds_closes_on_an_answer() {
    let b = Breaker::default();
    trip(&b, "acme", 0);
    let since = FAULT_THRESHOLD as i64 - 1;
    assert!(matches!(
        b.admit("acme", since + HALF_OPEN_AFTER_MS - 1),
        Admission::Refuse { .. }
    ));
    let probe = b.admit("acme", since + HALF_OPEN_AFTER_MS);
    assert_eq!(probe, Admission::Probe);
    assert!(
        matches!(
            b.admit("acme", since + HALF_OPEN_AFTER_MS),
            Admission::Refuse { .. }
        ),
        "one probe at a time"
    );
    // a block is an answer: the handler works again
    assert_eq!(
        b.record(
            "acme",
            probe,
            Outcome::Block,
            since + HALF_OPEN_AFTER_MS + 5
        )
        .transition,
        Transition::Closed { since }
    );
    assert_eq!(
        b.admit("acme", since + HALF_OPEN_AFTER_MS + 6),
        Admission::Run
    );
}

#[test]
fn the_snapshot_opens_and_closes_by_trip() {
    let b = Breaker::default();
    let open = |since| OpenBreaker {
        tenant: "acme".into(),
        since_ms: since,
        fail_closed: false,
    };
    b.follow(&[open(100)]);
    assert_eq!(
        b.admit("acme", 200),
        Admission::Refuse {
            fail_closed: false,
            since: 100
        }
    );
    assert_eq!(b.admit("globex", 200), Admission::Run);
    // the same list again changes nothing (a probe slot taken stays taken)
    let probe = b.admit("acme", 100 + HALF_OPEN_AFTER_MS);
    assert_eq!(probe, Admission::Probe);
    b.follow(&[open(100)]);
    assert!(matches!(
        b.admit("acme", 100 + HALF_OPEN_AFTER_MS),
        Admission::Refuse { .. }
    ));
    // gone from the snapshot: a probe elsewhere answered, closed here too
    b.follow(&[]);
    assert_eq!(
        b.admit("acme", 100 + HALF_OPEN_AFTER_MS + 1),
        Admission::Run
    );
}

#[test]
fn a_newer_local_trip_outlives_the_close_of_an_older_one() {
    let b = Breaker::default();
    b.follow(&[OpenBreaker {
        tenant: "acme".into(),
        since_ms: 100,
        fail_closed: false,
    }]);
    // the local probe faults: open again from now
    let probe = b.admit("acme", 100 + HALF_OPEN_AFTER_MS);
    assert_eq!(
        b.record("acme", probe, Outcome::Timeout, 100 + HALF_OPEN_AFTER_MS)
            .transition,
        Transition::Reopened {
            since: 100 + HALF_OPEN_AFTER_MS,
            fail_closed: false
        }
    );
    b.follow(&[]);
    assert!(
        b.is_open("acme"),
        "the local reopening is newer than the closed trip"
    );
}

#[test]
fn observations_are_per_tenant_and_taken_once() {
    let b = Breaker::default();
    let a = b.admit("acme", 10);
    b.record("acme", a, Outcome::Timeout, 10);
    let a = b.admit("globex", 20);
    b.record("globex", a, Outcome::Error, 20);
    let a = b.admit("globex", 30);
    b.record("globex", a, Outcome::Error, 30);
    let mut obs = b.take_observations();
    obs.sort_by(|x, y| x.tenant.cmp(&y.tenant));
    assert_eq!(
        obs,
        vec![
            Observation {
                tenant: "acme".into(),
                last_answer_ms: None,
                run: vec![(10, true)],
            },
            Observation {
                tenant: "globex".into(),
                last_answer_ms: None,
                run: vec![(20, false), (30, false)],
            },
        ]
    );
    assert!(b.take_observations().is_empty(), "taken once");
    let a = b.admit("acme", 40);
    assert!(
        b.record("acme", a, Outcome::Allow, 40).report_soon(),
        "ends a run"
    );
    assert_eq!(
        b.take_observations(),
        vec![Observation {
            tenant: "acme".into(),
            last_answer_ms: Some(40),
            run: vec![],
        }]
    );
}

#[test]
fn tenants_tracked_are_bounded() {
    let b = Breaker::default();
    for i in 0..MAX_TENANTS + 50 {
        let t = format!("tenant-{i}");
        let a = b.admit(&t, 1);
        b.record(&t, a, Outcome::Timeout, 1);
    }
    assert_eq!(b.lock().len(), MAX_TENANTS);
}

mod properties {
    use super::*;
    use proptest::prelude::*;

    /// One event: its tenant (of three), what the handler would answer if run, and the
    /// milliseconds since the previous event.
    fn step() -> impl Strategy<Value = (usize, Outcome, i64)> {
        (
            0..3usize,
            prop_oneof![
                Just(Outcome::Allow),
                Just(Outcome::Block),
                Just(Outcome::Timeout),
                Just(Outcome::Error)
            ],
            0..40_000i64,
        )
    }

    const TENANTS: [&str; 3] = ["acme", "globex", "initech"];

    /// Drives `b` over `steps`: each event is admitted, answered by the handler when it
    /// may run (else as the open breaker's fault) and recorded. Returns per event the
    /// admission and the outcome the chain sees.
    fn drive(b: &Breaker, steps: &[(usize, Outcome, i64)]) -> Vec<(Admission, Outcome)> {
        let mut now = 1_700_000_000_000i64;
        steps
            .iter()
            .map(|(t, handler, dt)| {
                now += dt;
                let tenant = TENANTS[*t];
                let a = b.admit(tenant, now);
                let seen = match a {
                    Admission::Refuse { .. } => {
                        crate::handlers::HandlerResult::circuit_open().outcome
                    }
                    _ => *handler,
                };
                b.record(tenant, a, seen, now);
                (a, seen)
            })
            .collect()
    }

    proptest! {
        /// No sequence of `block` answers, of any length, from any mix of tenants, ever
        /// stops the handler from running (so every matching event is blocked).
        #[test]
        fn blocks_alone_never_open_a_breaker(
            steps in proptest::collection::vec((0..3usize, 0..40_000i64), 0..300)
        ) {
            let b = Breaker::default();
            let steps: Vec<_> = steps.into_iter().map(|(t, dt)| (t, Outcome::Block, dt)).collect();
            for (a, seen) in drive(&b, &steps) {
                prop_assert_eq!(a, Admission::Run);
                prop_assert_eq!(seen, Outcome::Block);
            }
        }

        /// An open breaker never turns anything into an `allow`: the chain sees `allow`
        /// only from a handler that ran and answered `allow`; and through the chain's own
        /// rule ([`crate::decision::chain::step`]), with `onTimeout: allow` as well as
        /// `block`, a refused event stops the chain with `block`, and so does every event
        /// whose handler would have refused (a `block` or an `error`).
        #[test]
        fn an_open_breaker_never_answers_allow(steps in proptest::collection::vec(step(), 0..300)) {
            use crate::decision::chain::{HookRule, Ran, Step, step as chain_step};
            use agenthooks_crds::agenthook::OnTimeout;
            let event = crate::event::Event::parse(
                br#"{"event":"pre_tool_use","tenant_id":"acme","tool_name":"exec","tool_input":{"cmd":"rm -rf /"}}"#,
            )
            .unwrap();
            let b = Breaker::default();
            for ((_, handler, _), (a, seen)) in steps.iter().zip(drive(&b, &steps)) {
                if seen == Outcome::Allow {
                    prop_assert!(matches!(a, Admission::Run | Admission::Probe));
                    prop_assert_eq!(*handler, Outcome::Allow);
                }
                if let Admission::Refuse { .. } = a {
                    prop_assert_eq!(seen, Outcome::Error);
                }
                for on_timeout in [OnTimeout::Allow, OnTimeout::Block] {
                    let rule = HookRule::enforcing("agenthooks-system/guard", true, on_timeout);
                    let ran = Ran {
                        outcome: seen,
                        reason: None,
                        error_kind: None,
                        cut_by_budget: false,
                        additional_context: None,
                        updated_input: None,
                        updated_tool_output: None,
                    };
                    let stops = matches!(chain_step(&rule, ran, &event), Step::Block { .. });
                    if matches!(a, Admission::Refuse { .. })
                        || matches!(handler, Outcome::Block | Outcome::Error)
                    {
                        prop_assert!(stops, "{a:?} {handler:?} {on_timeout:?}");
                    }
                }
            }
        }

        /// One tenant's events never change what another tenant's events get: each
        /// tenant's admissions are those of its own events run alone.
        #[test]
        fn tenants_never_affect_each_other(steps in proptest::collection::vec(step(), 0..300)) {
            let mixed = drive(&Breaker::default(), &steps);
            for t in 0..TENANTS.len() {
                // Its own events alone, at the same times.
                let mut alone_steps = Vec::new();
                let mut gap = 0;
                for (tenant, o, dt) in &steps {
                    gap += dt;
                    if *tenant == t {
                        alone_steps.push((t, *o, gap));
                        gap = 0;
                    }
                }
                let alone = drive(&Breaker::default(), &alone_steps);
                let in_mix: Vec<_> = steps
                    .iter()
                    .zip(&mixed)
                    .filter(|((tenant, _, _), _)| *tenant == t)
                    .map(|(_, r)| *r)
                    .collect();
                prop_assert_eq!(in_mix, alone);
            }
        }
    }
}
