-- A hook may answer `ask` (issue 16): the decision column takes it. SQLite cannot change a
-- CHECK in place, so the table is rebuilt in this migration's transaction: every row copied
-- with its id (AUTOINCREMENT's counter follows the largest), then the indexes of 0001 and 0002.
CREATE TABLE hook_executions_new (
    id                  INTEGER PRIMARY KEY AUTOINCREMENT,
    hook_uid            TEXT    NOT NULL,
    hook_namespace      TEXT    NOT NULL,
    hook_name           TEXT    NOT NULL,
    tenant              TEXT    NOT NULL,
    session_id          TEXT    NOT NULL,
    event               TEXT    NOT NULL,
    input_hash          TEXT    NOT NULL,
    decision            TEXT    NOT NULL CHECK (decision IN ('allow', 'block', 'ask', 'error', 'timeout')),
    duration_ms         INTEGER NOT NULL CHECK (duration_ms >= 0),
    dedup_key           TEXT    NOT NULL UNIQUE,
    error               TEXT,
    error_detail        TEXT,
    error_detail_key_id TEXT,
    metadata            TEXT    NOT NULL DEFAULT '{}' CHECK (json_valid(metadata)),
    created_at          TEXT    NOT NULL CHECK (length(created_at) = 27),
    CHECK ((error_detail IS NULL) = (error_detail_key_id IS NULL))
) STRICT;

INSERT INTO hook_executions_new SELECT * FROM hook_executions;
DROP TABLE hook_executions;
ALTER TABLE hook_executions_new RENAME TO hook_executions;

CREATE INDEX hook_executions_hook_idx ON hook_executions (hook_namespace, hook_name, id);
CREATE INDEX hook_executions_decision_idx ON hook_executions (decision, id);
CREATE INDEX hook_executions_created_at_idx ON hook_executions (created_at);
CREATE INDEX hook_executions_namespace_idx ON hook_executions (hook_namespace, id);
