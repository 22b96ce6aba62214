//! [`Leases`]: the store layer that answers hot keys of `lease: true` rules
//! from batches of tokens taken earlier, with no round trip.
//!
//! Per key of a leased rule, this instance keeps two [`RateMeter`]s (the
//! decisions it sees, the tokens the store granted it), at most one
//! [`Lease`], and, after a refusal, until when the store said the key
//! cannot admit. For each request:
//! - an item whose key holds a live lease with enough tokens is admitted
//!   from it; one whose key is known refused is refused with the store's
//!   retry; neither costs a round trip;
//! - an item of a hot key (see [`LeaseOptions::batch`]) without a usable
//!   lease goes to the store as a take: the same check with the batch as
//!   its cost. Concurrent requests for that key wait for the take (up to
//!   [`TAKE_WAIT`]) instead of taking a batch each;
//! - a take the store refuses refuses the request, and the key is refused
//!   here until the store's retry for the batch: when a batch's worth can
//!   be granted, not merely the next token. A fixed window whose refusal
//!   would last longer than `LEASE_TTL` (until a window end further off) is
//!   the exception: the refused take is retried once as the plain request,
//!   and what the store then says it has left caps the next batch, so the
//!   window's last tokens are taken rather than left unclaimed for long,
//!   for a few more calls a window. While the store is short (it
//!   refused a take, or had less than another batch left after one), a
//!   refilling limit's (a token bucket's, a sliding window's) takes are the
//!   largest batch and wait for this instance's pace
//!   ([`lease::next_take`]).
//!   A key in overload therefore costs one store call per batch, however
//!   far over its limit it is offered;
//! - everything else goes to the store as it came.
//!
//! The request stays all or nothing: the store part is only committed if
//! every binding item answered here admits, and tokens spent here are put
//! back into their lease if the store part is refused. Only binding items
//! are leased (a shadow-mode limit is decided as it came).
//!
//! Ended leases are returned to the store with [`Policy::Refund`], by a
//! sweeper and by [`Leases::return_all`] at shutdown. During an outage a
//! lease is spent until it ends; then the take fails and the item is
//! answered by its rule's failure policy, above this layer.
//!
//! See [`lease`] for the bound.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use tokio::sync::watch;
use tokio::time::Instant;

pub mod lease;
pub mod local;
pub mod rate;
mod sync;
mod table;
mod views;

pub use lease::{Lease, LeaseOptions};
pub use rate::RateMeter;
use table::Ended;
pub use table::LeaseTable;
pub use views::{stale_after, Fleet};

use crate::limiter::{Clock, Decision};
use crate::metrics;
use crate::store::{
    Answer, Decided, Done, Item, Job, Limit, Policy, Reply, Store, StoreError, StoreErrorKind,
    StoreExt, Work,
};

/// The longest a request waits for another request's take of the same key
/// (never past its deadline). A plain call instead would cost the store a
/// call and take as long as the take, so the wait covers a slow store too.
pub const TAKE_WAIT: Duration = Duration::from_millis(100);

/// One item's way through a request.
#[derive(Debug, Clone, Copy)]
enum Step {
    /// Answered here (spent from a lease, or known exhausted).
    Local(Decision, Duration),
    /// To the store with its own cost.
    Store,
    /// To the store with `batch` as its cost: a take.
    Take(u64),
    /// Another request is taking for this key.
    Wait,
    /// Admitted from a local-first window's view, its counter after.
    Viewed(Decision, u64),
}

/// A store whose leased hot keys are answered from batches of tokens.
#[derive(Debug)]
pub struct Leases<S> {
    inner: Arc<S>,
    options: LeaseOptions,
    clock: Arc<dyn Clock>,
    table: Arc<LeaseTable>,
    fleet: Arc<Fleet>,
}

