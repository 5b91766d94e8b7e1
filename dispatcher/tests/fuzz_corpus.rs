//! Replays the fuzz corpus on stable Rust (issue 10, "Fuzzing"): every file of
//! `fuzz/seeds/<target>/` (hand-written, named inputs) and `fuzz/corpus/<target>/`
//! (what `make fuzz` found and minimised, crashers included once fixed) goes through the
//! same target body the `cargo fuzz` binaries run, and must not panic.
//!
//! The bodies live in the fuzz crate (`fuzz/src/targets/`), included here by path so
//! this test needs neither nightly nor libFuzzer.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

#[path = "../../fuzz/src/targets/mod.rs"]
#[allow(dead_code)]
mod targets;

fn fuzz_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz")
}

/// The files of `fuzz/<kind>/<target>/`, sorted (none when the directory is missing).
fn inputs(kind: &str, target: &str) -> Vec<PathBuf> {
    let dir = fuzz_dir().join(kind).join(target);
    let mut files: Vec<PathBuf> = match std::fs::read_dir(&dir) {
        Ok(rd) => rd
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.is_file())
            .collect(),
        Err(_) => Vec::new(),
    };
    files.sort();
    files
}

/// Runs `body` on every input of `target`; returns the files that panicked, with the
/// panic message.
fn replay(target: &str, body: targets::Body) -> (usize, Vec<String>) {
    let mut failures = Vec::new();
    let mut count = 0;
    for file in inputs("seeds", target)
        .into_iter()
        .chain(inputs("corpus", target))
    {
        // A running `make fuzz` replaces corpus files as it reduces them.
        let data = match std::fs::read(&file) {
            Ok(d) => d,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => panic!("{}: {e}", file.display()),
        };
        count += 1;
        let started = Instant::now();
        if let Err(panic) = catch_unwind(AssertUnwindSafe(|| body(&data))) {
            let msg = panic
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_default();
            failures.push(format!("{}: {msg}", file.display()));
        }
        // A hang over 1 s is a finding when fuzzing (release build); this is a debug
        // build, so only something far past that fails here.
        let took = started.elapsed();
        if took > Duration::from_secs(20) {
            failures.push(format!("{}: took {took:?}", file.display()));
        }
    }
    (count, failures)
}

#[test]
fn every_target_has_seeds() {
    for (target, _) in targets::TARGETS {
        assert!(
            !inputs("seeds", target).is_empty(),
            "fuzz/seeds/{target}/ holds no input"
        );
    }
}

#[test]
fn the_corpus_replays_without_a_panic() {
    let mut failures = Vec::new();
    for (target, body) in targets::TARGETS {
        let (count, failed) = replay(target, *body);
        assert!(count > 0, "{target}: no input replayed");
        failures.extend(failed);
    }
    assert!(
        failures.is_empty(),
        "inputs that fail:\n{}",
        failures.join("\n")
    );
}

/// The replay reports a panicking body (so a crasher added to the corpus would fail).
#[test]
fn a_panicking_body_is_reported() {
    fn boom(data: &[u8]) {
        assert!(data.is_empty(), "boom");
    }
    let (count, failed) = replay("ssrf", boom);
    assert!(count > 0);
    assert_eq!(
        failed.len(),
        count,
        "every non-empty input panics: {failed:?}"
    );
    assert!(failed[0].contains("boom"), "{}", failed[0]);
}

/// The SSRF target's oracle, written from CONTRACT §5 http.2 independently of the guard,
/// says what the contract says about the field cases' addresses.
#[test]
fn the_ssrf_oracle_follows_the_contract() {
    use std::net::IpAddr;
    let denied = [
        "127.0.0.1",
        "10.1.2.3",
        "172.16.0.1",
        "192.168.1.1",
        "169.254.169.254",
        "100.64.0.1",
        "198.18.0.1",
        "192.0.0.1",
        "240.0.0.1",
        "255.255.255.255",
        "224.0.0.1",
        "0.0.0.1",
        "::1",
        "::",
        "fe80::1",
        "fc00::1",
        "ff02::1",
        "::ffff:127.0.0.1",
        "::ffff:169.254.169.254",
        "64:ff9b::a00:1",
        "2002:c0a8:101::1",
        "::127.0.0.1",
        "2001::1",
        "2001:db8::1",
        "64:ff9b:1::1",
        "3fff::1",
        "3fff:fff::1",
    ];
    for ip in denied {
        let ip: IpAddr = ip.parse().unwrap();
        assert!(!targets::ssrf::public(ip), "{ip} must not count as public");
    }
    for ip in [
        "8.8.8.8",
        "1.1.1.1",
        "2606:4700::1111",
        "::ffff:8.8.8.8",
        "2002:808:808::1",
    ] {
        let ip: IpAddr = ip.parse().unwrap();
        assert!(targets::ssrf::public(ip), "{ip} is public");
    }
}
