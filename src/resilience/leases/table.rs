//! The lease table: what this instance knows of each key of a leased
//! rule (its meters, its lease, the store's last answer), in shards of
//! their own locks, shared by the layer, the sweeper and `/hotkeys`.

use std::collections::HashMap;
use std::hash::{BuildHasher, RandomState};
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use tokio::sync::watch;

use super::{Lease, RateMeter};
use crate::store::Limit;

/// Key shards of the table (each its own lock).
const SHARDS: usize = 16;

/// What this instance knows of one key of a leased rule.
#[derive(Debug, Default)]
pub(super) struct KeyState {
    /// Decisions this instance made for the key.
    pub(super) meter: RateMeter,
    /// Tokens the store granted this instance for the key.
    pub(super) granted: RateMeter,
    pub(super) lease: Option<Lease>,
    /// The limit the lease was taken from (what a refund names).
    pub(super) limit: Option<Limit>,
    /// Until when (local clock) the store said the key cannot admit what
    /// was asked (a batch, or the request), and when it would be full.
    pub(super) refused_until: Option<(Duration, Duration)>,
    /// Whether the store was last seen short: it refused a take, or had
    /// less than another largest batch left after one. Takes are then the
    /// largest batch, and paced.
    pub(super) short: bool,
    /// When (local clock) the last batch was granted.
    pub(super) last_take: Duration,
    /// When (local clock) the key would be full again, as last answered.
    pub(super) resets_at: Duration,
    /// A fixed window's room as the store last said, below a batch: it
    /// caps the next batch.
    pub(super) room: Option<u64>,
    /// A take in flight; dropped when it is answered, which wakes the
    /// requests subscribed to it.
    pub(super) taking: Option<watch::Sender<()>>,
}

/// An ended lease on its way back to the store: key, limit, lease.
pub(super) type Ended = (String, Limit, Lease);

/// The lease table, shared by the layer, the sweeper and `/hotkeys`.
#[derive(Debug)]
pub struct LeaseTable {
    shards: Vec<Mutex<HashMap<String, KeyState>>>,
    hasher: RandomState,
    /// Leases replaced by a new take before the sweeper saw them end, with
    /// tokens left: the sweeper returns them with the ended ones.
    pub(super) replaced: Mutex<Vec<Ended>>,
}

impl LeaseTable {
    pub(super) fn new() -> LeaseTable {
        LeaseTable {
            shards: (0..SHARDS).map(|_| Mutex::new(HashMap::new())).collect(),
            hasher: RandomState::new(),
            replaced: Mutex::new(Vec::new()),
        }
    }

    pub(super) fn shard(&self, key: &str) -> MutexGuard<'_, HashMap<String, KeyState>> {
        let i = (self.hasher.hash_one(key) as usize) % SHARDS;
        // A panic while holding the lock leaves counts, not invariants.
        self.shards[i].lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Tokens this instance holds for `key` now (0 without a live lease).
    pub fn held(&self, key: &str, now: Duration) -> u64 {
        self.shard(key)
            .get(key)
            .and_then(|s| s.lease)
            .filter(|l| l.is_live(now))
            .map_or(0, |l| l.tokens)
    }

    /// Takes out every lease that has ended by `now` (all of them with
    /// `all`), and forgets keys idle for two seconds.
    pub(super) fn ended(&self, now: Duration, all: bool) -> Vec<Ended> {
        let mut out = std::mem::take(&mut *self.replaced.lock().unwrap_or_else(|e| e.into_inner()));
        for shard in &self.shards {
            let mut map = shard.lock().unwrap_or_else(|e| e.into_inner());
            map.retain(|key, s| {
                if let Some(l) = s.lease.filter(|l| all || !l.is_live(now)) {
                    s.lease = None;
                    if let Some(limit) = s.limit {
                        out.push((key.clone(), limit, l));
                    }
                }
                let idle = s.meter.last_second() + 2 < now.as_secs();
                !(idle && s.lease.is_none() && s.taking.is_none())
            });
        }
        out
    }
}
