//! Operators and dispatchers as child processes on the shared control plane, and the
//! HTTP look-ups tests make of them (through `curl`, as a user would).
//!
//! Used by the issue-3 tests (breaker, budgets, executions, failover). Every process
//! logs to a directory under the system temp dir; [`Stack::tails`] shows the end of
//! every log when a test fails.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::procs::{Proc, bin, free_port};
use crate::{ControlPlane, unique_name, wait_for};

/// Hex seal key shared by the operator and dispatchers of a test stack.
pub const SEAL_KEY_HEX: &str = "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff";

/// Installs the CRDs as the README says (`kubectl apply --server-side -f config/crd/`)
/// and waits until they are established.
pub fn install_crds(cp: &ControlPlane) {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../config/crd/");
    let out = cp.kubectl(&[
        "apply",
        "--server-side",
        "--force-conflicts",
        "-f",
        dir.to_str().unwrap(),
    ]);
    assert!(
        out.status.success(),
        "kubectl apply -f config/crd/: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    cp.wait_for_crd("agenthooks.agenthooks.io", Duration::from_secs(30));
    cp.wait_for_crd("tenanthookbudgets.agenthooks.io", Duration::from_secs(30));
    cp.wait_for_crd("hookapprovals.agenthooks.io", Duration::from_secs(30));
}

/// The audience of a dispatcher's token on the operator's sync port.
pub const SYNC_AUDIENCE: &str = "agenthooks.io/sync";
/// The audience of a caller's token on a dispatcher (not a dispatcher's on the operator).
pub const CALLER_AUDIENCE: &str = "agenthooks.io";

/// A dispatcher's identity on the operator's sync port (CONTRACT §9.4): a ServiceAccount
/// in the operator's master namespace, bound (or not) to this run's copy of the
/// ClusterRole `agenthooks-sync` of `config/rbac/dispatcher.yaml`, and a token of it for
/// [`SYNC_AUDIENCE`] (TokenRequest, 1 hour) — bound to a Pod object of the same name
/// with [`SyncIdentity::pod_bound`], as a projected token volume gives a dispatcher's Pod.
#[derive(Debug, Clone)]
pub struct SyncIdentity {
    /// The identity the operator derives: `NAMESPACE/SERVICEACCOUNT`, or
    /// `NAMESPACE/POD` for a Pod-bound token.
    pub id: String,
    /// The bearer token.
    pub token: String,
}

/// The certificates of a test run (one per test process, in a temp directory): a CA and
/// the operator's serving certificate for `127.0.0.1` and `localhost` signed by it, as a
/// cluster has the chart's or cert-manager's. [`OperatorProc`] serves its sync port with
/// it and [`DispatcherProc`] trusts the CA, so the process tier runs TLS by default.
pub struct TestPki {
    /// Directory of the files.
    pub dir: PathBuf,
    /// The CA's certificate (what `--operator-ca-file` names).
    pub ca: PathBuf,
    /// The operator's certificate (SANs `127.0.0.1`, `localhost`).
    pub cert: PathBuf,
    /// Its key.
    pub key: PathBuf,
    issuer: rcgen::Issuer<'static, rcgen::KeyPair>,
}

impl TestPki {
    fn new() -> TestPki {
        let dir = std::env::temp_dir().join(unique_name("ah-pki"));
        std::fs::create_dir_all(&dir).unwrap();
        let (ca_pem, issuer) = new_ca("agenthooks e2e CA");
        let ca = dir.join("ca.crt");
        std::fs::write(&ca, ca_pem).unwrap();
        let mut pki = TestPki {
            cert: PathBuf::new(),
            key: PathBuf::new(),
            dir,
            ca,
            issuer,
        };
        let (cert, key) = pki.serving_cert("operator", &["127.0.0.1", "localhost"]);
        (pki.cert, pki.key) = (cert, key);
        pki
    }

    /// A serving certificate for `names` (DNS names or IP addresses) signed by this CA,
    /// written as `<name>.crt` / `<name>.key` → their paths.
    pub fn serving_cert(&self, name: &str, names: &[&str]) -> (PathBuf, PathBuf) {
        let mut params =
            rcgen::CertificateParams::new(names.iter().map(|s| s.to_string()).collect::<Vec<_>>())
                .unwrap();
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, name);
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = params.signed_by(&key, &self.issuer).unwrap();
        let (c, k) = (
            self.dir.join(format!("{name}.crt")),
            self.dir.join(format!("{name}.key")),
        );
        std::fs::write(&c, cert.pem()).unwrap();
        std::fs::write(&k, key.serialize_pem()).unwrap();
        (c, k)
    }

    /// Another CA, unrelated to this one: its certificate's path (`<name>.crt`) and a
    /// serving certificate for `127.0.0.1`/`localhost` it signed (`<name>-op.crt/.key`).
    pub fn other_ca(&self, name: &str) -> (PathBuf, PathBuf, PathBuf) {
        let (ca_pem, issuer) = new_ca(name);
        let ca = self.dir.join(format!("{name}.crt"));
        std::fs::write(&ca, ca_pem).unwrap();
        let other = TestPki {
            dir: self.dir.clone(),
            ca: ca.clone(),
            cert: PathBuf::new(),
            key: PathBuf::new(),
            issuer,
        };
        let (cert, key) = other.serving_cert(&format!("{name}-op"), &["127.0.0.1", "localhost"]);
        (ca, cert, key)
    }

    /// `--sync-tls-cert-file <cert> --sync-tls-key-file <key>`.
    pub fn sync_tls_flags(&self) -> Vec<String> {
        vec![
            "--sync-tls-cert-file".into(),
            self.cert.to_string_lossy().into_owned(),
            "--sync-tls-key-file".into(),
            self.key.to_string_lossy().into_owned(),
        ]
    }

    /// `--operator-ca-file <ca>`.
    pub fn operator_ca_flags(&self) -> Vec<String> {
        vec![
            "--operator-ca-file".into(),
            self.ca.to_string_lossy().into_owned(),
        ]
    }
}

