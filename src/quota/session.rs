//! One RLQS stream's buckets: what each report of a bucket is answered
//! with, and what a moved share pushed to the stream sends. The gRPC
//! plumbing is `service::grpc::rlqs`; this is the decision.

use std::collections::HashMap;
use std::time::Duration;

use tokio::sync::mpsc;

use super::bucket::{EnvoyBucket, Quota};
use super::quotas::{Push, Quotas, PUSHES_WAITING};
use crate::config::Lookup;
use crate::config::OnFailure;
use crate::metrics;
use crate::store::board::{Assignments, BoardOp, BoardStep};
use crate::store::key::board_key;
use crate::store::{NodeId, StoreError};

/// A bucket's id: its pairs, sorted.
pub type BucketId = Vec<(String, String)>;

/// How Envoy enforces a bucket. Envoy's filter applies only these two
/// kinds (a `requests_per_time_unit` strategy it logs and drops).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Strategy {
    /// Every request passes.
    AllowAll,
    /// Every request is refused.
    DenyAll,
    /// A token bucket.
    Bucket(EnvoyBucket),
}

/// What a bucket is told.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// Enforce `strategy` for `ttl`.
    Assign {
        /// The strategy.
        strategy: Strategy,
        /// The assignment's time to live, whole seconds (zero: expired at
        /// once).
        ttl: Duration,
    },
    /// Forget the bucket (it was idle).
    Abandon,
}

/// One bucket's usage in a report.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Usage {
    /// The `BucketId`'s pairs.
    pub bucket: BucketId,
    /// `time_elapsed`: `None` or zero on the bucket's first report (Envoy
    /// sends zero), whole seconds after (Envoy truncates).
    pub elapsed: Option<Duration>,
    /// Requests allowed since the last report.
    pub allowed: u64,
    /// Requests denied since the last report.
    pub denied: u64,
}

/// A report this stream cannot take.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ReportError {
    /// The stream's first report names no domain.
    #[error("the first usage report of a stream must name its domain")]
    NoDomain,
    /// A later report names another domain than the stream's.
    #[error("a stream is in one domain: this one is '{stream}', the report names '{report}'")]
    OtherDomain {
        /// The stream's.
        stream: String,
        /// The report's.
        report: String,
    },
    /// A bucket without pairs.
    #[error("a bucket id must hold at least one pair")]
    EmptyBucket,
    /// More buckets than [`super::QuotaOptions::max_buckets`].
    #[error("a stream may report at most {0} buckets")]
    TooManyBuckets(usize),
}

/// The quota a bucket draws from on a board.
#[derive(Debug, Clone, PartialEq)]
struct Drawn {
    key: String,
    node: Option<NodeId>,
    rate: f64,
    burst: f64,
    /// The rule's failure policy.
    failure: OnFailure,
}

/// A bucket as this stream knows it.
#[derive(Debug, Clone)]
struct BucketState {
    /// Its line on its board, unique in the instance.
    line: u64,
    board: Option<Drawn>,
    /// Its demand, requests per second, as last measured.
    demand: Option<f64>,
    /// What it was last told.
    sent: Option<Strategy>,
    /// When its board last gave it an assignment (the clock's time).
    assigned_at: Option<Duration>,
    /// Whether its board failed at its last report (logged once).
    failing: bool,
    /// How long it has been reported without requests.
    idle: Duration,
}

/// What a report's bucket gets, before the boards answer.
enum Plan {
    Abandon,
    Fixed(Strategy),
    /// The answer of step `n`.
    Board(usize),
}

/// One stream's buckets.
#[derive(Debug)]
pub struct Session {
    quotas: Quotas,
    /// Where this stream's moved lines are pushed.
    pushes: mpsc::Sender<Push>,
    /// The stream's domain: named by its first report.
    domain: Option<String>,
    buckets: HashMap<BucketId, BucketState>,
    by_line: HashMap<u64, BucketId>,
}

impl Quotas {
    /// A new stream's buckets, and where the moved assignments of its
    /// lines arrive. (Here, beside the session it opens: the quotas know
    /// nothing of sessions, only of the streams they push to.)
    pub fn open(&self) -> (Session, mpsc::Receiver<Push>) {
        let (tx, rx) = mpsc::channel(PUSHES_WAITING);
        (Session::new(self.clone(), tx), rx)
    }
}

