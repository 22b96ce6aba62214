//! The accuracy harness: traffic patterns replayed through real service
//! instances against every algorithm, the admitted count compared with the
//! ideal of the algorithm's exact model.
//!
//! The ideal is the pure algorithm (`ratelimit::limiter`) replayed on the
//! times the requests were decided. Those times are known to within one
//! round trip (the store's clock is this machine's clock: Redis `TIME` and
//! the service both read `CLOCK_REALTIME`), so the harness replays each
//! request at the midpoint of its send and its answer and reports any
//! difference; a difference can only come from a request decided within
//! one round trip of a refill or window edge. For the sliding window
//! counter the ideal is the exact sliding log it approximates, and its
//! stated bound (at most limit − 1 above it per window) is the target.
//!
//! Patterns, limit L = 10 per second (token bucket: burst 10):
//! - `boundary burst`: 20 requests just before a second boundary, 20 just
//!   after;
//! - `steady 2x`: 20 per second, evenly, for 3 s;
//! - `idle then burst`: a few requests, 1.5 s idle, then 30 at once;
//! - `concurrent`: 64 callers spread over every instance, 300 requests on
//!   a limit of 100 per hour — time plays no part, so admitted must equal
//!   100 exactly (no excess from races);
//! - `sharded 2x`: the same callers, 200 requests on a limit of 100 per
//!   hour split into 4 sub-buckets (`shards: 4`): never above 100, and at
//!   least 95 admitted (a request can be refused while another sub-bucket
//!   has room);
//! - `leased`: 300 requests on a `lease: true` limit of 100 per hour: never
//!   above 100, and at most instances × largest batch (5 % of the limit)
//!   below it;
//! - `calendar month`: the same callers, 300 requests on a calendar month
//!   of 100 in Asia/Kolkata (`calendar: true`, fixed window only): exactly
//!   100 (where the month starts and ends is the unit tests', on an
//!   injected clock);
//! - `overload 1.5x` / `overload 5x` ([`overload`]): a `lease: true` limit
//!   of 200 per second (token bucket: burst 400) offered 1.5 or 5 times
//!   that, paced, for 6 s, over the instances: never above the
//!   algorithm's own bound, at most instances × largest batch per second
//!   below its ideal; the caller measures the store calls.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use ratelimit::limiter::{Algorithm, AlgorithmName, Limiter, SlidingLog};
use tonic::transport::Channel;

use super::{call, desc, request, Service};

/// Every rate algorithm, as the harness names them.
pub const ALGORITHMS: [AlgorithmName; 4] = AlgorithmName::RATES;

/// Requests per second of the timed patterns.
pub const LIMIT: u64 = 10;
/// Requests per hour of the concurrent pattern.
pub const HOT_LIMIT: u64 = 100;
/// Sub-buckets of the `sharded` rule.
pub const SHARDS: u64 = 4;
/// The most instances a harness fleet has (the lease bound's factor).
pub const MAX_INSTANCES: u64 = 4;
/// The local floor (`fallback_requests_per_unit`) of the outage pattern's
/// rule, `down` (100 per hour, `failure_mode: open`).
pub const FLOOR: u64 = 10;
/// Requests per second of the overload patterns' rule, `over` (`lease:
/// true`; a token bucket's burst is twice it).
pub const OVER_LIMIT: u64 = 200;

