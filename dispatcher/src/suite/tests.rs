use std::path::{Path, PathBuf};
use std::time::Duration;

use agenthooks_crds::Edition;
use regex::Regex;
use serde_json::json;

use super::report::{self, FileResults};
use super::*;
use crate::chain::{Decision, Verdict};
use crate::decision::outcome::{ErrorKind, Outcome};
use crate::handlers::http::HttpCaller;
use crate::runner::Engine;

fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
    let p = dir.join(name);
    if let Some(parent) = p.parent() {
        std::fs::create_dir_all(parent).unwrap();
    }
    std::fs::write(&p, text).unwrap();
    p
}

/// Four hooks: a tenant http hook (never reachable), a master-namespace http hook that
/// may rewrite, a command hook that blocks `rm`, and one that blocks every exec after
/// the fact (a non-blocking event).
const HOOKS: &str = "apiVersion: v1
kind: Namespace
metadata: {name: tenant-acme, labels: {agenthooks.io/tenant: acme}}
---
apiVersion: agenthooks.io/v1alpha1
kind: AgentHook
metadata: {name: policy, namespace: tenant-acme}
spec:
  event: pre_tool_use
  priority: 10
  matcher: ^write_file$
  handler: {type: http, http: {url: 'https://policy.invalid/hook'}}
---
apiVersion: agenthooks.io/v1alpha1
kind: AgentHook
metadata: {name: rewrite, namespace: agenthooks-system}
spec:
  event: pre_tool_use
  scope: global
  priority: 20
  matcher: ^write_file$
  handler: {type: http, http: {url: 'https://rewrite.invalid/hook'}}
---
apiVersion: agenthooks.io/v1alpha1
kind: AgentHook
metadata: {name: no-rm, namespace: tenant-acme}
spec:
  event: pre_tool_use
  matcher: ^exec$
  ifExpr: tool_input.cmd.startsWith('rm ')
  handler: {type: command, command: {command: 'echo no rm here >&2; exit 2'}}
---
apiVersion: agenthooks.io/v1alpha1
kind: AgentHook
metadata: {name: after-exec, namespace: tenant-acme}
spec:
  event: post_tool_use
  matcher: ^exec$
  handler: {type: command, command: {command: 'echo refused after the fact >&2; exit 2'}}
";

fn suite_file(dir: &Path, body: &str) -> PathBuf {
    write(dir, "hooks/all.yaml", HOOKS);
    write(
        dir,
        "t_test.yaml",
        &format!("apiVersion: agenthooks.io/v1alpha1\nkind: AgentHookTest\nhooks: [hooks]\n{body}"),
    )
}

fn load_err(body: &str) -> String {
    let dir = tempfile::tempdir().unwrap();
    let p = suite_file(dir.path(), body);
    let e = load(&p, "agenthooks-system", Edition::Lite).unwrap_err();
    e.to_string()
        .strip_prefix(&format!("{}: ", p.display()))
        .unwrap_or_else(|| panic!("names the file: {e}"))
        .to_owned()
}

const WRITE: &str =
    "{event: pre_tool_use, tenant_id: acme, tool_name: write_file, tool_input: {path: /etc/hosts}}";

