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

/// Keeps the label (group 1) and the quotes around the value (group 2) — a plain `"`, an
/// escaped `\"` (JSON inside a JSON string), `'` or the braces of an object — and redacts
/// what is between them. A value whose closing quote was cut off is redacted to where the
/// match ends. An unquoted value may hold `&` (`pass: Tr0ub4dor&3`), but a query-string
/// tail (`&name=...`) after it is kept, and redacted on its own.
fn keep_label_and_quotes(c: &Captures) -> String {
    let (label, value) = (&c[1], &c[2]);
    let open = ["\\\"", "\"", "'", "{"]
        .into_iter()
        .find(|q| value.starts_with(q))
        .unwrap_or("");
    if open.is_empty() {
        if let Some(i) = query_tail(value) {
            return format!("{label}{REDACTED}{}", redact(&value[i..]));
        }
        return format!("{label}{REDACTED}");
    }
    let rest = &value[open.len()..];
    let close = match open {
        "\\\"" if rest.ends_with("\\\"") => "\\\"",
        "\\\"" if rest.ends_with('"') => "\"",
        "\\\"" => "",
        "{" if rest.ends_with('}') => "}",
        "{" => "",
        q if rest.ends_with(q) => q,
        _ => "",
    };
    format!("{label}{open}{REDACTED}{close}")
}

