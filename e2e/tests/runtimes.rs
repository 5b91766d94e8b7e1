//! The runtimes tier: the real agent runtimes (Claude Code, Codex CLI, Gemini CLI; versions
//! in `scripts/runtimes.pins`) driven headless and offline against stand-in model servers
//! (`agenthooks_e2e::standin`), their hooks wired to a standalone dispatcher
//! (docs/runtimes.md).
//!
//! Re-run one runtime: `cargo test -p agenthooks-e2e --test runtimes -- claude_code`
//! (or `codex`, `gemini`).

use std::path::Path;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use agenthooks_e2e::runtimes::{
    HookWiring, Outcome, Runtime, RuntimeRun, StandaloneDispatcher, shell_hook,
};
use agenthooks_e2e::stack::log_dir;
use agenthooks_e2e::standin::{Script, StandIn, Turn};
use serde_json::{Value, json};

/// The prompt of every run (the stand-in's script decides what the "model" does).
const PROMPT: &str = "Do the scripted task.";
/// The reason the shell guard gives, which every runtime must show the model.
const REASON: &str = "destructive command refused by policy";
/// The guard, as its rows and reasons name it.
const GUARD: &str = "agenthooks-system/rm-guard";
/// The reason of the guard that refuses `depth-probe` commands from depth 3 on.
const DEPTH_REASON: &str = "refused at sub-agent depth 3 or deeper";
/// The hook that sees every shell call (one allow row per call).
const SEEN: &str = "agenthooks-system/shell-seen";
/// What the context hook adds for the model.
const NOTE: &str = "NOTE-7f3a: this repository is frozen for the release";
/// How long audit rows may take to appear after the answer.
const ROWS_WITHIN: Duration = Duration::from_secs(10);

