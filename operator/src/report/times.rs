//! Times dispatchers report, taken with a grain of salt (review F5, F8b): a dispatcher's
//! clock may be wrong, and a report may be forged. A reported time is compared with the
//! operator's own receipt time of the report:
//!
//! - later than receipt + [`MAX_SKEW`]: taken as the receipt time (nothing reported can
//!   have happened after the report arrived). Applies to breaker observations
//!   (`lastAllowAt`, `run[].at`), trips (`trippedAt`) and executions
//!   (`lastExecutionTime`), so a `lastAllowAt` of year 9999 cannot hold a merged breaker
//!   closed and a `lastExecutionTime` of year 9999 cannot pin `lastDecision`;
//! - before [`earliest`] (2000-01-01T00:00:00Z): taken as the receipt time for trips and
//!   executions ([`clamp`]); an old breaker observation only falls out of the window, so
//!   observations use [`clamp_future`].

use chrono::{DateTime, Duration, TimeZone, Utc};

/// How far a reported time may be ahead of the operator's receipt time and still be
/// taken as sent (clock skew between dispatcher and operator nodes).
pub const MAX_SKEW: Duration = Duration::seconds(2);

/// The earliest reported trip or execution time taken as sent: 2000-01-01T00:00:00Z.
pub fn earliest() -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2000, 1, 1, 0, 0, 0)
        .single()
        .unwrap_or(DateTime::<Utc>::MIN_UTC)
}

/// A reported RFC 3339 time (any offset) in UTC.
///
/// Errors: the [`chrono::ParseError`] of a value that is not RFC 3339.
pub fn parse_utc(value: &str) -> Result<DateTime<Utc>, chrono::ParseError> {
    DateTime::parse_from_rfc3339(value).map(|t| t.with_timezone(&Utc))
}

/// `t`, or `received` when `t` is later than `received` + [`MAX_SKEW`].
pub fn clamp_future(t: DateTime<Utc>, received: DateTime<Utc>) -> DateTime<Utc> {
    if t > received + MAX_SKEW { received } else { t }
}

/// `t`, or `received` when `t` is later than `received` + [`MAX_SKEW`] or before
/// [`earliest`] (trips and executions).
pub fn clamp(t: DateTime<Utc>, received: DateTime<Utc>) -> DateTime<Utc> {
    if t < earliest() {
        received
    } else {
        clamp_future(t, received)
    }
}

/// Whether a recorded time (read back from status) lies in the future of `now` by more
/// than [`MAX_SKEW`]: such a time was written before clamping existed (or by someone
/// else) and must not win against real ones.
pub fn is_future(t: DateTime<Utc>, now: DateTime<Utc>) -> bool {
    t > now + MAX_SKEW
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(s: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(s).unwrap().with_timezone(&Utc)
    }

    #[test]
    fn parse_utc_takes_any_offset_to_utc_and_refuses_non_rfc3339() {
        assert_eq!(
            parse_utc("2025-03-01T12:00:00+02:00").unwrap(),
            Utc.with_ymd_and_hms(2025, 3, 1, 10, 0, 0).unwrap()
        );
        assert!(parse_utc("2025-03-01 10:00:00").is_err());
        assert!(parse_utc("").is_err());
    }

    #[test]
    fn future_and_ancient_times_become_the_receipt_time() {
        let received = at("2025-03-01T10:00:00Z");
        assert_eq!(clamp(at("9999-12-31T23:59:59Z"), received), received);
        assert_eq!(clamp(at("2025-03-01T10:00:03Z"), received), received);
        assert_eq!(
            clamp(at("2025-03-01T10:00:02Z"), received),
            at("2025-03-01T10:00:02Z"),
            "within the skew: kept"
        );
        assert_eq!(
            clamp(at("2025-03-01T09:59:00Z"), received),
            at("2025-03-01T09:59:00Z")
        );
        assert_eq!(clamp(at("1999-12-31T23:59:59Z"), received), received);
        assert_eq!(
            clamp(at("2000-01-01T00:00:00Z"), received),
            at("2000-01-01T00:00:00Z")
        );
        assert_eq!(
            clamp_future(at("1970-01-01T00:00:00Z"), received),
            at("1970-01-01T00:00:00Z"),
            "observations keep old times (they just fall out of the window)"
        );
        assert_eq!(clamp_future(at("9999-01-01T00:00:00Z"), received), received);
        assert!(is_future(at("2025-03-01T10:00:02.001Z"), received));
        assert!(!is_future(at("2025-03-01T10:00:02Z"), received));
    }
}
