//! The side-by-side diff of a dry run's `updatedInput` against the sample's `tool_input`
//! (issue 14 point 5): both pretty-printed with sorted keys, compared line by line
//! (`similar`), and laid out as rows of two columns. Pure.

use serde_json::Value;
use similar::{ChangeTag, TextDiff};

/// One side of a row: a line and whether it was removed (left) or added (right).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Cell {
    /// The same line on both sides.
    Same(String),
    /// A line only the input has (left column).
    Removed(String),
    /// A line only the rewrite has (right column).
    Added(String),
    /// Nothing on this side of the row.
    Empty,
}

/// One row: the input's line and the rewrite's line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Row {
    pub before: Cell,
    pub after: Cell,
}

/// The rows of the diff from `before` to `after`. Unchanged lines sit side by side;
/// a run of removed lines is paired with the run of added lines after it.
pub fn side_by_side(before: &Value, after: &Value) -> Vec<Row> {
    let (a, b) = (pretty(before), pretty(after));
    let diff = TextDiff::from_lines(&a, &b);
    let mut rows = Vec::new();
    let (mut removed, mut added): (Vec<String>, Vec<String>) = (Vec::new(), Vec::new());
    let flush = |rows: &mut Vec<Row>, removed: &mut Vec<String>, added: &mut Vec<String>| {
        let n = removed.len().max(added.len());
        let mut r = removed.drain(..);
        let mut d = added.drain(..);
        for _ in 0..n {
            rows.push(Row {
                before: r.next().map_or(Cell::Empty, Cell::Removed),
                after: d.next().map_or(Cell::Empty, Cell::Added),
            });
        }
    };
    for change in diff.iter_all_changes() {
        let line = change.value().trim_end_matches('\n').to_owned();
        match change.tag() {
            ChangeTag::Equal => {
                flush(&mut rows, &mut removed, &mut added);
                rows.push(Row {
                    before: Cell::Same(line.clone()),
                    after: Cell::Same(line),
                });
            }
            ChangeTag::Delete => removed.push(line),
            ChangeTag::Insert => added.push(line),
        }
    }
    flush(&mut rows, &mut removed, &mut added);
    rows
}

/// `v` pretty-printed, keys sorted at every level (serde_json's map is sorted unless
/// `preserve_order` is on; sorting here does not depend on that), with a final newline.
pub fn pretty(v: &Value) -> String {
    let mut s = serde_json::to_string_pretty(&sorted(v)).unwrap_or_default();
    s.push('\n');
    s
}

fn sorted(v: &Value) -> Value {
    match v {
        Value::Object(m) => {
            let mut keys: Vec<&String> = m.keys().collect();
            keys.sort();
            Value::Object(
                keys.into_iter()
                    .map(|k| (k.clone(), sorted(&m[k])))
                    .collect(),
            )
        }
        Value::Array(a) => Value::Array(a.iter().map(sorted).collect()),
        other => other.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn same(s: &str) -> Row {
        Row {
            before: Cell::Same(s.into()),
            after: Cell::Same(s.into()),
        }
    }

    #[test]
    fn a_changed_value_is_a_removed_and_an_added_line_side_by_side() {
        let rows = side_by_side(
            &json!({"command": "rm -rf /", "cwd": "/w"}),
            &json!({"command": "rm -rf ./build", "cwd": "/w"}),
        );
        assert_eq!(
            rows,
            vec![
                same("{"),
                Row {
                    before: Cell::Removed(r#"  "command": "rm -rf /","#.into()),
                    after: Cell::Added(r#"  "command": "rm -rf ./build","#.into()),
                },
                same(r#"  "cwd": "/w""#),
                same("}"),
            ]
        );
    }

    #[test]
    fn added_keys_have_an_empty_left_side_and_equal_inputs_no_change() {
        let rows = side_by_side(&json!({"a": 1}), &json!({"a": 1, "b": 2}));
        assert!(
            rows.iter()
                .any(|r| r.before == Cell::Empty && r.after == Cell::Added(r#"  "b": 2"#.into()))
        );
        let unchanged = side_by_side(&json!({"x": [1, 2]}), &json!({"x": [1, 2]}));
        assert!(
            unchanged
                .iter()
                .all(|r| matches!((&r.before, &r.after), (Cell::Same(a), Cell::Same(b)) if a == b))
        );
    }

    #[test]
    fn keys_are_sorted_so_order_alone_is_no_change() {
        let rows = side_by_side(&json!({"b": 1, "a": 2}), &json!({"a": 2, "b": 1}));
        assert!(rows.iter().all(|r| matches!(r.before, Cell::Same(_))));
    }
}