fn new_ca(name: &str) -> (String, rcgen::Issuer<'static, rcgen::KeyPair>) {
    let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, name);
    let key = rcgen::KeyPair::generate().unwrap();
    let pem = params.self_signed(&key).unwrap().pem();
    (pem, rcgen::Issuer::new(params, key))
}

/// This test process's [`TestPki`] (made on first use).
pub fn test_pki() -> &'static TestPki {
    static PKI: std::sync::OnceLock<TestPki> = std::sync::OnceLock::new();
    PKI.get_or_init(TestPki::new)
}

/// `https://127.0.0.1:<port>`: the sync URL of an operator started with
/// [`TestPki::sync_tls_flags`].
pub fn sync_url(port: u16) -> String {
    format!("https://127.0.0.1:{port}")
}

/// A reqwest client that trusts [`test_pki`]'s CA (for calls to a sync port).
pub fn sync_client() -> reqwest::Client {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let tls = agenthooks_tls::client_config_trusting("--operator-ca-file", &test_pki().ca)
        .expect("the test CA");
    reqwest::Client::builder()
        .no_proxy()
        .tls_backend_preconfigured(tls)
        .build()
        .unwrap()
}

impl SyncIdentity {
    /// ServiceAccount `ns/name` (created if missing), bound to `agenthooks-sync` in `ns`,
    /// with a token for [`SYNC_AUDIENCE`].
    pub fn mint(cp: &ControlPlane, ns: &str, name: &str) -> SyncIdentity {
        SyncIdentity::create(cp, ns, name, true, SYNC_AUDIENCE, false)
    }

    /// As [`SyncIdentity::mint`] without the RoleBinding: RBAC refuses it (403).
    pub fn unbound(cp: &ControlPlane, ns: &str, name: &str) -> SyncIdentity {
        SyncIdentity::create(cp, ns, name, false, SYNC_AUDIENCE, false)
    }

    /// As [`SyncIdentity::mint`] with a token for another `audience` (401).
    pub fn for_audience(cp: &ControlPlane, ns: &str, name: &str, audience: &str) -> SyncIdentity {
        SyncIdentity::create(cp, ns, name, true, audience, false)
    }

    /// As [`SyncIdentity::mint`], the token bound to a Pod object `ns/<name>-pod` of the
    /// ServiceAccount (created; no node runs it): the API server names the Pod in the
    /// token's claims and in the TokenReview's `authentication.kubernetes.io/pod-name`
    /// extra, so the identity is `ns/<name>-pod`, not the account's.
    pub fn pod_bound(cp: &ControlPlane, ns: &str, name: &str) -> SyncIdentity {
        SyncIdentity::create(cp, ns, name, true, SYNC_AUDIENCE, true)
    }

