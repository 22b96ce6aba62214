//! Stores: where the state of the limits lives.
//!
//! Every store, and every layer that wraps one, implements one operation,
//! [`Store::call`], over one shape of work, a [`Job`] ([`job`]): a request's
//! limits ([`Job::Limits`]: one [`Work`] of [`Item`]s under one [`Policy`])
//! or steps on the RLQS demand boards ([`Job::Boards`]), and one answer
//! per entry, in one trip ([`StoreExt`] has a typed shorthand for each).
//! An item is a
//! key, a [`Limit`] (the original's counter, the original's window decided
//! all or nothing, an opt-in algorithm, or an audit reference), its
//! [`Hits`] (a cost taken, or given back by a refund), whether it binds, the node that serves it, and what its rule asks of the
//! layers ([`RuleOptions`]: its failure policy, whether it may be leased). One failed node fails only the items it serves.
//! The decision itself is pure arithmetic in [`crate::limiter`]; a store's
//! job is to make the read-modify-write atomic. Resilience (deadline,
//! breaker, leases, fallback, in [`crate::resilience`]) wraps a `Store`
//! through that one operation and never the other way round.
//!
//! - [`memory`]: the embedded store, in-process;
//! - [`redis`]: Redis single, sentinel or cluster, shared by a fleet;
//! - [`memcache`]: the original's fixed windows in memcached;
//! - [`key`]: the byte-exact cache-key format shared with the original;
//! - [`board`]: the demand boards RLQS splits each limit on
//!   ([`Job::Boards`]: this instance's own in memory and memcache, a
//!   fleet's on Redis);
//! - [`overrides`]: the per-tenant overrides' book ([`Job::Overrides`]:
//!   this instance's own in memory and memcache, a fleet's on Redis);
//! - [`job`]: what every kind of job is to the layers.

pub mod board;
pub mod job;
pub mod key;
pub mod memcache;
pub mod memory;
pub mod overrides;
pub mod redis;
pub mod testing;

use std::time::Duration;

use async_trait::async_trait;

use crate::limiter::{Decision, Limiter};

pub use crate::config::OnFailure;
pub use crate::limiter::fixed_window::OriginalWindow;
pub use job::{Done, Entries, Job, OwnedJob};
pub use memory::MemoryStore;
pub use redis::RedisStore;

/// What decides one [`Item`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Limit {
    /// The original's counter, counted the original's way: it takes its
    /// cost under every [`Policy`] but a refund, whatever the other items
    /// decide, and answers its value after ([`Decided::count`]). It is
    /// admitted iff that value is within `limit`; a binding counter that is
    /// not vetoes the commit of the other items.
    Counter(OriginalWindow),
    /// The original's counter on the same key and value (so an old instance
    /// shares it), decided before it is counted: admitted iff
    /// `count + cost ≤ limit`, and taken only when the work commits
    /// (`ALL_OR_NOTHING`).
    Window(OriginalWindow),
    /// An opt-in algorithm, deciding at the store's time and taken only
    /// when the work commits.
    Algorithm(Limiter),
    /// The decision audit's exact reference of a rule's contract (see
    /// [`Limiter::reference_of`]): decided as its limiter at the store's
    /// time, never binding, and its cost recorded in it iff its subject
    /// admitted the request, so that it follows what was really admitted.
    /// Its answer's `count` is what it held in its trailing window before
    /// (0 for a bucket).
    Reference {
        /// The contract.
        contract: Limiter,
        /// The position of the item it audits. A [`Limit::Counter`]
        /// subject admitted iff it was incremented and is within its limit
        /// after; any other subject, or `None` (the subject is decided in
        /// another step), iff the work committed.
        subject: Option<usize>,
    },
}

impl Limit {
    /// The original's window, for [`Limit::Counter`] and [`Limit::Window`].
    pub fn original_window(&self) -> Option<&OriginalWindow> {
        match self {
            Limit::Counter(w) | Limit::Window(w) => Some(w),
            _ => None,
        }
    }

    /// Whether the item counts a one-second window of the original's (those
    /// may go to the per-second Redis).
    pub fn one_second(&self) -> bool {
        self.original_window().is_some_and(|w| w.window.length == 1)
    }

