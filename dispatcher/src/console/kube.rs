//! The console in a cluster: the API server, asked as the signed-in person (issue 14
//! point 2). Every request carries the person's own bearer token — the dispatcher's
//! ServiceAccount plays no part — so a person lists, reads and applies exactly what their
//! RBAC allows and nothing more.
//!
//! - Sign-in: a SelfSubjectReview with the pasted token names the person (any token the
//!   API server accepts: a ServiceAccount token from `kubectl create token`, an OIDC id
//!   token). 401 there refuses the sign-in.
//! - Lists: AgentHooks and TenantHookBudgets cluster-wide when the person may list them
//!   so; otherwise namespace by namespace over the namespaces the dispatcher knows (its
//!   snapshot's tenant map), keeping those the person may list. Namespaces refused are not
//!   named (that would tell a tenant the others' namespaces).
//! - Secrets for a header: those labelled `agenthooks.io/hook-secret=true` in the hook's
//!   namespace that the person may list; only their names and keys are shown.
//! - Apply: server-side apply with field manager [`FIELD_MANAGER`], first as a dry run
//!   (`dryRun=All`: the schema, its CEL rules, admission policies, RBAC), then for real.
//! - A 401 from the API server on any request ends the session (the token expired or was
//!   revoked): the person signs in again. Every page asks the API server something as the
//!   person; one that reads only the audit trail asks [`KubeConsole::check`] first.

use std::time::Duration;

use agenthooks_crds::agenthook::AgentHook;
use agenthooks_crds::budget::TenantHookBudget;
use agenthooks_crds::tenancy::TenantMap;
use k8s_openapi::api::authentication::v1::SelfSubjectReview;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use serde_json::Value;

use super::catalog::{BudgetSummary, HookSummary, namespace_tenant};
use super::session::{MAX_AGE, Session};
use crate::identity::kubernetes::KubeUser;

/// The field manager of the console's server-side applies.
pub const FIELD_MANAGER: &str = "agenthooks-console";
/// How long one request to the API server may take.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

/// Why the API server did not answer as hoped.
#[derive(Debug, thiserror::Error)]
pub enum KubeError {
    /// 401: the token is not (or no longer) accepted.
    #[error("the API server did not accept the token")]
    Unauthorized,
    /// The API server refused the request (403, 404, 409, 422, ...): its status, the
    /// field it named (`""` when none) and its message.
    #[error("{message}")]
    Refused {
        status: u16,
        field: String,
        message: String,
    },
    /// It could not be asked (connection, timeout, a client that could not be built).
    #[error("the API server could not be asked: {0}")]
    Unavailable(String),
}

/// What a person may see in a cluster.
pub struct KubeCatalog {
    pub hooks: Vec<HookSummary>,
    pub budgets: Vec<BudgetSummary>,
    /// Notes for the page (e.g. that the list is per namespace).
    pub notes: Vec<String>,
}

/// How to reach the API server (its address and CA; never the dispatcher's credential).
pub struct KubeConsole {
    base: kube::Config,
}

impl KubeConsole {
    /// From the dispatcher's own config (in-cluster or KUBECONFIG); its credentials are
    /// dropped, each request gets the person's token.
    pub fn new(mut base: kube::Config) -> KubeConsole {
        base.auth_info = kube::config::AuthInfo::default();
        base.read_timeout = Some(REQUEST_TIMEOUT);
        base.connect_timeout = Some(REQUEST_TIMEOUT);
        KubeConsole { base }
    }

    /// A client that sends `token`.
    fn client(&self, token: &str) -> Result<kube::Client, KubeError> {
        let mut config = self.base.clone();
        config.auth_info.token = Some(secrecy::SecretString::from(token.to_owned()));
        kube::Client::try_from(config).map_err(|e| KubeError::Unavailable(e.to_string()))
    }

    /// A client that sends the session's token ([`KubeError::Unauthorized`] without one).
    pub(super) fn session_client(&self, s: &Session) -> Result<kube::Client, KubeError> {
        self.client(s.token.as_deref().ok_or(KubeError::Unauthorized)?)
    }

    /// Who `token` is (SelfSubjectReview), and how long the session may last: at most
    /// [`MAX_AGE`], cut to the token's `exp` when it is a JWT.
    pub async fn sign_in(&self, token: &str) -> Result<(KubeUser, Option<Duration>), KubeError> {
        let user = self.review(token).await?;
        // Now rounded up to the second, so the session never outlives the token's `exp`
        // (rounded down, it could by up to a second, and the API server still takes a
        // token for a while after its exp: the session must end by our own clock).
        let now_ceil = (chrono::Utc::now().timestamp_millis() + 999).div_euclid(1000);
        let ttl = agenthooks_kube_review::token_ttl(token, MAX_AGE, now_ceil);
        if ttl.is_zero() {
            return Err(KubeError::Unauthorized);
        }
        Ok((user, Some(ttl)))
    }

