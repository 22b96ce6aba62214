//! The write-back of local-first views: every `sync_interval` (the
//! shortest of the rules seen), the admissions each view made and has not
//! written go to the store as one work of the original's counters (so one
//! script call per Redis node, whatever the number of keys, in batches of
//! at most [`BATCH`] keys), and each key's counter comes back into its
//! view. Never on a request's path.
//!
//! A write that fails stays owed: its admissions are sent again on the
//! next interval, never dropped. One whose answer was lost after the store
//! counted it is counted twice, which only makes the window stricter.
//!
//! Once a second the same work counts this instance on a one-second
//! counter of its own, and reads the last second's: how many instances
//! share the store, which each view's share divides by.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use super::table::LeaseTable;
use super::views::Fleet;
use super::Leases;
use crate::limiter::fixed_window::Window;
use crate::limiter::Clock;
use crate::metrics;
use crate::store::{Answer, Item, Limit, OriginalWindow, Policy, Store, StoreExt, Work};

/// The most keys one write-back work carries.
pub(super) const BATCH: usize = 4096;

/// The key the instances count themselves on, per second.
pub(super) fn presence_key(second: u64) -> String {
    format!("ratelimit_local_first_instances_{second}")
}

/// The count of `second`'s instances: a counter that lives two seconds,
/// so that it can still be read all through the next one.
fn presence(second: u64, cost: u64) -> Item {
    let counter = OriginalWindow {
        limit: u64::MAX,
        window: Window {
            start: second,
            length: 2,
        },
        ttl_seconds: 3,
        jitter_seconds: 0,
    };
    Item {
        binding: false,
        ..Item::new(presence_key(second), Limit::Counter(counter), cost)
    }
}

impl<S: Store + 'static> Leases<S> {
    /// Writes every view's unwritten admissions back now (at shutdown).
    pub(super) async fn write_back_now(&self) {
        let mut this_second = self.clock.now().as_secs();
        let (store, clock) = (self.inner.as_ref(), self.clock.as_ref());
        write_back(store, &self.table, &self.fleet, clock, &mut this_second).await;
    }

    /// Writes the views back every interval until the handle is aborted;
    /// idle (a check every 100 ms) until a local-first rule is seen.
    pub fn spawn_write_back(&self) -> tokio::task::JoinHandle<()> {
        let (inner, table, fleet, clock) = (
            Arc::clone(&self.inner),
            Arc::clone(&self.table),
            Arc::clone(&self.fleet),
            Arc::clone(&self.clock),
        );
        tokio::spawn(async move {
            let mut counted_second = 0;
            loop {
                let Some(interval) = fleet.interval() else {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                };
                // On the interval's grid of the clock, so that instances
                // with the same interval write at about the same moments.
                let now = clock.now();
                let step = interval.as_nanos().max(1);
                let wait = step - now.as_nanos() % step;
                tokio::time::sleep(Duration::from_nanos(u64::try_from(wait).unwrap_or(0))).await;
                write_back(
                    inner.as_ref(),
                    &table,
                    &fleet,
                    clock.as_ref(),
                    &mut counted_second,
                )
                .await;
            }
        })
    }
}

/// A view's write of `delta` answered with the key's `count` (`None`:
/// failed, owed still and queued again).
fn settle(table: &LeaseTable, key: &str, delta: u64, count: Option<u64>) {
    let mut map = table.shard(key);
    let Some(s) = map.get_mut(key) else {
        return;
    };
    let Some(view) = s.view.as_mut() else {
        return;
    };
    match count {
        Some(count) => view.written(delta, count),
        None => {
            view.unsent(delta);
            ::metrics::counter!(metrics::LOCAL_FIRST_SYNC_FAILED).increment(1);
            table.queue(key, s);
        }
    }
}

/// One write-back: every queued view's unwritten admissions, and once a
/// second the instance count.
pub(super) async fn write_back<S: Store + ?Sized>(
    store: &S,
    table: &LeaseTable,
    fleet: &Fleet,
    clock: &dyn Clock,
    counted_second: &mut u64,
) {
    let now = clock.now();
    // The works, each of at most BATCH keys; the keys move into the items,
    // and each item's cost is the delta its answer settles.
    let mut works: Vec<Vec<Item>> = Vec::new();
    let mut items: Vec<Item> = Vec::with_capacity(BATCH);
    let mut written = 0;
    for key in table.take_queued() {
        let item = {
            let mut map = table.shard(&key);
            let Some(s) = map.get_mut(key.as_str()) else {
                continue;
            };
            s.queued = false;
            let (Some(view), Some(limit)) = (s.view.as_mut(), s.limit) else {
                continue;
            };
            let delta = view.send();
            if delta == 0 {
                continue;
            }
            Item {
                binding: false,
                node: s.node.clone(),
                ..Item::new(key, limit, delta)
            }
        };
        items.push(item);
        written += 1;
        if items.len() == BATCH {
            works.push(std::mem::replace(&mut items, Vec::with_capacity(BATCH)));
        }
    }
    let second = now.as_secs();
    let count_now = second != *counted_second;
    // The instance count rides with the last work: this second's counter
    // (this instance counted) and the last second's, read.
    let presence_at = items.len();
    if count_now {
        items.push(presence(second, 1));
        items.push(presence(second.saturating_sub(1), 0));
    }
    if !items.is_empty() {
        works.push(items);
    }
    let last = works.len();
    let mut answered = false;
    for (w, items) in works.into_iter().enumerate() {
        let work = Work::new(items, Policy::Decide);
        let deadline = Instant::now() + Duration::from_secs(1);
        let reply = store.execute(&work, Some(deadline)).await;
        ::metrics::counter!(metrics::LOCAL_FIRST_SYNC_CALL).increment(1);
        let mut counts: Vec<u64> = Vec::new();
        for (i, (item, answer)) in work.items.iter().zip(reply.answers).enumerate() {
            let count = match answer {
                Ok(Answer::Decided(d)) => Some(d.count),
                _ => None,
            };
            answered |= count.is_some();
            if w + 1 == last && count_now && i >= presence_at {
                counts.extend(count);
            } else {
                settle(table, &item.key, item.cost(), count);
            }
        }
        if count_now && counts.len() == 2 {
            // This second's count so far and the last whole second's.
            fleet.counted(counts[0].max(counts[1]), now);
            *counted_second = second;
        }
    }
    ::metrics::counter!(metrics::LOCAL_FIRST_SYNC_KEYS).increment(written);
    if answered {
        fleet.answered(now);
    }
}
