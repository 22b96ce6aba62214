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

use std::collections::HashMap;
use std::hash::{BuildHasher, RandomState};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use crate::store::board::{BoardReply, BoardWork};
use async_trait::async_trait;
use tokio::sync::watch;
use tokio::time::Instant;

pub mod lease;
pub mod rate;

pub use lease::{Lease, LeaseOptions};
pub use rate::RateMeter;

use crate::limiter::{Clock, Decision};
use crate::metrics;
use crate::store::{
    Answer, Decided, Item, Limit, OnFailure, Policy, Reply, Store, StoreError, StoreErrorKind, Work,
};

/// The longest a request waits for another request's take of the same key
/// (never past its deadline). A plain call instead would cost the store a
/// call and take as long as the take, so the wait covers a slow store too.
pub const TAKE_WAIT: Duration = Duration::from_millis(100);

/// Key shards of the table (each its own lock).
const SHARDS: usize = 16;

/// What this instance knows of one key of a leased rule.
#[derive(Debug, Default)]
struct KeyState {
    /// Decisions this instance made for the key.
    meter: RateMeter,
    /// Tokens the store granted this instance for the key.
    granted: RateMeter,
    lease: Option<Lease>,
    /// The limit the lease was taken from (what a refund names).
    limit: Option<Limit>,
    /// Until when (local clock) the store said the key cannot admit what
    /// was asked (a batch, or the request), and when it would be full.
    refused_until: Option<(Duration, Duration)>,
    /// Whether the store was last seen short: it refused a take, or had
    /// less than another largest batch left after one. Takes are then the
    /// largest batch, and paced.
    short: bool,
    /// When (local clock) the last batch was granted.
    last_take: Duration,
    /// When (local clock) the key would be full again, as last answered.
    resets_at: Duration,
    /// A fixed window's room as the store last said, below a batch: it
    /// caps the next batch.
    room: Option<u64>,
    /// A take in flight; dropped when it is answered, which wakes the
    /// requests subscribed to it.
    taking: Option<watch::Sender<()>>,
}

/// An ended lease on its way back to the store: key, limit, lease.
type Ended = (String, Limit, Lease);

/// The lease table, shared by the layer, the sweeper and `/hotkeys`.
#[derive(Debug)]
pub struct LeaseTable {
    shards: Vec<Mutex<HashMap<String, KeyState>>>,
    hasher: RandomState,
    /// Leases replaced by a new take before the sweeper saw them end, with
    /// tokens left: the sweeper returns them with the ended ones.
    replaced: Mutex<Vec<Ended>>,
}

impl LeaseTable {
    fn new() -> LeaseTable {
        LeaseTable {
            shards: (0..SHARDS).map(|_| Mutex::new(HashMap::new())).collect(),
            hasher: RandomState::new(),
            replaced: Mutex::new(Vec::new()),
        }
    }

