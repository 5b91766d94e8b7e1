//! The SSRF guard of the `http` handler (CONTRACT §5 http.2; seed "Security model":
//! "validates URLs before request, pins resolved IP, blocks loopback/link-local/private
//! ranges").
//!
//! Two checks, used at hook validation time and again on every dispatch:
//!
//! * [`SsrfGuard::check_url`] — the static check of a URL string: scheme `http`/`https`
//!   only, no userinfo, no IPv6 zone id, no `localhost` names, and IP-literal hosts
//!   classified. The `url` crate canonicalises the odd IPv4 spellings (`2130706433`,
//!   `0x7f.1`, `0177.0.0.1`, `127.1`, `127.0.0.1.`) to dotted quads, so they are
//!   classified like any other literal.
//! * [`SsrfGuard::check_ip`] — one address, after `to_canonical()` (IPv4-mapped IPv6) and
//!   after unwrapping the IPv4 address embedded in IPv4-compatible (`::a.b.c.d`), NAT64
//!   (`64:ff9b::/96`) and 6to4 (`2002::/16`) forms.
//!
//! Resolution of hostnames (once per call, every answer checked, connect only to the
//! checked addresses) lives in `super::http`; this module gives it the [`HostResolver`]
//! seam so tests can make a name answer whatever they like.
//!
//! The operator-set allowlist (`--http-allow-cidr`, Helm value) is the only thing that
//! admits an otherwise denied address; nothing switches the guard off.

use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use agenthooks_crds::validation::{UrlError, check_hook_url};
use futures::future::BoxFuture;
use ipnet::IpNet;
use url::{Host, Url};

/// Resolves a host name to socket addresses. One call per hook run (CONTRACT §5 http.2:
/// "resolve the host"); every returned address is checked and only those are dialled.
///
/// `host` is the URL's host as the `url` crate serialises it (lowercase, punycode, a
/// trailing dot kept); `port` is the URL's port or the scheme's default. Implementations
/// return every address the name has (an empty list is treated as a resolution failure).
pub trait HostResolver: Send + Sync {
    /// Resolves `host` (a DNS name, never an IP literal) for `port`.
    fn resolve(&self, host: &str, port: u16) -> BoxFuture<'static, io::Result<Vec<SocketAddr>>>;
}

/// The system resolver (`getaddrinfo` through `tokio::net::lookup_host`).
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemResolver;

impl HostResolver for SystemResolver {
    fn resolve(&self, host: &str, port: u16) -> BoxFuture<'static, io::Result<Vec<SocketAddr>>> {
        let host = host.to_owned();
        Box::pin(async move {
            let addrs = tokio::net::lookup_host((host.as_str(), port)).await?;
            Ok(addrs.collect())
        })
    }
}

/// Why the guard refused a URL or an address. The `Display` text names the rule in words
/// a person can act on (CONTRACT §2.7); [`SsrfError::rule`] gives a short stable label for
/// logs and metrics.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SsrfError {
    /// The URL breaks a static rule shared with hook validation (parse, scheme,
    /// userinfo, zone id, host, `localhost` names): see [`UrlError`].
    #[error(transparent)]
    Url(#[from] UrlError),
    /// An address (IP literal in the URL, or one the host name resolved to) is in a
    /// denied range and not in the operator's allowlist.
    #[error(
        "address {ip}{} is {reason} and not in the operator allowlist (--http-allow-cidr); \
         hooks may only call public addresses or allow-listed ranges",
        embedded_note(*.embedded)
    )]
    DeniedAddress {
        /// The address as found.
        ip: IpAddr,
        /// The IPv4 address it embeds (IPv4-mapped, IPv4-compatible, NAT64, 6to4), if any.
        embedded: Option<Ipv4Addr>,
        /// The range rule, e.g. `loopback`, `private`, `link-local` (see [`denied_reason`]).
        reason: &'static str,
    },
}

fn embedded_note(embedded: Option<Ipv4Addr>) -> String {
    match embedded {
        Some(v4) => format!(" (embedding IPv4 {v4})"),
        None => String::new(),
    }
}

