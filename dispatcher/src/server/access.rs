//! Who may read audit history and run dry runs (CONTRACT §9.5): one gate for
//! `GET /v1/executions`, `GET /v1/executions/{id}` and `POST /v1/test`.
//!
//! - In a cluster (`--kubernetes-callers`): the caller's bearer token is authenticated
//!   like a dispatch caller's (TokenReview, cached; 401 otherwise), and each request is
//!   authorized by Kubernetes RBAC on that identity (SubjectAccessReview, cached:
//!   [`KubeCallers::allowed`]) in the namespace it touches: `list`/`get` on
//!   `agenthooks/executions`, `create` on `agenthooks/test`. A tenant reads its own
//!   namespace's rows. The admin token plays no part (the dispatcher refuses to start
//!   with both).
//! - Standalone (`--callers-file`, `--allow-anonymous`): the static admin token
//!   (`--admin-token-file`, [`super::admin`]) grants every namespace, as before.
//!
//! A handler asks [`reader`] first (before reading anything else), then
//! [`Reader::may`] for each namespace it is about to touch.
//!
//! The console ([`crate::console`]) calls the same routes in process for a person who
//! signed in there: it puts a [`Principal`] into the request's extensions (which no
//! client can set), and [`reader`] takes it instead of a bearer token, so the person is
//! authorized by exactly these rules.

use std::sync::Arc;

use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;

use super::{AppState, admin, error, refused};
use crate::identity::kubernetes::KubeUser;
use crate::identity::{Access, Authenticator, KubeCallers, bearer};

/// A person signed in to the console, as the console hands them to the API routes it
/// calls in process (a request extension; see the module docs).
#[derive(Clone, Debug)]
pub enum Principal {
    /// Standalone: signed in with the admin token.
    Admin,
    /// In a cluster: a Kubernetes user the API server named (SelfSubjectReview of the
    /// token they signed in with), asked about in RBAC like a caller.
    Kubernetes(Arc<KubeUser>),
}

/// A caller that proved who it is, before it is asked about a namespace.
pub(super) enum Reader<'a> {
    /// Standalone: it sent the admin token, which grants every namespace.
    Admin,
    /// `--kubernetes-callers`: a Kubernetes user, asked about in RBAC per namespace.
    Kubernetes {
        callers: &'a KubeCallers,
        user: Arc<KubeUser>,
    },
}

/// Checks the request's credential for `what` (e.g. `GET /v1/executions`).
///
/// Errors (the answer to send): with `--kubernetes-callers`, 401 for a missing or
/// unverified token and 503 when the API server could not be asked; otherwise the admin
/// token's 403 ([`admin::Denied`]).
pub(super) async fn reader<'a>(
    state: &'a AppState,
    headers: &HeaderMap,
    principal: Option<&Principal>,
    what: &str,
) -> Result<Reader<'a>, Response> {
    match (principal, state.authenticator()) {
        // A console session: already authenticated there. An admin session exists only
        // without Kubernetes callers (the console refuses the admin token with them).
        (Some(Principal::Kubernetes(user)), Some(Authenticator::Kubernetes(callers))) => {
            return Ok(Reader::Kubernetes {
                callers,
                user: Arc::clone(user),
            });
        }
        (Some(Principal::Admin), Some(Authenticator::Kubernetes(_)))
        | (Some(Principal::Kubernetes(_)), _) => {
            return Err(error(
                StatusCode::FORBIDDEN,
                "authorization",
                format!(
                    "{what}: this console session does not match the dispatcher's callers mode; sign in again"
                ),
            ));
        }
        (Some(Principal::Admin), _) => return Ok(Reader::Admin),
        (None, _) => {}
    }
    match state.authenticator() {
        Some(Authenticator::Kubernetes(callers)) => {
            let token = bearer(headers).map_err(refused)?;
            let user = callers.authenticate(token).await.map_err(refused)?;
            Ok(Reader::Kubernetes { callers, user })
        }
        // Standalone (or no authenticator at all, as in unit tests): the admin token.
        _ => admin::authorize(state.admin_token(), headers)
            .map(|()| Reader::Admin)
            .map_err(|denied| denied.response(what)),
    }
}

