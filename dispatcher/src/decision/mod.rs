//! The decision core: the chain's rules as pure, synchronous functions (CONTRACT §1.4, §4;
//! cedar's evaluator is the model). Values in, a step out: no I/O, no clock of its own, no
//! metrics, no locks. The one async driver ([`crate::chain`]) asks [`chain::slot`] before a
//! hook runs and [`chain::step`] after, and hands every finished run to an observer
//! ([`crate::observer`]); dispatch and the dry run are that same driver with different
//! observers, so they cannot drift apart.
//!
//! - [`chain`]: depth, the chain budget, stop/continue, contexts and rewrites.
//! - [`outcome`]: the vocabulary: `Outcome`, `ErrorKind`, `HandlerResult`.
//! - [`output_shape`]: an output rewrite keeps the shape of what the tool returned.

pub mod chain;
pub mod outcome;
pub mod output_shape;
