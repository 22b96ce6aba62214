//! The demand board: per quota (one rule's limit for one set of descriptor
//! values), each Envoy's reported demand and assigned share, shared by
//! every instance that serves it. On Redis the board is one hash per quota
//! (`store::redis::RedisBoard`), so instances on one Redis split one
//! limit; on memory it is this instance's ([`MemoryBoard`]).
//!
//! # The bound
//!
//! An exchange is atomic on the board and caps what it assigns so that the
//! live assignments on a board never add up to more than the quota's rate:
//! an Envoy that wants more than the others leave gets what they leave, and
//! the rest at a later report, once the others' shares have moved down.
//! A line lives until its expiry (the assignment's TTL), so the share of an
//! Envoy that vanished without closing its stream returns within one TTL;
//! a closed stream's lines leave at once.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use parking_lot::Mutex;

use crate::limiter::Clock;

/// One Envoy's line on a board.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Line {
    /// Requests per second it reported (allowed + denied).
    pub demand: f64,
    /// Requests per second it is assigned.
    pub assigned: f64,
    /// When the line expires, in ms of the board's clock.
    pub expires_at_ms: u64,
}

/// What an exchange answers.
#[derive(Debug, Clone, PartialEq)]
pub struct Exchanged {
    /// What the Envoy now holds (requests per second).
    pub assigned: f64,
    /// The demands of the other live Envoys on the board.
    pub others: Vec<f64>,
}

/// The board could not be reached or answered nonsense.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("demand board: {0}")]
pub struct BoardError(pub String);

/// Where instances share each quota's demand and assignments.
#[async_trait]
pub trait DemandBoard: Send + Sync + std::fmt::Debug {
    /// Drops the expired lines of `quota`'s board, then writes `me`'s line:
    /// its `demand`, and as its assignment `want` if given, else what it
    /// held, either capped so that the board's assignments add up to at
    /// most `rate`; the line expires after `ttl`.
    async fn exchange(
        &self,
        quota: &str,
        me: &str,
        demand: f64,
        want: Option<f64>,
        rate: f64,
        ttl: Duration,
    ) -> Result<Exchanged, BoardError>;

    /// Takes `me`'s line off `quota`'s board.
    async fn leave(&self, quota: &str, me: &str) -> Result<(), BoardError>;
}

/// The exchange on one board's lines at `now_ms` (what [`DemandBoard::exchange`]
/// states; the Redis board's script does the same).
pub fn exchange(
    lines: &mut HashMap<String, Line>,
    me: &str,
    demand: f64,
    want: Option<f64>,
    rate: f64,
    now_ms: u64,
    expires_at_ms: u64,
) -> Exchanged {
    lines.retain(|_, l| l.expires_at_ms > now_ms);
    let mut others = Vec::with_capacity(lines.len());
    let mut taken = 0.0;
    let mut held = 0.0;
    for (who, l) in lines.iter() {
        if who == me {
            held = l.assigned;
        } else {
            taken += l.assigned;
            others.push(l.demand);
        }
    }
    let room = (rate - taken).max(0.0);
    let assigned = want.unwrap_or(held).clamp(0.0, room);
    lines.insert(
        me.to_string(),
        Line {
            demand,
            assigned,
            expires_at_ms,
        },
    );
    Exchanged { assigned, others }
}

/// Boards of one instance (the memory store's, or memcache's).
#[derive(Debug)]
pub struct MemoryBoard {
    boards: Mutex<Boards>,
    clock: Arc<dyn Clock>,
}

/// The boards, and the exchanges since the last sweep of them all.
#[derive(Debug, Default)]
struct Boards {
    by_quota: HashMap<String, HashMap<String, Line>>,
    since_sweep: u32,
}

/// Every this many exchanges, boards whose lines all expired are dropped,
/// so the map holds the live quotas and at most this many more.
const SWEEP_EVERY: u32 = 1024;

impl MemoryBoard {
    /// Boards on `clock`.
    pub fn new(clock: Arc<dyn Clock>) -> MemoryBoard {
        MemoryBoard {
            boards: Mutex::new(Boards::default()),
            clock,
        }
    }

    fn now_ms(&self) -> u64 {
        u64::try_from(self.clock.now().as_millis()).unwrap_or(u64::MAX)
    }
}

#[async_trait]
impl DemandBoard for MemoryBoard {
    async fn exchange(
        &self,
        quota: &str,
        me: &str,
        demand: f64,
        want: Option<f64>,
        rate: f64,
        ttl: Duration,
    ) -> Result<Exchanged, BoardError> {
        let now = self.now_ms();
        let expires = now.saturating_add(u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX));
        let mut boards = self.boards.lock();
        boards.since_sweep += 1;
        if boards.since_sweep >= SWEEP_EVERY {
            boards.since_sweep = 0;
            boards
                .by_quota
                .retain(|_, b| b.values().any(|l| l.expires_at_ms > now));
        }
        let lines = boards.by_quota.entry(quota.to_string()).or_default();
        Ok(exchange(lines, me, demand, want, rate, now, expires))
    }

    async fn leave(&self, quota: &str, me: &str) -> Result<(), BoardError> {
        let mut boards = self.boards.lock();
        if let Some(lines) = boards.by_quota.get_mut(quota) {
            lines.remove(me);
            if lines.is_empty() {
                boards.by_quota.remove(quota);
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn an_envoy_gets_what_the_others_leave() {
        let mut lines = HashMap::new();
        let a = exchange(&mut lines, "a", 80.0, Some(80.0), 100.0, 0, 1_000);
        assert_eq!(a.assigned, 80.0);
        let b = exchange(&mut lines, "b", 60.0, Some(50.0), 100.0, 0, 1_000);
        assert_eq!((b.assigned, b.others), (20.0, vec![80.0]));
        // a moves down; b then gets its 50.
        exchange(&mut lines, "a", 80.0, Some(50.0), 100.0, 1, 1_000);
        assert_eq!(
            exchange(&mut lines, "b", 60.0, Some(50.0), 100.0, 2, 1_000).assigned,
            50.0
        );
        // Keeping: what it held.
        assert_eq!(
            exchange(&mut lines, "b", 60.0, None, 100.0, 3, 1_000).assigned,
            50.0
        );
        // a's line expires: its share is free.
        let b = exchange(&mut lines, "b", 60.0, Some(90.0), 100.0, 1_000, 2_000);
        assert_eq!((b.assigned, b.others), (90.0, vec![]));
    }

    proptest! {
        /// Whatever the order of exchanges, the live assignments never add
        /// up past the rate.
        #[test]
        fn assignments_never_add_up_past_the_rate(steps in prop::collection::vec((0usize..5, 0.0f64..200.0, prop::option::of(0.0f64..200.0), 0u64..50), 1..200)) {
            let mut lines = HashMap::new();
            let mut now = 0;
            for (who, demand, want, dt) in steps {
                now += dt;
                exchange(&mut lines, &who.to_string(), demand, want, 100.0, now, now + 100);
                let sum: f64 = lines.values().filter(|l| l.expires_at_ms > now).map(|l| l.assigned).sum();
                prop_assert!(sum <= 100.0 + 1e-9, "{sum}");
            }
        }
    }
}
