//! CONTRACT §9.4 (issue 12 part 4) on the real API server: the sync port speaks TLS and a
//! dispatcher verifies the operator's certificate before it trusts a snapshot.
//!
//! One operator serves its sync port with the test run's certificate (SANs `127.0.0.1`,
//! `localhost`, signed by the run's CA). A dispatcher trusting that CA follows it, becomes
//! ready and serves a tenant's hook. A dispatcher trusting another CA, and one whose
//! operator URL names a host the certificate does not hold, never become ready, never
//! adopt a snapshot (dispatch answers 503 "treat as block"), never reach the operator's
//! tracking, and say in their logs which certificate check failed. Start-up refuses an
//! `http://` operator URL that is not loopback, and an `https://` one without a CA.

use std::process::Command;
use std::time::Duration;

use agenthooks_e2e::procs::bin;
use agenthooks_e2e::stack::{
    DispatcherProc, OperatorProc, SyncIdentity, http_get, http_get_with, install_crds, log_dir,
    metric, test_pki, wait_or_panic,
};
use agenthooks_e2e::{ControlPlane, unique_name};
use serde_json::{Value, json};

/// A command hook on `exec` calls: blocks `rm ...` with reason `tls-guard`.
fn hook_yaml(ns: &str, name: &str) -> String {
    format!(
        "apiVersion: agenthooks.io/v1alpha1\nkind: AgentHook\nmetadata: {{name: {name}, namespace: {ns}}}\nspec:\n  event: pre_tool_use\n  matcher: '^exec$'\n  handler:\n    type: command\n    command:\n      command: |\n        case \"$(cat)\" in *'\"cmd\":\"rm'*) echo tls-guard >&2; exit 2;; esac; exit 0\n"
    )
}

fn exec_event(tenant: &str, cmd: &str) -> Value {
    json!({"event": "pre_tool_use", "tenant_id": tenant, "agent_id": "a1",
           "tool_name": "exec", "tool_input": {"cmd": cmd}})
}

fn log_text(d: &DispatcherProc) -> String {
    std::fs::read_to_string(&d.proc.log).unwrap_or_default()
}