impl Reader<'_> {
    /// Whether the reader may do `access`: always for the admin token; RBAC (cached) for
    /// a Kubernetes user.
    ///
    /// Errors: 503 when the API server could not be asked.
    pub(super) async fn may(&self, access: &Access<'_>) -> Result<bool, Response> {
        match self {
            Reader::Admin => Ok(true),
            Reader::Kubernetes { callers, user } => {
                callers.allowed(user, access).await.map_err(refused)
            }
        }
    }

    /// Like [`Reader::may`], with a refusal as the 403 `{"error", "field"}` that names
    /// the missing permission (`field` is the request's parameter that chose the
    /// namespace) and what to bind.
    pub(super) async fn require(
        &self,
        access: &Access<'_>,
        what: &str,
        field: &str,
    ) -> Result<(), Response> {
        if self.may(access).await? {
            return Ok(());
        }
        let who = match self {
            Reader::Admin => "the admin token",
            Reader::Kubernetes { user, .. } => &user.name,
        };
        Err(error(
            StatusCode::FORBIDDEN,
            field,
            forbidden_message(what, who, access),
        ))
    }
}

/// The ClusterRole config/rbac/dispatcher.yaml ships for `access`, if any.
fn role_for(access: &Access<'_>) -> Option<&'static str> {
    use crate::identity::kubernetes::{
        DISPATCH_SUBRESOURCE, EXECUTIONS_SUBRESOURCE, TEST_SUBRESOURCE,
    };
    match access.subresource {
        EXECUTIONS_SUBRESOURCE => Some("agenthooks-history-reader"),
        TEST_SUBRESOURCE => Some("agenthooks-tester"),
        DISPATCH_SUBRESOURCE => Some("agenthooks-dispatch"),
        _ => None,
    }
}

/// `GET /v1/executions: system:serviceaccount:a:runtime may not list
/// agenthooks/executions in namespace b (RBAC: ...)`.
fn forbidden_message(what: &str, who: &str, access: &Access<'_>) -> String {
    let bind = match (role_for(access), access.namespace.is_empty()) {
        (Some(role), false) => format!(
            "; a RoleBinding of the ClusterRole {role} in namespace {} grants it",
            access.namespace
        ),
        (Some(role), true) => {
            let narrower = if access.verb == "list" {
                " (or name one namespace you may read with ?namespace=NS)"
            } else {
                ""
            };
            format!("; a ClusterRoleBinding of the ClusterRole {role} grants it{narrower}")
        }
        (None, _) => String::new(),
    };
    format!("{what}: {who} may not {access} (Kubernetes RBAC){bind}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refusals_name_the_permission_the_namespace_and_the_role() {
        let who = "system:serviceaccount:tenant-a:runtime";
        assert_eq!(
            forbidden_message(
                "GET /v1/executions",
                who,
                &Access::list_executions("tenant-b")
            ),
            "GET /v1/executions: system:serviceaccount:tenant-a:runtime may not list agenthooks/executions in namespace tenant-b (Kubernetes RBAC); a RoleBinding of the ClusterRole agenthooks-history-reader in namespace tenant-b grants it"
        );
        assert_eq!(
            forbidden_message("GET /v1/executions", who, &Access::list_executions("")),
            "GET /v1/executions: system:serviceaccount:tenant-a:runtime may not list agenthooks/executions cluster-wide (Kubernetes RBAC); a ClusterRoleBinding of the ClusterRole agenthooks-history-reader grants it (or name one namespace you may read with ?namespace=NS)"
        );
        assert_eq!(
            forbidden_message("POST /v1/test", who, &Access::create_test("tenant-a")),
            "POST /v1/test: system:serviceaccount:tenant-a:runtime may not create agenthooks/test in namespace tenant-a (Kubernetes RBAC); a RoleBinding of the ClusterRole agenthooks-tester in namespace tenant-a grants it"
        );
        let other = Access {
            subresource: "other",
            ..Access::create_test("t")
        };
        assert_eq!(
            forbidden_message("x", "u", &other),
            "x: u may not create agenthooks/other in namespace t (Kubernetes RBAC)"
        );
    }
}
