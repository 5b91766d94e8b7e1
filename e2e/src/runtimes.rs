//! Drives the real agent runtimes — Claude Code, Codex CLI, Gemini CLI — headless and
//! offline against a [`StandIn`] model server, with their hooks wired to a dispatcher (or
//! to any command), in a throw-away HOME and project directory.
//!
//! The versions are pinned in `scripts/runtimes.pins` (read here at compile time);
//! `scripts/install-deps.sh runtimes` installs each with npm into
//! `~/.cache/agenthooks/runtimes/<name>-<version>/` (`$AGENTHOOKS_RUNTIMES_DIR` moves the
//! root). A missing runtime fails the test that needs it, naming the install command:
//! the tier never skips silently.
//!
//! ```no_run
//! use agenthooks_e2e::runtimes::{HookWiring, Runtime, RuntimeRun};
//! use agenthooks_e2e::standin::{Script, StandIn};
//!
//! let rt = Runtime::ClaudeCode;
//! let standin = StandIn::start(Script::new(vec![rt.shell_call("echo hi")]));
//! let run = RuntimeRun::new(rt, &standin, HookWiring::Command("cat > /dev/null".into()))
//!     .allow(&["echo"]);
//! let out = run.run("run the command");
//! assert_eq!(out.exit_code, Some(0));
//! ```
//!
//! What each runtime is given (docs/runtimes.md has the why):
//! * Claude Code: `$HOME/.claude/settings.json` with the hooks on `PreToolUse`,
//!   `SubagentStart` and `SubagentStop` and `permissions.allow` of `Bash(<prefix>:*)`;
//!   `claude -p PROMPT --output-format stream-json --verbose`, `ANTHROPIC_BASE_URL` = the
//!   stand-in.
//! * Codex CLI: `$CODEX_HOME/config.toml` naming the stand-in as a Responses provider,
//!   `$CODEX_HOME/hooks.json` with the same three events, then **the trust step**: `codex
//!   app-server`'s `hooks/list` gives each hook's key and hash, written as `[hooks.state."<key>"]
//!   trusted_hash` into `config.toml` (an untrusted hook is skipped without a trace);
//!   `codex exec --json --skip-git-repo-check -s danger-full-access PROMPT </dev/null` (no
//!   sandbox, so only the hook stands between a command and the file system).
//! * Gemini CLI: `$HOME/.gemini/settings.json` with the hook on `BeforeTool` and
//!   `tools.allowed` of `run_shell_command(<prefix>)`; `gemini -p PROMPT --output-format
//!   stream-json`, `GOOGLE_GEMINI_BASE_URL` = the stand-in.

use std::io::{BufRead, BufReader, Write};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::procs::bin;
use crate::standin::{StandIn, Turn};

/// `scripts/runtimes.pins`: the one place the versions are pinned.
const PINS: &str = include_str!("../../scripts/runtimes.pins");

/// Env var moving the root of the installed runtimes (default
/// `~/.cache/agenthooks/runtimes`).
pub const RUNTIMES_DIR_ENV: &str = "AGENTHOOKS_RUNTIMES_DIR";

/// Env var that keeps each run's throw-away directory (its path is printed) for a look
/// after the test.
pub const KEEP_ENV: &str = "AGENTHOOKS_RUNTIMES_KEEP";

/// How long a run may take unless [`RuntimeRun::timeout`] says otherwise.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(120);

/// The Codex hook timeout in seconds: above the shim's own deadline (5 s by default), or
/// Codex kills the shim first and goes on as if no hook had answered.
const CODEX_HOOK_TIMEOUT_S: u64 = 30;

/// One pinned runtime (a line of `scripts/runtimes.pins`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Pin {
    /// Short name, e.g. `claude-code`.
    pub name: String,
    /// The npm version, e.g. `2.1.332`.
    pub version: String,
    /// The npm package, e.g. `@anthropic-ai/claude-code`.
    pub package: String,
    /// The binary under `node_modules/.bin/`.
    pub bin: String,
}

/// Every pin of `scripts/runtimes.pins`, in file order.
pub fn pins() -> Vec<Pin> {
    PINS.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            assert_eq!(f.len(), 4, "scripts/runtimes.pins: bad line {l:?}");
            Pin {
                name: f[0].into(),
                version: f[1].into(),
                package: f[2].into(),
                bin: f[3].into(),
            }
        })
        .collect()
}

