//! `agenthooks-operator`: validates AgentHooks, compiles the accepted ones into versioned
//! snapshots and serves those to dispatchers by long poll (DESIGN "Sync").
//!
//! The split follows linkerd's policy controller: a pure in-memory [`index`] fed by the
//! reconciler, a [`snapshot_builder`] that turns the index into the wire format, a
//! [`sync_server`] that only reads what was published, [`ready`] tracking of which
//! dispatcher holds which version, and [`status`] writes isolated in their own module,
//! all gated by a Lease ([`leader`]).
//!
//! - [`config`]: the operator's settings (built from flags by the binary).
//! - [`error`]: the one error type of the library.
//! - [`index`]: accepted and refused hooks, the published set and its version counter.
//! - [`validation_cache`]: validation verdicts by (uid, generation, namespace tenant).
//! - [`tenants`]: which namespace holds each tenant (the one place that decides a
//!   namespace's tenant, CONTRACT §9.3).
//! - [`snapshot_builder`]: the index's changes → the snapshot log (every hook's JSON, the
//!   recent changes): full [`agenthooks_crds::snapshot::Snapshot`]s and
//!   [`agenthooks_crds::snapshot::SnapshotDelta`]s; each publish wakes the polls through a
//!   `tokio::sync::watch` channel.
//! - [`ready`]: dispatcher tracking and the `Ready` condition rule.
//! - [`status`]: condition helpers (transition times), and [`status::writer`], the one
//!   lease-gated read-modify-write helper every status write goes through.
//! - [`reconcile`]: the AgentHook controller, its triggers and the periodic ready pass.
//! - [`sync_server`]: `GET /v1/snapshot` (long poll: a delta or the full snapshot) and
//!   `GET /v1/dispatchers`.
//! - [`approvals`]: `POST /v1/approvals`, the `HookApproval`s of hooks that ask.
//! - [`admin_server`]: `/healthz`, `/readyz`, `/metrics`.
//! - [`metrics`]: Prometheus metrics.
//! - [`watch_health`]: health of the session's watches (readiness, metrics) and the API
//!   client layer that sees watches start.
//! - [`leader`]: leader election with `kube-lease-manager`.
//! - [`leader_label`]: the label on the leader's Pod that the leader-only sync Service
//!   selects.
//! - [`shared`]: state shared by the controller and the servers.
//! - [`run`](mod@run): wires everything under one cancellation token.

#![warn(missing_docs)]

pub mod admin_server;
pub mod approvals;
pub mod breaker_window;
pub mod budget;
pub mod config;
pub mod error;
pub mod index;
pub mod leader;
pub mod leader_label;
pub mod metrics;
pub mod ready;
pub mod reconcile;
pub mod report;
pub mod run;
pub mod shared;
pub mod snapshot_builder;
pub mod status;
pub mod sync_auth;
pub mod sync_server;
pub mod tenants;
pub mod validation_cache;
pub mod watch_health;

pub use config::{Config, LeaseConfig};
pub use error::Error;
pub use run::run;

/// Field manager of every server-side apply this operator makes (CONVENTIONS habit 4).
pub const FIELD_MANAGER: &str = "agenthooks-operator";
