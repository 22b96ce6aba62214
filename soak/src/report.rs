//! The soak's report: a Markdown summary (faults, decisions, violations,
//! each stated bound beside what was measured) and an SVG timeline (the
//! faults as bands over each rule's admitted calls a second against its
//! limit, and the answer times).

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;

use super::findings::{BoardFigures, Findings, Latency};
use super::host::{self, Cpu};
use super::log::{Decision, Fault, FaultKind, Op, Outcome};
use super::rules::{Rule, Shape, Stream, RULES};

/// One instance's resident set over the run: (seconds, KiB) per start.
pub struct Memory {
    pub instance: usize,
    pub start: u32,
    pub samples: Vec<(f64, u64)>,
}

impl Memory {
    /// KiB after `warm_up` s of this start, and at its end.
    pub fn growth(&self, warm_up: f64) -> Option<(u64, u64, f64)> {
        let first = self.samples.first()?.0;
        let after = self.samples.iter().find(|(t, _)| *t >= first + warm_up)?;
        let last = self.samples.last()?;
        Some((after.1, last.1, last.0 - after.0))
    }
}

/// What the report is of.
pub struct Report<'a> {
    pub seed: u64,
    pub length_s: u64,
    pub command: String,
    pub setup: String,
    pub streams: &'a [Stream],
    pub decisions: &'a [Decision],
    pub faults: &'a [Fault],
    pub findings: &'a Findings,
    pub memory: &'a [Memory],
    /// The machine, second by second.
    pub host: &'a [Cpu],
    pub start_us: u64,
    pub answer_bound_ms: u64,
    /// Seconds of each start that are warm-up, for memory.
    pub warm_up_s: f64,
}

fn ms(l: &Latency) -> String {
    format!("{:.1} / {:.1} / {:.1} / {:.1}", l.p50, l.p99, l.p999, l.max)
}

/// The largest growth of any start that ran past its warm-up for at least
/// as long again: (instance, KiB after the warm-up, KiB at its end, s).
pub fn memory_growth(memory: &[Memory], warm_up_s: f64) -> Option<(usize, u64, u64, f64)> {
    memory
        .iter()
        .filter_map(|m| {
            let (a, b, span) = m.growth(warm_up_s)?;
            (span >= warm_up_s).then_some((m.instance, a, b, span))
        })
        .max_by_key(|(_, a, b, _)| b.saturating_sub(*a))
}