/// An agent runtime the tier drives.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Runtime {
    /// Claude Code (`@anthropic-ai/claude-code`).
    ClaudeCode,
    /// Codex CLI (`@openai/codex`).
    Codex,
    /// Gemini CLI (`@google/gemini-cli`).
    GeminiCli,
}

impl Runtime {
    /// The three runtimes.
    pub const ALL: [Runtime; 3] = [Runtime::ClaudeCode, Runtime::Codex, Runtime::GeminiCli];

    /// Its name in `scripts/runtimes.pins` and its dispatcher dialect
    /// (`/v1/hooks/<dialect>`, `hook --dialect <dialect>`).
    pub fn dialect(self) -> &'static str {
        match self {
            Runtime::ClaudeCode => "claude-code",
            Runtime::Codex => "codex",
            Runtime::GeminiCli => "gemini-cli",
        }
    }

    /// Its pin.
    pub fn pin(self) -> Pin {
        pins()
            .into_iter()
            .find(|p| p.name == self.dialect())
            .unwrap_or_else(|| panic!("scripts/runtimes.pins has no {}", self.dialect()))
    }

    /// Where its pinned version is installed.
    pub fn prefix(self) -> PathBuf {
        let pin = self.pin();
        let root = std::env::var_os(RUNTIMES_DIR_ENV)
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
            .unwrap_or_else(|| {
                PathBuf::from(std::env::var_os("HOME").expect("HOME"))
                    .join(".cache/agenthooks/runtimes")
            });
        root.join(format!("{}-{}", pin.name, pin.version))
    }

    /// Its binary; panics naming the install command when it is not installed.
    pub fn binary(self) -> PathBuf {
        let path = self.prefix().join("node_modules/.bin").join(self.pin().bin);
        assert!(
            path.exists(),
            "{} {} is not installed at {}: run `bash scripts/install-deps.sh runtimes`",
            self.pin().package,
            self.pin().version,
            path.display()
        );
        path
    }

    /// The model-facing name of its shell tool.
    pub fn shell_tool(self) -> &'static str {
        match self {
            Runtime::ClaudeCode => "Bash",
            Runtime::Codex => "exec_command",
            Runtime::GeminiCli => "run_shell_command",
        }
    }

    /// The `tool_name` its hooks report for a shell call (Codex reports every shell as
    /// `Bash`).
    pub fn hook_shell_tool(self) -> &'static str {
        match self {
            Runtime::ClaudeCode | Runtime::Codex => "Bash",
            Runtime::GeminiCli => "run_shell_command",
        }
    }

    /// A model turn calling its shell tool with `command`.
    pub fn shell_call(self, command: &str) -> Turn {
        match self {
            Runtime::ClaudeCode => Turn::tool(
                "Bash",
                json!({"command": command, "description": "Run the scripted command"}),
            ),
            Runtime::Codex => Turn::tool("exec_command", json!({"cmd": command})),
            Runtime::GeminiCli => Turn::tool(
                "run_shell_command",
                json!({"command": command, "description": "Run the scripted command"}),
            ),
        }
    }
}

/// How the runtime's hooks reach a decision.
#[derive(Clone, Debug)]
pub enum HookWiring {
    /// Claude Code only: an `http` hook POSTing to `<base_url>/v1/hooks/claude-code` with
    /// `Authorization: Bearer $AGENTHOOKS_TOKEN` (the token in the runtime's environment,
    /// interpolated through `allowedEnvVars`), `onFailure: "block"`, timeout 10 s.
    Http {
        /// The dispatcher, e.g. `http://127.0.0.1:8080`.
        base_url: String,
        /// The caller token.
        token: String,
        /// The route's query, e.g. `?ask=defer` (empty: none).
        query: String,
    },
    /// A command hook running the shim: `agenthooks-dispatcher hook --dialect <d> --url
    /// <base_url> --token-file <token_file>`. No `onFailure`: the shim's own exit 2 must
    /// block.
    Shim {
        /// The dispatcher, e.g. `http://127.0.0.1:8080`.
        base_url: String,
        /// A file holding the caller token.
        token_file: PathBuf,
    },
    /// A command hook running this shell command (e.g. one that records its stdin).
    Command(String),
    /// No hooks at all (the baseline of the bench).
    None,
}

