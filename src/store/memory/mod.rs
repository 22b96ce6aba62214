//! The embedded in-memory store: fixed-window counters in process memory,
//! for trying the service out and for single-instance deployments.
//!
//! Layout: 64 shards, each a `parking_lot::Mutex<HashMap>`, so callers on
//! different keys rarely contend and one key's read-modify-write is a few
//! nanoseconds under its shard lock. A `std`-style blocking mutex (not
//! tokio's) is right here: the critical section never awaits.
//!
//! Keys are stored as a 128-bit SipHash-1-3 of the cache key under a random
//! per-process secret, not as strings: a counter's entry is 40 bytes (plus
//! the table's slack and its place in its rule's eviction order), whatever
//! the key's length. Two distinct keys share a counter only
//! if their 128-bit hashes collide, with probability at most `n² / 2¹²⁹` for
//! `n` live keys (below 10⁻²⁶ at ten million keys), and the secret keeps an
//! attacker from crafting collisions.
//!
//! Expiry: a counter lives until its window ends. An expired counter reads
//! as zero (checked on access), and [`MemoryStore::sweep`] removes expired
//! entries and gives table memory back, so memory follows the active keys;
//! [`MemoryStore::spawn_sweeper`] runs it periodically.
//!
//! Bound: at most `MEMORY_MAX_KEYS` keys ([`MemoryStore::with_max_keys`];
//! each shard holds its 1/64th). A work that would add a key to a full
//! shard first drops that shard's expired keys (at most once a second per
//! shard); if the shard is still full, the rule that holds the most keys
//! in it gives up its least recently used (see `shares.rs`): one rule's flood of new keys
//! takes only its own part of the capacity, and a rule that holds less
//! than its fair share never loses a live key. Only a shard that no rule
//! holds a key of fails the work, as
//! [`StoreErrorKind::Unavailable`](super::StoreErrorKind::Unavailable).

use std::collections::HashMap;
use std::hash::Hasher;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use parking_lot::Mutex;
use siphasher::sip128::{Hasher128, SipHasher13};

use super::{Done, Job, Reply, Store, Work};
use crate::limiter::Clock;
use crate::platform::workers::SLICE;

mod apply;
mod shares;
mod table;

use shares::{owner_hash, Owner};
use table::{Locked, Shard};

const SHARDS: usize = 64;

/// `MEMORY_MAX_KEYS`' default: about 125 MB at the 125 bytes of
/// resident memory a key measured with the tables' slack.
pub const DEFAULT_MAX_KEYS: usize = 1_000_000;

/// What a work that finds its shard full fails with.
pub const FULL: &str = "the memory store holds MEMORY_MAX_KEYS keys";

/// In-process limit state. Cheap to share: wrap it in an `Arc`.
#[derive(Debug)]
pub struct MemoryStore {
    shards: Box<[Mutex<Shard>]>,
    secret: (u64, u64),
    clock: Arc<dyn Clock>,
    /// The most keys one shard holds.
    per_shard: usize,
    /// Whether the log said the store is full (once until it has room).
    full_logged: std::sync::atomic::AtomicBool,
    /// Whether the sweeper sets the `ratelimit.memory.keys` gauge.
    reports_keys: bool,
    /// The rules whose start of evicting was logged.
    evicting_logged: Mutex<std::collections::HashSet<Owner>>,
    /// RLQS's demand boards: this instance's own.
    boards: crate::store::board::MemoryBoards,
    /// The overrides' book: this instance's own.
    book: crate::store::overrides::MemoryBook,
}

impl MemoryStore {
    /// An empty store reading time from `clock`, of at most
    /// [`DEFAULT_MAX_KEYS`] keys.
    pub fn new(clock: Arc<dyn Clock>) -> MemoryStore {
        MemoryStore::with_max_keys(clock, DEFAULT_MAX_KEYS)
    }

