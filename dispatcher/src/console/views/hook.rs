//! One hook's pages: Overview (issue 14 point 7), Test (point 5), History (point 6), and
//! one execution's detail.

use maud::{Markup, html};
use serde_json::Value;

use super::layout::{alert, badge, decision};
use crate::console::catalog::HookSummary;
use crate::console::chart::{self, Bucket};
use crate::console::diff::{self, Cell};

/// The hook's tabs; `current` is `overview`, `test` or `history`.
pub fn tabs(key: &str, current: &str) -> Markup {
    html! {
        nav.tabs aria-label="Hook" {
            @for (id, label, path) in [("overview", "Overview", ""), ("test", "Test", "/test"), ("history", "History", "/history")] {
                a href={"/ui/hooks/" (key) (path)} aria-current=[(id == current).then_some("page")] { (label) }
            }
        }
    }
}

/// The summary card and the decisions chart. `last` is the newest audit row, if any.
pub fn overview(h: &HookSummary, buckets: &[Bucket], last: Option<&Value>) -> Markup {
    let spec = h.spec.as_ref();
    let text = |v: Option<String>| v.filter(|s| !s.is_empty()).unwrap_or_else(|| "—".into());
    html! {
        (tabs(&h.key(), "overview"))
        section.card aria-labelledby="summary-h" {
            h2 id="summary-h" { "Summary" }
            @if h.spec.is_some() { p { a href={"/ui/hooks/" (h.key()) "/edit"} data-testid="edit" { "Edit this hook" } } }
            dl data-testid="overview" {
                dt { "Event" } dd { (h.event.as_str()) }
                dt { "Handler" } dd { (h.handler().map(|t| t.as_str()).unwrap_or("unknown")) }
                dt { "Scope" } dd { (super::list::scope(h)) }
                dt { "Priority" } dd { (text(spec.map(|s| s.priority.to_string()))) }
                dt { "Enabled" } dd { (if h.enabled { "yes" } else { "no" }) }
                dt { "Matcher" } dd { code { (text(spec.map(|s| s.matcher.clone()))) } }
                dt { "Tool kinds" } dd { (text(spec.map(|s| s.tool_kinds.iter().map(|k| k.as_str()).collect::<Vec<_>>().join(", ")))) }
                dt { "ifExpr" } dd { code { (text(spec.map(|s| s.if_expr.clone()))) } }
                dt { "Timeout" } dd { (spec.map(|s| format!("{} ms", s.effective_timeout_ms())).unwrap_or_else(|| "—".into())) }
                dt { "On timeout" } dd { (spec.map(|s| s.effective_on_timeout().as_str()).unwrap_or("—")) }
                @if let Some(policy) = spec.and_then(|s| s.approval.as_ref()) {
                    dt { "Approval" } dd data-testid="approval" {
                        "An ask waits for a person (answerable for " (policy.ttl_seconds()) " s): "
                        a href={"/ui/approvals?state=pending&namespace=" (h.namespace) "&hook=" (h.key())} { "its pending approvals" }
                    }
                }
                dt { "Accepted" } dd { (badge(&h.accepted)) " " (h.accepted.message) }
                dt { "Ready" } dd { (badge(&h.ready)) " " (h.ready.message) }
                dt { "Breaker" } dd data-testid="breaker" {
                    @if h.open_breakers.is_empty() {
                        "Closed"
                    } @else {
                        ul {
                            @for o in &h.open_breakers {
                                li { "Open for tenant " strong { (o.tenant) } " since " time datetime=(o.since) { (o.since) }
                                    @if let Some(r) = &o.reason { ": " (r) } }
                            }
                        }
                        p { (h.circuit.message) }
                    }
                }
                dt { "Last execution" } dd data-testid="last-execution" {
                    @match last {
                        Some(row) => {
                            (decision(row["decision"].as_str().unwrap_or(""))) " "
                            a href={"/ui/executions/" (row["id"])} { time datetime=(row["createdAt"].as_str().unwrap_or("")) { (row["createdAt"].as_str().unwrap_or("")) } }
                        }
                        None => { "none recorded" }
                    }
                }
            }
        }
        section.card aria-labelledby="chart-h" {
            h2 id="chart-h" { "Decisions, last 24 hours" }
            (chart::render(buckets, "decisions"))
        }
    }
}

