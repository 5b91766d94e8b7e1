//! `POST /v1/report` bodies: parsing and checks, each refusal naming the field
//! (`trips[0].generation: ...`) for a 400; reported trip and execution times clamped to
//! the receipt time ([`super::times`]).

use std::collections::BTreeMap;

use agenthooks_crds::report::{
    BreakerObservation, CloseReport, ExecutionDelta, MAX_UNAVAILABLE_ERROR_BYTES,
    MAX_UNAVAILABLE_HOOKS, Report, TripReport, UnavailableReport,
};
use chrono::{DateTime, Utc};

use super::executions::{Counts, format_time};
use super::times;
use super::writer::HookRef;

/// Longest `dispatcher` (as in the snapshot poll).
pub const MAX_DISPATCHER_LEN: usize = crate::sync_auth::MAX_DISPATCHER_ID_LEN;
/// Longest `reportId`.
pub const MAX_REPORT_ID_LEN: usize = 128;
/// Longest uid.
pub const MAX_UID_LEN: usize = 128;
/// Longest namespace (a DNS label).
pub const MAX_NAMESPACE_LEN: usize = 63;
/// Longest object name.
pub const MAX_NAME_LEN: usize = 253;
/// Longest tenant of a trip, observation or close (as `status.breaker.open[].tenant`).
pub const MAX_TENANT_LEN: usize = 256;
/// Most outcomes in one breaker observation's run (a dispatcher sends at most
/// [`agenthooks_crds::report::BREAKER_THRESHOLD`]).
pub const MAX_RUN_OUTCOMES: usize = 64;
/// Longest reset token (an annotation value; all annotations together are capped at
/// 256 KiB by the API server).
pub const MAX_RESET_TOKEN_LEN: usize = 256 * 1024;

/// A report that passed [`check`]: the report, and its execution counts merged per hook
/// (by uid, in uid order), empty ones left out.
#[derive(Debug, Clone, PartialEq)]
pub struct Checked {
    /// The report as sent.
    pub report: Report,
    /// Counts per hook.
    pub executions: Vec<(HookRef, Counts)>,
}

/// Parses a report body.
///
/// Errors: the JSON error with the path of the field it is in (`trips[0].generation:
/// invalid type: ...`), or the position of a syntax error.
pub fn parse(body: &[u8]) -> Result<Report, String> {
    let mut de = serde_json::Deserializer::from_slice(body);
    let report: Report = serde_path_to_error::deserialize(&mut de).map_err(|e| {
        let path = e.path().to_string();
        if path == "." {
            format!("body: {}", e.inner())
        } else {
            format!("{path}: {}", e.inner())
        }
    })?;
    de.end()
        .map_err(|e| format!("body: trailing data after the report ({e})"))?;
    Ok(report)
}

fn check_text(field: &str, value: &str, max: usize) -> Result<(), String> {
    if value.is_empty() {
        return Err(format!("{field}: required, must not be empty"));
    }
    if value.len() > max {
        return Err(format!("{field}: {} bytes; at most {max}", value.len()));
    }
    if value.chars().any(char::is_control) {
        return Err(format!("{field}: holds control characters"));
    }
    Ok(())
}

/// A DNS-1123 label: 1–63 characters of `a-z`, `0-9` and `-`, starting and ending with a
/// letter or digit (Kubernetes namespace names).
pub fn is_dns_label(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && b.len() <= MAX_NAMESPACE_LEN
        && b.iter()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
        && b[0] != b'-'
        && b[b.len() - 1] != b'-'
}

/// A DNS-1123 subdomain: at most 253 characters, DNS-1123 labels joined by `.`
/// (Kubernetes object names such as AgentHooks').
pub fn is_dns_subdomain(s: &str) -> bool {
    !s.is_empty() && s.len() <= MAX_NAME_LEN && s.split('.').all(is_dns_label)
}

fn check_hook(at: &str, uid: &str, namespace: &str, name: &str) -> Result<(), String> {
    check_text(&format!("{at}.uid"), uid, MAX_UID_LEN)?;
    check_text(&format!("{at}.namespace"), namespace, MAX_NAMESPACE_LEN)?;
    check_text(&format!("{at}.name"), name, MAX_NAME_LEN)?;
    if !is_dns_label(namespace) {
        return Err(format!(
            "{at}.namespace: {namespace:?} is not a namespace name (a DNS-1123 label: lower-case letters, digits and '-', at most 63)"
        ));
    }
    if !is_dns_subdomain(name) {
        return Err(format!(
            "{at}.name: {name:?} is not an object name (a DNS-1123 subdomain: lower-case letters, digits, '-' and '.', at most 253)"
        ));
    }
    Ok(())
}

