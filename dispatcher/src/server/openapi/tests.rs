use super::*;
use crate::dialect::{self, CallOptions as Options};
use serde_json::json;

fn doc() -> Value {
    document()
}

#[test]
fn committed_openapi_matches_the_generated_document() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .join(COMMITTED_PATH);
    let have = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        have == text(),
        "{COMMITTED_PATH} differs from the document the Rust types give; run `{REGENERATE}` from the workspace root and commit it"
    );
}

#[test]
fn every_route_is_described_with_its_methods() {
    let d = doc();
    assert_eq!(d["openapi"], "3.1.0");
    assert_eq!(d["info"]["version"], env!("CARGO_PKG_VERSION"));
    let routes: Vec<(String, Vec<String>)> = d["paths"]
        .as_object()
        .unwrap()
        .iter()
        .map(|(p, ops)| {
            (
                p.clone(),
                ops.as_object().unwrap().keys().cloned().collect(),
            )
        })
        .collect();
    let want = [
        ("/healthz", "get"),
        ("/metrics", "get"),
        ("/openapi.json", "get"),
        ("/readyz", "get"),
        ("/v1/dispatch", "post"),
        ("/v1/executions", "get"),
        ("/v1/executions/{id}", "get"),
        ("/v1/hooks", "get"),
        ("/v1/hooks/{dialect}", "post"),
        ("/v1/test", "post"),
    ];
    let want: Vec<(String, Vec<String>)> = want
        .iter()
        .map(|(p, m)| (p.to_string(), vec![m.to_string()]))
        .collect();
    assert_eq!(routes, want);
}

#[test]
fn security_is_the_caller_token_the_admin_token_or_none() {
    let d = doc();
    let security = |path: &str, method: &str| d["paths"][path][method]["security"].clone();
    assert_eq!(security("/v1/dispatch", "post"), json!([{"caller": []}]));
    assert_eq!(
        security("/v1/hooks/{dialect}", "post"),
        json!([{"caller": []}])
    );
    for (path, method) in [
        ("/v1/executions", "get"),
        ("/v1/executions/{id}", "get"),
        ("/v1/test", "post"),
    ] {
        assert_eq!(security(path, method), json!([{"admin": []}]), "{path}");
    }
    for path in [
        "/healthz",
        "/readyz",
        "/metrics",
        "/openapi.json",
        "/v1/hooks",
    ] {
        assert_eq!(security(path, "get"), json!([]), "{path}");
    }
    let schemes = &d["components"]["securitySchemes"];
    assert_eq!(
        (&schemes["caller"]["scheme"], &schemes["admin"]["scheme"]),
        (&json!("bearer"), &json!("bearer"))
    );
}

#[test]
fn every_4xx_is_a_client_error_naming_its_field_and_401_has_its_challenge() {
    let d = doc();
    let client = json!({"$ref": "#/components/schemas/ClientError"});
    let server = json!({"$ref": "#/components/schemas/ServerError"});
    let mut seen_401 = 0;
    for (path, ops) in d["paths"].as_object().unwrap() {
        for (method, op) in ops.as_object().unwrap() {
            for (status, response) in op["responses"].as_object().unwrap() {
                let schema = &response["content"]["application/json"]["schema"];
                match status.as_bytes()[0] {
                    b'4' => assert_eq!(schema, &client, "{method} {path} {status}"),
                    b'5' if path != "/readyz" => {
                        assert_eq!(schema, &server, "{method} {path} {status}")
                    }
                    _ => {}
                }
                if status == "401" {
                    seen_401 += 1;
                    assert_eq!(
                        response["headers"]["WWW-Authenticate"]["schema"]["const"],
                        "Bearer realm=\"agenthooks\""
                    );
                }
            }
        }
    }
    assert_eq!(seen_401, 5, "dispatch, native, both history routes, test");
    let field = &d["components"]["schemas"]["ClientError"]["properties"]["field"];
    assert_eq!(
        (&field["type"], &field["minLength"]),
        (&json!("string"), &json!(1))
    );
    assert_eq!(
        d["components"]["schemas"]["ClientError"]["required"],
        json!(["error", "field"])
    );
}

