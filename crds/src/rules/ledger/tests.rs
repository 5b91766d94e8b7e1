use super::cases::{CASES, Figures, Reserved, Step};
use super::*;
use crate::budget::{BudgetState, period_of};

#[test]
fn reserve_and_settle_counts_are_checked() {
    let cases: &[(i64, Result<(), InvalidTokens>)] = &[
        (-1, Err(InvalidTokens::NotPositive(-1))),
        (0, Err(InvalidTokens::NotPositive(0))),
        (1, Ok(())),
        (MAX_CALL_TOKENS, Ok(())),
        (MAX_CALL_TOKENS + 1, Err(InvalidTokens::AboveMax(1_048_577))),
    ];
    for (tokens, want) in cases {
        assert_eq!(check_reserve(*tokens), *want, "reserve {tokens}");
    }
    assert_eq!(check_settle(0), Ok(()), "a release");
    assert_eq!(
        check_settle(MAX_CALL_TOKENS * 10),
        Ok(()),
        "capped, not refused"
    );
    assert_eq!(check_settle(-1), Err(InvalidTokens::Negative(-1)));
    assert_eq!(
        InvalidTokens::AboveMax(2_000_000).to_string(),
        "at most 1048576 per call (got 2000000)"
    );
    assert_eq!(
        InvalidTokens::NotPositive(0).to_string(),
        "must be greater than 0 (got 0)"
    );
}

#[test]
fn used_counts_in_its_own_month_only_and_remaining_never_below_zero() {
    // (recorded period, used, current period) -> used in the current period
    let used: &[(Option<&str>, i64, &str, i64)] = &[
        (Some("2026-11"), 700, "2026-11", 700),
        (Some("2026-10"), 700, "2026-11", 0),
        (Some("2026-12"), 700, "2026-11", 0),
        (None, 700, "2026-11", 0),
        (Some("2026-11"), -5, "2026-11", 0),
    ];
    for (recorded, u, period, want) in used {
        assert_eq!(
            used_in(*recorded, *u, period),
            *want,
            "{recorded:?} {u} {period}"
        );
    }
    // (total, used) -> remaining
    let rem: &[(i64, i64, i64)] = &[
        (1_000, 0, 1_000),
        (1_000, 999, 1),
        (1_000, 1_000, 0),
        (1_000, 1_200, 0),
        (0, 0, 0),
        (-10, 0, 0),
        (i64::MAX, -1, i64::MAX),
    ];
    for (total, u, want) in rem {
        assert_eq!(remaining(*total, *u), *want, "{total} {u}");
    }
}

#[test]
fn admission_grants_exactly_covering_and_never_shows_below_zero() {
    // (total, used, unwritten, reserved, tokens) -> answer
    let table: &[(i64, i64, i64, i64, i64, Admission)] = &[
        (1_000, 900, 0, 0, 100, Admission::Granted { remaining: 0 }),
        (
            1_000,
            900,
            0,
            0,
            101,
            Admission::Exhausted { remaining: 100 },
        ),
        (1_000, 0, 300, 200, 500, Admission::Granted { remaining: 0 }),
        (
            1_000,
            0,
            300,
            200,
            501,
            Admission::Exhausted { remaining: 500 },
        ),
        (1_000, 1_200, 0, 0, 1, Admission::Exhausted { remaining: 0 }),
        (
            1_000,
            1_000,
            0,
            50,
            1,
            Admission::Exhausted { remaining: 0 },
        ),
        (0, 0, 0, 0, 1, Admission::Exhausted { remaining: 0 }),
    ];
    for (total, used, unwritten, reserved, tokens, want) in table {
        let a = available(*total, *used, *unwritten, *reserved);
        assert_eq!(
            admit(*tokens, a),
            *want,
            "{total} {used} {unwritten} {reserved} {tokens}"
        );
    }
    assert_eq!(available(1_000, 1_200, 0, 0), -200, "overspent: negative");
}

#[test]
fn a_settle_counts_at_most_its_reservation_or_the_call_maximum() {
    // (claimed, reserved) -> (counted, cap, overage)
    let table: &[(i64, Option<i64>, i64, Cap, i64)] = &[
        (80, Some(100), 80, Cap::Reservation, 0),
        (100, Some(100), 100, Cap::Reservation, 0),
        (130, Some(90), 90, Cap::Reservation, 40),
        (0, Some(90), 0, Cap::Reservation, 0),
        (700, None, 700, Cap::Absolute, 0),
        (
            9_000_000,
            None,
            MAX_CALL_TOKENS,
            Cap::Absolute,
            9_000_000 - 1_048_576,
        ),
    ];
    for (claimed, reserved, counted, cap, overage) in table {
        let c = charge(*claimed, *reserved);
        assert_eq!(
            (c.claimed, c.counted, c.cap, c.overage(), c.is_capped()),
            (*claimed, *counted, *cap, *overage, *overage > 0),
            "{claimed} {reserved:?}"
        );
    }
    assert_eq!(
        (Cap::Reservation.label(), Cap::Absolute.label()),
        ("reservation", "absolute")
    );
}

/// The smallest ledger these functions make: one budget, reservations by grant index,
/// settles counted at once (nothing unwritten).
struct Model {
    total: i64,
    used: i64,
    period: String,
    held: Vec<Option<i64>>,
}

impl Model {
    fn reserve(&mut self, tokens: i64, period: &str) -> Reserved {
        check_reserve(tokens).expect("the cases reserve valid counts");
        let reserved: i64 = self.held.iter().flatten().sum();
        let used = used_in(Some(&self.period), self.used, period);
        match admit(tokens, available(self.total, used, 0, reserved)) {
            Admission::Granted { remaining } => {
                self.held.push(Some(tokens));
                Reserved::Granted { remaining }
            }
            Admission::Exhausted { remaining } => Reserved::Exhausted { remaining },
        }
    }

    fn settle(&mut self, grant: usize, tokens: i64, period: &str) -> Figures {
        let held = self.held[grant].take().expect("settled once");
        let counted = charge(tokens, Some(held)).counted;
        self.used = used_in(Some(&self.period), self.used, period) + counted;
        self.period = period.to_string();
        let remaining = remaining(self.total, self.used);
        Figures {
            used: self.used,
            remaining,
            state: BudgetState::of(self.total, remaining),
        }
    }
}

fn at(rfc3339: &str) -> chrono::DateTime<chrono::Utc> {
    chrono::DateTime::parse_from_rfc3339(rfc3339)
        .expect("an RFC 3339 time")
        .with_timezone(&chrono::Utc)
}

#[test]
fn the_case_table_through_the_model_ledger() {
    assert!(CASES.len() >= 10);
    for case in CASES {
        let mut m = Model {
            total: case.total,
            used: case.used,
            period: case.recorded_period.to_string(),
            held: Vec::new(),
        };
        let mut period = period_of(at(case.start));
        for (i, step) in case.steps.iter().enumerate() {
            match *step {
                Step::Reserve { tokens, expect } => {
                    assert_eq!(
                        m.reserve(tokens, &period),
                        expect,
                        "{}: step {i}",
                        case.name
                    )
                }
                Step::Settle {
                    grant,
                    tokens,
                    expect,
                } => assert_eq!(
                    m.settle(grant, tokens, &period),
                    expect,
                    "{}: step {i}",
                    case.name
                ),
                Step::At(t) => period = period_of(at(t)),
            }
        }
    }
}
