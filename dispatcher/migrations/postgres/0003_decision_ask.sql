-- A hook may answer `ask` (issue 16): the decision column takes it. NOT VALID then VALIDATE:
-- the new check is added without a scan under the table's exclusive lock; every stored row
-- passes it (the old set is a subset).
ALTER TABLE hook_executions DROP CONSTRAINT hook_executions_decision_check;
ALTER TABLE hook_executions ADD CONSTRAINT hook_executions_decision_check
    CHECK (decision IN ('allow', 'block', 'ask', 'error', 'timeout')) NOT VALID;
ALTER TABLE hook_executions VALIDATE CONSTRAINT hook_executions_decision_check;