#[test]
fn bad_files_name_the_field_and_the_rule() {
    let cases: &[(&str, &str)] = &[
        ("cases: []\n", "cases: at least one case"),
        (
            &format!(
                "cases:\n- name: a\n  event: {WRITE}\n  expect: {{decision: allow}}\n  extra: 1\n"
            ),
            "cases[0].extra: unknown field `extra`, expected one of `name`, `event`, `eventFile`, `stubs`, `expect`",
        ),
        (
            &format!("cases:\n- name: a\n  event: {WRITE}\n  expect: {{decision: maybe}}\n"),
            "cases[0].expect.decision: unknown variant `maybe`, expected one of `allow`, `block`, `ask`",
        ),
        (
            &format!("cases:\n- name: a\n  event: {WRITE}\n  expect: {{}}\n"),
            "cases[0].expect.decision: missing field `decision`",
        ),
        (
            "cases:\n- name: a\n  expect: {decision: allow}\n",
            "cases[0]: give the event inline (event) or as a JSON file (eventFile), one of them",
        ),
        (
            &format!(
                "cases:\n- name: a\n  event: {WRITE}\n  expect: {{decision: allow}}\n- name: a\n  event: {WRITE}\n  expect: {{decision: allow}}\n"
            ),
            "cases[1].name: \"a\" names another case too; names are unique in a file",
        ),
        (
            "cases:\n- name: a\n  event: {event: pre_tool_use, depth: -1}\n  expect: {decision: allow}\n",
            "cases[0].event: POST /v1/dispatch would refuse it: depth: must not be negative",
        ),
        (
            "cases:\n- name: a\n  event: {event: pre_tool_use, tool_name: exec}\n  expect: {decision: allow}\n",
            "cases[0].event.tenant_id: required: every call has a tenant (the caller's); without one no tenant's hook runs and the case would prove nothing of them",
        ),
        (
            &format!(
                "stubs: [{{hook: tenant-acme/nope, decision: allow}}]\ncases:\n- name: a\n  event: {WRITE}\n  expect: {{decision: allow}}\n"
            ),
            "stubs[0].hook: \"tenant-acme/nope\" is not among the hooks under test (agenthooks-system/rewrite, tenant-acme/after-exec, tenant-acme/no-rm, tenant-acme/policy)",
        ),
        (
            &format!(
                "cases:\n- name: a\n  event: {WRITE}\n  stubs: [{{hook: tenant-acme/policy, decision: block, timeout: true}}]\n  expect: {{decision: allow}}\n"
            ),
            "cases[0].stubs[0]: give exactly one of decision (allow, block, ask), error (an error kind) or timeout: true",
        ),
        (
            &format!(
                "cases:\n- name: a\n  event: {WRITE}\n  stubs: [{{hook: tenant-acme/policy, error: transport, updatedInput: {{}}}}]\n  expect: {{decision: allow}}\n"
            ),
            "cases[0].stubs[0]: an error stub has no additionalContext, updatedInput or updatedToolOutput",
        ),
        (
            "cases:\n- name: a\n  eventFile: nope.json\n  expect: {decision: allow}\n",
            "cases[0].eventFile: ",
        ),
    ];
    for (body, want) in cases {
        let got = load_err(body);
        assert!(got.starts_with(want), "{body}\n got: {got}\nwant: {want}");
    }
    let dir = tempfile::tempdir().unwrap();
    let p = write(
        dir.path(),
        "x_test.yaml",
        "apiVersion: agenthooks.io/v1\nkind: AgentHookTest\nhooks: [x]\ncases: []\n",
    );
    assert_eq!(
        load(&p, "agenthooks-system", Edition::Lite)
            .unwrap_err()
            .to_string(),
        format!(
            "{}: apiVersion: \"agenthooks.io/v1\" is not agenthooks.io/v1alpha1",
            p.display()
        )
    );
    let p = write(dir.path(), "k_test.yaml", "kind: AgentHook\n");
    assert_eq!(
        load(&p, "agenthooks-system", Edition::Lite)
            .unwrap_err()
            .to_string(),
        format!("{}: kind: \"AgentHook\" is not AgentHookTest", p.display())
    );
    // The hooks' own errors name their file, document and field.
    write(
        dir.path(),
        "bad/h.yaml",
        &HOOKS.replace(
            "event: pre_tool_use\n  priority: 10",
            "event: pre_tool\n  priority: 10",
        ),
    );
    let p = write(
        dir.path(),
        "h_test.yaml",
        &format!(
            "apiVersion: agenthooks.io/v1alpha1\nkind: AgentHookTest\nhooks: [bad]\ncases:\n- name: a\n  event: {WRITE}\n  expect: {{decision: allow}}\n"
        ),
    );
    let e = load(&p, "agenthooks-system", Edition::Lite)
        .unwrap_err()
        .to_string();
    assert!(
        e.starts_with(&format!(
            "{}: hooks: {}: document 2: spec.event: unknown variant `pre_tool`",
            p.display(),
            dir.path().join("bad/h.yaml").display()
        )),
        "{e}"
    );
}

