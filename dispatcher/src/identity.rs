//! Who is calling, and which tenant it may act for (CONTRACT §9.1–9.2).
//!
//! Every call to `/v1/dispatch` carries `Authorization: Bearer <token>`, checked by the
//! dispatcher's one [`Authenticator`]:
//!
//! - [`Authenticator::Kubernetes`] (in a cluster, `--kubernetes-callers`): a projected
//!   ServiceAccount token for the audience `agenthooks.io`, verified with a TokenReview
//!   ([`kubernetes`]). The caller acts for its namespace's tenant; another tenant only if
//!   RBAC lets it `create` `agenthooks/dispatch` in that tenant's namespace (a
//!   SubjectAccessReview). Both answers are cached ([`kubernetes::CacheConfig`]).
//! - [`Authenticator::Callers`] (standalone, `--callers-file`): tokens listed by their
//!   sha256, each with the tenants it may act for ([`callers_file`]).
//! - [`Authenticator::Anonymous`] (`--allow-anonymous`, local experiments only): anyone,
//!   for any tenant, as before identity existed.
//!
//! Which tenant a caller may act for is one pure rule, [`rule::choose_tenant`]; the
//! TokenReview and SubjectAccessReview calls are the effects at its edge.
//!
//! With [`Authenticator::Kubernetes`], audit history and dry runs are authorized by the
//! same identity and the same cached RBAC check ([`KubeCallers::allowed`] with an
//! [`Access`]; CONTRACT §9.5); standalone, by the admin token (`crate::server::admin`).
//!
//! Answers (all `{"error", "field"}`): 401 with `WWW-Authenticate: Bearer` for a missing
//! or unverified credential; 403 naming `tenant_id` for a tenant the caller may not act
//! for; 400 naming `tenant_id` when it is needed and absent; 503 when the API server
//! could not be asked (callers treat 503 as `block`).

use std::sync::Arc;

use agenthooks_crds::tenancy::TenantMap;
use axum::http::{HeaderMap, header};

pub mod callers_file;
pub mod kubernetes;
pub mod rule;

pub use callers_file::CallersFile;
pub use kubernetes::{Access, KubeCallers};
pub use rule::{Grant, Refusal, TenantChoice};

/// Longest bearer token read, in bytes; a longer one is refused (401) unread.
pub use agenthooks_kube_review::MAX_TOKEN_BYTES;

/// Name of anonymous callers in logs and audit rows.
pub const ANONYMOUS: &str = "anonymous";

/// How the dispatcher knows its callers.
pub enum Authenticator {
    /// `--allow-anonymous`: no credential asked; any tenant.
    Anonymous,
    /// `--callers-file`: listed bearer tokens.
    Callers(CallersFile),
    /// `--kubernetes-callers`: ServiceAccount tokens (TokenReview) and RBAC
    /// (SubjectAccessReview).
    Kubernetes(Box<KubeCallers>),
}

/// A caller allowed to act for a tenant.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Authorized {
    /// The caller's name: a callers file's `name`, a Kubernetes user name
    /// (`system:serviceaccount:NS:NAME`), or [`ANONYMOUS`].
    pub caller: Arc<str>,
    /// The tenant the event is for.
    pub tenant: String,
}

impl Authenticator {
    /// Whether callers are not asked for a credential.
    pub fn is_anonymous(&self) -> bool {
        matches!(self, Authenticator::Anonymous)
    }

    /// A word for logs and `/readyz`: `anonymous`, `callers-file` or `kubernetes`.
    pub fn mode(&self) -> &'static str {
        match self {
            Authenticator::Anonymous => "anonymous",
            Authenticator::Callers(_) => "callers-file",
            Authenticator::Kubernetes(_) => "kubernetes",
        }
    }

    /// Authenticates the request's caller (before its body is read).
    ///
    /// Errors: 401 for a missing or unverified credential, 503 when the API server could
    /// not be asked.
    pub async fn authenticate(&self, headers: &HeaderMap) -> Result<Identity, Refusal> {
        Ok(match self {
            Authenticator::Anonymous => Identity {
                caller: Arc::from(ANONYMOUS),
                grant: Grant::Any,
                user: None,
            },
            Authenticator::Callers(file) => {
                let token = bearer(headers)?;
                let c = file.find(token).ok_or_else(|| {
                    Refusal::unauthenticated("the bearer token is not one of --callers-file")
                })?;
                Identity {
                    caller: Arc::clone(&c.name),
                    grant: c.grant(),
                    user: None,
                }
            }
            Authenticator::Kubernetes(kube) => {
                let user = kube.authenticate(bearer(headers)?).await?;
                Identity {
                    caller: Arc::clone(&user.name),
                    grant: Grant::Kubernetes {
                        namespace: user.namespace.clone(),
                    },
                    user: Some(user),
                }
            }
        })
    }

    /// The tenant `identity` may act for: `requested` is the body's `tenant_id` (empty
    /// when absent), `tenants` the namespaces' tenants of the snapshot served (empty in
    /// standalone mode). Asks RBAC (cached) when the rule says so.
    ///
    /// Errors: 403 or 400 naming `tenant_id`; 503 when the API server could not be asked.
    pub async fn authorize(
        &self,
        identity: Identity,
        requested: &str,
        tenants: &TenantMap,
    ) -> Result<Authorized, Refusal> {
        let Identity {
            caller,
            grant,
            user,
        } = identity;
        match rule::choose_tenant(&caller, &grant, requested, tenants)? {
            TenantChoice::Granted(tenant) => Ok(Authorized { caller, tenant }),
            TenantChoice::AskRbac { tenant, namespace } => {
                let (Authenticator::Kubernetes(kube), Some(user)) = (self, user) else {
                    // The rule asks RBAC for Kubernetes grants only.
                    return Err(Refusal::forbidden(format!(
                        "caller {caller} may not act for tenant {tenant:?}"
                    )));
                };
                if kube
                    .allowed(&user, &kubernetes::Access::dispatch(&namespace))
                    .await?
                {
                    Ok(Authorized { caller, tenant })
                } else {
                    Err(Refusal::forbidden(format!(
                        "caller {caller} may not act for tenant {tenant:?}: RBAC does not let it create agenthooks/dispatch in namespace {namespace}"
                    )))
                }
            }
        }
    }
}

/// A caller that proved who it is, before its tenant is chosen.
#[derive(Debug, Clone)]
pub struct Identity {
    /// As [`Authorized::caller`].
    pub caller: Arc<str>,
    /// What its credential grants.
    pub grant: Grant,
    /// The Kubernetes user, asked about in RBAC.
    pub user: Option<Arc<kubernetes::KubeUser>>,
}

/// The request's bearer token. Errors: 401 when there is none, it is not a bearer
/// token, or it is longer than [`MAX_TOKEN_BYTES`].
pub fn bearer(headers: &HeaderMap) -> Result<&str, Refusal> {
    agenthooks_kube_review::bearer(headers.get(header::AUTHORIZATION).map(|v| v.as_bytes()))
        .map_err(|e| Refusal::unauthenticated(e.to_string()))
}
