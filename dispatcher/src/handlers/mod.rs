//! Hook handlers: the code that turns one event into one hook outcome.
//!
//! Each handler owns its timeout (so it can clean up: kill a process group, drop a
//! connection) and reports a [`HandlerResult`]. The chain (`crate::chain`) turns outcomes
//! into the event's decision; handlers never see other hooks.
//!
//! Rules: CONTRACT.md §5; seed "Handler reference". Handlers: [`command`], [`http`]
//! (with its SSRF guard, [`ssrf`]) and [`prompt`] (a model decides).

pub mod command;
pub mod http;
pub mod prompt;
pub mod ssrf;

pub use crate::decision::outcome::{
    ErrorKind, HandlerMetadata, HandlerResult, MAX_OUTPUT_BYTES, MAX_REASON_BYTES, Outcome, cut,
};
