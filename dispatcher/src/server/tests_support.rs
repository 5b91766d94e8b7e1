//! What the server's test files share: a server on a loopback socket, a callers file.

use std::sync::Arc;

use super::{AppState, router, serve};

/// Serves `state` on a loopback port; the base URL.
pub(super) async fn serve_state(state: Arc<AppState>) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let stop = tokio_util::sync::CancellationToken::new();
    tokio::spawn(async move {
        serve(
            agenthooks_tls::Incoming::Plain(listener),
            router(state),
            stop,
        )
        .await
        .unwrap()
    });
    format!("http://{addr}")
}

/// Callers `acme-runtime` (token `acme-token`, tenant acme) and `platform` (token
/// `platform-token`, tenants acme and beta).
pub(super) fn callers() -> crate::identity::CallersFile {
    use crate::identity::callers_file::token_sha256;
    crate::identity::CallersFile::parse(&format!(
        "callers:\n  - name: acme-runtime\n    tokenSha256: {}\n    tenants: [acme]\n  - name: platform\n    tokenSha256: {}\n    tenants: [acme, beta]\n",
        token_sha256("acme-token"),
        token_sha256("platform-token")
    ))
    .unwrap()
}
