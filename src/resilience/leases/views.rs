//! The layer's local-first half: a fixed window of a rule with a
//! `sync_interval` (the original's, or a calendar's) is admitted from this
//! instance's [`View`] within its [`Share`], with no store call, and its
//! admissions are written back in batches ([`super::sync`]). What this
//! costs in accuracy, and why, is [`super::local`]'s bound.
//!
//! A view answers only while this instance knows how many instances share
//! the store (counted by the write-back each second) and its last
//! write-back was answered within [`stale_after`]; otherwise, and near the
//! limit, the item goes to the store as it came, and the store's answer
//! refreshes the view. A give-back is taken from the view's admissions not
//! yet sent when it holds enough (the store need hear of neither), and
//! goes to the store otherwise; a read (cost 0) and a request whose
//! policy does not commit go to the store too.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use super::local::Share;
use super::{Leases, Step};
use crate::limiter::Decision;
use crate::store::{Item, Limit, Store};

/// How old this instance's last answered write-back may be while its views
/// still answer: ten write-back intervals, and never less than three
/// seconds (the instance count is written once a second). Past it, a
/// local-first window's decisions go to the store, so that during an
/// outage its rule's `failure_mode` answers.
pub fn stale_after(interval: Duration) -> Duration {
    (interval * 10).max(Duration::from_secs(3))
}

/// What the write-back learns of the fleet, read by every decision.
#[derive(Debug)]
pub struct Fleet {
    /// Instances that wrote to the store in the last whole second (0: not
    /// known yet), as the shares divide by it: see [`Fleet::counted`].
    instances: AtomicU64,
    /// Since when (local clock, ns; 0: not) every count has been below
    /// `instances`, and the largest of those counts.
    lower_since: AtomicU64,
    lower: AtomicU64,
    /// When (local clock, ns) a write-back was last answered.
    answered_at: AtomicU64,
    /// The shortest `sync_interval` seen, ns (`u64::MAX`: none yet, and
    /// no write-back runs).
    interval: AtomicU64,
}

impl Default for Fleet {
    fn default() -> Fleet {
        Fleet {
            instances: AtomicU64::new(0),
            lower_since: AtomicU64::new(0),
            lower: AtomicU64::new(0),
            answered_at: AtomicU64::new(0),
            interval: AtomicU64::new(u64::MAX),
        }
    }
}

fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

impl Fleet {
    /// A local-first rule with `interval` was seen (or loaded): the
    /// write-back runs at the shortest one.
    pub fn note(&self, interval: Duration) {
        self.interval
            .fetch_min(nanos(interval).max(1_000_000), Ordering::Relaxed);
    }

    /// The write-back interval, once a local-first rule was seen.
    pub fn interval(&self) -> Option<Duration> {
        match self.interval.load(Ordering::Relaxed) {
            u64::MAX => None,
            ns => Some(Duration::from_nanos(ns)),
        }
    }

    /// The instances counted (0: not known yet).
    pub fn instances(&self) -> u64 {
        self.instances.load(Ordering::Relaxed)
    }

    /// The write-back counted `instances` at `now`. A larger count is
    /// taken at once (smaller shares: never less safe). A smaller one only
    /// once every count for [`stale_after`] the interval has been smaller
    /// (then the largest of them): a count can come out low without any
    /// instance having left, when the store lost or missed a second's
    /// presence (every instance's write-backs failing through an outage,
    /// then the first second after it), and every instance dividing by
    /// too few would each hold a share too large, breaking the bound.
    /// Only the write-back task calls it.
    pub(super) fn counted(&self, instances: u64, now: Duration) {
        let instances = instances.max(1);
        let current = self.instances.load(Ordering::Relaxed);
        let taken = if instances >= current {
            self.lower_since.store(0, Ordering::Relaxed);
            instances
        } else {
            let since = match self.lower_since.load(Ordering::Relaxed) {
                0 => {
                    self.lower_since.store(nanos(now).max(1), Ordering::Relaxed);
                    self.lower.store(instances, Ordering::Relaxed);
                    nanos(now)
                }
                since => {
                    self.lower.fetch_max(instances, Ordering::Relaxed);
                    since
                }
            };
            let held = stale_after(self.interval().unwrap_or_default());
            if now.saturating_sub(Duration::from_nanos(since)) < held {
                return;
            }
            self.lower_since.store(0, Ordering::Relaxed);
            self.lower.load(Ordering::Relaxed)
        };
        self.instances.store(taken, Ordering::Relaxed);
        ::metrics::gauge!(crate::metrics::LOCAL_FIRST_INSTANCES).set(taken as f64);
    }

