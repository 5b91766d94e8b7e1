//! The console's browser tests (`e2e/console/*.test.mjs`, issue 14) run from Rust: where
//! chromium and the npm packages are, which test files to run, and `node --test` with its
//! inputs, killed with its whole process group when it is done or out of time. Used by
//! `tests/console.rs` (a standalone dispatcher) and `tests/console_cluster.rs` (a cluster).

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

/// The repository's root.
pub fn workspace() -> PathBuf {
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
pub fn browser_tools() -> (PathBuf, PathBuf) {
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

/// The files of `e2e/console/` named `<name>.test.mjs` for which `pick(name)` holds, and of
/// those the ones `AGENTHOOKS_CONSOLE_TESTS` names (comma-separated names, when set).
pub fn test_files(pick: impl Fn(&str) -> bool) -> Vec<PathBuf> {
    let only: Option<Vec<String>> = std::env::var("AGENTHOOKS_CONSOLE_TESTS")
        .ok()
        .filter(|v| !v.is_empty())
        .map(|v| v.split(',').map(|s| s.trim().to_owned()).collect());
    let mut files: Vec<PathBuf> = std::fs::read_dir(workspace().join("e2e/console"))
        .expect("e2e/console")
        .map(|e| e.unwrap().path())
        .filter(|p| {
            let file = p.file_name().unwrap().to_string_lossy().into_owned();
            let Some(name) = file.strip_suffix(".test.mjs") else {
                return false;
            };
            pick(name) && only.as_ref().is_none_or(|o| o.iter().any(|n| n == name))
        })
        .collect();
    files.sort();
    assert!(!files.is_empty(), "no browser test files to run");
    files
}

/// What a run of the browser tests gave.
pub struct NodeRun {
    /// Its exit status; `None` when it ran out of time (then it was killed).
    pub status: Option<ExitStatus>,
    /// Its standard output and error.
    pub output: String,
    pub took: Duration,
}

/// Runs `node --test` on `files` (one at a time, spec reporter) with `env` and the tools of
/// [`browser_tools`], its output into `logs/node.stdout|stderr`, screenshots into `shots`
/// (made empty first). Whatever is left of its process group (test files, their browsers)
/// is killed when it ends or after `timeout`.
pub fn run_node(
    files: &[PathBuf],
    env: &[(&str, String)],
    logs: &Path,
    shots: &Path,
    timeout: Duration,
) -> NodeRun {
    let (chromium, tools) = browser_tools();
    let _ = std::fs::remove_dir_all(shots);
    std::fs::create_dir_all(shots).unwrap();
    let (out, err) = (logs.join("node.stdout"), logs.join("node.stderr"));
    let started = Instant::now();
    let mut child = Command::new("node")
        .args([
            "--test",
            "--test-concurrency=1",
            "--test-reporter=spec",
            "--test-timeout=120000",
        ])
        .args(files)
        .current_dir(workspace())
        .envs(env.iter().map(|(k, v)| (k, v)))
        .env("SCREENSHOT_DIR", shots)
        .env("CHROMIUM", &chromium)
        .env("BROWSER_TOOLS_DIR", &tools)
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
        if started.elapsed() > timeout {
            break None;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    // SAFETY: a plain kill(2) on the process group this function created.
    unsafe { libc::kill(-(child.id() as i32), libc::SIGKILL) };
    let _ = child.wait();
    let stdout = std::fs::read_to_string(&out).unwrap_or_default();
    let stderr = std::fs::read_to_string(&err).unwrap_or_default();
    NodeRun {
        status,
        output: format!("{stdout}\n{stderr}"),
        took: started.elapsed(),
    }
}

/// [`run_node`], its output printed, and a failure unless it passed: the panic names the
/// logs and ends with the tails of `procs` (the dispatchers and operators under test).
pub fn run_and_assert(
    label: &str,
    files: &[PathBuf],
    env: &[(&str, String)],
    logs: &Path,
    shots: &Path,
    timeout: Duration,
    procs: &[&crate::procs::Proc],
) {
    let run = run_node(files, env, logs, shots, timeout);
    println!("{}", run.output);
    println!(
        "[{label}] browser tests: {:?} in {:.1}s, screenshots in {}",
        run.status,
        run.took.as_secs_f64(),
        shots.display()
    );
    assert!(
        run.status.is_some_and(|s| s.success()),
        "the browser tests failed ({:?}; output above, logs in {})\n{}",
        run.status,
        logs.display(),
        crate::stack::tails(procs)
    );
}
