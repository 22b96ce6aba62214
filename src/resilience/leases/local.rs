//! Local-first decisions, the pure part: what an instance may admit of a
//! fixed window (the original's, or a calendar's) from its own view,
//! without a store call, and what it owes the store. The layer that
//! answers from views and writes them back in batches is
//! [`super::Leases`], the same one that spends leases: a view is the other
//! half of a lease. A lease is tokens the store granted ahead (nothing is
//! ever admitted that the store did not count first); a view is admissions
//! made first and counted after, within a share small enough to bound
//! what that can cost.
//!
//! # The bound
//!
//! A window of limit `L` decided by `N` instances, with `ε` the largest
//! over-admission allowed (`LOCAL_FIRST_MAX_OVER`, 1 % by default). Each
//! instance holds, per key:
//! - the key's counter as the store last answered it, `G` (never lowered:
//!   answers that cross in flight keep the larger);
//! - `u`, what it admitted locally and has not yet written (sent or not).
//!
//! With the *unwritten share* `P = ⌊ε·L / N⌋` and the *margin*
//! `M = (N − 1)·P`, a request of cost `c` is admitted locally iff
//! `u + c ≤ P` and either `G + u + c ≤ L − M`, or the key is cold (no
//! answer from the store yet on this instance). Everything else goes to
//! the store, which decides as it always does. Then, per window:
//!
//! **admitted ≤ L + N·P ≤ L·(1 + ε).**
//!
//! Why: let `t₀` be the moment the admissions first reach `L`. The counter
//! holds every admission but what is unwritten, at most `P` per instance,
//! so a store answer read after `t₀` by instance `i` is at least
//! `L − (N − 1)·P − uᵢ`: from then on `G + u + c > L − M` and `i` admits
//! nothing locally. So each instance admits locally after `t₀` only within
//! the view it held at `t₀` (or one cold view it opens after), at most `P`
//! in all since `u ≤ P` and `u` falls only when a write is answered, which
//! is a read. The store admits after `t₀` only while its counter is within
//! `L`, that is while the unwritten admissions, again at most `P` an
//! instance and counted in the same `P`, are missing from it. Nothing in
//! this depends on time: a slow or failed write-back, a paused store or a
//! late answer only keeps `u` at its cap, and the key's decisions go to
//! the store (or, while it cannot answer, to the rule's `failure_mode`).
//!
//! What the bound assumes, and what breaks it:
//! - every instance counts the same `N` (the layer counts the instances
//!   that wrote to the store in the last second: for a second after an
//!   instance joins, the others count one fewer, and each may then hold
//!   `⌊ε·L/(N−1)⌋ − ⌊ε·L/N⌋` more than its share);
//! - a view lives as long as its window: a view forgotten early (an
//!   instance restarted) opens a cold one, one more `P` for that instance.
//!
//! At `P = 0` (`ε·L < N`: a small limit, or many instances) no decision is
//! local and the window is exact.

/// What one instance may hold of a key's window: the unwritten share `P`
/// and the margin `M` (see the module's bound).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Share {
    /// `P = ⌊ε·L / N⌋`: the most this instance may admit and not yet have
    /// written.
    pub unwritten: u64,
    /// `M = (N − 1)·P`: what the other instances may hold unwritten.
    pub margin: u64,
}

impl Share {
    /// The share of a limit of `limit` among `instances` (at least one),
    /// with `max_over` (`ε`, in [0, 1]) the over-admission allowed.
    pub fn of(limit: u64, instances: u64, max_over: f64) -> Share {
        let n = instances.max(1);
        let unwritten = Share::allowance(limit, max_over) / n;
        Share {
            unwritten,
            margin: unwritten.saturating_mul(n - 1),
        }
    }

    /// What every instance's share of a window of `limit` adds up to at
    /// most, whatever their number: `⌊ε·L⌋` (`N·⌊ε·L/N⌋` never exceeds it).
    pub fn allowance(limit: u64, max_over: f64) -> u64 {
        (limit as f64 * max_over.clamp(0.0, 1.0)).floor() as u64
    }

    /// The most a window of this share admits, `L + N·P`, for `instances`.
    pub fn bound(&self, limit: u64, instances: u64) -> u64 {
        limit.saturating_add(self.unwritten.saturating_mul(instances.max(1)))
    }
}

/// One instance's view of one key's window.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct View {
    /// The key's counter as the store last answered it (`G`); `None`
    /// while the key is cold here.
    pub counter: Option<u64>,
    /// Admitted here and not yet written (`u`), including what is on its
    /// way in a sync.
    pub unwritten: u64,
    /// Of `unwritten`, what a sync is carrying now.
    pub sending: u64,
}

impl View {
    /// Admits `cost` locally if the share allows it (see the module's
    /// bound): the counter the request sees after it (`G + u`), or `None`
    /// (the store decides). A zero cost is a read: the store answers it.
    pub fn admit(&mut self, cost: u64, limit: u64, share: Share) -> Option<u64> {
        if cost == 0 || self.unwritten.saturating_add(cost) > share.unwritten {
            return None;
        }
        let after = self.counter.unwrap_or(0) + self.unwritten + cost;
        if self.counter.is_some() && after.saturating_add(share.margin) > limit {
            return None;
        }
        self.unwritten += cost;
        Some(after)
    }

    /// Takes back a local admission of `cost` whose request did not commit
    /// (a decided window is taken only with the rest of its request).
    pub fn unadmit(&mut self, cost: u64) {
        let unsent = self.unwritten - self.sending;
        self.unwritten -= cost.min(unsent);
    }

    /// A give-back (refund) of `cost` taken from the admissions not yet
    /// sent: as if they had never been admitted, so the store need not
    /// hear of either. The counter the key is at after it (`G + u`), or
    /// `None` when fewer are unsent (the store takes the give-back).
    pub fn give_back(&mut self, cost: u64) -> Option<u64> {
        let unsent = self.unwritten - self.sending;
        if cost == 0 || cost > unsent {
            return None;
        }
        self.unwritten -= cost;
        Some(self.counter.unwrap_or(0) + self.unwritten)
    }

    /// The store answered the key's counter with `counter` (a request that
    /// went there): the view keeps the larger of it and what it held.
    pub fn observe(&mut self, counter: u64) {
        self.counter = Some(self.counter.map_or(counter, |g| g.max(counter)));
    }

    /// What a sync should write now: the unwritten admissions not already
    /// on their way, marked as sent. 0: nothing to write.
    pub fn send(&mut self) -> u64 {
        let delta = self.unwritten - self.sending;
        self.sending += delta;
        delta
    }

    /// The store counted `delta` (a sync's write) and answered `counter`
    /// after it.
    pub fn written(&mut self, delta: u64, counter: u64) {
        let delta = delta.min(self.sending);
        self.sending -= delta;
        self.unwritten -= delta;
        self.observe(counter);
    }

    /// A sync of `delta` failed: it is owed still, to be sent again.
    pub fn unsent(&mut self, delta: u64) {
        self.sending -= delta.min(self.sending);
    }
}

#[cfg(test)]
mod tests;
