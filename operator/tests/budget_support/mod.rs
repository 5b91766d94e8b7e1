//! What the budget integration tests share: the real API server
//! (`agenthooks_e2e::ControlPlane::shared()`, never a fake), the CRDs installed with
//! `kubectl apply -f config/crd/`, and the budget part of the operator run in process
//! with leadership set by the test (`Shared::set_leader` / `set_synced`), so a test can
//! take it away or run two "leaders" at once. Such a replica holds no Lease, so it
//! could never prove it is a first leader: [`Replica::leading`] runs it without the
//! failover hold-off (`budget_failover.rs` tests the hold-off with whole operators).

#![allow(dead_code)]

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use agenthooks_e2e::{ControlPlane, unique_name};
use agenthooks_operator::config::{DEFAULT_WATCH_GRACE, LeaseConfig};
use agenthooks_operator::metrics::Metrics;
use agenthooks_operator::shared::Shared;
use agenthooks_operator::{Config, budget};
use axum::Router;
use axum::body::Body;
use axum::http::{Request, StatusCode};
use http_body_util::BodyExt;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;
use tower::ServiceExt;

/// Serializes the tests of a test binary. Every in-process operator watches budgets in
/// all namespaces (as a real one does), so two tests running side by side would each
/// reconcile the other's budgets (with another master namespace: other verdicts).
/// Hold the guard for the whole test and end with [`Replica::stop`].
pub async fn serial() -> tokio::sync::MutexGuard<'static, ()> {
    static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());
    SERIAL.lock().await
}

/// Runs blocking work (kubectl) off the async workers.
pub async fn blocking<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    tokio::task::spawn_blocking(f).await.expect("blocking task")
}

/// The shared control plane with the CRDs installed (`kubectl apply -f config/crd/`).
pub async fn control_plane() -> &'static ControlPlane {
    blocking(|| {
        let cp = ControlPlane::shared();
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../config/crd/");
        let out = cp.kubectl(&[
            "apply",
            "--server-side",
            "--force-conflicts",
            "-f",
            dir.to_str().expect("utf-8 path"),
        ]);
        assert!(
            out.status.success(),
            "kubectl apply -f config/crd/: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        cp.wait_for_crd("tenanthookbudgets.agenthooks.io", Duration::from_secs(30));
        cp
    })
    .await
}

/// An admin API client for `cp`.
pub async fn client(cp: &ControlPlane) -> kube::Client {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let kc = kube::config::Kubeconfig::read_from(&cp.kubeconfig).expect("kubeconfig");
    let config = kube::Config::from_custom_kubeconfig(kc, &Default::default())
        .await
        .expect("client config");
    kube::Client::try_from(config).expect("client")
}

/// Operator settings for master namespace `master` (a unique Lease too).
pub fn config(master: &str) -> Config {
    Config {
        master_namespace: master.to_string(),
        edition: Default::default(),
        allow_tenant_command_hooks: false,
        sync_addr: "127.0.0.1:0".parse().expect("addr"),
        metrics_addr: "127.0.0.1:0".parse().expect("addr"),
        sync_tls: None,
        seal_key: None,
        sync_auth: Default::default(),
        lease: LeaseConfig {
            name: unique_name("budget-lease"),
            namespace: master.to_string(),
            identity: unique_name("budget-test"),
            duration_seconds: 15,
        },
        dispatcher_ttl: Duration::from_secs(30),
        watch_grace: DEFAULT_WATCH_GRACE,
        watch_timeout_seconds: 290,
        status_write_interval: std::time::Duration::from_secs(1),
        snapshot_history_versions: agenthooks_operator::snapshot_builder::MAX_HISTORY_VERSIONS,
        pod: None,
    }
}

/// The operator's budget timings without the failover hold-off.
pub fn no_hold_off() -> budget::Settings {
    budget::Settings {
        hold_off: Duration::ZERO,
        ..budget::Settings::default()
    }
}

/// The budget routes of one in-process "operator replica" and what drives it.
pub struct Replica {
    /// Its shared state (leadership, metrics).
    pub shared: Arc<Shared>,
    /// `POST /v1/budget/reserve` and `/settle`.
    pub router: Router,
    /// Stops its tasks.
    pub cancel: CancellationToken,
}

