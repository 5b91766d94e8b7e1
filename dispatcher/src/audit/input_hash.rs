//! The `input_hash` column (CONTRACT §7.3): sha256 over `tool_name`, one zero byte, and
//! the canonical JSON of `tool_input` (keys sorted at every level, no whitespace — see
//! [`canonical_json`]); 64 lowercase hex characters.

use sha2::{Digest, Sha256};

use crate::handlers::prompt::canonical::canonical_json;

/// `hex(sha256(tool_name || 0x00 || canonical_json(tool_input)))`, 64 lowercase hex
/// characters (CONTRACT §7.3). The zero byte keeps `("ab", "c")` and `("a", "bc")`-like
/// splits apart; an absent input is hashed as `null`, which differs from `{}`.
pub fn input_hash(tool_name: &str, tool_input: &serde_json::Value) -> String {
    let mut h = Sha256::new();
    h.update(tool_name.as_bytes());
    h.update([0u8]);
    h.update(canonical_json(tool_input).as_bytes());
    hex::encode(h.finalize())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Value, json};

    #[test]
    fn known_answer_vector() {
        // Computed independently with python3:
        //   hashlib.sha256(b"Bash" + b"\0" + json.dumps(v, sort_keys=True,
        //     separators=(',', ':'), ensure_ascii=False).encode()).hexdigest()
        // with v = {"command": "ls -la", "opts": {"z": [1, {"b": null, "a": true}], "é": "ü"}}
        let v = json!({"opts": {"é": "ü", "z": [1, {"a": true, "b": null}]}, "command": "ls -la"});
        assert_eq!(input_hash("Bash", &v), KNOWN);
    }
    const KNOWN: &str = "8286934d8203bf788f47e14fffa9a106a99ca304d6fcdab8651ab09b43eee279";

    #[test]
    fn key_order_does_not_matter_at_any_level() {
        let a: Value =
            serde_json::from_str(r#"{"x":1,"y":{"q":[{"n":2,"m":3}],"p":{"b":1,"a":2}}}"#).unwrap();
        let b: Value =
            serde_json::from_str(r#"{"y":{"p":{"a":2,"b":1},"q":[{"m":3,"n":2}]},"x":1}"#).unwrap();
        assert_eq!(input_hash("Edit", &a), input_hash("Edit", &b));
        // Array order does matter.
        let c = json!({"x": 1, "y": {"p": {"a": 2, "b": 1}, "q": [{"m": 2, "n": 3}]}});
        assert_ne!(input_hash("Edit", &a), input_hash("Edit", &c));
    }

    #[test]
    fn null_and_empty_object_differ_and_the_tool_name_counts() {
        let null = input_hash("Bash", &Value::Null);
        let empty = input_hash("Bash", &json!({}));
        assert_ne!(null, empty);
        // python3: hashlib.sha256(b"Bash\0null").hexdigest(), hashlib.sha256(b"Bash\0{}").hexdigest()
        assert_eq!(
            null,
            "e8fdd477134fa23b47efdd32adb6ce1cf07cb1adc3cd91f9066ba7aabe4fd52d"
        );
        assert_eq!(
            empty,
            "08dea62dda642a0639089a1bbd1619071eaa462878673bffa6297be0b44bfb8b"
        );
        assert_ne!(input_hash("Read", &json!({})), empty);
        // The zero byte separates the name from the input: without it both would hash "a12".
        assert_ne!(input_hash("a1", &json!(2)), input_hash("a", &json!(12)));
        assert_eq!(null.len(), 64);
        assert!(
            null.bytes()
                .all(|c| c.is_ascii_digit() || (b'a'..=b'f').contains(&c))
        );
    }
}
