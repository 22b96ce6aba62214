//! The checker: reads the decisions and the faults back and compares, for
//! every rule, key and window (or span), what was admitted with what the
//! rule allows plus the bound the docs state for the faults that
//! overlapped it. Also: every call answered, errors only where a fault
//! touched the key's primary, answer times, panics, memory, recovery.
//!
//! A decision is made at Redis's time, somewhere between its send and its
//! answer; a window counts only the admissions certainly inside it (sent
//! and answered within it), so a reported violation is never an artefact of
//! the clients' clocks.

use std::collections::BTreeMap;

use super::boards;
use super::findings::{Findings, Latency, Loss, RuleFigures, Violation};
use super::log::{Decision, FaultKind, Op, Outcome};
use super::rules::{Mode, Placement, Rule, Shape, Stream, LOCAL_FIRST_MAX_OVER};
use super::run::{self, Run, LOSS_PAD_US, RECOVERY_PAD_US};
use ratelimit::resilience::leases::local::Share;

/// Spans over which a token bucket's `burst + rate × t` is checked.
const BUCKET_SPANS_US: [u64; 3] = [1_000_000, 2_000_000, 5_000_000];
const BUCKET_STEP_US: u64 = 250_000;

/// Sorted answer times of a stream's admitted hits.
fn admitted_times(ds: &[&Decision]) -> Vec<u64> {
    let mut t: Vec<u64> = ds
        .iter()
        .filter(|d| d.op == Op::Hit && d.outcome == Outcome::Ok)
        .map(|d| d.answer_us)
        .collect();
    t.sort_unstable();
    t
}

fn count_in(sorted: &[u64], from: u64, to: u64) -> u64 {
    let a = sorted.partition_point(|&t| t < from);
    let b = sorted.partition_point(|&t| t <= to);
    (b - a) as u64
}

/// Checks `run`; `logs` are the instances' logs (for panics).
pub fn check(run: &Run<'_>, logs: &[String]) -> Findings {
    let mut findings = Findings::default();
    let mut by_stream: BTreeMap<usize, Vec<&Decision>> = BTreeMap::new();
    for d in run.decisions {
        by_stream.entry(d.stream).or_default().push(d);
    }
    for (i, log) in logs.iter().enumerate() {
        if let Some(line) = log.lines().find(|l| l.contains("panicked")) {
            findings.violations.push(Violation {
                what: format!("instance {i} panicked: {line}"),
                rule: "-",
                key: "-".into(),
                at_s: 0.0,
                faults: Vec::new(),
            });
        }
    }
    let reports = boards::check(run, &mut findings);
    answers(run, &reports, &mut findings);
    let mut figures: BTreeMap<&'static str, RuleFigures> = BTreeMap::new();
    for (stream, ds) in &by_stream {
        let Some((rule, s)) = run.rule_of(*stream) else {
            continue;
        };
        let fig = figures.entry(rule.name).or_insert_with(|| RuleFigures {
            name: rule.name,
            ..RuleFigures::default()
        });
        for d in ds.iter().filter(|d| d.op == Op::Hit) {
            fig.calls += 1;
            match d.outcome {
                Outcome::Ok => fig.admitted += 1,
                Outcome::Over => fig.refused += 1,
                Outcome::Error(_) => fig.errors += 1,
                _ => {}
            }
        }
        let mut found = Vec::new();
        match rule.shape {
            Shape::Window { unit_s, limits: _ } => {
                windows(run, rule, s, ds, unit_s, fig, &mut found)
            }
            Shape::Bucket { rates, bursts } => {
                spans(run, rule, s, ds, rates, bursts, fig, &mut found)
            }
            Shape::InFlight { max } => in_flight(run, rule, s, ds, max, fig, &mut found),
            // Its Envoys make no calls: see `boards`.
            Shape::Board { .. } => {}
        }
        findings.violations.extend(found);
    }
    findings.rules = figures
        .into_values()
        .map(|mut r| {
            r.outside_faults = findings
                .rule_latency
                .get(r.name)
                .cloned()
                .unwrap_or_default();
            r
        })
        .collect();
    findings.losses = losses(run, &by_stream);
    findings.recovery = recovery(run);
    findings
}

