//! Canonical JSON: keys sorted at every level (by UTF-8 bytes, i.e. code points), no
//! whitespace, strings escaped as `serde_json` escapes them (`"`, `\`, control
//! characters; everything else verbatim). Used for the prompt's fenced block and the
//! decision cache key (CONTRACT §5 prompt.1, prompt.3; §7.3).
//!
//! Written out here rather than relying on `serde_json`'s map order, which changes with
//! its `preserve_order` feature (any crate in a build may switch it on).

use serde_json::Value;

/// `v` as canonical JSON text. One line: a newline inside a string is written `\n`.
pub fn canonical_json(v: &Value) -> String {
    let mut out = Vec::new();
    write(v, &mut out);
    // serde_json writes UTF-8, and so do the brackets and separators around it.
    String::from_utf8(out).expect("canonical JSON is UTF-8")
}

fn write(v: &Value, out: &mut Vec<u8>) {
    match v {
        Value::Object(map) => {
            let mut entries: Vec<(&String, &Value)> = map.iter().collect();
            entries.sort_unstable_by(|a, b| a.0.cmp(b.0));
            out.push(b'{');
            for (i, (k, v)) in entries.into_iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                write_scalar(k.as_str(), out);
                out.push(b':');
                write(v, out);
            }
            out.push(b'}');
        }
        Value::Array(items) => {
            out.push(b'[');
            for (i, v) in items.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                write(v, out);
            }
            out.push(b']');
        }
        scalar => write_scalar(scalar, out),
    }
}

/// Appends a key or scalar in place (no string per value: this runs for every prompt
/// run, cache hits included, through the cache key).
fn write_scalar<T: serde::Serialize + ?Sized>(v: &T, out: &mut Vec<u8>) {
    // A scalar always serializes; the fallback keeps this path free of unwraps.
    if serde_json::to_writer(&mut *out, v).is_err() {
        out.extend_from_slice(b"null");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn keys_are_sorted_at_every_level_and_strings_escaped() {
        let v = json!({"b": {"z": 1, "a": [ {"y": true, "x": null} ]}, "a": "line\n\"q\" \\ \u{0007}", "é": 1.5});
        assert_eq!(
            canonical_json(&v),
            r#"{"a":"line\n\"q\" \\ \u0007","b":{"a":[{"x":null,"y":true}],"z":1},"é":1.5}"#
        );
    }

    #[test]
    fn keys_are_escaped_like_strings() {
        let v = json!({"q\"k\n": 1, "\\": 2});
        assert_eq!(canonical_json(&v), r#"{"\\":2,"q\"k\n":1}"#);
    }

    #[test]
    fn equal_values_give_equal_text_whatever_the_input_order() {
        let a: Value = serde_json::from_str(r#"{"x":1,"y":{"q":2,"p":3}}"#).unwrap();
        let b: Value = serde_json::from_str(r#"{"y":{"p":3,"q":2},"x":1}"#).unwrap();
        assert_eq!(canonical_json(&a), canonical_json(&b));
    }
}
