//! One canonical tool vocabulary across agent runtimes (issue 13).
//!
//! Every runtime names its tools its own way: a shell is Claude Code's and Codex's `Bash`,
//! Gemini CLI's `run_shell_command`, Copilot CLI's `bash`, Cursor's `Shell`, our samples'
//! `exec`. [`classify`] maps a tool name and its input to a [`ToolKind`] and the
//! normalised [`ToolFacts`] (the shell command, the file paths, the URLs, the MCP server
//! and tool, the sub-agent type), so one hook (`spec.toolKinds: [shell]`, CEL over
//! `tool.command`) covers every runtime. Pure: values in, facts out.
//!
//! The names are the ones the runtimes put in their *hook payloads*, which are not always
//! the names the model sees (Codex reports every shell tool as `Bash` and every patch as
//! `apply_patch`). Sources: the runtimes' hook documentation and payloads recorded from
//! Claude Code 2.1.332, Codex CLI 0.171.0, Gemini CLI 0.61.0 and Copilot CLI 1.0.102
//! (`docs/dialects.md`). A name not in the table is [`ToolKind::Other`].

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// What a tool does, whatever the runtime calls it. Serialized in snake_case.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize, JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum ToolKind {
    /// Runs a shell command (`tool.command`).
    Shell,
    /// Reads files or lists or searches them (`tool.paths`).
    FileRead,
    /// Creates or overwrites whole files (`tool.paths`).
    FileWrite,
    /// Changes part of a file, or deletes or moves it (`tool.paths`).
    FileEdit,
    /// Fetches a URL (`tool.urls`).
    WebFetch,
    /// Searches the web (`tool.query`).
    WebSearch,
    /// Calls a tool of an MCP server (`tool.mcp_server`, `tool.mcp_tool`).
    Mcp,
    /// Starts a sub-agent (`tool.agent_type`).
    Subagent,
    /// Anything else.
    Other,
}

impl ToolKind {
    /// Every kind, in declaration order.
    pub const ALL: [ToolKind; 9] = [
        ToolKind::Shell,
        ToolKind::FileRead,
        ToolKind::FileWrite,
        ToolKind::FileEdit,
        ToolKind::WebFetch,
        ToolKind::WebSearch,
        ToolKind::Mcp,
        ToolKind::Subagent,
        ToolKind::Other,
    ];

    /// The snake_case name (`file_edit`).
    pub fn as_str(self) -> &'static str {
        match self {
            ToolKind::Shell => "shell",
            ToolKind::FileRead => "file_read",
            ToolKind::FileWrite => "file_write",
            ToolKind::FileEdit => "file_edit",
            ToolKind::WebFetch => "web_fetch",
            ToolKind::WebSearch => "web_search",
            ToolKind::Mcp => "mcp",
            ToolKind::Subagent => "subagent",
            ToolKind::Other => "other",
        }
    }
}

impl std::fmt::Display for ToolKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The tool names each kind has in the runtimes' hook payloads (exact, case-sensitive).
/// `apply_patch` and MCP names are decided by [`classify`] itself.
pub const KNOWN_TOOLS: &[(ToolKind, &[&str])] = &[
    (
        ToolKind::Shell,
        &[
            "Bash",              // Claude Code; Codex (every shell tool); Copilot (PascalCase hooks)
            "PowerShell",        // Claude Code on Windows
            "run_shell_command", // Gemini CLI
            "bash",              // Copilot CLI
            "powershell",        // Copilot CLI
            "Shell",             // Cursor
            "exec_command",      // Codex's model-facing names, for callers that pass them on
            "shell",
            "shell_command",
            "local_shell",
            "exec", // our own samples and /v1/dispatch callers
        ],
    ),
    (
        ToolKind::FileRead,
        &[
            "Read",
            "NotebookRead",
            "Glob",
            "Grep",
            "LS",
            "read_file", // Gemini CLI
            "read_many_files",
            "list_directory",
            "glob",
            "grep_search",
            "search_file_content",
            "view", // Copilot CLI
            "grep",
        ],
    ),
    (
        ToolKind::FileWrite,
        &[
            "Write",      // Claude Code, Cursor
            "write_file", // Gemini CLI
            "create",     // Copilot CLI
        ],
    ),
    (
        ToolKind::FileEdit,
        &[
            "Edit", // Claude Code, Cursor
            "MultiEdit",
            "NotebookEdit",
            "StrReplace", // Cursor
            "replace",    // Gemini CLI
            "edit",       // Copilot CLI
        ],
    ),
    (ToolKind::WebFetch, &["WebFetch", "web_fetch", "fetch"]),
    (
        ToolKind::WebSearch,
        &["WebSearch", "google_web_search", "web_search"],
    ),
    (
        ToolKind::Subagent,
        &[
            "Agent",        // Claude Code 2.x
            "Task",         // Claude Code 1.x, Cursor
            "spawn_agent",  // Codex
            "invoke_agent", // Gemini CLI
            "task",         // Copilot CLI
        ],
    ),
    (ToolKind::Mcp, &["MCP"]), // Cursor
];

