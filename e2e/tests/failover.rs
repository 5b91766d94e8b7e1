//! Issue 3, point 5, on the real API server: two operator replicas and three dispatchers.
//!
//! - A dispatcher started while no operator runs is not ready (`/readyz` 503) and answers
//!   `/v1/dispatch` with 503: it never decides from an empty snapshot.
//! - The leader is killed (SIGKILL: no Lease release, the worst case); the standby takes
//!   over within the Lease duration (plus its renew grace), and meanwhile every
//!   dispatcher keeps serving its last snapshot: no decision changes while no operator
//!   leads. After the takeover an edit reaches every dispatcher through the new leader.
//!
//! Both operators run as the ServiceAccount of `config/rbac/operator.yaml`.

use std::time::{Duration, Instant};

use agenthooks_e2e::stack::{
    DispatcherProc, OperatorProc, install_crds, log_dir, operator_service_account_kubeconfig,
    tails, wait_or_panic,
};
use agenthooks_e2e::{ControlPlane, unique_name};
use serde_json::{Value, json};

/// Lease duration given to both operators (seconds).
const LEASE_SECONDS: u64 = 6;

/// A command hook that runs on every `exec` call: blocks `rm ...` (naming `message` in
/// its reason) and allows anything else, so an allow resets the breaker's run between the
/// blocks this test sends.
fn hook_yaml(ns: &str, name: &str, message: &str) -> String {
    format!(
        "apiVersion: agenthooks.io/v1alpha1\nkind: AgentHook\nmetadata: {{name: {name}, namespace: {ns}}}\nspec:\n  event: pre_tool_use\n  matcher: '^exec$'\n  handler:\n    type: command\n    command:\n      command: |\n        case \"$(cat)\" in *'\"cmd\":\"rm'*) echo {message} >&2; exit 2;; esac; exit 0\n"
    )
}

/// This test's tenant: one namespace holds each tenant on the shared API server
/// (CONTRACT §9.3), so it is not shared with other tests' namespaces.
fn tenant() -> &'static str {
    static TENANT: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    TENANT.get_or_init(|| unique_name("acme"))
}

fn rm_event() -> Value {
    json!({"event": "pre_tool_use", "tenant_id": tenant(), "agent_id": "a1",
           "tool_name": "exec", "tool_input": {"cmd": "rm -rf /"}})
}

fn ls_event() -> Value {
    json!({"event": "pre_tool_use", "tenant_id": tenant(), "agent_id": "a1",
           "tool_name": "exec", "tool_input": {"cmd": "ls"}})
}

/// (decision, reason) of a dispatch answered 200.
fn decide(d: &DispatcherProc, event: &Value) -> (String, String) {
    let (code, body) = d.dispatch(event);
    assert_eq!(code, 200, "{} answered {code}: {body}", d.id);
    (
        body["decision"].as_str().unwrap_or_default().to_string(),
        body["reason"].as_str().unwrap_or_default().to_string(),
    )
}

