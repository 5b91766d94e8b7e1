//! Header values from Secrets: find the references, read the Secrets, seal the values
//! (DESIGN "Sync": encrypted header values; CONTRACT §5 http.1).
//!
//! Reading is the only I/O ([`fetch`]); finding and sealing are pure and tested.

use std::collections::{BTreeMap, BTreeSet};

use agenthooks_crds::AgentHookSpec;
use agenthooks_crds::sealed::SealKey;
use agenthooks_crds::snapshot::SealedHeader;
use k8s_openapi::api::core::v1::Secret;
use kube::Api;
use sha2::{Digest, Sha256};

use crate::index::{IndexedHook, Refusal};

/// Reason when a hook needs a seal key the operator was not given.
pub const SEAL_KEY_MISSING: &str = "SealKeyMissing";
/// Reason when a referenced Secret or key does not exist.
pub const SECRET_NOT_FOUND: &str = "SecretNotFound";
/// Reason when a Secret value cannot be a header value.
pub const INVALID_SECRET_VALUE: &str = "InvalidHeader";

/// One header whose value comes from `valueFrom.secretKeyRef`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SecretRef {
    /// Header name.
    pub header: String,
    /// Secret name (in the hook's namespace).
    pub secret: String,
    /// Key inside the Secret's `data`.
    pub key: String,
}

/// The Secret references of an `http` handler's headers, in header order.
pub fn secret_refs(spec: &AgentHookSpec) -> Vec<SecretRef> {
    spec.handler
        .http
        .iter()
        .flat_map(|h| h.headers.iter())
        .filter_map(|h| {
            h.value_from.as_ref().map(|v| SecretRef {
                header: h.name.clone(),
                secret: v.secret_key_ref.name.clone(),
                key: v.secret_key_ref.key.clone(),
            })
        })
        .collect()
}

/// Names of the Secrets `spec` reads.
pub fn secret_names(spec: &AgentHookSpec) -> BTreeSet<String> {
    secret_refs(spec).into_iter().map(|r| r.secret).collect()
}

/// `data` of each Secret read (`None`: the Secret does not exist).
pub type Fetched = BTreeMap<String, Option<BTreeMap<String, Vec<u8>>>>;

/// Reads the named Secrets (in the API the caller scoped to the hook's namespace).
///
/// Errors: any API failure other than 404 (403 included: that is an RBAC problem to fix,
/// retried with backoff, not a property of the hook).
pub async fn fetch(api: &Api<Secret>, names: &BTreeSet<String>) -> Result<Fetched, kube::Error> {
    let mut out = Fetched::new();
    for name in names {
        let secret = api.get_opt(name).await?;
        out.insert(
            name.clone(),
            secret.map(|s| {
                s.data
                    .unwrap_or_default()
                    .into_iter()
                    .map(|(k, v)| (k, v.0))
                    .collect()
            }),
        );
    }
    Ok(out)
}

fn field(r: &SecretRef) -> String {
    format!(
        "spec.handler.http.headers[name={}].valueFrom.secretKeyRef",
        r.header
    )
}

/// Checks the seal key is there when needed. Errors: a `SealKeyMissing` refusal naming
/// the first header that needs it.
pub fn require_key(refs: &[SecretRef], key: Option<&SealKey>) -> Result<(), Refusal> {
    match (refs.first(), key) {
        (Some(r), None) => Err(Refusal {
            reason: SEAL_KEY_MISSING.into(),
            message: format!(
                "{}: the operator runs without a seal key (--seal-key-file), so Secret header values cannot be sent to dispatchers; give the operator a seal key, or use a literal value",
                field(r)
            ),
        }),
        _ => Ok(()),
    }
}

