//! Coalescing decisions bound for one Redis node into one script call.
//!
//! fred already pipelines commands, but it writes (a system call) and wakes
//! its reader for every command; under load that, not Redis, bounds the
//! decisions per second. A [`Coalescer`] lets at most [`IN_FLIGHT`] script
//! calls run at once per node; decisions that arrive while they run wait in
//! a queue and go out together in the next call (at most [`MAX_BATCH_KEYS`] keys),
//! and a call about to go out first lets the tasks that are ready run, so
//! that decisions being made right now join it. At low load a decision
//! goes out alone and at once, so no latency is added; under load the
//! calls, writes and wake-ups per decision fall with the batch size.
//!
//! Each decision stays atomic (the script runs as a whole), and a decision
//! whose keys span slots is split by the caller before it gets here. What a
//! call carries is a [`Batch`]: the fixed-window script's decisions, or the
//! algorithms script's groups.

use std::future::Future;
use std::sync::Arc;

use tokio::runtime::Handle;
use tokio::sync::{mpsc, oneshot, Semaphore};

use crate::store::{StoreError, StoreErrorKind};

/// Script calls per node running at once.
pub(crate) const IN_FLIGHT: usize = 4;
/// Most keys in one script call (so at most as many decisions), unless
/// one decision alone has more (an all-or-nothing request's part on one
/// node): Redis runs one script at a time, so this bounds how long another
/// caller's call waits behind one.
pub(crate) const MAX_BATCH_KEYS: usize = crate::platform::workers::SLICE;
/// How many times a call about to go out lets ready tasks run first.
const JOIN_ROUNDS: usize = 1;
/// Decisions that may wait for a call before callers wait to queue.
const QUEUE: usize = 4096;

/// One script's way to one node: through a [`Coalescer`] on a single node
/// (plain or behind sentinels) and on a Cluster primary that takes the
/// per-node script, one call per item on a Cluster slot.
pub(crate) struct Lane<B: Batch> {
    batch: Arc<B>,
    queue: Option<Coalescer<B>>,
}

impl<B: Batch> std::fmt::Debug for Lane<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Lane")
            .field("coalesced", &self.queue.is_some())
            .finish_non_exhaustive()
    }
}

impl<B: Batch> Lane<B> {
    /// A lane for `batch`, coalescing on the runtime `on` if given.
    pub(crate) fn new(batch: B, on: Option<&Handle>) -> Lane<B> {
        let batch = Arc::new(batch);
        Lane {
            queue: on.map(|home| Coalescer::spawn(Arc::clone(&batch), home)),
            batch,
        }
    }

    /// What the lane's calls run on.
    pub(crate) fn batch(&self) -> &B {
        &self.batch
    }

    /// Decides one item.
    pub(crate) async fn run(&self, item: B::Item) -> Result<B::Answer, StoreError> {
        match &self.queue {
            Some(c) => c.run(item).await,
            // Boxed: a script call's future is kilobytes, and inline it
            // would be copied with every request's future on every path.
            None => Box::pin(self.batch.run(vec![item]))
                .await?
                .pop()
                .ok_or_else(|| {
                    StoreError::new(
                        StoreErrorKind::Rejected,
                        "a script call answered no decision",
                    )
                }),
        }
    }
}

/// One script call's worth of items for one node.
pub(crate) trait Batch: Send + Sync + 'static {
    /// One decision.
    type Item: Send + 'static;
    /// Its answer.
    type Answer: Send + 'static;

    /// How many keys `item` holds (what a call's length grows with).
    fn keys(item: &Self::Item) -> usize;

    /// Runs `items` in one call; one answer per item, in order.
    fn run(
        &self,
        items: Vec<Self::Item>,
    ) -> impl Future<Output = Result<Vec<Self::Answer>, StoreError>> + Send;
}

struct Job<B: Batch> {
    item: B::Item,
    reply: oneshot::Sender<Result<B::Answer, StoreError>>,
}