    /// Whether the item is taken only when the work commits (everything
    /// but a counter).
    pub fn taken_on_commit(&self) -> bool {
        !matches!(self, Limit::Counter(_))
    }
}

/// One limit of a request's store work.
#[derive(Debug, Clone, PartialEq)]
pub struct Item {
    /// The store key. Keys of one descriptor's opt-in limits share a hash
    /// tag (see [`key::algorithm_key`]), so they are always on one slot.
    pub key: String,
    /// What decides.
    pub limit: Limit,
    /// What it does to its key: takes the request's cost (`hits_addend`;
    /// 0 reads without taking) or gives it back.
    pub hits: Hits,
    /// Whether a refusal of this item stops the work's other items from
    /// being taken (false for shadow-mode limits and quotas, which only
    /// report, and for references).
    pub binding: bool,
    /// The node that serves the key, named once by whoever built the work
    /// (from the store's [`Placement`]); `None`: nothing to fail, or not
    /// known. The breaker keeps its circuits by it.
    pub node: Option<NodeId>,
    /// What the item's rule asks of the layers and stores.
    pub rule: RuleOptions,
}

/// What an [`Item`] does to its key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Hits {
    /// Takes this many (0 reads without taking).
    Take(u64),
    /// Gives this many back (a descriptor with `is_negative_hits`): see
    /// [`Limiter::give_back`] for what comes back per algorithm; the
    /// original's counters go down, never below 0. It is applied at the
    /// store's time before the work's other items are decided, whatever
    /// the policy and they decide, never binds, and answers what a read of
    /// its key decides after (never a refusal of its own doing: its answer
    /// is the engine's to report as admitted).
    GiveBack(u64),
}

impl Hits {
    /// How many, taken or given back.
    pub fn count(self) -> u64 {
        match self {
            Hits::Take(n) | Hits::GiveBack(n) => n,
        }
    }

    /// Whether they are given back.
    pub fn gives_back(self) -> bool {
        matches!(self, Hits::GiveBack(_))
    }
}

/// What the rule an [`Item`] belongs to asks of the layers and stores
/// below the engine. Each option is read by the one layer or store it
/// names and ignored by every other: a feature that needs a rule's option
/// below the engine adds it here, never a field on [`Item`].
#[derive(Debug, Clone, PartialEq, Default)]
pub struct RuleOptions {
    /// The rule, if known: the memory store shares its key cap between
    /// rules by it (`None`: a share of its own, "unowned").
    pub id: Option<crate::config::tree::RuleId>,
    /// What [`crate::resilience::Fallback`] answers when the store cannot.
    pub on_failure: OnFailure,
    /// The rule allows token leasing (`lease: true`): the
    /// [`crate::resilience::Leases`] layer may answer it from a batch taken
    /// earlier.
    pub lease: bool,
    /// The rule asks for `durability: replicated`: a Redis store answers
    /// the item only once a replica acknowledged its count, and fails it
    /// (for its `on_failure` to answer) when none did within the deadline.
    /// A store with no replicas to ask (memory, memcache) ignores it.
    pub replicated: bool,
    /// The rule's fixed window is local-first, written back this often:
    /// the [`crate::resilience::Leases`] layer may admit it from this
    /// instance's view within its share (see
    /// [`crate::resilience::leases::local`]). Read for the original's
    /// windows only ([`Limit::Counter`], [`Limit::Window`]).
    pub sync_interval: Option<Duration>,
}

impl Item {
    /// A binding item of `limit` on `key` for `cost`, failing as the
    /// original does, on no named node.
    pub fn new(key: impl Into<String>, limit: Limit, cost: u64) -> Item {
        Item {
            key: key.into(),
            limit,
            hits: Hits::Take(cost),
            binding: true,
            node: None,
            rule: RuleOptions::default(),
        }
    }

    /// The same item giving its cost back (see [`Hits::GiveBack`]); it
    /// never binds.
    pub fn giving_back(mut self) -> Item {
        self.give_back_instead();
        self
    }

    /// Makes this item give its cost back (see [`Hits::GiveBack`]); it
    /// then never binds.
    pub fn give_back_instead(&mut self) {
        self.hits = Hits::GiveBack(self.hits.count());
        self.binding = false;
    }

