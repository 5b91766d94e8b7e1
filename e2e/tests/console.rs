//! The web console (issue 14) in a real browser: a standalone dispatcher with a few hooks,
//! then the browser tests of `e2e/console/` (`node --test`, playwright-core driving Debian's
//! chromium headless, axe for accessibility; e2e/console/README.md) against its `/ui/`.
//! Screenshots of every page go to `target/console-screenshots/`.
//!
//! Needs `bash scripts/install-deps.sh browser` (chromium from apt, the npm packages pinned
//! into `~/.cache/agenthooks/tools/browser-<version>/`): without them the test fails, saying
//! so. `AGENTHOOKS_CONSOLE_TESTS=sign-in,history` runs only those files of `e2e/console/`.

use std::time::Duration;

use agenthooks_e2e::console::{run_node, test_files, workspace};
use agenthooks_e2e::runtimes::StandaloneDispatcher;
use agenthooks_e2e::stack::{log_dir, tails};
use serde_json::{Value, json};

/// The master namespace of a default dispatcher.
const NS: &str = "agenthooks-system";
/// What the blocking hook writes to stderr before `exit 2`.
const BLOCK_REASON: &str = "refused by the console test's block hook";
/// The command the blocking hook refuses (a shell call whose command holds it).
const BLOCK_COMMAND: &str = "console-block";
/// The command the rewriting hook rewrites, and what into.
const REWRITE_COMMAND: &str = "console-rewrite";
const REWRITTEN_COMMAND: &str = "echo rewritten-by-the-console-test";
/// How long the browser tests may take in all.
const TIMEOUT: Duration = Duration::from_secs(600);

/// An AgentHook of the master namespace, global, on pre_tool_use shell calls, running
/// `command`, only for commands holding `holds` if given. The filter reads `tool_input`,
/// not `tool.command`: a dry run (`POST /v1/test`, the console's Test tab) evaluates
/// `ifExpr` without the tool facts, so `tool.command` is "" there (dry_run.rs).
fn command_hook(name: &str, priority: i64, holds: Option<&str>, command: &str) -> Value {
    let mut spec = json!({
        "event": "pre_tool_use",
        "scope": "global",
        "priority": priority,
        "toolKinds": ["shell"],
        "timeoutMs": 5000,
        "handler": {"type": "command", "command": {"command": command}},
    });
    if let Some(h) = holds {
        spec["ifExpr"] = json!(format!("tool_input.command.contains({})", json!(h)));
    }
    json!({"apiVersion": "agenthooks.io/v1alpha1", "kind": "AgentHook",
           "metadata": {"name": name, "namespace": NS}, "spec": spec})
}

/// The hooks the console shows: three command hooks on `pre_tool_use` (one blocks, one
/// rewrites, one allows every shell call and so writes the history) and an http hook on
/// `post_tool_use` (never called: it is there for the list's filters).
fn console_hooks() -> Vec<Value> {
    vec![
        command_hook(
            "console-block",
            100,
            Some(BLOCK_COMMAND),
            &format!("cat >/dev/null; echo \"{BLOCK_REASON}\" >&2; exit 2"),
        ),
        command_hook(
            "console-rewrite",
            50,
            Some(REWRITE_COMMAND),
            &format!(
                "cat >/dev/null; printf '%s' '{}'",
                json!({"updatedInput": {"command": REWRITTEN_COMMAND}})
            ),
        ),
        command_hook("console-history", 1, None, "cat >/dev/null; exit 0"),
        json!({"apiVersion": "agenthooks.io/v1alpha1", "kind": "AgentHook",
               "metadata": {"name": "console-notify", "namespace": NS},
               "spec": {"event": "post_tool_use", "scope": "global", "priority": 10,
                        "timeoutMs": 2000,
                        "handler": {"type": "http", "http": {"url": "http://127.0.0.1:9/notify"}}}}),
    ]
}

#[test]
fn console_in_a_real_browser() {
    agenthooks_e2e::console::browser_tools();
    let logs = log_dir("console");
    let d = StandaloneDispatcher::start("console", &console_hooks(), &logs);
    let shots = workspace().join("target/console-screenshots");
    // cluster.test.mjs is tests/console_cluster.rs's.
    let files = test_files(|name| name != "cluster");
    let hook = |name: &str| format!("{NS}/{name}");
    let env: Vec<(&str, String)> = vec![
        ("CONSOLE_URL", d.url.clone()),
        ("CONSOLE_TOKEN", d.admin_token().to_owned()),
        ("CONSOLE_CALLER_TOKEN", d.caller_token().to_owned()),
        ("CONSOLE_NAMESPACE", NS.to_owned()),
        ("CONSOLE_HOOK_BLOCK", hook("console-block")),
        ("CONSOLE_BLOCK_COMMAND", BLOCK_COMMAND.to_owned()),
        ("CONSOLE_BLOCK_REASON", BLOCK_REASON.to_owned()),
        ("CONSOLE_HOOK_REWRITE", hook("console-rewrite")),
        ("CONSOLE_REWRITE_COMMAND", REWRITE_COMMAND.to_owned()),
        ("CONSOLE_REWRITTEN_COMMAND", REWRITTEN_COMMAND.to_owned()),
        ("CONSOLE_HOOK_HISTORY", hook("console-history")),
    ];
    let run = run_node(&files, &env, &logs, &shots, TIMEOUT);
    println!("{}", run.output);
    println!(
        "[console] browser tests: {:?} in {:.1}s, screenshots in {}",
        run.status,
        run.took.as_secs_f64(),
        shots.display()
    );
    assert!(
        run.status.is_some_and(|s| s.success()),
        "the browser tests failed ({:?}; output above, logs in {})\n{}",
        run.status,
        logs.display(),
        tails(&[&d.proc])
    );
}
