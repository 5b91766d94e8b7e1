//! Header values from Secrets: find the references, read the Secrets, seal the values
//! (DESIGN "Sync": encrypted header values; CONTRACT §5 http.1).
//!
//! Only a Secret its owner opted in (label `agenthooks.io/hook-secret: "true"`, CONTRACT
//! §9.6, [`agenthooks_crds::rules::hook_secret`]) is read for its values; a hook naming
//! another one is refused with `SecretNotOptedIn`.
//!
//! Reading is the only I/O ([`fetch`]); finding, classifying and sealing are pure and tested.

use std::collections::{BTreeMap, BTreeSet};

use agenthooks_crds::AgentHookSpec;
use agenthooks_crds::rules::hook_secret::{
    self, OPTED_IN_SELECTOR, REASON_NOT_OPTED_IN, SecretAccess,
};
use agenthooks_crds::sealed::SealKey;
use agenthooks_crds::snapshot::SealedHeader;
use k8s_openapi::api::core::v1::Secret;
use kube::Api;
use kube::api::ListParams;
use sha2::{Digest, Sha256};

use crate::index::{IndexedHook, Refusal};

/// Reason when a hook needs a seal key the operator was not given.
pub const SEAL_KEY_MISSING: &str = "SealKeyMissing";
/// Reason when a referenced Secret or key does not exist.
pub const SECRET_NOT_FOUND: &str = "SecretNotFound";
/// Reason when a referenced Secret exists but its owner did not opt in (CONTRACT §9.6).
pub const SECRET_NOT_OPTED_IN: &str = REASON_NOT_OPTED_IN;
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

/// What was read of one Secret a hook names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FetchedSecret {
    /// No Secret of that name in the hook's namespace.
    Missing,
    /// The Secret exists without its owner's opt-in; its data was not read.
    NotOptedIn,
    /// The Secret is opted in: its `data`.
    Data(BTreeMap<String, Vec<u8>>),
}

/// What was read of each Secret, by name.
pub type Fetched = BTreeMap<String, FetchedSecret>;

/// What the rule ([`hook_secret::access`]) makes of `secret` as read (`None`: not found):
/// its data only when it is opted in.
pub fn classify(secret: Option<Secret>) -> FetchedSecret {
    let labels = secret.as_ref().and_then(|s| s.metadata.labels.as_ref());
    match hook_secret::access(secret.is_some(), labels) {
        SecretAccess::Missing => FetchedSecret::Missing,
        SecretAccess::NotOptedIn => FetchedSecret::NotOptedIn,
        SecretAccess::OptedIn => FetchedSecret::Data(
            secret
                .and_then(|s| s.data)
                .unwrap_or_default()
                .into_iter()
                .map(|(k, v)| (k, v.0))
                .collect(),
        ),
    }
}

