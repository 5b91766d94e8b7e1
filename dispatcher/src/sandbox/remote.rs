//! The dispatcher's side of the runner protocol: one connection per run to the runner's
//! Unix socket (`--command-runner unix:PATH`).
//!
//! The call is bounded by the hook's timeout plus [`TRANSPORT_GRACE`] (the runner needs a
//! moment to kill a tree that timed out and answer). Past it, or when the caller drops
//! the run, the connection is closed, which tells the runner to kill the run.

use std::path::Path;
use std::time::Duration;

use tokio::net::UnixStream;

use super::protocol::{MAX_RESPONSE_FRAME, RunOutcome, RunRequest, read_frame, write_frame};

/// Time past the hook's timeout the dispatcher waits for the runner's answer.
pub const TRANSPORT_GRACE: Duration = Duration::from_secs(2);

/// Sends `req` to the runner at `socket` and returns its answer. A runner that cannot be
/// reached, or that answers with a bad frame, gives [`RunOutcome::RunnerUnavailable`];
/// no answer within the timeout plus [`TRANSPORT_GRACE`] gives [`RunOutcome::Timeout`].
pub async fn run(socket: &Path, req: &RunRequest) -> RunOutcome {
    let limit = Duration::from_millis(req.timeout_ms) + TRANSPORT_GRACE;
    let call = async {
        let mut conn = UnixStream::connect(socket).await.map_err(|e| {
            format!(
                "cannot reach the command runner at {}: {e}",
                socket.display()
            )
        })?;
        write_frame(&mut conn, req)
            .await
            .map_err(|e| format!("sending the run to the command runner: {e}"))?;
        read_frame::<_, RunOutcome>(&mut conn, MAX_RESPONSE_FRAME)
            .await
            .map_err(|e| format!("reading the command runner's answer: {e}"))
    };
    match tokio::time::timeout(limit, call).await {
        Err(_) => RunOutcome::Timeout,
        Ok(Ok(outcome)) => outcome,
        Ok(Err(message)) => RunOutcome::RunnerUnavailable { message },
    }
}
