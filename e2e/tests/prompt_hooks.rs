//! Issue 4 on the real API server: prompt hooks decided by a model, with one operator
//! (running as the ServiceAccount of `config/rbac/operator.yaml`) and two dispatcher
//! processes, each started with `--providers-file` naming an OpenAI-compatible provider.
//!
//! The provider is [`ProviderStandIn`], a small HTTP server inside this test that stands in
//! for the model provider: it speaks the real OpenAI chat-completions wire format
//! (`POST /v1/chat/completions`, a forced `decide` tool call in
//! `choices[0].message.tool_calls[0].function`, a `usage` block), records every request
//! and reports the token usage the test plans.
//!
//! One scenario, in order (the budget's figures depend on every step before):
//! 1. a matching tool call is decided by the stand-in's `decide` (block with its reason;
//!    another input is allowed), and the request it saw holds the canonical JSON of
//!    `tool_name` + `tool_input` inside the fence, and never `raw_input`;
//! 2. the same input again on the same dispatcher within 60 s is a cache hit: no second
//!    provider request, 0 tokens;
//! 3. both dispatchers charge the tenant's one TenantHookBudget: `status.used` is exactly
//!    the sum of the `usage` tokens the stand-in reported;
//! 4. once the remaining budget cannot cover a call's bound, the call is blocked with
//!    reason `BudgetExhausted` and never reaches the provider; the budget shows `Warning`,
//!    then (its total lowered to what was used) `Exhausted`, in
//!    `kubectl get tenanthookbudgets` and in `agenthooks_budget_remaining_tokens`; a
//!    cached decision is still answered (a cache hit touches no budget).

use std::collections::VecDeque;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use agenthooks_e2e::procs::Proc;
use agenthooks_e2e::stack::{
    DispatcherProc, OperatorProc, http_get, install_crds, log_dir, metric,
    operator_service_account_kubeconfig, tails,
};
use agenthooks_e2e::{ControlPlane, unique_name, wait_for};
use serde_json::{Value, json};

/// The API key the providers file's `apiKeyFile` holds; the stand-in checks it.
const API_KEY: &str = "sk-standin-e2e-0123456789";
/// The model alias hooks name, and the provider's model it maps to.
const ALIAS: &str = "gpt-4o-mini";
const MODEL: &str = "gpt-4o-mini-2024-07-18";
/// The stand-in's reason when it blocks.
const BLOCK_REASON: &str = "deletes files outside the project directory";
/// Found only in `raw_input`: must never reach the provider.
const RAW_MARKER: &str = "RAW-INPUT-NEVER-SENT-7f3a";

// ---- the provider stand-in ----------------------------------------------------------------

/// One request the stand-in received.
#[derive(Debug, Clone)]
struct Seen {
    path: String,
    authorization: String,
    /// The raw body as text.
    raw: String,
    body: Value,
}

#[derive(Default)]
struct StandInState {
    requests: Vec<Seen>,
    /// `(prompt_tokens, completion_tokens)` for the coming answers, one each; empty:
    /// `(100, 20)`.
    usage: VecDeque<(i64, i64)>,
    /// Sum of `usage.total_tokens` over every answer sent.
    reported: i64,
}

/// Stands in for the model provider (an OpenAI-compatible chat-completions API). Not a
/// model: it decides `block` (reason [`BLOCK_REASON`]) when the fenced `tool_input.cmd`
/// contains `rm -rf`, else `allow`, always through a `decide` tool call. HTTP/1.1
/// keep-alive, a thread per connection.
struct ProviderStandIn {
    /// The `baseUrl` of the providers file (`/chat/completions` is appended).
    base_url: String,
    state: Arc<Mutex<StandInState>>,
}

impl ProviderStandIn {
    fn start() -> ProviderStandIn {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let base_url = format!("http://{}/v1", listener.local_addr().unwrap());
        let state = Arc::new(Mutex::new(StandInState::default()));
        let shared = state.clone();
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                let Ok(conn) = conn else { continue };
                let shared = shared.clone();
                std::thread::spawn(move || serve_connection(conn, &shared));
            }
        });
        ProviderStandIn { base_url, state }
    }

    /// Queues the usage of the coming answers.
    fn plan_usage(&self, usage: &[(i64, i64)]) {
        self.state
            .lock()
            .unwrap()
            .usage
            .extend(usage.iter().copied());
    }

    fn count(&self) -> usize {
        self.state.lock().unwrap().requests.len()
    }

    fn requests(&self) -> Vec<Seen> {
        self.state.lock().unwrap().requests.clone()
    }

    /// Total tokens reported so far.
    fn reported(&self) -> i64 {
        self.state.lock().unwrap().reported
    }
}

