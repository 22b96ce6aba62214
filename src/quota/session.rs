//! One RLQS stream's buckets: what each report of a bucket is answered
//! with. The gRPC plumbing is `service::rlqs`; this is the decision.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use super::bucket::{EnvoyBucket, Quota};
use super::share::{moved, share_of};
use crate::config::{Entry, LiveConfig, Lookup};
use crate::metrics::Stats;
use crate::store::board::DemandBoard;

/// The settings of RLQS.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct QuotaOptions {
    /// `RLQS_ASSIGNMENT_TTL`: how long an assignment holds without a new
    /// report, and how long a silent Envoy's share stays taken.
    pub ttl: Duration,
    /// `RLQS_IDLE_TIMEOUT`: a bucket reported without requests this long is
    /// abandoned.
    pub idle: Duration,
    /// The most buckets one stream may hold; a report of more is refused.
    pub max_buckets: usize,
}

impl Default for QuotaOptions {
    fn default() -> QuotaOptions {
        QuotaOptions {
            ttl: Duration::from_secs(15),
            idle: Duration::from_secs(60),
            max_buckets: 4096,
        }
    }
}

/// How Envoy enforces a bucket.
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
        /// The assignment's time to live (zero: expired at once).
        ttl: Duration,
    },
    /// Forget the bucket (it was idle).
    Abandon,
}

/// One bucket's usage in a report.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Usage {
    /// The `BucketId`'s pairs.
    pub bucket: Vec<(String, String)>,
    /// `time_elapsed`: `None` on the bucket's first report.
    pub elapsed: Option<Duration>,
    /// Requests allowed since the last report.
    pub allowed: u64,
    /// Requests denied since the last report.
    pub denied: u64,
}

/// A report this stream cannot take.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ReportError {
    /// `domain` is empty.
    #[error("a usage report must name its domain")]
    NoDomain,
    /// A bucket without pairs.
    #[error("a bucket id must hold at least one pair")]
    EmptyBucket,
    /// More buckets than [`QuotaOptions::max_buckets`].
    #[error("a stream may report at most {0} buckets")]
    TooManyBuckets(usize),
}

/// A bucket as this stream knows it.
#[derive(Debug, Clone, Default)]
struct BucketState {
    /// The board of the quota it draws from (`None`: a blanket rule).
    board: Option<String>,
    /// Its assigned rate (requests per second) on that board.
    assigned: f64,
    /// What it was last told.
    sent: Option<Strategy>,
    /// How long it has been reported without requests.
    idle: Duration,
}

/// One stream's buckets.
#[derive(Debug)]
pub struct Session {
    /// This Envoy's name on the boards (instance and stream).
    id: String,
    config: LiveConfig,
    stats: Arc<Stats>,
    board: Arc<dyn DemandBoard>,
    options: QuotaOptions,
    buckets: HashMap<Vec<(String, String)>, BucketState>,
}

impl Session {
    /// A stream named `id` (unique among every instance's streams).
    pub fn new(
        id: String,
        config: LiveConfig,
        stats: Arc<Stats>,
        board: Arc<dyn DemandBoard>,
        options: QuotaOptions,
    ) -> Session {
        Session {
            id,
            config,
            stats,
            board,
            options,
            buckets: HashMap::new(),
        }
    }

    /// The answer to one report of `domain`: per bucket, what it is told
    /// (`None`: nothing, the store could not be asked and the bucket was
    /// never assigned, so Envoy keeps its `no_assignment_behavior`).
    pub async fn report(
        &mut self,
        domain: &str,
        usages: Vec<Usage>,
    ) -> Result<Vec<(Vec<(String, String)>, Option<Action>)>, ReportError> {
        if domain.is_empty() {
            return Err(ReportError::NoDomain);
        }
        let mut out = Vec::with_capacity(usages.len());
        for mut usage in usages {
            if usage.bucket.is_empty() {
                return Err(ReportError::EmptyBucket);
            }
            usage.bucket.sort();
            if !self.buckets.contains_key(&usage.bucket)
                && self.buckets.len() >= self.options.max_buckets
            {
                return Err(ReportError::TooManyBuckets(self.options.max_buckets));
            }
            let action = self.answer(domain, &usage).await;
            out.push((usage.bucket, action));
        }
        Ok(out)
    }

