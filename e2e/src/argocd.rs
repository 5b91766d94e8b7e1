//! Argo CD's own health assessment of our objects, through `e2e/argocd-health` (a small Go
//! command built from Argo CD's module: its settings manager reads the health scripts from
//! an `argocd-cm` ConfigMap on the API server, gitops-engine's `GetResourceHealth` with
//! Argo CD's Lua override evaluates them, as the application controller does).
//!
//! ```no_run
//! use agenthooks_e2e::{ControlPlane, argocd::ArgoCdConfig};
//!
//! let cp = ControlPlane::shared();
//! let argocd = ArgoCdConfig::install(cp);     // config/argocd into a namespace of its own
//! let hook = cp.kubectl_ok(&["-n", "tenant-acme", "get", "agenthook", "guard", "-o", "json"]);
//! let health = &argocd.health(&hook)[0];
//! assert_eq!(health.status, "Healthy");
//! ```

use std::io::Write;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::OnceLock;

use serde_json::Value;

use crate::{ControlPlane, repo_root, unique_name};

/// Env var naming a directory that already holds `argocd-health` and `application-crd.yaml`
/// (what `e2e/argocd-health/build.sh` prints); unset: the script builds or finds them.
pub const TOOL_DIR_ENV: &str = "AGENTHOOKS_ARGOCD_HEALTH_DIR";

/// The directory of the built tool: `$AGENTHOOKS_ARGOCD_HEALTH_DIR`, else the cached build
/// of `e2e/argocd-health/build.sh` (built on first use: minutes; then cached by version).
pub fn tool_dir() -> PathBuf {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        if let Some(d) = std::env::var_os(TOOL_DIR_ENV).filter(|d| !d.is_empty()) {
            return PathBuf::from(d);
        }
        let script = repo_root().join("e2e/argocd-health/build.sh");
        let out = Command::new("bash")
            .arg(&script)
            .stdin(Stdio::null())
            .output()
            .expect("run e2e/argocd-health/build.sh");
        assert!(
            out.status.success(),
            "e2e/argocd-health/build.sh failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let dir = PathBuf::from(
            String::from_utf8_lossy(&out.stdout)
                .lines()
                .last()
                .unwrap_or_default()
                .trim(),
        );
        assert!(
            dir.join("argocd-health").is_file(),
            "build.sh printed {dir:?}, which holds no argocd-health"
        );
        dir
    })
    .clone()
}

/// Argo CD's Application CRD from the same argo-cd module version as the tool.
pub fn application_crd() -> PathBuf {
    tool_dir().join("application-crd.yaml")
}

/// One object's health as Argo CD assesses it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Health {
    /// Kind of the object.
    pub kind: String,
    /// Its name.
    pub name: String,
    /// `Healthy`, `Progressing`, `Degraded`, `Suspended`, `Missing`, `Unknown`, or `""` when
    /// Argo CD assesses no health for the kind.
    pub status: String,
    /// The message Argo CD shows beside it.
    pub message: String,
}

/// Our `config/argocd` (the `argocd-cm` with the two health checks) applied to a namespace
/// of its own on a cluster, as Argo CD would read it there.
#[derive(Debug)]
pub struct ArgoCdConfig {
    /// The namespace standing in for Argo CD's (`argocd` in config/argocd).
    pub namespace: String,
    kubeconfig: PathBuf,
}

impl ArgoCdConfig {
    /// Renders `config/argocd` with `kubectl kustomize`, moves the ConfigMap from `argocd` to
    /// a fresh namespace (a cluster given by `AGENTHOOKS_E2E_KUBECONFIG` may run a real Argo
    /// CD, whose argocd-cm a test must not touch) and applies it server-side, as the README
    /// tells users to.
    pub fn install(cp: &ControlPlane) -> ArgoCdConfig {
        let namespace = unique_name("argocd");
        cp.create_namespace(&namespace, &[]);
        let rendered = cp.kubectl_ok(&[
            "kustomize",
            repo_root()
                .join("config/argocd")
                .to_str()
                .expect("UTF-8 path"),
        ]);
        let from = "\n  namespace: argocd\n";
        assert_eq!(
            rendered.matches(from).count(),
            1,
            "config/argocd renders one object in namespace argocd:\n{rendered}"
        );
        let moved = rendered.replace(from, &format!("\n  namespace: {namespace}\n"));
        let out = cp.kubectl_stdin(
            &[
                "apply",
                "--server-side",
                "--field-manager=agenthooks",
                "-f",
                "-",
            ],
            &moved,
        );
        assert!(
            out.status.success(),
            "apply config/argocd: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        ArgoCdConfig {
            namespace,
            kubeconfig: cp.kubeconfig.clone(),
        }
    }

    /// Argo CD's health of each object in `json` (one object or a `List`, as `kubectl get
    /// -o json` prints). Panics when the tool fails to run (bad input, no argocd-cm);
    /// a script error comes back as Argo CD shows it (`Unknown`, the error as message).
    pub fn health(&self, json: &str) -> Vec<Health> {
        let mut child = Command::new(tool_dir().join("argocd-health"))
            .args([
                "--kubeconfig",
                self.kubeconfig.to_str().expect("UTF-8 path"),
            ])
            .args(["--namespace", &self.namespace])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("run argocd-health");
        child
            .stdin
            .take()
            .expect("stdin piped")
            .write_all(json.as_bytes())
            .expect("write to argocd-health");
        let out = child.wait_with_output().expect("wait for argocd-health");
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.code() == Some(0) || out.status.code() == Some(1),
            "argocd-health exited {:?}: {}{stdout}",
            out.status.code(),
            String::from_utf8_lossy(&out.stderr)
        );
        stdout
            .lines()
            .map(|line| {
                let v: Value = serde_json::from_str(line)
                    .unwrap_or_else(|e| panic!("argocd-health printed {line:?}: {e}"));
                let s = |k: &str| v[k].as_str().unwrap_or_default().to_string();
                Health {
                    kind: s("kind"),
                    name: s("name"),
                    status: s("status"),
                    message: s("message"),
                }
            })
            .collect()
    }

    /// Argo CD's (status, message) of the one object in `json`.
    pub fn health_of(&self, json: &str) -> (String, String) {
        let all = self.health(json);
        assert_eq!(all.len(), 1, "one object expected: {all:?}");
        let h = all.into_iter().next().expect("one");
        (h.status, h.message)
    }
}