fn serve_connection(mut conn: std::net::TcpStream, state: &Mutex<StandInState>) {
    let Ok(read_half) = conn.try_clone() else {
        return;
    };
    let mut reader = BufReader::new(read_half);
    loop {
        let mut request_line = String::new();
        if reader.read_line(&mut request_line).unwrap_or(0) == 0 {
            return;
        }
        let path = request_line
            .split_whitespace()
            .nth(1)
            .unwrap_or("")
            .to_string();
        let (mut len, mut authorization) = (0usize, String::new());
        loop {
            let mut line = String::new();
            if reader.read_line(&mut line).unwrap_or(0) == 0 {
                return;
            }
            if line == "\r\n" {
                break;
            }
            if let Some((name, value)) = line.split_once(':') {
                match name.trim().to_ascii_lowercase().as_str() {
                    "content-length" => len = value.trim().parse().unwrap_or(0),
                    "authorization" => authorization = value.trim().to_string(),
                    _ => {}
                }
            }
        }
        let mut raw = vec![0u8; len];
        if reader.read_exact(&mut raw).is_err() {
            return;
        }
        let raw = String::from_utf8_lossy(&raw).into_owned();
        let body: Value = serde_json::from_str(&raw).unwrap_or(Value::Null);
        let (status, answer) = {
            let mut s = state.lock().unwrap();
            let n = s.requests.len() + 1;
            s.requests.push(Seen {
                path: path.clone(),
                authorization: authorization.clone(),
                raw,
                body: body.clone(),
            });
            if path != "/v1/chat/completions" {
                (
                    404,
                    json!({"error": {"message": "unknown path", "type": "invalid_request_error", "param": null, "code": null}}),
                )
            } else if authorization != format!("Bearer {API_KEY}") {
                (
                    401,
                    json!({"error": {"message": "Incorrect API key provided", "type": "invalid_request_error", "param": null, "code": "invalid_api_key"}}),
                )
            } else {
                let (prompt, completion) = s.usage.pop_front().unwrap_or((100, 20));
                s.reported += prompt + completion;
                (200, completion_answer(&body, n, prompt, completion))
            }
        };
        let text = answer.to_string();
        let reason = if status == 200 { "OK" } else { "Error" };
        let resp = format!(
            "HTTP/1.1 {status} {reason}\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{text}",
            text.len()
        );
        if conn.write_all(resp.as_bytes()).is_err() {
            return;
        }
    }
}

/// The fenced line of a chat-completions request: the JSON between
/// `BEGIN UNTRUSTED INPUT <token>` and `END UNTRUSTED INPUT <token>` of the user message.
fn fenced(body: &Value) -> Option<Value> {
    let user = body["messages"]
        .as_array()?
        .iter()
        .find(|m| m["role"] == "user")?["content"]
        .as_str()?;
    let lines: Vec<&str> = user.lines().collect();
    let [begin, json, end] = lines[..] else {
        return None;
    };
    let token = begin.strip_prefix("BEGIN UNTRUSTED INPUT ")?;
    (end == format!("END UNTRUSTED INPUT {token}"))
        .then(|| serde_json::from_str(json).ok())
        .flatten()
}

/// A chat-completions answer calling `decide`, in OpenAI's response shape.
fn completion_answer(body: &Value, n: usize, prompt: i64, completion: i64) -> Value {
    let cmd = fenced(body)
        .and_then(|f| f["tool_input"]["cmd"].as_str().map(str::to_owned))
        .unwrap_or_default();
    let args = if cmd.contains("rm -rf") {
        json!({"decision": "block", "reason": BLOCK_REASON})
    } else {
        json!({"decision": "allow", "reason": "read-only command"})
    };
    json!({
        "id": format!("chatcmpl-standin-{n}"),
        "object": "chat.completion",
        "created": 1_767_225_600,
        "model": body["model"],
        "choices": [{
            "index": 0,
            "message": {
                "role": "assistant",
                "content": null,
                "tool_calls": [{
                    "id": format!("call_{n}"),
                    "type": "function",
                    "function": {"name": "decide", "arguments": args.to_string()}
                }]
            },
            "logprobs": null,
            "finish_reason": "tool_calls"
        }],
        "usage": {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}
    })
}

// ---- the stack ----------------------------------------------------------------------------

