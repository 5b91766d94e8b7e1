//! `POST /v1/report` on the real API server (issue 3, points 1 and 4):
//!
//! - a `409 Conflict` forced between the read and the write of `status.executions` is
//!   retried from a fresh read, and the counts are exact (no operator needed: the write
//!   function is called directly, with a hook that changes the object in between);
//! - a reported trip leaves the snapshot within one long poll, then shows in status
//!   (breaker `Open` with who, when, why; `CircuitOpen=True`), in an Event and in `Ready`;
//!   a duplicate changes nothing; a new leader keeps the hook out; the reset annotation and
//!   a spec edit close it (`CircuitOpen=False`, breaker `Closed`) and nothing writes spec;
//! - execution counts from several concurrent reporters add up exactly, each `200` only
//!   once they are in status, with bounded status writes;
//! - a `status.executions` patch whose answer is lost is never counted twice: landed,
//!   not landed, landed late (after the write read the hook again), or followed by
//!   someone else's write (the write function called directly, its answers dropped);
//! - a status write refused permanently (403 from a ValidatingAdmissionPolicy) drops that
//!   hook's counts and trip write, logged and counted, and the report is acknowledged;
//!   counts of 3,000 made-up hooks cost no status write; a `lastExecutionTime` in year
//!   9999 is taken as the receipt time and does not pin `lastDecision`.
//!
//! The operator runs as the built binary with the ServiceAccount of
//! `config/rbac/operator.yaml`. Each operator reconciles every namespace, so the tests of
//! this file run one at a time.

use std::path::Path;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use agenthooks_crds::AgentHook;
use agenthooks_e2e::procs::{Proc, bin, free_port};
use agenthooks_e2e::stack::{
    OperatorProc, SyncIdentity, http_get, http_get_with, http_post_with, install_crds, log_dir,
    metric, operator_service_account_kubeconfig, seal_key_path, tails,
};
use agenthooks_e2e::{ControlPlane, unique_name, wait_for};
use agenthooks_operator::metrics::Metrics;
use agenthooks_operator::report::executions::{self, Counts, ExecWrite};
use agenthooks_operator::shared::Serving;
use agenthooks_operator::status::writer::StatusWriter;
use kube::api::{Patch, PatchParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Api, Client, ResourceExt};
use serde_json::{Value, json};

static SERIAL: Mutex<()> = Mutex::new(());

/// Per-request limit of the direct status patches of these tests.
const TIMEOUT: Duration = Duration::from_secs(10);

/// The status writer of the direct writes: it leads (no operator runs them), with the
/// operator's retry policy.
fn status_writer() -> StatusWriter {
    let (_leader, rx) = tokio::sync::watch::channel(Serving {
        leader: true,
        synced: true,
    });
    StatusWriter::new(&Metrics::new().unwrap(), rx)
}

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

fn hook_yaml(ns: &str, name: &str, extra: &str) -> String {
    format!(
        "apiVersion: agenthooks.io/v1alpha1\nkind: AgentHook\nmetadata: {{name: {name}, namespace: {ns}}}\nspec:\n  event: pre_tool_use\n  handler: {{type: http, http: {{url: 'https://policy.example.com/hook'}}}}\n{extra}"
    )
}

async fn client(cp: &ControlPlane) -> Client {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let kc = Kubeconfig::read_from(&cp.kubeconfig).unwrap();
    let config = kube::Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default())
        .await
        .unwrap();
    Client::try_from(config).unwrap()
}

