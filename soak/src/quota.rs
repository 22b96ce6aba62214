//! The soak's RLQS Envoys: each stream of a board rule is one simulated
//! `rate_limit_quota` filter with one bucket, in real time. It joins (a
//! stream to the next instance, a first report with `time_elapsed` 0),
//! offers requests at a demand drawn for this stay against what it was
//! told, reports every [`REPORT_EVERY`], and after a while leaves (closes
//! its stream) and later joins again with another demand. A stream the
//! server or the transport ends (its instance killed) is opened again on
//! the next instance at the next report's tick, the assignment kept until
//! its TTL, as Envoy keeps it. Every join, report and message is logged
//! (see [`super::log::QuotaEvent`]).

use std::collections::HashMap;
use std::time::{Duration, Instant};

use envoy_types::pb::envoy::service::rate_limit_quota::v3::rate_limit_quota_service_client::RateLimitQuotaServiceClient;
use envoy_types::pb::envoy::service::rate_limit_quota::v3::RateLimitQuotaUsageReports;
use rand::rngs::StdRng;
use rand::seq::IndexedRandom;
use rand::{Rng, SeedableRng};
use tokio::sync::mpsc;
use tonic::transport::Channel;

use super::log::{now_us, Heard, QuotaEvent};
use super::rules::{Stream, CALL_TIMEOUT, DOMAIN};
use crate::support::envoy_quota::{told, usage_report, Enforced, Gate, Told};

/// How often an Envoy reports. Envoy's filter reports every 5 s; the soak
/// reports every second (and runs its instances with a 5 s TTL, three
/// reports as by default) for more board steps a run.
pub const REPORT_EVERY: Duration = Duration::from_secs(1);
/// The `RLQS_ASSIGNMENT_TTL` the instances run with.
pub const ASSIGNMENT_TTL: Duration = Duration::from_secs(5);
/// Requests are offered in ticks of this.
const TICK: Duration = Duration::from_millis(50);
/// How long an Envoy stays, and is away between stays, s.
const STAY_S: (f64, f64) = (4.0, 20.0);
const AWAY_S: (f64, f64) = (0.5, 3.0);
/// The demands an Envoy draws for a stay, as parts of its stream's rate.
const DEMANDS: [f64; 4] = [0.1, 0.33, 0.6, 1.0];

/// How a connection of a stay ended.
enum Ended {
    /// The stay is over: the Envoy closed its stream.
    Left,
    /// The server or the transport ended the stream.
    Broken,
}

/// One Envoy until `end_us`, its stays on the instances behind `channels`
/// in turn, every event sent to `log`.
pub async fn envoy(
    stream: Stream,
    channels: Vec<Channel>,
    log: mpsc::UnboundedSender<String>,
    end_us: u64,
) {
    let bucket: HashMap<String, String> =
        HashMap::from([(stream.rule.to_string(), stream.value.clone())]);
    let mut rng = StdRng::seed_from_u64(now_us() ^ stream.id as u64);
    let mut instance = stream.id % channels.len();
    let mut envoy = Envoy {
        gate: Gate::new(false),
        expires: None,
    };
    while now_us() < end_us {
        let demand = stream.rate * DEMANDS.choose(&mut rng).copied().unwrap_or(1.0);
        let stay_until =
            Instant::now() + Duration::from_secs_f64(rng.random_range(STAY_S.0..STAY_S.1));
        // Connections of one stay: a broken one is opened again on the
        // next instance.
        loop {
            let id = stream.id;
            let event = move |what: Heard| {
                QuotaEvent {
                    stream: id,
                    instance,
                    at_us: now_us(),
                    what,
                }
                .line()
            };
            let ended = match open(&channels[instance]).await {
                Some((outbound, inbound)) => {
                    let _ = log.send(event(Heard::Join { demand }));
                    envoy
                        .connected(
                            &bucket,
                            demand,
                            outbound,
                            inbound,
                            stay_until,
                            end_us,
                            &|w| {
                                let _ = log.send(event(w));
                            },
                        )
                        .await
                }
                None => {
                    let _ = log.send(event(Heard::Refused));
                    Ended::Broken
                }
            };
            instance = (instance + 1) % channels.len();
            match ended {
                Ended::Left => break,
                Ended::Broken => {
                    // Envoy opens the stream again at its next report.
                    tokio::time::sleep(REPORT_EVERY).await;
                    if Instant::now() >= stay_until || now_us() >= end_us {
                        // Gone: an Envoy that stops enforces nothing.
                        envoy.gone();
                        let _ = log.send(event(Heard::Leave));
                        break;
                    }
                }
            }
        }
        if now_us() >= end_us {
            break;
        }
        let away = Duration::from_secs_f64(rng.random_range(AWAY_S.0..AWAY_S.1));
        tokio::time::sleep(away).await;
    }
}

