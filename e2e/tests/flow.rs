//! From `kubectl apply` to a decision, on a real kube-apiserver: CRDs, admission by the
//! schema, Accepted/Ready conditions from the operator, two dispatchers synced from it,
//! edits and deletes reaching both, and the time from apply to both answering.

use std::sync::OnceLock;
use std::time::{Duration, Instant};

use agenthooks_e2e::procs::{Proc, bin, free_port};
use agenthooks_e2e::{ControlPlane, unique_name, wait_for};
use serde_json::{Value, json};

/// One operator and two dispatchers for this test binary, on the shared control plane.
struct Stack {
    cp: &'static ControlPlane,
    master: String,
    tenant_ns: String,
    /// The tenant of `tenant_ns`, this binary's own: one namespace holds each tenant on
    /// the shared API server (CONTRACT §9.3), so other tests' namespaces cannot share it.
    tenant: String,
    dispatchers: Vec<String>,
    operator_sync: String,
    /// `authorization: Bearer ...` of dispatcher 1 on the sync port.
    sync_auth: String,
    _procs: std::sync::Mutex<Vec<Proc>>,
}

fn stack() -> &'static Stack {
    static STACK: OnceLock<Stack> = OnceLock::new();
    STACK.get_or_init(|| {
        let cp = ControlPlane::shared();
        agenthooks_e2e::stack::install_crds(cp);
        let master = unique_name("ah-system");
        let tenant_ns = unique_name("tenant-acme");
        let tenant = unique_name("acme");
        cp.create_namespace(&master, &[]);
        cp.create_namespace(&tenant_ns, &[("agenthooks.io/tenant", &tenant)]);
        let logs = std::env::temp_dir().join(unique_name("agenthooks-e2e-logs"));
        std::fs::create_dir_all(&logs).unwrap();
        let key = logs.join("seal.key");
        std::fs::write(
            &key,
            "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff",
        )
        .unwrap();
        let kubeconfig = cp.kubeconfig.to_str().unwrap().to_string();
        let sync_port = free_port();
        let pki = agenthooks_e2e::stack::test_pki();
        let operator_sync = agenthooks_e2e::stack::sync_url(sync_port);
        let mut procs = Vec::new();
        procs.push(Proc::start(
            "operator",
            &bin("agenthooks-operator"),
            &[
                "--master-namespace".into(),
                master.clone(),
                "--sync-addr".into(),
                format!("127.0.0.1:{sync_port}"),
                "--metrics-addr".into(),
                format!("127.0.0.1:{}", free_port()),
                "--seal-key-file".into(),
                key.to_str().unwrap().into(),
                "--lease-name".into(),
                unique_name("agenthooks-operator"),
                "--dispatcher-ttl-seconds".into(),
                "10".into(),
                // The flow's hooks are command hooks in a tenant namespace (CONTRACT §10.1).
                "--allow-tenant-command-hooks".into(),
                "--sync-tls-cert-file".into(),
                pki.cert.to_string_lossy().into_owned(),
                "--sync-tls-key-file".into(),
                pki.key.to_string_lossy().into_owned(),
            ],
            &[("KUBECONFIG", &kubeconfig)],
            &logs,
        ));
        let mut dispatchers = Vec::new();
        let mut sync_auth = String::new();
        for i in 1..=2 {
            let port = free_port();
            let me = agenthooks_e2e::stack::SyncIdentity::mint(
                cp,
                &master,
                &format!("e2e-dispatcher-{i}"),
            );
            let token = me.token_file(&logs);
            if i == 1 {
                sync_auth = me.header();
            }
            procs.push(Proc::start(
                &format!("dispatcher-{i}"),
                &bin("agenthooks-dispatcher"),
                &[
                    "--operator-url".into(),
                    operator_sync.clone(),
                    "--listen".into(),
                    format!("127.0.0.1:{port}"),
                    "--operator-token-file".into(),
                    token.to_str().unwrap().into(),
                    "--master-namespace".into(),
                    master.clone(),
                    "--seal-key-file".into(),
                    key.to_str().unwrap().into(),
                    "--allow-anonymous".into(),
                    "--operator-ca-file".into(),
                    pki.ca.to_string_lossy().into_owned(),
                ],
                &[],
                &logs,
            ));
            dispatchers.push(format!("http://127.0.0.1:{port}"));
        }
        let stack = Stack {
            cp,
            master,
            tenant_ns,
            tenant,
            dispatchers,
            operator_sync,
            sync_auth,
            _procs: std::sync::Mutex::new(procs),
        };
        let ready = wait_for(Duration::from_secs(60), || {
            stack
                .dispatchers
                .iter()
                .all(|d| http_status(&format!("{d}/readyz")) == 200)
        });
        if !ready {
            let p = stack._procs.lock().unwrap();
            let tails: Vec<String> = p
                .iter()
                .map(|p| format!("--- {} ---\n{}", p.name, p.log_tail(30)))
                .collect();
            panic!("dispatchers not ready within 60 s\n{}", tails.join("\n"));
        }
        stack
    })
}

