//! A simulated Envoy `rate_limit_quota` filter: one bucket, one RLQS
//! stream, enforcing what the server assigns as the filter does, on virtual
//! time so that a test of many 5 s report intervals takes milliseconds.
//!
//! - Before its first assignment the bucket follows its
//!   `no_assignment_behavior` (allow all or deny all).
//! - A blanket rule allows or denies every request.
//! - A token bucket refills continuously at `tokens_per_fill /
//!   fill_interval` up to `max_tokens`, and starts **full** whenever the
//!   assignment changes (an unchanged assignment only extends its TTL).
//! - Requests arrive evenly at the Envoy's demand; each round it reports
//!   the allowed and denied counts with `time_elapsed` in whole seconds,
//!   waits for the server's answer and applies it; what the server pushed
//!   between reports is applied before the next round.

use std::collections::HashMap;
use std::time::Duration;

use envoy_types::pb::envoy::r#type::v3::rate_limit_strategy::{BlanketRule, Strategy};
use envoy_types::pb::envoy::service::rate_limit_quota::v3::rate_limit_quota_response::bucket_action::BucketAction;
use envoy_types::pb::envoy::service::rate_limit_quota::v3::rate_limit_quota_service_client::RateLimitQuotaServiceClient;
use envoy_types::pb::envoy::service::rate_limit_quota::v3::rate_limit_quota_usage_reports::BucketQuotaUsage;
use envoy_types::pb::envoy::service::rate_limit_quota::v3::{
    BucketId, RateLimitQuotaResponse, RateLimitQuotaUsageReports,
};
use envoy_types::pb::google::protobuf::Duration as PbDuration;
use tokio::sync::mpsc;
use tonic::Streaming;

/// How the bucket is enforced now.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Enforced {
    /// Every request passes.
    AllowAll,
    /// Every request is refused.
    DenyAll,
    /// A token bucket: (max tokens, tokens per fill, fill interval s).
    Bucket(u32, u32, u64),
}

impl Enforced {
    /// The rate it lets through, requests a second (allow all: infinite).
    pub fn rate(self) -> f64 {
        match self {
            Enforced::AllowAll => f64::INFINITY,
            Enforced::DenyAll => 0.0,
            Enforced::Bucket(_, per_fill, interval) => f64::from(per_fill) / interval.max(1) as f64,
        }
    }
}

/// A bucket's gate as the filter runs it: what it enforces, and a token
/// bucket's tokens, refilled continuously up to `max_tokens` and full
/// again whenever the assignment changes.
#[derive(Debug, Clone, Copy)]
pub struct Gate {
    pub enforced: Enforced,
    tokens: f64,
}

impl Gate {
    /// A gate before any assignment: allow all iff `allow_before`.
    pub fn new(allow_before: bool) -> Gate {
        Gate {
            enforced: if allow_before {
                Enforced::AllowAll
            } else {
                Enforced::DenyAll
            },
            tokens: 0.0,
        }
    }

    /// Enforces `next`; whether it changed (a bucket then starts full).
    pub fn set(&mut self, next: Enforced) -> bool {
        if next == self.enforced {
            return false;
        }
        self.enforced = next;
        if let Enforced::Bucket(max, _, _) = next {
            self.tokens = f64::from(max);
        }
        true
    }

    /// `secs` pass, refilling the bucket.
    pub fn refill(&mut self, secs: f64) {
        if let Enforced::Bucket(max, _, _) = self.enforced {
            self.tokens = (self.tokens + secs * self.enforced.rate()).min(f64::from(max));
        }
    }

    /// One request, now: whether it passes.
    pub fn pass(&mut self) -> bool {
        match self.enforced {
            Enforced::AllowAll => true,
            Enforced::DenyAll => false,
            Enforced::Bucket(..) if self.tokens >= 1.0 => {
                self.tokens -= 1.0;
                true
            }
            Enforced::Bucket(..) => false,
        }
    }
}

/// What one message of the server tells a bucket.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Told {
    /// Forget the bucket.
    Abandon,
    /// Enforce this for `ttl` (none given: until replaced).
    Assign {
        enforced: Enforced,
        ttl: Option<Duration>,
    },
}

/// What `answer` tells the bucket `bucket`, if anything (its last action
/// for it).
pub fn told(answer: &RateLimitQuotaResponse, bucket: &HashMap<String, String>) -> Option<Told> {
    answer
        .bucket_action
        .iter()
        .filter(|a| a.bucket_id.as_ref().map(|b| &b.bucket) == Some(bucket))
        .filter_map(|action| match &action.bucket_action {
            Some(BucketAction::AbandonAction(_)) => Some(Told::Abandon),
            Some(BucketAction::QuotaAssignmentAction(a)) => Some(Told::Assign {
                ttl: a
                    .assignment_time_to_live
                    .map(|d| Duration::new(d.seconds.max(0) as u64, d.nanos.max(0) as u32)),
                enforced: match a.rate_limit_strategy.and_then(|s| s.strategy) {
                    Some(Strategy::BlanketRule(r)) if r == BlanketRule::DenyAll as i32 => {
                        Enforced::DenyAll
                    }
                    Some(Strategy::TokenBucket(b)) => Enforced::Bucket(
                        b.max_tokens,
                        b.tokens_per_fill.map_or(1, |v| v.value),
                        b.fill_interval.map_or(1, |d| d.seconds.max(1) as u64),
                    ),
                    _ => Enforced::AllowAll,
                },
            }),
            None => None,
        })
        .next_back()
}

