//! "Agents" inside the cluster: Pods of the busybox image `agenthooks.test/agent:1` (sh,
//! wget, nc, ...) that call the dispatcher the way an agent runtime would, over the Pod
//! network and the cluster's DNS.
//!
//! - [`Agent`]: a Pod that sleeps; each [`Agent::request`] is one HTTP/1.0 exchange made
//!   with `nc` through `kubectl exec`, so the status and body of any answer (503s too) come
//!   back, and any address the Pod can reach (a Service name, a Pod IP) can be called.
//! - [`Load`]: a Pod that posts events in a loop until told to stop, printing one line per
//!   answer; [`Load::stop`] reads them back as a [`LoadReport`]. For "none lost or wrong"
//!   under a rollout or a failover.
//!
//! Both Pods run restricted (non-root, read-only root file system, no capabilities, no API
//! token) with an emptyDir on /tmp, and prove who they are as an agent runtime does
//! (docs/callers.md): a projected token of their namespace's `default` ServiceAccount for
//! the audience `agenthooks.io`, at [`TOKEN_PATH`], sent as `Authorization: Bearer …` with
//! every request (unless [`Agent::request_without_token`]).

use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::Node;
use crate::wait_for;

/// The image of the agent Pods (imported by `e2e/node/up.sh`; on another cluster, load it).
pub const AGENT_IMAGE: &str = "agenthooks.test/agent:1";

/// Where the agent Pods find their projected ServiceAccount token for `agenthooks.io`.
pub const TOKEN_PATH: &str = "/var/run/secrets/agenthooks.io/token";

/// Stands for the Pod's token in a request until the Pod sends it.
const TOKEN_MARK: &str = "@AGENTHOOKS_TOKEN@";

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// A restricted Pod of the agent image running `script` with `sh -c`.
fn pod_manifest(ns: &str, name: &str, script: &str) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": ns, "labels": {"app.kubernetes.io/name": "agenthooks-e2e-agent"}},
        "spec": {
            "restartPolicy": "Never",
            "automountServiceAccountToken": false,
            "terminationGracePeriodSeconds": 1,
            "securityContext": {
                "runAsNonRoot": true, "runAsUser": 1000, "runAsGroup": 1000,
                "seccompProfile": {"type": "RuntimeDefault"}
            },
            "containers": [{
                "name": "agent",
                "image": AGENT_IMAGE,
                "imagePullPolicy": "IfNotPresent",
                "command": ["/bin/sh", "-c", script],
                "securityContext": {
                    "allowPrivilegeEscalation": false, "readOnlyRootFilesystem": true,
                    "capabilities": {"drop": ["ALL"]}
                },
                "volumeMounts": [
                    {"name": "tmp", "mountPath": "/tmp"},
                    {"name": "agenthooks-token", "mountPath": "/var/run/secrets/agenthooks.io", "readOnly": true}
                ],
                "resources": {"requests": {"cpu": "10m", "memory": "8Mi"}}
            }],
            "volumes": [
                {"name": "tmp", "emptyDir": {"sizeLimit": "16Mi"}},
                {"name": "agenthooks-token", "projected": {"sources": [
                    {"serviceAccountToken": {"audience": "agenthooks.io", "expirationSeconds": 3600, "path": "token"}}
                ]}}
            ]
        }
    })
}

/// Creates the Pod and waits until its container runs; panics with its status otherwise.
fn start_pod(node: &Node, ns: &str, name: &str, script: &str) {
    let _ = node.kubectl(&[
        "-n",
        ns,
        "delete",
        "pod",
        name,
        "--ignore-not-found",
        "--wait",
    ]);
    node.apply(&pod_manifest(ns, name, script).to_string());
    let mut status = Value::Null;
    let running = wait_for(Duration::from_secs(60), || {
        status = node.kubectl_json(&["-n", ns, "get", "pod", name])["status"].clone();
        status["containerStatuses"][0]["state"]["running"].is_object()
    });
    assert!(running, "agent Pod {ns}/{name} does not run: {status}");
}

/// An HTTP answer as the agent saw it; `status` 0 when no answer came (connection refused,
/// timeout).
#[derive(Debug, Clone)]
pub struct Answer {
    /// HTTP status, 0 for none.
    pub status: u16,
    /// The body (or, with status 0, what `nc` printed).
    pub body: String,
}

impl Answer {
    /// The body as JSON (`Value::Null` when it is not JSON).
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.body).unwrap_or(Value::Null)
    }
}

/// A sleeping agent Pod that sends requests on demand (see the module docs).
pub struct Agent<'a> {
    node: &'a Node,
    /// Namespace of the Pod.
    pub ns: String,
    /// Name of the Pod.
    pub name: String,
}

