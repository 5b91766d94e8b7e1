//! A real single-node cluster (kubelet, kube-proxy, containerd, CoreDNS as host processes
//! next to their own etcd + kube-apiserver) for the chart tier: `e2e/node/up.sh` and
//! `down.sh` driven from a test, with the agenthooks images built by `e2e/images/build.sh`
//! and imported into the node's containerd.
//!
//! One node per machine (fixed bridge and addresses): `up.sh` refuses to start over a
//! running one. A test owns its node: [`Node::down`] tears it down and reports whether the
//! host was restored; dropping a [`Node`] (a failed test) tears it down too, and `up.sh`
//! leaves a watchdog that runs `down.sh` when the test process dies any other way.
//!
//! Needs root, iptables/nftables, a Go toolchain for the first build (binaries are cached
//! by version under `~/.cache/agenthooks/node/`) and cargo for the release images.
//!
//! With `AGENTHOOKS_E2E_KUBECONFIG` set, [`Node::up`] starts nothing and uses that cluster
//! (kind, a node of `make cluster NODE=1`, ...); its images (agenthooks/operator,
//! agenthooks/dispatcher and agenthooks.test/agent at the chart's tags) are the caller's
//! business, and [`Node::down`] stops nothing. A node started by `e2e/node/up.sh` is
//! recognised by the `env` file next to its kubeconfig: its logs and node IP are used.

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::Instant;

use crate::{helm_bin, repo_root};

pub mod agent;

/// A running node. Get one with [`Node::up`].
pub struct Node {
    /// DIR given to `up.sh`: logs in `dir/logs/`, the admin kubeconfig in `dir/kubeconfig`.
    /// For an existing cluster: a fresh directory for the test's files.
    pub dir: PathBuf,
    /// Admin kubeconfig (token in `system:masters`, TLS verified against the node's CA).
    pub kubeconfig: PathBuf,
    /// The node's address on the Pods' bridge, which Pods reach the host at
    /// (`10.244.0.1`); `None` on a cluster not started by `up.sh`.
    pub node_ip: Option<String>,
    /// Seconds `e2e/images/build.sh` took (the release build included); 0 for an existing
    /// cluster.
    pub images_secs: f64,
    /// Seconds `up.sh` took (node Ready and CoreDNS Ready); 0 for an existing cluster.
    pub up_secs: f64,
    /// Whether this process started the node (and [`Node::down`] stops it).
    pub owned: bool,
    /// Where `up.sh` logs went (`logs/<component>.log`), when it is one of its nodes.
    logs: Option<PathBuf>,
    down_done: bool,
}

/// `KEY=value` of an `up.sh` env file.
fn env_value(env: &str, key: &str) -> Option<String> {
    env.lines()
        .find_map(|l| l.strip_prefix(key)?.strip_prefix('='))
        .map(str::to_owned)
}

