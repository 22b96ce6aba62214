//! The demand boards RLQS splits each limit on: per quota (one rule's
//! limit for one set of descriptor values), a line per Envoy bucket that
//! enforces it, with its reported demand, its assignment and its expiry.
//! Every store keeps boards ([`crate::store::Job::Boards`]): Redis one
//! hash per quota (`store::redis`'s `board.lua`), shared by every instance
//! on it; the memory store and memcache this instance's own
//! ([`MemoryBoards`]).
//!
//! # The split
//!
//! Every step on a board drops its expired lines, applies the step, and
//! re-splits the board's rate over every live line at once
//! ([`crate::limiter::share::resplit`]): a newcomer gets its share in the
//! step that adds it, the others' shares shrink in that same step, and a
//! leaver's share goes to the others in the step that removes it (or the
//! first step after its line expired). The assignments on a board never
//! add up past its rate. What an Envoy runs lags its line by the time its
//! instance takes to push the new assignment; that lag is the RLQS
//! layer's to bound (see [`crate::quota`]).
//!
//! A step answers the assignments of the lines of the calling instance on
//! that board, so the instance can push each one to its stream.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;

use super::StoreError;
use crate::limiter::share::resplit;
use crate::limiter::Clock;
use crate::store::NodeId;

/// What a step does to its board.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum BoardOp {
    /// Writes line `line`'s `demand` (requests per second) and renews it
    /// for the work's TTL; a new line starts with no assignment.
    Report {
        /// The line, unique in its instance.
        line: u64,
        /// Requests per second.
        demand: f64,
    },
    /// Takes line `line` off.
    Leave {
        /// The line.
        line: u64,
    },
    /// Only drops the expired lines and re-splits.
    Sync,
}

/// One board's step.
#[derive(Debug, Clone, PartialEq)]
pub struct BoardStep {
    /// The board's key ([`crate::store::key::board_key`]).
    pub key: String,
    /// The node that serves it (from the store's placement); `None`:
    /// nothing to fail.
    pub node: Option<NodeId>,
    /// The quota's rate, requests per second.
    pub rate: f64,
    /// What to do.
    pub op: BoardOp,
}

/// One instance's steps on the boards, in one call per node.
#[derive(Debug, Clone, PartialEq)]
pub struct BoardWork {
    /// The calling instance's name, unique in the fleet: its lines are
    /// `<instance>/<line>`.
    pub instance: Arc<str>,
    /// How long a reported line lives without another report.
    pub ttl: Duration,
    /// The steps, at most one per board.
    pub steps: Vec<BoardStep>,
}

/// What a step answers: the calling instance's lines on the board after
/// it, with their assignments (requests per second).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Assignments {
    /// (line, assigned).
    pub lines: Vec<(u64, f64)>,
}

impl Assignments {
    /// Line `line`'s assignment, if it is on the board.
    pub fn of(&self, line: u64) -> Option<f64> {
        self.lines.iter().find(|(l, _)| *l == line).map(|(_, a)| *a)
    }
}

/// One answer per step, in order.
pub type BoardReply = Vec<Result<Assignments, StoreError>>;

/// One line of a board.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Line {
    /// Requests per second it reported.
    pub demand: f64,
    /// Requests per second it is assigned.
    pub assigned: f64,
    /// When the line expires, in ms of the board's clock.
    pub expires_at_ms: u64,
}

/// The name of `instance`'s line `line` on a board.
pub fn line_name(instance: &str, line: u64) -> String {
    format!("{instance}/{line}")
}

/// `step` on one board's `lines` at `now_ms` (what the Redis board's
/// script does too): drop the expired lines, apply the step, re-split.
pub fn apply(
    lines: &mut HashMap<String, Line>,
    instance: &str,
    ttl: Duration,
    step: &BoardStep,
    now_ms: u64,
) -> Assignments {
    lines.retain(|_, l| l.expires_at_ms > now_ms);
    match step.op {
        BoardOp::Report { line, demand } => {
            let expires_at_ms =
                now_ms.saturating_add(u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX));
            let entry = lines.entry(line_name(instance, line)).or_insert(Line {
                demand,
                assigned: 0.0,
                expires_at_ms,
            });
            entry.demand = demand;
            entry.expires_at_ms = expires_at_ms;
        }
        BoardOp::Leave { line } => {
            lines.remove(&line_name(instance, line));
        }
        BoardOp::Sync => {}
    }
    // A fixed order: every instance re-splits a board alike.
    let mut names: Vec<&String> = lines.keys().collect();
    names.sort();
    let demands: Vec<f64> = names.iter().map(|n| lines[*n].demand).collect();
    let held: Vec<f64> = names.iter().map(|n| lines[*n].assigned).collect();
    let split = resplit(step.rate, &demands, &held);
    let names: Vec<String> = names.into_iter().cloned().collect();
    let prefix = format!("{instance}/");
    let mut mine = Vec::new();
    for (name, assigned) in names.iter().zip(split) {
        if let Some(l) = lines.get_mut(name) {
            l.assigned = assigned;
        }
        if let Some(line) = name
            .strip_prefix(&prefix)
            .and_then(|n| n.parse::<u64>().ok())
        {
            mine.push((line, assigned));
        }
    }
    mine.sort_by_key(|(l, _)| *l);
    Assignments { lines: mine }
}

/// Boards of one instance (the memory store's, or memcache's): each
/// instance splits alone.
#[derive(Debug)]
pub struct MemoryBoards {
    boards: Mutex<Boards>,
    clock: Arc<dyn Clock>,
}