/// The test form, and the report of a run when there is one.
pub fn test(
    key: &str,
    csrf: &str,
    event_text: &str,
    force: bool,
    result: Option<&TestResult>,
) -> Markup {
    html! {
        (tabs(key, "test"))
        p { "Runs the hook once on the sample event as a dry run: nothing is recorded (no audit row, breaker, counter or budget)." }
        form.test method="post" action={"/ui/hooks/" (key) "/test"} {
            input type="hidden" name="csrf" value=(csrf);
            label for="event" { "Sample event (JSON)" }
            @let invalid = matches!(result, Some(TestResult::Refused { field, .. }) if field.starts_with("event"));
            textarea id="event" name="event" rows="12" spellcheck="false" aria-invalid=[invalid.then_some("true")] aria-describedby=[invalid.then_some("test-error")] { (event_text) }
            div.check {
                input type="checkbox" id="force" name="force" value="true" checked[force];
                label for="force" { "Run the handler even if the event, scope, matcher or ifExpr would skip the hook" }
            }
            button type="submit" { "Run test" }
        }
        @match result {
            Some(TestResult::Refused { field, message }) => {
                p.error role="alert" id="test-error" data-field=(field) { (message) }
            }
            Some(TestResult::Report { report, input }) => { (report_view(report, input)) }
            None => {}
        }
    }
}

/// What a test run gave.
pub enum TestResult {
    /// The API's report (`POST /v1/test`), and the sample's `tool_input`.
    Report { report: Value, input: Value },
    /// A refusal: the field and the message.
    Refused { field: String, message: String },
}

fn report_view(r: &Value, input: &Value) -> Markup {
    let s = |k: &str| r.get(k).and_then(Value::as_str).map(str::to_owned);
    let ran = r["ran"].as_bool().unwrap_or(false);
    let d = s("decision").unwrap_or_else(|| "skipped".into());
    let opt = |v: Option<String>| v.unwrap_or_else(|| "—".into());
    html! {
        section.card.result data-testid="test-result" aria-live="polite" aria-labelledby="result-h" {
            h2 id="result-h" { "Result" }
            dl {
                dt { "Hook decision" } dd data-testid="decision" { (decision(&d)) }
                dt { "Chain answer" } dd data-testid="verdict" { (decision(r["verdict"].as_str().unwrap_or(""))) }
                dt { "Duration" } dd data-testid="duration" { (format!("{:.1} ms", r["durationMs"].as_f64().unwrap_or(0.0))) }
                dt { "Reason" } dd data-testid="reason" { (opt(s("reason").or_else(|| s("skipped")))) }
                dt { "Matcher" } dd data-testid="matcher" { (if r["matcherMatched"].as_bool().unwrap_or(false) { "matches" } else { "does not match" }) }
                dt { "ifExpr" } dd data-testid="cel" { (match r["celMatched"].as_bool() { Some(true) => "true", Some(false) => "false", None => "— (none, or it failed)" }) }
                dt { "Handler ran" } dd { (if ran { "yes" } else { "no" }) }
                dt { "Status code" } dd data-testid="status-code" { (r["statusCode"].as_u64().map_or("— (not an http hook, or no answer)".to_owned(), |c| c.to_string())) }
                @if r["breakerOpen"].as_bool().unwrap_or(false) { dt { "Breaker" } dd { "open for this tenant: a real event would get CircuitOpen" } }
                @if let Some(c) = s("additionalContext") { dt { "Additional context" } dd { (c) } }
                @if let Some(e) = s("error") { dt { "Error" } dd data-testid="error" { (e) @if let Some(k) = s("errorKind") { " (" (k) ")" } } }
                @if r["mutationDenied"].as_bool().unwrap_or(false) { dt { "Rewrite" } dd { "dropped by a real chain: only master-namespace hooks may rewrite (CONTRACT §4.5)" } }
            }
            h3 { "stdout" } pre data-testid="stdout" { (s("stdout").unwrap_or_else(|| "— (not a command hook, or it did not run)".into())) }
            h3 { "stderr" } pre data-testid="stderr" { (s("stderr").unwrap_or_else(|| "— (not a command hook, or it did not run)".into())) }
            @if let Some(updated) = r.get("updatedInput").filter(|v| !v.is_null()) {
                h3 { "updatedInput against the input" }
                (diff_view(input, updated))
            }
        }
    }
}