    fn create(
        cp: &ControlPlane,
        ns: &str,
        name: &str,
        bound: bool,
        audience: &str,
        pod: bool,
    ) -> SyncIdentity {
        let role = sync_role(cp);
        let mut yaml = format!(
            "apiVersion: v1\nkind: ServiceAccount\nmetadata: {{name: {name}, namespace: {ns}}}\n"
        );
        if bound {
            yaml.push_str(&format!(
                "---\napiVersion: rbac.authorization.k8s.io/v1\nkind: RoleBinding\nmetadata: {{name: {name}-sync, namespace: {ns}}}\nroleRef: {{apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: {role}}}\nsubjects: [{{kind: ServiceAccount, name: {name}, namespace: {ns}}}]\n"
            ));
        }
        let pod_name = format!("{name}-pod");
        if pod {
            yaml.push_str(&format!(
                "---\napiVersion: v1\nkind: Pod\nmetadata: {{name: {pod_name}, namespace: {ns}}}\nspec: {{serviceAccountName: {name}, automountServiceAccountToken: false, containers: [{{name: d, image: agenthooks/dispatcher:test}}]}}\n"
            ));
        }
        cp.apply_yaml(&yaml);
        let mut args = vec![
            "create",
            "token",
            name,
            "-n",
            ns,
            "--audience",
            audience,
            "--duration=1h",
        ];
        if pod {
            args.extend([
                "--bound-object-kind",
                "Pod",
                "--bound-object-name",
                &pod_name,
            ]);
        }
        let token = cp.kubectl_ok(&args).trim().to_string();
        SyncIdentity {
            id: format!("{ns}/{}", if pod { &pod_name } else { name }),
            token,
        }
    }

    /// `authorization: Bearer <token>`, for `curl -H`.
    pub fn header(&self) -> String {
        format!("authorization: Bearer {}", self.token)
    }

    /// Writes the token into `dir` (for `--operator-token-file`); its path.
    pub fn token_file(&self, dir: &Path) -> PathBuf {
        let path = dir.join(format!("{}.sync-token", self.id.replace('/', "_")));
        std::fs::write(&path, &self.token).unwrap();
        path
    }
}

/// This run's copy of the ClusterRole `agenthooks-sync` of `config/rbac/dispatcher.yaml`
/// (applied once; the chart's `helm install` tests own the fixed name on the shared API
/// server): its name.
pub fn sync_role(cp: &ControlPlane) -> String {
    static APPLIED: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    APPLIED
        .get_or_init(|| {
            let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
            let text = std::fs::read_to_string(root.join("config/rbac/dispatcher.yaml")).unwrap();
            let doc = text
                .split("\n---\n")
                .find(|d| {
                    d.contains("kind: ClusterRole\n") && d.contains("name: agenthooks-sync\n")
                })
                .expect("config/rbac/dispatcher.yaml ships the ClusterRole agenthooks-sync");
            let name = bindable_role("agenthooks-sync");
            cp.apply_yaml(&doc.replace("name: agenthooks-sync\n", &format!("name: {name}\n")));
            name
        })
        .clone()
}

/// A ServiceAccount name for dispatcher `id` (lowercase letters, digits and `-`).
fn account_name(id: &str) -> String {
    let name: String = id
        .to_ascii_lowercase()
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
        .collect();
    name.trim_matches('-').chars().take(63).collect()
}

/// `GET url` with extra `curl` arguments → (status, body).
pub fn http_get_with(url: &str, extra: &[&str]) -> (u16, String) {
    let mut args = vec!["-s", "--max-time", "5", "-w", "\n%{http_code}"];
    args.extend_from_slice(extra);
    args.push(url);
    curl(&args)
}

/// `POST url` with a JSON body and extra `curl` arguments → (status, body).
pub fn http_post_with(url: &str, body: &Value, extra: &[&str]) -> (u16, String) {
    let body = body.to_string();
    let mut args = vec![
        "-s",
        "--max-time",
        "15",
        "-H",
        "content-type: application/json",
        "-X",
        "POST",
        "-d",
        &body,
        "-w",
        "\n%{http_code}",
    ];
    args.extend_from_slice(extra);
    args.push(url);
    curl(&args)
}

/// The seal key file of a log directory (written on first use; [`SEAL_KEY_HEX`]).
pub fn seal_key_path(logs: &Path) -> PathBuf {
    seal_key_file(logs)
}

/// `GET url` → (status, body); status 0 when nothing answered within 5 s.
pub fn http_get(url: &str) -> (u16, String) {
    http_get_with(url, &[])
}

/// `POST url` with a JSON body → (status, body); status 0 when nothing answered in 15 s.
pub fn http_post(url: &str, body: &Value) -> (u16, String) {
    http_post_with(url, body, &[])
}

