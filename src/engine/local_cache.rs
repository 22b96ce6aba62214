//! The local over-limit cache (`LOCAL_CACHE_SIZE_IN_BYTES`):
//! cache keys seen over their limit, so later hits in the same window are
//! answered OVER_LIMIT without a store round trip.
//!
//! Bounded by bytes (the sum of key lengths plus a fixed per-entry cost),
//! with `quick_cache`'s eviction when full. An entry is valid until its
//! window ends — not for a whole unit after insertion as in the original,
//! which is equivalent because the key embeds the window start.

use std::sync::atomic::{AtomicU64, Ordering};

/// Per-entry bookkeeping counted against the byte budget besides the key.
const ENTRY_OVERHEAD: u64 = 32;

#[derive(Debug, Clone)]
struct KeyWeight;

impl quick_cache::Weighter<String, u64> for KeyWeight {
    fn weight(&self, key: &String, _: &u64) -> u64 {
        key.len() as u64 + ENTRY_OVERHEAD
    }
}

/// Counters of cache use, as the original's `ratelimit.localcache.*` gauges.
#[derive(Debug, Default)]
pub struct LocalCacheCounts {
    /// Lookups that found a valid entry.
    pub hits: AtomicU64,
    /// Lookups that did not.
    pub misses: AtomicU64,
}

/// The cache: key → end of its window (Unix seconds).
#[derive(Debug)]
pub struct LocalCache {
    cache: quick_cache::sync::Cache<String, u64, KeyWeight>,
    counts: LocalCacheCounts,
}

impl LocalCache {
    /// A cache holding at most `bytes` of keys.
    pub fn new(bytes: u64) -> LocalCache {
        let estimated = (bytes / (ENTRY_OVERHEAD + 32)).max(16) as usize;
        LocalCache {
            cache: quick_cache::sync::Cache::with_weighter(estimated, bytes.max(1), KeyWeight),
            counts: LocalCacheCounts::default(),
        }
    }

    /// Whether `key` is known to be over its limit at `now`.
    pub fn is_over_limit(&self, key: &str, now: u64) -> bool {
        let hit = matches!(self.cache.get(key), Some(until) if now < until);
        let counter = if hit {
            &self.counts.hits
        } else {
            &self.counts.misses
        };
        counter.fetch_add(1, Ordering::Relaxed);
        hit
    }

    /// Remembers that `key` is over its limit until `until`.
    pub fn insert(&self, key: &str, until: u64) {
        self.cache.insert(key.to_string(), until);
    }

    /// Forgets `key` (a refund may have brought it back within its limit).
    pub fn remove(&self, key: &str) {
        self.cache.remove(key);
    }

    /// Forgets every key (the limits they were over may have changed).
    pub fn clear(&self) {
        self.cache.clear();
    }

    /// Entries currently held.
    pub fn len(&self) -> usize {
        self.cache.len()
    }

    /// Whether the cache holds nothing.
    pub fn is_empty(&self) -> bool {
        self.cache.is_empty()
    }

    /// Hit and miss counts so far.
    pub fn counts(&self) -> &LocalCacheCounts {
        &self.counts
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_expire_with_their_window() {
        let c = LocalCache::new(1000);
        c.insert("k_1200", 1260);
        assert!(c.is_over_limit("k_1200", 1259));
        assert!(!c.is_over_limit("k_1200", 1260));
        assert!(!c.is_over_limit("other", 1200));
        assert_eq!(c.counts().hits.load(Ordering::Relaxed), 1);
        assert_eq!(c.counts().misses.load(Ordering::Relaxed), 2);
    }

    #[test]
    fn bounded_by_bytes() {
        let c = LocalCache::new(10_000);
        for i in 0..10_000 {
            c.insert(&format!("some_fairly_long_cache_key_{i}"), u64::MAX);
        }
        let held = c.len() as u64;
        assert!(held * ENTRY_OVERHEAD <= 10_000, "held {held}");
    }
}
