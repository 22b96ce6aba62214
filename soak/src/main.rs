//! The chaos soak: three instances of this build on a six-node Redis
//! Cluster, clients in three processes offering every kind of rule below,
//! at and above its limit, and a nemesis causing faults from a seeded
//! schedule, overlapping: primaries paused, killed and failed over
//! (graceful and forced), one instance's link to one primary cut or slowed,
//! instances killed and restarted, the config swapped for one with other
//! limits. Every call is logged; the checker then compares what each rule
//! admitted, window by window, with its bound plus what the docs allow for
//! the faults that overlapped the window, and writes the report.
//!
//! `scripts/chaos.sh [DURATION] [SEED]` runs it on the release build
//! (`cargo run --release -p ratelimit-soak --bin chaos -- DURATION SEED`,
//! after building the service); it exits 1 on any violation. It needs root (the link faults use iptables and tc).

// The soak measures the real time of real processes.
#![allow(clippy::disallowed_types)]

use ratelimit_soak::support;
use ratelimit_soak::{
    check, client, faults, findings, host, instances, links, log, quota, report, rules, run,
};

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use faults::Nemesis;
use instances::Instance;
use log::{now_us, Decision, Fault, QuotaEvent};

/// The store's deadline the instances run with (the default).
const STORE_TIMEOUT_MS: u64 = 50;
const INSTANCES: usize = 3;
const CLIENTS: usize = 3;
/// The run's default length, and the default spacing of its faults.
const DEFAULT_LENGTH: Duration = Duration::from_secs(120);
const FAULT_SPACING: Duration = Duration::from_secs(12);
/// Calls flow this long before the judged run starts.
const WARM_UP: Duration = Duration::from_secs(1);
/// How long the judged run waits, after the warm-up, for every breaker to
/// be closed.
const SETTLE_WITHIN: Duration = Duration::from_secs(20);
/// A long run's spacing: one fault per 18 s (99 in 30 min).
const LONG_FAULT_SPACING: Duration = Duration::from_secs(18);

fn main() {
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with("--"))
        .collect();
    if args.first().map(String::as_str) == Some("client") {
        client::main(&args[1..]);
        return;
    }
    if let [command, dir] = args.as_slice() {
        if command == "check" {
            let violations = recheck(Path::new(dir));
            std::process::exit(i32::from(violations > 0));
        }
    }
    let length = match args.first() {
        Some(a) => parse_duration(a).unwrap_or_else(|| {
            eprintln!("chaos: DURATION {a:?} is not a duration (90s, 30m, 1h)");
            std::process::exit(2)
        }),
        None => DEFAULT_LENGTH,
    };
    let seed = match args.get(1) {
        Some(s) => s.parse().unwrap_or_else(|_| {
            eprintln!("chaos: SEED {s:?} is not a number");
            std::process::exit(2)
        }),
        None => now_us() % 1_000_000,
    };
    let out = std::env::var_os("CHAOS_OUT").map_or_else(
        || support::target_tmp().join(format!("chaos-{seed}")),
        PathBuf::from,
    );
    let violations = soak(length, seed, &out);
    std::process::exit(i32::from(violations > 0));
}

/// `90`, `90s`, `30m`, `1h`, `2m30s`.
fn parse_duration(text: &str) -> Option<Duration> {
    if let Ok(secs) = text.parse::<u64>() {
        return Some(Duration::from_secs(secs));
    }
    let (mut total, mut number) = (0u64, String::new());
    for c in text.chars() {
        match c {
            '0'..='9' => number.push(c),
            's' | 'm' | 'h' => {
                let n: u64 = number.parse().ok()?;
                number.clear();
                total += n * match c {
                    's' => 1,
                    'm' => 60,
                    _ => 3600,
                };
            }
            _ => return None,
        }
    }
    (number.is_empty() && total > 0).then(|| Duration::from_secs(total))
}

