//! The embedded in-memory store: fixed-window counters in process memory,
//! for trying the service out and for single-instance deployments.
//!
//! Layout: 64 shards, each a `parking_lot::Mutex<HashMap>`, so callers on
//! different keys rarely contend and one key's read-modify-write is a few
//! nanoseconds under its shard lock. A `std`-style blocking mutex (not
//! tokio's) is right here: the critical section never awaits.
//!
//! Keys are stored as a 128-bit SipHash-1-3 of the cache key under a random
//! per-process secret, not as strings: an entry is 32 bytes (plus the table's
//! slack), whatever the key's length. Two distinct keys share a counter only
//! if their 128-bit hashes collide, with probability at most `n² / 2¹²⁹` for
//! `n` live keys (below 10⁻²⁶ at ten million keys), and the secret keeps an
//! attacker from crafting collisions.
//!
//! Expiry: a counter lives until its window ends. An expired counter reads
//! as zero (checked on access), and [`MemoryStore::sweep`] removes expired
//! entries and gives table memory back, so memory follows the active keys;
//! [`MemoryStore::spawn_sweeper`] runs it periodically.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use parking_lot::{Mutex, MutexGuard};
use siphasher::sip128::{Hasher128, SipHasher13};

use super::{
    Answer, Check, CheckReply, Checked, CheckedLimit, Commit, Increment, IncrementPolicy, Reply,
    Store, StoreError, StoreErrorKind, Work,
};
use crate::limiter::fixed_window::Window;
use crate::limiter::{Algorithm, Clock, FixedWindowCounter, Limiter, LimiterState, WindowCount};

const SHARDS: usize = 64;

/// A counter: its value and the Unix second at which it expires.
#[derive(Debug, Clone, Copy)]
struct Counter {
    count: u64,
    expires_at: u64,
}

/// The keys are already uniform hashes: use their low bits as the hash.
#[derive(Debug, Default, Clone, Copy)]
struct PassThrough(u64);

impl Hasher for PassThrough {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0 << 8) | u64::from(b);
        }
    }
    fn write_u128(&mut self, n: u128) {
        self.0 = n as u64;
    }
}

type Shard = HashMap<u128, Counter, BuildHasherDefault<PassThrough>>;

/// The state of one opt-in limit's key and when it may be dropped.
#[derive(Debug, Clone)]
struct Slot {
    state: LimiterState,
    /// Since the Unix epoch; past it the key is as good as absent.
    expires_at: Duration,
}

type StateShard = HashMap<u128, Slot, BuildHasherDefault<PassThrough>>;

/// In-process fixed-window counters. Cheap to share: wrap it in an `Arc`.
#[derive(Debug)]
pub struct MemoryStore {
    shards: Box<[Mutex<Shard>]>,
    /// The opt-in algorithms' states ([`Store::check`]).
    states: Box<[Mutex<StateShard>]>,
    secret: (u64, u64),
    clock: Arc<dyn Clock>,
}

impl MemoryStore {
    /// An empty store reading time from `clock`.
    pub fn new(clock: Arc<dyn Clock>) -> MemoryStore {
        MemoryStore {
            shards: (0..SHARDS).map(|_| Mutex::new(Shard::default())).collect(),
            states: (0..SHARDS)
                .map(|_| Mutex::new(StateShard::default()))
                .collect(),
            secret: (rand::random(), rand::random()),
            clock,
        }
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
        self.shards.iter().map(|s| s.lock().len()).sum::<usize>()
            + self.states.iter().map(|s| s.lock().len()).sum::<usize>()
    }