impl SsrfError {
    /// A short stable label for the rule that refused: `invalid_url`, `scheme`, `userinfo`,
    /// `zone_id`, `no_host`, or the address rule (`loopback`, `private`, ...).
    pub fn rule(&self) -> &'static str {
        match self {
            SsrfError::Url(e) => e.rule(),
            SsrfError::DeniedAddress { reason, .. } => reason,
        }
    }
}

/// The SSRF guard: deny ranges plus the operator's allowlist.
///
/// Cheap to clone (a small vector of CIDRs).
#[derive(Debug, Clone, Default)]
pub struct SsrfGuard {
    allow_cidrs: Vec<IpNet>,
}

impl SsrfGuard {
    /// A guard admitting, beyond public addresses, exactly the given CIDRs (e.g. the
    /// cluster's service range `10.96.0.0/12`, or `127.0.0.0/8` in tests). An empty list
    /// admits public addresses only.
    pub fn new(allow_cidrs: Vec<IpNet>) -> Self {
        SsrfGuard { allow_cidrs }
    }

    /// The operator allowlist this guard was built with.
    pub fn allow_cidrs(&self) -> &[IpNet] {
        &self.allow_cidrs
    }

    /// Static check of a URL string, used at hook validation time and at dispatch
    /// (CONTRACT §5 http.2).
    ///
    /// Refuses what the shared static rules refuse
    /// ([`agenthooks_crds::validation::check_hook_url`]: parse, scheme, userinfo, zone
    /// id, host, `localhost` names), then IP-literal hosts that [`SsrfGuard::check_ip`]
    /// refuses. Host names are *not* resolved here; `super::http` resolves and checks them
    /// on every call.
    ///
    /// Returns the parsed URL on success.
    pub fn check_url(&self, url: &str) -> Result<Url, SsrfError> {
        let parsed = check_hook_url(url)?;
        match parsed.host() {
            Some(Host::Ipv4(v4)) => self.check_ip(IpAddr::V4(v4))?,
            Some(Host::Ipv6(v6)) => self.check_ip(IpAddr::V6(v6))?,
            _ => {}
        }
        Ok(parsed)
    }

    /// Classifies one address: `Ok` if it is public or inside the operator allowlist,
    /// otherwise [`SsrfError::DeniedAddress`] naming the range (see [`denied_reason`]).
    ///
    /// The allowlist is matched against the address as given, its canonical form and the
    /// IPv4 address it embeds, so `10.96.0.0/12` also admits `::ffff:10.96.0.1`.
    pub fn check_ip(&self, ip: IpAddr) -> Result<(), SsrfError> {
        let Some(denial) = classify(ip) else {
            return Ok(());
        };
        let canonical = ip.to_canonical();
        let allowed = self.allow_cidrs.iter().any(|net| {
            net.contains(&ip)
                || net.contains(&canonical)
                || denial
                    .embedded
                    .is_some_and(|v4| net.contains(&IpAddr::V4(v4)))
        });
        if allowed {
            return Ok(());
        }
        Err(SsrfError::DeniedAddress {
            ip,
            embedded: denial.embedded,
            reason: denial.reason,
        })
    }
}

/// The deny-range rule an address falls under, or `None` if it is public.
///
/// IPv6 addresses are first canonicalised (`::ffff:a.b.c.d` becomes `a.b.c.d`) and the
/// IPv4 address embedded in IPv4-compatible (`::a.b.c.d`), NAT64 (`64:ff9b::/96`) and
/// 6to4 (`2002::/16`) forms is classified instead of the wrapper.
///
/// Rules (IPv4): `unspecified` 0.0.0.0/8, `private` 10/8 172.16/12 192.168/16,
/// `loopback` 127/8, `link-local` 169.254/16, `cgnat` 100.64/10, `ietf-protocol`
/// 192.0.0.0/24, `documentation` 192.0.2/24 198.51.100/24 203.0.113/24, `6to4-relay`
/// 192.88.99/24, `benchmarking` 198.18/15, `multicast` 224/4, `broadcast`
/// 255.255.255.255, `reserved` 240/4.
/// Rules (IPv6): `unspecified` ::, `loopback` ::1, `link-local` fe80::/10, `site-local`
/// fec0::/10, `unique-local` fc00::/7, `multicast` ff00::/8, `documentation`
/// 2001:db8::/32 3fff::/20, `benchmarking` 2001:2::/48, `teredo` 2001::/32, `orchid`
/// 2001:10::/28 2001:20::/28, `discard-only` 100::/64, `nat64-local` 64:ff9b:1::/48, and
/// `reserved` for anything else outside global unicast 2000::/3.
pub fn denied_reason(ip: IpAddr) -> Option<&'static str> {
    classify(ip).map(|d| d.reason)
}

