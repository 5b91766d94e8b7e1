//! Issue 15 point 5 on the real API server: an operator keeping the changes of 4 versions
//! (`--snapshot-history-versions 4`) and two dispatchers.
//!
//! - An edit and a delete reach both dispatchers as deltas (the operator answers their
//!   polls with `SnapshotDelta`s, and neither takes another complete snapshot), and both
//!   serve exactly the right set.
//! - A gap: dispatcher 2 is stopped (SIGSTOP) while more versions are published than the
//!   operator keeps (new hooks, an edit, a delete); once it runs again its version is
//!   older than the kept changes, so it gets a complete snapshot, and ends serving exactly
//!   what dispatcher 1 (which followed by deltas all along) serves.
//! - Each dispatcher's `Ready` report holds: every hook ends `Ready=True`; a new hook whose
//!   dispatchers load it at once gets one status write (`Accepted` and `Ready=True`
//!   together, no `Ready=Pending` first).

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use agenthooks_e2e::stack::{
    DispatcherProc, OperatorProc, http_get, install_crds, log_dir, metric, tails, wait_or_panic,
};
use agenthooks_e2e::{ControlPlane, condition, unique_name, wait_for};
use serde_json::Value;

fn hook(ns: &str, name: &str, matcher: &str) -> String {
    format!(
        "apiVersion: agenthooks.io/v1alpha1\nkind: AgentHook\nmetadata: {{name: {name}, namespace: {ns}}}\nspec:\n  event: pre_tool_use\n  matcher: '{matcher}'\n  handler:\n    type: http\n    http: {{url: 'https://policy.example.com/hook'}}\n"
    )
}

/// `namespace/name` → generation of every hook of `ns` dispatcher `d` serves; `None` when
/// it does not answer.
fn served(d: &DispatcherProc, ns: &str) -> Option<BTreeMap<String, i64>> {
    let (code, body) = http_get(&format!("{}/v1/hooks", d.url));
    if code != 200 {
        return None;
    }
    let v: Value = serde_json::from_str(&body).ok()?;
    Some(
        v["hooks"]
            .as_array()?
            .iter()
            .filter_map(|h| {
                let key = h["hook"].as_str()?;
                key.starts_with(&format!("{ns}/"))
                    .then(|| (key.to_string(), h["generation"].as_i64().unwrap_or(0)))
            })
            .collect(),
    )
}

/// The value of `name{labels}` on dispatcher `d`.
fn dispatcher_metric(d: &DispatcherProc, name: &str, labels: &str) -> f64 {
    metric(&d.metrics(), name, labels)
}

fn full_snapshots_taken(d: &DispatcherProc) -> f64 {
    dispatcher_metric(
        d,
        "agenthooks_sync_updates_total",
        "body=\"snapshot\",result=\"applied\"",
    )
}

fn deltas_taken(d: &DispatcherProc) -> f64 {
    dispatcher_metric(
        d,
        "agenthooks_sync_updates_total",
        "body=\"delta\",result=\"applied\"",
    )
}