    /// An empty store of at most about `max_keys` keys (rounded up to a
    /// multiple of 64, the shards).
    pub fn with_max_keys(clock: Arc<dyn Clock>, max_keys: usize) -> MemoryStore {
        MemoryStore {
            shards: (0..SHARDS).map(|_| Mutex::new(Shard::default())).collect(),
            secret: (rand::random(), rand::random()),
            boards: crate::store::board::MemoryBoards::new(Arc::clone(&clock)),
            book: crate::store::overrides::MemoryBook::default(),
            clock,
            per_shard: max_keys.div_ceil(SHARDS).max(1),
            full_logged: std::sync::atomic::AtomicBool::new(false),
            reports_keys: false,
            evicting_logged: Mutex::new(std::collections::HashSet::new()),
        }
    }

    /// The same store, whose sweeper also sets the `ratelimit.memory.keys`
    /// gauge (the service's store does; a fallback floor does not).
    pub fn reporting_keys(mut self) -> MemoryStore {
        self.reports_keys = true;
        self
    }

    /// The most keys it holds.
    pub fn max_keys(&self) -> usize {
        self.per_shard.saturating_mul(SHARDS)
    }

    fn id(&self, key: &str) -> u128 {
        let mut h = SipHasher13::new_with_keys(self.secret.0, self.secret.1);
        h.write(key.as_bytes());
        h.finish128().as_u128()
    }

    fn shard_of(id: u128) -> usize {
        (id >> 122) as usize % SHARDS
    }

    /// Number of live (possibly expired, not yet swept) counters and
    /// algorithm states.
    pub fn len(&self) -> usize {
        self.shards.iter().map(|s| s.lock().len()).sum()
    }

    /// Whether no counter is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Removes every counter whose window has ended and shrinks tables that
    /// became mostly empty. Returns how many counters were removed.
    pub fn sweep(&self) -> usize {
        let now = self.clock.now();
        let (mut removed, mut fullest) = (0, 0);
        for shard in self.shards.iter() {
            let mut shard = shard.lock();
            removed += shard.drop_expired(now);
            fullest = fullest.max(shard.len());
        }
        if fullest < self.per_shard {
            // Room again: the next time it fills is worth a log line.
            self.full_logged
                .store(false, std::sync::atomic::Ordering::Relaxed);
        }
        removed
    }

    /// Whether every key of `work` that it would add fits: a full shard
    /// drops its expired keys first, at most once a second, then makes
    /// room by its rules' shares (see [`shares`]).
    fn has_room(&self, work: &Work, ids: &[u128], locked: &mut Locked<'_>, now: Duration) -> bool {
        if !work.policy.commits() {
            return true;
        }
        // New keys of this work per shard, which it adds after this check.
        let mut adding = [0usize; SHARDS];
        for (item, &id) in work.items.iter().zip(ids) {
            let added = &mut adding[MemoryStore::shard_of(id)];
            let shard = locked.shard(id);
            if item.taken() == 0 || shard.holds(id) {
                continue;
            }
            if shard.len() + *added >= self.per_shard
                && now.saturating_sub(shard.swept_at) >= Duration::from_secs(1)
            {
                shard.swept_at = now;
                shard.drop_expired(now);
            }
            // Each turn removes a key: bounded by the shard's keys.
            while shard.len() + *added >= self.per_shard {
                match shard.evict_for(owner_hash(item.rule.id.as_ref())) {
                    Some(victim) => self.evicted(victim, shard),
                    None => return false,
                }
            }
            *added += 1;
        }
        true
    }

    /// Logs the first eviction of each rule, once.
    fn evicted(&self, victim: Owner, shard: &Shard) {
        let Some(h) = shard.shares.by_rule.get(&victim) else {
            return;
        };
        if h.evictions == 1 && self.evicting_logged.lock().insert(victim) {
            tracing::warn!(
                rule = %h.name,
                max_keys = self.max_keys(),
                "a rule holds the most keys of the memory store's MEMORY_MAX_KEYS: its oldest keys make way for new ones (ratelimit.memory.rule.<rule>.evictions)"
            );
        }
    }

