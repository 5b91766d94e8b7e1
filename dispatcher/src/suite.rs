//! Policy test suites (`agenthooks-dispatcher test`, docs/policy-tests.md): the pattern of
//! `kyverno test` and `opa test` for AgentHooks. A test file (`kind: AgentHookTest`) names
//! the hooks under test (AgentHook manifests, a cluster's export), stubs for handlers
//! that would reach the network, and cases: an event (the body of `POST /v1/dispatch`)
//! and what its decision must be.
//!
//! - [`file`]: the format, read and checked whole before anything runs ([`file::load`]);
//!   errors name the file and the field.
//! - [`run`]: one case through the dispatch chain ([`crate::chain::decide_with`] under
//!   [`crate::observer::Stubbed`]) and its comparison with the expectation, pure.
//! - [`report`]: the table on stdout and JUnit XML.

pub mod file;
pub mod report;
pub mod run;

pub use file::{Case, Expectation, Suite, SuiteError, load, test_files};
pub use run::{CaseOutcome, CaseResult, differences, run_case};

#[cfg(test)]
mod tests;
