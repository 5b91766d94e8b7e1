//! The `command` handler (Lite edition only): runs `sh -c <command>` with the event JSON
//! on stdin and turns its exit status and stdout into an outcome.
//!
//! Rules: CONTRACT §5 command.1–4, §10.1; seed "Handler reference / command".
//!
//! * Where the command runs is the engine's [`CommandRunner`]: the command runner
//!   container in a cluster (`--command-runner unix:PATH`), else this host. Both run it
//!   the same way ([`crate::sandbox::local`]): under a per-run supervisor that ends the
//!   whole process tree (a `setsid` or double-forked child too) when `sh` exits, on
//!   timeout, past the output cap and when the run is dropped; in a private directory
//!   (`TMPDIR`, `HOME`, and the working directory unless `cwd` is set); with the
//!   environment built from nothing (see [`build_env`]) out of *that* process's
//!   environment.
//! * The event reaches the process only on stdin; it is never put into the shell string.
//! * Exit 2 → block (stderr is the reason); exit 0 → allow unless stdout is a JSON
//!   object with `"continue": false`; anything else → error. Exit 126/127 (not
//!   executable / not found) are errors of kind `spawn_failed`, so metrics tell them
//!   apart from a hook that ran and failed (`exit_status`).
//! * Stdout and stderr are each capped at [`MAX_OUTPUT_BYTES`] where the command runs,
//!   and checked again here; past the cap the run is an error (`output_too_large`).

use std::ffi::OsString;
use std::os::unix::process::ExitStatusExt;
use std::process::ExitStatus;
use std::time::Duration;

use serde_json::Value;

use super::{HandlerResult, MAX_OUTPUT_BYTES, cut};
use crate::decision::outcome::ErrorKind;
use crate::sandbox::CommandRunner;
use crate::sandbox::protocol::{RunOutcome, RunRequest, Stream};
use agenthooks_crds::agenthook::CommandDialect;

/// The `PATH` a command gets unless `PATH` itself is in `allowed_env_vars`
/// (CONTRACT §5 command.2).
pub const SAFE_PATH: &str = "/usr/local/bin:/usr/bin:/bin";

/// Config of a command hook: the API type of `spec.handler.command` itself
/// (`command` run as `sh -c`, never combined with event data; `allowed_env_vars` passed
/// through if set; `cwd` must exist, else error kind `cwd_missing`).
pub use agenthooks_crds::agenthook::CommandHandlerSpec as CommandSpec;

/// The environment a command runs with (CONTRACT §5 command.2): the variables named in
/// `allowed` that `lookup` finds set, plus `PATH=`[`SAFE_PATH`] unless `PATH` is named.
/// An empty `allowed` list gives an empty environment (no `PATH` either; `sh` then uses
/// its built-in default search path).
///
/// `lookup` is `std::env::var_os` in production; tests pass a map.
pub fn build_env(
    allowed: &[String],
    lookup: impl Fn(&str) -> Option<OsString>,
) -> Vec<(String, OsString)> {
    let mut env: Vec<(String, OsString)> = Vec::new();
    if allowed.is_empty() {
        return env;
    }
    for name in allowed {
        if name.is_empty() || name.contains('=') || name.contains('\0') {
            continue;
        }
        if env.iter().any(|(n, _)| n == name) {
            continue;
        }
        if let Some(value) = lookup(name) {
            env.push((name.clone(), value));
        }
    }
    if !allowed.iter().any(|n| n == "PATH") {
        env.push(("PATH".to_owned(), OsString::from(SAFE_PATH)));
    }
    env
}

/// Runs one command hook on one event, where `runner` says.
///
/// * `event_json`: the event as JSON (CONTRACT §1.3), written to the child's stdin; a
///   child that does not read it (EPIPE) is fine.
/// * `timeout`: the hook's `timeoutMs`. When it passes, the process tree is killed and
///   the result is [`HandlerResult::timeout`].
///
/// Outcomes: exit 2 → `Block` (reason: stderr, cut); exit 0 → `Allow` with
/// `additionalContext` (string) and `updatedInput` (any non-null JSON) from a stdout JSON
/// object, or `Block` if that object has `"continue": false` (reason: its `stopReason` or
/// `reason` string, else stderr); exit 126/127 → `Error` kind `spawn_failed`; any other
/// exit or a signal → `Error` kind `exit_status`. Other error kinds: `cwd_missing`,
/// `spawn_failed` (sh could not start), `output_too_large`, `runner_unavailable` (the
/// command runner could not be reached or refused the run). `metadata.stdout_len`,
/// `metadata.stdout` and `metadata.stderr` (cut) are filled whenever the run completed.
///
/// With `dialect: claude-code` the caller passes Claude Code's payload as `event_json`
/// ([`crate::dialect::claude_code_payload`]) and stdout is read as Claude Code reads it
/// ([`claude_code_output`]).
pub async fn run(
    runner: &CommandRunner,
    spec: &CommandSpec,
    event_json: &[u8],
    timeout: Duration,
) -> HandlerResult {
    let timeout_ms = u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX);
    let req = RunRequest {
        command: spec.command.clone(),
        allowed_env_vars: spec.allowed_env_vars.clone(),
        cwd: spec.cwd.clone(),
        timeout_ms,
        stdin: event_json.to_vec(),
    };
    // The runner enforces the timeout; this bounds a local run the same way should the
    // supervisor be slow to answer.
    let limit = timeout + crate::sandbox::remote::TRANSPORT_GRACE;
    let outcome = match tokio::time::timeout(limit, runner.run(&req)).await {
        Ok(o) => o,
        Err(_) => RunOutcome::Timeout,
    };
    from_outcome(outcome, timeout_ms, spec.dialect)
}

