//! API-server calls of the report path (status reads and patches of trips, resets and
//! execution counts): each bounded by a per-request timeout, and their failures sorted
//! into *permanent* refusals and *transient* failures (review F3).
//!
//! - [`bounded`]: a call that has not answered within its timeout (default
//!   [`REQUEST_TIMEOUT`], 10 s) fails with a [`TimedOut`] error, so one hung call cannot
//!   stall a batch of writes.
//! - [`refusal`]: an API answer `4xx` other than `401` (credentials being rotated),
//!   `404` (gone: handled by the callers), `408`, `409` (conflict: re-read and retried)
//!   and `429` (throttled) — e.g. `403` from RBAC or a ValidatingAdmissionPolicy, `422`
//!   Invalid — is permanent: sending the same write again gets the same answer, so the
//!   report path drops what it carried instead of failing the report forever. Every other
//!   failure (`5xx`, timeouts, transport errors, conflicts past the retry bound) is
//!   transient.
//! - [`may_have_landed`]: whether a failed write may have been applied all the same (no
//!   answer, a `5xx` or `408`): its outcome is unknown and must be found out before the
//!   same counts are sent again.

use std::future::Future;
use std::time::Duration;

use kube::core::Status;

use crate::error::Error;

/// Limit of each API call of a status write (the status writer's
/// [`crate::status::writer::RetryPolicy::DEFAULT`]).
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

/// A call that did not answer in time (carried as [`kube::Error::Service`]).
#[derive(Debug, thiserror::Error)]
#[error("{what}: no answer from the API server within {} ms", .timeout.as_millis())]
pub struct TimedOut {
    /// What was asked (`get agenthook ns/name`).
    pub what: String,
    /// The limit.
    pub timeout: Duration,
}

/// Runs `call`, failing with [`TimedOut`] (as [`kube::Error::Service`]) when it has not
/// answered within `timeout`.
pub async fn bounded<T>(
    timeout: Duration,
    what: impl FnOnce() -> String,
    call: impl Future<Output = Result<T, kube::Error>>,
) -> Result<T, kube::Error> {
    match tokio::time::timeout(timeout, call).await {
        Ok(result) => result,
        Err(_) => Err(kube::Error::Service(Box::new(TimedOut {
            what: what(),
            timeout,
        }))),
    }
}

/// Whether `e` is a [`TimedOut`] of [`bounded`].
pub fn is_timeout(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Service(b) if b.is::<TimedOut>())
}

/// HTTP codes of `4xx` answers that are not permanent refusals.
const TRANSIENT_4XX: [u16; 5] = [401, 404, 408, 409, 429];

/// The API server's answer when `e` is a permanent refusal (see the module
/// documentation), else `None`.
pub fn refusal(e: &Error) -> Option<&Status> {
    match e {
        Error::Kube(kube::Error::Api(s))
            if (400..500).contains(&s.code) && !TRANSIENT_4XX.contains(&s.code) =>
        {
            Some(s)
        }
        _ => None,
    }
}

/// The `reason` label of a permanent refusal in the drop metrics: `forbidden` (403),
/// `invalid` (422) or `refused` (any other).
pub fn refusal_label(s: &Status) -> &'static str {
    match s.code {
        403 => "forbidden",
        422 => "invalid",
        _ => "refused",
    }
}

/// Whether a write that failed with `e` may have been applied all the same: no answer
/// (timeout, transport error, an answer that did not parse) or a `5xx`/`408` answer.
pub fn may_have_landed(e: &kube::Error) -> bool {
    match e {
        kube::Error::Api(s) => s.code >= 500 || s.code == 408,
        _ => true,
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// An API answer with `code`.
    pub(crate) fn api_error(code: u16) -> kube::Error {
        kube::Error::Api(Box::new(Status {
            code,
            message: format!("answer {code}"),
            reason: "Test".into(),
            ..Default::default()
        }))
    }

    #[test]
    fn permanent_refusals_are_4xx_but_not_gone_conflict_or_throttled() {
        for code in [400, 403, 413, 422] {
            let e = Error::Kube(api_error(code));
            assert_eq!(refusal(&e).map(|s| s.code), Some(code), "{code}");
        }
        for code in [401, 404, 408, 409, 429, 500, 503, 504] {
            assert!(refusal(&Error::Kube(api_error(code))).is_none(), "{code}");
        }
        assert!(refusal(&Error::StoreGone).is_none());
        assert_eq!(
            refusal_label(&Status {
                code: 403,
                ..Default::default()
            }),
            "forbidden"
        );
        assert_eq!(
            refusal_label(&Status {
                code: 422,
                ..Default::default()
            }),
            "invalid"
        );
        assert_eq!(
            refusal_label(&Status {
                code: 400,
                ..Default::default()
            }),
            "refused"
        );
    }

    #[test]
    fn only_an_unanswered_or_5xx_write_may_have_landed() {
        assert!(may_have_landed(&api_error(500)));
        assert!(may_have_landed(&api_error(504)));
        assert!(may_have_landed(&api_error(408)));
        assert!(!may_have_landed(&api_error(409)));
        assert!(!may_have_landed(&api_error(403)));
        assert!(!may_have_landed(&api_error(429)));
    }

    #[tokio::test(start_paused = true)]
    async fn a_hung_call_times_out() {
        let hung = bounded(
            Duration::from_millis(100),
            || "get agenthook ns/h".to_string(),
            std::future::pending::<Result<(), kube::Error>>(),
        )
        .await
        .unwrap_err();
        assert!(is_timeout(&hung), "{hung}");
        assert!(may_have_landed(&hung));
        assert!(hung.to_string().contains("get agenthook ns/h"), "{hung}");
        assert!(!is_timeout(&api_error(504)));
        let quick = bounded(Duration::from_millis(100), String::new, async { Ok(5) }).await;
        assert_eq!(quick.unwrap(), 5);
    }
}