impl<S: Store + 'static> Leases<S> {
    /// `inner` with leasing per `options`, on `clock` (the local one: the
    /// store's clock still decides every admission).
    pub fn new(inner: S, options: LeaseOptions, clock: Arc<dyn Clock>) -> Leases<S> {
        Leases {
            inner: Arc::new(inner),
            options,
            clock,
            table: Arc::new(LeaseTable::new(options.max_views)),
            fleet: Arc::new(Fleet::default()),
        }
    }

    /// What the write-back knows of the fleet (for `/rlconfig`).
    pub fn fleet(&self) -> Arc<Fleet> {
        Arc::clone(&self.fleet)
    }

    /// The table, for `/hotkeys`.
    pub fn table(&self) -> Arc<LeaseTable> {
        Arc::clone(&self.table)
    }

    /// Returns ended leases every `every` until the returned guard drops.
    pub fn spawn_sweeper(&self, every: Duration) -> tokio::task::JoinHandle<()> {
        let (inner, table, clock) = (
            Arc::clone(&self.inner),
            Arc::clone(&self.table),
            Arc::clone(&self.clock),
        );
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(every);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tick.tick().await;
                let ended = table.ended(clock.now(), false);
                give_back(inner.as_ref(), ended).await;
            }
        })
    }

    /// Gives every lease back to the store, and writes every view's
    /// admissions (at shutdown): how many tokens were returned.
    pub async fn return_all(&self) -> u64 {
        self.write_back_now().await;
        let all = self.table.ended(self.clock.now(), true);
        give_back(self.inner.as_ref(), all).await
    }

    /// Plans every item. On the `first` plan of a request an item may wait
    /// for another request's take (and the decision is counted in the
    /// key's rate); on the second it may not.
    fn plan(
        &self,
        items: &[Item],
        now: Duration,
        first: bool,
    ) -> (Vec<Step>, Vec<watch::Receiver<()>>) {
        let mut steps = Vec::with_capacity(items.len());
        let mut waits = Vec::new();
        for c in items {
            if let Some(step) = self.view_step(c, now, first) {
                steps.push(step);
                continue;
            }
            if c.gives_back() {
                // Taken here, if at all, once the plan is final
                // (`give_backs_here`): a plan made again gives nothing twice.
                steps.push(Step::Store);
                continue;
            }
            let leasable = c.rule.lease && c.binding && c.cost() > 0;
            let Limit::Algorithm(limiter) = c.limit else {
                steps.push(Step::Store);
                continue;
            };
            if !leasable {
                steps.push(Step::Store);
                continue;
            }
            let mut map = self.table.shard(&c.key);
            let s = match map.get_mut(c.key.as_str()) {
                Some(s) => s,
                None => map.entry(c.key.clone()).or_default(),
            };
            if first {
                s.meter.record(now);
            }
            if let Some((until, reset)) = s.refused_until {
                if now < until {
                    steps.push(Step::Local(refusal(now, until, reset), Duration::ZERO));
                    continue;
                }
                s.refused_until = None;
            }
            if let Some(lease) = s.lease.as_mut() {
                if let Some(d) = lease.spend(c.cost(), now) {
                    steps.push(Step::Local(d, lease.taken_at));
                    continue;
                }
            }
            if let Some(taking) = &s.taking {
                if first {
                    waits.push(taking.subscribe());
                    steps.push(Step::Wait);
                } else {
                    steps.push(Step::Store);
                }
                continue;
            }
            let rate = s.meter.rate(now);
            // A fixed window does not refill before it ends: a short store
            // means the window is nearly spent, not that batches should grow
            // or wait for a refill; what is left is taken at once.
            let short = s.short && limiter.refills();
            let batch = self
                .options
                .batch(rate, c.cost(), limiter.capacity(), short)
                .map(|b| b.min(s.room.unwrap_or(u64::MAX)))
                .filter(|&b| b > c.cost());
            let Some(batch) = batch else {
                steps.push(Step::Store);
                continue;
            };
            if short {
                let granted = s.granted.rate(now);
                let at = lease::next_take(s.last_take, batch, granted, self.options.ttl);
                if now < at {
                    steps.push(Step::Local(refusal(now, at, s.resets_at), Duration::ZERO));
                    continue;
                }
            }
            s.taking = Some(watch::channel(()).0);
            steps.push(Step::Take(batch));
        }
        (steps, waits)
    }

    /// Each give-back that a live lease or a view here can take, taken:
    /// its step replaced. Run once, on the final plan.
    fn give_backs_here(&self, items: &[Item], steps: &mut [Step], now: Duration) {
        for (c, step) in items.iter().zip(steps.iter_mut()) {
            if !c.gives_back() {
                continue;
            }
            let here = match c.rule.lease {
                true => self.give_back_locally(c, now),
                false => self.give_back_to_view(c, now),
            };
            if let Some(here) = here {
                *step = here;
            }
        }
    }

    /// A give-back of a key that holds a live lease here: its cost goes
    /// into the lease, which returns it to the store with what else it
    /// holds when it ends. `None` without a live lease (the store takes it).
    fn give_back_locally(&self, c: &Item, now: Duration) -> Option<Step> {
        let mut map = self.table.shard(&c.key);
        let lease = map
            .get_mut(c.key.as_str())
            .and_then(|s| s.lease.as_mut())
            .filter(|l| l.is_live(now))?;
        lease.unspend(c.cost());
        let decision = Decision::Allow {
            remaining: lease.store_remaining.saturating_add(lease.tokens),
            reset_after: lease.resets_at.saturating_sub(now),
        };
        Some(Step::Local(decision, lease.taken_at))
    }

    /// Puts back what `steps` spent from leases and views (the request was
    /// refused); a give-back stays given.
    /// With `policy`, the request was answered; without, it is planned
    /// again (and every view's admission is taken back).
    fn unspend(&self, items: &[Item], steps: &[Step], policy: Option<Policy>) {
        for (c, step) in items.iter().zip(steps) {
            // A counter counts whatever its request decides, but where
            // `STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT` stops it.
            let counted = matches!(c.limit, Limit::Counter(_))
                && policy.is_some_and(|p| p != Policy::CommitStopping);
            if c.gives_back() {
                // Taken once the plan was final: it stays given.
                continue;
            }
            if let (Step::Viewed(..), false) = (step, counted) {
                self.unview(c);
                continue;
            }
            if let Step::Local(d, _) = step {
                if d.is_allowed() {
                    if let Some(l) = self
                        .table
                        .shard(&c.key)
                        .get_mut(c.key.as_str())
                        .and_then(|s| s.lease.as_mut())
                    {
                        l.unspend(c.cost());
                    }
                }
            }
        }
    }

    /// Ends the takes of `steps` that are still marked, waking waiters.
    fn end_takes(&self, items: &[Item], steps: &[Step]) {
        for (c, step) in items.iter().zip(steps) {
            if let Step::Take(_) = step {
                if let Some(s) = self.table.shard(&c.key).get_mut(c.key.as_str()) {
                    // Dropping the sender wakes its waiters.
                    s.taking = None;
                }
            }
        }
    }

    /// Learns from the store's answer to a plain item or a take of a
    /// leased key: a refusal is remembered until the store's retry for what
    /// was asked, and a refused take marks the store short.
    fn learn(&self, c: &Item, checked: &Decided, now: Duration, take: Option<u64>) {
        if !(c.rule.lease && c.binding) {
            return;
        }
        let mut map = self.table.shard(&c.key);
        let Some(s) = map.get_mut(c.key.as_str()) else {
            return;
        };
        s.resets_at = now + checked.decision.reset_after();
        if checked.decision.is_allowed() {
            s.granted.add(now, c.cost());
        }
        if take.is_none() && matches!(c.limit, Limit::Algorithm(l) if !l.refills()) {
            s.room = Some(checked.decision.remaining());
        }
        if let Decision::Deny { retry_after, .. } = checked.decision {
            let mut until = now + retry_after;
            if let Some(batch) = take {
                s.short = true;
                let granted = s.granted.rate(now);
                until = until.max(lease::next_take(
                    s.last_take,
                    batch,
                    granted,
                    self.options.ttl,
                ));
            }
            s.refused_until = Some((until, s.resets_at));
        }
    }

    async fn leased(&self, whole: &Work, deadline: Option<Instant>) -> Reply {
        let (items, policy) = (whole.items.as_slice(), whole.policy);
        let mut now = self.clock.now();
        let (mut steps, mut waits) = self.plan(items, now, true);
        if !waits.is_empty() {
            // Spend nothing and take nothing yet: wait, then plan again
            // without waiting.
            self.unspend(items, &steps, None);
            self.end_takes(items, &steps);
            let wait = async {
                let futures = waits.iter_mut().map(|rx| rx.changed());
                futures::future::join_all(futures).await;
            };
            let limit = deadline.map_or(TAKE_WAIT, |d| {
                d.saturating_duration_since(Instant::now()).min(TAKE_WAIT)
            });
            let _ = tokio::time::timeout(limit, wait).await;
            now = self.clock.now();
            steps = self.plan(items, now, false).0;
        }
        self.give_backs_here(items, &mut steps, now);
        let local = steps
            .iter()
            .filter(|s| matches!(s, Step::Local(..)))
            .count();
        if local > 0 {
            ::metrics::counter!(metrics::LEASE_LOCAL_DECISION).increment(local as u64);
        }
        let viewed = steps
            .iter()
            .filter(|s| matches!(s, Step::Viewed(..)))
            .count();
        let of_views = items
            .iter()
            .filter(|c| c.rule.sync_interval.is_some())
            .count();
        if viewed > 0 {
            ::metrics::counter!(metrics::LOCAL_FIRST_LOCAL_DECISION).increment(viewed as u64);
        }
        if of_views > viewed {
            ::metrics::counter!(metrics::LOCAL_FIRST_STORE_DECISION)
                .increment((of_views - viewed) as u64);
        }
        let local_refusal = items
            .iter()
            .zip(&steps)
            .any(|(c, s)| c.binding && matches!(s, Step::Local(d, _) if !d.is_allowed()));
        let to_store: Vec<usize> = (0..items.len())
            .filter(|&i| !matches!(steps[i], Step::Local(..) | Step::Viewed(..)))
            .collect();

        let mut answers: Vec<Option<Result<Answer, StoreError>>> = steps
            .iter()
            .map(|s| match s {
                Step::Local(decision, at) => Some(Ok(Answer::Decided(Decided {
                    decision: *decision,
                    count: 0,
                    at: *at,
                }))),
                Step::Viewed(decision, count) => Some(Ok(Answer::Decided(Decided {
                    decision: *decision,
                    count: *count,
                    at: now,
                }))),
                _ => None,
            })
            .collect();
        let mut committed = !local_refusal;
        if !to_store.is_empty() {
            let policy = if local_refusal {
                Policy::Decide
            } else {
                policy
            };
            // The store's part, its references' subjects renumbered (one
            // whose subject was answered here follows the commit).
            let work = |steps: &[Step]| {
                let mut part = whole.select(&to_store);
                part.policy = policy;
                for (c, &i) in part.items.iter_mut().zip(&to_store) {
                    if let Step::Take(batch) = steps[i] {
                        c.hits = crate::store::Hits::Take(batch);
                    }
                }
                part
            };
            let mut reply = self.inner.execute(&work(&steps), deadline).await;
            ::metrics::counter!(metrics::LEASE_STORE_CALL).increment(1);
            // A fixed window's refused take: retried once as the plain
            // request (see the module doc).
            let refused_window = |reply: &Reply, steps: &[Step]| {
                to_store.iter().zip(&reply.answers).any(|(&i, a)| {
                    matches!(steps[i], Step::Take(_))
                        && matches!(items[i].limit, Limit::Algorithm(l) if !l.refills())
                        && matches!(a, Ok(Answer::Decided(Decided {
                            decision: Decision::Deny { retry_after, .. },
                            ..
                        })) if *retry_after > self.options.ttl)
                })
            };
            if !local_refusal && refused_window(&reply, &steps) {
                self.end_takes(items, &steps);
                for &i in &to_store {
                    if let (Step::Take(_), Limit::Algorithm(l)) = (steps[i], items[i].limit) {
                        if !l.refills() {
                            steps[i] = Step::Store;
                        }
                    }
                }
                reply = self.inner.execute(&work(&steps), deadline).await;
                ::metrics::counter!(metrics::LEASE_STORE_CALL).increment(1);
            }
            committed &= reply.committed;
            for (&i, answer) in to_store.iter().zip(reply.answers) {
                let c = &items[i];
                let answer = match (steps[i], answer) {
                    (Step::Take(batch), Ok(Answer::Decided(mut checked)))
                        if reply.committed && checked.decision.is_allowed() =>
                    {
                        self.install(c, batch, &checked, now);
                        if let Decision::Allow { remaining, .. } = &mut checked.decision {
                            *remaining = remaining.saturating_add(batch - c.cost());
                        }
                        Ok(Answer::Decided(checked))
                    }
                    (step, Ok(Answer::Decided(checked))) => {
                        self.observe(c, checked.count);
                        let take = match step {
                            Step::Take(batch) => Some(batch),
                            _ => None,
                        };
                        self.learn(c, &checked, now, take);
                        Ok(Answer::Decided(checked))
                    }
                    (_, other) => other,
                };
                answers[i] = Some(answer);
            }
            self.end_takes(items, &steps);
        }
        if !committed {
            self.unspend(items, &steps, Some(policy));
        }
        Reply {
            answers: answers
                .into_iter()
                .map(|a| {
                    a.unwrap_or_else(|| {
                        Err(StoreError::new(
                            StoreErrorKind::Rejected,
                            "an item without an answer",
                        ))
                    })
                })
                .collect(),
            committed,
        }
    }

    /// Records the lease of `batch` that the store admitted for `c`.
    fn install(&self, c: &Item, batch: u64, checked: &Decided, now: Duration) {
        let Limit::Algorithm(limiter) = c.limit else {
            return;
        };
        let lease = Lease::taken(
            &self.options,
            &limiter,
            batch,
            c.cost(),
            &checked.decision,
            checked.at,
            now,
        );
        ::metrics::counter!(metrics::LEASE_TAKEN).increment(1);
        ::metrics::counter!(metrics::LEASE_TOKENS_TAKEN).increment(batch);
        let mut map = self.table.shard(&c.key);
        let s = map.entry(c.key.clone()).or_default();
        // A lease it replaces has ended or was spent (or it would have been
        // used); what an ended one still holds goes back with the sweep.
        if let Some(old) = s.lease.replace(lease).filter(|l| l.tokens > 0) {
            if let Some(limit) = s.limit {
                let mut replaced = self
                    .table
                    .replaced
                    .lock()
                    .unwrap_or_else(|e| e.into_inner());
                replaced.push((c.key.clone(), limit, old));
            }
        }
        s.limit = Some(c.limit);
        s.refused_until = None;
        s.room = None;
        s.granted.add(now, batch);
        s.last_take = now;
        s.resets_at = lease.resets_at;
        s.short = checked.decision.remaining() < self.options.largest_batch(limiter.capacity());
    }
}