/// One run of a runtime, prepared: its throw-away HOME and project directory exist, so a
/// test can put files into [`RuntimeRun::project`] before [`RuntimeRun::run`].
pub struct RuntimeRun {
    /// The runtime.
    pub runtime: Runtime,
    /// Throw-away root holding `home/` and `proj/` (removed on drop unless
    /// [`KEEP_ENV`] is set).
    pub root: PathBuf,
    /// `$HOME` of the run.
    pub home: PathBuf,
    /// The working directory of the run (a git repository).
    pub project: PathBuf,
    _dir: Option<tempfile::TempDir>,
    standin_url: String,
    hook: HookWiring,
    allow: Vec<String>,
    trust: bool,
    timeout: Duration,
    codex_config: String,
}

/// What a run did.
#[derive(Debug)]
pub struct Outcome {
    /// The runtime.
    pub runtime: Runtime,
    /// Exit code (`None`: killed, e.g. on timeout).
    pub exit_code: Option<i32>,
    /// Whether it was killed at the timeout.
    pub timed_out: bool,
    /// Its JSON lines on stdout (`stream-json` / `--json`), non-JSON lines left out.
    pub transcript: Vec<Value>,
    /// Its stderr.
    pub stderr: String,
    /// The project directory, for file-system assertions.
    pub project: PathBuf,
    /// Wall time of the run (the trust step not included).
    pub elapsed: Duration,
    /// Codex: how many hooks the trust step trusted (0 for the others or without it).
    pub trusted_hooks: usize,
}

impl Outcome {
    /// The session id the runtime reported (Claude Code and Gemini CLI: `init`'s
    /// `session_id`; Codex: `thread.started`'s `thread_id`, which its hooks send as
    /// `session_id`).
    pub fn session_id(&self) -> Option<String> {
        self.transcript.iter().find_map(|e| {
            match (e["type"].as_str(), e["subtype"].as_str()) {
                (Some("system"), Some("init")) | (Some("init"), _) => e["session_id"].as_str(),
                (Some("thread.started"), _) => e["thread_id"].as_str(),
                _ => None,
            }
            .map(str::to_string)
        })
    }

    /// The transcript as one text, for `contains` assertions.
    pub fn transcript_text(&self) -> String {
        self.transcript
            .iter()
            .map(Value::to_string)
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// A summary for assertion messages: exit, timing, stderr tail, transcript.
    pub fn describe(&self) -> String {
        let stderr: Vec<&str> = self.stderr.lines().collect();
        format!(
            "{:?}: exit {:?} (timed out: {}) in {:.1}s, project {}\n--- stderr (tail) ---\n{}\n--- transcript ---\n{}",
            self.runtime,
            self.exit_code,
            self.timed_out,
            self.elapsed.as_secs_f64(),
            self.project.display(),
            stderr[stderr.len().saturating_sub(20)..].join("\n"),
            self.transcript_text()
        )
    }
}

impl RuntimeRun {
    /// Prepares a run of `runtime` against `standin` with `hook` wired (see the module
    /// docs for the events), no permission rules, the Codex trust step on, and
    /// [`DEFAULT_TIMEOUT`].
    pub fn new(runtime: Runtime, standin: &StandIn, hook: HookWiring) -> RuntimeRun {
        let dir = tempfile::Builder::new()
            .prefix(&format!("ah-rt-{}-", runtime.dialect()))
            .tempdir()
            .expect("temp dir");
        let root = dir.path().to_path_buf();
        let home = root.join("home");
        let project = root.join("proj");
        std::fs::create_dir_all(&home).unwrap();
        std::fs::create_dir_all(&project).unwrap();
        let git = Command::new("git")
            .args(["init", "-q", "."])
            .current_dir(&project)
            .status();
        assert!(
            git.is_ok_and(|s| s.success()),
            "git init in {}",
            project.display()
        );
        let keep = std::env::var_os(KEEP_ENV).is_some_and(|v| !v.is_empty());
        let dir = if keep {
            eprintln!("[runtimes] keeping {}", dir.keep().display());
            None
        } else {
            Some(dir)
        };
        RuntimeRun {
            runtime,
            root,
            home,
            project,
            _dir: dir,
            standin_url: standin.url().to_string(),
            hook,
            allow: Vec::new(),
            trust: true,
            timeout: DEFAULT_TIMEOUT,
            codex_config: String::new(),
        }
    }