/// The rules: per algorithm `alg=<name>`, then `run=<anything>` (10 per
/// second), `hot=<anything>` (100 per hour), `sharded=<anything>` and
/// `leased=<anything>` (100 per hour with `shards: 4`, or `lease: true`
/// but on the exact log), `over=<anything>` ([`OVER_LIMIT`] per second,
/// `lease: true`, not on the exact log), or `down=<anything>` (100 per
/// hour, failing open to a floor of [`FLOOR`]). The fixed window is the
/// original's (no extension key), as users get it by default.
pub fn rules() -> String {
    let mut out = String::from("domain: acc\ndescriptors:\n");
    for a in ALGORITHMS {
        let extra = if a == AlgorithmName::FixedWindow {
            String::new()
        } else {
            format!(", algorithm: {a}")
        };
        out.push_str(&format!(
            "  - key: alg\n    value: {a}\n    descriptors:\n      - key: run\n        rate_limit: {{unit: second, requests_per_unit: {LIMIT}{extra}}}\n      - key: hot\n        rate_limit: {{unit: hour, requests_per_unit: {HOT_LIMIT}{extra}}}\n      - key: down\n        rate_limit: {{unit: hour, requests_per_unit: {HOT_LIMIT}{extra}, failure_mode: open, fallback_requests_per_unit: {FLOOR}}}\n      - key: sharded\n        rate_limit: {{unit: hour, requests_per_unit: {HOT_LIMIT}{extra}, shards: {SHARDS}}}\n"
        ));
        // Calendar windows are fixed windows.
        if a == AlgorithmName::FixedWindow {
            out.push_str(&format!(
                "      - key: month\n        rate_limit: {{unit: month, requests_per_unit: {HOT_LIMIT}, calendar: true, time_zone: Asia/Kolkata}}\n"
            ));
        }
        // An exact log lends nothing out (`lease` is refused on it).
        if a != AlgorithmName::SlidingLog {
            out.push_str(&format!(
                "      - key: leased\n        rate_limit: {{unit: hour, requests_per_unit: {HOT_LIMIT}{extra}, lease: true}}\n"
            ));
            let burst = if a == AlgorithmName::TokenBucket {
                format!(", burst: {}", 2 * OVER_LIMIT)
            } else {
                String::new()
            };
            out.push_str(&format!(
                "      - key: over\n        rate_limit: {{unit: second, requests_per_unit: {OVER_LIMIT}{extra}{burst}, lease: true}}\n"
            ));
        }
    }
    out
}

/// One row of the results.
#[derive(Debug, Clone)]
pub struct Outcome {
    pub store: String,
    pub algorithm: AlgorithmName,
    pub pattern: &'static str,
    pub sent: u64,
    pub admitted: u64,
    /// What the algorithm's exact model admits for the same times.
    pub ideal: u64,
    /// What an exact sliding log (L per any window) admits.
    pub exact_log: u64,
    /// The timed patterns' requests in time order: when each was decided
    /// (the midpoint of its round trip), whether it was admitted, and
    /// whether the exact log admits it; empty for the spread patterns.
    pub trace: Vec<(Duration, bool, bool)>,
    /// The overload patterns' admitted requests: when each was sent and
    /// when its answer came (it was decided in between).
    pub round_trips: Vec<(Duration, Duration)>,
}

impl Outcome {
    /// `admitted − ideal` (negative: fewer than ideal).
    pub fn excess(&self) -> i64 {
        self.admitted as i64 - self.ideal as i64
    }

    /// A table row.
    pub fn row(&self) -> String {
        format!(
            "| {:<8} | {:<14} | {:<15} | {:>4} | {:>8} | {:>5} | {:>6} | {:>9} |",
            self.store,
            self.algorithm.as_str(),
            self.pattern,
            self.sent,
            self.admitted,
            self.ideal,
            self.excess(),
            self.exact_log
        )
    }
}

/// The table header.
pub fn header() -> String {
    "| store    | algorithm      | pattern         | sent | admitted | ideal | excess | exact log |\n|---|---|---|---|---|---|---|---|".into()
}

fn now() -> Duration {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or(Duration::ZERO)
}

/// The model the ideal is computed with.
fn model(algorithm: AlgorithmName, limit: u64, period: Duration) -> Limiter {
    Limiter::new(algorithm, limit, period, None).expect("valid model")
}

/// Replays `times` through `limiter`; whether it admits each.
fn replay(limiter: &impl Algorithm, times: &[Duration]) -> Vec<bool> {
    let mut state = None;
    times
        .iter()
        .map(|&t| {
            let (d, s) = limiter.decide(state.take(), 1, t);
            state = Some(s);
            d.is_allowed()
        })
        .collect()
}

fn count(admitted: &[bool]) -> u64 {
    admitted.iter().filter(|&&a| a).count() as u64
}

/// Sends one unit request on `(alg, run)`; returns whether it was admitted
/// and the midpoint of its round trip.
async fn one(
    client: &mut RateLimitServiceClient<Channel>,
    algorithm: AlgorithmName,
    key: &str,
    value: &str,
) -> (bool, Duration) {
    let sent = now();
    let r = call(
        client,
        request(
            "acc",
            vec![desc(&[("alg", algorithm.as_str()), (key, value)])],
        ),
    )
    .await
    .expect("the service answers");
    let answered = now();
    (r.overall_code == 1, sent + (answered - sent) / 2)
}

