//! The load: connections, the workers that keep each in-flight slot busy
//! (closed loop or paced), and what each saw.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use envoy_types::pb::envoy::extensions::common::ratelimit::v3::{
    rate_limit_descriptor::Entry, RateLimitDescriptor,
};
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitRequest;
use rand::rngs::SmallRng;
use rand::SeedableRng;
use tokio::time::Instant;

use super::flags::LoadConfig;
use super::grpc::GrpcConnection;
use super::http1::HttpSlot;
use super::report::Report;
use super::tally::Tally;
use super::threads::LoadThreads;
use super::{chart, Failure};

/// The times every worker follows.
#[derive(Clone, Copy)]
pub(crate) struct Schedule {
    pub(crate) start: Instant,
    pub(crate) measure_from: Instant,
    pub(crate) end: Instant,
}

/// The open-loop ticket counter: ticket `i` is due at `start + i / rps`.
pub(crate) struct Pacer {
    pub(crate) next: AtomicU64,
    pub(crate) nanos_per_request: f64,
}

pub(crate) fn build_request(config: &LoadConfig, rng: &mut SmallRng) -> RateLimitRequest {
    let descriptors = config
        .entries
        .iter()
        .map(|key| RateLimitDescriptor {
            entries: vec![Entry {
                key: key.clone(),
                value: format!("v{}", config.keys.sample(rng)),
            }],
            ..Default::default()
        })
        .collect();
    RateLimitRequest {
        domain: config.domain.clone(),
        descriptors,
        hits_addend: config.hits_addend,
    }
}

/// The run over time (`--svg`), shared by the workers.
pub(crate) type SharedTimeline = Option<Arc<std::sync::Mutex<chart::Timeline>>>;

/// What a worker sends on: a clone of a gRPC connection (HTTP/2, shared),
/// or an HTTP/1.1 slot of its own.
#[derive(Clone)]
pub(crate) enum Client {
    Grpc(GrpcConnection),
    Http(HttpSlot),
}

impl Client {
    /// One request: its overall code (an HTTP status read as one), or the
    /// error's kind.
    pub(crate) async fn call(
        &mut self,
        config: &LoadConfig,
        rng: &mut SmallRng,
    ) -> Result<Code, String> {
        match self {
            Client::Grpc(c) => {
                let request = build_request(config, rng);
                let response = c.should_rate_limit(&request).await.map_err(|e| {
                    let mut message = e.to_string();
                    message.truncate(120);
                    message
                })?;
                Ok(Code::try_from(response.overall_code).unwrap_or(Code::Unknown))
            }
            Client::Http(slot) => Ok(match slot.get(config.timeout).await? {
                200 => Code::Ok,
                429 => Code::OverLimit,
                _ => Code::Unknown,
            }),
        }
    }
}

pub(crate) async fn worker(
    mut client: Client,
    config: Arc<LoadConfig>,
    schedule: Schedule,
    pacer: Option<Arc<Pacer>>,
    mut rng: SmallRng,
    mut tally: Tally,
    timeline: SharedTimeline,
) -> Tally {
    loop {
        // `due` is when the request was meant to start and `from` is what its
        // latency is measured from. A worker that is late because its previous
        // request was still running measures from `due`, so queueing behind the
        // in-flight limit shows (no coordinated omission); a worker that waited
        // for its slot measures from when the timer woke it, so the timer's
        // millisecond granularity is not counted as service latency.
        let (due, from) = match &pacer {
            None => {
                let now = Instant::now();
                (now, now)
            }
            Some(p) => {
                let i = p.next.fetch_add(1, Ordering::Relaxed);
                let offset = Duration::from_nanos((i as f64 * p.nanos_per_request) as u64);
                let due = schedule.start + offset;
                let late = Instant::now() >= due;
                if due < schedule.end && !late {
                    tokio::time::sleep_until(due).await;
                }
                (due, if late { due } else { Instant::now().max(due) })
            }
        };
        if due >= schedule.end {
            break;
        }
        let result = tokio::time::timeout(config.timeout, client.call(&config, &mut rng)).await;
        let done = Instant::now();
        if due < schedule.measure_from {
            continue;
        }
        if let Some(t) = &timeline {
            if let Ok(mut t) = t.lock() {
                match &result {
                    Ok(Ok(_)) => {
                        let micros = done.duration_since(from).as_micros();
                        t.answered(done, u64::try_from(micros).unwrap_or(u64::MAX));
                    }
                    _ => t.failed(done),
                }
            }
        }
        match result {
            Ok(Ok(code)) => {
                let micros =
                    u64::try_from(done.duration_since(from).as_micros()).unwrap_or(u64::MAX);
                tally.latency.saturating_record(micros.max(1));
                match code {
                    Code::Ok => tally.ok += 1,
                    Code::OverLimit => tally.over_limit += 1,
                    _ => tally.other_code += 1,
                }
            }
            Ok(Err(e)) => tally.error(e),
            Err(_) => tally.error("timeout".into()),
        }
    }
    tally
}

