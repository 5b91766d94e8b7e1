//! Pure rules both binaries apply, so that the dispatcher and the operator can never
//! disagree on them.
//!
//! - [`breaker`]: the circuit breaker's trip, open, half-open and close rule (CONTRACT §6).
//! - [`ledger`]: the token budget's reserve admission, settle cap, remaining and period
//!   rule (CONTRACT §5.5), with the case table both ledgers run.

pub mod breaker;
pub mod ledger;
