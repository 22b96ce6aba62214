//! Counter stores: where the state of the limits lives.
//!
//! A [`Store`] applies a batch of fixed-window increments (the counters of
//! one request) and returns each counter's value after the increment. The
//! decision itself is pure arithmetic in [`crate::limiter`]; the store's job
//! is to make the read-modify-write atomic. Resilience (timeouts, breaker,
//! fallback) wraps a `Store` as a decorator and never the other way round.
//!
//! - [`memory`]: the embedded store, in-process;
//! - [`redis`]: Redis single, sentinel or cluster, shared by a fleet;
//! - [`key`]: the byte-exact cache-key format shared with the original.

pub mod key;
pub mod memory;
pub mod redis;

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
    /// The limit, used only by [`IncrementPolicy::OnlyIfNoneWouldExceed`].
    pub limit: u64,
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

/// Why a store could not answer. Being over a limit is never an error.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct StoreError {
    /// What kind of failure.
    pub kind: StoreErrorKind,
    /// The underlying error text; the original returns it to the caller.
    pub message: String,
}

/// Classes of store failure, for the resilience layers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StoreErrorKind {
    /// Connection refused, reset, or the store is down: retrying later may work.
    Unavailable,
    /// No answer in time.
    Timeout,
    /// The store answered with an error (e.g. `WRONGTYPE`).
    Rejected,
}

impl StoreError {
    /// Whether a later retry may succeed.
    pub fn is_transient(&self) -> bool {
        !matches!(self.kind, StoreErrorKind::Rejected)
    }
}

/// A counter store.
#[async_trait]
pub trait Store: Send + Sync + std::fmt::Debug {
    /// Applies `batch` per `policy` and returns, in batch order, each
    /// counter's value after the increment. Each counter's read-modify-write
    /// is atomic (no lost updates under any concurrency); with
    /// [`IncrementPolicy::OnlyIfNoneWouldExceed`] the whole batch is.
    async fn increment(
        &self,
        batch: &[Increment],
        policy: IncrementPolicy,
    ) -> Result<Vec<u64>, StoreError>;

    /// Decides every check of `batch` at the store's time and, iff every
    /// binding check is admitted, commits the admitted costs: all or
    /// nothing. Checks on one key see each other in batch order. Where the
    /// store cannot commit the batch in one atomic step (keys on several
    /// Redis Cluster slots) it says how far it can be off in its doc.
    async fn check(&self, batch: &[Check]) -> Result<CheckReply, StoreError> {
        self.check_with(batch, Commit::IfAllPass).await
    }

    /// [`Store::check`] with the commit decided by `commit`: with
    /// [`Commit::Never`] every check is decided and nothing is taken (the
    /// request was refused elsewhere).
    async fn check_with(&self, batch: &[Check], commit: Commit) -> Result<CheckReply, StoreError>;
}

/// Whether a [`Store::check_with`] may commit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Commit {
    /// Commit iff every binding check passes.
    #[default]
    IfAllPass,
    /// Decide only.
    Never,
}
