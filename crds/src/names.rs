//! Kubernetes object names, as the API server checks them: a namespace is a DNS label
//! (RFC 1123, at most 63 characters), an AgentHook's name a DNS subdomain (at most 253).
//! The standalone hooks files, the dry run's inline specs and the console's form refuse
//! what the API server would, so a hook of theirs can always be applied to a cluster.

/// A DNS label: 1..=63 lowercase letters, digits and `-`, starting and ending with a letter
/// or digit.
pub fn is_dns_label(s: &str) -> bool {
    let alnum = |c: u8| c.is_ascii_lowercase() || c.is_ascii_digit();
    let b = s.as_bytes();
    (1..=63).contains(&b.len())
        && b.iter().all(|&c| alnum(c) || c == b'-')
        && alnum(b[0])
        && alnum(b[b.len() - 1])
}

/// A DNS subdomain: 1..=253 characters, dot-separated DNS labels.
pub fn is_dns_subdomain(s: &str) -> bool {
    s.len() <= 253 && s.split('.').all(is_dns_label)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_as_the_api_server_takes_them() {
        for ok in ["a", "tenant-acme", "a1.b-2", &"a".repeat(63)] {
            assert!(is_dns_subdomain(ok), "{ok}");
        }
        for bad in [
            "",
            "A",
            "a/b",
            "../x",
            "a_b",
            "-a",
            "a-",
            "a..b",
            "a\"b",
            &"a".repeat(64),
            "Bad Name<script>",
        ] {
            assert!(!is_dns_subdomain(bad), "{bad}");
        }
        assert!(is_dns_label("tenant-acme"));
        assert!(!is_dns_label("a.b"));
    }
}
