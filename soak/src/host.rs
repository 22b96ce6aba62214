//! The machine under the soak: every second, how much CPU time the
//! hypervisor took from this virtual machine (steal) and how busy its CPUs
//! were, from `/proc/stat`, written to `host.tsv` as the run goes. A stolen
//! stretch stalls every process at once, the clients that time the answers
//! included: the report sets the violations beside the seconds stolen.

use std::io::Write;
use std::path::Path;
use std::time::Duration;

use super::log::{now_us, Fault, FaultKind};

/// CPU time stolen in one second, in CPUs, from which the report counts a
/// second as a host stall (0.3: 300 ms of one CPU's second).
pub const STALL_CPUS: f64 = 0.3;

/// One second of the machine.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Cpu {
    /// The end of the second (unix µs).
    pub at_us: u64,
    /// CPU time taken by the hypervisor, in CPUs (0.5: half of one CPU).
    pub stolen: f64,
    /// CPU time spent running, in CPUs.
    pub busy: f64,
}

impl Cpu {
    pub fn line(&self) -> String {
        format!("{}\t{:.3}\t{:.3}", self.at_us, self.stolen, self.busy)
    }

    pub fn parse(line: &str) -> Option<Cpu> {
        let mut f = line.split('\t');
        Some(Cpu {
            at_us: f.next()?.parse().ok()?,
            stolen: f.next()?.parse().ok()?,
            busy: f.next()?.parse().ok()?,
        })
    }
}

/// The machine's CPU counters (`/proc/stat`'s first line, in clock ticks):
/// (busy, idle, stolen). `None` where there is no such file.
fn counters() -> Option<(u64, u64, u64)> {
    let stat = std::fs::read_to_string("/proc/stat").ok()?;
    let line = stat.lines().next()?;
    let n: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .filter_map(|x| x.parse().ok())
        .collect();
    // user nice system idle iowait irq softirq steal
    let [user, nice, system, idle, iowait, irq, softirq, steal, ..] = n.as_slice() else {
        return None;
    };
    Some((user + nice + system + irq + softirq, idle + iowait, *steal))
}

/// Samples the machine every second until `end_us`, each second appended
/// to `out/host.tsv`.
pub fn sample(out: &Path, end_us: u64) -> std::thread::JoinHandle<()> {
    let path = out.join("host.tsv");
    std::thread::spawn(move || {
        let Ok(mut file) = std::fs::File::create(&path) else {
            return;
        };
        let Some(mut before) = counters() else {
            return;
        };
        let mut at = std::time::Instant::now();
        while now_us() < end_us {
            std::thread::sleep(Duration::from_secs(1));
            let Some(now) = counters() else { return };
            let secs = at.elapsed().as_secs_f64();
            at = std::time::Instant::now();
            // Clock ticks are 1/100 s on Linux.
            let cpus = |ticks: u64| ticks as f64 / 100.0 / secs;
            let cpu = Cpu {
                at_us: now_us(),
                stolen: cpus(now.2.saturating_sub(before.2)),
                busy: cpus(now.0.saturating_sub(before.0)),
            };
            before = now;
            let _ = writeln!(file, "{}", cpu.line());
        }
    })
}

/// The seconds read back from `dir/host.tsv`.
pub fn read(dir: &Path) -> Vec<Cpu> {
    std::fs::read_to_string(dir.join("host.tsv"))
        .unwrap_or_default()
        .lines()
        .filter_map(Cpu::parse)
        .collect()
}

/// The host stalls as faults, numbered from `first_id`: each run of
/// seconds with at least [`STALL_CPUS`] stolen (one second apart at most)
/// is one fault on every instance and every slot, from the start of its
/// first second to the end of its last.
pub fn stalls(host: &[Cpu], first_id: usize) -> Vec<Fault> {
    let mut out: Vec<Fault> = Vec::new();
    for c in host.iter().filter(|c| c.stolen >= STALL_CPUS) {
        let start = c.at_us.saturating_sub(1_000_000);
        match out.last_mut() {
            Some(f) if start <= f.end_us + 1_000_000 => {
                f.end_us = c.at_us;
                f.note = format!("{}; {:.2}", f.note, c.stolen);
            }
            _ => out.push(Fault {
                id: first_id + out.len(),
                kind: FaultKind::HostStall,
                instance: None,
                primary: None,
                slots: vec![(0, 16_383)],
                start_us: start,
                end_us: c.at_us,
                promoted_us: None,
                note: format!("seen, not caused: CPU stolen a second {:.2}", c.stolen),
            }),
        }
    }
    out
}

/// Whether a host stall (a second with at least [`STALL_CPUS`] stolen)
/// ended within `pad_us` of `[from, to]`.
pub fn stalled_near(host: &[Cpu], from: u64, to: u64, pad_us: u64) -> bool {
    host.iter().any(|c| {
        c.stolen >= STALL_CPUS && c.at_us + pad_us >= from && c.at_us <= to + pad_us + 1_000_000
    })
}
