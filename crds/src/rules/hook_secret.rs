//! Which Secrets a hook may take header values from (CONTRACT §9.6), shared by the operator
//! (reconcile) and the dispatcher's standalone load. Pure: labels in, verdict out; reading
//! Secrets stays with the callers.
//!
//! A header's `valueFrom.secretKeyRef` resolves only a Secret whose owner opted in with the
//! label [`HOOK_SECRET_LABEL`]`: "true"`. Permission to create an AgentHook in a namespace
//! is not permission to read that namespace's Secrets: without the opt-in, anyone who may
//! write a hook could have any Secret of the namespace (a database password, a cloud key)
//! sent to a URL of their choosing.
//!
//! Only the exact value `"true"` opts in, so that the rule and the operator's watch (label
//! selector [`OPTED_IN_SELECTOR`], an exact match) always agree on the same Secrets.

use std::collections::BTreeMap;

pub use crate::HOOK_SECRET_LABEL;

/// The value of [`HOOK_SECRET_LABEL`] that opts a Secret in.
pub const OPTED_IN_VALUE: &str = "true";

/// Label selector of the opted-in Secrets (what the operator watches and lists).
pub const OPTED_IN_SELECTOR: &str = "agenthooks.io/hook-secret=true";

/// `Accepted=False` reason of a hook whose header names a Secret that is not opted in.
pub const REASON_NOT_OPTED_IN: &str = "SecretNotOptedIn";

/// What a hook's header may do with one Secret it names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SecretAccess {
    /// No such Secret in the hook's namespace.
    Missing,
    /// The Secret exists, but its owner did not opt in: its values are never read.
    NotOptedIn,
    /// The Secret exists and is opted in: its values may be sealed into the snapshot.
    OptedIn,
}

/// Whether a Secret with these `labels` is opted in: [`HOOK_SECRET_LABEL`] is exactly
/// [`OPTED_IN_VALUE`].
pub fn opted_in(labels: Option<&BTreeMap<String, String>>) -> bool {
    labels
        .and_then(|l| l.get(HOOK_SECRET_LABEL))
        .is_some_and(|v| v == OPTED_IN_VALUE)
}

/// The access to a Secret that exists with `labels` (`exists == false`: not found).
pub fn access(exists: bool, labels: Option<&BTreeMap<String, String>>) -> SecretAccess {
    match (exists, opted_in(labels)) {
        (false, _) => SecretAccess::Missing,
        (true, false) => SecretAccess::NotOptedIn,
        (true, true) => SecretAccess::OptedIn,
    }
}

/// The refusal's message for Secret `namespace/name` named at `field`: which Secret, and
/// the label its owner adds to allow it. Callers append how to add it where they run.
pub fn not_opted_in_message(field: &str, namespace: &str, name: &str) -> String {
    format!(
        "{field}: Secret {namespace}/{name} is not opted in to hook use; hooks may read a Secret only if its owner labels it {HOOK_SECRET_LABEL}: \"{OPTED_IN_VALUE}\""
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn only_the_exact_label_value_true_opts_in() {
        /// A Secret's labels (`None`: it has no `labels` at all).
        type Labels<'a> = Option<&'a [(&'a str, &'a str)]>;
        // (the Secret's labels, opted in)
        let cases: &[(Labels, bool)] = &[
            (None, false),
            (Some(&[]), false),
            (Some(&[(HOOK_SECRET_LABEL, "true")]), true),
            (Some(&[("app", "db"), (HOOK_SECRET_LABEL, "true")]), true),
            (Some(&[(HOOK_SECRET_LABEL, "True")]), false),
            (Some(&[(HOOK_SECRET_LABEL, "TRUE")]), false),
            (Some(&[(HOOK_SECRET_LABEL, "false")]), false),
            (Some(&[(HOOK_SECRET_LABEL, "")]), false),
            (Some(&[(HOOK_SECRET_LABEL, "yes")]), false),
            (Some(&[(HOOK_SECRET_LABEL, "1")]), false),
            (Some(&[(HOOK_SECRET_LABEL, " true")]), false),
            (Some(&[("hook-secret", "true")]), false),
            (Some(&[("example.com/hook-secret", "true")]), false),
            (Some(&[("agenthooks.io/tenant", "true")]), false),
        ];
        for (pairs, want) in cases {
            let l = pairs.map(labels);
            assert_eq!(opted_in(l.as_ref()), *want, "{pairs:?}");
            assert_eq!(
                access(true, l.as_ref()),
                if *want {
                    SecretAccess::OptedIn
                } else {
                    SecretAccess::NotOptedIn
                },
                "{pairs:?}"
            );
            assert_eq!(
                access(false, l.as_ref()),
                SecretAccess::Missing,
                "{pairs:?}: a Secret that does not exist is missing, whatever was asked"
            );
        }
    }

    #[test]
    fn the_selector_is_the_rule() {
        assert_eq!(
            OPTED_IN_SELECTOR,
            format!("{HOOK_SECRET_LABEL}={OPTED_IN_VALUE}")
        );
        assert_eq!(HOOK_SECRET_LABEL, "agenthooks.io/hook-secret");
    }

    #[test]
    fn the_message_names_the_secret_and_the_label() {
        let m = not_opted_in_message(
            "spec.handler.http.headers[name=Authorization].valueFrom.secretKeyRef",
            "tenant-acme",
            "policy-token",
        );
        assert_eq!(
            m,
            "spec.handler.http.headers[name=Authorization].valueFrom.secretKeyRef: Secret tenant-acme/policy-token is not opted in to hook use; hooks may read a Secret only if its owner labels it agenthooks.io/hook-secret: \"true\""
        );
    }
}
