//! The checker of the RLQS boards: from what each simulated Envoy heard,
//! the assignment it ran at every moment, and on each board:
//!
//! - **The split.** The assignments in force add up to at most the rule's
//!   rate (the larger config's within 3 s of a reload). A share that
//!   shrank reaches its Envoy by a push: at once from a step on its own
//!   instance, within one `RLQS_SYNC_INTERVAL` from another. So every
//!   Envoy is counted at the least it runs over the next
//!   [`PUSH_LAG_US`]; an Envoy whose instance a store fault cuts off the
//!   board (from the fault's start to [`RECOVERY_PAD_US`] after it healed)
//!   keeps what it runs until its TTL, as the docs state, and is counted
//!   at the least it runs over the next TTL and push lag.
//! - **No newcomer starved.** An Envoy that joins is told a token bucket in
//!   answer to its first report, within [`ANSWER_WITHIN_US`], unless its
//!   instance was killed or a store fault touched the board for it.
//! - **Every report answered** within [`ANSWER_WITHIN_US`] on a running
//!   instance; the answer times count with the calls' (99.9 % within
//!   `STORE_TIMEOUT` + 5 ms).

use std::collections::BTreeMap;

use super::findings::{BoardFigures, Findings, Latency, Violation};
use super::log::{Heard, QuotaEvent};
use super::quota::ASSIGNMENT_TTL;
use super::rules::{Rule, Shape};
use super::run::{Run, RECOVERY_PAD_US};
use crate::support::envoy_quota::{Enforced, Told};

/// How long a moved share may take to reach its Envoy: one
/// `RLQS_SYNC_INTERVAL` (250 ms) and a round trip, padded.
pub const PUSH_LAG_US: u64 = 500_000;
/// How often each board's sum is taken.
const SAMPLE_US: u64 = 100_000;
/// How long a report may wait for its answer, and a newcomer for its share.
pub const ANSWER_WITHIN_US: u64 = 1_000_000;

/// One Envoy's assignment in force over `[from, to)`, a second.
#[derive(Debug, Clone, Copy)]
struct Held {
    from: u64,
    to: u64,
    rate: f64,
}

