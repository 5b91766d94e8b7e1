//! `make e2e-kind` (issue 11, kind for users): kind cannot run on these machines (no
//! registry, so no node image), so what can be checked without it is checked here:
//!
//! * `e2e/kind/cluster.yaml` is a config kind runs: decoded with kind's own v1alpha4 types,
//!   strictly as `kind create cluster --config` does, defaulted, and checked for what kind
//!   refuses (`e2e/kind/configcheck`, a small Go program built once and cached by
//!   `e2e/kind/build-configcheck.sh`);
//! * `e2e/kind/run.sh` parses (`bash -n`), passes shellcheck, and on a machine without its
//!   tools says which are missing and does nothing else;
//! * the images `run.sh` builds and loads are the ones the chart deploys and the agent
//!   image the chart tier's Pod runs.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use agenthooks_e2e::node::full_image_name;
use agenthooks_e2e::{helm_bin, repo_root};
use serde_json::Value;

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn run(cmd: &mut Command) -> Output {
    cmd.stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("{cmd:?}: {e}"))
}

fn ok(cmd: &mut Command) -> String {
    let out = run(cmd);
    assert!(
        out.status.success(),
        "{cmd:?} failed ({}):\n{}{}",
        out.status,
        text(&out.stdout),
        text(&out.stderr)
    );
    text(&out.stdout)
}

fn kind_dir() -> PathBuf {
    repo_root().join("e2e/kind")
}

/// The config checker, built (or found cached) by `build-configcheck.sh`.
fn config_check() -> PathBuf {
    let stdout = ok(Command::new("bash").arg(kind_dir().join("build-configcheck.sh")));
    let path = PathBuf::from(stdout.lines().last().unwrap_or_default().trim());
    assert!(path.is_file(), "build-configcheck.sh printed {path:?}");
    path
}

/// Runs the checker on `config` → (success, stdout, stderr).
fn check_config(checker: &Path, config: &Path) -> (bool, String, String) {
    let out = run(Command::new(checker).arg(config));
    (out.status.success(), text(&out.stdout), text(&out.stderr))
}

#[test]
fn kind_cluster_config_is_one_kind_runs() {
    let checker = config_check();
    let (passed, stdout, stderr) = check_config(&checker, &kind_dir().join("cluster.yaml"));
    assert!(passed, "e2e/kind/cluster.yaml: {stderr}");
    let cfg: Value = serde_json::from_str(&stdout).expect("the checker prints JSON");
    assert_eq!(cfg["name"], "agenthooks-e2e");
    let nodes = cfg["nodes"].as_array().expect("nodes");
    assert_eq!(nodes.len(), 1, "one node: {stdout}");
    assert_eq!(nodes[0]["role"], "control-plane");
    assert!(
        nodes[0]["image"]
            .as_str()
            .is_some_and(|i| i.starts_with("kindest/node:")),
        "kind's default node image: {stdout}"
    );
    // the chart tier's agent reaches the dispatcher by <svc>.<ns>.svc.cluster.local, and
    // the node harness uses the same pod range
    assert_eq!(cfg["networking"]["podSubnet"], "10.244.0.0/16");
    assert_eq!(cfg["networking"]["kubeProxyMode"], "iptables");

    // run.sh creates the cluster under the name the config gives
    let script = std::fs::read_to_string(kind_dir().join("run.sh")).unwrap();
    assert!(
        script.contains("\nCLUSTER=agenthooks-e2e\n"),
        "run.sh names agenthooks-e2e"
    );

    // The checker refuses what kind refuses: the same file with one mistake each.
    let original = std::fs::read_to_string(kind_dir().join("cluster.yaml")).unwrap();
    let dir = tempfile::tempdir().unwrap();
    for (from, to, needle) in [
        ("nodes:", "node:", "field node not found"),
        (
            "  - role: control-plane",
            "  - role: master",
            "nodes[0].role \"master\"",
        ),
        (
            "  - role: control-plane",
            "  - role: worker",
            "no control-plane node",
        ),
        (
            "apiVersion: kind.x-k8s.io/v1alpha4",
            "apiVersion: kind.x-k8s.io/v1alpha3",
            "apiVersion \"kind.x-k8s.io/v1alpha3\"",
        ),
        ("kind: Cluster", "kind: Config", "kind \"Config\""),
        (
            "name: agenthooks-e2e",
            "name: Agenthooks_E2E",
            "name \"Agenthooks_E2E\"",
        ),
        (
            "  - role: control-plane",
            "  - role: control-plane\nnetworking:\n  podSubnet: 10.244.0.0/33",
            "networking.podSubnet \"10.244.0.0/33\"",
        ),
    ] {
        let broken = original.replace(from, to);
        assert_ne!(
            broken, original,
            "cluster.yaml has no {from:?}: update this test"
        );
        let file = dir.path().join("cluster.yaml");
        std::fs::write(&file, &broken).unwrap();
        let (passed, _, stderr) = check_config(&checker, &file);
        assert!(!passed, "accepted with {to:?}");
        assert!(stderr.contains(needle), "{to:?}: {needle:?} in {stderr}");
    }
}

