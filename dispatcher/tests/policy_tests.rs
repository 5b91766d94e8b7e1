//! `agenthooks-dispatcher test` as a process (issue 16 point 4; docs/policy-tests.md):
//! the shipped sample suite passes, a suite with a failing case exits 1 and its JUnit
//! XML names the case and the difference, a cluster's export loads as hooks under test,
//! and bad input exits 2 naming the file and the field, before any case runs.
//! `make test` runs this file with every other (`cargo test --workspace`), so the
//! sample suite is held to what it says.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// `agenthooks-dispatcher test ARGS` in `dir`.
fn run_test(dir: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_agenthooks-dispatcher"))
        .current_dir(dir)
        .arg("test")
        .args(args)
        .env_remove("AGENTHOOKS_EDITION")
        .env_remove("AGENTHOOKS_PROVIDERS_FILE")
        .env_remove("RUST_LOG")
        .output()
        .expect("the dispatcher binary runs")
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

#[test]
fn the_sample_suite_passes() {
    let out = run_test(&repo(), &["config/samples/tests"]);
    let stdout = text(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{stdout}\n{}",
        text(&out.stderr)
    );
    assert!(
        stdout.ends_with("11 cases in 1 file: 11 passed, 0 failed, 0 errors\n"),
        "{stdout}"
    );
    assert!(
        stdout
            .lines()
            .skip(1)
            .take(11)
            .all(|l| l.starts_with("config/samples/tests/samples_test.yaml")
                && l.ends_with("  pass")),
        "{stdout}"
    );
}

/// The master namespace's rewrite hook (an http hook, stubbed) and the samples.
const REWRITE_HOOK: &str = "apiVersion: agenthooks.io/v1alpha1
kind: AgentHook
metadata: {name: pin-registry, namespace: agenthooks-system}
spec:
  event: pre_tool_use
  scope: global
  matcher: ^exec$
  ifExpr: tool_input.cmd.startsWith('npm install')
  handler: {type: http, http: {url: 'https://rewriter.invalid/hook'}}
";

fn failing_suite(dir: &Path) -> PathBuf {
    let samples = repo().join("config/samples");
    std::fs::create_dir_all(dir.join("hooks")).unwrap();
    std::fs::write(dir.join("hooks/rewrite.yaml"), REWRITE_HOOK).unwrap();
    let suite = format!(
        "apiVersion: agenthooks.io/v1alpha1
kind: AgentHookTest
metadata: {{name: ci}}
hooks: [hooks, {samples}]
stubs:
  - hook: agenthooks-system/pin-registry
    decision: allow
    updatedInput: {{cmd: npm install --registry https://npm.internal left-pad}}
cases:
  - name: npm install is pinned to the internal registry
    event: {{event: pre_tool_use, tenant_id: acme, tool_name: exec, tool_input: {{cmd: npm install left-pad}}}}
    expect:
      decision: allow
      updatedInput: {{cmd: npm install --registry https://npm.internal left-pad}}
  - name: rm -rf <expected to be allowed>
    eventFile: {samples}/events/rm-rf.json
    expect: {{decision: allow}}
",
        samples = samples.display()
    );
    let p = dir.join("ci_test.yaml");
    std::fs::write(&p, suite).unwrap();
    p
}

#[test]
fn a_failing_case_exits_1_and_the_junit_report_names_it_with_the_difference() {
    let dir = tempfile::tempdir().unwrap();
    failing_suite(dir.path());
    let out = run_test(dir.path(), &["ci_test.yaml", "--junit", "report.xml"]);
    let stdout = text(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(1),
        "{stdout}\n{}",
        text(&out.stderr)
    );
    assert_eq!(
        stdout,
        "\
FILE          CASE                                            EXPECTED  GOT    RESULT
ci_test.yaml  npm install is pinned to the internal registry  allow     allow  pass
ci_test.yaml  rm -rf <expected to be allowed>                 allow     block  FAIL
    decision: expected allow, got block
2 cases in 1 file: 1 passed, 1 failed, 0 errors
"
    );
    let xml = std::fs::read_to_string(dir.path().join("report.xml")).unwrap();
    assert!(
        xml.contains("<testsuite name=\"ci_test.yaml\" tests=\"2\" failures=\"1\" errors=\"0\""),
        "{xml}"
    );
    assert!(
        xml.contains(
            "<testcase name=\"npm install is pinned to the internal registry\" classname=\"ci\""
        ),
        "{xml}"
    );
    assert!(
        xml.contains("<testcase name=\"rm -rf &lt;expected to be allowed&gt;\" classname=\"ci\""),
        "{xml}"
    );
    assert!(
        xml.contains("<failure type=\"mismatch\" message=\"decision: expected allow, got block\">decision: expected allow, got block</failure>"),
        "{xml}"
    );
    assert_eq!(xml.matches("<failure").count(), 1, "{xml}");
}

#[test]
fn a_cluster_export_is_tested_like_the_files_it_came_from() {
    let dir = tempfile::tempdir().unwrap();
    // What `kubectl get agenthooks -A -o yaml` prints for the rm -rf sample, abridged.
    let hook =
        std::fs::read_to_string(repo().join("config/samples/block-dangerous-exec.yaml")).unwrap();
    let spec_at = hook.find("spec:\n").unwrap();
    let spec: String = hook[spec_at..]
        .lines()
        .map(|l| format!("    {l}\n"))
        .collect();
    let export = format!(
        "apiVersion: v1
kind: List
metadata: {{resourceVersion: \"\"}}
items:
  - apiVersion: agenthooks.io/v1alpha1
    kind: AgentHook
    metadata:
      name: block-rm-rf
      namespace: tenant-acme
      uid: 4f1c2a8e-0000-4000-8000-000000000001
      generation: 3
      creationTimestamp: \"2025-06-01T10:00:00Z\"
{spec}    status:
      observedGeneration: 3
      conditions: [{{type: Ready, status: \"True\", reason: Served}}]
"
    );
    std::fs::write(dir.path().join("export.yaml"), export).unwrap();
    std::fs::write(
        dir.path().join("export_test.yaml"),
        format!(
            "apiVersion: agenthooks.io/v1alpha1
kind: AgentHookTest
hooks: [export.yaml, {ns}]
cases:
  - name: the served hook blocks rm -rf
    event: {{event: pre_tool_use, tenant_id: acme, tool_name: Bash, tool_input: {{command: sudo rm -fr /srv}}}}
    expect: {{decision: block, decidingHook: tenant-acme/block-rm-rf}}
",
            ns = repo().join("config/samples/namespaces.yaml").display()
        ),
    )
    .unwrap();
    let out = run_test(dir.path(), &["."]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}\n{}",
        text(&out.stdout),
        text(&out.stderr)
    );
}

#[test]
fn bad_input_exits_2_naming_the_file_and_the_field_and_runs_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let good = failing_suite(dir.path());
    std::fs::write(
        dir.path().join("typo_test.yaml"),
        std::fs::read_to_string(&good).unwrap().replace(
            "    expect: {decision: allow}",
            "    expected: {decision: allow}",
        ),
    )
    .unwrap();
    std::fs::write(
        dir.path().join("stub_test.yaml"),
        std::fs::read_to_string(&good).unwrap().replace(
            "hook: agenthooks-system/pin-registry",
            "hook: agenthooks-system/pin",
        ),
    )
    .unwrap();
    let out = run_test(dir.path(), &["."]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stdout));
    assert_eq!(text(&out.stdout), "", "no case ran");
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains(
            "error: ./stub_test.yaml: stubs[0].hook: \"agenthooks-system/pin\" is not among the hooks under test"
        ),
        "{stderr}"
    );
    assert!(
        stderr.contains(
            "error: ./typo_test.yaml: cases[1].expected: unknown field `expected`, expected one of `name`, `event`, `eventFile`, `stubs`, `expect`"
        ),
        "{stderr}"
    );
    // A directory without test files, and a missing path.
    std::fs::create_dir(dir.path().join("empty")).unwrap();
    let out = run_test(dir.path(), &["empty"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).starts_with("error: empty: no test files in it or below"),
        "{}",
        text(&out.stderr)
    );
    let out = run_test(dir.path(), &["missing_test.yaml"]);
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(
        text(&out.stderr),
        "error: missing_test.yaml: No such file or directory (os error 2)\n"
    );
}