#[test]
fn stubs_become_handler_answers_and_a_case_replaces_the_file_s_by_hook() {
    let dir = tempfile::tempdir().unwrap();
    let p = suite_file(
        dir.path(),
        &format!(
            "stubs:
- {{hook: tenant-acme/policy, decision: block, reason: nope}}
- {{hook: agenthooks-system/rewrite, decision: allow, additionalContext: ctx, updatedInput: {{path: /tmp/x}}}}
cases:
- name: file stubs
  event: {WRITE}
  expect: {{decision: block}}
- name: case stubs
  event: {WRITE}
  stubs:
  - {{hook: tenant-acme/policy, error: http_5xx}}
  - {{hook: agenthooks-system/rewrite, timeout: true}}
  expect: {{decision: block}}
"
        ),
    );
    let suite = load(&p, "agenthooks-system", Edition::Lite).unwrap();
    assert_eq!(suite.name, p.display().to_string());
    let file = &suite.cases[0].stubs;
    let policy = &file["tenant-acme/policy"];
    assert_eq!(
        (policy.outcome, policy.reason.as_deref()),
        (Outcome::Block, Some("nope"))
    );
    let rewrite = &file["agenthooks-system/rewrite"];
    assert_eq!(
        (
            rewrite.outcome,
            rewrite.additional_context.as_deref(),
            rewrite.updated_input.clone()
        ),
        (Outcome::Allow, Some("ctx"), Some(json!({"path": "/tmp/x"})))
    );
    let case = &suite.cases[1].stubs;
    let policy = &case["tenant-acme/policy"];
    assert_eq!(
        (policy.outcome, policy.error_kind, policy.reason.as_deref()),
        (
            Outcome::Error,
            Some(ErrorKind::Http5xx),
            Some("stubbed error (http_5xx)")
        )
    );
    let rewrite = &case["agenthooks-system/rewrite"];
    assert_eq!(
        (rewrite.outcome, rewrite.reason.as_deref()),
        (Outcome::Timeout, Some("no answer within 5000 ms"))
    );
}

fn engine(suite: &Suite) -> Engine {
    Engine::new(
        HttpCaller::new(vec![]),
        Edition::Lite,
        suite.seal_key.clone(),
    )
}