/// Each kind's tool as each runtime names it in its hook payloads: what
/// [`matcher_warning`] checks a `spec.matcher` against.
pub const RUNTIME_TOOLS: &[(ToolKind, &[(&str, &str)])] = &[
    (
        ToolKind::Shell,
        &[
            ("Bash", "Claude Code, Codex CLI"),
            ("run_shell_command", "Gemini CLI"),
            ("bash", "Copilot CLI"),
            ("Shell", "Cursor"),
        ],
    ),
    (
        ToolKind::FileRead,
        &[
            ("Read", "Claude Code, Cursor"),
            ("read_file", "Gemini CLI"),
            ("view", "Copilot CLI"),
        ],
    ),
    (
        ToolKind::FileWrite,
        &[
            ("Write", "Claude Code, Cursor"),
            ("apply_patch", "Codex CLI"),
            ("write_file", "Gemini CLI"),
            ("create", "Copilot CLI"),
        ],
    ),
    (
        ToolKind::FileEdit,
        &[
            ("Edit", "Claude Code, Cursor"),
            ("apply_patch", "Codex CLI"),
            ("replace", "Gemini CLI"),
            ("edit", "Copilot CLI"),
        ],
    ),
    (
        ToolKind::WebFetch,
        &[("WebFetch", "Claude Code"), ("web_fetch", "Gemini CLI")],
    ),
    (
        ToolKind::WebSearch,
        &[
            ("WebSearch", "Claude Code"),
            ("google_web_search", "Gemini CLI"),
        ],
    ),
    (
        ToolKind::Subagent,
        &[
            ("Agent", "Claude Code"),
            ("spawn_agent", "Codex CLI"),
            ("invoke_agent", "Gemini CLI"),
            ("task", "Copilot CLI"),
            ("Task", "Cursor"),
        ],
    ),
];

/// The warning for a `spec.matcher` that selects some runtimes' tool of a kind but not
/// the others' (`^Bash$` lets Gemini CLI's `run_shell_command` through), when
/// `spec.toolKinds` is empty: a condition for people, never a refusal (a hook may mean
/// one runtime). `None` when the matcher covers each kind it touches for every runtime.
pub fn matcher_warning(matcher: &regex::Regex, tool_kinds: &[ToolKind]) -> Option<String> {
    if !tool_kinds.is_empty() {
        return None;
    }
    let mut notes = Vec::new();
    for (kind, tools) in RUNTIME_TOOLS {
        let (hit, missed): (Vec<_>, Vec<_>) =
            tools.iter().partition(|(name, _)| matcher.is_match(name));
        if hit.is_empty() || missed.is_empty() {
            continue;
        }
        let list = |v: &[&(&str, &str)]| {
            v.iter()
                .map(|(n, who)| format!("{n} ({who})"))
                .collect::<Vec<_>>()
                .join(", ")
        };
        notes.push(format!(
            "it matches {} but not {}: to cover every runtime use spec.toolKinds: [{kind}]",
            list(&hit),
            list(&missed)
        ));
    }
    (!notes.is_empty()).then(|| {
        format!(
            "spec.matcher {:?} names one runtime's tool: {}",
            matcher.as_str(),
            notes.join("; ")
        )
    })
}

/// What a runtime's payload says about an MCP call beside the tool name (Gemini CLI's
/// `mcp_context`, Claude Code's `mcp_server`): preferred over splitting the name.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ToolHints {
    pub mcp_server: Option<String>,
    pub mcp_tool: Option<String>,
}