    /// Whether no counter is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Removes every counter whose window has ended and shrinks tables that
    /// became mostly empty. Returns how many counters were removed.
    pub fn sweep(&self) -> usize {
        let now_secs = self.clock.now_secs();
        let now = self.clock.now();
        sweep_shards(&self.shards, |c| c.expires_at > now_secs)
            + sweep_shards(&self.states, |slot| slot.expires_at > now)
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
            }
        });
        SweeperGuard(task)
    }

    fn apply(counter: &mut Counter, inc: &Increment, now: u64, hits: u64) -> u64 {
        if counter.expires_at <= now {
            *counter = Counter {
                count: 0,
                expires_at: inc.window.start + inc.window.length,
            };
        }
        counter.count = counter.count.saturating_add(hits);
        counter.count
    }

    fn entry<'a>(shard: &'a mut Shard, id: u128, inc: &Increment) -> &'a mut Counter {
        shard.entry(id).or_insert(Counter {
            count: 0,
            expires_at: inc.window.start + inc.window.length,
        })
    }
}

/// Gives table memory back once a table is mostly empty.
/// Keeps the entries of every shard that `live` accepts, shrinking tables
/// that became mostly empty; returns how many were removed.
fn sweep_shards<V>(
    shards: &[Mutex<HashMap<u128, V, BuildHasherDefault<PassThrough>>>],
    live: impl Fn(&V) -> bool,
) -> usize {
    let mut removed = 0;
    for shard in shards {
        let mut map = shard.lock();
        let before = map.len();
        map.retain(|_, v| live(v));
        removed += before - map.len();
        shrink(&mut map);
    }
    removed
}

fn shrink<V>(map: &mut HashMap<u128, V, BuildHasherDefault<PassThrough>>) {
    if map.capacity() > 64 && map.len() < map.capacity() / 4 {
        map.shrink_to_fit();
    }
}

/// Locks the shards of `ids`, in index order (so that two batches can never
/// deadlock), for one atomic step over a batch.
fn lock_shards<'a, T>(
    shards: &'a [Mutex<T>],
    ids: impl Iterator<Item = u128>,
) -> Vec<(usize, MutexGuard<'a, T>)> {
    let mut order: Vec<usize> = ids.map(MemoryStore::shard_of).collect();
    order.sort_unstable();
    order.dedup();
    order.into_iter().map(|i| (i, shards[i].lock())).collect()
}

