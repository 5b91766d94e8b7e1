//! The token budget rule (CONTRACT §5.5; DESIGN "TenantHookBudget"), shared by the two
//! ledgers that apply it: the operator leader's (`agenthooks-operator`,
//! `budget::ledger`) and the standalone dispatcher's in-memory one
//! (`agenthooks-dispatcher`, `budget::local`). The same inputs give the same answers in
//! both: [`cases`] is one table of cases, run here through a model ledger built from these
//! functions alone and, in each binary's tests, through that binary's ledger.
//!
//! Every quantity is a number of tokens (`i64`). Pure: no clock (the caller passes the
//! period, `YYYY-MM` of the UTC month, from [`crate::budget::period_of`]) and no I/O.
//!
//! - **Period**: `used` counts only in its own UTC month; a recorded period of another
//!   month counts 0 ([`used_in`]), and the configured total is kept.
//! - **Remaining** is `total - used`, never below 0 ([`remaining`]).
//! - **Reserve admission**: a call may hold 1 to [`MAX_CALL_TOKENS`] tokens
//!   ([`check_reserve`]); it is granted iff what is available — total, minus used in the
//!   period, minus tokens settled but not yet written, minus reservations in flight
//!   ([`available`]) — covers it ([`admit`]).
//! - **Settle capping**: a settle counts at most what its reservation held (the
//!   reservation is the call's upper bound: prompt estimate + max output tokens), and a
//!   settle of a reservation the ledger does not know (the operator: reserved with a
//!   previous leader, or expired) at most [`MAX_CALL_TOKENS`] ([`charge`]). Tokens above
//!   the cap are not counted; the callers log them and count them in a metric.
//! - **Holder**: a reservation is settled (or released) only by the dispatcher identity
//!   that reserved it, for the tenant it was reserved for ([`check_holder`]; CONTRACT
//!   §9.4). The operator applies it; a standalone dispatcher is the only holder of its
//!   own ledger.

/// Most tokens one call may hold or count (2^20 = 1,048,576): a reserve asking for more is
/// refused, and a settle of a reservation the ledger does not know counts at most this
/// much.
pub const MAX_CALL_TOKENS: i64 = 1 << 20;

/// A token count a reserve or settle may not carry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum InvalidTokens {
    /// A reserve of 0 or fewer tokens.
    #[error("must be greater than 0 (got {0})")]
    NotPositive(i64),
    /// A reserve of more than [`MAX_CALL_TOKENS`].
    #[error("at most {MAX_CALL_TOKENS} per call (got {0})")]
    AboveMax(i64),
    /// A settle of fewer than 0 tokens.
    #[error("must be 0 or more (got {0})")]
    Negative(i64),
}

/// Whether a reserve may ask for `tokens`: 1 to [`MAX_CALL_TOKENS`].
///
/// Errors: [`InvalidTokens::NotPositive`] or [`InvalidTokens::AboveMax`].
pub fn check_reserve(tokens: i64) -> Result<(), InvalidTokens> {
    if tokens <= 0 {
        Err(InvalidTokens::NotPositive(tokens))
    } else if tokens > MAX_CALL_TOKENS {
        Err(InvalidTokens::AboveMax(tokens))
    } else {
        Ok(())
    }
}

/// Whether a settle may carry `tokens`: 0 (a release) or more.
///
/// Errors: [`InvalidTokens::Negative`].
pub fn check_settle(tokens: i64) -> Result<(), InvalidTokens> {
    if tokens < 0 {
        Err(InvalidTokens::Negative(tokens))
    } else {
        Ok(())
    }
}

/// Tokens used in `period` (`YYYY-MM`) of a budget whose status records `used` for
/// `recorded_period`: `used` (never below 0) when the periods are the same month, else 0
/// (a new UTC month starts from 0).
pub fn used_in(recorded_period: Option<&str>, used: i64, period: &str) -> i64 {
    if recorded_period == Some(period) {
        used.max(0)
    } else {
        0
    }
}

/// Tokens remaining of a monthly `total` once `used` are spent: `total - used`, never
/// below 0 (an overspent budget shows 0; a negative total counts as 0).
pub fn remaining(total: i64, used: i64) -> i64 {
    total.max(0).saturating_sub(used).max(0)
}

/// Tokens a new reservation may take from a monthly `total`: minus `used` in the current
/// period ([`used_in`]), `unwritten` (settled, not yet in `status.used`; 0 for a ledger
/// that writes nothing) and `reserved` (reservations in flight). Negative after an
/// overspend: nothing is granted then.
pub fn available(total: i64, used: i64, unwritten: i64, reserved: i64) -> i64 {
    total
        .max(0)
        .saturating_sub(used.max(0))
        .saturating_sub(unwritten)
        .saturating_sub(reserved)
}

/// The answer to a reserve of valid `tokens` ([`check_reserve`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Admission {
    /// Held; `remaining` tokens are left after it and every reservation in flight (>= 0).
    Granted {
        /// Tokens left.
        remaining: i64,
    },
    /// Not held (`BudgetExhausted`): only `remaining` tokens are left (>= 0).
    Exhausted {
        /// Tokens left.
        remaining: i64,
    },
}

/// Decides a reserve of `tokens` (valid: [`check_reserve`]) when `available` tokens are
/// left ([`available`]): granted iff `available >= tokens`; exactly covering is granted.
pub fn admit(tokens: i64, available: i64) -> Admission {
    if available < tokens {
        Admission::Exhausted {
            remaining: available.max(0),
        }
    } else {
        Admission::Granted {
            remaining: (available - tokens).max(0),
        }
    }
}