/// Runs `curl` trusting [`test_pki`]'s CA too (the sync ports speak TLS), as a user
/// would with `--cacert ca.crt`.
fn curl(args: &[&str]) -> (u16, String) {
    let out = Command::new("curl")
        .arg("--cacert")
        .arg(&test_pki().ca)
        .args(args)
        .output()
        .expect("run curl");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let (body, code) = text.rsplit_once('\n').unwrap_or(("", &text));
    (code.trim().parse().unwrap_or(0), body.to_string())
}

/// Sum of the samples of metric `name` whose label set contains `labels` (`""`: all).
pub fn metric(text: &str, name: &str, labels: &str) -> f64 {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| {
            let (series, value) = l.rsplit_once(' ')?;
            let (metric_name, rest) = match series.find('{') {
                Some(i) => (&series[..i], &series[i..]),
                None => (series, ""),
            };
            (metric_name == name && rest.contains(labels))
                .then(|| value.parse::<f64>().ok())
                .flatten()
        })
        .sum()
}

/// An operator process.
pub struct OperatorProc {
    pub proc: Proc,
    /// `https://127.0.0.1:<sync port>` (TLS with [`test_pki`]'s certificate), or
    /// `http://` when `extra` held `--plain-sync` (not passed on).
    pub sync: String,
    /// `http://127.0.0.1:<metrics port>` (`/healthz`, `/readyz`, `/metrics`).
    pub admin: String,
    /// Its Lease holder identity.
    pub identity: String,
}

impl OperatorProc {
    /// Starts `agenthooks-operator` with `KUBECONFIG=kubeconfig`, the Lease `lease` in
    /// `master`, holder identity `identity`, and `extra` flags. The sync port speaks TLS
    /// with [`test_pki`]'s serving certificate unless `extra` gives its own
    /// `--sync-tls-cert-file` or holds `--plain-sync` (a harness word: plain HTTP).
    pub fn start(
        kubeconfig: &Path,
        master: &str,
        lease: &str,
        identity: &str,
        extra: &[&str],
        logs: &Path,
    ) -> OperatorProc {
        let (sync_port, admin_port) = (free_port(), free_port());
        let key = seal_key_file(logs);
        let mut args: Vec<String> = [
            "--master-namespace",
            master,
            "--sync-addr",
            &format!("127.0.0.1:{sync_port}"),
            "--metrics-addr",
            &format!("127.0.0.1:{admin_port}"),
            "--seal-key-file",
            key.to_str().unwrap(),
            "--lease-name",
            lease,
            "--lease-namespace",
            master,
            "--identity",
            identity,
            // The suites' fixtures are command hooks in tenant namespaces; the default
            // refusal (CommandHookNotAllowed) is tested in the operator's own tests.
            "--allow-tenant-command-hooks",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        let plain = extra.contains(&"--plain-sync");
        if !plain && !extra.iter().any(|a| a.starts_with("--sync-tls-cert-file")) {
            args.extend(test_pki().sync_tls_flags());
        }
        args.extend(
            extra
                .iter()
                .filter(|a| **a != "--plain-sync")
                .map(|s| s.to_string()),
        );
        let proc = Proc::start(
            identity,
            &bin("agenthooks-operator"),
            &args,
            &[("KUBECONFIG", kubeconfig.to_str().unwrap())],
            logs,
        );
        OperatorProc {
            proc,
            sync: if plain {
                format!("http://127.0.0.1:{sync_port}")
            } else {
                sync_url(sync_port)
            },
            admin: format!("http://127.0.0.1:{admin_port}"),
            identity: identity.to_string(),
        }
    }

    /// Whether it holds the Lease (its `agenthooks_operator_leader` gauge is 1).
    pub fn is_leader(&self) -> bool {
        let (code, text) = http_get(&format!("{}/metrics", self.admin));
        code == 200 && metric(&text, "agenthooks_operator_leader", "") == 1.0
    }

    /// Waits (up to 60 s) until it leads and has finished the initial sync of its leader
    /// session (`/readyz` says `"leader": true, "synced": true`): before that the sync port
    /// answers 503 to every authenticated request. Panics naming what it last said.
    pub fn wait_serving(&self) {
        let mut last = String::new();
        let ok = wait_for(Duration::from_secs(60), || {
            let (_, text) = http_get(&format!("{}/readyz", self.admin));
            let v: serde_json::Value = serde_json::from_str(&text).unwrap_or_default();
            last = text;
            v["leader"] == true && v["synced"] == true
        });
        assert!(ok, "operator {} never served: {last}", self.identity);
    }
}

/// One operator and `n` dispatchers following it on the shared control plane, with a
/// master namespace and a tenant namespace of their own (release builds under
/// `cargo bench`): what the benches measure against. The dispatchers are ready when
/// [`Fleet::start`] returns.
pub struct Fleet {
    pub cp: &'static ControlPlane,
    pub master: String,
    /// A namespace labelled `agenthooks.io/tenant: <tenant>`.
    pub tenant_ns: String,
    /// The fleet's own tenant (`acme-…`): one namespace holds each tenant on the shared
    /// API server (CONTRACT §9.3), so fleets never share one.
    pub tenant: String,
    pub operator: OperatorProc,
    pub dispatchers: Vec<DispatcherProc>,
}

impl Fleet {
    /// Starts it; `prefix` names the namespaces, the log directory and the processes
    /// (`<prefix>-op`, `<prefix>-1`..), `dispatcher_extra` are flags of every dispatcher.
    pub fn start(prefix: &str, n: usize, dispatcher_extra: &[&str]) -> Fleet {
        let cp = ControlPlane::shared();
        install_crds(cp);
        let master = unique_name(prefix);
        let tenant_ns = unique_name(&format!("{prefix}-acme"));
        let tenant = unique_name("acme");
        cp.create_namespace(&master, &[]);
        cp.create_namespace(&tenant_ns, &[("agenthooks.io/tenant", &tenant)]);
        let logs = log_dir(prefix);
        let operator = OperatorProc::start(
            &cp.kubeconfig,
            &master,
            &unique_name("agenthooks-operator"),
            &format!("{prefix}-op"),
            &[],
            &logs,
        );
        let dispatchers: Vec<DispatcherProc> = (1..=n)
            .map(|i| {
                DispatcherProc::start(
                    &[&operator.sync],
                    &format!("{prefix}-{i}"),
                    &master,
                    dispatcher_extra,
                    &logs,
                )
            })
            .collect();
        assert!(
            wait_for(Duration::from_secs(60), || dispatchers
                .iter()
                .all(|d| d.readyz() == 200)),
            "dispatchers not ready\n{}",
            tails(&dispatchers.iter().map(|d| &d.proc).collect::<Vec<_>>())
        );
        Fleet {
            cp,
            master,
            tenant_ns,
            tenant,
            operator,
            dispatchers,
        }
    }