/// The ids the operator tracks (`GET /v1/dispatchers` on its sync port, over TLS), as
/// `host` (a name its certificate holds: curl checks it too), as a ServiceAccount of
/// `master` bound to the sync role.
fn tracked(op: &OperatorProc, host: &str, master: &str) -> Vec<String> {
    let observer = SyncIdentity::mint(ControlPlane::shared(), master, "tls-observer");
    let port = op.sync.rsplit(':').next().unwrap();
    let resolve = format!("{host}:{port}:127.0.0.1");
    let (code, body) = http_get_with(
        &format!("https://{host}:{port}/v1/dispatchers"),
        &["-H", &observer.header(), "--resolve", &resolve],
    );
    assert_eq!(code, 200, "GET /v1/dispatchers: {body}");
    let v: Value = serde_json::from_str(&body).unwrap();
    v["dispatchers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["id"].as_str().unwrap().to_string())
        .collect()
}

/// A dispatcher that refuses its operator's certificate: not ready, no hooks, dispatch
/// 503 "treat as block", the log naming `reason`, and never tracked by the operator.
fn assert_refuses(op: &OperatorProc, master: &str, host: &str, d: &DispatcherProc, reason: &str) {
    wait_or_panic(
        Duration::from_secs(30),
        &format!("{} logs the certificate failure ({reason})", d.id),
        &[&op.proc, &d.proc],
        || {
            let log = log_text(d);
            log.contains("invalid peer certificate") && log.contains(reason)
        },
    );
    // Several polls failed by now; none got a snapshot.
    let (code, body) = http_get(&format!("{}/readyz", d.url));
    assert_eq!(code, 503, "{}: /readyz {body}", d.id);
    assert_eq!(
        serde_json::from_str::<Value>(&body).unwrap(),
        json!({"ready": false})
    );
    let (code, body) = http_get(&format!("{}/v1/hooks", d.url));
    assert_eq!(code, 503, "{}: /v1/hooks {body}", d.id);
    let (code, body) = d.dispatch(&exec_event("acme", "rm -rf /"));
    assert_eq!(code, 503, "{}: {body}", d.id);
    assert_eq!(body["error"], "no hooks loaded yet; treat as block");
    assert!(
        metric(&d.metrics(), "agenthooks_sync_errors_total", "") >= 1.0,
        "{}",
        d.metrics()
    );
    let log = log_text(d);
    assert!(
        !log.contains("snapshot loaded"),
        "{} adopted a snapshot:\n{log}",
        d.id
    );
    assert!(
        log.contains("snapshot poll failed on every operator URL"),
        "{log}"
    );
    assert!(
        !tracked(op, host, master).contains(&d.id),
        "{} reached the operator's tracking",
        d.id
    );
}

#[test]
fn a_dispatcher_follows_a_verified_operator_and_refuses_one_that_does_not_verify() {
    let cp = ControlPlane::shared();
    install_crds(cp);
    let master = unique_name("ah-tls");
    let tenant_ns = unique_name("tenant-acme");
    let tenant = unique_name("acme");
    cp.create_namespace(&master, &[]);
    cp.create_namespace(&tenant_ns, &[("agenthooks.io/tenant", tenant.as_str())]);
    let logs = log_dir("ah-sync-tls");
    let pki = test_pki();
    let op = OperatorProc::start(
        &cp.kubeconfig,
        &master,
        &unique_name("agenthooks-operator"),
        "op-tls",
        &[],
        &logs,
    );
    assert!(op.sync.starts_with("https://127.0.0.1:"), "{}", op.sync);

    // The operator says it speaks TLS (no plain-HTTP warning in /readyz).
    wait_or_panic(
        Duration::from_secs(30),
        "operator ready",
        &[&op.proc],
        || http_get(&format!("{}/readyz", op.admin)).0 == 200,
    );
    let (_, body) = http_get(&format!("{}/readyz", op.admin));
    let ready: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(ready["syncTLS"], true, "{body}");
    assert!(ready.get("warning").is_none(), "{body}");

    // Plain HTTP on the TLS port gets nothing; TLS without the run's CA is refused.
    let plain = op.sync.replacen("https://", "http://", 1);
    assert_eq!(http_get(&format!("{plain}/v1/dispatchers")).0, 0);
    let out = Command::new("curl")
        .args([
            "-s",
            "-o",
            "/dev/null",
            "-w",
            "%{http_code}",
            "--max-time",
            "5",
        ])
        .arg(format!("{}/v1/dispatchers", op.sync))
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&out.stdout), "000");
    assert_eq!(
        out.status.code(),
        Some(60),
        "curl: peer certificate not trusted"
    );

    // 1. The right CA: ready, follows, serves the tenant's hook.
    let good = DispatcherProc::start(&[&op.sync], &unique_name("good"), &master, &[], &logs);
    let name = unique_name("tls-guard");
    let key = format!("{tenant_ns}/{name}");
    cp.apply_yaml(&hook_yaml(&tenant_ns, &name));
    wait_or_panic(
        Duration::from_secs(60),
        "the dispatcher with the operator's CA serves the hook",
        &[&op.proc, &good.proc],
        || good.readyz() == 200 && good.served_generation(&key) == Some(1),
    );
    let (code, d) = good.dispatch(&exec_event(&tenant, "rm -rf /"));
    assert_eq!(code, 200, "{d}");
    assert_eq!(d["decision"], "block", "{d}");
    assert_eq!(d["decidingHook"], key.as_str(), "{d}");
    assert!(d["reason"].as_str().unwrap().contains("tls-guard"), "{d}");
    let (code, d) = good.dispatch(&exec_event(&tenant, "ls"));
    assert_eq!((code, d["decision"].as_str()), (200, Some("allow")), "{d}");
    assert!(tracked(&op, "127.0.0.1", &master).contains(&good.id));
    assert!(log_text(&good).contains("snapshot loaded"));

    // 2. A CA that did not sign the operator's certificate.
    let (other_ca, _, _) = pki.other_ca("mallory-ca");
    let wrong_ca = DispatcherProc::start(
        &[&op.sync],
        &unique_name("wrong-ca"),
        &master,
        &["--operator-ca-file", other_ca.to_str().unwrap()],
        &logs,
    );

    // 3. The right CA, but the operator's certificate is for another host name: a second
    // operator (its own Lease) serving a certificate for operator.elsewhere.example.
    let (elsewhere_cert, elsewhere_key) =
        pki.serving_cert("elsewhere", &["operator.elsewhere.example"]);
    let elsewhere = OperatorProc::start(
        &cp.kubeconfig,
        &master,
        &unique_name("agenthooks-operator"),
        "op-tls-elsewhere",
        &[
            "--sync-tls-cert-file",
            elsewhere_cert.to_str().unwrap(),
            "--sync-tls-key-file",
            elsewhere_key.to_str().unwrap(),
        ],
        &logs,
    );
    let wrong_name = DispatcherProc::start(
        &[&elsewhere.sync],
        &unique_name("wrong-name"),
        &master,
        &[],
        &logs,
    );

    assert_refuses(&op, &master, "127.0.0.1", &wrong_ca, "UnknownIssuer");
    assert_refuses(
        &elsewhere,
        &master,
        "operator.elsewhere.example",
        &wrong_name,
        "certificate not valid for name \"127.0.0.1\"",
    );

    // The refused ones stay refused while the good one keeps deciding.
    std::thread::sleep(Duration::from_secs(3));
    assert_eq!(wrong_ca.readyz(), 503);
    assert_eq!(wrong_name.readyz(), 503);
    let (code, d) = good.dispatch(&exec_event(&tenant, "rm -rf /"));
    assert_eq!((code, d["decision"].as_str()), (200, Some("block")), "{d}");
}

