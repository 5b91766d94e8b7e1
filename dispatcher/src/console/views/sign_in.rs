//! The sign-in page (issue 14 point 2).

use maud::{Markup, html};

/// How a person signs in here, shown under the form.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Standalone: the admin token (`--admin-token-file`); `false` when none is set.
    AdminToken { configured: bool },
    /// In a cluster: any bearer token the API server accepts.
    Kubernetes,
}

/// The form; `reason` says why the person is here (session ended), `error` why the last
/// attempt failed; `next` is where to go after.
pub fn render(mode: Mode, next: &str, reason: Option<&str>, error: Option<&str>) -> Markup {
    html! {
        @if let Some(r) = reason { p.note role="status" id="sign-in-reason" { (r) } }
        @if let Some(e) = error { p.error role="alert" id="sign-in-error" data-field="token" { (e) } }
        form.sign-in method="post" action="/ui/sign-in" {
            input type="hidden" name="next" value=(next);
            label for="token" { "Bearer token" }
            textarea id="token" name="token" rows="4" required autocomplete="off" spellcheck="false"
                aria-describedby="token-help" aria-invalid=[error.map(|_| "true")] {}
            button type="submit" { "Sign in" }
        }
        @match mode {
            Mode::AdminToken { configured: true } => {
                p id="token-help" { "Standalone mode: paste the admin token (" code { "--admin-token-file" } "; " code { "make run" } " writes it to " code { ".agenthooks-admin-token" } ")." }
            }
            Mode::AdminToken { configured: false } => {
                p id="token-help" { "This dispatcher has no admin token: start it with " code { "--admin-token-file FILE" } " to sign in." }
            }
            Mode::Kubernetes => {
                p id="token-help" {
                    "Paste a token the cluster's API server accepts: " code { "kubectl create token NAME -n NAMESPACE" }
                    ", or your OIDC id token. You see and do only what your Kubernetes RBAC allows."
                }
            }
        }
    }
}
