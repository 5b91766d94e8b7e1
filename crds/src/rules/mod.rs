//! Pure rules both binaries apply, so that the dispatcher and the operator can never
//! disagree on them.
//!
//! - [`breaker`]: the circuit breaker's trip, open, half-open and close rule (CONTRACT §6).
//! - [`ledger`]: the token budget's reserve admission, settle cap, remaining and period
//!   rule (CONTRACT §5.5), with the case table both ledgers run.
//! - [`hook_secret`]: which Secrets a hook's header may read (CONTRACT §9.6).

pub mod breaker;
pub mod hook_secret;
pub mod ledger;
