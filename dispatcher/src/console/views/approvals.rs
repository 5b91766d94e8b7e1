//! The Approvals pages: the list with its filters, one approval with Approve and Reject,
//! and what standalone mode shows instead (approvals need a cluster).

use agenthooks_crds::approval::ApprovalState;
use maud::{Markup, html};

use super::layout::alert;
use crate::console::approvals::summary::{ApprovalFilters, ApprovalSummary, STATES};

/// Where approvals are documented, in the project's sources (the project names no
/// canonical web address to link).
pub const DOCS: &str = "docs/approvals.md";

/// A state's badge (`data-state` = the CamelCase word).
pub fn state_badge(s: ApprovalState) -> Markup {
    html! { span.badge data-state=(s.as_str()) { (s.as_str()) } }
}

/// What the list page shows.
pub struct ListView<'a> {
    /// The approvals that pass the filters, newest first.
    pub approvals: &'a [ApprovalSummary],
    /// Every namespace of a visible approval, for the namespace filter.
    pub namespaces: &'a [String],
    pub filters: &'a ApprovalFilters,
    /// Notes on what the list leaves out, each shown as it is.
    pub notes: &'a [String],
    /// A refused filter: (field, message).
    pub error: Option<(String, String)>,
}

/// The list's body.
pub fn list(v: &ListView<'_>) -> Markup {
    let f = v.filters;
    html! {
        @if let Some((field, message)) = &v.error { (alert(field, message)) }
        form.filters method="get" action="/ui/approvals" data-testid="approval-filters" {
            label { "State"
                select name="state" {
                    @for (name, _) in STATES { option value=(name) selected[name == f.state_name()] { (name) } }
                }
            }
            label { "Namespace"
                select name="namespace" {
                    option value="" { "all" }
                    @for ns in v.namespaces { option value=(ns) selected[*ns == f.namespace] { (ns) } }
                }
            }
            @if !f.hook.is_empty() {
                label { "Hook"
                    input type="text" name="hook" value=(f.hook);
                }
            }
            button type="submit" { "Filter" }
        }
        @for note in v.notes {
            p.note role="status" data-testid="denied" { (note) }
        }
        @if v.approvals.is_empty() {
            p data-testid="no-approvals" { "No approvals match." }
        } @else {
            div.scroll {
                table data-testid="approvals" {
                    caption { (v.approvals.len()) " approvals" }
                    thead { tr {
                        th scope="col" { "Approval" } th scope="col" { "Hook" } th scope="col" { "Namespace" }
                        th scope="col" { "Tenant" } th scope="col" { "Session" } th scope="col" { "Tool" }
                        th scope="col" { "Reason" } th scope="col" { "State" } th scope="col" { "Decided by" }
                        th scope="col" { "Expires (UTC)" }
                    } }
                    tbody {
                        @for a in v.approvals { (row(a)) }
                    }
                }
            }
        }
    }
}

fn row(a: &ApprovalSummary) -> Markup {
    let r = &a.request;
    html! {
        tr data-approval=(a.key()) data-state=(a.state.as_str()) {
            th scope="row" data-col="id" { a href={"/ui/approvals/" (a.key())} { (a.id) } }
            td data-col="hook" { (r.hook) }
            td data-col="namespace" { (a.namespace) }
            td data-col="tenant" { (r.tenant) }
            td data-col="session" { (r.session_id) }
            td data-col="tool" { (r.tool_name) }
            td data-col="reason" { (r.reason) }
            td data-col="state" { (state_badge(a.state)) }
            td data-col="decided-by" { (a.decided_by.as_deref().unwrap_or("—")) }
            td data-col="expires" { time datetime=(r.expires_at) { (r.expires_at) } }
        }
    }
}

/// What one approval's page shows.
pub struct DetailView<'a> {
    pub approval: &'a ApprovalSummary,
    /// The session's CSRF token, for the form.
    pub csrf: &'a str,
    /// The name the answer is given in (the signed-in person's).
    pub person: &'a str,
    /// The API server's refusal of an answer: (field, message).
    pub error: Option<(String, String)>,
    /// The note the person typed, kept when their answer was refused.
    pub note: &'a str,
}

/// One approval: its request, its decision, and Approve / Reject while it is pending.
pub fn detail(v: &DetailView<'_>) -> Markup {
    let a = v.approval;
    let r = &a.request;
    let dash = |s: &str| {
        if s.is_empty() {
            "—".to_owned()
        } else {
            s.to_owned()
        }
    };
    html! {
        p { a href="/ui/approvals" { "← All approvals" } }
        section.card aria-labelledby="request-h" {
            h2 id="request-h" { "Request" }
            dl data-testid="request" {
                dt { "Hook" } dd data-field="hook" { a href={"/ui/hooks/" (r.hook)} { (r.hook) } }
                dt { "Hook uid" } dd data-field="hookUid" { code { (r.hook_uid) } }
                dt { "Hook generation" } dd data-field="hookGeneration" { (r.hook_generation) }
                dt { "Tenant" } dd data-field="tenant" { (r.tenant) }
                dt { "Session" } dd data-field="sessionId" { (r.session_id) }
                dt { "Tool" } dd data-field="toolName" { (dash(&r.tool_name)) }
                dt { "Input hash" } dd data-field="inputHash" { code { (r.input_hash) } }
                dt { "Reason" } dd data-field="reason" { pre { (dash(&r.reason)) } }
                dt { "Requested (UTC)" } dd data-field="requestedAt" { time datetime=(r.requested_at) { (r.requested_at) } }
                dt { "Expires (UTC)" } dd data-field="expiresAt" { time datetime=(r.expires_at) { (r.expires_at) } }
            }
            p.hint { "The call's input is not kept in the approval, only its SHA-256 (as in the hook's audit rows): the same call of the same hook version finds this approval." }
        }
        section.card aria-labelledby="decision-h" {
            h2 id="decision-h" { "Decision" }
            dl data-testid="decision" {
                dt { "State" } dd data-testid="state" { (state_badge(a.state)) }
                @if let Some(by) = &a.decided_by {
                    dt { "Decided by" } dd data-testid="decided-by" { (by) }
                }
                @if let Some(note) = &a.note {
                    dt { "Note" } dd data-testid="note" { pre { (note) } }
                }
            }
            @if let Some((field, message)) = &v.error {
                p.error role="alert" id="decide-error" data-field=(field) data-testid="decide-error" { (message) }
            }
            @if a.answerable() {
                form.decide method="post" action={"/ui/approvals/" (a.key())} data-testid="decide" {
                    input type="hidden" name="csrf" value=(v.csrf);
                    label for="note" { "Note for the agent (optional)" }
                    textarea id="note" name="note" rows="3" maxlength="1024"
                        aria-describedby=[v.error.is_some().then_some("decide-error")] { (v.note) }
                    p.hint { "You answer as " strong data-testid="answer-as" { (v.person) } "; the API server admits it only if Kubernetes RBAC lets you approve approvals in " (a.namespace) "." }
                    div.actions {
                        button type="submit" name="decision" value="Approve" { "Approve" }
                        button.reject type="submit" name="decision" value="Reject" { "Reject" }
                    }
                }
            } @else if a.state == ApprovalState::Expired {
                p data-testid="closed" { "Expired: it can no longer be answered. The next such call asks anew." }
            }
        }
    }
}

