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

use std::process::ExitCode;
use std::time::Duration;

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
mod flags;
mod generator;
mod grpc;
mod http1;
mod keys;
mod noop;
mod report;
mod tally;
mod threads;
use flags::{parse_load, LoadConfig};
use generator::{connect, load, load_threads};
use noop::{noop_command, parse_noop, NoopChild};
use report::{finite, round2_4, Report};

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
  --descriptors D       descriptors per request (default 1, at most 1000), each
                        with one entry
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

/// Runs a command's orchestration; the load itself runs on [`LoadThreads`](threads::LoadThreads).
fn block_on<F: std::future::Future<Output = Result<(), Failure>>>(f: F) -> Result<(), Failure> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| Failure::Fatal(format!("cannot start the runtime: {e}")))?
        .block_on(f)
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