    /// The runtime's own permission rules allow shell commands starting with each of
    /// `prefixes` (Claude Code `Bash(<p>:*)`, Gemini `run_shell_command(<p>)`; Codex runs
    /// without sandbox and approvals, so it has none).
    pub fn allow(mut self, prefixes: &[&str]) -> RuntimeRun {
        self.allow = prefixes.iter().map(|p| p.to_string()).collect();
        self
    }

    /// Skips Codex's trust step (to prove that an untrusted hook is skipped and noticed).
    pub fn without_codex_trust(mut self) -> RuntimeRun {
        self.trust = false;
        self
    }

    /// Codex only: TOML appended to `config.toml` (e.g. `[agents]\nmax_depth = 3`).
    pub fn codex_config(mut self, toml: &str) -> RuntimeRun {
        self.codex_config = toml.to_string();
        self
    }

    /// Kills the run after `timeout`.
    pub fn timeout(mut self, timeout: Duration) -> RuntimeRun {
        self.timeout = timeout;
        self
    }

    /// The hook command for command-hook wirings (`None` for [`HookWiring::Http`] and
    /// [`HookWiring::None`]).
    fn hook_command(&self) -> Option<String> {
        match &self.hook {
            HookWiring::Http { .. } | HookWiring::None => None,
            HookWiring::Command(c) => Some(c.clone()),
            HookWiring::Shim {
                base_url,
                token_file,
            } => Some(format!(
                "'{}' hook --dialect {} --url {} --token-file '{}'",
                bin("agenthooks-dispatcher").display(),
                self.runtime.dialect(),
                base_url,
                token_file.display()
            )),
        }
    }

    /// Writes the runtime's configuration (and, for Codex, trusts its hooks): returns how
    /// many hooks the trust step trusted.
    fn configure(&self) -> usize {
        match self.runtime {
            Runtime::ClaudeCode => {
                let handler = match &self.hook {
                    HookWiring::Http {
                        base_url, query, ..
                    } => json!({
                        "type": "http",
                        "url": format!("{base_url}/v1/hooks/claude-code{query}"),
                        "headers": {"Authorization": "Bearer $AGENTHOOKS_TOKEN"},
                        "allowedEnvVars": ["AGENTHOOKS_TOKEN"],
                        "onFailure": "block",
                        "timeout": 15,
                    }),
                    _ => json!({"type": "command", "command": self.hook_command(), "timeout": 30}),
                };
                let group = json!([{"matcher": "*", "hooks": [handler]}]);
                let allow: Vec<String> =
                    self.allow.iter().map(|p| format!("Bash({p}:*)")).collect();
                let hooks = match self.hook {
                    HookWiring::None => json!({}),
                    // The dispatcher also takes PostToolUse and Stop: answered `{}` at once
                    // unless a `blocking: true` hook selects them (issue 16).
                    HookWiring::Http { .. } => json!({
                        "PreToolUse": group, "PostToolUse": group, "Stop": group,
                        "SubagentStart": group, "SubagentStop": group,
                    }),
                    _ => {
                        json!({"PreToolUse": group, "SubagentStart": group, "SubagentStop": group})
                    }
                };
                let settings = json!({"hooks": hooks, "permissions": {"allow": allow}});
                write(
                    &self.home.join(".claude/settings.json"),
                    &settings.to_string(),
                );
                0
            }
            Runtime::Codex => {
                let codex_home = self.home.join(".codex");
                let handler = json!({"type": "command", "command": self.hook_command(),
                                     "timeout": CODEX_HOOK_TIMEOUT_S});
                let hooks = match self.hook {
                    HookWiring::None => json!({"hooks": {}}),
                    _ => json!({"hooks": {
                        "PreToolUse": [{"matcher": "*", "hooks": [handler]}],
                        "SubagentStart": [{"hooks": [handler]}],
                        "SubagentStop": [{"hooks": [handler]}],
                    }}),
                };
                write(&codex_home.join("hooks.json"), &hooks.to_string());
                let config = format!(
                    "model = \"gpt-5.1-codex\"\nmodel_provider = \"standin\"\ncheck_for_update_on_startup = false\n\
                     [model_providers.standin]\nname = \"standin\"\nbase_url = \"{}/v1\"\nwire_api = \"responses\"\n\
                     env_key = \"STANDIN_API_KEY\"\nrequest_max_retries = 0\nstream_max_retries = 0\n\
                     [analytics]\nenabled = false\n[feedback]\nenabled = false\n[otel]\nexporter = \"none\"\n",
                    self.standin_url
                );
                write(
                    &codex_home.join("config.toml"),
                    &format!("{config}{}\n", self.codex_config),
                );
                if self.trust {
                    self.trust_codex_hooks()
                } else {
                    0
                }
            }
            Runtime::GeminiCli => {
                let handler = json!({"name": "agenthooks", "type": "command",
                                     "command": self.hook_command(), "timeout": 30_000});
                let allowed: Vec<String> = self
                    .allow
                    .iter()
                    .map(|p| format!("run_shell_command({p})"))
                    .collect();
                let hooks = match self.hook {
                    HookWiring::None => json!({}),
                    _ => json!({"BeforeTool": [{"matcher": "*", "hooks": [handler]}]}),
                };
                let settings = json!({
                    "hooks": hooks,
                    "security": {"auth": {"selectedType": "gemini-api-key"}, "folderTrust": {"enabled": false}},
                    "privacy": {"usageStatisticsEnabled": false},
                    "telemetry": {"enabled": false},
                    "general": {"enableAutoUpdate": false, "enableAutoUpdateNotification": false},
                    "tools": {"allowed": allowed},
                });
                write(
                    &self.home.join(".gemini/settings.json"),
                    &settings.to_string(),
                );
                0
            }
        }
    }

