//! [`MemoryStore::apply`]: one work as one atomic step under the locks of
//! every shard it touches, in phases: what comes back first (give-backs,
//! refunds), which counters would pass their limits (`STOP_CACHE_KEY_...`),
//! each item's decision in work order (items on one key see the ones
//! before them), the writes iff the work commits, and the answers.

use std::time::Duration;

use super::table::{Locked, Table};
use super::{MemoryStore, FULL};
use crate::limiter::{Algorithm, Decision, Limiter, LimiterState, WindowCount};
use crate::store::{
    Answer, Decided, Item, Limit, OriginalWindow, Policy, Reply, StoreError, StoreErrorKind, Work,
};

/// A write an item makes if the work commits.
enum Write {
    Counter(OriginalWindow, u64),
    State(Limiter, LimiterState),
}

/// One item's decision: the decision, its count before and after.
type Outcome = (Decision, u64, u64);

impl MemoryStore {
    /// Applies `work` under the locks of every shard it touches, so that
    /// the whole work is one atomic step.
    pub fn apply(&self, work: &Work) -> Result<Reply, StoreError> {
        let now = self.clock.now();
        let items = &work.items;
        let ids: Vec<u128> = items.iter().map(|c| self.id(&c.key)).collect();
        let mut locked = Locked::new(&self.shards, &ids);
        if !self.has_room(work, &ids, &mut locked, now) {
            self.full();
            return Err(StoreError::new(StoreErrorKind::Unavailable, FULL));
        }
        give_back_first(work, &ids, &mut locked, now);
        let mut deciding = Deciding::new(work, &ids, locked, now);
        for i in 0..items.len() {
            deciding.decide(i);
        }
        Ok(deciding.finish())
    }

    /// Counts a work refused for a full store, and says so once.
    fn full(&self) {
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
    }
}

/// What comes back before anything is decided: a give-back's cost, to what
/// counts now, whatever the rest decides; under a refund, each item's cost
/// to the window it was taken in (a counter's never).
fn give_back_first(work: &Work, ids: &[u128], locked: &mut Locked<'_>, now: Duration) {
    for (item, &id) in work.items.iter().zip(ids) {
        let taken_at = match (item.gives_back(), work.policy, &item.limit) {
            (true, ..) => None,
            (false, Policy::Refund { taken_at }, l) if l.taken_on_commit() => Some(taken_at),
            _ => continue,
        };
        match &item.limit {
            Limit::Algorithm(l) | Limit::Reference { contract: l, .. } => {
                if let Some(state) = locked.state(id, now) {
                    let state = match taken_at {
                        Some(at) => l.refund(state, item.cost(), at, now),
                        None => l.give_back(state, item.cost(), now),
                    };
                    locked.set_state(id, l, state, now, item.rule.id.as_ref());
                }
            }
            // The key names its window: an ended one has expired.
            Limit::Counter(_) | Limit::Window(_) => {
                if let Some(c) = locked.shard(id).counters.get_mut(&id) {
                    c.count = c.count.saturating_sub(item.cost());
                }
            }
        }
    }
}

/// A work's items being decided, in order, under its shards' locks.
struct Deciding<'w, 'l> {
    work: &'w Work,
    ids: &'w [u128],
    locked: Locked<'l>,
    now: Duration,
    /// `STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT`: which counters would
    /// pass their limit (empty unless the policy stops), and whether any.
    exceeds: Vec<bool>,
    any_exceeds: bool,
    /// What the work would write, so that items on one key see the ones
    /// before them.
    pending: Table<LimiterState>,
    /// By item position: the key and its rule are the item's.
    writes: Vec<(usize, Write)>,
    /// Per item, in order.
    results: Vec<Outcome>,
    /// Per item, whether it was taken (only references read it; empty
    /// without one).
    taken: Vec<bool>,
}

impl<'w, 'l> Deciding<'w, 'l> {
    fn new(work: &'w Work, ids: &'w [u128], mut locked: Locked<'l>, now: Duration) -> Self {
        let items = &work.items;
        let exceeds = match work.policy {
            Policy::CommitStopping => items
                .iter()
                .zip(ids)
                .map(|(item, &id)| match &item.limit {
                    Limit::Counter(w) if !item.gives_back() => {
                        locked
                            .counter(id, now.as_secs())
                            .saturating_add(item.cost())
                            > w.limit
                    }
                    _ => false,
                })
                .collect(),
            _ => Vec::new(),
        };
        let any_exceeds = exceeds.iter().any(|&e| e);
        let followed = items
            .iter()
            .any(|c| matches!(c.limit, Limit::Reference { .. }));
        Deciding {
            work,
            ids,
            locked,
            now,
            exceeds,
            any_exceeds,
            pending: Table::default(),
            writes: Vec::new(),
            results: Vec::with_capacity(items.len()),
            taken: vec![false; if followed { items.len() } else { 0 }],
        }
    }

    /// Decides item `i` after the ones before it.
    fn decide(&mut self, i: usize) {
        let work = self.work;
        let item = &work.items[i];
        let id = self.ids[i];
        let outcome = match &item.limit {
            Limit::Counter(w) => self.counter(i, item, id, w),
            Limit::Window(w) => self.window(i, item, id, w),
            Limit::Algorithm(limiter) => self.algorithm(i, item, id, limiter),
            Limit::Reference { contract, subject } => {
                self.reference(i, item, id, contract, *subject)
            }
        };
        self.results.push(outcome);
    }

