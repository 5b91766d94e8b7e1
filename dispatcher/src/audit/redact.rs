//! The `error` column (CONTRACT §7.4; seed "Audit table"): emails, bearer tokens and
//! API-key-like strings redacted, then cut to 256 bytes on a UTF-8 boundary. The full,
//! unredacted error goes only into the encrypted `error_detail` (see
//! [`super::error_detail`]).

use std::borrow::Cow;
use std::sync::LazyLock;

use regex::{Captures, Regex};

/// What replaces a redacted value.
pub const REDACTED: &str = "[REDACTED]";

/// Most bytes the `error` column holds (CONTRACT §7.4).
pub const ERROR_MAX_BYTES: usize = 256;

/// One redaction rule: a pattern and how a match is rewritten.
struct Rule {
    re: Regex,
    rewrite: fn(&Captures) -> String,
}

fn whole(_: &Captures) -> String {
    REDACTED.to_owned()
}

/// Keeps capture group 1 (a label such as `Bearer` or `api_key=`) and redacts the rest.
fn keep_label(c: &Captures) -> String {
    format!("{}{REDACTED}", &c[1])
}

/// A run of base64/base64url characters is a secret only if it mixes upper case, lower
/// case and digits — so long paths, words and identifiers stay readable.
fn mixed_secret(c: &Captures) -> String {
    let m = &c[0];
    let upper = m.bytes().any(|b| b.is_ascii_uppercase());
    let lower = m.bytes().any(|b| b.is_ascii_lowercase());
    let digit = m.bytes().any(|b| b.is_ascii_digit());
    if upper && lower && digit {
        REDACTED.to_owned()
    } else {
        m.to_owned()
    }
}

