//! Scenario `console`: the console of a dispatcher Pod, as a person reaches it (issue 14):
//! a token from `kubectl create token` signs in, the person sees the hooks of the
//! namespace their RBAC lets them list (the sample hook, Accepted and Ready as the operator
//! set them), runs the hook in the Test tab (a dry run: block, with the hook's reason), and
//! is sent back to sign-in once their ServiceAccount is deleted (the token is refused).
//! HTTP with a cookie jar (`curl`), from the host to one dispatcher Pod: sessions live in
//! each Pod, as `kubectl port-forward` gives a person one Pod.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use crate::support::{NS, TENANT_NS, Tier};

/// The person: a ServiceAccount of the tenant's namespace.
const PERSON: &str = "console-person";

/// `curl` with the cookie jar `jar`: (status, body, Location).
fn curl(jar: &Path, args: &[&str]) -> (u16, String, String) {
    let out = Command::new("curl")
        .args(["-s", "--max-time", "20", "-c"])
        .arg(jar)
        .arg("-b")
        .arg(jar)
        .args(["-w", "\n%{http_code} %{redirect_url}"])
        .args(args)
        .output()
        .expect("run curl");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let (body, tail) = text.rsplit_once('\n').unwrap_or(("", &text));
    let (code, location) = tail.split_once(' ').unwrap_or((tail, ""));
    (
        code.trim().parse().unwrap_or(0),
        body.to_owned(),
        location.trim().to_owned(),
    )
}

/// The hidden CSRF field of a console page.
fn csrf(page: &str) -> String {
    let at = page
        .find(r#"name="csrf" value=""#)
        .expect("a form with its csrf field")
        + 19;
    page[at..at + 64].to_owned()
}

/// The scenario (see the module docs).
pub fn run(tier: &mut Tier) {
    tier.ensure_installed();
    let node = &tier.node;
    // The person may read AgentHooks in the tenant's namespace and dry-run them there.
    let rbac = format!(
        r#"apiVersion: v1
kind: ServiceAccount
metadata: {{name: {PERSON}, namespace: {TENANT_NS}}}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {{name: {PERSON}, namespace: {TENANT_NS}}}
rules:
  - apiGroups: [agenthooks.io]
    resources: [agenthooks, tenanthookbudgets]
    verbs: [get, list]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {{name: {PERSON}, namespace: {TENANT_NS}}}
roleRef: {{apiGroup: rbac.authorization.k8s.io, kind: Role, name: {PERSON}}}
subjects: [{{kind: ServiceAccount, name: {PERSON}, namespace: {TENANT_NS}}}]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {{name: {PERSON}-tester, namespace: {TENANT_NS}}}
roleRef: {{apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: agenthooks-tester}}
subjects: [{{kind: ServiceAccount, name: {PERSON}, namespace: {TENANT_NS}}}]
"#
    );
    let applied = node.kubectl_stdin(&["apply", "-f", "-"], rbac.as_bytes());
    assert!(
        applied.status.success(),
        "{}",
        String::from_utf8_lossy(&applied.stderr)
    );
    let token = node
        .kubectl_ok(&["-n", TENANT_NS, "create", "token", PERSON])
        .trim()
        .to_owned();
    let ip = tier.endpoint_ips("agenthooks-dispatcher")[0].clone();
    let base = format!("http://{ip}:8080");
    let dir = tempfile::tempdir().unwrap();
    let jar = dir.path().join("cookies");
    let origin = format!("Origin: {base}");

    // Not signed in: sent to sign-in.
    let (status, _, location) = curl(&jar, &[&format!("{base}/ui/hooks")]);
    assert_eq!(status, 303);
    assert!(location.contains("/ui/sign-in?next="), "{location}");

    // A wrong token is refused; the person's token signs in.
    let form = |t: &str| format!("token={t}&next=/ui/hooks");
    let (status, body, _) = curl(
        &jar,
        &[
            "-H",
            &origin,
            "--data",
            &form("not-a-token"),
            &format!("{base}/ui/sign-in"),
        ],
    );
    assert_eq!(status, 401, "{body}");
    let (status, body, location) = curl(
        &jar,
        &[
            "-H",
            &origin,
            "--data",
            &form(&token),
            &format!("{base}/ui/sign-in"),
        ],
    );
    assert_eq!(
        (status, location.as_str()),
        (303, format!("{base}/ui/hooks").as_str()),
        "{body}"
    );

    // The list: the sample hook, Accepted and Ready as the operator set them; the person's
    // name from the API server.
    let (status, list, _) = curl(&jar, &[&format!("{base}/ui/hooks")]);
    assert_eq!(status, 200, "{list}");
    assert!(
        list.contains(&format!(
            r#"<span data-testid="whoami">system:serviceaccount:{TENANT_NS}:{PERSON}</span>"#
        )),
        "{list}"
    );
    assert!(
        list.contains(r#"data-hook="tenant-acme/block-rm-rf""#),
        "{list}"
    );
    let row = &list[list.find(r#"data-hook="tenant-acme/block-rm-rf""#).unwrap()..];
    let row = &row[..row.find("</tr>").unwrap()];
    assert!(
        row.contains(r#"data-col="accepted"><span class="badge" data-status="True""#),
        "{row}"
    );
    assert!(
        row.contains(r#"data-col="ready"><span class="badge" data-status="True""#),
        "{row}"
    );
    // Nothing of the master namespace, which the person may not list.
    assert!(!list.contains(&format!(r#"data-hook="{NS}/"#)), "{list}");

    // The Test tab: a dry run of the sample hook on `rm -rf` blocks with its reason.
    let (status, page, _) = curl(
        &jar,
        &[&format!("{base}/ui/hooks/tenant-acme/block-rm-rf/test")],
    );
    assert_eq!(status, 200, "{page}");
    let event = r#"{"event":"pre_tool_use","tenant_id":"acme","agent_id":"coder","tool_name":"exec","tool_input":{"cmd":"rm -rf /var/lib/data"}}"#;
    let (status, result, _) = curl(
        &jar,
        &[
            "-H",
            &origin,
            "--data-urlencode",
            &format!("csrf={}", csrf(&page)),
            "--data-urlencode",
            &format!("event={event}"),
            &format!("{base}/ui/hooks/tenant-acme/block-rm-rf/test"),
        ],
    );
    assert_eq!(status, 200, "{result}");
    assert!(
        result.contains(r#"data-testid="decision"><span class="decision" data-decision="block">"#),
        "{result}"
    );
    assert!(
        result.contains("destructive command refused by policy"),
        "{result}"
    );

    // The ServiceAccount goes: once the API server refuses its token (its ServiceAccount
    // cache follows the deletion within moments), the person is back at sign-in.
    node.kubectl_ok(&["-n", TENANT_NS, "delete", "serviceaccount", PERSON]);
    let mut last = (0, String::new());
    let refused = agenthooks_e2e::wait_for(Duration::from_secs(20), || {
        let (status, _, location) = curl(&jar, &[&format!("{base}/ui/hooks")]);
        last = (status, location);
        last.0 == 303
    });
    assert!(refused && last.1.contains("reason=expired"), "{last:?}");
    node.kubectl_ok(&[
        "-n",
        TENANT_NS,
        "delete",
        &format!("role/{PERSON}"),
        &format!("rolebinding/{PERSON}"),
        &format!("rolebinding/{PERSON}-tester"),
        "--ignore-not-found",
    ]);
}
