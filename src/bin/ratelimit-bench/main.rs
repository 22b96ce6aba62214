//! `ratelimit-bench`: a bounded load tool for `ShouldRateLimit`.
//!
//! Run `ratelimit-bench --help` for the full usage. Three modes:
//!
//! - `run`: drives `ShouldRateLimit` against `--target` over `--connections`
//!   HTTP/2 connections with `--concurrency` requests in flight **per
//!   connection**, for `--warmup` then `--duration`, and prints requests/s,
//!   latency percentiles (HdrHistogram, microseconds), the counts of OK /
//!   OVER_LIMIT / other codes / errors, and one JSON line.
//! - `noop`: serves a no-op rate limit service that answers OK at once (one
//!   OK status per descriptor), to measure the gRPC stack's ceiling with the
//!   same client. Prints `listening on ADDR` first (useful with port 0).
//! - `compare`: starts the no-op server (this binary's `noop`, as a child
//!   process, so it runs like a separate server would) on a free loopback
//!   port, runs the same load against it and then against `--target`, and
//!   prints both results and the ratios target/noop.
//!
//! Every run stops by itself: the duration is bounded (at most one hour) and
//! every request has a timeout.

// Tests and the load tool measure the real elapsed time of real processes.
#![allow(clippy::disallowed_types)]

use std::collections::BTreeMap;
use std::process::ExitCode;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use envoy_types::pb::envoy::extensions::common::ratelimit::v3::{
    rate_limit_descriptor::Entry, RateLimitDescriptor,
};
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitRequest;
use hdrhistogram::Histogram;
use rand::rngs::SmallRng;
use rand::SeedableRng;
use ratelimit::go::cli::{Flag, FlagError, FlagKind, FlagSet, Parsed};
use tokio::time::Instant;

/// Writes to standard output, ignoring a closed pipe.
macro_rules! out {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let mut stdout = std::io::stdout().lock();
        let _ = writeln!(stdout, $($arg)*);
        let _ = stdout.flush();
    }};
}

mod chart;
mod grpc;
mod http1;
mod keys;
mod noop;
mod threads;
use grpc::GrpcConnection;
use http1::HttpSlot;
use keys::KeyDist;
use noop::{noop_command, parse_noop, NoopChild};
use threads::LoadThreads;

const HELP: &str = "\
ratelimit-bench: bounded load tool for the rate limit service (ShouldRateLimit)

USAGE:
  ratelimit-bench run     [OPTIONS]           load --target and report
  ratelimit-bench compare [OPTIONS]           load a no-op server (a child process on a
                                              free loopback port), then --target, and
                                              report both and the ratios target/noop
  ratelimit-bench noop    [--listen ADDR] [--duration D] [--tls-cert F --tls-key F]
                                              serve a no-op rate limit service
  ratelimit-bench help                        this text

Flags take `--name value` or `--name=value` (one dash works too).