/// `--target` as `host:port` (an `http://` prefix is accepted).
pub(crate) fn authority(target: &str) -> Result<&str, Failure> {
    if target.starts_with("https://") {
        return Err(Failure::Usage(format!(
            "--target {target:?}: the load tool speaks plaintext HTTP/2 only"
        )));
    }
    let authority = target.strip_prefix("http://").unwrap_or(target);
    Ok(authority.trim_end_matches('/'))
}

/// Opens `config.connections` HTTP/2 connections to the target, connection
/// `i` on the load thread that will drive its slots; with `--http`, one
/// HTTP/1.1 slot per connection, which each of its in-flight slots clones
/// into a connection of its own.
pub(crate) async fn connect(
    config: &LoadConfig,
    threads: &LoadThreads,
) -> Result<Vec<Client>, Failure> {
    let authority = authority(&config.target)?.to_string();
    let mut connections = Vec::with_capacity(config.connections);
    for i in 0..config.connections {
        let connected = match &config.http {
            None => threads
                .for_connection(i)
                .spawn(GrpcConnection::connect(
                    authority.clone(),
                    Duration::from_secs(5),
                ))
                .await
                .map(|c| c.map(Client::Grpc)),
            Some(path) => {
                let (authority, path) = (authority.clone(), path.clone());
                threads
                    .for_connection(i)
                    .spawn(async move {
                        HttpSlot::connect(&authority, &path, Duration::from_secs(5))
                            .await
                            .map(Client::Http)
                    })
                    .await
            }
        };
        let connection = connected
            .map_err(|e| Failure::Fatal(format!("load thread failed: {e}")))?
            .map_err(Failure::Fatal)?;
        connections.push(connection);
    }
    Ok(connections)
}

pub(crate) async fn load(
    label: &'static str,
    config: &LoadConfig,
    connections: Vec<Client>,
    threads: &LoadThreads,
) -> Result<Report, Failure> {
    let config = Arc::new(config.clone());
    let start = Instant::now();
    let schedule = Schedule {
        start,
        measure_from: start + config.warmup,
        end: start + config.warmup + config.duration,
    };
    let pacer = config.rps.map(|rps| {
        Arc::new(Pacer {
            next: AtomicU64::new(0),
            nanos_per_request: 1e9 / rps,
        })
    });
    let timeline: SharedTimeline = match &config.svg {
        Some(_) => Some(Arc::new(std::sync::Mutex::new(
            chart::Timeline::new(schedule.measure_from, config.duration).map_err(Failure::Fatal)?,
        ))),
        None => None,
    };
    let mut workers = tokio::task::JoinSet::new();
    let mut seed = config.seed.wrapping_mul(0x9e37_79b9_7f4a_7c15);
    for (i, connection) in connections.iter().enumerate() {
        for _ in 0..config.concurrency {
            seed = seed.wrapping_add(1);
            workers.spawn_on(
                worker(
                    connection.clone(),
                    Arc::clone(&config),
                    schedule,
                    pacer.clone(),
                    SmallRng::seed_from_u64(seed),
                    Tally::new()?,
                    timeline.clone(),
                ),
                threads.for_connection(i),
            );
        }
    }
    let mut total = Tally::new()?;
    while let Some(done) = workers.join_next().await {
        let tally = done.map_err(|e| Failure::Fatal(format!("worker failed: {e}")))?;
        total.merge(tally)?;
    }
    if let (Some(path), Some(timeline)) = (&config.svg, timeline) {
        let title = format!(
            "{} — {} connection(s) x {} in flight, keys {}",
            config.target,
            config.connections,
            config.concurrency,
            config.keys.describe()
        );
        let timeline = timeline
            .lock()
            .map_err(|_| Failure::Fatal("the timeline's lock was poisoned".into()))?;
        timeline.write_svg(path, &title).map_err(Failure::Fatal)?;
        if let Some((median, worst, at)) = timeline.p999_spread() {
            eprintln!(
                "slices: p99.9 of the median slice {median} us, of the worst {worst} us (slice {} of 60, {:.2}x)",
                at + 1,
                worst as f64 / median.max(1) as f64
            );
        }
    }
    Ok(Report {
        label,
        config: (*config).clone(),
        tally: total,
    })
}

pub(crate) fn load_threads(config: &LoadConfig) -> Result<LoadThreads, Failure> {
    LoadThreads::start(config.threads)
        .map_err(|e| Failure::Fatal(format!("cannot start the load threads: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn targets_are_plaintext_authorities() {
        assert_eq!(authority("127.0.0.1:8081").ok(), Some("127.0.0.1:8081"));
        assert_eq!(authority("http://h:1/").ok(), Some("h:1"));
        assert!(matches!(authority("https://h:1"), Err(Failure::Usage(_))));
    }
}
