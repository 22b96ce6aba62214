//! Stores: where the state of the limits lives.
//!
//! Every store, and every layer that wraps one, implements one operation,
//! [`Store::execute`]: a request's store work as one [`Work`] of items (the
//! original's fixed-window increments, or the checks decided all or
//! nothing), each item carrying what to do when the store cannot answer it
//! ([`OnFailure`]), and one answer per item. One failed Redis node fails only
//! the items it serves. The decision itself is pure arithmetic in
//! [`crate::limiter`]; a store's job is to make the read-modify-write
//! atomic. Resilience (deadline, breaker, fallback, in
//! [`crate::resilience`]) wraps a `Store` through that one operation and
//! never the other way round; [`StoreExt`] gives the two shapes of work as
//! plain calls over any stack.
//!
//! - [`memory`]: the embedded store, in-process;
//! - [`redis`]: Redis single, sentinel or cluster, shared by a fleet;
//! - [`memcache`]: the original's fixed windows in memcached;
//! - [`key`]: the byte-exact cache-key format shared with the original.

pub mod key;
pub mod memcache;
pub mod memory;
pub mod redis;
pub mod tls;

use std::time::Duration;

use async_trait::async_trait;

use crate::limiter::fixed_window::Window;
use crate::limiter::{Decision, Limiter};

pub use memory::MemoryStore;
pub use redis::RedisStore;

/// One counter increment of a batch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Increment {
    /// The cache key (see [`key::fixed_window_key`]).
    pub key: String,
    /// What to add (0 reads the counter without consuming).
    pub hits: u64,
    /// The window the key counts; the counter expires when it ends.
    pub window: Window,
    /// Seconds a store with server-side expiry keeps the key: the window
    /// length plus the configured jitter (the original's EXPIRE argument).
    pub ttl_seconds: u64,
    /// The limit, used by [`IncrementPolicy::OnlyIfNoneWouldExceed`] and
    /// by the fallback floor.
    pub limit: u64,
    /// What to answer when the store cannot.
    pub on_failure: OnFailure,
    /// `Some(contract)`: this item is not a counter but the decision
    /// audit's exact reference of the item right before it in the batch
    /// (same node; see [`Store::reference_step`]), `key` its reference key
    /// and `hits` that item's. In the same atomic step as that counter's
    /// increment the store answers [`Answer::Count`] with what the
    /// reference held in its trailing window before (so the contract admits
    /// iff that plus `hits` is at most `limit`), and records `hits` in it
    /// iff the counter after the increment is within its limit (what the
    /// original's rule admitted).
    pub reference: Option<Limiter>,
}

/// How a batch is applied.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum IncrementPolicy {
    /// Every counter gets its hits (the original's default).
    #[default]
    Always,
    /// `STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT`: if any counter would go
    /// over its limit, only the counters that would go over are incremented;
    /// otherwise all are. Decided and applied atomically over the batch
    /// (the original reads, then writes, in two round trips).
    OnlyIfNoneWouldExceed,
}

/// One limit of a request for [`Store::check`]: decided first, committed
/// only if every binding limit of the batch passes.
#[derive(Debug, Clone, PartialEq)]
pub struct Check {
    /// The store key. Keys of one descriptor share a hash tag (see
    /// [`key::algorithm_key`]), so they are always on one slot.
    pub key: String,
    /// What decides.
    pub limit: CheckedLimit,
    /// The request's cost (`hits_addend`).
    pub cost: u64,
    /// Whether a denial of this limit stops the whole batch from being
    /// committed (false for shadow-mode limits, which only report).
    pub binding: bool,
    /// What to answer when the store cannot.
    pub on_failure: OnFailure,
    /// The rule allows token leasing (`lease: true`): a
    /// [`crate::hotkeys::Leases`] layer may answer it from a batch taken
    /// earlier. Stores ignore it.
    pub lease: bool,
}

/// The limit of a [`Check`].
#[derive(Debug, Clone, PartialEq)]
pub enum CheckedLimit {
    /// An opt-in algorithm, deciding at the store's time.
    Algorithm(Limiter),
    /// The original's fixed-window counter, on the original's key (which
    /// names its window) and value, so that an old instance shares it; but
    /// admitted only if `count + cost ≤ limit`, and counted only when the
    /// batch commits (`ALL_OR_NOTHING`).
    OriginalWindow {
        /// Requests per window.
        limit: u64,
        /// The window the key counts.
        window: Window,
        /// The key's TTL when created (window length plus jitter).
        ttl_seconds: u64,
    },
    /// The decision audit's exact reference of a rule's contract (see
    /// [`Limiter::reference_of`]): decided as its limiter at the store's
    /// time, never binding (a check carrying it has `binding: false`), and
    /// its cost recorded in it (see [`Limiter::record`]) whenever the batch
    /// commits, whatever it decided itself, so that it follows what was
    /// really admitted. Its answer's `count` is what the reference held in
    /// its trailing window before this check (0 for a bucket).
    Reference(Limiter),
}

