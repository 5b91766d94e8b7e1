//! Pure rules both binaries apply, so that the dispatcher and the operator can never
//! disagree on them.
//!
//! - [`breaker`]: the circuit breaker's trip, open, half-open and close rule (CONTRACT §6).

pub mod breaker;