fn diff_view(before: &Value, after: &Value) -> Markup {
    let rows = diff::side_by_side(before, after);
    let cell = |c: &Cell| match c {
        Cell::Same(l) => html! { span.same { (l) "\n" } },
        Cell::Removed(l) => html! { span.del { del { (l) } "\n" } },
        Cell::Added(l) => html! { span.add { ins { (l) } "\n" } },
        Cell::Empty => html! { span.empty { "\n" } },
    };
    html! {
        div.diff data-testid="diff" {
            figure { figcaption { "tool_input" } pre data-testid="diff-before" { @for r in &rows { (cell(&r.before)) } } }
            figure { figcaption { "updatedInput" } pre data-testid="diff-after" { @for r in &rows { (cell(&r.after)) } } }
        }
    }
}

/// The history tab: filters, one page of rows, the link to the next page.
pub struct HistoryView<'a> {
    pub key: &'a str,
    pub decision: &'a str,
    pub since: &'a str,
    pub rows: &'a [Value],
    /// The query of the next page's link, when there is one.
    pub next: Option<String>,
    pub error: Option<(String, String)>,
}

/// The history tab's body.
pub fn history(v: &HistoryView<'_>) -> Markup {
    html! {
        (tabs(v.key, "history"))
        form.filters method="get" action={"/ui/hooks/" (v.key) "/history"} {
            label { "Decision"
                select name="decision" {
                    option value="" { "all" }
                    @for d in ["allow", "block", "error", "timeout"] { option value=(d) selected[d == v.decision] { (d) } }
                }
            }
            label { "Since (UTC)"
                input type="datetime-local" name="since" value=(v.since);
            }
            button type="submit" { "Filter" }
        }
        @if let Some((field, message)) = &v.error { (alert(field, message)) }
        @if v.rows.is_empty() {
            p data-testid="no-executions" { "No executions recorded." }
        } @else {
            div.scroll {
                table data-testid="history" {
                    thead { tr {
                        th scope="col" { "Id" } th scope="col" { "Time (UTC)" } th scope="col" { "Decision" }
                        th scope="col" { "Duration" } th scope="col" { "Tenant" } th scope="col" { "Session" } th scope="col" { "Error" }
                    } }
                    tbody {
                        @for r in v.rows {
                            tr data-execution=(r["id"]) {
                                th scope="row" { a href={"/ui/executions/" (r["id"])} { (r["id"]) } }
                                td { (r["createdAt"].as_str().unwrap_or("")) }
                                td { (decision(r["decision"].as_str().unwrap_or(""))) }
                                td { (r["durationMs"]) " ms" }
                                td { (r["tenant"].as_str().unwrap_or("")) }
                                td { (r["sessionId"].as_str().unwrap_or("")) }
                                td { (r["error"].as_str().unwrap_or("")) }
                            }
                        }
                    }
                }
            }
        }
        @if let Some(q) = &v.next {
            a.next rel="next" data-testid="next-page" href={"/ui/hooks/" (v.key) "/history?" (q)} { "Older executions →" }
        }
    }
}

/// One execution's detail: the row, and its decrypted error detail when the API gave it.
pub fn execution(row: &Value) -> Markup {
    let s = |k: &str| row.get(k).and_then(Value::as_str).unwrap_or("").to_owned();
    let hook = format!("{}/{}", s("hookNamespace"), s("hookName"));
    html! {
        dl data-testid="execution" {
            dt { "Hook" } dd { a href={"/ui/hooks/" (hook)} { (hook) } }
            dt { "Decision" } dd { (decision(&s("decision"))) }
            dt { "Time (UTC)" } dd { (s("createdAt")) }
            dt { "Duration" } dd { (row["durationMs"]) " ms" }
            dt { "Event" } dd { (s("event")) }
            dt { "Tenant" } dd { (s("tenant")) }
            dt { "Session" } dd { (s("sessionId")) }
            dt { "Input hash" } dd { code { (s("inputHash")) } }
            dt { "Error" } dd { (s("error")) }
            dt { "Error detail" } dd data-testid="error-detail" {
                @match row.get("errorDetail").and_then(Value::as_str) {
                    Some(d) => { pre { (d) } }
                    None => { (row.get("errorDetailError").and_then(Value::as_str).unwrap_or("none")) }
                }
            }
            dt { "Metadata" } dd { pre { (serde_json::to_string_pretty(&row["metadata"]).unwrap_or_default()) } }
        }
    }
}
