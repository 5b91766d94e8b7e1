//! The static rules of an `http` hook's URL (CONTRACT §5 http.2), shared by validation
//! (admission, reconcile, standalone load) and the dispatcher's SSRF guard, which adds
//! address classification and the operator's allowlist on every call.
//!
//! Rules: the URL parses (after trimming control characters, as browsers do); scheme
//! `http` or `https`; no userinfo at all (even an empty `@`); no IPv6 zone id; a host;
//! not a name that always means this machine (`localhost`, `*.localhost`, any case,
//! trailing dot or not); no empty label in a name (`a..b`, `127.0.0.1..`: not a DNS name,
//! and an IPv4 address in disguise would be left to the resolver). IP-literal hosts come back canonicalised by the `url` crate
//! (`http://2130706433/` is `127.0.0.1`) for the guard to classify.

use url::{Host, Url};

/// Why a hook URL breaks a static rule. Messages say what to do.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum UrlError {
    #[error("url is not a valid absolute URL ({detail})")]
    InvalidUrl { detail: String },
    #[error("url scheme `{scheme}` is not allowed: use http or https")]
    Scheme { scheme: String },
    #[error(
        "url must not contain userinfo (`user@` or `user:password@` before the host): send credentials in a header instead"
    )]
    Userinfo,
    #[error("url host must not carry an IPv6 zone id (`%25...`)")]
    ZoneId,
    #[error("url has no host")]
    NoHost,
    #[error(
        "url host `{host}` names the local machine (loopback); point the hook at a routable service, or ask the operator to allow its address range"
    )]
    LocalHostname { host: String },
    #[error("url host `{host}` has an empty label (`..`, or a leading dot): it is not a DNS name")]
    EmptyLabel { host: String },
}

impl UrlError {
    /// A short stable label for logs and metrics: `invalid_url`, `scheme`, `userinfo`,
    /// `zone_id`, `no_host`, `loopback`, `empty_label`.
    pub fn rule(&self) -> &'static str {
        match self {
            UrlError::InvalidUrl { .. } => "invalid_url",
            UrlError::Scheme { .. } => "scheme",
            UrlError::Userinfo => "userinfo",
            UrlError::ZoneId => "zone_id",
            UrlError::NoHost => "no_host",
            UrlError::LocalHostname { .. } => "loopback",
            UrlError::EmptyLabel { .. } => "empty_label",
        }
    }
}

/// Checks the static rules and returns the parsed URL.
pub fn check_hook_url(url: &str) -> Result<Url, UrlError> {
    let cleaned: String = url
        .trim_matches(|c: char| c <= ' ')
        .chars()
        .filter(|c| !matches!(c, '\t' | '\n' | '\r'))
        .collect();
    let authority = raw_authority(&cleaned);
    let parsed = match Url::parse(&cleaned) {
        Ok(u) => u,
        Err(e) => {
            if authority.is_some_and(has_zone_id) {
                return Err(UrlError::ZoneId);
            }
            return Err(UrlError::InvalidUrl {
                detail: e.to_string(),
            });
        }
    };
    let scheme = parsed.scheme();
    if scheme != "http" && scheme != "https" {
        return Err(UrlError::Scheme {
            scheme: scheme.to_owned(),
        });
    }
    if !parsed.username().is_empty()
        || parsed.password().is_some()
        || authority.is_some_and(|a| a.contains('@'))
    {
        return Err(UrlError::Userinfo);
    }
    if authority.is_some_and(has_zone_id) {
        return Err(UrlError::ZoneId);
    }
    match parsed.host() {
        None => return Err(UrlError::NoHost),
        Some(Host::Domain(d)) => {
            if d.is_empty() {
                return Err(UrlError::NoHost);
            }
            let name = d.trim_end_matches('.').to_ascii_lowercase();
            if name == "localhost" || name.ends_with(".localhost") {
                return Err(UrlError::LocalHostname { host: d.to_owned() });
            }
            // One trailing dot is the root label; any other empty label is no DNS name.
            if d.strip_suffix('.')
                .unwrap_or(d)
                .split('.')
                .any(str::is_empty)
            {
                return Err(UrlError::EmptyLabel { host: d.to_owned() });
            }
        }
        Some(Host::Ipv4(_) | Host::Ipv6(_)) => {}
    }
    Ok(parsed)
}

