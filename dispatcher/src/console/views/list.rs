//! The hooks list with its filters, and the tenants' budgets (issue 14 point 3).

use agenthooks_crds::HookEvent;
use maud::{Markup, html};

use super::layout::{alert, badge};
use crate::console::catalog::{BudgetSummary, Filters, HookSummary, StateFilter};

/// What the list page shows.
pub struct ListView<'a> {
    pub hooks: &'a [HookSummary],
    /// Every namespace seen, for the namespace filter.
    pub namespaces: &'a [String],
    pub filters: &'a Filters,
    pub budgets: &'a [BudgetSummary],
    /// Notes on what the list leaves out (e.g. that the person may not list AgentHooks
    /// cluster-wide, so it shows the namespaces they may list), each shown as it is.
    pub notes: &'a [String],
    /// A refused filter: (field, message).
    pub error: Option<(String, String)>,
}

/// The list's body.
pub fn render(v: &ListView<'_>) -> Markup {
    let f = v.filters;
    let selected_ns = f.namespace.as_deref().unwrap_or("");
    let selected_event = f.event.map(HookEvent::as_str).unwrap_or("");
    let selected_handler = f.handler.map(|h| h.as_str()).unwrap_or("");
    let selected_state = f
        .state
        .and_then(|s| StateFilter::ALL.iter().find(|(_, x)| *x == s))
        .map(|(n, _)| *n)
        .unwrap_or("");
    html! {
        @if let Some((field, message)) = &v.error { (alert(field, message)) }
        form.filters method="get" action="/ui/hooks" data-testid="filters" {
            label { "Namespace"
                select name="namespace" {
                    option value="" { "all" }
                    @for ns in v.namespaces { option value=(ns) selected[ns == selected_ns] { (ns) } }
                }
            }
            label { "Event"
                select name="event" {
                    option value="" { "all" }
                    @for e in HookEvent::ALL { option value=(e.as_str()) selected[e.as_str() == selected_event] { (e.as_str()) } }
                }
            }
            label { "Handler"
                select name="handler" {
                    option value="" { "all" }
                    @for h in ["command", "http", "prompt"] { option value=(h) selected[h == selected_handler] { (h) } }
                }
            }
            label { "State"
                select name="state" {
                    option value="" { "all" }
                    @for (name, _) in StateFilter::ALL { option value=(name) selected[name == selected_state] { (name) } }
                }
            }
            button type="submit" { "Filter" }
        }
        @for note in v.notes {
            p.note role="status" data-testid="denied" { (note) }
        }
        @if v.hooks.is_empty() {
            p data-testid="no-hooks" { "No hooks match." }
        } @else {
            div.scroll {
                table data-testid="hooks" {
                    caption { (v.hooks.len()) " hooks" }
                    thead { tr {
                        th scope="col" { "Hook" } th scope="col" { "Event" } th scope="col" { "Scope" }
                        th scope="col" { "Handler" } th scope="col" { "Priority" } th scope="col" { "Accepted" }
                        th scope="col" { "Ready" } th scope="col" { "Circuit" } th scope="col" { "Executions" }
                    } }
                    tbody {
                        @for h in v.hooks { (row(h)) }
                    }
                }
            }
        }
        h2 { "Budgets" }
        @if v.budgets.is_empty() {
            p data-testid="no-budgets" { "No TenantHookBudgets visible." }
        } @else {
            div.scroll {
                table data-testid="budgets" {
                    thead { tr {
                        th scope="col" { "Budget" } th scope="col" { "Tenant" } th scope="col" { "Monthly tokens" }
                        th scope="col" { "Used" } th scope="col" { "Remaining" } th scope="col" { "State" }
                    } }
                    tbody {
                        @for b in v.budgets {
                            tr data-budget={(b.namespace) "/" (b.name)} {
                                th scope="row" { (b.namespace) "/" (b.name) }
                                td data-col="tenant" { (b.tenant) }
                                td { (b.monthly_tokens) }
                                td { (b.used) }
                                td { (b.remaining) }
                                td data-col="state" { span.badge data-state=(b.state) { (b.state) } }
                            }
                        }
                    }
                }
            }
        }
    }
}

fn row(h: &HookSummary) -> Markup {
    let key = h.key();
    html! {
        tr data-hook=(key) {
            th scope="row" data-col="hook" { a href={"/ui/hooks/" (key)} { (key) } }
            td data-col="event" { (h.event.as_str()) }
            td data-col="scope" { (scope(h)) }
            td data-col="handler" { (h.handler().map(|t| t.as_str()).unwrap_or("unknown")) }
            td data-col="priority" { (h.spec.as_ref().map(|s| s.priority.to_string()).unwrap_or_default()) }
            td data-col="accepted" { (badge(&h.accepted)) }
            td data-col="ready" { (badge(&h.ready)) }
            td data-col="circuit" {
                @if h.circuit.status == "True" {
                    span.badge data-status="False" title=(h.circuit.message) {
                        "Open"
                        @for o in &h.open_breakers { " · " (o.tenant) }
                        span.visually-hidden { ": " (h.circuit.message) }
                    }
                } @else {
                    span.badge data-status="True" title=(h.circuit.message) { "Closed" }
                }
            }
            td data-col="executions" {
                @match &h.executions {
                    Some(e) => {
                        span title="allow / block / error / timeout" {
                            (e.allow) " / " (e.block) " / " (e.error) " / " (e.timeout)
                        }
                    }
                    None => { "—" }
                }
            }
        }
    }
}

/// `global`, `tenant`, or `agent: a, b`.
pub fn scope(h: &HookSummary) -> String {
    use agenthooks_crds::agenthook::HookScope;
    match (h.scope, &h.spec) {
        (HookScope::Global, _) => "global".into(),
        (HookScope::Tenant, _) => "tenant".into(),
        (HookScope::Agent, Some(s)) => format!("agent: {}", s.agent_ids.join(", ")),
        (HookScope::Agent, None) => "agent".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_note_is_shown_as_it_is() {
        let note = "You may not list AgentHooks cluster-wide: showing the namespaces you may list."
            .to_owned();
        let page = render(&ListView {
            hooks: &[],
            namespaces: &[],
            filters: &Filters::default(),
            budgets: &[],
            notes: std::slice::from_ref(&note),
            error: None,
        })
        .into_string();
        assert!(
            page.contains(&format!(
                r#"<p class="note" role="status" data-testid="denied">{note}</p>"#
            )),
            "{page}"
        );
        assert!(!page.contains("hooks in:"), "{page}");
    }
}
