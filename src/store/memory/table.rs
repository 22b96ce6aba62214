//! The memory store's table: 64 shards of hashed keys, each holding the
//! original's counters and the opt-in limits' states with their rule and
//! expiry, and the locking of a work's shards for one atomic step.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::time::Duration;

use parking_lot::{Mutex, MutexGuard};

use super::shares::{owner_hash, CapShares, Owner, Seen};
use super::{MemoryStore, SHARDS};
use crate::config::tree::RuleId;
use crate::limiter::{Algorithm, Limiter, LimiterState};
use crate::store::OriginalWindow;

/// A counter of the original's: its value, the Unix second at which it
/// expires, its rule, and whether it was hit lately.
#[derive(Debug, Clone, Copy)]
pub(super) struct Counter {
    pub(super) count: u64,
    pub(super) expires_at: u64,
    pub(super) owner: Owner,
    /// Hit since a full shard last passed over it (see [`shares`]).
    pub(super) used: bool,
}

/// The keys are already uniform hashes: use their low bits as the hash.
#[derive(Debug, Default, Clone, Copy)]
pub(super) struct PassThrough(u64);

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

pub(super) type Table<V> = HashMap<u128, V, BuildHasherDefault<PassThrough>>;

/// The state of one opt-in limit's key and when it may be dropped.
#[derive(Debug, Clone)]
pub(super) struct Slot {
    pub(super) state: LimiterState,
    /// Since the Unix epoch; past it the key is as good as absent.
    pub(super) expires_at: Duration,
    /// Its rule.
    pub(super) owner: Owner,
    /// Hit since a full shard last passed over it (see [`shares`]).
    pub(super) used: bool,
}

/// One shard: the original's counters (24 bytes a value) and the opt-in
/// limits' states, and each rule's holdings, under one lock.
#[derive(Debug, Default)]
pub(super) struct Shard {
    pub(super) counters: Table<Counter>,
    pub(super) states: Table<Slot>,
    pub(super) shares: CapShares,
    /// When a full shard last dropped its expired keys.
    pub(super) swept_at: Duration,
}

impl Shard {
    pub(super) fn len(&self) -> usize {
        self.counters.len() + self.states.len()
    }

    pub(super) fn holds(&self, id: u128) -> bool {
        self.counters.contains_key(&id) || self.states.contains_key(&id)
    }

    /// Drops the expired keys; how many.
    pub(super) fn drop_expired(&mut self, now: Duration) -> usize {
        let now_secs = now.as_secs();
        let Shard {
            counters,
            states,
            shares,
            ..
        } = self;
        let dropped = retain(counters, |c| {
            let live = c.expires_at > now_secs;
            if !live {
                shares.removed(c.owner);
            }
            live
        }) + retain(states, |slot| {
            let live = slot.expires_at > now;
            if !live {
                shares.removed(slot.owner);
            }
            live
        });
        shares.compact(|id| counters.contains_key(&id) || states.contains_key(&id));
        dropped
    }

    /// Makes room for a new key of `owner` in this full shard: the rule
    /// that holds the most keys gives up its least recently used one (see
    /// `shares.rs`). Which rule gave way,
    /// or `None` when no rule holds a key here.
    pub(super) fn evict_for(&mut self, owner: Owner) -> Option<Owner> {
        let victim = self.shares.victim(owner)?;
        let Shard {
            counters,
            states,
            shares,
            ..
        } = self;
        let seen = |id: u128| {
            let mark = match counters.get_mut(&id) {
                Some(c) => Some((c.owner, &mut c.used)),
                None => states.get_mut(&id).map(|s| (s.owner, &mut s.used)),
            };
            match mark {
                Some((owner, used)) if owner == victim => match std::mem::take(used) {
                    true => Seen::Used,
                    false => Seen::Unused,
                },
                _ => Seen::Gone,
            }
        };
        let id = shares.oldest_of(victim, seen)?;
        if counters.remove(&id).is_none() {
            states.remove(&id);
        }
        Some(victim)
    }
}

/// Keeps the entries `live` accepts, giving table memory back once a table
/// is mostly empty; returns how many were removed.
pub(super) fn retain<V>(map: &mut Table<V>, mut live: impl FnMut(&V) -> bool) -> usize {
    let before = map.len();
    map.retain(|_, v| live(v));
    if map.capacity() > 64 && map.len() < map.capacity() / 4 {
        map.shrink_to_fit();
    }
    before - map.len()
}