/// The answer for one [`Check`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Checked {
    /// The limit's decision. For an [`CheckedLimit::OriginalWindow`] its
    /// durations are the store's and the caller takes them from the window.
    pub decision: Decision,
    /// For an [`CheckedLimit::OriginalWindow`]: the counter after the batch
    /// (incremented only if the batch committed); 0 otherwise.
    pub count: u64,
    /// The store's clock when it decided, since the Unix epoch (what a
    /// [`Commit::Refund`] of this admission names).
    pub at: Duration,
}

/// The answer for a batch of [`Check`]s.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckReply {
    /// One per check, in batch order.
    pub results: Vec<Checked>,
    /// Whether the admitted costs were committed: true iff every binding
    /// check was admitted.
    pub committed: bool,
}

/// What a rule wants when the store cannot answer for it (`failure_mode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum OnFailure {
    /// Fail the call, as the original does (gRPC UNKNOWN): the proxy's
    /// `failure_mode_deny` decides.
    #[default]
    Error,
    /// Deny: the descriptor is OVER_LIMIT until the store answers again.
    Closed,
    /// Allow up to a local floor: an in-process limiter of the same
    /// algorithm and window with `fallback` requests per window (per
    /// instance), never more than the rule's own limit.
    Open {
        /// The floor's limit (≥ 1).
        fallback: u64,
    },
}

/// The failure domain that serves a key: one Redis server (single,
/// sentinel's current primary, a Cluster primary). Breakers are kept per
/// node. Cheap to clone (it is looked up per item of every request).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct NodeId(pub std::sync::Arc<str>);

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

/// The two shapes of store work.
#[derive(Debug, Clone, PartialEq)]
pub enum Work {
    /// The original's fixed windows: every counter gets its hits per
    /// `policy`; each answer is [`Answer::Count`].
    Count {
        /// The counters.
        items: Vec<Increment>,
        /// How the batch is applied.
        policy: IncrementPolicy,
    },
    /// Limits decided at the store's time and committed per `commit`; each
    /// answer is [`Answer::Checked`].
    Check {
        /// The limits.
        items: Vec<Check>,
        /// Whether the batch may commit.
        commit: Commit,
    },
}

impl Work {
    /// How many items.
    pub fn len(&self) -> usize {
        match self {
            Work::Count { items, .. } => items.len(),
            Work::Check { items, .. } => items.len(),
        }
    }

    /// Whether there is nothing to do.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Item `i`'s key, whether it counts a one-second window (those may go to
    /// the per-second Redis) and its failure policy.
    pub fn item(&self, i: usize) -> (&str, bool, OnFailure) {
        match self {
            Work::Count { items, .. } => {
                let c = &items[i];
                (&c.key, c.window.length == 1, c.on_failure)
            }
            Work::Check { items, .. } => {
                let c = &items[i];
                let one_second = matches!(
                    c.limit,
                    CheckedLimit::OriginalWindow { window, .. } if window.length == 1
                );
                (&c.key, one_second, c.on_failure)
            }
        }
    }

    /// The same work over the items at `positions` only, in that order.
    pub fn select(&self, positions: &[usize]) -> Work {
        match self {
            Work::Count { items, policy } => Work::Count {
                items: positions.iter().map(|&i| items[i].clone()).collect(),
                policy: *policy,
            },
            Work::Check { items, commit } => Work::Check {
                items: positions.iter().map(|&i| items[i].clone()).collect(),
                commit: *commit,
            },
        }
    }
}

/// The answer for one item.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Answer {
    /// A counter's value after the increment ([`Work::Count`]).
    Count(u64),
    /// A check's answer ([`Work::Check`]).
    Checked(Checked),
    /// The store did not answer; the item's [`OnFailure`] did.
    ByPolicy(PolicyAnswer),
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
    /// For [`Work::Check`]: whether the admitted costs were committed (true
    /// iff every binding check that the store answered was admitted). Always
    /// true for [`Work::Count`].
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

    /// Whether a later retry may succeed: the store was not reached or did
    /// not answer in time. Only these are answered by a failure policy.
    pub fn is_transient(&self) -> bool {
        !matches!(self.kind, StoreErrorKind::Rejected)
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
    /// The store answered with an error (e.g. `WRONGTYPE`).
    Rejected,
}