/// `n` unit requests on `(alg, run=value)` at once, each on its own clone of
/// `client` (one HTTP/2 connection, concurrent streams).
async fn burst(
    client: &RateLimitServiceClient<Channel>,
    algorithm: AlgorithmName,
    value: &str,
    n: usize,
) -> Vec<(bool, Duration)> {
    let calls = (0..n).map(|_| {
        let mut client = client.clone();
        let value = value.to_string();
        async move { one(&mut client, algorithm, "run", &value).await }
    });
    futures::future::join_all(calls).await
}

/// Sleeps until the wall clock reads `at`.
async fn until(at: Duration) {
    let now = now();
    if at > now {
        tokio::time::sleep(at - now).await;
    }
}

fn outcome(
    store: &str,
    algorithm: AlgorithmName,
    pattern: &'static str,
    results: &[(bool, Duration)],
) -> Outcome {
    let times: Vec<Duration> = results.iter().map(|r| r.1).collect();
    let second = Duration::from_secs(1);
    let ideal_model = if algorithm == AlgorithmName::SlidingWindow {
        model(AlgorithmName::SlidingLog, LIMIT, second)
    } else {
        model(algorithm, LIMIT, second)
    };
    let exact = replay(&SlidingLog::new(LIMIT, second).expect("valid"), &times);
    Outcome {
        store: store.to_string(),
        algorithm,
        pattern,
        sent: results.len() as u64,
        admitted: results.iter().filter(|r| r.0).count() as u64,
        ideal: count(&replay(&ideal_model, &times)),
        exact_log: count(&exact),
        trace: results
            .iter()
            .zip(exact)
            .map(|(&(admitted, at), exact)| (at, admitted, exact))
            .collect(),
        round_trips: Vec::new(),
    }
}

/// The three timed patterns for one algorithm, through `client`.
pub async fn timed_patterns(
    store: &str,
    client: &mut RateLimitServiceClient<Channel>,
    algorithm: AlgorithmName,
) -> Vec<Outcome> {
    let run = format!("{:x}", rand_u64());
    let mut out = Vec::new();

    // Boundary burst: 20 at once 200 ms before a second boundary, 20 at once
    // 10 ms after it. Each burst is sent concurrently, so that it lands on
    // its side of the boundary even on a slow machine (20 sequential calls
    // can take longer than the gap).
    let boundary = Duration::from_secs(now().as_secs() + 2);
    until(boundary - Duration::from_millis(200)).await;
    let value = format!("{run}-boundary");
    let mut results = burst(client, algorithm, &value, 20).await;
    until(boundary + Duration::from_millis(10)).await;
    results.extend(burst(client, algorithm, &value, 20).await);
    results.sort_by_key(|r| r.1);
    out.push(outcome(store, algorithm, "boundary burst", &results));

    // Steady 2x: 20 per second for 3 s, every 50 ms from mid-second.
    let start = Duration::from_secs(now().as_secs() + 1) + Duration::from_millis(500);
    let value = format!("{run}-steady");
    let mut results = Vec::new();
    for i in 0..60u32 {
        until(start + Duration::from_millis(50) * i).await;
        results.push(one(client, algorithm, "run", &value).await);
    }
    out.push(outcome(store, algorithm, "steady 2x", &results));

    // Idle then burst: 5 requests, 1.5 s idle, 30 at once.
    let value = format!("{run}-idle");
    let mut results = Vec::new();
    for _ in 0..5 {
        results.push(one(client, algorithm, "run", &value).await);
    }
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    for _ in 0..30 {
        results.push(one(client, algorithm, "run", &value).await);
    }
    out.push(outcome(store, algorithm, "idle then burst", &results));
    out
}

/// A pattern of 64 callers spread over the instances: `sent` requests on
/// one fresh key of `key`'s rule, against an ideal of `ideal` admitted.
pub struct Spread {
    pub pattern: &'static str,
    pub key: &'static str,
    pub sent: u64,
    pub ideal: u64,
}