LOAD OPTIONS (run, compare):
  --target HOST:PORT    server to load (default 127.0.0.1:8081)
  --connections N       HTTP/2 connections (default 1)
  --threads T           load threads, each a single-threaded runtime owning
                        every T-th connection (default: connections, at most
                        the number of CPUs this process may run on)
  --concurrency M       requests in flight PER CONNECTION (default 16);
                        in flight in total = N * M
  --duration D          measured time (default 10s; at most 1h)
  --warmup D            unmeasured time before it (default 2s)
  --timeout D           per-request deadline; a late answer counts as an error
                        (default 5s)
  --rps R               open loop: start R requests/s in total, on schedule;
                        a request that starts late because its slot was busy
                        is measured from its scheduled time, so queueing behind
                        the in-flight limit shows; one that waited for the
                        timer is measured from when it was sent (tokio timers
                        tick per millisecond). Default: closed loop, every
                        in-flight slot sends its next request at once
  --domain NAME         request domain (default bench)
  --descriptors D       descriptors per request (default 1), each with one entry
  --entries KEYS        entry keys, comma-separated, one per descriptor; a single
                        KEY with D > 1 means KEY_0 .. KEY_{D-1} (default key)
  --keys DIST           how entry values are drawn, independently per descriptor:
                          hot          always v0 (one hot key; default)
                          uniform:K    v0 .. v{K-1}, uniformly
                          zipf:K:S     v0 .. v{K-1}, rank r with weight
                                       1/(r+1)^S (K at most 10000000)
  --hits-addend H       request hits_addend (default 0, as Envoy sends)
  --http PATH           run only: load an HTTP/1.1 server (a proxy such as Envoy in
                        front of the service) with `GET PATH` instead of
                        ShouldRateLimit; 200 counts as OK, 429 as OVER_LIMIT, any
                        other status as another code. HTTP/1.1 has one request in
                        flight per connection, so each in-flight slot opens its own
                        connection (connections x concurrency of them)
  --seed S              random seed (default 1)
  --rounds R            compare only: R rounds of (noop, target), the order
                        alternating each round; the report sums them (default 1)
  --svg FILE            run only: write the run over time as an SVG chart
                        (throughput, errors, p50 / p99 / p99.9 per 1/60 of it)

NOOP OPTIONS:
  --listen ADDR         address to serve on (default 127.0.0.1:8081); port 0
                        picks a free port. Prints `listening on ADDR` first.
  --duration D          stop after D (default 0: until SIGINT/SIGTERM)
  --tls-cert FILE       serve TLS (ALPN h2) with this PEM certificate chain...
  --tls-key FILE        ...and this PEM private key (for testing TLS clients)
  --tls-client-ca FILE  require client certificates issued by this PEM CA

DURATIONS: Go syntax (300ms, 2s, 1m30s, 1.5s) or a plain number of seconds.

OUTPUT: a human-readable report, then one line holding a JSON object:
  run:     {\"mode\":\"run\",\"target\":..,\"requests\":..,\"rps\":..,\"ok\":..,
            \"over_limit\":..,\"other_code\":..,\"errors\":..,\"p50_us\":..,\"p90_us\":..,
            \"p99_us\":..,\"p999_us\":..,\"max_us\":..,\"mean_us\":.., ...}
  compare: {\"mode\":\"compare\",\"noop\":{..},\"target\":{..},\"rps_ratio\":..,
            \"p50_ratio\":..,\"p99_ratio\":..}   (ratios are target / noop)

EXIT STATUS: 0 when the run completed (request errors are counted, not fatal),
1 when it could not start (e.g. cannot connect), 2 on a bad command line.
";

/// Upper bound of `--duration` and `--warmup`.
const MAX_DURATION: Duration = Duration::from_secs(3600);
/// Upper bound of zipf's key count (the CDF table is 8 bytes a key).
const MAX_ZIPF_KEYS: u64 = 10_000_000;
/// Slack in the lifetime of `compare`'s no-op child.
const MIN_NOOP_LIFE: Duration = Duration::from_secs(30);

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args_os()
        .skip(1)
        .map(|a| a.to_string_lossy().into_owned())
        .collect();
    let Some((command, rest)) = args.split_first() else {
        eprint!("{HELP}");
        return ExitCode::from(2);
    };
    let result = match command.as_str() {
        "run" => parse_load(rest, "run").and_then(|c| block_on(run_command(c))),
        "compare" => parse_load(rest, "compare").and_then(|c| {
            let noop = NoopChild::start(&c)?;
            block_on(compare_command(c, &noop))
        }),
        "noop" => parse_noop(rest).and_then(noop_command),
        "help" | "-h" | "-help" | "--help" => {
            out!("{}", HELP.trim_end());
            return ExitCode::SUCCESS;
        }
        other => Err(Failure::Usage(format!("unknown command {other:?}"))),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(Failure::Help) => {
            out!("{}", HELP.trim_end());
            ExitCode::SUCCESS
        }
        Err(Failure::Usage(msg)) => {
            eprintln!("ratelimit-bench: {msg}");
            eprintln!("run `ratelimit-bench --help` for the usage");
            ExitCode::from(2)
        }
        Err(Failure::Fatal(msg)) => {
            eprintln!("ratelimit-bench: error: {msg}");
            ExitCode::from(1)
        }
    }
}

/// Why the tool stops early.
#[derive(Debug)]
enum Failure {
    Help,
    Usage(String),
    Fatal(String),
}

/// Runs a command's orchestration; the load itself runs on [`LoadThreads`].
fn block_on<F: std::future::Future<Output = Result<(), Failure>>>(f: F) -> Result<(), Failure> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| Failure::Fatal(format!("cannot start the runtime: {e}")))?
        .block_on(f)
}