/// The queue in front of one node. Dropping it ends its task once the
/// queued decisions are answered.
pub(crate) struct Coalescer<B: Batch> {
    tx: mpsc::Sender<Job<B>>,
}

impl<B: Batch> std::fmt::Debug for Coalescer<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Coalescer").finish_non_exhaustive()
    }
}

fn gone() -> StoreError {
    StoreError::new(StoreErrorKind::Unavailable, "redis store is shutting down")
}

impl<B: Batch> Coalescer<B> {
    /// Starts the task that feeds `batch` on `home`, where its calls run.
    pub(crate) fn spawn(batch: Arc<B>, home: &Handle) -> Coalescer<B> {
        let (tx, mut rx) = mpsc::channel::<Job<B>>(QUEUE);
        let permits = Arc::new(Semaphore::new(IN_FLIGHT));
        home.spawn(async move {
            // A decision that would have taken the last call past
            // MAX_BATCH_KEYS: it leads the next one.
            let mut pending: Option<Job<B>> = None;
            loop {
                // Take a call slot first: while every slot is busy, decisions
                // queue up and leave together when one frees.
                let Ok(permit) = Arc::clone(&permits).acquire_owned().await else {
                    return;
                };
                let first = match pending.take() {
                    Some(job) => job,
                    None => match rx.recv().await {
                        Some(job) => job,
                        None => return,
                    },
                };
                let mut keys = B::keys(&first.item);
                let mut jobs = vec![first];
                // Let the request tasks that are ready run first, so that
                // their decisions join this call. Measured with the service
                // on one core, 64 requests in flight from `ratelimit-bench`
                // (and from h2load): no round, 1 decision per call and
                // 34k/s; one round, 24-36 per call and 74-77k/s (h2load:
                // 72k/s); two rounds, 73-74k/s (h2load: 69k/s) and a higher
                // half-load p99. At low load nothing else is ready and this
                // returns at once.
                for _ in 0..JOIN_ROUNDS {
                    tokio::task::yield_now().await;
                    while pending.is_none() {
                        match rx.try_recv() {
                            Ok(job) if keys + B::keys(&job.item) > MAX_BATCH_KEYS => {
                                pending = Some(job);
                            }
                            Ok(job) => {
                                keys += B::keys(&job.item);
                                jobs.push(job);
                            }
                            Err(_) => break,
                        }
                    }
                }
                // A caller that stopped waiting (its deadline passed while
                // the node was slow) is not sent: nothing it no longer
                // waits for is counted later.
                jobs.retain(|j| !j.reply.is_closed());
                if jobs.is_empty() {
                    continue;
                }
                let batch = Arc::clone(&batch);
                tokio::spawn(async move {
                    let (items, replies): (Vec<_>, Vec<_>) =
                        jobs.into_iter().map(|j| (j.item, j.reply)).unzip();
                    let result = batch.run(items).await;
                    drop(permit);
                    match result {
                        Ok(answers) if answers.len() == replies.len() => {
                            for (answer, reply) in answers.into_iter().zip(replies) {
                                let _ = reply.send(Ok(answer));
                            }
                        }
                        Ok(_) => {
                            let e = StoreError::new(
                                StoreErrorKind::Rejected,
                                "a script call answered the wrong number of decisions",
                            );
                            for reply in replies {
                                let _ = reply.send(Err(e.clone()));
                            }
                        }
                        Err(e) => {
                            for reply in replies {
                                let _ = reply.send(Err(e.clone()));
                            }
                        }
                    }
                });
            }
        });
        Coalescer { tx }
    }

    /// Decides one item through the queue.
    pub(crate) async fn run(&self, item: B::Item) -> Result<B::Answer, StoreError> {
        let (reply, answer) = oneshot::channel();
        self.tx
            .send(Job { item, reply })
            .await
            .map_err(|_| gone())?;
        answer.await.map_err(|_| gone())?
    }
}
