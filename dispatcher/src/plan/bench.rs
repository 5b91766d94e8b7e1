//! `agenthooks-dispatcher bench --hooks PATH --event FILE`: the cost of one decision on a
//! team's own hooks (the `opa bench` idea). Loads the hooks as standalone mode does,
//! parses the event as `POST /v1/dispatch` does, then plans it ([`super::plan`]) over and
//! over: mean, p50 and p99 per decision, and heap allocations per decision when the
//! binary counts them ([`AllocCounter`]). Handlers are not run: this is the engine's cost
//! (resolution, matchers, `toolKinds`, `ifExpr`), which grows with the hooks; a hook's
//! own handler adds its own time.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use super::{Plan, plan};
use crate::event::Event;
use crate::hookset::HookSet;

/// Counts heap allocations while switched on: the binary's global allocator wraps the
/// system one with it. Off, it costs one relaxed load per allocation.
#[derive(Debug, Default)]
pub struct AllocCounter {
    on: AtomicBool,
    count: AtomicU64,
}

impl AllocCounter {
    /// A counter, switched off.
    pub const fn new() -> AllocCounter {
        AllocCounter {
            on: AtomicBool::new(false),
            count: AtomicU64::new(0),
        }
    }
    /// Counts one allocation if switched on (call from `GlobalAlloc::alloc`).
    #[inline]
    pub fn record(&self) {
        if self.on.load(Ordering::Relaxed) {
            self.count.fetch_add(1, Ordering::Relaxed);
        }
    }
    fn start(&self) -> u64 {
        self.on.store(true, Ordering::SeqCst);
        self.count.load(Ordering::SeqCst)
    }
    fn stop(&self) -> u64 {
        self.on.store(false, Ordering::SeqCst);
        self.count.load(Ordering::SeqCst)
    }
}

/// What one bench run measured.
#[derive(Debug, Clone, PartialEq)]
pub struct Report {
    pub decisions: u64,
    pub mean: Duration,
    pub p50: Duration,
    pub p99: Duration,
    /// Heap allocations per decision (`None` without a counter).
    pub allocations: Option<f64>,
    /// `namespace/name` of the hooks the event selects, or the refusal.
    pub selected: Result<Vec<String>, String>,
}

/// Most decisions timed in one run (their times are kept to find the percentiles).
pub const MAX_SAMPLES: usize = 1 << 20;

/// Plans `event` on `set` for `duration` (at least `min_decisions` times), timing each.
pub fn run(
    set: &HookSet,
    event: &Event,
    duration: Duration,
    min_decisions: u64,
    counter: Option<&AllocCounter>,
) -> Report {
    let selected = match plan(set, event) {
        Plan::Refused { reason, hook } => Err(match hook {
            Some(h) => format!("{reason} ({h})"),
            None => reason.to_string(),
        }),
        Plan::Run(hooks) => Ok(hooks
            .iter()
            .map(|p| match &p.filter {
                Ok(()) => p.hook.key.clone(),
                Err(e) => format!("{} (error: {e})", p.hook.key),
            })
            .collect()),
    };
    // Warm-up: caches, the regex pools, the branch predictor.
    for _ in 0..1_000.min(min_decisions) {
        std::hint::black_box(plan(set, std::hint::black_box(event)));
    }
    let mut times: Vec<Duration> = Vec::with_capacity(min_decisions as usize);
    let started = Instant::now();
    let before = counter.map(AllocCounter::start);
    while (times.len() as u64) < min_decisions
        || (started.elapsed() < duration && times.len() < MAX_SAMPLES)
    {
        let t = Instant::now();
        std::hint::black_box(plan(set, std::hint::black_box(event)));
        times.push(t.elapsed());
        if times.len() == times.capacity() {
            // Growing the vector is an allocation: count it out.
            let extra = counter.map(AllocCounter::stop);
            times.reserve(times.len());
            if let (Some(c), Some(_)) = (counter, extra) {
                c.start();
            }
        }
    }
    let allocations = match (counter, before) {
        (Some(c), Some(before)) => {
            let after = c.stop();
            Some(after.saturating_sub(before) as f64 / times.len() as f64)
        }
        _ => None,
    };
    let total: Duration = times.iter().sum();
    let decisions = times.len() as u64;
    times.sort_unstable();
    let at = |q: f64| times[((times.len() - 1) as f64 * q).round() as usize];
    Report {
        decisions,
        mean: total / decisions as u32,
        p50: at(0.50),
        p99: at(0.99),
        allocations,
        selected,
    }
}

impl std::fmt::Display for Report {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.selected {
            Ok(keys) if keys.is_empty() => writeln!(f, "selected: no hook (allow)")?,
            Ok(keys) => writeln!(f, "selected: {} hook(s): {}", keys.len(), keys.join(", "))?,
            Err(reason) => writeln!(f, "refused before any hook: {reason}")?,
        }
        write!(
            f,
            "decisions: {}  mean {:.2} µs  p50 {:.2} µs  p99 {:.2} µs",
            self.decisions,
            self.mean.as_secs_f64() * 1e6,
            self.p50.as_secs_f64() * 1e6,
            self.p99.as_secs_f64() * 1e6,
        )?;
        if let Some(a) = self.allocations {
            write!(f, "  allocations {a:.1} per decision")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reports_the_selection_and_counts_every_decision() {
        let set = HookSet::default();
        let event = Event::parse(br#"{"event":"pre_tool_use","tool_name":"exec","tool_input":{}}"#)
            .unwrap();
        let counter = AllocCounter::new();
        let r = run(&set, &event, Duration::ZERO, 50, Some(&counter));
        assert_eq!(r.decisions, 50);
        assert_eq!(r.selected, Ok(vec![]));
        // No allocator counts here (the test binary does not install it): zero.
        assert_eq!(r.allocations, Some(0.0));
        assert!(r.p50 <= r.p99);
        assert!(
            r.to_string()
                .starts_with("selected: no hook (allow)\ndecisions: 50")
        );
    }
}