/// A tool call in the canonical vocabulary: the kind and the normalised fields. Every
/// field is always present (empty when unknown), so CEL over `tool.command` never fails
/// on a missing key. Serialized in snake_case, as the handlers and CEL see it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ToolFacts {
    pub kind: ToolKind,
    /// The shell command as one string (an argv list is joined with spaces); `""` if none.
    pub command: String,
    /// The working directory the call names (`dir_path`, `working_directory`, `workdir`,
    /// `cwd`); `""` if none.
    pub cwd: String,
    /// Every file path the call names; for Codex's `apply_patch`, each path of the patch.
    pub paths: Vec<String>,
    /// Every URL the call names (Gemini CLI's `web_fetch`: each URL inside its prompt).
    pub urls: Vec<String>,
    /// The web search query; `""` if none.
    pub query: String,
    pub mcp_server: String,
    pub mcp_tool: String,
    /// The sub-agent's type or name; `""` if none.
    pub agent_type: String,
}

impl ToolFacts {
    /// Facts of no tool: kind `other`, every field empty. What CEL's `tool` holds for an
    /// event without a tool (`tool_kind` is then `""`).
    pub fn none() -> ToolFacts {
        ToolFacts {
            kind: ToolKind::Other,
            command: String::new(),
            cwd: String::new(),
            paths: Vec::new(),
            urls: Vec::new(),
            query: String::new(),
            mcp_server: String::new(),
            mcp_tool: String::new(),
            agent_type: String::new(),
        }
    }
}

/// Most paths or URLs taken from one call; the rest are dropped (the cap on any list in
/// `tool_input` is larger, and a guard over 64 paths should look at `tool_input`).
pub const MAX_FACT_ITEMS: usize = 64;

/// The kind of `tool_name` with this input and the normalised fields (see module docs).
pub fn classify(tool_name: &str, tool_input: &Value, hints: &ToolHints) -> ToolFacts {
    let empty = Map::new();
    let input = tool_input.as_object().unwrap_or(&empty);
    let mut facts = ToolFacts {
        kind: kind_of_name(tool_name),
        command: String::new(),
        cwd: first_string(input, &["dir_path", "working_directory", "workdir", "cwd"]),
        paths: Vec::new(),
        urls: Vec::new(),
        query: String::new(),
        mcp_server: String::new(),
        mcp_tool: String::new(),
        agent_type: String::new(),
    };
    match facts.kind {
        ToolKind::Shell => facts.command = command_of(input),
        ToolKind::FileRead | ToolKind::FileWrite | ToolKind::FileEdit => {
            facts.paths = paths_of(input)
        }
        ToolKind::WebFetch => {
            facts.urls = match input.get("url").and_then(Value::as_str) {
                Some(url) => vec![url.to_string()],
                None => urls_in(&first_string(input, &["prompt"])),
            }
        }
        ToolKind::WebSearch => facts.query = first_string(input, &["query"]),
        ToolKind::Subagent => {
            facts.agent_type = first_string(input, &["subagent_type", "agent_type", "agent_name"])
        }
        ToolKind::Mcp | ToolKind::Other => {}
    }
    if tool_name == "apply_patch" {
        // Codex: the raw patch in `command` (hooks) or `input` (the freeform tool).
        let patch = first_string(input, &["command", "input", "patch"]);
        let (paths, only_adds) = patch_paths(&patch);
        facts.kind = if only_adds && !paths.is_empty() {
            ToolKind::FileWrite
        } else {
            ToolKind::FileEdit
        };
        facts.paths = paths;
    }
    if let Some((server, tool)) = mcp_parts(tool_name, hints) {
        facts.kind = ToolKind::Mcp;
        facts.mcp_server = server;
        facts.mcp_tool = tool;
    }
    facts
}

/// The kind a tool name has in [`KNOWN_TOOLS`] (MCP names and `apply_patch` aside).
pub fn kind_of_name(tool_name: &str) -> ToolKind {
    let known = KNOWN_TOOLS
        .iter()
        .find(|(_, names)| names.contains(&tool_name))
        .map_or(ToolKind::Other, |(kind, _)| *kind);
    // Codex glues a namespace to the name (`multi_agent_v1spawn_agent`) or dots it
    // (`collaboration.spawn_agent`): a spawn by any name is still a spawn.
    if known == ToolKind::Other && tool_name.ends_with("spawn_agent") {
        return ToolKind::Subagent;
    }
    known
}