fn script(rel: &str) -> PathBuf {
    repo_root().join(rel)
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

impl Node {
    /// Builds the images, starts the node with them imported and waits for it (and
    /// CoreDNS) to be Ready. Panics with the scripts' output on failure (`up.sh` has torn
    /// down what it started by then).
    pub fn up() -> Node {
        if let Some(kc) = std::env::var_os(crate::KUBECONFIG_ENV).filter(|v| !v.is_empty()) {
            return Node::existing(PathBuf::from(kc));
        }
        let base = std::env::var_os("AGENTHOOKS_E2E_TMPDIR")
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
            .unwrap_or_else(std::env::temp_dir);
        // short: containerd's socket lives under it
        let dir = base.join(format!("ahnode-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("create the node dir");

        let t = Instant::now();
        let images = dir.join("images");
        let out = Command::new(script("e2e/images/build.sh"))
            .arg(&images)
            .stdin(Stdio::null())
            .output()
            .expect("run e2e/images/build.sh");
        assert!(
            out.status.success(),
            "e2e/images/build.sh failed ({}):\n{}{}",
            out.status,
            text(&out.stdout),
            text(&out.stderr)
        );
        let images_secs = t.elapsed().as_secs_f64();
        eprintln!("[node] images built in {images_secs:.1}s");

        let t = Instant::now();
        let out = Command::new(script("e2e/node/up.sh"))
            .arg(&dir)
            .arg(images.join("operator.tar"))
            .arg(images.join("dispatcher.tar"))
            .env("AGENTHOOKS_E2E_OWNER_PID", std::process::id().to_string())
            .stdin(Stdio::null())
            .output()
            .expect("run e2e/node/up.sh");
        assert!(
            out.status.success(),
            "e2e/node/up.sh {} failed ({}):\n{}{}",
            dir.display(),
            out.status,
            text(&out.stdout),
            text(&out.stderr)
        );
        let up_secs = t.elapsed().as_secs_f64();
        eprintln!("[node] up in {up_secs:.1}s (dir {})", dir.display());
        Node {
            kubeconfig: dir.join("kubeconfig"),
            node_ip: std::fs::read_to_string(dir.join("env"))
                .ok()
                .and_then(|e| env_value(&e, "NODE_IP")),
            logs: Some(dir.join("logs")),
            dir,
            images_secs,
            up_secs,
            owned: true,
            down_done: false,
        }
    }

    /// The cluster of `kubeconfig`, which must answer `/readyz`.
    fn existing(kubeconfig: PathBuf) -> Node {
        assert!(
            kubeconfig.is_file(),
            "{}={}: no such file",
            crate::KUBECONFIG_ENV,
            kubeconfig.display()
        );
        let parent = kubeconfig.parent().unwrap_or(Path::new("/")).to_owned();
        let env = std::fs::read_to_string(parent.join("env")).ok();
        let node_ip = env.as_deref().and_then(|e| env_value(e, "NODE_IP"));
        let ours = env.is_some() && node_ip.is_some();
        let dir = tempfile::Builder::new()
            .prefix("ahnode-ext-")
            .tempdir()
            .expect("a directory for the test's files")
            .keep();
        let node = Node {
            kubeconfig,
            node_ip,
            logs: ours.then(|| parent.join("logs")),
            dir,
            images_secs: 0.0,
            up_secs: 0.0,
            owned: false,
            down_done: false,
        };
        let out = node.kubectl(&["--request-timeout=10s", "get", "--raw", "/readyz"]);
        assert!(
            out.status.success(),
            "the cluster of {} is not ready: {}",
            node.kubeconfig.display(),
            text(&out.stderr)
        );
        eprintln!(
            "[node] using the existing cluster of {} (nothing started or stopped)",
            node.kubeconfig.display()
        );
        node
    }

    fn env_cmd(&self, program: impl AsRef<OsStr>) -> Command {
        let run = self.dir.join("run");
        let mut cmd = Command::new(program);
        cmd.env("KUBECONFIG", &self.kubeconfig)
            .env("KUBECACHEDIR", run.join("kube-cache"))
            .env("HELM_CACHE_HOME", run.join("helm/cache"))
            .env("HELM_CONFIG_HOME", run.join("helm/config"))
            .env("HELM_DATA_HOME", run.join("helm/data"))
            .stdin(Stdio::null());
        cmd
    }

    /// `kubectl ARGS...` against the node (never panics on a non-zero exit).
    pub fn kubectl<S: AsRef<OsStr>>(&self, args: &[S]) -> Output {
        self.env_cmd(crate_kubectl())
            .args(args)
            .output()
            .expect("run kubectl")
    }

    /// `kubectl ARGS...` with `stdin` on its standard input (never panics on a non-zero exit).
    pub fn kubectl_stdin<S: AsRef<OsStr>>(&self, args: &[S], stdin: &[u8]) -> Output {
        use std::io::Write;
        let mut child = self
            .env_cmd(crate_kubectl())
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("run kubectl");
        let mut pipe = child.stdin.take().expect("kubectl stdin");
        let input = stdin.to_vec();
        // written from a thread: kubectl may answer before it read everything
        let writer = std::thread::spawn(move || {
            let _ = pipe.write_all(&input);
        });
        let out = child.wait_with_output().expect("wait for kubectl");
        let _ = writer.join();
        out
    }

    /// `kubectl apply -f -` of `manifest` (YAML or JSON), panicking with its output unless
    /// it exits 0; returns stdout.
    pub fn apply(&self, manifest: &str) -> String {
        let out = self.kubectl_stdin(&["apply", "-f", "-"], manifest.as_bytes());
        assert!(
            out.status.success(),
            "kubectl apply failed: {}{}\n{manifest}",
            text(&out.stdout),
            text(&out.stderr)
        );
        text(&out.stdout)
    }

    /// `kubectl ARGS...`, panicking with its output unless it exits 0; returns stdout.
    pub fn kubectl_ok<S: AsRef<OsStr>>(&self, args: &[S]) -> String {
        let out = self.kubectl(args);
        assert!(
            out.status.success(),
            "kubectl {} failed: {}{}",
            join(args),
            text(&out.stdout),
            text(&out.stderr)
        );
        text(&out.stdout)
    }

    /// `kubectl ARGS... -o json`, parsed.
    pub fn kubectl_json<S: AsRef<OsStr>>(&self, args: &[S]) -> serde_json::Value {
        let mut all: Vec<&OsStr> = args.iter().map(AsRef::as_ref).collect();
        all.extend([OsStr::new("-o"), OsStr::new("json")]);
        let out = self.kubectl_ok(&all);
        serde_json::from_str(&out).unwrap_or_else(|e| panic!("kubectl {}: {e}", join(args)))
    }

    /// `helm ARGS...` against the node (`$HELM`, else the binary `build-helm.sh` caches).
    pub fn helm<S: AsRef<OsStr>>(&self, args: &[S]) -> Output {
        self.env_cmd(helm_bin())
            .args(args)
            .output()
            .expect("run helm")
    }

    /// The last `lines` lines of a component's log (`kubelet`, `containerd`, ...); empty
    /// on a cluster not started by `up.sh`.
    pub fn log_tail(&self, component: &str, lines: usize) -> String {
        let Some(logs) = &self.logs else {
            return String::new();
        };
        let log =
            std::fs::read_to_string(logs.join(format!("{component}.log"))).unwrap_or_default();
        let all: Vec<&str> = log.lines().collect();
        all[all.len().saturating_sub(lines)..].join("\n")
    }

    /// Tears the node down; `Ok(seconds)` when `down.sh` says the host is as before (then
    /// only the logs and snapshots stay in [`Node::dir`]), `Err(its output)` when something
    /// differs (everything stays). `Ok(0.0)` at once for a cluster this
    /// process did not start.
    pub fn down(&mut self) -> Result<f64, String> {
        if !self.owned {
            // only the test's own files are there
            let _ = std::fs::remove_dir_all(&self.dir);
            return Ok(0.0);
        }
        self.down_done = true;
        let t = Instant::now();
        let out = Command::new(script("e2e/node/down.sh"))
            .arg(&self.dir)
            .stdin(Stdio::null())
            .output()
            .expect("run e2e/node/down.sh");
        let secs = t.elapsed().as_secs_f64();
        if out.status.success() {
            // the host is restored: drop the half GiB of images and containerd state, keep
            // the logs and the snapshots
            for heavy in ["run", "images"] {
                let _ = std::fs::remove_dir_all(self.dir.join(heavy));
            }
            Ok(secs)
        } else {
            Err(format!(
                "down.sh ({}) after {secs:.1}s:\n{}{}",
                out.status,
                text(&out.stdout),
                text(&out.stderr)
            ))
        }
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        if !self.down_done
            && let Err(e) = self.down()
        {
            eprintln!("[node] {e}");
        }
    }
}

fn join<S: AsRef<OsStr>>(args: &[S]) -> String {
    args.iter()
        .map(|a| a.as_ref().to_string_lossy().into_owned())
        .collect::<Vec<_>>()
        .join(" ")
}

fn crate_kubectl() -> PathBuf {
    match std::env::var_os("KUBECTL") {
        Some(k) if !k.is_empty() => PathBuf::from(k),
        _ if Path::new("/usr/bin/kubectl").exists() => PathBuf::from("/usr/bin/kubectl"),
        _ => PathBuf::from("kubectl"),
    }
}

/// The full reference of an image name as containerd (and so a node, kind's included) and
/// Docker store it: `docker.io/agenthooks/x:t` for `agenthooks/x:t`,
/// `docker.io/library/busybox:1` for `busybox:1`; a name whose first part is a registry
/// host (a dot or a port in it) is already full.
pub fn full_image_name(image: &str) -> String {
    let first = image.split('/').next().unwrap_or_default();
    if image.contains('/') && (first.contains('.') || first.contains(':')) {
        image.to_owned()
    } else if image.contains('/') {
        format!("docker.io/{image}")
    } else {
        format!("docker.io/library/{image}")
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn image_names_are_completed_as_containerd_stores_them() {
        use super::full_image_name as f;
        assert_eq!(
            f("agenthooks/operator:0.1.0"),
            "docker.io/agenthooks/operator:0.1.0"
        );
        assert_eq!(f("busybox:1"), "docker.io/library/busybox:1");
        assert_eq!(f("agenthooks.test/agent:1"), "agenthooks.test/agent:1");
        assert_eq!(f("localhost:5000/x:1"), "localhost:5000/x:1");
        assert_eq!(
            f("registry.k8s.io/pause:3.10.1"),
            "registry.k8s.io/pause:3.10.1"
        );
    }

    use super::env_value;

    #[test]
    fn env_value_reads_a_key_of_an_up_sh_env_file() {
        let env = "KUBECONFIG=/tmp/n/kubeconfig\nNODE_IP=10.244.0.1\nNODE_NAME=agenthooks-node\n";
        assert_eq!(env_value(env, "NODE_IP").as_deref(), Some("10.244.0.1"));
        assert_eq!(env_value(env, "NODE"), None, "whole keys only");
        assert_eq!(env_value(env, "APISERVER_URL"), None);
    }
}
