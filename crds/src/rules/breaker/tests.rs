use super::*;

const T: RunClass = RunClass::Fault(FaultKind::Timeout);
const E: RunClass = RunClass::Fault(FaultKind::Error);
const A: RunClass = RunClass::Answer;
const C: RunClass = RunClass::Cut;

/// Records `class` at `now` on a closed breaker, as a normal run.
fn run(s: &mut State, class: RunClass, now: i64) -> Transition {
    let a = s.admit(now);
    assert_eq!(a, Admission::Run, "closed at {now}");
    s.record(a, class, now)
}

#[test]
fn five_faults_within_a_minute_trip_and_answers_never_count() {
    // (outcomes at second i, trips at index)
    let cases: &[(&[RunClass], Option<usize>)] = &[
        (&[T, T, T, T, T], Some(4)),
        (&[E, E, E, E, E], Some(4)),
        (&[T, E, T, E, T], Some(4)),
        (&[T, T, T, T], None),
        // a policy's block is an answer: any number of them never trips
        (&[A, A, A, A, A, A, A, A, A, A], None),
        // an answer ends the run
        (&[T, T, T, T, A, T, T, T, T], None),
        (&[T, T, T, T, A, T, T, T, T, T], Some(9)),
    ];
    for (classes, trips_at) in cases {
        let mut s = State::default();
        let mut tripped = None;
        for (i, c) in classes.iter().enumerate() {
            if let Transition::Tripped(_) = run(&mut s, *c, i as i64 * 1000) {
                tripped = Some(i);
                break;
            }
        }
        assert_eq!(tripped, *trips_at, "{classes:?}");
    }
}

#[test]
fn the_window_is_inclusive_at_exactly_sixty_seconds() {
    let mut s = State::default();
    for t in [0, 15_000, 30_000, 45_000] {
        assert_eq!(run(&mut s, T, t), Transition::RunChanged);
    }
    match run(&mut s, T, 60_000) {
        Transition::Tripped(trip) => {
            assert_eq!(
                trip,
                Trip {
                    timeouts: 5,
                    errors: 0,
                    over_ms: 60_000,
                    at_ms: 60_000,
                    fail_closed: false
                }
            );
        }
        other => panic!("exactly 60 s must trip: {other:?}"),
    }
    let mut s = State::default();
    for t in [0, 15_000, 30_000, 45_000] {
        run(&mut s, T, t);
    }
    assert_eq!(
        run(&mut s, T, 60_001),
        Transition::RunChanged,
        "60.001 s does not"
    );
    // the newest five are 15..75 s apart by then: 60 s, trips
    assert!(matches!(run(&mut s, T, 75_000), Transition::Tripped(_)));
}

#[test]
fn open_refuses_then_probes_after_thirty_seconds_one_probe_at_a_time() {
    let mut s = State::default();
    for i in 0..4 {
        run(&mut s, T, i * 1000);
    }
    let Transition::Tripped(trip) = run(&mut s, E, 4000) else {
        panic!("trips")
    };
    assert!(trip.fail_closed, "one error in the run: fail closed");
    assert_eq!((trip.timeouts, trip.errors), (4, 1));
    assert_eq!(
        s.admit(4000 + HALF_OPEN_AFTER_MS - 1),
        Admission::Refuse {
            fail_closed: true,
            since: 4000
        }
    );
    assert_eq!(s.admit(4000 + HALF_OPEN_AFTER_MS), Admission::Probe);
    // one probe at a time: others are refused while it runs
    assert!(matches!(
        s.admit(4000 + HALF_OPEN_AFTER_MS + 1),
        Admission::Refuse { .. }
    ));
    // the probe answers: closed
    assert_eq!(
        s.record(Admission::Probe, A, 34_500),
        Transition::Closed { since: 4000 }
    );
    assert_eq!(s.admit(34_600), Admission::Run);
}