fn http_status(url: &str) -> u16 {
    let out = std::process::Command::new("curl")
        .args([
            "-s",
            "-o",
            "/dev/null",
            "-w",
            "%{http_code}",
            "--max-time",
            "5",
            url,
        ])
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).parse().unwrap_or(0)
}

fn dispatch(base: &str, event: &Value) -> Value {
    let out = std::process::Command::new("curl")
        .args([
            "-s",
            "--max-time",
            "15",
            "-X",
            "POST",
            &format!("{base}/v1/dispatch"),
            "-d",
            &event.to_string(),
        ])
        .output()
        .unwrap();
    serde_json::from_slice(&out.stdout).unwrap_or(Value::Null)
}

fn condition(cp: &ControlPlane, ns: &str, name: &str, type_: &str) -> Option<Value> {
    let out = cp.kubectl(&["-n", ns, "get", "agenthook", name, "-o", "json"]);
    if !out.status.success() {
        return None;
    }
    let v: Value = serde_json::from_slice(&out.stdout).ok()?;
    v["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == type_)
        .cloned()
}

fn hook_yaml(ns: &str, name: &str, body: &str) -> String {
    format!(
        "apiVersion: agenthooks.io/v1alpha1\nkind: AgentHook\nmetadata: {{name: {name}, namespace: {ns}}}\nspec:\n{body}"
    )
}

const BLOCK_RM: &str = "  event: pre_tool_use\n  priority: 10\n  matcher: '^exec$'\n  ifExpr: 'tool_input.cmd.startsWith(\"rm\")'\n  handler:\n    type: command\n    command: {command: 'echo v1-block >&2; exit 2'}\n";

fn rm_event(tenant: &str) -> Value {
    json!({"event": "pre_tool_use", "tenant_id": tenant, "agent_id": "a1", "tool_name": "exec", "tool_input": {"cmd": "rm -rf /"}})
}

/// The generation of `key` served by a dispatcher, from `GET /v1/hooks` (None: not served).
fn served_generation(base: &str, key: &str) -> Option<i64> {
    let out = std::process::Command::new("curl")
        .args(["-s", "--max-time", "5", &format!("{base}/v1/hooks")])
        .output()
        .unwrap();
    let v: Value = serde_json::from_slice(&out.stdout).ok()?;
    v["hooks"]
        .as_array()?
        .iter()
        .find(|h| h["hook"] == key)
        .and_then(|h| h["generation"].as_i64())
}

fn generation(cp: &ControlPlane, ns: &str, name: &str) -> i64 {
    cp.kubectl_json(&["-n", ns, "get", "agenthook", name, "-o", "json"])["metadata"]["generation"]
        .as_i64()
        .unwrap()
}

// Waiting polls GET /v1/hooks, not decisions. Each phase then sends one decision per
// dispatcher.
#[test]
fn apply_reaches_both_dispatchers_then_edit_and_delete() {
    let s = stack();
    let name = unique_name("no-rm");
    let key = format!("{}/{name}", s.tenant_ns);
    let started = Instant::now();
    s.cp.apply_yaml(&hook_yaml(&s.tenant_ns, &name, BLOCK_RM));
    let g1 = generation(s.cp, &s.tenant_ns, &name);
    let served = wait_for(Duration::from_secs(30), || {
        s.dispatchers
            .iter()
            .all(|d| served_generation(d, &key) == Some(g1))
    });
    let apply_to_served = started.elapsed();
    assert!(served, "both dispatchers should serve the hook within 30 s");
    println!(
        "E2E-FIGURE apply_to_both_dispatchers_ms={}",
        apply_to_served.as_millis()
    );
    for d in &s.dispatchers {
        let v = dispatch(d, &rm_event(&s.tenant));
        assert_eq!(
            (
                v["decision"].as_str(),
                v["reason"].as_str(),
                v["decidingHook"].as_str()
            ),
            (Some("block"), Some("v1-block"), Some(key.as_str())),
            "{d}: {v}"
        );
    }

    // Accepted=True and then Ready=True (both live dispatchers serve it)
    assert!(wait_for(Duration::from_secs(20), || condition(
        s.cp,
        &s.tenant_ns,
        &name,
        "Accepted"
    )
    .is_some_and(|c| c["status"] == "True")));
    assert!(
        wait_for(Duration::from_secs(30), || condition(
            s.cp,
            &s.tenant_ns,
            &name,
            "Ready"
        )
        .is_some_and(|c| c["status"] == "True")),
        "Ready: {:?}",
        condition(s.cp, &s.tenant_ns, &name, "Ready")
    );
    let table = s.cp.kubectl_ok(&["-n", &s.tenant_ns, "get", "agenthooks"]);
    let header = table.lines().next().unwrap();
    for col in [
        "EVENT", "SCOPE", "HANDLER", "PRIORITY", "ACCEPTED", "READY", "AGE",
    ] {
        assert!(
            header.contains(col),
            "printer column {col} missing: {header}"
        );
    }
    assert!(
        table.lines().nth(1).unwrap().contains("pre_tool_use"),
        "{table}"
    );

    // left alone: no status churn (resourceVersion stable). The two decisions above are
    // counted into status.executions first (issue 3); after that nothing writes.
    assert!(
        wait_for(Duration::from_secs(20), || {
            let st = &s
                .cp
                .kubectl_json(&["-n", &s.tenant_ns, "get", "agenthook", &name])["status"]["executions"];
            st["block"] == 2
        }),
        "the two blocks are counted in status.executions"
    );
    let rv = |cp: &ControlPlane| {
        cp.kubectl_json(&["-n", &s.tenant_ns, "get", "agenthook", &name, "-o", "json"])["metadata"]
            ["resourceVersion"]
            .clone()
    };
    let before = rv(s.cp);
    std::thread::sleep(Duration::from_secs(5));
    assert_eq!(before, rv(s.cp), "an untouched hook must not be rewritten");

    // edit: a new generation reaches both
    let started = Instant::now();
    s.cp.apply_yaml(&hook_yaml(
        &s.tenant_ns,
        &name,
        &BLOCK_RM.replace("v1-block", "v2-block"),
    ));
    let g2 = generation(s.cp, &s.tenant_ns, &name);
    assert!(g2 > g1);
    assert!(wait_for(Duration::from_secs(30), || s
        .dispatchers
        .iter()
        .all(|d| served_generation(d, &key) == Some(g2))));
    println!(
        "E2E-FIGURE edit_to_both_dispatchers_ms={}",
        started.elapsed().as_millis()
    );
    for d in &s.dispatchers {
        assert_eq!(
            dispatch(d, &rm_event(&s.tenant))["reason"],
            "v2-block",
            "{d}"
        );
    }

    // delete: both stop serving and running it
    s.cp.kubectl_ok(&["-n", &s.tenant_ns, "delete", "agenthook", &name]);
    assert!(wait_for(Duration::from_secs(30), || s
        .dispatchers
        .iter()
        .all(|d| served_generation(d, &key).is_none())));
    for d in &s.dispatchers {
        let v = dispatch(d, &rm_event(&s.tenant));
        let ran = v["hooks"]
            .as_array()
            .unwrap()
            .iter()
            .any(|h| h["hook"] == key.as_str());
        assert!(!ran, "{d}: a deleted hook ran: {v}");
    }
}

#[test]
fn the_api_server_refuses_what_the_schema_can_say() {
    let s = stack();
    let cases = [
        (
            "bad-enum",
            "  event: pre_tool_call\n  handler: {type: http, http: {url: 'https://a.example'}}\n",
            "event",
        ),
        (
            "too-long",
            "  event: pre_tool_use\n  timeoutMs: 20000\n  handler: {type: http, http: {url: 'https://a.example'}}\n",
            "timeoutMs",
        ),
        (
            "prompt-nofilter",
            "  event: pre_tool_use\n  handler: {type: prompt, prompt: {promptTemplate: 'safe?'}}\n",
            "matcher",
        ),
        (
            "two-blocks",
            "  event: pre_tool_use\n  handler: {type: http, http: {url: 'https://a.example'}, command: {command: 'true'}}\n",
            "exactly the block",
        ),
        (
            "agent-noids",
            "  event: pre_tool_use\n  scope: agent\n  handler: {type: http, http: {url: 'https://a.example'}}\n",
            "agentIds",
        ),
        (
            "bad-kind",
            "  event: pre_tool_use\n  toolKinds: [bash]\n  handler: {type: http, http: {url: 'https://a.example'}}\n",
            "toolKinds",
        ),
        (
            "blocking-pre",
            "  event: pre_tool_use\n  blocking: true\n  handler: {type: http, http: {url: 'https://a.example'}}\n",
            "spec.blocking: only post_tool_use, stop and subagent_stop",
        ),
    ];
    for (name, body, needle) in cases {
        let out = s.cp.try_apply_yaml(&hook_yaml(&s.tenant_ns, name, body));
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            !out.status.success(),
            "{name} should be refused by the API server"
        );
        assert!(
            err.contains(needle),
            "{name}: error should mention {needle:?}: {err}"
        );
    }
}

