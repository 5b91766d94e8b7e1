//! [`RunRecord`] → [`AuditRow`], in the audit writer (off the decision path): parses the
//! event JSON the hook saw for its ids and tool, hashes the input (CONTRACT §7.3),
//! redacts and cuts the error (§7.4), seals the full error with the current key (§7.4)
//! and fills `metadata` (§7.5).

use agenthooks_crds::agenthook::EnforcementAction;
use serde::Deserialize;
use serde_json::Value;

use super::error_detail::ErrorDetailKeys;
use super::input_hash::input_hash;
use super::redact::error_summary;
use super::row::{AuditMetadata, AuditRow, dedup_key, detail_binding};
use super::sink::RunRecord;

/// The parts of the event JSON a row needs.
#[derive(Deserialize, Default)]
struct EventView {
    #[serde(default)]
    event_id: String,
    #[serde(default)]
    session_id: String,
    #[serde(default)]
    tenant_id: String,
    #[serde(default)]
    tool_name: Option<String>,
    #[serde(default)]
    tool_input: Option<Value>,
}

/// PostgreSQL text and JSONB refuse NUL characters; a NUL in an event id or session id
/// must not make a whole batch unwritable. Replaced by U+FFFD.
fn no_nul(s: String) -> String {
    if s.contains('\0') {
        s.replace('\0', "\u{FFFD}")
    } else {
        s
    }
}