/// Follows the AgentHooks of `ns` from now on (`kubectl get --raw ...?watch=1`, in a
/// thread): (event type, name, `Ready` status or `""`) of each change.
fn watch_changes(cp: &ControlPlane, ns: &str) -> Arc<Mutex<Vec<(String, String, String)>>> {
    let path = format!("/apis/agenthooks.io/v1alpha1/namespaces/{ns}/agenthooks");
    let list: Value = serde_json::from_str(&cp.kubectl_ok(&["get", "--raw", &path])).unwrap();
    let rv = list["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .to_string();
    let mut child = Command::new(&cp.kubectl_bin)
        .arg("--kubeconfig")
        .arg(&cp.kubeconfig)
        .args([
            "get",
            "--raw",
            &format!("{path}?watch=1&resourceVersion={rv}&timeoutSeconds=300"),
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let out = child.stdout.take().unwrap();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let sink = seen.clone();
    std::thread::spawn(move || {
        for line in BufReader::new(out).lines() {
            let Ok(line) = line else { break };
            let Ok(ev) = serde_json::from_str::<Value>(&line) else {
                continue;
            };
            let ready = condition(&ev["object"], "Ready")
                .and_then(|c| c["status"].as_str().map(str::to_string))
                .unwrap_or_default();
            sink.lock().unwrap().push((
                ev["type"].as_str().unwrap_or_default().to_string(),
                ev["object"]["metadata"]["name"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string(),
                ready,
            ));
        }
        let _ = child.kill();
        let _ = child.wait();
    });
    seen
}

/// Whether `ns` holds `n` hooks, each `Ready=True` for its current generation.
fn all_ready(cp: &ControlPlane, ns: &str, n: usize) -> bool {
    let list = cp.kubectl_json(&["-n", ns, "get", "agenthooks"]);
    let items = list["items"].as_array().cloned().unwrap_or_default();
    items.len() == n
        && items.iter().all(|h| {
            condition(h, "Ready").is_some_and(|c| {
                c["status"] == "True" && c["observedGeneration"] == h["metadata"]["generation"]
            })
        })
}

fn want(ns: &str, hooks: &[(&str, i64)]) -> BTreeMap<String, i64> {
    hooks
        .iter()
        .map(|(n, g)| (format!("{ns}/{n}"), *g))
        .collect()
}

#[test]
fn edits_deletes_and_a_gap_all_end_in_the_right_served_set() {
    let cp = ControlPlane::shared();
    install_crds(cp);
    let master = unique_name("ah-deltas");
    let ns = unique_name("tenant-deltas");
    cp.create_namespace(&master, &[]);
    cp.create_namespace(&ns, &[("agenthooks.io/tenant", &unique_name("deltas"))]);
    let logs = log_dir("ah-deltas");
    let op = OperatorProc::start(
        &cp.kubeconfig,
        &master,
        &unique_name("agenthooks-operator"),
        "deltas-op",
        &["--snapshot-history-versions", "4"],
        &logs,
    );
    let ds: Vec<DispatcherProc> = (1..=2)
        .map(|i| DispatcherProc::start(&[&op.sync], &format!("deltas-{i}"), &master, &[], &logs))
        .collect();
    let procs = || {
        let mut v: Vec<&agenthooks_e2e::procs::Proc> = ds.iter().map(|d| &d.proc).collect();
        v.push(&op.proc);
        tails(&v)
    };
    let all_serve = |set: &BTreeMap<String, i64>| {
        wait_for(Duration::from_secs(60), || {
            ds.iter().all(|d| served(d, &ns).as_ref() == Some(set))
        })
    };
    let polls = |result: &str| {
        metric(
            &http_get(&format!("{}/metrics", op.admin)).1,
            "agenthooks_operator_snapshot_polls_total",
            &format!("result=\"{result}\""),
        )
    };

    // Every change of this namespace's hooks, as the API server tells watchers.
    let changes = watch_changes(cp, &ns);
    for name in ["a", "b", "c"] {
        cp.apply_yaml(&hook(&ns, name, &format!("^{name}$")));
    }
    let set = want(&ns, &[("a", 1), ("b", 1), ("c", 1)]);
    if !all_serve(&set) {
        panic!("the first hooks are not served by both\n{}", procs());
    }
    assert!(
        wait_for(Duration::from_secs(30), || all_ready(cp, &ns, 3)),
        "the first hooks Ready\n{}",
        procs()
    );
    std::thread::sleep(Duration::from_millis(500));
    {
        let seen = changes.lock().unwrap();
        for name in ["a", "b", "c"] {
            let modified: Vec<&String> = seen
                .iter()
                .filter(|(kind, n, _)| kind == "MODIFIED" && n == name)
                .map(|(_, _, ready)| ready)
                .collect();
            // One write, Accepted and Ready=True together — unless the dispatchers took
            // longer than the operator's 2 s Pending grace to confirm (a loaded machine):
            // then Ready=Unknown first, and True once they do. Never more.
            assert!(
                modified.last().map(|r| r.as_str()) == Some("True") && modified.len() <= 2,
                "{name}: at most two status writes, ending Ready=True: {seen:?}\n{}",
                procs()
            );
        }
    }
    let full_before: Vec<f64> = ds.iter().map(full_snapshots_taken).collect();
    let deltas_before: Vec<f64> = ds.iter().map(deltas_taken).collect();
    let delta_polls = polls("delta");

    // ---- an edit and a delete: deltas only ---------------------------------------------
    cp.apply_yaml(&hook(&ns, "a", "^a-2$"));
    cp.kubectl_ok(&["-n", &ns, "delete", "agenthook", "b"]);
    let set = want(&ns, &[("a", 2), ("c", 1)]);
    if !all_serve(&set) {
        panic!(
            "the edit and the delete are not served by both\n{}",
            procs()
        );
    }
    for (i, d) in ds.iter().enumerate() {
        assert_eq!(
            full_snapshots_taken(d),
            full_before[i],
            "{}: an edit and a delete need no complete snapshot",
            d.id
        );
        assert!(
            deltas_taken(d) > deltas_before[i],
            "{}: took no delta\n{}",
            d.id,
            procs()
        );
    }
    assert!(polls("delta") > delta_polls, "the operator sent no delta");

    // ---- a gap: dispatcher 2 stopped while 8 versions go by ----------------------------
    let full_polls = polls("snapshot");
    ds[1].proc.signal(libc::SIGSTOP);
    for i in 1..=6 {
        cp.apply_yaml(&hook(&ns, &format!("d{i}"), &format!("^d{i}$")));
        std::thread::sleep(Duration::from_millis(150));
    }
    cp.apply_yaml(&hook(&ns, "a", "^a-3$"));
    std::thread::sleep(Duration::from_millis(150));
    cp.kubectl_ok(&["-n", &ns, "delete", "agenthook", "c"]);
    let mut hooks: Vec<(String, i64)> = (1..=6).map(|i| (format!("d{i}"), 1)).collect();
    hooks.push(("a".into(), 3));
    let set: BTreeMap<String, i64> = hooks
        .iter()
        .map(|(n, g)| (format!("{ns}/{n}"), *g))
        .collect();
    wait_or_panic(
        Duration::from_secs(60),
        "dispatcher 1 serves every change while dispatcher 2 is stopped",
        &[&ds[0].proc, &op.proc],
        || served(&ds[0], &ns).as_ref() == Some(&set),
    );
    assert_eq!(
        full_snapshots_taken(&ds[0]),
        full_before[0],
        "dispatcher 1 followed by deltas"
    );
    ds[1].proc.signal(libc::SIGCONT);
    if !wait_for(Duration::from_secs(60), || {
        served(&ds[1], &ns).as_ref() == Some(&set)
    }) {
        panic!(
            "after the gap dispatcher 2 serves {:?}, not {set:?}\n{}",
            served(&ds[1], &ns),
            procs()
        );
    }
    assert!(
        full_snapshots_taken(&ds[1]) > full_before[1],
        "past the kept changes, dispatcher 2 took a complete snapshot\n{}",
        procs()
    );
    assert!(polls("snapshot") > full_polls, "the operator sent it");
    assert_eq!(
        dispatcher_metric(
            &ds[1],
            "agenthooks_sync_updates_total",
            "result=\"rejected\""
        ),
        0.0,
        "nothing had to be refused: the operator saw the gap"
    );

    // ---- and every hook ends Ready -------------------------------------------------------
    let ready = wait_for(Duration::from_secs(60), || all_ready(cp, &ns, set.len()));
    assert!(
        ready,
        "every hook Ready=True\n{}\n{}",
        cp.kubectl_ok(&["-n", &ns, "get", "agenthooks", "-o", "yaml"]),
        procs()
    );
}
