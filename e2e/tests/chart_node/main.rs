//! The chart tier on a real node (issue 11): `charts/agenthooks` on a single-node cluster
//! whose kubelet runs the images that `e2e/images/build.sh` builds like the Dockerfile
//! does, exercised by "agent" Pods that call the dispatcher through its Service.
//!
//! One node for the whole tier: [`support::run`] starts it, runs the scenarios below in
//! order (each timed in an `E2E-FIGURE scenario_<name>_s` line), prints the cluster's state
//! when one fails, and always tears the node down; the run fails if `down.sh` finds the
//! host different from before (iptables, links, routes, sysctls, mounts, cgroups, paths).
//! `AGENTHOOKS_NODE_SCENARIOS=name,...` runs only some (each installs what it needs).
//!
//! Ignored by `cargo test` (it needs root, builds release images and starts a node: a few
//! minutes once the binaries are cached, many minutes cold); `make test-node` runs it.

mod audit;
mod console;
mod edition;
mod failover;
mod faults;
mod install;
mod kustomize;
mod manifests;
mod rollout;
mod support;

#[test]
#[ignore = "needs root and starts a real node (kubelet, containerd): make test-node"]
fn chart_tier_on_a_real_node() {
    support::run(&[
        ("install", install::run),
        ("manifests", manifests::run),
        ("leader-failover", failover::run),
        ("rollout", rollout::run),
        ("faults", faults::run),
        ("audit", audit::run),
        ("console", console::run),
        ("edition-uninstall", edition::run),
        ("kustomize", kustomize::run),
    ]);
}

/// `make cluster NODE=1` starts a node with the chart installed for a person to use with
/// kubectl (the KUBECONFIG line printed, every Pod Ready, the dispatcher Service answering
/// from the host), and `make cluster-down` stops it with the host restored (down.sh's
/// check is its exit code); a second `make cluster-down` has nothing to do.
#[test]
#[ignore = "needs root and starts a real node (kubelet, containerd): make test-node"]
fn make_cluster_node_1_and_cluster_down() {
    use std::io::{Read, Write};
    use std::process::Command;
    use std::time::{Duration, Instant};

    if std::env::var_os(agenthooks_e2e::KUBECONFIG_ENV).is_some_and(|v| !v.is_empty()) {
        eprintln!("[make-cluster] an existing cluster is given: nothing to start");
        return;
    }
    let dir = tempfile::Builder::new()
        .prefix("ahcl-")
        .tempdir()
        .expect("a cluster dir")
        .keep();
    let make = |args: &[&str]| {
        Command::new("make")
            .arg("-C")
            .arg(agenthooks_e2e::repo_root())
            .args(args)
            .arg(format!("CLUSTER_DIR={}", dir.display()))
            .output()
            .expect("run make")
    };
    /// Runs `make cluster-down` unless disarmed (a failed assertion must not leave a node).
    struct Down<'a>(Option<&'a dyn Fn() -> std::process::Output>);
    impl Drop for Down<'_> {
        fn drop(&mut self) {
            if let Some(down) = self.0 {
                let _ = down();
            }
        }
    }
    let down = || make(&["cluster-down"]);
    let mut guard = Down(Some(&down));

    let t = Instant::now();
    let up = make(&["cluster", "NODE=1"]);
    let up_secs = t.elapsed().as_secs_f64();
    let stdout = String::from_utf8_lossy(&up.stdout).into_owned();
    assert!(
        up.status.success(),
        "make cluster NODE=1: {stdout}{}",
        String::from_utf8_lossy(&up.stderr)
    );
    let kubeconfig = stdout
        .lines()
        .find_map(|l| l.strip_prefix("KUBECONFIG="))
        .unwrap_or_else(|| panic!("no KUBECONFIG= line in\n{stdout}"))
        .to_owned();
    assert!(std::path::Path::new(&kubeconfig).is_file(), "{kubeconfig}");
    let pods = Command::new("kubectl")
        .args(["--kubeconfig", &kubeconfig, "-n", "agenthooks-system"])
        .args(["get", "pods", "-o", "json"])
        .output()
        .expect("kubectl");
    let pods: serde_json::Value = serde_json::from_slice(&pods.stdout).expect("pods");
    let ready: Vec<&str> = pods["items"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|p| {
            p["status"]["conditions"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|c| c["type"] == "Ready" && c["status"] == "True")
        })
        .filter_map(|p| p["metadata"]["labels"]["app.kubernetes.io/component"].as_str())
        .collect();
    assert_eq!(
        (
            ready.iter().filter(|c| **c == "operator").count(),
            ready.iter().filter(|c| **c == "dispatcher").count()
        ),
        (2, 2),
        "Ready Pods: {ready:?}"
    );
    // The printed Service address answers from this host.
    let addr = stdout
        .split("http://")
        .nth(1)
        .and_then(|s| s.split([' ', '\n']).next())
        .unwrap_or_else(|| panic!("no dispatcher address in\n{stdout}"))
        .to_owned();
    let mut conn = std::net::TcpStream::connect(&addr).expect("connect to the Service");
    conn.set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    conn.write_all(b"GET /readyz HTTP/1.0\r\n\r\n").unwrap();
    let mut answer = String::new();
    let _ = conn.read_to_string(&mut answer);
    assert!(
        answer.starts_with("HTTP/1.0 200"),
        "{addr}/readyz: {answer}"
    );

    guard.0 = None;
    let t = Instant::now();
    let out = down();
    let down_secs = t.elapsed().as_secs_f64();
    assert!(
        out.status.success(),
        "make cluster-down did not restore the host: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        !Command::new("ip")
            .args(["link", "show", "ahnode0"])
            .output()
            .expect("ip")
            .status
            .success(),
        "the node's bridge is gone"
    );
    let again = down();
    assert!(again.status.success(), "a second make cluster-down");
    eprintln!("E2E-FIGURE make_cluster_node_up_s={up_secs:.1} make_cluster_down_s={down_secs:.1}");
    let _ = std::fs::remove_dir_all(&dir);
}
