//! Who a bearer token is and what RBAC lets it do, asked of the API server the way the
//! kubelet and kube-rbac-proxy do (webhook authentication and authorization): a
//! TokenReview for a projected ServiceAccount token of one audience, and a
//! SubjectAccessReview on subresources of `agenthooks` in group `agenthooks.io`. Shared by
//! the dispatcher (its callers, CONTRACT §9.1–9.2, §9.5) and the operator (its
//! dispatchers on the sync port, CONTRACT §9.4):
//!
//! | who asks | request | RBAC asked ([`Access`]) |
//! |---|---|---|
//! | dispatcher | `POST /v1/dispatch` for another namespace's tenant | `create` `agenthooks/dispatch` in that namespace |
//! | dispatcher | `GET /v1/executions?namespace=NS` | `list` `agenthooks/executions` in `NS` (no namespace: cluster-wide) |
//! | dispatcher | `GET /v1/executions/{id}` | `get` `agenthooks/executions` in the row's hook namespace |
//! | dispatcher | `POST /v1/test` | `create` `agenthooks/test` in the hook's namespace |
//! | operator | every call to the sync port | `create` `agenthooks/sync` in the operator's master namespace |
//!
//! Both answers are cached in bounded maps ([`TtlCache`]) keyed by a sha256 (of the
//! token; of the user and every attribute of the [`Access`] asked), never by the token
//! itself:
//! - a verified token for [`CacheConfig::token_ttl`], and never past the token's own
//!   `exp`; a refused one for [`CacheConfig::denied_ttl`];
//! - an RBAC answer for [`CacheConfig::allowed_ttl`] (allowed) or
//!   [`CacheConfig::denied_ttl`] (denied): revoking a RoleBinding takes effect within
//!   `allowed_ttl`.
//!
//! Errors ([`ReviewError`]): the token is not authenticated (a 401 to the caller), or the
//! API server could not be asked in [`REVIEW_TIMEOUT`] (a 503). The asking component's
//! ServiceAccount needs `create` on `tokenreviews` and `subjectaccessreviews` (the chart
//! binds `system:auth-delegator`).

use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::authentication::v1::{TokenReview, TokenReviewSpec};
use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
};
use kube::api::{Api, PostParams};
use sha2::{Digest, Sha256};

mod ttl_cache;
pub use ttl_cache::TtlCache;

/// The audience a dispatcher's caller's projected token must be for.
pub const DEFAULT_AUDIENCE: &str = "agenthooks.io";
/// The audience a dispatcher's own projected token must be for on the operator's sync
/// port (another audience than callers', so a caller's token is no dispatcher's).
pub const SYNC_AUDIENCE: &str = "agenthooks.io/sync";
/// The API group of every [`Access`] asked about.
pub const RBAC_GROUP: &str = "agenthooks.io";
/// The resource of every [`Access`]: its subresources name what is done.
pub const RBAC_RESOURCE: &str = "agenthooks";
/// `create` on `agenthooks/dispatch` in a namespace: send events for its tenant.
pub const DISPATCH_SUBRESOURCE: &str = "dispatch";
/// `get`, `list` on `agenthooks/executions` in a namespace: read its audit rows.
pub const EXECUTIONS_SUBRESOURCE: &str = "executions";
/// `create` on `agenthooks/test` in a namespace: dry-run its hooks (or an inline spec
/// in it).
pub const TEST_SUBRESOURCE: &str = "test";
/// `create` on `agenthooks/sync` in the operator's master namespace: be a dispatcher on
/// the operator's sync port (poll snapshots, report, reserve and settle budgets).
pub const SYNC_SUBRESOURCE: &str = "sync";
/// `user.extra` key of the Pod a token is bound to (its name).
pub const POD_NAME_EXTRA: &str = "authentication.kubernetes.io/pod-name";
/// `user.extra` key of the Pod a token is bound to (its uid).
pub const POD_UID_EXTRA: &str = "authentication.kubernetes.io/pod-uid";
/// Prefix of a ServiceAccount's user name: `system:serviceaccount:NAMESPACE:NAME`.
const SERVICE_ACCOUNT_PREFIX: &str = "system:serviceaccount:";
/// Longest wait for the API server's answer; past it the request is answered 503.
pub const REVIEW_TIMEOUT: Duration = Duration::from_secs(5);
/// Longest bearer token read, in bytes; a longer one is refused unread ([`bearer`]).
pub const MAX_TOKEN_BYTES: usize = 16 * 1024;