    /// The original's counter: it takes its cost whatever the rest decides
    /// (none under a refund; under STOP, none unless it is one of those
    /// that would pass their limit, when any would); a give-back reads it.
    fn counter(&mut self, i: usize, item: &Item, id: u128, w: &OriginalWindow) -> Outcome {
        let now_secs = self.now.as_secs();
        if item.gives_back() {
            let after = self.locked.counter(id, now_secs);
            return (w.decision(after, now_secs), after, after);
        }
        let counts_taken = !matches!(self.work.policy, Policy::Refund { .. });
        let hits = match (counts_taken, self.any_exceeds) {
            (false, _) => 0,
            (true, true) if !self.exceeds.get(i).copied().unwrap_or(false) => 0,
            _ => item.cost(),
        };
        let after = self
            .locked
            .count(id, hits, w, now_secs, item.rule.id.as_ref());
        if let Some(t) = self.taken.get_mut(i) {
            *t = hits > 0 && after <= w.limit;
        }
        (w.decision(after, now_secs), after, after)
    }

    /// The original's window decided before it is counted: the key names
    /// the window (epoch-aligned or a calendar's), so its counter is the
    /// window's.
    fn window(&mut self, i: usize, item: &Item, id: u128, w: &OriginalWindow) -> Outcome {
        let now_secs = self.now.as_secs();
        let before = match self.pending.get(&id) {
            Some(LimiterState::FixedWindow(c)) => c.count,
            Some(_) => 0,
            None => self.locked.counter(id, now_secs),
        };
        let decision = w.decide(before, item.taken(), now_secs);
        let mut after = before;
        if decision.is_allowed() && item.taken() > 0 {
            after = before + item.cost();
            let next = LimiterState::FixedWindow(WindowCount {
                window_start: Duration::from_secs(w.window.start),
                count: after,
            });
            self.pending.insert(id, next);
            self.writes.push((i, Write::Counter(*w, after)));
        }
        (decision, before, after)
    }

    /// The state an item on `id` sees: what an earlier item of the work
    /// would write, or what is stored.
    fn state(&mut self, id: u128) -> Option<LimiterState> {
        self.pending
            .get(&id)
            .cloned()
            .or_else(|| self.locked.state(id, self.now))
    }

    /// An opt-in algorithm, at the store's time.
    fn algorithm(&mut self, i: usize, item: &Item, id: u128, limiter: &Limiter) -> Outcome {
        let state = self.state(id);
        let (decision, next) = limiter.decide(state, item.taken(), self.now);
        if decision.is_allowed() && item.taken() > 0 {
            self.pending.insert(id, next.clone());
            self.writes.push((i, Write::State(*limiter, next)));
        }
        (decision, 0, 0)
    }

    /// The audit's reference: recorded iff its subject admitted the
    /// request (a counter subject at once, any other with the commit).
    fn reference(
        &mut self,
        i: usize,
        item: &Item,
        id: u128,
        contract: &Limiter,
        subject: Option<usize>,
    ) -> Outcome {
        let state = self.state(id);
        let held = contract.in_window(state.as_ref(), self.now);
        let (decision, _) = contract.decide(state.clone(), item.taken(), self.now);
        if item.taken() > 0 {
            let next = contract.record(state, item.cost(), self.now);
            let follows_counter = subject
                .and_then(|s| self.work.items.get(s))
                .is_some_and(|s| !s.limit.taken_on_commit());
            match subject {
                Some(s) if follows_counter => {
                    if self.taken.get(s).copied().unwrap_or(false) {
                        self.locked
                            .set_state(id, contract, next, self.now, item.rule.id.as_ref());
                    }
                }
                _ => {
                    self.pending.insert(id, next.clone());
                    self.writes.push((i, Write::State(*contract, next)));
                }
            }
        }
        (decision, held, held)
    }

    /// Writes what the work took iff it commits (its policy commits and
    /// every binding item is admitted), and answers each item.
    fn finish(mut self) -> Reply {
        let work = self.work;
        let items = &work.items;
        let committed = work.policy.commits()
            && items
                .iter()
                .zip(&self.results)
                .all(|(c, (d, ..))| !c.binding || d.is_allowed());
        if committed {
            for (i, write) in std::mem::take(&mut self.writes) {
                let (id, owner) = (self.ids[i], items[i].rule.id.as_ref());
                match write {
                    Write::Counter(w, count) => self.locked.set_counter(id, count, &w, owner),
                    Write::State(limiter, state) => {
                        self.locked.set_state(id, &limiter, state, self.now, owner)
                    }
                }
            }
        }
        let answers = items
            .iter()
            .zip(self.results)
            .map(|(item, (decision, before, after))| {
                let count = match item.limit {
                    Limit::Window(_) if !committed => before,
                    _ => after,
                };
                Ok(Answer::Decided(Decided {
                    decision,
                    count,
                    at: self.now,
                }))
            })
            .collect();
        Reply { answers, committed }
    }
}