/// The hooks of the tier: one shell guard for all three runtimes, one that sees every shell
/// call, one adding context, one rewriting a command.
fn tier_hooks() -> Vec<Value> {
    vec![
        shell_hook(
            "rm-guard",
            100,
            Some(r#"tool.command.contains("rm -rf")"#),
            &format!("echo \"{REASON}\" >&2; exit 2"),
        ),
        shell_hook("shell-seen", 1, None, "cat >/dev/null; exit 0"),
        shell_hook(
            "depth-guard",
            90,
            Some(r#"tool.command.contains("depth-probe") && depth >= 3"#),
            &format!("echo \"{DEPTH_REASON}\" >&2; exit 2"),
        ),
        shell_hook(
            "context-note",
            50,
            Some(r#"tool.command.contains("ctx-probe")"#),
            &format!(
                "cat >/dev/null; printf '%s' '{}'",
                json!({"additionalContext": NOTE})
            ),
        ),
        shell_hook(
            "rewrite",
            50,
            Some(r#"tool.command.contains("rewrite-me")"#),
            &format!(
                "cat >/dev/null; printf '%s' '{}'",
                json!({"updatedInput": {"command": "touch rewritten-by-agenthooks.txt"}})
            ),
        ),
    ]
}

/// The dispatcher shared by the scenarios of this file.
fn dispatcher() -> &'static StandaloneDispatcher {
    static D: OnceLock<StandaloneDispatcher> = OnceLock::new();
    D.get_or_init(|| {
        StandaloneDispatcher::start("runtimes-tier", &tier_hooks(), &log_dir("runtimes"))
    })
}

/// Prints how long a scenario's run took (collected into docs/runtimes.md).
fn timing(rt: Runtime, scenario: &str, out: &Outcome) {
    eprintln!(
        "[runtimes] {} {} {scenario}: {:.1}s",
        rt.dialect(),
        rt.pin().version,
        out.elapsed.as_secs_f64()
    );
}

/// The session of a run, or a failure naming the run.
fn session(out: &Outcome) -> String {
    out.session_id()
        .unwrap_or_else(|| panic!("no session id in the transcript\n{}", out.describe()))
}

/// A directory `precious/` with a file in the project: what `rm -rf` must not remove.
fn precious(run: &RuntimeRun) -> std::path::PathBuf {
    let dir = run.project.join("precious");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("data.txt"), "keep me").unwrap();
    dir.join("data.txt")
}

/// The hook payloads a recording command hook appended to `file`, one JSON document each.
fn recorded_payloads(file: &Path) -> Vec<Value> {
    let text = std::fs::read_to_string(file).unwrap_or_default();
    serde_json::Deserializer::from_str(&text)
        .into_iter::<Value>()
        .filter_map(Result::ok)
        .collect()
}

/// Without any dispatcher: the runtime, against its stand-in, runs `echo` and its hook (a
/// command recording its stdin) sees the call. Proves install, stand-in, settings and (for
/// Codex) the trust step.
fn smoke(rt: Runtime) {
    let marker = format!("smoke-{}", rt.dialect());
    let standin = StandIn::start(Script::new(vec![
        rt.shell_call(&format!("echo {marker}")),
        Turn::text("Finished."),
    ]));
    let record = tempfile::NamedTempFile::new().unwrap();
    let run = RuntimeRun::new(
        rt,
        &standin,
        HookWiring::Command(format!("cat >> '{}'", record.path().display())),
    )
    .allow(&["echo"]);
    let out: Outcome = run.run("run the command");
    assert_eq!(out.exit_code, Some(0), "{}", out.describe());
    let payloads = recorded_payloads(record.path());
    let pre = payloads
        .iter()
        .find(|p| p["tool_name"] == rt.hook_shell_tool())
        .unwrap_or_else(|| panic!("no shell payload among {payloads:?}\n{}", out.describe()));
    assert_eq!(
        pre["tool_input"]["command"].as_str(),
        Some(format!("echo {marker}").as_str()),
        "{pre}"
    );
    assert_eq!(
        pre["hook_event_name"].as_str(),
        Some(match rt {
            Runtime::GeminiCli => "BeforeTool",
            _ => "PreToolUse",
        })
    );
    assert_eq!(pre["session_id"].as_str(), out.session_id().as_deref());
    if rt == Runtime::Codex {
        assert!(out.trusted_hooks >= 1, "{}", out.describe());
    }
    // The command ran: its output came back to the model as the tool result.
    let results = standin.tool_results();
    assert!(
        results.iter().any(|r| r.contains(&marker)),
        "tool results {results:?}\n{}",
        out.describe()
    );
    eprintln!(
        "[runtimes] smoke {} {}: {:.1}s",
        rt.dialect(),
        rt.pin().version,
        out.elapsed.as_secs_f64()
    );
}

#[test]
fn claude_code_smoke_without_dispatcher() {
    smoke(Runtime::ClaudeCode);
}

#[test]
fn codex_smoke_without_dispatcher() {
    smoke(Runtime::Codex);
}

#[test]
fn gemini_smoke_without_dispatcher() {
    smoke(Runtime::GeminiCli);
}

/// `rm -rf precious` is refused by the one shell guard: the directory stays, the model is
/// shown our reason naming the guard, one block row.
fn blocks_rm_rf(rt: Runtime) {
    let d = dispatcher();
    let standin = StandIn::start(Script::new(vec![
        rt.shell_call("rm -rf precious"),
        Turn::text("Finished."),
    ]));
    // The runtime's own rules allow rm: only the hook stands in the way.
    let run = RuntimeRun::new(rt, &standin, d.wiring(rt)).allow(&["rm"]);
    let kept = precious(&run);
    let out = run.run(PROMPT);
    timing(rt, "blocks rm -rf", &out);
    assert_eq!(out.exit_code, Some(0), "{}", out.describe());
    assert!(kept.exists(), "rm -rf went through\n{}", out.describe());
    let refusals: Vec<String> = standin
        .tool_results()
        .into_iter()
        .filter(|r| r.contains(REASON))
        .collect();
    assert_eq!(
        refusals.len(),
        1,
        "{:?}\n{}",
        standin.tool_results(),
        out.describe()
    );
    assert!(
        refusals[0].contains(GUARD),
        "the reason names the guard: {}",
        refusals[0]
    );
    if rt != Runtime::Codex {
        // Codex's --json stream has no item for a refused call; the model request has it.
        assert!(out.transcript_text().contains(REASON), "{}", out.describe());
    }
    let rows = d.wait_rows(&session(&out), Some(GUARD), Some("block"), 1, ROWS_WITHIN);
    assert_eq!(rows.len(), 1, "{rows:?}\n{}", d.proc.log_tail(30));
}

#[test]
fn claude_code_blocks_rm_rf() {
    blocks_rm_rf(Runtime::ClaudeCode);
}

#[test]
fn codex_blocks_rm_rf() {
    blocks_rm_rf(Runtime::Codex);
}

#[test]
fn gemini_blocks_rm_rf() {
    blocks_rm_rf(Runtime::GeminiCli);
}

/// A harmless call is allowed (`{}`), and the runtime's own permission rules still hold:
/// `echo` (allowed by a rule) runs, `mkdir` (no rule) is refused by the runtime itself
/// after our hook allowed it. Codex runs without rules here, so only the first half.
fn allows_harmless_keeping_own_rules(rt: Runtime) {
    let d = dispatcher();
    let mut turns = vec![rt.shell_call("echo harmless-ok")];
    if rt != Runtime::Codex {
        turns.push(rt.shell_call("mkdir not-allowed-dir"));
    }
    turns.push(Turn::text("Finished."));
    let standin = StandIn::start(Script::new(turns));
    let run = RuntimeRun::new(rt, &standin, d.wiring(rt)).allow(&["echo"]);
    let out = run.run(PROMPT);
    timing(rt, "allows harmless, own rules hold", &out);
    assert_eq!(out.exit_code, Some(0), "{}", out.describe());
    let results = standin.tool_results();
    assert!(
        results.iter().any(|r| r.contains("harmless-ok")),
        "{results:?}\n{}",
        out.describe()
    );
    let calls = if rt == Runtime::Codex { 1 } else { 2 };
    if rt != Runtime::Codex {
        assert!(
            !out.project.join("not-allowed-dir").exists(),
            "{}",
            out.describe()
        );
        assert_eq!(results.len(), 2, "{results:?}");
        assert!(
            !results[1].contains(REASON),
            "refused by the runtime, not by us: {results:?}"
        );
    }
    // Our hook saw (and allowed) every call, the refused one included.
    let rows = d.wait_rows(&session(&out), Some(SEEN), None, calls, ROWS_WITHIN);
    assert_eq!(rows.len(), calls, "{rows:?}");
    assert!(rows.iter().all(|r| r["decision"] == "allow"), "{rows:?}");
}

#[test]
fn claude_code_allows_harmless_keeping_own_rules() {
    let rt = Runtime::ClaudeCode;
    allows_harmless_keeping_own_rules(rt);
    // The allow that leaves Claude Code's own rules in charge is exactly `{}`.
    let payload = json!({"session_id": "direct-allow", "transcript_path": "/tmp/t.jsonl",
        "cwd": "/tmp", "hook_event_name": "PreToolUse", "tool_name": "Bash",
        "tool_input": {"command": "echo hi"}, "tool_use_id": "toolu_1"});
    assert_eq!(
        dispatcher().post_hook(rt.dialect(), &payload),
        (200, json!({}))
    );
}

#[test]
fn codex_allows_harmless() {
    allows_harmless_keeping_own_rules(Runtime::Codex);
}

#[test]
fn gemini_allows_harmless_keeping_own_rules() {
    allows_harmless_keeping_own_rules(Runtime::GeminiCli);
}

/// A hook's `additionalContext` reaches the model in its next request.
fn additional_context(rt: Runtime) {
    let d = dispatcher();
    let standin = StandIn::start(Script::new(vec![
        rt.shell_call("echo ctx-probe"),
        Turn::text("Finished."),
    ]));
    let run = RuntimeRun::new(rt, &standin, d.wiring(rt)).allow(&["echo"]);
    let out = run.run(PROMPT);
    timing(rt, "additionalContext", &out);
    assert_eq!(out.exit_code, Some(0), "{}", out.describe());
    // The request that carries the call's result carries the note; the one before did not.
    let requests = standin.model_requests();
    let after: Vec<_> = requests
        .iter()
        .filter(|r| r.tool_results().iter().any(|t| t.contains("ctx-probe")))
        .collect();
    assert!(!after.is_empty(), "{}", out.describe());
    assert!(
        after.iter().all(|r| r.text().contains(NOTE)),
        "the model never saw the note: {}\n{}",
        after[0].text(),
        out.describe()
    );
    assert!(!requests[0].text().contains(NOTE));
    assert!(
        standin
            .tool_results()
            .iter()
            .any(|r| r.contains("ctx-probe"))
    );
    let rows = d.wait_rows(
        &session(&out),
        Some("agenthooks-system/context-note"),
        None,
        1,
        ROWS_WITHIN,
    );
    assert_eq!(rows.len(), 1, "{rows:?}");
}

#[test]
fn claude_code_additional_context() {
    additional_context(Runtime::ClaudeCode);
}

#[test]
fn codex_additional_context() {
    additional_context(Runtime::Codex);
}

/// A hook rewrites the command (`updatedInput`): the rewritten one ran, the original did
/// not.
fn updated_input(rt: Runtime) {
    let d = dispatcher();
    let standin = StandIn::start(Script::new(vec![
        rt.shell_call("touch rewrite-me.txt"),
        Turn::text("Finished."),
    ]));
    let run = RuntimeRun::new(rt, &standin, d.wiring(rt)).allow(&["touch"]);
    let out = run.run(PROMPT);
    timing(rt, "updatedInput", &out);
    assert_eq!(out.exit_code, Some(0), "{}", out.describe());
    assert!(
        out.project.join("rewritten-by-agenthooks.txt").exists(),
        "the rewritten command ran\n{}",
        out.describe()
    );
    assert!(
        !out.project.join("rewrite-me.txt").exists(),
        "{}",
        out.describe()
    );
    let rows = d.wait_rows(
        &session(&out),
        Some("agenthooks-system/rewrite"),
        None,
        1,
        ROWS_WITHIN,
    );
    assert_eq!(rows.len(), 1, "{rows:?}");
}

#[test]
fn claude_code_updated_input() {
    updated_input(Runtime::ClaudeCode);
}

#[test]
fn codex_updated_input() {
    updated_input(Runtime::Codex);
}

#[test]
fn gemini_updated_input() {
    updated_input(Runtime::GeminiCli);
}

/// Claude Code: the main thread starts a sub-agent, which starts one, which starts one;
/// the third asks for `rm -rf precious`: refused there too. A guard on `depth >= 3`
/// refuses the third's probe and not the main thread's: the dispatcher rebuilt the depth
/// from SubagentStart/SubagentStop.
#[test]
fn claude_code_blocks_three_sub_agents_deep() {
    let rt = Runtime::ClaudeCode;
    let d = dispatcher();
    let agent = |level: u32| {
        Turn::tool(
            "Agent",
            json!({"description": format!("level {level}"),
                   "prompt": format!("LEVEL-{level}: do the scripted task"),
                   "subagent_type": "general-purpose"}),
        )
    };
    let done = || Turn::text("Finished.");
    let standin = StandIn::start(
        Script::new(vec![rt.shell_call("echo depth-probe-0"), agent(1), done()])
            .lane("LEVEL-1:", vec![agent(2), done()])
            .lane("LEVEL-2:", vec![agent(3), done()])
            .lane(
                "LEVEL-3:",
                vec![
                    rt.shell_call("echo depth-probe-3"),
                    rt.shell_call("rm -rf precious"),
                    done(),
                ],
            ),
    );
    let run = RuntimeRun::new(rt, &standin, d.wiring(rt)).allow(&["rm"]);
    let kept = precious(&run);
    let out = run.run(PROMPT);
    timing(rt, "blocks 3 sub-agents deep", &out);
    assert_eq!(out.exit_code, Some(0), "{}", out.describe());
    assert!(kept.exists(), "{}", out.describe());
    // Each level asked for its turn; the third one was shown our refusal.
    let lanes: Vec<Option<String>> = standin
        .model_requests()
        .iter()
        .map(|r| r.lane.clone())
        .collect();
    for l in ["LEVEL-1:", "LEVEL-2:", "LEVEL-3:"] {
        assert!(
            lanes.contains(&Some(l.to_string())),
            "{l} never asked: {lanes:?}"
        );
    }
    let deepest: Vec<String> = standin
        .model_requests()
        .iter()
        .filter(|r| r.lane.as_deref() == Some("LEVEL-3:"))
        .flat_map(|r| r.tool_results())
        .collect();
    assert!(
        deepest.iter().any(|r| r.contains(REASON)),
        "{deepest:?}\n{}",
        out.describe()
    );
    // The dispatcher knew the depth: the depth guard refused the probe at depth 3 only.
    assert!(
        deepest.iter().any(|r| r.contains(DEPTH_REASON)),
        "{deepest:?}"
    );
    let main: Vec<String> = standin
        .model_requests()
        .iter()
        .filter(|r| r.lane.is_none())
        .flat_map(|r| r.tool_results())
        .collect();
    assert!(
        main.iter()
            .any(|r| r.contains("depth-probe-0") && !r.contains(DEPTH_REASON)),
        "{main:?}"
    );
    let rows = d.wait_rows(&session(&out), Some(GUARD), Some("block"), 1, ROWS_WITHIN);
    assert_eq!(rows.len(), 1, "{rows:?}");
    eprintln!("[runtimes] claude-code depth-3 block row: {}", rows[0]);
}

/// A model that asks for the refused call ten times never gets it through: every call is
/// refused, the directory stays, one block row per call.
fn retries_never_get_through(rt: Runtime) {
    let d = dispatcher();
    // Gemini CLI stops a turn on its fifth identical tool call ("Loop detected, stopping
    // execution"): there the retries differ in their description only, the command is
    // the same.
    let mut turns: Vec<Turn> = (0..10)
        .map(|i| match rt {
            Runtime::GeminiCli => Turn::tool(
                "run_shell_command",
                json!({"command": "rm -rf precious", "description": format!("attempt {i}")}),
            ),
            _ => rt.shell_call("rm -rf precious"),
        })
        .collect();
    turns.push(Turn::text("Finished."));
    let standin = StandIn::start(Script::new(turns));
    let run = RuntimeRun::new(rt, &standin, d.wiring(rt)).allow(&["rm"]);
    let kept = precious(&run);
    let out = run.run(PROMPT);
    timing(rt, "10 retries refused", &out);
    assert!(kept.exists(), "{}", out.describe());
    // The calls the model made.
    let asked = standin
        .model_requests()
        .iter()
        .filter(|r| matches!(r.answer, Some(Turn::Tool { .. })))
        .count();
    // The last request holds every call's result: each one our refusal.
    let last = standin
        .model_requests()
        .last()
        .cloned()
        .expect("a model request");
    let results = last.tool_results();
    let refused = results.iter().filter(|r| r.contains(REASON)).count();
    let rows = d.wait_rows(
        &session(&out),
        Some(GUARD),
        Some("block"),
        asked,
        ROWS_WITHIN,
    );
    eprintln!(
        "[runtimes] {} retries: asked {asked}, refused {refused}, rows {}",
        rt.dialect(),
        rows.len()
    );
    assert_eq!(asked, 10, "{}", out.describe());
    assert_eq!(rows.len(), asked, "one block row per call");
    // Every call came back refused: the model was never told one ran.
    assert_eq!((results.len(), refused), (asked, asked), "{results:?}");
}

#[test]
fn claude_code_retries_never_get_through() {
    retries_never_get_through(Runtime::ClaudeCode);
}

#[test]
fn codex_retries_never_get_through() {
    retries_never_get_through(Runtime::Codex);
}

#[test]
fn gemini_retries_never_get_through() {
    retries_never_get_through(Runtime::GeminiCli);
}

/// The dispatcher is gone (killed): the runtime refuses the call. `wiring` picks Claude
/// Code's http hook (`onFailure: "block"`) or the shim (exit 2).
fn refuses_when_dispatcher_down(rt: Runtime, http: bool) {
    let logs = log_dir("runtimes-down");
    let mut down = StandaloneDispatcher::start("runtimes-down", &tier_hooks(), &logs);
    let wiring = if http {
        down.http_wiring()
    } else {
        down.shim_wiring()
    };
    down.kill();
    let standin = StandIn::start(Script::new(vec![
        rt.shell_call("touch made-while-down.txt"),
        Turn::text("Finished."),
    ]));
    let run = RuntimeRun::new(rt, &standin, wiring).allow(&["touch"]);
    let started = Instant::now();
    let out = run.run(PROMPT);
    timing(
        rt,
        if http {
            "dispatcher down (http)"
        } else {
            "dispatcher down (shim)"
        },
        &out,
    );
    assert!(started.elapsed() < Duration::from_secs(60));
    assert!(
        !out.project.join("made-while-down.txt").exists(),
        "the call ran with the dispatcher down\n{}",
        out.describe()
    );
    let results = standin.tool_results();
    assert_eq!(results.len(), 1, "{results:?}\n{}", out.describe());
    // Refused for the failure, not by a policy: Claude Code's onFailure, or the shim's
    // reason (exit 2).
    let why = if http {
        "blocking because onFailure is \"block\""
    } else {
        "could not be reached"
    };
    assert!(results[0].contains(why), "{results:?}");
    eprintln!(
        "[runtimes] {} down ({}): model saw {:?}",
        rt.dialect(),
        if http { "http" } else { "shim" },
        results[0]
    );
}

#[test]
fn claude_code_refuses_when_dispatcher_down_http() {
    refuses_when_dispatcher_down(Runtime::ClaudeCode, true);
}

#[test]
fn claude_code_refuses_when_dispatcher_down_shim() {
    refuses_when_dispatcher_down(Runtime::ClaudeCode, false);
}

#[test]
fn codex_refuses_when_dispatcher_down() {
    refuses_when_dispatcher_down(Runtime::Codex, false);
}

#[test]
fn gemini_refuses_when_dispatcher_down() {
    refuses_when_dispatcher_down(Runtime::GeminiCli, false);
}

/// Without the trust step Codex skips our hook without a word: the run "succeeds", the
/// command the `rewrite` hook would have rewritten runs as the model asked — and the tier
/// notices, because the dispatcher never saw the session (the check every trusted scenario
/// passes). A command Codex's own rules let through is used: Codex 0.171.0 refuses
/// `rm -rf` by itself ("rm -f style commands are not permitted"), hook or not.
#[test]
fn codex_untrusted_hook_skip_is_caught() {
    let rt = Runtime::Codex;
    let d = dispatcher();
    let standin = StandIn::start(Script::new(vec![
        rt.shell_call("touch rewrite-me.txt"),
        Turn::text("Finished."),
    ]));
    let run = RuntimeRun::new(rt, &standin, d.wiring(rt)).without_codex_trust();
    let out = run.run(PROMPT);
    timing(rt, "untrusted hook skipped", &out);
    assert_eq!(out.exit_code, Some(0), "{}", out.describe());
    assert_eq!(out.trusted_hooks, 0);
    assert!(
        out.project.join("rewrite-me.txt").exists()
            && !out.project.join("rewritten-by-agenthooks.txt").exists(),
        "Codex ran the untrusted hook after all?\n{}",
        out.describe()
    );
    assert!(
        !d.saw_session(&session(&out), Duration::from_secs(3)),
        "the dispatcher saw an untrusted hook's call"
    );
}

/// Codex: the main thread spawns a sub-agent (`spawn_agent`), which spawns one, which
/// spawns one; the third asks for `rm -rf precious`: refused there too, and the depth
/// guard refuses the third's probe only.
#[test]
fn codex_blocks_three_sub_agents_deep() {
    let rt = Runtime::Codex;
    let d = dispatcher();
    let spawn = |level: u32| {
        Turn::tool(
            "spawn_agent",
            json!({"message": format!("LEVEL-{level}: do the scripted task"), "fork_context": false}),
        )
        .in_namespace("multi_agent_v1")
    };
    let wait = || {
        Turn::tool(
            "wait_agent",
            json!({"targets": [Turn::LAST_RESULT_ID], "timeout_ms": 60000}),
        )
        .in_namespace("multi_agent_v1")
    };
    let done = || Turn::text("Finished.");
    let standin = StandIn::start(
        Script::new(vec![
            rt.shell_call("echo depth-probe-0"),
            spawn(1),
            wait(),
            done(),
        ])
        .lane("LEVEL-1:", vec![spawn(2), wait(), done()])
        .lane("LEVEL-2:", vec![spawn(3), wait(), done()])
        .lane(
            "LEVEL-3:",
            vec![
                rt.shell_call("echo depth-probe-3"),
                rt.shell_call("rm -rf precious"),
                done(),
            ],
        ),
    );
    let run = RuntimeRun::new(rt, &standin, d.wiring(rt)).codex_config("[agents]\nmax_depth = 3");
    let kept = precious(&run);
    let out = run.run(PROMPT);
    timing(rt, "blocks 3 sub-agents deep", &out);
    assert_eq!(out.exit_code, Some(0), "{}", out.describe());
    assert!(kept.exists(), "{}", out.describe());
    let lanes: Vec<Option<String>> = standin
        .model_requests()
        .iter()
        .map(|r| r.lane.clone())
        .collect();
    for l in ["LEVEL-1:", "LEVEL-2:", "LEVEL-3:"] {
        assert!(
            lanes.contains(&Some(l.to_string())),
            "{l} never asked: {lanes:?}\n{}",
            out.describe()
        );
    }
    let deepest: Vec<String> = standin
        .model_requests()
        .iter()
        .filter(|r| r.lane.as_deref() == Some("LEVEL-3:"))
        .flat_map(|r| r.tool_results())
        .collect();
    assert!(deepest.iter().any(|r| r.contains(REASON)), "{deepest:?}");
    assert!(
        deepest.iter().any(|r| r.contains(DEPTH_REASON)),
        "{deepest:?}"
    );
    let rows = d.wait_rows(&session(&out), Some(GUARD), Some("block"), 1, ROWS_WITHIN);
    assert_eq!(rows.len(), 1, "{rows:?}");
}

// ---- issue 16 with the real Claude Code: ask / defer, a stop loop. (A redacted tool
// output is answered as Claude Code documents it — `hookSpecificOutput.updatedToolOutput`,
// see the native route tests — but Claude Code 2.1.332 headless did not apply it to a
// Bash result from a hook in the user's settings: left for a later pin.)

/// The reason the asking hook gives.
const ASK_REASON: &str = "deploys need a person";
/// What the redacting hook puts in place of the tool's output.
const REDACTED: &str = "[redacted by agenthooks]";
/// A redaction as a team would write it: the event's `tool_output` with every `sk-live-`
/// key in its `stdout` replaced, in the output's own shape (node: the runtimes' own
/// interpreter, present wherever the tier runs).
const REDACT_WITH_NODE: &str = r#"node -e 'let s="";process.stdin.on("data",d=>s+=d).on("end",()=>{const o=JSON.parse(s).tool_output;o.stdout=o.stdout.replace(/sk-live-\w+/g,"[redacted by agenthooks]");process.stdout.write(JSON.stringify({updatedToolOutput:o}))})'"#;
/// What the tool output hooks hide.
const SECRET: &str = "sk-live-51HxQ2";
/// The reason of the hook withholding `withhold-probe` output.
const WITHHOLD_REASON: &str = "secrets in output";
/// The reason the stop hook gives for "keep working".
const KEEP_GOING: &str = "KEEP-GOING-9c1d: run the tests before you stop";

/// A dispatcher with the issue-16 hooks: one asking on `ask-probe` commands, one
/// (`post_tool_use`, `blocking: true`, master) replacing the output of `secret-probe`
/// commands (answered, see above), one (`stop`, `blocking: true`) refusing every stop.
fn issue16_dispatcher() -> &'static StandaloneDispatcher {
    static D: OnceLock<StandaloneDispatcher> = OnceLock::new();
    D.get_or_init(|| {
        let global = |name: &str, spec: Value| {
            json!({"apiVersion": "agenthooks.io/v1alpha1", "kind": "AgentHook",
                   "metadata": {"name": name, "namespace": "agenthooks-system"},
                   "spec": spec})
        };
        let hooks = vec![
            shell_hook(
                "ask-deploys",
                100,
                Some(r#"tool.command.contains("ask-probe")"#),
                &format!(
                    "cat >/dev/null; printf '%s' '{}'",
                    json!({"decision": "ask", "reason": ASK_REASON})
                ),
            ),
            global(
                "redact-secrets",
                json!({"event": "post_tool_use", "scope": "global", "blocking": true,
                       "toolKinds": ["shell"], "ifExpr": r#"tool.command.contains("secret-probe")"#,
                       "handler": {"type": "command", "command": {"command": REDACT_WITH_NODE}}}),
            ),
            global(
                "withhold-secrets",
                json!({"event": "post_tool_use", "scope": "global", "blocking": true,
                       "toolKinds": ["shell"], "ifExpr": r#"tool.command.contains("withhold-probe")"#,
                       "handler": {"type": "command", "command": {"command": format!(
                           "cat >/dev/null; echo '{WITHHOLD_REASON}' >&2; exit 2")}}}),
            ),
            global(
                "redact-wrong-shape",
                json!({"event": "post_tool_use", "scope": "global", "blocking": true,
                       "toolKinds": ["shell"], "ifExpr": r#"tool.command.contains("shape-probe")"#,
                       "handler": {"type": "command", "command": {"command": format!(
                           "cat >/dev/null; printf '%s' '{}'",
                           json!({"updatedToolOutput": REDACTED}))}}}),
            ),
            global(
                "tests-first",
                json!({"event": "stop", "scope": "global", "blocking": true,
                       "handler": {"type": "command", "command": {"command": format!(
                           "cat >/dev/null; echo '{KEEP_GOING}' >&2; exit 2")}}}),
            ),
        ];
        StandaloneDispatcher::start("runtimes-issue16", &hooks, &log_dir("runtimes-issue16"))
    })
}

/// Claude Code headless (`-p`): a hook's `ask` reaches it as its own `permissionDecision:
/// "ask"` — with nobody to ask, the command does not run — and with `?ask=defer` as
/// `defer`: the call is held for the calling process, and does not run either.
#[test]
fn claude_code_ask_and_defer() {
    let rt = Runtime::ClaudeCode;
    let d = issue16_dispatcher();
    for (query, marker) in [
        ("", "ask-probe-asked.txt"),
        ("?ask=defer", "ask-probe-deferred.txt"),
    ] {
        let standin = StandIn::start(Script::new(vec![
            rt.shell_call(&format!("touch {marker}")),
            Turn::text("Finished."),
            Turn::text("Finished."),
        ]));
        // The runtime's own rules allow touch: only the hook's ask stands in the way.
        let run = RuntimeRun::new(rt, &standin, d.http_wiring_with(query)).allow(&["touch"]);
        let out = run.run(PROMPT);
        timing(rt, &format!("ask{query}"), &out);
        assert!(
            !out.project.join(marker).exists(),
            "the asked-for command ran ({query:?})\n{}",
            out.describe()
        );
        let rows = d.wait_rows(
            &session(&out),
            Some("agenthooks-system/ask-deploys"),
            Some("ask"),
            1,
            ROWS_WITHIN,
        );
        assert_eq!(rows.len(), 1, "{rows:?}");
        eprintln!(
            "[runtimes] claude-code ask{query}: exit {:?}, tool results {:?}",
            out.exit_code,
            standin.tool_results()
        );
    }
}

/// A `blocking: true` stop hook that always refuses keeps Claude Code working exactly up
/// to the bound (3 refusals), then lets it stop: four model requests, the last three
/// carrying the hook's reason.
#[test]
fn claude_code_stop_loop_is_bounded() {
    let rt = Runtime::ClaudeCode;
    let d = issue16_dispatcher();
    let standin = StandIn::start(Script::new(
        (0..8)
            .map(|i| Turn::text(&format!("Finished ({i}).")))
            .collect(),
    ));
    let run = RuntimeRun::new(rt, &standin, d.http_wiring());
    let out = run.run(PROMPT);
    timing(rt, "stop loop", &out);
    assert_eq!(out.exit_code, Some(0), "{}", out.describe());
    let requests = standin.model_requests();
    assert_eq!(
        requests.len(),
        4,
        "one request, then one per refused stop: {}",
        out.describe()
    );
    let told: Vec<bool> = requests
        .iter()
        .map(|r| r.text().contains("KEEP-GOING-9c1d"))
        .collect();
    assert_eq!(told, [false, true, true, true], "{}", out.describe());
    // Four rows: the fourth stop's run went to the background, recorded, and changed nothing.
    let rows = d.wait_rows(
        &session(&out),
        Some("agenthooks-system/tests-first"),
        Some("block"),
        4,
        ROWS_WITHIN,
    );
    assert_eq!(rows.len(), 4, "{rows:?}");
}

/// Tool-output control with the real Claude Code (its Bash output is `{stdout, stderr,
/// interrupted, …}`, and it shows the original when a replacement does not fit that
/// shape): a `blocking: true` post-tool-use hook's `updatedToolOutput` in the output's
/// shape reaches the model redacted; a hook's `block` withholds the output in that shape;
/// a replacement in another shape (a bare string) is refused by the chain and withheld,
/// rather than dropped by the runtime and the secret shown.
#[test]
fn claude_code_redacts_and_withholds_tool_output() {
    let rt = Runtime::ClaudeCode;
    let d = issue16_dispatcher();
    for (probe, expect) in [
        ("secret-probe", format!("secret-probe {REDACTED}")),
        ("withhold-probe", format!("[withheld by agenthooks] agenthooks: {WITHHOLD_REASON} (hook agenthooks-system/withhold-secrets)")),
        ("shape-probe", "[withheld by agenthooks] agenthooks: updatedToolOutput refused: $ must stay an object like the tool's output, not a string (hook agenthooks-system/redact-wrong-shape)".to_string()),
    ] {
        let standin = StandIn::start(Script::new(vec![
            rt.shell_call(&format!("echo {probe} {SECRET}")),
            Turn::text("Finished."),
            Turn::text("Finished."),
        ]));
        let run = RuntimeRun::new(rt, &standin, d.http_wiring()).allow(&["echo"]);
        let out = run.run(PROMPT);
        timing(rt, probe, &out);
        assert_eq!(out.exit_code, Some(0), "{}", out.describe());
        let requests = standin.model_requests();
        // The request after the call carries its result (the stop hook's refusals add
        // more requests, each carrying the same history).
        let shown = requests.get(1).map(|r| r.tool_results()).unwrap_or_default();
        assert_eq!(shown.len(), 1, "{probe}: {shown:?}\n{}", out.describe());
        assert!(
            shown[0].starts_with(&expect),
            "{probe}: the model saw {:?}, expected {expect:?}\n{}",
            shown[0],
            out.describe()
        );
        assert!(
            requests
                .iter()
                .flat_map(|r| r.tool_results())
                .all(|t| !t.contains(SECRET)),
            "{probe}: the secret reached the model in a tool result\n{}",
            out.describe()
        );
    }
}
