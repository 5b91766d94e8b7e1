-- Issue 15 goal 7 (audit at rate): fewer and cheaper index entries per inserted row, for the
-- same history queries (GET /v1/executions: push_list_sql in dispatcher/src/audit/store).
-- Before: 6 btrees per row (id, dedup_key, hook, namespace, decision, created_at). After: 3
-- btrees per row (id, dedup_key, namespace) + 1 btree entry for rows that are not allows + a
-- BRIN on created_at (an entry per 128 pages, not per row). No row is touched.
--
-- On a large table each CREATE INDEX below holds a SHARE lock (inserts wait) while it builds;
-- dispatchers whose writes time out meanwhile spool their rows and replay them later. To
-- avoid the pause, create the three indexes by hand first with CREATE INDEX CONCURRENTLY and
-- the same names and definitions: the IF NOT EXISTS below then makes this migration a few
-- catalog changes. (CONCURRENTLY cannot run here: the migration runs in a transaction, and
-- replicas waiting on sqlx's migration lock would deadlock with it.)

-- ?namespace=NS and ?hook=NS/NAME, newest first, cursor id < N: one index for both. A
-- backward scan of NS's entries in id order; for ?hook= the hook_name column is checked in
-- the index entry (an Index Cond), so rows of the namespace's other hooks are skipped without
-- reading the table. Ascending id: new rows go at the end of their namespace's run of entries,
-- where btree splits leave pages full (a descending id inserts at the run's start: every split
-- is 50/50 and leaves half-empty pages behind).
CREATE INDEX IF NOT EXISTS hook_executions_namespace_id_idx
    ON hook_executions (hook_namespace, id, hook_name);

-- ?decision=block|error|timeout: rare decisions, indexed alone. ?decision=allow walks the
-- primary key newest first (allows are most rows, so a page fills after few rows). The query
-- names the decision as a literal, so the planner can prove the predicate (a bound parameter
-- hides the value from a generic plan).
CREATE INDEX IF NOT EXISTS hook_executions_rare_decision_idx
    ON hook_executions (decision, id) WHERE decision <> 'allow';

-- ?since=...: rows are appended in about created_at order (a batch's rows within ~0.1 s of one
-- another; spool replays after an outage come late and widen their block range's span, which
-- costs selectivity, never a row). autosummarize: autovacuum summarizes each filled range;
-- unsummarized ranges are always scanned.
CREATE INDEX IF NOT EXISTS hook_executions_created_at_brin
    ON hook_executions USING brin (created_at) WITH (autosummarize = on);

DROP INDEX IF EXISTS hook_executions_hook_idx;
DROP INDEX IF EXISTS hook_executions_namespace_idx;
DROP INDEX IF EXISTS hook_executions_decision_idx;
DROP INDEX IF EXISTS hook_executions_created_at_idx;