    fn shard(&self, key: &str) -> MutexGuard<'_, HashMap<String, KeyState>> {
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
    fn ended(&self, now: Duration, all: bool) -> Vec<Ended> {
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
}

/// A store whose leased hot keys are answered from batches of tokens.
#[derive(Debug)]
pub struct Leases<S> {
    inner: Arc<S>,
    options: LeaseOptions,
    clock: Arc<dyn Clock>,
    table: Arc<LeaseTable>,
}

impl<S: Store + 'static> Leases<S> {
    /// `inner` with leasing per `options`, on `clock` (the local one: the
    /// store's clock still decides every admission).
    pub fn new(inner: S, options: LeaseOptions, clock: Arc<dyn Clock>) -> Leases<S> {
        Leases {
            inner: Arc::new(inner),
            options,
            clock,
            table: Arc::new(LeaseTable::new()),
        }
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

    /// Gives every lease back to the store (at shutdown): how many tokens
    /// were returned.
    pub async fn return_all(&self) -> u64 {
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
            if c.give_back && c.lease {
                steps.push(self.give_back_locally(c, now).unwrap_or(Step::Store));
                continue;
            }
            let leasable = c.lease && c.binding && c.cost > 0;
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
                if let Some(d) = lease.spend(c.cost, now) {
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
                .batch(rate, c.cost, limiter.capacity(), short)
                .map(|b| b.min(s.room.unwrap_or(u64::MAX)))
                .filter(|&b| b > c.cost);
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

    /// A give-back of a key that holds a live lease here: its cost goes
    /// into the lease, which returns it to the store with what else it
    /// holds when it ends. `None` without a live lease (the store takes it).
    fn give_back_locally(&self, c: &Item, now: Duration) -> Option<Step> {
        let mut map = self.table.shard(&c.key);
        let lease = map
            .get_mut(c.key.as_str())
            .and_then(|s| s.lease.as_mut())
            .filter(|l| l.is_live(now))?;
        lease.unspend(c.cost);
        let decision = Decision::Allow {
            remaining: lease.store_remaining.saturating_add(lease.tokens),
            reset_after: lease.resets_at.saturating_sub(now),
        };
        Some(Step::Local(decision, lease.taken_at))
    }

    /// Puts back what `steps` spent from leases (the request was refused);
    /// a give-back stays given.
    fn unspend(&self, items: &[Item], steps: &[Step]) {
        for (c, step) in items.iter().zip(steps) {
            if let (false, Step::Local(d, _)) = (c.give_back, step) {
                if d.is_allowed() {
                    if let Some(l) = self
                        .table
                        .shard(&c.key)
                        .get_mut(c.key.as_str())
                        .and_then(|s| s.lease.as_mut())
                    {
                        l.unspend(c.cost);
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
        if !(c.lease && c.binding) {
            return;
        }
        let mut map = self.table.shard(&c.key);
        let Some(s) = map.get_mut(c.key.as_str()) else {
            return;
        };
        s.resets_at = now + checked.decision.reset_after();
        if checked.decision.is_allowed() {
            s.granted.add(now, c.cost);
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

    async fn leased(&self, items: &[Item], policy: Policy, deadline: Option<Instant>) -> Reply {
        let mut now = self.clock.now();
        let (mut steps, mut waits) = self.plan(items, now, true);
        if !waits.is_empty() {
            // Spend nothing and take nothing yet: wait, then plan again
            // without waiting.
            self.unspend(items, &steps);
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
        let local = steps
            .iter()
            .filter(|s| matches!(s, Step::Local(..)))
            .count();
        if local > 0 {
            ::metrics::counter!(metrics::LEASE_LOCAL_DECISION).increment(local as u64);
        }
        let local_refusal = items
            .iter()
            .zip(&steps)
            .any(|(c, s)| c.binding && matches!(s, Step::Local(d, _) if !d.is_allowed()));
        let to_store: Vec<usize> = (0..items.len())
            .filter(|&i| !matches!(steps[i], Step::Local(..)))
            .collect();

        let mut answers: Vec<Option<Result<Answer, StoreError>>> = steps
            .iter()
            .map(|s| match s {
                Step::Local(decision, at) => Some(Ok(Answer::Decided(Decided {
                    decision: *decision,
                    count: 0,
                    at: *at,
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
            let work = |steps: &[Step]| {
                let items = to_store
                    .iter()
                    .map(|&i| {
                        let mut c = items[i].clone();
                        if let Step::Take(batch) = steps[i] {
                            c.cost = batch;
                        }
                        c
                    })
                    .collect();
                Work::new(items, policy)
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
                            *remaining = remaining.saturating_add(batch - c.cost);
                        }
                        Ok(Answer::Decided(checked))
                    }
                    (step, Ok(Answer::Decided(checked))) => {
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
            self.unspend(items, &steps);
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
            c.cost,
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
            on_failure: OnFailure::Error,
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
    /// Passed through: nothing on a board is leased.
    async fn share(&self, work: &BoardWork, deadline: Option<Instant>) -> BoardReply {
        self.inner.share(work, deadline).await
    }

    async fn execute(&self, work: &Work, deadline: Option<Instant>) -> Reply {
        // Leased items, and give-backs that a lease may take.
        if work.policy.commits()
            && work
                .items
                .iter()
                .any(|c| c.lease && (c.binding || c.give_back))
        {
            return self.leased(&work.items, work.policy, deadline).await;
        }
        self.inner.execute(work, deadline).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::limiter::{AlgorithmName, Limiter, ManualClock};
    use crate::resilience::testing::{Behaviour, Scripted};
    use crate::store::{testing::RunItems, MemoryStore};

    const MS: Duration = Duration::from_millis(1);

    /// Instances on one store: each node's lease layer over a clone of one
    /// scripted store, which counts every call that reaches it.
    struct Fleet {
        clock: Arc<ManualClock>,
        store: Arc<MemoryStore>,
        scripted: Scripted,
        nodes: Vec<Leases<Scripted>>,
    }

    fn fleet(nodes: usize) -> Fleet {
        let options = LeaseOptions {
            min_rate: 10,
            ..LeaseOptions::default()
        };
        fleet_with(nodes, options)
    }

    fn fleet_with(nodes: usize, options: LeaseOptions) -> Fleet {
        let clock = Arc::new(ManualClock::at_secs(1_000_000));
        let store = Arc::new(MemoryStore::new(clock.clone()));
        let scripted = Scripted::on(Arc::clone(&store));
        let nodes = (0..nodes)
            .map(|_| Leases::new(scripted.clone(), options, clock.clone()))
            .collect();
        Fleet {
            clock,
            store,
            scripted,
            nodes,
        }
    }

    fn leased(key: &str, limiter: Limiter) -> Item {
        Item {
            lease: true,
            ..Item::new(key, Limit::Algorithm(limiter), 1)
        }
    }

    fn minute(limit: u64, a: AlgorithmName) -> Limiter {
        Limiter::new(a, limit, Duration::from_secs(60), None).expect("valid")
    }

    /// `n` admitted requests, 1 ms apart: a hot key with a lease out.
    async fn warm(f: &Fleet, check: &Item, n: usize) {
        for _ in 0..n {
            assert!(admitted(&f.nodes[0], check).await);
            f.clock.advance(MS);
        }
    }

    async fn admitted(node: &Leases<Scripted>, check: &Item) -> bool {
        let reply = node
            .run(std::slice::from_ref(check), Policy::Commit)
            .await
            .expect("answered");
        reply.committed
    }

    #[tokio::test]
    async fn a_hot_key_is_answered_from_its_lease_and_admits_exactly_the_limit() {
        for a in [
            AlgorithmName::FixedWindow,
            AlgorithmName::SlidingWindow,
            AlgorithmName::TokenBucket,
        ] {
            let f = fleet(1);
            let check = leased("k", minute(2_000, a));
            let mut yes = 0;
            // 5,000 decisions at 1,000/s, within one minute.
            for _ in 0..5_000 {
                yes += u64::from(admitted(&f.nodes[0], &check).await);
                f.clock.advance(MS);
            }
            let calls = f.scripted.calls();
            // A token bucket refills 2,000/min: 166 more over the 5 s.
            let limit = if a == AlgorithmName::TokenBucket {
                2_166
            } else {
                2_000
            };
            // Under by at most the one instance's batch (5 % of 2,000).
            assert!(
                yes <= limit + 1 && yes + 100 >= limit,
                "{a}: admitted {yes}"
            );
            assert!(
                calls * 10 < 5_000,
                "{a}: {calls} store calls for 5,000 decisions"
            );
        }
    }

    #[tokio::test]
    async fn a_refund_of_a_leased_key_goes_into_its_lease() {
        let f = fleet(1);
        let check = leased("k", minute(1_000, AlgorithmName::TokenBucket));
        warm(&f, &check, 200).await;
        let now = f.clock.now();
        let held = f.nodes[0].table.held("k", now);
        assert!(held > 0, "a lease is out");
        let calls = f.scripted.calls();
        let back = check.clone().giving_back();
        let reply = f.nodes[0]
            .run(&[back.clone(), back], Policy::Commit)
            .await
            .expect("answered");
        assert!(reply.results.iter().all(|r| r.decision.is_allowed()));
        assert_eq!(f.scripted.calls(), calls, "no store call");
        assert_eq!(
            f.nodes[0].table.held("k", now),
            held + 2,
            "both into the lease"
        );
        // Without a lease, the store takes it.
        let other = leased("cold", minute(1_000, AlgorithmName::TokenBucket));
        f.nodes[0]
            .run(&[other.giving_back()], Policy::Commit)
            .await
            .expect("answered");
        assert_eq!(f.scripted.calls(), calls + 1);
        // The lease's tokens, the refunds with them, go back when it ends.
        let returned = f.nodes[0].return_all().await;
        assert_eq!(returned, held + 2);
    }

    #[tokio::test]
    async fn a_fleet_never_admits_more_than_the_limit() {
        let f = fleet(4);
        let check = leased("k", minute(1_000, AlgorithmName::FixedWindow));
        let mut yes = 0;
        for i in 0..8_000 {
            yes += u64::from(admitted(&f.nodes[i % 4], &check).await);
            if i % 4 == 3 {
                f.clock.advance(MS);
            }
        }
        assert!(yes <= 1_000, "admitted {yes}");
        // Under-admission at most nodes × largest batch (5 % of 1,000).
        assert!(yes >= 1_000 - 4 * 50, "admitted {yes}");
    }

    #[tokio::test]
    async fn unspent_tokens_go_back_and_refusals_are_remembered() {
        let f = fleet(1);
        let limiter = minute(1_000, AlgorithmName::FixedWindow);
        let check = leased("k", limiter);
        warm(&f, &check, 200).await;
        let held = f.nodes[0].table().held("k", f.clock.now());
        assert!(held > 0, "a lease is out");
        let returned = f.nodes[0].return_all().await;
        assert_eq!(returned, held);
        // The store has exactly what the 200 admissions took.
        let peek = f
            .store
            .run(
                &[Item {
                    lease: false,
                    cost: 0,
                    ..check.clone()
                }],
                Policy::Decide,
            )
            .await
            .expect("answered");
        assert_eq!(peek.results[0].decision.remaining(), 800);

        // Exhausted: the refusal is remembered, and costs no round trip.
        let small = leased("s", minute(20, AlgorithmName::FixedWindow));
        let mut yes = 0;
        for _ in 0..100 {
            yes += u64::from(admitted(&f.nodes[0], &small).await);
        }
        assert_eq!(yes, 20);
        let before = f.scripted.calls();
        for _ in 0..100 {
            assert!(!admitted(&f.nodes[0], &small).await);
        }
        assert_eq!(f.scripted.calls(), before, "denied from memory");
    }

    #[tokio::test]
    async fn a_refused_request_puts_its_lease_tokens_back() {
        let f = fleet(1);
        let hot = leased("hot", minute(1_000, AlgorithmName::FixedWindow));
        warm(&f, &hot, 200).await;
        let held = f.nodes[0].table().held("hot", f.clock.now());
        let full = Item::new(
            "full",
            Limit::Algorithm(minute(1, AlgorithmName::FixedWindow)),
            1,
        );
        assert!(
            f.nodes[0]
                .run(std::slice::from_ref(&full), Policy::Commit)
                .await
                .expect("ok")
                .committed
        );
        let both = f.nodes[0]
            .run(&[hot.clone(), full.clone()], Policy::Commit)
            .await
            .expect("answered");
        assert!(!both.committed);
        assert_eq!(
            f.nodes[0].table().held("hot", f.clock.now()),
            held,
            "nothing spent"
        );
    }

    #[tokio::test]
    async fn a_lease_ends_with_its_ttl() {
        let f = fleet(1);
        let check = leased("k", minute(10_000, AlgorithmName::FixedWindow));
        warm(&f, &check, 200).await;
        assert!(f.nodes[0].table().held("k", f.clock.now()) > 0);
        f.clock.advance(Duration::from_secs(1));
        assert_eq!(f.nodes[0].table().held("k", f.clock.now()), 0);
        let ended = f.nodes[0].table.ended(f.clock.now(), false);
        assert_eq!(ended.len(), 1);
        let tokens = ended[0].2.tokens;
        assert_eq!(give_back(&f.store, ended).await, tokens);
    }

    #[tokio::test]
    async fn during_an_outage_a_lease_is_spent_then_items_fail_for_their_policy() {
        let f = fleet(1);
        let check = leased("k", minute(10_000, AlgorithmName::FixedWindow));
        warm(&f, &check, 200).await;
        let held = f.nodes[0].table().held("k", f.clock.now());
        assert!(held > 0);
        f.scripted.set(Behaviour::Refuse);
        let mut local = 0;
        let mut failed = 0;
        let work = Work::new(vec![check.clone()], Policy::Commit);
        for _ in 0..held + 10 {
            match f.nodes[0].execute(&work, None).await.answers[0] {
                Ok(_) => local += 1,
                Err(ref e) => {
                    assert_eq!(e.kind, StoreErrorKind::Unavailable);
                    failed += 1;
                }
            }
        }
        assert_eq!(
            (local, failed),
            (held, 10),
            "the lease, then the store's failure"
        );
    }

    /// What a fleet did with one key offered over its limit.
    struct Overload {
        /// When each admitted request was decided.
        admitted: Vec<Duration>,
        /// Decisions and store calls after the first (warm-up) second.
        decisions: u64,
        calls: u64,
        /// What the algorithm admits deciding each request on its own, on
        /// the same times.
        ideal: u64,
    }

    /// One key of `limiter` offered `factor` × its limit per second for
    /// `secs` seconds, the requests evenly spaced and dealt to `nodes`
    /// instances in turn, with the default options; with `shards` > 1, the
    /// limit split into that many sub-buckets (keys), each request on one
    /// of them in a scrambled order, as `shards: K` does.
    async fn overload(
        limiter: Limiter,
        nodes: usize,
        factor: f64,
        secs: u64,
        shards: u64,
    ) -> Overload {
        use crate::limiter::Algorithm;
        let f = fleet_with(nodes, LeaseOptions::default());
        let part = limiter
            .scaled_to(limiter.limit() / shards)
            .expect("a sub-bucket");
        let checks: Vec<Item> = (0..shards)
            .map(|k| leased(&format!("k{k}"), part))
            .collect();
        let offered = (factor * limiter.limit() as f64) as u64;
        let gap = Duration::from_secs(1) / offered as u32;
        let start = f.clock.now();
        let mut out = Overload {
            admitted: Vec::new(),
            decisions: 0,
            calls: 0,
            ideal: 0,
        };
        let mut ideal: Vec<_> = checks.iter().map(|_| None).collect();
        let mut swept = start;
        for i in 0..offered * secs {
            let now = f.clock.now();
            // The sweeper, every 250 ms (LEASE_TTL / 4), as in production;
            // its refunds are store calls too.
            let sweep = now - swept >= Duration::from_millis(250);
            if sweep {
                swept = now;
            }
            let before = f.scripted.calls();
            if sweep {
                for node in &f.nodes {
                    give_back(node.inner.as_ref(), node.table.ended(now, false)).await;
                }
            }
            let warm = now - start < Duration::from_secs(1);
            let k = (i.wrapping_mul(0x9E37_79B9) >> 7) % shards;
            let check = &checks[k as usize];
            if admitted(&f.nodes[i as usize % nodes], check).await {
                out.admitted.push(now - start);
            }
            let ideal = &mut ideal[k as usize];
            let (d, state) = part.decide(ideal.take(), 1, now);
            *ideal = Some(state);
            out.ideal += u64::from(d.is_allowed());
            if !warm {
                out.decisions += 1;
                out.calls += f.scripted.calls() - before;
            }
            f.clock.advance(gap);
        }
        out
    }

    /// The most admitted within one window of `period` aligned to the
    /// clock (the fleet's clock starts on a whole second).
    fn most_in_a_window(admitted: &[Duration], period: Duration) -> u64 {
        let mut per = std::collections::HashMap::<u128, u64>::new();
        for t in admitted {
            *per.entry(t.as_nanos() / period.as_nanos()).or_default() += 1;
        }
        per.values().copied().max().unwrap_or(0)
    }

    #[tokio::test]
    async fn a_key_in_overload_costs_a_store_call_per_batch_and_keeps_its_bound() {
        let second = Duration::from_secs(1);
        let secs = 6;
        for a in [
            AlgorithmName::FixedWindow,
            AlgorithmName::SlidingWindow,
            AlgorithmName::TokenBucket,
        ] {
            // 100 per second per instance: each instance decides at least
            // 150 a second at 1.5x, above LEASE_MIN_RATE.
            for nodes in [2u64, 4] {
                let limit = 100 * nodes;
                let burst = (a == AlgorithmName::TokenBucket).then_some(2 * limit);
                let limiter = Limiter::new(a, limit, second, burst).expect("valid");
                let batch = LeaseOptions::default().largest_batch(limiter.capacity());
                let nodes = nodes as usize;
                for (factor, shards) in [(1.5, 1), (5.0, 1), (3.0, 2)] {
                    let o = overload(limiter, nodes, factor, secs, shards).await;
                    let per = o.calls as f64 / o.decisions as f64;
                    let what = format!(
                        "{a}, {nodes} instances, {factor}x, {shards} shards: admitted {} (ideal {}), {} calls for {} decisions ({per:.3})",
                        o.admitted.len(),
                        o.ideal,
                        o.calls,
                        o.decisions
                    );
                    println!("{what}");
                    let mut windows = std::collections::BTreeMap::<u64, u64>::new();
                    for t in &o.admitted {
                        *windows.entry(t.as_secs()).or_default() += 1;
                    }
                    println!("  admitted per second {:?}", windows.values());
                    // Admitted: never above the algorithm's own bound.
                    if a == AlgorithmName::TokenBucket {
                        for (n, t) in o.admitted.iter().enumerate() {
                            let refilled = (t.as_secs_f64() * limit as f64).floor() as usize;
                            let most = 2 * limit as usize + refilled;
                            assert!(n < most + 1, "burst + rate × elapsed: {what}");
                        }
                    } else {
                        assert!(most_in_a_window(&o.admitted, second) <= limit, "{what}");
                    }
                    // Under-admission: at most instances × batch per period.
                    let slack = nodes as u64 * batch * secs;
                    assert!(o.admitted.len() as u64 + slack >= o.ideal, "{what}");
                    assert!(o.admitted.len() as u64 <= o.ideal + batch, "{what}");
                    assert!(per <= 0.1, "store calls: {what}");
                }
            }
        }
    }

    #[tokio::test]
    async fn concurrent_requests_wait_for_one_take() {
        let f = fleet(1);
        let check = leased("k", minute(100_000, AlgorithmName::FixedWindow));
        // Hot (1,000 decisions this second), with no lease out: 64
        // requests at once take one batch and wait for it.
        for _ in 0..1_000 {
            admitted(&f.nodes[0], &check).await;
        }
        f.nodes[0].return_all().await;
        let before = f.scripted.calls();
        let node = &f.nodes[0];
        let all = futures::future::join_all((0..64).map(|_| admitted(node, &check))).await;
        assert!(all.iter().all(|ok| *ok));
        let calls = f.scripted.calls() - before;
        assert_eq!(calls, 1, "store calls for 64 concurrent requests");
    }
}
