//! The web console (issue 14) in a real browser: a standalone dispatcher with a few hooks,
//! then the browser tests of `e2e/console/` (`node --test`, playwright-core driving Debian's
//! chromium headless, axe for accessibility; e2e/console/README.md) against its `/ui/`.
//! Screenshots of every page go to `target/console-screenshots/`.
//!
//! Needs `bash scripts/install-deps.sh browser` (chromium from apt, the npm packages pinned
//! into `~/.cache/agenthooks/tools/browser-<version>/`): without them the test fails, saying
//! so. `AGENTHOOKS_CONSOLE_TESTS=sign-in,history` runs only those files of `e2e/console/`.

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

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

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .canonicalize()
        .expect("workspace root")
}

/// The version `scripts/install-deps.sh browser` installs (`PLAYWRIGHT_VERSION=`), which
/// names its directory.
fn playwright_version() -> String {
    let script = std::fs::read_to_string(workspace().join("scripts/install-deps.sh")).unwrap();
    script
        .lines()
        .find_map(|l| l.strip_prefix("PLAYWRIGHT_VERSION="))
        .expect("scripts/install-deps.sh pins PLAYWRIGHT_VERSION")
        .trim()
        .to_owned()
}

/// Chromium and the npm packages' prefix, or a failure naming the install command.
fn browser_tools() -> (PathBuf, PathBuf) {
    let install = "run `bash scripts/install-deps.sh browser`";
    let chromium = std::env::var_os("CHROMIUM")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/usr/bin/chromium"));
    assert!(
        chromium.exists(),
        "no chromium at {}: {install}",
        chromium.display()
    );
    let root = std::env::var_os("AGENTHOOKS_TOOLS_DIR")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(std::env::var_os("HOME").expect("HOME")).join(".cache/agenthooks/tools")
        });
    let tools = root.join(format!("browser-{}", playwright_version()));
    for package in ["playwright-core", "@axe-core/playwright"] {
        let manifest = tools
            .join("node_modules")
            .join(package)
            .join("package.json");
        assert!(
            manifest.exists(),
            "{package} is not installed in {}: {install}",
            tools.display()
        );
    }
    let node = Command::new("node").arg("--version").output();
    assert!(
        node.is_ok_and(|o| o.status.success()),
        "node is not on PATH: the browser tests need Node.js >= 20"
    );
    (chromium, tools)
}

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

/// The browser test files to run: every `e2e/console/*.test.mjs`, or those named by
/// `AGENTHOOKS_CONSOLE_TESTS` (comma-separated, without `.test.mjs`).
fn test_files() -> Vec<PathBuf> {
    let only: Option<Vec<String>> = std::env::var("AGENTHOOKS_CONSOLE_TESTS")
        .ok()
        .filter(|v| !v.is_empty())
        .map(|v| {
            v.split(',')
                .map(|s| format!("{}.test.mjs", s.trim()))
                .collect()
        });
    let mut files: Vec<PathBuf> = std::fs::read_dir(workspace().join("e2e/console"))
        .expect("e2e/console")
        .map(|e| e.unwrap().path())
        .filter(|p| {
            let name = p.file_name().unwrap().to_string_lossy().into_owned();
            name.ends_with(".test.mjs") && only.as_ref().is_none_or(|o| o.contains(&name))
        })
        .collect();
    files.sort();
    assert!(!files.is_empty(), "no browser test files to run");
    files
}

#[test]
fn console_in_a_real_browser() {
    let (chromium, tools) = browser_tools();
    let logs = log_dir("console");
    let d = StandaloneDispatcher::start("console", &console_hooks(), &logs);
    let shots = workspace().join("target/console-screenshots");
    let _ = std::fs::remove_dir_all(&shots);
    std::fs::create_dir_all(&shots).unwrap();

    let hook = |name: &str| format!("{NS}/{name}");
    let (out, err) = (logs.join("node.stdout"), logs.join("node.stderr"));
    let started = Instant::now();
    let mut child = Command::new("node")
        .args([
            "--test",
            "--test-concurrency=1",
            "--test-reporter=spec",
            "--test-timeout=120000",
        ])
        .args(test_files())
        .current_dir(workspace())
        .env("CONSOLE_URL", &d.url)
        .env("CONSOLE_TOKEN", d.admin_token())
        .env("CONSOLE_CALLER_TOKEN", d.caller_token())
        .env("SCREENSHOT_DIR", &shots)
        .env("CHROMIUM", &chromium)
        .env("BROWSER_TOOLS_DIR", &tools)
        .env("CONSOLE_NAMESPACE", NS)
        .env("CONSOLE_HOOK_BLOCK", hook("console-block"))
        .env("CONSOLE_BLOCK_COMMAND", BLOCK_COMMAND)
        .env("CONSOLE_BLOCK_REASON", BLOCK_REASON)
        .env("CONSOLE_HOOK_REWRITE", hook("console-rewrite"))
        .env("CONSOLE_REWRITE_COMMAND", REWRITE_COMMAND)
        .env("CONSOLE_REWRITTEN_COMMAND", REWRITTEN_COMMAND)
        .env("CONSOLE_HOOK_HISTORY", hook("console-history"))
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(&out).unwrap())
        .stderr(std::fs::File::create(&err).unwrap())
        .process_group(0)
        .spawn()
        .expect("start node --test");
    let status = loop {
        if let Some(s) = child.try_wait().expect("wait for node") {
            break Some(s);
        }
        if started.elapsed() > TIMEOUT {
            break None;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    // Whatever is left of its group (test files, their browsers) goes with it.
    // SAFETY: a plain kill(2) on the process group this test created.
    unsafe { libc::kill(-(child.id() as i32), libc::SIGKILL) };
    let _ = child.wait();
    let stdout = std::fs::read_to_string(&out).unwrap_or_default();
    let stderr = std::fs::read_to_string(&err).unwrap_or_default();
    println!("{stdout}\n{stderr}");
    println!(
        "[console] browser tests: {:?} in {:.1}s, screenshots in {}",
        status,
        started.elapsed().as_secs_f64(),
        shots.display()
    );
    assert!(
        status.is_some_and(|s| s.success()),
        "the browser tests failed ({status:?}; output above, logs in {})\n{}",
        logs.display(),
        tails(&[&d.proc])
    );
}