/// A denial: the rule, and the embedded IPv4 address it was found in, if any.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Denial {
    reason: &'static str,
    embedded: Option<Ipv4Addr>,
}

fn classify(ip: IpAddr) -> Option<Denial> {
    match ip.to_canonical() {
        IpAddr::V4(v4) => {
            let embedded = match ip {
                IpAddr::V6(_) => Some(v4),
                IpAddr::V4(_) => None,
            };
            v4_reason(v4).map(|reason| Denial { reason, embedded })
        }
        IpAddr::V6(v6) => {
            if let Some(v4) = embedded_v4(v6) {
                return v4_reason(v4).map(|reason| Denial {
                    reason,
                    embedded: Some(v4),
                });
            }
            v6_reason(v6).map(|reason| Denial {
                reason,
                embedded: None,
            })
        }
    }
}

/// The IPv4 address carried by IPv4-compatible (`::a.b.c.d`, not `::` or `::1`), NAT64
/// well-known prefix (`64:ff9b::/96`) and 6to4 (`2002:aabb:ccdd::/48`) addresses.
/// IPv4-mapped addresses are handled by `to_canonical()` before this.
fn embedded_v4(v6: Ipv6Addr) -> Option<Ipv4Addr> {
    let s = v6.segments();
    let low32 = Ipv4Addr::new((s[6] >> 8) as u8, s[6] as u8, (s[7] >> 8) as u8, s[7] as u8);
    // IPv4-compatible ::a.b.c.d (deprecated); :: and ::1 have their own rules.
    if s[..6].iter().all(|&x| x == 0) && !(s[6] == 0 && s[7] <= 1) {
        return Some(low32);
    }
    // NAT64 well-known prefix 64:ff9b::/96 (RFC 6052).
    if s[0] == 0x64 && s[1] == 0xff9b && s[2..6].iter().all(|&x| x == 0) {
        return Some(low32);
    }
    // 6to4 2002:V4ADDR::/48 (RFC 3056).
    if s[0] == 0x2002 {
        return Some(Ipv4Addr::new(
            (s[1] >> 8) as u8,
            s[1] as u8,
            (s[2] >> 8) as u8,
            s[2] as u8,
        ));
    }
    None
}

fn in_v4(ip: Ipv4Addr, net: [u8; 4], prefix: u8) -> bool {
    let mask = if prefix == 0 {
        0
    } else {
        u32::MAX << (32 - prefix)
    };
    (u32::from(ip) & mask) == (u32::from(Ipv4Addr::from(net)) & mask)
}

fn in_v6(ip: Ipv6Addr, net: [u16; 8], prefix: u8) -> bool {
    let mask = if prefix == 0 {
        0
    } else {
        u128::MAX << (128 - prefix)
    };
    (u128::from(ip) & mask) == (u128::from(Ipv6Addr::from(net)) & mask)
}

fn v4_reason(ip: Ipv4Addr) -> Option<&'static str> {
    const RULES: &[([u8; 4], u8, &str)] = &[
        ([0, 0, 0, 0], 8, "unspecified"),
        ([10, 0, 0, 0], 8, "private"),
        ([100, 64, 0, 0], 10, "cgnat"),
        ([127, 0, 0, 0], 8, "loopback"),
        ([169, 254, 0, 0], 16, "link-local"),
        ([172, 16, 0, 0], 12, "private"),
        ([192, 0, 0, 0], 24, "ietf-protocol"),
        ([192, 0, 2, 0], 24, "documentation"),
        ([192, 88, 99, 0], 24, "6to4-relay"),
        ([192, 168, 0, 0], 16, "private"),
        ([198, 18, 0, 0], 15, "benchmarking"),
        ([198, 51, 100, 0], 24, "documentation"),
        ([203, 0, 113, 0], 24, "documentation"),
        ([224, 0, 0, 0], 4, "multicast"),
        ([255, 255, 255, 255], 32, "broadcast"),
        ([240, 0, 0, 0], 4, "reserved"),
    ];
    RULES
        .iter()
        .find(|(net, prefix, _)| in_v4(ip, *net, *prefix))
        .map(|(_, _, reason)| *reason)
}