#[tokio::test]
async fn cases_run_through_the_chain_with_stubs_and_never_reach_the_network() {
    let dir = tempfile::tempdir().unwrap();
    let p = suite_file(
        dir.path(),
        &format!(
            "stubs:
- {{hook: tenant-acme/policy, decision: allow, updatedInput: {{path: /dropped}}}}
- {{hook: agenthooks-system/rewrite, decision: allow, updatedInput: {{path: /tmp/hosts}}, additionalContext: rewritten}}
cases:
- name: the master hook rewrites, the tenant's is dropped
  event: {WRITE}
  expect: {{decision: allow, updatedInput: {{path: /tmp/hosts}}, additionalContext: ^rewritten$, decidingHook: null}}
- name: the command hook runs for real
  event: {{event: pre_tool_use, tenant_id: acme, tool_name: exec, tool_input: {{cmd: rm x}}}}
  expect: {{decision: block, decidingHook: tenant-acme/no-rm, reason: ^no rm here$}}
- name: an unstubbed http hook is an error
  event: {WRITE}
  stubs: [{{hook: tenant-acme/policy, decision: ask}}]
  expect: {{decision: ask}}
- name: an ask with accept
  event: {{event: pre_tool_use, tenant_id: acme, tool_name: write_file, accept: [ask]}}
  stubs: [{{hook: tenant-acme/policy, decision: ask}}]
  expect: {{decision: ask, reason: x}}
- name: a non-blocking event is allowed
  event: {{event: post_tool_use, tenant_id: acme, tool_name: exec, tool_input: {{cmd: rm x}}}}
  expect: {{decision: allow, decidingHook: null, reason: null}}
"
        ),
    );
    let mut suite = load(&p, "agenthooks-system", Edition::Lite).unwrap();
    // The third case's own stub list replaces only policy: drop the file's rewrite stub
    // there, so the rewrite hook is reached with no stub.
    suite.cases[2].stubs.remove("agenthooks-system/rewrite");
    let engine = engine(&suite);
    let mut got = Vec::new();
    for case in &suite.cases {
        got.push(run_case(&engine, &suite, case, false).await);
    }
    assert_eq!(got[0].outcome, CaseOutcome::Pass, "{:?}", got[0].got);
    assert_eq!(got[0].got.hooks.len(), 2);
    assert!(got[0].got.hooks.iter().any(|h| h.mutation_denied));
    assert_eq!(got[1].outcome, CaseOutcome::Pass, "{:?}", got[1].got);
    assert_eq!(
        got[2].outcome,
        CaseOutcome::Error(
            "agenthooks-system/rewrite (http) reached with no stub: stub it (stubs[].hook, in the file or the case) or run with --allow-network".into()
        )
    );
    assert_eq!(
        got[3].outcome,
        CaseOutcome::Fail(vec![
            "reason: \"tenant-acme/policy asks for approval\" does not match /x/".into()
        ])
    );
    assert_eq!(got[4].outcome, CaseOutcome::Pass, "{:?}", got[4].got);
    // A non-blocking event's hook without `blocking: true` never changes the answer: as
    // dispatch runs it off the decision's path, a suite skips it (issue 16).
    assert!(got[4].got.hooks.is_empty(), "{:?}", got[4].got);
}

fn expectation(decision: Verdict) -> Expectation {
    Expectation {
        decision,
        deciding_hook: None,
        reason: None,
        updated_input: None,
        updated_tool_output: None,
        additional_context: None,
    }
}

#[test]
fn differences_name_each_field_that_differs() {
    let mut got = Decision::allow("e");
    got.decision = Verdict::Block;
    got.reason = Some("blocked by a/b".into());
    got.deciding_hook = Some("a/b".into());
    got.additional_context = Some("ctx".into());
    assert_eq!(
        differences(&expectation(Verdict::Block), &got, false),
        Vec::<String>::new()
    );
    let want = Expectation {
        decision: Verdict::Ask,
        deciding_hook: Some(Some("a/c".into())),
        reason: Some(Some(Regex::new("^asks").unwrap())),
        updated_input: Some(Some(json!({"cmd": "ls"}))),
        updated_tool_output: Some(Some(json!({"stdout": "[redacted]"}))),
        additional_context: Some(None),
    };
    assert_eq!(
        differences(&want, &got, true),
        vec![
            "decision: expected ask, got block (a hook asked, and the event has no accept: [ask], so /v1/dispatch answers block)",
            "decidingHook: expected a/c, got a/b",
            "reason: \"blocked by a/b\" does not match /^asks/",
            "additionalContext: expected none, got \"ctx\"",
            "updatedInput: expected {\"cmd\":\"ls\"}, got none",
            "updatedToolOutput: expected {\"stdout\":\"[redacted]\"}, got none",
        ]
    );
    let want = Expectation {
        deciding_hook: Some(None),
        reason: Some(None),
        updated_input: Some(None),
        additional_context: Some(Some(Regex::new("x").unwrap())),
        ..expectation(Verdict::Block)
    };
    got.additional_context = None;
    got.updated_input = Some(json!({"a": 1}));
    assert_eq!(
        differences(&want, &got, false),
        vec![
            "decidingHook: expected none, got a/b",
            "reason: expected none, got \"blocked by a/b\"",
            "additionalContext: expected a match of /x/, got none",
            "updatedInput: expected none, got {\"a\":1}",
        ]
    );
}

