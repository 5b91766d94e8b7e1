//! `POST /v1/report`: breaker trips and execution counts from dispatchers (issue 3).
//! Stub: filled in by the breaker/executions work.

use std::sync::Arc;

use axum::Router;
use kube::Client;
use tokio_util::sync::CancellationToken;

use crate::shared::Shared;

/// Starts whatever background writers the report routes need and returns the routes.
pub fn start(_shared: Arc<Shared>, _client: Client, _cancel: CancellationToken) -> Router {
    Router::new()
}