    /// The environment of the runtime (built from nothing but `PATH`).
    fn env(&self) -> Vec<(String, String)> {
        let mut env = vec![
            (
                "PATH".to_string(),
                std::env::var("PATH").unwrap_or_default(),
            ),
            ("HOME".into(), self.home.display().to_string()),
            ("LANG".into(), "C.UTF-8".into()),
            ("TMPDIR".into(), std::env::temp_dir().display().to_string()),
        ];
        let add =
            |env: &mut Vec<(String, String)>, k: &str, v: &str| env.push((k.into(), v.into()));
        match self.runtime {
            Runtime::ClaudeCode => {
                add(&mut env, "ANTHROPIC_BASE_URL", &self.standin_url);
                add(&mut env, "ANTHROPIC_API_KEY", "sk-ant-standin");
                add(&mut env, "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1");
                add(&mut env, "DISABLE_TELEMETRY", "1");
                add(&mut env, "DISABLE_AUTOUPDATER", "1");
                add(&mut env, "DISABLE_ERROR_REPORTING", "1");
                if let HookWiring::Http { token, .. } = &self.hook {
                    add(&mut env, "AGENTHOOKS_TOKEN", token);
                }
            }
            Runtime::Codex => {
                add(
                    &mut env,
                    "CODEX_HOME",
                    &self.home.join(".codex").display().to_string(),
                );
                add(&mut env, "STANDIN_API_KEY", "sk-standin");
            }
            Runtime::GeminiCli => {
                add(&mut env, "GEMINI_API_KEY", "standin-key");
                add(&mut env, "GOOGLE_GEMINI_BASE_URL", &self.standin_url);
            }
        }
        env
    }

