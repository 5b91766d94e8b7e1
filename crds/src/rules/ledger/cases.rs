//! One table of budget cases (CONTRACT §5.5) that every ledger must answer alike: the
//! model ledger of this crate's tests, the operator leader's ledger and the standalone
//! dispatcher's ledger each run all of [`CASES`] (cedar's habit: one corpus, every
//! implementation).
//!
//! A case starts from one budget of `total` tokens a month whose status records `used`
//! for `recorded_period`, at the UTC time `start`; its steps reserve, settle (by the
//! index of an earlier grant) or move the clock, and say what the ledger answers. Only
//! reservations the ledger granted are settled here: what a ledger does with an id it
//! does not know is its own (the operator counts it up to [`super::MAX_CALL_TOKENS`], a
//! reservation of a previous leader; the standalone ledger, which has no previous leader,
//! answers it as a duplicate).

use crate::budget::BudgetState;

/// One case: a budget, a start time and the steps.
#[derive(Debug, Clone, Copy)]
pub struct Case {
    /// What the case shows.
    pub name: &'static str,
    /// `spec.monthlyTokens`.
    pub total: i64,
    /// `status.used` at the start.
    pub used: i64,
    /// `status.period` at the start (`YYYY-MM`).
    pub recorded_period: &'static str,
    /// The UTC time (RFC 3339) of the first step.
    pub start: &'static str,
    /// What happens, in order.
    pub steps: &'static [Step],
}

/// One step of a [`Case`].
#[derive(Debug, Clone, Copy)]
pub enum Step {
    /// Reserve `tokens` (a valid count) for one call.
    Reserve {
        /// Tokens asked for.
        tokens: i64,
        /// The answer.
        expect: Reserved,
    },
    /// Settle the `grant`-th granted reservation of the case (0-based) with `tokens` (0
    /// releases it); the budget then shows `expect`.
    Settle {
        /// Index among the grants of this case.
        grant: usize,
        /// Tokens the settle carries.
        tokens: i64,
        /// The budget's figures once the settle is counted.
        expect: Figures,
    },
    /// The clock moves to this UTC time (RFC 3339).
    At(&'static str),
}

/// The answer to a reserve.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reserved {
    /// Granted; `remaining` tokens left after it and every reservation in flight.
    Granted {
        /// Tokens left.
        remaining: i64,
    },
    /// Refused `BudgetExhausted`; `remaining` tokens left.
    Exhausted {
        /// Tokens left.
        remaining: i64,
    },
}

/// What a budget shows after a settle (the settle's answer: `used`, `remaining`, `state`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Figures {
    /// Tokens used in the current period.
    pub used: i64,
    /// Tokens remaining (>= 0).
    pub remaining: i64,
    /// `Ok`, `Warning` or `Exhausted`.
    pub state: BudgetState,
}

const fn granted(remaining: i64) -> Reserved {
    Reserved::Granted { remaining }
}

const fn exhausted(remaining: i64) -> Reserved {
    Reserved::Exhausted { remaining }
}

const fn figures(used: i64, remaining: i64, state: BudgetState) -> Figures {
    Figures {
        used,
        remaining,
        state,
    }
}

const fn reserve(tokens: i64, expect: Reserved) -> Step {
    Step::Reserve { tokens, expect }
}

const fn settle(grant: usize, tokens: i64, expect: Figures) -> Step {
    Step::Settle {
        grant,
        tokens,
        expect,
    }
}

use BudgetState::{Exhausted, Ok, Warning};

/// Every case.
pub const CASES: &[Case] = &[
    Case {
        name: "exactly what remains is granted, one token more is refused",
        total: 1_000,
        used: 900,
        recorded_period: "2026-11",
        start: "2026-11-15T12:00:00Z",
        steps: &[
            reserve(101, exhausted(100)),
            reserve(100, granted(0)),
            reserve(1, exhausted(0)),
        ],
    },
    Case {
        name: "reservations in flight count until settled or released",
        total: 1_000,
        used: 0,
        recorded_period: "2026-11",
        start: "2026-11-15T12:00:00Z",
        steps: &[
            reserve(600, granted(400)),
            reserve(401, exhausted(400)),
            reserve(400, granted(0)),
            reserve(1, exhausted(0)),
            settle(1, 0, figures(0, 1_000, Ok)),
            reserve(400, granted(0)),
            settle(0, 550, figures(550, 450, Ok)),
            reserve(51, exhausted(50)),
        ],
    },
    Case {
        name: "a settle above its reservation counts the reservation",
        total: 100,
        used: 0,
        recorded_period: "2026-11",
        start: "2026-11-15T12:00:00Z",
        steps: &[
            reserve(90, granted(10)),
            settle(0, 130, figures(90, 10, Warning)),
            reserve(11, exhausted(10)),
            reserve(10, granted(0)),
        ],
    },
    Case {
        name: "settling exactly the reservation counts all of it, down to Exhausted",
        total: 300,
        used: 0,
        recorded_period: "2026-11",
        start: "2026-11-15T12:00:00Z",
        steps: &[
            reserve(300, granted(0)),
            settle(0, 300, figures(300, 0, Exhausted)),
            reserve(1, exhausted(0)),
        ],
    },
    Case {
        name: "an overspent budget shows 0 remaining, never below",
        total: 1_000,
        used: 1_200,
        recorded_period: "2026-11",
        start: "2026-11-15T12:00:00Z",
        steps: &[reserve(1, exhausted(0))],
    },
    Case {
        name: "a zero budget grants nothing",
        total: 0,
        used: 0,
        recorded_period: "2026-11",
        start: "2026-11-15T12:00:00Z",
        steps: &[reserve(1, exhausted(0))],
    },
    Case {
        name: "below 20% remaining is Warning, exactly 20% is Ok",
        total: 1_000,
        used: 0,
        recorded_period: "2026-11",
        start: "2026-11-15T12:00:00Z",
        steps: &[
            reserve(801, granted(199)),
            settle(0, 800, figures(800, 200, Ok)),
            reserve(1, granted(199)),
            settle(1, 1, figures(801, 199, Warning)),
        ],
    },
    Case {
        name: "a recorded period of another month counts nothing",
        total: 1_000,
        used: 900,
        recorded_period: "2026-10",
        start: "2026-11-15T12:00:00Z",
        steps: &[
            reserve(1_000, granted(0)),
            settle(0, 10, figures(10, 990, Ok)),
        ],
    },
    Case {
        name: "a new UTC month starts from 0 and keeps the total",
        total: 1_000,
        used: 1_000,
        recorded_period: "2026-11",
        start: "2026-11-30T23:59:59Z",
        steps: &[
            reserve(1, exhausted(0)),
            Step::At("2026-12-01T00:00:00Z"),
            reserve(1_000, granted(0)),
            settle(0, 400, figures(400, 600, Ok)),
        ],
    },
    Case {
        name: "a hold across the month boundary is charged to the month it settles in",
        total: 1_000,
        used: 0,
        recorded_period: "2026-11",
        start: "2026-11-30T23:00:00Z",
        steps: &[
            reserve(700, granted(300)),
            Step::At("2026-12-01T00:00:01Z"),
            reserve(301, exhausted(300)),
            settle(0, 650, figures(650, 350, Ok)),
        ],
    },
];