    /// Every assigned bucket's assignment with a TTL of zero: what Envoy is
    /// told when this instance stops, so that it applies its
    /// `expired_assignment_behavior` at once rather than run an assignment
    /// nobody renews.
    pub fn expire_all(&self) -> Vec<(Vec<(String, String)>, Action)> {
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

    /// Takes every line of this stream off the boards (the stream ended).
    pub async fn close(&mut self) {
        for (_, s) in self.buckets.drain() {
            if let Some(board) = s.board {
                if let Err(e) = self.board.leave(&board, &self.id).await {
                    tracing::warn!(error = %e, "RLQS: leaving a board failed; the share returns when its line expires");
                }
            }
        }
    }

    async fn answer(&mut self, domain: &str, usage: &Usage) -> Option<Action> {
        let (quota, board) = self.resolve(domain, usage);
        let state = self.buckets.entry(usage.bucket.clone()).or_default();
        let elapsed = usage.elapsed.unwrap_or(Duration::ZERO);
        if usage.allowed + usage.denied == 0 && usage.elapsed.is_some() {
            state.idle += elapsed;
        } else {
            state.idle = Duration::ZERO;
        }
        if state.idle >= self.options.idle {
            let gone = self.buckets.remove(&usage.bucket);
            if let Some(board) = gone.and_then(|s| s.board) {
                let _ = self.board.leave(&board, &self.id).await;
            }
            return Some(Action::Abandon);
        }
        // A bucket whose rule changed board leaves the old one.
        if state.board.is_some() && state.board != board {
            if let Some(old) = state.board.take() {
                let _ = self.board.leave(&old, &self.id).await;
            }
            state.assigned = 0.0;
        }
        let strategy = match (quota, board) {
            (Quota::AllowAll, _) | (Quota::Rate { .. }, None) => Some(Strategy::AllowAll),
            (Quota::DenyAll, _) => Some(Strategy::DenyAll),
            (Quota::Rate { per_second, burst }, Some(board)) => {
                let newcomer = state.sent.is_none() || usage.elapsed.is_none_or(|e| e.is_zero());
                // A newcomer's demand is not known yet: it counts as wanting
                // the whole rate, so that the split gives it the level.
                let demand = if newcomer {
                    per_second
                } else {
                    (usage.allowed + usage.denied) as f64 / elapsed.as_secs_f64()
                };
                let ttl = self.options.ttl;
                let held = self
                    .board
                    .exchange(&board, &self.id, demand, None, per_second, ttl)
                    .await;
                let assigned = match held {
                    Ok(ex) => {
                        let target = share_of(per_second, demand, &ex.others);
                        if state.sent.is_none() || moved(ex.assigned, target, per_second) {
                            self.board
                                .exchange(&board, &self.id, demand, Some(target), per_second, ttl)
                                .await
                                .map(|ex| ex.assigned)
                        } else {
                            Ok(ex.assigned)
                        }
                    }
                    Err(e) => Err(e),
                };
                state.board = Some(board);
                match assigned {
                    Ok(a) => {
                        state.assigned = a;
                        let burst = if per_second > 0.0 {
                            burst * a / per_second
                        } else {
                            0.0
                        };
                        let bucket = EnvoyBucket::for_rate(a, burst);
                        // Unchanged in substance: the bucket Envoy runs
                        // stays (a new one would start full).
                        match state.sent {
                            Some(Strategy::Bucket(old)) if !moved(old.rate(), a, per_second) => {
                                Some(Strategy::Bucket(old))
                            }
                            _ => Some(Strategy::Bucket(bucket)),
                        }
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, "RLQS: the demand board did not answer; the bucket keeps its assignment");
                        state.sent
                    }
                }
            }
        };
        state.sent = strategy;
        strategy.map(|strategy| Action::Assign {
            strategy,
            ttl: self.options.ttl,
        })
    }

    /// The bucket's quota, and its board (the rule and the descriptor
    /// values it matched), counting its usage in the rule's statistics.
    fn resolve(&self, domain: &str, usage: &Usage) -> (Quota, Option<String>) {
        let Some(config) = self.config.current() else {
            return (Quota::AllowAll, None);
        };
        let tree = config.tree();
        let pairs: HashMap<&str, &str> = usage
            .bucket
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        let Some(entries) = tree.bucket_entries(domain, &pairs) else {
            self.stats.domain_not_found(domain);
            return (Quota::AllowAll, None);
        };
        let matched = match tree.find(domain, &entries, None) {
            Ok(Lookup::Limit(m)) => m,
            _ => return (Quota::AllowAll, None),
        };
        let rule_stats = self.stats.rule(&matched.stats_key, matched.stats_per_value);
        rule_stats
            .total_hits
            .increment(usage.allowed + usage.denied);
        rule_stats.within_limit.increment(usage.allowed);
        rule_stats.over_limit.increment(usage.denied);
        if matched.rule.shadow_mode {
            rule_stats.shadow_mode.increment(usage.denied);
        }
        (Quota::of(&matched.rule), Some(board_key(domain, &entries)))
    }
}