    /// Whether the API server still accepts the session's token: a SelfSubjectReview,
    /// [`KubeError::Unauthorized`] once the token is revoked (its ServiceAccount deleted)
    /// or expired. For pages that ask the API server nothing else: history and dry runs
    /// are authorized by RBAC on the person's name, which outlives a revoked token.
    pub async fn check(&self, s: &Session) -> Result<(), KubeError> {
        self.review(s.token.as_deref().ok_or(KubeError::Unauthorized)?)
            .await
            .map(|_| ())
    }

    /// The user the API server says `token` is (SelfSubjectReview).
    async fn review(&self, token: &str) -> Result<KubeUser, KubeError> {
        let api: Api<SelfSubjectReview> = Api::all(self.client(token)?);
        let review = api
            .create(&PostParams::default(), &SelfSubjectReview::default())
            .await
            .map_err(classify)?;
        review
            .status
            .and_then(|s| s.user_info)
            .and_then(|info| agenthooks_kube_review::user_of_info(&info))
            .ok_or_else(|| KubeError::Unavailable("the API server named no user".into()))
    }

    /// The hooks and budgets the person may list (see the module docs); `tenants` are the
    /// served snapshot's namespaces (tried one by one when a cluster-wide list is refused)
    /// and their tenants.
    pub async fn catalog(
        &self,
        s: &Session,
        tenants: &TenantMap,
    ) -> Result<KubeCatalog, KubeError> {
        let namespaces = tenants.namespaces();
        let client = self.session_client(s)?;
        let mut notes = Vec::new();
        let hooks: Listed<AgentHook> = list_visible(&client, &namespaces).await?;
        if hooks.per_namespace {
            notes.push(
                "You may not list AgentHooks cluster-wide: showing the namespaces you may list."
                    .to_owned(),
            );
        }
        let hooks = hooks.items;
        let budgets = list_visible::<TenantHookBudget>(&client, &namespaces)
            .await?
            .items;
        let mut hooks: Vec<HookSummary> = hooks
            .iter()
            .map(|h| HookSummary::of_object(h, tenants))
            .collect();
        hooks.sort_by(|a, b| (&a.namespace, &a.name).cmp(&(&b.namespace, &b.name)));
        let mut budgets: Vec<BudgetSummary> = budgets
            .iter()
            .map(|b| {
                let ns = b.metadata.namespace.clone().unwrap_or_default();
                let tenant = b
                    .spec
                    .tenant
                    .clone()
                    .unwrap_or_else(|| namespace_tenant(tenants, &ns));
                BudgetSummary::of_object(b, tenant)
            })
            .collect();
        budgets.sort_by(|a, b| (&a.namespace, &a.name).cmp(&(&b.namespace, &b.name)));
        Ok(KubeCatalog {
            hooks,
            budgets,
            notes,
        })
    }

    /// One hook, `None` when it does not exist or the person may not read it.
    pub async fn hook(
        &self,
        s: &Session,
        namespace: &str,
        name: &str,
        tenants: &TenantMap,
    ) -> Result<Option<HookSummary>, KubeError> {
        let api: Api<AgentHook> = Api::namespaced(self.session_client(s)?, namespace);
        match api.get(name).await {
            Ok(h) => Ok(Some(HookSummary::of_object(&h, tenants))),
            Err(e) => match classify(e) {
                KubeError::Refused {
                    status: 403 | 404, ..
                } => Ok(None),
                other => Err(other),
            },
        }
    }

    /// `NAME/KEY` of every key of the hook Secrets in `namespace` the person may list.
    pub async fn hook_secrets(
        &self,
        s: &Session,
        namespace: &str,
    ) -> Result<Vec<String>, KubeError> {
        let api: Api<Secret> = Api::namespaced(self.session_client(s)?, namespace);
        let lp =
            ListParams::default().labels(&format!("{}=true", agenthooks_crds::HOOK_SECRET_LABEL));
        match api.list(&lp).await {
            Ok(list) => {
                let mut out: Vec<String> = list
                    .items
                    .iter()
                    .flat_map(|sec| {
                        let name = sec.metadata.name.clone().unwrap_or_default();
                        sec.data
                            .iter()
                            .flat_map(|d| d.keys())
                            .map(move |k| format!("{name}/{k}"))
                            .collect::<Vec<_>>()
                    })
                    .collect();
                out.sort();
                Ok(out)
            }
            Err(e) => match classify(e) {
                KubeError::Refused {
                    status: 403 | 404, ..
                } => Ok(Vec::new()),
                other => Err(other),
            },
        }
    }

