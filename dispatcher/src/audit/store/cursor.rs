//! The page cursor of `GET /v1/executions` (issue 5 point 2): an opaque string naming the
//! last row id a client has seen. The next page holds the rows with `id <` that id, newest
//! first, so rows inserted meanwhile (always higher ids) never shift a page: no duplicates,
//! no gaps.
//!
//! Wire form: unpadded URL-safe base64 of `v1:<id>` (`id` decimal, 1..=i64::MAX, no sign,
//! no leading zero). Clients must treat it as opaque; the version prefix lets the format
//! change later without misreading old cursors.

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;

use super::QueryError;

/// Version prefix inside the encoded cursor.
const PREFIX: &str = "v1:";

/// Longest encoded cursor accepted (`v1:` + 19 digits, base64: 30 characters).
const MAX_ENCODED_LEN: usize = 32;

/// Where the next page starts: rows with `id < before_id`, newest first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Cursor {
    before_id: i64,
}

impl Cursor {
    /// The cursor of the page after the one whose last (oldest) row has id `last_id`.
    /// `None` for ids below 1 (the databases assign ids from 1).
    pub fn after_row(last_id: i64) -> Option<Cursor> {
        (last_id >= 1).then_some(Cursor { before_id: last_id })
    }

    /// The exclusive upper bound of the next page's row ids.
    pub fn before_id(&self) -> i64 {
        self.before_id
    }

    /// The opaque wire form (see the module docs).
    pub fn encode(&self) -> String {
        URL_SAFE_NO_PAD.encode(format!("{PREFIX}{}", self.before_id))
    }

    /// Parses the wire form. Errors name the field `cursor` and say what is wrong: empty,
    /// too long, not base64, wrong version prefix, or an id that is not a decimal in
    /// 1..=9223372036854775807.
    pub fn parse(s: &str) -> Result<Cursor, QueryError> {
        let bad = |message: &str| QueryError::new("cursor", message);
        if s.is_empty() {
            return Err(bad("must not be empty; omit it for the first page"));
        }
        if s.len() > MAX_ENCODED_LEN {
            return Err(bad(
                "is not a cursor returned by this API (too long); use nextCursor as given",
            ));
        }
        let raw = URL_SAFE_NO_PAD.decode(s).map_err(|_| {
            bad("is not a cursor returned by this API (not URL-safe base64); use nextCursor as given")
        })?;
        let text = std::str::from_utf8(&raw)
            .map_err(|_| bad("is not a cursor returned by this API; use nextCursor as given"))?;
        let digits = text.strip_prefix(PREFIX).ok_or_else(|| {
            bad("has an unknown version; use next_cursor as returned by this API")
        })?;
        let well_formed = !digits.is_empty()
            && digits.len() <= 19
            && digits.bytes().all(|b| b.is_ascii_digit())
            && !digits.starts_with('0');
        let id = digits
            .parse::<i64>()
            .ok()
            .filter(|id| well_formed && *id >= 1)
            .ok_or_else(|| bad("names no row id (expected an id from 1 to 9223372036854775807)"))?;
        Ok(Cursor { before_id: id })
    }
}

impl std::fmt::Display for Cursor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.encode())
    }
}

impl std::str::FromStr for Cursor {
    type Err = QueryError;

    fn from_str(s: &str) -> Result<Cursor, QueryError> {
        Cursor::parse(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn raw(s: &str) -> String {
        URL_SAFE_NO_PAD.encode(s)
    }

    #[test]
    fn round_trips_every_edge_id() {
        for id in [1, 2, 10, 999, 1_000_000_007, i64::MAX] {
            let c = Cursor::after_row(id).unwrap();
            let s = c.encode();
            assert!(
                s.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_'),
                "{s} is URL-safe"
            );
            assert!(s.len() <= MAX_ENCODED_LEN);
            assert_eq!(Cursor::parse(&s), Ok(c));
            assert_eq!(s.parse::<Cursor>().unwrap().before_id(), id);
            assert_eq!(c.to_string(), s);
        }
        assert_eq!(Cursor::after_row(42).unwrap().encode(), raw("v1:42"));
    }

    #[test]
    fn no_cursor_for_ids_below_one() {
        assert_eq!(Cursor::after_row(0), None);
        assert_eq!(Cursor::after_row(-5), None);
        assert_eq!(Cursor::after_row(i64::MIN), None);
    }

    #[test]
    fn rejects_garbage_naming_the_field() {
        let cases = [
            String::new(),
            "!!!".into(),
            "djE6NDI=".into(), // padded base64 of v1:42
            "a".repeat(200),
            URL_SAFE_NO_PAD.encode([0xff, 0xfe, 0x00]),
            raw("v1:"),
            raw("v1:0"),
            raw("v1:-3"),
            raw("v1:+3"),
            raw("v1:007"),
            raw("v1: 7"),
            raw("v1:7 "),
            raw("v1:1e3"),
            raw("v1:9223372036854775808"),
            raw("v1:99999999999999999999"),
            raw("v2:42"),
            raw("42"),
            raw("V1:42"),
            "42".into(),
        ];
        for c in cases {
            let err = Cursor::parse(&c).expect_err(&c);
            assert_eq!(err.field, "cursor", "{c}");
            assert!(err.to_string().starts_with("cursor: "), "{err}");
        }
    }

    #[test]
    fn error_messages_say_what_is_wrong() {
        assert!(
            Cursor::parse("")
                .unwrap_err()
                .to_string()
                .contains("must not be empty")
        );
        assert!(
            Cursor::parse(&raw("v2:42"))
                .unwrap_err()
                .message
                .contains("unknown version")
        );
        assert!(
            Cursor::parse(&raw("v1:-1"))
                .unwrap_err()
                .message
                .contains("from 1 to 9223372036854775807")
        );
        assert!(
            Cursor::parse("%%")
                .unwrap_err()
                .message
                .contains("not URL-safe base64")
        );
    }
}