fn v6_reason(ip: Ipv6Addr) -> Option<&'static str> {
    const RULES: &[([u16; 8], u8, &str)] = &[
        ([0, 0, 0, 0, 0, 0, 0, 0], 128, "unspecified"),
        ([0, 0, 0, 0, 0, 0, 0, 1], 128, "loopback"),
        ([0xfe80, 0, 0, 0, 0, 0, 0, 0], 10, "link-local"),
        ([0xfec0, 0, 0, 0, 0, 0, 0, 0], 10, "site-local"),
        ([0xfc00, 0, 0, 0, 0, 0, 0, 0], 7, "unique-local"),
        ([0xff00, 0, 0, 0, 0, 0, 0, 0], 8, "multicast"),
        ([0x0100, 0, 0, 0, 0, 0, 0, 0], 64, "discard-only"),
        ([0x0064, 0xff9b, 1, 0, 0, 0, 0, 0], 48, "nat64-local"),
        ([0x2001, 0x0db8, 0, 0, 0, 0, 0, 0], 32, "documentation"),
        ([0x3fff, 0, 0, 0, 0, 0, 0, 0], 20, "documentation"),
        ([0x2001, 0x0002, 0, 0, 0, 0, 0, 0], 48, "benchmarking"),
        ([0x2001, 0x0010, 0, 0, 0, 0, 0, 0], 28, "orchid"),
        ([0x2001, 0x0020, 0, 0, 0, 0, 0, 0], 28, "orchid"),
        ([0x2001, 0, 0, 0, 0, 0, 0, 0], 32, "teredo"),
    ];
    if let Some((_, _, reason)) = RULES
        .iter()
        .find(|(net, prefix, _)| in_v6(ip, *net, *prefix))
    {
        return Some(reason);
    }
    // Global unicast is 2000::/3; everything else is unassigned or special.
    if !in_v6(ip, [0x2000, 0, 0, 0, 0, 0, 0, 0], 3) {
        return Some("reserved");
    }
    None
}

/// The authority part of a URL string as written (between `scheme://` and the first
/// `/`, `\`, `?` or `#`), before any parser normalisation. `None` if there is no `:`.
#[cfg(test)]
mod tests {
    use super::*;

    fn guard() -> SsrfGuard {
        SsrfGuard::new(vec![])
    }

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn odd_ipv4_spellings_are_canonicalised_and_refused_as_loopback() {
        for url in [
            "http://2130706433/",
            "http://0x7f.1/",
            "http://0177.0.0.1/",
            "http://127.1/",
            "http://127.0.0.1./",
            "http://127.0.0.1:8080/x",
            "http://127.0.0.1#@evil.example/",
        ] {
            let err = guard().check_url(url).unwrap_err();
            assert_eq!(
                err,
                SsrfError::DeniedAddress {
                    ip: ip("127.0.0.1"),
                    embedded: None,
                    reason: "loopback"
                },
                "{url}"
            );
        }
    }

    #[test]
    fn ipv4_mapped_literals_are_refused_by_their_embedded_address() {
        let cases = [
            (
                "http://[::ffff:127.0.0.1]/",
                "::ffff:127.0.0.1",
                "127.0.0.1",
                "loopback",
            ),
            (
                "http://[::ffff:7f00:1]/",
                "::ffff:127.0.0.1",
                "127.0.0.1",
                "loopback",
            ),
            (
                "http://[::ffff:169.254.169.254]/",
                "::ffff:169.254.169.254",
                "169.254.169.254",
                "link-local",
            ),
            (
                "http://[::ffff:10.0.0.1]/",
                "::ffff:10.0.0.1",
                "10.0.0.1",
                "private",
            ),
        ];
        for (url, addr, v4, reason) in cases {
            assert_eq!(
                guard().check_url(url).unwrap_err(),
                SsrfError::DeniedAddress {
                    ip: ip(addr),
                    embedded: Some(v4.parse().unwrap()),
                    reason
                },
                "{url}"
            );
        }
    }

