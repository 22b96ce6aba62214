//! The chaos soak's checker, on runs written here: each bound it holds the
//! service to flags a run that breaks it and passes one that keeps it (the
//! soak itself, `scripts/chaos.sh`, runs on real processes; this is its
//! checker alone, on logs made to the letter).

#![allow(dead_code)]
#![allow(clippy::disallowed_types)]

use ratelimit_soak::support;

use ratelimit_soak::check;
use ratelimit_soak::host;
use ratelimit_soak::log;
use ratelimit_soak::rules;

use std::time::Duration;

use log::{Decision, Fault, FaultKind, Heard, Op, Outcome, QuotaEvent};
use ratelimit_soak::findings::Findings;
use ratelimit_soak::run::Run;
use support::envoy_quota::{Enforced, Told};

/// The run starts at 1,000 s (unix µs), on a whole second, and lasts 30 s.
const START: u64 = 1_000_000_000;
const END: u64 = START + 30_000_000;

fn ms(t: u64) -> u64 {
    START + t * 1_000
}

/// The ids of the streams of `rule` with `value`.
fn streams_of(rule: &str, value: &str) -> Vec<usize> {
    rules::streams()
        .into_iter()
        .filter(|s| s.rule == rule && s.value == value)
        .map(|s| s.id)
        .collect()
}

fn checked(decisions: &[Decision], quota: &[QuotaEvent], faults: &[Fault]) -> Findings {
    let streams = rules::streams();
    let run = Run {
        streams: &streams,
        decisions,
        quota,
        faults,
        instances: 3,
        start_us: START,
        end_us: END,
        answer_bound_us: 55_000,
    };
    check::check(&run, &[])
}

fn violations(f: &Findings, containing: &str) -> usize {
    f.violations
        .iter()
        .filter(|v| v.what.contains(containing))
        .count()
}

// ---- the RLQS boards ----

/// The events of Envoy `stream` on instance 0, at `t` ms.
fn on_instance_0(stream: usize) -> impl Fn(u64, Heard) -> QuotaEvent {
    move |t, what| QuotaEvent {
        stream,
        instance: 0,
        at_us: ms(t),
        what,
    }
}

/// A bucket of `rate` a second, one second's worth of tokens.
fn bucket(rate: u32) -> Option<Told> {
    Some(Told::Assign {
        enforced: Enforced::Bucket(rate, rate, 1),
        ttl: Some(Duration::from_secs(5)),
    })
}

/// One Envoy's events: it joins on `instance` at `from` ms, reports every
/// second, each report answered 2 ms later with its share, `share.0` a
/// second before `share.1` ms and `share.2` from then, and leaves at `to`
/// ms; `pushes` are extra messages (ms, rate).
struct Envoy {
    stream: usize,
    instance: usize,
    from: u64,
    to: u64,
    share: (u32, u64, u32),
    pushes: Vec<(u64, u32)>,
}

impl Envoy {
    fn events(&self) -> Vec<QuotaEvent> {
        let at = |t: u64, what: Heard| QuotaEvent {
            stream: self.stream,
            instance: self.instance,
            at_us: ms(t),
            what,
        };
        let mut out = vec![at(self.from, Heard::Join { demand: 30.0 })];
        let mut t = self.from;
        while t < self.to {
            out.push(at(
                t,
                Heard::Report {
                    first: t == self.from,
                    allowed: 10,
                    denied: 0,
                },
            ));
            out.push(at(
                t + 2,
                Heard::Message {
                    told: bucket(if t < self.share.1 {
                        self.share.0
                    } else {
                        self.share.2
                    }),
                },
            ));
            t += 1_000;
        }
        for &(p, rate) in &self.pushes {
            out.push(at(p, Heard::Message { told: bucket(rate) }));
        }
        out.push(at(self.to, Heard::Leave));
        out.sort_by_key(|e| e.at_us);
        out
    }
}