// ---------------------------------------------------------------------------
// Command lines.

fn string_flag(name: &'static str, default: &'static str) -> Flag {
    Flag {
        name,
        kind: FlagKind::String,
        usage: "",
        default,
    }
}

fn parse_flags(set: &FlagSet, args: &[String]) -> Result<Parsed, Failure> {
    let parsed = set.parse(args.iter().cloned()).map_err(|e| match e {
        FlagError::Help => Failure::Help,
        e => Failure::Usage(e.to_string()),
    })?;
    if let Some(extra) = parsed.rest.first() {
        return Err(Failure::Usage(format!("unexpected argument {extra:?}")));
    }
    Ok(parsed)
}

/// A duration flag: Go's `time.ParseDuration`, as the service's settings
/// read it, or a plain number of seconds.
fn parse_duration(text: &str) -> Result<Duration, String> {
    match text.parse::<f64>() {
        Ok(secs) => Duration::try_from_secs_f64(secs).map_err(|e| e.to_string()),
        Err(_) => ratelimit::settings::parse::parse_duration(text).map_err(|e| e.to_string()),
    }
    .map_err(|e| format!("invalid duration {text:?}: {e}"))
}

fn parse_number<T: std::str::FromStr>(name: &str, text: &str) -> Result<T, Failure> {
    text.parse()
        .map_err(|_| Failure::Usage(format!("invalid value {text:?} for --{name}")))
}

fn bounded(name: &str, value: usize, low: usize, high: usize) -> Result<usize, Failure> {
    if (low..=high).contains(&value) {
        Ok(value)
    } else {
        Err(Failure::Usage(format!(
            "--{name} must be between {low} and {high}, got {value}"
        )))
    }
}

/// One load definition (shared by `run` and both halves of `compare`).
#[derive(Debug, Clone)]
struct LoadConfig {
    target: String,
    connections: usize,
    threads: usize,
    concurrency: usize,
    duration: Duration,
    warmup: Duration,
    timeout: Duration,
    rps: Option<f64>,
    domain: String,
    entries: Vec<String>,
    keys: KeyDist,
    hits_addend: u32,
    seed: u64,
    rounds: u32,
    /// `--svg FILE` (run only): the run over time as a chart.
    svg: Option<std::path::PathBuf>,
    /// `--http PATH` (run only): `GET PATH` over HTTP/1.1 instead of gRPC.
    http: Option<String>,
}

fn load_flags(command: &'static str) -> FlagSet {
    FlagSet::new(
        command,
        vec![
            string_flag("target", "127.0.0.1:8081"),
            string_flag("connections", "1"),
            string_flag("threads", ""),
            string_flag("concurrency", "16"),
            string_flag("duration", "10s"),
            string_flag("warmup", "2s"),
            string_flag("timeout", "5s"),
            string_flag("rps", ""),
            string_flag("domain", "bench"),
            string_flag("descriptors", "1"),
            string_flag("entries", "key"),
            string_flag("keys", "hot"),
            string_flag("hits-addend", "0"),
            string_flag("seed", "1"),
            string_flag("rounds", "1"),
            string_flag("svg", ""),
            string_flag("http", ""),
        ],
    )
}