/// Why a request carries no usable bearer token ([`bearer`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum BearerError {
    #[error("missing `Authorization: Bearer <token>`")]
    Missing,
    #[error("the bearer token is longer than {MAX_TOKEN_BYTES} bytes")]
    TooLong,
    #[error("the Authorization header is not ASCII")]
    NotAscii,
    #[error("the Authorization header is not `Bearer <token>`")]
    NotBearer,
}

/// The token of an `Authorization: Bearer <token>` header (`value`: the header's bytes,
/// `None` when absent); the scheme is case-insensitive and the token trimmed. The one
/// parser of the dispatcher's callers and the operator's sync port.
///
/// Errors: [`BearerError`], checked in that order (length before anything is read).
pub fn bearer(value: Option<&[u8]>) -> Result<&str, BearerError> {
    let value = value.ok_or(BearerError::Missing)?;
    if value.len() > MAX_TOKEN_BYTES + "Bearer ".len() {
        return Err(BearerError::TooLong);
    }
    let value = std::str::from_utf8(value)
        .ok()
        .filter(|v| v.is_ascii())
        .ok_or(BearerError::NotAscii)?;
    let (scheme, token) = value.split_once(' ').unwrap_or((value, ""));
    let token = token.trim();
    if !scheme.eq_ignore_ascii_case("bearer") || token.is_empty() {
        return Err(BearerError::NotBearer);
    }
    Ok(token)
}

/// Reviews (TokenReview and SubjectAccessReview together) one [`Reviewer`] has in flight
/// at most: a flood of new tokens costs the API server at most this many requests at a
/// time, whoever sends them.
pub const MAX_REVIEWS_IN_FLIGHT: usize = 64;
/// Longest wait for a free review slot; past it the request is answered 503.
pub const REVIEW_SLOT_WAIT: Duration = Duration::from_secs(1);

/// One question to RBAC: may a user do `verb` on `group` `resource/subresource` in
/// `namespace` (empty: cluster-wide, i.e. in every namespace at once)? Every attribute is
/// part of the cache key of its answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Access<'a> {
    /// `create`, `get`, `list`.
    pub verb: &'a str,
    /// The API group, [`RBAC_GROUP`].
    pub group: &'a str,
    /// The resource, [`RBAC_RESOURCE`].
    pub resource: &'a str,
    /// The subresource: [`DISPATCH_SUBRESOURCE`], [`EXECUTIONS_SUBRESOURCE`],
    /// [`TEST_SUBRESOURCE`], [`SYNC_SUBRESOURCE`].
    pub subresource: &'a str,
    /// The namespace asked about; empty for cluster-wide.
    pub namespace: &'a str,
}

