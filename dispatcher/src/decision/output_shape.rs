//! The shape rule of an output rewrite (issue 16): a master hook's `updatedToolOutput`
//! replaces what the tool returned, so it must still be what that tool returns. A runtime
//! checks a replacement against the tool's output schema and, when it does not fit, shows
//! the model the *original* output (Claude Code 2.1.332 logs `updatedToolOutput that does
//! not match Bash's output shape` and goes on): a redaction in the wrong shape would leak
//! exactly what it meant to hide. So the chain refuses it here, where the refusal withholds
//! the output instead.
//!
//! The rule, over JSON kinds (null, boolean, number, string, array, object): the rewrite
//! has the original's kind; an object keeps every key whose original value is not null,
//! each under the same rule (added keys are allowed, as optional fields are); each element
//! of an array keeps the shape of one of the original's elements (of the first
//! [`ELEMENT_SHAPES`] distinct ones; an empty original takes any); a scalar is free within
//! its kind. No original (the runtime sent none) leaves any value.

use serde_json::Value;

/// Why a rewrite does not keep the original's shape: the JSON path that differs
/// (`$.stdout`), what the original holds there and what the rewrite holds.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{path} must stay {expected} like the tool's output, not {found}")]
pub struct ShapeError {
    /// Where they differ, from `$` (the whole output).
    pub path: String,
    /// The original's kind there.
    pub expected: &'static str,
    /// The rewrite's kind there (`missing` for a dropped key).
    pub found: &'static str,
}

/// Checks that `rewrite` keeps the shape of `original` (module docs), naming the first
/// difference.
pub fn check(original: Option<&Value>, rewrite: &Value) -> Result<(), ShapeError> {
    match original {
        None => Ok(()),
        Some(original) => at("$".to_string(), original, Some(rewrite)),
    }
}

fn at(path: String, original: &Value, rewrite: Option<&Value>) -> Result<(), ShapeError> {
    let Some(rewrite) = rewrite else {
        return Err(ShapeError {
            path,
            expected: kind(original),
            found: "missing",
        });
    };
    if original.is_null() {
        return Ok(());
    }
    if kind(original) != kind(rewrite) {
        return Err(ShapeError {
            path,
            expected: kind(original),
            found: kind(rewrite),
        });
    }
    match (original, rewrite) {
        (Value::Object(o), Value::Object(r)) => {
            for (key, value) in o.iter().filter(|(_, v)| !v.is_null()) {
                at(format!("{path}.{key}"), value, r.get(key))?;
            }
        }
        (Value::Array(o), Value::Array(r)) if !o.is_empty() => {
            let shapes = element_shapes(o);
            for (i, element) in r.iter().enumerate() {
                let here = format!("{path}[{i}]");
                let mut first_error = None;
                for shape in &shapes {
                    match at(here.clone(), shape, Some(element)) {
                        Ok(()) => {
                            first_error = None;
                            break;
                        }
                        Err(e) => {
                            first_error.get_or_insert(e);
                        }
                    }
                }
                if let Some(e) = first_error {
                    return Err(e);
                }
            }
        }
        _ => {}
    }
    Ok(())
}

/// How many distinct element shapes of an original array a rewrite's elements are
/// checked against (a bound on the work an agent's output can cause).
pub const ELEMENT_SHAPES: usize = 8;

/// The first [`ELEMENT_SHAPES`] elements of `elements` that differ in kind or, for
/// objects, in their set of non-null keys.
fn element_shapes(elements: &[Value]) -> Vec<&Value> {
    fn key(v: &Value) -> (&'static str, Vec<&str>) {
        let keys = v
            .as_object()
            .map(|o| {
                o.iter()
                    .filter(|(_, v)| !v.is_null())
                    .map(|(k, _)| k.as_str())
                    .collect()
            })
            .unwrap_or_default();
        (kind(v), keys)
    }
    let mut seen = Vec::new();
    let mut shapes = Vec::new();
    for e in elements {
        let k = key(e);
        if !seen.contains(&k) {
            seen.push(k);
            shapes.push(e);
            if shapes.len() == ELEMENT_SHAPES {
                break;
            }
        }
    }
    shapes
}

/// A JSON value's kind, as the error names it.
fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn bash() -> Value {
        json!({"stdout": "token sk-live-1", "stderr": "", "interrupted": false,
               "isImage": false, "backgroundTaskId": null})
    }

    #[test]
    fn the_same_shape_with_other_values_passes() {
        let redacted = json!({"stdout": "token [redacted]", "stderr": "", "interrupted": false,
                              "isImage": false});
        assert_eq!(check(Some(&bash()), &redacted), Ok(()));
        // Added keys are allowed; a null original takes anything.
        let more = json!({"stdout": "", "stderr": "", "interrupted": true, "isImage": false,
                          "backgroundTaskId": 7, "note": "x"});
        assert_eq!(check(Some(&bash()), &more), Ok(()));
        assert_eq!(check(Some(&json!("text")), &json!("other text")), Ok(()));
        assert_eq!(check(Some(&json!([1, 2])), &json!([3])), Ok(()));
        assert_eq!(check(None, &json!(42)), Ok(()));
    }

    #[test]
    fn a_string_for_an_object_is_refused_naming_the_root() {
        let err = check(Some(&bash()), &json!("[redacted]")).unwrap_err();
        assert_eq!(
            err,
            ShapeError {
                path: "$".into(),
                expected: "an object",
                found: "a string"
            }
        );
        assert_eq!(
            err.to_string(),
            "$ must stay an object like the tool's output, not a string"
        );
    }

    #[test]
    fn each_array_element_keeps_the_shape_of_an_original_one() {
        let blocks = json!([{"type": "text", "text": "sk-live"},
                            {"type": "image", "data": "…", "mimeType": "image/png"}]);
        let ok = json!([{"type": "text", "text": "[redacted]"},
                        {"type": "image", "data": "", "mimeType": "image/png"}]);
        assert_eq!(check(Some(&blocks), &ok), Ok(()));
        assert_eq!(check(Some(&blocks), &json!([])), Ok(()));
        assert_eq!(
            check(Some(&blocks), &json!([1])).unwrap_err().to_string(),
            "$[0] must stay an object like the tool's output, not a number"
        );
        assert_eq!(
            check(Some(&blocks), &json!([{"type": "text"}]))
                .unwrap_err()
                .path,
            "$[0].text"
        );
        // An empty original array takes any elements.
        assert_eq!(check(Some(&json!([])), &json!([1, "a"])), Ok(()));
    }

    #[test]
    fn a_dropped_or_retyped_key_is_refused_naming_it() {
        let dropped = json!({"stdout": "", "interrupted": false, "isImage": false});
        assert_eq!(
            check(Some(&bash()), &dropped).unwrap_err().to_string(),
            "$.stderr must stay a string like the tool's output, not missing"
        );
        let retyped = json!({"stdout": "", "stderr": "", "interrupted": "no", "isImage": false});
        assert_eq!(
            check(Some(&bash()), &retyped).unwrap_err().path,
            "$.interrupted"
        );
        let read =
            json!({"type": "text", "file": {"filePath": "/a", "content": "k=1", "numLines": 1}});
        let nested =
            json!({"type": "text", "file": {"filePath": "/a", "content": ["k"], "numLines": 1}});
        assert_eq!(
            check(Some(&read), &nested).unwrap_err().to_string(),
            "$.file.content must stay a string like the tool's output, not an array"
        );
    }
}
