//! `agenthooks-dispatcher`: the decision engine as a library, and its server.
//!
//! - [`event`]: the dispatch request, its parsing and input caps (CONTRACT §1, §2.4).
//! - [`hookset`]: hooks compiled once per version, indexed for resolution (CONTRACT §3).
//! - [`manifests`]: AgentHook YAML for standalone mode and `check`.
//! - [`breaker`]: the per-hook circuit breaker (CONTRACT §6.1).
//! - [`decision`]: the chain's rules, pure: depth, chain budget, stop, contexts, rewrites.
//! - [`chain`]: the one driver of the blocking chain, and the non-blocking path (CONTRACT §4).
//! - [`observer`]: the one seam where a run has effects (breaker, counters, metrics, span,
//!   audit); dispatch and dry runs differ only there.
//! - [`runner`]: one hook run: filters, then its handler, under its timeout.
//! - [`dry_run`]: one hook on a sample event, leaving nothing behind (`POST /v1/test`).
//! - [`suite`]: policy test suites: AgentHookTest files, stubs, table and JUnit reports
//!   (`agenthooks-dispatcher test`).
//! - [`handlers`]: command, http and prompt handlers, SSRF guard (CONTRACT §5).
//! - [`sandbox`]: where command hooks run: the per-run supervisor, the command runner (CONTRACT §10.1).
//! - [`identity`]: who is calling and which tenant it may act for (CONTRACT §9).
//! - [`server`]: the HTTP API (DESIGN "Dispatch API").
//! - [`sync`]: the long-poll client that follows the operator's snapshots.
//! - [`synced`]: the operator's hooks as held, to which snapshots and deltas apply.
//! - [`metrics`]: Prometheus series (CONTRACT §8.2).
//! - [`operator_urls`]: the operator URLs and the failover between them.
//! - [`operator_token`]: the dispatcher's own token on the operator's sync port.
//! - [`report`]: breaker trips and execution counts sent to the operator (issue 3).
//! - [`budget`]: token budget accounting for handlers: reserve, settle (CONTRACT §5.5).
//! - [`telemetry`]: a span per hook run, W3C trace context, OTLP/HTTP export (CONTRACT §8.1).
//! - [`audit`]: audit rows' pure parts: input hash, redaction, sealed error detail (CONTRACT §7).

pub mod approvals;
pub mod audit;
pub mod breaker;
pub mod budget;
pub mod chain;
pub mod console;
pub mod decision;
pub mod dialect;
pub mod dry_run;
pub mod event;
pub mod handlers;
pub mod hookset;
pub mod identity;
pub mod manifests;
pub mod metrics;
pub mod observer;
pub mod operator_token;
pub mod operator_urls;
pub mod plan;
pub mod report;
pub mod runner;
pub mod sandbox;
pub mod server;
pub mod shim;
pub mod stops;
pub mod suite;
pub mod sync;
pub mod synced;
pub mod telemetry;