impl<'a> Access<'a> {
    fn ours(verb: &'a str, subresource: &'a str, namespace: &'a str) -> Access<'a> {
        Access {
            verb,
            group: RBAC_GROUP,
            resource: RBAC_RESOURCE,
            subresource,
            namespace,
        }
    }

    /// `create` `agenthooks/dispatch` in `namespace`: act for its tenant (CONTRACT §9.2).
    pub fn dispatch(namespace: &'a str) -> Access<'a> {
        Access::ours("create", DISPATCH_SUBRESOURCE, namespace)
    }

    /// `list` `agenthooks/executions` in `namespace` (empty: every namespace's rows).
    pub fn list_executions(namespace: &'a str) -> Access<'a> {
        Access::ours("list", EXECUTIONS_SUBRESOURCE, namespace)
    }

    /// `get` `agenthooks/executions` in `namespace`: one of its rows, with its error
    /// detail.
    pub fn get_execution(namespace: &'a str) -> Access<'a> {
        Access::ours("get", EXECUTIONS_SUBRESOURCE, namespace)
    }

    /// `create` `agenthooks/test` in `namespace`: a dry run of a hook of it.
    pub fn create_test(namespace: &'a str) -> Access<'a> {
        Access::ours("create", TEST_SUBRESOURCE, namespace)
    }

    /// `create` `agenthooks/sync` in `namespace` (the operator's master namespace): be a
    /// dispatcher of that operator.
    pub fn sync(namespace: &'a str) -> Access<'a> {
        Access::ours("create", SYNC_SUBRESOURCE, namespace)
    }
}

impl std::fmt::Display for Access<'_> {
    /// `list agenthooks/executions in namespace tenant-a`, `... cluster-wide`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {}", self.verb, self.resource)?;
        if !self.subresource.is_empty() {
            write!(f, "/{}", self.subresource)?;
        }
        if self.group != RBAC_GROUP {
            write!(f, " (group {:?})", self.group)?;
        }
        if self.namespace.is_empty() {
            f.write_str(" cluster-wide")
        } else {
            write!(f, " in namespace {}", self.namespace)
        }
    }
}

/// How long answers are kept, and how many.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CacheConfig {
    /// A verified token (never past its `exp`).
    pub token_ttl: Duration,
    /// An RBAC "allowed".
    pub allowed_ttl: Duration,
    /// A refused token or an RBAC "denied".
    pub denied_ttl: Duration,
    /// Entries per cache.
    pub capacity: usize,
}

impl Default for CacheConfig {
    /// 2 min for tokens (the kubelet's webhook default), 60 s for RBAC allowed, 10 s for
    /// refusals; 10,000 entries each.
    fn default() -> Self {
        CacheConfig {
            token_ttl: Duration::from_secs(120),
            allowed_ttl: Duration::from_secs(60),
            denied_ttl: Duration::from_secs(10),
            capacity: 10_000,
        }
    }
}

/// A user the API server vouched for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KubeUser {
    /// `status.user.username`, e.g. `system:serviceaccount:tenant-acme:runtime`.
    pub name: Arc<str>,
    /// `status.user.uid`.
    pub uid: Option<String>,
    /// `status.user.groups`.
    pub groups: Vec<String>,
    /// `status.user.extra` (asked about again in a SubjectAccessReview).
    pub extra: std::collections::BTreeMap<String, Vec<String>>,
    /// The namespace of a ServiceAccount user (shared with every request's grant).
    pub namespace: Option<Arc<str>>,
    /// The ServiceAccount's name, for a ServiceAccount user.
    pub service_account: Option<String>,
    /// The Pod the token is bound to (a projected token of a Pod), from `extra`.
    pub pod: Option<PodBinding>,
}

/// The Pod a ServiceAccount token is bound to: `user.extra`'s
/// [`POD_NAME_EXTRA`] and [`POD_UID_EXTRA`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodBinding {
    /// The Pod's name.
    pub name: String,
    /// The Pod's uid, when the API server names it.
    pub uid: Option<String>,
}

/// Why a review gave no answer to act on.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ReviewError {
    /// The API server does not authenticate the token for the audience asked (or it
    /// authenticated it for none): the caller gets 401.
    #[error("the bearer token is not a valid ServiceAccount token for the audience {audience:?}")]
    Unauthenticated {
        /// The audience the token had to be for.
        audience: String,
    },
    /// The API server could not be asked (it failed, or did not answer within
    /// [`REVIEW_TIMEOUT`]): the caller gets 503.
    #[error("{0}")]
    Unavailable(String),
}

/// TokenReview and SubjectAccessReview through the API server, cached.
pub struct Reviewer {
    client: kube::Client,
    audience: String,
    cache: CacheConfig,
    /// Verified tokens.
    tokens: TtlCache<[u8; 32], Arc<KubeUser>>,
    /// Refused tokens, apart: a flood of bad tokens cannot evict the good ones.
    refused: TtlCache<[u8; 32], ()>,
    access: TtlCache<[u8; 32], bool>,
    /// [`MAX_REVIEWS_IN_FLIGHT`] slots.
    slots: tokio::sync::Semaphore,
}

impl Reviewer {
    /// Tokens verified through `client` for `audience`, answers cached as `cache` says.
    pub fn new(client: kube::Client, audience: impl Into<String>, cache: CacheConfig) -> Self {
        Reviewer {
            client,
            audience: audience.into(),
            cache,
            tokens: TtlCache::new(cache.capacity),
            refused: TtlCache::new(cache.capacity),
            access: TtlCache::new(cache.capacity),
            slots: tokio::sync::Semaphore::new(MAX_REVIEWS_IN_FLIGHT),
        }
    }

    /// Entries held by the token caches (verified and refused together) and the RBAC
    /// cache (each map at most [`CacheConfig::capacity`]).
    pub fn cached(&self) -> (usize, usize) {
        (self.tokens.len() + self.refused.len(), self.access.len())
    }

    /// The audience tokens must be for.
    pub fn audience(&self) -> &str {
        &self.audience
    }