/// Runs the soak; the number of violations.
fn soak(length: Duration, seed: u64, out: &Path) -> usize {
    if let Err(e) = links::Links::check() {
        panic!("the soak's link faults cannot run here: {e} (scripts/test.sh installs iptables)");
    }
    links::Links::clear_stale(instances::FIRST_UID..instances::FIRST_UID + INSTANCES as u32);
    let _ = std::fs::remove_dir_all(out);
    let config_dir = out.join("runtime/current/ratelimit/config");
    std::fs::create_dir_all(&config_dir).expect("the runtime directory");
    std::fs::write(config_dir.join("chaos.yaml"), rules::config(0)).expect("the config");
    let spacing = if length > Duration::from_secs(600) {
        LONG_FAULT_SPACING
    } else {
        FAULT_SPACING
    };
    let plan = faults::schedule(seed, length, spacing);
    eprintln!(
        "chaos: seed {seed}, {} s, {} faults planned; writing to {}",
        length.as_secs(),
        plan.len(),
        out.display()
    );

    let cluster = support::redis::RedisCluster::start();
    let seeds = cluster.seeds().join(",");
    let runtime = out.join("runtime/current");
    let rlqs_ttl = format!("{}s", quota::ASSIGNMENT_TTL.as_secs());
    let env: Vec<(String, String)> = [
        ("BACKEND_TYPE", "redis"),
        ("REDIS_SOCKET_TYPE", "tcp"),
        ("REDIS_TYPE", "cluster"),
        ("REDIS_URL", seeds.as_str()),
        ("RUNTIME_ROOT", &runtime.to_string_lossy()),
        ("RUNTIME_SUBDIRECTORY", "ratelimit"),
        ("RUNTIME_WATCH_ROOT", "false"),
        ("STORE_TIMEOUT", &format!("{STORE_TIMEOUT_MS}ms")),
        ("LEASE_MIN_RATE", "20"),
        (
            "LOCAL_FIRST_MAX_OVER",
            &rules::LOCAL_FIRST_MAX_OVER.to_string(),
        ),
        ("RLQS_ASSIGNMENT_TTL", &rlqs_ttl),
    ]
    .iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    let instances: Vec<Instance> = (0..INSTANCES)
        .map(|i| Instance::start(i, &env, out))
        .collect();
    let addrs: Vec<String> = instances.iter().map(Instance::grpc_addr).collect();
    let faults_log = std::fs::File::create(out.join("faults.tsv")).expect("the fault log");
    let nemesis = Arc::new(Nemesis::new(cluster, instances, config_dir, faults_log));
    nemesis.configure_nodes();

    let streams = rules::streams();
    let planned_start_us = now_us() + WARM_UP.as_micros() as u64;
    let end_us = planned_start_us + u64::try_from(length.as_micros()).unwrap_or(u64::MAX);
    let clients: Vec<Child> = (0..CLIENTS)
        .map(|c| spawn_client(c, out, end_us, &addrs, &streams))
        .collect();
    let memory = sample_memory(Arc::clone(&nemesis), end_us);
    let machine = host::sample(out, end_us);
    std::thread::sleep(Duration::from_micros(
        planned_start_us.saturating_sub(now_us()),
    ));
    let unsettled = settle(&nemesis);
    let start_us = now_us().max(planned_start_us);
    std::fs::write(
        out.join("run.tsv"),
        format!("{start_us}\t{end_us}\t{seed}\t{}\n", length.as_secs()),
    )
    .expect("the run's times");
    nemesis.run(&plan, Instant::now());
    std::thread::sleep(Duration::from_micros(end_us.saturating_sub(now_us())));
    let exits = wait_clients(clients);
    nemesis.heal_links();
    let memory = memory.join().unwrap_or_default();
    let _ = machine.join();

    let logs = Logs::read(out);
    let (faults, mut findings) = logs.check(&streams, start_us, end_us);
    if let Some(what) = unsettled {
        findings.violations.push(findings::Violation {
            what,
            rule: "-",
            key: "-".into(),
            at_s: 0.0,
            faults: Vec::new(),
        });
    }
    for (c, code) in exits.iter().enumerate() {
        if *code != Some(0) {
            findings.violations.push(findings::Violation {
                what: format!("client {c} exited with {code:?} (see client-{c}.log)"),
                rule: "-",
                key: "-".into(),
                at_s: 0.0,
                faults: Vec::new(),
            });
        }
    }
    let offered: f64 = streams
        .iter()
        .filter(|s| s.hold_ms.is_none() && !s.is_envoy())
        .map(|s| s.rate)
        .sum();
    let envoys = streams.iter().filter(|s| s.is_envoy()).count();
    let warm_up_s = 60.0_f64.min(length.as_secs_f64() / 4.0);
    if let Some((i, a, b, span)) = report::memory_growth(&memory, warm_up_s) {
        if length >= Duration::from_secs(600) && !report::flat(a, b) {
            findings.violations.push(findings::Violation {
                what: format!("instance {i}'s memory grew from {a} to {b} KiB over {span:.0} s"),
                rule: "-",
                key: "-".into(),
                at_s: 0.0,
                faults: Vec::new(),
            });
        }
    }
    let report = report::Report {
        seed,
        length_s: length.as_secs(),
        command: format!("scripts/chaos.sh {}s {seed}", length.as_secs()),
        setup: format!(
            "{INSTANCES} instances of `{}` on a 6-node Redis Cluster ({}; node timeout 2 s, \
             `cluster-require-full-coverage no`), `STORE_TIMEOUT` {STORE_TIMEOUT_MS} ms; \
             {CLIENTS} client processes, {} streams over {} rules ({offered:.0} calls/s paced, \
             plus in-flight workers), each call sent to the next instance in turn; {} RLQS \
             Envoys reporting every {} s (`RLQS_ASSIGNMENT_TTL` {} s), each stream on the next \
             instance. Faults from seed {seed}, one per about {} s: {}.",
            support::binary().display(),
            redis_version(),
            streams.len(),
            rules::RULES.len(),
            envoys,
            quota::REPORT_EVERY.as_secs(),
            quota::ASSIGNMENT_TTL.as_secs(),
            spacing.as_secs(),
            log::FaultKind::ALL.map(|k| k.name()).join(", ")
        ),
        streams: &streams,
        decisions: &logs.decisions,
        faults: &faults,
        findings: &findings,
        memory: &memory,
        host: &logs.host,
        start_us,
        answer_bound_ms: STORE_TIMEOUT_MS + 5,
        warm_up_s,
    };
    let markdown = report.markdown();
    std::fs::write(out.join("report.md"), &markdown).expect("the report");
    write_violations(out, &findings);
    if let Err(e) = report.svg(&out.join("timeline.svg")) {
        eprintln!("chaos: no timeline: {e}");
    }
    println!("{markdown}");
    eprintln!(
        "chaos: {} decisions, {} faults, {} violations; report in {}",
        logs.decisions.len(),
        faults.len(),
        findings.violations.len(),
        out.join("report.md").display()
    );
    findings.violations.len()
}