    pub(super) fn answered(&self, now: Duration) {
        self.answered_at.store(nanos(now), Ordering::Relaxed);
    }

    /// This instance's share of a window of `limit` at `now`, or `None`
    /// while its views may not answer (instances not known, or the last
    /// answered write-back older than [`stale_after`] the `interval`).
    fn share(&self, limit: u64, max_over: f64, now: Duration, interval: Duration) -> Option<Share> {
        let n = self.instances();
        let answered = Duration::from_nanos(self.answered_at.load(Ordering::Relaxed));
        (n > 0 && now.saturating_sub(answered) <= stale_after(interval))
            .then(|| Share::of(limit, n, max_over))
    }
}

impl<S: Store + 'static> Leases<S> {
    /// The step of a local-first window's item: answered from the view
    /// ([`Step::Viewed`]) or sent to the store; `None` for any other item.
    pub(super) fn view_step(&self, c: &Item, now: Duration, first: bool) -> Option<Step> {
        let interval = c.rule.sync_interval?;
        let (Limit::Counter(w) | Limit::Window(w)) = c.limit else {
            return None;
        };
        self.fleet.note(interval);
        if c.gives_back() || c.cost() == 0 {
            return Some(Step::Store);
        }
        let Some(share) = self
            .fleet
            .share(w.limit, self.options.max_over, now, interval)
        else {
            return Some(Step::Store);
        };
        let mut map = self.table.shard(&c.key);
        let s = match map.get_mut(c.key.as_str()) {
            Some(s) => s,
            None if self.table.views_full() => return Some(Step::Store),
            None => map.entry(c.key.clone()).or_default(),
        };
        if first {
            s.meter.record(now);
        }
        let Some(view) = self.table.view_of(s) else {
            return Some(Step::Store);
        };
        let Some(after) = view.admit(c.cost(), w.limit, share) else {
            return Some(Step::Store);
        };
        s.window_end = w.window.end();
        s.limit = Some(Limit::Counter(w));
        s.node.clone_from(&c.node);
        self.table.queue(&c.key, s);
        let decision = Decision::Allow {
            remaining: w.limit.saturating_sub(after),
            reset_after: Duration::from_secs(w.window.reset_after(now.as_secs())),
        };
        Some(Step::Viewed(decision, after))
    }

    /// A give-back of a local-first window taken from its view's unsent
    /// admissions ([`View::give_back`]); `None` for any other item, or
    /// when the view holds fewer (the store takes it).
    pub(super) fn give_back_to_view(&self, c: &Item, now: Duration) -> Option<Step> {
        c.rule.sync_interval?;
        let (Limit::Counter(w) | Limit::Window(w)) = c.limit else {
            return None;
        };
        let mut map = self.table.shard(&c.key);
        let after = map
            .get_mut(c.key.as_str())?
            .view
            .as_mut()?
            .give_back(c.cost())?;
        let decision = Decision::Allow {
            remaining: w.limit.saturating_sub(after),
            reset_after: Duration::from_secs(w.window.reset_after(now.as_secs())),
        };
        Some(Step::Viewed(decision, after))
    }

    /// Takes back a view's admission of `c` (its request did not commit).
    pub(super) fn unview(&self, c: &Item) {
        if let Some(v) = self
            .table
            .shard(&c.key)
            .get_mut(c.key.as_str())
            .and_then(|s| s.view.as_mut())
        {
            v.unadmit(c.cost());
        }
    }

    /// The store answered a local-first window's item with its counter
    /// `count`: the view learns it (and a cold key is cold no more).
    pub(super) fn observe(&self, c: &Item, count: u64) {
        let (Some(_), Limit::Counter(w) | Limit::Window(w)) = (c.rule.sync_interval, c.limit)
        else {
            return;
        };
        let mut map = self.table.shard(&c.key);
        let s = match map.get_mut(c.key.as_str()) {
            Some(s) => s,
            None if self.table.views_full() => return,
            None => map.entry(c.key.clone()).or_default(),
        };
        let Some(view) = self.table.view_of(s) else {
            return;
        };
        view.observe(count);
        s.window_end = w.window.end();
        s.limit = Some(Limit::Counter(w));
        s.node.clone_from(&c.node);
    }
}

#[cfg(test)]
mod tests;