fn parse_load(args: &[String], command: &'static str) -> Result<LoadConfig, Failure> {
    let set = load_flags(command);
    let p = parse_flags(&set, args)?;
    let get = |name: &str| p.string(&set, name);
    let duration_of = |name: &str| {
        let d = parse_duration(&get(name)).map_err(Failure::Usage)?;
        if d > MAX_DURATION {
            return Err(Failure::Usage(format!("--{name} is at most 1h")));
        }
        Ok(d)
    };
    let connections = bounded(
        "connections",
        parse_number("connections", &get("connections"))?,
        1,
        1024,
    )?;
    let threads = match get("threads").as_str() {
        "" => connections.min(std::thread::available_parallelism().map_or(1, |n| n.get())),
        text => bounded("threads", parse_number("threads", text)?, 1, 1024)?,
    };
    let concurrency = bounded(
        "concurrency",
        parse_number("concurrency", &get("concurrency"))?,
        1,
        10_000,
    )?;
    if connections * concurrency > 100_000 {
        return Err(Failure::Usage(
            "--connections x --concurrency is at most 100000".into(),
        ));
    }
    let duration = duration_of("duration")?;
    if duration.is_zero() {
        return Err(Failure::Usage("--duration must be positive".into()));
    }
    let rps = match get("rps").as_str() {
        "" => None,
        text => match parse_number::<f64>("rps", text)? {
            r if r.is_finite() && r > 0.0 => Some(r),
            _ => return Err(Failure::Usage("--rps must be positive".into())),
        },
    };
    let descriptors = bounded(
        "descriptors",
        parse_number("descriptors", &get("descriptors"))?,
        1,
        64,
    )?;
    let names: Vec<String> = get("entries").split(',').map(str::to_string).collect();
    let entries = if names.len() == descriptors {
        names
    } else if names.len() == 1 {
        (0..descriptors)
            .map(|i| format!("{}_{i}", names[0]))
            .collect()
    } else {
        return Err(Failure::Usage(format!(
            "--entries has {} keys for {descriptors} descriptors",
            names.len()
        )));
    };
    let target = get("target");
    if target.is_empty() {
        return Err(Failure::Usage("--target must not be empty".into()));
    }
    let config = LoadConfig {
        target,
        connections,
        threads,
        concurrency,
        duration,
        warmup: duration_of("warmup")?,
        timeout: duration_of("timeout")?.max(Duration::from_millis(1)),
        rps,
        domain: get("domain"),
        entries,
        keys: KeyDist::parse(&get("keys")).map_err(Failure::Usage)?,
        hits_addend: parse_number("hits-addend", &get("hits-addend"))?,
        seed: parse_number("seed", &get("seed"))?,
        rounds: u32::try_from(bounded(
            "rounds",
            parse_number("rounds", &get("rounds"))?,
            1,
            100,
        )?)
        .unwrap_or(1),
        svg: Some(get("svg"))
            .filter(|f| !f.is_empty())
            .map(std::path::PathBuf::from),
        http: Some(get("http")).filter(|p| !p.is_empty()),
    };
    if config.http.is_some() && command == "compare" {
        return Err(Failure::Usage(
            "--http loads a proxy: use it with run (compare loads a no-op rate limit service)"
                .into(),
        ));
    }
    if (config.warmup + config.duration) * config.rounds > MAX_DURATION {
        return Err(Failure::Usage(
            "--rounds x (--warmup + --duration) is at most 1h".into(),
        ));
    }
    Ok(config)
}

// ---------------------------------------------------------------------------
// The load.

/// What one worker (one in-flight slot) saw.
struct Tally {
    latency: Histogram<u64>,
    ok: u64,
    over_limit: u64,
    other_code: u64,
    errors: u64,
    error_kinds: BTreeMap<String, u64>,
}

impl Tally {
    fn new() -> Result<Tally, Failure> {
        // 1 µs .. 1 h, 3 significant digits.
        let latency = Histogram::new_with_bounds(1, 3_600_000_000, 3)
            .map_err(|e| Failure::Fatal(format!("histogram: {e}")))?;
        Ok(Tally {
            latency,
            ok: 0,
            over_limit: 0,
            other_code: 0,
            errors: 0,
            error_kinds: BTreeMap::new(),
        })
    }