/// The local refusal of a key refused until `until` (and full at `reset`).
fn refusal(now: Duration, until: Duration, reset: Duration) -> Decision {
    Decision::Deny {
        retry_after: until - now,
        reset_after: reset.saturating_sub(now).max(until - now),
    }
}

/// Returns `leases` to `store`: the tokens given back.
async fn give_back<S: Store + ?Sized>(store: &S, leases: Vec<Ended>) -> u64 {
    let calls = leases.into_iter().filter(|(_, _, l)| l.tokens > 0).map(|(key, limit, lease)| async move {
        let item = Item {
            binding: false,
            ..Item::new(key, limit, lease.tokens)
        };
        let work = Work::new(vec![item], Policy::Refund { taken_at: lease.taken_at });
        let deadline = Instant::now() + Duration::from_secs(1);
        let reply = store.execute(&work, Some(deadline)).await;
        match reply.answers.first() {
            Some(Ok(_)) => {
                ::metrics::counter!(metrics::LEASE_TOKENS_RETURNED).increment(lease.tokens);
                lease.tokens
            }
            Some(Err(e)) => {
                ::metrics::counter!(metrics::LEASE_RETURN_FAILED).increment(1);
                tracing::warn!(error = %e, tokens = lease.tokens, "returning a lease failed; its tokens stay taken until the window ends or the bucket refills");
                0
            }
            None => 0,
        }
    });
    futures::future::join_all(calls).await.into_iter().sum()
}

#[async_trait]
impl<S: Store + 'static> Store for Leases<S> {
    /// A request's leased items, and give-backs that a lease may take;
    /// everything else is passed through (nothing on a board is leased).
    async fn call(&self, job: Job<'_>, deadline: Option<Instant>) -> Done {
        match job {
            Job::Limits(work)
                if work.policy.commits()
                    && work.items.iter().any(|c| {
                        (c.rule.lease && (c.binding || c.gives_back()))
                            || (c.rule.sync_interval.is_some()
                                && c.limit.original_window().is_some())
                    }) =>
            {
                Done::Limits(self.leased(work, deadline).await)
            }
            other => self.inner.call(other, deadline).await,
        }
    }
}

#[cfg(test)]
mod tests;