/// Builds the row of one run. `keys`: seal the full error with the current key; without
/// keys no `error_detail` is stored (issue 5 point 5). Never fails: an event JSON that
/// does not parse (it always does: the dispatcher serialized it) gives empty ids and
/// the hash of an empty input.
pub fn build_row(run: &RunRecord, keys: Option<&ErrorDetailKeys>) -> AuditRow {
    let view: EventView = serde_json::from_slice(&run.event_json).unwrap_or_default();
    let empty = Value::Object(Default::default());
    let hash = input_hash(
        view.tool_name.as_deref().unwrap_or(""),
        view.tool_input.as_ref().unwrap_or(&empty),
    );
    let hook = &run.hook;
    let event_id = no_nul(view.event_id);
    let dedup_key = dedup_key(&hook.uid, &event_id);
    let (error, error_detail) = match &run.error {
        Some(full) => (
            Some(no_nul(error_summary(full))),
            keys.map(|k| k.seal(full, detail_binding(&dedup_key))),
        ),
        None => (None, None),
    };
    let prompt = run.facts.prompt.as_ref();
    let metadata = AuditMetadata {
        matcher_matched: run.facts.matcher_matched,
        cel_eval_result: run.facts.cel_eval_result,
        stdout_len: run.facts.stdout_len,
        http_status: run.facts.http_status,
        prompt_model: prompt.and_then(|p| p.model.clone()).map(no_nul),
        prompt_tokens: prompt.and_then(|p| p.tokens).map(|t| t.max(0) as u64),
        injection_detected: prompt.and_then(|p| p.injection_detected),
        trace_id: run.trace_id.clone(),
        caller: run.facts.caller.as_deref().map(|c| no_nul(c.to_owned())),
        approval_id: run
            .facts
            .approval
            .as_ref()
            .map(|(id, _)| no_nul(id.clone())),
        approval_state: run.facts.approval.as_ref().map(|(_, s)| (*s).to_owned()),
        enforcement_action: match hook.compiled.enforcement_action {
            EnforcementAction::Enforce => None,
            other => Some(other.as_str().to_owned()),
        },
    };
    AuditRow {
        id: None,
        hook_uid: hook.uid.clone(),
        hook_namespace: hook.namespace.clone(),
        hook_name: hook.name.clone(),
        tenant: no_nul(view.tenant_id),
        session_id: no_nul(view.session_id),
        event: run.event,
        input_hash: hash,
        decision: run.outcome,
        duration_ms: run.duration.as_millis() as u64,
        dedup_key,
        error,
        error_detail,
        metadata: metadata.to_value(),
        created_at: run.finished_at,
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use super::*;
    use crate::audit::error_detail::ErrorDetailKey;
    use crate::audit::sink::RunFacts;
    use crate::handlers::Outcome;
    use crate::handlers::prompt::PromptMetadata;
    use crate::hookset::{HookSet, LoadedHook};
    use agenthooks_crds::Edition;
    use agenthooks_crds::HookEvent;
    use agenthooks_crds::snapshot::SnapshotHook;
    use bytes::Bytes;
    use chrono::{TimeZone, Utc};
    use serde_json::json;

    /// A loaded http hook `team-a/h` (uid `uid-h`) with a matcher.
    pub(crate) fn hook() -> Arc<LoadedHook> {
        let spec = "event: pre_tool_use\nmatcher: '^Bash$'\nhandler: {type: http, http: {url: 'http://127.0.0.1:1/h'}}\n";
        let source = SnapshotHook {
            uid: "uid-h".into(),
            namespace: "team-a".into(),
            name: "h".into(),
            generation: 1,
            created_at: "2026-01-01T00:00:00Z".into(),
            namespace_tenant: "acme".into(),
            spec: serde_norway::from_str(spec).unwrap(),
            sealed_headers: vec![],
            open_breakers: Vec::new(),
            reset_token: None,
        };
        let (set, rejected) =
            HookSet::build(vec![source], "agenthooks-system", Edition::Lite, 1, None);
        assert!(rejected.is_empty(), "{rejected:?}");
        Arc::clone(set.iter().next().unwrap())
    }

    /// A record of `hook()` for event `event_id`.
    pub(crate) fn record(event_id: &str, outcome: Outcome, error: Option<&str>) -> RunRecord {
        let event = json!({"event": "pre_tool_use", "event_id": event_id, "session_id": "s-1",
            "tenant_id": "acme", "agent_id": "a", "tool_name": "Bash",
            "tool_input": {"command": "ls", "args": {"b": 1, "a": 2}}});
        RunRecord {
            hook: hook(),
            event: HookEvent::PreToolUse,
            event_json: Bytes::from(serde_json::to_vec(&event).unwrap()),
            outcome,
            duration: Duration::from_micros(12_700),
            // A fixed time: `Utc::now()` serializes with 0, 3, 6 or 9 fractional digits
            // (chrono's AutoSi), so the spool tests' line lengths would vary.
            finished_at: Utc.timestamp_opt(1_764_000_000, 123_456_789).unwrap(),
            error: error.map(str::to_owned),
            facts: RunFacts {
                matcher_matched: Some(true),
                http_status: Some(200),
                ..Default::default()
            },
            trace_id: None,
        }
    }

    #[test]
    fn the_caller_goes_into_the_metadata() {
        let mut rec = record("evt-1", Outcome::Allow, None);
        assert!(build_row(&rec, None).metadata.get("caller").is_none());
        rec.facts.caller = Some(Arc::from("system:serviceaccount:tenant-acme:runtime"));
        let row = build_row(&rec, None);
        assert_eq!(
            row.metadata["caller"],
            "system:serviceaccount:tenant-acme:runtime"
        );
    }

    #[test]
    fn a_row_carries_the_event_ids_hash_and_metadata() {
        let rec = record("evt-1", Outcome::Allow, None);
        let row = build_row(&rec, None);
        assert_eq!(row.hook_uid, "uid-h");
        assert_eq!(
            (row.hook_namespace.as_str(), row.hook_name.as_str()),
            ("team-a", "h")
        );
        assert_eq!(
            (row.tenant.as_str(), row.session_id.as_str()),
            ("acme", "s-1")
        );
        assert_eq!(row.dedup_key, "uid-h:evt-1");
        assert_eq!(
            row.input_hash,
            input_hash("Bash", &json!({"args": {"a": 2, "b": 1}, "command": "ls"}))
        );
        assert_eq!(row.decision, Outcome::Allow);
        assert_eq!(row.duration_ms, 12);
        assert_eq!((row.error, row.error_detail), (None, None));
        assert_eq!(
            row.metadata,
            json!({"matcher_matched": true, "http_status": 200})
        );
        assert_eq!(row.created_at, rec.finished_at);
    }

    #[test]
    fn errors_are_redacted_cut_and_sealed_only_with_a_key() {
        let full = format!(
            "HTTP 500 from hook: bearer abcdefghijklmnopqrstuvwxyz012345 for bob@example.com {}",
            "x".repeat(400)
        );
        let rec = record("evt-2", Outcome::Error, Some(&full));
        let without = build_row(&rec, None);
        assert_eq!(
            without.error.as_deref(),
            Some(error_summary(&full).as_str())
        );
        let error = without.error.as_deref().unwrap();
        assert!(error.len() <= 256);
        assert!(
            error.starts_with("HTTP 500 from hook: bearer [REDACTED] for [REDACTED] xxx"),
            "{error}"
        );
        assert!(!error.contains("bob@example.com") && !error.contains("abcdefghijklmnop"));
        assert_eq!(without.error_detail, None);

        let keys = ErrorDetailKeys::new(
            ErrorDetailKey::generate("k2").unwrap(),
            vec![ErrorDetailKey::generate("k1").unwrap()],
        )
        .unwrap();
        let with = build_row(&rec, Some(&keys));
        let sealed = with.error_detail.unwrap();
        assert_eq!(sealed.key_id, "k2");
        assert_eq!(keys.open(&sealed, &with.dedup_key).unwrap(), full);
    }

    #[test]
    fn prompt_facts_and_trace_id_fill_metadata() {
        let mut rec = record("evt-3", Outcome::Block, Some("blocked"));
        rec.facts = RunFacts {
            cel_eval_result: Some(true),
            prompt: Some(PromptMetadata {
                model: Some("gpt-4o-mini".into()),
                tokens: Some(321),
                injection_detected: Some(false),
                cache_hit: false,
                rewrite_denied: false,
            }),
            ..Default::default()
        };
        rec.trace_id = Some("4bf92f3577b34da6a3ce929d0e0e4736".into());
        let row = build_row(&rec, None);
        assert_eq!(
            row.metadata,
            json!({"cel_eval_result": true, "prompt_model": "gpt-4o-mini", "prompt_tokens": 321,
                   "injection_detected": false, "trace_id": "4bf92f3577b34da6a3ce929d0e0e4736"})
        );
        assert_eq!(row.error.as_deref(), Some("blocked"));
    }

    #[test]
    fn nul_characters_never_reach_the_database() {
        let mut rec = record("evt\u{0}4", Outcome::Allow, None);
        let mut v: Value = serde_json::from_slice(&rec.event_json).unwrap();
        v["session_id"] = json!("s\u{0}1");
        rec.event_json = Bytes::from(serde_json::to_vec(&v).unwrap());
        let row = build_row(&rec, None);
        assert_eq!(row.dedup_key, "uid-h:evt\u{FFFD}4");
        assert_eq!(row.session_id, "s\u{FFFD}1");
    }
}