/// Waits, up to [`SETTLE_WITHIN`], until no instance holds a store node's
/// breaker open: the judged run starts from a healthy state, whatever a
/// slow start-up of a busy host (processes, connections and the clients'
/// first calls all at once) did to the first calls of the warm-up. What
/// the warm-up saw is logged, not judged; a breaker still open after the
/// bound is a violation, returned.
fn settle(nemesis: &Nemesis) -> Option<String> {
    let until = Instant::now() + SETTLE_WITHIN;
    let started = Instant::now();
    let mut open = Vec::new();
    while Instant::now() < until {
        open = nemesis
            .instances
            .iter()
            .filter_map(|slot| {
                let i = slot.lock().expect("instance");
                match i.open_breakers() {
                    Some(nodes) if nodes.is_empty() => None,
                    Some(nodes) => Some(format!("instance {}: {}", i.index, nodes.join(", "))),
                    None => Some(format!("instance {}: no /stats", i.index)),
                }
            })
            .collect();
        if open.is_empty() {
            if started.elapsed() > Duration::from_millis(100) {
                eprintln!(
                    "chaos: the warm-up settled {:.1} s late (breakers opened at start)",
                    started.elapsed().as_secs_f64()
                );
            }
            return None;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    Some(format!(
        "breakers still open {} s after the warm-up: {}",
        SETTLE_WITHIN.as_secs(),
        open.join("; ")
    ))
}

fn spawn_client(
    c: usize,
    out: &Path,
    end_us: u64,
    addrs: &[String],
    streams: &[rules::Stream],
) -> Child {
    let log = std::fs::File::create(out.join(format!("client-{c}.log"))).expect("a client log");
    Command::new(std::env::current_exe().expect("this binary"))
        .arg("client")
        .arg(out.join(format!("decisions-{c}.csv")))
        .arg(out.join(format!("quota-{c}.csv")))
        .arg(end_us.to_string())
        .arg(addrs.join(","))
        .args(
            streams
                .iter()
                .filter(|s| s.id % CLIENTS == c)
                .map(rules::Stream::to_arg),
        )
        .stdin(Stdio::null())
        .stdout(log.try_clone().expect("the client log, twice"))
        .stderr(log)
        .spawn()
        .expect("a client process")
}

/// Waits (bounded) for the clients to finish writing; their exit codes.
fn wait_clients(clients: Vec<Child>) -> Vec<Option<i32>> {
    let until = Instant::now() + Duration::from_secs(30);
    clients
        .into_iter()
        .map(|mut c| loop {
            if let Ok(Some(status)) = c.try_wait() {
                break status.code();
            }
            if Instant::now() > until {
                let _ = c.kill();
                let _ = c.wait();
                break None;
            }
            std::thread::sleep(Duration::from_millis(50));
        })
        .collect()
}

/// Every second until `end_us`, each instance's resident set.
fn sample_memory(
    nemesis: Arc<Nemesis>,
    end_us: u64,
) -> std::thread::JoinHandle<Vec<report::Memory>> {
    std::thread::spawn(move || {
        let memory: Mutex<Vec<report::Memory>> = Mutex::new(Vec::new());
        let started = now_us();
        while now_us() < end_us {
            for slot in &nemesis.instances {
                let (index, start, rss) = {
                    let i = slot.lock().expect("instance");
                    (i.index, i.starts, i.rss_kib())
                };
                let Some(rss) = rss else { continue };
                let t = (now_us() - started) as f64 / 1e6;
                let mut m = memory.lock().expect("memory");
                match m
                    .iter_mut()
                    .find(|m| m.instance == index && m.start == start)
                {
                    Some(m) => m.samples.push((t, rss)),
                    None => m.push(report::Memory {
                        instance: index,
                        start,
                        samples: vec![(t, rss)],
                    }),
                }
            }
            std::thread::sleep(Duration::from_secs(1));
        }
        memory.into_inner().unwrap_or_default()
    })
}

fn read_lines(path: &Path) -> Vec<String> {
    match std::fs::File::open(path) {
        Ok(f) => BufReader::new(f).lines().map_while(Result::ok).collect(),
        Err(_) => Vec::new(),
    }
}

fn read_decisions(out: &Path) -> Vec<Decision> {
    (0..CLIENTS)
        .flat_map(|c| read_lines(&out.join(format!("decisions-{c}.csv"))))
        .filter_map(|l| Decision::parse(&l))
        .collect()
}

fn redis_version() -> String {
    let server = support::redis::Flavor::current().server();
    Command::new(server)
        .arg("--version")
        .output()
        .map(|o| {
            String::from_utf8_lossy(&o.stdout)
                .split_whitespace()
                .take(3)
                .collect::<Vec<_>>()
                .join(" ")
        })
        .unwrap_or_else(|_| server.to_string())
}

/// Every violation, one a line (the report lists the first 100).
fn write_violations(out: &Path, findings: &findings::Findings) {
    let lines: Vec<String> = findings
        .violations
        .iter()
        .map(|v| {
            format!(
                "{:.1}\t{}\t{}\t{}\t{:?}",
                v.at_s, v.rule, v.key, v.what, v.faults
            )
        })
        .collect();
    let _ = std::fs::write(out.join("violations.tsv"), lines.join("\n"));
}

/// `check DIR`: the checker and the report again, on a run's logs in
/// `DIR` (as the checker stands now; memory is not sampled again).
fn recheck(dir: &Path) -> usize {
    let run_line = read_lines(&dir.join("run.tsv"))
        .into_iter()
        .next()
        .unwrap_or_default();
    let f: Vec<u64> = run_line
        .split('\t')
        .filter_map(|x| x.parse().ok())
        .collect();
    let [start_us, end_us, seed, length_s] = f.as_slice() else {
        eprintln!("chaos: no run.tsv in {}", dir.display());
        return 1;
    };
    let streams = rules::streams();
    let logs = Logs::read(dir);
    let (faults, findings) = logs.check(&streams, *start_us, *end_us);
    let report = report::Report {
        seed: *seed,
        length_s: *length_s,
        command: format!("scripts/chaos.sh {length_s}s {seed}"),
        setup: format!("Checked again from the logs in {}.", dir.display()),
        streams: &streams,
        decisions: &logs.decisions,
        faults: &faults,
        findings: &findings,
        memory: &[],
        host: &logs.host,
        start_us: *start_us,
        answer_bound_ms: STORE_TIMEOUT_MS + 5,
        warm_up_s: 60.0,
    };
    let markdown = report.markdown();
    let _ = std::fs::write(dir.join("report.md"), &markdown);
    let _ = report.svg(&dir.join("timeline.svg"));
    write_violations(dir, &findings);
    println!("{markdown}");
    findings.violations.len()
}

/// What a run wrote down in its directory, read back.
struct Logs {
    decisions: Vec<Decision>,
    quota: Vec<QuotaEvent>,
    faults: Vec<Fault>,
    /// The machine, second by second.
    host: Vec<host::Cpu>,
    /// Each instance's log, every start of it.
    instances: Vec<String>,
}

impl Logs {
    /// The checker on these logs, with the nemesis's faults and the host
    /// stalls seen (each a fault on every instance and primary): the
    /// faults, and the findings, which say how many violations the
    /// stalls' allowance excused.
    fn check(
        &self,
        streams: &[rules::Stream],
        start_us: u64,
        end_us: u64,
    ) -> (Vec<Fault>, findings::Findings) {
        let checked = |faults: &[Fault]| {
            let run = run_of(
                streams,
                &self.decisions,
                &self.quota,
                faults,
                start_us,
                end_us,
            );
            check::check(&run, &self.instances)
        };
        let caused_only = checked(&self.faults).violations.len();
        let next_id = self.faults.iter().map(|f| f.id + 1).max().unwrap_or(0);
        let mut faults = self.faults.clone();
        faults.extend(host::stalls(&self.host, next_id));
        let mut findings = checked(&faults);
        findings.excused_by_host_stalls = caused_only.saturating_sub(findings.violations.len());
        (faults, findings)
    }

    fn read(dir: &Path) -> Logs {
        Logs {
            decisions: read_decisions(dir),
            quota: (0..CLIENTS)
                .flat_map(|c| read_lines(&dir.join(format!("quota-{c}.csv"))))
                .filter_map(|l| QuotaEvent::parse(&l))
                .collect(),
            faults: read_lines(&dir.join("faults.tsv"))
                .iter()
                .filter_map(|l| Fault::parse(l))
                .collect(),
            host: host::read(dir),
            instances: (0..INSTANCES)
                .map(|i| {
                    std::fs::read_to_string(dir.join(format!("instance-{i}.log")))
                        .unwrap_or_default()
                })
                .collect(),
        }
    }
}

/// The checker's view of a run from `start_us` to `end_us`.
fn run_of<'a>(
    streams: &'a [rules::Stream],
    decisions: &'a [Decision],
    quota: &'a [QuotaEvent],
    faults: &'a [Fault],
    start_us: u64,
    end_us: u64,
) -> run::Run<'a> {
    run::Run {
        streams,
        decisions,
        quota,
        faults,
        instances: INSTANCES,
        start_us,
        end_us,
        answer_bound_us: (STORE_TIMEOUT_MS + 5) * 1000,
    }
}
