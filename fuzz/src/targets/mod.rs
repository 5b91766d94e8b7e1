//! One module per fuzz target; each has `pub fn run(data: &[u8])`, which panics when a
//! property of the code under test breaks.
//!
//! This file is also compiled into the stable replay test (`#[path]` include), so the
//! modules use only crates the dispatcher's tests have too (`agenthooks_dispatcher`,
//! `agenthooks_crds`, `serde_json`, `ipnet`, `url`) and std.

pub mod cel;
pub mod dispatch_body;
pub mod manifest;
pub mod provider_answer;
pub mod ssrf;

/// A target body: runs one input, panics when a property breaks.
pub type Body = fn(&[u8]);

/// Every target: its name (the `fuzz_targets/<name>.rs` binary and the
/// `corpus/<name>/` directory) and its body.
pub const TARGETS: &[(&str, Body)] = &[
    ("dispatch_body", dispatch_body::run),
    ("manifest", manifest::run),
    ("cel", cel::run),
    ("ssrf", ssrf::run),
    ("provider_answer", provider_answer::run),
];