/// Start-up fails on an operator URL that breaks the transport rule, naming the flag and
/// the rule (budget-load and serve alike).
#[test]
fn start_up_refuses_clear_text_to_another_host_and_https_without_a_ca() {
    let run = |args: &[&str]| {
        let out = Command::new(bin("agenthooks-dispatcher"))
            .args(args)
            .output()
            .expect("run the dispatcher");
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let serve = |url: &str, extra: &[&str]| {
        let mut args = vec![
            "--operator-url",
            url,
            "--listen",
            "127.0.0.1:0",
            "--allow-anonymous",
        ];
        args.extend_from_slice(extra);
        run(&args)
    };

    let (ok, err) = serve("http://agenthooks-operator.agenthooks-system.svc:9090", &[]);
    assert!(!ok);
    assert!(
        err.contains("--operator-url http://agenthooks-operator.agenthooks-system.svc:9090/: http:// is allowed only to a loopback address (127.0.0.0/8, ::1, localhost)"),
        "{err}"
    );

    let (ok, err) = serve(
        "https://agenthooks-operator.agenthooks-system.svc:9090",
        &[],
    );
    assert!(!ok);
    assert!(
        err.contains("--operator-url https://agenthooks-operator.agenthooks-system.svc:9090/: https:// needs --operator-ca-file"),
        "{err}"
    );

    let missing = std::env::temp_dir().join(unique_name("no-ca"));
    let (ok, err) = serve(
        "https://127.0.0.1:9",
        &["--operator-ca-file", missing.to_str().unwrap()],
    );
    assert!(!ok);
    assert!(
        err.contains(&format!(
            "--operator-ca-file {}: cannot read the file",
            missing.display()
        )),
        "{err}"
    );

    let (ok, err) = run(&[
        "budget-load",
        "--operator-url",
        "http://10.0.0.7:9090",
        "--operator-token-file",
        "/dev/null",
        "--dispatcher-id",
        "x",
        "--tenant",
        "acme",
        "--calls",
        "1",
        "--reserve",
        "1",
        "--settle",
        "1",
    ]);
    assert!(!ok);
    assert!(
        err.contains(
            "--operator-url http://10.0.0.7:9090/: http:// is allowed only to a loopback address"
        ),
        "{err}"
    );
}