    /// Server-side apply of `manifest` (an AgentHook, from the New hook form) as the
    /// person; with `dry_run` the API server checks everything and writes nothing.
    ///
    /// The name of a hook made elsewhere (kubectl, GitOps: no `agenthooks-console` apply
    /// among its managers) is refused (409, `metadata.name`): a server-side apply would
    /// merge the form's fields into that hook, keeping whatever the form left out. A hook
    /// made in the console is applied again (its fields the form no longer sets go).
    ///
    /// `editing` (the form of the Edit page, opened from that very hook): the person
    /// chose to change it, so the apply is forced — the form's fields become theirs even
    /// where kubectl or a GitOps tool set them, and the fields the form does not show stay
    /// with their owners.
    pub async fn apply(
        &self,
        s: &Session,
        manifest: &Value,
        dry_run: bool,
        editing: bool,
    ) -> Result<(), KubeError> {
        let ns = manifest["metadata"]["namespace"].as_str().unwrap_or("");
        let name = manifest["metadata"]["name"].as_str().unwrap_or("");
        let api: Api<AgentHook> = Api::namespaced(self.session_client(s)?, ns);
        match api.get_opt(name).await {
            Ok(Some(existing)) if !editing && !made_in_console(&existing) => {
                return Err(made_elsewhere(&existing, ns, name));
            }
            Ok(_) => {}
            // Not readable, or the name is refused: the apply itself answers.
            Err(e) => match classify(e) {
                KubeError::Refused { .. } => {}
                other => return Err(other),
            },
        }
        let mut pp = PatchParams::apply(FIELD_MANAGER);
        if editing {
            pp = pp.force();
        }
        pp.dry_run = dry_run;
        api.patch(name, &pp, &Patch::Apply(manifest))
            .await
            .map(|_| ())
            .map_err(|e| apply_refusal(e, ns))
    }
}

/// Namespaces listed at once when a person may not list cluster-wide.
const NAMESPACES_AT_ONCE: usize = 16;

/// The objects of one kind a person may list ([`list_visible`]).
pub struct Listed<K> {
    pub items: Vec<K>,
    /// The person may not list them cluster-wide: these are of the namespaces they may
    /// list, asked one by one ([`list_each`]).
    pub per_namespace: bool,
}

/// Every `K` the person of `client` may list: cluster-wide when RBAC allows it, else (403)
/// namespace by namespace over `namespaces` ([`list_each`]). Any other refusal fails it.
pub(super) async fn list_visible<K>(
    client: &kube::Client,
    namespaces: &[String],
) -> Result<Listed<K>, KubeError>
where
    K: kube::Resource<Scope = kube::core::NamespaceResourceScope>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug,
    K::DynamicType: Default,
{
    match Api::<K>::all(client.clone())
        .list(&ListParams::default())
        .await
    {
        Ok(list) => Ok(Listed {
            items: list.items,
            per_namespace: false,
        }),
        Err(e) => match classify(e) {
            KubeError::Refused { status: 403, .. } => Ok(Listed {
                items: list_each(client, namespaces).await?,
                per_namespace: true,
            }),
            other => Err(other),
        },
    }
}

/// Every `K` of `namespaces` the person may list, [`NAMESPACES_AT_ONCE`] namespaces at a
/// time (a tenant's list page asks once per namespace the dispatcher knows): a namespace
/// refused (403) or gone (404) is skipped, and never named; any other answer fails it all.
async fn list_each<K>(client: &kube::Client, namespaces: &[String]) -> Result<Vec<K>, KubeError>
where
    K: kube::Resource<Scope = kube::core::NamespaceResourceScope>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug,
    K::DynamicType: Default,
{
    use futures::{StreamExt, TryStreamExt};
    let lists: Vec<Vec<K>> = futures::stream::iter(namespaces.to_vec())
        .map(|ns| {
            let client = client.clone();
            async move {
                match Api::<K>::namespaced(client, &ns)
                    .list(&ListParams::default())
                    .await
                {
                    Ok(list) => Ok(list.items),
                    Err(e) => match classify(e) {
                        KubeError::Refused {
                            status: 403 | 404, ..
                        } => Ok(Vec::new()),
                        other => Err(other),
                    },
                }
            }
        })
        .buffered(NAMESPACES_AT_ONCE)
        .try_collect()
        .await?;
    Ok(lists.into_iter().flatten().collect())
}