/// Every call answered (unless its instance was killed), errors only on
/// `error` rules and only where a fault touched the key, answer times (the
/// calls' and the RLQS reports', `reports` as send and answer times). A
/// call sent before the run started belongs to the warm-up: counted, not
/// judged (the judged run starts once every breaker is closed).
fn answers(run: &Run<'_>, reports: &[(u64, u64)], findings: &mut Findings) {
    let (mut during, mut outside) = (Vec::new(), Vec::new());
    let mut by_rule: BTreeMap<&'static str, Vec<u64>> = BTreeMap::new();
    for d in run.decisions {
        let Some((rule, s)) = run.rule_of(d.stream) else {
            continue;
        };
        if d.send_us < run.start_us {
            findings.warm_up.0 += 1;
            if !matches!(d.outcome, Outcome::Ok | Outcome::Over) {
                findings.warm_up.1 += 1;
            }
            continue;
        }
        let key = format!("{}={}", rule.name, s.value);
        match &d.outcome {
            Outcome::Down | Outcome::Timeout
                if run.instance_down(d.instance, d.send_us, d.answer_us) =>
            {
                findings.to_dead_instances += 1;
                continue;
            }
            Outcome::Down | Outcome::Timeout => {
                findings.unanswered += 1;
                findings.violations.push(Violation {
                    what: format!(
                        "call to running instance {} not answered ({:?})",
                        d.instance, d.outcome
                    ),
                    rule: rule.name,
                    key,
                    at_s: run.at_s(d.send_us),
                    faults: Vec::new(),
                });
                continue;
            }
            Outcome::Error(message) => {
                let faults = run.touching(
                    rule,
                    &s.value,
                    d.send_us,
                    d.answer_us,
                    Some(d.instance),
                    (500_000, RECOVERY_PAD_US),
                );
                let ids: Vec<usize> = faults.iter().map(|f| f.id).collect();
                let what = match rule.mode {
                    Mode::Open { .. } | Mode::Closed => Some(format!(
                        "a failure_mode {} rule answered an error: {message}",
                        if rule.mode == Mode::Closed {
                            "closed"
                        } else {
                            "open"
                        }
                    )),
                    Mode::Error if faults.is_empty() => {
                        Some(format!("store error on a key no fault touched: {message}"))
                    }
                    Mode::Error => None,
                };
                if let Some(what) = what {
                    findings.violations.push(Violation {
                        what,
                        rule: rule.name,
                        key,
                        at_s: run.at_s(d.send_us),
                        faults: ids,
                    });
                }
            }
            Outcome::Ok | Outcome::Over => {}
        }
        findings.answered += 1;
        let latency = d.latency_us();
        if tally(
            run,
            d.send_us,
            d.answer_us,
            findings,
            &mut during,
            &mut outside,
        ) {
            by_rule.entry(rule.name).or_default().push(latency);
        }
    }
    for &(send_us, answer_us) in reports {
        findings.answered += 1;
        tally(run, send_us, answer_us, findings, &mut during, &mut outside);
    }
    findings.during_faults = Latency::of(during);
    findings.outside_faults = Latency::of(outside);
    findings.rule_latency = by_rule
        .into_iter()
        .map(|(r, l)| (r, Latency::of(l)))
        .collect();
    if findings.within_answer_bound() < 0.999 {
        findings.violations.push(Violation {
            what: format!(
                "{} of {} answers after {} ms: {:.3} % within, stated 99.9 %",
                findings.beyond_answer_bound,
                findings.answered,
                run.answer_bound_us / 1000,
                findings.within_answer_bound() * 100.0
            ),
            rule: "-",
            key: "-".into(),
            at_s: 0.0,
            faults: Vec::new(),
        });
    }
}

