//! The lease table: what this instance knows of each key of a leased
//! rule (its meters, its lease, the store's last answer) or of a
//! local-first window (its view), in shards of their own locks, shared by
//! the layer, the sweeper, the write-back and `/hotkeys`.

use std::collections::HashMap;
use std::hash::{BuildHasher, RandomState};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use tokio::sync::watch;

use super::local::View;
use super::{Lease, RateMeter};
use crate::store::{Limit, NodeId};

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
    /// A local-first window's view (see [`super::local`]).
    pub(super) view: Option<View>,
    /// The end of the view's window (Unix seconds): the view is kept until
    /// then, so that the key is not cold again within its window.
    pub(super) window_end: u64,
    /// The node that serves the key, for the write-back's items.
    pub(super) node: Option<NodeId>,
    /// The key waits in its shard's write-back queue.
    pub(super) queued: bool,
}

/// An ended lease on its way back to the store: key, limit, lease.
pub(super) type Ended = (String, Limit, Lease);

/// The lease table, shared by the layer, the sweeper and `/hotkeys`.
#[derive(Debug)]
pub struct LeaseTable {
    shards: Vec<Mutex<HashMap<String, KeyState>>>,
    /// Per shard, the keys whose view has admissions to write back.
    queues: Vec<Mutex<Vec<String>>>,
    hasher: RandomState,
    /// Keys with a view, and the most there may be (`MEMORY_MAX_KEYS`).
    views: AtomicUsize,
    max_views: usize,
    /// The table was found full of views once (logged once).
    full_logged: AtomicBool,
    /// Leases replaced by a new take before the sweeper saw them end, with
    /// tokens left: the sweeper returns them with the ended ones.
    pub(super) replaced: Mutex<Vec<Ended>>,
}

impl LeaseTable {
    /// An empty table of at most `max_views` views.
    pub(super) fn new(max_views: usize) -> LeaseTable {
        LeaseTable {
            shards: (0..SHARDS).map(|_| Mutex::new(HashMap::new())).collect(),
            queues: (0..SHARDS).map(|_| Mutex::new(Vec::new())).collect(),
            hasher: RandomState::new(),
            views: AtomicUsize::new(0),
            max_views,
            full_logged: AtomicBool::new(false),
            replaced: Mutex::new(Vec::new()),
        }
    }

    fn index(&self, key: &str) -> usize {
        (self.hasher.hash_one(key) as usize) % SHARDS
    }

    pub(super) fn shard(&self, key: &str) -> MutexGuard<'_, HashMap<String, KeyState>> {
        // A panic while holding the lock leaves counts, not invariants.
        self.shards[self.index(key)]
            .lock()
            .unwrap_or_else(|e| e.into_inner())
    }

    /// Queues `key` (whose state `s` is, under its shard's lock) for the
    /// next write-back, once.
    pub(super) fn queue(&self, key: &str, s: &mut KeyState) {
        if !s.queued {
            s.queued = true;
            self.queues[self.index(key)]
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push(key.to_string());
        }
    }

    /// Whether the table holds its most views: a key without one opens
    /// none (its decisions go to the store, exact, until views end with
    /// their windows).
    pub(super) fn views_full(&self) -> bool {
        let full = self.views.load(Ordering::Relaxed) >= self.max_views;
        if full && !self.full_logged.swap(true, Ordering::Relaxed) {
            tracing::warn!(
                max_views = self.max_views,
                "local-first views fill MEMORY_MAX_KEYS: keys without a view are decided at the store until views end with their windows"
            );
        }
        full
    }

    /// `s`'s view, opened if it has none and the table has room (`None`:
    /// full, see [`LeaseTable::views_full`]).
    pub(super) fn view_of<'s>(&self, s: &'s mut KeyState) -> Option<&'s mut View> {
        if s.view.is_none() {
            let opened = self
                .views
                .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| {
                    (n < self.max_views).then_some(n + 1)
                });
            if opened.is_err() {
                self.views_full();
                return None;
            }
            s.view = Some(View::default());
        }
        s.view.as_mut()
    }

    /// Every queued key, the queues emptied.
    pub(super) fn take_queued(&self) -> Vec<String> {
        let mut out = Vec::new();
        for q in &self.queues {
            out.append(&mut q.lock().unwrap_or_else(|e| e.into_inner()));
        }
        out
    }

    /// Views held and admissions not yet written, over every key.
    pub fn views(&self) -> (usize, u64) {
        let (mut views, mut unwritten) = (0, 0);
        for shard in &self.shards {
            for s in shard.lock().unwrap_or_else(|e| e.into_inner()).values() {
                if let Some(v) = s.view {
                    views += 1;
                    unwritten += v.unwritten;
                }
            }
        }
        (views, unwritten)
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
    /// `all`), and forgets keys idle for two seconds, but a view whose
    /// window has not ended or that owes the store admissions.
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
                let view_done = s
                    .view
                    .is_none_or(|v| v.unwritten == 0 && s.window_end <= now.as_secs());
                let keep = !(idle && view_done && s.lease.is_none() && s.taking.is_none());
                if !keep && s.view.is_some() {
                    self.views.fetch_sub(1, Ordering::Relaxed);
                }
                keep
            });
        }
        ::metrics::gauge!(crate::metrics::LOCAL_FIRST_VIEWS)
            .set(self.views.load(Ordering::Relaxed) as f64);
        out
    }
}
