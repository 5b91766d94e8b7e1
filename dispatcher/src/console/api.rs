//! The console's one way to read history and run dry runs: the dispatcher's own API
//! routes, called in process as the signed-in person ([`crate::server::Principal`] in
//! the request's extensions). The routes authorize the person exactly as they authorize
//! any caller (CONTRACT §9.5), so the console never acts with more rights than the person
//! has, and nothing of the API's rules is copied here.

use axum::Router;
use axum::body::Body;
use axum::http::{Method, Request, StatusCode, header};
use serde_json::Value;
use tower::ServiceExt;

use super::session::Session;

/// Bodies the console reads from its own API at most (a history page of 500 rows with
/// 256-byte errors and metadata fits well within it).
const MAX_ANSWER_BYTES: usize = 8 << 20;

/// An answer of the API: its status and JSON body (`Null` when it had none).
#[derive(Debug)]
pub struct Answer {
    pub status: StatusCode,
    pub body: Value,
}

impl Answer {
    /// The `{"error", "field"}` of a refusal: (field, message).
    pub fn refusal(&self) -> (String, String) {
        let text = |k: &str| self.body.get(k).and_then(Value::as_str).unwrap_or("");
        (text("field").to_owned(), text("error").to_owned())
    }
}

/// Calls `method path` (path with its query) on `api` as `session`'s person, with `body`
/// as JSON.
pub async fn call(
    api: &Router,
    session: &Session,
    method: Method,
    path: &str,
    body: Option<&Value>,
) -> Answer {
    let mut req = Request::builder().method(method).uri(path);
    if body.is_some() {
        req = req.header(header::CONTENT_TYPE, "application/json");
    }
    let built = req.body(match body {
        Some(v) => Body::from(v.to_string()),
        None => Body::empty(),
    });
    let Ok(mut req) = built else {
        return internal(format!("{path}: not a request path"));
    };
    req.extensions_mut().insert(session.principal.clone());
    let response = match api.clone().oneshot(req).await {
        Ok(r) => r,
        Err(never) => match never {},
    };
    let status = response.status();
    match axum::body::to_bytes(response.into_body(), MAX_ANSWER_BYTES).await {
        Ok(bytes) if bytes.is_empty() => Answer {
            status,
            body: Value::Null,
        },
        Ok(bytes) => Answer {
            status,
            body: serde_json::from_slice(&bytes).unwrap_or(Value::Null),
        },
        Err(e) => internal(format!("{path}: answer not read: {e}")),
    }
}

fn internal(message: String) -> Answer {
    Answer {
        status: StatusCode::INTERNAL_SERVER_ERROR,
        body: serde_json::json!({"error": message, "field": ""}),
    }
}