    /// The trust step of Codex: asks `codex app-server` (`hooks/list`) for the hooks of
    /// the project and their current hashes, and writes `[hooks.state."<key>"]
    /// trusted_hash` for each untrusted one into `$CODEX_HOME/config.toml`, as Codex's own
    /// `/hooks` review does. Returns how many it trusted; panics if app-server does not
    /// answer within 30 s.
    pub fn trust_codex_hooks(&self) -> usize {
        let mut child = Command::new(Runtime::Codex.binary())
            .arg("app-server")
            .env_clear()
            .envs(self.env())
            .current_dir(&self.project)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .process_group(0)
            .spawn()
            .expect("start codex app-server");
        let mut stdin = child.stdin.take().unwrap();
        let requests = [
            json!({"id": 1, "method": "initialize",
                   "params": {"clientInfo": {"name": "agenthooks-e2e", "title": "agenthooks e2e", "version": "0"}}}),
            json!({"method": "initialized"}),
            json!({"id": 2, "method": "hooks/list", "params": {"cwds": [self.project]}}),
        ];
        for r in requests {
            writeln!(stdin, "{r}").expect("write to codex app-server");
        }
        let stdout = child.stdout.take().unwrap();
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if let Ok(v) = serde_json::from_str::<Value>(&line)
                    && v["id"] == 2
                {
                    let _ = tx.send(v);
                    return;
                }
            }
        });
        let answer = rx.recv_timeout(Duration::from_secs(30));
        drop(stdin);
        kill_group(child.id());
        let _ = child.wait();
        let answer = answer.expect("codex app-server answered hooks/list within 30 s");
        let hooks: Vec<&Value> = answer["result"]["data"]
            .as_array()
            .into_iter()
            .flatten()
            .flat_map(|d| d["hooks"].as_array().into_iter().flatten())
            .collect();
        let mut state = String::new();
        let mut trusted = 0;
        for h in hooks {
            if h["trustStatus"] == "trusted" {
                continue;
            }
            let (Some(key), Some(hash)) = (h["key"].as_str(), h["currentHash"].as_str()) else {
                panic!("hooks/list: a hook without key or currentHash: {h}");
            };
            state.push_str(&format!(
                "[hooks.state.{}]\ntrusted_hash = {}\n",
                Value::String(key.into()),
                Value::String(hash.into())
            ));
            trusted += 1;
        }
        let config = self.home.join(".codex/config.toml");
        let mut text = std::fs::read_to_string(&config).unwrap();
        text.push_str(&state);
        std::fs::write(&config, text).unwrap();
        trusted
    }

    /// Configures and runs the runtime headless with `prompt`, killing it (its whole
    /// process group) at the timeout.
    pub fn run(&self, prompt: &str) -> Outcome {
        let trusted_hooks = self.configure();
        let mut cmd = Command::new(self.runtime.binary());
        match self.runtime {
            Runtime::ClaudeCode => cmd
                .args([
                    "-p",
                    prompt,
                    "--output-format",
                    "stream-json",
                    "--verbose",
                    "--model",
                    "claude-sonnet-4-5",
                ])
                .arg("--debug-file")
                .arg(self.root.join("debug.log")),
            Runtime::Codex => cmd.args([
                "exec",
                "--json",
                "--skip-git-repo-check",
                "-s",
                "danger-full-access",
                prompt,
            ]),
            Runtime::GeminiCli => cmd.args([
                "-p",
                prompt,
                "--output-format",
                "stream-json",
                "-m",
                "gemini-2.5-flash",
            ]),
        };
        let stdout_path = self.root.join("stdout.jsonl");
        let stderr_path = self.root.join("stderr.txt");
        let started = Instant::now();
        let mut child = cmd
            .env_clear()
            .envs(self.env())
            .current_dir(&self.project)
            .stdin(Stdio::null())
            .stdout(std::fs::File::create(&stdout_path).unwrap())
            .stderr(std::fs::File::create(&stderr_path).unwrap())
            .process_group(0)
            .spawn()
            .unwrap_or_else(|e| panic!("start {:?}: {e}", self.runtime));
        let mut timed_out = false;
        let status = loop {
            if let Some(s) = child.try_wait().expect("wait for the runtime") {
                break Some(s);
            }
            if started.elapsed() > self.timeout {
                timed_out = true;
                kill_group(child.id());
                let _ = child.wait();
                break None;
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        let elapsed = started.elapsed();
        // Whatever it left running (hook processes, helpers) goes with it.
        kill_group(child.id());
        let stdout = std::fs::read_to_string(&stdout_path).unwrap_or_default();
        Outcome {
            runtime: self.runtime,
            exit_code: status.and_then(|s| s.code()),
            timed_out,
            transcript: stdout
                .lines()
                .filter_map(|l| serde_json::from_str(l).ok())
                .collect(),
            stderr: std::fs::read_to_string(&stderr_path).unwrap_or_default(),
            project: self.project.clone(),
            elapsed,
            trusted_hooks,
        }
    }
}

fn write(path: &Path, text: &str) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, text).unwrap();
}

/// SIGKILL to the process group `pgid` (a child started with `process_group(0)`).
fn kill_group(pgid: u32) {
    // SAFETY: a plain kill(2) on a process group this harness created.
    unsafe { libc::kill(-(pgid as i32), libc::SIGKILL) };
}

