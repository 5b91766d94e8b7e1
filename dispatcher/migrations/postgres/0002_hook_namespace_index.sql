-- GET /v1/executions?namespace=NS (CONTRACT §9.5: a tenant reads its own namespace's rows),
-- newest first, cursor id < N: walked from the newest row of NS, never sorting all of NS's
-- rows (hook_executions_hook_idx orders by hook_name first).
CREATE INDEX hook_executions_namespace_idx ON hook_executions (hook_namespace, id DESC);