/// Three Envoys on board `q0` (60 a second): two of 30 a second from the
/// start, and a newcomer at 10 s, told 20. The first two are pushed 20 at
/// `push_at` ms, and told 20 from their report at 10.5 s; not pushed, only
/// from their report at 11.5 s, 1.5 s late.
fn a_newcomer_shrinks_two(push_at: Option<u64>, instances: [usize; 3]) -> Vec<QuotaEvent> {
    let ids = streams_of("quota", "q0");
    let shrunk = match push_at {
        Some(_) => (30, 10_500, 20),
        None => (30, 11_000, 20),
    };
    let mut out = Vec::new();
    for (n, id) in ids.iter().enumerate().take(2) {
        out.extend(
            Envoy {
                stream: *id,
                instance: instances[n],
                from: 500,
                to: 25_000,
                share: shrunk,
                pushes: push_at.map(|p| vec![(p, 20)]).unwrap_or_default(),
            }
            .events(),
        );
    }
    out.extend(
        Envoy {
            stream: ids[2],
            instance: instances[2],
            from: 10_000,
            to: 25_000,
            share: (20, 0, 20),
            pushes: Vec::new(),
        }
        .events(),
    );
    out
}

#[test]
fn a_board_whose_shares_are_pushed_within_the_lag_is_within_its_rate() {
    let f = checked(&[], &a_newcomer_shrinks_two(Some(10_200), [0, 1, 2]), &[]);
    assert_eq!(f.violations.len(), 0, "{:?}", f.violations);
    let board = &f.boards[0];
    assert_eq!(board.board, "quota=q0");
    assert!((board.worst_settled - 1.0).abs() < 1e-9, "{board:?}");
    // At an instant, the push still under way: 30 + 30 + 20 = 80 of 60.
    assert!(
        (board.worst_instant - 80.0 / 60.0).abs() < 1e-9,
        "{board:?}"
    );
    assert_eq!(board.joins, 3);
}

#[test]
fn a_shrunk_share_that_reaches_its_envoy_late_is_a_violation() {
    // Not pushed: the two run 30 until their reports at 11.5 s.
    let f = checked(&[], &a_newcomer_shrinks_two(None, [0, 1, 2]), &[]);
    assert!(
        violations(&f, "on the board add up to 80.0") >= 1,
        "{:?}",
        f.violations
    );
}

#[test]
fn an_envoy_cut_off_the_board_may_run_its_share_until_its_ttl() {
    // The two on instance 0, which a cut link keeps off every primary
    // from 9 s to 12 s: they keep what they run.
    let cut = Fault {
        id: 0,
        kind: FaultKind::CutLink,
        instance: Some(0),
        primary: Some(7000),
        slots: vec![(0, 16_383)],
        start_us: ms(9_000),
        end_us: ms(12_000),
        promoted_us: None,
        note: String::new(),
    };
    let f = checked(
        &[],
        &a_newcomer_shrinks_two(None, [0, 0, 2]),
        std::slice::from_ref(&cut),
    );
    assert_eq!(violations(&f, "on the board"), 0, "{:?}", f.violations);
    // Counted within their TTL, they are at their new shares.
    assert!(
        (f.boards[0].worst_in_faults - 1.0).abs() < 1e-9,
        "{:?}",
        f.boards[0]
    );
    // The same cut on another instance excuses nothing.
    let elsewhere = Fault {
        instance: Some(1),
        ..cut
    };
    let f = checked(&[], &a_newcomer_shrinks_two(None, [0, 0, 2]), &[elsewhere]);
    assert!(violations(&f, "on the board") >= 1, "{:?}", f.violations);
}

#[test]
fn an_allow_all_on_a_split_rule_is_a_violation() {
    let at = on_instance_0(streams_of("quota", "q1")[0]);
    let events = vec![
        at(1_000, Heard::Join { demand: 9.0 }),
        at(
            1_000,
            Heard::Report {
                first: true,
                allowed: 0,
                denied: 0,
            },
        ),
        at(
            1_003,
            Heard::Message {
                told: Some(Told::Assign {
                    enforced: Enforced::AllowAll,
                    ttl: Some(Duration::from_secs(5)),
                }),
            },
        ),
        at(20_000, Heard::Leave),
    ];
    let f = checked(&[], &events, &[]);
    assert!(violations(&f, "add up to inf") >= 1, "{:?}", f.violations);
    // Not a token bucket: the newcomer was told no share either.
    assert_eq!(violations(&f, "told no share"), 1, "{:?}", f.violations);
}