type Inbound =
    tonic::Streaming<envoy_types::pb::envoy::service::rate_limit_quota::v3::RateLimitQuotaResponse>;

/// A stream to the instance behind `channel`, if it opens within the
/// call timeout.
async fn open(channel: &Channel) -> Option<(mpsc::Sender<RateLimitQuotaUsageReports>, Inbound)> {
    let mut client = RateLimitQuotaServiceClient::new(channel.clone());
    let (tx, rx) = mpsc::channel(4);
    let outbound =
        futures::stream::unfold(rx, |mut rx| async move { rx.recv().await.map(|r| (r, rx)) });
    let opened =
        tokio::time::timeout(CALL_TIMEOUT, client.stream_rate_limit_quotas(outbound)).await;
    match opened {
        Ok(Ok(response)) => Some((tx, response.into_inner())),
        _ => None,
    }
}

/// What the Envoy enforces, across its connections.
struct Envoy {
    gate: Gate,
    /// When the assignment it runs expires (µs).
    expires: Option<u64>,
}

impl Envoy {
    /// An Envoy that stops: nothing assigned when it comes back.
    fn gone(&mut self) {
        self.gate = Gate::new(false);
        self.expires = None;
    }

    /// Applies a message: an assignment (a bucket starts full when it
    /// changes) until its TTL, or an abandoned bucket.
    fn apply(&mut self, told: Option<Told>) {
        match told {
            Some(Told::Assign { enforced, ttl }) => {
                self.gate.set(enforced);
                self.expires = ttl.map(|t| now_us() + t.as_micros() as u64);
            }
            Some(Told::Abandon) => self.gone(),
            None => {}
        }
    }

    /// One connection: a first report at once, then the demand offered
    /// against the gate and reported every [`REPORT_EVERY`], messages
    /// applied as they come; until the stay is over or the stream ends.
    #[allow(clippy::too_many_arguments)]
    async fn connected(
        &mut self,
        bucket: &HashMap<String, String>,
        demand: f64,
        outbound: mpsc::Sender<RateLimitQuotaUsageReports>,
        mut inbound: Inbound,
        stay_until: Instant,
        end_us: u64,
        log: &(dyn Fn(Heard) + Sync),
    ) -> Ended {
        // A report is sent, or dropped while the stream is full (as Envoy
        // drops what it cannot send); the stream closed: broken.
        let report = |secs: u64, allowed: u64, denied: u64| {
            let sent = outbound.try_send(usage_report(DOMAIN, bucket, Some(secs), allowed, denied));
            match sent {
                Ok(()) => {
                    log(Heard::Report {
                        first: secs == 0,
                        allowed,
                        denied,
                    });
                    true
                }
                Err(mpsc::error::TrySendError::Full(_)) => true,
                Err(mpsc::error::TrySendError::Closed(_)) => false,
            }
        };
        if !report(0, 0, 0) {
            log(Heard::Broken);
            return Ended::Broken;
        }
        let mut ticks = tokio::time::interval(TICK);
        let (mut allowed, mut denied, mut carry) = (0u64, 0u64, 0.0f64);
        let mut last_tick = Instant::now();
        let mut next_report = Instant::now() + REPORT_EVERY;
        loop {
            tokio::select! {
                message = inbound.message() => match message {
                    Ok(Some(m)) => {
                        let t = told(&m, bucket);
                        log(Heard::Message { told: t });
                        self.apply(t);
                    }
                    Ok(None) | Err(_) => {
                        log(Heard::Broken);
                        return Ended::Broken;
                    }
                },
                _ = ticks.tick() => {
                    let now = Instant::now();
                    if self.expires.is_some_and(|e| now_us() >= e) {
                        // Expired: the soak's Envoys deny until told again.
                        self.gate.set(Enforced::DenyAll);
                        self.expires = None;
                    }
                    let dt = now.duration_since(last_tick).as_secs_f64();
                    last_tick = now;
                    self.gate.refill(dt);
                    let wanted = demand * dt + carry;
                    let n = wanted.floor();
                    carry = wanted - n;
                    for _ in 0..n as u64 {
                        if self.gate.pass() {
                            allowed += 1;
                        } else {
                            denied += 1;
                        }
                    }
                    if now >= stay_until || now_us() >= end_us {
                        log(Heard::Leave);
                        self.gone();
                        return Ended::Left;
                    }
                    if now >= next_report {
                        next_report += REPORT_EVERY;
                        let open = report(REPORT_EVERY.as_secs(), allowed, denied);
                        (allowed, denied) = (0, 0);
                        if !open {
                            log(Heard::Broken);
                            return Ended::Broken;
                        }
                    }
                }
            }
        }
    }
}