#[test]
fn kind_run_script_is_well_formed_and_checks_its_tools_first() {
    let script = kind_dir().join("run.sh");
    ok(Command::new("bash").arg("-n").arg(&script));
    let shellcheck = Command::new("shellcheck")
        .arg("--version")
        .stdout(Stdio::null())
        .status();
    assert!(
        shellcheck.is_ok_and(|s| s.success()),
        "shellcheck is needed (Debian: shellcheck; scripts/install-deps.sh installs it)"
    );
    ok(Command::new("shellcheck")
        .arg(&script)
        .arg(kind_dir().join("build-configcheck.sh")));

    // Without docker, kind, kubectl and cargo: every missing tool named, exit 1, nothing else
    // run (an empty PATH: no other program could have run).
    let empty = tempfile::tempdir().unwrap();
    let out = run(Command::new("/bin/bash")
        .arg(&script)
        .env_clear()
        .env("PATH", empty.path()));
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    assert_eq!(
        text(&out.stderr).trim(),
        "[e2e-kind] missing on PATH: docker kind kubectl cargo (docs/kind.md says what the kind tier needs)"
    );
    assert_eq!(text(&out.stdout), "");
}

#[test]
fn kind_run_script_loads_the_images_the_chart_and_the_chart_tier_use() {
    let listed = ok(Command::new("bash")
        .arg(kind_dir().join("run.sh"))
        .arg("--images"));
    let loaded: Vec<String> = listed.lines().map(full_image_name).collect();
    assert_eq!(loaded.len(), 3, "{listed}");

    // The chart's images (defaults), as `helm template` renders them.
    let chart = repo_root().join("charts/agenthooks");
    let rendered = ok(Command::new(helm_bin()).args([
        "template",
        "agenthooks",
        chart.to_str().unwrap(),
        "--namespace",
        "agenthooks-system",
    ]));
    let mut deployed: Vec<String> = rendered
        .lines()
        .filter_map(|l| l.trim().strip_prefix("image: "))
        .map(|i| full_image_name(i.trim_matches('"')))
        .collect();
    deployed.sort();
    deployed.dedup();
    assert_eq!(
        deployed,
        [
            "docker.io/agenthooks/dispatcher:0.1.0",
            "docker.io/agenthooks/operator:0.1.0"
        ]
    );
    for image in &deployed {
        assert!(
            loaded.contains(image),
            "run.sh does not load {image}: {listed}"
        );
    }

    // The agent image of the chart tier's Pods (`node::agent::AGENT_IMAGE`), which the
    // node harness builds under the same name (e2e/node/up.sh).
    let agent = agenthooks_e2e::node::agent::AGENT_IMAGE;
    assert!(
        loaded.contains(&full_image_name(agent)),
        "run.sh does not load {agent}: {listed}"
    );
    let up = std::fs::read_to_string(repo_root().join("e2e/node/up.sh")).unwrap();
    assert!(up.contains(agent), "e2e/node/up.sh does not build {agent}");
}