    /// What the item takes when it is decided: its cost, or nothing when it
    /// gives back.
    pub fn taken(&self) -> u64 {
        match self.hits {
            Hits::Take(n) => n,
            Hits::GiveBack(_) => 0,
        }
    }

    /// How many hits it takes or gives back.
    pub fn cost(&self) -> u64 {
        self.hits.count()
    }

    /// Whether it gives its hits back.
    pub fn gives_back(&self) -> bool {
        self.hits.gives_back()
    }
}

/// How a [`Work`] is applied: one policy for every kind of item.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Policy {
    /// Counters take their cost; every other item is taken iff every
    /// binding item (counters included) is admitted: all or nothing.
    #[default]
    Commit,
    /// [`Policy::Commit`], with `STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT`
    /// for the counters: if any counter would go over its limit, only the
    /// counters that would go over are incremented; otherwise all are.
    /// Decided and applied in one atomic step per node (the original reads,
    /// then writes, in two round trips).
    CommitStopping,
    /// Decide only: counters still take their cost (the original counts
    /// every request), nothing else is taken.
    Decide,
    /// Give back each item's `cost`, which a committed work decided at
    /// `taken_at` (the answer's [`Decided::at`]) took and nobody used: see
    /// [`Limiter::refund`] for what comes back (cost whose window has ended
    /// does not). Counters are never given back. Answers are those of a
    /// [`Policy::Decide`] after the refund; failure policies do not answer
    /// a refund.
    Refund {
        /// The store time of the admission given back.
        taken_at: Duration,
    },
}

impl Policy {
    /// Whether the work may take its items taken on commit.
    pub fn commits(&self) -> bool {
        matches!(self, Policy::Commit | Policy::CommitStopping)
    }
}

/// A request's store work: its items and how they are applied.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Work {
    /// The items, in the order the answers come back.
    pub items: Vec<Item>,
    /// How they are applied.
    pub policy: Policy,
}

impl Work {
    /// `items` under `policy`.
    pub fn new(items: Vec<Item>, policy: Policy) -> Work {
        Work { items, policy }
    }

    /// How many items.
    pub fn len(&self) -> usize {
        self.items.len()
    }

    /// Whether there is nothing to do.
    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    /// Whether this is a request's work whose items are each decided on
    /// their own: the original's counters, which count whatever the others
    /// decide, with no reference following one and no
    /// `STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT` (which reads them all
    /// first). A store may run such a work in slices, each of its own, with
    /// the same answers; any other work is one atomic step per node, all or
    /// nothing. (The local-first write-back, [`Policy::Decide`], is one
    /// script call per node an interval by design, and is not sliced.)
    pub fn is_independent(&self) -> bool {
        self.policy == Policy::Commit
            && self
                .items
                .iter()
                .all(|c| matches!(c.limit, Limit::Counter(_)))
    }

    /// The same work over the items at `positions` only, in that order. A
    /// reference whose subject is left out follows the commit.
    pub fn select(&self, positions: &[usize]) -> Work {
        let items = positions
            .iter()
            .map(|&i| {
                let mut item = self.items[i].clone();
                if let Limit::Reference { subject, .. } = &mut item.limit {
                    *subject = subject.and_then(|s| positions.iter().position(|&p| p == s));
                }
                item
            })
            .collect();
        Work {
            items,
            policy: self.policy,
        }
    }
}

/// What the store decided for one item.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Decided {
    /// The item's decision. For an original window its durations are the
    /// store's, and callers take them from the window.
    pub decision: Decision,
    /// For an original window: its counter after the work (a
    /// [`Limit::Window`] incremented only if the work committed); for a
    /// reference: what it held before; 0 otherwise.
    pub count: u64,
    /// The store's clock when it decided, since the Unix epoch (what a
    /// [`Policy::Refund`] of this admission names).
    pub at: Duration,
}

/// The failure domain that serves a key: one Redis server (single,
/// sentinel's current primary, a Cluster primary). Breakers are kept per
/// node. Cheap to clone (it is looked up per item of every request), and
/// cheap to compare: two clones of one name are equal without reading it.
#[derive(Debug, Clone, Eq, PartialOrd, Ord)]
pub struct NodeId(pub std::sync::Arc<str>);

