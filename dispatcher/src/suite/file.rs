//! The test file format (docs/policy-tests.md): one `AgentHookTest` document per file.
//!
//! ```yaml
//! apiVersion: agenthooks.io/v1alpha1
//! kind: AgentHookTest
//! metadata: {name: samples}
//! hooks: [..]                    # files or directories, relative to this file
//! stubs:                         # per file; a case's own stubs replace these by hook
//!   - {hook: tenant-acme/policy-service, decision: allow}
//! cases:
//!   - name: rm -rf is blocked
//!     event: {event: pre_tool_use, tenant_id: acme, tool_name: exec, tool_input: {cmd: rm -rf /}}
//!     expect: {decision: block, decidingHook: tenant-acme/block-rm-rf, reason: destructive}
//! ```
//!
//! Everything is checked before a case runs: an unknown field, a stub for a hook that is
//! not under test, an event `POST /v1/dispatch` would refuse, a reason that is not a
//! regex — each a [`SuiteError`] naming the file and the field.

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};

use agenthooks_crds::sealed::SealKey;
use agenthooks_crds::{Edition, GROUP, VERSION};
use regex::Regex;
use serde::{Deserialize, Deserializer};
use serde_json::Value;

use crate::chain::Verdict;
use crate::decision::outcome::{ErrorKind, HandlerMetadata, HandlerResult, Outcome, cut};
use crate::event::Event;
use crate::hookset::HookSet;
use crate::manifests::{self, LoadError, Loaded};

/// The `kind` of a test file.
pub const KIND: &str = "AgentHookTest";

/// Why a test file cannot run. Every message names the file; most name the field.
#[derive(Debug, thiserror::Error)]
pub enum SuiteError {
    /// A file or directory could not be read.
    #[error("{path}: {error}")]
    Io {
        path: PathBuf,
        error: std::io::Error,
    },
    /// A field of a test file breaks a rule (`field` is its path, e.g.
    /// `cases[2].expect.reason`; empty for the document itself).
    #[error("{path}: {}{message}", if field.is_empty() { String::new() } else { format!("{field}: ") })]
    Field {
        path: PathBuf,
        field: String,
        message: String,
    },
    /// The hooks under test could not be loaded (the message names their file, document
    /// and field).
    #[error("{path}: hooks: {source}")]
    Hooks {
        path: PathBuf,
        #[source]
        source: LoadError,
    },
    /// A directory holds no test file.
    #[error(
        "{path}: no test files in it or below (a test file's name ends in _test.yaml, -test.yaml, _test.yml or -test.yml)"
    )]
    NoTests { path: PathBuf },
}

/// A test file, read and checked, ready to run.
#[derive(Debug)]
pub struct Suite {
    /// The file, as found (relative when its argument was).
    pub path: PathBuf,
    /// `metadata.name`, else the file's path.
    pub name: String,
    /// The hooks under test, loaded as standalone mode loads them.
    pub loaded: Loaded,
    /// The key the hooks' header values were sealed with; the engine that runs the cases
    /// needs it to open them.
    pub seal_key: SealKey,
    pub cases: Vec<Case>,
}

/// One case of a [`Suite`].
#[derive(Debug)]
pub struct Case {
    /// `cases[i].name`, unique in its file.
    pub name: String,
    /// The event, parsed as `POST /v1/dispatch` parses its body.
    pub event: Event,
    /// The file's stubs with the case's own over them: hook `namespace/name` → the
    /// answer its handler gives.
    pub stubs: HashMap<String, HandlerResult>,
    pub expect: Expectation,
}

