//! The audit trail's pure parts (CONTRACT §7; seed "Audit table"): what goes into a
//! `hook_executions` row, computed without any database or I/O on the decision path.
//!
//! - [`input_hash`]: `input_hash` column (CONTRACT §7.3).
//! - [`redact`]: the `error` column, redacted and cut to 256 bytes (CONTRACT §7.4).
//! - [`error_detail`]: the `error_detail` column, AES-256-GCM sealed with a key id
//!   (CONTRACT §7.4; issue 5 "key id stored per row so keys can rotate").
//! - [`row`]: [`row::AuditRow`], one row per hook run, and its `dedup_key`
//!   (CONTRACT §7.1, §7.2, §7.5).
//! - [`store`]: [`store::AuditStore`], the `hook_executions` table in SQLite or PostgreSQL
//!   (versioned migrations, deduplicated batch inserts, history pages; issue 5 points 1–2).
//! - [`sink`]: [`sink::AuditSink::record`], the decision path's non-blocking hand-over of
//!   a [`sink::RunRecord`] per hook run (CONTRACT §7.6).
//! - [`flags`]: the `--audit-*` flags, parsed.
//! - [`build`]: a run record → its row (hash, redaction, sealing), in the writer.
//! - [`writer`]: the batching task; database down → [`spool`], the bounded on-disk
//!   spool, replayed when it answers; flushed on shutdown (issue 5 "Durability").

pub mod build;
pub mod error_detail;
pub mod flags;
pub mod input_hash;
pub mod redact;
pub mod row;
pub mod sink;
pub mod spool;
pub mod store;
pub mod writer;
