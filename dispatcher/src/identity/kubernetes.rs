//! Callers in a cluster (CONTRACT §9.1–9.2, §9.5): a projected ServiceAccount token,
//! verified by the API server (TokenReview, for the audience [`DEFAULT_AUDIENCE`]), and
//! RBAC on subresources of `agenthooks` in group `agenthooks.io` (SubjectAccessReview).
//!
//! The reviews and their caches are `agenthooks-kube-review`'s [`Reviewer`] (the
//! operator verifies its dispatchers with the same code); this module maps its errors to
//! the dispatcher's [`Refusal`]: a token that does not verify → 401, an API server that
//! cannot be asked → 503 (callers treat it as `block`).

use std::sync::Arc;

pub use agenthooks_kube_review::{
    Access, CacheConfig, DEFAULT_AUDIENCE, DISPATCH_SUBRESOURCE, EXECUTIONS_SUBRESOURCE, KubeUser,
    RBAC_GROUP, RBAC_RESOURCE, REVIEW_TIMEOUT, ReviewError, Reviewer, TEST_SUBRESOURCE, token_ttl,
    user_of,
};

use super::rule::Refusal;

/// TokenReview and SubjectAccessReview through the API server, cached, answering with
/// the dispatcher's [`Refusal`].
pub struct KubeCallers {
    reviewer: Reviewer,
}

impl KubeCallers {
    /// Callers verified through `client` for tokens of `audience`.
    pub fn new(client: kube::Client, audience: impl Into<String>, cache: CacheConfig) -> Self {
        KubeCallers {
            reviewer: Reviewer::new(client, audience, cache),
        }
    }

    /// Entries held by the token and RBAC caches (each at most
    /// [`CacheConfig::capacity`]).
    pub fn cached(&self) -> (usize, usize) {
        self.reviewer.cached()
    }

    /// The user of `token`.
    ///
    /// Errors: 401 when the API server does not authenticate it for our audience, 503
    /// when the API server could not be asked.
    pub async fn authenticate(&self, token: &str) -> Result<Arc<KubeUser>, Refusal> {
        self.reviewer.authenticate(token).await.map_err(refusal)
    }

    /// Whether RBAC lets `user` do `access` (a SubjectAccessReview), cached by the user's
    /// whole identity and every attribute of `access`.
    ///
    /// Errors: 503 when the API server could not be asked.
    pub async fn allowed(&self, user: &KubeUser, access: &Access<'_>) -> Result<bool, Refusal> {
        self.reviewer.allowed(user, access).await.map_err(refusal)
    }
}

/// The dispatcher's answer to a failed review: 401 or 503.
fn refusal(e: ReviewError) -> Refusal {
    match e {
        ReviewError::Unauthenticated { .. } => Refusal::unauthenticated(
            "the bearer token is not a valid ServiceAccount token for this dispatcher's audience",
        ),
        ReviewError::Unavailable(why) => Refusal::unavailable(why),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::StatusCode;

    #[test]
    fn review_errors_are_401_and_503() {
        let r = refusal(ReviewError::Unauthenticated {
            audience: DEFAULT_AUDIENCE.into(),
        });
        assert_eq!(
            (r.status, r.field),
            (StatusCode::UNAUTHORIZED, "authorization")
        );
        assert!(
            r.message.contains("not a valid ServiceAccount token"),
            "{r}"
        );
        let r = refusal(ReviewError::Unavailable(
            "the API server could not review the token: boom".into(),
        ));
        assert_eq!(r.status, StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(
            r.message,
            "the API server could not review the token: boom; treat as block"
        );
    }
}