impl Spread {
    /// 300 requests on one key of 100 per hour: admitted must be exactly 100.
    pub const CONCURRENT: Spread = Spread {
        pattern: "concurrent",
        key: "hot",
        sent: 3 * HOT_LIMIT,
        ideal: HOT_LIMIT,
    };
    /// Twice the limit on a sharded key (see the module doc).
    pub const SHARDED: Spread = Spread {
        pattern: "sharded 2x",
        key: "sharded",
        sent: 2 * HOT_LIMIT,
        ideal: HOT_LIMIT,
    };
    /// Three times the limit on a leased key (see the module doc).
    pub const LEASED: Spread = Spread {
        pattern: "leased",
        key: "leased",
        sent: 3 * HOT_LIMIT,
        ideal: HOT_LIMIT,
    };

    /// Three times the limit on a calendar month (see the module doc).
    pub const CALENDAR_MONTH: Spread = Spread {
        pattern: "calendar month",
        key: "month",
        sent: 3 * HOT_LIMIT,
        ideal: HOT_LIMIT,
    };

    /// With the store down (the caller paused it): 200 requests on one key
    /// of the `down` rule. Each instance's floor admits exactly [`FLOOR`],
    /// so the fleet admits exactly instances × [`FLOOR`]: stricter than the
    /// limit, never absent.
    pub fn outage(instances: usize) -> Spread {
        Spread {
            pattern: "outage",
            key: "down",
            sent: 2 * HOT_LIMIT,
            ideal: instances as u64 * FLOOR,
        }
    }

    /// Runs the pattern.
    pub async fn run(
        &self,
        store: &str,
        instances: &[Service],
        algorithm: AlgorithmName,
    ) -> Outcome {
        let admitted = spread(instances, algorithm, self.key, self.sent).await;
        Outcome {
            store: store.to_string(),
            algorithm,
            pattern: self.pattern,
            sent: self.sent,
            admitted,
            ideal: self.ideal,
            exact_log: HOT_LIMIT,
            trace: Vec::new(),
            round_trips: Vec::new(),
        }
    }
}

/// `total` unit requests on one fresh value of `key`, from 64 callers, the
/// i-th on instance i mod n; how many were admitted.
async fn spread(
    instances: &[Service],
    algorithm: AlgorithmName,
    key: &'static str,
    total: u64,
) -> u64 {
    let mut clients = Vec::new();
    for svc in instances {
        clients.push(svc.client().await);
    }
    let value = format!("{:x}", rand_u64());
    let next = Arc::new(AtomicU64::new(0));
    let admitted = Arc::new(AtomicU64::new(0));
    let tasks: Vec<_> = (0..64)
        .map(|i| {
            let mut client = clients[i % clients.len()].clone();
            let (next, admitted, value) = (Arc::clone(&next), Arc::clone(&admitted), value.clone());
            tokio::spawn(async move {
                while next.fetch_add(1, Ordering::SeqCst) < total {
                    let (ok, _) = one(&mut client, algorithm, key, &value).await;
                    admitted.fetch_add(u64::from(ok), Ordering::SeqCst);
                }
            })
        })
        .collect();
    for t in tasks {
        t.await.expect("caller");
    }
    admitted.load(Ordering::SeqCst)
}

/// The leasable algorithms.
pub const LEASABLE: [AlgorithmName; 3] = [
    AlgorithmName::FixedWindow,
    AlgorithmName::SlidingWindow,
    AlgorithmName::TokenBucket,
];

/// How long an overload pattern offers its load; the first second is its
/// warm-up (the key turns hot).
pub const OVERLOAD_SPAN: Duration = Duration::from_secs(6);