impl Session {
    fn new(quotas: Quotas, pushes: mpsc::Sender<Push>) -> Session {
        Session {
            quotas,
            pushes,
            domain: None,
            buckets: HashMap::new(),
            by_line: HashMap::new(),
        }
    }

    /// The answer to one report: per bucket, what it is told (`None`:
    /// nothing; Envoy keeps what it runs). A report that names no domain
    /// is in the stream's, as the protocol says; the first must name one.
    /// Every board step of the report is one store call per node.
    pub async fn report(
        &mut self,
        domain: &str,
        usages: Vec<Usage>,
    ) -> Result<Vec<(BucketId, Option<Action>)>, ReportError> {
        let domain = match (&self.domain, domain) {
            (None, "") => return Err(ReportError::NoDomain),
            (Some(d), "") => d.clone(),
            (Some(d), named) if d != named => {
                return Err(ReportError::OtherDomain {
                    stream: d.clone(),
                    report: named.to_string(),
                })
            }
            (_, named) => named.to_string(),
        };
        let mut usages = usages;
        for u in &mut usages {
            if u.bucket.is_empty() {
                return Err(ReportError::EmptyBucket);
            }
            u.bucket.sort();
        }
        let max = self.quotas.options().max_buckets;
        let new = usages
            .iter()
            .filter(|u| !self.buckets.contains_key(&u.bucket))
            .count();
        if self.buckets.len() + new > max {
            return Err(ReportError::TooManyBuckets(max));
        }
        self.domain = Some(domain.clone());

        let mut steps = Vec::new();
        let mut plans = Vec::with_capacity(usages.len());
        for usage in usages {
            let plan = self.plan(&domain, &usage, &mut steps);
            plans.push((usage.bucket, plan));
        }
        let reply = self.quotas.share(steps, &self.pushes).await;
        if reply.iter().any(Result::is_err) {
            ::metrics::counter!(metrics::RLQS_BOARD_FAILURE).increment(1);
        }
        let now = self.quotas.clock().now();
        let ttl = self.quotas.options().ttl;
        let mut out = Vec::with_capacity(plans.len());
        for (bucket, plan) in plans {
            let action = match plan {
                Plan::Abandon => Some(Action::Abandon),
                Plan::Fixed(strategy) => {
                    if let Some(s) = self.buckets.get_mut(&bucket) {
                        s.sent = Some(strategy);
                    }
                    Some(Action::Assign { strategy, ttl })
                }
                Plan::Board(n) => self
                    .buckets
                    .get_mut(&bucket)
                    .and_then(|state| answered(state, reply.get(n), now, ttl)),
            };
            out.push((bucket, action));
        }
        Ok(out)
    }

    /// What a moved share pushed to this stream sends: the bucket's new
    /// assignment, or nothing if it is unchanged in substance.
    pub fn pushed(&mut self, push: Push) -> Option<(BucketId, Action)> {
        let bucket = self.by_line.get(&push.line)?.clone();
        let state = self.buckets.get_mut(&bucket)?;
        state.board.as_ref()?;
        let strategy = strategy_for(state, push.assigned);
        if state.sent == Some(strategy) {
            return None;
        }
        ::metrics::counter!(metrics::RLQS_ASSIGNMENT_CHANGED).increment(1);
        ::metrics::counter!(metrics::RLQS_PUSHED).increment(1);
        state.sent = Some(strategy);
        state.assigned_at = Some(self.quotas.clock().now());
        let ttl = self.quotas.options().ttl;
        Some((bucket, Action::Assign { strategy, ttl }))
    }

    /// Every assigned bucket's assignment with a TTL of zero: what Envoy is
    /// told when this instance stops, so that it applies its
    /// `expired_assignment_behavior` at once rather than run an assignment
    /// nobody renews.
    pub fn expire_all(&self) -> Vec<(BucketId, Action)> {
        self.buckets
            .iter()
            .filter_map(|(bucket, s)| {
                s.sent.map(|strategy| {
                    (
                        bucket.clone(),
                        Action::Assign {
                            strategy,
                            ttl: Duration::ZERO,
                        },
                    )
                })
            })
            .collect()
    }