/// The boards, and the steps since the last sweep of them all.
#[derive(Debug, Default)]
struct Boards {
    by_quota: HashMap<String, HashMap<String, Line>>,
    since_sweep: u32,
}

/// Every this many steps, boards whose lines all expired are dropped, so
/// the map holds the live quotas and at most this many more.
const SWEEP_EVERY: u32 = 1024;

impl MemoryBoards {
    /// Boards on `clock`.
    pub fn new(clock: Arc<dyn Clock>) -> MemoryBoards {
        MemoryBoards {
            boards: Mutex::new(Boards::default()),
            clock,
        }
    }

    /// Every step of `work`, each atomic.
    pub fn share(&self, work: &BoardWork) -> BoardReply {
        let now = u64::try_from(self.clock.now().as_millis()).unwrap_or(u64::MAX);
        let mut boards = self.boards.lock();
        boards.since_sweep = boards
            .since_sweep
            .saturating_add(u32::try_from(work.steps.len()).unwrap_or(u32::MAX));
        if boards.since_sweep >= SWEEP_EVERY {
            boards.since_sweep = 0;
            boards
                .by_quota
                .retain(|_, b| b.values().any(|l| l.expires_at_ms > now));
        }
        work.steps
            .iter()
            .map(|step| {
                let lines = boards.by_quota.entry(step.key.clone()).or_default();
                let shares = apply(lines, &work.instance, work.ttl, step, now);
                if lines.is_empty() {
                    boards.by_quota.remove(&step.key);
                }
                Ok(shares)
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::limiter::ManualClock;
    use proptest::prelude::*;

    const TTL: Duration = Duration::from_secs(1);

    fn step(op: BoardOp) -> BoardStep {
        BoardStep {
            key: "b".into(),
            node: None,
            rate: 10.0,
            op,
        }
    }

    fn report(line: u64, demand: f64) -> BoardStep {
        step(BoardOp::Report { line, demand })
    }

    #[test]
    fn a_newcomer_gets_its_share_in_the_step_that_adds_it() {
        let mut lines = HashMap::new();
        let a = apply(&mut lines, "i1", TTL, &report(1, 30.0), 0);
        assert_eq!(a.of(1), Some(10.0));
        // Another instance's newcomer, counted as wanting the whole rate.
        let b = apply(&mut lines, "i2", TTL, &report(1, 10.0), 10);
        assert_eq!(b.lines, vec![(1, 5.0)]);
        // The first instance sees its line shrunk, at its next step.
        let a = apply(&mut lines, "i1", TTL, &step(BoardOp::Sync), 20);
        assert_eq!(a.lines, vec![(1, 5.0)]);
    }

    #[test]
    fn a_leavers_share_goes_to_the_others_when_it_leaves_or_expires() {
        let mut lines = HashMap::new();
        apply(&mut lines, "i1", TTL, &report(1, 30.0), 0);
        apply(&mut lines, "i2", TTL, &report(1, 30.0), 0);
        let left = apply(&mut lines, "i2", TTL, &step(BoardOp::Leave { line: 1 }), 5);
        assert!(left.lines.is_empty());
        assert_eq!(
            apply(&mut lines, "i1", TTL, &step(BoardOp::Sync), 6).of(1),
            Some(10.0)
        );
        // A silent line expires after the TTL.
        apply(&mut lines, "i2", TTL, &report(1, 30.0), 10);
        assert_eq!(
            apply(&mut lines, "i1", TTL, &step(BoardOp::Sync), 11).of(1),
            Some(5.0)
        );
        let alone = apply(&mut lines, "i1", TTL, &step(BoardOp::Sync), 1_011);
        assert_eq!(alone.of(1), None, "its own line expired too");
        let back = apply(&mut lines, "i1", TTL, &report(1, 30.0), 1_012);
        assert_eq!(back.of(1), Some(10.0));
    }

    #[test]
    fn memory_boards_answer_each_step_and_forget_empty_boards() {
        let boards = MemoryBoards::new(Arc::new(ManualClock::at_secs(1)));
        let work = BoardWork {
            instance: "i".into(),
            ttl: TTL,
            steps: vec![report(1, 1.0), report(2, 1.0)],
        };
        let reply = boards.share(&work);
        assert_eq!(
            reply[1],
            Ok(Assignments {
                lines: vec![(1, 5.0), (2, 5.0)]
            })
        );
        let leave = BoardWork {
            steps: vec![
                step(BoardOp::Leave { line: 1 }),
                step(BoardOp::Leave { line: 2 }),
            ],
            ..work
        };
        boards.share(&leave);
        assert!(boards.boards.lock().by_quota.is_empty());
    }

    proptest! {
        /// Whatever the order of steps, the live assignments never add up
        /// past the rate.
        #[test]
        fn assignments_never_add_up_past_the_rate(steps in prop::collection::vec((0u64..5, 0u8..3, 0.0f64..200.0, 0u64..400), 1..200)) {
            let mut lines = HashMap::new();
            let mut now = 0;
            for (who, op, demand, dt) in steps {
                now += dt;
                let op = match op {
                    0 => BoardOp::Report { line: who, demand },
                    1 => BoardOp::Leave { line: who },
                    _ => BoardOp::Sync,
                };
                apply(&mut lines, "i", TTL, &step(op), now);
                let sum: f64 = lines.values().filter(|l| l.expires_at_ms > now).map(|l| l.assigned).sum();
                prop_assert!(sum <= 10.0 * (1.0 + 1e-9), "{sum}");
            }
        }
    }
}
