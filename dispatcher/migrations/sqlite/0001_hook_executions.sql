-- hook_executions: one row per hook run (CONTRACT §7.1; seed "Audit table").
-- No foreign key to the hooks: rows outlive their hook (CONTRACT §7.6; seed ON DELETE SET NULL)
-- and stay findable by hook_namespace/hook_name.
-- created_at is UTC text of fixed width, 'YYYY-MM-DDTHH:MM:SS.ffffffZ', so it sorts and
-- compares (`since`) as time. metadata is a JSON object as text. error_detail is the
-- AES-256-GCM ciphertext (base64) of the full error and error_detail_key_id the id of the key
-- that sealed it (CONTRACT §7.4): never plain text.
CREATE TABLE hook_executions (
    id                  INTEGER PRIMARY KEY AUTOINCREMENT,
    hook_uid            TEXT    NOT NULL,
    hook_namespace      TEXT    NOT NULL,
    hook_name           TEXT    NOT NULL,
    tenant              TEXT    NOT NULL,
    session_id          TEXT    NOT NULL,
    event               TEXT    NOT NULL,
    input_hash          TEXT    NOT NULL,
    decision            TEXT    NOT NULL CHECK (decision IN ('allow', 'block', 'error', 'timeout')),
    duration_ms         INTEGER NOT NULL CHECK (duration_ms >= 0),
    dedup_key           TEXT    NOT NULL UNIQUE,
    error               TEXT,
    error_detail        TEXT,
    error_detail_key_id TEXT,
    metadata            TEXT    NOT NULL DEFAULT '{}' CHECK (json_valid(metadata)),
    created_at          TEXT    NOT NULL CHECK (length(created_at) = 27),
    CHECK ((error_detail IS NULL) = (error_detail_key_id IS NULL))
) STRICT;

-- GET /v1/executions?hook=NS/NAME (newest first, cursor id < N).
CREATE INDEX hook_executions_hook_idx ON hook_executions (hook_namespace, hook_name, id);
-- ?decision=block
CREATE INDEX hook_executions_decision_idx ON hook_executions (decision, id);
-- ?since=...
CREATE INDEX hook_executions_created_at_idx ON hook_executions (created_at);
