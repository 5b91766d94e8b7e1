//! One `hook_executions` row (CONTRACT §7.1; seed "Audit table"): what a hook run leaves
//! in the audit trail. Built off the decision path and written in batches (issue 5); this
//! module holds only the shape and its pure helpers, no database code.

use agenthooks_crds::event::HookEvent;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use super::error_detail::SealedDetail;
use crate::decision::outcome::Outcome;

/// The `dedup_key` column: `<hook uid>:<event_id>` (CONTRACT §7.2). Unique in the table,
/// so a retried event (or a spool replay) never writes a second row.
pub fn dedup_key(hook_uid: &str, event_id: &str) -> String {
    let mut key = String::with_capacity(hook_uid.len() + 1 + event_id.len());
    key.push_str(hook_uid);
    key.push(':');
    key.push_str(event_id);
    key
}

/// What a row's sealed `error_detail` is bound to (AES-GCM associated data): its
/// `dedup_key` without the `#<16 hex>` suffix of a reused event id
/// (`audit::store::reused_event_key`, added after sealing; `#` never occurs in an
/// event id). A detail copied onto a row of another hook or event no longer opens.
pub fn detail_binding(dedup_key: &str) -> &str {
    dedup_key.split('#').next().unwrap_or(dedup_key)
}

/// One hook run (never a dry run: `POST /v1/test` writes no row, issue 5 point 3).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AuditRow {
    /// Row id assigned by the database on insert (`None` until written); orders the
    /// history pages together with `created_at` (issue 5 point 2).
    pub id: Option<i64>,
    /// `metadata.uid` of the AgentHook at run time (CONTRACT §7.1). Kept after the hook
    /// is deleted — rows outlive their hook (CONTRACT §7.6; seed `ON DELETE SET NULL`).
    pub hook_uid: String,
    /// Namespace of the AgentHook, so rows of a deleted hook stay findable by
    /// `NS/NAME` (issue 5 point 2).
    pub hook_namespace: String,
    /// Name of the AgentHook.
    pub hook_name: String,
    /// The event's `tenant_id` (CONTRACT §1).
    pub tenant: String,
    /// The event's `session_id` (CONTRACT §1).
    pub session_id: String,
    /// The lifecycle event, snake_case (`pre_tool_use`...).
    pub event: HookEvent,
    /// [`super::input_hash::input_hash`] of the event's tool name and input
    /// (CONTRACT §7.3): 64 lowercase hex characters.
    pub input_hash: String,
    /// `allow|block|error|timeout` (CONTRACT §7.1): what the hook itself came to, before
    /// `onTimeout` or the chain apply.
    #[serde(with = "decision_word")]
    pub decision: Outcome,
    /// Wall time of the hook run in milliseconds.
    pub duration_ms: u64,
    /// [`dedup_key`]: `<hook uid>:<event_id>` (CONTRACT §7.2), unique.
    pub dedup_key: String,
    /// [`super::redact::error_summary`] of the error: redacted, at most 256 bytes on a
    /// UTF-8 boundary (CONTRACT §7.4). `None` when the run had no error.
    pub error: Option<String>,
    /// The full error, AES-256-GCM sealed with its key id (CONTRACT §7.4). `None` when the
    /// run had no error or no audit key is configured (never stored in plain text).
    pub error_detail: Option<SealedDetail>,
    /// JSON object of [`AuditMetadata`] (CONTRACT §7.5; seed "Audit table"). A plain
    /// value so rows written by other versions, with other keys, still read back.
    pub metadata: serde_json::Value,
    /// When the run finished (UTC).
    pub created_at: DateTime<Utc>,
}

/// The `metadata` keys of CONTRACT §7.5, each present only where it applies.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct AuditMetadata {
    /// Whether the hook's tool matcher matched (all handlers).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub matcher_matched: Option<bool>,
    /// Result of the hook's CEL filter, when it has one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cel_eval_result: Option<bool>,
    /// Bytes the command wrote to stdout (command handler).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stdout_len: Option<u64>,
    /// HTTP status of the hook's answer (http handler).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub http_status: Option<u16>,
    /// Model that evaluated the prompt (prompt handler).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub prompt_model: Option<String>,
    /// Tokens charged for the prompt (prompt handler; CONTRACT §5.5).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub prompt_tokens: Option<u64>,
    /// Whether the prompt handler detected an injection attempt in the fenced input.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub injection_detected: Option<bool>,
    /// W3C trace id (32 lowercase hex) of the run's span, when traced (CONTRACT §8.1).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub trace_id: Option<String>,
    /// The authenticated caller that sent the event (CONTRACT §9.1): a callers file's
    /// `name`, a Kubernetes user name, or `anonymous`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub caller: Option<String>,
    /// The hook's `enforcementAction` when it is not `enforce` (`warn`, `dryrun`): the row's
    /// `decision` is then what the hook would have decided (issue 16).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enforcement_action: Option<String>,
    /// The `HookApproval` an `ask` became (its name in the hook's namespace).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub approval_id: Option<String>,
    /// Where it stood for this call: `Pending`, `Approved`, `Rejected`, `Expired`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub approval_state: Option<String>,
}

