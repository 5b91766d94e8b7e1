//! Callers in a cluster (CONTRACT §9.1–9.2): a projected ServiceAccount token, verified
//! by the API server (TokenReview, for the audience [`DEFAULT_AUDIENCE`]), and RBAC on
//! `agenthooks/dispatch` for the tenants of other namespaces (SubjectAccessReview) — the
//! kubelet's and kube-rbac-proxy's webhook authentication and authorization.
//!
//! Both answers are cached in bounded maps keyed by a sha256 (of the token; of the user
//! and namespace), never by the token itself:
//! - a verified token for [`CacheConfig::token_ttl`], and never past the token's own
//!   `exp`; a refused one for [`CacheConfig::denied_ttl`];
//! - an RBAC answer for [`CacheConfig::allowed_ttl`] (allowed) or
//!   [`CacheConfig::denied_ttl`] (denied): revoking a RoleBinding takes effect within
//!   `allowed_ttl`.
//!
//! The dispatcher's ServiceAccount needs `create` on `tokenreviews` and
//! `subjectaccessreviews` (the chart binds `system:auth-delegator`).

use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::authentication::v1::{TokenReview, TokenReviewSpec};
use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
};
use kube::api::{Api, PostParams};
use sha2::{Digest, Sha256};

use super::rule::Refusal;
use super::ttl_cache::TtlCache;

/// The audience a caller's projected token must be for.
pub const DEFAULT_AUDIENCE: &str = "agenthooks.io";
/// The API group, resource and subresource RBAC grants a tenant with
/// (`create` on `agenthooks/dispatch` in the tenant's namespace).
pub const DISPATCH_GROUP: &str = "agenthooks.io";
pub const DISPATCH_RESOURCE: &str = "agenthooks";
pub const DISPATCH_SUBRESOURCE: &str = "dispatch";
/// Prefix of a ServiceAccount's user name: `system:serviceaccount:NAMESPACE:NAME`.
const SERVICE_ACCOUNT_PREFIX: &str = "system:serviceaccount:";
/// Longest wait for the API server's answer; past it the request is answered 503.
pub const REVIEW_TIMEOUT: Duration = Duration::from_secs(5);

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
    pub uid: Option<String>,
    pub groups: Vec<String>,
    pub extra: std::collections::BTreeMap<String, Vec<String>>,
    /// The namespace of a ServiceAccount user.
    pub namespace: Option<String>,
}

/// TokenReview and SubjectAccessReview through the API server, cached.
pub struct KubeCallers {
    client: kube::Client,
    audience: String,
    cache: CacheConfig,
    tokens: TtlCache<[u8; 32], Option<Arc<KubeUser>>>,
    access: TtlCache<[u8; 32], bool>,
}

impl KubeCallers {
    /// Callers verified through `client` for tokens of `audience`.
    pub fn new(client: kube::Client, audience: impl Into<String>, cache: CacheConfig) -> Self {
        KubeCallers {
            client,
            audience: audience.into(),
            cache,
            tokens: TtlCache::new(cache.capacity),
            access: TtlCache::new(cache.capacity),
        }
    }

    /// Entries held by the token and RBAC caches (each at most
    /// [`CacheConfig::capacity`]).
    pub fn cached(&self) -> (usize, usize) {
        (self.tokens.len(), self.access.len())
    }

    /// The user of `token`.
    ///
    /// Errors: 401 when the API server does not authenticate it for our audience, 503
    /// when the API server could not be asked.
    pub async fn authenticate(&self, token: &str) -> Result<Arc<KubeUser>, Refusal> {
        let key: [u8; 32] = Sha256::digest(token.as_bytes()).into();
        let now = Instant::now();
        if let Some(known) = self.tokens.get(&key, now) {
            return known.ok_or_else(not_authenticated);
        }
        let review = TokenReview {
            spec: TokenReviewSpec {
                token: Some(token.to_string()),
                audiences: Some(vec![self.audience.clone()]),
            },
            ..Default::default()
        };
        let api: Api<TokenReview> = Api::all(self.client.clone());
        let answer =
            tokio::time::timeout(REVIEW_TIMEOUT, api.create(&PostParams::default(), &review))
                .await
                .map_err(|_| {
                    Refusal::unavailable("the API server did not review the token in time")
                })?
                .map_err(|e| {
                    tracing::warn!(error = %e, "TokenReview failed");
                    Refusal::unavailable(format!("the API server could not review the token: {e}"))
                })?;
        let user = user_of(answer.status.as_ref(), &self.audience).map(Arc::new);
        let ttl = match &user {
            Some(_) => token_ttl(token, self.cache.token_ttl, chrono::Utc::now().timestamp()),
            None => self.cache.denied_ttl,
        };
        self.tokens.insert(key, user.clone(), now, ttl);
        user.ok_or_else(not_authenticated)
    }

