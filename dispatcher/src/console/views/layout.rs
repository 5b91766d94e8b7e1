//! The frame of every page, and the small pieces pages share (badges, alerts).

use maud::{DOCTYPE, Markup, html};

use crate::console::catalog::Cond;
use crate::console::session::Session;

/// A whole page: `title` is the `<title>` and the `<h1>`; `session` adds the header's
/// navigation, the signed-in name and the sign-out button.
pub fn page(title: &str, session: Option<&Session>, main: Markup) -> Markup {
    html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                title { (title) " · agenthooks" }
                link rel="stylesheet" href="/ui/assets/app.css";
                script src="/ui/assets/app.js" defer {}
            }
            body {
                a.skip href="#main" { "Skip to content" }
                header.top {
                    a.brand href="/ui/hooks" { "agenthooks" }
                    @if let Some(s) = session {
                        nav aria-label="Main" {
                            a href="/ui/hooks" { "Hooks" }
                            a href="/ui/hooks/new" { "New hook" }
                            a href="/ui/approvals" { "Approvals" }
                        }
                        span.who { "Signed in as " span data-testid="whoami" { (s.name) } }
                        form.sign-out method="post" action="/ui/sign-out" {
                            input type="hidden" name="csrf" value=(s.csrf);
                            button type="submit" { "Sign out" }
                        }
                    }
                }
                main id="main" {
                    h1 { (title) }
                    (main)
                }
            }
        }
    }
}

/// A refusal naming its field (`data-field`), announced to screen readers.
pub fn alert(field: &str, message: &str) -> Markup {
    html! { p.error role="alert" data-field=(field) { (message) } }
}

/// A condition's badge: the reason as text, the message as its title and, for screen
/// readers, in words.
pub fn badge(c: &Cond) -> Markup {
    html! {
        span.badge data-status=(c.status) title=(c.message) {
            (c.reason)
            span.visually-hidden { " (" (c.status) "): " (c.message) }
        }
    }
}

/// A decision's badge (`allow`, `block`, `error`, `timeout`, `skipped`).
pub fn decision(d: &str) -> Markup {
    html! { span.decision data-decision=(d) { (d) } }
}