impl AuditMetadata {
    /// The JSON object stored in [`AuditRow::metadata`]; absent keys are left out.
    pub fn to_value(&self) -> serde_json::Value {
        serde_json::to_value(self).unwrap_or_else(|_| serde_json::Value::Object(Default::default()))
    }
}

/// An `AuditRow::decision` word that is not `allow|block|error|timeout`.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("unknown audit decision {0:?}: expected allow, block, ask, error or timeout")]
pub struct UnknownDecision(pub String);

/// Parses a stored decision word (CONTRACT §7.1).
pub fn parse_decision(word: &str) -> Result<Outcome, UnknownDecision> {
    match word {
        "allow" => Ok(Outcome::Allow),
        "block" => Ok(Outcome::Block),
        "error" => Ok(Outcome::Error),
        "timeout" => Ok(Outcome::Timeout),
        "ask" => Ok(Outcome::Ask),
        other => Err(UnknownDecision(other.to_owned())),
    }
}

/// `Outcome` as its lowercase word, both ways.
mod decision_word {
    use serde::{Deserialize, Deserializer, Serializer};

    use crate::handlers::Outcome;

    pub fn serialize<S: Serializer>(o: &Outcome, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(o.as_str())
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Outcome, D::Error> {
        let word = String::deserialize(d)?;
        super::parse_decision(&word).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::audit::error_detail::ErrorDetailKey;
    use crate::audit::input_hash::input_hash;
    use crate::audit::redact::error_summary;
    use serde_json::json;

    #[test]
    fn dedup_key_is_uid_colon_event_id() {
        assert_eq!(dedup_key("6f1c-uid", "evt-42"), "6f1c-uid:evt-42");
        assert_eq!(dedup_key("", ""), ":");
    }

    #[test]
    fn metadata_keeps_only_what_applies() {
        let m = AuditMetadata {
            matcher_matched: Some(true),
            http_status: Some(503),
            trace_id: Some("4bf92f3577b34da6a3ce929d0e0e4736".into()),
            ..Default::default()
        };
        assert_eq!(
            m.to_value(),
            json!({"matcher_matched": true, "http_status": 503, "trace_id": "4bf92f3577b34da6a3ce929d0e0e4736"})
        );
        assert_eq!(AuditMetadata::default().to_value(), json!({}));
    }

    #[test]
    fn decision_words_parse_and_reject() {
        for o in [
            Outcome::Allow,
            Outcome::Block,
            Outcome::Ask,
            Outcome::Error,
            Outcome::Timeout,
        ] {
            assert_eq!(parse_decision(o.as_str()), Ok(o));
        }
        assert_eq!(parse_decision("deny"), Err(UnknownDecision("deny".into())));
    }

    #[test]
    fn a_row_round_trips_through_json_with_the_contract_words() {
        let key = ErrorDetailKey::generate("k1").unwrap();
        let full = "HTTP 500 from https://hooks.example: token for bob@example.com";
        let row = AuditRow {
            id: None,
            hook_uid: "uid-1".into(),
            hook_namespace: "team-a".into(),
            hook_name: "deny-rm".into(),
            tenant: "acme".into(),
            session_id: "s-1".into(),
            event: HookEvent::PreToolUse,
            input_hash: input_hash("Bash", &json!({"command": "rm -rf /"})),
            decision: Outcome::Timeout,
            duration_ms: 5_000,
            dedup_key: dedup_key("uid-1", "evt-1"),
            error: Some(error_summary(full)),
            error_detail: Some(key.seal(full, "uid-1:evt-1")),
            metadata: AuditMetadata {
                matcher_matched: Some(true),
                ..Default::default()
            }
            .to_value(),
            created_at: DateTime::parse_from_rfc3339("2026-11-30T06:00:00Z")
                .unwrap()
                .with_timezone(&Utc),
        };
        let v = serde_json::to_value(&row).unwrap();
        assert_eq!(v["decision"], "timeout");
        assert_eq!(v["event"], "pre_tool_use");
        assert_eq!(v["dedup_key"], "uid-1:evt-1");
        assert_eq!(
            v["error"],
            "HTTP 500 from https://hooks.example: token for [REDACTED]"
        );
        assert_eq!(v["error_detail"]["key_id"], "k1");
        assert!(!v.to_string().contains("bob@example.com"));
        let back: AuditRow = serde_json::from_value(v).unwrap();
        assert_eq!(back, row);
        assert_eq!(
            key.open(
                back.error_detail.as_ref().unwrap(),
                detail_binding(&back.dedup_key)
            )
            .unwrap(),
            full
        );

        let mut bad = serde_json::to_value(&row).unwrap();
        bad["decision"] = json!("deny");
        assert!(serde_json::from_value::<AuditRow>(bad).is_err());
    }
}
