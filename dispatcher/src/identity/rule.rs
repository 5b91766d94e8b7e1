//! Which tenant a caller may act for (CONTRACT §9.2): values in, a choice out; no I/O.
//! The one question it cannot answer alone — may this Kubernetes user act for another
//! namespace's tenant — it hands back as [`TenantChoice::AskRbac`].

use agenthooks_crds::tenancy::TenantMap;
use axum::http::StatusCode;

/// What a caller was granted by its credential.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Grant {
    /// Any tenant; an absent `tenant_id` stays empty (`--allow-anonymous`: today's
    /// behaviour).
    Any,
    /// The tenants a callers file lists (`["*"]`: any, but then `tenant_id` is needed);
    /// shared with the caller it was loaded for, so a request clones a pointer.
    Tenants(std::sync::Arc<[String]>),
    /// A Kubernetes user: a ServiceAccount acts for its namespace's tenant (`namespace`),
    /// any user for a tenant whose namespace RBAC grants it.
    Kubernetes {
        namespace: Option<std::sync::Arc<str>>,
    },
}

/// The outcome of [`choose_tenant`] when the caller is not refused outright.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TenantChoice {
    /// The event is for this tenant.
    Granted(String),
    /// Allowed only if RBAC lets the caller `create` `agenthooks/dispatch` in `namespace`
    /// (the namespace that holds `tenant`).
    AskRbac { tenant: String, namespace: String },
}

/// A request refused: its HTTP status, the field at fault (`authorization` for the
/// credential, `tenant_id`; `""` only for a 503, where the request is not at fault) and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct Refusal {
    pub status: StatusCode,
    pub field: &'static str,
    pub message: String,
}

impl Refusal {
    /// 401 naming `authorization`: no credential, or one that does not verify.
    pub fn unauthenticated(message: impl Into<String>) -> Refusal {
        Refusal {
            status: StatusCode::UNAUTHORIZED,
            field: "authorization",
            message: message.into(),
        }
    }
    /// 403 naming `tenant_id`: a tenant the caller may not act for.
    pub fn forbidden(message: impl Into<String>) -> Refusal {
        Refusal {
            status: StatusCode::FORBIDDEN,
            field: "tenant_id",
            message: format!("tenant_id: {}", message.into()),
        }
    }
    /// 400 naming `tenant_id`: it is needed and absent.
    pub fn tenant_required(message: impl Into<String>) -> Refusal {
        Refusal {
            status: StatusCode::BAD_REQUEST,
            field: "tenant_id",
            message: format!("tenant_id: {}", message.into()),
        }
    }
    /// 503: the authority (the API server) could not be asked; the caller treats it as
    /// `block`.
    pub fn unavailable(message: impl Into<String>) -> Refusal {
        Refusal {
            status: StatusCode::SERVICE_UNAVAILABLE,
            field: "",
            message: format!("{}; treat as block", message.into()),
        }
    }
}

