//! Scenario `audit`: the audit trail of Pods, read back through the history API
//! (`GET /v1/executions` with the admin token, through the dispatcher Service), before
//! and after a dispatcher Pod is replaced.
//!
//! - PostgreSQL (`dispatcher.audit.backend=postgres`): a server the harness starts on the
//!   host, listening on the node IP for the Pods (10.244.0.0/16 let in), its URL in a
//!   Secret. Every row of the 3 dispatchers lands there and is read back after a restart;
//!   counted in the database too. Needs the node of `e2e/node/up.sh` (skipped elsewhere).
//! - SQLite on a volume (`dispatcher.audit.storage.volume` naming a claim, 1 replica): the
//!   rows written before the Pod is deleted are served by its replacement. The claim binds
//!   a hostPath PersistentVolume on the harness node (no provisioner there), the default
//!   StorageClass elsewhere.
//!
//! The release is back to the base values at the end.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use agenthooks_e2e::node::agent::Agent;
use agenthooks_e2e::postgres::PgServer;
use agenthooks_e2e::wait_for;
use serde_json::json;

use crate::support::{DISPATCH_URL, NS, TENANT_NS, Tier, names};

const DISPATCHER: &str = "agenthooks-dispatcher";
/// The history API through the dispatcher Service: the sample hook's rows.
const EXECUTIONS_URL: &str = "http://agenthooks-dispatcher.agenthooks-system.svc.cluster.local:8080/v1/executions?hook=tenant-acme/block-rm-rf&limit=500";
/// Calls per backend (each runs the sample hook once: one row).
const CALLS: usize = 5;

/// An exec the sample hook blocks, in session `session`.
fn rm_event(session: &str, i: usize) -> String {
    format!(
        r#"{{"event":"pre_tool_use","tenant_id":"acme","agent_id":"auditor","session_id":"{session}","tool_name":"exec","tool_input":{{"cmd":"rm -rf /var/tmp/{i}"}}}}"#
    )
}

/// The ids of the history rows of `session` (panics unless the API answers 200): the agent
/// reads its own namespace's rows with its ServiceAccount token, granted by RBAC
/// ([`Tier::install`]).
fn row_ids(agent: &Agent, session: &str) -> BTreeSet<i64> {
    let a = agent.request(EXECUTIONS_URL, &[], None);
    assert_eq!(a.status, 200, "GET /v1/executions: {a:?}");
    a.json()["executions"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|r| r["sessionId"] == session)
        .inspect(|r| {
            assert_eq!(r["decision"], "block", "{r}");
            assert_eq!(r["tenant"], "acme", "{r}");
        })
        .filter_map(|r| r["id"].as_i64())
        .collect()
}

/// Sends [`CALLS`] blocked execs of `session` through the Service, waits until the
/// history API lists their rows, replaces a dispatcher Pod, and returns the rows before
/// and after.
fn rows_across_a_restart(
    tier: &Tier,
    agent: &Agent,
    session: &str,
) -> (BTreeSet<i64>, BTreeSet<i64>) {
    for i in 0..CALLS {
        let a = agent.request(DISPATCH_URL, &[], Some(&rm_event(session, i)));
        assert_eq!(a.status, 200, "{a:?}");
        assert_eq!(a.json()["decision"], "block", "{a:?}");
    }
    let mut before = BTreeSet::new();
    let written = wait_for(Duration::from_secs(30), || {
        before = row_ids(agent, session);
        before.len() == CALLS
    });
    assert!(
        written,
        "{CALLS} rows of session {session} expected, the history API lists {before:?}"
    );
    let victim = names(&tier.component_pods("dispatcher"))[0].clone();
    tier.node
        .kubectl_ok(&["-n", NS, "delete", "pod", &victim, "--wait=true"]);
    tier.wait_rollout(DISPATCHER);
    let mut after = BTreeSet::new();
    // (the new Pod may still be opening its database when first routed to)
    wait_for(Duration::from_secs(30), || {
        after = row_ids(agent, session);
        after == before
    });
    (before, after)
}