/// Whether the console made `hook` (a server-side apply by [`FIELD_MANAGER`]).
fn made_in_console(hook: &AgentHook) -> bool {
    hook.metadata.managed_fields.iter().flatten().any(|f| {
        f.manager.as_deref() == Some(FIELD_MANAGER) && f.operation.as_deref() == Some("Apply")
    })
}

/// The refusal of a New hook named as one made elsewhere.
fn made_elsewhere(hook: &AgentHook, ns: &str, name: &str) -> KubeError {
    let mut managers: Vec<&str> = hook
        .metadata
        .managed_fields
        .iter()
        .flatten()
        .filter(|f| f.subresource.is_none())
        .filter_map(|f| f.manager.as_deref())
        .collect();
    managers.dedup();
    let by = if managers.is_empty() {
        String::new()
    } else {
        format!(" (its fields are managed by {})", managers.join(", "))
    };
    KubeError::Refused {
        status: 409,
        field: "metadata.name".into(),
        message: format!(
            "metadata.name: {ns}/{name} exists already and was not made in the console{by}: choose another name, or change it where it is kept"
        ),
    }
}

/// A refused apply in namespace `ns`, named for the form: RBAC's 403 and a namespace that
/// does not exist (404) are about `metadata.namespace`; the rest as [`classify`] says.
fn apply_refusal(e: kube::Error, ns: &str) -> KubeError {
    match &e {
        kube::Error::Api(status) if status.code == 403 && status.message.contains(" cannot ") => {
            KubeError::Refused {
                status: 403,
                field: "metadata.namespace".into(),
                message: format!(
                    "metadata.namespace: you may not create or change AgentHooks in namespace {ns:?} (Kubernetes RBAC: create and patch on agenthooks.agenthooks.io there): {}",
                    status.message
                ),
            }
        }
        kube::Error::Api(status)
            if status.code == 404
                && status
                    .details
                    .as_ref()
                    .is_some_and(|d| d.kind == "namespaces") =>
        {
            KubeError::Refused {
                status: 404,
                field: "metadata.namespace".into(),
                message: format!("metadata.namespace: there is no namespace {ns:?}"),
            }
        }
        _ => classify(e),
    }
}

/// A kube error as the console reports it: 401 ends the session; other API answers are
/// refusals with the field they name ([`field_of_status`]).
pub(super) fn classify(e: kube::Error) -> KubeError {
    match e {
        kube::Error::Api(status) if status.code == 401 => KubeError::Unauthorized,
        kube::Error::Api(status) => KubeError::Refused {
            status: status.code,
            field: field_of_status(&status),
            message: status.message.clone(),
        },
        other => KubeError::Unavailable(other.to_string()),
    }
}

/// The field a refusal is about: its first cause's `field` (a 422 Invalid or a 409
/// field manager conflict names it, the latter with a leading `.`), else the one its
/// message names ([`field_of`]), else `""`.
fn field_of_status(status: &kube::core::Status) -> String {
    status
        .details
        .iter()
        .flat_map(|d| &d.causes)
        .map(|c| c.field.trim_start_matches('.'))
        .find(|f| !f.is_empty())
        .map_or_else(|| field_of(&status.message), str::to_owned)
}

