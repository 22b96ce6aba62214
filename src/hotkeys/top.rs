//! [`TopKeys`]: the busiest keys of this instance, by decisions per second,
//! in bounded space and with no allocation on the common path.
//!
//! A count-min sketch (4 rows of 4,096 atomic counters, 64 KiB per epoch)
//! counts every decision per key over epochs of [`EPOCH`]; beside it a list
//! of at most `k` candidates remembers which keys are heavy. A key joins
//! the list when its estimate passes the smallest candidate's (checked on
//! its 1st, 33rd, 65th … decision of the epoch, so a hot key costs the
//! list's lock once per 32 decisions), and replaces that candidate.
//!
//! Bound: a count-min estimate never counts less than the key's true
//! decisions in the epoch, and over-counts by at most `e / 4096 × total`
//! decisions of the epoch with probability `1 − e⁻⁴` (`e`: Euler's
//! number), so a key that gets more than a few thousandths of an
//! instance's decisions is found. Rates are the last complete epoch's
//! count over its length, or the current epoch's so far if higher.

use std::hash::{BuildHasher, Hash, Hasher};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// The length of one counting epoch.
pub const EPOCH: Duration = Duration::from_secs(5);

const ROWS: usize = 4;
const WIDTH: usize = 4096;

/// What `/hotkeys` shows of a key, built only when the key joins the list.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyInfo {
    /// The request's domain.
    pub domain: String,
    /// The descriptor's entries, `(key, value)`.
    pub entries: Vec<(String, String)>,
    /// The rule's `shards` (1: not sharded), the largest of its limits'.
    pub shards: u8,
    /// Whether a limit of the rule has `lease: true`.
    pub lease: bool,
    /// The store keys of its leased limits (every sub-bucket's, if
    /// sharded), to read what this instance holds.
    pub lease_keys: Vec<String>,
}

/// A counted key that may join the list ([`TopKeys::count`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Candidacy {
    hash: u64,
    estimate: u32,
    epoch: u64,
}

/// One row of `/hotkeys`.
#[derive(Debug, Clone, PartialEq)]
pub struct HotKey {
    /// Decisions per second on this instance.
    pub rate: f64,
    /// What the key is.
    pub info: Arc<KeyInfo>,
}

#[derive(Debug)]
struct Sketch {
    counters: Vec<AtomicU32>,
}

impl Sketch {
    fn new() -> Sketch {
        Sketch {
            counters: (0..ROWS * WIDTH).map(|_| AtomicU32::new(0)).collect(),
        }
    }

    fn cells(hash: u64) -> impl Iterator<Item = usize> {
        let h2 = hash.rotate_left(32) ^ 0x9e37_79b9_7f4a_7c15;
        (0..ROWS).map(move |r| {
            let h = hash.wrapping_add((r as u64).wrapping_mul(h2));
            r * WIDTH + (h as usize) % WIDTH
        })
    }

    /// Counts one decision; the key's estimate after it.
    fn add(&self, hash: u64) -> u32 {
        Sketch::cells(hash)
            .map(|i| {
                self.counters[i]
                    .fetch_add(1, Ordering::Relaxed)
                    .saturating_add(1)
            })
            .min()
            .unwrap_or(0)
    }

    fn estimate(&self, hash: u64) -> u32 {
        Sketch::cells(hash)
            .map(|i| self.counters[i].load(Ordering::Relaxed))
            .min()
            .unwrap_or(0)
    }

    fn clear(&self) {
        for c in &self.counters {
            c.store(0, Ordering::Relaxed);
        }
    }
}

#[derive(Debug)]
struct Candidate {
    hash: u64,
    info: Arc<KeyInfo>,
}

#[derive(Debug, Default)]
struct Listed {
    candidates: Vec<Candidate>,
}

/// The top-`k` keys of this instance (see the module doc).
#[derive(Debug)]
pub struct TopKeys {
    k: usize,
    sketches: [Sketch; 2],
    /// The epoch counted now (since the Unix epoch); its sketch is
    /// `sketches[epoch % 2]`.
    epoch: AtomicU64,
    /// The smallest candidate's estimate when the list is full.
    threshold: AtomicU32,
    listed: Mutex<Listed>,
    hasher: std::hash::RandomState,
}

impl TopKeys {
    /// A top-`k` (`k ≥ 1`).
    pub fn new(k: usize) -> TopKeys {
        TopKeys {
            k: k.max(1),
            sketches: [Sketch::new(), Sketch::new()],
            epoch: AtomicU64::new(0),
            threshold: AtomicU32::new(0),
            listed: Mutex::new(Listed::default()),
            hasher: std::hash::RandomState::new(),
        }
    }