/// Counts one answer's time, during store faults or outside them; whether
/// it was outside.
fn tally(
    run: &Run<'_>,
    send_us: u64,
    answer_us: u64,
    findings: &mut Findings,
    during: &mut Vec<u64>,
    outside: &mut Vec<u64>,
) -> bool {
    let latency = answer_us.saturating_sub(send_us);
    if latency > run.answer_bound_us {
        findings.beyond_answer_bound += 1;
    }
    let in_fault = run.faults.iter().any(|f| {
        f.kind.touches_the_store()
            && f.start_us <= answer_us
            && send_us <= f.end_us + RECOVERY_PAD_US
    });
    if in_fault {
        during.push(latency);
    } else {
        outside.push(latency);
    }
    !in_fault
}

/// The open floor's allowance over `[from, to]` for `length` µs of it:
/// every instance (and every restarted one) admits its floor per window
/// while the store is out for the key.
fn open_allowance(
    run: &Run<'_>,
    rule: &Rule,
    floor_per_window: f64,
    from: u64,
    to: u64,
    value: &str,
) -> (u64, Vec<usize>) {
    let Mode::Open { .. } = rule.mode else {
        return (0, Vec::new());
    };
    let faults = run.touching(rule, value, from, to, None, (0, RECOVERY_PAD_US));
    if faults.is_empty() {
        return (0, Vec::new());
    }
    let copies = run.instances as u64 + run.restarts(from, to);
    (
        (floor_per_window * copies as f64).ceil() as u64,
        faults.iter().map(|f| f.id).collect(),
    )
}

/// The loss allowance over `[from, to]`: admissions answered inside a
/// loss window may be missing on the new primary, and admitted again.
fn loss_allowance(
    run: &Run<'_>,
    rule: &Rule,
    value: &str,
    admitted: &[u64],
    from: u64,
    to: u64,
) -> (u64, Vec<usize>) {
    let mut total = 0;
    let mut ids = Vec::new();
    for (a, b, id) in run.loss_windows(rule, value, from, to) {
        total += count_in(admitted, a.max(from), b.min(to));
        ids.push(id);
    }
    (total, ids)
}

/// Aligned windows: admissions certainly inside ≤ limit + allowances.
fn windows(
    run: &Run<'_>,
    rule: &'static Rule,
    s: &Stream,
    ds: &[&Decision],
    unit_s: u64,
    fig: &mut RuleFigures,
    found: &mut Vec<Violation>,
) {
    let unit = unit_s * 1_000_000;
    let mut counts: BTreeMap<u64, u64> = BTreeMap::new();
    for d in ds
        .iter()
        .filter(|d| d.op == Op::Hit && d.outcome == Outcome::Ok)
    {
        if d.send_us / unit == d.answer_us / unit {
            *counts.entry(d.send_us / unit).or_default() += 1;
        }
    }
    let admitted = admitted_times(ds);
    for (w, n) in counts {
        let (from, to) = (w * unit, (w + 1) * unit - 1);
        // A window that began in the warm-up is not judged (its first
        // calls were not).
        if from < run.start_us && unit < run.end_us - run.start_us {
            continue;
        }
        let limit = run
            .versions(from, to)
            .into_iter()
            .filter_map(|v| rule.window_bound(v))
            .map(|(_, l)| l)
            .max()
            .unwrap_or(0);
        let floor = match rule.mode {
            Mode::Open { floor, .. } => floor as f64,
            _ => 0.0,
        };
        let (open, mut ids) = open_allowance(run, rule, floor, from, to, &s.value);
        let (loss, loss_ids) = loss_allowance(run, rule, &s.value, &admitted, from, to);
        ids.extend(loss_ids);
        let local = local_first_allowance(run, rule, from, to);
        fig.checked += 1;
        fig.worst_excess = fig.worst_excess.max(n as i64 - limit as i64);
        fig.worst_allowance = fig.worst_allowance.max(open + loss + local);
        if n > limit + open + loss + local {
            found.push(Violation {
                what: format!("{n} admitted in a {unit_s} s window: limit {limit} + open floors {open} + failover loss {loss} + local-first {local}"),
                rule: rule.name,
                key: s.value.clone(),
                at_s: run.at_s(from),
                faults: ids,
            });
        }
    }
}