impl<'a> Agent<'a> {
    /// Starts (or restarts) the Pod `ns/name` and waits until it runs.
    pub fn start(node: &'a Node, ns: &str, name: &str) -> Agent<'a> {
        start_pod(node, ns, name, "exec sleep 86400");
        Agent {
            node,
            ns: ns.to_owned(),
            name: name.to_owned(),
        }
    }

    /// `sh -c script` in the Pod; (exit code, stdout + stderr).
    pub fn sh(&self, script: &str) -> (i32, String) {
        let out = self
            .node
            .kubectl(&["-n", &self.ns, "exec", &self.name, "--", "sh", "-c", script]);
        (
            out.status.code().unwrap_or(-1),
            format!("{}{}", text(&out.stdout), text(&out.stderr)),
        )
    }

    /// One HTTP/1.0 request from the Pod to `http://HOST:PORT/PATH` (`url`), with
    /// `headers` (`Name: value`) and a JSON `body` when given (POST, else GET), sent with
    /// the Pod's token ([`TOKEN_PATH`]) unless `headers` has an `Authorization` of its own.
    pub fn request(&self, url: &str, headers: &[&str], body: Option<&str>) -> Answer {
        let own = headers
            .iter()
            .any(|h| h.to_ascii_lowercase().starts_with("authorization:"));
        let with_token: Vec<String> = headers
            .iter()
            .map(|h| h.to_string())
            .chain((!own).then(|| format!("Authorization: Bearer {TOKEN_MARK}")))
            .collect();
        let with_token: Vec<&str> = with_token.iter().map(String::as_str).collect();
        self.send(url, &with_token, body)
    }

    /// As [`Agent::request`], without any credential (for the 401s).
    pub fn request_without_token(&self, url: &str, headers: &[&str], body: Option<&str>) -> Answer {
        self.send(url, headers, body)
    }

    fn send(&self, url: &str, headers: &[&str], body: Option<&str>) -> Answer {
        let rest = url
            .strip_prefix("http://")
            .unwrap_or_else(|| panic!("{url}: only http:// URLs"));
        let (authority, path) = match rest.find('/') {
            Some(i) => (&rest[..i], &rest[i..]),
            None => (rest, "/"),
        };
        let (host, port) = authority.rsplit_once(':').unwrap_or((authority, "80"));
        let mut req = format!(
            "{} {path} HTTP/1.0\r\nHost: {authority}\r\n",
            if body.is_some() { "POST" } else { "GET" }
        );
        for h in headers {
            req.push_str(h);
            req.push_str("\r\n");
        }
        if let Some(b) = body {
            req.push_str(&format!(
                "Content-Type: application/json\r\nContent-Length: {}\r\n",
                b.len()
            ));
        }
        req.push_str("\r\n");
        req.push_str(body.unwrap_or_default());
        // busybox nc ends when its stdin does: `-e` runs a shell on the socket instead,
        // which sends the request and reads the answer until the server closes (HTTP/1.0).
        // The token is read in the Pod, where it lives (and is renewed by the kubelet).
        let script = format!(
            "f=/tmp/req.$$; sed \"s|{TOKEN_MARK}|$(cat {TOKEN_PATH} 2>/dev/null)|\" > $f; timeout 30 nc -w 20 {host} {port} -e sh -c \"cat $f; cat > $f.out\"; cat $f.out; rm -f $f $f.out"
        );
        let out = self.node.kubectl_stdin(
            &[
                "-n", &self.ns, "exec", "-i", &self.name, "--", "sh", "-c", &script,
            ],
            req.as_bytes(),
        );
        let raw = text(&out.stdout);
        let Some((head, body)) = raw.split_once("\r\n\r\n") else {
            return Answer {
                status: 0,
                body: format!("{raw}{}", text(&out.stderr)),
            };
        };
        let status = head
            .split_whitespace()
            .nth(1)
            .and_then(|s| s.parse().ok())
            .unwrap_or(0);
        Answer {
            status,
            body: body.to_owned(),
        }
    }

    /// Deletes the Pod (without waiting).
    pub fn delete(&self) {
        let _ = self
            .node
            .kubectl(&["-n", &self.ns, "delete", "pod", &self.name, "--wait=false"]);
    }
}

/// The verdict of an answer, as compared across a disruption: `decision`, `reason`,
/// `decidingHook` and each hook run's `hook` and `outcome` (not its timings or ids).
pub fn verdict(answer: &Value) -> Value {
    let runs: Vec<Value> = answer["hooks"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|r| json!({"hook": r["hook"], "outcome": r["outcome"]}))
        .collect();
    json!({
        "decision": answer["decision"],
        "reason": answer["reason"],
        "decidingHook": answer["decidingHook"],
        "hooks": runs,
    })
}

/// A Pod posting events in a loop (see the module docs).
pub struct Load<'a> {
    node: &'a Node,
    ns: String,
    name: String,
    labels: Vec<String>,
    started: Instant,
}

/// What a [`Load`] Pod saw: one entry per request, in order.
#[derive(Debug)]
pub struct LoadReport {
    /// (label of the event, the answer's JSON or the failure wget printed).
    pub answers: Vec<(String, Result<Value, String>)>,
    /// Seconds the loop ran.
    pub seconds: f64,
}

impl LoadReport {
    /// Requests that got a JSON answer.
    pub fn answered(&self) -> usize {
        self.answers.iter().filter(|(_, a)| a.is_ok()).count()
    }

