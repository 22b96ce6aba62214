//! The gRPC worker runtimes: one single-threaded tokio runtime per core,
//! each on a thread of its own (`grpc-N`).
//!
//! They are made before the store and the gRPC edge, apart from both, so
//! that each can put its per-worker part on them: the edge serves the
//! connections it hands a worker there, and the Redis store opens
//! connections that live there too. A request served on a worker then
//! reaches Redis and gets its answer without leaving the worker's thread
//! ([`current`] names the worker); a store connection owned by another
//! runtime would cost two cross-thread wake-ups per call.
//!
//! A worker runs until the last clone of its [`Workers`] is dropped; then
//! its runtime ends, and with it every task spawned on it.

use std::cell::Cell;
use std::sync::Arc;
use std::time::Duration;

use tokio::runtime::Handle;
use tokio::sync::oneshot;

/// The most work one request does between two turns of its worker's
/// other requests, in descriptors (or store items): a request of many
/// descriptors within the caps costs its neighbours at most this much work
/// a turn. The engine's lookup and plan yield every `SLICE` descriptors,
/// and the stores take a large work of counters in slices of `SLICE`.
pub const SLICE: usize = 64;

thread_local! {
    /// The worker the calling thread runs, if it is one.
    static CURRENT: Cell<Option<usize>> = const { Cell::new(None) };
}

/// Which worker runs the calling thread: `Some(i)` on worker `i`'s thread,
/// `None` anywhere else (the main runtime, a test, a blocking thread).
pub fn current() -> Option<usize> {
    CURRENT.with(Cell::get)
}

/// A worker thread or its runtime could not be made.
#[derive(Debug, thiserror::Error)]
#[error("cannot start gRPC worker {index}: {source}")]
pub struct WorkerError {
    /// Which worker.
    pub index: usize,
    /// The cause.
    #[source]
    pub source: std::io::Error,
}

/// The running workers (none with `GRPC_WORKERS=0`). Cheap to clone; the
/// workers stop when the last clone is dropped.
#[derive(Debug, Clone, Default)]
pub struct Workers {
    inner: Arc<Running>,
}

#[derive(Debug, Default)]
struct Running {
    handles: Vec<Handle>,
    /// The large-request lane's runtime (see [`Workers::large`]).
    large: Option<Handle>,
    /// Each worker's thread blocks on its receiver: dropping these ends
    /// the workers.
    _stop: Vec<oneshot::Sender<()>>,
}

impl Workers {
    /// No worker: everything runs on the caller's runtime.
    pub fn none() -> Workers {
        Workers::default()
    }

    /// Starts `n` workers.
    pub fn start(n: usize) -> Result<Workers, WorkerError> {
        let mut running = Running::default();
        for index in 0..n {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .map_err(|source| WorkerError { index, source })?;
            let handle = runtime.handle().clone();
            let (stop, stopped) = oneshot::channel::<()>();
            std::thread::Builder::new()
                .name(format!("grpc-{index}"))
                .spawn(move || {
                    CURRENT.with(|c| c.set(Some(index)));
                    // Runs what is spawned on `handle` until the stop.
                    runtime.block_on(async {
                        tokio::select! {
                            _ = stopped => {}
                            () = keep_a_timer_pending() => {}
                        }
                    });
                })
                .map_err(|source| WorkerError { index, source })?;
            running.handles.push(handle);
            running._stop.push(stop);
        }
        if n > 0 {
            let (large, stop) =
                start_large_lane(n).map_err(|source| WorkerError { index: n, source })?;
            running.large = Some(large);
            running._stop.push(stop);
        }
        Ok(Workers {
            inner: Arc::new(running),
        })
    }

    /// The large-request lane: a runtime of as many threads as workers
    /// (`grpc-large`), apart from them, on which a request of more than
    /// [`SLICE`] descriptors is decided. A worker's thread then runs small
    /// requests and only the decoding and encoding of large ones, so a small
    /// request never waits behind a large one's decision on its worker, and
    /// the system's scheduler shares the cores between the lane and the
    /// workers as between any threads (a worker woken for a small request
    /// runs at once if a core is free or busy with the lane's long work).
    /// `None` without workers.
    pub fn large(&self) -> Option<&Handle> {
        self.inner.large.as_ref()
    }

    /// How many workers run.
    pub fn len(&self) -> usize {
        self.inner.handles.len()
    }

    /// Whether there is no worker.
    pub fn is_empty(&self) -> bool {
        self.inner.handles.is_empty()
    }

    /// Each worker's runtime, in order: worker `i` is `handles()[i]`.
    pub fn handles(&self) -> &[Handle] {
        &self.inner.handles
    }
}