    /// Per rule, most keys first: its load key, the keys it holds, and its
    /// keys evicted so far.
    pub fn holdings(&self) -> Vec<(Arc<str>, u64, u64)> {
        let mut by_rule: HashMap<Owner, (Arc<str>, u64, u64)> = HashMap::new();
        for shard in self.shards.iter() {
            let shard = shard.lock();
            for (&rule, h) in &shard.shares.by_rule {
                let e = by_rule
                    .entry(rule)
                    .or_insert_with(|| (Arc::clone(&h.name), 0, 0));
                e.1 += h.held as u64;
                e.2 += h.evictions;
            }
        }
        let mut all: Vec<_> = by_rule.into_values().collect();
        all.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
        all
    }

    /// Runs [`MemoryStore::sweep`] every `interval` until the returned guard
    /// is dropped. Needs a tokio runtime.
    pub fn spawn_sweeper(self: &Arc<Self>, interval: Duration) -> SweeperGuard {
        let store = Arc::downgrade(self);
        let task = tokio::spawn(async move {
            let mut tick = tokio::time::interval(interval);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tick.tick().await;
                // Stop once the store itself is gone.
                let Some(store) = store.upgrade() else { break };
                store.sweep();
                if store.reports_keys {
                    ::metrics::gauge!(crate::metrics::MEMORY_KEYS).set(store.len() as f64);
                    for (rule, keys, evictions) in store.holdings() {
                        let (held, evicted) = crate::metrics::memory_rule(&rule);
                        held.set(keys as f64);
                        evicted.absolute(evictions);
                    }
                }
            }
        });
        SweeperGuard(task)
    }
}

/// Stops the sweeper task when dropped.
#[derive(Debug)]
pub struct SweeperGuard(tokio::task::JoinHandle<()>);

impl Drop for SweeperGuard {
    fn drop(&mut self) {
        self.0.abort();
    }
}

impl MemoryStore {
    fn apply_or_fail(&self, work: &Work) -> Reply {
        self.apply(work)
            .unwrap_or_else(|e| Reply::failed(work.len(), &e))
    }

    /// An [independent](Work::is_independent) work in slices of [`SLICE`] items, each under
    /// its own shards' locks, yielding between them: a large request holds
    /// no lock, and keeps its worker from other requests, for more than a
    /// slice. The answers are those of one step (each counter counts on
    /// its own); committed iff every slice committed.
    async fn apply_in_slices(&self, work: &Work) -> Reply {
        let positions: Vec<usize> = (0..work.len()).collect();
        let mut reply = Reply {
            answers: Vec::with_capacity(work.len()),
            committed: work.policy.commits(),
        };
        for (n, slice) in positions.chunks(SLICE).enumerate() {
            if n > 0 {
                tokio::task::yield_now().await;
            }
            let part = self.apply_or_fail(&work.select(slice));
            reply.committed &= part.committed;
            reply.answers.extend(part.answers);
        }
        reply
    }
}

#[async_trait]
impl Store for MemoryStore {
    /// Nothing here can fail but a full store (`MEMORY_MAX_KEYS`); the
    /// boards and the overrides' book are this instance's own.
    async fn call(&self, job: Job<'_>, _deadline: Option<tokio::time::Instant>) -> Done {
        match job {
            Job::Limits(work) if work.len() > SLICE && work.is_independent() => {
                Done::Limits(self.apply_in_slices(work).await)
            }
            Job::Limits(work) => Done::Limits(self.apply_or_fail(work)),
            Job::Boards(work) => Done::Boards(self.boards.share(work)),
            Job::Overrides(work) => Done::Overrides(self.book.run(work)),
        }
    }
}

#[cfg(test)]
mod tests;
