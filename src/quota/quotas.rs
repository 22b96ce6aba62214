//! [`Quotas`]: RLQS as one part of the instance: the config it matches
//! buckets against, the statistics it counts them in, the store whose
//! boards it splits on (the same stack as the limits, so a board call has
//! the store's deadline and breaker), the clock, the options and the
//! instance's name; and the lines of every open stream, so that a share
//! that moves is pushed to its stream at once.
//!
//! # How a moved share reaches its Envoy
//!
//! - A step this instance runs (a report, a stream that closes, a bucket
//!   abandoned) answers every line of this instance on that board: each
//!   line whose assignment moved is pushed to its stream in that moment.
//! - A step another instance runs is seen at this instance's next sync:
//!   every [`QuotaOptions::sync`] one call per node re-reads (and
//!   re-splits) every board this instance holds lines on, which also
//!   frees the share of a line that expired (an Envoy gone silent).
//!
//! So an Envoy runs a stale assignment for at most one sync interval plus
//! a store round trip after another instance's step, and for a round trip
//! after this instance's. A newcomer gets its share in its first answer,
//! and until the others' pushes land their old shares overlap it: over a
//! span, the fleet admits at most `rate × t + Σ max_tokens × (1 +
//! changes)` plus, per change, the shrunk Envoys' old excess over one sync
//! interval (at most `rate × sync`).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use tokio::sync::mpsc;

use crate::config::LiveConfig;
use crate::limiter::Clock;
use crate::metrics::Stats;
use crate::store::board::{BoardOp, BoardReply, BoardStep, BoardWork};
use crate::store::{NodeId, Placement, Store, StoreExt};

/// The settings of RLQS.
#[derive(Debug, Clone, PartialEq)]
pub struct QuotaOptions {
    /// `RLQS_ASSIGNMENT_TTL`: how long an assignment holds without a new
    /// report, and how long a silent Envoy's line stays on its board.
    /// Envoy reads whole seconds (it truncates), so it is rounded up to
    /// whole seconds, at least 1.
    pub ttl: Duration,
    /// `RLQS_IDLE_TIMEOUT`: a bucket reported without requests this long is
    /// abandoned.
    pub idle: Duration,
    /// `RLQS_SYNC_INTERVAL`: how often the boards this instance holds
    /// lines on are read again, for the steps of other instances.
    pub sync: Duration,
    /// The most buckets one stream may hold; a report of more is refused.
    pub max_buckets: usize,
    /// `CACHE_KEY_PREFIX`, before every board's key.
    pub key_prefix: String,
    /// `STORE_FAILURE_MODE` and `STORE_FALLBACK_SHARE`: what a rule that
    /// sets no `failure_mode` does once its board has not answered for a
    /// TTL (the one failure policy, [`crate::config::OnFailure`]).
    pub failure: crate::config::FailureDefaults,
}

impl Default for QuotaOptions {
    fn default() -> QuotaOptions {
        QuotaOptions {
            ttl: Duration::from_secs(15),
            idle: Duration::from_secs(60),
            sync: Duration::from_millis(250),
            max_buckets: 4096,
            key_prefix: String::new(),
            failure: crate::config::FailureDefaults::default(),
        }
    }
}

/// A moved assignment for one line of a stream.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Push {
    /// The line (one bucket of the stream).
    pub line: u64,
    /// Its assignment, requests per second.
    pub assigned: f64,
}

/// How many pushes a stream may have waiting; past that a push is
/// dropped, and the next sync sends the line's assignment again.
pub(super) const PUSHES_WAITING: usize = 64;

/// What [`Quotas`] is made of.
#[derive(Debug, Clone)]
pub struct QuotaParts {
    /// The live config.
    pub config: LiveConfig,
    /// The statistics.
    pub stats: Arc<Stats>,
    /// The store stack (boards are [`Job::Boards`](crate::store::Job::Boards)).
    pub store: Arc<dyn Store>,
    /// Where the store keeps a key.
    pub placement: Arc<dyn Placement>,
    /// The time.
    pub clock: Arc<dyn Clock>,
    /// The options.
    pub options: QuotaOptions,
    /// This instance's name, unique in the fleet.
    pub instance: String,
}

/// RLQS's part of the instance; cheap to clone.
#[derive(Debug, Clone)]
pub struct Quotas(Arc<Inner>);

#[derive(Debug)]
struct Inner {
    config: LiveConfig,
    stats: Arc<Stats>,
    store: Arc<dyn Store>,
    placement: Arc<dyn Placement>,
    clock: Arc<dyn Clock>,
    options: QuotaOptions,
    instance: Arc<str>,
    next_line: AtomicU64,
    /// Per board, its rate and node, and the streams of this instance's
    /// lines on it.
    boards: Mutex<HashMap<String, Held>>,
}

#[derive(Debug)]
struct Held {
    rate: f64,
    node: Option<NodeId>,
    lines: HashMap<u64, mpsc::Sender<Push>>,
}