/// The board of the quota a descriptor draws from: its domain and entries,
/// as the original's cache key names a counter.
fn board_key(domain: &str, entries: &[Entry]) -> String {
    let mut key = format!("rlqs:{{{domain}");
    for e in entries {
        key.push('_');
        key.push_str(&e.key);
        key.push('_');
        key.push_str(&e.value);
    }
    key.push('}');
    key
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{load, ConfigFile};
    use crate::limiter::ManualClock;
    use crate::store::board::MemoryBoard;

    const RULES: &str = "
domain: q
descriptors:
  - key: fleet
    rate_limit: {unit: second, requests_per_unit: 100}
  - key: bucket
    rate_limit: {unit: second, requests_per_unit: 20, algorithm: token_bucket, burst: 40}
";

    fn session(options: QuotaOptions) -> Session {
        let live = LiveConfig::new();
        let config = load(&[ConfigFile::new("q.yaml", RULES)], false).expect("loads");
        live.publish(Arc::new(config));
        let clock = Arc::new(ManualClock::at_secs(1_000));
        Session::new(
            "envoy".into(),
            live,
            Arc::new(Stats::new()),
            Arc::new(MemoryBoard::new(clock)),
            options,
        )
    }

    fn usage(key: &str, elapsed: Option<u64>, allowed: u64) -> Usage {
        Usage {
            bucket: vec![(key.into(), "x".into())],
            elapsed: elapsed.map(Duration::from_secs),
            allowed,
            denied: 0,
        }
    }

    async fn one(s: &mut Session, u: Usage) -> Option<Action> {
        let mut out = s.report("q", vec![u]).await.expect("a valid report");
        out.pop().and_then(|(_, a)| a)
    }

    #[tokio::test]
    async fn a_lone_envoy_gets_the_whole_rate_as_a_bucket_it_can_run() {
        let mut s = session(QuotaOptions::default());
        let a = one(&mut s, usage("fleet", None, 0)).await;
        let Some(Action::Assign {
            strategy: Strategy::Bucket(b),
            ttl,
        }) = a
        else {
            panic!("{a:?}");
        };
        assert_eq!(
            (b.tokens_per_fill, b.fill_interval_secs, b.max_tokens),
            (100, 1, 100)
        );
        assert_eq!(ttl, Duration::from_secs(15));
        // A token bucket rule: its burst goes with the share.
        let a = one(&mut s, usage("bucket", None, 0)).await;
        let Some(Action::Assign {
            strategy: Strategy::Bucket(b),
            ..
        }) = a
        else {
            panic!("{a:?}");
        };
        assert_eq!((b.tokens_per_fill, b.max_tokens), (20, 40));
    }

    #[tokio::test]
    async fn an_idle_bucket_is_abandoned_and_leaves_its_share() {
        let mut s = session(QuotaOptions {
            idle: Duration::from_secs(10),
            ..QuotaOptions::default()
        });
        one(&mut s, usage("fleet", None, 0)).await;
        assert!(matches!(
            one(&mut s, usage("fleet", Some(5), 0)).await,
            Some(Action::Assign { .. })
        ));
        assert_eq!(
            one(&mut s, usage("fleet", Some(5), 0)).await,
            Some(Action::Abandon)
        );
        // Gone from the board: a new stream gets the whole rate at once.
        let mut other = session(QuotaOptions::default());
        other.board = Arc::clone(&s.board);
        let a = one(&mut other, usage("fleet", None, 0)).await;
        assert!(
            matches!(a, Some(Action::Assign { strategy: Strategy::Bucket(b), .. }) if b.tokens_per_fill == 100),
            "{a:?}"
        );
    }

    #[tokio::test]
    async fn malformed_reports_are_refused() {
        let mut s = session(QuotaOptions {
            max_buckets: 2,
            ..QuotaOptions::default()
        });
        assert_eq!(
            s.report("", vec![]).await.err(),
            Some(ReportError::NoDomain)
        );
        let empty = Usage {
            bucket: vec![],
            ..usage("fleet", None, 0)
        };
        assert_eq!(
            s.report("q", vec![empty]).await.err(),
            Some(ReportError::EmptyBucket)
        );
        let three: Vec<Usage> = ["a", "b", "c"].iter().map(|k| usage(k, None, 0)).collect();
        assert_eq!(
            s.report("q", three).await.err(),
            Some(ReportError::TooManyBuckets(2))
        );
    }

    #[tokio::test]
    async fn expire_all_sends_each_assignment_with_a_ttl_of_zero() {
        let mut s = session(QuotaOptions::default());
        one(&mut s, usage("fleet", None, 0)).await;
        let expired = s.expire_all();
        assert_eq!(expired.len(), 1);
        assert!(matches!(expired[0].1, Action::Assign { ttl, .. } if ttl.is_zero()));
    }
}