/// Requests on one fresh value of the `over` rule of `algorithm`, offered
/// at `factor` × [`OVER_LIMIT`] per second, evenly spaced, for
/// [`OVERLOAD_SPAN`], from 64 callers over `instances` (the i-th on
/// instance i mod n). `after_warm_up` runs once, one second in (the caller
/// resets its store-call count there). Returns the outcome, whose ideal is
/// the algorithm's model replayed on the request times, and the decisions
/// made after the warm-up.
pub async fn overload(
    store: &str,
    instances: &[Service],
    algorithm: AlgorithmName,
    factor: f64,
    after_warm_up: impl FnOnce(),
) -> (Outcome, u64) {
    let mut clients = Vec::new();
    for svc in instances {
        clients.push(svc.client().await);
    }
    let value = format!("{:x}", rand_u64());
    let rate = (factor * OVER_LIMIT as f64) as u64;
    let gap = Duration::from_secs(1) / rate as u32;
    let total = rate * OVERLOAD_SPAN.as_secs();
    // Whole seconds, so that windows and the model line up.
    let start = Duration::from_secs(now().as_secs() + 1);
    let warm_end = start + Duration::from_secs(1);
    let next = Arc::new(AtomicU64::new(0));
    let results = Arc::new(std::sync::Mutex::new(Vec::new()));
    let tasks: Vec<_> = (0..64)
        .map(|i| {
            let mut client = clients[i % clients.len()].clone();
            let (next, results, value) = (Arc::clone(&next), Arc::clone(&results), value.clone());
            tokio::spawn(async move {
                loop {
                    let n = next.fetch_add(1, Ordering::SeqCst);
                    if n >= total {
                        break;
                    }
                    until(start + gap * n as u32).await;
                    let sent = now();
                    let (ok, at) = one(&mut client, algorithm, "over", &value).await;
                    let answered = now();
                    results
                        .lock()
                        .expect("results")
                        .push((ok, at, sent, answered));
                }
            })
        })
        .collect();
    until(warm_end).await;
    after_warm_up();
    for t in tasks {
        t.await.expect("caller");
    }
    let mut results: Vec<(bool, Duration, Duration, Duration)> =
        std::mem::take(&mut *results.lock().expect("results"));
    results.sort_by_key(|r| r.1);
    let after = results.iter().filter(|r| r.1 >= warm_end).count() as u64;
    let times: Vec<Duration> = results.iter().map(|r| r.1).collect();
    let limiter = over_model(algorithm);
    let pattern = if factor < 2.0 {
        "overload 1.5x"
    } else {
        "overload 5x"
    };
    let outcome = Outcome {
        store: store.to_string(),
        algorithm,
        pattern,
        sent: results.len() as u64,
        admitted: results.iter().filter(|r| r.0).count() as u64,
        ideal: count(&replay(&limiter, &times)),
        exact_log: count(&replay(
            &SlidingLog::new(OVER_LIMIT, Duration::from_secs(1)).expect("valid"),
            &times,
        )),
        trace: results
            .iter()
            .map(|&(ok, at, ..)| (at, ok, false))
            .collect(),
        round_trips: results
            .iter()
            .filter(|r| r.0)
            .map(|&(_, _, sent, answered)| (sent, answered))
            .collect(),
    };
    (outcome, after)
}

/// The `over` rule's model.
fn over_model(algorithm: AlgorithmName) -> Limiter {
    let burst = (algorithm == AlgorithmName::TokenBucket).then_some(2 * OVER_LIMIT);
    Limiter::new(algorithm, OVER_LIMIT, Duration::from_secs(1), burst).expect("valid model")
}

/// The overload patterns' bound, asserted on `o` from `instances`:
/// - never above the algorithm's own: a fixed or sliding window admits at
///   most the limit in any window of the clock (the sliding window's
///   count is at most the limit), a token bucket at most burst + rate ×
///   elapsed since the first request. A request was decided somewhere in
///   its round trip, so a window counts the admitted requests whose whole
///   round trip lies in it, and the bucket the requests answered by a
///   time against the refill since the first was sent;
/// - below the model replayed on the same times by at most instances ×
///   largest batch per second of the pattern, plus one request per
///   second decided within a round trip of an edge.
pub fn check_overload(o: &Outcome, instances: usize) {
    let what = o.row();
    let model = over_model(o.algorithm);
    let edges = OVERLOAD_SPAN.as_secs() + 1;
    if o.algorithm == AlgorithmName::TokenBucket {
        let first = o.round_trips.iter().map(|r| r.0).min().unwrap_or_default();
        let mut answered: Vec<Duration> = o.round_trips.iter().map(|r| r.1).collect();
        answered.sort();
        for (n, t) in answered.iter().enumerate() {
            let refilled = ((*t - first).as_secs_f64() * OVER_LIMIT as f64).ceil() as u64;
            assert!(
                (n as u64) < model.capacity() + refilled + 1,
                "burst + rate × elapsed at {t:?}: {what}"
            );
        }
    } else {
        let mut per = std::collections::HashMap::<u64, u64>::new();
        for (sent, answered) in &o.round_trips {
            if sent.as_secs() == answered.as_secs() {
                *per.entry(sent.as_secs()).or_default() += 1;
            }
        }
        let most = per.values().copied().max().unwrap_or(0);
        assert!(most <= OVER_LIMIT, "{most} in one window: {what}");
    }
    let largest_batch =
        ratelimit::resilience::leases::LeaseOptions::default().largest_batch(model.capacity());
    let slack = instances as u64 * largest_batch * OVERLOAD_SPAN.as_secs() + edges;
    assert!(
        o.admitted + slack >= o.ideal,
        "within instances × batch per second: {what}"
    );
}

