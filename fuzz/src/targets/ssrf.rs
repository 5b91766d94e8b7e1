//! The SSRF guard of the http handler (CONTRACT §5 http.2): [`SsrfGuard::check_url`]
//! on the input as a URL, and [`SsrfGuard::check_ip`] on addresses built from its bytes.
//!
//! Input: the whole file is the URL (lossy UTF-8). Its first 16 bytes (zero-padded) are
//! also an IPv6 address and its first 4 an IPv4 address, which are checked as given and
//! in every wrapper that embeds an IPv4 address (IPv4-mapped, IPv4-compatible, NAT64,
//! 6to4).
//!
//! Property: an address the guard admits is public by an oracle written here from the
//! contract's list, independently of the guard's own tables (not loopback, private,
//! link-local, unique-local, CGNAT, benchmarking, reserved, multicast, unspecified,
//! documentation, nor a mapped / NAT64 / 6to4 / IPv4-compatible form of those; IPv6
//! only inside global unicast 2000::/3, and not Teredo, whose client address is hidden);
//! with an allowlist, an admitted address is public or inside it; an allowlist never
//! makes the guard refuse what it admitted without one. An admitted URL is http(s), has
//! no userinfo and a host that is not a `localhost` name, and its IP-literal host is
//! admitted by [`SsrfGuard::check_ip`].

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use agenthooks_dispatcher::handlers::ssrf::{SsrfGuard, denied_reason};
use ipnet::IpNet;
use url::Host;

/// The target body (see the module docs for the input format).
pub fn run(data: &[u8]) {
    let plain = SsrfGuard::default();
    let allow: Vec<IpNet> = ["10.96.0.0/12", "127.0.0.0/8", "fd00:ab::/64"]
        .iter()
        .map(|n| n.parse().unwrap())
        .collect();
    let listed = SsrfGuard::new(allow.clone());

    let url = String::from_utf8_lossy(data);
    if let Ok(parsed) = plain.check_url(&url) {
        assert!(
            matches!(parsed.scheme(), "http" | "https"),
            "scheme {} admitted",
            parsed.scheme()
        );
        assert!(
            parsed.username().is_empty() && parsed.password().is_none(),
            "userinfo admitted in {parsed}"
        );
        match parsed.host() {
            Some(Host::Ipv4(v4)) => admitted_public(IpAddr::V4(v4)),
            Some(Host::Ipv6(v6)) => admitted_public(IpAddr::V6(v6)),
            Some(Host::Domain(d)) => {
                let d = d.trim_end_matches('.').to_ascii_lowercase();
                assert!(
                    d != "localhost" && !d.ends_with(".localhost"),
                    "local name {d:?} admitted"
                );
                assert!(d.parse::<Ipv4Addr>().is_err(), "IPv4 {d:?} left as a name");
            }
            None => panic!("URL without a host admitted: {parsed}"),
        }
        assert!(
            listed.check_url(&url).is_ok(),
            "an allowlist refused {url:?}"
        );
    }

    let mut b = [0u8; 16];
    let n = data.len().min(16);
    b[..n].copy_from_slice(&data[..n]);
    let v6 = Ipv6Addr::from(b);
    let v4 = Ipv4Addr::new(b[0], b[1], b[2], b[3]);
    let o = v4.octets();
    let wrappers = [
        IpAddr::V4(v4),
        IpAddr::V6(v6),
        IpAddr::V6(v4.to_ipv6_mapped()),
        IpAddr::V6(v4.to_ipv6_compatible()),
        IpAddr::V6(Ipv6Addr::new(
            0x64,
            0xff9b,
            0,
            0,
            0,
            0,
            seg(o[0], o[1]),
            seg(o[2], o[3]),
        )),
        IpAddr::V6(Ipv6Addr::new(
            0x2002,
            seg(o[0], o[1]),
            seg(o[2], o[3]),
            b[6].into(),
            0,
            0,
            0,
            1,
        )),
    ];
    for ip in wrappers {
        let plain_ok = plain.check_ip(ip).is_ok();
        assert_eq!(
            plain_ok,
            denied_reason(ip).is_none(),
            "check_ip and denied_reason agree on {ip}"
        );
        if plain_ok {
            admitted_public(ip);
            assert!(listed.check_ip(ip).is_ok(), "an allowlist refused {ip}");
        }
        if listed.check_ip(ip).is_ok() && !public(ip) {
            assert!(
                embedded(ip)
                    .map(IpAddr::V4)
                    .into_iter()
                    .chain([ip, ip.to_canonical()])
                    .any(|a| allow.iter().any(|n| n.contains(&a))),
                "{ip} admitted by the allowlist guard, but it is neither public nor listed"
            );
        }
    }
}

fn seg(hi: u8, lo: u8) -> u16 {
    u16::from(hi) << 8 | u16::from(lo)
}

fn admitted_public(ip: IpAddr) {
    assert!(
        public(ip),
        "the guard admitted {ip}, which is not a public address"
    );
}

/// The oracle: whether `ip` is a public address by CONTRACT §5 http.2.
pub fn public(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => public_v4(v4),
        IpAddr::V6(v6) => {
            if let Some(v4) = embedded(ip) {
                return public_v4(v4);
            }
            let s = v6.segments();
            let global_unicast = s[0] & 0xe000 == 0x2000;
            let teredo = s[0] == 0x2001 && s[1] == 0;
            let documentation =
                (s[0] == 0x2001 && s[1] == 0x0db8) || (s[0] == 0x3fff && s[1] < 0x1000);
            let benchmarking = s[0] == 0x2001 && s[1] == 2 && s[2] == 0;
            let orchid = s[0] == 0x2001 && (s[1] & 0xfff0 == 0x10 || s[1] & 0xfff0 == 0x20);
            global_unicast && !teredo && !documentation && !benchmarking && !orchid
        }
    }
}

/// The IPv4 address inside IPv4-mapped (`::ffff:0:0/96`), IPv4-compatible (`::/96`,
/// but not `::` and `::1`), NAT64 (`64:ff9b::/96`) and 6to4 (`2002::/16`) addresses.
fn embedded(ip: IpAddr) -> Option<Ipv4Addr> {
    let IpAddr::V6(v6) = ip else { return None };
    let s = v6.segments();
    let low = Ipv4Addr::from((u32::from(s[6]) << 16) | u32::from(s[7]));
    let zero = |r: std::ops::Range<usize>| s[r].iter().all(|&x| x == 0);
    if zero(0..5) && s[5] == 0xffff {
        return Some(low);
    }
    if zero(0..6) && !(s[6] == 0 && s[7] <= 1) {
        return Some(low);
    }
    if s[0] == 0x64 && s[1] == 0xff9b && zero(2..6) {
        return Some(low);
    }
    if s[0] == 0x2002 {
        return Some(Ipv4Addr::from((u32::from(s[1]) << 16) | u32::from(s[2])));
    }
    None
}

fn public_v4(ip: Ipv4Addr) -> bool {
    let o = ip.octets();
    !(ip.is_unspecified()
        || o[0] == 0
        || ip.is_private()
        || ip.is_loopback()
        || ip.is_link_local()
        || (o[0] == 100 && o[1] & 0xc0 == 64)
        || (o[0] == 198 && o[1] & 0xfe == 18)
        || (o[0] == 192 && o[1] == 0 && o[2] == 0)
        || ip.is_documentation()
        || ip.is_multicast()
        || o[0] >= 240)
}