/// The locked shard that holds `id`, among the guards taken for a batch.
fn locked<'a, T>(guards: &'a mut [(usize, MutexGuard<'_, T>)], id: u128) -> &'a mut T {
    let i = MemoryStore::shard_of(id);
    let at = guards
        .iter()
        .position(|(s, _)| *s == i)
        .expect("the shard of every key of the batch was locked");
    &mut guards[at].1
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
    /// Always the same step: a batch is decided under its shards' locks.
    fn reference_step(&self, _subject: &str, _reference: &str) -> super::ReferenceStep {
        super::ReferenceStep::Same
    }

    /// Nothing here can fail but an original window that cannot be built.
    async fn execute(&self, work: &Work, _deadline: Option<tokio::time::Instant>) -> Reply {
        match work {
            Work::Count { items, policy } => Reply {
                answers: self
                    .count(items, *policy)
                    .into_iter()
                    .map(|n| Ok(Answer::Count(n)))
                    .collect(),
                committed: true,
            },
            Work::Check { items, commit } => match self.decide(items, *commit) {
                Ok(reply) => Reply {
                    answers: reply
                        .results
                        .into_iter()
                        .map(|c| Ok(Answer::Checked(c)))
                        .collect(),
                    committed: reply.committed,
                },
                Err(e) => Reply::failed(items.len(), &e),
            },
        }
    }
}

impl MemoryStore {
    /// Applies `batch` per `policy`: each counter's value after it, and
    /// for an audit reference ([`Increment::reference`]) what it held
    /// before, decided and recorded under the lock of the counter it
    /// follows.
    pub fn count(&self, batch: &[Increment], policy: IncrementPolicy) -> Vec<u64> {
        let now = self.clock.now();
        let now_secs = now.as_secs();
        let ids: Vec<u128> = batch.iter().map(|i| self.id(&i.key)).collect();
        let is_reference = |i: usize| batch.get(i).is_some_and(|r| r.reference.is_some());
        let mut out = Vec::with_capacity(batch.len());
        match policy {
            IncrementPolicy::Always => {
                let mut i = 0;
                while i < batch.len() {
                    let (inc, id) = (&batch[i], ids[i]);
                    if is_reference(i) {
                        // A reference that follows no counter records nothing.
                        out.push(self.reference(inc, id, false, now));
                        i += 1;
                        continue;
                    }
                    let mut shard = self.shards[Self::shard_of(id)].lock();
                    let value =
                        Self::apply(Self::entry(&mut shard, id, inc), inc, now_secs, inc.hits);
                    out.push(value);
                    if is_reference(i + 1) {
                        let admitted = inc.hits > 0 && value <= inc.limit;
                        out.push(self.reference(&batch[i + 1], ids[i + 1], admitted, now));
                        i += 1;
                    }
                    drop(shard);
                    i += 1;
                }
            }
            IncrementPolicy::OnlyIfNoneWouldExceed => {
                // Lock every shard the batch touches, in index order (no
                // deadlock), so the check and the increments are one step.
                let counters = (0..batch.len()).filter(|&i| !is_reference(i));
                let mut guards = lock_shards(&self.shards, counters.map(|i| ids[i]));
                let would_exceed: Vec<bool> = batch
                    .iter()
                    .zip(&ids)
                    .map(|(inc, &id)| {
                        if inc.reference.is_some() {
                            return false;
                        }
                        let current = match locked(&mut guards, id).get(&id) {
                            Some(c) if c.expires_at > now_secs => c.count,
                            _ => 0,
                        };
                        current.saturating_add(inc.hits) > inc.limit
                    })
                    .collect();
                let any = would_exceed.iter().any(|&w| w);
                // Whether the last counter added hits and is within its limit.
                let mut admitted = false;
                for ((inc, &id), &exceeds) in batch.iter().zip(&ids).zip(&would_exceed) {
                    if inc.reference.is_some() {
                        out.push(self.reference(inc, id, admitted, now));
                        admitted = false;
                        continue;
                    }
                    let hits = if !any || exceeds { inc.hits } else { 0 };
                    let counter = Self::entry(locked(&mut guards, id), id, inc);
                    let value = Self::apply(counter, inc, now_secs, hits);
                    admitted = hits > 0 && value <= inc.limit;
                    out.push(value);
                }
            }
        }
        out
    }

    /// The audit reference `r` (key id `id`): what it held in its window
    /// before `now`, with `r.hits` recorded if the counter it follows
    /// `admitted` them. A reference without a contract holds nothing.
    fn reference(&self, r: &Increment, id: u128, admitted: bool, now: Duration) -> u64 {
        let Some(contract) = r.reference else {
            return 0;
        };
        let mut shard = self.states[Self::shard_of(id)].lock();
        let state = shard
            .get(&id)
            .filter(|slot| slot.expires_at > now)
            .map(|slot| slot.state.clone());
        let held = contract.in_window(state.as_ref(), now);
        if admitted && r.hits > 0 {
            let state = contract.record(state, r.hits, now);
            let expires_at = now + contract.expires_after(&state, now);
            shard.insert(id, Slot { state, expires_at });
        }
        held
    }

    /// Decides `batch` all or nothing under the locks of every shard it
    /// touches, so the whole batch is one atomic step.
    pub fn decide(&self, batch: &[Check], commit: Commit) -> Result<CheckReply, StoreError> {
        let now = self.clock.now();
        let ids: Vec<u128> = batch.iter().map(|c| self.id(&c.key)).collect();
        let is_counter = |c: &Check| matches!(c.limit, CheckedLimit::OriginalWindow { .. });
        let of_kind = |counter: bool| {
            batch
                .iter()
                .zip(&ids)
                .filter(move |(c, _)| is_counter(c) == counter)
                .map(|(_, &id)| id)
        };
        let mut counters = lock_shards(&self.shards, of_kind(true));
        let mut states = lock_shards(&self.states, of_kind(false));
        if let Commit::Refund { taken_at } = commit {
            for (check, &id) in batch.iter().zip(&ids) {
                match &check.limit {
                    CheckedLimit::Algorithm(limiter) | CheckedLimit::Reference(limiter) => {
                        let map = locked(&mut states, id);
                        if let Some(slot) = map.get_mut(&id).filter(|s| s.expires_at > now) {
                            slot.state =
                                limiter.refund(slot.state.clone(), check.cost, taken_at, now);
                        }
                    }
                    CheckedLimit::OriginalWindow { .. } => {
                        // The key names its window: an ended one has expired.
                        let map = locked(&mut counters, id);
                        if let Some(c) = map.get_mut(&id) {
                            c.count = c.count.saturating_sub(check.cost);
                        }
                    }
                }
            }
        }
        // What the batch would write, so that checks on one key see the
        // ones before them; for an original window also when its counter
        // expires (Unix seconds).
        let mut pending: HashMap<u128, (Slot, Option<u64>)> = HashMap::new();
        // Per check: its decision, and its counter before and after.
        let mut results = Vec::with_capacity(batch.len());
        for (check, &id) in batch.iter().zip(&ids) {
            let (limiter, stored, counter_expiry) = match &check.limit {
                CheckedLimit::Algorithm(limiter) | CheckedLimit::Reference(limiter) => {
                    let stored = locked(&mut states, id)
                        .get(&id)
                        .filter(|slot| slot.expires_at > now)
                        .map(|slot| slot.state.clone());
                    (*limiter, stored, None)
                }
                CheckedLimit::OriginalWindow { limit, window, .. } => {
                    let count = locked(&mut counters, id)
                        .get(&id)
                        .filter(|c| c.expires_at > now.as_secs())
                        .map_or(0, |c| c.count);
                    let state = LimiterState::FixedWindow(WindowCount {
                        window_start: Duration::from_secs(window.start),
                        count,
                    });
                    let end = window.start + window.length;
                    (original_window(*limit, window)?, Some(state), Some(end))
                }
            };
            let state = pending
                .get(&id)
                .map(|(slot, _)| slot.state.clone())
                .or(stored);
            let (decision, next) = limiter.decide(state.clone(), check.cost, now);
            let count = |s: &Option<LimiterState>| match s {
                Some(LimiterState::FixedWindow(w)) => w.count,
                _ => 0,
            };
            let mut before = count(&state);
            let mut after = before;
            let is_reference = matches!(check.limit, CheckedLimit::Reference(_));
            let next = match is_reference {
                true => limiter.record(state.clone(), check.cost, now),
                false => next,
            };
            let recorded = decision.is_allowed() || is_reference;
            if recorded && check.cost > 0 {
                after = count(&Some(next.clone()));
                let expires_at = now + limiter.expires_after(&next, now);
                let slot = Slot {
                    state: next,
                    expires_at,
                };
                pending.insert(id, (slot, counter_expiry));
            }
            if is_reference {
                // A reference answers what its window held before.
                let held = limiter.in_window(state.as_ref(), now);
                (before, after) = (held, held);
            }
            results.push((decision, before, after));
        }
        let committed = commit == Commit::IfAllPass
            && batch
                .iter()
                .zip(&results)
                .all(|(c, (d, ..))| !c.binding || d.is_allowed());
        if committed {
            for (id, (slot, counter_expiry)) in pending {
                match (counter_expiry, slot.state) {
                    (Some(expires_at), LimiterState::FixedWindow(w)) => {
                        let counter = Counter {
                            count: w.count,
                            expires_at,
                        };
                        locked(&mut counters, id).insert(id, counter);
                    }
                    (_, state) => {
                        let slot = Slot {
                            state,
                            expires_at: slot.expires_at,
                        };
                        locked(&mut states, id).insert(id, slot);
                    }
                }
            }
        }
        let out = results
            .into_iter()
            .map(|(decision, before, after)| Checked {
                decision,
                count: if committed { after } else { before },
                at: now,
            })
            .collect();
        Ok(CheckReply {
            results: out,
            committed,
        })
    }
}

/// The original's window as a [`Limiter`] over the window's length (its key
/// already names the window). Proto units give windows of one second to a
/// year, all valid; anything else is refused rather than trusted.
fn original_window(limit: u64, window: &Window) -> Result<Limiter, StoreError> {
    FixedWindowCounter::new(limit, Duration::from_secs(window.length))
        .map(Limiter::FixedWindow)
        .map_err(|e| {
            StoreError::new(
                StoreErrorKind::Rejected,
                format!("fixed window of {} s: {e}", window.length),
            )
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::limiter::fixed_window::Window;
    use crate::limiter::ManualClock;
    use crate::store::StoreExt;

    fn inc(key: &str, hits: u64, now: u64, unit: u64, limit: u64) -> Increment {
        Increment {
            key: key.into(),
            hits,
            window: Window::containing(now, unit),
            ttl_seconds: unit,
            limit,
            on_failure: Default::default(),
            reference: None,
        }
    }

    #[tokio::test]
    async fn counts_per_key_and_expires_with_the_window() {
        let clock = Arc::new(ManualClock::at_secs(1200));
        let store = MemoryStore::new(clock.clone());
        let b = [inc("a", 1, 1200, 60, 10), inc("b", 2, 1200, 60, 10)];
        assert_eq!(
            store.increment(&b, IncrementPolicy::Always).await,
            Ok(vec![1, 2])
        );
        assert_eq!(
            store.increment(&b, IncrementPolicy::Always).await,
            Ok(vec![2, 4])
        );
        clock.set(Duration::from_secs(1260));
        // The same key past its window reads as a fresh counter.
        let later = [inc("a", 1, 1260, 60, 10)];
        assert_eq!(
            store.increment(&later, IncrementPolicy::Always).await,
            Ok(vec![1])
        );
        assert_eq!(store.sweep(), 1);
        assert_eq!(store.len(), 1);
    }

    #[tokio::test]
    async fn zero_hits_reads_without_consuming() {
        let store = MemoryStore::new(Arc::new(ManualClock::at_secs(0)));
        let b = [inc("a", 3, 0, 60, 10)];
        store
            .increment(&b, IncrementPolicy::Always)
            .await
            .expect("ok");
        let read = [inc("a", 0, 0, 60, 10)];
        assert_eq!(
            store.increment(&read, IncrementPolicy::Always).await,
            Ok(vec![3])
        );
    }

    /// runtime.md §14.2 C-18: only the counter that would exceed moves.
    #[tokio::test]
    async fn stop_increment_when_over_limit() {
        let store = MemoryStore::new(Arc::new(ManualClock::at_secs(0)));
        let seed = [inc("a", 10, 0, 3600, 15), inc("b", 10, 0, 3600, 14)];
        store
            .increment(&seed, IncrementPolicy::Always)
            .await
            .expect("ok");
        let p = IncrementPolicy::OnlyIfNoneWouldExceed;
        let one = [inc("a", 1, 0, 3600, 15), inc("b", 1, 0, 3600, 14)];
        assert_eq!(store.increment(&one, p).await, Ok(vec![11, 11]));
        let two = [inc("a", 2, 0, 3600, 15), inc("b", 2, 0, 3600, 14)];
        assert_eq!(store.increment(&two, p).await, Ok(vec![13, 13]));
        assert_eq!(store.increment(&two, p).await, Ok(vec![13, 15]));
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
                                .increment(&b, IncrementPolicy::Always)
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
            assert_eq!(
                store.increment(&read, IncrementPolicy::Always).await,
                Ok(vec![64_000])
            );
        });
    }

    #[tokio::test]
    async fn sweeping_gives_memory_back() {
        let clock = Arc::new(ManualClock::at_secs(0));
        let store = MemoryStore::new(clock.clone());
        let batch: Vec<_> = (0..10_000)
            .map(|i| inc(&format!("k{i}"), 1, 0, 1, 10))
            .collect();
        store
            .increment(&batch, IncrementPolicy::Always)
            .await
            .expect("ok");
        assert_eq!(store.len(), 10_000);
        clock.set(Duration::from_secs(1));
        assert_eq!(store.sweep(), 10_000);
        assert!(store.is_empty());
        let capacity: usize = store.shards.iter().map(|s| s.lock().capacity()).sum();
        assert!(capacity < 10_000, "tables shrank, capacity {capacity}");
    }
}