/// Standalone mode: approvals need the operator, which creates them in a cluster.
pub fn standalone() -> Markup {
    html! {
        p.note role="status" data-testid="approvals-need-a-cluster" {
            "Approvals need a cluster: the operator creates a HookApproval when a hook with spec.approval answers ask, and people answer it as themselves through the Kubernetes API. This dispatcher runs standalone (no operator), so a hook with spec.approval refuses such calls (ApprovalUnavailable). "
            "How approvals work, and the RBAC a person needs: " code { (DOCS) } " in the agenthooks sources."
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use agenthooks_crds::approval::{
        ApprovalDecision, ApprovalRequestSpec, HookApproval, HookApprovalSpec,
    };

    fn summary(decision: Option<ApprovalDecision>, now: i64) -> ApprovalSummary {
        let mut a = HookApproval::new(
            "ap-1",
            HookApprovalSpec {
                request: ApprovalRequestSpec {
                    hook: "a/deploys".into(),
                    hook_uid: "u".into(),
                    hook_generation: 3,
                    tenant: "acme".into(),
                    session_id: "s1".into(),
                    tool_name: "Deploy".into(),
                    input_hash: "ab".repeat(32),
                    reason: "<script>alert(1)</script> & \"more\"".into(),
                    requested_at: "1970-01-01T00:00:00Z".into(),
                    expires_at: "1970-01-01T00:01:40Z".into(),
                },
                decided_by: decision.map(|_| "alice@example.com".into()),
                decision,
                note: decision.map(|_| "<b>fine</b>".into()),
            },
        );
        a.metadata.namespace = Some("a".into());
        ApprovalSummary::of_object(&a, now)
    }

    fn page(a: &ApprovalSummary, error: Option<(String, String)>) -> String {
        detail(&DetailView {
            approval: a,
            csrf: "c".repeat(64).as_str(),
            person: "bob",
            error,
            note: "",
        })
        .into_string()
    }

    #[test]
    fn a_pending_approval_has_both_buttons_and_its_text_escaped() {
        let p = page(&summary(None, 10), None);
        assert!(
            p.contains(r#"<button type="submit" name="decision" value="Approve">Approve</button>"#),
            "{p}"
        );
        assert!(p.contains(r#"value="Reject">Reject</button>"#), "{p}");
        assert!(
            p.contains(&format!(r#"name="csrf" value="{}""#, "c".repeat(64))),
            "{p}"
        );
        assert!(p.contains(r#"action="/ui/approvals/a/ap-1""#), "{p}");
        assert!(
            p.contains("&lt;script&gt;alert(1)&lt;/script&gt; &amp; &quot;more&quot;"),
            "{p}"
        );
        assert!(!p.contains("<script>alert"), "{p}");
        assert!(
            p.contains(r#"<strong data-testid="answer-as">bob</strong>"#),
            "{p}"
        );
    }

    #[test]
    fn a_decided_or_expired_approval_has_no_buttons() {
        let decided = page(&summary(Some(ApprovalDecision::Reject), 10), None);
        assert!(!decided.contains("name=\"decision\""), "{decided}");
        assert!(
            decided.contains(r#"<dd data-testid="decided-by">alice@example.com</dd>"#),
            "{decided}"
        );
        assert!(
            decided.contains("<pre>&lt;b&gt;fine&lt;/b&gt;</pre>"),
            "{decided}"
        );
        assert!(decided.contains(r#"data-state="Rejected""#), "{decided}");
        let expired = page(&summary(None, 100), None);
        assert!(!expired.contains("name=\"decision\""), "{expired}");
        assert!(expired.contains(r#"data-testid="closed""#), "{expired}");
    }

    #[test]
    fn a_refusal_is_an_alert_the_note_points_at() {
        let p = page(
            &summary(None, 10),
            Some((
                "decision".into(),
                "spec.decision: bob may not approve calls in a".into(),
            )),
        );
        assert!(
            p.contains(r#"<p class="error" role="alert" id="decide-error" data-field="decision" data-testid="decide-error">spec.decision: bob may not approve calls in a</p>"#),
            "{p}"
        );
        assert!(p.contains(r#"aria-describedby="decide-error""#), "{p}");
    }
}