/// The shards of a work, locked in index order (so that two works can never
/// deadlock) for one atomic step.
pub(super) struct Locked<'a>(Vec<(usize, MutexGuard<'a, Shard>)>);

impl<'a> Locked<'a> {
    pub(super) fn new(shards: &'a [Mutex<Shard>], ids: &[u128]) -> Locked<'a> {
        let mut wanted = [false; SHARDS];
        for &id in ids {
            wanted[MemoryStore::shard_of(id)] = true;
        }
        let mut guards = Vec::with_capacity(ids.len().min(SHARDS));
        for (i, shard) in shards.iter().enumerate() {
            if wanted[i] {
                guards.push((i, shard.lock()));
            }
        }
        Locked(guards)
    }

    pub(super) fn shard(&mut self, id: u128) -> &mut Shard {
        let i = MemoryStore::shard_of(id);
        let at = self
            .0
            .iter()
            .position(|(s, _)| *s == i)
            .expect("the shard of every key of the work was locked");
        &mut self.0[at].1
    }

    /// An original counter's value now (0 once its window has ended).
    pub(super) fn counter(&mut self, id: u128, now_secs: u64) -> u64 {
        match self.shard(id).counters.get(&id) {
            Some(c) if c.expires_at > now_secs => c.count,
            _ => 0,
        }
    }

    /// Adds `hits` to an original counter (a fresh one once its window has
    /// ended) in one lookup; its value after.
    pub(super) fn count(
        &mut self,
        id: u128,
        hits: u64,
        w: &OriginalWindow,
        now_secs: u64,
        owner: Option<&RuleId>,
    ) -> u64 {
        let fresh = Counter {
            count: 0,
            expires_at: w.window.start + w.window.length,
            owner: owner_hash(owner),
            used: false,
        };
        let shard = self.shard(id);
        let c = match shard.counters.entry(id) {
            std::collections::hash_map::Entry::Occupied(e) => {
                let c = e.into_mut();
                c.used = true;
                c
            }
            std::collections::hash_map::Entry::Vacant(e) => {
                shard.shares.added(id, owner);
                e.insert(fresh)
            }
        };
        if c.expires_at <= now_secs {
            *c = Counter {
                owner: c.owner,
                ..fresh
            };
        }
        c.count = c.count.saturating_add(hits);
        c.count
    }

    pub(super) fn set_counter(
        &mut self,
        id: u128,
        count: u64,
        w: &OriginalWindow,
        owner: Option<&RuleId>,
    ) {
        let expires_at = w.window.start + w.window.length;
        let shard = self.shard(id);
        match shard.counters.get_mut(&id) {
            // The key keeps the rule it was added for.
            Some(c) => {
                (c.count, c.expires_at, c.used) = (count, expires_at, true);
            }
            None => {
                shard.shares.added(id, owner);
                let counter = Counter {
                    count,
                    expires_at,
                    owner: owner_hash(owner),
                    used: false,
                };
                shard.counters.insert(id, counter);
            }
        }
    }

    /// An opt-in limit's state now (`None` once it has expired).
    pub(super) fn state(&mut self, id: u128, now: Duration) -> Option<LimiterState> {
        self.shard(id)
            .states
            .get(&id)
            .filter(|slot| slot.expires_at > now)
            .map(|slot| slot.state.clone())
    }

    pub(super) fn set_state(
        &mut self,
        id: u128,
        limiter: &Limiter,
        state: LimiterState,
        now: Duration,
        owner: Option<&RuleId>,
    ) {
        let expires_at = now + limiter.expires_after(&state, now);
        let shard = self.shard(id);
        match shard.states.get_mut(&id) {
            Some(slot) => {
                slot.state = state;
                slot.expires_at = expires_at;
                slot.used = true;
            }
            None => {
                let owner_of = owner_hash(owner);
                shard.shares.added(id, owner);
                shard.states.insert(
                    id,
                    Slot {
                        state,
                        expires_at,
                        owner: owner_of,
                        used: false,
                    },
                );
            }
        }
    }
}