/// Seals every referenced value. A value whose SHA-256 equals the one recorded in
/// `previous` (the same hook, same header position and name) keeps its sealed string, so
/// an unchanged Secret does not change the snapshot. One trailing line break (`\n` or
/// `\r\n`, as files often end) is dropped from each value.
///
/// Errors: `SecretNotFound` (Secret or key missing, naming namespace, Secret and key),
/// `InvalidHeader` (the value holds a line break or NUL), `SealKeyMissing`.
pub fn seal(
    refs: &[SecretRef],
    fetched: &Fetched,
    namespace: &str,
    key: Option<&SealKey>,
    previous: Option<&IndexedHook>,
) -> Result<(Vec<SealedHeader>, Vec<[u8; 32]>), Refusal> {
    require_key(refs, key)?;
    let mut sealed = Vec::with_capacity(refs.len());
    let mut digests = Vec::with_capacity(refs.len());
    for (i, r) in refs.iter().enumerate() {
        let data = fetched.get(&r.secret).and_then(Option::as_ref).ok_or_else(|| Refusal {
            reason: SECRET_NOT_FOUND.into(),
            message: format!(
                "{}: Secret {:?} not found in namespace {namespace:?}; create it or fix the name",
                field(r),
                r.secret
            ),
        })?;
        let raw = data.get(&r.key).ok_or_else(|| Refusal {
            reason: SECRET_NOT_FOUND.into(),
            message: format!(
                "{}: Secret {:?} in namespace {namespace:?} has no key {:?}",
                field(r),
                r.secret,
                r.key
            ),
        })?;
        let value = raw
            .strip_suffix(b"\r\n")
            .or_else(|| raw.strip_suffix(b"\n"))
            .unwrap_or(raw);
        if value.iter().any(|b| matches!(b, b'\r' | b'\n' | 0)) {
            return Err(Refusal {
                reason: INVALID_SECRET_VALUE.into(),
                message: format!(
                    "{}: the value of key {:?} of Secret {:?} holds a line break or NUL and cannot be a header value",
                    field(r),
                    r.key,
                    r.secret
                ),
            });
        }
        let digest: [u8; 32] = Sha256::digest(value).into();
        let reused = previous.and_then(|p| {
            let h = p.hook.sealed_headers.get(i)?;
            (h.name == r.header && p.secret_digests.get(i) == Some(&digest))
                .then(|| h.sealed.clone())
        });
        let key = key.expect("checked by require_key");
        sealed.push(SealedHeader {
            name: r.header.clone(),
            sealed: reused.unwrap_or_else(|| key.seal(value)),
        });
        digests.push(digest);
    }
    Ok((sealed, digests))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::index::tests::hook;

    fn spec_with_headers() -> AgentHookSpec {
        serde_json::from_value(serde_json::json!({
            "event": "pre_tool_use",
            "handler": {"type": "http", "http": {
                "url": "https://policy.example.com/hook",
                "headers": [
                    {"name": "X-Plain", "value": "v"},
                    {"name": "Authorization", "valueFrom": {"secretKeyRef": {"name": "policy-token", "key": "token"}}}
                ]
            }}
        }))
        .unwrap()
    }

    fn fetched(value: &[u8]) -> Fetched {
        let mut data = BTreeMap::new();
        data.insert("token".to_string(), value.to_vec());
        let mut f = Fetched::new();
        f.insert("policy-token".into(), Some(data));
        f
    }

    #[test]
    fn refs_come_from_value_from_only() {
        let refs = secret_refs(&spec_with_headers());
        assert_eq!(
            refs,
            [SecretRef {
                header: "Authorization".into(),
                secret: "policy-token".into(),
                key: "token".into()
            }]
        );
        assert!(secret_refs(&crate::index::tests::spec(0)).is_empty());
    }

    #[test]
    fn seals_and_opens_with_the_key() {
        let key = SealKey::generate();
        let refs = secret_refs(&spec_with_headers());
        let (sealed, digests) =
            seal(&refs, &fetched(b"Bearer s3cret\n"), "ns", Some(&key), None).unwrap();
        assert_eq!(sealed.len(), 1);
        assert_eq!(sealed[0].name, "Authorization");
        assert!(!sealed[0].sealed.contains("s3cret"));
        assert_eq!(
            key.open(&sealed[0].sealed).unwrap(),
            b"Bearer s3cret",
            "trailing newline dropped"
        );
        assert_eq!(digests.len(), 1);
    }

    #[test]
    fn an_unchanged_value_keeps_its_sealed_string() {
        let key = SealKey::generate();
        let refs = secret_refs(&spec_with_headers());
        let (sealed, digests) = seal(&refs, &fetched(b"tok"), "ns", Some(&key), None).unwrap();
        let mut prev = hook("ns", "h", "u", 1);
        prev.hook.sealed_headers = sealed.clone();
        prev.secret_digests = digests;
        let (again, _) = seal(&refs, &fetched(b"tok"), "ns", Some(&key), Some(&prev)).unwrap();
        assert_eq!(
            again, sealed,
            "same value: same sealed string, no snapshot change"
        );
        let (rotated, _) = seal(&refs, &fetched(b"new"), "ns", Some(&key), Some(&prev)).unwrap();
        assert_ne!(rotated, sealed);
    }

    #[test]
    fn missing_secret_key_or_seal_key_are_refusals() {
        let key = SealKey::generate();
        let refs = secret_refs(&spec_with_headers());
        let mut none = Fetched::new();
        none.insert("policy-token".into(), None);
        let r = seal(&refs, &none, "tenant-a", Some(&key), None).unwrap_err();
        assert_eq!(r.reason, "SecretNotFound");
        assert!(r.message.contains("headers[name=Authorization]"));
        assert!(r.message.contains("policy-token"));
        let mut no_key = Fetched::new();
        no_key.insert("policy-token".into(), Some(BTreeMap::new()));
        let r = seal(&refs, &no_key, "tenant-a", Some(&key), None).unwrap_err();
        assert_eq!(r.reason, "SecretNotFound");
        assert!(r.message.contains("no key \"token\""));
        let r = seal(&refs, &fetched(b"x"), "tenant-a", None, None).unwrap_err();
        assert_eq!(r.reason, "SealKeyMissing");
        assert!(r.message.contains("--seal-key-file"));
        let r = seal(&refs, &fetched(b"a\nb"), "tenant-a", Some(&key), None).unwrap_err();
        assert_eq!(r.reason, "InvalidHeader");
    }
}
