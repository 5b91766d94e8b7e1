//! The create form (issue 14 point 4): one fieldset per handler type, the command handler
//! greyed out where it cannot be used, errors next to their fields, and the manifest.

use agenthooks_crds::HookEvent;
use agenthooks_crds::tool::ToolKind;
use maud::{Markup, html};

use crate::console::form::{FieldError, HookForm};

/// What the form page shows.
pub struct FormView<'a> {
    pub form: &'a HookForm,
    pub csrf: &'a str,
    /// Why command hooks cannot be chosen (Standard edition), if so.
    pub command_disabled: Option<&'a str>,
    /// Where command hooks are accepted, said next to the choice.
    pub command_note: &'a str,
    /// Secrets labelled as hook secrets the person may see: `NAME/KEY`.
    pub secrets: &'a [String],
    pub errors: &'a [FieldError],
    /// The manifest as YAML, once valid.
    pub yaml: Option<&'a str>,
    /// Whether "Apply" can write it (cluster, or a standalone hooks directory).
    pub can_apply: bool,
    /// A note after validation or apply.
    pub status: Option<&'a str>,
    /// Editing an existing hook: the spec fields the form does not show (kept as they are).
    pub editing: Option<&'a [&'static str]>,
}

fn error_for<'a>(errors: &'a [FieldError], field: &str) -> Vec<&'a FieldError> {
    errors
        .iter()
        .filter(|e| {
            e.field == field
                || e.field.starts_with(&format!("{field}."))
                || e.field.starts_with(&format!("{field}["))
        })
        .collect()
}

/// A text input with its label and its errors.
fn input(
    v: &FormView<'_>,
    id: &str,
    label: &str,
    field: &str,
    value: &str,
    help: Option<&str>,
) -> Markup {
    let errs = error_for(v.errors, field);
    let described = match (errs.is_empty(), help.is_some()) {
        (false, _) => Some(format!("{id}-error")),
        (true, true) => Some(format!("{id}-help")),
        (true, false) => None,
    };
    html! {
        div.field {
            label for=(id) { (label) }
            input type="text" id=(id) name=(id) value=(value) aria-invalid=[(!errs.is_empty()).then_some("true")] aria-describedby=[described];
            @if let Some(h) = help { small id={(id) "-help"} { (h) } }
            @for e in &errs { p.error.field-error role="alert" id={(id) "-error"} data-field=(e.field) { (e.message) } }
        }
    }
}

