//! Compiled forms shared by their source text: a `matcher` regex or an `ifExpr` program
//! is compiled once per distinct text while any hook holds it, and every hook with the
//! same text holds the same compiled value (issue 15: 10,000 hooks whose patterns repeat
//! cost the memory and compile time of their distinct patterns).
//!
//! The map holds weak references, so a pattern no hook uses any more is freed with its
//! last hook; dead entries are swept when the map has doubled since the last sweep.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};

/// Values compiled from a text, shared while alive. See the module docs.
#[derive(Debug)]
pub struct Interned<T> {
    inner: Mutex<Table<T>>,
}

#[derive(Debug)]
struct Table<T> {
    map: HashMap<String, Weak<T>>,
    /// Sweep dead entries when the map reaches this length.
    sweep_at: usize,
}

/// Fewest entries before the first sweep.
const FIRST_SWEEP: usize = 64;

impl<T> Default for Interned<T> {
    fn default() -> Self {
        Interned {
            inner: Mutex::new(Table {
                map: HashMap::new(),
                sweep_at: FIRST_SWEEP,
            }),
        }
    }
}

impl<T> Interned<T> {
    /// The live value compiled from `text`, else `make(text)` stored and returned. A
    /// failed `make` stores nothing. `make` runs outside the lock; when two callers
    /// compile the same text at once, both get the first one stored.
    pub fn get_or_try_insert<E>(
        &self,
        text: &str,
        make: impl FnOnce(&str) -> Result<T, E>,
    ) -> Result<Arc<T>, E> {
        if let Some(live) = self.live(text) {
            return Ok(live);
        }
        let made = Arc::new(make(text)?);
        let mut table = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(live) = table.map.get(text).and_then(Weak::upgrade) {
            return Ok(live);
        }
        if table.map.len() >= table.sweep_at {
            table.map.retain(|_, w| w.strong_count() > 0);
            table.sweep_at = (table.map.len() * 2).max(FIRST_SWEEP);
        }
        table.map.insert(text.to_string(), Arc::downgrade(&made));
        Ok(made)
    }

    fn live(&self, text: &str) -> Option<Arc<T>> {
        let table = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        table.map.get(text).and_then(Weak::upgrade)
    }

    /// Entries in the map, live or not yet swept.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.inner
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .map
            .len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_text_same_value_until_the_last_holder_drops_it() {
        let t: Interned<String> = Interned::default();
        let compiled = std::cell::Cell::new(0);
        let make = |s: &str| -> Result<String, ()> {
            compiled.set(compiled.get() + 1);
            Ok(s.to_uppercase())
        };
        let a = t.get_or_try_insert("ab", make).unwrap();
        let b = t.get_or_try_insert("ab", make).unwrap();
        assert!(Arc::ptr_eq(&a, &b));
        assert_eq!((a.as_str(), compiled.get()), ("AB", 1));
        drop((a, b));
        let c = t.get_or_try_insert("ab", make).unwrap();
        assert_eq!(
            (c.as_str(), compiled.get()),
            ("AB", 2),
            "freed with its last holder"
        );
    }

    #[test]
    fn a_failure_stores_nothing_and_dead_entries_are_swept() {
        let t: Interned<String> = Interned::default();
        assert_eq!(
            t.get_or_try_insert("x", |_| Err::<String, _>("bad")),
            Err("bad")
        );
        assert_eq!(t.len(), 0);
        for i in 0..1_000 {
            let _dropped = t.get_or_try_insert(&i.to_string(), |s| Ok::<_, ()>(s.to_string()));
        }
        assert!(t.len() <= FIRST_SWEEP, "{} entries kept", t.len());
    }
}