    /// The user of `token`.
    ///
    /// A JWT whose own claims say it cannot pass (expired, or an `aud` without our
    /// audience) is refused without asking the API server ([`cannot_pass`]); any other
    /// token is reviewed (TokenReview), at most [`MAX_REVIEWS_IN_FLIGHT`] at a time.
    ///
    /// Errors: [`ReviewError::Unauthenticated`] when the API server does not authenticate
    /// it for our audience, [`ReviewError::Unavailable`] when it could not be asked.
    pub async fn authenticate(&self, token: &str) -> Result<Arc<KubeUser>, ReviewError> {
        let key: [u8; 32] = Sha256::digest(token.as_bytes()).into();
        let now = Instant::now();
        if let Some(user) = self.tokens.get(&key, now) {
            return Ok(user);
        }
        if self.refused.get(&key, now).is_some()
            || cannot_pass(token, &self.audience, chrono::Utc::now().timestamp())
        {
            return Err(self.not_authenticated());
        }
        let review = TokenReview {
            spec: TokenReviewSpec {
                token: Some(token.to_string()),
                audiences: Some(vec![self.audience.clone()]),
            },
            ..Default::default()
        };
        let answer = self.review(&review, "review the token").await?;
        let user = user_of(answer.status.as_ref(), &self.audience).map(Arc::new);
        match user {
            Some(user) => {
                let ttl = token_ttl(token, self.cache.token_ttl, chrono::Utc::now().timestamp());
                self.tokens.insert(key, user.clone(), now, ttl);
                Ok(user)
            }
            None => {
                self.refused.insert(key, (), now, self.cache.denied_ttl);
                Err(self.not_authenticated())
            }
        }
    }

    fn not_authenticated(&self) -> ReviewError {
        ReviewError::Unauthenticated {
            audience: self.audience.clone(),
        }
    }

    /// Whether RBAC lets `user` do `access` (a SubjectAccessReview), cached by the user's
    /// whole identity and every attribute of `access`.
    ///
    /// Errors: [`ReviewError::Unavailable`] when the API server could not be asked.
    pub async fn allowed(&self, user: &KubeUser, access: &Access<'_>) -> Result<bool, ReviewError> {
        let key = access_key(user, access);
        let now = Instant::now();
        if let Some(allowed) = self.access.get(&key, now) {
            return Ok(allowed);
        }
        let review = SubjectAccessReview {
            spec: SubjectAccessReviewSpec {
                user: Some(user.name.to_string()),
                uid: user.uid.clone(),
                groups: Some(user.groups.clone()),
                extra: (!user.extra.is_empty()).then(|| user.extra.clone()),
                resource_attributes: Some(resource_attributes(access)),
                ..Default::default()
            },
            ..Default::default()
        };
        let answer = self.review(&review, "review access").await?;
        let allowed = answer
            .status
            .is_some_and(|s| s.allowed && s.denied != Some(true));
        let ttl = if allowed {
            self.cache.allowed_ttl
        } else {
            self.cache.denied_ttl
        };
        self.access.insert(key, allowed, now, ttl);
        Ok(allowed)
    }
}

impl Reviewer {
    /// Creates the review `object` (TokenReview, SubjectAccessReview: cluster-scoped,
    /// answered in the response) within [`REVIEW_TIMEOUT`]; `what` names it in errors.
    ///
    /// Errors: [`ReviewError::Unavailable`] ("the API server could not {what}") when it
    /// does not answer in time or fails.
    async fn review<K>(&self, object: &K, what: &str) -> Result<K, ReviewError>
    where
        K: kube::Resource<Scope = k8s_openapi::ClusterResourceScope>
            + Clone
            + std::fmt::Debug
            + serde::Serialize
            + serde::de::DeserializeOwned,
        K::DynamicType: Default,
    {
        let Ok(Ok(_slot)) = tokio::time::timeout(REVIEW_SLOT_WAIT, self.slots.acquire()).await
        else {
            return Err(ReviewError::Unavailable(format!(
                "too many reviews in flight ({MAX_REVIEWS_IN_FLIGHT}): could not {what}"
            )));
        };
        let api: Api<K> = Api::all(self.client.clone());
        match tokio::time::timeout(REVIEW_TIMEOUT, api.create(&PostParams::default(), object)).await
        {
            Err(_) => Err(ReviewError::Unavailable(format!(
                "the API server did not {what} in time"
            ))),
            Ok(Err(e)) => {
                tracing::warn!(error = %e, kind = K::kind(&Default::default()).as_ref(), "review failed");
                Err(ReviewError::Unavailable(format!(
                    "the API server could not {what}: {e}"
                )))
            }
            Ok(Ok(answer)) => Ok(answer),
        }
    }
}

/// The SubjectAccessReview's resource attributes of `access` (no namespace for
/// cluster-wide).
fn resource_attributes(access: &Access<'_>) -> ResourceAttributes {
    let some = |s: &str| (!s.is_empty()).then(|| s.to_string());
    ResourceAttributes {
        verb: some(access.verb),
        group: some(access.group),
        resource: some(access.resource),
        subresource: some(access.subresource),
        namespace: some(access.namespace),
        ..Default::default()
    }
}

