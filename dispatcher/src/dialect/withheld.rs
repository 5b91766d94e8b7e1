//! A tool's output withheld in the shape of that output (issue 16): Claude Code replaces
//! a tool result only with a value its output schema accepts (sdk-tools.d.ts: Bash's
//! `{stdout, stderr, interrupted, …}`, Read's `{type, file: {content, …}}`, an MCP tool's
//! string, content blocks or object) and shows the *original* otherwise. So a withheld
//! output keeps the original's shape: every string is emptied but a tag, every array
//! emptied, the withholding text goes in the first text slot, and flags and numbers stay.
//!
//! A tag is what an enum field holds (`text`, `files_with_matches`, `image/png`,
//! `completed`): a lowercase word of letters, `_`, `-` or `/`, at most 32 bytes, no digit
//! and not under one of [`CONTENT_KEYS`]; kept, so the schema's enums still match. Anything
//! else — paths (a saved copy's `persistedOutputPath`), tokens, text — is emptied. A shape
//! with no text slot (a bare number, an object without one) has no [`Withholding`]: the
//! caller refuses to go on instead.

use serde_json::{Map, Value};

/// The keys of Claude Code's tool results that carry what the tool produced.
pub const CONTENT_KEYS: &[&str] = &[
    "stdout", "stderr", "content", "result", "output", "text", "base64",
];

/// Where the withholding text goes: the first of these that holds a string, on the
/// shallowest level that has one.
const TEXT_SLOTS: &[&str] = &["stdout", "content", "result", "output", "text"];

/// An output emptied in its shape, and where its text goes (a JSON pointer).
#[derive(Debug, Clone, PartialEq)]
pub struct Withholding {
    skeleton: Value,
    slot: String,
}

impl Withholding {
    /// The withholding for `original` (the runtime's `tool_response`); `None` when its
    /// shape has no place for a text (module docs).
    pub fn of(original: Option<&Value>) -> Option<Withholding> {
        match original {
            None | Some(Value::Null | Value::String(_)) => Some(Withholding {
                skeleton: Value::String(String::new()),
                slot: String::new(),
            }),
            // An MCP tool's content blocks: one text block.
            Some(Value::Array(_)) => Some(Withholding {
                skeleton: serde_json::json!([{"type": "text", "text": ""}]),
                slot: "/0/text".into(),
            }),
            Some(Value::Object(o)) => {
                let skeleton = Value::Object(emptied(o));
                let slot = text_slot(&skeleton)?;
                Some(Withholding { skeleton, slot })
            }
            Some(Value::Bool(_) | Value::Number(_)) => None,
        }
    }

    /// The withheld output, saying `text`.
    pub fn with_text(&self, text: &str) -> Value {
        let mut out = self.skeleton.clone();
        if let Some(slot) = out.pointer_mut(&self.slot) {
            *slot = Value::String(text.to_string());
        }
        out
    }
}

fn emptied(o: &Map<String, Value>) -> Map<String, Value> {
    o.iter()
        .map(|(k, v)| {
            let content = CONTENT_KEYS.contains(&k.as_str());
            let v = match v {
                Value::Array(_) => Value::Array(Vec::new()),
                Value::Object(inner) => Value::Object(emptied(inner)),
                Value::String(s) if content || !is_tag(s) => Value::String(String::new()),
                other => other.clone(),
            };
            (k.clone(), v)
        })
        .collect()
}

/// An enum's value, kept (module docs).
fn is_tag(s: &str) -> bool {
    s.len() <= 32
        && s.starts_with(|c: char| c.is_ascii_lowercase())
        && s.chars()
            .all(|c| c.is_ascii_lowercase() || matches!(c, '_' | '-' | '/'))
}

/// The pointer of the text slot: breadth first, [`TEXT_SLOTS`] in order on each level.
fn text_slot(v: &Value) -> Option<String> {
    let mut level = vec![(String::new(), v)];
    while !level.is_empty() {
        for (path, value) in &level {
            if let Value::Object(o) = value
                && let Some(key) = TEXT_SLOTS
                    .iter()
                    .find(|k| o.get(**k).is_some_and(Value::is_string))
            {
                return Some(format!("{path}/{key}"));
            }
        }
        level = level
            .iter()
            .filter_map(|(path, value)| value.as_object().map(|o| (path, o)))
            .flat_map(|(path, o)| {
                o.iter()
                    .filter(|(_, v)| v.is_object())
                    .map(move |(k, v)| (format!("{path}/{k}"), v))
            })
            .collect();
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const TEXT: &str = "[withheld by agenthooks] secrets in output";

    #[test]
    fn bash_keeps_its_shape_with_the_text_in_stdout() {
        let bash = json!({"stdout": "AWS_SECRET=abc", "stderr": "warn: abc", "interrupted": false,
                          "isImage": false, "structuredContent": ["abc"],
                          "returnCodeInterpretation": "ok",
                          "persistedOutputPath": "/home/u/.claude/projects/p/tool-results/t1.txt"});
        let w = Withholding::of(Some(&bash)).unwrap();
        assert_eq!(
            w.with_text(TEXT),
            json!({"stdout": TEXT, "stderr": "", "interrupted": false, "isImage": false,
                   "structuredContent": [], "returnCodeInterpretation": "ok",
                   "persistedOutputPath": ""})
        );
    }

    #[test]
    fn read_keeps_its_tags_and_gets_the_text_in_file_content() {
        let read = json!({"type": "text", "file": {"filePath": "/repo/.env", "content": "K=v",
                          "numLines": 1, "startLine": 1, "totalLines": 1}});
        let w = Withholding::of(Some(&read)).unwrap();
        assert_eq!(
            w.with_text(TEXT),
            json!({"type": "text", "file": {"filePath": "", "content": TEXT,
                   "numLines": 1, "startLine": 1, "totalLines": 1}})
        );
        // Fields that are no text slot lose what is not a tag: tokens, nested secrets.
        let mcp = json!({"text": "hello", "token": "sk-live-XYZ", "meta": {"auth": "sk-live-2",
                         "kind": "bearer"}, "mime": "image/png"});
        assert_eq!(
            Withholding::of(Some(&mcp)).unwrap().with_text(TEXT),
            json!({"text": TEXT, "token": "", "meta": {"auth": "", "kind": "bearer"},
                   "mime": "image/png"})
        );
        // Grep: the mode stays, the matches go.
        let grep =
            json!({"mode": "content", "numFiles": 1, "filenames": ["a"], "content": "a:K=v"});
        assert_eq!(
            Withholding::of(Some(&grep)).unwrap().with_text(TEXT),
            json!({"mode": "content", "numFiles": 1, "filenames": [], "content": TEXT})
        );
    }

    #[test]
    fn strings_blocks_and_absent_outputs_take_the_text() {
        for original in [None, Some(json!("K=v")), Some(Value::Null)] {
            let w = Withholding::of(original.as_ref()).unwrap();
            assert_eq!(w.with_text(TEXT), json!(TEXT));
        }
        let blocks = json!([{"type": "text", "text": "K=v"}, {"type": "image", "data": "…"}]);
        assert_eq!(
            Withholding::of(Some(&blocks)).unwrap().with_text(TEXT),
            json!([{"type": "text", "text": TEXT}])
        );
    }

    #[test]
    fn a_shape_without_a_text_slot_has_no_withholding() {
        assert_eq!(Withholding::of(Some(&json!(42))), None);
        assert_eq!(Withholding::of(Some(&json!(true))), None);
        assert_eq!(
            Withholding::of(Some(&json!({"numFiles": 2, "filenames": ["a"]}))),
            None
        );
    }
}