struct Stack {
    cp: &'static ControlPlane,
    operator: OperatorProc,
    ds: Vec<DispatcherProc>,
}

impl Stack {
    fn tails(&self) -> String {
        let mut procs: Vec<&Proc> = self.ds.iter().map(|d| &d.proc).collect();
        procs.push(&self.operator.proc);
        tails(&procs)
    }

    fn wait(&self, timeout: Duration, what: &str, f: impl FnMut() -> bool) {
        if !wait_for(timeout, f) {
            panic!("{what} (within {timeout:?})\n{}", self.tails());
        }
    }

    fn budget(&self, ns: &str) -> Value {
        self.cp
            .kubectl_json(&["-n", ns, "get", "tenanthookbudget", "tokens"])
    }

    /// The budget's row of `kubectl get tenanthookbudgets`: name, period, used, remaining,
    /// state.
    fn budget_row(&self, ns: &str) -> Vec<String> {
        let table = self.cp.kubectl_ok(&["-n", ns, "get", "tenanthookbudgets"]);
        let header: Vec<&str> = table
            .lines()
            .next()
            .unwrap_or("")
            .split_whitespace()
            .collect();
        assert_eq!(
            header,
            ["NAME", "PERIOD", "USED", "REMAINING", "STATE", "AGE"],
            "{table}"
        );
        table
            .lines()
            .nth(1)
            .unwrap_or("")
            .split_whitespace()
            .take(5)
            .map(str::to_owned)
            .collect()
    }

    /// `agenthooks_budget_remaining_tokens{tenant}` on the operator.
    fn remaining_metric(&self, tenant: &str) -> f64 {
        let (_, text) = http_get(&format!("{}/metrics", self.operator.admin));
        metric(
            &text,
            "agenthooks_budget_remaining_tokens",
            &format!("tenant=\"{tenant}\""),
        )
    }
}

fn write_providers_file(dir: &Path, standin: &ProviderStandIn) -> String {
    std::fs::write(dir.join("standin.key"), format!("{API_KEY}\n")).unwrap();
    let path = dir.join("providers.yaml");
    std::fs::write(
        &path,
        format!(
            "providers:\n\
             \x20 - name: standin\n\
             \x20   kind: openai\n\
             \x20   baseUrl: {}\n\
             \x20   apiKeyFile: standin.key\n\
             models:\n\
             \x20 {ALIAS}: {{provider: standin, model: {MODEL}}}\n\
             defaultModel: {ALIAS}\n",
            standin.base_url
        ),
    )
    .unwrap();
    path.to_str().unwrap().to_string()
}

fn event(tenant: &str, cmd: &str) -> Value {
    json!({"event": "pre_tool_use", "tenant_id": tenant, "agent_id": "a1",
           "session_id": "s1", "turn_id": format!("turn-{cmd}"),
           "tool_name": "exec", "tool_input": {"cmd": cmd},
           "raw_input": {"transcript": RAW_MARKER}})
}

/// Dispatches `event` on `d`; returns the response and its one hook run.
fn dispatch(s: &Stack, d: &DispatcherProc, event: &Value) -> (Value, Value) {
    let (code, body) = d.dispatch(event);
    assert_eq!(code, 200, "{}: {body}\n{}", d.id, s.tails());
    let runs = body["hooks"].as_array().cloned().unwrap_or_default();
    assert_eq!(runs.len(), 1, "{}: one hook run expected: {body}", d.id);
    (body.clone(), runs[0].clone())
}

// ---- the scenario -------------------------------------------------------------------------

