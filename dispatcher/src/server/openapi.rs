//! The OpenAPI 3.1 document of every route of [`super::router`], served at
//! `GET /openapi.json` and committed as [`COMMITTED_PATH`].
//!
//! Generated, not written: every request and response body, query and path parameter is
//! the JSON Schema (2020-12, the dialect of OpenAPI 3.1) that `schemars` derives from the
//! Rust type the route reads or answers — [`crate::event::Event`],
//! [`crate::chain::Decision`], [`crate::dry_run::DryRunReport`], the bodies of
//! [`super::bodies`], [`crate::audit::store::ExecutionParams`], ... Request types are
//! described as they deserialize, response types as they serialize (so a key that is
//! always written is `required`). What is written here by hand is only the routes, their
//! statuses and the words around them.
//!
//! `cargo run -p agenthooks-dispatcher -- openapi --write` (`make openapi`) writes
//! [`COMMITTED_PATH`]; a test fails when the committed file differs from [`text`].

use std::sync::LazyLock;

use axum::http::header;
use axum::response::{IntoResponse, Response};
use schemars::JsonSchema;
use schemars::generate::{SchemaGenerator, SchemaSettings};
use serde_json::{Map, Value, json};

use super::bodies::{ClientError, HookList, Readiness, ServerError};
use super::dry_run::TestRequest;
use super::executions::{DetailParams, ExecutionDetail, ExecutionPage, RowId};
use crate::audit::store::ExecutionParams;
use crate::chain::Decision;
use crate::dialect::{CallOptions, Dialect, NativePayload};
use crate::dry_run::DryRunReport;
use crate::event::Event;

/// Where the document is committed, from the workspace root.
pub const COMMITTED_PATH: &str = "docs/openapi.json";

/// The command that rewrites [`COMMITTED_PATH`] (from the workspace root).
pub const REGENERATE: &str = "make openapi (cargo run -p agenthooks-dispatcher -- openapi --write)";

/// The document as served: built once, on the first request.
static DOCUMENT: LazyLock<Vec<u8>> = LazyLock::new(|| text().into_bytes());

/// `GET /openapi.json`: the document, `application/json`.
pub(super) async fn serve() -> Response {
    (
        [(header::CONTENT_TYPE, "application/json")],
        DOCUMENT.as_slice(),
    )
        .into_response()
}

/// The document as committed: pretty JSON (2-space indent) with a final newline.
pub fn text() -> String {
    let mut s = serde_json::to_string_pretty(&document()).expect("a JSON value serializes");
    s.push('\n');
    s
}

/// The OpenAPI 3.1 document of the dispatcher's HTTP API.
///
/// # Panics
/// When two Rust types give different schemas under one component name (a test builds
/// the document, so this fails there first).
pub fn document() -> Value {
    let mut s = Schemas::new();
    let paths = paths(&mut s);
    json!({
        "openapi": "3.1.0",
        "jsonSchemaDialect": "https://json-schema.org/draft/2020-12/schema",
        "info": {
            "title": "agenthooks dispatcher",
            "version": env!("CARGO_PKG_VERSION"),
            "summary": "Lifecycle hooks for LLM agents: the decision service that agent runtimes ask before a tool call runs or a prompt enters the pipeline.",
            "description": "Every route of `agenthooks-dispatcher`. Every 4xx answers `{\"error\", \"field\"}` (ClientError) with `field` naming the part of the request at fault; every 5xx answers ServerError, which a caller of a decision route treats as `block`. Any route but `/healthz` and `/metrics` may answer 503 at once when the port serves `--max-concurrent-requests` already. Generated from the Rust types (`dispatcher/src/server/openapi.rs`); docs/api.md.",
            "license": {"name": "Apache-2.0", "identifier": "Apache-2.0"},
        },
        "tags": [
            {"name": "decisions", "description": "An agent runtime asks what to do."},
            {"name": "history", "description": "Audit history and dry runs (the admin token standalone, Kubernetes RBAC in a cluster)."},
            {"name": "service", "description": "Probes, metrics and this document; no credential."},
        ],
        "paths": paths,
        "components": {
            "schemas": s.finish(),
            "securitySchemes": {
                "caller": {
                    "type": "http",
                    "scheme": "bearer",
                    "description": "The caller's token: one listed in `--callers-file` (standalone), or a projected ServiceAccount token for the audience `agenthooks.io` (`--kubernetes-callers`). Not asked with `--allow-anonymous`. docs/callers.md.",
                },
                "admin": {
                    "type": "http",
                    "scheme": "bearer",
                    "description": "Standalone: the admin token of `--admin-token-file` (403 without it). With `--kubernetes-callers`: the caller's Kubernetes token (401 without a valid one), authorized by RBAC on `agenthooks/executions` (`list`, `get`) or `agenthooks/test` (`create`) in the namespace read (403 naming the parameter that chose it).",
                },
            },
        },
    })
}