/// `mcp__<server>__<tool>` (Claude Code, Codex), `mcp_<server>_<tool>` (Gemini CLI: the
/// split is ambiguous, so its `mcp_context` names them), or Cursor's `MCP`.
fn mcp_parts(tool_name: &str, hints: &ToolHints) -> Option<(String, String)> {
    let hinted = hints.mcp_server.is_some() || hints.mcp_tool.is_some();
    let from_name = tool_name.strip_prefix("mcp__").and_then(|rest| {
        let (server, tool) = rest.split_once("__")?;
        Some((server.to_string(), tool.to_string()))
    });
    if !(hinted || from_name.is_some() || tool_name.starts_with("mcp_") || tool_name == "MCP") {
        return None;
    }
    let (server, tool) = from_name.unwrap_or_default();
    Some((
        hints.mcp_server.clone().unwrap_or(server),
        hints.mcp_tool.clone().unwrap_or(tool),
    ))
}

fn first_string(input: &Map<String, Value>, keys: &[&str]) -> String {
    keys.iter()
        .find_map(|k| input.get(*k).and_then(Value::as_str))
        .unwrap_or_default()
        .to_string()
}

/// `command` or `cmd`, a string or an argv list (joined with spaces).
fn command_of(input: &Map<String, Value>) -> String {
    for key in ["command", "cmd"] {
        match input.get(key) {
            Some(Value::String(s)) => return s.clone(),
            Some(Value::Array(argv)) => {
                return argv
                    .iter()
                    .map(|a| a.as_str().map_or_else(|| a.to_string(), str::to_string))
                    .collect::<Vec<_>>()
                    .join(" ");
            }
            _ => {}
        }
    }
    String::new()
}

/// `file_path`, `path`, `notebook_path`, and Gemini CLI's `include` list.
fn paths_of(input: &Map<String, Value>) -> Vec<String> {
    let mut paths: Vec<String> = ["file_path", "path", "notebook_path", "dir_path"]
        .iter()
        .filter_map(|k| input.get(*k).and_then(Value::as_str))
        .map(str::to_string)
        .collect();
    if let Some(Value::Array(list)) = input.get("include") {
        paths.extend(list.iter().filter_map(Value::as_str).map(str::to_string));
    }
    paths.dedup();
    paths.truncate(MAX_FACT_ITEMS);
    paths
}

/// The paths of a Codex patch (`*** Add File:`, `*** Update File:`, `*** Delete File:`,
/// `*** Move to:`), and whether it only adds files.
fn patch_paths(patch: &str) -> (Vec<String>, bool) {
    let mut paths = Vec::new();
    let mut only_adds = true;
    for line in patch.lines() {
        let line = line.trim_end();
        let (path, adds) = if let Some(p) = line.strip_prefix("*** Add File:") {
            (p, true)
        } else if let Some(p) = line
            .strip_prefix("*** Update File:")
            .or_else(|| line.strip_prefix("*** Delete File:"))
            .or_else(|| line.strip_prefix("*** Move to:"))
        {
            (p, false)
        } else {
            continue;
        };
        only_adds &= adds;
        let path = path.trim().to_string();
        if !path.is_empty() && !paths.contains(&path) && paths.len() < MAX_FACT_ITEMS {
            paths.push(path);
        }
    }
    (paths, only_adds)
}