/// The caller token of [`StandaloneDispatcher`]s (tenant [`TENANT`]).
pub const CALLER_TOKEN: &str = "runtimes-tier-caller-token-0123456789abcdef";

/// The one tenant of the tier's caller.
pub const TENANT: &str = "acme";

/// A standalone dispatcher for the runtimes tier: `--hooks <dir>` holding the given
/// AgentHooks, `--callers-file` with one caller ([`CALLER_TOKEN`], tenant [`TENANT`]),
/// `--admin-token-file` for the audit history, audit in SQLite in its working directory.
pub struct StandaloneDispatcher {
    /// The process.
    pub proc: crate::procs::Proc,
    /// `http://127.0.0.1:<port>`.
    pub url: String,
    /// A file holding [`CALLER_TOKEN`] (for the shim's `--token-file`).
    pub token_file: PathBuf,
    admin_token: String,
}

impl StandaloneDispatcher {
    /// Writes each of `hooks` (AgentHook objects as JSON, which is YAML) into a hooks
    /// directory under `logs`, starts the dispatcher on it and waits for `/readyz`.
    pub fn start(name: &str, hooks: &[Value], logs: &Path) -> StandaloneDispatcher {
        let hooks_dir = logs.join(format!("{name}.hooks"));
        std::fs::create_dir_all(&hooks_dir).unwrap();
        for h in hooks {
            let hook_name = h["metadata"]["name"].as_str().expect("metadata.name");
            write(&hooks_dir.join(format!("{hook_name}.yaml")), &h.to_string());
        }
        let token_file = logs.join(format!("{name}.caller-token"));
        write(&token_file, CALLER_TOKEN);
        let callers = logs.join(format!("{name}.callers.yaml"));
        write(
            &callers,
            &format!(
                "callers:\n  - name: runtimes-tier\n    tokenSha256: \"{}\"\n    tenants: [{TENANT}]\n",
                agenthooks_dispatcher::identity::callers_file::token_sha256(CALLER_TOKEN)
            ),
        );
        let admin_token = format!("runtimes-admin-{}", crate::unique_name("t"));
        let admin_file = logs.join(format!("{name}.admin-token"));
        write(&admin_file, &admin_token);
        let port = crate::procs::free_port();
        let args: Vec<String> = [
            "--hooks",
            hooks_dir.to_str().unwrap(),
            "--listen",
            &format!("127.0.0.1:{port}"),
            "--callers-file",
            callers.to_str().unwrap(),
            "--admin-token-file",
            admin_file.to_str().unwrap(),
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        let proc = crate::procs::Proc::start(name, &bin("agenthooks-dispatcher"), &args, &[], logs);
        let d = StandaloneDispatcher {
            proc,
            url: format!("http://127.0.0.1:{port}"),
            token_file,
            admin_token,
        };
        crate::stack::wait_or_panic(
            Duration::from_secs(30),
            "the standalone dispatcher is ready",
            &[&d.proc],
            || crate::stack::http_get(&format!("{}/readyz", d.url)).0 == 200,
        );
        d
    }

    /// The admin token (`--admin-token-file`): reads the audit history, runs dry runs, and
    /// signs in to the console.
    pub fn admin_token(&self) -> &str {
        &self.admin_token
    }

    /// The caller token ([`CALLER_TOKEN`], tenant [`TENANT`]): sends events.
    pub fn caller_token(&self) -> &str {
        CALLER_TOKEN
    }

    /// Claude Code's `http` hook to this dispatcher.
    pub fn http_wiring(&self) -> HookWiring {
        self.http_wiring_with("")
    }

    /// Claude Code's http hook to this dispatcher with `query` on the route (`?ask=defer`).
    pub fn http_wiring_with(&self, query: &str) -> HookWiring {
        HookWiring::Http {
            base_url: self.url.clone(),
            token: CALLER_TOKEN.to_string(),
            query: query.to_string(),
        }
    }

    /// The command shim to this dispatcher.
    pub fn shim_wiring(&self) -> HookWiring {
        HookWiring::Shim {
            base_url: self.url.clone(),
            token_file: self.token_file.clone(),
        }
    }

    /// The way the tier wires `runtime` to this dispatcher by default: Claude Code's http
    /// hook, the shim for the others (they have no http hooks).
    pub fn wiring(&self, runtime: Runtime) -> HookWiring {
        match runtime {
            Runtime::ClaudeCode => self.http_wiring(),
            _ => self.shim_wiring(),
        }
    }

    /// `POST /v1/hooks/<dialect>` with `payload` and the caller token → (status, body).
    pub fn post_hook(&self, dialect: &str, payload: &Value) -> (u16, Value) {
        let auth = format!("Authorization: Bearer {CALLER_TOKEN}");
        let (code, body) = crate::stack::http_post_with(
            &format!("{}/v1/hooks/{dialect}", self.url),
            payload,
            &["-H", &auth],
        );
        (code, serde_json::from_str(&body).unwrap_or(Value::Null))
    }

    /// The audit rows of session `session` (newest first, at most 500 read), optionally
    /// only of hook `hook` (`NS/NAME`) and decision `decision`.
    pub fn rows(&self, session: &str, hook: Option<&str>, decision: Option<&str>) -> Vec<Value> {
        let mut query = vec!["limit=500".to_string()];
        if let Some(h) = hook {
            query.push(format!("hook={h}"));
        }
        if let Some(d) = decision {
            query.push(format!("decision={d}"));
        }
        let auth = format!("Authorization: Bearer {}", self.admin_token);
        let (code, body) = crate::stack::http_get_with(
            &format!("{}/v1/executions?{}", self.url, query.join("&")),
            &["-H", &auth],
        );
        assert_eq!(code, 200, "GET /v1/executions: {body}");
        let v: Value = serde_json::from_str(&body).expect("executions JSON");
        v["executions"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|r| r["sessionId"] == session)
            .cloned()
            .collect()
    }

    /// Waits up to `timeout` until session `session` has at least `at_least` rows (of
    /// `hook`, `decision`) and returns them (fewer on timeout; rows are written behind the
    /// answer).
    pub fn wait_rows(
        &self,
        session: &str,
        hook: Option<&str>,
        decision: Option<&str>,
        at_least: usize,
        timeout: Duration,
    ) -> Vec<Value> {
        let deadline = Instant::now() + timeout;
        loop {
            let rows = self.rows(session, hook, decision);
            if rows.len() >= at_least || Instant::now() > deadline {
                return rows;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Whether the dispatcher saw any hook call of session `session` within `timeout`:
    /// the check that catches a runtime skipping our hook without saying so (Codex's
    /// untrusted hooks).
    pub fn saw_session(&self, session: &str, timeout: Duration) -> bool {
        !self.wait_rows(session, None, None, 1, timeout).is_empty()
    }

    /// Kills it (SIGKILL) and waits until its port refuses connections.
    pub fn kill(&mut self) {
        self.proc.signal(libc::SIGKILL);
        let _ = crate::wait_for(Duration::from_secs(10), || !self.proc.running());
        self.proc.stop(Duration::from_secs(1));
    }
}

/// An AgentHook of the master namespace `agenthooks-system`, global, on `pre_tool_use`
/// shell calls (`toolKinds: [shell]`, so every runtime's shell), running `command`, with
/// `if_expr` as its `ifExpr` when given.
pub fn shell_hook(name: &str, priority: i64, if_expr: Option<&str>, command: &str) -> Value {
    let mut spec = json!({
        "event": "pre_tool_use",
        "scope": "global",
        "priority": priority,
        "toolKinds": ["shell"],
        "timeoutMs": 5000,
        "handler": {"type": "command", "command": {"command": command}},
    });
    if let Some(e) = if_expr {
        spec["ifExpr"] = json!(e);
    }
    json!({"apiVersion": "agenthooks.io/v1alpha1", "kind": "AgentHook",
           "metadata": {"name": name, "namespace": "agenthooks-system"}, "spec": spec})
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_runtime_has_one_pin() {
        let pins = pins();
        assert_eq!(pins.len(), 3);
        for rt in Runtime::ALL {
            assert_eq!(pins.iter().filter(|p| p.name == rt.dialect()).count(), 1);
        }
        assert_eq!(
            Runtime::ClaudeCode.pin(),
            Pin {
                name: "claude-code".into(),
                version: "2.1.332".into(),
                package: "@anthropic-ai/claude-code".into(),
                bin: "claude".into(),
            }
        );
    }
}