#[test]
fn the_operator_refuses_what_needs_code_with_a_reason_naming_the_field() {
    let s = stack();
    let http = "  handler: {type: http, http: {url: 'https://a.example'}}\n";
    let cases = [
        (
            "bad-regex",
            format!("  event: pre_tool_use\n  matcher: '(unclosed'\n{http}"),
            &s.tenant_ns,
            "InvalidMatcher",
            "spec.matcher",
        ),
        (
            "bad-cel",
            format!("  event: pre_tool_use\n  ifExpr: 'tool_name =='\n{http}"),
            &s.tenant_ns,
            "InvalidIfExpr",
            "spec.ifExpr",
        ),
        (
            "global-here",
            format!("  event: pre_tool_use\n  scope: global\n{http}"),
            &s.tenant_ns,
            "GlobalOutsideMasterNamespace",
            "spec.scope",
        ),
        (
            "other-tenant",
            format!("  event: pre_tool_use\n  tenant: globex\n{http}"),
            &s.tenant_ns,
            "TenantMismatch",
            "spec.tenant",
        ),
        // Accepted, with a warning: ^Bash$ misses Gemini CLI's shell (disabled: it must
        // not disturb the other tests' decisions).
        (
            "bash-only",
            format!("  event: pre_tool_use\n  enabled: false\n  matcher: '^Bash$'\n{http}"),
            &s.tenant_ns,
            "MatcherNamesOneRuntime",
            "spec.toolKinds: [shell]",
        ),
        // session_start: an accepted global hook must not disturb the other tests' decisions
        (
            "global-ok",
            format!("  event: session_start\n  scope: global\n{http}"),
            &s.master,
            "Accepted",
            "",
        ),
    ];
    for (name, body, ns, reason, field) in cases {
        s.cp.apply_yaml(&hook_yaml(ns, name, &body));
        let settled = wait_for(Duration::from_secs(20), || {
            condition(s.cp, ns, name, "Accepted").is_some_and(|c| c["reason"] == reason)
        });
        let c = condition(s.cp, ns, name, "Accepted");
        assert!(
            settled,
            "{name}: Accepted condition {c:?}, want reason {reason}"
        );
        let c = c.unwrap();
        assert_eq!(
            c["status"],
            if reason == "Accepted" || reason == "MatcherNamesOneRuntime" {
                "True"
            } else {
                "False"
            },
            "{name}"
        );
        assert!(
            c["message"].as_str().unwrap_or("").contains(field),
            "{name}: message should name {field}: {c}"
        );
    }
}