impl PartialEq for NodeId {
    fn eq(&self, other: &NodeId) -> bool {
        std::sync::Arc::ptr_eq(&self.0, &other.0) || self.0 == other.0
    }
}

/// By the name, as equality is.
impl std::hash::Hash for NodeId {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.0.hash(state);
    }
}

impl NodeId {
    /// The node named `name` (its address).
    pub fn new(name: &str) -> NodeId {
        NodeId(name.into())
    }
}

impl std::fmt::Display for NodeId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// The answer for one item.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Answer {
    /// The store decided.
    Decided(Decided),
    /// The store did not answer; the item's [`OnFailure`] did.
    ByPolicy(PolicyAnswer),
}

impl Answer {
    /// The decision, whoever made it.
    pub fn decision(&self) -> Decision {
        match self {
            Answer::Decided(d) => d.decision,
            Answer::ByPolicy(p) => p.decision,
        }
    }
}

/// What a failure policy answered for an item the store could not.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PolicyAnswer {
    /// `Deny` for a closed rule (retry: until the store is tried again, at
    /// least 1 s); the local floor's decision for an open one.
    pub decision: Decision,
    /// Whether the local floor decided (fail open) or the item was denied
    /// (fail closed).
    pub fell_back: bool,
}

/// The answers for a [`Work`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reply {
    /// One per item, in batch order.
    pub answers: Vec<Result<Answer, StoreError>>,
    /// Whether the items taken on commit were taken: the policy commits and
    /// every binding item that the store answered was admitted.
    pub committed: bool,
}

impl Reply {
    /// Every item failed with `error`.
    pub fn failed(len: usize, error: &StoreError) -> Reply {
        Reply {
            answers: vec![Err(error.clone()); len],
            committed: false,
        }
    }
}

/// Why a store could not answer. Being over a limit is never an error.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct StoreError {
    /// What kind of failure.
    pub kind: StoreErrorKind,
    /// The underlying error text; the original returns it to the caller.
    pub message: String,
    /// When the store will be tried again, if known (an open breaker's
    /// next probe).
    pub retry_after: Option<Duration>,
}

impl StoreError {
    /// An error of `kind` saying `message`.
    pub fn new(kind: StoreErrorKind, message: impl Into<String>) -> StoreError {
        StoreError {
            kind,
            message: message.into(),
            retry_after: None,
        }
    }
}

/// The message of a store call given up at its deadline: the original's
/// text for a deadline (Go's `context deadline exceeded`).
pub const DEADLINE_EXCEEDED: &str = "context deadline exceeded";

/// Classes of store failure, for the resilience layers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StoreErrorKind {
    /// Connection refused, reset, or the store is down: retrying later may work.
    Unavailable,
    /// No answer in time.
    Timeout,
    /// The node's breaker is open: nothing was sent.
    CircuitOpen,
    /// The caller's deadline left too little time to ask the store, so
    /// nothing was sent: not a failure of any node.
    Expired,
    /// The store answered with an error (e.g. `WRONGTYPE`).
    Rejected,
}