/// The scenario (see the module docs).
pub fn run(tier: &mut Tier) {
    tier.ensure_installed();
    let agent = Agent::start(&tier.node, TENANT_NS, "agent");
    let node = &tier.node;

    // PostgreSQL on the host, reached by the Pods at the node IP.
    if let Some(node_ip) = node.node_ip.clone() {
        let t = Instant::now();
        let pg = PgServer::new_listening(&[&node_ip], &["10.244.0.0/16"])
            .unwrap_or_else(|e| panic!("PostgreSQL for the Pods: {e:#}"));
        let url = format!("postgres://postgres@{node_ip}:{}/agenthooks", pg.port());
        node.apply(
            &json!({
                "apiVersion": "v1", "kind": "Secret",
                "metadata": {"name": "agenthooks-audit-db", "namespace": NS},
                "stringData": {"url": url}
            })
            .to_string(),
        );
        tier.upgrade(&[
            "--set",
            "dispatcher.audit.backend=postgres",
            "--set",
            "dispatcher.audit.databaseUrlSecret.name=agenthooks-audit-db",
        ]);
        let (before, after) = rows_across_a_restart(tier, &agent, "audit-pg");
        assert_eq!(
            after, before,
            "PostgreSQL: the rows written before the restart are listed after it"
        );
        let in_db = count_rows(&pg.url(), "audit-pg");
        assert_eq!(
            in_db, CALLS as i64,
            "rows of session audit-pg in PostgreSQL"
        );
        eprintln!(
            "E2E-FIGURE audit_postgres_rows={} audit_postgres_s={:.1}",
            after.len(),
            t.elapsed().as_secs_f64()
        );
        // back to SQLite before the server goes
        tier.upgrade(&[]);
        drop(pg);
    } else {
        eprintln!("[tier] audit: not the harness node (no node IP): PostgreSQL part skipped");
    }

    // SQLite on a claim, one replica.
    let default_class = node.kubectl_json(&["get", "storageclass"])["items"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|c| {
            c["metadata"]["annotations"]["storageclass.kubernetes.io/is-default-class"] == "true"
        });
    if node.node_ip.is_none() && !default_class {
        eprintln!(
            "[tier] audit: no default StorageClass and not the harness node: SQLite-on-a-claim part skipped"
        );
        return;
    }
    let t = Instant::now();
    let pv_name = "agenthooks-e2e-audit";
    // (a claim left by an earlier run that failed would keep its volume)
    let _ = node.kubectl(&[
        "-n",
        NS,
        "delete",
        "pvc",
        "agenthooks-audit",
        "--ignore-not-found",
        "--wait=true",
    ]);
    let _ = node.kubectl(&["delete", "pv", pv_name, "--ignore-not-found", "--wait=true"]);
    let mut claim = json!({
        "apiVersion": "v1", "kind": "PersistentVolumeClaim",
        "metadata": {"name": "agenthooks-audit", "namespace": NS},
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}
    });
    if node.node_ip.is_some() {
        // no provisioner on the harness node: a hostPath volume the dispatcher's uid owns
        let dir = node.dir.join("audit-pv");
        std::fs::create_dir_all(&dir).expect("the volume's directory");
        std::os::unix::fs::chown(&dir, Some(65532), Some(65532)).expect("chown the volume");
        node.apply(
            &json!({
                "apiVersion": "v1", "kind": "PersistentVolume",
                "metadata": {"name": pv_name},
                "spec": {
                    "capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteOnce"],
                    "persistentVolumeReclaimPolicy": "Retain", "storageClassName": "",
                    "hostPath": {"path": dir.display().to_string(), "type": "Directory"},
                    "claimRef": {"namespace": NS, "name": "agenthooks-audit"}
                }
            })
            .to_string(),
        );
        claim["spec"]["storageClassName"] = json!("");
        claim["spec"]["volumeName"] = json!(pv_name);
    }
    node.apply(&claim.to_string());
    tier.upgrade(&[
        "--set",
        "dispatcher.replicaCount=1",
        "--set",
        "dispatcher.audit.storage.volume.persistentVolumeClaim.claimName=agenthooks-audit",
    ]);
    let (before, after) = rows_across_a_restart(tier, &agent, "audit-sqlite");
    assert_eq!(
        after, before,
        "SQLite on a volume: the rows written before the Pod was replaced are served after"
    );
    let pod = &tier.component_pods("dispatcher")[0];
    assert_eq!(
        pod["status"]["containerStatuses"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|c| c["restartCount"].as_i64().unwrap_or_default())
            .sum::<i64>(),
        0,
        "the replacement started once, next to its terminating predecessor: {}",
        pod["status"]["containerStatuses"]
    );
    eprintln!(
        "E2E-FIGURE audit_sqlite_rows={} audit_sqlite_s={:.1}",
        after.len(),
        t.elapsed().as_secs_f64()
    );

    // Back to the base values; the claim and its volume go.
    tier.upgrade(&[]);
    let _ = node.kubectl(&[
        "-n",
        NS,
        "delete",
        "pvc",
        "agenthooks-audit",
        "--wait=false",
    ]);
    if node.node_ip.is_some() {
        let _ = node.kubectl(&["delete", "pv", pv_name, "--wait=false"]);
    }
    let _ = node.kubectl(&["-n", NS, "delete", "secret", "agenthooks-audit-db"]);
}

/// Rows of `session` in the `hook_executions` table of the database at `url`.
fn count_rows(url: &str, session: &str) -> i64 {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    rt.block_on(async {
        use sqlx::Connection;
        let mut c = sqlx::PgConnection::connect(url)
            .await
            .expect("connect to PostgreSQL");
        let n: i64 =
            sqlx::query_scalar("SELECT count(*) FROM hook_executions WHERE session_id = $1")
                .bind(session)
                .fetch_one(&mut c)
                .await
                .expect("count the rows");
        n
    })
}