/// Where a query-string tail (`&name=`) starts in an unquoted value, if it has one.
fn query_tail(value: &str) -> Option<usize> {
    value.match_indices('&').map(|(i, _)| i).find(|&i| {
        let name = value[i + 1..]
            .bytes()
            .take_while(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.' | b'%'))
            .count();
        name > 0 && value.as_bytes().get(i + 1 + name) == Some(&b'=')
    })
}

/// `Cookie: a=1; b=2` (every value redacted) and `Set-Cookie: sid=x; Path=/` (only the
/// cookie's own value, the first pair; attributes such as `Path` stay). Names are kept.
fn cookie_values(c: &Captures) -> String {
    let set_cookie = c.get(2).is_some();
    let mut out = c[1].to_owned();
    for (i, pair) in c[3].split(';').enumerate() {
        if i > 0 {
            out.push(';');
        }
        match pair.split_once('=') {
            Some((name, value)) if (i == 0 || !set_cookie) && !value.is_empty() => {
                out.push_str(name);
                out.push('=');
                out.push_str(REDACTED);
            }
            _ => out.push_str(pair),
        }
    }
    out
}

/// Keeps the URL scheme (group 1) and redacts the `user:password` before the `@`.
fn url_userinfo(c: &Captures) -> String {
    format!("{}{REDACTED}@", &c[1])
}

/// `Basic <base64>` outside an `Authorization:` header: redacted only when the base64
/// decodes to printable UTF-8 text holding a `:` (a `user:password` pair), so prose such
/// as "basic authentication failed" stays readable.
fn basic_credentials(c: &Captures) -> String {
    use base64::engine::{DecodePaddingMode, GeneralPurpose, general_purpose};
    use base64::{Engine, alphabet};
    const LENIENT: GeneralPurpose = GeneralPurpose::new(
        &alphabet::STANDARD,
        general_purpose::GeneralPurposeConfig::new()
            .with_decode_padding_mode(DecodePaddingMode::Indifferent)
            .with_decode_allow_trailing_bits(true),
    );
    let is_pair = LENIENT
        .decode(&c[2])
        .ok()
        .and_then(|bytes| String::from_utf8(bytes).ok())
        .is_some_and(|s| s.contains(':') && !s.chars().any(char::is_control));
    if is_pair {
        format!("{}{REDACTED}", &c[1])
    } else {
        c[0].to_owned()
    }
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
        // PEM private keys (`PRIVATE KEY`, `RSA PRIVATE KEY`, `OPENSSH PRIVATE KEY`,
        // `PGP PRIVATE KEY BLOCK`, ...), through the END line — or to the end of the text
        // when the END line was cut off.
        rule(
            r"(?s)-----BEGIN[ A-Z0-9]*PRIVATE KEY(?: BLOCK)?-----.*?(?:-----END[ A-Z0-9]*PRIVATE KEY(?: BLOCK)?-----|\z)",
            whole,
        ),
        // `scheme://user:password@host` (any host, dotted or not): scheme and host kept.
        // The password runs to the last `@` of the authority.
        rule(
            r#"(?i)\b([a-z][a-z0-9+.\-]*://)[^\s/?#@:"'<>\[\]]*:[^\s/?#"'<>]*@"#,
            url_userinfo,
        ),
        // `Authorization: Basic ...` (also Negotiate, NTLM, `token ...`, ApiKey).
        rule(
            r#"(?i)(\b(?:proxy-)?authorization(?:\\?["'])?[ \t]*[:=][ \t]*(?:\\?["'])?[ \t]*(?:basic|negotiate|ntlm|token|api-?key)[ \t]+)[^\s"',;]+"#,
            keep_label,
        ),
        // A bare `Basic <base64 of user:password>`.
        rule(
            r"(?i)(\bbasic[ \t]+)([A-Za-z0-9+/]{8,}={0,2})",
            basic_credentials,
        ),
        // `Authorization: Bearer xyz`, `bearer xyz`.
        rule(r"(?i)(\bbearer\s+)[A-Za-z0-9\-._~+/]+=*", keep_label),
        // `Cookie: a=1; b=2` and `Set-Cookie: sid=x; Path=/`: cookie values redacted, names
        // (and Set-Cookie attributes) kept.
        rule(
            r#"(?i)(\b(set-)?cookies?(?:\\?["'])?[ \t]*[:=][ \t]*(?:\\?["'])?[ \t]*)([^\s;="'\\,]+=[^\s;"'\\,]*(?:;[ \t]*[^\s;="'\\,]+=[^\s;"'\\,]*)*)"#,
            cookie_values,
        ),
        // URL query (or fragment) parameters holding secrets, however short:
        // `?sig=...&key=...`, `#access_token=...`, `&X-Amz-Signature=...`, `?code=...`
        // (`code` only as the whole name, so `error_code=5` stays).
        rule(
            r#"(?i)([?&#;](?:(?:[a-z0-9]+[_.\-])*(?:sig|signature|key|apikey|token|password|passwd|pass|pwd|pw|secret|credentials?|auth)|code)=)(?:\[REDACTED\]|[^\s&#"'<>\\)\]]+)"#,
            keep_label,
        ),
        // CLI flags whose value follows a space: `--password hunter5`, `--api-key abc`,
        // `--client-secret x`, keytool's `-storepass x`, and argv lists (`"--token", "abc"`). The `=` forms are the
        // next rule's. `-p` is deliberately left alone: it is too generic (`-p 8080`,
        // `mkdir -p`, `ssh -p 22`). `\B` keeps `non-token value` and `re-auth x` as they are.
        rule(
            r#"(?i)(\B--?(?:[a-z0-9]+[-_])*(?:password|passwd|(?:(?:src|dest)?(?:store|key))?pass|pwd|passphrase|token|secret|api[-_]?key|apikey|access[-_]?key|secret[-_]?key|credentials?|auth)(?:\\?["'],)?[ \t]+)("(?:[^"\\\n]|\\.)*"?|\\"[^"\n]*"?|'[^'\n]*'?|[^\s"'\-][^\s"']*)"#,
            keep_label_and_quotes,
        ),
        // `api_key=...`, `client_secret: ...`, `"refresh_token": "..."`, `PASSWORD=...`,
        // `Ocp-Apim-Subscription-Key: ...`, `pass: ...`: a key that
        // - *contains* `secret`, `password`, `passwd` or `credential` (`secret_key_base`);
        // - *ends* in `token`, `auth`, `passphrase`, `pwd`, `apikey`/`api_key`,
        //   `secret_key`, `access_key`, `private_key`, or `-key`/`_key` (header names such
        //   as `X-Goog-Api-Key`) — suffix only, so `max_tokens`, `tokenizer`, `author` and
        //   `keyboard` stay;
        // - is the word `pass` or `pw` (alone or after `_`/`-`: `db_pass`, not `bypass`);
        // then an optional closing quote, `=`, `:`, `:=` or `=>` and a value: a quoted
        // string, an object in braces (`credentials: {user: bob, pass: x}`), or a run up to
        // whitespace or punctuation that ends a value (`&` included, but not a following
        // `&name=` query parameter).
        rule(
            r#"(?i)((?:(?:secret|password|passwd|credential)[a-z0-9_\-]*|api[_-]?key|secret[_-]?key|access[_-]?key|private[_-]?key|[_\-]key|token|passphrase|pwd|auth|(?:\b|[_\-])(?:pass|pw))(?:\\?["'])?[ \t]*(?::=|=>|[:=])[ \t]*)("(?:[^"\\\n]|\\.)*"?|\\"[^"\n]*"?|'[^'\n]*'?|\{(?:[^{}\n]|\{[^{}\n]*\})+\}?|[^\s"',;&{}\[\]=:][^\s"',;}]*)"#,
            keep_label_and_quotes,
        ),
        // Emails, with non-ASCII local parts and domains (`josé@example.com`).
        rule(
            r"[\p{L}\p{M}\p{N}._%+\-]+@[\p{L}\p{M}\p{N}\-]+(?:\.[\p{L}\p{M}\p{N}\-]+)*\.[\p{L}\p{M}]{2,}",
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
        // GitLab tokens: personal/project/group (`glpat-`), deploy (`gldt-`), runner
        // (`glrt-`), CI job (`glcbt-`), trigger (`glptt-`), feed (`glft-`), mail
        // (`glimt-`), agent (`glagent-`), OAuth (`gloas-`), SCIM (`glsoat-`), feature flags
        // (`glffct-`) — with the optional `.01.xyz` suffix of routable tokens.
        rule(
            r"\bgl(?:pat|dt|rt|rtr|cbt|ptt|ft|imt|agent|oas|soat|ffct|wt)-[A-Za-z0-9_\-]{20,}(?:\.[A-Za-z0-9_\-]+)*",
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
/// [`REDACTED`] (CONTRACT §7.4). Patterns: PEM private keys (to the end of the text if
/// the END line is missing), the `user:password` of URLs (scheme and host kept),
/// `Authorization: Basic ...` and bare `Basic <base64 user:pass>`, `Bearer <token>`,
/// `Cookie:`/`Set-Cookie:` values (names kept), secret-looking URL query parameters
/// (`sig`, `signature`, `key`, `token`, `code`, ...), CLI flags with a space
/// (`--password x`, `--token x`; not `-p`), `key=value` / `key: value` / `"key": "value"`
/// pairs whose key contains `secret`, `password`, `passwd` or `credential`, ends in
/// `token`, `auth`, `pwd`, `api_key`, `-key`/`_key`, ..., or is `pass`/`pw`
/// (case-insensitive; label and quotes kept; a braced value redacted whole), emails
/// (Unicode too), JWTs, `sk-`/`sk-ant-`/`sk_live_` keys, AWS `AKIA`/`ASIA` ids, GitHub,
/// GitLab and Slack tokens, 32+ hex digits, and 32+ base64 characters mixing upper case,
/// lower case and digits. Every pattern is a `regex` (linear time), compiled once; one
/// copy per matching rule.
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

    #[test]
    fn json_style_keys_are_redacted() {
        assert_eq!(
            redact(
                r#"{"api_key": "s3cr3tvalue", "client_secret": "cs-shortval", "refresh_token":"rt-value-123"}"#
            ),
            r#"{"api_key": "[REDACTED]", "client_secret": "[REDACTED]", "refresh_token":"[REDACTED]"}"#
        );
        // A quoted value is redacted whole, spaces and escaped quotes included.
        assert_eq!(
            redact(r#"{"password": "two words \"q\" here", "n": 1}"#),
            r#"{"password": "[REDACTED]", "n": 1}"#
        );
        // JSON inside a JSON string (escaped quotes).
        assert_eq!(
            redact(r#"body: "{\"access_token\":\"at-123\",\"ok\":false}""#),
            r#"body: "{\"access_token\":\"[REDACTED]\",\"ok\":false}""#
        );
        // Unquoted JSON value, single quotes, and a value whose closing quote was cut.
        assert_eq!(redact(r#"{"token":12345}"#), r#"{"token":[REDACTED]}"#);
        assert_eq!(redact("secret='a b'"), "secret='[REDACTED]'");
        assert_eq!(
            redact(r#"{"password": "cut-of"#),
            r#"{"password": "[REDACTED]"#
        );
    }

    #[test]
    fn prefixed_labels_are_redacted() {
        assert_eq!(
            redact("client_secret=abcd1234 aws_secret_access_key=wJalrXUtnFEMI/K7MDENG"),
            "client_secret=[REDACTED] aws_secret_access_key=[REDACTED]"
        );
        assert_eq!(
            redact("refresh_token=rt1 session_token: st-2; X-Auth-Token=x"),
            "refresh_token=[REDACTED] session_token: [REDACTED]; X-Auth-Token=[REDACTED]"
        );
    }

    #[test]
    fn every_secret_label_in_every_form_is_redacted() {
        let labels = [
            "password",
            "PASSWORD",
            "Db_Password",
            "passwd",
            "pwd",
            "private_key",
            "access_key",
            "credential",
            "credentials",
            "auth",
            "basic_auth",
            "api-key",
            "apikey",
            "secret_key",
            "client_secret",
            "session_token",
        ];
        for k in labels {
            assert_eq!(redact(&format!("{k}=v4lue!x")), format!("{k}=[REDACTED]"));
            assert_eq!(
                redact(&format!("{k}: v4lue!x end")),
                format!("{k}: [REDACTED] end")
            );
            assert_eq!(
                redact(&format!(r#"{{"{k}": "v4lue x"}}"#)),
                format!(r#"{{"{k}": "[REDACTED]"}}"#)
            );
        }
        assert_eq!(redact("token := abc"), "token := [REDACTED]");
        assert_eq!(redact("'password' => 'x'"), "'password' => '[REDACTED]'");
    }

    #[test]
    fn url_userinfo_is_redacted_scheme_and_host_kept() {
        assert_eq!(
            redact("connect postgres://admin:Pa55word@db:5432/x failed"),
            "connect postgres://[REDACTED]@db:5432/x failed"
        );
        assert_eq!(
            redact("GET https://user:pw123@api.example.com/ -> 401"),
            "GET https://[REDACTED]@api.example.com/ -> 401"
        );
        assert_eq!(
            redact("redis://:p@ss@cache:6379"),
            "redis://[REDACTED]@cache:6379"
        );
    }

    #[test]
    fn basic_auth_is_redacted() {
        assert_eq!(
            redact("Authorization: Basic dXNlcjpwYXNzd29yZA=="),
            "Authorization: Basic [REDACTED]"
        );
        assert_eq!(
            redact(r#"headers {"authorization": "basic dXNlcjpwYXNzd29yZA"}"#),
            r#"headers {"authorization": "basic [REDACTED]"}"#
        );
        assert_eq!(
            redact("curl -H 'X: Basic dXNlcjpwYXNzd29yZA==' x"),
            "curl -H 'X: Basic [REDACTED]' x"
        );
    }

    #[test]
    fn unicode_emails_are_redacted() {
        assert_eq!(redact("to josé@example.com:"), "to [REDACTED]:");
        assert_eq!(redact("from ops@bücher.de."), "from [REDACTED].");
    }

    #[test]
    fn pem_private_keys_are_redacted() {
        assert_eq!(
            redact("key -----BEGIN PRIVATE KEY-----MIIEvQ...-----END PRIVATE KEY----- bad"),
            "key [REDACTED] bad"
        );
        assert_eq!(
            redact(
                "load: -----BEGIN RSA PRIVATE KEY-----\nMIIEow\nIBAAK\n-----END RSA PRIVATE KEY-----\nnext"
            ),
            "load: [REDACTED]\nnext"
        );
        // END line cut off: redacted to the end.
        assert_eq!(
            redact("pem -----BEGIN OPENSSH PRIVATE KEY-----\\nb3BlbnNzaC1rZXk\\nAAAA"),
            "pem [REDACTED]"
        );
        let long = format!(
            "bad key -----BEGIN RSA PRIVATE KEY-----\n{}",
            "QUJD".repeat(100)
        );
        assert_eq!(error_summary(&long), "bad key [REDACTED]");
        // Certificates are public: left alone.
        let cert = "-----BEGIN CERTIFICATE-----abc-----END CERTIFICATE-----";
        assert_eq!(redact(cert), cert);
    }

    #[test]
    fn prose_is_not_over_redacted() {
        for plain in [
            "the token was refused",
            "secret santa",
            "exit status 3",
            "max_tokens: 4096, input_tokens=12",
            "tokenizer: cl100k; author: jane",
            "password is required",
            "auth failed: basic authentication failed",
            "basic setup done, basic auth off",
            "panicked at crate::auth::verify: bad",
            "see https://example.com/a:b and http://host:8080/x",
            "token ==null",
            "pass 3 of 5",
            "keyboard: x",
            "monkey: x, bypass: on, compass: n",
            "tokenizer_config: a, author: x, max_tokens: 4096",
            "a non-token value; re-auth failed; the api-key was refused",
            "see ?page=2&sort=asc&error_code=5 and --token-file /etc/t",
            "Set-Cookie: missing",
        ] {
            assert_eq!(redact(plain), plain, "{plain}");
        }
    }

    #[test]
    fn redaction_is_idempotent() {
        for s in [
            r#"{"api_key": "s3cr3tvalue", "client_secret": "cs-shortval"}"#,
            "postgres://admin:Pa55word@db:5432/x",
            "Authorization: Basic dXNlcjpwYXNzd29yZA==",
            "Authorization: Bearer abc",
            "josé@example.com",
            "-----BEGIN PRIVATE KEY-----MIIE-----END PRIVATE KEY-----",
            "credentials: {user: bob, pass: bobpass1}",
            "--password hunter5 '--token' 'x'",
            "Cookie: session=cookiesecret123; csrftoken=abc",
            "Set-Cookie: sid=sidsecret; Path=/",
            "?a=1&sig=abcdEF123%2B&key=AIzaXYZ",
            "pass: Tr0ub4dor&3&x=1",
        ] {
            let once = redact(s);
            assert_eq!(redact(&once), once);
        }
    }

    #[test]
    fn pass_and_pw_labels_are_redacted() {
        assert_eq!(redact("pass: Tr0ub4dor&3"), "pass: [REDACTED]");
        assert_eq!(redact("pw: Tr0ub4dor&3"), "pw: [REDACTED]");
        assert_eq!(
            redact("db_pass=x1 USER_PW: y2"),
            "db_pass=[REDACTED] USER_PW: [REDACTED]"
        );
        assert_eq!(redact(r#"{"pass": "a b"}"#), r#"{"pass": "[REDACTED]"}"#);
        assert_eq!(
            redact("openssl -passin pass:s3cret"),
            "openssl -passin pass:[REDACTED]"
        );
        // A `&name=` query tail after an unquoted value is kept (and redacted on its own).
        assert_eq!(
            redact("password=p&ss&x=1&token=t"),
            "password=[REDACTED]&x=1&token=[REDACTED]"
        );
        assert_eq!(
            redact("pw=a&secret_key_base=b"),
            "pw=[REDACTED]&secret_key_base=[REDACTED]"
        );
    }

    #[test]
    fn braced_credentials_are_redacted_whole() {
        assert_eq!(
            redact("credentials: {user: bob, pass: bobpass1}"),
            "credentials: {[REDACTED]}"
        );
        assert_eq!(
            redact(r#"{"credentials": {"user": "bob", "x": {"k": "v"}}, "n": 1}"#),
            r#"{"credentials": {[REDACTED]}, "n": 1}"#
        );
        // Cut off before the closing brace.
        assert_eq!(redact("auth={user: bob, pw"), "auth={[REDACTED]");
        // An empty object has nothing to hide.
        assert_eq!(redact("credentials: {}"), "credentials: {}");
    }

    #[test]
    fn cli_flags_with_a_space_are_redacted() {
        assert_eq!(
            redact("run --password hunter5 --passwd x --token abc --api-key abc --secret abc -v"),
            "run --password [REDACTED] --passwd [REDACTED] --token [REDACTED] \
             --api-key [REDACTED] --secret [REDACTED] -v"
        );
        assert_eq!(
            redact("--password=hunter5 --token=abc --api-key=abc --secret=abc"),
            "--password=[REDACTED] --token=[REDACTED] --api-key=[REDACTED] --secret=[REDACTED]"
        );
        assert_eq!(
            redact("x --client-secret 'a b' --github_token \"c d\" -storepass s3"),
            "x --client-secret '[REDACTED]' --github_token \"[REDACTED]\" -storepass [REDACTED]"
        );
        // argv lists, JSON or Python style.
        assert_eq!(
            redact(r#"argv ["--token", "abc", "--secret", 'x']"#),
            r#"argv ["--token", "[REDACTED]", "--secret", '[REDACTED]']"#
        );
        // A flag followed by another flag has no value to hide; `-p` is left alone.
        assert_eq!(redact("--token --verbose"), "--token --verbose");
        assert_eq!(
            redact("mysql -p hunter5 -u root"),
            "mysql -p hunter5 -u root"
        );
    }

    #[test]
    fn cookie_values_are_redacted() {
        assert_eq!(
            redact("Cookie: session=cookiesecret123; csrftoken=abc"),
            "Cookie: session=[REDACTED]; csrftoken=[REDACTED]"
        );
        assert_eq!(
            redact("Set-Cookie: sid=sidsecret; Path=/; HttpOnly"),
            "Set-Cookie: sid=[REDACTED]; Path=/; HttpOnly"
        );
        assert_eq!(
            redact(r#"{"set-cookie": "sid=s1; Max-Age=60", "cookie": "a=b"}"#),
            r#"{"set-cookie": "sid=[REDACTED]; Max-Age=60", "cookie": "a=[REDACTED]"}"#
        );
    }

    #[test]
    fn gitlab_tokens_are_redacted() {
        assert_eq!(
            redact("clone with glpat-Ab3dEf6hIj9kLmN0pQr2 failed"),
            "clone with [REDACTED] failed"
        );
        assert_eq!(
            redact("gldt-Ab3dEf6hIj9kLmN0pQr2, glrt-Ab3dEf6hIj9kLmN0pQr2x."),
            "[REDACTED], [REDACTED]."
        );
        assert_eq!(
            redact("t glcbt-64_Ab3dEf6hIj9kLmN0pQr2 glpat-Ab3dEf6hIj9kLmN0pQr2.01.abc9 end"),
            "t [REDACTED] [REDACTED] end"
        );
        assert_eq!(redact("glpat-short"), "glpat-short");
    }

    #[test]
    fn header_names_ending_in_key_token_secret_are_redacted() {
        assert_eq!(
            redact("Ocp-Apim-Subscription-Key: azk123"),
            "Ocp-Apim-Subscription-Key: [REDACTED]"
        );
        assert_eq!(
            redact("X-Goog-Api-Key: g1 X-Vault-Token: v2 X-Client-Secret: s3"),
            "X-Goog-Api-Key: [REDACTED] X-Vault-Token: [REDACTED] X-Client-Secret: [REDACTED]"
        );
        assert_eq!(redact("subscription_key=k4"), "subscription_key=[REDACTED]");
    }

    #[test]
    fn labels_containing_secret_words_are_redacted() {
        assert_eq!(
            redact("secret_key_base=short1"),
            "secret_key_base=[REDACTED]"
        );
        assert_eq!(
            redact("password_hash: h1 db_credential_id=c2 SecretName: s3 passwdfile=p4"),
            "password_hash: [REDACTED] db_credential_id=[REDACTED] SecretName: [REDACTED] \
             passwdfile=[REDACTED]"
        );
        // `token`, `key`, `auth` stay suffix-only.
        for plain in [
            "max_tokens: 4096",
            "tokenizer: x",
            "keyboard: x",
            "author: x",
        ] {
            assert_eq!(redact(plain), plain);
        }
    }

    #[test]
    fn url_query_secrets_are_redacted() {
        assert_eq!(
            redact("GET /x?a=1&sig=abcdEF123%2B&key=AIzaXYZ"),
            "GET /x?a=1&sig=[REDACTED]&key=[REDACTED]"
        );
        assert_eq!(
            redact(
                "https://h/p?signature=s&apikey=a&api_key=b&token=t&access_token=at&code=c&password=p&secret=x&n=2"
            ),
            "https://h/p?signature=[REDACTED]&apikey=[REDACTED]&api_key=[REDACTED]&token=[REDACTED]\
             &access_token=[REDACTED]&code=[REDACTED]&password=[REDACTED]&secret=[REDACTED]&n=2"
        );
        assert_eq!(
            redact("cb#access_token=zz&state=ok; s3?X-Amz-Signature=abc) end"),
            "cb#access_token=[REDACTED]&state=ok; s3?X-Amz-Signature=[REDACTED]) end"
        );
    }
}