/// A limit store, or a layer around one: one operation, [`Store::call`],
/// over every kind of [`Job`].
#[async_trait]
pub trait Store: Send + Sync + std::fmt::Debug {
    /// Runs `job` and answers each of its entries, in one trip.
    ///
    /// For [`Job::Limits`]: every item is decided at the store's time,
    /// counters take their cost, and iff the policy commits and every
    /// binding item is admitted the items taken on commit are taken: all or
    /// nothing. Each read-modify-write is atomic (no lost updates under any
    /// concurrency), and items on one key see each other in work order.
    /// Where the store cannot apply the work in one atomic step (keys on
    /// several Redis Cluster slots) its doc says how far it can be off.
    ///
    /// For [`Job::Boards`]: each step is atomic on its board ([`board`]),
    /// one call per node. No failure policy answers a step: RLQS keeps a
    /// bucket's assignment when its board cannot answer.
    ///
    /// For [`Job::Overrides`]: each step is atomic on the book
    /// ([`overrides`]). No failure policy answers a step: a reader keeps
    /// the book it last read, and a write fails for its caller to retry.
    ///
    /// `deadline` is when the caller stops waiting: a store that talks to a
    /// server gives up on each node at that instant and fails that node's
    /// entries with [`StoreErrorKind::Timeout`] (set by
    /// [`crate::resilience::Deadline`]). A failed node fails only the
    /// entries it serves.
    async fn call(&self, job: Job<'_>, deadline: Option<tokio::time::Instant>) -> Done;
}

/// Typed shorthands over [`Store::call`], for every store and stack. Not
/// boxed: the call they make is the only future allocated.
pub trait StoreExt: Store {
    /// Runs a request's limits ([`Job::Limits`]).
    fn execute<'a>(
        &'a self,
        work: &'a Work,
        deadline: Option<tokio::time::Instant>,
    ) -> impl std::future::Future<Output = Reply> + Send + 'a {
        async move {
            self.call(Job::Limits(work), deadline)
                .await
                .into_reply(work)
        }
    }

    /// Runs steps on the RLQS demand boards ([`Job::Boards`]).
    fn share<'a>(
        &'a self,
        work: &'a board::BoardWork,
        deadline: Option<tokio::time::Instant>,
    ) -> impl std::future::Future<Output = board::BoardReply> + Send + 'a {
        async move {
            self.call(Job::Boards(work), deadline)
                .await
                .into_board_reply(work)
        }
    }
    /// Runs steps on the per-tenant overrides' book ([`Job::Overrides`]).
    fn book<'a>(
        &'a self,
        work: &'a overrides::BookWork,
        deadline: Option<tokio::time::Instant>,
    ) -> impl std::future::Future<Output = overrides::BookReply> + Send + 'a {
        async move {
            self.call(Job::Overrides(work), deadline)
                .await
                .into_book_reply(work)
        }
    }
}

impl<S: Store + ?Sized> StoreExt for S {}

/// Where a store keeps its keys: asked once per item by whoever builds the
/// work, never by a layer in the middle of a call.
pub trait Placement: Send + Sync + std::fmt::Debug {
    /// The node that serves `key` (`one_second`: the key counts a
    /// one-second window), or `None` for a store with nothing to fail.
    fn node_of(&self, key: &str, one_second: bool) -> Option<NodeId>;

    /// How the store can decide the decision audit's reference at
    /// `reference` beside the limit at `subject`.
    fn reference_step(&self, subject: &str, reference: &str) -> ReferenceStep;
}

/// The placement of a store in this process: no node to fail, every work
/// one atomic step (the memory store).
#[derive(Debug, Clone, Copy, Default)]
pub struct InProcess;

impl Placement for InProcess {
    fn node_of(&self, _key: &str, _one_second: bool) -> Option<NodeId> {
        None
    }

    fn reference_step(&self, _subject: &str, _reference: &str) -> ReferenceStep {
        ReferenceStep::Same
    }
}

/// Where a store decides an audit reference relative to the decision it
/// audits ([`Placement::reference_step`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReferenceStep {
    /// In the same atomic step (the memory store's locks; one Redis script
    /// on one node or Cluster slot): the comparison is exact.
    Same,
    /// In a step of its own on the same store (another Redis Cluster slot):
    /// decided concurrently with the decision, committed with it by
    /// reserve-then-refund, so requests in flight on the key at the same
    /// moment can be ordered differently by the two.
    Separate,
    /// The store cannot hold a reference (memcache).
    Unsupported,
}

#[async_trait]
impl<S: Store + ?Sized> Store for std::sync::Arc<S> {
    async fn call(&self, job: Job<'_>, deadline: Option<tokio::time::Instant>) -> Done {
        (**self).call(job, deadline).await
    }
}

#[cfg(test)]
mod tests {
    use super::NodeId;

    #[test]
    fn node_ids_are_equal_iff_their_names_are() {
        let a = NodeId::new("127.0.0.1:7000");
        assert_eq!(a, a.clone());
        assert_eq!(a, NodeId::new("127.0.0.1:7000"));
        assert_ne!(a, NodeId::new("127.0.0.1:7001"));
    }
}