fn check_trip(at: &str, t: &mut TripReport, received: DateTime<Utc>) -> Result<(), String> {
    check_hook(at, &t.uid, &t.namespace, &t.name)?;
    if t.generation < 1 {
        return Err(format!(
            "{at}.generation: {} is not a generation (>= 1)",
            t.generation
        ));
    }
    if let Some(token) = &t.reset_token
        && token.len() > MAX_RESET_TOKEN_LEN
    {
        return Err(format!(
            "{at}.resetToken: {} bytes; at most {MAX_RESET_TOKEN_LEN}",
            token.len()
        ));
    }
    check_text(&format!("{at}.tenant"), &t.tenant, MAX_TENANT_LEN)?;
    clamp_field(&format!("{at}.trippedAt"), &mut t.tripped_at, received)?;
    if t.reason.trim().is_empty() {
        return Err(format!("{at}.reason: required, must not be empty"));
    }
    Ok(())
}

fn check_unavailable(at: &str, u: &UnavailableReport) -> Result<(), String> {
    check_hook(at, &u.uid, &u.namespace, &u.name)?;
    if u.generation < 1 {
        return Err(format!(
            "{at}.generation: {} is not a generation (>= 1)",
            u.generation
        ));
    }
    if u.error.trim().is_empty() {
        return Err(format!("{at}.error: required, must not be empty"));
    }
    if u.error.len() > MAX_UNAVAILABLE_ERROR_BYTES {
        return Err(format!(
            "{at}.error: {} bytes; at most {MAX_UNAVAILABLE_ERROR_BYTES} (cut it)",
            u.error.len()
        ));
    }
    Ok(())
}

/// Checks that `value` is RFC 3339 and replaces it by `received` when [`times::clamp`]
/// says so.
fn clamp_field(field: &str, value: &mut String, received: DateTime<Utc>) -> Result<(), String> {
    let t = check_time(field, value)?;
    let clamped = times::clamp(t, received);
    if clamped != t {
        *value = format_time(clamped);
    }
    Ok(())
}

fn check_reset_token(at: &str, token: Option<&String>) -> Result<(), String> {
    match token {
        Some(token) if token.len() > MAX_RESET_TOKEN_LEN => Err(format!(
            "{at}.resetToken: {} bytes; at most {MAX_RESET_TOKEN_LEN}",
            token.len()
        )),
        _ => Ok(()),
    }
}

fn check_close(at: &str, c: &mut CloseReport, received: DateTime<Utc>) -> Result<(), String> {
    check_hook(at, &c.uid, &c.namespace, &c.name)?;
    if c.generation < 1 {
        return Err(format!(
            "{at}.generation: {} is not a generation (>= 1)",
            c.generation
        ));
    }
    check_reset_token(at, c.reset_token.as_ref())?;
    check_text(&format!("{at}.tenant"), &c.tenant, MAX_TENANT_LEN)?;
    clamp_field(&format!("{at}.openedAt"), &mut c.opened_at, received)?;
    clamp_field(&format!("{at}.closedAt"), &mut c.closed_at, received)?;
    Ok(())
}

fn check_time(field: &str, value: &str) -> Result<DateTime<Utc>, String> {
    times::parse_utc(value).map_err(|e| format!("{field}: {value:?} is not an RFC 3339 time ({e})"))
}

fn check_observation(at: &str, o: &BreakerObservation) -> Result<(), String> {
    check_hook(at, &o.uid, &o.namespace, &o.name)?;
    if o.generation < 1 {
        return Err(format!(
            "{at}.generation: {} is not a generation (>= 1)",
            o.generation
        ));
    }
    if let Some(token) = &o.reset_token
        && token.len() > MAX_RESET_TOKEN_LEN
    {
        return Err(format!(
            "{at}.resetToken: {} bytes; at most {MAX_RESET_TOKEN_LEN}",
            token.len()
        ));
    }
    check_text(&format!("{at}.tenant"), &o.tenant, MAX_TENANT_LEN)?;
    if let Some(t) = &o.last_answer_at {
        check_time(&format!("{at}.lastAnswerAt"), t)?;
    }
    if o.run.len() > MAX_RUN_OUTCOMES {
        return Err(format!(
            "{at}.run: {} outcomes; at most {MAX_RUN_OUTCOMES}",
            o.run.len()
        ));
    }
    for (j, r) in o.run.iter().enumerate() {
        check_time(&format!("{at}.run[{j}].at"), &r.at)?;
    }
    Ok(())
}