    /// The hash `record` takes for a key made of `parts`.
    pub fn hash_of<'a>(&self, parts: impl IntoIterator<Item = &'a str>) -> u64 {
        let mut h = self.hasher.build_hasher();
        for p in parts {
            p.hash(&mut h);
        }
        h.finish()
    }

    fn epoch_of(now: Duration) -> u64 {
        now.as_secs() / EPOCH.as_secs()
    }

    /// Starts the epoch of `now` if it is a new one.
    fn roll(&self, now: Duration) -> u64 {
        let e = TopKeys::epoch_of(now);
        let seen = self.epoch.load(Ordering::Relaxed);
        if e > seen
            && self
                .epoch
                .compare_exchange(seen, e, Ordering::AcqRel, Ordering::Relaxed)
                .is_ok()
        {
            self.sketches[(e % 2) as usize].clear();
            if e > seen + 1 {
                self.sketches[((e + 1) % 2) as usize].clear();
            }
            self.threshold.store(0, Ordering::Relaxed);
        }
        e.max(seen)
    }

    /// Counts one decision of the key `hash` at `now`; `info` is called
    /// only if the key joins the list ([`TopKeys::count`], then
    /// [`TopKeys::offer`]).
    pub fn record(&self, hash: u64, now: Duration, info: impl FnOnce() -> KeyInfo) {
        if let Some(candidacy) = self.count(hash, now) {
            self.offer(candidacy, info());
        }
    }

    /// Counts one decision of the key `hash` at `now`. `Some` when the key
    /// is not listed and its count may win it a place: describe it and
    /// [`TopKeys::offer`] it (at most one decision in 32 of a key above the
    /// list's smallest, so describing costs nothing on the common path).
    pub fn count(&self, hash: u64, now: Duration) -> Option<Candidacy> {
        let epoch = self.roll(now);
        let sketch = &self.sketches[(epoch % 2) as usize];
        let estimate = sketch.add(hash);
        if estimate <= self.threshold.load(Ordering::Relaxed) || estimate % 32 != 1 {
            return None;
        }
        let listed = self.listed.lock().unwrap_or_else(|p| p.into_inner());
        if listed.candidates.iter().any(|c| c.hash == hash) {
            self.raise_threshold(&listed, sketch);
            return None;
        }
        Some(Candidacy {
            hash,
            estimate,
            epoch,
        })
    }

    /// Lists a counted key described by `info` if it is still unlisted and
    /// counts more than the list's smallest (or the list has room).
    pub fn offer(&self, candidacy: Candidacy, info: KeyInfo) {
        let Candidacy {
            hash,
            estimate,
            epoch,
        } = candidacy;
        let sketch = &self.sketches[(epoch % 2) as usize];
        let mut listed = self.listed.lock().unwrap_or_else(|p| p.into_inner());
        if !listed.candidates.iter().any(|c| c.hash == hash) {
            let candidate = Candidate {
                hash,
                info: Arc::new(info),
            };
            if listed.candidates.len() < self.k {
                listed.candidates.push(candidate);
            } else if let Some((i, smallest)) = listed
                .candidates
                .iter()
                .enumerate()
                .map(|(i, c)| (i, sketch.estimate(c.hash)))
                .min_by_key(|&(_, est)| est)
            {
                if smallest < estimate {
                    listed.candidates[i] = candidate;
                }
            }
        }
        self.raise_threshold(&listed, sketch);
    }

    /// A full list's smallest count is what a key must pass to join it.
    fn raise_threshold(&self, listed: &Listed, sketch: &Sketch) {
        if listed.candidates.len() == self.k {
            let smallest = listed
                .candidates
                .iter()
                .map(|c| sketch.estimate(c.hash))
                .min()
                .unwrap_or(0);
            self.threshold.store(smallest, Ordering::Relaxed);
        }
    }

    /// The listed keys at `now`, busiest first, with their rates.
    pub fn snapshot(&self, now: Duration) -> Vec<HotKey> {
        let e = self.roll(now);
        let current = &self.sketches[(e % 2) as usize];
        let previous = &self.sketches[((e + 1) % 2) as usize];
        let into_epoch = now.saturating_sub(Duration::from_secs(e * EPOCH.as_secs()));
        let listed = self.listed.lock().unwrap_or_else(|p| p.into_inner());
        let mut out: Vec<HotKey> = listed
            .candidates
            .iter()
            .map(|c| {
                let whole = f64::from(previous.estimate(c.hash)) / EPOCH.as_secs_f64();
                let partial =
                    f64::from(current.estimate(c.hash)) / into_epoch.as_secs_f64().max(1.0);
                HotKey {
                    rate: whole.max(partial),
                    info: Arc::clone(&c.info),
                }
            })
            .filter(|h| h.rate > 0.0)
            .collect();
        out.sort_by(|a, b| b.rate.total_cmp(&a.rate));
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info(name: &str) -> KeyInfo {
        KeyInfo {
            domain: "d".into(),
            entries: vec![("k".into(), name.into())],
            shards: 1,
            lease: false,
            lease_keys: Vec::new(),
        }
    }

    #[test]
    fn finds_the_heavy_keys_among_a_long_tail() {
        let top = TopKeys::new(3);
        let t0 = Duration::from_secs(1_000);
        // 3 heavy keys (2,000, 1,000, 500 decisions) among 20,000 keys seen
        // once each, interleaved, in one epoch.
        let heavy = [("a", 2_000), ("b", 1_000), ("c", 500)];
        let mut tail = 0u32;
        for round in 0..2_000 {
            for (name, n) in heavy {
                if round < n {
                    top.record(top.hash_of(["d", name]), t0, || info(name));
                }
            }
            for _ in 0..10 {
                let name = format!("tail{tail}");
                top.record(top.hash_of(["d", &name]), t0, || info(&name));
                tail += 1;
            }
        }
        let later = t0 + EPOCH;
        let snap = top.snapshot(later);
        let names: Vec<&str> = snap.iter().map(|h| h.info.entries[0].1.as_str()).collect();
        assert_eq!(names, ["a", "b", "c"]);
        // The last full epoch's count over its length; never an undercount.
        assert!(snap[0].rate >= 2_000.0 / EPOCH.as_secs_f64());
        assert!(
            snap[0].rate < 2_100.0 / EPOCH.as_secs_f64(),
            "{}",
            snap[0].rate
        );
        // Two epochs of silence: nothing is hot.
        assert!(top.snapshot(later + 2 * EPOCH).is_empty());
    }

    #[test]
    fn a_new_hot_key_displaces_the_smallest() {
        let top = TopKeys::new(2);
        let t0 = Duration::from_secs(1_000);
        for (name, n) in [("a", 100), ("b", 50), ("c", 300)] {
            for _ in 0..n {
                top.record(top.hash_of(["d", name]), t0, || info(name));
            }
        }
        let names: Vec<String> = top
            .snapshot(t0)
            .iter()
            .map(|h| h.info.entries[0].1.clone())
            .collect();
        assert_eq!(names, ["c", "a"]);
    }

    proptest::proptest! {
        /// A key with more decisions than all others together is listed
        /// first, and no listed rate is below the key's true count.
        #[test]
        fn the_majority_key_comes_first(others in proptest::collection::vec(0u16..500, 1..2_000), heavy_share in 51u32..90) {
            let top = TopKeys::new(4);
            let t0 = Duration::from_secs(1_000);
            // A strict majority: integer division alone can make it a tie
            // (one other arrival, 51 %: one each), whose order is the
            // hash seed's.
            let heavy = (others.len() as u32 * heavy_share / (100 - heavy_share))
                .max(others.len() as u32 + 1);
            let mut true_counts = std::collections::HashMap::<String, u32>::new();
            let mut sent_heavy = 0;
            for (i, o) in others.iter().enumerate() {
                let name = format!("o{o}");
                top.record(top.hash_of(["d", &name]), t0, || info(&name));
                *true_counts.entry(name).or_default() += 1;
                // Interleaved: the heavy key's share of every prefix.
                while sent_heavy * (others.len() as u32) < heavy * (i as u32 + 1) {
                    top.record(top.hash_of(["d", "heavy"]), t0, || info("heavy"));
                    sent_heavy += 1;
                }
            }
            true_counts.insert("heavy".into(), sent_heavy);
            let snap = top.snapshot(t0 + EPOCH);
            proptest::prop_assert_eq!(snap[0].info.entries[0].1.as_str(), "heavy");
            for h in &snap {
                let count = true_counts[&h.info.entries[0].1];
                proptest::prop_assert!(h.rate * EPOCH.as_secs_f64() >= f64::from(count) - 1e-9);
            }
        }
    }
}
