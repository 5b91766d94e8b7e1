//! The images the harness builds are the images the Dockerfile builds, under the names the
//! chart and config/ deploy (issue 11): `e2e/images/build.sh` reads the Dockerfile's final
//! stages (it refuses an instruction it cannot reproduce) and makes the root file system
//! with the same `scripts/image-rootfs.sh` the Dockerfile runs. No Docker, no root needed.

use std::path::PathBuf;
use std::process::Command;

use agenthooks_e2e::node::full_image_name;
use agenthooks_e2e::{helm_bin, repo_root};
use serde_json::Value;

fn run(cmd: &mut Command) -> String {
    let out = cmd.output().expect("run");
    assert!(
        out.status.success(),
        "{cmd:?}: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn build_sh() -> PathBuf {
    repo_root().join("e2e/images/build.sh")
}

fn images_of(yaml: &str) -> Vec<String> {
    let mut v: Vec<String> = yaml
        .lines()
        .filter_map(|l| l.trim().strip_prefix("image: "))
        .map(|i| full_image_name(i.trim_matches('"')))
        .collect();
    v.sort();
    v.dedup();
    v
}

#[test]
fn harness_images_follow_the_dockerfile_final_stages() {
    for component in ["operator", "dispatcher"] {
        let config: Value =
            serde_json::from_str(&run(Command::new(build_sh()).args(["--config", component])))
                .unwrap();
        assert_eq!(config["User"], "65532:65532", "{component}: {config}");
        assert_eq!(
            config["Entrypoint"],
            serde_json::json!([format!("/usr/local/bin/agenthooks-{component}")]),
            "{component}: {config}"
        );
        assert!(
            config["Env"]
                .as_array()
                .unwrap()
                .iter()
                .any(|e| e == "PATH=/usr/local/bin:/usr/bin:/bin"),
            "{component}: the chart runs the binaries by name: {config}"
        );
    }
    // an instruction the harness cannot reproduce is refused, not ignored
    let dir = tempfile::tempdir().unwrap();
    let dockerfile = std::fs::read_to_string(repo_root().join("Dockerfile")).unwrap();
    let broken = dockerfile.replace(
        "USER 65532:65532\nWORKDIR /\nENTRYPOINT [\"/usr/local/bin/agenthooks-operator\"]",
        "USER 65532:65532\nVOLUME /data\nWORKDIR /\nENTRYPOINT [\"/usr/local/bin/agenthooks-operator\"]",
    );
    assert_ne!(
        broken, dockerfile,
        "the operator stage changed: update this test"
    );
    let copy = dir.path().join("repo");
    std::fs::create_dir_all(copy.join("e2e/images")).unwrap();
    std::fs::create_dir_all(copy.join("charts/agenthooks")).unwrap();
    std::fs::write(copy.join("Dockerfile"), broken).unwrap();
    std::fs::copy(build_sh(), copy.join("e2e/images/build.sh")).unwrap();
    std::fs::copy(
        repo_root().join("charts/agenthooks/Chart.yaml"),
        copy.join("charts/agenthooks/Chart.yaml"),
    )
    .unwrap();
    let out = Command::new("bash")
        .arg(copy.join("e2e/images/build.sh"))
        .args(["--config", "operator"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("'VOLUME' is not reproduced"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn chart_and_kustomize_deploy_the_images_the_harness_builds() {
    let mut refs: Vec<String> = run(Command::new(build_sh()).arg("--refs"))
        .lines()
        .map(str::to_owned)
        .collect();
    refs.sort();
    let chart = repo_root().join("charts/agenthooks");
    let rendered = run(Command::new(helm_bin()).args([
        "template",
        "agenthooks",
        chart.to_str().unwrap(),
        "--namespace",
        "agenthooks-system",
    ]));
    assert_eq!(images_of(&rendered), refs, "helm template (defaults)");
    let kustomized = run(Command::new("kubectl").args([
        "kustomize",
        repo_root().join("config/default").to_str().unwrap(),
    ]));
    assert_eq!(
        images_of(&kustomized),
        refs,
        "kubectl kustomize config/default"
    );
}