/// The rules, compiled once, applied in order (labelled forms first so the label stays).
static RULES: LazyLock<Vec<Rule>> = LazyLock::new(|| {
    let rule = |pattern: &str, rewrite: fn(&Captures) -> String| Rule {
        re: Regex::new(pattern).expect("redaction patterns are valid"),
        rewrite,
    };
    vec![
        // `Authorization: Bearer xyz`, `bearer xyz`.
        rule(r"(?i)(\bbearer\s+)[A-Za-z0-9\-._~+/]+=*", keep_label),
        // `api_key=...`, `token: ...`, `password=...`, `secret="..."`.
        rule(
            r#"(?i)(\b(?:api[_-]?key|access[_-]?token|auth[_-]?token|token|secret|password|passwd)\s*[:=]\s*"?)[^\s"',;&]+"#,
            keep_label,
        ),
        // Emails.
        rule(
            r"[A-Za-z0-9._%+\-]+@[A-Za-z0-9\-]+(?:\.[A-Za-z0-9\-]+)*\.[A-Za-z]{2,}",
            whole,
        ),
        // JSON Web Tokens.
        rule(
            r"\beyJ[A-Za-z0-9_\-]+\.[A-Za-z0-9_\-]+\.[A-Za-z0-9_\-]*",
            whole,
        ),
        // OpenAI / Anthropic (`sk-...`, `sk-ant-...`, `sk-proj-...`), Stripe (`sk_live_...`).
        rule(r"\b(?:sk|rk|pk)[-_][A-Za-z0-9_\-]{16,}", whole),
        // AWS access key ids.
        rule(r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b", whole),
        // GitHub tokens (`ghp_`, `gho_`, `ghu_`, `ghs_`, `ghr_`, `github_pat_`).
        rule(
            r"\b(?:gh[pousr]_[A-Za-z0-9]{20,}|github_pat_[A-Za-z0-9_]{20,})",
            whole,
        ),
        // Slack tokens.
        rule(r"\bxox[abpors]-[A-Za-z0-9\-]{10,}", whole),
        // Long hex secrets (32+ hex digits).
        rule(r"\b[0-9A-Fa-f]{32,}\b", whole),
        // Long base64 / base64url secrets (32+ characters mixing cases and digits).
        rule(r"[A-Za-z0-9+/_\-]{32,}={0,2}", mixed_secret),
    ]
});

/// `text` with emails, bearer tokens and API-key-like strings replaced by
/// [`REDACTED`] (CONTRACT §7.4). Patterns: `Bearer <token>` and `api_key=`/`token:`/
/// `password=`-style pairs (label kept), emails, JWTs, `sk-`/`sk-ant-`/`sk_live_` keys,
/// AWS `AKIA`/`ASIA` ids, GitHub and Slack tokens, 32+ hex digits, and 32+ base64
/// characters mixing upper case, lower case and digits. One copy per matching rule.
pub fn redact(text: &str) -> String {
    let mut out: Cow<'_, str> = Cow::Borrowed(text);
    for rule in RULES.iter() {
        let replaced = rule.re.replace_all(&out, |c: &Captures| (rule.rewrite)(c));
        if let Cow::Owned(s) = replaced {
            out = Cow::Owned(s);
        }
    }
    out.into_owned()
}

/// The longest prefix of `text` of at most `max_bytes` bytes that ends on a character
/// boundary: a multi-byte character that would straddle the limit is left out whole.
pub fn cut_utf8(text: &str, max_bytes: usize) -> String {
    if text.len() <= max_bytes {
        return text.to_owned();
    }
    let mut end = max_bytes;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    text[..end].to_owned()
}

/// The `error` column: [`redact`]ed first (so a secret straddling the cut is still
/// caught), then [`cut_utf8`] to [`ERROR_MAX_BYTES`] (CONTRACT §7.4).
pub fn error_summary(text: &str) -> String {
    cut_utf8(&redact(text), ERROR_MAX_BYTES)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn emails_are_redacted() {
        assert_eq!(
            redact("mail alice.smith+x@mail.example.co.uk failed"),
            "mail [REDACTED] failed"
        );
    }

    #[test]
    fn bearer_tokens_keep_their_label() {
        assert_eq!(
            redact("401 with Authorization: Bearer abc.DEF-123_x/y+z== sent"),
            "401 with Authorization: Bearer [REDACTED] sent"
        );
        assert_eq!(redact("bearer xyz"), "bearer [REDACTED]");
    }

    #[test]
    fn api_keys_are_redacted() {
        assert_eq!(
            redact("key sk-ant-api03-AbCdEf0123456789xyz rejected"),
            "key [REDACTED] rejected"
        );
        assert_eq!(
            redact("key sk-proj-0123456789abcdefghij!"),
            "key [REDACTED]!"
        );
        assert_eq!(redact("aws AKIAIOSFODNN7EXAMPLE."), "aws [REDACTED].");
        assert_eq!(
            redact("gh ghp_0123456789abcdefghijABCDEFGHIJ012345 bad"),
            "gh [REDACTED] bad"
        );
        assert_eq!(
            redact("hmac 00112233445566778899aabbccddeeff0011 off"),
            "hmac [REDACTED] off"
        );
        assert_eq!(
            redact("b64 dGhpcyBpcyBhIHNlY3JldCBrZXkgdmFsdWUxMjM0NQ== end"),
            "b64 [REDACTED] end"
        );
        assert_eq!(
            redact("jwt eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxIn0.sig_x-1 end"),
            "jwt [REDACTED] end"
        );
        assert_eq!(
            redact("url?api_key=s3cr3t&x=1 password: hunter2"),
            "url?api_key=[REDACTED]&x=1 password: [REDACTED]"
        );
    }

    #[test]
    fn ordinary_text_is_left_alone() {
        let plain = "exit 1: /usr/local/lib/python3/site-packages/foo.py line 12; \
                     id 550e8400-e29b-41d4-a716-446655440000; sk-short";
        assert_eq!(redact(plain), plain);
        assert_eq!(redact(""), "");
    }

    #[test]
    fn cut_never_splits_a_character() {
        let s = format!("{}é", "a".repeat(255)); // 257 bytes; é is 2 bytes at 255..257
        let cut = cut_utf8(&s, 256);
        assert_eq!(cut, "a".repeat(255));
        assert_eq!(cut.len(), 255);

        let four = format!("{}😀", "a".repeat(254)); // 😀 is 4 bytes at 254..258
        assert_eq!(cut_utf8(&four, 256), "a".repeat(254));
    }

    #[test]
    fn cut_keeps_exactly_256_and_empty() {
        let exact = format!("{}é", "a".repeat(254)); // 256 bytes
        assert_eq!(cut_utf8(&exact, 256), exact);
        let long = "b".repeat(300);
        assert_eq!(cut_utf8(&long, 256), "b".repeat(256));
        assert_eq!(cut_utf8("", 256), "");
        assert_eq!(cut_utf8("é", 1), "");
    }

    #[test]
    fn error_summary_redacts_before_cutting() {
        // The key straddles byte 256: redaction sees it whole.
        let s = format!("{} sk-ant-0123456789abcdefghijklmnop", "x".repeat(240));
        let summary = error_summary(&s);
        assert_eq!(summary, format!("{} [REDACTED]", "x".repeat(240)));
        assert!(summary.len() <= ERROR_MAX_BYTES);
        assert_eq!(error_summary(&"é".repeat(200)), "é".repeat(128));
        assert_eq!(error_summary(""), "");
    }
}
