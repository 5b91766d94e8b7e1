//! Issue 15's memory and delta-cost figures of a synced dispatcher, in process and without
//! an operator: the bodies the operator would send are generated here and taken exactly as
//! `sync::follow` takes them (`SyncedSet::absorb` on a blocking thread of a multi-thread
//! runtime, the set it returns swapped in for readers).
//!
//! 1. **Bulk**: a complete snapshot with one `pre_tool_use` hook, then
//!    `AGENTHOOKS_BENCH_HOOKS` (10,000) hooks shaped as the scale bench's (six events, a
//!    matcher each, an `ifExpr` every other one) arriving in `AGENTHOOKS_BENCH_DELTAS` (600)
//!    deltas, as a bulk apply reaches a dispatcher.
//! 2. **Edits**: `AGENTHOOKS_BENCH_EDITS` (100) deltas that each change one hook (the
//!    `pre_tool_use` one gets a new matcher), timed from the body to the set built.
//! 3. **Full** (`AGENTHOOKS_BENCH_PHASE=full`, instead of 1): the same hooks as one
//!    complete snapshot (a dispatcher that starts late).
//! 4. **Parts** (`AGENTHOOKS_BENCH_PHASE=parts`, alone): the live heap of each part of
//!    those hooks on its own — their sources, a compiled regex per matcher, the matchers
//!    as hooks hold them, the validated hooks, one `RegexSet` per event.
//!
//! After each phase it prints the bytes the heap holds live (counted by this binary's
//! allocator), `VmRSS` and `VmHWM`: RSS far above the live bytes is memory the allocator
//! keeps, not data. Run: `cargo bench -p agenthooks-dispatcher --bench synced_memory`.
//! Without `--bench` it runs a small size to check the wiring.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicIsize, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use agenthooks_crds::Edition;
use agenthooks_crds::snapshot::{format_digest, hook_digest};
use agenthooks_dispatcher::hookset::HookSet;
use agenthooks_dispatcher::sync;
use agenthooks_dispatcher::synced::SyncedSet;
use serde_json::json;

/// Bytes allocated and not yet freed.
static LIVE: AtomicIsize = AtomicIsize::new(0);

struct Counting;

