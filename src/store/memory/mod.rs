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
//! holds a key of fails the work, as [`StoreErrorKind::Unavailable`].

use std::collections::HashMap;
use std::hash::Hasher;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use parking_lot::Mutex;
use siphasher::sip128::{Hasher128, SipHasher13};

use super::{
    Answer, Decided, Limit, OriginalWindow, Policy, Reply, Store, StoreError, StoreErrorKind, Work,
};
use crate::limiter::{Algorithm, Clock, Decision, Limiter, LimiterState, WindowCount};

mod shares;
mod table;

use shares::{owner_hash, Owner};
use table::{Locked, Shard, Table};

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
                match shard.evict_for(owner_hash(item.owner.as_ref())) {
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

#[async_trait]
impl Store for MemoryStore {
    /// Nothing here can fail but a full store (`MEMORY_MAX_KEYS`).
    async fn execute(&self, work: &Work, _deadline: Option<tokio::time::Instant>) -> Reply {
        match self.apply(work) {
            Ok(reply) => reply,
            Err(e) => Reply::failed(work.len(), &e),
        }
    }

    async fn share(
        &self,
        work: &crate::store::board::BoardWork,
        _deadline: Option<tokio::time::Instant>,
    ) -> crate::store::board::BoardReply {
        self.boards.share(work)
    }
}

/// A write an item makes if the work commits.
enum Write {
    Counter(OriginalWindow, u64),
    State(Limiter, LimiterState),
}

impl MemoryStore {
    /// Applies `work` under the locks of every shard it touches, so that
    /// the whole work is one atomic step.
    pub fn apply(&self, work: &Work) -> Result<Reply, StoreError> {
        let now = self.clock.now();
        let now_secs = now.as_secs();
        let items = &work.items;
        let ids: Vec<u128> = items.iter().map(|c| self.id(&c.key)).collect();
        let mut locked = Locked::new(&self.shards, &ids);
        if !self.has_room(work, &ids, &mut locked, now) {
            ::metrics::counter!(crate::metrics::MEMORY_FULL).increment(1);
            if !self
                .full_logged
                .swap(true, std::sync::atomic::Ordering::Relaxed)
            {
                tracing::warn!(
                    max_keys = self.max_keys(),
                    "the memory store is full (MEMORY_MAX_KEYS): new keys are answered by their rules' failure policies until keys expire"
                );
            }
            return Err(StoreError::new(StoreErrorKind::Unavailable, FULL));
        }
        // What comes back before anything is decided: a give-back's cost,
        // to what counts now, whatever the rest decides; under a refund,
        // each item's cost to the window it was taken in (a counter's
        // never).
        for (item, &id) in items.iter().zip(&ids) {
            let taken_at = match (item.give_back, work.policy, &item.limit) {
                (true, ..) => None,
                (false, Policy::Refund { taken_at }, l) if l.taken_on_commit() => Some(taken_at),
                _ => continue,
            };
            match &item.limit {
                Limit::Algorithm(l) | Limit::Reference { contract: l, .. } => {
                    if let Some(state) = locked.state(id, now) {
                        let state = match taken_at {
                            Some(at) => l.refund(state, item.cost, at, now),
                            None => l.give_back(state, item.cost, now),
                        };
                        locked.set_state(id, l, state, now, item.owner.as_ref());
                    }
                }
                // The key names its window: an ended one has expired.
                Limit::Counter(_) | Limit::Window(_) => {
                    if let Some(c) = locked.shard(id).counters.get_mut(&id) {
                        c.count = c.count.saturating_sub(item.cost);
                    }
                }
            }
        }
        // STOP: which counters would pass their limit.
        let stopping = work.policy == Policy::CommitStopping;
        let exceeds: Vec<bool> = match stopping {
            true => items
                .iter()
                .zip(&ids)
                .map(|(item, &id)| match &item.limit {
                    Limit::Counter(w) if !item.give_back => {
                        locked.counter(id, now_secs).saturating_add(item.cost) > w.limit
                    }
                    _ => false,
                })
                .collect(),
            false => Vec::new(),
        };
        let any_exceeds = exceeds.iter().any(|&e| e);
        let counts_taken = !matches!(work.policy, Policy::Refund { .. });

        // What the work would write, so that items on one key see the ones
        // before them.
        let mut pending: Table<LimiterState> = Table::default();
        // By item position: the key and its rule are the item's.
        let mut writes: Vec<(usize, Write)> = Vec::new();
        // Per item: its decision, its count before and after, and whether
        // it was taken (for the references that follow it).
        let mut results: Vec<(Decision, u64, u64)> = Vec::with_capacity(items.len());
        // Only references read it.
        let followed = items
            .iter()
            .any(|c| matches!(c.limit, Limit::Reference { .. }));
        let mut taken = vec![false; if followed { items.len() } else { 0 }];
        for (i, (item, &id)) in items.iter().zip(&ids).enumerate() {
            match &item.limit {
                Limit::Counter(w) if item.give_back => {
                    let after = locked.counter(id, now_secs);
                    results.push((w.decision(after, now_secs), after, after));
                }
                Limit::Counter(w) => {
                    let hits = match (counts_taken, stopping && any_exceeds) {
                        (false, _) => 0,
                        (true, true) if !exceeds.get(i).copied().unwrap_or(false) => 0,
                        _ => item.cost,
                    };
                    let after = locked.count(id, hits, w, now_secs, item.owner.as_ref());
                    if let Some(t) = taken.get_mut(i) {
                        *t = hits > 0 && after <= w.limit;
                    }
                    results.push((w.decision(after, now_secs), after, after));
                }
                Limit::Window(w) => {
                    // The key names the window (epoch-aligned or a
                    // calendar's), so its counter is the window's.
                    let before = match pending.get(&id) {
                        Some(state) => window_count(&Some(state.clone())),
                        None => locked.counter(id, now_secs),
                    };
                    let decision = w.decide(before, item.taken(), now_secs);
                    let mut after = before;
                    if decision.is_allowed() && item.taken() > 0 {
                        after = before + item.cost;
                        let next = LimiterState::FixedWindow(WindowCount {
                            window_start: Duration::from_secs(w.window.start),
                            count: after,
                        });
                        pending.insert(id, next);
                        writes.push((i, Write::Counter(*w, after)));
                    }
                    results.push((decision, before, after));
                }
                Limit::Algorithm(limiter) => {
                    let state = pending.get(&id).cloned().or_else(|| locked.state(id, now));
                    let (decision, next) = limiter.decide(state, item.taken(), now);
                    if decision.is_allowed() && item.taken() > 0 {
                        pending.insert(id, next.clone());
                        writes.push((i, Write::State(*limiter, next)));
                    }
                    results.push((decision, 0, 0));
                }
                Limit::Reference { contract, subject } => {
                    let state = pending.get(&id).cloned().or_else(|| locked.state(id, now));
                    let held = contract.in_window(state.as_ref(), now);
                    let (decision, _) = contract.decide(state.clone(), item.taken(), now);
                    if item.taken() > 0 {
                        let next = contract.record(state, item.cost, now);
                        let follows_counter = subject
                            .and_then(|s| items.get(s))
                            .is_some_and(|s| !s.limit.taken_on_commit());
                        match subject {
                            Some(s) if follows_counter => {
                                if taken.get(*s).copied().unwrap_or(false) {
                                    locked.set_state(id, contract, next, now, item.owner.as_ref());
                                }
                            }
                            _ => {
                                pending.insert(id, next.clone());
                                writes.push((i, Write::State(*contract, next)));
                            }
                        }
                    }
                    results.push((decision, held, held));
                }
            }
        }
        let committed = work.policy.commits()
            && items
                .iter()
                .zip(&results)
                .all(|(c, (d, ..))| !c.binding || d.is_allowed());
        if committed {
            let owner = |i: usize| items[i].owner.as_ref();
            for (i, write) in writes {
                match write {
                    Write::Counter(w, count) => locked.set_counter(ids[i], count, &w, owner(i)),
                    Write::State(limiter, state) => {
                        locked.set_state(ids[i], &limiter, state, now, owner(i))
                    }
                }
            }
        }
        let answers = items
            .iter()
            .zip(results)
            .map(|(item, (decision, before, after))| {
                let count = match item.limit {
                    Limit::Window(_) if !committed => before,
                    _ => after,
                };
                Ok(Answer::Decided(Decided {
                    decision,
                    count,
                    at: now,
                }))
            })
            .collect();
        Ok(Reply { answers, committed })
    }
}

fn window_count(state: &Option<LimiterState>) -> u64 {
    match state {
        Some(LimiterState::FixedWindow(w)) => w.count,
        _ => 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::tree::RuleId;
    use crate::limiter::fixed_window::Window;
    use crate::limiter::ManualClock;
    use crate::store::{testing::RunItems, Item};

    fn inc(key: &str, hits: u64, now: u64, unit: u64, limit: u64) -> Item {
        let w = OriginalWindow {
            limit,
            window: Window::containing(now, unit),
            ttl_seconds: unit,
            jitter_seconds: 0,
        };
        Item::new(key, Limit::Counter(w), hits)
    }

    #[tokio::test]
    async fn counts_per_key_and_expires_with_the_window() {
        let clock = Arc::new(ManualClock::at_secs(1200));
        let store = MemoryStore::new(clock.clone());
        let b = [inc("a", 1, 1200, 60, 10), inc("b", 2, 1200, 60, 10)];
        assert_eq!(store.counts(&b, Policy::Commit).await, Ok(vec![1, 2]));
        assert_eq!(store.counts(&b, Policy::Commit).await, Ok(vec![2, 4]));
        clock.set(Duration::from_secs(1260));
        // The same key past its window reads as a fresh counter.
        let later = [inc("a", 1, 1260, 60, 10)];
        assert_eq!(store.counts(&later, Policy::Commit).await, Ok(vec![1]));
        assert_eq!(store.sweep(), 1);
        assert_eq!(store.len(), 1);
    }

    #[tokio::test]
    async fn zero_hits_reads_without_consuming() {
        let store = MemoryStore::new(Arc::new(ManualClock::at_secs(0)));
        let b = [inc("a", 3, 0, 60, 10)];
        store.counts(&b, Policy::Commit).await.expect("ok");
        let read = [inc("a", 0, 0, 60, 10)];
        assert_eq!(store.counts(&read, Policy::Commit).await, Ok(vec![3]));
    }

    /// STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT: only the counter that would
    /// exceed moves.
    #[tokio::test]
    async fn stop_increment_when_over_limit() {
        let store = MemoryStore::new(Arc::new(ManualClock::at_secs(0)));
        let seed = [inc("a", 10, 0, 3600, 15), inc("b", 10, 0, 3600, 14)];
        store.counts(&seed, Policy::Commit).await.expect("ok");
        let p = Policy::CommitStopping;
        let one = [inc("a", 1, 0, 3600, 15), inc("b", 1, 0, 3600, 14)];
        assert_eq!(store.counts(&one, p).await, Ok(vec![11, 11]));
        let two = [inc("a", 2, 0, 3600, 15), inc("b", 2, 0, 3600, 14)];
        assert_eq!(store.counts(&two, p).await, Ok(vec![13, 13]));
        assert_eq!(store.counts(&two, p).await, Ok(vec![13, 15]));
    }

    #[test]
    fn no_lost_updates_under_64_concurrent_callers() {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(4)
            .build()
            .expect("runtime");
        let store = Arc::new(MemoryStore::new(Arc::new(ManualClock::at_secs(0))));
        rt.block_on(async {
            let tasks: Vec<_> = (0..64)
                .map(|_| {
                    let store = store.clone();
                    tokio::spawn(async move {
                        for _ in 0..1000 {
                            let b = [inc("hot", 1, 0, 60, u64::MAX)];
                            store
                                .counts(&b, Policy::Commit)
                                .await
                                .expect("memory never fails");
                        }
                    })
                })
                .collect();
            for t in tasks {
                t.await.expect("task");
            }
            let read = [inc("hot", 0, 0, 60, u64::MAX)];
            assert_eq!(store.counts(&read, Policy::Commit).await, Ok(vec![64_000]));
        });
    }

    #[tokio::test]
    async fn sweeping_gives_memory_back() {
        let clock = Arc::new(ManualClock::at_secs(0));
        let store = MemoryStore::new(clock.clone());
        let batch: Vec<_> = (0..10_000)
            .map(|i| inc(&format!("k{i}"), 1, 0, 1, 10))
            .collect();
        store.counts(&batch, Policy::Commit).await.expect("ok");
        assert_eq!(store.len(), 10_000);
        clock.set(Duration::from_secs(1));
        assert_eq!(store.sweep(), 10_000);
        assert!(store.is_empty());
        let capacity: usize = store
            .shards
            .iter()
            .map(|s| s.lock().counters.capacity())
            .sum();
        assert!(capacity < 10_000, "tables shrank, capacity {capacity}");
    }

    /// The original's counter on `key` of rule `rule`.
    fn of_rule(rule: &RuleId, key: &str, unit: u64) -> Item {
        Item {
            owner: Some(rule.clone()),
            ..inc(key, 1, 0, unit, 10)
        }
    }

    #[tokio::test]
    async fn a_flood_of_one_rule_takes_only_its_own_part_of_a_full_store() {
        let clock = Arc::new(ManualClock::at_secs(0));
        // 32 keys a shard: the quiet rule's 50 keys hold at most a few of
        // any shard, far below half of it.
        let store = MemoryStore::with_max_keys(clock.clone(), 2048);
        let (flood, quiet) = (RuleId::new("d.flood"), RuleId::new("d.quiet"));
        let active: Vec<Item> = (0..40)
            .map(|i| of_rule(&quiet, &format!("active{i}"), 60))
            .collect();
        for a in &active {
            store
                .counts(std::slice::from_ref(a), Policy::Commit)
                .await
                .expect("room");
        }
        // 10,000 unique keys of one rule, for the whole window: never
        // refused, its own oldest keys make way.
        for i in 0..10_000 {
            let key = of_rule(&flood, &format!("flood{i}"), 60);
            store
                .counts(&[key], Policy::Commit)
                .await
                .expect("room, by the flood's own keys");
            // Meanwhile the quiet rule adds keys too, and keeps them.
            if i % 1_000 == 999 {
                let new = of_rule(&quiet, &format!("late{i}"), 60);
                assert_eq!(store.counts(&[new], Policy::Commit).await, Ok(vec![1]));
            }
        }
        assert_eq!(store.len(), 2048, "full, and no more");
        // Every key of the quiet rule still counts from where it was.
        for a in &active {
            let counted = store.counts(std::slice::from_ref(a), Policy::Commit).await;
            assert_eq!(counted, Ok(vec![2]), "{}", a.key);
        }
        let held = store.holdings();
        let by = |r: &RuleId| {
            held.iter()
                .find(|(n, ..)| n == r.name())
                .map(|(_, k, e)| (*k, *e))
        };
        let (flood_keys, flood_evicted) = by(&flood).expect("the flood's row");
        assert_eq!(by(&quiet), Some((50, 0)), "the quiet rule lost nothing");
        assert_eq!(flood_keys + 50, store.len() as u64);
        assert_eq!(
            flood_evicted,
            10_000 - flood_keys,
            "each new flood key past its part evicted one"
        );
        assert_eq!(held[0].0, *flood.name(), "most keys first");
        // A minute later the flood's keys have expired and been swept.
        clock.set(Duration::from_secs(60));
        store.sweep();
        assert_eq!(store.len(), 0);
    }

    #[tokio::test]
    async fn two_floods_share_what_the_quiet_rules_leave() {
        let clock = Arc::new(ManualClock::at_secs(0));
        let store = MemoryStore::with_max_keys(clock.clone(), 64 * 16);
        let (a, b) = (RuleId::new("d.a"), RuleId::new("d.b"));
        for i in 0..20_000 {
            let rule = if i % 2 == 0 { &a } else { &b };
            let key = of_rule(rule, &format!("k{i}"), 60);
            store.counts(&[key], Policy::Commit).await.expect("room");
        }
        let held = store.holdings();
        let keys = |r: &RuleId| {
            held.iter()
                .find(|(n, ..)| n == r.name())
                .map_or(0, |(_, k, _)| *k)
        };
        // Equal shares, per shard within one key.
        assert!(keys(&a).abs_diff(keys(&b)) <= 64, "{held:?}");
        assert_eq!(keys(&a) + keys(&b), 1024);
    }
}
