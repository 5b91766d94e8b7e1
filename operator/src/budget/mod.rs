//! TenantHookBudget: the reconciler, the ledger and `POST /v1/budget/{reserve,settle}`.
//! Stub: filled in by the budget work.

use std::sync::Arc;

use axum::Router;
use kube::Client;
use tokio_util::sync::CancellationToken;

use crate::shared::Shared;

/// Starts whatever background writers the budget routes need and returns the routes.
pub fn start(_shared: Arc<Shared>, _client: Client, _cancel: CancellationToken) -> Router {
    Router::new()
}