#[test]
fn test_files_are_found_by_name_in_directories_and_taken_as_given() {
    let dir = tempfile::tempdir().unwrap();
    for name in [
        "a_test.yaml",
        "b-test.yml",
        "sub/c_test.yml",
        "sub/deeper/d-test.yaml",
        "hooks.yaml",
        "test.yaml",
        "e_test.json",
        "latest.yaml",
    ] {
        write(dir.path(), name, "");
    }
    let found = test_files(&[dir.path().to_path_buf()]).unwrap();
    let names: Vec<String> = found
        .iter()
        .map(|p| p.strip_prefix(dir.path()).unwrap().display().to_string())
        .collect();
    assert_eq!(
        names,
        [
            "a_test.yaml",
            "b-test.yml",
            "sub/c_test.yml",
            "sub/deeper/d-test.yaml"
        ]
    );
    // A file is taken whatever its name.
    let given = dir.path().join("hooks.yaml");
    assert_eq!(test_files(std::slice::from_ref(&given)).unwrap(), [given]);
    std::fs::create_dir(dir.path().join("empty")).unwrap();
    let e = test_files(&[dir.path().join("empty")]).unwrap_err();
    assert!(matches!(e, SuiteError::NoTests { .. }), "{e}");
    let e = test_files(&[dir.path().join("missing")]).unwrap_err();
    assert!(matches!(e, SuiteError::Io { .. }), "{e}");
}

fn result(name: &str, expected: Verdict, got: Verdict, outcome: CaseOutcome) -> CaseResult {
    let mut d = Decision::allow("e");
    d.decision = got;
    CaseResult {
        name: name.into(),
        expected,
        got: d,
        outcome,
        elapsed: Duration::from_micros(1500),
    }
}

fn sample_results() -> Vec<FileResults> {
    vec![FileResults {
        path: "t/a_test.yaml".into(),
        name: "a & b".into(),
        cases: vec![
            result(
                "rm is blocked",
                Verdict::Block,
                Verdict::Block,
                CaseOutcome::Pass,
            ),
            result(
                "ask <me>",
                Verdict::Ask,
                Verdict::Block,
                CaseOutcome::Fail(vec![
                    "decision: expected ask, got block".into(),
                    "reason: \"x\" does not match /y/".into(),
                ]),
            ),
            result(
                "http",
                Verdict::Allow,
                Verdict::Allow,
                CaseOutcome::Error("a/b (http) reached with no stub".into()),
            ),
        ],
    }]
}

#[test]
fn the_table_pads_columns_and_lists_differences_under_their_case() {
    assert_eq!(
        report::table(&sample_results()),
        "\
FILE           CASE           EXPECTED  GOT    RESULT
t/a_test.yaml  rm is blocked  block     block  pass
t/a_test.yaml  ask <me>       ask       block  FAIL
    decision: expected ask, got block
    reason: \"x\" does not match /y/
t/a_test.yaml  http           allow     -      ERROR
    a/b (http) reached with no stub
3 cases in 1 file: 1 passed, 1 failed, 1 error
"
    );
}

#[test]
fn junit_has_a_testsuite_per_file_and_a_failure_with_the_differences() {
    assert_eq!(
        report::junit(&sample_results()),
        "\
<?xml version=\"1.0\" encoding=\"UTF-8\"?>
<testsuites name=\"agenthooks-dispatcher test\" tests=\"3\" failures=\"1\" errors=\"1\" time=\"0.004500\">
  <testsuite name=\"t/a_test.yaml\" tests=\"3\" failures=\"1\" errors=\"1\" skipped=\"0\" time=\"0.004500\">
    <testcase name=\"rm is blocked\" classname=\"a &amp; b\" time=\"0.001500\"/>
    <testcase name=\"ask &lt;me&gt;\" classname=\"a &amp; b\" time=\"0.001500\">
      <failure type=\"mismatch\" message=\"decision: expected ask, got block\">decision: expected ask, got block
reason: &quot;x&quot; does not match /y/</failure>
    </testcase>
    <testcase name=\"http\" classname=\"a &amp; b\" time=\"0.001500\">
      <error type=\"error\" message=\"a/b (http) reached with no stub\">a/b (http) reached with no stub</error>
    </testcase>
  </testsuite>
</testsuites>
"
    );
}

