//! The matcher index of one hook list (issue 15 point 3): which hooks' `matcher` can
//! match a tool name, found without testing every hook.
//!
//! Hooks are grouped by their distinct matcher pattern (hooks with the same text share
//! one pattern, compiled on its first use: `agenthooks_crds::expr::shared_regex`). A
//! pattern that matches whole names only (`^Bash$`, `^(Write|Edit)$`:
//! `LazyRegex::exact_names`) is looked up by the tool's name in a map; the others are
//! tested once each — through one `RegexSet` pass when there are many, and then no hook's
//! own regex is ever compiled. A lookup returns the positions of the hooks whose pattern
//! matched, plus those without a matcher, in list order. The semantics are the per-hook
//! test's: unanchored `is_match` on the tool name, and no tool matches no matcher.
//!
//! Building is what a synced dispatcher pays on every change to the list: a map of names
//! costs microseconds where a `RegexSet` of a thousand whole-name patterns took ~20 ms to
//! compile (10 s of CPU per dispatcher over a 10,000-hook apply, issue 15).

use std::collections::HashMap;
use std::sync::Arc;

use agenthooks_crds::expr::LazyRegex;
use regex::{RegexSet, RegexSetBuilder};

use super::LoadedHook;

/// Shortest list that gets an index; a shorter one is scanned hook by hook.
pub const INDEX_MIN_HOOKS: usize = 16;
/// Most distinct patterns tested one by one; more go through one `RegexSet`.
pub const SET_MIN_PATTERNS: usize = 8;
/// Largest compiled `RegexSet` (its patterns are each within the matcher limit; a set
/// that does not fit is not built and its patterns are tested one by one).
pub const SET_SIZE_LIMIT: usize = 32 << 20;

/// See the module docs.
#[derive(Debug)]
pub struct MatcherIndex {
    /// Distinct patterns, in first-seen order.
    patterns: Vec<Arc<LazyRegex>>,
    /// Whole-name patterns by each name they match: the positions in `patterns`.
    exact: HashMap<String, Vec<usize>>,
    /// The positions in `patterns` of the others, tested one by one or through `set`.
    tested: Vec<usize>,
    /// `tested`'s patterns as one set, when there are many.
    set: Option<RegexSet>,
    /// For each pattern, the positions of its hooks, ascending.
    by_pattern: Vec<Vec<u32>>,
    /// Positions of hooks without a matcher, ascending.
    unfiltered: Vec<u32>,
}

impl MatcherIndex {
    /// The index of `hooks` (in resolution order), or `None` for a short list.
    pub fn build(hooks: &[Arc<LoadedHook>]) -> Option<MatcherIndex> {
        if hooks.len() < INDEX_MIN_HOOKS {
            return None;
        }
        let mut patterns: Vec<Arc<LazyRegex>> = Vec::new();
        let mut by_text: HashMap<&str, usize> = HashMap::new();
        let mut by_pattern: Vec<Vec<u32>> = Vec::new();
        let mut unfiltered = Vec::new();
        for (i, hook) in hooks.iter().enumerate() {
            let i = i as u32;
            match &hook.compiled.matcher {
                None => unfiltered.push(i),
                Some(re) => {
                    let p = *by_text.entry(re.as_str()).or_insert_with(|| {
                        patterns.push(Arc::clone(re));
                        by_pattern.push(Vec::new());
                        patterns.len() - 1
                    });
                    by_pattern[p].push(i);
                }
            }
        }
        let mut exact: HashMap<String, Vec<usize>> = HashMap::new();
        let mut tested = Vec::new();
        for (p, re) in patterns.iter().enumerate() {
            match re.exact_names() {
                Some(names) => {
                    for name in names {
                        exact.entry(name.clone()).or_default().push(p);
                    }
                }
                None => tested.push(p),
            }
        }
        let set = (tested.len() >= SET_MIN_PATTERNS)
            .then(|| {
                RegexSetBuilder::new(tested.iter().map(|&p| patterns[p].as_str()))
                    .size_limit(SET_SIZE_LIMIT)
                    .dfa_size_limit(SET_SIZE_LIMIT)
                    .build()
                    .ok()
            })
            .flatten();
        Some(MatcherIndex {
            patterns,
            exact,
            tested,
            set,
            by_pattern,
            unfiltered,
        })
    }

    /// Positions (ascending) of the hooks whose matcher matches `tool`, and of those
    /// without one.
    pub fn pick(&self, tool: Option<&str>) -> Vec<u32> {
        let Some(tool) = tool else {
            return self.unfiltered.clone();
        };
        let mut picked = self.unfiltered.clone();
        for &p in self.exact.get(tool).into_iter().flatten() {
            picked.extend_from_slice(&self.by_pattern[p]);
        }
        match &self.set {
            Some(set) => {
                for i in set.matches(tool).iter() {
                    picked.extend_from_slice(&self.by_pattern[self.tested[i]]);
                }
            }
            None => {
                for &p in &self.tested {
                    if self.patterns[p].is_match(tool) {
                        picked.extend_from_slice(&self.by_pattern[p]);
                    }
                }
            }
        }
        picked.sort_unstable();
        picked
    }

    /// Distinct patterns indexed.
    #[cfg(test)]
    pub fn patterns(&self) -> usize {
        self.patterns.len()
    }

    /// Whether the patterns are looked up through one `RegexSet`.
    #[cfg(test)]
    pub fn uses_set(&self) -> bool {
        self.set.is_some()
    }
}