/// A limit store, or a layer around one.
#[async_trait]
pub trait Store: Send + Sync + std::fmt::Debug {
    /// Runs `work` and answers each item.
    ///
    /// [`Work::Count`]: each counter's read-modify-write is atomic (no lost
    /// updates under any concurrency); with
    /// [`IncrementPolicy::OnlyIfNoneWouldExceed`] the whole batch is.
    ///
    /// [`Work::Check`]: every check is decided at the store's time and, iff
    /// every binding check is admitted (and `commit` allows), the admitted
    /// costs are committed: all or nothing. Checks on one key see each
    /// other in batch order. Where the store cannot commit the batch in one
    /// atomic step (keys on several Redis Cluster slots) it says how far it
    /// can be off in its doc.
    ///
    /// `deadline` is when the caller stops waiting: a store that talks to a
    /// server gives up on each node at that instant and fails that node's
    /// items with [`StoreErrorKind::Timeout`] (set by
    /// [`crate::resilience::Deadline`]).
    async fn execute(&self, work: &Work, deadline: Option<tokio::time::Instant>) -> Reply;

    /// The node that serves `key` (`one_second`: the key counts a
    /// one-second window), or `None` for a store that has nothing to fail
    /// (the memory store).
    fn node_of(&self, key: &str, one_second: bool) -> Option<NodeId> {
        let _ = (key, one_second);
        None
    }

    /// How this store can decide the decision audit's reference at
    /// `reference` beside the limit at `subject`.
    fn reference_step(&self, subject: &str, reference: &str) -> ReferenceStep {
        let _ = (subject, reference);
        ReferenceStep::Unsupported
    }
}

/// Where a store decides an audit reference relative to the decision it
/// audits ([`Store::reference_step`]).
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
    async fn execute(&self, work: &Work, deadline: Option<tokio::time::Instant>) -> Reply {
        (**self).execute(work, deadline).await
    }

    fn node_of(&self, key: &str, one_second: bool) -> Option<NodeId> {
        (**self).node_of(key, one_second)
    }

    fn reference_step(&self, subject: &str, reference: &str) -> ReferenceStep {
        (**self).reference_step(subject, reference)
    }
}

/// The two shapes of work as plain calls, over any store or stack; the first
/// failed item's error is the call's.
#[async_trait]
pub trait StoreExt: Store {
    /// Applies `batch` per `policy`; each counter's value after it.
    async fn increment(
        &self,
        batch: &[Increment],
        policy: IncrementPolicy,
    ) -> Result<Vec<u64>, StoreError> {
        let work = Work::Count {
            items: batch.to_vec(),
            policy,
        };
        let reply = self.execute(&work, None).await;
        reply
            .answers
            .into_iter()
            .map(|a| match a? {
                Answer::Count(n) => Ok(n),
                other => Err(unexpected(&other)),
            })
            .collect()
    }

    /// [`StoreExt::check_with`] with [`Commit::IfAllPass`].
    async fn check(&self, batch: &[Check]) -> Result<CheckReply, StoreError> {
        self.check_with(batch, Commit::IfAllPass).await
    }

    /// Decides `batch`; with [`Commit::Never`] nothing is taken.
    async fn check_with(&self, batch: &[Check], commit: Commit) -> Result<CheckReply, StoreError> {
        let work = Work::Check {
            items: batch.to_vec(),
            commit,
        };
        let reply = self.execute(&work, None).await;
        let results = reply
            .answers
            .into_iter()
            .map(|a| match a? {
                Answer::Checked(c) => Ok(c),
                other => Err(unexpected(&other)),
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(CheckReply {
            results,
            committed: reply.committed,
        })
    }
}

impl<S: Store + ?Sized> StoreExt for S {}

fn unexpected(answer: &Answer) -> StoreError {
    StoreError::new(
        StoreErrorKind::Rejected,
        format!("a store answered {answer:?} for the wrong kind of work"),
    )
}

/// Whether a [`Work::Check`] may commit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Commit {
    /// Commit iff every binding check passes.
    #[default]
    IfAllPass,
    /// Decide only.
    Never,
    /// Give back each check's `cost`, which a committed batch decided at
    /// `taken_at` (the answer's [`Checked::at`]) admitted and nobody used:
    /// see [`Limiter::refund`] for what comes back (cost whose window has
    /// ended does not). Answers are those of a peek after the refund;
    /// failure policies do not answer a refund.
    Refund {
        /// The store time of the admission given back.
        taken_at: Duration,
    },
}