/// Each `http://` or `https://` URL in free text, up to whitespace or a closing bracket
/// or quote.
fn urls_in(text: &str) -> Vec<String> {
    let mut urls = Vec::new();
    let mut rest = text;
    while let Some(at) = rest.find("http") {
        let tail = &rest[at..];
        if tail.starts_with("http://") || tail.starts_with("https://") {
            let end = tail
                .find(|c: char| c.is_whitespace() || "<>\"'`)]}".contains(c))
                .unwrap_or(tail.len());
            let url = tail[..end].trim_end_matches(['.', ',', ';', ':']);
            if urls.len() < MAX_FACT_ITEMS {
                urls.push(url.to_string());
            }
            rest = &tail[end..];
        } else {
            rest = &tail[4..];
        }
    }
    urls
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn kind(name: &str, input: Value) -> ToolKind {
        classify(name, &input, &ToolHints::default()).kind
    }

    #[test]
    fn every_runtimes_shell_is_one_kind_with_its_command() {
        // (tool name, input) as the runtimes' hook payloads carry them.
        let cases = [
            ("Bash", json!({"command": "rm -rf x", "description": "d"})), // Claude Code, Codex
            (
                "run_shell_command",
                json!({"command": "rm -rf x", "dir_path": "sub"}),
            ), // Gemini
            ("bash", json!({"command": "rm -rf x"})),                     // Copilot CLI
            (
                "Shell",
                json!({"command": "rm -rf x", "working_directory": "/w"}),
            ), // Cursor
            ("exec_command", json!({"cmd": "rm -rf x"})),                 // Codex model-facing
            ("exec", json!({"cmd": "rm -rf x"})),                         // our samples
            ("shell", json!({"command": ["rm", "-rf", "x"]})),            // an argv list
        ];
        for (name, input) in cases {
            let f = classify(name, &input, &ToolHints::default());
            assert_eq!(f.kind, ToolKind::Shell, "{name}");
            assert_eq!(f.command, "rm -rf x", "{name}");
        }
        let f = classify(
            "run_shell_command",
            &json!({"command": "ls", "dir_path": "sub"}),
            &ToolHints::default(),
        );
        assert_eq!(f.cwd, "sub");
    }

    #[test]
    fn files_by_runtime() {
        let cases = [
            ("Read", json!({"file_path": "/a"}), ToolKind::FileRead),
            ("read_file", json!({"file_path": "/a"}), ToolKind::FileRead),
            ("view", json!({"path": "/a"}), ToolKind::FileRead),
            (
                "Write",
                json!({"file_path": "/a", "content": ""}),
                ToolKind::FileWrite,
            ),
            (
                "write_file",
                json!({"file_path": "/a"}),
                ToolKind::FileWrite,
            ),
            (
                "create",
                json!({"path": "/a", "file_text": ""}),
                ToolKind::FileWrite,
            ),
            ("Edit", json!({"file_path": "/a"}), ToolKind::FileEdit),
            (
                "NotebookEdit",
                json!({"notebook_path": "/a"}),
                ToolKind::FileEdit,
            ),
            ("replace", json!({"file_path": "/a"}), ToolKind::FileEdit),
            ("edit", json!({"path": "/a"}), ToolKind::FileEdit),
            ("StrReplace", json!({"path": "/a"}), ToolKind::FileEdit),
        ];
        for (name, input, want) in cases {
            let f = classify(name, &input, &ToolHints::default());
            assert_eq!(
                (f.kind, f.paths.clone()),
                (want, vec!["/a".to_string()]),
                "{name}"
            );
        }
        let f = classify(
            "read_many_files",
            &json!({"include": ["a.rs", "b.rs"]}),
            &ToolHints::default(),
        );
        assert_eq!(f.paths, ["a.rs", "b.rs"]);
    }

    #[test]
    fn codex_patches_name_every_path_and_only_adds_are_writes() {
        let add = "*** Begin Patch\n*** Add File: hello.txt\n+hi\n*** End Patch\n";
        let f = classify(
            "apply_patch",
            &json!({"command": add}),
            &ToolHints::default(),
        );
        assert_eq!(
            (f.kind, f.paths),
            (ToolKind::FileWrite, vec!["hello.txt".to_string()])
        );
        let edit = "*** Begin Patch\n*** Add File: a\n+x\n*** Update File: b\n*** Move to: c\n@@\n-x\n+y\n*** Delete File: d\n*** End Patch";
        let f = classify(
            "apply_patch",
            &json!({"input": edit}),
            &ToolHints::default(),
        );
        assert_eq!(
            (f.kind, f.paths),
            (
                ToolKind::FileEdit,
                vec!["a".into(), "b".into(), "c".into(), "d".into()]
            )
        );
        // A patch naming no file is an edit of nothing known: still file_edit.
        assert_eq!(kind("apply_patch", json!({})), ToolKind::FileEdit);
    }

    #[test]
    fn web_urls_and_queries() {
        let f = classify(
            "WebFetch",
            &json!({"url": "https://a.example/x", "prompt": "p"}),
            &ToolHints::default(),
        );
        assert_eq!(
            (f.kind, f.urls),
            (ToolKind::WebFetch, vec!["https://a.example/x".to_string()])
        );
        // Gemini CLI: the URLs are inside the prompt.
        let f = classify(
            "web_fetch",
            &json!({"prompt": "Summarize https://a.example/x, and (http://b.example/y)."}),
            &ToolHints::default(),
        );
        assert_eq!(f.urls, ["https://a.example/x", "http://b.example/y"]);
        let f = classify(
            "google_web_search",
            &json!({"query": "q"}),
            &ToolHints::default(),
        );
        assert_eq!((f.kind, f.query.as_str()), (ToolKind::WebSearch, "q"));
    }

    #[test]
    fn mcp_from_names_and_hints() {
        let f = classify(
            "mcp__github__create_issue",
            &json!({}),
            &ToolHints::default(),
        );
        assert_eq!(
            (f.kind, f.mcp_server.as_str(), f.mcp_tool.as_str()),
            (ToolKind::Mcp, "github", "create_issue")
        );
        // Gemini CLI: `mcp_my_server_do_it` cannot be split; its mcp_context names them.
        let hints = ToolHints {
            mcp_server: Some("my_server".into()),
            mcp_tool: Some("do_it".into()),
        };
        let f = classify("mcp_my_server_do_it", &json!({}), &hints);
        assert_eq!(
            (f.kind, f.mcp_server.as_str(), f.mcp_tool.as_str()),
            (ToolKind::Mcp, "my_server", "do_it")
        );
        // Without its context it is still an MCP call, server unknown.
        let f = classify("mcp_my_server_do_it", &json!({}), &ToolHints::default());
        assert_eq!((f.kind, f.mcp_server.as_str()), (ToolKind::Mcp, ""));
    }

    #[test]
    fn subagents_and_others() {
        for (name, input) in [
            (
                "Agent",
                json!({"subagent_type": "general-purpose", "prompt": "p"}),
            ),
            ("Task", json!({"subagent_type": "general-purpose"})),
            ("spawn_agent", json!({"agent_type": "general-purpose"})),
            ("invoke_agent", json!({"agent_name": "general-purpose"})),
            ("task", json!({"agent_type": "general-purpose"})),
            (
                "multi_agent_v1spawn_agent",
                json!({"agent_type": "general-purpose"}),
            ),
            (
                "collaboration.spawn_agent",
                json!({"agent_type": "general-purpose"}),
            ),
        ] {
            let f = classify(name, &input, &ToolHints::default());
            assert_eq!(
                (f.kind, f.agent_type.as_str()),
                (ToolKind::Subagent, "general-purpose"),
                "{name}"
            );
        }
        for name in [
            "TodoWrite",
            "bash_exec",
            "BASH",
            "",
            "multi_agent_v1wait_agent",
        ] {
            assert_eq!(kind(name, json!({})), ToolKind::Other, "{name:?}");
        }
    }

    #[test]
    fn a_non_object_input_and_odd_values_give_empty_facts() {
        let f = classify("Bash", &json!("rm -rf /"), &ToolHints::default());
        assert_eq!((f.kind, f.command.as_str()), (ToolKind::Shell, ""));
        let f = classify("Bash", &json!({"command": 7}), &ToolHints::default());
        assert_eq!(f.command, "");
    }

    #[test]
    fn a_matcher_naming_one_runtimes_tool_is_warned_about() {
        let warn =
            |m: &str, kinds: &[ToolKind]| matcher_warning(&regex::Regex::new(m).unwrap(), kinds);
        let w = warn("^Bash$", &[]).unwrap();
        assert!(w.starts_with("spec.matcher \"^Bash$\" names one runtime's tool: it matches Bash (Claude Code, Codex CLI) but not run_shell_command (Gemini CLI), bash (Copilot CLI), Shell (Cursor): to cover every runtime use spec.toolKinds: [shell]"), "{w}");
        assert!(warn("^(exec|shell|Bash)$", &[]).is_some());
        assert!(warn("Write|Edit", &[]).unwrap().contains("[file_write]"));
        // Covering every runtime, naming none of theirs, or narrowed by kind: no warning.
        assert_eq!(warn("^(Bash|run_shell_command|bash|Shell)$", &[]), None);
        assert_eq!(warn("^exec$", &[]), None);
        assert_eq!(warn("^mcp__github__", &[]), None);
        assert_eq!(warn("^Bash$", &[ToolKind::Shell]), None);
        // An unanchored matcher that happens to match everything covers everything.
        assert_eq!(warn("", &[]), None);
    }

    #[test]
    fn kinds_round_trip_in_snake_case_and_names_are_listed_once() {
        for k in ToolKind::ALL {
            assert_eq!(serde_json::to_value(k).unwrap(), k.as_str());
        }
        let mut seen = std::collections::HashSet::new();
        for (_, names) in KNOWN_TOOLS {
            for n in *names {
                assert!(seen.insert(*n), "{n} listed twice");
            }
        }
    }
}