/// Turns what the runner reported into a result; output over the cap is refused here
/// too, whatever the runner did.
fn from_outcome(outcome: RunOutcome, timeout_ms: u64, dialect: CommandDialect) -> HandlerResult {
    let too_large = |stream: Stream| {
        HandlerResult::error(
            ErrorKind::OutputTooLarge,
            format!(
                "command wrote more than {MAX_OUTPUT_BYTES} bytes to {}",
                stream.as_str()
            ),
        )
    };
    match outcome {
        RunOutcome::Completed {
            exit_code,
            signal,
            stdout,
            stderr,
        } => {
            if stdout.len() > MAX_OUTPUT_BYTES {
                return too_large(Stream::Stdout);
            }
            if stderr.len() > MAX_OUTPUT_BYTES {
                return too_large(Stream::Stderr);
            }
            let raw = match (exit_code, signal) {
                (Some(code), _) => (code & 0xff) << 8,
                (None, Some(sig)) => sig & 0x7f,
                (None, None) => {
                    return HandlerResult::error(
                        ErrorKind::ExitStatus,
                        "the command runner reported neither an exit code nor a signal",
                    );
                }
            };
            interpret(ExitStatus::from_raw(raw), &stdout, &stderr, dialect)
        }
        RunOutcome::Timeout => HandlerResult::timeout(timeout_ms),
        RunOutcome::OutputTooLarge { stream } => too_large(stream),
        RunOutcome::CwdMissing { message } => HandlerResult::error(ErrorKind::CwdMissing, message),
        RunOutcome::SpawnFailed { message } => {
            HandlerResult::error(ErrorKind::SpawnFailed, message)
        }
        RunOutcome::Failed { message } => HandlerResult::error(ErrorKind::ExitStatus, message),
        RunOutcome::RunnerUnavailable { message } => {
            HandlerResult::error(ErrorKind::RunnerUnavailable, message)
        }
    }
}

/// Turns a finished run into a result (CONTRACT §5 command.3).
fn interpret(
    status: ExitStatus,
    stdout: &[u8],
    stderr: &[u8],
    dialect: CommandDialect,
) -> HandlerResult {
    let out_text = String::from_utf8_lossy(stdout).into_owned();
    let err_text = String::from_utf8_lossy(stderr).into_owned();
    let err_trimmed = err_text.trim();

    let mut result = match status.code() {
        Some(0) if dialect == CommandDialect::ClaudeCode => claude_code_output(stdout, err_trimmed),
        Some(0) => on_success(stdout, err_trimmed),
        Some(2) => {
            if err_trimmed.is_empty() {
                HandlerResult::block("blocked by command hook (exit 2)")
            } else {
                HandlerResult::block(err_trimmed)
            }
        }
        Some(code @ (126 | 127)) => {
            let what = if code == 127 {
                "not found"
            } else {
                "not executable"
            };
            HandlerResult::error(
                ErrorKind::SpawnFailed,
                format!("command {what} (exit {code}): {err_trimmed}"),
            )
        }
        Some(code) => HandlerResult::error(
            ErrorKind::ExitStatus,
            format!("command exited with status {code}: {err_trimmed}"),
        ),
        None => {
            let sig = status.signal().unwrap_or(0);
            HandlerResult::error(
                ErrorKind::ExitStatus,
                format!("command killed by signal {sig}: {err_trimmed}"),
            )
        }
    };
    result.metadata.stdout_len = Some(stdout.len());
    result.metadata.stdout = Some(cut(out_text));
    result.metadata.stderr = Some(cut(err_text));
    result
}

/// Exit 0: allow, unless stdout is a JSON object with `"continue": false` or `"decision":
/// "block"` (block; reason `reason`, else stderr), or `"decision": "ask"` (a person should
/// decide). Any other `decision` is an error (`bad_decision`), as for an http hook.
fn on_success(stdout: &[u8], stderr: &str) -> HandlerResult {
    let obj = match super::answer_object(stdout) {
        Ok(Some(obj)) => obj,
        Ok(None) => return HandlerResult::allow(),
        Err(broken) => return *broken,
    };
    let text = |k: &str| {
        obj.get(k)
            .and_then(Value::as_str)
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(str::to_owned)
    };
    if obj.get("continue") == Some(&Value::Bool(false)) {
        let reason = ["stopReason", "reason"]
            .iter()
            .find_map(|k| obj.get(*k).and_then(Value::as_str))
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .or(Some(stderr).filter(|s| !s.is_empty()))
            .unwrap_or("blocked by command hook (\"continue\": false)");
        return HandlerResult::block(reason);
    }
    // `decision` as an http hook's: `block` blocks, `ask` asks, `allow` (or none) allows,
    // and anything else is an error — never an allow by accident.
    let mut result = match obj.get("decision") {
        None | Some(Value::Null) => HandlerResult::allow(),
        Some(Value::String(d)) if d == "allow" => HandlerResult::allow(),
        Some(Value::String(d)) if d == "block" => {
            return HandlerResult::block(
                text("reason")
                    .or(Some(stderr.trim().to_owned()).filter(|s| !s.is_empty()))
                    .unwrap_or_else(|| "blocked by command hook (decision: block)".into()),
            );
        }
        Some(Value::String(d)) if d == "ask" => HandlerResult::ask(
            text("reason")
                .unwrap_or_else(|| "the command hook asks for a person's decision".into()),
        ),
        Some(other) => {
            return HandlerResult::error(
                ErrorKind::BadDecision,
                format!(
                    "decision must be \"allow\", \"block\" or \"ask\", got {}",
                    cut(other.to_string())
                ),
            );
        }
    };
    result.additional_context = obj
        .get("additionalContext")
        .and_then(Value::as_str)
        .map(str::to_owned);
    result.updated_input = obj.get("updatedInput").filter(|v| !v.is_null()).cloned();
    result.updated_tool_output = super::output_rewrite(&obj);
    result
}