/// The tenant an event of `caller` (holding `grant`) is for, given the body's
/// `tenant_id` (`requested`, empty when absent) and the namespaces' tenants.
///
/// - [`Grant::Any`]: `requested` as is.
/// - [`Grant::Tenants`]: `requested` if listed (or `*` is); absent → the only tenant
///   listed (400 when there are several, or `*`).
/// - [`Grant::Kubernetes`]: absent or equal to the own namespace's tenant → that tenant
///   (403 when the namespace lost its claim or is not known yet; 400 for a user with
///   no namespace); another tenant → [`TenantChoice::AskRbac`] in the namespace that
///   holds it (403 when none does).
///
/// Errors: the [`Refusal`] (403 or 400, naming `tenant_id`).
pub fn choose_tenant(
    caller: &str,
    grant: &Grant,
    requested: &str,
    tenants: &TenantMap,
) -> Result<TenantChoice, Refusal> {
    match grant {
        Grant::Any => Ok(TenantChoice::Granted(requested.to_string())),
        Grant::Tenants(list) => {
            let any = list.iter().any(|t| t == "*");
            if requested.is_empty() {
                return match &list[..] {
                    [only] if !any => Ok(TenantChoice::Granted(only.clone())),
                    _ => Err(Refusal::tenant_required(format!(
                        "required: caller {caller} may act for several tenants"
                    ))),
                };
            }
            if any || list.iter().any(|t| t == requested) {
                Ok(TenantChoice::Granted(requested.to_string()))
            } else {
                Err(Refusal::forbidden(format!(
                    "caller {caller} may not act for tenant {requested:?}"
                )))
            }
        }
        Grant::Kubernetes { namespace } => {
            let own = namespace.as_deref().map(|ns| (ns, tenants.tenant_of(ns)));
            match (requested, own) {
                ("", None) => Err(Refusal::tenant_required(format!(
                    "required: caller {caller} is not a ServiceAccount, so it has no tenant of its own"
                ))),
                ("", Some((_, Ok(Some(t))))) => Ok(TenantChoice::Granted(t.to_string())),
                ("", Some((ns, Ok(None)))) => Err(Refusal::forbidden(format!(
                    "caller {caller}: namespace {ns} is not known to this dispatcher yet"
                ))),
                ("", Some((_, Err(conflict)))) => {
                    Err(Refusal::forbidden(format!("caller {caller}: {conflict}")))
                }
                (wanted, Some((_, Ok(Some(t))))) if wanted == t => {
                    Ok(TenantChoice::Granted(t.to_string()))
                }
                (wanted, _) => match tenants.namespace_of(wanted) {
                    Some(ns) => Ok(TenantChoice::AskRbac {
                        tenant: wanted.to_string(),
                        namespace: ns.to_string(),
                    }),
                    None => Err(Refusal::forbidden(format!(
                        "caller {caller} may not act for tenant {wanted:?}: no namespace holds it"
                    ))),
                },
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use agenthooks_crds::tenancy::NamespaceClaim;

    /// The choice, or a refusal's status and field.
    type Want = Result<TenantChoice, (StatusCode, &'static str)>;

    fn map() -> TenantMap {
        let ns = |n: &str, l: Option<&str>, at: &str| NamespaceClaim {
            namespace: n.into(),
            label: l.map(Into::into),
            created_at: at.into(),
        };
        TenantMap::resolve(&[
            ns("tenant-acme", Some("acme"), "2026-01-01T00:00:00Z"),
            ns("beta", None, "2026-01-01T00:00:00Z"),
            // Claims acme too, later: holds nothing.
            ns("team-x", Some("acme"), "2026-02-01T00:00:00Z"),
            ns("platform", None, "2026-01-01T00:00:00Z"),
        ])
    }

    fn sa(ns: &str) -> Grant {
        Grant::Kubernetes {
            namespace: Some(ns.into()),
        }
    }

    fn granted(t: &str) -> Want {
        Ok(TenantChoice::Granted(t.into()))
    }

    fn rbac(t: &str, ns: &str) -> Want {
        Ok(TenantChoice::AskRbac {
            tenant: t.into(),
            namespace: ns.into(),
        })
    }

    const FORBIDDEN: Want = Err((StatusCode::FORBIDDEN, "tenant_id"));
    const REQUIRED: Want = Err((StatusCode::BAD_REQUEST, "tenant_id"));

    #[test]
    fn the_tenant_is_one_the_caller_may_act_for() {
        let list = |l: &[&str]| Grant::Tenants(l.iter().map(|s| s.to_string()).collect());
        let cases: Vec<(Grant, &str, Want)> = vec![
            // Anonymous: as before identity existed.
            (Grant::Any, "", granted("")),
            (Grant::Any, "beta", granted("beta")),
            // Callers file.
            (list(&["acme"]), "", granted("acme")),
            (list(&["acme"]), "acme", granted("acme")),
            (list(&["acme"]), "beta", FORBIDDEN),
            (list(&["acme"]), "ACME", FORBIDDEN),
            (list(&["acme", "beta"]), "", REQUIRED),
            (list(&["acme", "beta"]), "beta", granted("beta")),
            (list(&["*"]), "", REQUIRED),
            (list(&["*"]), "anything", granted("anything")),
            // A ServiceAccount: its namespace's tenant.
            (sa("tenant-acme"), "", granted("acme")),
            (sa("tenant-acme"), "acme", granted("acme")),
            (sa("beta"), "", granted("beta")),
            // Another tenant: RBAC in the namespace that holds it.
            (sa("tenant-acme"), "beta", rbac("beta", "beta")),
            (sa("platform"), "acme", rbac("acme", "tenant-acme")),
            // Never through a namespace that lost its claim, nor one that holds nothing.
            (sa("team-x"), "", FORBIDDEN),
            (sa("team-x"), "acme", rbac("acme", "tenant-acme")),
            (sa("tenant-acme"), "team-x", FORBIDDEN),
            (sa("tenant-acme"), "nobody", FORBIDDEN),
            // A namespace not in the snapshot (yet).
            (sa("new-ns"), "", FORBIDDEN),
            (sa("new-ns"), "beta", rbac("beta", "beta")),
            // A user that is not a ServiceAccount has no tenant of its own.
            (Grant::Kubernetes { namespace: None }, "", REQUIRED),
            (
                Grant::Kubernetes { namespace: None },
                "acme",
                rbac("acme", "tenant-acme"),
            ),
        ];
        let tenants = map();
        for (i, (grant, requested, want)) in cases.into_iter().enumerate() {
            let got =
                choose_tenant("c", &grant, requested, &tenants).map_err(|r| (r.status, r.field));
            assert_eq!(got, want, "case {i}: {grant:?} asking {requested:?}");
        }
    }

    #[test]
    fn refusals_say_why() {
        let tenants = map();
        let e = choose_tenant("c", &sa("team-x"), "", &tenants).unwrap_err();
        assert!(e.message.starts_with("tenant_id: "), "{e}");
        assert!(e.message.contains("TenantConflict"), "{e}");
        let e = choose_tenant(
            "ci",
            &Grant::Tenants(vec!["acme".to_string()].into()),
            "beta",
            &tenants,
        )
        .unwrap_err();
        assert_eq!(
            e.message,
            "tenant_id: caller ci may not act for tenant \"beta\""
        );
        assert_eq!(
            Refusal::unauthenticated("x").status,
            StatusCode::UNAUTHORIZED
        );
        assert!(
            Refusal::unavailable("x")
                .message
                .ends_with("treat as block")
        );
    }
}
