//! The web console (issue 14) in a real browser: a standalone dispatcher with a few hooks,
//! then the browser tests of `e2e/console/` (`node --test`, playwright-core driving Debian's
//! chromium headless, axe for accessibility; e2e/console/README.md) against its `/ui/`.
//! Screenshots of every page go to `target/console-screenshots/`.
//!
//! Needs `bash scripts/install-deps.sh browser` (chromium from apt, the npm packages pinned
//! into `~/.cache/agenthooks/tools/browser-<version>/`): without them the test fails, saying
//! so. `AGENTHOOKS_CONSOLE_TESTS=sign-in,history` runs only those files of `e2e/console/`.

use std::time::Duration;

use agenthooks_e2e::console::{run_and_assert, test_files, workspace};
use agenthooks_e2e::runtimes::{StandaloneDispatcher, shell_hook};
use agenthooks_e2e::stack::log_dir;
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

/// `ifExpr` of a hook for shell calls whose command holds `text`: it reads the tool facts
/// (`tool.command`), as the dispatch path does and the dry run (the Test tab) must too.
fn holding(text: &str) -> String {
    format!("tool.command.contains({})", json!(text))
}

/// The hooks the console shows: three command hooks on `pre_tool_use` (one blocks, one
/// rewrites, one allows every shell call and so writes the history) and an http hook on
/// `post_tool_use` (never called: it is there for the list's filters).
fn console_hooks() -> Vec<Value> {
    vec![
        shell_hook(
            "console-block",
            100,
            Some(&holding(BLOCK_COMMAND)),
            &format!("cat >/dev/null; echo \"{BLOCK_REASON}\" >&2; exit 2"),
        ),
        shell_hook(
            "console-rewrite",
            50,
            Some(&holding(REWRITE_COMMAND)),
            &format!(
                "cat >/dev/null; printf '%s' '{}'",
                json!({"updatedInput": {"command": REWRITTEN_COMMAND}})
            ),
        ),
        shell_hook("console-history", 1, None, "cat >/dev/null; exit 0"),
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
    run_and_assert("console", &files, &env, &logs, &shots, TIMEOUT, &[&d.proc]);
}
