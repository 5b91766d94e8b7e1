//! What the Approvals pages show of a `HookApproval`, and the list's filters. Pure: the
//! state is the CRD's own rule ([`HookApprovalSpec::state_at`]), read at a given time.

use crate::console::catalog::{BadParam, bad};
use agenthooks_crds::approval::{
    ApprovalDecision, ApprovalRequestSpec, ApprovalState, HookApproval, HookApprovalSpec,
};

/// One approval as the console shows it.
#[derive(Debug, Clone, PartialEq)]
pub struct ApprovalSummary {
    pub namespace: String,
    /// The approval id (its name).
    pub id: String,
    /// What asked (`spec.request`).
    pub request: ApprovalRequestSpec,
    /// Where it stands when read.
    pub state: ApprovalState,
    pub decision: Option<ApprovalDecision>,
    pub decided_by: Option<String>,
    pub note: Option<String>,
    /// `spec.request.requestedAt` in Unix seconds (0 when not RFC 3339): the list's order.
    requested_unix: i64,
}

impl ApprovalSummary {
    /// From a HookApproval as the API server holds it, its state at `now_unix`.
    pub fn of_object(a: &HookApproval, now_unix: i64) -> ApprovalSummary {
        let spec: &HookApprovalSpec = &a.spec;
        ApprovalSummary {
            namespace: a.metadata.namespace.clone().unwrap_or_default(),
            id: a.metadata.name.clone().unwrap_or_default(),
            request: spec.request.clone(),
            state: spec.state_at(now_unix),
            decision: spec.decision,
            decided_by: spec.decided_by.clone(),
            note: spec.note.clone(),
            requested_unix: spec.requested_unix(),
        }
    }

    /// `namespace/id`, the tail of its page's path.
    pub fn key(&self) -> String {
        format!("{}/{}", self.namespace, self.id)
    }

    /// Whether a person may still answer it (pending, not expired).
    pub fn answerable(&self) -> bool {
        self.state == ApprovalState::Pending
    }
}

/// Sorts `list` newest request first (then by namespace and id, so equal times keep one
/// order).
pub fn newest_first(list: &mut [ApprovalSummary]) {
    list.sort_by(|a, b| {
        b.requested_unix
            .cmp(&a.requested_unix)
            .then_with(|| (&a.namespace, &a.id).cmp(&(&b.namespace, &b.id)))
    });
}

/// The list's filters: `state` (`pending`, the default, `approved`, `rejected`, `expired`
/// or `all`), `namespace` and `hook` (`namespace/name`; empty: any).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApprovalFilters {
    /// `None`: every state.
    pub state: Option<ApprovalState>,
    pub namespace: String,
    pub hook: String,
}

impl Default for ApprovalFilters {
    fn default() -> Self {
        ApprovalFilters {
            state: Some(ApprovalState::Pending),
            namespace: String::new(),
            hook: String::new(),
        }
    }
}

/// The `state` filter's values, in the order the form offers them.
pub const STATES: [(&str, Option<ApprovalState>); 5] = [
    ("pending", Some(ApprovalState::Pending)),
    ("approved", Some(ApprovalState::Approved)),
    ("rejected", Some(ApprovalState::Rejected)),
    ("expired", Some(ApprovalState::Expired)),
    ("all", None),
];

impl ApprovalFilters {
    /// From the query's pairs: only `state`, `namespace` and `hook`, each at most once.
    pub fn parse(pairs: &[(String, String)]) -> Result<ApprovalFilters, BadParam> {
        let mut f = ApprovalFilters::default();
        let mut seen: Vec<&str> = Vec::new();
        for (k, v) in pairs {
            if seen.contains(&k.as_str()) {
                return Err(bad(k, format!("{k}: given twice")));
            }
            seen.push(k);
            match k.as_str() {
                "state" => {
                    f.state = match STATES.iter().find(|(name, _)| name == v) {
                        Some((_, s)) => *s,
                        None if v.is_empty() => Some(ApprovalState::Pending),
                        None => {
                            let names: Vec<&str> = STATES.iter().map(|(n, _)| *n).collect();
                            return Err(bad(
                                k,
                                format!("state: {v:?} is not one of {}", names.join(", ")),
                            ));
                        }
                    }
                }
                "namespace" => f.namespace = v.clone(),
                "hook" => f.hook = v.clone(),
                _ => {
                    return Err(bad(
                        k,
                        format!("{k}: unknown parameter; this page takes state, namespace, hook"),
                    ));
                }
            }
        }
        Ok(f)
    }