    /// The dispatchers' base URLs.
    pub fn urls(&self) -> Vec<String> {
        self.dispatchers.iter().map(|d| d.url.clone()).collect()
    }
}

/// Whether every dispatcher at `urls` (base URLs) lists hook `key` in `GET /v1/hooks`
/// (`want`), or none does (`!want`); an unanswered or unreadable list counts as not yet.
pub async fn serves_everywhere(
    client: &reqwest::Client,
    urls: &[String],
    key: &str,
    want: bool,
) -> bool {
    for u in urls {
        let Ok(resp) = client.get(format!("{u}/v1/hooks")).send().await else {
            return false;
        };
        let Ok(body) = resp.bytes().await else {
            return false;
        };
        let Ok(v) = serde_json::from_slice::<Value>(&body) else {
            return false;
        };
        let has = v["hooks"]
            .as_array()
            .is_some_and(|hs| hs.iter().any(|h| h["hook"] == key));
        if has != want {
            return false;
        }
    }
    true
}

/// Polls [`serves_everywhere`] every 2 ms until it holds; the time since `since`. Panics
/// after 60 s.
pub async fn until_served(
    client: &reqwest::Client,
    urls: &[String],
    key: &str,
    want: bool,
    since: Instant,
) -> Duration {
    let deadline = since + Duration::from_secs(60);
    while !serves_everywhere(client, urls, key, want).await {
        assert!(Instant::now() < deadline, "{key}: not {want} within 60 s");
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    since.elapsed()
}

/// A dispatcher process following operators.
pub struct DispatcherProc {
    pub proc: Proc,
    /// `http://127.0.0.1:<port>`.
    pub url: String,
    /// Its identity on the operator's sync port (`MASTER/<account>`), which it reads from
    /// its token and sends as its `dispatcher`.
    pub id: String,
    /// Its credential on the sync port.
    pub identity: SyncIdentity,
}

impl DispatcherProc {
    /// Starts `agenthooks-dispatcher --operator-url <each of operators> ...` with `extra`
    /// flags, as ServiceAccount `master/<id>` ([`SyncIdentity::mint`]; its token in
    /// `--operator-token-file`, so its dispatcher id is `master/<id>`); with an `https`
    /// operator URL it trusts [`test_pki`]'s CA (`--operator-ca-file`) unless `extra`
    /// names its own.
    pub fn start(
        operators: &[&str],
        id: &str,
        master: &str,
        extra: &[&str],
        logs: &Path,
    ) -> DispatcherProc {
        DispatcherProc::start_with_env(operators, id, master, extra, &[], logs)
    }

    /// As [`DispatcherProc::start`], with `env` set (e.g. `KUBECONFIG` for
    /// `--kubernetes-callers`).
    pub fn start_with_env(
        operators: &[&str],
        id: &str,
        master: &str,
        extra: &[&str],
        env: &[(&str, &str)],
        logs: &Path,
    ) -> DispatcherProc {
        let identity = SyncIdentity::mint(ControlPlane::shared(), master, &account_name(id));
        DispatcherProc::start_as(operators, id, &identity, master, extra, env, logs)
    }

    /// As [`DispatcherProc::start_with_env`], with `identity`'s token.
    pub fn start_as(
        operators: &[&str],
        id: &str,
        identity: &SyncIdentity,
        master: &str,
        extra: &[&str],
        env: &[(&str, &str)],
        logs: &Path,
    ) -> DispatcherProc {
        let port = free_port();
        let key = seal_key_file(logs);
        let token = identity.token_file(logs);
        let mut args: Vec<String> = Vec::new();
        for o in operators {
            args.push("--operator-url".into());
            args.push(o.to_string());
        }
        args.extend(
            [
                "--listen",
                &format!("127.0.0.1:{port}"),
                "--operator-token-file",
                token.to_str().unwrap(),
                "--master-namespace",
                master,
                "--seal-key-file",
                key.to_str().unwrap(),
            ]
            .iter()
            .map(|s| s.to_string()),
        );
        args.extend(extra.iter().map(|s| s.to_string()));
        if operators.iter().any(|o| o.starts_with("https://"))
            && !extra.iter().any(|a| a.starts_with("--operator-ca-file"))
        {
            args.extend(test_pki().operator_ca_flags());
        }
        // Tests of other things than identity call without a credential.
        let told = extra.iter().any(|a| {
            a.starts_with("--callers-file")
                || a.starts_with("--kubernetes-callers")
                || a.starts_with("--allow-anonymous")
        });
        if !told {
            args.push("--allow-anonymous".into());
        }
        let proc = Proc::start(id, &bin("agenthooks-dispatcher"), &args, env, logs);
        DispatcherProc {
            proc,
            url: format!("http://127.0.0.1:{port}"),
            id: identity.id.clone(),
            identity: identity.clone(),
        }
    }

    /// `GET /readyz` status.
    pub fn readyz(&self) -> u16 {
        http_get(&format!("{}/readyz", self.url)).0
    }

    /// `POST /v1/dispatch` → (status, body as JSON or Null).
    pub fn dispatch(&self, event: &Value) -> (u16, Value) {
        let (code, body) = http_post(&format!("{}/v1/dispatch", self.url), event);
        (code, serde_json::from_str(&body).unwrap_or(Value::Null))
    }

    /// The generation of hook `ns/name` it serves (`GET /v1/hooks`), if any.
    pub fn served_generation(&self, key: &str) -> Option<i64> {
        let (_, body) = http_get(&format!("{}/v1/hooks", self.url));
        let v: Value = serde_json::from_str(&body).ok()?;
        v["hooks"]
            .as_array()?
            .iter()
            .find(|h| h["hook"] == key)
            .and_then(|h| h["generation"].as_i64())
    }

    /// `GET /metrics` text.
    pub fn metrics(&self) -> String {
        http_get(&format!("{}/metrics", self.url)).1
    }
}

/// A fresh log directory `<tmp>/<prefix>-<unique>`.
pub fn log_dir(prefix: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(unique_name(prefix));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn seal_key_file(logs: &Path) -> PathBuf {
    let key = logs.join("seal.key");
    if !key.exists() {
        std::fs::write(&key, SEAL_KEY_HEX).unwrap();
    }
    key
}

/// A kubeconfig for the operator's ServiceAccount as shipped in `config/rbac/operator.yaml`
/// (every `agenthooks-operator` name made unique, namespace `agenthooks-system` replaced by
/// `ns`), so a test runs the operator with exactly the permissions users give it.
pub fn operator_service_account_kubeconfig(cp: &ControlPlane, ns: &str, dir: &Path) -> PathBuf {
    service_account_kubeconfig(
        cp,
        "config/rbac/operator.yaml",
        "agenthooks-operator",
        ns,
        dir,
    )
}

/// A kubeconfig for a dispatcher ServiceAccount with the RBAC of
/// `config/rbac/dispatcher.yaml` (TokenReview and SubjectAccessReview for
/// `--kubernetes-callers`), made unique and moved to `ns` as
/// [`operator_service_account_kubeconfig`] does.
pub fn dispatcher_service_account_kubeconfig(cp: &ControlPlane, ns: &str, dir: &Path) -> PathBuf {
    service_account_kubeconfig(
        cp,
        "config/rbac/dispatcher.yaml",
        "agenthooks-dispatcher",
        ns,
        dir,
    )
}

/// A token of ServiceAccount `ns/sa` for `audience` (TokenRequest, 1 hour), as a projected
/// token volume gives a Pod.
pub fn service_account_token(cp: &ControlPlane, ns: &str, sa: &str, audience: &str) -> String {
    cp.kubectl_ok(&[
        "create",
        "token",
        sa,
        "-n",
        ns,
        "--audience",
        audience,
        "--duration=1h",
    ])
    .trim()
    .to_string()
}

/// An operator in `master` and one dispatcher `<prefix>-1` following it with
/// `--kubernetes-callers`, running as a ServiceAccount with `config/rbac/dispatcher.yaml`'s
/// RBAC, RBAC answers cached 2 s (allowed) and 1 s (denied), and `extra` flags.
pub fn kubernetes_callers_stack(
    cp: &ControlPlane,
    prefix: &str,
    master: &str,
    extra: &[&str],
    logs: &Path,
) -> (OperatorProc, DispatcherProc) {
    let operator = OperatorProc::start(
        &cp.kubeconfig,
        master,
        &unique_name(&format!("{prefix}-lease")),
        &format!("{prefix}-op"),
        &[],
        logs,
    );
    let kubeconfig = dispatcher_service_account_kubeconfig(cp, master, logs);
    let flags = [
        &[
            "--kubernetes-callers",
            "--caller-access-cache-seconds",
            "2",
            "--caller-denied-cache-seconds",
            "1",
        ][..],
        extra,
    ]
    .concat();
    let d = DispatcherProc::start_with_env(
        &[&operator.sync],
        &format!("{prefix}-1"),
        master,
        &flags,
        &[("KUBECONFIG", kubeconfig.to_str().unwrap())],
        logs,
    );
    (operator, d)
}

/// The ClusterRoles of `config/rbac/dispatcher.yaml` that platform teams bind.
pub const ROLES_TO_BIND: [&str; 4] = [
    "agenthooks-dispatch",
    "agenthooks-history-reader",
    "agenthooks-tester",
    "agenthooks-sync",
];

/// This run's copy of the role to bind `role` (one of [`ROLES_TO_BIND`]), as applied by
/// [`dispatcher_service_account_kubeconfig`]: the shared API server's `helm install` tests
/// own the fixed names.
pub fn bindable_role(role: &str) -> String {
    static RUN: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    let run = RUN.get_or_init(|| unique_name("run"));
    format!("{role}-{run}")
}

/// Applies the RBAC file `rbac` (relative to the repository) with every `name` in it (the
/// ServiceAccount's and the objects' names) made unique and `agenthooks-system` replaced
/// by `ns`, creating the ServiceAccount if the file does not, and writes a kubeconfig with
/// a 2-hour token of it into `dir`.
fn service_account_kubeconfig(
    cp: &ControlPlane,
    rbac: &str,
    name: &str,
    ns: &str,
    dir: &Path,
) -> PathBuf {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let sa = unique_name(&name.replace("agenthooks-", "ah-"));
    let mut text = std::fs::read_to_string(root.join(rbac))
        .unwrap()
        .replace(name, &sa)
        .replace("agenthooks-system", ns);
    // The cluster-wide roles to bind keep fixed names in the chart, which a `helm install`
    // on this shared API server must be able to own: the tests bind per-run copies.
    for role in ROLES_TO_BIND {
        text = text.replace(
            &format!("name: {role}\n"),
            &format!("name: {}\n", bindable_role(role)),
        );
    }
    if !text.lines().any(|l| l == "kind: ServiceAccount") {
        cp.kubectl_ok(&["create", "serviceaccount", &sa, "-n", ns]);
    }
    cp.apply_yaml(&text);
    let token = cp.kubectl_ok(&["create", "token", &sa, "-n", ns, "--duration=2h"]);
    let mut kc: Value = cp.kubectl_json(&["config", "view", "--minify", "--raw"]);
    kc["users"][0]["user"] = serde_json::json!({ "token": token.trim() });
    let path = dir.join(format!("{sa}.kubeconfig"));
    std::fs::write(&path, kc.to_string()).unwrap();
    path
}

/// Waits up to `timeout` for `f`; on timeout panics with `what` and the log tails of
/// `procs`.
pub fn wait_or_panic(timeout: Duration, what: &str, procs: &[&Proc], f: impl FnMut() -> bool) {
    if !wait_for(timeout, f) {
        panic!("{what} (within {timeout:?})\n{}", tails(procs));
    }
}

/// The last 40 lines of each process's log.
pub fn tails(procs: &[&Proc]) -> String {
    procs
        .iter()
        .map(|p| format!("--- {} ---\n{}", p.name, p.log_tail(40)))
        .collect::<Vec<_>>()
        .join("\n")
}

/// A hook endpoint on 127.0.0.1 answering every request with `answer` (the seed's hook
/// response shape, e.g. `{"decision":"block"}`), HTTP/1.1 keep-alive, a thread per
/// connection; returns its URL and a count of the requests it answered. It stands in
/// for a policy service.
pub fn hook_server(answer: Value) -> (String, Arc<AtomicUsize>) {
    let (url, endpoint) = switchable_hook_server(200, answer);
    (url, endpoint.hits.clone())
}

/// The answer of a [`switchable_hook_server`], which the test can change while it runs.
pub struct HookEndpoint {
    /// (HTTP status, body) of every answer from now on.
    answer: Arc<Mutex<(u16, String)>>,
    /// Requests answered so far.
    pub hits: Arc<AtomicUsize>,
    /// The header lines of the last request answered: (name in lower case, value).
    last_headers: Arc<Mutex<Vec<(String, String)>>>,
}

impl HookEndpoint {
    /// Answers every request from now on with HTTP `status` and the JSON `body` (e.g. a
    /// 500 to make the handler fail, then `{"decision":"allow"}` to let it recover).
    pub fn set(&self, status: u16, body: Value) {
        *self.answer.lock().unwrap_or_else(|p| p.into_inner()) = (status, body.to_string());
    }

    /// Requests answered so far (a 5xx is retried once by the http handler: two per run).
    pub fn hits(&self) -> usize {
        self.hits.load(Ordering::SeqCst)
    }

    /// The value of header `name` (any case) in the last request answered, if it had one.
    pub fn last_header(&self, name: &str) -> Option<String> {
        let name = name.to_ascii_lowercase();
        self.last_headers
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, v)| v.clone())
    }
}

/// Like [`hook_server`], but answering with HTTP `status` and `body` until
/// [`HookEndpoint::set`] changes them: an endpoint that fails (a 5xx) and recovers.
pub fn switchable_hook_server(status: u16, body: Value) -> (String, HookEndpoint) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/hook", listener.local_addr().unwrap());
    let endpoint = HookEndpoint {
        answer: Arc::new(Mutex::new((status, body.to_string()))),
        hits: Arc::new(AtomicUsize::new(0)),
        last_headers: Arc::new(Mutex::new(Vec::new())),
    };
    let (answer, counter, last_headers) = (
        endpoint.answer.clone(),
        endpoint.hits.clone(),
        endpoint.last_headers.clone(),
    );
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(mut conn) = conn else { continue };
            let (answer, counter, last_headers) =
                (answer.clone(), counter.clone(), last_headers.clone());
            std::thread::spawn(move || {
                let mut reader = BufReader::new(conn.try_clone().unwrap());
                loop {
                    let mut len = 0usize;
                    let mut headers = Vec::new();
                    let mut line = String::new();
                    if reader.read_line(&mut line).unwrap_or(0) == 0 {
                        return;
                    }
                    loop {
                        line.clear();
                        if reader.read_line(&mut line).unwrap_or(0) == 0 {
                            return;
                        }
                        if line == "\r\n" {
                            break;
                        }
                        if let Some((n, v)) = line.split_once(':') {
                            headers.push((n.trim().to_ascii_lowercase(), v.trim().to_string()));
                        }
                        if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length:") {
                            len = v.trim().parse().unwrap_or(0);
                        }
                    }
                    let mut req = vec![0u8; len];
                    if reader.read_exact(&mut req).is_err() {
                        return;
                    }
                    let (status, body) = answer.lock().unwrap_or_else(|p| p.into_inner()).clone();
                    *last_headers.lock().unwrap_or_else(|p| p.into_inner()) = headers;
                    counter.fetch_add(1, Ordering::SeqCst);
                    let phrase = match status {
                        200 => "OK",
                        500 => "Internal Server Error",
                        502 => "Bad Gateway",
                        503 => "Service Unavailable",
                        _ => "Status",
                    };
                    let resp = format!(
                        "HTTP/1.1 {status} {phrase}\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
                        body.len()
                    );
                    if conn.write_all(resp.as_bytes()).is_err() {
                        return;
                    }
                }
            });
        }
    });
    (url, endpoint)
}