/// The user of a TokenReview's status, when it authenticated the token for `audience`
/// (an API server that ignores audiences answers none: not accepted).
pub fn user_of(
    status: Option<&k8s_openapi::api::authentication::v1::TokenReviewStatus>,
    audience: &str,
) -> Option<KubeUser> {
    let status = status?;
    if status.authenticated != Some(true) {
        return None;
    }
    if !status
        .audiences
        .as_ref()
        .is_some_and(|a| a.iter().any(|x| x == audience))
    {
        return None;
    }
    user_of_info(status.user.as_ref()?)
}

/// The user an API server named (a TokenReview's or a SelfSubjectReview's `userInfo`);
/// `None` without a user name.
pub fn user_of_info(info: &k8s_openapi::api::authentication::v1::UserInfo) -> Option<KubeUser> {
    let name = info.username.clone().filter(|n| !n.is_empty())?;
    let service_account = name
        .strip_prefix(SERVICE_ACCOUNT_PREFIX)
        .and_then(|rest| rest.split_once(':'))
        .filter(|(ns, sa)| !ns.is_empty() && !sa.is_empty() && !sa.contains(':'));
    let extra = info.extra.clone().unwrap_or_default();
    let first = |key: &str| {
        extra
            .get(key)
            .and_then(|v| v.first())
            .filter(|v| !v.is_empty())
            .cloned()
    };
    let pod = service_account
        .and(first(POD_NAME_EXTRA))
        .map(|name| PodBinding {
            name,
            uid: first(POD_UID_EXTRA),
        });
    Some(KubeUser {
        name: Arc::from(name.as_str()),
        uid: info.uid.clone(),
        groups: info.groups.clone().unwrap_or_default(),
        namespace: service_account.map(|(ns, _)| Arc::from(ns)),
        service_account: service_account.map(|(_, sa)| sa.to_string()),
        pod,
        extra,
    })
}

/// How long a verified `token` may be trusted from `now_unix` (seconds): `ttl`, cut to
/// the token's own `exp` when it is a JWT that has one (zero once it has passed).
pub fn token_ttl(token: &str, ttl: Duration, now_unix: i64) -> Duration {
    match jwt_exp(token) {
        Some(exp) if exp <= now_unix => Duration::ZERO,
        Some(exp) => ttl.min(Duration::from_secs((exp - now_unix) as u64)),
        None => ttl,
    }
}

/// The `exp` claim of a JWT, read without checking the signature (the API server did).
fn jwt_exp(token: &str) -> Option<i64> {
    jwt_claims(token)?.get("exp")?.as_i64()
}

/// The claims of a JWT (`header.payload.signature`), read without checking anything
/// (`None` when it is not one).
pub fn jwt_claims(token: &str) -> Option<serde_json::Value> {
    use base64::Engine;
    let mut parts = token.split('.');
    let (_, payload, _, None) = (parts.next()?, parts.next()?, parts.next()?, parts.next()) else {
        return None;
    };
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(payload.trim_end_matches('='))
        .ok()?;
    serde_json::from_slice(&bytes).ok()
}

/// Whether `token` is a JWT whose own claims say no review can accept it for `audience`
/// at `now_unix`: its `exp` has passed, or its `aud` (a string or a list) does not hold
/// `audience`. Such a token is refused without a TokenReview (the API server would
/// refuse it: a ServiceAccount token is valid only for the audiences it names, and
/// [`user_of`] wants ours echoed back). Anything else — no JWT, no `aud`, no `exp` — is
/// left to the API server. The signature is not checked, so this only ever refuses.
pub fn cannot_pass(token: &str, audience: &str, now_unix: i64) -> bool {
    let Some(claims) = jwt_claims(token) else {
        return false;
    };
    if claims
        .get("exp")
        .and_then(serde_json::Value::as_i64)
        .is_some_and(|exp| exp <= now_unix)
    {
        return true;
    }
    match claims.get("aud") {
        Some(serde_json::Value::String(a)) => a != audience,
        Some(serde_json::Value::Array(list)) => !list.iter().any(|a| a.as_str() == Some(audience)),
        _ => false,
    }
}