    /// The `state` parameter's value of this filter.
    pub fn state_name(&self) -> &'static str {
        STATES
            .iter()
            .find(|(_, s)| *s == self.state)
            .map_or("all", |(n, _)| n)
    }

    /// Whether `a` passes.
    pub fn keep(&self, a: &ApprovalSummary) -> bool {
        self.state.is_none_or(|s| s == a.state)
            && (self.namespace.is_empty() || self.namespace == a.namespace)
            && (self.hook.is_empty() || self.hook == a.request.hook)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An approval of `ns` requested at second `at` of 2026-01-01 (UTC), answerable for
    /// 100 s, decided as given.
    fn approval(ns: &str, id: &str, at: u32, decision: Option<ApprovalDecision>) -> HookApproval {
        let mut a = HookApproval::new(
            id,
            HookApprovalSpec {
                request: ApprovalRequestSpec {
                    hook: format!("{ns}/deploys"),
                    hook_uid: "u".into(),
                    hook_generation: 1,
                    tenant: "acme".into(),
                    session_id: "s1".into(),
                    tool_name: "Deploy".into(),
                    input_hash: "ab".repeat(32),
                    reason: "deploys need a person".into(),
                    requested_at: format!("2026-01-01T00:00:{at:02}Z"),
                    expires_at: format!("2026-01-01T00:01:{at:02}Z"),
                },
                decided_by: decision.map(|_| "alice".into()),
                decision,
                note: None,
            },
        );
        a.metadata.namespace = Some(ns.into());
        a
    }

    /// 2026-01-01T00:00:30Z.
    const NOW: i64 = 1_767_225_630;

    #[test]
    fn the_state_is_the_crds_rule_at_the_time_read() {
        let pending = ApprovalSummary::of_object(&approval("a", "ap-1", 10, None), NOW);
        assert_eq!(
            (pending.state, pending.answerable()),
            (ApprovalState::Pending, true)
        );
        assert_eq!(pending.key(), "a/ap-1");
        // Expires at 00:01:10.
        let later = ApprovalSummary::of_object(&approval("a", "ap-1", 10, None), NOW + 40);
        assert_eq!(
            (later.state, later.answerable()),
            (ApprovalState::Expired, false)
        );
        let approved = ApprovalSummary::of_object(
            &approval("a", "ap-2", 10, Some(ApprovalDecision::Approve)),
            NOW,
        );
        assert_eq!(
            (
                approved.state,
                approved.decided_by.as_deref(),
                approved.answerable()
            ),
            (ApprovalState::Approved, Some("alice"), false)
        );
    }

    #[test]
    fn newest_request_first() {
        let mut list: Vec<ApprovalSummary> =
            [("a", "ap-old", 1), ("b", "ap-new", 20), ("a", "ap-mid", 9)]
                .iter()
                .map(|(ns, id, at)| ApprovalSummary::of_object(&approval(ns, id, *at, None), NOW))
                .collect();
        newest_first(&mut list);
        let ids: Vec<&str> = list.iter().map(|a| a.id.as_str()).collect();
        assert_eq!(ids, ["ap-new", "ap-mid", "ap-old"]);
    }

    #[test]
    fn filters_default_to_pending_and_name_bad_values() {
        let p = |q: &[(&str, &str)]| -> Vec<(String, String)> {
            q.iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect()
        };
        let f = ApprovalFilters::parse(&[]).unwrap();
        assert_eq!(
            (f.state, f.state_name()),
            (Some(ApprovalState::Pending), "pending")
        );
        let all = ApprovalFilters::parse(&p(&[("state", "all"), ("namespace", "b")])).unwrap();
        assert_eq!(
            (all.state, all.state_name(), all.namespace.as_str()),
            (None, "all", "b")
        );
        let list: Vec<ApprovalSummary> = [
            approval("a", "ap-p", 1, None),
            approval("a", "ap-r", 2, Some(ApprovalDecision::Reject)),
            approval("b", "ap-b", 3, None),
        ]
        .iter()
        .map(|a| ApprovalSummary::of_object(a, NOW))
        .collect();
        let kept = |f: &ApprovalFilters| -> Vec<String> {
            list.iter()
                .filter(|a| f.keep(a))
                .map(|a| a.id.clone())
                .collect()
        };
        assert_eq!(kept(&f), ["ap-p", "ap-b"]);
        assert_eq!(kept(&all), ["ap-b"]);
        let rejected = ApprovalFilters::parse(&p(&[("state", "rejected")])).unwrap();
        assert_eq!(kept(&rejected), ["ap-r"]);
        let hook = ApprovalFilters::parse(&p(&[("hook", "b/deploys")])).unwrap();
        assert_eq!(kept(&hook), ["ap-b"]);
        assert_eq!(
            ApprovalFilters::parse(&p(&[("state", "done")])),
            Err(BadParam {
                field: "state".into(),
                message: "state: \"done\" is not one of pending, approved, rejected, expired, all"
                    .into()
            })
        );
        assert_eq!(
            ApprovalFilters::parse(&p(&[("tenant", "x")]))
                .unwrap_err()
                .field,
            "tenant"
        );
        assert_eq!(
            ApprovalFilters::parse(&p(&[("state", "all"), ("state", "pending")]))
                .unwrap_err()
                .message,
            "state: given twice"
        );
    }
}