/// What a case's decision must be. For the optional fields, `None` is not checked and
/// `Some(None)` (written `null`) means the decision must not have one.
#[derive(Debug)]
pub struct Expectation {
    /// `allow`, `block` or `ask`: what `POST /v1/dispatch` answers (an `ask` only to an
    /// event with `accept: [ask]`).
    pub decision: Verdict,
    /// `namespace/name` of the deciding hook, equal.
    pub deciding_hook: Option<Option<String>>,
    /// A regex the decision's reason must match (unanchored).
    pub reason: Option<Option<Regex>>,
    /// The rewritten `tool_input`, equal as JSON.
    pub updated_input: Option<Option<Value>>,
    /// The rewritten `tool_output` (`post_tool_use`), equal as JSON.
    pub updated_tool_output: Option<Option<Value>>,
    /// A regex the decision's `additionalContext` must match (unanchored).
    pub additional_context: Option<Option<Regex>>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct FileDoc {
    api_version: String,
    kind: String,
    #[serde(default)]
    metadata: MetaDoc,
    hooks: Vec<String>,
    #[serde(default)]
    stubs: Vec<StubDoc>,
    cases: Vec<CaseDoc>,
}

/// `metadata`: only `name` is read; labels and annotations are allowed and ignored.
#[derive(Deserialize, Default)]
struct MetaDoc {
    #[serde(default)]
    name: Option<String>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct CaseDoc {
    name: String,
    #[serde(default)]
    event: Option<Value>,
    #[serde(default)]
    event_file: Option<String>,
    #[serde(default)]
    stubs: Vec<StubDoc>,
    expect: ExpectDoc,
}

#[derive(Deserialize, Clone, Copy, PartialEq, Eq, Debug)]
#[serde(rename_all = "lowercase")]
enum Word {
    Allow,
    Block,
    Ask,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct ExpectDoc {
    decision: Word,
    #[serde(default, deserialize_with = "nullable")]
    deciding_hook: Option<Option<String>>,
    #[serde(default, deserialize_with = "nullable")]
    reason: Option<Option<String>>,
    #[serde(default, deserialize_with = "nullable")]
    updated_input: Option<Option<Value>>,
    #[serde(default, deserialize_with = "nullable")]
    updated_tool_output: Option<Option<Value>>,
    #[serde(default, deserialize_with = "nullable")]
    additional_context: Option<Option<String>>,
}

/// A field that is absent (`None`, via `default`), `null` (`Some(None)`) or a value.
fn nullable<'de, D: Deserializer<'de>, T: Deserialize<'de>>(
    d: D,
) -> Result<Option<Option<T>>, D::Error> {
    Option::<T>::deserialize(d).map(Some)
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct StubDoc {
    hook: String,
    #[serde(default)]
    decision: Option<Word>,
    #[serde(default)]
    reason: Option<String>,
    #[serde(default)]
    additional_context: Option<String>,
    #[serde(default)]
    updated_input: Option<Value>,
    #[serde(default)]
    updated_tool_output: Option<Value>,
    #[serde(default)]
    error: Option<String>,
    #[serde(default)]
    timeout: bool,
}

/// The test files of `paths`: a file is taken whatever its name; a directory is searched,
/// recursively and in name order, for files whose name ends in `_test.yaml`,
/// `-test.yaml`, `_test.yml` or `-test.yml` (a directory with none is an error).
pub fn test_files(paths: &[PathBuf]) -> Result<Vec<PathBuf>, SuiteError> {
    let mut out = Vec::new();
    for path in paths {
        let meta = std::fs::metadata(path).map_err(|error| SuiteError::Io {
            path: path.clone(),
            error,
        })?;
        if meta.is_file() {
            out.push(path.clone());
            continue;
        }
        let before = out.len();
        walk(path, &mut out)?;
        if out.len() == before {
            return Err(SuiteError::NoTests { path: path.clone() });
        }
    }
    Ok(out)
}

fn walk(dir: &Path, out: &mut Vec<PathBuf>) -> Result<(), SuiteError> {
    let io = |error| SuiteError::Io {
        path: dir.to_path_buf(),
        error,
    };
    let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)
        .map_err(io)?
        .map(|e| e.map(|e| e.path()))
        .collect::<Result<_, _>>()
        .map_err(io)?;
    entries.sort();
    for p in entries {
        if p.is_dir() {
            walk(&p, out)?;
        } else if is_test_file(&p) {
            out.push(p);
        }
    }
    Ok(())
}

/// Whether a file found in a directory is a test file, by its name.
pub fn is_test_file(p: &Path) -> bool {
    let Some(name) = p.file_name().and_then(|n| n.to_str()) else {
        return false;
    };
    [".yaml", ".yml"].iter().any(|ext| {
        name.strip_suffix(ext)
            .is_some_and(|stem| stem.ends_with("_test") || stem.ends_with("-test"))
    })
}

/// Reads the test file `path`, loads its hooks (as standalone mode does, for `edition`
/// with `master_namespace`) and checks every case; nothing runs.
pub fn load(path: &Path, master_namespace: &str, edition: Edition) -> Result<Suite, SuiteError> {
    let ferr = |field: &str, message: String| SuiteError::Field {
        path: path.to_path_buf(),
        field: field.to_string(),
        message,
    };
    let text = std::fs::read_to_string(path).map_err(|error| SuiteError::Io {
        path: path.to_path_buf(),
        error,
    })?;
    let value: serde_norway::Value = serde_norway::from_str(&text)
        .map_err(|e| ferr("", format!("not one YAML document: {e}")))?;
    // The header first, so a file of another kind says so rather than "unknown field".
    let kind = value.get("kind").and_then(|k| k.as_str()).unwrap_or("");
    if kind != KIND {
        return Err(ferr("kind", format!("{kind:?} is not {KIND}")));
    }
    let doc: FileDoc = manifests::deserialize_at_path(value).map_err(|(field, message)| {
        // serde's message repeats nothing of the path; the field leads.
        ferr(&field, message)
    })?;
    let want = format!("{GROUP}/{VERSION}");
    if doc.api_version != want {
        return Err(ferr(
            "apiVersion",
            format!("{:?} is not {want}", doc.api_version),
        ));
    }
    debug_assert_eq!(doc.kind, KIND);
    if doc.hooks.is_empty() {
        return Err(ferr(
            "hooks",
            "at least one path (a file or directory of AgentHook manifests, relative to this file)"
                .into(),
        ));
    }
    if doc.cases.is_empty() {
        return Err(ferr("cases", "at least one case".into()));
    }
    let base = path.parent().unwrap_or(Path::new(""));
    let hook_paths: Vec<PathBuf> = doc.hooks.iter().map(|h| base.join(h)).collect();
    let refs: Vec<&Path> = hook_paths.iter().map(PathBuf::as_path).collect();
    let seal_key = SealKey::generate();
    let loaded =
        manifests::load_paths(&refs, master_namespace, edition, &seal_key).map_err(|source| {
            SuiteError::Hooks {
                path: path.to_path_buf(),
                source,
            }
        })?;
    let file_stubs = stubs(&doc.stubs, "stubs", &loaded.hooks, &ferr)?;
    let mut names = HashSet::new();
    let mut cases = Vec::with_capacity(doc.cases.len());
    for (i, c) in doc.cases.into_iter().enumerate() {
        let at = format!("cases[{i}]");
        if c.name.trim().is_empty() {
            return Err(ferr(&format!("{at}.name"), "required".into()));
        }
        if !names.insert(c.name.clone()) {
            return Err(ferr(
                &format!("{at}.name"),
                format!(
                    "{:?} names another case too; names are unique in a file",
                    c.name
                ),
            ));
        }
        let body = match (c.event, c.event_file) {
            (Some(event), None) => serde_json::to_vec(&event).expect("a JSON value serializes"),
            (None, Some(file)) => {
                let p = base.join(&file);
                std::fs::read(&p).map_err(|e| {
                    ferr(&format!("{at}.eventFile"), format!("{}: {e}", p.display()))
                })?
            }
            _ => {
                return Err(ferr(
                    &at,
                    "give the event inline (event) or as a JSON file (eventFile), one of them"
                        .into(),
                ));
            }
        };
        let event = Event::parse(&body).map_err(|e| {
            ferr(
                &format!("{at}.event"),
                format!("POST /v1/dispatch would refuse it: {e}"),
            )
        })?;
        // Every real event has a tenant (the caller's): without one no tenant's hook
        // runs, and a case would pass that proves nothing of them.
        if event.tenant_id.is_empty() {
            return Err(ferr(
                &format!("{at}.event.tenant_id"),
                "required: every call has a tenant (the caller's); without one no tenant's hook runs and the case would prove nothing of them".into(),
            ));
        }
        let mut case_stubs = file_stubs.clone();
        case_stubs.extend(stubs(
            &c.stubs,
            &format!("{at}.stubs"),
            &loaded.hooks,
            &ferr,
        )?);
        let expect = expectation(c.expect, &format!("{at}.expect"), &ferr)?;
        cases.push(Case {
            name: c.name,
            event,
            stubs: case_stubs,
            expect,
        });
    }
    Ok(Suite {
        path: path.to_path_buf(),
        name: doc
            .metadata
            .name
            .filter(|n| !n.trim().is_empty())
            .unwrap_or_else(|| path.display().to_string()),
        loaded,
        seal_key,
        cases,
    })
}

fn expectation(
    e: ExpectDoc,
    at: &str,
    ferr: &impl Fn(&str, String) -> SuiteError,
) -> Result<Expectation, SuiteError> {
    let regex = |field: &str, re: Option<Option<String>>| {
        re.map(|re| {
            re.map(|re| {
                Regex::new(&re)
                    .map_err(|e| ferr(&format!("{at}.{field}"), format!("not a regex: {e}")))
            })
            .transpose()
        })
        .transpose()
    };
    Ok(Expectation {
        decision: match e.decision {
            Word::Allow => Verdict::Allow,
            Word::Block => Verdict::Block,
            Word::Ask => Verdict::Ask,
        },
        deciding_hook: e.deciding_hook,
        reason: regex("reason", e.reason)?,
        updated_input: e.updated_input,
        updated_tool_output: e.updated_tool_output,
        additional_context: regex("additionalContext", e.additional_context)?,
    })
}

/// The error kinds a stub's `error` may name ([`ErrorKind::FIXED`]'s words).
fn error_kind(word: &str) -> Option<ErrorKind> {
    ErrorKind::FIXED.into_iter().find(|k| k.as_str() == word)
}

/// The stubs of one list (`at`: `stubs` or `cases[i].stubs`), checked against the hooks
/// under test, as the answers their handlers give.
fn stubs(
    list: &[StubDoc],
    at: &str,
    hooks: &HookSet,
    ferr: &impl Fn(&str, String) -> SuiteError,
) -> Result<HashMap<String, HandlerResult>, SuiteError> {
    let mut out = HashMap::new();
    for (i, s) in list.iter().enumerate() {
        let at = format!("{at}[{i}]");
        let Some(hook) = hooks.get(&s.hook) else {
            let mut known: Vec<&str> = hooks.iter().map(|h| h.key.as_str()).collect();
            known.sort_unstable();
            return Err(ferr(
                &format!("{at}.hook"),
                format!(
                    "{:?} is not among the hooks under test ({})",
                    s.hook,
                    known.join(", ")
                ),
            ));
        };
        if out.contains_key(&s.hook) {
            return Err(ferr(
                &format!("{at}.hook"),
                format!("{:?} is stubbed twice in this list", s.hook),
            ));
        }
        let answer = match (s.decision, &s.error, s.timeout) {
            (Some(word), None, false) => {
                let outcome = match word {
                    Word::Allow => Outcome::Allow,
                    Word::Block => Outcome::Block,
                    Word::Ask => Outcome::Ask,
                };
                HandlerResult {
                    outcome,
                    // No reason: the chain's own default (`blocked by <hook>`, `<hook> asks
                    // for approval`), as for a handler that gave none.
                    reason: s.reason.clone().map(cut),
                    error_kind: None,
                    additional_context: s.additional_context.clone(),
                    updated_input: s.updated_input.clone(),
                    updated_tool_output: s.updated_tool_output.clone(),
                    metadata: HandlerMetadata::default(),
                }
            }
            (None, Some(word), false) => {
                let Some(kind) = error_kind(word) else {
                    let words: Vec<&str> = ErrorKind::FIXED.iter().map(|k| k.as_str()).collect();
                    return Err(ferr(
                        &format!("{at}.error"),
                        format!("{word:?} is not an error kind: one of {}", words.join(", ")),
                    ));
                };
                if s.additional_context.is_some()
                    || s.updated_input.is_some()
                    || s.updated_tool_output.is_some()
                {
                    return Err(ferr(
                        &at,
                        "an error stub has no additionalContext, updatedInput or updatedToolOutput"
                            .into(),
                    ));
                }
                HandlerResult::error(
                    kind,
                    s.reason
                        .clone()
                        .unwrap_or_else(|| format!("stubbed error ({word})")),
                )
            }
            (None, None, true) => {
                if s.reason.is_some()
                    || s.additional_context.is_some()
                    || s.updated_input.is_some()
                    || s.updated_tool_output.is_some()
                {
                    return Err(ferr(
                        &at,
                        "a timeout stub has no reason, additionalContext, updatedInput or updatedToolOutput".into(),
                    ));
                }
                HandlerResult::timeout(hook.compiled.timeout_ms)
            }
            _ => {
                return Err(ferr(
                    &at,
                    "give exactly one of decision (allow, block, ask), error (an error kind) or timeout: true".into(),
                ));
            }
        };
        out.insert(s.hook.clone(), answer);
    }
    Ok(out)
}