/// Returns once the calendar month of the `month` rule has a minute left
/// (at once but in the last minute of a month in Asia/Kolkata).
async fn month_away_from_its_end() {
    use ratelimit::limiter::{Calendar, Unit};
    let month = Calendar::new(Unit::Month, "Asia/Kolkata").expect("a zone");
    let now = now().as_secs();
    let end = month.window_at(now).end();
    if end - now < 60 {
        tokio::time::sleep(Duration::from_secs(end - now + 1)).await;
    }
}

/// The outage pattern for every algorithm, on `instances` whose Redis
/// `pause(true)` stops and `pause(false)` resumes.
pub async fn run_outage(store: &str, instances: &[Service], pause: impl Fn(bool)) -> Vec<Outcome> {
    pause(true);
    let mut out = Vec::new();
    for a in ALGORITHMS {
        out.push(
            Spread::outage(instances.len())
                .run(store, instances, a)
                .await,
        );
    }
    pause(false);
    out
}

/// Every pattern for every algorithm on one store; the timed patterns of
/// the algorithms run side by side on instance 0.
pub async fn run_all(store: &str, instances: &[Service]) -> Vec<Outcome> {
    let mut timed = Vec::new();
    for a in ALGORITHMS {
        let mut client = instances[0].client().await;
        let store = store.to_string();
        timed.push(tokio::spawn(async move {
            timed_patterns(&store, &mut client, a).await
        }));
    }
    let mut out = Vec::new();
    for t in timed {
        out.extend(t.await.expect("patterns"));
    }
    // Hour windows: keep the concurrent pattern inside one.
    super::wait_for_fresh_window(3600, 10);
    for a in ALGORITHMS {
        out.push(Spread::CONCURRENT.run(store, instances, a).await);
        out.push(Spread::SHARDED.run(store, instances, a).await);
        if a != AlgorithmName::SlidingLog {
            out.push(Spread::LEASED.run(store, instances, a).await);
        }
        if a == AlgorithmName::FixedWindow {
            month_away_from_its_end().await;
            out.push(Spread::CALENDAR_MONTH.run(store, instances, a).await);
        }
    }
    out
}

/// The targets, asserted: the exact algorithms within one request of their
/// ideal (a request decided within a round trip of an edge), the sliding
/// window counter within its bound, the fixed window showing its boundary
/// burst, and no excess at all where time plays no part.
pub fn check(outcomes: &[Outcome]) {
    for o in outcomes {
        let what = o.row();
        match (o.pattern, o.algorithm) {
            ("concurrent", _) => assert_eq!(o.admitted, o.ideal, "race excess: {what}"),
            ("calendar month", _) => assert_eq!(o.admitted, o.ideal, "the month: {what}"),
            ("outage", _) => assert_eq!(o.admitted, o.ideal, "the fleet's floor: {what}"),
            ("sharded 2x", _) => {
                assert!(o.admitted <= o.ideal, "never above the limit: {what}");
                assert!(o.admitted * 100 >= 95 * o.ideal, "95 % of it: {what}");
            }
            ("leased", _) => {
                let largest_batch = o.ideal / 20;
                assert!(o.admitted <= o.ideal, "never above the limit: {what}");
                assert!(
                    o.admitted + MAX_INSTANCES * largest_batch >= o.ideal,
                    "within instances × batch: {what}"
                );
            }
            (_, AlgorithmName::SlidingWindow) => {
                // At most limit − 1 above the exact log per window the
                // pattern spans (≤ 4 windows), never below what fits.
                assert!(o.admitted <= o.exact_log + 4 * (LIMIT - 1), "{what}");
            }
            _ => assert!(o.excess().abs() <= 1, "{what}"),
        }
        if o.pattern == "boundary burst" {
            match o.algorithm {
                AlgorithmName::FixedWindow => assert!(o.admitted >= 2 * LIMIT - 1, "2x: {what}"),
                AlgorithmName::SlidingLog => assert!(o.admitted <= LIMIT + 1, "{what}"),
                _ => {}
            }
        }
    }
}

fn rand_u64() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(now().as_nanos());
    h.finish()
}

