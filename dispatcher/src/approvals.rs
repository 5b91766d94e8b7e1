//! Approvals out of band (issue 16 point 2), the dispatcher's side: an `ask` of a hook
//! with `spec.approval` is sent to the operator (`POST /v1/approvals`,
//! [`agenthooks_crds::approval`]), and [`apply`] turns the answer into the run's outcome:
//!
//! | approval | run | the agent gets |
//! |---|---|---|
//! | `Approved` (within the TTL) | `allow` | the call goes on (the ask's rewrite and context kept) |
//! | `Pending` | `block` | `ApprovalPending <id>` |
//! | `Rejected` | `block` | `ApprovalRejected <id>` and the person's note |
//! | `Expired` | `block` | `ApprovalExpired <id>` (the next call asks anew) |
//! | no operator, no answer | `error` | `ApprovalUnavailable: …` (fail-closed) |
//!
//! Only synced mode has approvals (the operator keeps them as `HookApproval` objects); a
//! standalone dispatcher refuses such an `ask` as unavailable.

use std::sync::Arc;
use std::time::Duration;

use agenthooks_crds::approval::{
    APPROVAL_EXPIRED, APPROVAL_PENDING, APPROVAL_REJECTED, APPROVAL_UNAVAILABLE, ApprovalAnswer,
    ApprovalRequest, ApprovalState,
};

use crate::decision::outcome::{ErrorKind, HandlerResult, Outcome};
use crate::operator_urls::OperatorUrls;

/// How long one approval call may take before the call is refused as unavailable.
pub const APPROVAL_TIMEOUT: Duration = Duration::from_secs(5);

/// Sends approval requests to the operator as this dispatcher.
pub struct ApprovalClient {
    urls: Arc<OperatorUrls>,
    client: reqwest::Client,
    dispatcher: String,
}

impl ApprovalClient {
    /// A client for the operators at `urls`, as dispatcher `dispatcher` (its identity).
    pub fn new(urls: Arc<OperatorUrls>, dispatcher: String) -> ApprovalClient {
        ApprovalClient {
            // The operators' CA and connection settings, as every sync call.
            client: urls.fresh_client(Duration::from_secs(1)),
            urls,
            dispatcher,
        }
    }

    /// This dispatcher's name, as requests carry it.
    pub fn dispatcher(&self) -> &str {
        &self.dispatcher
    }

    /// Asks the operator where `req`'s approval stands (creating it on the first ask).
    ///
    /// Errors: why no answer came (for the `ApprovalUnavailable` reason).
    pub async fn ask(&self, req: &ApprovalRequest) -> Result<ApprovalAnswer, String> {
        self.urls
            .post_json::<_, ApprovalAnswer>(&self.client, "/v1/approvals", req, APPROVAL_TIMEOUT)
            .await
            .map_err(|e| e.to_string())
    }
}

/// The outcome of a run that answered `ask`, given where its approval stands (pure; see the
/// module table). The approval's id and state go into the run's metadata (its audit row).
pub fn apply(ask: HandlerResult, answer: Result<ApprovalAnswer, String>) -> HandlerResult {
    debug_assert_eq!(ask.outcome, Outcome::Ask);
    let answer = match answer {
        Ok(a) => a,
        Err(why) => {
            let mut r = HandlerResult::error(
                ErrorKind::ApprovalUnavailable,
                format!("{APPROVAL_UNAVAILABLE}: {why}"),
            );
            r.metadata = ask.metadata;
            return r;
        }
    };
    let id = answer.id.clone();
    let mut r = match answer.state {
        ApprovalState::Approved => {
            let mut r = ask.clone();
            r.outcome = Outcome::Allow;
            r.reason = Some(match &answer.decided_by {
                Some(by) => format!("approved by {by} ({id})"),
                None => format!("approved ({id})"),
            });
            r
        }
        ApprovalState::Pending => HandlerResult::block(format!("{APPROVAL_PENDING} {id}")),
        ApprovalState::Rejected => HandlerResult::block(match answer.note.as_deref() {
            Some(note) if !note.trim().is_empty() => {
                format!("{APPROVAL_REJECTED} {id}: {}", note.trim())
            }
            _ => format!("{APPROVAL_REJECTED} {id}"),
        }),
        ApprovalState::Expired => HandlerResult::block(format!("{APPROVAL_EXPIRED} {id}")),
    };
    r.metadata = ask.metadata;
    r.metadata.approval = Some((id, answer.state.as_str()));
    r
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn ask() -> HandlerResult {
        let mut r = HandlerResult::ask("deploys need a person");
        r.updated_input = Some(json!({"cmd": "deploy --dry-run=false"}));
        r.metadata.http_status = Some(200);
        r
    }

    fn answer(state: ApprovalState, note: Option<&str>) -> Result<ApprovalAnswer, String> {
        Ok(ApprovalAnswer {
            id: "ap-0123".into(),
            state,
            note: note.map(str::to_owned),
            decided_by: (state != ApprovalState::Pending).then(|| "alice".into()),
        })
    }

    #[test]
    fn each_state_becomes_an_outcome() {
        use ApprovalState::*;
        let cases = [
            (
                answer(Approved, None),
                Outcome::Allow,
                "approved by alice (ap-0123)",
            ),
            (
                answer(Pending, None),
                Outcome::Block,
                "ApprovalPending ap-0123",
            ),
            (
                answer(Rejected, Some("not on a Friday")),
                Outcome::Block,
                "ApprovalRejected ap-0123: not on a Friday",
            ),
            (
                answer(Rejected, None),
                Outcome::Block,
                "ApprovalRejected ap-0123",
            ),
            (
                answer(Expired, None),
                Outcome::Block,
                "ApprovalExpired ap-0123",
            ),
            (
                Err("no operator answered".into()),
                Outcome::Error,
                "ApprovalUnavailable: no operator answered",
            ),
        ];
        for (a, outcome, reason) in cases {
            let state = a.as_ref().ok().map(|a| a.state.as_str());
            let r = apply(ask(), a);
            assert_eq!(
                (r.outcome, r.reason.as_deref()),
                (outcome, Some(reason)),
                "{state:?}"
            );
            assert_eq!(r.metadata.http_status, Some(200), "metadata kept");
            assert_eq!(
                r.metadata
                    .approval
                    .as_ref()
                    .map(|(id, s)| (id.as_str(), *s)),
                state.map(|s| ("ap-0123", s))
            );
            // Only an approved call keeps the asking hook's rewrite.
            assert_eq!(r.updated_input.is_some(), outcome == Outcome::Allow);
        }
        let unavailable = apply(ask(), Err("x".into()));
        assert_eq!(unavailable.error_kind, Some(ErrorKind::ApprovalUnavailable));
        assert!(
            !ErrorKind::ApprovalUnavailable.is_outage(),
            "never let through by onError"
        );
    }
}