/// A report of one bucket's usage over `secs` (`time_elapsed`; Envoy
/// sends zero in a bucket's first report, the proto allows none).
pub fn usage_report(
    domain: &str,
    bucket: &HashMap<String, String>,
    secs: Option<u64>,
    allowed: u64,
    denied: u64,
) -> RateLimitQuotaUsageReports {
    RateLimitQuotaUsageReports {
        domain: domain.to_string(),
        bucket_quota_usages: vec![BucketQuotaUsage {
            bucket_id: Some(BucketId {
                bucket: bucket.clone(),
            }),
            time_elapsed: secs.map(|s| PbDuration {
                seconds: s as i64,
                nanos: 0,
            }),
            num_requests_allowed: allowed,
            num_requests_denied: denied,
        }],
    }
}

/// One simulated Envoy.
pub struct SimEnvoy {
    tx: mpsc::Sender<RateLimitQuotaUsageReports>,
    inbound: Streaming<RateLimitQuotaResponse>,
    domain: String,
    bucket: HashMap<String, String>,
    /// Requests per second it sends.
    pub demand: f64,
    /// What it enforces now.
    pub gate: Gate,
    /// The TTL of the last assignment (zero: expired at once).
    pub ttl: Option<Duration>,
    /// Whether the server abandoned the bucket.
    pub abandoned: bool,
    /// How many times the assignment changed (each refills the bucket).
    pub changes: u32,
    /// A fractional request carried to the next round.
    carry: f64,
    /// Whether only the first report names the domain (as the proto
    /// allows) rather than every one (as Envoy does).
    domain_once: bool,
    reported: bool,
}

impl SimEnvoy {
    /// A stream to the service at `grpc` for the bucket `pairs` of
    /// `domain`, sending `demand` requests per second; before its first
    /// assignment it allows all iff `allow_before`.
    pub async fn connect(
        grpc: std::net::SocketAddr,
        domain: &str,
        pairs: &[(&str, &str)],
        demand: f64,
        allow_before: bool,
    ) -> SimEnvoy {
        let mut client = RateLimitQuotaServiceClient::connect(format!("http://{grpc}"))
            .await
            .expect("connect");
        let (tx, rx) = mpsc::channel(4);
        let outbound =
            futures::stream::unfold(rx, |mut rx| async move { rx.recv().await.map(|r| (r, rx)) });
        let inbound = client
            .stream_rate_limit_quotas(outbound)
            .await
            .expect("stream")
            .into_inner();
        SimEnvoy {
            tx,
            inbound,
            domain: domain.to_string(),
            bucket: pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            demand,
            gate: Gate::new(allow_before),
            ttl: None,
            abandoned: false,
            changes: 0,
            carry: 0.0,
            domain_once: false,
            reported: false,
        }
    }

    /// The same Envoy, naming the domain in its first report only.
    pub fn naming_the_domain_once(mut self) -> SimEnvoy {
        self.domain_once = true;
        self
    }

    /// The bucket's first request: an immediate report without usage
    /// history; returns how long the answer took.
    pub async fn start(&mut self) -> Duration {
        let started = std::time::Instant::now();
        self.report(None, 0, 0).await;
        started.elapsed()
    }

    /// `secs` seconds at its demand against what it enforces, then a report
    /// of them; returns (allowed, denied).
    pub async fn round(&mut self, secs: u64) -> (u64, u64) {
        self.drain().await;
        let wanted = self.demand * secs as f64 + self.carry;
        let n = wanted.floor() as u64;
        self.carry = wanted - n as f64;
        let (mut allowed, mut denied) = (0, 0);
        let gap = if n > 0 { secs as f64 / n as f64 } else { 0.0 };
        for i in 0..n {
            if i > 0 {
                self.gate.refill(gap);
            }
            if self.gate.pass() {
                allowed += 1;
            } else {
                denied += 1;
            }
        }
        let last = if n > 0 { gap * (n - 1) as f64 } else { 0.0 };
        self.gate.refill(secs as f64 - last);
        self.report(Some(secs), allowed, denied).await;
        (allowed, denied)
    }

    async fn report(&mut self, secs: Option<u64>, allowed: u64, denied: u64) {
        let domain = if self.domain_once && self.reported {
            String::new()
        } else {
            self.domain.clone()
        };
        self.reported = true;
        let report = usage_report(&domain, &self.bucket, secs, allowed, denied);
        self.tx.send(report).await.expect("stream open");
        let answer = self
            .next(Duration::from_secs(5))
            .await
            .expect("an answer to every report");
        self.apply(&answer);
    }

    /// Applies every message the server pushed meanwhile (a share that
    /// moved between reports), as Envoy applies one on arrival.
    pub async fn drain(&mut self) {
        while let Some(pushed) = self.next(Duration::from_millis(2)).await {
            self.apply(&pushed);
        }
    }

    /// The server's next message within `within`, if any.
    pub async fn next(&mut self, within: Duration) -> Option<RateLimitQuotaResponse> {
        tokio::time::timeout(within, self.inbound.message())
            .await
            .ok()
            .and_then(Result::ok)
            .flatten()
    }

    /// Applies the actions for this bucket.
    pub fn apply(&mut self, answer: &RateLimitQuotaResponse) {
        match told(answer, &self.bucket) {
            Some(Told::Abandon) => self.abandoned = true,
            Some(Told::Assign { enforced, ttl }) => {
                self.ttl = ttl;
                if self.gate.set(enforced) {
                    self.changes += 1;
                }
            }
            None => {}
        }
    }

    /// Closes the stream.
    pub fn close(self) {
        drop(self.tx);
    }
}
