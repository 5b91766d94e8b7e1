//! Reports to the operator (issue 3): breaker trips at once, execution counts in
//! batches, over `POST /v1/report` on the operator's sync port (crds `report` module).
//!
//! - [`counters`]: per-hook atomic counters bumped on the hot path.
//! - [`outbox`]: the engine's queue of trips and the counters kept across snapshots.
//! - [`pending`]: what is not acknowledged yet: merging, the batch in flight, the cap.
//! - [`sender`]: the reporter task (interval, trips at once, final flush).
//!
//! Standalone mode reports nothing: no reporter runs and the outbox stays inactive.

pub mod counters;
pub mod outbox;
pub mod pending;
pub mod sender;