/// Checks every board of the run; the answered reports' (send, answer)
/// times, for the answer-time tally.
pub fn check(run: &Run<'_>, findings: &mut Findings) -> Vec<(u64, u64)> {
    let mut by_stream: BTreeMap<usize, Vec<&QuotaEvent>> = BTreeMap::new();
    for e in run.quota {
        by_stream.entry(e.stream).or_default().push(e);
    }
    for events in by_stream.values_mut() {
        events.sort_by_key(|e| e.at_us);
    }
    let mut boards: BTreeMap<(&'static str, &str), Vec<usize>> = BTreeMap::new();
    for s in run.streams {
        if let Some(rule) = Rule::by_name(s.rule).filter(|r| r.is_board()) {
            boards.entry((rule.name, &s.value)).or_default().push(s.id);
        }
    }
    let mut answered = Vec::new();
    for ((name, value), envoys) in boards {
        let Some(rule) = Rule::by_name(name) else {
            continue;
        };
        let Shape::Board { rates } = rule.shape else {
            continue;
        };
        let mut fig = BoardFigures {
            board: format!("{name}={value}"),
            rate: rates[0],
            per_second: vec![
                0.0;
                (run.end_us.saturating_sub(run.start_us) / 1_000_000) as usize + 1
            ],
            ..BoardFigures::default()
        };
        let mut firsts = Vec::new();
        let mut envoys_held = Vec::new();
        for id in &envoys {
            let events = by_stream.get(id).map(Vec::as_slice).unwrap_or_default();
            let (held, changes) = held(events, run.end_us);
            fig.changes += changes;
            envoys_held.push((events, held));
            connections(
                run,
                rule,
                value,
                events,
                &mut fig,
                &mut firsts,
                &mut answered,
                findings,
            );
        }
        fig.first_share = Latency::of(firsts);
        split(run, rule, value, rates, &envoys_held, &mut fig, findings);
        findings.boards.push(fig);
    }
    answered
}

/// An Envoy's assignments in force, from its events, and how many times
/// what it ran changed.
fn held(events: &[&QuotaEvent], end_us: u64) -> (Vec<Held>, u64) {
    let mut out = Vec::new();
    let mut changes = 0;
    // (since, expiry, enforced)
    let mut now: Option<(u64, u64, Enforced)> = None;
    let close = |out: &mut Vec<Held>, now: Option<(u64, u64, Enforced)>, at: u64| {
        if let Some((from, expiry, enforced)) = now {
            let to = expiry.min(at);
            if to > from {
                out.push(Held {
                    from,
                    to,
                    rate: enforced.rate(),
                });
            }
        }
    };
    for e in events {
        match e.what {
            Heard::Message {
                told: Some(Told::Assign { enforced, ttl }),
            } => {
                let running = now.filter(|(_, expiry, _)| *expiry > e.at_us);
                if running.map(|(_, _, r)| r) != Some(enforced) {
                    changes += 1;
                }
                close(&mut out, now, e.at_us);
                let expiry = ttl.map_or(u64::MAX, |t| e.at_us + t.as_micros() as u64);
                now = Some((e.at_us, expiry, enforced));
            }
            Heard::Message {
                told: Some(Told::Abandon),
            }
            | Heard::Leave => {
                close(&mut out, now, e.at_us);
                now = None;
            }
            _ => {}
        }
    }
    close(&mut out, now, end_us);
    (out, changes)
}

/// The least `held` runs over `[from, to]` (nothing held: 0).
fn least(held: &[Held], from: u64, to: u64) -> f64 {
    let first = held.partition_point(|h| h.to <= from);
    let (mut covered, mut least) = (from, f64::INFINITY);
    for h in &held[first..] {
        if h.from > covered {
            return 0.0;
        }
        least = least.min(h.rate);
        covered = h.to;
        if covered > to {
            return least;
        }
    }
    0.0
}

/// The rate `held` runs at `at`.
fn at(held: &[Held], at: u64) -> f64 {
    let i = held.partition_point(|h| h.to <= at);
    held.get(i).filter(|h| h.from <= at).map_or(0.0, |h| h.rate)
}

/// The instance an Envoy's stream was on at `at`.
fn instance_at(events: &[&QuotaEvent], at: u64) -> Option<usize> {
    let i = events.partition_point(|e| e.at_us <= at);
    events[..i].last().map(|e| e.instance)
}

/// The sum of the assignments in force on the board, every
/// [`SAMPLE_US`], against the rate.
fn split(
    run: &Run<'_>,
    rule: &'static Rule,
    value: &str,
    rates: [f64; 2],
    envoys: &[(&[&QuotaEvent], Vec<Held>)],
    fig: &mut BoardFigures,
    findings: &mut Findings,
) {
    let ttl = ASSIGNMENT_TTL.as_micros() as u64;
    let mut reported_until = 0;
    let mut t = run.start_us;
    while t + ttl + PUSH_LAG_US <= run.end_us {
        let mut settled = 0.0;
        let mut instant = 0.0;
        let mut cut_off = Vec::new();
        for (events, held) in envoys {
            instant += at(held, t);
            let touching = instance_at(events, t).map_or_else(Vec::new, |i| {
                run.touching(
                    rule,
                    value,
                    t,
                    t + PUSH_LAG_US,
                    Some(i),
                    (0, RECOVERY_PAD_US),
                )
            });
            let lag = if touching.is_empty() {
                PUSH_LAG_US
            } else {
                cut_off.extend(touching.iter().map(|f| f.id));
                ttl + PUSH_LAG_US
            };
            settled += least(held, t, t + lag);
        }
        let rate = run
            .versions(t, t + PUSH_LAG_US)
            .into_iter()
            .map(|v| rates[v])
            .fold(0.0, f64::max);
        fig.samples += 1;
        fig.worst_instant = fig.worst_instant.max(instant / rate);
        if let Some(s) = fig
            .per_second
            .get_mut(((t - run.start_us) / 1_000_000) as usize)
        {
            *s = s.max(instant);
        }
        if cut_off.is_empty() {
            fig.worst_settled = fig.worst_settled.max(settled / rate);
        } else {
            fig.worst_in_faults = fig.worst_in_faults.max(settled / rate);
        }
        if settled > rate + 1e-6 && t >= reported_until {
            cut_off.sort_unstable();
            cut_off.dedup();
            findings.violations.push(Violation {
                what: format!(
                    "assignments in force on the board add up to {settled:.1} a second: rate {rate}"
                ),
                rule: rule.name,
                key: value.to_string(),
                at_s: run.at_s(t),
                faults: cut_off,
            });
            reported_until = t + 1_000_000;
        }
        t += SAMPLE_US;
    }
}

/// Each connection of one Envoy: its first report answered with a share
/// (no newcomer starved), every report answered.
#[allow(clippy::too_many_arguments)]
fn connections(
    run: &Run<'_>,
    rule: &'static Rule,
    value: &str,
    events: &[&QuotaEvent],
    fig: &mut BoardFigures,
    firsts: &mut Vec<u64>,
    answered: &mut Vec<(u64, u64)>,
    findings: &mut Findings,
) {
    for (i, e) in events.iter().enumerate() {
        let Heard::Report { first, .. } = e.what else {
            if let Heard::Join { .. } = e.what {
                fig.joins += 1;
            }
            if let Heard::Message { told: Some(_) } = e.what {
                fig.assignments += 1;
            }
            continue;
        };
        fig.reports += 1;
        // The rest of this connection.
        let rest: Vec<&QuotaEvent> = events[i + 1..]
            .iter()
            .copied()
            .take_while(|x| !matches!(x.what, Heard::Join { .. } | Heard::Refused))
            .collect();
        let ended = rest
            .iter()
            .find(|x| matches!(x.what, Heard::Leave | Heard::Broken))
            .map(|x| x.at_us);
        let within = |t: u64| t <= e.at_us + ANSWER_WITHIN_US;
        // The first message of this connection that `accept` takes.
        let first_message = |accept: fn(&Option<Told>) -> bool| {
            rest.iter()
                .find_map(|x| match &x.what {
                    Heard::Message { told } if accept(told) => Some(x.at_us),
                    _ => None,
                })
                .filter(|&t| ended.is_none_or(|end| t <= end))
        };
        // Nothing is owed: the report was sent in the warm-up (not
        // judged), the connection or the run ended, or the instance was
        // killed.
        let owed_nothing = e.at_us < run.start_us
            || ended.is_some_and(within)
            || e.at_us + ANSWER_WITHIN_US > run.end_us
            || run.instance_down(e.instance, e.at_us, e.at_us + ANSWER_WITHIN_US);
        let violation = |what: String| Violation {
            what,
            rule: rule.name,
            key: value.to_string(),
            at_s: run.at_s(e.at_us),
            faults: Vec::new(),
        };
        match first_message(|_| true) {
            Some(t) => answered.push((e.at_us, t)),
            None if !owed_nothing => {
                findings.unanswered += 1;
                findings.violations.push(violation(format!(
                    "RLQS report to running instance {} not answered",
                    e.instance
                )));
            }
            None => {}
        }
        if !first {
            continue;
        }
        let share = first_message(|told| {
            matches!(
                told,
                Some(Told::Assign {
                    enforced: Enforced::Bucket(..),
                    ..
                })
            )
        })
        .filter(|&t| within(t));
        // A store fault on the board for this instance: no share to give.
        let board_out = || {
            !run.touching(
                rule,
                value,
                e.at_us,
                e.at_us + ANSWER_WITHIN_US,
                Some(e.instance),
                (500_000, RECOVERY_PAD_US),
            )
            .is_empty()
        };
        match share {
            Some(t) => firsts.push(t - e.at_us),
            None if !owed_nothing && !board_out() => findings.violations.push(violation(format!(
                "an Envoy that joined on instance {} was told no share within 1 s",
                e.instance
            ))),
            None => {}
        }
    }
}