#[test]
fn relabelling_a_namespace_rechecks_its_hooks() {
    let s = stack();
    let ns = unique_name("tenant-relabel");
    s.cp.create_namespace(&ns, &[("agenthooks.io/tenant", "globex")]);
    // A tenant of this test only: the hook stays on the shared API server after the test,
    // where it would run on other tests' events of a common tenant.
    let tenant = unique_name("initech");
    let body = format!(
        "  event: pre_tool_use\n  tenant: {tenant}\n  handler: {{type: http, http: {{url: 'https://a.example'}}}}\n"
    );
    s.cp.apply_yaml(&hook_yaml(&ns, "pinned", &body));
    assert!(wait_for(Duration::from_secs(20), || condition(
        s.cp, &ns, "pinned", "Accepted"
    )
    .is_some_and(|c| c["reason"] == "TenantMismatch")));
    s.cp.kubectl_ok(&[
        "label",
        "namespace",
        &ns,
        &format!("agenthooks.io/tenant={tenant}"),
        "--overwrite",
    ]);
    assert!(
        wait_for(Duration::from_secs(20), || condition(
            s.cp, &ns, "pinned", "Accepted"
        )
        .is_some_and(|c| c["status"] == "True")),
        "{:?}",
        condition(s.cp, &ns, "pinned", "Accepted")
    );
}

#[test]
fn operator_reports_its_dispatchers() {
    let s = stack();
    assert!(wait_for(Duration::from_secs(20), || {
        let out = std::process::Command::new("curl")
            .arg("--cacert")
            .arg(&agenthooks_e2e::stack::test_pki().ca)
            .args([
                "-s",
                "--max-time",
                "5",
                "-H",
                &s.sync_auth,
                &format!("{}/v1/dispatchers", s.operator_sync),
            ])
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        text.contains("e2e-dispatcher-1") && text.contains("e2e-dispatcher-2")
    }));
}
