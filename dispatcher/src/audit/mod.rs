//! The audit trail's pure parts (CONTRACT §7; seed "Audit table"): what goes into a
//! `hook_executions` row, computed without any database or I/O on the decision path.
//!
//! - [`input_hash`]: `input_hash` column (CONTRACT §7.3).
//! - [`redact`]: the `error` column, redacted and cut to 256 bytes (CONTRACT §7.4).
//! - [`error_detail`]: the `error_detail` column, AES-256-GCM sealed with a key id
//!   (CONTRACT §7.4; issue 5 "key id stored per row so keys can rotate").
//! - [`row`]: [`row::AuditRow`], one row per hook run, and its `dedup_key`
//!   (CONTRACT §7.1, §7.2, §7.5).
//!
//! Not wired into the request path yet: the queue, spool and database writers come later
//! (issue 5).

pub mod error_detail;
pub mod input_hash;
pub mod redact;
pub mod row;