/// One Envoy that joins on instance 0 at 2 s and hears nothing after its
/// first report (or, with `answer`, a bucket 5 ms later), leaving at 10 s.
fn a_lone_join(answer: bool) -> Vec<QuotaEvent> {
    let at = on_instance_0(streams_of("quota", "q1")[0]);
    let mut events = vec![
        at(2_000, Heard::Join { demand: 9.0 }),
        at(
            2_000,
            Heard::Report {
                first: true,
                allowed: 0,
                denied: 0,
            },
        ),
        at(10_000, Heard::Leave),
    ];
    if answer {
        events.push(at(2_005, Heard::Message { told: bucket(9) }));
    }
    events.sort_by_key(|e| e.at_us);
    events
}

#[test]
fn a_newcomer_told_nothing_is_starved_and_its_report_unanswered() {
    let f = checked(&[], &a_lone_join(false), &[]);
    assert_eq!(
        violations(&f, "told no share within 1 s"),
        1,
        "{:?}",
        f.violations
    );
    assert_eq!(violations(&f, "not answered"), 1, "{:?}", f.violations);
    assert_eq!(f.unanswered, 1);

    let f = checked(&[], &a_lone_join(true), &[]);
    assert_eq!(f.violations.len(), 0, "{:?}", f.violations);
    assert!((f.boards[1].first_share.max - 5.0).abs() < 1e-9);
}

#[test]
fn a_join_on_a_killed_instance_is_excused() {
    let kill = Fault {
        id: 0,
        kind: FaultKind::KillInstance,
        instance: Some(0),
        primary: None,
        slots: Vec::new(),
        start_us: ms(2_100),
        end_us: ms(3_000),
        promoted_us: None,
        note: String::new(),
    };
    let f = checked(&[], &a_lone_join(false), &[kill]);
    assert_eq!(f.violations.len(), 0, "{:?}", f.violations);
}

// ---- the rules' windows and answers ----

fn hit(stream: usize, send_ms: u64, outcome: Outcome) -> Decision {
    Decision {
        stream,
        op: Op::Hit,
        instance: 0,
        send_us: ms(send_ms),
        answer_us: ms(send_ms) + 900,
        outcome,
    }
}

#[test]
fn a_fixed_window_over_its_limit_is_a_violation() {
    let id = streams_of("fixed", "f0")[0];
    let at_limit: Vec<Decision> = (0..20)
        .map(|i| hit(id, 5_000 + i * 40, Outcome::Ok))
        .collect();
    let f = checked(&at_limit, &[], &[]);
    assert_eq!(f.violations.len(), 0, "{:?}", f.violations);

    let mut over = at_limit.clone();
    over.push(hit(id, 5_900, Outcome::Ok));
    let f = checked(&over, &[], &[]);
    assert_eq!(
        violations(&f, "21 admitted in a 1 s window"),
        1,
        "{:?}",
        f.violations
    );
}

#[test]
fn a_token_bucket_over_burst_and_rate_in_a_span_is_a_violation() {
    // 20 a second, burst 40: at most 60 in any 1 s span.
    let id = streams_of("bucket", "b2")[0];
    let at_bound: Vec<Decision> = (0..60)
        .map(|i| hit(id, 5_000 + i * 15, Outcome::Ok))
        .collect();
    let f = checked(&at_bound, &[], &[]);
    assert_eq!(f.violations.len(), 0, "{:?}", f.violations);

    let mut over = at_bound.clone();
    over.push(hit(id, 5_950, Outcome::Ok));
    let f = checked(&over, &[], &[]);
    assert!(
        violations(&f, "61 admitted in 1 s") >= 1,
        "{:?}",
        f.violations
    );
}