/// The environment of a service on Redis (`kind` single or cluster).
pub fn redis_env(kind: &str, url: String) -> Vec<(&'static str, String)> {
    vec![
        ("BACKEND_TYPE", "redis".into()),
        ("REDIS_SOCKET_TYPE", "tcp".into()),
        ("REDIS_TYPE", kind.into()),
        ("REDIS_URL", url),
    ]
}

/// `n` instances with the harness's rules on top of `env`; a key is leased
/// from 10 decisions per second (the patterns are short).
pub fn instances(n: usize, env: &[(&str, String)]) -> Vec<Service> {
    let rules = rules();
    let mut env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    env.push(("LEASE_MIN_RATE", "10"));
    (0..n)
        .map(|_| Service::start(&[("rules.yaml", &rules)], &env))
        .collect()
}

/// Writes, for `store`, the timed patterns `boundary burst` and `steady 2x`
/// of every algorithm as one SVG: per panel, the requests admitted in the
/// trailing second at each decision, for the algorithm and for an exact
/// sliding log on the same request times, against the limit. The fixed
/// window's boundary burst is the blue line reaching twice the limit.
pub fn write_svg(outcomes: &[Outcome], store: &str, path: &std::path::Path) -> Result<(), String> {
    draw(outcomes, store, path).map_err(|e| format!("{}: {e}", path.display()))
}

fn draw(
    outcomes: &[Outcome],
    store: &str,
    path: &std::path::Path,
) -> Result<(), Box<dyn std::error::Error>> {
    use plotters::prelude::*;
    let patterns = ["boundary burst", "steady 2x"];
    let root = SVGBackend::new(path, (1200, 620)).into_drawing_area();
    root.fill(&WHITE)?;
    let root = root.titled(
        &format!("admitted in the trailing second, {store} store (limit {LIMIT}/s): each algorithm against an exact log"),
        ("sans-serif", 18),
    )?;
    let panels = root.split_evenly((patterns.len(), ALGORITHMS.len()));
    for (n, panel) in panels.iter().enumerate() {
        let (pattern, algorithm) = (
            patterns[n / ALGORITHMS.len()],
            ALGORITHMS[n % ALGORITHMS.len()],
        );
        let Some(o) = outcomes
            .iter()
            .find(|o| o.store == store && o.pattern == pattern && o.algorithm == algorithm)
        else {
            continue;
        };
        let Some(&(first, ..)) = o.trace.first() else {
            continue;
        };
        // Admitted in (t − 1 s, t] at each decision, for the real answers
        // and for the exact log.
        let in_window = |pick: fn(&(Duration, bool, bool)) -> bool| -> Vec<(f64, f64)> {
            o.trace
                .iter()
                .map(|r| {
                    let n = o
                        .trace
                        .iter()
                        .filter(|s| s.0 <= r.0 && s.0 + Duration::from_secs(1) > r.0 && pick(s))
                        .count();
                    ((r.0 - first).as_secs_f64(), n as f64)
                })
                .collect()
        };
        let real = in_window(|r| r.1);
        let exact = in_window(|r| r.2);
        let end = real.last().map_or(1.0, |p| p.0).max(0.5) * 1.05;
        let top = (2 * LIMIT + 4) as f64;
        let mut chart = ChartBuilder::on(panel)
            .caption(
                format!("{} — {pattern}", algorithm.as_str()),
                ("sans-serif", 14),
            )
            .margin(8)
            .x_label_area_size(24)
            .y_label_area_size(30)
            .build_cartesian_2d(0.0..end, 0.0..top)?;
        chart
            .configure_mesh()
            .x_desc("s")
            .max_light_lines(2)
            .draw()?;
        chart.draw_series(LineSeries::new(
            vec![(0.0, LIMIT as f64), (end, LIMIT as f64)],
            BLACK.mix(0.4),
        ))?;
        chart
            .draw_series(LineSeries::new(exact, RED.stroke_width(2)))?
            .label("exact log")
            .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 14, y)], RED));
        chart
            .draw_series(LineSeries::new(real, BLUE.stroke_width(2)))?
            .label("admitted")
            .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 14, y)], BLUE));
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::UpperLeft)
            .background_style(WHITE.mix(0.8))
            .label_font(("sans-serif", 11))
            .draw()?;
    }
    root.present()?;
    Ok(())
}