    #[test]
    fn unspecified_and_this_network_are_refused() {
        for (url, reason) in [
            ("http://0/", "unspecified"),
            ("http://1/", "unspecified"),
            ("http://0.0.0.0/", "unspecified"),
            ("http://[::]/", "unspecified"),
        ] {
            assert_eq!(guard().check_url(url).unwrap_err().rule(), reason, "{url}");
        }
        assert_eq!(
            guard().check_url("http://1/").unwrap_err(),
            SsrfError::DeniedAddress {
                ip: ip("0.0.0.1"),
                embedded: None,
                reason: "unspecified"
            }
        );
    }

    #[test]
    fn special_ranges_from_the_cases_table_are_refused() {
        for (url, reason) in [
            ("http://100.64.0.1/", "cgnat"),
            ("http://198.18.0.1/", "benchmarking"),
            ("http://198.19.255.255/", "benchmarking"),
            ("http://192.0.0.1/", "ietf-protocol"),
            ("http://[fe80::1]/", "link-local"),
            ("http://[fc00::1]/", "unique-local"),
            ("http://[fd12:3456::1]/", "unique-local"),
            ("http://169.254.169.254/", "link-local"),
            ("http://10.1.2.3/", "private"),
            ("http://172.16.0.1/", "private"),
            ("http://172.31.255.255/", "private"),
            ("http://192.168.1.1/", "private"),
            ("http://240.0.0.1/", "reserved"),
            ("http://255.255.255.255/", "broadcast"),
            ("http://224.0.0.1/", "multicast"),
            ("http://239.255.255.250/", "multicast"),
            ("http://[ff02::1]/", "multicast"),
            ("http://[::1]/", "loopback"),
            ("http://192.0.2.10/", "documentation"),
            ("http://[2001:db8::1]/", "documentation"),
        ] {
            let err = guard().check_url(url).unwrap_err();
            assert_eq!(err.rule(), reason, "{url}: {err}");
            assert!(matches!(err, SsrfError::DeniedAddress { .. }), "{url}");
        }
    }

    #[test]
    fn public_addresses_and_names_pass() {
        for url in [
            "http://8.8.8.8/",
            "https://1.1.1.1:8443/hook?x=1",
            "http://172.32.0.1/",
            "http://100.128.0.1/",
            "http://198.20.0.1/",
            "http://[2606:4700:4700::1111]/",
            "https://policy.example.com/hook",
            "HTTPS://Policy.Example.COM/hook",
        ] {
            assert!(guard().check_url(url).is_ok(), "{url}");
        }
        assert_eq!(
            guard()
                .check_url("HTTPS://Policy.Example.COM/hook")
                .unwrap()
                .host_str(),
            Some("policy.example.com")
        );
    }

    #[test]
    fn localhost_names_are_refused_in_any_spelling() {
        for url in [
            "http://localhost/",
            "http://localhost./",
            "HTTP://LOCALHOST/",
            "http://LocalHost:8080/x",
            "http://api.localhost/",
            "http://api.localhost./",
        ] {
            let err = guard().check_url(url).unwrap_err();
            assert!(
                matches!(err, SsrfError::Url(UrlError::LocalHostname { .. })),
                "{url}: {err:?}"
            );
        }
        // A name merely containing "localhost" is not special.
        assert!(guard().check_url("http://notlocalhost.example/").is_ok());
    }

    #[test]
    fn userinfo_is_refused_outright() {
        for url in [
            "http://evil.example@127.0.0.1/",
            "http://user:pw@example.com/",
            "http://user@example.com/",
            "http://:pw@example.com/",
            "http://@example.com/",
            "https://a@b@example.com/",
        ] {
            assert_eq!(
                guard().check_url(url).unwrap_err(),
                SsrfError::Url(UrlError::Userinfo),
                "{url}"
            );
        }
        // '@' after the authority is just a path/query character.
        assert!(guard().check_url("https://example.com/a@b?c=@d").is_ok());
    }

    #[test]
    fn non_http_schemes_are_refused() {
        for (url, scheme) in [
            ("file:///etc/passwd", "file"),
            ("gopher://127.0.0.1:6379/_INFO", "gopher"),
            ("ftp://example.com/", "ftp"),
            ("dict://example.com:11211/", "dict"),
            ("ws://example.com/", "ws"),
        ] {
            assert_eq!(
                guard().check_url(url).unwrap_err(),
                SsrfError::Url(UrlError::Scheme {
                    scheme: scheme.into()
                }),
                "{url}"
            );
        }
    }