    fn merge(&mut self, other: Tally) -> Result<(), Failure> {
        self.latency
            .add(&other.latency)
            .map_err(|e| Failure::Fatal(format!("histogram: {e:?}")))?;
        self.ok += other.ok;
        self.over_limit += other.over_limit;
        self.other_code += other.other_code;
        self.errors += other.errors;
        for (k, v) in other.error_kinds {
            *self.error_kinds.entry(k).or_default() += v;
        }
        Ok(())
    }

    fn error(&mut self, kind: String) {
        self.errors += 1;
        *self.error_kinds.entry(kind).or_default() += 1;
    }
}

/// The times every worker follows.
#[derive(Clone, Copy)]
struct Schedule {
    start: Instant,
    measure_from: Instant,
    end: Instant,
}

/// The open-loop ticket counter: ticket `i` is due at `start + i / rps`.
struct Pacer {
    next: AtomicU64,
    nanos_per_request: f64,
}

fn build_request(config: &LoadConfig, rng: &mut SmallRng) -> RateLimitRequest {
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
type SharedTimeline = Option<Arc<std::sync::Mutex<chart::Timeline>>>;

/// What a worker sends on: a clone of a gRPC connection (HTTP/2, shared),
/// or an HTTP/1.1 slot of its own.
#[derive(Clone)]
enum Client {
    Grpc(GrpcConnection),
    Http(HttpSlot),
}

impl Client {
    /// One request: its overall code (an HTTP status read as one), or the
    /// error's kind.
    async fn call(&mut self, config: &LoadConfig, rng: &mut SmallRng) -> Result<Code, String> {
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

async fn worker(
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

/// One finished load.
struct Report {
    label: &'static str,
    config: LoadConfig,
    tally: Tally,
}

impl Report {
    fn requests(&self) -> u64 {
        let t = &self.tally;
        t.ok + t.over_limit + t.other_code + t.errors
    }

    /// Adds another load of the same definition (one more round).
    fn absorb(&mut self, other: Report) -> Result<(), Failure> {
        self.config.duration += other.config.duration;
        self.config.warmup += other.config.warmup;
        self.tally.merge(other.tally)
    }

    fn rps(&self) -> f64 {
        self.requests() as f64 / self.config.duration.as_secs_f64()
    }

    fn quantile(&self, q: f64) -> u64 {
        self.tally.latency.value_at_quantile(q)
    }

    fn json(&self) -> serde_json::Value {
        let c = &self.config;
        let t = &self.tally;
        serde_json::json!({
            "target": c.target,
            "http": c.http,
            "connections": c.connections,
            "threads": c.threads,
            "concurrency": c.concurrency,
            "in_flight": c.connections * c.concurrency,
            "duration_s": c.duration.as_secs_f64(),
            "warmup_s": c.warmup.as_secs_f64(),
            "open_loop_rps": c.rps,
            "descriptors": c.entries.len(),
            "keys": c.keys.describe(),
            "requests": self.requests(),
            "rps": round2(self.rps()),
            "ok": t.ok,
            "over_limit": t.over_limit,
            "other_code": t.other_code,
            "errors": t.errors,
            "p50_us": self.quantile(0.5),
            "p90_us": self.quantile(0.9),
            "p99_us": self.quantile(0.99),
            "p999_us": self.quantile(0.999),
            "max_us": t.latency.max(),
            "mean_us": round2(t.latency.mean()),
        })
    }

    fn print(&self) {
        let c = &self.config;
        let t = &self.tally;
        let mode = match c.rps {
            Some(r) => format!("open loop at {r} req/s"),
            None => "closed loop".into(),
        };
        out!(
            "[{}] {}: {} connection(s) x {} in flight = {} on {} load thread(s), {mode}, {:?} (+{:?} warmup)",
            self.label,
            c.target,
            c.connections,
            c.concurrency,
            c.connections * c.concurrency,
            c.threads,
            c.duration,
            c.warmup
        );
        out!(
            "[{}] domain {:?}, {} descriptor(s) per request, entries {:?}, keys {}",
            self.label,
            c.domain,
            c.entries.len(),
            c.entries,
            c.keys.describe()
        );
        out!(
            "[{}] requests {} ({:.1}/s)  ok {}  over_limit {}  other_code {}  errors {}",
            self.label,
            self.requests(),
            self.rps(),
            t.ok,
            t.over_limit,
            t.other_code,
            t.errors
        );
        out!(
            "[{}] latency us: p50 {}  p90 {}  p99 {}  p99.9 {}  max {}  mean {:.1}",
            self.label,
            self.quantile(0.5),
            self.quantile(0.9),
            self.quantile(0.99),
            self.quantile(0.999),
            t.latency.max(),
            t.latency.mean()
        );
        let mut kinds: Vec<(&String, &u64)> = t.error_kinds.iter().collect();
        kinds.sort_by(|a, b| b.1.cmp(a.1));
        for (kind, count) in kinds.into_iter().take(5) {
            out!("[{}] error x{count}: {kind}", self.label);
        }
    }
}

fn round2(x: f64) -> f64 {
    (x * 100.0).round() / 100.0
}

/// `--target` as `host:port` (an `http://` prefix is accepted).
fn authority(target: &str) -> Result<&str, Failure> {
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
async fn connect(config: &LoadConfig, threads: &LoadThreads) -> Result<Vec<Client>, Failure> {
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

async fn load(
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

fn load_threads(config: &LoadConfig) -> Result<LoadThreads, Failure> {
    LoadThreads::start(config.threads)
        .map_err(|e| Failure::Fatal(format!("cannot start the load threads: {e}")))
}

async fn run_command(config: LoadConfig) -> Result<(), Failure> {
    let threads = load_threads(&config)?;
    let connections = connect(&config, &threads).await?;
    let report = load("run", &config, connections, &threads).await?;
    report.print();
    let mut json = report.json();
    if let Some(map) = json.as_object_mut() {
        map.insert("mode".into(), "run".into());
    }
    out!("{json}");
    Ok(())
}

async fn compare_command(config: LoadConfig, noop: &NoopChild) -> Result<(), Failure> {
    let noop_config = LoadConfig {
        target: noop.addr.clone(),
        ..config.clone()
    };
    // Connect to both first, so a wrong --target fails before any load.
    let threads = load_threads(&config)?;
    let target_connections = connect(&config, &threads).await?;
    let noop_connections = connect(&noop_config, &threads).await?;
    let mut noop_total: Option<Report> = None;
    let mut target_total: Option<Report> = None;
    for round in 0..config.rounds {
        // Alternate which side goes first, so drifts hit both alike.
        let noop_first = round % 2 == 0;
        let mut reports = Vec::with_capacity(2);
        for side in [noop_first, !noop_first] {
            let report = if side {
                load("noop", &noop_config, noop_connections.clone(), &threads).await?
            } else {
                load("target", &config, target_connections.clone(), &threads).await?
            };
            reports.push(report);
        }
        for report in reports {
            out!(
                "[compare] round {}/{}: {} {:.1} req/s, p50 {} us, p99 {} us, errors {}",
                round + 1,
                config.rounds,
                report.label,
                report.rps(),
                report.quantile(0.5),
                report.quantile(0.99),
                report.tally.errors
            );
            let total = if report.label == "noop" {
                &mut noop_total
            } else {
                &mut target_total
            };
            match total {
                Some(t) => t.absorb(report)?,
                None => *total = Some(report),
            }
        }
    }
    let (Some(noop_report), Some(target_report)) = (noop_total, target_total) else {
        return Err(Failure::Fatal("no round ran".into()));
    };
    noop_report.print();
    target_report.print();

    let ratio = |a: f64, b: f64| if b > 0.0 { round2_4(a / b) } else { f64::NAN };
    let rps_ratio = ratio(target_report.rps(), noop_report.rps());
    let p50_ratio = ratio(
        target_report.quantile(0.5) as f64,
        noop_report.quantile(0.5) as f64,
    );
    let p99_ratio = ratio(
        target_report.quantile(0.99) as f64,
        noop_report.quantile(0.99) as f64,
    );
    out!("[compare] target/noop: rps x{rps_ratio}  p50 x{p50_ratio}  p99 x{p99_ratio}");
    let json = serde_json::json!({
        "mode": "compare",
        "rounds": config.rounds,
        "noop": noop_report.json(),
        "target": target_report.json(),
        "rps_ratio": finite(rps_ratio),
        "p50_ratio": finite(p50_ratio),
        "p99_ratio": finite(p99_ratio),
    });
    out!("{json}");
    Ok(())
}

fn round2_4(x: f64) -> f64 {
    (x * 10_000.0).round() / 10_000.0
}

fn finite(x: f64) -> serde_json::Value {
    if x.is_finite() {
        x.into()
    } else {
        serde_json::Value::Null
    }
}

// ---------------------------------------------------------------------------
// The no-op server.

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(parse_duration("10s"), Ok(Duration::from_secs(10)));
        assert_eq!(parse_duration("1.5"), Ok(Duration::from_millis(1500)));
        assert_eq!(parse_duration("1m30s"), Ok(Duration::from_secs(90)));
        assert_eq!(parse_duration("250ms"), Ok(Duration::from_millis(250)));
        assert!(parse_duration("10x").is_err());
        assert!(parse_duration("").is_err());
        assert!(parse_duration("-1").is_err());
    }

    #[test]
    fn http_mode_is_for_run_only() {
        let args: Vec<String> = ["--http", "/limited", "--target", "127.0.0.1:10000"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        let c = parse_load(&args, "run").expect("valid");
        assert_eq!(c.http.as_deref(), Some("/limited"));
        assert!(parse_load(&[], "run").expect("valid").http.is_none());
        assert!(matches!(
            parse_load(&args, "compare"),
            Err(Failure::Usage(_))
        ));
    }

    #[test]
    fn load_options() {
        let args: Vec<String> = [
            "--descriptors",
            "3",
            "--entries=k",
            "--keys",
            "uniform:5",
            "--duration",
            "1s",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        let c = parse_load(&args, "run").expect("valid");
        assert_eq!(c.entries, ["k_0", "k_1", "k_2"]);
        assert_eq!(c.duration, Duration::from_secs(1));
        assert_eq!(c.target, "127.0.0.1:8081");
        let mut rng = SmallRng::seed_from_u64(1);
        let r = build_request(&c, &mut rng);
        assert_eq!(r.descriptors.len(), 3);
        assert_eq!(r.descriptors[2].entries[0].key, "k_2");
        let too_long = ["--duration".to_string(), "2h".to_string()];
        assert!(matches!(
            parse_load(&too_long, "run"),
            Err(Failure::Usage(_))
        ));
        let mismatch = ["--descriptors=3".to_string(), "--entries=a,b".to_string()];
        assert!(parse_load(&mismatch, "run").is_err());
        assert!(c.threads >= 1 && c.threads <= c.connections);
        let threads = ["--connections=4".to_string(), "--threads=3".to_string()];
        assert_eq!(parse_load(&threads, "run").expect("valid").threads, 3);
        let zero = ["--threads=0".to_string()];
        assert!(matches!(parse_load(&zero, "run"), Err(Failure::Usage(_))));
    }

    #[test]
    fn targets_are_plaintext_authorities() {
        assert_eq!(authority("127.0.0.1:8081").ok(), Some("127.0.0.1:8081"));
        assert_eq!(authority("http://h:1/").ok(), Some("h:1"));
        assert!(matches!(authority("https://h:1"), Err(Failure::Usage(_))));
    }
}