fn check_delta(at: &str, d: &ExecutionDelta, received: DateTime<Utc>) -> Result<Counts, String> {
    check_hook(at, &d.uid, &d.namespace, &d.name)?;
    for (field, n) in [
        ("allow", d.allow),
        ("block", d.block),
        ("error", d.error),
        ("timeout", d.timeout),
        ("ask", d.ask),
    ] {
        if i64::try_from(n).is_err() {
            return Err(format!("{at}.{field}: {n} is larger than {}", i64::MAX));
        }
    }
    Counts::from_delta(d, at, received)
}

/// Checks a parsed report received at `received`: `dispatcher` and `reportId` present
/// and bounded; every hook named by a uid, a namespace that is a DNS-1123 label and a name
/// that is a DNS-1123 subdomain; every trip with a generation >= 1, an RFC 3339
/// `trippedAt` and a reason; every execution entry with counts that fit an `int64`, an
/// RFC 3339 `lastExecutionTime` and a known `lastDecision`; two entries with one uid name
/// the same hook; every breaker observation with a generation >= 1, RFC 3339
/// `lastAnswerAt` and `run[].at`, and at most [`MAX_RUN_OUTCOMES`] outcomes; every close
/// with a generation >= 1 and RFC 3339 `openedAt` and `closedAt`. Every trip, observation
/// and close names a `tenant` of 1..=[`MAX_TENANT_LEN`] bytes without control characters.
///
/// `trippedAt`, `openedAt`, `closedAt` and `lastExecutionTime` after `received` (+ skew) or before 2000 are
/// replaced by `received` ([`times::clamp`]); breaker observation times are clamped when
/// observed ([`crate::breaker_window`]).
///
/// Errors: the first problem, naming its field (`executions[1].lastDecision: ...`).
pub fn check(mut report: Report, received: DateTime<Utc>) -> Result<Checked, String> {
    check_text("dispatcher", &report.dispatcher, MAX_DISPATCHER_LEN)?;
    check_text("reportId", &report.report_id, MAX_REPORT_ID_LEN)?;
    for (i, t) in report.trips.iter_mut().enumerate() {
        check_trip(&format!("trips[{i}]"), t, received)?;
    }
    for (i, o) in report.breaker.iter().enumerate() {
        check_observation(&format!("breaker[{i}]"), o)?;
    }
    for (i, c) in report.closes.iter_mut().enumerate() {
        check_close(&format!("closes[{i}]"), c, received)?;
    }
    if let Some(list) = &report.unavailable {
        if list.len() > MAX_UNAVAILABLE_HOOKS {
            return Err(format!(
                "unavailable: {} entries; at most {MAX_UNAVAILABLE_HOOKS}",
                list.len()
            ));
        }
        for (i, u) in list.iter().enumerate() {
            check_unavailable(&format!("unavailable[{i}]"), u)?;
        }
    }
    let mut by_uid: BTreeMap<String, (usize, HookRef, Counts)> = BTreeMap::new();
    for (i, d) in report.executions.iter().enumerate() {
        let at = format!("executions[{i}]");
        let counts = check_delta(&at, d, received)?;
        match by_uid.get_mut(&d.uid) {
            Some((first, hook, sum)) => {
                if hook.namespace != d.namespace || hook.name != d.name {
                    return Err(format!(
                        "{at}.uid: {:?} is also in executions[{first}] with another namespace/name",
                        d.uid
                    ));
                }
                sum.add(&counts);
            }
            None => {
                let hook = HookRef {
                    uid: d.uid.clone(),
                    namespace: d.namespace.clone(),
                    name: d.name.clone(),
                };
                by_uid.insert(d.uid.clone(), (i, hook, counts));
            }
        }
    }
    let executions = by_uid
        .into_values()
        .filter(|(_, _, c)| !c.is_empty())
        .map(|(_, h, c)| (h, c))
        .collect();
    Ok(Checked { report, executions })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn received() -> DateTime<Utc> {
        DateTime::parse_from_rfc3339("2025-03-01T10:00:30Z")
            .unwrap()
            .with_timezone(&Utc)
    }

    fn body(v: serde_json::Value) -> Vec<u8> {
        serde_json::to_vec(&v).unwrap()
    }

    #[test]
    fn unavailable_entries_are_checked_naming_the_field() {
        let with = |u: serde_json::Value| {
            let mut b = good();
            b["unavailable"] = u;
            parse(&body(b)).and_then(|r| check(r, received()))
        };
        let entry = json!({"uid": "u1", "namespace": "tenant-a", "name": "h", "generation": 2, "error": "matcher: bad regex"});
        let ok = with(json!([entry.clone()])).unwrap();
        assert_eq!(ok.report.unavailable.unwrap()[0].generation, 2);
        assert_eq!(with(json!([])).unwrap().report.unavailable, Some(vec![]));
        let mut e = entry.clone();
        e["generation"] = json!(0);
        assert!(
            with(json!([e]))
                .unwrap_err()
                .starts_with("unavailable[0].generation:")
        );
        let mut e = entry.clone();
        e["error"] = json!("x".repeat(1025));
        assert!(
            with(json!([e]))
                .unwrap_err()
                .starts_with("unavailable[0].error:")
        );
        let mut e = entry.clone();
        e["error"] = json!(" ");
        assert!(
            with(json!([entry.clone(), e]))
                .unwrap_err()
                .starts_with("unavailable[1].error:")
        );
        let mut e = entry;
        e["namespace"] = json!("Not_A_Label");
        assert!(
            with(json!([e]))
                .unwrap_err()
                .starts_with("unavailable[0].namespace:")
        );
    }

    fn good() -> serde_json::Value {
        json!({
            "dispatcher": "d1",
            "reportId": "r1",
            "trips": [{
                "uid": "u1", "namespace": "ns", "name": "h", "generation": 2, "tenant": "acme",
                "trippedAt": "2025-03-01T10:00:00Z", "failClosed": true,
                "reason": "5 timeouts and 0 errors of the handler in a row"
            }],
            "closes": [{
                "uid": "u1", "namespace": "ns", "name": "h", "generation": 2, "tenant": "acme",
                "openedAt": "2025-03-01T09:59:00Z", "closedAt": "2025-03-01T10:00:00Z"
            }],
            "executions": [
                {"uid": "u1", "namespace": "ns", "name": "h", "allow": 2, "block": 5,
                 "lastExecutionTime": "2025-03-01T10:00:00Z", "lastDecision": "block"},
                {"uid": "u2", "namespace": "ns", "name": "g"},
                {"uid": "u1", "namespace": "ns", "name": "h", "allow": 1}
            ]
        })
    }

    fn refusal(v: serde_json::Value) -> String {
        match parse(&body(v)) {
            Err(e) => e,
            Ok(r) => check(r, received()).unwrap_err(),
        }
    }

    #[test]
    fn a_good_report_merges_its_counts_per_hook() {
        let c = check(parse(&body(good())).unwrap(), received()).unwrap();
        assert_eq!(c.report.trips.len(), 1);
        assert_eq!(c.executions.len(), 1, "u2 has nothing to write");
        let (hook, counts) = &c.executions[0];
        assert_eq!((hook.uid.as_str(), hook.name.as_str()), ("u1", "h"));
        assert_eq!((counts.allow, counts.block), (3, 5));
        assert_eq!(counts.last_decision.as_deref(), Some("block"));
        let minimal = check(
            parse(br#"{"dispatcher":"d","reportId":"r"}"#).unwrap(),
            received(),
        )
        .unwrap();
        assert!(minimal.report.trips.is_empty() && minimal.executions.is_empty());
    }

    #[test]
    fn refusals_name_the_field() {
        let cases: Vec<(serde_json::Value, &str)> = vec![
            (json!({"reportId": "r"}), "body: missing field `dispatcher`"),
            (
                json!({"dispatcher": "", "reportId": "r"}),
                "dispatcher: required",
            ),
            (
                json!({"dispatcher": "d", "reportId": "x".repeat(129)}),
                "reportId: 129 bytes",
            ),
            (
                json!({"dispatcher": "d\n", "reportId": "r"}),
                "dispatcher: holds control",
            ),
            (
                {
                    let mut v = good();
                    v["trips"][0]["generation"] = json!("two");
                    v
                },
                "trips[0].generation: invalid type",
            ),
            (
                {
                    let mut v = good();
                    v["trips"][0]["generation"] = json!(0);
                    v
                },
                "trips[0].generation: 0 is not a generation",
            ),
            (
                {
                    let mut v = good();
                    v["trips"][0]["trippedAt"] = json!("yesterday");
                    v
                },
                "trips[0].trippedAt:",
            ),
            (
                {
                    let mut v = good();
                    v["trips"][0]["reason"] = json!(" ");
                    v
                },
                "trips[0].reason: required",
            ),
            (
                {
                    let mut v = good();
                    v["executions"][1]["allow"] = json!(-1);
                    v
                },
                "executions[1].allow: invalid value",
            ),
            (
                {
                    let mut v = good();
                    v["executions"][1]["timeout"] = json!(u64::MAX);
                    v
                },
                "executions[1].timeout: 18446744073709551615 is larger",
            ),
            (
                {
                    let mut v = good();
                    v["executions"][2]["name"] = json!("other");
                    v
                },
                "executions[2].uid: \"u1\" is also in executions[0]",
            ),
            (
                {
                    let mut v = good();
                    v["executions"][0]["lastDecision"] = json!("skip");
                    v
                },
                "executions[0].lastDecision:",
            ),
            (
                {
                    let mut v = good();
                    v["executions"][1]["namespace"] = json!("");
                    v
                },
                "executions[1].namespace: required",
            ),
            (
                {
                    let mut v = good();
                    v["executions"][1]["namespace"] = json!("Tenant_A");
                    v
                },
                "executions[1].namespace: \"Tenant_A\" is not a namespace name",
            ),
            (
                {
                    let mut v = good();
                    v["executions"][1]["name"] = json!("a/b");
                    v
                },
                "executions[1].name: \"a/b\" is not an object name",
            ),
            (
                {
                    let mut v = good();
                    v["trips"][0]["name"] = json!("-h");
                    v
                },
                "trips[0].name: \"-h\" is not an object name",
            ),
            (
                json!({"dispatcher": "d", "reportId": "r", "breaker": [{
                    "uid": "u", "namespace": "n".repeat(64), "name": "h", "generation": 1, "tenant": "t"}]}),
                "breaker[0].namespace: 64 bytes",
            ),
            (
                json!({"dispatcher": "d", "reportId": "r", "breaker": [{
                    "uid": "u", "namespace": "n", "name": "h", "generation": 1, "tenant": "t",
                    "run": [{"at": "2025-03-01T10:00:00Z"}, {"at": "soon"}]}]}),
                "breaker[0].run[1].at: \"soon\" is not an RFC 3339 time",
            ),
            (
                json!({"dispatcher": "d", "reportId": "r", "breaker": [{
                    "uid": "u", "namespace": "n", "name": "h", "generation": 1, "tenant": "t",
                    "lastAnswerAt": "x"}]}),
                "breaker[0].lastAnswerAt:",
            ),
            (
                json!({"dispatcher": "d", "reportId": "r", "breaker": [{
                    "uid": "u", "namespace": "n", "name": "h", "generation": 1}]}),
                "breaker[0]: missing field `tenant`",
            ),
            (
                json!({"dispatcher": "d", "reportId": "r", "breaker": [{
                    "uid": "u", "namespace": "n", "name": "h", "generation": 1, "tenant": ""}]}),
                "breaker[0].tenant: required, must not be empty",
            ),
            (
                {
                    let mut v = good();
                    v["trips"][0]["tenant"] = json!("t".repeat(257));
                    v
                },
                "trips[0].tenant: 257 bytes; at most 256",
            ),
            (
                {
                    let mut v = good();
                    v["trips"][0]["tenant"] = json!("a\u{7}b");
                    v
                },
                "trips[0].tenant: holds control characters",
            ),
            (
                {
                    let mut v = good();
                    v["closes"][0]["tenant"] = json!("a\nb");
                    v
                },
                "closes[0].tenant: holds control characters",
            ),
            (
                {
                    let mut v = good();
                    v["closes"][0]["openedAt"] = json!("then");
                    v
                },
                "closes[0].openedAt: \"then\" is not an RFC 3339 time",
            ),
            (
                {
                    let mut v = good();
                    v["closes"][0]["closedAt"] = json!(5);
                    v
                },
                "closes[0].closedAt: invalid type",
            ),
            (
                {
                    let mut v = good();
                    v["closes"][0]["generation"] = json!(0);
                    v
                },
                "closes[0].generation: 0 is not a generation",
            ),
            (
                {
                    let mut v = good();
                    v["closes"][0]["name"] = json!("A");
                    v
                },
                "closes[0].name: \"A\" is not an object name",
            ),
            (
                json!({"dispatcher": "d", "reportId": "r", "breaker": [{
                    "uid": "u", "namespace": "n", "name": "h", "generation": 0, "tenant": "t"}]}),
                "breaker[0].generation: 0",
            ),
        ];
        for (v, want) in cases {
            let got = refusal(v.clone());
            assert!(got.starts_with(want), "for {v}: got {got:?}, want {want:?}");
        }
        let cut = parse(b"{\"dispatcher\":").unwrap_err();
        assert!(cut.starts_with("dispatcher: EOF while parsing"), "{cut}");
        let open = parse(b"{").unwrap_err();
        assert!(open.contains("EOF while parsing"), "{open}");
        assert!(
            parse(br#"{"dispatcher":"d","reportId":"r"} x"#)
                .unwrap_err()
                .contains("trailing")
        );
        let arr = parse(b"5").unwrap_err();
        assert!(arr.contains("invalid type"), "{arr}");
    }

    #[test]
    fn kubernetes_names() {
        for ok in ["a", "tenant-acme", "0abc", &"a".repeat(63)] {
            assert!(is_dns_label(ok), "{ok}");
        }
        for bad in ["", "-a", "a-", "A", "a.b", "a_b", &"a".repeat(64)] {
            assert!(!is_dns_label(bad), "{bad}");
        }
        for ok in [
            "h",
            "block.exec-1",
            "a.b.c",
            &format!("{}.{}", "a".repeat(63), "b"),
        ] {
            assert!(is_dns_subdomain(ok), "{ok}");
        }
        for bad in ["", ".a", "a.", "a..b", "a/b", "Hook", &"a.".repeat(127)] {
            assert!(!is_dns_subdomain(bad), "{bad}");
        }
    }

    #[test]
    fn future_and_ancient_trip_and_execution_times_are_the_receipt_time() {
        let mut v = good();
        v["trips"][0]["trippedAt"] = json!("9999-12-31T23:59:59Z");
        v["closes"][0]["openedAt"] = json!("9999-12-31T23:59:59Z");
        v["closes"][0]["closedAt"] = json!("1970-01-01T00:00:00Z");
        v["executions"][0]["lastExecutionTime"] = json!("9999-12-31T23:59:59Z");
        let c = check(parse(&body(v)).unwrap(), received()).unwrap();
        assert_eq!(c.report.trips[0].tripped_at, "2025-03-01T10:00:30Z");
        assert_eq!(c.report.closes[0].opened_at, "2025-03-01T10:00:30Z");
        assert_eq!(c.report.closes[0].closed_at, "2025-03-01T10:00:30Z");
        assert_eq!(c.executions[0].1.last_time, Some(received()));
        let mut v = good();
        v["trips"][0]["trippedAt"] = json!("1999-12-31T23:59:59Z");
        v["executions"][0]["lastExecutionTime"] = json!("2025-03-01T10:00:31Z");
        let c = check(parse(&body(v)).unwrap(), received()).unwrap();
        assert_eq!(c.report.trips[0].tripped_at, "2025-03-01T10:00:30Z");
        assert_eq!(
            c.executions[0]
                .1
                .last_time
                .map(super::super::executions::format_time),
            Some("2025-03-01T10:00:31Z".to_string()),
            "within the skew: kept"
        );
        let c = check(parse(&body(good())).unwrap(), received()).unwrap();
        assert_eq!(
            c.report.trips[0].tripped_at, "2025-03-01T10:00:00Z",
            "a plausible time is kept as sent"
        );
        assert_eq!(c.report.closes[0].opened_at, "2025-03-01T09:59:00Z");
        assert_eq!(
            (
                c.report.trips[0].tenant.as_str(),
                c.report.trips[0].fail_closed
            ),
            ("acme", true)
        );
    }
}