#[test]
fn more_holds_than_max_in_flight_is_a_violation() {
    let id = streams_of("inflight", "i0")[0];
    // Each hold from its admission's answer to its release's send.
    let holds = |n: u64| -> Vec<Decision> {
        (0..n)
            .flat_map(|i| {
                let taken = hit(id, 5_000 + i * 10, Outcome::Ok);
                let given = Decision {
                    op: Op::Release,
                    send_us: ms(5_500 + i * 10),
                    answer_us: ms(5_500 + i * 10) + 900,
                    ..taken.clone()
                };
                [taken, given]
            })
            .collect()
    };
    assert_eq!(checked(&holds(5), &[], &[]).violations.len(), 0);
    let f = checked(&holds(6), &[], &[]);
    assert_eq!(violations(&f, "6 in flight"), 1, "{:?}", f.violations);
}

/// A fault of `kind` on every slot from 5 s to 7 s, the replica promoted
/// at 6 s.
fn on_every_primary(kind: FaultKind) -> Fault {
    Fault {
        id: 0,
        kind,
        instance: None,
        primary: Some(7000),
        slots: vec![(0, 16_383)],
        start_us: ms(5_000),
        end_us: ms(7_000),
        promoted_us: Some(ms(6_000)),
        note: String::new(),
    }
}

#[test]
fn a_forced_failover_may_lose_what_it_acknowledged_a_graceful_one_nothing() {
    // 22 admitted in the second of the failover, on a limit of 20.
    let over = |rule: &str, value: &str| -> Vec<Decision> {
        let id = streams_of(rule, value)[0];
        (0..22)
            .map(|i| hit(id, 5_000 + i * 40, Outcome::Ok))
            .collect()
    };
    let forced = [on_every_primary(FaultKind::ForcedFailover)];
    let f = checked(&over("closed", "c0"), &[], &forced);
    assert_eq!(
        f.violations.len(),
        0,
        "the loss window's admissions: {:?}",
        f.violations
    );
    // Nothing is lost by a graceful failover, nor by a replicated rule.
    let graceful = [on_every_primary(FaultKind::Failover)];
    let f = checked(&over("closed", "c0"), &[], &graceful);
    assert_eq!(violations(&f, "22 admitted"), 1, "{:?}", f.violations);
    let f = checked(&over("durable", "d0"), &[], &forced);
    assert_eq!(violations(&f, "22 admitted"), 1, "{:?}", f.violations);
}

#[test]
fn an_error_only_where_a_fault_touched_the_key() {
    let id = streams_of("closed", "c0")[0];
    let f = checked(
        &[hit(
            id,
            5_000,
            Outcome::Error("Unknown context deadline exceeded".into()),
        )],
        &[],
        &[],
    );
    assert_eq!(
        violations(&f, "failure_mode closed rule answered an error"),
        1
    );
}

// ---- the machine ----

#[test]
fn a_host_stall_is_a_fault_on_every_key_that_excuses_errors_not_admissions() {
    let second = |t: u64, stolen: f64| host::Cpu {
        at_us: ms(t),
        stolen,
        busy: 1.0,
    };
    let machine = [
        second(5_000, 0.1),
        second(6_000, 0.5),
        second(7_000, 0.4),
        second(9_000, 0.35),
        second(20_000, 0.6),
    ];
    // Stolen seconds at most one second apart are one stall.
    let stalls = host::stalls(&machine, 7);
    let spans: Vec<(u64, u64, usize)> = stalls
        .iter()
        .map(|f| (f.start_us, f.end_us, f.id))
        .collect();
    assert_eq!(
        spans,
        vec![(ms(5_000), ms(9_000), 7), (ms(19_000), ms(20_000), 8)]
    );

    let id = streams_of("fixed", "f0")[0];
    let failed = [hit(
        id,
        6_500,
        Outcome::Error("Unknown context deadline exceeded".into()),
    )];
    assert_eq!(
        violations(&checked(&failed, &[], &[]), "no fault touched"),
        1
    );
    assert_eq!(checked(&failed, &[], &stalls).violations.len(), 0);

    let over: Vec<Decision> = (0..21)
        .map(|i| hit(id, 6_000 + i * 40, Outcome::Ok))
        .collect();
    let f = checked(&over, &[], &stalls);
    assert_eq!(
        violations(&f, "21 admitted in a 1 s window"),
        1,
        "{:?}",
        f.violations
    );
}