/// The schemas of one document: request types as they deserialize, response types as
/// they serialize, all under `#/components/schemas`.
struct Schemas {
    requests: SchemaGenerator,
    responses: SchemaGenerator,
}

impl Schemas {
    fn settings() -> SchemaSettings {
        SchemaSettings::draft2020_12().with(|s| {
            s.definitions_path = "/components/schemas".into();
            s.meta_schema = None;
        })
    }

    fn new() -> Schemas {
        Schemas {
            requests: Schemas::settings().for_deserialize().into_generator(),
            responses: Schemas::settings().for_serialize().into_generator(),
        }
    }

    /// The schema of `T` as a request body reads it (a `$ref` for a named type).
    fn request<T: JsonSchema + ?Sized>(&mut self) -> Value {
        self.requests.subschema_for::<T>().to_value()
    }

    /// The schema of `T` as a response writes it (a `$ref` for a named type).
    fn response<T: JsonSchema + ?Sized>(&mut self) -> Value {
        self.responses.subschema_for::<T>().to_value()
    }

    /// One parameter `in` the query or path per property of `T` (a struct), inlined:
    /// required when `T` requires it, its description lifted to the parameter, `null`
    /// taken out of its type (a parameter is absent, never null).
    fn parameters<T: JsonSchema>(&mut self, location: &str) -> Vec<Value> {
        let mut inline = Schemas::settings()
            .with(|s| s.inline_subschemas = true)
            .for_deserialize()
            .into_generator();
        let schema = inline.root_schema_for::<T>().to_value();
        let required: Vec<&str> = schema["required"]
            .as_array()
            .map(|r| r.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        let Some(properties) = schema["properties"].as_object() else {
            return Vec::new();
        };
        properties
            .iter()
            .map(|(name, property)| {
                let mut property = without_null(property.clone());
                let description = property
                    .as_object_mut()
                    .and_then(|p| p.remove("description"))
                    .unwrap_or(Value::Null);
                let mut p = json!({
                    "name": name,
                    "in": location,
                    "required": location == "path" || required.contains(&name.as_str()),
                    "schema": property,
                });
                if !description.is_null() {
                    p["description"] = description;
                }
                p
            })
            .collect()
    }

    /// Every named schema, sorted by name.
    fn finish(mut self) -> Map<String, Value> {
        let mut all: Map<String, Value> = self.responses.take_definitions(true);
        for (name, schema) in self.requests.take_definitions(true) {
            match all.get(&name) {
                Some(other) if *other != schema => panic!(
                    "schema {name}: the request and response types named {name} differ; give one of them another name"
                ),
                _ => {
                    all.insert(name, schema);
                }
            }
        }
        let mut names: Vec<String> = all.keys().cloned().collect();
        names.sort();
        names
            .into_iter()
            .map(|n| {
                let v = all.remove(&n).expect("a listed name");
                (n, v)
            })
            .collect()
    }
}

/// `schema` without `null` among what it allows (`Option<T>` of a parameter).
fn without_null(mut schema: Value) -> Value {
    let Some(obj) = schema.as_object_mut() else {
        return schema;
    };
    if let Some(Value::Array(types)) = obj.get_mut("type") {
        types.retain(|t| t != "null");
        if types.len() == 1 {
            let only = types.remove(0);
            obj.insert("type".into(), only);
        }
    }
    if let Some(Value::Array(values)) = obj.get_mut("enum") {
        values.retain(|v| !v.is_null());
    }
    if let Some(Value::Array(branches)) = obj.get("anyOf").cloned() {
        let kept: Vec<Value> = branches
            .into_iter()
            .filter(|b| b.get("type") != Some(&json!("null")))
            .collect();
        obj.remove("anyOf");
        match <[Value; 1]>::try_from(kept) {
            Ok([only]) => {
                if let Value::Object(inner) = only {
                    for (k, v) in inner {
                        obj.entry(k).or_insert(v);
                    }
                }
            }
            Err(kept) => {
                obj.insert("anyOf".into(), Value::Array(kept));
            }
        }
    }
    schema
}

/// A JSON response.
fn json_body(description: &str, schema: Value) -> Value {
    json!({
        "description": description,
        "content": {"application/json": {"schema": schema}},
    })
}

/// A JSON request body.
fn request_body(description: &str, schema: Value) -> Value {
    json!({
        "required": true,
        "description": description,
        "content": {"application/json": {"schema": schema}},
    })
}

/// The error answers of a route, by status: each [`ClientError`] (a 401 with its
/// challenge) or, for a 5xx, [`ServerError`], described by `why`.
fn errors(s: &mut Schemas, why: &[(u16, &str)]) -> Map<String, Value> {
    let client = s.response::<ClientError>();
    let server = s.response::<ServerError>();
    why.iter()
        .map(|(status, description)| {
            let schema = if *status >= 500 {
                server.clone()
            } else {
                client.clone()
            };
            let mut response = json_body(description, schema);
            if *status == 401 {
                response["headers"] = json!({"WWW-Authenticate": {
                    "description": "How to authenticate.",
                    "required": true,
                    "schema": {"type": "string", "const": super::WWW_AUTHENTICATE},
                }});
            }
            (status.to_string(), response)
        })
        .collect()
}

/// A 503 shed by the concurrency limit, which every limited route may answer.
const SHED: &str = "Over `--max-concurrent-requests` on this port (answered at once, not queued; treat as `block`)";

/// The answers of a decision route besides its 200.
fn decision_errors(s: &mut Schemas, extra: &[(u16, &str)]) -> Map<String, Value> {
    let mut why: Vec<(u16, &str)> = vec![
        (
            400,
            "Invalid input: malformed JSON, a field of the wrong shape or an unknown key, an id over 256 bytes or with a control character; `field` names it. Also `tenant_id` when it is needed (a caller of several tenants) and absent.",
        ),
        (401, "No valid credential (`field: authorization`)."),
        (
            403,
            "The caller may not act for the tenant (`field: tenant_id`).",
        ),
        (408, "The body did not arrive within 10 s (`field: body`)."),
        (
            413,
            "Over a cap (`field` names where): the body over 1 MiB, or `tool_input` over 256 KiB, 32 levels or 1000 items.",
        ),
    ];
    why.extend_from_slice(extra);
    why.sort_by_key(|(status, _)| *status);
    why.push((503, "No hooks loaded yet, the API server could not be asked about the caller, or shed (`over N concurrent requests`): no decision; treat as `block`."));
    errors(s, &why)
}

/// Every route.
fn paths(s: &mut Schemas) -> Value {
    let caller = json!([{"caller": []}]);
    let admin = json!([{"admin": []}]);
    let none = json!([]);

    let mut dispatch = decision_errors(s, &[]);
    dispatch.insert(
        "200".into(),
        json_body(
            "The decision: `allow` or `block`, and each hook run.",
            s.response::<Decision>(),
        ),
    );

    let mut native = decision_errors(s, &[(404, "Not one of the dialects (`field: dialect`).")]);
    native.insert(
        "200".into(),
        json_body(
            "The runtime's own answer (docs/dialects.md). `{}` for allow (no opinion: the runtime's own rules stay in force) and for an event with no counterpart among ours. A block is the runtime's deny: Claude Code, Codex and Copilot's PascalCase hooks `{\"hookSpecificOutput\": {\"hookEventName\", \"permissionDecision\": \"deny\", \"permissionDecisionReason\"}}` for a tool call, `{\"decision\": \"block\", \"reason\"}` for a prompt, `{\"continue\": false, \"stopReason\"}` elsewhere; Gemini CLI `{\"decision\": \"deny\", \"reason\"}`; Cursor `{\"permission\": \"deny\", \"user_message\", \"agent_message\"}` (`{\"continue\": false, \"user_message\"}` for a prompt); Copilot's camelCase hooks `{\"permissionDecision\": \"deny\", \"permissionDecisionReason\"}`. A rewrite and added context go where each runtime reads them (`hookSpecificOutput.updatedInput`, `hookSpecificOutput.tool_input`, `updated_input`, `modifiedArgs`, `hookSpecificOutput.additionalContext`).",
            json!({"type": "object", "additionalProperties": true}),
        ),
    );
    let mut native_params = vec![json!({
        "name": "dialect",
        "in": "path",
        "required": true,
        "description": "The runtime's hook dialect.",
        "schema": s.request::<Dialect>(),
    })];
    native_params.extend(s.parameters::<CallOptions>("query"));

    let mut list_hooks = errors(s, &[(503, "No hooks loaded yet, or shed.")]);
    list_hooks.insert(
        "200".into(),
        json_body(
            "The hooks served and the ones this dispatcher could not load.",
            s.response::<HookList>(),
        ),
    );

    let mut executions = errors(
        s,
        &[
            (
                400,
                "An unknown, repeated or invalid query parameter (`field` names it).",
            ),
            (
                401,
                "With `--kubernetes-callers`: no valid token (`field: authorization`).",
            ),
            (
                403,
                "Standalone: not the admin token (`field: authorization`). With `--kubernetes-callers`: RBAC does not let the caller `list` `agenthooks/executions` in the namespace read (`field: namespace` or `hook`).",
            ),
            (
                503,
                "Audit is off on this dispatcher, its database has not answered (yet), the API server could not be asked, or shed.",
            ),
        ],
    );
    executions.insert(
        "200".into(),
        json_body(
            "One page of rows, newest first.",
            s.response::<ExecutionPage>(),
        ),
    );

    let mut execution = errors(
        s,
        &[
            (
                400,
                "An id that is not an integer from 1 (`field: id`), or an unknown, repeated or invalid query parameter.",
            ),
            (
                401,
                "With `--kubernetes-callers`: no valid token (`field: authorization`).",
            ),
            (
                403,
                "Standalone: not the admin token (`field: authorization`).",
            ),
            (
                404,
                "No such row, or one in a namespace the caller may not `get` `agenthooks/executions` in: the same answer (`field: id`).",
            ),
            (500, "The row could not be read back (corrupt)."),
            (
                503,
                "Audit is off on this dispatcher, its database has not answered (yet), the API server could not be asked, or shed.",
            ),
        ],
    );
    execution.insert(
        "200".into(),
        json_body("The row.", s.response::<ExecutionDetail>()),
    );
    let mut execution_params = s.parameters::<RowId>("path");
    execution_params.extend(s.parameters::<DetailParams>("query"));

    let mut test = errors(
        s,
        &[
            (
                400,
                "A bad request: `field` is the path in the request body (`hook`, `event.tool_input.a`, `spec.spec.timeoutMs`); an invalid inline spec adds `reason` and `errors`.",
            ),
            (
                401,
                "With `--kubernetes-callers`: no valid token (`field: authorization`).",
            ),
            (
                403,
                "Standalone: not the admin token (`field: authorization`). With `--kubernetes-callers`: RBAC does not let the caller `create` `agenthooks/test` in the hook's namespace (`field: hook` or `spec.metadata.namespace`).",
            ),
            (
                404,
                "`hook` is not served by this dispatcher (`field: hook`).",
            ),
            (408, "The body did not arrive within 10 s (`field: body`)."),
            (
                413,
                "Over a cap: the body over 1 MiB, or the event's `tool_input` over its caps (`field: event.tool_input…`).",
            ),
            (
                422,
                "`hook` could not be loaded by this dispatcher (`HookUnavailable`, `field: hook`).",
            ),
            (
                503,
                "No hooks loaded yet, the API server could not be asked, or shed.",
            ),
        ],
    );
    test.insert(
        "200".into(),
        json_body(
            "What the hook would decide and why. A dry run writes no audit row and touches no breaker, counter, metric, budget, per-turn cap or decision cache.",
            s.response::<DryRunReport>(),
        ),
    );

    let readiness = s.response::<Readiness>();
    let shed = s.response::<ServerError>();

    json!({
        "/v1/dispatch": {"post": {
            "operationId": "dispatch",
            "tags": ["decisions"],
            "summary": "Decide one event",
            "description": "The event in our vocabulary (CONTRACT §1.3) → `allow` or `block`. A blocking event's hooks run in order under a 10 s chain budget, the first block stops them; a non-blocking event is answered `allow` at once and its hooks run in the background. The chain outlives the connection: a client that goes away does not cut a hook run short.",
            "security": caller,
            "requestBody": request_body("The event. Unknown keys are refused.", s.request::<Event>()),
            "responses": dispatch,
        }},
        "/v1/hooks/{dialect}": {"post": {
            "operationId": "nativeHook",
            "tags": ["decisions"],
            "summary": "Decide a runtime's own hook call",
            "description": "A runtime's own hook payload (Claude Code, Codex CLI, Gemini CLI, Cursor, GitHub Copilot), answered in its own shape; identity, bounds and failures as `/v1/dispatch`. The runtime's documented fail-closed setting (or the `agenthooks-dispatcher hook` shim) turns any non-2xx into a refusal. docs/dialects.md.",
            "security": caller,
            "parameters": native_params,
            "requestBody": request_body("The runtime's own payload, a JSON object: the keys read are listed, any other is ignored.", s.request::<NativePayload>()),
            "responses": native,
        }},
        "/v1/hooks": {"get": {
            "operationId": "listHooks",
            "tags": ["service"],
            "summary": "The hooks served",
            "security": none,
            "responses": list_hooks,
        }},
        "/v1/executions": {"get": {
            "operationId": "listExecutions",
            "tags": ["history"],
            "summary": "Audit history, newest first",
            "description": "One row per hook run. Filters combine with AND; `hook` implies its namespace. Pages never shift: `nextCursor` names the last row of the page, the next page holds only older rows.",
            "security": admin,
            "parameters": s.parameters::<ExecutionParams>("query"),
            "responses": executions,
        }},
        "/v1/executions/{id}": {"get": {
            "operationId": "getExecution",
            "tags": ["history"],
            "summary": "One audit row",
            "security": admin,
            "parameters": execution_params,
            "responses": execution,
        }},
        "/v1/test": {"post": {
            "operationId": "dryRun",
            "tags": ["history"],
            "summary": "Dry run of one hook on a sample event",
            "description": "A served hook by name, or an inline AgentHook manifest validated as the operator validates it, on a sample event: what it would decide, with the filters' results, the handler's output and a JSON Patch of any rewrite. `force` runs the handler even when the filters would skip the hook.",
            "security": admin,
            "requestBody": request_body("The hook and the sample event.", s.request::<TestRequest<'static>>()),
            "responses": test,
        }},
        "/healthz": {"get": {
            "operationId": "healthz",
            "tags": ["service"],
            "summary": "Liveness",
            "description": "Never limited by `--max-concurrent-requests`.",
            "security": none,
            "responses": {"200": {
                "description": "The process serves.",
                "content": {"text/plain": {"schema": {"type": "string", "const": "ok"}}},
            }},
        }},
        "/readyz": {"get": {
            "operationId": "readyz",
            "tags": ["service"],
            "summary": "Readiness",
            "security": none,
            "responses": {
                "200": json_body("Hooks are loaded; the audit trail's state never makes the dispatcher unready.", readiness.clone()),
                "503": json_body("No hooks loaded yet (`ready: false`), shutting down (`draining: true`), or shed.", json!({"anyOf": [readiness, shed]})),
            },
        }},
        "/metrics": {"get": {
            "operationId": "metrics",
            "tags": ["service"],
            "summary": "Prometheus metrics",
            "description": "Never limited by `--max-concurrent-requests`.",
            "security": none,
            "responses": {"200": {
                "description": "The Prometheus text format 0.0.4 (`agenthooks_*`).",
                "content": {"text/plain": {"schema": {"type": "string"}}},
            }},
        }},
        "/openapi.json": {"get": {
            "operationId": "openapi",
            "tags": ["service"],
            "summary": "This document",
            "security": none,
            "responses": {
                "200": json_body("The OpenAPI 3.1 document of every route.", json!({"type": "object"})),
                "503": json_body(SHED, s.response::<ServerError>()),
            },
        }},
    })
}

#[cfg(test)]
mod tests;