impl Replica {
    /// Starts the budget machinery for `master` (no failover hold-off, other timings
    /// as the operator's) and makes it the synced leader.
    pub async fn leading(cp: &ControlPlane, master: &str) -> Replica {
        Replica::leading_with(cp, master, no_hold_off()).await
    }

    /// [`Replica::leading`] with `settings`.
    pub async fn leading_with(
        cp: &ControlPlane,
        master: &str,
        settings: budget::Settings,
    ) -> Replica {
        let shared = Shared::new(config(master), Metrics::new().expect("metrics"));
        let cancel = CancellationToken::new();
        let router = budget::start_with(shared.clone(), client(cp).await, cancel.clone(), settings);
        shared.set_leader(true);
        shared.set_synced(true);
        Replica {
            shared,
            router,
            cancel,
        }
    }

    /// Steps down and stops, and gives the session a moment to end (so the next test's
    /// budgets are never reconciled by this one).
    pub async fn stop(self) {
        self.shared.set_leader(false);
        self.cancel.cancel();
        tokio::time::sleep(Duration::from_millis(300)).await;
    }

    /// POSTs `body` (raw bytes) to `path` as the dispatcher it names (what the sync
    /// port's authentication leaves in the request; `d` for a body naming none); returns
    /// the status and the JSON answer.
    pub async fn post_raw(&self, path: &str, body: Vec<u8>) -> (StatusCode, Value) {
        let named = serde_json::from_slice::<Value>(&body)
            .ok()
            .and_then(|v| v["dispatcher"].as_str().map(str::to_string))
            .unwrap_or_else(|| "d".into());
        self.post_as(&named, path, body).await
    }

    /// POSTs `body` to `path` as authenticated dispatcher `caller`.
    pub async fn post_as(&self, caller: &str, path: &str, body: Vec<u8>) -> (StatusCode, Value) {
        let mut req = Request::post(path)
            .header("content-type", "application/json")
            .body(Body::from(body))
            .expect("request");
        req.extensions_mut()
            .insert(agenthooks_operator::sync_auth::SyncCaller::new(caller));
        let resp = self.router.clone().oneshot(req).await.expect("infallible");
        let status = resp.status();
        let bytes = resp.into_body().collect().await.expect("body").to_bytes();
        let v = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
        (status, v)
    }

    /// POSTs JSON `body` to `path`.
    pub async fn post(&self, path: &str, body: Value) -> (StatusCode, Value) {
        self.post_raw(path, body.to_string().into_bytes()).await
    }

    /// Reserves `tokens` of `tenant` as `dispatcher`.
    pub async fn reserve(
        &self,
        dispatcher: &str,
        tenant: &str,
        tokens: i64,
    ) -> (StatusCode, Value) {
        self.post(
            "/v1/budget/reserve",
            json!({"dispatcher": dispatcher, "tenant": tenant, "tokens": tokens}),
        )
        .await
    }

    /// Settles `id` of `tenant` with `tokens`.
    pub async fn settle(
        &self,
        dispatcher: &str,
        tenant: &str,
        id: &str,
        tokens: i64,
    ) -> (StatusCode, Value) {
        self.post(
            "/v1/budget/settle",
            json!({"dispatcher": dispatcher, "tenant": tenant, "reservationId": id, "tokens": tokens}),
        )
        .await
    }