/// Exit 0 of a `dialect: claude-code` hook, read as Claude Code reads it: `continue:
/// false` and `decision: "block"` block (reason `stopReason`/`reason`, else stderr);
/// `hookSpecificOutput.permissionDecision: "deny"` blocks with its
/// `permissionDecisionReason`; `"ask"` asks (the chain answers `ask`, which a caller that
/// cannot ask a person gets as `block`);
/// `"allow"`, `"defer"` or none allow, with `hookSpecificOutput.additionalContext` and
/// `updatedInput`; a value Claude Code would refuse (`decision: "allow"`) is an error, as
/// there. Plain-text stdout allows.
pub fn claude_code_output(stdout: &[u8], stderr: &str) -> HandlerResult {
    let obj = match super::answer_object(stdout) {
        Ok(Some(obj)) => obj,
        Ok(None) => return HandlerResult::allow(),
        Err(broken) => return *broken,
    };
    let text = |v: Option<&Value>| {
        v.and_then(Value::as_str)
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(str::to_owned)
    };
    let or_stderr = |reason: Option<String>, default: &str| {
        reason
            .or(Some(stderr.to_owned()).filter(|s| !s.is_empty()))
            .unwrap_or_else(|| default.to_owned())
    };
    if obj.get("continue") == Some(&Value::Bool(false)) {
        let reason = text(obj.get("stopReason")).or(text(obj.get("reason")));
        return HandlerResult::block(or_stderr(
            reason,
            "blocked by Claude Code hook (\"continue\": false)",
        ));
    }
    match obj.get("decision") {
        None | Some(Value::Null) => {}
        Some(Value::String(d)) if d == "approve" => {}
        Some(Value::String(d)) if d == "block" => {
            return HandlerResult::block(or_stderr(
                text(obj.get("reason")),
                "blocked by Claude Code hook (decision: block)",
            ));
        }
        Some(other) => {
            return HandlerResult::error(
                ErrorKind::BadDecision,
                format!(
                    "decision: {other} is not one of \"approve\", \"block\" (Claude Code's hook output schema)"
                ),
            );
        }
    }
    let specific = obj.get("hookSpecificOutput").and_then(Value::as_object);
    let field = |k: &str| specific.and_then(|s| s.get(k));
    match field("permissionDecision").and_then(Value::as_str) {
        None | Some("allow" | "defer") => {}
        Some("deny") => {
            return HandlerResult::block(or_stderr(
                text(field("permissionDecisionReason")),
                "denied by Claude Code hook",
            ));
        }
        Some("ask") => {
            let mut result = HandlerResult::ask(
                text(field("permissionDecisionReason"))
                    .unwrap_or_else(|| "the Claude Code hook asks for a person's decision".into()),
            );
            result.additional_context = text(field("additionalContext"));
            result.updated_input = field("updatedInput").filter(|v| !v.is_null()).cloned();
            return result;
        }
        Some(other) => {
            return HandlerResult::error(
                ErrorKind::BadDecision,
                format!(
                    "hookSpecificOutput.permissionDecision: {other:?} is not one of allow, deny, ask, defer"
                ),
            );
        }
    }
    let mut result = HandlerResult::allow();
    result.additional_context = text(field("additionalContext"));
    result.updated_input = field("updatedInput").filter(|v| !v.is_null()).cloned();
    // PostToolUse: `updatedToolOutput`, else the older MCP-only `updatedMCPToolOutput`.
    result.updated_tool_output = field("updatedToolOutput")
        .or(field("updatedMCPToolOutput"))
        .filter(|v| !v.is_null())
        .cloned();
    result
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::handlers::Outcome;
    use std::collections::HashMap;
    use std::time::Instant;

    const EVENT: &[u8] =
        br#"{"event":"pre_tool_use","tool_name":"Bash","tool_input":{"command":"ls"}}"#;

    fn spec(command: &str) -> CommandSpec {
        CommandSpec {
            command: command.to_owned(),
            allowed_env_vars: vec![],
            cwd: None,
            dialect: Default::default(),
        }
    }

    /// The handler with the default (local) runner.
    async fn run(spec: &CommandSpec, event: &[u8], timeout: Duration) -> HandlerResult {
        super::run(&CommandRunner::default(), spec, event, timeout).await
    }

    async fn run_cmd(command: &str) -> HandlerResult {
        run(&spec(command), EVENT, Duration::from_secs(5)).await
    }

    /// Processes in process group `pgid` that are not zombies, as (pid, state, comm).
    fn live_group_members(pgid: i32) -> Vec<(i32, char, String)> {
        let mut found = Vec::new();
        let Ok(dir) = std::fs::read_dir("/proc") else {
            return found;
        };
        for entry in dir.flatten() {
            let Ok(pid) = entry.file_name().to_string_lossy().parse::<i32>() else {
                continue;
            };
            let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
                continue;
            };
            // pid (comm) state ppid pgrp ...
            let Some(close) = stat.rfind(')') else {
                continue;
            };
            let comm = stat[stat.find('(').map_or(0, |i| i + 1)..close].to_owned();
            let fields: Vec<&str> = stat[close + 2..].split(' ').collect();
            let state = fields[0].chars().next().unwrap_or('?');
            let pgrp: i32 = fields[2].parse().unwrap_or(-1);
            if pgrp == pgid && state != 'Z' && state != 'X' {
                found.push((pid, state, comm));
            }
        }
        found
    }

    async fn wait_group_gone(pgid: i32) -> Vec<(i32, char, String)> {
        for _ in 0..50 {
            let live = live_group_members(pgid);
            if live.is_empty() {
                return live;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        live_group_members(pgid)
    }

    fn is_zombie_child_of_us(pid: i32) -> bool {
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            return false;
        };
        let Some(close) = stat.rfind(')') else {
            return false;
        };
        let fields: Vec<&str> = stat[close + 2..].split(' ').collect();
        let ppid: u32 = fields[1].parse().unwrap_or(0);
        fields[0] == "Z" && ppid == std::process::id()
    }

    /// Reads (and removes) the process-group id a test command wrote with `echo $$ > FILE`.
    fn take_pgid(pidfile: &std::path::Path) -> i32 {
        let pgid = std::fs::read_to_string(pidfile)
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        let _ = std::fs::remove_file(pidfile);
        pgid
    }

    fn tmp_path(tag: &str) -> std::path::PathBuf {
        std::env::temp_dir().join(format!(
            "agenthooks-{tag}-{}-{}",
            std::process::id(),
            uuid::Uuid::new_v4().simple()
        ))
    }

    #[tokio::test]
    async fn exit_zero_with_no_output_allows() {
        let r = run_cmd("true").await;
        assert_eq!(r.outcome, Outcome::Allow);
        assert_eq!(r.reason, None);
        assert_eq!(r.error_kind, None);
        assert_eq!(r.metadata.stdout_len, Some(0));
    }

    /// Exit 0 with a JSON `decision` is read as an http hook's answer: a word it does not
    /// know is an error, never an allow (the tester's case: `"decision": "block"` allowed).
    #[test]
    fn exit_zero_decisions_are_read_and_unknown_ones_fail_closed() {
        for (stdout, stderr, outcome, reason) in [
            (
                r#"{"decision": "block", "reason": "no"}"#,
                "",
                Outcome::Block,
                Some("no"),
            ),
            (
                r#"{"decision": "block"}"#,
                "from stderr",
                Outcome::Block,
                Some("from stderr"),
            ),
            (
                r#"{"decision": "ask", "reason": "a person"}"#,
                "",
                Outcome::Ask,
                Some("a person"),
            ),
            (r#"{"decision": "allow"}"#, "", Outcome::Allow, None),
            (r#"{"decision": null}"#, "", Outcome::Allow, None),
            (r#"{"decision": "deny"}"#, "", Outcome::Error, None),
            (r#"{"decision": "Block"}"#, "", Outcome::Error, None),
            (r#"{"decision": 1}"#, "", Outcome::Error, None),
        ] {
            let r = on_success(stdout.as_bytes(), stderr);
            assert_eq!(r.outcome, outcome, "{stdout}");
            if reason.is_some() {
                assert_eq!(r.reason.as_deref(), reason, "{stdout}");
            }
            if outcome == Outcome::Error {
                assert_eq!(r.error_kind, Some(ErrorKind::BadDecision), "{stdout}");
            }
        }
    }

    #[tokio::test]
    async fn exit_two_blocks_with_stderr_as_reason() {
        let r = run_cmd("echo 'rm -rf is not allowed' >&2; exit 2").await;
        assert_eq!(r.outcome, Outcome::Block);
        assert_eq!(r.reason.as_deref(), Some("rm -rf is not allowed"));
        assert_eq!(r.error_kind, None);
        assert_eq!(
            r.metadata.stderr.as_deref(),
            Some("rm -rf is not allowed\n")
        );
    }

    #[tokio::test]
    async fn exit_two_without_stderr_has_a_default_reason() {
        let r = run_cmd("exit 2").await;
        assert_eq!(r.outcome, Outcome::Block);
        assert_eq!(
            r.reason.as_deref(),
            Some("blocked by command hook (exit 2)")
        );
    }

    #[tokio::test]
    async fn exit_two_reason_is_cut() {
        let r = run_cmd("head -c 5000 /dev/zero | tr '\\0' 'é' >&2; exit 2").await;
        assert_eq!(r.outcome, Outcome::Block);
        let reason = r.reason.unwrap();
        assert!(
            reason.len() <= crate::handlers::MAX_REASON_BYTES,
            "{}",
            reason.len()
        );
        assert!(reason.len() > 1000);
        assert!(r.metadata.stderr.unwrap().len() <= crate::handlers::MAX_REASON_BYTES);
    }

    #[tokio::test]
    async fn exit_one_is_an_error_never_allow() {
        let r = run_cmd("echo policy >&2; exit 1").await;
        assert_eq!(r.outcome, Outcome::Error);
        assert_eq!(r.error_kind, Some(ErrorKind::ExitStatus));
        let reason = r.reason.unwrap();
        assert!(reason.contains("status 1"), "{reason}");
        assert!(reason.contains("policy"), "{reason}");
    }

    #[tokio::test]
    async fn other_exit_codes_are_errors() {
        for code in [3, 42, 255] {
            let r = run_cmd(&format!("exit {code}")).await;
            assert_eq!(r.outcome, Outcome::Error, "{code}");
            assert_eq!(r.error_kind, Some(ErrorKind::ExitStatus), "{code}");
            assert!(r.reason.unwrap().contains(&format!("status {code}")));
        }
    }

    #[tokio::test]
    async fn death_by_signal_is_an_error() {
        let r = run_cmd("kill -TERM $$").await;
        assert_eq!(r.outcome, Outcome::Error);
        assert_eq!(r.error_kind, Some(ErrorKind::ExitStatus));
        assert!(r.reason.unwrap().contains("signal 15"));
    }

    #[tokio::test]
    async fn missing_binary_is_a_spawn_failure() {
        let r = run_cmd("/nonexistent/bin").await;
        assert_eq!(r.outcome, Outcome::Error);
        assert_eq!(r.error_kind, Some(ErrorKind::SpawnFailed));
        let reason = r.reason.unwrap();
        assert!(
            reason.contains("not found") && reason.contains("127"),
            "{reason}"
        );
    }

    #[tokio::test]
    async fn non_executable_is_a_spawn_failure() {
        use std::os::unix::fs::PermissionsExt;
        let file = tempfile::NamedTempFile::new().unwrap();
        std::fs::write(file.path(), "echo hi\n").unwrap();
        std::fs::set_permissions(file.path(), std::fs::Permissions::from_mode(0o644)).unwrap();
        let r = run_cmd(&file.path().to_string_lossy()).await;
        assert_eq!(r.outcome, Outcome::Error);
        assert_eq!(r.error_kind, Some(ErrorKind::SpawnFailed));
        let reason = r.reason.unwrap();
        assert!(
            reason.contains("not executable") && reason.contains("126"),
            "{reason}"
        );
    }

    #[tokio::test]
    async fn continue_false_blocks_even_pretty_printed() {
        let r = run_cmd(r#"printf '{\n  "continue": false\n}\n'"#).await;
        assert_eq!(r.outcome, Outcome::Block);
        assert_eq!(
            r.reason.as_deref(),
            Some("blocked by command hook (\"continue\": false)")
        );
        assert_eq!(r.metadata.stdout_len, Some(24));
    }

    #[tokio::test]
    async fn continue_false_takes_its_reason_from_the_json_then_stderr() {
        let r = run_cmd(r#"echo '{"continue": false, "stopReason": "no pushes on Friday"}'"#).await;
        assert_eq!(r.outcome, Outcome::Block);
        assert_eq!(r.reason.as_deref(), Some("no pushes on Friday"));

        let r = run_cmd(r#"echo '{"continue": false, "reason": "r"}'"#).await;
        assert_eq!(r.reason.as_deref(), Some("r"));

        let r = run_cmd(r#"echo 'from stderr' >&2; echo '{"continue": false}'"#).await;
        assert_eq!(r.reason.as_deref(), Some("from stderr"));
    }

    #[tokio::test]
    async fn other_stdout_allows() {
        for out in [
            r#"echo '{"continue": true}'"#,
            r#"echo '{"continue": "false"}'"#,
            "echo 'just text'",
            "echo '[false]'",
        ] {
            let r = run_cmd(out).await;
            assert_eq!(r.outcome, Outcome::Allow, "{out}");
            assert_eq!(r.reason, None, "{out}");
        }
        // Cut short, it is a broken answer, not plain text.
        let r = run_cmd("echo '{\"continue\": fals'").await;
        assert_eq!(
            (r.outcome, r.error_kind),
            (Outcome::Error, Some(ErrorKind::BadDecision))
        );
    }

    #[tokio::test]
    async fn additional_context_and_updated_input_are_carried() {
        let r = run_cmd(
            r#"echo '{"additionalContext": "repo is read-only", "updatedInput": {"command": "ls -la"}}'"#,
        )
        .await;
        assert_eq!(r.outcome, Outcome::Allow);
        assert_eq!(r.additional_context.as_deref(), Some("repo is read-only"));
        assert_eq!(
            r.updated_input,
            Some(serde_json::json!({"command": "ls -la"}))
        );

        let r = run_cmd(r#"echo '{"additionalContext": 5, "updatedInput": null}'"#).await;
        assert_eq!(r.outcome, Outcome::Allow);
        assert_eq!(r.additional_context, None);
        assert_eq!(r.updated_input, None);
    }

    #[tokio::test]
    async fn event_arrives_on_stdin_verbatim() {
        let r = run_cmd("cat").await;
        assert_eq!(r.outcome, Outcome::Allow);
        assert_eq!(r.metadata.stdout.as_deref().map(str::as_bytes), Some(EVENT));
        assert_eq!(r.metadata.stdout_len, Some(EVENT.len()));
    }

    #[tokio::test]
    async fn large_event_is_fed_while_output_is_read() {
        // 3 MiB of stdin through `wc -c`: stdin is written concurrently with reading.
        let big = vec![b'x'; 3 * 1024 * 1024];
        let r = run(&spec("wc -c"), &big, Duration::from_secs(10)).await;
        assert_eq!(r.outcome, Outcome::Allow);
        assert_eq!(r.metadata.stdout.as_deref().map(str::trim), Some("3145728"));
    }

    #[tokio::test]
    async fn child_that_ignores_stdin_does_not_fail_the_hook() {
        // Bigger than a pipe buffer, so the write hits EPIPE once `true` exits.
        let big = vec![b'{'; 1024 * 1024];
        let r = run(&spec("true"), &big, Duration::from_secs(5)).await;
        assert_eq!(r.outcome, Outcome::Allow, "{r:?}");
        let r = run(&spec("exec 0<&-; exit 2"), &big, Duration::from_secs(5)).await;
        assert_eq!(r.outcome, Outcome::Block, "{r:?}");
    }

    #[tokio::test]
    async fn event_is_never_interpolated_into_the_shell() {
        let marker = tmp_path("pwned");
        let event = serde_json::json!({
            "event": "pre_tool_use",
            "tool_name": "Bash",
            "tool_input": {"command": format!("$(touch {})", marker.display())},
        });
        let bytes = serde_json::to_vec(&event).unwrap();
        let r = run(&spec("cat >/dev/null"), &bytes, Duration::from_secs(5)).await;
        assert_eq!(r.outcome, Outcome::Allow);
        // Also a hook that echoes its input must not evaluate it.
        let r = run(&spec("cat"), &bytes, Duration::from_secs(5)).await;
        assert_eq!(r.outcome, Outcome::Allow);
        assert!(r.metadata.stdout.unwrap().contains("$(touch "));
        assert!(!marker.exists(), "{} was created", marker.display());
    }

    #[tokio::test]
    async fn cwd_is_used_and_must_exist() {
        let dir = tempfile::tempdir().unwrap();
        let mut s = spec("pwd");
        s.cwd = Some(dir.path().to_string_lossy().into_owned());
        let r = run(&s, EVENT, Duration::from_secs(5)).await;
        assert_eq!(r.outcome, Outcome::Allow);
        let expected = dir.path().canonicalize().unwrap();
        assert_eq!(
            r.metadata.stdout.as_deref().map(str::trim),
            Some(expected.to_string_lossy().as_ref())
        );

        let mut s = spec("true");
        s.cwd = Some("/nonexistent/agenthooks-cwd".to_owned());
        let r = run(&s, EVENT, Duration::from_secs(5)).await;
        assert_eq!(r.outcome, Outcome::Error);
        assert_eq!(r.error_kind, Some(ErrorKind::CwdMissing));
        assert!(r.reason.unwrap().contains("/nonexistent/agenthooks-cwd"));

        let file = tempfile::NamedTempFile::new().unwrap();
        let mut s = spec("true");
        s.cwd = Some(file.path().to_string_lossy().into_owned());
        let r = run(&s, EVENT, Duration::from_secs(5)).await;
        assert_eq!(r.error_kind, Some(ErrorKind::CwdMissing));
    }

    #[test]
    fn env_is_built_from_the_allowlist_only() {
        let host: HashMap<&str, &str> = [
            ("MY_VAR", "v1"),
            ("SECRET_TOKEN", "s3cr3t"),
            ("PATH", "/opt/evil/bin:/usr/bin"),
        ]
        .into_iter()
        .collect();
        let lookup = |n: &str| host.get(n).map(OsString::from);
        let names = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();

        // Listed and set → passed; listed and unset → absent; safe PATH added.
        let env = build_env(&names(&["MY_VAR", "UNSET_VAR"]), lookup);
        assert_eq!(
            env,
            vec![
                ("MY_VAR".to_owned(), OsString::from("v1")),
                ("PATH".to_owned(), OsString::from(SAFE_PATH)),
            ]
        );
        // PATH listed → the dispatcher's own PATH, no override.
        let env = build_env(&names(&["PATH"]), lookup);
        assert_eq!(
            env,
            vec![("PATH".to_owned(), OsString::from("/opt/evil/bin:/usr/bin"))]
        );
        // Empty list → empty environment.
        assert!(build_env(&[], lookup).is_empty());
        // Malformed names and duplicates are skipped.
        let env = build_env(&names(&["MY_VAR", "MY_VAR", "A=B", ""]), lookup);
        assert_eq!(env.len(), 2);
    }

    #[tokio::test]
    async fn empty_allowlist_runs_with_an_empty_environment() {
        // `env` still runs: sh falls back to its default search path.
        let r = run_cmd("env").await;
        assert_eq!(r.outcome, Outcome::Allow, "{r:?}");
        let out = r.metadata.stdout.unwrap();
        for line in out.lines() {
            // dash/bash may add PWD (and bash SHLVL/_) of its own; TMPDIR and HOME
            // are the run's private directory; nothing inherited.
            let name = line.split('=').next().unwrap();
            assert!(
                matches!(name, "PWD" | "SHLVL" | "_" | "OLDPWD" | "TMPDIR" | "HOME"),
                "unexpected variable {line:?}"
            );
        }
    }

    #[tokio::test]
    async fn safe_path_is_set_when_other_vars_are_listed() {
        let mut s = spec("echo \"$PATH\"");
        s.allowed_env_vars = vec!["AGENTHOOKS_SURELY_UNSET_VAR".to_owned()];
        let r = run(&s, EVENT, Duration::from_secs(5)).await;
        assert_eq!(
            r.metadata.stdout.as_deref(),
            Some("/usr/local/bin:/usr/bin:/bin\n")
        );
    }

    #[tokio::test]
    async fn timeout_kills_the_whole_group_and_leaves_no_process() {
        let pidfile = tmp_path("pgid");
        let cmd = format!(
            "echo $$ > {}; sleep 30 & sleep 30; echo '{{}}'",
            pidfile.display()
        );
        let started = Instant::now();
        let r = run(&spec(&cmd), EVENT, Duration::from_secs(1)).await;
        let took = started.elapsed();
        assert_eq!(r.outcome, Outcome::Timeout, "{r:?}");
        assert_eq!(r.error_kind, Some(ErrorKind::Timeout));
        assert_eq!(r.reason.as_deref(), Some("no answer within 1000 ms"));
        assert!(took >= Duration::from_millis(900), "{took:?}");
        assert!(took < Duration::from_secs(3), "{took:?}");

        let pgid = take_pgid(&pidfile);
        let left = wait_group_gone(pgid).await;
        assert!(left.is_empty(), "processes left in group {pgid}: {left:?}");
        assert!(!is_zombie_child_of_us(pgid), "sh {pgid} left as a zombie");
    }

    #[tokio::test]
    async fn a_background_process_holding_stdout_ends_with_sh() {
        // The run ends when sh exits: what it left behind (here a sleep that keeps stdout
        // open) is killed then, instead of holding the run until its timeout.
        let pidfile = tmp_path("pgid-hold");
        let cmd = format!("echo $$ > {}; sleep 30 & echo '{{}}'", pidfile.display());
        let started = Instant::now();
        let r = run(&spec(&cmd), EVENT, Duration::from_secs(5)).await;
        assert_eq!(r.outcome, Outcome::Allow, "{r:?}");
        assert!(
            started.elapsed() < Duration::from_secs(2),
            "{:?}",
            started.elapsed()
        );
        let pgid = take_pgid(&pidfile);
        let left = wait_group_gone(pgid).await;
        assert!(left.is_empty(), "{left:?}");
    }

    /// Live (not zombie) processes that have `marker` as an argument.
    fn processes_with_arg(marker: &str) -> Vec<(i32, String)> {
        let mut found = Vec::new();
        for entry in std::fs::read_dir("/proc").unwrap().flatten() {
            let Ok(pid) = entry.file_name().to_string_lossy().parse::<i32>() else {
                continue;
            };
            let Ok(cmdline) = std::fs::read(format!("/proc/{pid}/cmdline")) else {
                continue;
            };
            if !cmdline.split(|&b| b == 0).any(|a| a == marker.as_bytes()) {
                continue;
            }
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
            let state = stat.rfind(')').and_then(|i| stat[i + 2..].chars().next());
            if !matches!(state, Some('Z' | 'X') | None) {
                found.push((pid, String::from_utf8_lossy(&cmdline).replace('\0', " ")));
            }
        }
        found
    }

    /// A hook script that starts three `sleep MARKER` processes that try to outlive it
    /// (`setsid`, a double fork, both), waits until all three wrote their pid to
    /// `pids`, then runs `tail` (e.g. `sleep 30` or `echo '{}'`).
    fn escaping_script(dir: &std::path::Path, marker: &str, tail: &str) -> CommandSpec {
        let pids = dir.join("pids");
        let script = dir.join("escape.sh");
        let p = pids.display();
        std::fs::write(
            &script,
            format!(
                "setsid sh -c 'echo $$ >> {p}; exec sleep {marker}' </dev/null >/dev/null 2>&1 &\n\
                 ( sh -c 'echo $$ >> {p}; exec sleep {marker}' </dev/null >/dev/null 2>&1 & )\n\
                 setsid sh -c '( sh -c \"echo \\$\\$ >> {p}; exec sleep {marker}\" </dev/null >/dev/null 2>&1 & )' &\n\
                 while [ \"$(wc -l < {p} 2>/dev/null || echo 0)\" -lt 3 ]; do sleep 0.01; done\n\
                 {tail}\n"
            ),
        )
        .unwrap();
        spec(&format!("sh {}", script.display()))
    }

    fn escaped_pids(dir: &std::path::Path) -> Vec<i32> {
        std::fs::read_to_string(dir.join("pids"))
            .unwrap()
            .lines()
            .map(|l| l.trim().parse().unwrap())
            .collect()
    }

    fn marker() -> String {
        // `sleep` takes fractional seconds; the fraction makes the argument unique.
        format!("600.{}", uuid::Uuid::new_v4().as_u128() % 1_000_000_007)
    }

    #[tokio::test]
    async fn setsid_and_double_forks_do_not_outlive_a_finished_hook() {
        let dir = tempfile::tempdir().unwrap();
        let m = marker();
        let s = escaping_script(dir.path(), &m, "echo '{}'");
        let started = Instant::now();
        let r = run(&s, EVENT, Duration::from_secs(5)).await;
        assert_eq!(r.outcome, Outcome::Allow, "{r:?}");
        assert!(
            started.elapsed() < Duration::from_secs(3),
            "{:?}",
            started.elapsed()
        );
        let pids = escaped_pids(dir.path());
        assert_eq!(pids.len(), 3, "{pids:?}");
        // At once: the handler returns only after the tree is gone.
        let left = processes_with_arg(&m);
        assert!(
            left.is_empty(),
            "left running after the hook returned: {left:?}"
        );
    }

    #[tokio::test]
    async fn timeout_kills_a_tree_that_left_its_group() {
        let dir = tempfile::tempdir().unwrap();
        let m = marker();
        let s = escaping_script(dir.path(), &m, "sleep 30");
        let started = Instant::now();
        let r = run(&s, EVENT, Duration::from_millis(1500)).await;
        assert_eq!(r.outcome, Outcome::Timeout, "{r:?}");
        assert!(
            started.elapsed() < Duration::from_secs(4),
            "{:?}",
            started.elapsed()
        );
        assert_eq!(escaped_pids(dir.path()).len(), 3);
        let left = processes_with_arg(&m);
        assert!(left.is_empty(), "left running after the timeout: {left:?}");
    }

    #[tokio::test]
    async fn dropping_the_run_kills_a_tree_that_left_its_group() {
        let dir = tempfile::tempdir().unwrap();
        let m = marker();
        let s = escaping_script(dir.path(), &m, "sleep 30");
        let fut = run(&s, EVENT, Duration::from_secs(10));
        // Cancel from outside, as the chain budget would, once all three started.
        let _ = tokio::time::timeout(Duration::from_millis(1500), fut).await;
        assert_eq!(escaped_pids(dir.path()).len(), 3);
        let mut left = processes_with_arg(&m);
        for _ in 0..100 {
            if left.is_empty() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
            left = processes_with_arg(&m);
        }
        assert!(
            left.is_empty(),
            "left running after the run was dropped: {left:?}"
        );
    }

    #[tokio::test]
    async fn each_run_has_its_own_private_directory_removed_after() {
        let r = run_cmd(r#"printf '%s %s ' "$TMPDIR" "$HOME"; pwd; stat -c %a "$TMPDIR""#).await;
        assert_eq!(r.outcome, Outcome::Allow, "{r:?}");
        let out = r.metadata.stdout.unwrap();
        let fields: Vec<&str> = out.split_whitespace().collect();
        assert_eq!(fields.len(), 4, "{out:?}");
        let (tmp, home, cwd, mode) = (fields[0], fields[1], fields[2], fields[3]);
        assert!(tmp.contains("agenthooks-run-"), "{tmp}");
        assert_eq!(home, tmp);
        assert_eq!(
            std::path::Path::new(cwd).canonicalize().ok(),
            None,
            "the working directory {cwd} was removed"
        );
        assert!(
            cwd.ends_with(tmp.rsplit('/').next().unwrap()),
            "{cwd} vs {tmp}"
        );
        assert_eq!(mode, "700");
        assert!(!std::path::Path::new(tmp).exists(), "{tmp} left behind");

        let other = run_cmd(r#"printf %s "$TMPDIR""#).await;
        assert_ne!(
            other.metadata.stdout.as_deref(),
            Some(tmp),
            "dirs are per run"
        );
    }

    #[tokio::test]
    async fn timeout_of_a_busy_foreground_command() {
        let pidfile = tmp_path("pgid-fg");
        let cmd = format!("echo $$ > {}; sleep 30; echo done", pidfile.display());
        let started = Instant::now();
        let r = run(&spec(&cmd), EVENT, Duration::from_millis(300)).await;
        assert_eq!(r.outcome, Outcome::Timeout);
        assert!(started.elapsed() < Duration::from_secs(2));
        let pgid = take_pgid(&pidfile);
        let left = wait_group_gone(pgid).await;
        assert!(left.is_empty(), "{left:?}");
        assert!(!is_zombie_child_of_us(pgid));
    }

    #[tokio::test]
    async fn detached_background_processes_die_with_the_hook() {
        let pidfile = tmp_path("pgid-bg");
        let cmd = format!(
            "echo $$ > {}; sleep 30 >/dev/null 2>&1 </dev/null & echo '{{}}'",
            pidfile.display()
        );
        let started = Instant::now();
        let r = run(&spec(&cmd), EVENT, Duration::from_secs(5)).await;
        assert_eq!(r.outcome, Outcome::Allow, "{r:?}");
        assert!(started.elapsed() < Duration::from_secs(2));
        let pgid = take_pgid(&pidfile);
        let left = wait_group_gone(pgid).await;
        assert!(left.is_empty(), "{left:?}");
    }

    #[tokio::test]
    async fn dropping_the_run_kills_the_group() {
        let pidfile = tmp_path("pgid-drop");
        let cmd = format!("echo $$ > {}; sleep 30", pidfile.display());
        let s = spec(&cmd);
        let fut = run(&s, EVENT, Duration::from_secs(10));
        // Cancel from outside, as the chain budget would.
        let _ = tokio::time::timeout(Duration::from_millis(300), fut).await;
        let pgid = take_pgid(&pidfile);
        let left = wait_group_gone(pgid).await;
        assert!(left.is_empty(), "{left:?}");
    }

    #[tokio::test]
    async fn huge_stdout_is_an_error_and_stops_quickly() {
        let started = Instant::now();
        let r = run(
            &spec("head -c 200000000 /dev/zero"),
            EVENT,
            Duration::from_secs(10),
        )
        .await;
        assert_eq!(r.outcome, Outcome::Error);
        assert_eq!(r.error_kind, Some(ErrorKind::OutputTooLarge));
        assert!(r.reason.unwrap().contains("stdout"));
        assert!(
            started.elapsed() < Duration::from_secs(3),
            "{:?}",
            started.elapsed()
        );
    }

    #[tokio::test]
    async fn huge_stderr_is_an_error() {
        let r = run(
            &spec("head -c 5000000 /dev/zero >&2"),
            EVENT,
            Duration::from_secs(10),
        )
        .await;
        assert_eq!(r.outcome, Outcome::Error);
        assert_eq!(r.error_kind, Some(ErrorKind::OutputTooLarge));
        assert!(r.reason.unwrap().contains("stderr"));
    }

    #[tokio::test]
    async fn output_exactly_at_the_cap_is_fine() {
        let r = run(
            &spec(&format!("head -c {MAX_OUTPUT_BYTES} /dev/zero")),
            EVENT,
            Duration::from_secs(10),
        )
        .await;
        assert_eq!(r.outcome, Outcome::Allow, "{:?}", r.reason);
        assert_eq!(r.metadata.stdout_len, Some(MAX_OUTPUT_BYTES));
        assert!(r.metadata.stdout.unwrap().len() <= crate::handlers::MAX_REASON_BYTES);
    }

    #[test]
    fn claude_code_answers_are_read_as_claude_code_reads_them() {
        use crate::handlers::Outcome::{Allow, Ask, Block, Error};
        let pd = |d: &str| {
            format!(
                r#"{{"hookSpecificOutput":{{"hookEventName":"PreToolUse","permissionDecision":"{d}","permissionDecisionReason":"why"}}}}"#
            )
        };
        // (stdout, stderr, outcome, reason)
        let rows: Vec<(String, &str, Outcome, Option<&str>)> = vec![
            ("".into(), "", Allow, None),
            ("plain text".into(), "", Allow, None),
            ("{}".into(), "", Allow, None),
            (pd("allow"), "", Allow, None),
            (pd("defer"), "", Allow, None),
            (pd("deny"), "", Block, Some("why")),
            (
                r#"{"hookSpecificOutput":{"permissionDecision":"deny"}}"#.into(),
                "from stderr",
                Block,
                Some("from stderr"),
            ),
            (pd("ask"), "", Ask, Some("why")),
            (
                r#"{"decision":"block","reason":"no"}"#.into(),
                "",
                Block,
                Some("no"),
            ),
            (r#"{"decision":"approve"}"#.into(), "", Allow, None),
            (
                r#"{"continue":false,"stopReason":"halt"}"#.into(),
                "",
                Block,
                Some("halt"),
            ),
            // What Claude Code's schema refuses is an error here too (the issue's report).
            (r#"{"decision":"allow"}"#.into(), "", Error, None),
            (pd("maybe"), "", Error, None),
        ];
        for (stdout, stderr, outcome, reason) in rows {
            let r = claude_code_output(stdout.as_bytes(), stderr);
            assert_eq!(r.outcome, outcome, "{stdout}");
            if matches!(outcome, Block | Ask) {
                assert_eq!(r.reason.as_deref(), reason, "{stdout}");
            }
        }
        let r = claude_code_output(
            br#"{"hookSpecificOutput":{"hookEventName":"PreToolUse","additionalContext":"ctx","updatedInput":{"command":"ls"}}}"#,
            "",
        );
        assert_eq!(
            (r.outcome, r.additional_context.as_deref(), r.updated_input),
            (
                Allow,
                Some("ctx"),
                Some(serde_json::json!({"command": "ls"}))
            )
        );
        // Exit 2 still blocks with stderr, whatever the dialect.
        let r = interpret(
            ExitStatus::from_raw(2 << 8),
            b"",
            b"nope",
            CommandDialect::ClaudeCode,
        );
        assert_eq!((r.outcome, r.reason.as_deref()), (Block, Some("nope")));
    }

    #[test]
    fn interpret_maps_exit_statuses() {
        let st = |code: i32| ExitStatus::from_raw(code << 8);
        assert_eq!(
            interpret(st(0), b"", b"", CommandDialect::Agenthooks).outcome,
            Outcome::Allow
        );
        assert_eq!(
            interpret(st(2), b"", b"x", CommandDialect::Agenthooks).outcome,
            Outcome::Block
        );
        assert_eq!(
            interpret(st(1), b"", b"", CommandDialect::Agenthooks).error_kind,
            Some(ErrorKind::ExitStatus)
        );
        assert_eq!(
            interpret(st(126), b"", b"", CommandDialect::Agenthooks).error_kind,
            Some(ErrorKind::SpawnFailed)
        );
        assert_eq!(
            interpret(st(127), b"", b"", CommandDialect::Agenthooks).error_kind,
            Some(ErrorKind::SpawnFailed)
        );
        // Raw status 9 = killed by SIGKILL.
        let killed = interpret(
            ExitStatus::from_raw(9),
            b"",
            b"",
            CommandDialect::Agenthooks,
        );
        assert_eq!(killed.error_kind, Some(ErrorKind::ExitStatus));
        assert!(killed.reason.unwrap().contains("signal 9"));
        // Exit 2 wins over a stdout that says allow.
        let r = interpret(
            st(2),
            br#"{"continue": true}"#,
            b"nope",
            CommandDialect::Agenthooks,
        );
        assert_eq!(r.outcome, Outcome::Block);
        assert_eq!(r.reason.as_deref(), Some("nope"));
        // Non-UTF-8 output is kept lossily.
        let r = interpret(st(0), b"\xff\xfe", b"", CommandDialect::Agenthooks);
        assert_eq!(r.metadata.stdout_len, Some(2));
        assert_eq!(r.metadata.stdout.as_deref(), Some("\u{fffd}\u{fffd}"));
    }
}