/// Reads the named Secrets (in the API the caller scoped to the hook's namespace).
///
/// Each is listed by name under the label selector of the opted-in Secrets, so the API
/// server sends the data of an opted-in Secret only. When that finds nothing, its metadata
/// alone tells a Secret that is not opted in from one that does not exist (a Secret
/// labelled between the two reads is read once more, in full, and classified by the labels
/// of that read).
///
/// Errors: any API failure other than 404 (403 included: that is an RBAC problem to fix,
/// retried with backoff, not a property of the hook).
pub async fn fetch(api: &Api<Secret>, names: &BTreeSet<String>) -> Result<Fetched, kube::Error> {
    let mut out = Fetched::new();
    for name in names {
        let params = ListParams::default()
            .labels(OPTED_IN_SELECTOR)
            .fields(&format!("metadata.name={name}"));
        let listed = api
            .list(&params)
            .await?
            .items
            .into_iter()
            .find(|s| s.metadata.name.as_deref() == Some(name.as_str()));
        let fetched = match listed {
            Some(secret) => classify(Some(secret)),
            None => match api.get_metadata_opt(name).await? {
                None => FetchedSecret::Missing,
                Some(meta) if !hook_secret::opted_in(meta.metadata.labels.as_ref()) => {
                    FetchedSecret::NotOptedIn
                }
                Some(_) => classify(api.get_opt(name).await?),
            },
        };
        out.insert(name.clone(), fetched);
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
/// `SecretNotOptedIn` (the Secret lacks its owner's opt-in label; naming namespace/name and
/// the label), `InvalidHeader` (the value holds a line break or NUL), `SealKeyMissing`.
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
        let data = match fetched.get(&r.secret) {
            Some(FetchedSecret::Data(data)) => data,
            Some(FetchedSecret::NotOptedIn) => {
                return Err(Refusal {
                    reason: SECRET_NOT_OPTED_IN.into(),
                    message: format!(
                        "{} (kubectl -n {namespace} label secret {} {}={})",
                        hook_secret::not_opted_in_message(&field(r), namespace, &r.secret),
                        r.secret,
                        hook_secret::HOOK_SECRET_LABEL,
                        hook_secret::OPTED_IN_VALUE,
                    ),
                });
            }
            Some(FetchedSecret::Missing) | None => {
                return Err(Refusal {
                    reason: SECRET_NOT_FOUND.into(),
                    message: format!(
                        "{}: Secret {:?} not found in namespace {namespace:?}; create it (labelled {}: \"{}\", its owner's opt-in) or fix the name",
                        field(r),
                        r.secret,
                        hook_secret::HOOK_SECRET_LABEL,
                        hook_secret::OPTED_IN_VALUE,
                    ),
                });
            }
        };
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
        f.insert("policy-token".into(), FetchedSecret::Data(data));
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
        none.insert("policy-token".into(), FetchedSecret::Missing);
        let r = seal(&refs, &none, "tenant-a", Some(&key), None).unwrap_err();
        assert_eq!(r.reason, "SecretNotFound");
        assert!(r.message.contains("headers[name=Authorization]"));
        assert!(r.message.contains("policy-token"));
        let mut no_key = Fetched::new();
        no_key.insert("policy-token".into(), FetchedSecret::Data(BTreeMap::new()));
        let r = seal(&refs, &no_key, "tenant-a", Some(&key), None).unwrap_err();
        assert_eq!(r.reason, "SecretNotFound");
        assert!(r.message.contains("no key \"token\""));
        let r = seal(&refs, &fetched(b"x"), "tenant-a", None, None).unwrap_err();
        assert_eq!(r.reason, "SealKeyMissing");
        assert!(r.message.contains("--seal-key-file"));
        let r = seal(&refs, &fetched(b"a\nb"), "tenant-a", Some(&key), None).unwrap_err();
        assert_eq!(r.reason, "InvalidHeader");
    }

    fn secret(labels: &[(&str, &str)], data: &[(&str, &[u8])]) -> Secret {
        let mut s = Secret::default();
        s.metadata.name = Some("policy-token".into());
        s.metadata.labels = Some(
            labels
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        );
        s.data = Some(
            data.iter()
                .map(|(k, v)| (k.to_string(), k8s_openapi::ByteString(v.to_vec())))
                .collect(),
        );
        s
    }

    #[test]
    fn only_an_opted_in_secret_yields_its_data() {
        let label = hook_secret::HOOK_SECRET_LABEL;
        let data: &[(&str, &[u8])] = &[("token", b"Bearer x")];
        let want = FetchedSecret::Data(BTreeMap::from([(
            "token".to_string(),
            b"Bearer x".to_vec(),
        )]));
        // (what the API returned, what the hook may use)
        let cases = [
            (None, FetchedSecret::Missing),
            (Some(secret(&[], data)), FetchedSecret::NotOptedIn),
            (
                Some(secret(&[(label, "false")], data)),
                FetchedSecret::NotOptedIn,
            ),
            (
                Some(secret(&[(label, "True")], data)),
                FetchedSecret::NotOptedIn,
            ),
            (Some(secret(&[(label, "true")], data)), want),
            (
                Some(secret(&[(label, "true")], &[])),
                FetchedSecret::Data(BTreeMap::new()),
            ),
        ];
        for (read, expected) in cases {
            let what = format!("{:?}", read.as_ref().map(|s| &s.metadata.labels));
            assert_eq!(classify(read), expected, "{what}");
        }
    }

    #[test]
    fn a_secret_not_opted_in_refuses_the_hook_naming_it_and_the_label() {
        let key = SealKey::generate();
        let refs = secret_refs(&spec_with_headers());
        let mut f = Fetched::new();
        f.insert("policy-token".into(), FetchedSecret::NotOptedIn);
        let r = seal(&refs, &f, "tenant-a", Some(&key), None).unwrap_err();
        assert_eq!(r.reason, "SecretNotOptedIn");
        assert_eq!(
            r.message,
            "spec.handler.http.headers[name=Authorization].valueFrom.secretKeyRef: Secret tenant-a/policy-token is not opted in to hook use; hooks may read a Secret only if its owner labels it agenthooks.io/hook-secret: \"true\" (kubectl -n tenant-a label secret policy-token agenthooks.io/hook-secret=true)"
        );
        // A missing Secret says how to create it so that it works.
        f.insert("policy-token".into(), FetchedSecret::Missing);
        let r = seal(&refs, &f, "tenant-a", Some(&key), None).unwrap_err();
        assert_eq!(r.reason, "SecretNotFound");
        assert!(
            r.message
                .contains("labelled agenthooks.io/hook-secret: \"true\""),
            "{}",
            r.message
        );
    }
}