    /// Whether RBAC lets `user` `create` `agenthooks/dispatch` in `namespace`.
    ///
    /// Errors: 503 when the API server could not be asked.
    pub async fn may_dispatch(&self, user: &KubeUser, namespace: &str) -> Result<bool, Refusal> {
        let key = access_key(user, namespace);
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
                resource_attributes: Some(ResourceAttributes {
                    group: Some(DISPATCH_GROUP.into()),
                    resource: Some(DISPATCH_RESOURCE.into()),
                    subresource: Some(DISPATCH_SUBRESOURCE.into()),
                    verb: Some("create".into()),
                    namespace: Some(namespace.to_string()),
                    ..Default::default()
                }),
                ..Default::default()
            },
            ..Default::default()
        };
        let api: Api<SubjectAccessReview> = Api::all(self.client.clone());
        let answer =
            tokio::time::timeout(REVIEW_TIMEOUT, api.create(&PostParams::default(), &review))
                .await
                .map_err(|_| {
                    Refusal::unavailable("the API server did not answer the access review in time")
                })?
                .map_err(|e| {
                    tracing::warn!(error = %e, "SubjectAccessReview failed");
                    Refusal::unavailable(format!("the API server could not review access: {e}"))
                })?;
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

fn not_authenticated() -> Refusal {
    Refusal::unauthenticated(
        "the bearer token is not a valid ServiceAccount token for this dispatcher's audience",
    )
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
    let info = status.user.as_ref()?;
    let name = info.username.clone().filter(|n| !n.is_empty())?;
    let namespace = name
        .strip_prefix(SERVICE_ACCOUNT_PREFIX)
        .and_then(|rest| rest.split_once(':'))
        .map(|(ns, _)| ns.to_string())
        .filter(|ns| !ns.is_empty());
    Some(KubeUser {
        name: Arc::from(name.as_str()),
        uid: info.uid.clone(),
        groups: info.groups.clone().unwrap_or_default(),
        extra: info.extra.clone().unwrap_or_default(),
        namespace,
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
    use base64::Engine;
    let payload = token.split('.').nth(1)?;
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(payload.trim_end_matches('='))
        .ok()?;
    serde_json::from_slice::<serde_json::Value>(&bytes)
        .ok()?
        .get("exp")?
        .as_i64()
}

/// A fixed-size key for an RBAC answer: the user's whole identity and the namespace.
fn access_key(user: &KubeUser, namespace: &str) -> [u8; 32] {
    let mut h = Sha256::new();
    for part in [
        user.name.as_ref(),
        user.uid.as_deref().unwrap_or(""),
        namespace,
    ] {
        h.update(part.as_bytes());
        h.update([0]);
    }
    for g in &user.groups {
        h.update(g.as_bytes());
        h.update([1]);
    }
    for (k, vs) in &user.extra {
        h.update(k.as_bytes());
        h.update([2]);
        for v in vs {
            h.update(v.as_bytes());
            h.update([3]);
        }
    }
    h.finalize().into()
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::authentication::v1::{TokenReviewStatus, UserInfo};

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

    #[test]
    fn access_keys_differ_by_every_part_of_the_identity() {
        let u = KubeUser {
            name: Arc::from("system:serviceaccount:p:r"),
            uid: Some("1".into()),
            groups: vec!["g".into()],
            extra: Default::default(),
            namespace: Some("p".into()),
        };
        let base = access_key(&u, "ns");
        assert_ne!(base, access_key(&u, "ns2"));
        let mut other = u.clone();
        other.groups.push("admins".into());
        assert_ne!(base, access_key(&other, "ns"));
        let mut other = u.clone();
        other.uid = Some("2".into());
        assert_ne!(base, access_key(&other, "ns"));
        let mut other = u.clone();
        other.extra.insert("scopes".into(), vec!["a".into()]);
        assert_ne!(base, access_key(&other, "ns"));
        assert_eq!(base, access_key(&u.clone(), "ns"));
    }
}
