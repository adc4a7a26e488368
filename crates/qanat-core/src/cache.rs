//! A small read-through cache for what a server looks up on every request (a token's
//! principal, a caller's role, a feature view's definition) and rarely changes.
//!
//! An entry is served for at most the cache's ttl, and only while its [`Generation`]
//! has not moved: whoever writes what the entries were read from calls
//! [`Generation::bump`], and every entry read before is stale at once. Within one
//! process that makes a change visible immediately; other processes sharing the same
//! store see it within the ttl. Only successful lookups belong in it: a refusal is
//! asked again.

use std::collections::HashMap;
use std::hash::Hash;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::RwLock;
use std::time::{Duration, Instant};

/// Entries held at most; when full, the cache starts over.
const CAPACITY: usize = 10_000;

/// A counter bumped by every write to what a cache holds (one per kind of data, in a
/// `static`).
#[derive(Debug, Default)]
pub struct Generation(AtomicU64);

impl Generation {
    pub const fn new() -> Self {
        Generation(AtomicU64::new(0))
    }

    /// Marks every entry read before as stale.
    pub fn bump(&self) {
        self.0.fetch_add(1, Ordering::AcqRel);
    }

    /// The generation a lookup starts under: read it before querying the store and
    /// hand it to [`Cache::put`], so that a write racing the query leaves the entry
    /// stale.
    pub fn current(&self) -> u64 {
        self.0.load(Ordering::Acquire)
    }
}

struct Entry<V> {
    value: V,
    generation: u64,
    at: Instant,
}

/// Successful lookups, good for `ttl` and while their generation holds.
pub struct Cache<K, V> {
    map: RwLock<HashMap<K, Entry<V>>>,
    generation: &'static Generation,
    ttl: Duration,
}

impl<K, V> std::fmt::Debug for Cache<K, V> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cache").field("ttl", &self.ttl).finish()
    }
}

impl<K: Eq + Hash, V: Clone> Cache<K, V> {
    pub fn new(generation: &'static Generation, ttl: Duration) -> Self {
        Cache {
            map: RwLock::new(HashMap::new()),
            generation,
            ttl,
        }
    }

    /// The generation to read under before a lookup (see [`Generation::current`]).
    pub fn generation(&self) -> u64 {
        self.generation.current()
    }

    /// The value for `key`, if it is fresh.
    pub fn get<Q>(&self, key: &Q) -> Option<V>
    where
        K: std::borrow::Borrow<Q>,
        Q: Eq + Hash + ?Sized,
    {
        let map = self.map.read().unwrap_or_else(|p| p.into_inner());
        let e = map.get(key)?;
        (e.generation == self.generation.current() && e.at.elapsed() < self.ttl)
            .then(|| e.value.clone())
    }

    /// Remembers `value`, read under `generation`.
    pub fn put(&self, key: K, value: V, generation: u64) {
        let mut map = self.map.write().unwrap_or_else(|p| p.into_inner());
        if map.len() >= CAPACITY {
            map.clear();
        }
        map.insert(
            key,
            Entry {
                value,
                generation,
                at: Instant::now(),
            },
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    static G: Generation = Generation::new();

    #[test]
    fn a_write_makes_entries_stale() {
        let c: Cache<String, u32> = Cache::new(&G, Duration::from_secs(60));
        let g = c.generation();
        c.put("a".into(), 1, g);
        assert_eq!(c.get("a"), Some(1));
        G.bump();
        assert_eq!(c.get("a"), None);
        // An entry read under a generation that moved on while it was being looked
        // up is never served.
        c.put("b".into(), 2, g);
        assert_eq!(c.get("b"), None);
        let g = c.generation();
        c.put("b".into(), 3, g);
        assert_eq!(c.get("b"), Some(3));
    }

    #[test]
    fn entries_expire() {
        static H: Generation = Generation::new();
        let c: Cache<&str, u32> = Cache::new(&H, Duration::from_millis(20));
        c.put("a", 1, c.generation());
        assert_eq!(c.get("a"), Some(1));
        std::thread::sleep(Duration::from_millis(30));
        assert_eq!(c.get("a"), None);
    }
}