impl Report<'_> {
    pub fn markdown(&self) -> String {
        let f = self.findings;
        let mut md = String::new();
        let _ = writeln!(
            md,
            "# Chaos soak: {} s, seed {}\n",
            self.length_s, self.seed
        );
        let _ = writeln!(md, "Reproduce with `{}`.\n\n{}\n", self.command, self.setup);
        let verdict = if f.violations.is_empty() {
            "**0 violations.**".to_string()
        } else {
            format!("**{} violations** (listed below).", f.violations.len())
        };
        let _ = writeln!(md, "{verdict}\n");

        let _ = writeln!(md, "## Faults\n");
        let _ = writeln!(md, "| kind | faults | length, s (min–max) |\n|---|---|---|");
        let mut kinds: BTreeMap<FaultKind, Vec<f64>> = BTreeMap::new();
        for x in self.faults {
            kinds
                .entry(x.kind)
                .or_default()
                .push((x.end_us - x.start_us) as f64 / 1e6);
        }
        for (kind, lengths) in &kinds {
            let lo = lengths.iter().copied().fold(f64::INFINITY, f64::min);
            let hi = lengths.iter().copied().fold(0.0, f64::max);
            let _ = writeln!(md, "| {kind} | {} | {lo:.1}–{hi:.1} |", lengths.len());
        }
        let overlapping = self
            .faults
            .iter()
            .filter(|a| {
                self.faults
                    .iter()
                    .any(|b| b.id != a.id && b.start_us <= a.end_us && a.start_us <= b.end_us)
            })
            .count();
        let _ = writeln!(
            md,
            "| all | {} ({overlapping} overlapping another) | |\n",
            self.faults.len()
        );

        let total = self.decisions.len() - self.findings.warm_up.0 as usize;
        let _ = writeln!(md, "## Bounds, stated and measured\n");
        let _ = writeln!(md, "| bound | measured | held |\n|---|---|---|");
        let row = |md: &mut String, bound: &str, measured: String, held: bool| {
            let _ = writeln!(
                md,
                "| {bound} | {measured} | {} |",
                if held { "yes" } else { "**no**" }
            );
        };
        let window_violations = f
            .violations
            .iter()
            .filter(|v| v.what.contains("admitted") || v.what.contains("in flight"))
            .count();
        row(
            &mut md,
            "no window or span above its rule's bound plus the faults' allowance (open floors: instances × floor; failover loss: the admissions in the loss window, 0 for `durability: replicated` and graceful failovers)",
            format!(
                "{window_violations} violations in {} windows and spans",
                f.rules.iter().map(|r| r.checked).sum::<u64>()
            ),
            window_violations == 0,
        );
        row(
            &mut md,
            "every call to a running instance answered",
            format!(
                "{} of {} answered, {} unanswered; {} sent to a killed instance (warm-up, not judged: {} calls, {} not answered or an error)",
                f.answered, total, f.unanswered, f.to_dead_instances, f.warm_up.0, f.warm_up.1
            ),
            f.unanswered == 0,
        );
        let errors_elsewhere = f
            .violations
            .iter()
            .filter(|v| v.what.contains("no fault touched") || v.what.contains("answered an error"))
            .count();
        row(
            &mut md,
            "store errors only on keys a fault touched (a killed or paused primary fails only its own slots); `open` and `closed` rules never answer an error",
            format!("{errors_elsewhere} errors elsewhere"),
            errors_elsewhere == 0,
        );
        row(
            &mut md,
            &format!(
                "99.9 % of answers within `STORE_TIMEOUT` + 5 ms ({} ms)",
                self.answer_bound_ms
            ),
            format!(
                "{:.3} % ({} beyond)",
                f.within_answer_bound() * 100.0,
                f.beyond_answer_bound
            ),
            f.within_answer_bound() >= 0.999,
        );
        let panics = f
            .violations
            .iter()
            .filter(|v| v.what.contains("panicked"))
            .count();
        row(&mut md, "no panic", format!("{panics} panics"), panics == 0);
        if let Some((i, a, b, span)) = memory_growth(self.memory, self.warm_up_s) {
            row(
                &mut md,
                &format!("memory flat after a {:.0} s warm-up", self.warm_up_s),
                format!(
                    "largest growth: instance {i}, {:.1} → {:.1} MiB over {span:.0} s",
                    a as f64 / 1024.0,
                    b as f64 / 1024.0
                ),
                flat(a, b),
            );
        }
        let durable = f
            .losses
            .iter()
            .map(|l| l.durable_excess)
            .max()
            .unwrap_or(i64::MIN);
        let lossy = f
            .losses
            .iter()
            .map(|l| l.async_excess)
            .max()
            .unwrap_or(i64::MIN);
        row(
            &mut md,
            "`durability: replicated`: a closed rule admits no more than its limit across failovers",
            format!(
                "largest excess over the limit near a failover: {} (without it: {})",
                excess(durable),
                excess(lossy)
            ),
            durable <= 0,
        );
        let board_violations = f
            .violations
            .iter()
            .filter(|v| v.what.contains("on the board add up"))
            .count();
        let ratio = |pick: fn(&BoardFigures) -> f64| f.boards.iter().map(pick).fold(0.0, f64::max);
        row(
            &mut md,
            "RLQS: the assignments in force on a board add up to at most its rate (each Envoy counted at the least it runs within a push's lag; one a store fault cut off the board, within its TTL)",
            format!(
                "largest sum: {:.2} × the rate with no store fault on, {:.2} × while one was; at an instant, pushes under way: {:.2} ×",
                ratio(|b| b.worst_settled),
                ratio(|b| b.worst_in_faults),
                ratio(|b| b.worst_instant)
            ),
            board_violations == 0,
        );
        let starved = f
            .violations
            .iter()
            .filter(|v| v.what.contains("told no share"))
            .count();
        let joins: u64 = f.boards.iter().map(|b| b.joins).sum();
        row(
            &mut md,
            "RLQS: no newcomer starved (a joining Envoy is told its share in answer to its first report)",
            format!(
                "{starved} of {joins} joins without a share within 1 s (outside faults on the board); first share after {} ms at most",
                f.boards.iter().map(|b| b.first_share.max).fold(0.0, f64::max)
            ),
            starved == 0,
        );
        let _ = writeln!(md);

        let _ = writeln!(md, "## The machine\n");
        let mut stolen: Vec<f64> = self.host.iter().map(|c| c.stolen).collect();
        stolen.sort_by(f64::total_cmp);
        let at = |q: f64| {
            stolen
                .get(((stolen.len().max(1) - 1) as f64 * q) as usize)
                .copied()
                .unwrap_or(0.0)
        };
        let stalls = self
            .host
            .iter()
            .filter(|c| c.stolen >= host::STALL_CPUS)
            .count();
        let near = f
            .violations
            .iter()
            .filter(|v| self.near_a_stall(v.at_s))
            .count();
        let _ = writeln!(
            md,
            "CPU time the hypervisor took from this virtual machine (steal), per second, in CPUs of its {}: p50 {:.2}, p99 {:.2}, max {:.2}. Seconds with at least {} CPU stolen: {stalls}; each run of them is a host stall, a fault seen, not caused, on every instance and primary (the allowance of a store fault that touches every key). Violations the host stalls excused: {}; violations within 2 s of one: {near} of {}.\n",
            std::thread::available_parallelism().map_or(0, |n| n.get()),
            at(0.5),
            at(0.99),
            at(1.0),
            host::STALL_CPUS,
            f.excused_by_host_stalls,
            f.violations.len()
        );

        let _ = writeln!(md, "## Answer times, ms (p50 / p99 / p99.9 / max)\n");
        let _ = writeln!(md, "| | calls | answer time |\n|---|---|---|");
        let _ = writeln!(
            md,
            "| while a store fault was on (or healing) | {} | {} |",
            f.during_faults.count,
            ms(&f.during_faults)
        );
        let _ = writeln!(
            md,
            "| otherwise | {} | {} |\n",
            f.outside_faults.count,
            ms(&f.outside_faults)
        );

        let _ = writeln!(md, "## Rules\n");
        let _ = writeln!(
            md,
            "| rule | calls | admitted | refused | errors | windows / spans checked | most admitted above the algorithm's bound | largest fault allowance | answer time outside faults, ms (p50 / p99 / p99.9) |\n|---|---|---|---|---|---|---|---|---|"
        );
        for r in &f.rules {
            let l = &r.outside_faults;
            let _ = writeln!(
                md,
                "| {} | {} | {} | {} | {} | {} | {} | {} | {:.2} / {:.2} / {:.2} |",
                r.name,
                r.calls,
                r.admitted,
                r.refused,
                r.errors,
                r.checked,
                r.worst_excess,
                r.worst_allowance,
                l.p50,
                l.p99,
                l.p999
            );
        }
        let _ = writeln!(md);

        let _ = writeln!(md, "## RLQS boards\n");
        let _ = writeln!(
            md,
            "Each board is split between its Envoys (three simulated `rate_limit_quota` filters, joining on the instances in turn, reporting every second, leaving and joining again with other demands). The sums are of the token buckets' rates in force on the Envoys.\n"
        );
        let _ = writeln!(
            md,
            "| board | rate (config A) | joins | reports | assignments (changes) | sums checked | largest sum / rate: no store fault, in faults, at an instant | newcomer's first share, ms (p50 / p99 / max) |\n|---|---|---|---|---|---|---|---|"
        );
        for b in &f.boards {
            let _ = writeln!(
                md,
                "| {} | {} | {} | {} | {} ({}) | {} | {:.2}, {:.2}, {:.2} | {:.1} / {:.1} / {:.1} |",
                b.board,
                b.rate,
                b.joins,
                b.reports,
                b.assignments,
                b.changes,
                b.samples,
                b.worst_settled,
                b.worst_in_faults,
                b.worst_instant,
                b.first_share.p50,
                b.first_share.p99,
                b.first_share.max
            );
        }
        let _ = writeln!(md);

        let _ = writeln!(md, "## Failover loss\n");
        let _ = writeln!(
            md,
            "Per failover: the most a one-second window of the failed-over primary's keys admitted above its limit, for the original's windows with the default durability (rules `closed` and `fixed`) and for the `closed` rule with `durability: replicated` (≤ 0: not above).\n"
        );
        let _ = writeln!(md, "| fault | kind | acknowledged (closed, fixed) | replicated (durable) |\n|---|---|---|---|");
        for l in &f.losses {
            let _ = writeln!(
                md,
                "| {} | {} | {} | {} |",
                l.fault,
                l.kind,
                excess(l.async_excess),
                excess(l.durable_excess)
            );
        }
        let _ = writeln!(md);

        let _ = writeln!(md, "## Recovery\n");
        let _ = writeln!(md, "Seconds from the store's return (the replica promoted, or the fault healed) to the last store error of a key the fault touched.\n");
        let _ = writeln!(md, "| kind | faults | max | median |\n|---|---|---|---|");
        let mut by_kind: BTreeMap<FaultKind, Vec<f64>> = BTreeMap::new();
        for (_, kind, secs) in &f.recovery {
            by_kind.entry(*kind).or_default().push(*secs);
        }
        for (kind, mut v) in by_kind {
            v.sort_by(f64::total_cmp);
            let _ = writeln!(
                md,
                "| {kind} | {} | {:.2} | {:.2} |",
                v.len(),
                v[v.len() - 1],
                v[v.len() / 2]
            );
        }
        let _ = writeln!(md);

        if !f.violations.is_empty() {
            let _ = writeln!(md, "## Violations (the first 100)\n");
            let _ = writeln!(
                md,
                "| at, s | rule | key | what | faults | host stall within 2 s |\n|---|---|---|---|---|---|"
            );
            for v in f.violations.iter().take(100) {
                let _ = writeln!(
                    md,
                    "| {:.1} | {} | {} | {} | {:?} | {} |",
                    v.at_s,
                    v.rule,
                    v.key,
                    v.what,
                    v.faults,
                    if self.near_a_stall(v.at_s) {
                        "yes"
                    } else {
                        "no"
                    }
                );
            }
            let _ = writeln!(md);
        }

        let _ = writeln!(md, "## Every fault\n");
        let _ = writeln!(
            md,
            "| id | kind | at, s | length, s | what |\n|---|---|---|---|---|"
        );
        let mut faults: Vec<&Fault> = self.faults.iter().collect();
        faults.sort_by_key(|x| x.start_us);
        for x in faults {
            let _ = writeln!(
                md,
                "| {} | {} | {:.1} | {:.1} | {} |",
                x.id,
                x.kind,
                x.start_us.saturating_sub(self.start_us) as f64 / 1e6,
                (x.end_us - x.start_us) as f64 / 1e6,
                x.note
            );
        }
        md
    }

    /// Whether a host stall ended within 2 s of `at_s` (s into the run).
    fn near_a_stall(&self, at_s: f64) -> bool {
        let at = self.start_us + (at_s * 1e6) as u64;
        host::stalled_near(self.host, at, at, 2_000_000)
    }

    /// Draws the timeline to `path`.
    pub fn svg(&self, path: &Path) -> Result<(), String> {
        self.draw(path)
            .map_err(|e| format!("{}: {e}", path.display()))
    }

    fn draw(&self, path: &Path) -> Result<(), Box<dyn std::error::Error>> {
        use plotters::prelude::*;
        let secs = self.length_s as usize + 1;
        // Per rule, its busiest key's admitted calls a second.
        let busiest: Vec<(&Rule, &Stream)> = RULES
            .iter()
            .filter(|r| !r.is_board())
            .filter_map(|r| {
                let s = self
                    .streams
                    .iter()
                    .filter(|s| s.rule == r.name)
                    .max_by(|a, b| a.rate.total_cmp(&b.rate))?;
                Some((r, s))
            })
            .collect();
        let mut admitted: BTreeMap<usize, Vec<f64>> = BTreeMap::new();
        let mut latency: Vec<Vec<u64>> = vec![Vec::new(); secs];
        for d in self.decisions {
            let t = (d.send_us.saturating_sub(self.start_us) / 1_000_000) as usize;
            if t >= secs {
                continue;
            }
            if d.outcome.answered() {
                latency[t].push(d.latency_us());
            }
            if d.op == Op::Hit && d.outcome == Outcome::Ok {
                admitted.entry(d.stream).or_insert_with(|| vec![0.0; secs])[t] += 1.0;
            }
        }
        let boards = &self.findings.boards;
        let panels = busiest.len() + boards.len() + 2;
        let root = SVGBackend::new(path, (1400, 120 * panels as u32 + 60)).into_drawing_area();
        root.fill(&WHITE)?;
        let root = root.titled(
            &format!("chaos soak, seed {}: admitted a second (blue) against the limit (black), faults as bands", self.seed),
            ("sans-serif", 18),
        )?;
        let areas = root.split_evenly((panels, 1));
        let band = |kind: FaultKind| -> RGBColor {
            match kind {
                FaultKind::PausePrimary => RGBColor(255, 200, 120),
                FaultKind::KillPrimary => RGBColor(255, 140, 140),
                FaultKind::Failover => RGBColor(190, 170, 255),
                FaultKind::ForcedFailover => RGBColor(150, 120, 255),
                FaultKind::CutLink => RGBColor(140, 220, 220),
                FaultKind::SlowLink => RGBColor(180, 230, 170),
                FaultKind::KillInstance => RGBColor(200, 200, 200),
                FaultKind::Reload => RGBColor(250, 240, 120),
                FaultKind::HostStall => RGBColor(120, 120, 120),
            }
        };
        let x_end = self.length_s as f64;
        for (n, area) in areas.iter().enumerate() {
            let (caption, series, limit, top) = match busiest.get(n) {
                Some((rule, s)) => {
                    let series = admitted
                        .get(&s.id)
                        .cloned()
                        .unwrap_or_else(|| vec![0.0; secs]);
                    let per_second = match rule.shape {
                        Shape::Window { unit_s, limits } => limits[0] as f64 / unit_s as f64,
                        Shape::Bucket { rates, .. } => rates[0],
                        Shape::InFlight { max } => max as f64 * 10.0,
                        Shape::Board { rates } => rates[0],
                    };
                    let top = series.iter().copied().fold(per_second * 2.2, f64::max) * 1.1;
                    (
                        format!("{} = {} (offered {}/s)", rule.name, s.value, s.rate),
                        series,
                        Some(per_second),
                        top,
                    )
                }
                None if n < busiest.len() + boards.len() => {
                    let b = &boards[n - busiest.len()];
                    let top = b.per_second.iter().copied().fold(b.rate * 2.2, f64::max) * 1.1;
                    (
                        format!(
                            "RLQS board {}: the Envoys' assignments in force, summed",
                            b.board
                        ),
                        b.per_second.clone(),
                        Some(b.rate),
                        top,
                    )
                }
                None if n == busiest.len() + boards.len() => {
                    let mut stolen = vec![0.0; secs];
                    for c in self.host {
                        let t = (c.at_us.saturating_sub(self.start_us) / 1_000_000) as usize;
                        if let Some(s) = stolen.get_mut(t) {
                            *s = c.stolen;
                        }
                    }
                    (
                        "CPU stolen by the hypervisor, CPUs (a host stall from the line)"
                            .to_string(),
                        stolen,
                        Some(host::STALL_CPUS),
                        1.0,
                    )
                }
                None => {
                    let p99: Vec<f64> = latency
                        .iter_mut()
                        .map(|v| {
                            v.sort_unstable();
                            v.get(((v.len().max(1) - 1) as f64 * 0.99) as usize)
                                .map_or(0.0, |&u| u as f64 / 1000.0)
                        })
                        .collect();
                    (
                        "answer time p99 a second, ms".to_string(),
                        p99,
                        Some(self.answer_bound_ms as f64),
                        80.0,
                    )
                }
            };
            let mut chart = ChartBuilder::on(area)
                .caption(caption, ("sans-serif", 13))
                .margin(6)
                .x_label_area_size(18)
                .y_label_area_size(40)
                .build_cartesian_2d(0.0..x_end, 0.0..top)?;
            chart.configure_mesh().max_light_lines(1).draw()?;
            for x in self.faults {
                let a = x.start_us.saturating_sub(self.start_us) as f64 / 1e6;
                let b = (x.end_us.saturating_sub(self.start_us) as f64 / 1e6).max(a + 0.3);
                chart.draw_series(std::iter::once(Rectangle::new(
                    [(a, 0.0), (b, top)],
                    band(x.kind).mix(0.5).filled(),
                )))?;
            }
            if let Some(l) = limit {
                chart.draw_series(LineSeries::new(vec![(0.0, l), (x_end, l)], BLACK.mix(0.6)))?;
            }
            chart.draw_series(LineSeries::new(
                series.iter().enumerate().map(|(t, v)| (t as f64, *v)),
                BLUE.stroke_width(1),
            ))?;
        }
        root.present()?;
        Ok(())
    }
}

/// Whether a start's memory stayed flat: within 16 MiB or a quarter.
pub fn flat(first_kib: u64, last_kib: u64) -> bool {
    let growth = last_kib.saturating_sub(first_kib);
    growth <= 16 * 1024 || growth * 4 <= first_kib
}

fn excess(e: i64) -> String {
    match e {
        i64::MIN => "no window".into(),
        e if e <= 0 => format!("{e} (not above)"),
        e => format!("+{e}"),
    }
}