#[test]
fn standby_takes_over_while_dispatchers_keep_deciding() {
    let cp = ControlPlane::shared();
    install_crds(cp);
    let master = unique_name("ah-failover");
    let tenant_ns = unique_name("tenant-acme");
    cp.create_namespace(&master, &[]);
    cp.create_namespace(&tenant_ns, &[("agenthooks.io/tenant", tenant())]);
    let logs = log_dir("ah-failover");
    let kubeconfig = operator_service_account_kubeconfig(cp, &master, &logs);
    let lease = unique_name("agenthooks-operator");
    let lease_flag = LEASE_SECONDS.to_string();
    let extra = ["--lease-duration-seconds", lease_flag.as_str()];

    // A dispatcher whose operator is not running.
    let nobody = format!("http://127.0.0.1:{}", agenthooks_e2e::procs::free_port());
    let early = DispatcherProc::start(&[&nobody], "early", &master, &[], &logs);
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(early.readyz(), 503, "ready without any snapshot");
    let (code, body) = early.dispatch(&rm_event());
    assert_eq!(
        code, 503,
        "a dispatcher without a snapshot must not decide: {body}"
    );
    drop(early);

    // Two replicas, three dispatchers that know both.
    let op1 = OperatorProc::start(&kubeconfig, &master, &lease, "op-1", &extra, &logs);
    let op2 = OperatorProc::start(&kubeconfig, &master, &lease, "op-2", &extra, &logs);
    let urls = [op1.sync.as_str(), op2.sync.as_str()];
    let ds: Vec<DispatcherProc> = (1..=3)
        .map(|i| DispatcherProc::start(&urls, &format!("fo-{i}"), &master, &[], &logs))
        .collect();
    let all = |extra: &[&OperatorProc]| {
        let mut v: Vec<&agenthooks_e2e::procs::Proc> = ds.iter().map(|d| &d.proc).collect();
        v.extend(extra.iter().map(|o| &o.proc));
        tails(&v)
    };
    wait_or_panic(
        Duration::from_secs(60),
        "one operator leads",
        &[&op1.proc, &op2.proc],
        || op1.is_leader() || op2.is_leader(),
    );

    cp.apply_yaml(&hook_yaml(&tenant_ns, "no-rm", "v1-no-rm"));
    let key = format!("{tenant_ns}/no-rm");
    if !agenthooks_e2e::wait_for(Duration::from_secs(60), || {
        ds.iter()
            .all(|d| d.served_generation(&key) == Some(1) && d.readyz() == 200)
    }) {
        panic!("hook not served by all three\n{}", all(&[&op1, &op2]));
    }
    let before: Vec<_> = ds
        .iter()
        .map(|d| (decide(d, &rm_event()), decide(d, &ls_event())))
        .collect();
    for (b, a) in &before {
        assert_eq!(b.0, "block");
        assert!(b.1.contains("v1-no-rm"), "reason: {}", b.1);
        assert_eq!(a.0, "allow");
    }

    // Kill the leader without letting it release the Lease.
    // Exactly one leads (each look is a metrics scrape, which may time out under load).
    assert!(
        agenthooks_e2e::wait_for(Duration::from_secs(10), || op1.is_leader()
            != op2.is_leader()),
        "not exactly one leader\n{}",
        all(&[&op1, &op2])
    );
    let (mut leader, standby) = if op1.is_leader() {
        (op1, op2)
    } else {
        (op2, op1)
    };
    assert!(!standby.is_leader(), "two leaders at once");
    let pid = leader.proc.pid().expect("leader running");
    unsafe { libc_kill(pid) };
    let killed = Instant::now();
    std::thread::sleep(Duration::from_millis(300));
    assert!(!leader.proc.running(), "leader still running after SIGKILL");

    // While no operator leads: every dispatcher stays ready and decides as before.
    let mut checks = 0;
    while !standby.is_leader() {
        assert!(
            killed.elapsed() < Duration::from_secs(LEASE_SECONDS * 3 + 10),
            "standby did not take over\n{}",
            all(&[&standby])
        );
        for (d, (b, a)) in ds.iter().zip(&before) {
            assert_eq!(
                d.readyz(),
                200,
                "{} not ready while the operator is away",
                d.id
            );
            // An allow resets the breaker's run, so the blocks never trip it.
            assert_eq!(&decide(d, &ls_event()), a, "{}: allow changed", d.id);
            assert_eq!(&decide(d, &rm_event()), b, "{}: block changed", d.id);
            checks += 1;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    let takeover = killed.elapsed();
    assert!(checks > 0, "no decision was checked during the gap");
    // The Lease expires LEASE_SECONDS after the last renewal; the standby retries every
    // grace period (a third of the duration), then needs its initial sync.
    assert!(
        takeover <= Duration::from_secs(LEASE_SECONDS + LEASE_SECONDS / 3 + 5),
        "takeover took {takeover:?} (lease {LEASE_SECONDS} s)"
    );
    eprintln!(
        "takeover after SIGKILL of the leader: {takeover:?} (lease {LEASE_SECONDS} s); {checks} decisions checked meanwhile"
    );

    // The new leader serves once its initial sync is done: an edit reaches all three.
    cp.apply_yaml(&hook_yaml(&tenant_ns, "no-rm", "v2-no-rm"));
    if !agenthooks_e2e::wait_for(Duration::from_secs(30), || {
        ds.iter().all(|d| d.served_generation(&key) == Some(2))
    }) {
        panic!("edit after failover not served\n{}", all(&[&standby]));
    }
    for d in &ds {
        let (decision, reason) = decide(d, &rm_event());
        assert_eq!(decision, "block");
        assert!(reason.contains("v2-no-rm"), "{}: {reason}", d.id);
    }
    leader.proc.stop(Duration::from_secs(1));
}

/// SIGKILL `pid`.
unsafe fn libc_kill(pid: u32) {
    unsafe { libc::kill(pid as i32, libc::SIGKILL) };
}