/// A fixed-size key for an RBAC answer: the user's whole identity and every attribute
/// of `access`. Each part is hashed with its length first, so no two different questions
/// share a key by moving bytes from one part into the next.
fn access_key(user: &KubeUser, access: &Access<'_>) -> [u8; 32] {
    fn part(h: &mut Sha256, tag: u8, s: &str) {
        h.update([tag]);
        h.update((s.len() as u64).to_le_bytes());
        h.update(s.as_bytes());
    }
    let mut h = Sha256::new();
    part(&mut h, b'u', &user.name);
    part(&mut h, b'i', user.uid.as_deref().unwrap_or(""));
    h.update([u8::from(user.uid.is_some())]);
    for g in &user.groups {
        part(&mut h, b'g', g);
    }
    for (k, vs) in &user.extra {
        part(&mut h, b'k', k);
        for v in vs {
            part(&mut h, b'v', v);
        }
    }
    part(&mut h, b'V', access.verb);
    part(&mut h, b'G', access.group);
    part(&mut h, b'R', access.resource);
    part(&mut h, b'S', access.subresource);
    part(&mut h, b'N', access.namespace);
    h.finalize().into()
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::authentication::v1::{TokenReviewStatus, UserInfo};
    use serde_json::json;

    fn status(authenticated: bool, audiences: &[&str], user: &str) -> TokenReviewStatus {
        TokenReviewStatus {
            authenticated: Some(authenticated),
            audiences: Some(audiences.iter().map(|s| s.to_string()).collect()),
            user: Some(UserInfo {
                username: Some(user.into()),
                uid: Some("u-1".into()),
                groups: Some(vec!["system:serviceaccounts".into()]),
                extra: None,
            }),
            error: None,
        }
    }

    #[test]
    fn a_review_names_the_user_and_its_namespace_for_our_audience_only() {
        let sa = "system:serviceaccount:tenant-acme:runtime";
        let u = user_of(Some(&status(true, &["agenthooks.io"], sa)), "agenthooks.io").unwrap();
        assert_eq!(
            (&*u.name, u.namespace.as_deref(), u.uid.as_deref()),
            (sa, Some("tenant-acme"), Some("u-1"))
        );
        assert_eq!(u.groups, ["system:serviceaccounts"]);
        // Another audience, no audience, not authenticated, no status: refused.
        assert!(user_of(Some(&status(true, &["api"], sa)), "agenthooks.io").is_none());
        assert!(user_of(Some(&status(true, &[], sa)), "agenthooks.io").is_none());
        assert!(
            user_of(
                Some(&status(false, &["agenthooks.io"], sa)),
                "agenthooks.io"
            )
            .is_none()
        );
        assert!(user_of(None, "agenthooks.io").is_none());
        // A user that is not a ServiceAccount has no namespace.
        let u = user_of(
            Some(&status(true, &["agenthooks.io"], "alice")),
            "agenthooks.io",
        )
        .unwrap();
        assert_eq!(u.namespace, None);
        let u = user_of(
            Some(&status(
                true,
                &["agenthooks.io"],
                "system:serviceaccount::x",
            )),
            "agenthooks.io",
        )
        .unwrap();
        assert_eq!(u.namespace, None);
    }

    #[test]
    fn a_review_names_the_service_account_and_the_pod_its_token_is_bound_to() {
        let sa = "system:serviceaccount:agenthooks-system:agenthooks-dispatcher";
        let mut st = status(true, &[SYNC_AUDIENCE], sa);
        let u = user_of(Some(&st), SYNC_AUDIENCE).unwrap();
        assert_eq!(
            (u.namespace.as_deref(), u.service_account.as_deref(), &u.pod),
            (
                Some("agenthooks-system"),
                Some("agenthooks-dispatcher"),
                &None
            ),
            "a token bound to no Pod"
        );
        st.user.as_mut().unwrap().extra = Some(
            [
                (
                    POD_NAME_EXTRA.to_string(),
                    vec!["dispatcher-7f9c".to_string()],
                ),
                (POD_UID_EXTRA.to_string(), vec!["uid-42".to_string()]),
            ]
            .into(),
        );
        let u = user_of(Some(&st), SYNC_AUDIENCE).unwrap();
        assert_eq!(
            u.pod,
            Some(PodBinding {
                name: "dispatcher-7f9c".into(),
                uid: Some("uid-42".into())
            })
        );
        assert_eq!(
            u.extra.len(),
            2,
            "extra is kept for the SubjectAccessReview"
        );
        // A user that is not a ServiceAccount has no namespace, account or Pod, even
        // with a pod-name extra (only the API server's ServiceAccount tokens carry it).
        let mut alice = status(true, &[SYNC_AUDIENCE], "alice");
        alice.user.as_mut().unwrap().extra = st.user.as_ref().unwrap().extra.clone();
        let u = user_of(Some(&alice), SYNC_AUDIENCE).unwrap();
        assert_eq!((u.namespace, u.service_account, u.pod), (None, None, None));
        // Malformed ServiceAccount names are no ServiceAccount.
        for odd in [
            "system:serviceaccount:ns:",
            "system:serviceaccount::sa",
            "system:serviceaccount:ns",
            "system:serviceaccount:ns:sa:extra",
        ] {
            let u = user_of(Some(&status(true, &[SYNC_AUDIENCE], odd)), SYNC_AUDIENCE).unwrap();
            assert_eq!((u.namespace, u.service_account), (None, None), "{odd}");
        }
        // An empty pod-name value binds no Pod.
        let mut empty = status(true, &[SYNC_AUDIENCE], sa);
        empty.user.as_mut().unwrap().extra =
            Some([(POD_NAME_EXTRA.to_string(), vec![String::new()])].into());
        assert_eq!(user_of(Some(&empty), SYNC_AUDIENCE).unwrap().pod, None);
    }

    fn jwt(claims: serde_json::Value) -> String {
        use base64::Engine;
        let enc = |v: &[u8]| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(v);
        format!(
            "{}.{}.sig",
            enc(br#"{"alg":"RS256"}"#),
            enc(claims.to_string().as_bytes())
        )
    }

    #[test]
    fn a_jwt_that_says_it_cannot_pass_is_refused_without_a_review() {
        let now = 1_000_000;
        let cases = [
            (
                json!({"aud": ["agenthooks.io/sync"], "exp": now + 60}),
                false,
            ),
            (json!({"aud": "agenthooks.io/sync", "exp": now + 60}), false),
            (json!({"aud": ["x", "agenthooks.io/sync"]}), false),
            (json!({"exp": now + 60}), false),
            (json!({}), false),
            // another audience (a caller's dispatch token on the sync port), expired
            (json!({"aud": ["agenthooks.io"], "exp": now + 60}), true),
            (json!({"aud": "agenthooks.io", "exp": now + 60}), true),
            (json!({"aud": [], "exp": now + 60}), true),
            (json!({"aud": ["agenthooks.io/sync"], "exp": now}), true),
            (json!({"aud": ["agenthooks.io/sync"], "exp": now - 1}), true),
        ];
        for (claims, refused) in cases {
            assert_eq!(
                cannot_pass(&jwt(claims.clone()), "agenthooks.io/sync", now),
                refused,
                "{claims}"
            );
        }
        // Not a JWT at all: the API server decides.
        for token in ["opaque-token", "a.b", "a.b.c.d", "x.!!!.y", ""] {
            assert!(!cannot_pass(token, "agenthooks.io/sync", now), "{token}");
        }
    }

    #[test]
    fn a_token_is_trusted_no_longer_than_it_is_valid() {
        let ttl = Duration::from_secs(120);
        let now = 1_000_000;
        let exp = |s: i64| jwt(serde_json::json!({"exp": now + s, "sub": "x"}));
        assert_eq!(token_ttl(&exp(3600), ttl, now), ttl);
        assert_eq!(token_ttl(&exp(30), ttl, now), Duration::from_secs(30));
        assert_eq!(token_ttl(&exp(0), ttl, now), Duration::ZERO);
        assert_eq!(token_ttl(&exp(-5), ttl, now), Duration::ZERO);
        assert_eq!(
            token_ttl("opaque-token", ttl, now),
            ttl,
            "not a JWT: the cache's own ttl"
        );
        assert_eq!(
            token_ttl(&jwt(serde_json::json!({"sub": "x"})), ttl, now),
            ttl
        );
    }

    fn user() -> KubeUser {
        KubeUser {
            name: Arc::from("system:serviceaccount:p:r"),
            uid: Some("1".into()),
            groups: vec!["g".into()],
            extra: Default::default(),
            namespace: Some("p".into()),
            service_account: Some("r".into()),
            pod: None,
        }
    }

    #[test]
    fn access_keys_differ_by_every_part_of_the_identity() {
        let u = user();
        let ask = Access::dispatch("ns");
        let base = access_key(&u, &ask);
        let mut other = u.clone();
        other.groups.push("admins".into());
        assert_ne!(base, access_key(&other, &ask));
        let mut other = u.clone();
        other.uid = Some("2".into());
        assert_ne!(base, access_key(&other, &ask));
        let mut other = u.clone();
        other.uid = None;
        assert_ne!(base, access_key(&other, &ask));
        let mut other = u.clone();
        other.name = Arc::from("system:serviceaccount:p:s");
        assert_ne!(base, access_key(&other, &ask));
        let mut other = u.clone();
        other.extra.insert("scopes".into(), vec!["a".into()]);
        assert_ne!(base, access_key(&other, &ask));
        assert_eq!(base, access_key(&u.clone(), &Access::dispatch("ns")));
        // No uid and an empty one are different users.
        let (mut none, mut empty) = (u.clone(), u.clone());
        none.uid = None;
        empty.uid = Some(String::new());
        assert_ne!(access_key(&none, &ask), access_key(&empty, &ask));
    }

    #[test]
    fn access_keys_differ_by_every_attribute_of_the_question() {
        let u = user();
        let ask = Access::list_executions("tenant-a");
        let base = access_key(&u, &ask);
        let others = [
            Access { verb: "get", ..ask },
            Access { group: "", ..ask },
            Access {
                group: "other.io",
                ..ask
            },
            Access {
                resource: "agenthook",
                ..ask
            },
            Access {
                subresource: "dispatch",
                ..ask
            },
            Access {
                subresource: "",
                ..ask
            },
            Access {
                namespace: "tenant-b",
                ..ask
            },
            Access {
                namespace: "",
                ..ask
            },
            Access::create_test("tenant-a"),
            Access::dispatch("tenant-a"),
        ];
        assert_eq!(others[0], Access::get_execution("tenant-a"));
        assert_eq!(others[7], Access::list_executions(""));
        let mut keys = std::collections::HashSet::from([base]);
        for other in others {
            assert!(
                keys.insert(access_key(&u, &other)),
                "{other:?} has a key of its own"
            );
        }
        // Bytes moved from one attribute into the next make another question.
        let a = Access {
            resource: "agenthooks",
            subresource: "executions",
            ..ask
        };
        let b = Access {
            resource: "agenthooksexecutions",
            subresource: "",
            ..ask
        };
        let c = Access {
            resource: "agenthooks/executions",
            subresource: "",
            ..ask
        };
        assert_ne!(access_key(&u, &a), access_key(&u, &b));
        assert_ne!(access_key(&u, &a), access_key(&u, &c));
        let mut g = u.clone();
        g.groups = vec!["ab".into()];
        let mut h = u.clone();
        h.groups = vec!["a".into(), "b".into()];
        assert_ne!(access_key(&g, &ask), access_key(&h, &ask));
        assert_eq!(access_key(&u, &Access::list_executions("tenant-a")), base);
    }

    #[test]
    fn questions_read_as_rbac_rules_and_review_attributes() {
        assert_eq!(
            Access::list_executions("tenant-a").to_string(),
            "list agenthooks/executions in namespace tenant-a"
        );
        assert_eq!(
            Access::list_executions("").to_string(),
            "list agenthooks/executions cluster-wide"
        );
        assert_eq!(
            Access::create_test("t").to_string(),
            "create agenthooks/test in namespace t"
        );
        assert_eq!(
            Access::dispatch("t").to_string(),
            "create agenthooks/dispatch in namespace t"
        );
        let a = resource_attributes(&Access::get_execution("tenant-a"));
        assert_eq!(
            (
                a.verb.as_deref(),
                a.group.as_deref(),
                a.resource.as_deref(),
                a.subresource.as_deref(),
                a.namespace.as_deref()
            ),
            (
                Some("get"),
                Some("agenthooks.io"),
                Some("agenthooks"),
                Some("executions"),
                Some("tenant-a")
            )
        );
        let a = resource_attributes(&Access::list_executions(""));
        assert_eq!((a.verb.as_deref(), a.namespace), (Some("list"), None));
    }

    /// The cache answers exactly the question it was given: any other attribute goes to
    /// the API server (here none listens, so 503).
    #[tokio::test]
    async fn the_access_cache_answers_only_the_question_it_holds() {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let dead = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap();
        let config = kube::Config::new(format!("http://{dead}").parse().unwrap());
        let callers = Reviewer::new(
            kube::Client::try_from(config).unwrap(),
            DEFAULT_AUDIENCE,
            CacheConfig::default(),
        );
        let u = user();
        let held = Access::list_executions("tenant-a");
        callers.access.insert(
            access_key(&u, &held),
            true,
            Instant::now(),
            Duration::from_secs(60),
        );
        assert_eq!(callers.allowed(&u, &held).await, Ok(true));
        for other in [
            Access::get_execution("tenant-a"),
            Access::list_executions("tenant-b"),
            Access::list_executions(""),
            Access::create_test("tenant-a"),
            Access::dispatch("tenant-a"),
            Access::sync("tenant-a"),
        ] {
            let refused = callers.allowed(&u, &other).await.unwrap_err();
            assert!(
                matches!(&refused, ReviewError::Unavailable(m) if m.starts_with("the API server could not review access")),
                "{other}: {refused}"
            );
        }
        assert_eq!(callers.cached(), (0, 1), "refusals to ask are not cached");
    }
}