impl Quotas {
    /// RLQS over `parts`.
    pub fn new(parts: QuotaParts) -> Quotas {
        let mut options = parts.options;
        options.ttl = whole_seconds(options.ttl);
        Quotas(Arc::new(Inner {
            config: parts.config,
            stats: parts.stats,
            store: parts.store,
            placement: parts.placement,
            clock: parts.clock,
            options,
            instance: parts.instance.into(),
            next_line: AtomicU64::new(1),
            boards: Mutex::new(HashMap::new()),
        }))
    }

    pub(super) fn options(&self) -> &QuotaOptions {
        &self.0.options
    }

    pub(super) fn config(&self) -> &LiveConfig {
        &self.0.config
    }

    pub(super) fn stats(&self) -> &Stats {
        &self.0.stats
    }

    pub(super) fn clock(&self) -> &dyn Clock {
        self.0.clock.as_ref()
    }

    /// A line number no other line of this instance has.
    pub(super) fn new_line(&self) -> u64 {
        self.0.next_line.fetch_add(1, Ordering::Relaxed)
    }

    /// The node that serves board `key`.
    pub(super) fn node_of(&self, key: &str) -> Option<NodeId> {
        self.0.placement.node_of(key, false)
    }

    /// Runs `steps` on the boards in one call per node, keeps the registry
    /// of this instance's lines (a report adds its line with `stream`, a
    /// leave removes it), and pushes every moved line of another stream.
    pub(super) async fn share(
        &self,
        steps: Vec<BoardStep>,
        stream: &mpsc::Sender<Push>,
    ) -> BoardReply {
        if steps.is_empty() {
            return Vec::new();
        }
        {
            let mut boards = self.0.boards.lock();
            for s in &steps {
                match s.op {
                    BoardOp::Report { line, .. } => {
                        let held = boards.entry(s.key.clone()).or_insert_with(|| Held {
                            rate: s.rate,
                            node: s.node.clone(),
                            lines: HashMap::new(),
                        });
                        held.rate = s.rate;
                        held.node.clone_from(&s.node);
                        held.lines.insert(line, stream.clone());
                    }
                    BoardOp::Leave { line } => {
                        if let Some(held) = boards.get_mut(&s.key) {
                            held.lines.remove(&line);
                            if held.lines.is_empty() {
                                boards.remove(&s.key);
                            }
                        }
                    }
                    BoardOp::Sync => {}
                }
            }
        }
        self.run(steps, Some(stream)).await
    }

    /// Runs `steps` on the boards and pushes every moved line but
    /// `except`'s.
    async fn run(&self, steps: Vec<BoardStep>, except: Option<&mpsc::Sender<Push>>) -> BoardReply {
        let work = BoardWork {
            instance: Arc::clone(&self.0.instance),
            ttl: self.0.options.ttl,
            steps,
        };
        let reply = self.0.store.share(&work, None).await;
        self.push(&work.steps, &reply, except);
        reply
    }

    /// Re-reads every board this instance holds lines on and pushes what
    /// moved; one call per node.
    pub async fn sync(&self) {
        let steps: Vec<BoardStep> = self
            .0
            .boards
            .lock()
            .iter()
            .map(|(key, held)| BoardStep {
                key: key.clone(),
                node: held.node.clone(),
                rate: held.rate,
                op: BoardOp::Sync,
            })
            .collect();
        if !steps.is_empty() {
            self.run(steps, None).await;
        }
    }

    /// Syncs every [`QuotaOptions::sync`] until the task is aborted.
    pub fn spawn_sync(&self) -> tokio::task::JoinHandle<()> {
        let quotas = self.clone();
        tokio::spawn(async move {
            let mut every = tokio::time::interval(quotas.0.options.sync);
            every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                every.tick().await;
                quotas.sync().await;
            }
        })
    }

    /// Sends each answered line its assignment, but to `except`'s stream
    /// (it reads its own answer). A line not on its board any more (it
    /// expired) is sent nothing: its Envoy's assignment expired with it.
    fn push(&self, steps: &[BoardStep], reply: &BoardReply, except: Option<&mpsc::Sender<Push>>) {
        let boards = self.0.boards.lock();
        for (step, answer) in steps.iter().zip(reply) {
            let (Ok(shares), Some(held)) = (answer, boards.get(&step.key)) else {
                continue;
            };
            for (line, tx) in &held.lines {
                if except.is_some_and(|e| e.same_channel(tx)) {
                    continue;
                }
                let Some(assigned) = shares.of(*line) else {
                    continue;
                };
                // A full queue drops it: the next sync sends it again.
                let _ = tx.try_send(Push {
                    line: *line,
                    assigned,
                });
            }
        }
    }
}

/// `d` rounded up to whole seconds, at least one: what Envoy can hold.
fn whole_seconds(d: Duration) -> Duration {
    let secs = d.as_secs() + u64::from(d.subsec_nanos() > 0);
    Duration::from_secs(secs.max(1))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_ttl_is_whole_seconds_and_at_least_one() {
        assert_eq!(whole_seconds(Duration::ZERO), Duration::from_secs(1));
        assert_eq!(
            whole_seconds(Duration::from_millis(300)),
            Duration::from_secs(1)
        );
        assert_eq!(
            whole_seconds(Duration::from_millis(1_500)),
            Duration::from_secs(2)
        );
        assert_eq!(
            whole_seconds(Duration::from_secs(15)),
            Duration::from_secs(15)
        );
    }
}