#[test]
fn a_faulting_probe_opens_it_for_another_thirty_seconds() {
    let mut s = State::Open {
        since: 0,
        fail_closed: false,
        probe_at: None,
    };
    assert_eq!(s.admit(30_000), Admission::Probe);
    assert_eq!(
        s.record(Admission::Probe, T, 30_100),
        Transition::Reopened {
            since: 30_100,
            fail_closed: false
        }
    );
    assert!(matches!(s.admit(60_099), Admission::Refuse { .. }));
    assert_eq!(s.admit(60_100), Admission::Probe);
    assert_eq!(
        s.record(Admission::Probe, E, 60_200),
        Transition::Reopened {
            since: 60_200,
            fail_closed: true
        },
        "an error makes it fail closed"
    );
}

#[test]
fn a_lost_probe_is_replaced_after_thirty_seconds() {
    let mut s = State::Open {
        since: 0,
        fail_closed: false,
        probe_at: None,
    };
    assert_eq!(s.admit(30_000), Admission::Probe);
    assert!(matches!(s.admit(59_999), Admission::Refuse { .. }));
    assert_eq!(s.admit(60_000), Admission::Probe);
}

#[test]
fn a_run_cut_by_the_chain_budget_neither_counts_nor_ends_the_run() {
    let mut s = State::default();
    for i in 0..4 {
        run(&mut s, T, i * 1000);
    }
    // any number of cut runs: no trip, and the four faults are still there
    for i in 4..20 {
        assert_eq!(run(&mut s, C, i * 1000), Transition::None, "cut at {i} s");
    }
    assert!(!s.is_open());
    assert!(matches!(run(&mut s, T, 20_000), Transition::Tripped(_)));
}

#[test]
fn a_probe_cut_by_the_chain_budget_gives_its_slot_back() {
    let mut s = State::Open {
        since: 0,
        fail_closed: false,
        probe_at: None,
    };
    assert_eq!(s.admit(30_000), Admission::Probe);
    assert!(matches!(s.admit(30_001), Admission::Refuse { .. }));
    assert_eq!(s.record(Admission::Probe, C, 30_050), Transition::None);
    assert!(s.is_open(), "a cut probe does not close it");
    assert_eq!(s.admit(30_060), Admission::Probe, "the next event probes");
    assert_eq!(
        s.record(Admission::Probe, A, 30_100),
        Transition::Closed { since: 0 }
    );
}

#[test]
fn late_runs_never_close_only_probes_do() {
    let mut s = State::default();
    for i in 0..5 {
        run(&mut s, T, i);
    }
    assert!(s.is_open());
    // a run admitted before the trip answers after it
    assert_eq!(s.record(Admission::Run, A, 10), Transition::None);
    assert!(s.is_open());
    // refused events record nothing
    let refused = s.admit(20);
    assert_eq!(s.record(refused, A, 20), Transition::None);
    assert!(s.is_open());
}

#[test]
fn replicas_open_and_close_by_the_trip_they_share() {
    let mut s = State::default();
    s.open_from(1_000, false);
    assert_eq!(
        s.admit(1_001),
        Admission::Refuse {
            fail_closed: false,
            since: 1_000
        }
    );
    // an older trip does not move a newer one back
    s.open_from(500, true);
    assert_eq!(
        s.admit(1_001),
        Admission::Refuse {
            fail_closed: true,
            since: 1_000
        }
    );
    // a close of an older trip leaves a newer one open
    s.close_if_opened_by(999);
    assert!(s.is_open());
    s.close_if_opened_by(1_000);
    assert!(!s.is_open());
}

#[test]
fn run_trips_ignores_order_and_uses_the_newest_five() {
    assert_eq!(run_trips(&[4, 3, 2, 1, 0]), Some(4));
    assert_eq!(run_trips(&[0, 1, 2, 3]), None);
    assert_eq!(
        run_trips(&[0, 100_000, 100_001, 100_002, 100_003, 100_004]),
        Some(4)
    );
    assert_eq!(run_trips(&[0, 20_000, 40_000, 60_000, 80_000]), None);
}