/// Starts the large-request lane's runtime of `threads` threads, owned by
/// a thread of its own that drops it when the returned sender is dropped.
fn start_large_lane(threads: usize) -> std::io::Result<(Handle, oneshot::Sender<()>)> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(threads)
        .thread_name("grpc-large")
        .enable_all()
        .build()?;
    let handle = runtime.handle().clone();
    let (stop, stopped) = oneshot::channel::<()>();
    std::thread::Builder::new()
        .name("grpc-large-rt".into())
        .spawn(move || {
            runtime.block_on(async {
                let _ = stopped.await;
            });
        })?;
    Ok((handle, stop))
}

/// How far ahead a worker's own timer is kept; request deadlines at
/// least this far away never wake the worker's timer driver.
const TIMER_PACE: Duration = Duration::from_millis(20);

/// Keeps a timer pending on the worker, never more than [`TIMER_PACE`]
/// ahead.
///
/// Tokio's timer driver remembers, at each turn, the earliest timer it
/// holds, and setting a timer earlier than that (or any timer after a
/// turn that found none) wakes the driver: a system call and a turn of the
/// event loop. A worker under load empties its timers between bursts (its
/// requests finish), and then each request of the next burst that sets a
/// store deadline paid that wake-up. With this timer always pending, a
/// deadline at least `TIMER_PACE` away is never the earliest, and the cost
/// is one wake-up per `TIMER_PACE` per worker.
async fn keep_a_timer_pending() {
    let mut tick = tokio::time::interval(TIMER_PACE);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn each_worker_knows_itself_and_others_know_none() {
        assert_eq!(current(), None);
        let workers = Workers::start(3).expect("starts");
        assert_eq!(workers.len(), 3);
        for (i, handle) in workers.handles().iter().enumerate() {
            let seen = handle.spawn(async { current() }).await.expect("runs");
            assert_eq!(seen, Some(i));
        }
        assert!(Workers::none().is_empty());
    }

    /// Write-like system calls made so far by the calling thread.
    fn writes_by_this_thread() -> u64 {
        let io =
            std::fs::read_to_string("/proc/thread-self/io").expect("Linux per-thread I/O counts");
        io.lines()
            .find_map(|l| l.strip_prefix("syscw: "))
            .and_then(|n| n.trim().parse().ok())
            .expect("a syscw line")
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn a_deadline_set_after_an_idle_turn_does_not_wake_the_worker() {
        use std::sync::atomic::{AtomicU64, Ordering};
        const ROUNDS: u64 = 200;
        let workers = Workers::start(1).expect("starts");
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<()>();
        // Rounds done, read by polling: a wake-up of this thread would be
        // a write by the worker too.
        let done = Arc::new(AtomicU64::new(0));
        let (total, writes) = std::sync::mpsc::channel();
        let seen = Arc::clone(&done);
        workers.handles()[0].spawn(async move {
            let before = writes_by_this_thread();
            while rx.recv().await.is_some() {
                // The worker parked waiting for this message with no
                // deadline of its own pending. A deadline like a store
                // call's, set while the request runs, then given up.
                let call = tokio::time::timeout(Duration::from_secs(1), tokio::task::yield_now());
                call.await.expect("in time");
                seen.fetch_add(1, Ordering::Release);
            }
            let _ = total.send(writes_by_this_thread() - before);
        });
        for round in 1..=ROUNDS {
            tx.send(()).expect("worker runs");
            // Bounded: at most 10 s a round.
            for _ in 0..50_000 {
                if done.load(Ordering::Acquire) >= round {
                    break;
                }
                std::thread::sleep(Duration::from_micros(200));
            }
            assert!(
                done.load(Ordering::Acquire) >= round,
                "the worker stopped answering"
            );
        }
        drop(tx);
        let writes = writes
            .recv_timeout(Duration::from_secs(10))
            .expect("counted");
        // Without a pending timer each round's deadline wakes the driver:
        // a write to its event fd, one per round.
        assert!(
            writes < ROUNDS / 10,
            "{writes} writes by the worker in {ROUNDS} rounds"
        );
    }

    #[tokio::test]
    async fn the_workers_stop_with_their_last_clone() {
        let workers = Workers::start(1).expect("starts");
        let handle = workers.handles()[0].clone();
        let (tx, mut rx) = oneshot::channel::<()>();
        // Never ends by itself: only the runtime's end drops it.
        handle.spawn(async move {
            let _tx = tx;
            std::future::pending::<()>().await
        });
        let clone = workers.clone();
        drop(workers);
        assert_eq!(
            rx.try_recv(),
            Err(oneshot::error::TryRecvError::Empty),
            "still running with a clone left"
        );
        drop(clone);
        tokio::time::timeout(std::time::Duration::from_secs(10), rx)
            .await
            .expect("the worker's tasks end with it")
            .expect_err("dropped, never sent");
    }
}