// SAFETY: every call is forwarded unchanged to the system allocator.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        LIVE.fetch_add(layout.size() as isize, Ordering::Relaxed);
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(layout.size() as isize, Ordering::Relaxed);
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        LIVE.fetch_add(layout.size() as isize, Ordering::Relaxed);
        unsafe { System.alloc_zeroed(layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new: usize) -> *mut u8 {
        LIVE.fetch_add(new as isize - layout.size() as isize, Ordering::Relaxed);
        unsafe { System.realloc(ptr, layout, new) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

const EVENTS: [&str; 6] = [
    "session_start",
    "user_prompt_submit",
    "post_tool_use",
    "stop",
    "subagent_start",
    "subagent_stop",
];
const NS: &str = "tenant-acme";

fn env_or<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// The JSON of one hook as the operator sends it (serialized once from its type).
fn bulk_hook(i: usize) -> String {
    let mut spec = json!({
        "event": EVENTS[i % EVENTS.len()],
        "priority": i % 50,
        "matcher": format!("^bulk-{i}$"),
        "handler": {"type": "http", "http": {"url": "http://127.0.0.1:9/never-called"}},
    });
    if i.is_multiple_of(2) {
        spec["ifExpr"] = json!(format!("size(tool_name) > {}", i % 7));
    }
    hook_json(&format!("bulk-{i}"), 1, spec)
}

fn edit_hook(k: usize) -> String {
    let spec = json!({
        "event": "pre_tool_use",
        "matcher": format!("^edit-{k}$"),
        "handler": {"type": "http", "http": {"url": "http://127.0.0.1:9/block"}},
    });
    hook_json("edit-target", 1 + k as i64, spec)
}

fn hook_json(name: &str, generation: i64, spec: serde_json::Value) -> String {
    let hook: agenthooks_crds::snapshot::SnapshotHook = serde_json::from_value(json!({
        "uid": format!("uid-{name}"),
        "namespace": NS,
        "name": name,
        "generation": generation,
        "createdAt": "2026-01-01T00:00:00Z",
        "namespaceTenant": "acme",
        "spec": spec,
    }))
    .expect("a valid hook");
    serde_json::to_string(&hook).unwrap()
}

/// The operator's side: the digest of what it holds, and the bodies it sends.
struct Operator {
    version: u64,
    count: usize,
    digest: u64,
    edit_digest: u64,
}

impl Operator {
    fn snapshot(&mut self, hooks: &[String]) -> Vec<u8> {
        self.version += 1;
        self.count = hooks.len();
        self.digest = hooks
            .iter()
            .fold(0u64, |a, h| a.wrapping_add(hook_digest(h.as_bytes())));
        format!(
            r#"{{"epoch":"e1","version":{},"masterNamespace":"agenthooks-system","hooks":[{}],"digest":"{}"}}"#,
            self.version,
            hooks.join(","),
            format_digest(self.digest)
        )
        .into_bytes()
    }

    /// A delta adding or replacing `hooks` (a replaced one's old digest in `replaced`).
    fn delta(&mut self, hooks: &[String], added: usize, replaced: u64) -> Vec<u8> {
        let base = self.version;
        self.version += 1;
        self.count += added;
        self.digest = hooks
            .iter()
            .fold(self.digest.wrapping_sub(replaced), |a, h| {
                a.wrapping_add(hook_digest(h.as_bytes()))
            });
        format!(
            r#"{{"epoch":"e1","base":{base},"version":{},"hooks":[{}],"hookCount":{},"digest":"{}"}}"#,
            self.version,
            hooks.join(","),
            self.count,
            format_digest(self.digest)
        )
        .into_bytes()
    }
}

/// Serves sets as `AppState` does.
type Served = Arc<RwLock<Option<Arc<HookSet>>>>;

/// Takes `body` as `sync::follow` does: absorbed on a blocking thread, the set swapped in,
/// the memory freed by a large take released.
async fn take(held: &Arc<Mutex<SyncedSet>>, served: &Served, body: Vec<u8>) -> Duration {
    let started = Instant::now();
    let held = Arc::clone(held);
    let taken = tokio::task::spawn_blocking(move || {
        held.lock()
            .unwrap()
            .absorb(&body)
            .expect("the body applies")
    })
    .await
    .unwrap();
    assert!(taken.rejected.is_empty());
    *served.write().unwrap() = Some(taken.set);
    let took = started.elapsed();
    // As sync::follow does (AGENTHOOKS_BENCH_TRIM=0: never, to see what it saves).
    if took >= sync::TRIM_AFTER && std::env::var("AGENTHOOKS_BENCH_TRIM").as_deref() != Ok("0") {
        sync::release_freed_memory();
    }
    took
}

fn status(field: &str) -> f64 {
    let s = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    s.lines()
        .find(|l| l.starts_with(field))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|kb| kb.parse::<f64>().ok())
        .map_or(0.0, |kb| kb / 1024.0)
}

fn report(phase: &str) {
    println!(
        "| {phase} | {:.1} | {:.1} | {:.1} |",
        LIVE.load(Ordering::Relaxed) as f64 / (1 << 20) as f64,
        status("VmRSS:"),
        status("VmHWM:")
    );
}

fn percentile(v: &mut [Duration], q: f64) -> f64 {
    v.sort();
    v[((v.len() as f64 - 1.0) * q).round() as usize].as_secs_f64() * 1e3
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let bench = std::env::args().any(|a| a == "--bench");
    let n: usize = env_or("AGENTHOOKS_BENCH_HOOKS", if bench { 10_000 } else { 200 });
    let deltas: usize = env_or("AGENTHOOKS_BENCH_DELTAS", if bench { 600 } else { 10 });
    let edits: usize = env_or("AGENTHOOKS_BENCH_EDITS", if bench { 100 } else { 5 });
    let phase = std::env::var("AGENTHOOKS_BENCH_PHASE").unwrap_or_default();
    if phase == "parts" {
        println!("\n## The parts of {n} hooks\n");
        parts(n);
        return;
    }
    println!("\n## Synced dispatcher: {n} hooks in {deltas} deltas, {edits} one-hook edits\n");
    println!("| after | live heap MiB | VmRSS MiB | VmHWM MiB |");
    println!("|---|---|---|---|");
    report("start");
    let held = Arc::new(Mutex::new(SyncedSet::new(Edition::Lite)));
    let served: Served = Arc::default();
    let mut op = Operator {
        version: 0,
        count: 0,
        digest: 0,
        edit_digest: 0,
    };
    let edit0 = edit_hook(0);
    op.edit_digest = hook_digest(edit0.as_bytes());
    if phase == "full" {
        // One complete snapshot of every hook, as a dispatcher that starts late takes it.
        let mut hooks: Vec<String> = (0..n).map(bulk_hook).collect();
        hooks.push(edit0);
        let body = op.snapshot(&hooks);
        drop(hooks);
        take(&held, &served, body).await;
        report("one complete snapshot");
    } else {
        take(&held, &served, op.snapshot(&[edit0])).await;
        let per = n.div_ceil(deltas.max(1));
        let mut next = 0;
        let mut took = Vec::new();
        while next < n {
            let hooks: Vec<String> = (next..(next + per).min(n)).map(bulk_hook).collect();
            next += hooks.len();
            let added = hooks.len();
            took.push(take(&held, &served, op.delta(&hooks, added, 0)).await);
        }
        report("bulk deltas");
        let total: Duration = took.iter().sum();
        println!(
            "\n{} bulk deltas took {:.2} s (p50 {:.1} ms, max {:.1} ms)\n",
            took.len(),
            total.as_secs_f64(),
            percentile(&mut took, 0.5),
            percentile(&mut took, 1.0)
        );
    }
    let mut took = Vec::new();
    for k in 1..=edits {
        let hook = edit_hook(k);
        let old = op.edit_digest;
        op.edit_digest = hook_digest(hook.as_bytes());
        took.push(take(&held, &served, op.delta(&[hook], 0, old)).await);
    }
    if !took.is_empty() {
        report("one-hook edits");
        println!(
            "\none-hook delta at {} hooks, body to set built: p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms",
            n + 1,
            percentile(&mut took, 0.5),
            percentile(&mut took, 0.99),
            percentile(&mut took, 1.0)
        );
    }
    let set = served.read().unwrap().clone().unwrap();
    assert_eq!(set.len(), n + 1);
    assert_eq!(
        set.select(
            agenthooks_crds::HookEvent::PreToolUse,
            "acme",
            "a1",
            Some(&format!("edit-{edits}"))
        )
        .count(),
        1
    );
    drop(set);
    // What the SyncedSet alone holds: the live bytes it frees.
    let before = LIVE.load(Ordering::Relaxed);
    drop(held);
    println!(
        "\nthe SyncedSet held {:.1} MiB of live heap",
        (before - LIVE.load(Ordering::Relaxed)) as f64 / (1 << 20) as f64
    );
}

/// The live heap of each part of `n` bulk hooks on its own (module docs, phase 4).
fn parts(n: usize) {
    let live = || LIVE.load(Ordering::Relaxed);
    let mib = |b: isize| b as f64 / (1 << 20) as f64;
    let mut at = live();
    let mut part = |name: &str| {
        let now = live();
        println!("| {name} | {:.1} |", mib(now - at));
        at = now;
    };
    println!("| part | live heap MiB |\n|---|---|");
    let sources: Vec<agenthooks_crds::snapshot::SnapshotHook> = (0..n)
        .map(|i| serde_json::from_str(&bulk_hook(i)).unwrap())
        .collect();
    part("sources");
    let regexes: Vec<_> = sources
        .iter()
        .map(|s| agenthooks_crds::expr::compile_regex(&s.spec.matcher).unwrap())
        .collect();
    part("a compiled regex per matcher");
    drop(regexes);
    part("(dropped)");
    let matchers: Vec<_> = sources
        .iter()
        .map(|s| agenthooks_crds::expr::shared_regex(&s.spec.matcher).unwrap())
        .collect();
    part("matchers as hooks hold them");
    let ctx = agenthooks_crds::validation::ValidationContext {
        namespace: NS,
        namespace_tenant: "acme",
        master_namespace: "agenthooks-system",
        edition: Edition::Lite,
        command_hooks: agenthooks_crds::validation::CommandHookPolicy::AnyNamespace,
    };
    let compiled: Vec<_> = sources
        .iter()
        .map(|s| agenthooks_crds::validation::validate(&s.spec, &ctx).unwrap())
        .collect();
    part("validated hooks, matchers aside");
    let sets: Vec<_> = (0..EVENTS.len())
        .map(|e| {
            regex::RegexSetBuilder::new(
                matchers
                    .iter()
                    .skip(e)
                    .step_by(EVENTS.len())
                    .map(|m| m.as_str()),
            )
            .size_limit(32 << 20)
            .dfa_size_limit(32 << 20)
            .build()
            .unwrap()
        })
        .collect();
    part("a RegexSet per event");
    drop((sources, matchers, compiled, sets));
}