    /// Takes every line of this stream off the boards (the stream ended),
    /// in one call per node.
    pub async fn close(&mut self) {
        let steps: Vec<BoardStep> = self
            .buckets
            .drain()
            .filter_map(|(_, s)| s.board.map(|b| leave(b, s.line)))
            .collect();
        self.by_line.clear();
        let failed = self
            .quotas
            .share(steps, &self.pushes)
            .await
            .into_iter()
            .any(|a| a.is_err());
        if failed {
            tracing::warn!("RLQS: leaving a board failed; the share returns when its line expires");
        }
    }

    /// What `usage` gets, adding its board steps to `steps`.
    fn plan(&mut self, domain: &str, usage: &Usage, steps: &mut Vec<BoardStep>) -> Plan {
        let (quota, drawn) = self.resolve(domain, usage);
        let quotas = &self.quotas;
        let state = self.buckets.entry(usage.bucket.clone()).or_insert_with(|| {
            let line = quotas.new_line();
            BucketState {
                line,
                board: None,
                demand: None,
                sent: None,
                assigned_at: None,
                failing: false,
                idle: Duration::ZERO,
            }
        });
        self.by_line.insert(state.line, usage.bucket.clone());
        let elapsed = usage.elapsed.filter(|e| !e.is_zero());
        match elapsed {
            Some(e) if usage.allowed + usage.denied == 0 => state.idle += e,
            Some(_) => state.idle = Duration::ZERO,
            None => {}
        }
        if state.idle >= quotas.options().idle {
            if let Some(gone) = self.buckets.remove(&usage.bucket) {
                self.by_line.remove(&gone.line);
                if let Some(board) = gone.board {
                    steps.push(leave(board, gone.line));
                }
            }
            return Plan::Abandon;
        }
        // A bucket whose rule moved to another board leaves the old one.
        if state.board.as_ref().map(|b| &b.key) != drawn.as_ref().map(|d| &d.key) {
            if let Some(old) = state.board.take() {
                steps.push(leave(old, state.line));
            }
            state.sent = None;
            state.demand = None;
        }
        match (quota, drawn) {
            (Quota::AllowAll, _) | (Quota::Rate { .. }, None) => Plan::Fixed(Strategy::AllowAll),
            (Quota::DenyAll, _) => Plan::Fixed(Strategy::DenyAll),
            (Quota::Rate { per_second, .. }, Some(drawn)) => {
                // Measured over the time Envoy says; a first report (no or
                // zero time) keeps the last measure, and a newcomer counts
                // as wanting the whole rate, so the split gives it an even
                // share at once.
                let demand = match elapsed {
                    Some(e) => (usage.allowed + usage.denied) as f64 / e.as_secs_f64(),
                    None => state.demand.unwrap_or(per_second),
                };
                state.demand = Some(demand);
                steps.push(BoardStep {
                    key: drawn.key.clone(),
                    node: drawn.node.clone(),
                    rate: drawn.rate,
                    op: BoardOp::Report {
                        line: state.line,
                        demand,
                    },
                });
                state.board = Some(drawn);
                Plan::Board(steps.len() - 1)
            }
        }
    }

    /// The bucket's quota, and the board it draws from (the rule and the
    /// descriptor values it matched), counting its usage in the rule's
    /// statistics.
    fn resolve(&self, domain: &str, usage: &Usage) -> (Quota, Option<Drawn>) {
        let Some(config) = self.quotas.config().current() else {
            return (Quota::AllowAll, None);
        };
        let tree = config.tree();
        let pairs: HashMap<&str, &str> = usage
            .bucket
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        let stats = self.quotas.stats();
        let Some(entries) = tree.bucket_entries(domain, &pairs) else {
            stats.domain_not_found(domain);
            return (Quota::AllowAll, None);
        };
        let matched = match tree.find(domain, &entries, None) {
            Ok(Lookup::Limit(m)) => m,
            _ => return (Quota::AllowAll, None),
        };
        let rule_stats = stats.rule(&matched.stats_key, matched.stats_per_value);
        rule_stats
            .total_hits
            .increment(usage.allowed + usage.denied);
        rule_stats.within_limit.increment(usage.allowed);
        rule_stats.over_limit.increment(usage.denied);
        if matched.rule.shadow_mode {
            rule_stats.shadow_mode.increment(usage.denied);
        }
        let quota = Quota::of(&matched.rule);
        let drawn = match quota {
            Quota::Rate { per_second, burst } => {
                let options = self.quotas.options();
                let key = board_key(&options.key_prefix, domain, &entries);
                Some(Drawn {
                    node: self.quotas.node_of(&key),
                    key,
                    rate: per_second,
                    burst,
                    failure: options.failure.on_failure(
                        &matched.rule.failure,
                        u64::from(matched.rule.requests_per_unit),
                    ),
                })
            }
            _ => None,
        };
        (quota, drawn)
    }
}