/// Which cap a settle met.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cap {
    /// The tokens of the reservation settled.
    Reservation,
    /// [`MAX_CALL_TOKENS`] (a reservation the ledger does not know).
    Absolute,
}

impl Cap {
    /// Label of the cap in metrics (`cap="reservation"` or `cap="absolute"`).
    pub fn label(self) -> &'static str {
        match self {
            Cap::Reservation => "reservation",
            Cap::Absolute => "absolute",
        }
    }
}

/// What a settle counts: `counted` of the `claimed` tokens, under `cap`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Charge {
    /// The tokens the settle carried.
    pub claimed: i64,
    /// The tokens counted (`claimed`, or the cap when it is lower).
    pub counted: i64,
    /// The cap that applied.
    pub cap: Cap,
}

impl Charge {
    /// Tokens claimed past the cap, not counted.
    pub fn overage(&self) -> i64 {
        self.claimed - self.counted
    }

    /// Whether the cap cut the claim.
    pub fn is_capped(&self) -> bool {
        self.claimed > self.counted
    }
}

/// What a settle of `claimed` tokens (valid: [`check_settle`]) counts: at most `reserved`
/// when the ledger knows the reservation (`Some`), at most [`MAX_CALL_TOKENS`] when it
/// does not (`None`).
pub fn charge(claimed: i64, reserved: Option<i64>) -> Charge {
    let (cap, kind) = match reserved {
        Some(r) => (r.max(0), Cap::Reservation),
        None => (MAX_CALL_TOKENS, Cap::Absolute),
    };
    Charge {
        claimed,
        counted: claimed.clamp(0, cap),
        cap: kind,
    }
}

/// Who holds a reservation: the dispatcher (its authenticated identity) that reserved
/// it, and the tenant it was reserved for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Holder<'a> {
    /// The reserving dispatcher's identity (`NAMESPACE/POD` or
    /// `NAMESPACE/SERVICEACCOUNT`).
    pub dispatcher: &'a str,
    /// The tenant of the reservation.
    pub tenant: &'a str,
}

/// Why a settle may not touch a reservation.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NotHolder {
    /// Another dispatcher holds it (the operator answers 403 naming `reservationId`).
    #[error("held by dispatcher {holder}, not {caller}")]
    OtherDispatcher {
        /// Who holds it.
        holder: String,
        /// Who tried to settle it.
        caller: String,
    },
    /// Its own dispatcher named another tenant than the reservation's (409).
    #[error("reserved for tenant {reserved:?}, not {named:?}")]
    OtherTenant {
        /// The reservation's tenant.
        reserved: String,
        /// The tenant the settle named.
        named: String,
    },
}

/// Whether dispatcher `caller` may settle, for `tenant`, a reservation held by `holder`
/// (`None`: a reservation the ledger does not know — reserved with a previous leader, or
/// expired — which anyone may settle, capped at [`MAX_CALL_TOKENS`] by [`charge`]).
/// Another dispatcher is refused first, whatever the tenant.
///
/// Errors: [`NotHolder::OtherDispatcher`], [`NotHolder::OtherTenant`].
pub fn check_holder(
    holder: Option<Holder<'_>>,
    caller: &str,
    tenant: &str,
) -> Result<(), NotHolder> {
    match holder {
        None => Ok(()),
        Some(h) if h.dispatcher != caller => Err(NotHolder::OtherDispatcher {
            holder: h.dispatcher.to_string(),
            caller: caller.to_string(),
        }),
        Some(h) if h.tenant != tenant => Err(NotHolder::OtherTenant {
            reserved: h.tenant.to_string(),
            named: tenant.to_string(),
        }),
        Some(_) => Ok(()),
    }
}

pub mod cases;

#[cfg(test)]
mod tests;

#[cfg(test)]
mod holder_tests {
    use super::*;

    /// (holder, caller, tenant named, answer).
    type Case<'a> = (Option<Holder<'a>>, &'a str, &'a str, Result<(), NotHolder>);

    #[test]
    fn only_the_holder_settles_and_for_its_tenant() {
        let held = |dispatcher, tenant| Some(Holder { dispatcher, tenant });
        let other = |holder: &str, caller: &str| {
            Err(NotHolder::OtherDispatcher {
                holder: holder.into(),
                caller: caller.into(),
            })
        };
        #[rustfmt::skip]
        let cases: [Case; 7] = [
            // holder,                 caller,  tenant,  answer
            (held("ns/a", "acme"),     "ns/a",  "acme",  Ok(())),
            (held("ns/a", "acme"),     "ns/b",  "acme",  other("ns/a", "ns/b")),
            (held("ns/a", "acme"),     "ns/b",  "globex", other("ns/a", "ns/b")),
            (held("ns/a", "acme"),     "ns/a",  "globex", Err(NotHolder::OtherTenant {
                reserved: "acme".into(), named: "globex".into() })),
            (held("ns/a", "acme"),     "NS/a",  "acme",  other("ns/a", "NS/a")),
            (held("ns/a", "acme"),     "",      "acme",  other("ns/a", "")),
            (None,                     "ns/b",  "acme",  Ok(())),
        ];
        for (holder, caller, tenant, want) in cases {
            assert_eq!(
                check_holder(holder, caller, tenant),
                want,
                "{holder:?} settled by {caller} for {tenant}"
            );
        }
        assert_eq!(
            other("ns/a", "ns/b").unwrap_err().to_string(),
            "held by dispatcher ns/a, not ns/b"
        );
    }
}