#[test]
fn xml_escaping_keeps_markup_out_and_every_character_in() {
    let s = "a<b>&\"c\" 'd'\n\te\r\u{1b}[0m\u{0}\u{FFFF}é✓";
    assert_eq!(
        report::escape(s, false),
        "a&lt;b&gt;&amp;&quot;c&quot; &apos;d&apos;\n\te\r\\u{1b}[0m\\u{0}\\u{ffff}é✓"
    );
    assert_eq!(
        report::escape(s, true),
        "a&lt;b&gt;&amp;&quot;c&quot; &apos;d&apos;&#10;&#9;e&#13;\\u{1b}[0m\\u{0}\\u{ffff}é✓"
    );
    // Nothing but entities and character references follows an ampersand.
    let escaped = report::escape("&&amp;<![CDATA[]]>", true);
    assert_eq!(escaped, "&amp;&amp;amp;&lt;![CDATA[]]&gt;");
}

/// `blocking: true` hooks on `post_tool_use` and `stop` decide a case as they decide
/// dispatch (they were answered allow, as non-blocking events, whatever they said), and a
/// stub's `updatedToolOutput` is checked against `expect.updatedToolOutput`.
#[tokio::test]
async fn blocking_output_and_stop_hooks_decide_cases() {
    let dir = tempfile::tempdir().unwrap();
    write(
        dir.path(),
        "hooks/blocking.yaml",
        "apiVersion: agenthooks.io/v1alpha1
kind: AgentHook
metadata: {name: redact, namespace: agenthooks-system}
spec:
  event: post_tool_use
  scope: global
  blocking: true
  matcher: ^Bash$
  handler: {type: http, http: {url: 'https://redact.invalid/hook'}}
---
apiVersion: agenthooks.io/v1alpha1
kind: AgentHook
metadata: {name: tests-first, namespace: agenthooks-system}
spec:
  event: stop
  scope: global
  blocking: true
  handler: {type: http, http: {url: 'https://stop.invalid/hook'}}
",
    );
    let p = write(
        dir.path(),
        "b_test.yaml",
        "apiVersion: agenthooks.io/v1alpha1
kind: AgentHookTest
hooks: [hooks]
cases:
- name: redacted
  event: {event: post_tool_use, tenant_id: acme, tool_name: Bash, tool_input: {command: env}, tool_output: {stdout: K=1}}
  stubs: [{hook: agenthooks-system/redact, decision: allow, updatedToolOutput: {stdout: '[r]'}}]
  expect: {decision: allow, updatedToolOutput: {stdout: '[r]'}}
- name: withheld
  event: {event: post_tool_use, tenant_id: acme, tool_name: Bash, tool_input: {command: env}, tool_output: {stdout: K=1}}
  stubs: [{hook: agenthooks-system/redact, decision: block, reason: secret}]
  expect: {decision: block, reason: ^secret$, decidingHook: agenthooks-system/redact}
- name: keep working
  event: {event: stop, tenant_id: acme, session_id: s1}
  stubs: [{hook: agenthooks-system/tests-first, decision: block, reason: run the tests}]
  expect: {decision: block, reason: ^run the tests$}
- name: a wrong expectation fails
  event: {event: stop, tenant_id: acme, session_id: s1}
  stubs: [{hook: agenthooks-system/tests-first, decision: block}]
  expect: {decision: allow}
",
    );
    let suite = load(&p, "agenthooks-system", Edition::Lite).unwrap();
    let engine = engine(&suite);
    let mut got = Vec::new();
    for case in &suite.cases {
        got.push(run_case(&engine, &suite, case, false).await);
    }
    for r in &got[..3] {
        assert_eq!(r.outcome, CaseOutcome::Pass, "{}: {:?}", r.name, r.got);
    }
    assert_eq!(
        got[3].outcome,
        CaseOutcome::Fail(vec!["decision: expected allow, got block".into()])
    );
}