/// A local-first window's stated excess over `[from, to]`: `N·P`, and
/// `(N + 1)·P` for each instance killed or restarted within it (see
/// [`Rule::local_first`]); 0 for any other rule.
fn local_first_allowance(run: &Run<'_>, rule: &Rule, from: u64, to: u64) -> u64 {
    let (true, Shape::Window { limits, .. }) = (rule.local_first, rule.shape) else {
        return 0;
    };
    let n = run.instances as u64;
    let share = run
        .versions(from, to)
        .into_iter()
        .map(|v| Share::of(limits[v], n, LOCAL_FIRST_MAX_OVER).unwritten)
        .max()
        .unwrap_or(0);
    let kills = run
        .faults
        .iter()
        .filter(|f| f.kind == FaultKind::KillInstance && f.start_us <= to && from <= f.end_us)
        .count() as u64;
    share * (n + (n + 1) * kills)
}

/// Token buckets: over spans of 1, 2 and 5 s every 250 ms, admissions
/// certainly inside ≤ burst + rate × span + allowances.
#[allow(clippy::too_many_arguments)]
fn spans(
    run: &Run<'_>,
    rule: &'static Rule,
    s: &Stream,
    ds: &[&Decision],
    rates: [f64; 2],
    bursts: [f64; 2],
    fig: &mut RuleFigures,
    found: &mut Vec<Violation>,
) {
    let mut hits: Vec<(u64, u64)> = ds
        .iter()
        .filter(|d| d.op == Op::Hit && d.outcome == Outcome::Ok)
        .map(|d| (d.send_us, d.answer_us))
        .collect();
    hits.sort_unstable();
    let admitted = admitted_times(ds);
    let limit = match rule.mode {
        Mode::Open { limit, .. } => limit as f64,
        _ => 1.0,
    };
    for length in BUCKET_SPANS_US {
        let mut from = run.start_us;
        while from + length <= run.end_us {
            let to = from + length;
            let first = hits.partition_point(|h| h.0 < from);
            let n = hits[first..]
                .iter()
                .take_while(|h| h.0 <= to)
                .filter(|h| h.1 <= to)
                .count() as u64;
            let secs = length as f64 / 1e6;
            let bound = run
                .versions(from, to)
                .into_iter()
                .map(|v| bursts[v] + rates[v] * secs)
                .fold(0.0, f64::max);
            // An open bucket's floor is the bucket scaled by floor / limit.
            let floor = match rule.mode {
                Mode::Open { floor, .. } => (bursts[0] + rates[0] * secs) * floor as f64 / limit,
                _ => 0.0,
            };
            let (open, mut ids) = open_allowance(run, rule, floor, from, to, &s.value);
            let (loss, loss_ids) = loss_allowance(run, rule, &s.value, &admitted, from, to);
            ids.extend(loss_ids);
            fig.checked += 1;
            fig.worst_excess = fig.worst_excess.max(n as i64 - bound.floor() as i64);
            fig.worst_allowance = fig.worst_allowance.max(open + loss);
            if n as f64 > bound.floor() + (open + loss) as f64 {
                found.push(Violation {
                    what: format!(
                        "{n} admitted in {secs} s: burst + rate × span {bound:.0} + open floors {open} + failover loss {loss}"
                    ),
                    rule: rule.name,
                    key: s.value.clone(),
                    at_s: run.at_s(from),
                    faults: ids,
                });
            }
            from += BUCKET_STEP_US;
        }
    }
}