/// The form page's body.
pub fn render(v: &FormView<'_>) -> Markup {
    let f = v.form;
    let other_errors: Vec<&FieldError> = v
        .errors
        .iter()
        .filter(|e| {
            !KNOWN_FIELDS.iter().any(|k| {
                e.field == *k
                    || e.field.starts_with(&format!("{k}."))
                    || e.field.starts_with(&format!("{k}["))
            })
        })
        .collect();
    html! {
        @if let Some(s) = v.status { p.note role="status" data-testid="form-status" { (s) } }
        @for e in &other_errors { p.error.field-error role="alert" data-field=(e.field) { (e.message) } }
        div id="live-validation" role="status" aria-live="polite" data-testid="live-validation" {}
        form.hook-form method="post" action="/ui/hooks/new" novalidate {
            input type="hidden" name="csrf" value=(v.csrf);
            fieldset {
                legend { "Hook" }
                @if let Some(hidden) = v.editing {
                    input type="hidden" name="editing" value="true";
                    input type="hidden" name="namespace" value=(f.namespace);
                    input type="hidden" name="name" value=(f.name);
                    p data-testid="editing" { "Editing " strong { (f.namespace) "/" (f.name) } "." }
                    @if !hidden.is_empty() {
                        p.note role="status" { "This hook also sets " (hidden.join(", ")) ", which this form does not show: applying leaves them as they are." }
                    }
                } @else {
                    (input(v, "namespace", "Namespace", "metadata.namespace", &f.namespace, None))
                    (input(v, "name", "Name", "metadata.name", &f.name, Some("lowercase letters, digits and '-'")))
                }
                div.field {
                    label for="event" { "Event" }
                    select id="event" name="event" {
                        @for e in HookEvent::ALL { option value=(e.as_str()) selected[e.as_str() == f.event] { (e.as_str()) } }
                    }
                }
                div.field {
                    label for="scope" { "Scope" }
                    select id="scope" name="scope" aria-describedby="scope-help" {
                        @for s in ["tenant", "agent", "global"] { option value=(s) selected[s == f.scope] { (s) } }
                    }
                    small id="scope-help" { "global: the master namespace only; agent: list the agent ids" }
                    @for e in error_for(v.errors, "spec.scope") { p.error.field-error role="alert" data-field=(e.field) { (e.message) } }
                }
                (input(v, "agentIds", "Agent ids (scope agent)", "spec.agentIds", &f.agent_ids, Some("comma-separated")))
                (input(v, "priority", "Priority", "spec.priority", &f.priority, Some("higher runs first")))
                div.check {
                    input type="checkbox" id="enabled" name="enabled" value="true" checked[f.enabled];
                    label for="enabled" { "Enabled" }
                }
            }
            fieldset {
                legend { "When it runs" }
                (input(v, "matcher", "Matcher (regex on tool_name)", "spec.matcher", &f.matcher, Some("unanchored; ^Bash$ matches one runtime's tool only: prefer tool kinds")))
                fieldset.kinds {
                    legend { "Tool kinds" }
                    @for k in ToolKind::ALL {
                        div.check {
                            input type="checkbox" id={"kind-" (k.as_str())} name="toolKinds" value=(k.as_str()) checked[f.tool_kinds.iter().any(|x| x == k.as_str())];
                            label for={"kind-" (k.as_str())} { (k.as_str()) }
                        }
                    }
                    @for e in error_for(v.errors, "spec.toolKinds") { p.error.field-error role="alert" data-field=(e.field) { (e.message) } }
                }
                (input(v, "ifExpr", "ifExpr (CEL)", "spec.ifExpr", &f.if_expr, Some("e.g. tool.command.contains(\"rm -rf\")")))
                (input(v, "timeoutMs", "Timeout (ms)", "spec.timeoutMs", &f.timeout_ms, Some("empty: 5000; at most 10000")))
                div.field {
                    label for="onTimeout" { "On timeout" }
                    select id="onTimeout" name="onTimeout" {
                        option value="" selected[f.on_timeout.is_empty()] { "default (block on blocking events)" }
                        @for o in ["block", "allow"] { option value=(o) selected[o == f.on_timeout] { (o) } }
                    }
                }
            }
            fieldset {
                legend { "Handler" }
                @for e in error_for(v.errors, "spec.handler.type") { p.error.field-error role="alert" data-field=(e.field) { (e.message) } }
                div.radios role="radiogroup" aria-label="Handler type" {
                    @for (t, label) in [("http", "HTTP endpoint"), ("prompt", "Prompt judge (LLM)"), ("command", "Command")] {
                        @let disabled = t == "command" && v.command_disabled.is_some();
                        div.check {
                            input type="radio" id={"handler-" (t)} name="handler" value=(t) checked[t == f.handler] disabled[disabled]
                                aria-describedby=[(t == "command").then_some("command-note")];
                            label for={"handler-" (t)} { (label) }
                        }
                    }
                    p id="command-note" data-testid="command-note" {
                        @if let Some(why) = v.command_disabled { (why) } @else { (v.command_note) }
                    }
                }
                fieldset.handler data-handler="http" {
                    legend { "HTTP" }
                    (input(v, "httpUrl", "URL", "spec.handler.http.url", &f.http_url, Some("https; private and loopback addresses are refused unless the operator allows them")))
                    (input(v, "httpHeaderName", "Header from a Secret: name", "spec.handler.http.headers[0].name", &f.http_header_name, None))
                    div.field {
                        label for="httpHeaderSecret" { "Header from a Secret: Secret and key" }
                        select id="httpHeaderSecret" name="httpHeaderSecret" aria-describedby="secret-help" {
                            option value="" { "none" }
                            @for s in v.secrets { option value=(s) selected[*s == f.http_header_secret] { (s) } }
                        }
                        small id="secret-help" { "Secrets of the namespace labelled agenthooks.io/hook-secret=true that you may read" }
                        @for e in error_for(v.errors, "spec.handler.http.headers[0].valueFrom") { p.error.field-error role="alert" data-field=(e.field) { (e.message) } }
                    }
                }
                fieldset.handler data-handler="prompt" {
                    legend { "Prompt judge" }
                    div.field {
                        label for="promptTemplate" { "Prompt template" }
                        @let errs = error_for(v.errors, "spec.handler.prompt");
                        textarea id="promptTemplate" name="promptTemplate" rows="4" aria-invalid=[(!errs.is_empty()).then_some("true")] { (f.prompt_template) }
                        @for e in &errs { p.error.field-error role="alert" data-field=(e.field) { (e.message) } }
                    }
                    (input(v, "promptModel", "Model alias", "spec.handler.prompt.model", &f.prompt_model, Some("e.g. haiku; empty: the default")))
                }
                fieldset.handler data-handler="command" disabled[v.command_disabled.is_some()] {
                    legend { "Command" }
                    (input(v, "command", "Command (sh -c; the event JSON on stdin)", "spec.handler.command", &f.command, Some("exit 2 blocks with stderr as the reason; exit 0 allows")))
                }
            }
            div.actions {
                button type="submit" name="action" value="validate" { "Validate" }
                button type="submit" name="action" value="apply" disabled[!v.can_apply] { "Apply" }
                button type="submit" name="action" value="download" { "Download YAML" }
            }
        }
        @if let Some(y) = v.yaml {
            section.card aria-labelledby="yaml-h" {
                h2 id="yaml-h" { "Manifest" }
                p { "Valid. Apply it here, or commit it for GitOps (" code { "kubectl apply -f" } ", Argo CD)." }
                pre data-testid="yaml" { (y) }
            }
        }
    }
}

/// Fields that have a place in the form; other errors are listed at the top.
const KNOWN_FIELDS: [&str; 15] = [
    "metadata.namespace",
    "metadata.name",
    "spec.scope",
    "spec.agentIds",
    "spec.priority",
    "spec.matcher",
    "spec.toolKinds",
    "spec.ifExpr",
    "spec.timeoutMs",
    "spec.handler.type",
    "spec.handler.http.url",
    "spec.handler.http.headers[0].name",
    "spec.handler.http.headers[0].valueFrom",
    "spec.handler.prompt",
    "spec.handler.command",
];
