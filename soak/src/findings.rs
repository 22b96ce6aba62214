//! What the checkers found: the broken bounds, and per rule, failover,
//! board and run the figures the report shows.

use std::collections::BTreeMap;

use super::log::FaultKind;

/// One broken bound.
#[derive(Debug, Clone)]
pub struct Violation {
    pub what: String,
    pub rule: &'static str,
    pub key: String,
    /// Seconds since the run started.
    pub at_s: f64,
    pub faults: Vec<usize>,
}

/// Per rule: what it got, and how close it came to its bound.
#[derive(Debug, Clone, Default)]
pub struct RuleFigures {
    pub name: &'static str,
    pub calls: u64,
    pub admitted: u64,
    pub refused: u64,
    pub errors: u64,
    /// Windows or spans checked.
    pub checked: u64,
    /// Largest admitted − algorithm's bound over any window (≤ 0: never
    /// above the limit); with the faults' allowance it must stay ≤ the
    /// allowance.
    pub worst_excess: i64,
    /// Largest allowance any window was given for faults.
    pub worst_allowance: u64,
    /// Answer times of its calls while no store fault was on.
    pub outside_faults: Latency,
}

/// A failover's measured loss: the most a window admitted above its limit
/// among the failover's keys, of the original's windows with the default
/// durability (`closed`, `fixed`) and with `durability: replicated`.
#[derive(Debug, Clone)]
pub struct Loss {
    pub fault: usize,
    pub kind: FaultKind,
    pub async_excess: i64,
    pub durable_excess: i64,
}

/// Answer times, ms.
#[derive(Debug, Clone, Default)]
pub struct Latency {
    pub count: usize,
    pub p50: f64,
    pub p99: f64,
    pub p999: f64,
    pub max: f64,
}

impl Latency {
    pub fn of(mut us: Vec<u64>) -> Latency {
        if us.is_empty() {
            return Latency::default();
        }
        us.sort_unstable();
        let at = |q: f64| us[((us.len() - 1) as f64 * q).round() as usize] as f64 / 1000.0;
        Latency {
            count: us.len(),
            p50: at(0.5),
            p99: at(0.99),
            p999: at(0.999),
            max: at(1.0),
        }
    }
}

/// The checker's findings.
#[derive(Debug, Default)]
pub struct Findings {
    pub violations: Vec<Violation>,
    pub rules: Vec<RuleFigures>,
    pub losses: Vec<Loss>,
    pub answered: u64,
    pub unanswered: u64,
    /// Calls to an instance while it was killed (refused: not unanswered).
    pub to_dead_instances: u64,
    pub beyond_answer_bound: u64,
    pub during_faults: Latency,
    pub outside_faults: Latency,
    /// Per fault: seconds from the store's return to its last error (0 if
    /// none after).
    pub recovery: Vec<(usize, FaultKind, f64)>,
    /// Per rule: answer times while no store fault was on.
    pub rule_latency: BTreeMap<&'static str, Latency>,
    /// Per RLQS board: its split, newcomers and reports.
    pub boards: Vec<BoardFigures>,
    /// Violations the run would have without the host stalls as faults.
    pub excused_by_host_stalls: usize,
    /// Calls sent in the warm-up, before the judged run, and how many of
    /// them were not answered or answered an error: reported, not judged.
    pub warm_up: (u64, u64),
}

impl Findings {
    pub fn within_answer_bound(&self) -> f64 {
        1.0 - self.beyond_answer_bound as f64 / self.answered.max(1) as f64
    }
}

/// What the checker found on one board.
#[derive(Debug, Clone, Default)]
pub struct BoardFigures {
    /// `rule=value`.
    pub board: String,
    pub joins: u64,
    pub reports: u64,
    /// Messages that told a bucket (answers and pushes).
    pub assignments: u64,
    /// Assignments that differed from the one the Envoy ran.
    pub changes: u64,
    pub samples: u64,
    /// The largest sum of the assignments in force at an instant, over the
    /// rate (pushes still under way included).
    pub worst_instant: f64,
    /// The largest sum counted against the bound (each Envoy at the least
    /// it runs within its lag), over the rate, with no store fault on.
    pub worst_settled: f64,
    /// The same while a store fault was on (each Envoy it cut off counted
    /// at the least it runs within its TTL).
    pub worst_in_faults: f64,
    /// A newcomer's first report to its first token bucket.
    pub first_share: Latency,
    /// The rate the board split (config A's), a second.
    pub rate: f64,
    /// Per second of the run: the largest sum in force at an instant.
    pub per_second: Vec<f64>,
}