fn leave(board: Drawn, line: u64) -> BoardStep {
    BoardStep {
        key: board.key,
        node: board.node,
        rate: board.rate,
        op: BoardOp::Leave { line },
    }
}

/// The token bucket for an assignment of `assigned` requests per second.
/// Whether a share moves at all is the board's to decide (it keeps a share
/// through a small move, and cuts a kept share to its target, a move of
/// any size, when the kept ones would pass the rate): a share the board
/// kept gives the same bucket, so Envoy's bucket does not start full
/// again, and a bucket never runs above its share, so the Envoys on a
/// board never run above its rate.
fn strategy_for(state: &BucketState, assigned: f64) -> Strategy {
    let (rate, burst) = state
        .board
        .as_ref()
        .map_or((0.0, 0.0), |b| (b.rate, b.burst));
    let burst = if rate > 0.0 {
        burst * assigned / rate
    } else {
        0.0
    };
    Strategy::Bucket(EnvoyBucket::for_rate(assigned, burst))
}

/// What a bucket is told at `now` after its board step's `answer`: its
/// share as a bucket, or, if the board did not answer, [`unanswered`].
fn answered(
    state: &mut BucketState,
    answer: Option<&Result<Assignments, StoreError>>,
    now: Duration,
    ttl: Duration,
) -> Option<Action> {
    let assigned = match answer {
        Some(Ok(shares)) => shares.of(state.line),
        _ => None,
    };
    let Some(a) = assigned else {
        if !state.failing {
            state.failing = true;
            let error = match answer {
                Some(Err(e)) => e.to_string(),
                _ => "no answer for the bucket's line".into(),
            };
            tracing::warn!(%error, "RLQS: the demand board did not answer; the bucket keeps its assignment until its TTL, then follows its rule's failure_mode");
        }
        return unanswered(state, now, ttl);
    };
    state.failing = false;
    let strategy = strategy_for(state, a);
    if state.sent.is_some_and(|s| s != strategy) {
        ::metrics::counter!(metrics::RLQS_ASSIGNMENT_CHANGED).increment(1);
    }
    state.sent = Some(strategy);
    state.assigned_at = Some(now);
    Some(Action::Assign { strategy, ttl })
}

/// What a bucket whose board did not answer is told at `now`: nothing
/// while the assignment it runs is still live (Envoy keeps it until its
/// TTL); after that what its rule's failure policy says, in the form an
/// Envoy bucket enforces: `closed` denies all, `error` sends nothing (Envoy
/// applies its own `expired_assignment_behavior`, or
/// `no_assignment_behavior`), and `open` allows all: an Envoy's bucket is
/// enforced by that Envoy alone, so this instance's floor has no meaning
/// there.
fn unanswered(state: &mut BucketState, now: Duration, ttl: Duration) -> Option<Action> {
    let live = state.sent.is_some() && state.assigned_at.is_some_and(|at| now < at + ttl);
    if live {
        return None;
    }
    let failure = state.board.as_ref().map_or(OnFailure::Error, |b| b.failure);
    let strategy = match failure {
        OnFailure::Open { .. } => Strategy::AllowAll,
        OnFailure::Closed => Strategy::DenyAll,
        OnFailure::Error => return None,
    };
    state.sent = Some(strategy);
    Some(Action::Assign { strategy, ttl })
}

#[cfg(test)]
mod tests;