fn condition(hook: &Value, type_: &str) -> Option<Value> {
    hook["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == type_)
        .cloned()
}

fn get_hook(cp: &ControlPlane, ns: &str, name: &str) -> Value {
    cp.kubectl_json(&["-n", ns, "get", "--show-managed-fields", "agenthook", name])
}

fn events(cp: &ControlPlane, ns: &str, name: &str) -> Vec<Value> {
    let v = cp.kubectl_json(&[
        "-n",
        ns,
        "get",
        "events",
        "--field-selector",
        &format!("involvedObject.name={name}"),
    ]);
    v["items"].as_array().cloned().unwrap_or_default()
}

/// The master namespace of each operator (by sync URL): its dispatchers' ServiceAccounts
/// live there.
static MASTERS: Mutex<std::collections::BTreeMap<String, String>> =
    Mutex::new(std::collections::BTreeMap::new());
/// The dispatcher identities made so far, by (master namespace, name).
static IDENTITIES: Mutex<std::collections::BTreeMap<(String, String), SyncIdentity>> =
    Mutex::new(std::collections::BTreeMap::new());

/// Records that the operator at `sync` has master namespace `master`.
fn serves(sync: &str, master: &str) {
    MASTERS
        .lock()
        .unwrap()
        .insert(sync.to_string(), master.to_string());
}

/// Dispatcher `name` of the operator at `sync` (a ServiceAccount bound to
/// agenthooks-sync in its master namespace, made on first use): each name the tests use
/// is a dispatcher of its own, which the operator knows by its token.
fn dispatcher(sync: &str, name: &str) -> SyncIdentity {
    let master = MASTERS.lock().unwrap()[sync].clone();
    IDENTITIES
        .lock()
        .unwrap()
        .entry((master.clone(), name.to_string()))
        .or_insert_with(|| SyncIdentity::mint(ControlPlane::shared(), &master, name))
        .clone()
}

/// The identity (`MASTER/name`) of dispatcher `name` of the operator at `sync`.
fn dispatcher_id(sync: &str, name: &str) -> String {
    dispatcher(sync, name).id
}

/// `report` as its dispatcher sends it: `dispatcher` (a test's short name) replaced by its
/// identity; and that dispatcher's `authorization` header.
fn as_sent(sync: &str, report: &Value) -> (Value, String) {
    let me = dispatcher(sync, report["dispatcher"].as_str().unwrap_or("report-test"));
    let mut sent = report.clone();
    sent["dispatcher"] = json!(me.id);
    (sent, me.header())
}

/// The operator's current snapshot, as a dispatcher that holds nothing gets it.
fn snapshot(sync: &str) -> Option<Value> {
    let me = dispatcher(sync, "report-test");
    let (code, body) = http_get_with(
        &format!(
            "{sync}/v1/snapshot?dispatcher={}&timeoutSeconds=0",
            me.id.replace('/', "%2F")
        ),
        &["-H", &me.header()],
    );
    (code == 200)
        .then(|| serde_json::from_str(&body).ok())
        .flatten()
}

/// The snapshot hook with this uid, if the snapshot holds it.
fn in_snapshot(snapshot: &Value, uid: &str) -> Option<Value> {
    snapshot["hooks"]
        .as_array()?
        .iter()
        .find(|h| h["uid"] == uid)
        .cloned()
}

fn post_report(sync: &str, report: &Value) -> (u16, Value) {
    let (report, auth) = as_sent(sync, report);
    let (code, body) = http_post_with(&format!("{sync}/v1/report"), &report, &["-H", &auth]);
    (code, serde_json::from_str(&body).unwrap_or(Value::Null))
}

fn wait(procs: &[&Proc], timeout: Duration, what: &str, f: impl FnMut() -> bool) {
    if !wait_for(timeout, f) {
        panic!("{what} (within {timeout:?})\n{}", tails(procs));
    }
}

/// An operator process with `extra` flags (e.g. the status write interval).
fn start_operator(
    kubeconfig: &Path,
    master: &str,
    lease: &str,
    identity: &str,
    extra: &[&str],
    logs: &Path,
) -> (Proc, String, String) {
    let (sync_port, admin_port) = (free_port(), free_port());
    let key = seal_key_path(logs);
    let args: Vec<String> = [
        "--master-namespace",
        master,
        "--seal-key-file",
        key.to_str().unwrap(),
        "--sync-addr",
        &format!("127.0.0.1:{sync_port}"),
        "--metrics-addr",
        &format!("127.0.0.1:{admin_port}"),
        "--lease-name",
        lease,
        "--lease-namespace",
        master,
        "--lease-duration-seconds",
        "5",
        "--identity",
        identity,
    ]
    .iter()
    .chain(extra)
    .map(|s| s.to_string())
    .chain(agenthooks_e2e::stack::test_pki().sync_tls_flags())
    .collect();
    let env = [("KUBECONFIG", kubeconfig.to_str().unwrap())];
    let proc = Proc::start(identity, &bin("agenthooks-operator"), &args, &env, logs);
    serves(&agenthooks_e2e::stack::sync_url(sync_port), master);
    (
        proc,
        agenthooks_e2e::stack::sync_url(sync_port),
        format!("http://127.0.0.1:{admin_port}"),
    )
}

// ---- (a) a 409 between read and write ---------------------------------------------------

#[test]
fn a_conflict_between_read_and_write_is_retried_from_a_fresh_read() {
    let _serial = serial();
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(conflict_between_read_and_write());
}

async fn conflict_between_read_and_write() {
    let cp = ControlPlane::shared();
    install_crds(cp);
    let ns = unique_name("ah-report-409");
    cp.create_namespace(&ns, &[]);
    cp.apply_yaml(&hook_yaml(&ns, "counted", ""));
    let client = client(cp).await;
    let api: Api<AgentHook> = Api::namespaced(client, &ns);
    let hook = api.get("counted").await.unwrap();
    let uid = hook.uid().unwrap();

    let ours = Counts {
        allow: 5,
        block: 2,
        last_time: Some("2025-03-01T10:00:05Z".parse().unwrap()),
        last_decision: Some("block".into()),
        ..Default::default()
    };
    // Between our read and our patch, someone else (another replica, an admin) adds 100
    // allows and 1 error with a newer last run: our patch carries a stale resourceVersion.
    let other = api.clone();
    let mut reads = Vec::new();
    let result = executions::write_with(
        &status_writer(),
        &api,
        "counted",
        &uid,
        &ours,
        |attempt, body| {
            reads.push(attempt);
            let other = other.clone();
            async move {
                if attempt == 1 {
                    let body = json!({"status": {"executions": {
                    "allow": 100, "block": 0, "error": 1, "timeout": 0,
                    "lastExecutionTime": "2025-03-01T10:00:09Z", "lastDecision": "error"}}});
                    other
                        .patch_status(
                            "counted",
                            &PatchParams {
                                field_manager: Some("someone-else".into()),
                                ..Default::default()
                            },
                            &Patch::Merge(&body),
                        )
                        .await
                        .unwrap();
                }
                executions::send_patch(&other, "counted", &body, TIMEOUT).await
            }
        },
    )
    .await
    .unwrap();
    assert_eq!(reads, [1, 2], "one conflict, then a fresh read");
    let ExecWrite::Written {
        executions: written,
        attempts,
    } = result
    else {
        panic!("expected a write, got {result:?}")
    };
    assert_eq!(attempts, 2);
    let now = api.get("counted").await.unwrap();
    let ex = now.status.unwrap().executions.unwrap();
    assert_eq!(ex, written);
    assert_eq!(
        (ex.allow, ex.block, ex.error, ex.timeout),
        (105, 2, 1, 0),
        "the other writer's counts and ours, each once"
    );
    assert_eq!(
        ex.last_execution_time.as_deref(),
        Some("2025-03-01T10:00:09Z")
    );
    assert_eq!(ex.last_decision.as_deref(), Some("error"), "the newest run");
    let managers: Vec<String> = now
        .metadata
        .managed_fields
        .unwrap_or_default()
        .into_iter()
        .filter_map(|m| m.manager)
        .collect();
    assert!(
        managers.iter().any(|m| m == executions::FIELD_MANAGER),
        "{managers:?}"
    );

    // A hook re-created under the same name between read and write gets nothing.
    let recreate = api.clone();
    let yaml = hook_yaml(&ns, "counted", "");
    let result = executions::write_with(
        &status_writer(),
        &api,
        "counted",
        &uid,
        &ours,
        |attempt, body| {
            let recreate = recreate.clone();
            let yaml = yaml.clone();
            async move {
                if attempt == 1 {
                    recreate
                        .delete("counted", &Default::default())
                        .await
                        .unwrap();
                    let cp = ControlPlane::shared();
                    tokio::task::spawn_blocking(move || cp.apply_yaml(&yaml))
                        .await
                        .unwrap();
                }
                executions::send_patch(&recreate, "counted", &body, TIMEOUT).await
            }
        },
    )
    .await
    .unwrap();
    assert_eq!(result, ExecWrite::Gone);
    let fresh = api.get("counted").await.unwrap();
    assert_ne!(fresh.uid().unwrap(), uid);
    assert!(
        fresh.status.and_then(|s| s.executions).is_none(),
        "the new hook carries none of the old one's counts"
    );
}

// ---- (a2) a patch whose answer is lost ---------------------------------------------------

/// An answer that says nothing about the outcome (as when the API server times out).
fn no_answer() -> kube::Error {
    kube::Error::Api(Box::new(kube::core::Status {
        code: 504,
        message: "the answer was lost (test)".into(),
        ..Default::default()
    }))
}

async fn executions_of(api: &Api<AgentHook>, name: &str) -> (i64, i64) {
    let ex = api
        .get(name)
        .await
        .unwrap()
        .status
        .and_then(|s| s.executions)
        .unwrap_or_default();
    (ex.allow, ex.block)
}

#[test]
fn a_patch_whose_answer_is_lost_is_counted_once() {
    let _serial = serial();
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(lost_answers());
}

async fn lost_answers() {
    let cp = ControlPlane::shared();
    install_crds(cp);
    let ns = unique_name("ah-report-lost");
    cp.create_namespace(&ns, &[]);
    cp.apply_yaml(&hook_yaml(&ns, "lost", ""));
    let client = client(cp).await;
    let api: Api<AgentHook> = Api::namespaced(client, &ns);
    let uid = api.get("lost").await.unwrap().uid().unwrap();
    let ours = Counts {
        allow: 3,
        block: 1,
        ..Default::default()
    };
    let other_writer = PatchParams {
        field_manager: Some("someone-else".into()),
        ..Default::default()
    };

    // 1. The patch landed, its answer was lost: not sent again.
    let mut sent = Vec::new();
    let result = executions::write_with(
        &status_writer(),
        &api,
        "lost",
        &uid,
        &ours,
        |attempt, body| {
            sent.push(attempt);
            let api = api.clone();
            async move {
                executions::send_patch(&api, "lost", &body, TIMEOUT).await?;
                if attempt == 1 {
                    Err(no_answer())
                } else {
                    Ok(())
                }
            }
        },
    )
    .await
    .unwrap();
    assert_eq!(sent, [1], "found out that it landed; nothing sent again");
    assert!(
        matches!(result, ExecWrite::Written { attempts: 1, .. }),
        "{result:?}"
    );
    assert_eq!(executions_of(&api, "lost").await, (3, 1), "counted once");

    // 2. It did not land, and the hook did not change: sent again, counted once.
    let mut sent = Vec::new();
    executions::write_with(
        &status_writer(),
        &api,
        "lost",
        &uid,
        &ours,
        |attempt, body| {
            sent.push(attempt);
            let api = api.clone();
            async move {
                if attempt == 1 {
                    return Err(no_answer());
                }
                executions::send_patch(&api, "lost", &body, TIMEOUT).await
            }
        },
    )
    .await
    .unwrap();
    assert_eq!(sent, [1, 2]);
    assert_eq!(executions_of(&api, "lost").await, (6, 2));

    // 3. It did not land, and someone else wrote meanwhile: retried from the fresh read.
    let other = api.clone();
    let params = other_writer.clone();
    executions::write_with(
        &status_writer(),
        &api,
        "lost",
        &uid,
        &ours,
        |attempt, body| {
            let api = other.clone();
            let params = params.clone();
            async move {
                if attempt == 1 {
                    let add = json!({"status": {"executions": {"allow": 100, "block": 2}}});
                    api.patch_status("lost", &params, &Patch::Merge(&add))
                        .await
                        .unwrap();
                    return Err(no_answer());
                }
                executions::send_patch(&api, "lost", &body, TIMEOUT).await
            }
        },
    )
    .await
    .unwrap();
    assert_eq!(
        executions_of(&api, "lost").await,
        (103, 3),
        "the other writer's status plus ours, once"
    );

    // 4. It landed late, after the write had read the hook again: the retry meets 409,
    //    and the write finds its first patch in the hook's history.
    let mut first: Option<serde_json::Value> = None;
    let mut sent = Vec::new();
    let result = executions::write_with(
        &status_writer(),
        &api,
        "lost",
        &uid,
        &ours,
        |attempt, body| {
            sent.push(attempt);
            let api = api.clone();
            let late = if attempt == 1 {
                first = Some(body.clone());
                None
            } else {
                first.take()
            };
            async move {
                if attempt == 1 {
                    return Err(no_answer());
                }
                if let Some(late) = late {
                    executions::send_patch(&api, "lost", &late, TIMEOUT)
                        .await
                        .unwrap();
                }
                executions::send_patch(&api, "lost", &body, TIMEOUT).await
            }
        },
    )
    .await
    .unwrap();
    assert_eq!(
        sent,
        [1, 2],
        "the retry conflicted with the late first patch"
    );
    assert!(
        matches!(result, ExecWrite::Written { attempts: 2, .. }),
        "two patches sent, one landed: {result:?}"
    );
    assert_eq!(executions_of(&api, "lost").await, (106, 4), "counted once");

    // 5. Someone else's write follows the landed lost patch: still recognised as ours.
    let other = api.clone();
    let params = other_writer.clone();
    let result = executions::write_with(
        &status_writer(),
        &api,
        "lost",
        &uid,
        &ours,
        |attempt, body| {
            let api = other.clone();
            let params = params.clone();
            async move {
                executions::send_patch(&api, "lost", &body, TIMEOUT).await?;
                if attempt == 1 {
                    let cur = api
                        .get("lost")
                        .await
                        .unwrap()
                        .status
                        .unwrap()
                        .executions
                        .unwrap();
                    let add = json!({"status": {"executions": {"allow": cur.allow + 10}}});
                    api.patch_status("lost", &params, &Patch::Merge(&add))
                        .await
                        .unwrap();
                    return Err(no_answer());
                }
                Ok(())
            }
        },
    )
    .await
    .unwrap();
    assert!(
        matches!(result, ExecWrite::Written { attempts: 1, .. }),
        "{result:?}"
    );
    assert_eq!(executions_of(&api, "lost").await, (119, 5));
}

// ---- (b), (c) breaker --------------------------------------------------------------------

const TRIPPED_AT: &str = "2025-03-01T10:00:00.250Z";
const TRIP_REASON: &str = "0 timeouts and 5 errors of the handler in a row within 2 s";

fn trip(uid: &str, ns: &str, name: &str, generation: i64, token: Option<&str>) -> Value {
    let mut t = json!({
        "uid": uid, "namespace": ns, "name": name, "generation": generation,
        "tenant": "tenant-a", "trippedAt": TRIPPED_AT, "failClosed": true,
        "reason": TRIP_REASON
    });
    if let Some(token) = token {
        t["resetToken"] = json!(token);
    }
    t
}

fn close(uid: &str, ns: &str, name: &str, opened_at: &str) -> Value {
    json!({
        "uid": uid, "namespace": ns, "name": name, "generation": 1, "tenant": "tenant-a",
        "openedAt": opened_at, "closedAt": "2025-03-01T10:00:31Z"
    })
}

/// The open breakers of the hook `uid` in `snapshot` as `(tenant, sinceMs, failClosed)`.
fn open_breakers(snapshot: &Value, uid: &str) -> Option<Vec<(String, i64, bool)>> {
    let hook = in_snapshot(snapshot, uid)?;
    Some(
        hook["openBreakers"]
            .as_array()
            .map(|a| {
                a.iter()
                    .map(|b| {
                        (
                            b["tenant"].as_str().unwrap().to_string(),
                            b["sinceMs"].as_i64().unwrap(),
                            b["failClosed"].as_bool().unwrap_or(false),
                        )
                    })
                    .collect()
            })
            .unwrap_or_default(),
    )
}

#[test]
fn a_trip_opens_one_tenants_breaker_a_probe_closes_it_and_the_annotation_or_a_spec_edit_resets_it()
{
    let _serial = serial();
    let cp = ControlPlane::shared();
    install_crds(cp);
    let master = unique_name("ah-report-b");
    cp.create_namespace(&master, &[]);
    let ns = unique_name("ah-report-hooks");
    cp.create_namespace(&ns, &[]);
    let logs = log_dir("ah-report-b");
    let kubeconfig = operator_service_account_kubeconfig(cp, &master, &logs);
    let lease = unique_name("agenthooks-operator");
    let op = OperatorProc::start(&kubeconfig, &master, &lease, "op-b1", &[], &logs);
    serves(&op.sync, &master);
    let name = "always-block";
    cp.apply_yaml(&hook_yaml(&ns, name, ""));
    let uid = get_hook(cp, &ns, name)["metadata"]["uid"]
        .as_str()
        .unwrap()
        .to_string();
    wait(
        &[&op.proc],
        Duration::from_secs(30),
        "hook in the snapshot",
        || snapshot(&op.sync).is_some_and(|s| in_snapshot(&s, &uid).is_some()),
    );
    let spec_before = get_hook(cp, &ns, name)["spec"].clone();

    // A dispatcher holding the current snapshot long-polls while the trip is reported.
    let held = snapshot(&op.sync).unwrap();
    let holder = dispatcher(&op.sync, "report-test-holder");
    let poll_url = format!(
        "{}/v1/snapshot?dispatcher={}&epoch={}&after={}&timeoutSeconds=4",
        op.sync,
        holder.id.replace('/', "%2F"),
        held["epoch"].as_str().unwrap(),
        held["version"]
    );
    let poller = std::thread::spawn(move || {
        let (code, body) = http_get_with(&poll_url, &["-H", &holder.header()]);
        (code, body, Instant::now())
    });
    std::thread::sleep(Duration::from_millis(300));
    let report = json!({"dispatcher": "disp-1", "reportId": unique_name("r"),
                        "trips": [trip(&uid, &ns, name, 1, None)]});
    let sent = Instant::now();
    let (code, ack) = post_report(&op.sync, &report);
    assert_eq!(code, 200, "{ack}\n{}", tails(&[&op.proc]));
    assert_eq!(
        ack,
        json!({"trips": 1, "executions": 0, "duplicate": false})
    );
    let (code, body, answered) = poller.join().unwrap();
    assert_eq!(code, 200, "the long poll got the new snapshot");
    let next: Value = serde_json::from_str(&body).unwrap();
    let since = chrono::DateTime::parse_from_rfc3339(TRIPPED_AT)
        .unwrap()
        .timestamp_millis();
    assert_eq!(
        open_breakers(&next, &uid),
        Some(vec![("tenant-a".to_string(), since, true)]),
        "the hook stays served, tenant-a's breaker open (fail-closed): {next}"
    );
    let took = answered.saturating_duration_since(sent);
    eprintln!("trip reported -> long poll answered with the open breaker in {took:?}");
    assert!(took < Duration::from_secs(2), "{took:?}");

    // Status: which tenant, who, when, why, for which generation; the condition; an Event.
    let hook = get_hook(cp, &ns, name);
    let b = &hook["status"]["breaker"];
    assert_eq!(b["state"], "Open", "{hook}");
    assert_eq!(b["dispatcher"], dispatcher_id(&op.sync, "disp-1"));
    assert_eq!(b["trippedAt"], TRIPPED_AT);
    assert_eq!(b["reason"], TRIP_REASON);
    assert_eq!(b["generation"], 1);
    assert_eq!(
        b["open"],
        json!([{"tenant": "tenant-a", "trippedAt": TRIPPED_AT, "reason": TRIP_REASON,
                "dispatcher": dispatcher_id(&op.sync, "disp-1"), "failClosed": true}])
    );
    assert!(b.get("resetAnnotation").is_none(), "{b}");
    let open = condition(&hook, "CircuitOpen").expect("CircuitOpen");
    assert_eq!(
        (
            open["status"].clone(),
            open["reason"].clone(),
            open["observedGeneration"].clone()
        ),
        (json!("True"), json!("BreakerTripped"), json!(1))
    );
    let message = open["message"].as_str().unwrap();
    assert!(
        message.contains("disp-1")
            && message.contains("1 tenant(s) (\"tenant-a\")")
            && message.contains("in a row"),
        "{message}"
    );
    let breaker_manager = hook["metadata"]["managedFields"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["manager"] == "agenthooks-operator-breaker")
        .cloned()
        .expect("the breaker's field manager");
    assert!(breaker_manager["fieldsV1"]["f:status"]["f:breaker"].is_object());
    std::thread::sleep(Duration::from_secs(1));
    assert_ne!(
        condition(&get_hook(cp, &ns, name), "Ready").unwrap()["reason"],
        "CircuitOpen",
        "an open tenant does not make the hook unserved"
    );
    assert_eq!(
        condition(&get_hook(cp, &ns, name), "CircuitOpen").unwrap()["status"],
        "True",
        "the reconcile's apply left the breaker's condition alone"
    );
    wait(
        &[&op.proc],
        Duration::from_secs(10),
        "a CircuitOpen Event",
        || {
            events(cp, &ns, name).iter().any(|e| {
                e["reason"] == "CircuitOpen"
                    && e["type"] == "Warning"
                    && e["message"]
                        .as_str()
                        .is_some_and(|n| n.contains("tenant-a"))
            })
        },
    );

    // The same report again: acknowledged as a duplicate, nothing changes.
    let rv = get_hook(cp, &ns, name)["metadata"]["resourceVersion"].clone();
    let (code, again) = post_report(&op.sync, &report);
    assert_eq!(code, 200);
    assert_eq!(
        again,
        json!({"trips": 1, "executions": 0, "duplicate": true})
    );
    // Another dispatcher trips the open hook; a trip of a generation the hook is not at.
    let (code, other) = post_report(
        &op.sync,
        &json!({"dispatcher": "disp-2", "reportId": unique_name("r"),
                "trips": [trip(&uid, &ns, name, 1, None), trip(&uid, &ns, name, 2, None)]}),
    );
    assert_eq!((code, other["trips"].clone()), (200, json!(0)), "{other}");
    let hook = get_hook(cp, &ns, name);
    assert_eq!(
        hook["status"]["breaker"]["dispatcher"],
        dispatcher_id(&op.sync, "disp-1")
    );
    assert_eq!(
        hook["metadata"]["resourceVersion"], rv,
        "nothing was written"
    );
    assert_eq!(
        events(cp, &ns, name)
            .iter()
            .filter(|e| e["reason"] == "CircuitOpen")
            .count(),
        1,
        "one Event per trip"
    );

    // A close older than the trip leaves it open; the probe's close closes it everywhere.
    let (code, ack) = post_report(
        &op.sync,
        &json!({"dispatcher": "disp-3", "reportId": unique_name("r"),
                "closes": [close(&uid, &ns, name, "2025-03-01T10:00:00Z")]}),
    );
    assert_eq!(code, 200, "{ack}");
    assert_eq!(
        open_breakers(&snapshot(&op.sync).unwrap(), &uid).map(|b| b.len()),
        Some(1),
        "an older close does not close a newer trip"
    );
    let (code, ack) = post_report(
        &op.sync,
        &json!({"dispatcher": "disp-3", "reportId": unique_name("r"),
                "closes": [close(&uid, &ns, name, TRIPPED_AT)]}),
    );
    assert_eq!(code, 200, "{ack}");
    assert_eq!(
        open_breakers(&snapshot(&op.sync).unwrap(), &uid),
        Some(vec![])
    );
    let hook = get_hook(cp, &ns, name);
    assert_eq!(hook["status"]["breaker"]["state"], "Closed", "{hook}");
    assert!(hook["status"]["breaker"].get("open").is_none(), "{hook}");
    let closed = condition(&hook, "CircuitOpen").unwrap();
    assert_eq!(
        (closed["status"].clone(), closed["reason"].clone()),
        (json!("False"), json!("BreakerClosed"))
    );
    assert!(closed["message"].as_str().unwrap().contains("disp-3"));
    wait(
        &[&op.proc],
        Duration::from_secs(10),
        "a CircuitClosed Event",
        || {
            events(cp, &ns, name)
                .iter()
                .any(|e| e["reason"] == "CircuitClosed" && e["type"] == "Normal")
        },
    );
    // Tripped again (a later trip of the same tenant).
    let mut again = trip(&uid, &ns, name, 1, None);
    again["trippedAt"] = json!("2025-03-01T10:01:00Z");
    let (code, ack) = post_report(
        &op.sync,
        &json!({"dispatcher": "disp-1", "reportId": unique_name("r"), "trips": [again]}),
    );
    assert_eq!((code, ack["trips"].clone()), (200, json!(1)), "{ack}");

    // A new leader rebuilds from the API server: the breaker stays open.
    let mut op = op;
    op.proc.stop(Duration::from_secs(10));
    let op2 = OperatorProc::start(&kubeconfig, &master, &lease, "op-b2", &[], &logs);
    serves(&op2.sync, &master);
    wait(
        &[&op2.proc],
        Duration::from_secs(30),
        "the new leader serves",
        || snapshot(&op2.sync).is_some(),
    );
    assert_eq!(
        open_breakers(&snapshot(&op2.sync).unwrap(), &uid).map(|b| b.len()),
        Some(1),
        "a persisted open breaker stays open after a leader change"
    );

    // The reset annotation closes it; nothing writes spec.
    cp.kubectl_ok(&[
        "-n",
        &ns,
        "annotate",
        "--overwrite",
        "agenthook",
        name,
        "agenthooks.io/reset-breaker=r1",
    ]);
    wait(
        &[&op2.proc],
        Duration::from_secs(15),
        "served with no open breaker",
        || {
            snapshot(&op2.sync)
                .and_then(|s| in_snapshot(&s, &uid))
                .is_some_and(|h| h["resetToken"] == "r1" && h.get("openBreakers").is_none())
        },
    );
    wait(
        &[&op2.proc],
        Duration::from_secs(15),
        "CircuitOpen=False",
        || {
            condition(&get_hook(cp, &ns, name), "CircuitOpen")
                .is_some_and(|c| c["status"] == "False" && c["reason"] == "BreakerReset")
        },
    );
    let hook = get_hook(cp, &ns, name);
    assert_eq!(hook["status"]["breaker"]["state"], "Closed", "{hook}");
    assert!(hook["status"]["breaker"].get("open").is_none(), "{hook}");
    assert!(
        condition(&hook, "CircuitOpen").unwrap()["message"]
            .as_str()
            .unwrap()
            .contains("annotation changed")
    );
    assert_eq!(hook["metadata"]["generation"], 1);
    assert_eq!(hook["spec"], spec_before);
    wait(
        &[&op2.proc],
        Duration::from_secs(10),
        "a BreakerReset Event",
        || {
            events(cp, &ns, name)
                .iter()
                .any(|e| e["reason"] == "BreakerReset" && e["type"] == "Normal")
        },
    );
    // No write loop: left alone, the hook is not rewritten.
    wait(
        &[&op2.proc],
        Duration::from_secs(15),
        "Ready leaves CircuitOpen",
        || {
            condition(&get_hook(cp, &ns, name), "Ready")
                .is_some_and(|c| c["reason"] != "CircuitOpen")
        },
    );
    std::thread::sleep(Duration::from_secs(2));
    let rv = get_hook(cp, &ns, name)["metadata"]["resourceVersion"].clone();
    std::thread::sleep(Duration::from_secs(3));
    assert_eq!(
        get_hook(cp, &ns, name)["metadata"]["resourceVersion"],
        rv,
        "the hook keeps being rewritten"
    );

    // Tripped at the new token; a trip carrying the old token is stale.
    let (code, ack) = post_report(
        &op2.sync,
        &json!({"dispatcher": "disp-3", "reportId": unique_name("r"),
                "trips": [trip(&uid, &ns, name, 1, None), trip(&uid, &ns, name, 1, Some("r1"))]}),
    );
    assert_eq!((code, ack["trips"].clone()), (200, json!(1)), "{ack}");
    let hook = get_hook(cp, &ns, name);
    assert_eq!(hook["status"]["breaker"]["resetAnnotation"], "r1");
    assert_eq!(
        hook["status"]["breaker"]["dispatcher"],
        dispatcher_id(&op2.sync, "disp-3")
    );
    assert_eq!(
        open_breakers(&snapshot(&op2.sync).unwrap(), &uid).map(|b| b.len()),
        Some(1)
    );

    // A spec edit closes it too.
    cp.apply_yaml(&hook_yaml(&ns, name, "  priority: 7\n"));
    wait(
        &[&op2.proc],
        Duration::from_secs(15),
        "generation 2 served",
        || {
            snapshot(&op2.sync)
                .and_then(|s| in_snapshot(&s, &uid))
                .is_some_and(|h| h["generation"] == 2)
        },
    );
    wait(
        &[&op2.proc],
        Duration::from_secs(15),
        "CircuitOpen=False at generation 2",
        || {
            condition(&get_hook(cp, &ns, name), "CircuitOpen").is_some_and(|c| {
                c["status"] == "False"
                    && c["observedGeneration"] == 2
                    && c["reason"] == "BreakerReset"
            })
        },
    );
    let hook = get_hook(cp, &ns, name);
    assert_eq!(hook["status"]["breaker"]["state"], "Closed");
    let spec_managers: Vec<&str> = hook["metadata"]["managedFields"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["fieldsV1"]["f:spec"].is_object())
        .filter_map(|m| m["manager"].as_str())
        .collect();
    assert!(
        spec_managers
            .iter()
            .all(|m| !m.starts_with("agenthooks-operator")),
        "spec written by {spec_managers:?}"
    );
}

// ---- (d) executions from concurrent reporters --------------------------------------------

#[test]
fn executions_from_concurrent_reporters_sum_exactly() {
    let _serial = serial();
    let cp = ControlPlane::shared();
    install_crds(cp);
    let master = unique_name("ah-report-d");
    cp.create_namespace(&master, &[]);
    let ns = unique_name("ah-report-counts");
    cp.create_namespace(&ns, &[]);
    let logs = log_dir("ah-report-d");
    let kubeconfig = operator_service_account_kubeconfig(cp, &master, &logs);
    let interval_ms = 500;
    let (op, sync, admin) = start_operator(
        &kubeconfig,
        &master,
        &unique_name("agenthooks-operator"),
        "op-d",
        &["--status-write-interval-ms", &interval_ms.to_string()],
        &logs,
    );
    let names = ["h1", "h2"];
    for n in names {
        cp.apply_yaml(&hook_yaml(&ns, n, ""));
    }
    let uids: Vec<String> = names
        .iter()
        .map(|n| {
            get_hook(cp, &ns, n)["metadata"]["uid"]
                .as_str()
                .unwrap()
                .to_string()
        })
        .collect();
    wait(
        &[&op],
        Duration::from_secs(30),
        "the operator serves",
        || snapshot(&sync).is_some(),
    );
    let writes = || {
        metric(
            &http_get(&format!("{admin}/metrics")).1,
            "agenthooks_operator_status_writes_total",
            "kind=\"executions\",outcome=\"written\"",
        )
    };
    let writes_before = writes();

    // 4 reporters × 25 reports, each for both hooks; every report is also sent twice
    // (an answer lost and retried): the duplicate must add nothing.
    const REPORTERS: usize = 4;
    const REPORTS: usize = 25;
    let counts = |r: usize, i: usize, h: usize| -> (u64, u64, u64, u64) {
        let k = (r * 31 + i * 7 + h * 3) as u64;
        (
            k % 4 + 1,
            k % 3,
            u64::from(k.is_multiple_of(5)),
            u64::from(k.is_multiple_of(7)),
        )
    };
    let started = Instant::now();
    // whole milliseconds, as dispatchers send them
    let base =
        chrono::DateTime::from_timestamp_millis(chrono::Utc::now().timestamp_millis()).unwrap();
    std::thread::scope(|scope| {
        for r in 0..REPORTERS {
            let (sync, ns, uids, names) = (&sync, &ns, &uids, &names);
            scope.spawn(move || {
                for i in 0..REPORTS {
                    let executions: Vec<Value> = (0..2)
                        .map(|h| {
                            let (allow, block, error, timeout) = counts(r, i, h);
                            let at = base + chrono::Duration::milliseconds((i * 10 + r) as i64);
                            json!({"uid": uids[h], "namespace": ns, "name": names[h],
                                   "allow": allow, "block": block, "error": error,
                                   "timeout": timeout,
                                   "lastExecutionTime": at.to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
                                   "lastDecision": if block > 0 { "block" } else { "allow" }})
                        })
                        .collect();
                    let report = json!({"dispatcher": format!("reporter-{r}"),
                                        "reportId": format!("{ns}-{r}-{i}"),
                                        "executions": executions});
                    for attempt in 0..2 {
                        let (code, ack) = post_report(sync, &report);
                        assert_eq!(code, 200, "reporter {r} report {i}: {ack}");
                        assert_eq!(ack["executions"], 2, "{ack}");
                        assert_eq!(ack["duplicate"], attempt == 1, "{ack}");
                    }
                }
            });
        }
    });
    let elapsed = started.elapsed();

    // Every 200 came after the counts were written: status holds them all now.
    let last_i = REPORTS - 1;
    let last_r = REPORTERS - 1;
    for (h, name) in names.iter().enumerate() {
        let mut want = (0, 0, 0, 0);
        for r in 0..REPORTERS {
            for i in 0..REPORTS {
                let c = counts(r, i, h);
                want = (want.0 + c.0, want.1 + c.1, want.2 + c.2, want.3 + c.3);
            }
        }
        let ex = get_hook(cp, &ns, name)["status"]["executions"].clone();
        assert_eq!(
            (
                ex["allow"].as_u64().unwrap(),
                ex["block"].as_u64().unwrap(),
                ex["error"].as_u64().unwrap(),
                ex["timeout"].as_u64().unwrap()
            ),
            want,
            "{name}: {ex}"
        );
        let newest = base + chrono::Duration::milliseconds((last_i * 10 + last_r) as i64);
        assert_eq!(
            ex["lastExecutionTime"],
            newest.to_rfc3339_opts(chrono::SecondsFormat::AutoSi, true),
            "{name}: the newest run wins"
        );
        let (_, block, _, _) = counts(last_r, last_i, h);
        assert_eq!(
            ex["lastDecision"],
            if block > 0 { "block" } else { "allow" }
        );
    }
    let written = writes() - writes_before;
    let bound = names.len() as f64 * (elapsed.as_secs_f64() * 1000.0 / interval_ms as f64 + 2.0);
    eprintln!(
        "{} reports ({} with duplicates) from {REPORTERS} reporters in {elapsed:?} -> {written} status writes for 2 hooks (bound {bound:.0})",
        REPORTERS * REPORTS,
        REPORTERS * REPORTS * 2
    );
    assert!(written >= 2.0, "{written}");
    assert!(written <= bound, "{written} writes > {bound}");
    let mut op = op;
    op.stop(Duration::from_secs(10));
}

// ---- (e) refused writes, made-up hooks, forged times --------------------------------------

/// A ValidatingAdmissionPolicy (and its binding) refusing, with 403, every status write of
/// hook `refused` in namespaces labelled `agenthooks-test=<label>`.
fn freeze_policy(name: &str, label: &str) -> String {
    format!(
        r#"apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicy
metadata: {{name: {name}}}
spec:
  failurePolicy: Fail
  matchConstraints:
    namespaceSelector: {{matchLabels: {{agenthooks-test: {label}}}}}
    resourceRules:
    - apiGroups: ["agenthooks.io"]
      apiVersions: ["*"]
      operations: ["CREATE", "UPDATE"]
      resources: ["agenthooks/status"]
  validations:
  - expression: "object.metadata.name != 'refused'"
    message: "the status of this hook is frozen by policy (test)"
    reason: Forbidden
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicyBinding
metadata: {{name: {name}}}
spec:
  policyName: {name}
  validationActions: [Deny]
"#
    )
}

/// `POST {sync}/v1/report` with a body too large for a command-line argument.
fn post_big_report(sync: &str, report: &Value, dir: &Path) -> (u16, Value) {
    let (report, auth) = as_sent(sync, report);
    let file = dir.join(format!("{}.json", unique_name("report")));
    std::fs::write(&file, report.to_string()).unwrap();
    let out = std::process::Command::new("curl")
        .arg("--cacert")
        .arg(&agenthooks_e2e::stack::test_pki().ca)
        .args([
            "-s",
            "--max-time",
            "30",
            "-H",
            "content-type: application/json",
            "-H",
            &auth,
            "--data-binary",
            &format!("@{}", file.display()),
            "-w",
            "\n%{http_code}",
            &format!("{sync}/v1/report"),
        ])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let (body, code) = text.rsplit_once('\n').unwrap_or(("", &text));
    (
        code.trim().parse().unwrap_or(0),
        serde_json::from_str(body).unwrap_or(Value::Null),
    )
}

#[test]
fn refused_writes_are_dropped_made_up_hooks_cost_nothing_and_future_times_are_clamped() {
    let _serial = serial();
    let cp = ControlPlane::shared();
    install_crds(cp);
    let master = unique_name("ah-report-e");
    cp.create_namespace(&master, &[]);
    let ns = unique_name("ah-report-refused");
    cp.create_namespace(&ns, &[("agenthooks-test", &ns)]);
    let logs = log_dir("ah-report-e");
    let kubeconfig = operator_service_account_kubeconfig(cp, &master, &logs);
    for n in ["refused", "ok"] {
        cp.apply_yaml(&hook_yaml(&ns, n, ""));
    }
    let policy = unique_name("ah-freeze-status");
    cp.apply_yaml(&freeze_policy(&policy, &ns));
    let probe = r#"{"status":{"executions":{"allow":0}}}"#;
    wait(
        &[],
        Duration::from_secs(30),
        "the policy refuses status writes",
        || {
            let out = cp.kubectl(&[
                "-n",
                &ns,
                "patch",
                "agenthook",
                "refused",
                "--subresource=status",
                "--type=merge",
                "-p",
                probe,
            ]);
            !out.status.success()
                && String::from_utf8_lossy(&out.stderr).contains("frozen by policy")
        },
    );
    let (op, sync, admin) = start_operator(
        &kubeconfig,
        &master,
        &unique_name("agenthooks-operator"),
        "op-e",
        &["--status-write-interval-ms", "100"],
        &logs,
    );
    let uid = |n: &str| {
        get_hook(cp, &ns, n)["metadata"]["uid"]
            .as_str()
            .unwrap()
            .to_string()
    };
    let (refused, ok) = (uid("refused"), uid("ok"));
    wait(&[&op], Duration::from_secs(30), "both hooks served", || {
        snapshot(&sync)
            .is_some_and(|s| in_snapshot(&s, &refused).is_some() && in_snapshot(&s, &ok).is_some())
    });
    let metrics = || http_get(&format!("{admin}/metrics")).1;
    let writes = || {
        metric(
            &metrics(),
            "agenthooks_operator_status_writes_total",
            "kind=\"executions\",outcome=\"written\"",
        )
    };
    let writes_before = writes();

    // One report: counts of the refused hook, of the ok hook (last run in year 9999), of
    // 3,000 made-up hooks, and a trip of the refused hook (its status write refused too).
    let mut executions: Vec<Value> = (0..3_000)
        .map(|i| {
            json!({"uid": format!("made-up-{i}"), "namespace": &ns,
                   "name": format!("made-up-{i}"), "allow": 1})
        })
        .collect();
    executions.push(json!({"uid": &refused, "namespace": &ns, "name": "refused",
                           "allow": 4, "block": 1}));
    executions.push(
        json!({"uid": &ok, "namespace": &ns, "name": "ok", "allow": 2,
                           "lastExecutionTime": "9999-12-31T23:59:59Z", "lastDecision": "block"}),
    );
    let report = json!({"dispatcher": "disp-e", "reportId": unique_name("r"),
                        "executions": executions,
                        "trips": [trip(&refused, &ns, "refused", 1, None)]});
    let before = chrono::Utc::now();
    let (code, ack) = post_big_report(&sync, &report, &logs);
    assert_eq!(code, 200, "{ack}\n{}", tails(&[&op]));
    assert_eq!(
        ack,
        json!({"trips": 0, "executions": 1, "duplicate": false}),
        "only the ok hook written; the rest acknowledged and written off"
    );
    let after = chrono::Utc::now();
    let text = metrics();
    assert_eq!(
        metric(
            &text,
            "agenthooks_operator_execution_counts_dropped_total",
            "reason=\"forbidden\""
        ),
        5.0
    );
    assert_eq!(
        metric(
            &text,
            "agenthooks_operator_execution_counts_dropped_total",
            "reason=\"unknown_hook\""
        ),
        3_000.0
    );
    assert_eq!(
        metric(
            &text,
            "agenthooks_operator_breaker_trips_total",
            "result=\"refused\""
        ),
        1.0
    );
    assert_eq!(
        writes() - writes_before,
        1.0,
        "one status write: the ok hook"
    );
    let log = std::fs::read_to_string(&op.log).unwrap_or_default();
    assert!(
        log.lines().any(|l| l.contains("ERROR")
            && l.contains(&format!("{ns}/refused"))
            && l.contains("frozen by policy")
            && l.contains("DROPPED")),
        "an error naming the hook and the API error:\n{}",
        tails(&[&op])
    );
    // Its status write was refused, but the open breaker is published all the same: the
    // hook stays served, with the tenant's breaker open (CONTRACT §6.2).
    let served = in_snapshot(&snapshot(&sync).unwrap(), &refused)
        .expect("a tripped hook stays in the snapshot");
    assert_eq!(
        served["openBreakers"][0]["tenant"], "tenant-a",
        "the tenant's breaker is open in the snapshot all the same: {served}"
    );
    let frozen = get_hook(cp, &ns, "refused");
    assert!(
        frozen["status"]["executions"]["allow"]
            .as_i64()
            .unwrap_or(0)
            == 0,
        "{frozen}"
    );
    let ex = get_hook(cp, &ns, "ok")["status"]["executions"].clone();
    assert_eq!(
        (ex["allow"].clone(), ex["lastDecision"].clone()),
        (json!(2), json!("block"))
    );
    let recorded: chrono::DateTime<chrono::Utc> =
        ex["lastExecutionTime"].as_str().unwrap().parse().unwrap();
    assert!(
        recorded >= before - chrono::Duration::seconds(1) && recorded <= after,
        "year 9999 taken as the receipt time: {recorded}"
    );

    // A real run after it takes lastDecision (a recorded 9999 would have pinned it).
    std::thread::sleep(Duration::from_millis(50));
    let now = chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true);
    let (code, ack) = post_report(
        &sync,
        &json!({"dispatcher": "disp-e", "reportId": unique_name("r"), "executions": [
            {"uid": &ok, "namespace": &ns, "name": "ok", "allow": 1,
             "lastExecutionTime": &now, "lastDecision": "allow"}]}),
    );
    assert_eq!((code, ack["executions"].clone()), (200, json!(1)), "{ack}");
    let ex = get_hook(cp, &ns, "ok")["status"]["executions"].clone();
    assert_eq!(
        (ex["allow"].clone(), ex["lastDecision"].clone()),
        (json!(3), json!("allow"))
    );
    let last: chrono::DateTime<chrono::Utc> =
        ex["lastExecutionTime"].as_str().unwrap().parse().unwrap();
    assert_eq!(last, now.parse::<chrono::DateTime<chrono::Utc>>().unwrap());

    let mut op = op;
    op.stop(Duration::from_secs(10));
    cp.kubectl(&["delete", "validatingadmissionpolicybinding", &policy]);
    cp.kubectl(&["delete", "validatingadmissionpolicy", &policy]);
}