    #[test]
    fn zone_ids_are_refused() {
        for url in [
            "http://[fe80::1%25eth0]/",
            "http://[fe80::1%eth0]/",
            "http://[2606:4700::1%251]/",
        ] {
            assert_eq!(
                guard().check_url(url).unwrap_err(),
                SsrfError::Url(UrlError::ZoneId),
                "{url}"
            );
        }
    }

    #[test]
    fn garbage_is_an_invalid_url() {
        for url in [
            "",
            "not a url",
            "http://",
            "/relative/path",
            "http://exa mple.com/",
        ] {
            let err = guard().check_url(url).unwrap_err();
            assert!(
                matches!(
                    err,
                    SsrfError::Url(UrlError::InvalidUrl { .. } | UrlError::NoHost)
                ),
                "{url}: {err:?}"
            );
        }
    }

    #[test]
    fn error_messages_name_the_rule() {
        let msg = guard()
            .check_url("http://169.254.169.254/latest/meta-data")
            .unwrap_err()
            .to_string();
        assert!(msg.contains("169.254.169.254"), "{msg}");
        assert!(msg.contains("link-local"), "{msg}");
        assert!(msg.contains("--http-allow-cidr"), "{msg}");
        let msg = guard()
            .check_url("file:///etc/passwd")
            .unwrap_err()
            .to_string();
        assert!(
            msg.contains("`file`") && msg.contains("http or https"),
            "{msg}"
        );
        let msg = guard()
            .check_url("http://[::ffff:127.0.0.1]/")
            .unwrap_err()
            .to_string();
        assert!(msg.contains("embedding IPv4 127.0.0.1"), "{msg}");
    }

    #[test]
    fn embedded_ipv4_forms_are_classified_by_the_embedded_address() {
        let cases = [
            // NAT64 well-known prefix.
            ("64:ff9b::7f00:1", Some("loopback"), Some("127.0.0.1")),
            (
                "64:ff9b::a9fe:a9fe",
                Some("link-local"),
                Some("169.254.169.254"),
            ),
            ("64:ff9b::808:808", None, Some("8.8.8.8")),
            // 6to4.
            ("2002:7f00:1::1", Some("loopback"), Some("127.0.0.1")),
            ("2002:c0a8:101::", Some("private"), Some("192.168.1.1")),
            ("2002:808:808::1", None, Some("8.8.8.8")),
            // IPv4-compatible (deprecated).
            ("::7f00:1", Some("loopback"), Some("127.0.0.1")),
            ("::a00:1", Some("private"), Some("10.0.0.1")),
            // IPv4-mapped.
            ("::ffff:0:1", Some("unspecified"), Some("0.0.0.1")),
            ("::ffff:808:808", None, Some("8.8.8.8")),
        ];
        for (addr, reason, v4) in cases {
            let a = ip(addr);
            assert_eq!(denied_reason(a), reason, "{addr}");
            assert_eq!(
                classify(a).map(|d| d.embedded),
                reason.map(|_| v4.map(|s| s.parse().unwrap())),
                "{addr}"
            );
            assert_eq!(guard().check_ip(a).is_ok(), reason.is_none(), "{addr}");
        }
    }

    #[test]
    fn ipv6_special_ranges() {
        for (addr, reason) in [
            ("::", "unspecified"),
            ("::1", "loopback"),
            ("fe80::abcd", "link-local"),
            ("febf::1", "link-local"),
            ("fec0::1", "site-local"),
            ("fc00::", "unique-local"),
            ("fdff:ffff::1", "unique-local"),
            ("ff05::2", "multicast"),
            ("100::1", "discard-only"),
            ("64:ff9b:1::a00:1", "nat64-local"),
            ("2001:db8:1::1", "documentation"),
            ("3fff:1::1", "documentation"),
            ("2001:2::1", "benchmarking"),
            ("2001:10::1", "orchid"),
            ("2001:0:4136:e378:8000:63bf:3fff:fdd2", "teredo"),
            ("::ffff:0:a00:1", "reserved"), // IPv4-translated (SIIT)
            ("4000::1", "reserved"),
            ("1::1", "reserved"),
        ] {
            assert_eq!(denied_reason(ip(addr)), Some(reason), "{addr}");
        }
        for addr in [
            "2606:4700:4700::1111",
            "2a00:1450:4001::200e",
            "2001:4860::8888",
        ] {
            assert_eq!(denied_reason(ip(addr)), None, "{addr}");
        }
    }