/// A call sent in the warm-up, before the run starts, is counted, not
/// judged: the same error a second into the run is a violation.
#[test]
fn warm_up_calls_are_counted_not_judged() {
    let id = streams_of("fixed", "f0")[0];
    let error = || Outcome::Error("Unknown context deadline exceeded".into());
    let warm_up = Decision {
        send_us: START - 400_000,
        answer_us: START - 350_000,
        ..hit(id, 0, error())
    };
    let f = checked(&[warm_up.clone(), hit(id, 10, Outcome::Ok)], &[], &[]);
    assert!(f.violations.is_empty(), "{:?}", f.violations);
    assert_eq!(f.warm_up, (1, 1));
    assert_eq!(f.answered, 1);
    let judged = checked(&[warm_up, hit(id, 1_000, error())], &[], &[]);
    assert_eq!(violations(&judged, "no fault touched"), 1);
    // 25 admitted in a second of the warm-up (a fixed window of 20):
    // not judged; the same in a second of the run is.
    let before: Vec<Decision> = (0..25)
        .map(|i| Decision {
            send_us: START - 900_000 + i * 30_000,
            answer_us: START - 900_000 + i * 30_000 + 900,
            ..hit(id, 0, Outcome::Ok)
        })
        .collect();
    assert_eq!(
        violations(&checked(&before, &[], &[]), "admitted in a 1 s window"),
        0
    );
    let during: Vec<Decision> = (0..25)
        .map(|i| hit(id, 2_000 + i * 30, Outcome::Ok))
        .collect();
    assert_eq!(
        violations(&checked(&during, &[], &[]), "admitted in a 1 s window"),
        1
    );
}

/// A local-first window may admit `N·P` over its limit (40 + 3·2), and
/// `(N + 1)·P` more while an instance is killed in it.
#[test]
fn a_local_first_window_is_held_to_its_stated_bound() {
    let id = streams_of("local", "l3")[0];
    let second = |n: u64, at: u64| -> Vec<Decision> {
        (0..n).map(|i| hit(id, at + i * 10, Outcome::Ok)).collect()
    };
    let f = checked(&second(46, 5_000), &[], &[]);
    assert!(f.violations.is_empty(), "{:?}", f.violations);
    let f = checked(&second(47, 5_000), &[], &[]);
    assert_eq!(violations(&f, "local-first 6"), 1, "{:?}", f.violations);
    let kill = Fault {
        id: 0,
        kind: FaultKind::KillInstance,
        instance: Some(1),
        primary: None,
        slots: Vec::new(),
        start_us: ms(5_200),
        end_us: ms(6_500),
        promoted_us: None,
        note: String::new(),
    };
    let f = checked(&second(54, 5_000), &[], std::slice::from_ref(&kill));
    assert_eq!(
        violations(&f, "admitted in a 1 s window"),
        0,
        "{:?}",
        f.violations
    );
    let f = checked(&second(55, 5_000), &[], &[kill]);
    assert_eq!(violations(&f, "local-first 14"), 1, "{:?}", f.violations);
}

// ---- the logs ----

#[test]
fn every_quota_event_reads_back_as_written() {
    let events = [
        Heard::Join { demand: 54.0 },
        Heard::Refused,
        Heard::Report {
            first: true,
            allowed: 3,
            denied: 4,
        },
        Heard::Message { told: None },
        Heard::Message {
            told: Some(Told::Abandon),
        },
        Heard::Message { told: bucket(12) },
        Heard::Message {
            told: Some(Told::Assign {
                enforced: Enforced::DenyAll,
                ttl: None,
            }),
        },
        Heard::Leave,
        Heard::Broken,
    ];
    for what in events {
        let e = QuotaEvent {
            stream: 30,
            instance: 2,
            at_us: 1_234_567,
            what,
        };
        assert_eq!(
            QuotaEvent::parse(&e.line()),
            Some(e.clone()),
            "{}",
            e.line()
        );
    }
}