/// The authority part of a URL as written (before the `url` crate normalises it), so
/// `http://@host/` and zone ids are seen even where parsing hides them.
fn raw_authority(s: &str) -> Option<&str> {
    let colon = s.find(':')?;
    let rest = &s[colon + 1..];
    let rest = rest.trim_start_matches(['/', '\\']);
    let end = rest.find(['/', '\\', '?', '#']).unwrap_or(rest.len());
    Some(&rest[..end])
}

fn has_zone_id(authority: &str) -> bool {
    match (authority.find('['), authority.rfind(']')) {
        (Some(open), Some(close)) if open < close => authority[open..close].contains('%'),
        (Some(open), None) => authority[open..].contains('%'),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refusals_from_the_cases_table() {
        for (url, want) in [
            (
                "file:///etc/passwd",
                UrlError::Scheme {
                    scheme: "file".into(),
                },
            ),
            (
                "gopher://127.0.0.1:6379/_INFO",
                UrlError::Scheme {
                    scheme: "gopher".into(),
                },
            ),
            ("http://[fe80::1%25eth0]/", UrlError::ZoneId),
            ("http://evil.example@127.0.0.1/", UrlError::Userinfo),
            ("http://@example.com/", UrlError::Userinfo),
            ("http://user:pw@example.com/", UrlError::Userinfo),
            (
                "http://localhost./",
                UrlError::LocalHostname {
                    host: "localhost.".into(),
                },
            ),
            (
                "HTTP://LOCALHOST/",
                UrlError::LocalHostname {
                    host: "localhost".into(),
                },
            ),
            (
                "http://api.localhost/",
                UrlError::LocalHostname {
                    host: "api.localhost".into(),
                },
            ),
        ] {
            assert_eq!(check_hook_url(url).unwrap_err(), want, "{url}");
        }
        assert!(matches!(
            check_hook_url("not a url"),
            Err(UrlError::InvalidUrl { .. })
        ));
    }

    #[test]
    fn names_with_an_empty_label_are_refused() {
        // Found by the `ssrf` fuzz target: `127.0.0.1..` is not an IPv4 address to the
        // `url` crate, so it stayed a name, left to the resolver.
        for url in [
            "http://127.0.0.1../",
            "http://a..example/",
            "http://.example/",
            "http://x.example../",
        ] {
            let e = check_hook_url(url).unwrap_err();
            assert_eq!(e.rule(), "empty_label", "{url}: {e}");
        }
        for url in ["http://example.com./", "http://127.0.0.1./"] {
            assert!(check_hook_url(url).is_ok(), "{url}");
        }
    }

    #[test]
    fn fragment_tricks_keep_the_real_host() {
        // `127.0.0.1#@evil.example` is host 127.0.0.1 with a fragment: left for the guard.
        let u = check_hook_url("http://127.0.0.1#@evil.example/").unwrap();
        assert_eq!(u.host_str(), Some("127.0.0.1"));
    }

    #[test]
    fn odd_ipv4_spellings_come_back_canonical() {
        for url in [
            "http://2130706433/",
            "http://0x7f.1/",
            "http://0177.0.0.1/",
            "http://127.1/",
        ] {
            assert_eq!(
                check_hook_url(url).unwrap().host_str(),
                Some("127.0.0.1"),
                "{url}"
            );
        }
    }

    #[test]
    fn ordinary_urls_pass() {
        assert!(check_hook_url("https://policy.example.com/hook").is_ok());
        assert!(check_hook_url(" HTTP://example.com/ ").is_ok());
    }
}