    #[test]
    fn ipv4_boundaries() {
        for (addr, reason) in [
            ("0.255.255.255", Some("unspecified")),
            ("1.0.0.0", None),
            ("9.255.255.255", None),
            ("10.0.0.0", Some("private")),
            ("11.0.0.0", None),
            ("100.63.255.255", None),
            ("100.64.0.0", Some("cgnat")),
            ("100.127.255.255", Some("cgnat")),
            ("126.255.255.255", None),
            ("127.255.255.255", Some("loopback")),
            ("169.253.255.255", None),
            ("172.15.255.255", None),
            ("172.16.0.0", Some("private")),
            ("192.0.1.0", None),
            ("192.88.99.1", Some("6to4-relay")),
            ("192.167.255.255", None),
            ("198.17.255.255", None),
            ("198.51.100.7", Some("documentation")),
            ("203.0.113.7", Some("documentation")),
            ("223.255.255.255", None),
            ("224.0.0.0", Some("multicast")),
            ("240.0.0.0", Some("reserved")),
            ("255.255.255.254", Some("reserved")),
            ("255.255.255.255", Some("broadcast")),
        ] {
            assert_eq!(denied_reason(ip(addr)), reason, "{addr}");
        }
    }

    #[test]
    fn allowlist_admits_only_the_listed_ranges() {
        let g = SsrfGuard::new(vec!["127.0.0.0/8".parse().unwrap()]);
        assert!(g.check_ip(ip("127.0.0.1")).is_ok());
        assert!(g.check_ip(ip("::ffff:127.0.0.1")).is_ok());
        assert!(g.check_url("http://127.0.0.1:9/").is_ok());
        assert!(g.check_url("http://2130706433/").is_ok());
        // Not listed: still refused.
        assert_eq!(g.check_ip(ip("10.0.0.1")).unwrap_err().rule(), "private");
        assert_eq!(g.check_ip(ip("::1")).unwrap_err().rule(), "loopback");
        // The allowlist does not switch off the other URL rules.
        assert_eq!(
            g.check_url("http://localhost/").unwrap_err().rule(),
            "loopback"
        );
        assert_eq!(
            g.check_url("http://u@127.0.0.1/").unwrap_err(),
            SsrfError::Url(UrlError::Userinfo)
        );
        assert_eq!(
            g.check_url("gopher://127.0.0.1/").unwrap_err().rule(),
            "scheme"
        );

        let svc = SsrfGuard::new(vec!["10.96.0.0/12".parse().unwrap()]);
        assert!(svc.check_ip(ip("10.96.0.10")).is_ok());
        assert!(svc.check_ip(ip("10.111.255.255")).is_ok());
        assert!(svc.check_ip(ip("64:ff9b::a60:a")).is_ok());
        assert_eq!(
            svc.check_ip(ip("10.112.0.0")).unwrap_err().rule(),
            "private"
        );
        assert_eq!(
            svc.check_ip(ip("127.0.0.1")).unwrap_err().rule(),
            "loopback"
        );

        // Without the allowlist the same address is refused.
        assert_eq!(
            guard().check_ip(ip("127.0.0.1")).unwrap_err().rule(),
            "loopback"
        );
    }

    #[test]
    fn rule_labels_of_url_errors() {
        assert_eq!(SsrfError::Url(UrlError::Userinfo).rule(), "userinfo");
        assert_eq!(SsrfError::Url(UrlError::ZoneId).rule(), "zone_id");
        assert_eq!(SsrfError::Url(UrlError::NoHost).rule(), "no_host");
        assert_eq!(
            SsrfError::Url(UrlError::Scheme {
                scheme: "file".into()
            })
            .rule(),
            "scheme"
        );
        assert_eq!(
            SsrfError::Url(UrlError::InvalidUrl {
                detail: String::new()
            })
            .rule(),
            "invalid_url"
        );
    }
}