#[test]
fn prompt_hooks_decide_cache_and_share_one_budget_across_two_dispatchers() {
    let started = Instant::now();
    let cp = ControlPlane::shared();
    install_crds(cp);
    let master = unique_name("ah-prompt");
    cp.create_namespace(&master, &[]);
    let logs = log_dir("ah-prompt");
    let kubeconfig = operator_service_account_kubeconfig(cp, &master, &logs);
    let standin = ProviderStandIn::start();
    let providers = write_providers_file(&logs, &standin);
    let operator = OperatorProc::start(
        &kubeconfig,
        &master,
        &unique_name("agenthooks-operator"),
        "op",
        &[],
        &logs,
    );
    let ds: Vec<DispatcherProc> = (1..=2)
        .map(|i| {
            DispatcherProc::start(
                &[&operator.sync],
                &format!("pr-{i}"),
                &master,
                &[
                    "--providers-file",
                    &providers,
                    "--report-interval-ms",
                    "200",
                ],
                &logs,
            )
        })
        .collect();
    let s = Stack { cp, operator, ds };
    s.wait(Duration::from_secs(60), "dispatchers ready", || {
        s.ds.iter().all(|d| d.readyz() == 200)
    });

    // The tenant's namespace, its budget and the prompt hook.
    let tenant = unique_name("pr");
    let ns = unique_name("tenant-pr");
    cp.create_namespace(&ns, &[("agenthooks.io/tenant", &tenant)]);
    cp.apply_yaml(&format!(
        "apiVersion: agenthooks.io/v1alpha1\nkind: TenantHookBudget\n\
         metadata: {{name: tokens, namespace: {ns}}}\nspec: {{monthlyTokens: 5000}}\n"
    ));
    s.wait(Duration::from_secs(20), "budget Ok", || {
        s.budget(&ns)["status"]["state"] == "Ok"
    });
    cp.apply_yaml(&format!(
        "apiVersion: agenthooks.io/v1alpha1\nkind: AgentHook\n\
         metadata: {{name: judge-exec, namespace: {ns}}}\n\
         spec:\n  event: pre_tool_use\n  matcher: '^exec$'\n  timeoutMs: 5000\n\
         \x20 handler:\n    type: prompt\n    prompt:\n      model: {ALIAS}\n\
         \x20     promptTemplate: Block commands that delete files outside the project.\n"
    ));
    let key = format!("{ns}/judge-exec");
    s.wait(
        Duration::from_secs(60),
        "prompt hook served by both",
        || s.ds.iter().all(|d| d.served_generation(&key) == Some(1)),
    );
    let (d1, d2) = (&s.ds[0], &s.ds[1]);

    // 1. The model's decide call decides: block with its reason.
    standin.plan_usage(&[(1100, 134)]);
    let (body, run) = dispatch(&s, d1, &event(&tenant, "rm -rf /home"));
    assert_eq!(body["decision"], "block", "{body}");
    assert_eq!(body["reason"], BLOCK_REASON, "{body}");
    assert_eq!(run["handler"], "prompt", "{run}");
    assert_eq!(run["prompt"]["model"], MODEL, "{run}");
    assert_eq!(run["prompt"]["tokens"], 1234, "{run}");
    assert_eq!(run["prompt"]["cacheHit"], false, "{run}");
    assert_eq!(standin.count(), 1);

    // What the provider saw: its wire format, the key, the resolved model, one forced
    // decide tool, and the tool input inside the fence, never raw_input.
    let seen = &standin.requests()[0];
    assert_eq!(seen.path, "/v1/chat/completions");
    assert_eq!(seen.authorization, format!("Bearer {API_KEY}"));
    assert_eq!(seen.body["model"], MODEL);
    assert_eq!(seen.body["temperature"], 0);
    let tools = seen.body["tools"].as_array().unwrap();
    assert_eq!(tools.len(), 1, "{}", seen.body);
    assert_eq!(tools[0]["function"]["name"], "decide");
    assert_eq!(
        seen.body["tool_choice"],
        json!({"type": "function", "function": {"name": "decide"}})
    );
    assert_eq!(
        fenced(&seen.body),
        Some(json!({"tool_input": {"cmd": "rm -rf /home"}, "tool_name": "exec"})),
        "the fence: {}",
        seen.body["messages"]
    );
    assert!(
        !seen.raw.contains(RAW_MARKER) && !seen.raw.contains("raw_input"),
        "raw_input reached the provider: {}",
        seen.raw
    );
    let request_bytes = seen.raw.len() as i64;
    eprintln!("request body {request_bytes} bytes");

    // 2. The same input within 60 s on the same dispatcher: a cache hit, no request.
    let (body, run) = dispatch(&s, d1, &event(&tenant, "rm -rf /home"));
    assert_eq!(body["decision"], "block", "{body}");
    assert_eq!(body["reason"], BLOCK_REASON, "{body}");
    assert_eq!(run["prompt"]["cacheHit"], true, "{run}");
    assert_eq!(run["prompt"]["tokens"], 0, "{run}");
    assert_eq!(standin.count(), 1, "a cache hit reached the provider");

    // 3. Both dispatchers charge the one budget: two calls at once, one on each.
    s.wait(Duration::from_secs(10), "first call settled", || {
        s.budget(&ns)["status"]["used"] == 1234
    });
    standin.plan_usage(&[(900, 87), (1000, 111)]);
    let runs: Vec<(Value, Value)> = std::thread::scope(|scope| {
        let a = scope.spawn(|| dispatch(&s, d1, &event(&tenant, "ls -la")));
        let b = scope.spawn(|| dispatch(&s, d2, &event(&tenant, "cat README.md")));
        vec![a.join().unwrap(), b.join().unwrap()]
    });
    for (body, run) in &runs {
        assert_eq!(body["decision"], "allow", "{body}");
        assert_eq!(run["prompt"]["cacheHit"], false, "{run}");
    }
    let tokens: i64 = runs
        .iter()
        .map(|(_, r)| r["prompt"]["tokens"].as_i64().unwrap_or(0))
        .sum();
    assert_eq!(tokens, 987 + 1111);
    assert_eq!(standin.count(), 3);
    s.wait(Duration::from_secs(10), "used == 1234 + 987 + 1111", || {
        s.budget(&ns)["status"]["used"] == 3332
    });
    standin.plan_usage(&[(950, 70)]);
    let (body, _) = dispatch(&s, d2, &event(&tenant, "cargo build"));
    assert_eq!(body["decision"], "allow", "{body}");
    assert_eq!(standin.count(), 4);
    let reported = standin.reported();
    assert_eq!(reported, 1234 + 987 + 1111 + 1020);
    s.wait(
        Duration::from_secs(10),
        "status.used == the tokens the provider reported",
        || s.budget(&ns)["status"]["used"] == reported,
    );
    let st = s.budget(&ns)["status"].clone();
    assert_eq!(st["used"], reported, "{st}");
    assert_eq!(st["remaining"], 5000 - reported, "{st}");
    // 648 of 5,000 left: below 20%.
    assert_eq!(st["state"], "Warning", "{st}");
    let row = s.budget_row(&ns);
    assert_eq!(
        row[2..],
        [
            reported.to_string(),
            (5000 - reported).to_string(),
            "Warning".into()
        ],
        "{row:?}"
    );
    s.wait(Duration::from_secs(10), "remaining metric 648", || {
        s.remaining_metric(&tenant) == (5000 - reported) as f64
    });

    // 4. 648 tokens cannot cover a call's bound (at least the 512 output tokens plus a
    // third of a request body of ~2 KB): blocked before any provider request, on either
    // dispatcher.
    assert!(
        (5000 - reported) < 512 + 64 + request_bytes / 3,
        "the test's figures no longer make the remaining budget too small"
    );
    for (d, cmd) in [(d1, "git status"), (d2, "make test")] {
        let (body, run) = dispatch(&s, d, &event(&tenant, cmd));
        assert_eq!(body["decision"], "block", "{}: {body}", d.id);
        assert_eq!(body["reason"], "BudgetExhausted", "{}: {body}", d.id);
        assert_eq!(run["errorKind"], "budget_exhausted", "{run}");
    }
    assert_eq!(
        standin.count(),
        4,
        "a call past the budget reached the provider"
    );
    assert_eq!(s.budget(&ns)["status"]["used"], reported);

    // The platform team lowers the total to what was used: Exhausted.
    cp.apply_yaml(&format!(
        "apiVersion: agenthooks.io/v1alpha1\nkind: TenantHookBudget\n\
         metadata: {{name: tokens, namespace: {ns}}}\nspec: {{monthlyTokens: {reported}}}\n"
    ));
    s.wait(Duration::from_secs(20), "state Exhausted", || {
        s.budget(&ns)["status"]["state"] == "Exhausted"
    });
    let row = s.budget_row(&ns);
    assert_eq!(
        row[2..],
        [reported.to_string(), "0".into(), "Exhausted".into()],
        "{row:?}"
    );
    s.wait(Duration::from_secs(10), "remaining metric 0", || {
        s.remaining_metric(&tenant) == 0.0
    });
    let (body, _) = dispatch(&s, d2, &event(&tenant, "ls -la"));
    assert_eq!(body["reason"], "BudgetExhausted", "{body}");
    // A cached decision needs no provider call and no budget.
    let (body, run) = dispatch(&s, d1, &event(&tenant, "rm -rf /home"));
    assert_eq!(body["reason"], BLOCK_REASON, "{body}");
    assert_eq!(run["prompt"]["cacheHit"], true, "{run}");
    assert_eq!(standin.count(), 4);
    assert_eq!(s.budget(&ns)["status"]["used"], reported);
    eprintln!("prompt hooks scenario: {:?}", started.elapsed());
}