    /// Reserves until the budgets are installed (the first answer that is not 503).
    pub async fn reserve_when_ready(&self, dispatcher: &str, tenant: &str, tokens: i64) -> Value {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        loop {
            let (status, v) = self.reserve(dispatcher, tenant, tokens).await;
            if status != StatusCode::SERVICE_UNAVAILABLE {
                assert_eq!(status, StatusCode::OK, "{v}");
                return v;
            }
            assert!(tokio::time::Instant::now() < deadline, "still 503: {v}");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Reserves until the answer passes `check` (retrying 503s and answers that do not);
    /// panics with the last answer after 20 s.
    pub async fn reserve_until(
        &self,
        dispatcher: &str,
        tenant: &str,
        tokens: i64,
        check: impl Fn(&Value) -> bool,
    ) -> Value {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
        loop {
            let (_, v) = self.reserve(dispatcher, tenant, tokens).await;
            if check(&v) {
                return v;
            }
            assert!(tokio::time::Instant::now() < deadline, "last answer: {v}");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// A metric's value from this replica's registry (0 when absent).
    pub fn metric(&self, series: &str) -> f64 {
        self.shared
            .metrics
            .encode()
            .lines()
            .find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
            .unwrap_or(0.0)
    }
}

impl Drop for Replica {
    fn drop(&mut self) {
        self.cancel.cancel();
    }
}

/// A fresh namespace `prefix-<unique>` labelled with tenant `tenant` (none: its name).
pub async fn namespace(cp: &'static ControlPlane, prefix: &str, tenant: Option<&str>) -> String {
    let ns = unique_name(prefix);
    let (n, t) = (ns.clone(), tenant.map(str::to_string));
    blocking(move || match t {
        Some(t) => cp.create_namespace(&n, &[("agenthooks.io/tenant", &t)]),
        None => cp.create_namespace(&n, &[]),
    })
    .await;
    ns
}

/// Applies a TenantHookBudget `ns/name` of `tokens` (and `spec.tenant`).
pub async fn budget(
    cp: &'static ControlPlane,
    ns: &str,
    name: &str,
    tokens: i64,
    tenant: Option<&str>,
) {
    let mut spec = json!({"monthlyTokens": tokens});
    if let Some(t) = tenant {
        spec["tenant"] = json!(t);
    }
    let doc = json!({
        "apiVersion": "agenthooks.io/v1alpha1",
        "kind": "TenantHookBudget",
        "metadata": {"name": name, "namespace": ns},
        "spec": spec,
    });
    blocking(move || {
        cp.apply_yaml(&doc.to_string());
    })
    .await;
}

/// The budget `ns/name` as JSON.
pub async fn get(cp: &'static ControlPlane, ns: &str, name: &str) -> Value {
    let (ns, name) = (ns.to_string(), name.to_string());
    blocking(move || cp.kubectl_json(&["-n", &ns, "get", "tenanthookbudget", &name])).await
}

/// Polls the budget until `check` holds on it; panics with the last object after `timeout`.
pub async fn wait_budget(
    cp: &'static ControlPlane,
    ns: &str,
    name: &str,
    timeout: Duration,
    check: impl Fn(&Value) -> bool,
) -> Value {
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        let v = get(cp, ns, name).await;
        if check(&v) {
            return v;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "budget {ns}/{name} never reached the expected state:\n{:#}",
            v["status"]
        );
        tokio::time::sleep(Duration::from_millis(150)).await;
    }
}

/// The `Accepted` condition of a budget JSON.
pub fn accepted(v: &Value) -> Value {
    v["status"]["conditions"]
        .as_array()
        .and_then(|cs| cs.iter().find(|c| c["type"] == "Accepted"))
        .cloned()
        .unwrap_or(Value::Null)
}

/// The reasons of the Events on budget `name` in `ns`, oldest first.
pub async fn event_reasons(cp: &'static ControlPlane, ns: &str, name: &str) -> Vec<String> {
    let (ns, name) = (ns.to_string(), name.to_string());
    let v = blocking(move || cp.kubectl_json(&["-n", &ns, "get", "events.events.k8s.io"])).await;
    let mut items: Vec<&Value> = v["items"]
        .as_array()
        .map(|a| a.iter().collect())
        .unwrap_or_default();
    items.retain(|e| {
        e["regarding"]["name"] == name.as_str() && e["regarding"]["kind"] == "TenantHookBudget"
    });
    items.sort_by_key(|e| {
        e["eventTime"]
            .as_str()
            .or(e["metadata"]["creationTimestamp"].as_str())
            .unwrap_or("")
            .to_string()
    });
    items
        .iter()
        .map(|e| e["reason"].as_str().unwrap_or("").to_string())
        .collect()
}

/// A ValidatingAdmissionPolicy (and its binding) that refuses every write of
/// TenantHookBudget status in namespace `ns`, on the real API server; removed on drop.
pub struct DenyStatusWrites {
    cp: &'static ControlPlane,
    name: String,
}

impl DenyStatusWrites {
    /// Installs it and waits (at most 30 s) until the API server refuses a server-side
    /// dry run of a status patch of `ns/budget`.
    pub async fn install(cp: &'static ControlPlane, ns: &str, budget: &str) -> DenyStatusWrites {
        let name = unique_name("deny-budget-status");
        let yaml = format!(
            r#"apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicy
metadata: {{name: {name}}}
spec:
  failurePolicy: Fail
  matchConstraints:
    resourceRules:
    - apiGroups: ["agenthooks.io"]
      apiVersions: ["*"]
      operations: ["UPDATE"]
      resources: ["tenanthookbudgets/status"]
  validations:
  - expression: "false"
    message: "test: TenantHookBudget status writes are refused"
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicyBinding
metadata: {{name: {name}}}
spec:
  policyName: {name}
  validationActions: [Deny]
  matchResources:
    namespaceSelector:
      matchLabels: {{kubernetes.io/metadata.name: {ns}}}
"#
        );
        blocking(move || {
            cp.apply_yaml(&yaml);
        })
        .await;
        let (ns, budget) = (ns.to_string(), budget.to_string());
        let refused = blocking(move || {
            agenthooks_e2e::wait_for(Duration::from_secs(30), || {
                let out = dry_run_status_patch(cp, &ns, &budget);
                !out.status.success()
                    && String::from_utf8_lossy(&out.stderr).contains("status writes are refused")
            })
        })
        .await;
        assert!(refused, "the admission policy never took effect");
        DenyStatusWrites { cp, name }
    }

    /// Removes it and waits (at most 30 s) until a dry-run status patch of `ns/budget`
    /// passes again.
    pub async fn remove(self, ns: &str, budget: &str) {
        let cp = self.cp;
        let (ns, budget) = (ns.to_string(), budget.to_string());
        drop(self);
        let allowed = blocking(move || {
            agenthooks_e2e::wait_for(Duration::from_secs(30), || {
                dry_run_status_patch(cp, &ns, &budget).status.success()
            })
        })
        .await;
        assert!(
            allowed,
            "status writes still refused after removing the policy"
        );
    }
}

/// A server-side dry run of a status patch of budget `ns/budget` (changes nothing): it
/// fails exactly while an admission policy refuses the budget's status writes.
fn dry_run_status_patch(cp: &ControlPlane, ns: &str, budget: &str) -> std::process::Output {
    cp.kubectl(&[
        "-n",
        ns,
        "patch",
        "tenanthookbudget",
        budget,
        "--subresource=status",
        "--type=merge",
        "--dry-run=server",
        "-p",
        r#"{"status":{"used":12345}}"#,
    ])
}

impl Drop for DenyStatusWrites {
    fn drop(&mut self) {
        for kind in [
            "validatingadmissionpolicybinding",
            "validatingadmissionpolicy",
        ] {
            let _ = self.cp.kubectl(&[
                "delete",
                kind,
                &self.name,
                "--ignore-not-found",
                "--wait=false",
            ]);
        }
    }
}

/// This UTC month, `YYYY-MM`.
pub fn this_period() -> String {
    agenthooks_crds::budget::period_of(chrono::Utc::now())
}

/// Runs kubectl with `args` (panics unless it succeeds); returns stdout.
pub async fn kubectl(cp: &'static ControlPlane, args: &[&str]) -> String {
    let args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
    blocking(move || cp.kubectl_ok(&args)).await
}

/// `kubectl get tenanthookbudgets NAME -n NS` (the table with the printer columns).
pub async fn table(cp: &'static ControlPlane, ns: &str, name: &str) -> String {
    kubectl(cp, &["-n", ns, "get", "tenanthookbudgets", name]).await
}

/// The words of line `n` (0: the header) of a kubectl table.
pub fn row(table: &str, n: usize) -> Vec<String> {
    table
        .lines()
        .nth(n)
        .unwrap_or("")
        .split_whitespace()
        .map(str::to_string)
        .collect()
}