    /// The requests that got no answer or one that is not JSON (label, what wget said).
    pub fn failed(&self) -> Vec<(&str, &str)> {
        self.answers
            .iter()
            .filter_map(|(l, a)| a.as_ref().err().map(|e| (l.as_str(), e.as_str())))
            .collect()
    }

    /// Panics unless every request got an answer and every answer is `expected(label)`;
    /// `during` names the disruption in the message.
    pub fn assert_all_answered_as(&self, during: &str, expected: impl Fn(&str) -> Value) {
        let failed = self.failed();
        assert!(
            failed.is_empty(),
            "{} of {} requests got no decision during {during}, e.g. {:?}",
            failed.len(),
            self.answers.len(),
            &failed[..failed.len().min(5)]
        );
        let wrong = self.wrong(expected);
        assert!(
            wrong.is_empty(),
            "{} of {} decisions changed during {during}, e.g. {:?}",
            wrong.len(),
            self.answers.len(),
            &wrong[..wrong.len().min(5)]
        );
    }

    /// Answers whose [`verdict`] differs from `expected(label)` (label, the verdict got).
    pub fn wrong(&self, expected: impl Fn(&str) -> Value) -> Vec<(String, Value)> {
        self.answers
            .iter()
            .filter_map(|(l, a)| {
                let got = verdict(a.as_ref().ok()?);
                (got != expected(l)).then(|| (l.clone(), got))
            })
            .collect()
    }
}

impl<'a> Load<'a> {
    /// Starts the Pod `ns/name` posting each `(label, event JSON)` of `calls` in turn to
    /// `url` (a dispatcher's `/v1/dispatch`), as fast as one wget after another goes,
    /// until [`Load::stop`].
    pub fn start(
        node: &'a Node,
        ns: &str,
        name: &str,
        url: &str,
        calls: &[(&str, &str)],
    ) -> Load<'a> {
        let mut script = format!("url='{url}'\ni=0\nwhile [ ! -e /tmp/stop ]; do\n  i=$((i+1))\n");
        for (label, event) in calls {
            assert!(
                !event.contains('\''),
                "event bodies are single-quoted: {event}"
            );
            script.push_str(&format!(
                "  a=$(timeout 15 wget -q -O - --header 'content-type: application/json' --header \"Authorization: Bearer $(cat {TOKEN_PATH})\" --post-data '{event}' \"$url\" 2>&1 | tr '\\n' ' ')\n  echo \"A {label} $a\"\n"
            ));
        }
        script.push_str("done\necho \"DONE $i\"\n");
        start_pod(node, ns, name, &script);
        Load {
            node,
            ns: ns.to_owned(),
            name: name.to_owned(),
            labels: calls.iter().map(|(l, _)| (*l).to_owned()).collect(),
            started: Instant::now(),
        }
    }

    fn logs(&self) -> String {
        text(
            &self
                .node
                .kubectl(&["-n", &self.ns, "logs", &self.name])
                .stdout,
        )
    }

    /// Requests answered or failed so far.
    pub fn count(&self) -> usize {
        self.logs().lines().filter(|l| l.starts_with("A ")).count()
    }

    /// Waits until at least `n` requests went out; panics after `timeout`.
    pub fn wait_for_requests(&self, n: usize, timeout: Duration) {
        let mut seen = 0;
        let ok = wait_for(timeout, || {
            seen = self.count();
            seen >= n
        });
        assert!(
            ok,
            "load {}/{}: {seen} requests after {timeout:?}, wanted {n}",
            self.ns, self.name
        );
    }

    /// Stops the loop (after the request in flight), reads every answer and deletes the Pod.
    pub fn stop(self) -> LoadReport {
        let out = self.node.kubectl(&[
            "-n",
            &self.ns,
            "exec",
            &self.name,
            "--",
            "touch",
            "/tmp/stop",
        ]);
        assert!(out.status.success(), "stop the load: {}", text(&out.stderr));
        let seconds = self.started.elapsed().as_secs_f64();
        let done = wait_for(Duration::from_secs(60), || {
            self.node
                .kubectl_json(&["-n", &self.ns, "get", "pod", &self.name])["status"]["phase"]
                == "Succeeded"
        });
        let logs = self.logs();
        assert!(done, "the load Pod did not finish: {logs}");
        let mut answers = Vec::new();
        for line in logs.lines() {
            let Some(rest) = line.strip_prefix("A ") else {
                continue;
            };
            let (label, body) = rest.split_once(' ').unwrap_or((rest, ""));
            assert!(
                self.labels.iter().any(|l| l == label),
                "unknown label in {line}"
            );
            let body = body.trim();
            let answer = serde_json::from_str::<Value>(body)
                .ok()
                .filter(Value::is_object)
                .ok_or_else(|| body.to_owned());
            answers.push((label.to_owned(), answer));
        }
        let _ = self
            .node
            .kubectl(&["-n", &self.ns, "delete", "pod", &self.name, "--wait=false"]);
        LoadReport { answers, seconds }
    }
}