/// In-flight: the holds the clients saw (from an admission's answer to its
/// release's send) never exceed `max` + the slots a failover may have lost.
fn in_flight(
    run: &Run<'_>,
    rule: &'static Rule,
    s: &Stream,
    ds: &[&Decision],
    max: u64,
    fig: &mut RuleFigures,
    found: &mut Vec<Violation>,
) {
    let mut events: Vec<(u64, i64)> = Vec::new();
    for d in ds {
        match (d.op, &d.outcome) {
            (Op::Hit, Outcome::Ok) => events.push((d.answer_us, 1)),
            (Op::Release, _) => events.push((d.send_us, -1)),
            _ => {}
        }
    }
    // At one instant, releases first: a hold ends before the next begins.
    events.sort_unstable();
    let admitted = admitted_times(ds);
    let mut held: i64 = 0;
    let mut reported_until = 0;
    for (t, delta) in events {
        held += delta;
        fig.checked += 1;
        fig.worst_excess = fig.worst_excess.max(held - max as i64);
        if held > max as i64 && t > reported_until {
            let (loss, ids) = loss_allowance(
                run,
                rule,
                &s.value,
                &admitted,
                t.saturating_sub(2_000_000),
                t,
            );
            fig.worst_allowance = fig.worst_allowance.max(loss);
            if held > (max + loss) as i64 {
                found.push(Violation {
                    what: format!("{held} in flight: max_in_flight {max} + failover loss {loss}"),
                    rule: rule.name,
                    key: s.value.clone(),
                    at_s: run.at_s(t),
                    faults: ids,
                });
                reported_until = t + 1_000_000;
            }
        }
    }
}

/// Per failover: the most a window of `closed` and of `durable` admitted
/// above its limit, among the keys on the failed-over primary, in the
/// windows around it.
fn losses(run: &Run<'_>, by_stream: &BTreeMap<usize, Vec<&Decision>>) -> Vec<Loss> {
    let mut out = Vec::new();
    for f in run.faults.iter().filter(|f| {
        f.kind.stops_a_primary() && (f.kind != FaultKind::PausePrimary || f.promoted_us.is_some())
    }) {
        let mut excess = [i64::MIN, i64::MIN];
        for (stream, ds) in by_stream {
            let Some((rule, s)) = run.rule_of(*stream) else {
                continue;
            };
            // The original's windows, same limit and rate: counted as
            // acknowledged (`closed`, `fixed`) or replicated (`durable`).
            let slot = match rule.name {
                "closed" | "fixed" => 0,
                "durable" => 1,
                _ => continue,
            };
            let from = f.start_us.saturating_sub(LOSS_PAD_US) / 1_000_000;
            let to = (f.promoted_us.unwrap_or(f.end_us) + LOSS_PAD_US) / 1_000_000;
            for w in from..=to {
                if !f.covers(run::slot(rule, &s.value, w).unwrap_or(0)) {
                    continue;
                }
                let limit = run
                    .versions(w * 1_000_000, (w + 1) * 1_000_000 - 1)
                    .into_iter()
                    .filter_map(|v| rule.window_bound(v))
                    .map(|(_, l)| l)
                    .max()
                    .unwrap_or(0);
                let n = ds
                    .iter()
                    .filter(|d| {
                        d.outcome == Outcome::Ok
                            && d.send_us / 1_000_000 == w
                            && d.answer_us / 1_000_000 == w
                    })
                    .count() as i64;
                excess[slot] = excess[slot].max(n - limit as i64);
            }
        }
        out.push(Loss {
            fault: f.id,
            kind: f.kind,
            async_excess: excess[0],
            durable_excess: excess[1],
        });
    }
    out
}

/// Per fault that touches the store: seconds from the moment the store was
/// there again (the replica promoted, the link healed) to the last error of
/// a key it touched (on the instance it touched, if one); 0 if none after.
fn recovery(run: &Run<'_>) -> Vec<(usize, FaultKind, f64)> {
    let mut out = Vec::new();
    for f in run.faults.iter().filter(|f| f.kind.touches_the_store()) {
        let back = f.promoted_us.unwrap_or(f.end_us);
        let mut last = back;
        for d in run.decisions {
            let Outcome::Error(_) = d.outcome else {
                continue;
            };
            if d.send_us < f.start_us || d.send_us > f.end_us + RECOVERY_PAD_US {
                continue;
            }
            let Some((rule, s)) = run.rule_of(d.stream) else {
                continue;
            };
            // A key on any primary says nothing of this fault's recovery.
            if rule.placement == Placement::Anywhere {
                continue;
            }
            if run.touches(f, rule, &s.value, d.send_us, Some(d.instance)) {
                last = last.max(d.answer_us);
            }
        }
        out.push((f.id, f.kind, (last - back) as f64 / 1e6));
    }
    out
}