#[test]
fn the_dispatch_body_is_the_event_type_refusing_unknown_keys() {
    let d = doc();
    let body =
        &d["paths"]["/v1/dispatch"]["post"]["requestBody"]["content"]["application/json"]["schema"];
    assert_eq!(body, &json!({"$ref": "#/components/schemas/Event"}));
    let event = &d["components"]["schemas"]["Event"];
    assert_eq!(event["additionalProperties"], false);
    assert_eq!(event["required"], json!(["event"]));
    let props = event["properties"].as_object().unwrap();
    let mut keys: Vec<&str> = props.keys().map(String::as_str).collect();
    keys.sort();
    assert_eq!(
        keys,
        [
            "accept",
            "agent_id",
            "depth",
            "event",
            "event_id",
            "raw_input",
            "session_id",
            "tenant_id",
            "tool_input",
            "tool_name",
            "tool_output",
            "turn_id"
        ]
    );
    assert_eq!(props["tool_input"]["type"], "object");
    assert_eq!(props["event_id"]["maxLength"], 256);
    assert_eq!(props["depth"]["minimum"], 0);
    let events: Vec<&str> = d["components"]["schemas"]["HookEvent"]["enum"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    assert_eq!(events.len(), agenthooks_crds::HookEvent::ALL.len());
}

#[test]
fn the_native_route_takes_the_five_dialects_and_its_query() {
    let d = doc();
    let op = &d["paths"]["/v1/hooks/{dialect}"]["post"];
    let params = op["parameters"].as_array().unwrap();
    let names: Vec<(&str, &str, bool)> = params
        .iter()
        .map(|p| {
            (
                p["name"].as_str().unwrap(),
                p["in"].as_str().unwrap(),
                p["required"].as_bool().unwrap(),
            )
        })
        .collect();
    // Properties come out sorted by name.
    assert_eq!(
        names,
        [
            ("dialect", "path", true),
            ("agent_id", "query", false),
            ("ask", "query", false),
            ("event", "query", false),
            ("tenant_id", "query", false)
        ]
    );
    let dialect = &d["components"]["schemas"]["Dialect"]["enum"];
    assert_eq!(
        dialect,
        &json!(["claude-code", "codex", "gemini-cli", "cursor", "copilot"])
    );
    assert_eq!(
        params[4]["schema"],
        json!({"type": "string", "maxLength": 256, "pattern": crate::event::ID_PATTERN}),
        "null taken out"
    );
    assert_eq!(
        params[2]["schema"],
        json!({"type": "string", "pattern": "^(ask|defer)$"})
    );
    let payload = &d["components"]["schemas"]["NativePayload"];
    assert_eq!(payload["additionalProperties"], true);
    assert!(payload.get("required").is_none(), "{payload}");
}

/// Each string key [`NativePayload`] lists is read by some dialect: sent with the wrong
/// type there, it is the field of the 400.
#[test]
fn the_native_payload_lists_keys_the_readers_read() {
    let d = doc();
    let props = d["components"]["schemas"]["NativePayload"]["properties"]
        .as_object()
        .unwrap()
        .clone();
    let reader = |key: &str| -> (dialect::Dialect, &str) {
        use dialect::Dialect::*;
        match key {
            "turn_id" => (Codex, "PreToolUse"),
            "conversation_id" | "generation_id" | "command" | "cwd" => {
                (Cursor, "beforeShellExecution")
            }
            "url" => (Cursor, "beforeMCPExecution"),
            "file_path" => (Cursor, "beforeReadFile"),
            "sessionId" | "toolName" | "toolArgs" => (Copilot, "preToolUse"),
            "prompt" => (ClaudeCode, "UserPromptSubmit"),
            _ => (ClaudeCode, "PreToolUse"),
        }
    };
    let mut checked = 0;
    for (key, schema) in &props {
        if ["mcp_server", "mcp_context", "hook_event_name"].contains(&key.as_str()) {
            continue; // any value (only an object's keys are read); the event name itself
        }
        let (dialect, event) = reader(key);
        let mut payload = json!({});
        if dialect != dialect::Dialect::Copilot {
            payload["hook_event_name"] = json!(event);
        }
        payload[key] = json!(7);
        let options = Options {
            event: Some(event.to_owned()),
            ..Options::default()
        };
        let body = serde_json::to_vec(&payload).unwrap();
        match dialect::parse(dialect, &body, &options) {
            Err(crate::event::EventError::Invalid { field, .. }) => {
                assert_eq!(field, *key, "{schema}")
            }
            other => panic!("{key} on {dialect} {event}: {other:?}"),
        }
        checked += 1;
    }
    assert_eq!(checked, 16);
}

#[test]
fn history_parameters_are_the_ones_the_handlers_take() {
    let d = doc();
    let names = |path: &str| -> Vec<String> {
        d["paths"][path]["get"]["parameters"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| p["name"].as_str().unwrap().to_owned())
            .collect()
    };
    let mut want = super::super::executions::LIST_PARAMS.to_vec();
    want.sort();
    assert_eq!(names("/v1/executions"), want);
    assert_eq!(names("/v1/executions/{id}"), ["id", "errorDetail"]);
    let params = d["paths"]["/v1/executions"]["get"]["parameters"]
        .as_array()
        .unwrap();
    let limit = params.iter().find(|p| p["name"] == "limit").unwrap();
    assert_eq!(
        limit["schema"],
        json!({"type": "integer", "format": "uint32", "minimum": 1, "maximum": 500})
    );
    let decision = params.iter().find(|p| p["name"] == "decision").unwrap();
    let words: Vec<&Value> = decision["schema"]["oneOf"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| &v["const"])
        .collect();
    assert_eq!(
        words,
        [
            &json!("allow"),
            &json!("block"),
            &json!("ask"),
            &json!("error"),
            &json!("timeout")
        ]
    );
    let id = &d["paths"]["/v1/executions/{id}"]["get"]["parameters"][0];
    assert_eq!(
        (&id["in"], &id["required"], &id["schema"]["minimum"]),
        (&json!("path"), &json!(true), &json!(1))
    );
}

#[test]
fn responses_require_the_keys_always_written() {
    let d = doc();
    let s = &d["components"]["schemas"];
    assert_eq!(
        s["Decision"]["required"],
        json!(["event_id", "decision", "hooks"])
    );
    let report: Vec<&str> = s["DryRunReport"]["required"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    assert_eq!(
        report.len(),
        25,
        "every key of a dry run report is always present"
    );
    assert_eq!(
        s["HookList"]["required"],
        json!(["version", "hooks", "unavailable"])
    );
    assert_eq!(s["Readiness"]["required"], json!(["ready"]));
}

#[tokio::test]
async fn get_openapi_json_serves_the_document_without_a_credential() {
    use crate::handlers::http::HttpCaller;
    use agenthooks_crds::{Edition, sealed::SealKey};
    crate::operator_urls::install_crypto_provider();
    // No hooks and no authenticator: the document is served all the same.
    let state = crate::server::AppState::new(crate::runner::Engine::new(
        HttpCaller::new(vec![]),
        Edition::Lite,
        SealKey::generate(),
    ));
    let base = crate::server::tests_support::serve_state(state).await;
    let c = reqwest::Client::new();
    let r = c.get(format!("{base}/openapi.json")).send().await.unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(r.headers()[header::CONTENT_TYPE], "application/json");
    assert_eq!(r.text().await.unwrap(), text());

    // Unknown routes and methods answer a ClientError naming what was wrong.
    let r = c.get(format!("{base}/v2/nothing")).send().await.unwrap();
    assert_eq!(r.status(), 404);
    let body: Value = serde_json::from_str(&r.text().await.unwrap()).unwrap();
    assert_eq!(
        body,
        json!({"error": "path: no route \"/v2/nothing\" (GET /openapi.json lists them)", "field": "path"})
    );
    let r = c
        .delete(format!("{base}/v1/dispatch"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 405);
    assert_eq!(r.headers()[header::ALLOW], "POST");
    let body: Value = serde_json::from_str(&r.text().await.unwrap()).unwrap();
    assert_eq!(body["field"], "method");
}