/// The first field a Kubernetes refusal names (`... is invalid: FIELD: ...`), or `""`.
pub fn field_of(message: &str) -> String {
    message
        .split_once("is invalid: ")
        .and_then(|(_, rest)| rest.split_once(':'))
        .map(|(field, _)| field.trim().trim_start_matches('[').to_owned())
        .filter(|f| !f.is_empty() && !f.contains(' '))
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refusals_name_the_field_the_api_server_names() {
        assert_eq!(
            field_of(
                r#"AgentHook.agenthooks.io "x" is invalid: spec.timeoutMs: Invalid value: 20000: spec.timeoutMs in body should be less than or equal to 10000"#
            ),
            "spec.timeoutMs"
        );
        assert_eq!(
            field_of(
                r#"AgentHook.agenthooks.io "x" is invalid: [spec.handler: Invalid value: "object": exactly one, spec.scope: Unsupported value]"#
            ),
            "spec.handler"
        );
        assert_eq!(
            field_of("agenthooks.agenthooks.io is forbidden: User \"u\" cannot patch"),
            ""
        );
    }

    fn api_error(status: Value) -> kube::Error {
        kube::Error::Api(Box::new(serde_json::from_value(status).unwrap()))
    }

    fn refused(e: KubeError) -> (u16, String, String) {
        match e {
            KubeError::Refused {
                status,
                field,
                message,
            } => (status, field, message),
            other => panic!("not a refusal: {other:?}"),
        }
    }

    #[test]
    fn the_api_servers_refusals_of_an_apply_name_the_forms_field() {
        // As kube-apiserver 1.35 answers them (details.causes for 422 and 409).
        let invalid = api_error(serde_json::json!({
            "status": "Failure", "code": 422, "reason": "Invalid",
            "message": "AgentHook.agenthooks.io \"Bad_Name\" is invalid: metadata.name: Invalid value: \"Bad_Name\": a lowercase RFC 1123 subdomain must consist of ...",
            "details": {"name": "Bad_Name", "group": "agenthooks.io", "kind": "AgentHook",
                        "causes": [{"reason": "FieldValueInvalid", "message": "Invalid value: \"Bad_Name\"", "field": "metadata.name"}]}
        }));
        assert_eq!(refused(apply_refusal(invalid, "a")).1, "metadata.name");
        let conflict = api_error(serde_json::json!({
            "status": "Failure", "code": 409, "reason": "Conflict",
            "message": "Apply failed with 1 conflict: conflict with \"kubectl\" using agenthooks.io/v1alpha1: .spec.priority",
            "details": {"causes": [{"reason": "FieldManagerConflict", "message": "conflict with \"kubectl\"", "field": ".spec.priority"}]}
        }));
        assert_eq!(refused(apply_refusal(conflict, "a")).1, "spec.priority");
        let rbac = api_error(serde_json::json!({
            "status": "Failure", "code": 403, "reason": "Forbidden",
            "message": "agenthooks.agenthooks.io \"x\" is forbidden: User \"system:serviceaccount:a:alice\" cannot patch resource \"agenthooks\" in API group \"agenthooks.io\" in the namespace \"b\"",
            "details": {"name": "x", "group": "agenthooks.io", "kind": "agenthooks"}
        }));
        let (status, field, message) = refused(apply_refusal(rbac, "b"));
        assert_eq!((status, field.as_str()), (403, "metadata.namespace"));
        assert!(
            message.starts_with(
                "metadata.namespace: you may not create or change AgentHooks in namespace \"b\""
            ),
            "{message}"
        );
        let no_namespace = api_error(serde_json::json!({
            "status": "Failure", "code": 404, "reason": "NotFound",
            "message": "namespaces \"nope\" not found",
            "details": {"name": "nope", "kind": "namespaces"}
        }));
        assert_eq!(
            refused(apply_refusal(no_namespace, "nope")),
            (
                404,
                "metadata.namespace".into(),
                "metadata.namespace: there is no namespace \"nope\"".into()
            )
        );
        let expired = api_error(
            serde_json::json!({"status": "Failure", "code": 401, "reason": "Unauthorized", "message": "Unauthorized"}),
        );
        assert!(matches!(
            apply_refusal(expired, "a"),
            KubeError::Unauthorized
        ));
    }

    #[test]
    fn a_hook_made_elsewhere_is_not_the_consoles_to_apply() {
        let hook = |managers: Value| -> AgentHook {
            serde_json::from_value(serde_json::json!({
                "apiVersion": "agenthooks.io/v1alpha1", "kind": "AgentHook",
                "metadata": {"name": "guard", "namespace": "a", "managedFields": managers},
                "spec": {"event": "stop", "handler": {"type": "http", "http": {"url": "https://p.example/h"}}}
            }))
            .unwrap()
        };
        let by = |manager: &str, operation: &str| serde_json::json!({"manager": manager, "operation": operation, "apiVersion": "agenthooks.io/v1alpha1"});
        assert!(made_in_console(&hook(serde_json::json!([by(
            FIELD_MANAGER,
            "Apply"
        )]))));
        assert!(made_in_console(&hook(serde_json::json!([
            by(FIELD_MANAGER, "Apply"),
            {"manager": "agenthooks-operator", "operation": "Update", "subresource": "status"}
        ]))));
        let kubectl = hook(serde_json::json!([
            by("kubectl", "Apply"),
            {"manager": "agenthooks-operator", "operation": "Update", "subresource": "status"}
        ]));
        assert!(!made_in_console(&kubectl));
        assert!(!made_in_console(&hook(serde_json::json!([by(
            FIELD_MANAGER,
            "Update"
        )]))));
        assert_eq!(
            refused(made_elsewhere(&kubectl, "a", "guard")),
            (
                409,
                "metadata.name".into(),
                "metadata.name: a/guard exists already and was not made in the console (its fields are managed by kubectl): choose another name, or change it where it is kept".into()
            )
        );
    }
}
