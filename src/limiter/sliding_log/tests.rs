use super::*;
use proptest::prelude::*;

const NS: Duration = Duration::from_nanos(1);
const MAX_WINDOW: Duration = Duration::from_nanos(u64::MAX);

fn log(limit: u64, window: Duration) -> SlidingLog {
    SlidingLog::new(limit, window).expect("valid test parameters")
}

fn ns(n: u64) -> Duration {
    Duration::from_nanos(n)
}

/// Deny ⇒ retry_after > 0, admitted exactly then and not 1 ns before;
/// Allow ⇒ `remaining` is exact; reset_after is the new state's TTL.
fn check_answers(
    l: &SlidingLog,
    now: Duration,
    cost: u64,
    before: &Option<SlidingLogState>,
    d: Decision,
    after: &SlidingLogState,
) -> Result<(), TestCaseError> {
    match d {
        Decision::Deny { retry_after, .. } => {
            prop_assert!(retry_after > Duration::ZERO);
            let at = now + retry_after;
            prop_assert!(
                l.decide(before.clone(), cost, at).0.is_allowed(),
                "retry at {at:?}"
            );
            prop_assert!(!l.decide(before.clone(), cost, at - NS).0.is_allowed());
        }
        Decision::Allow { remaining, .. } => {
            prop_assert!(l.decide(Some(after.clone()), remaining, now).0.is_allowed());
            if remaining < l.per.limit {
                prop_assert!(!l
                    .decide(Some(after.clone()), remaining + 1, now)
                    .0
                    .is_allowed());
            }
        }
        Decision::ExceedsCapacity { capacity, .. } => {
            prop_assert!(cost > capacity);
            prop_assert_eq!(capacity, l.per.limit);
        }
    }
    prop_assert_eq!(d.reset_after(), l.expires_after(after, now));
    prop_assert!(after.hits.iter().map(|h| h.cost).sum::<u64>() <= l.per.limit);
    prop_assert!(is_sorted(&after.hits));
    Ok(())
}

/// Decides `steps` from a fresh key, checking every answer and comparing
/// each with a naive log that keeps everything; returns the admitted
/// (effective time, cost) pairs.
fn simulate(l: &SlidingLog, steps: &[(Duration, u64)]) -> Result<Vec<(u128, u64)>, TestCaseError> {
    let w = u128::from(l.per.window_ns);
    let mut state = None;
    let mut admitted: Vec<(u128, u64)> = Vec::new();
    let mut latest = 0u128;
    for &(now, cost) in steps {
        latest = latest.max(now.as_nanos());
        let in_window: u128 = admitted
            .iter()
            .filter(|&&(t, _)| t + w > latest)
            .map(|&(_, c)| u128::from(c))
            .sum();
        let naive = cost == 0 || in_window + u128::from(cost) <= u128::from(l.per.limit);
        let (d, s) = l.decide(state.clone(), cost, now);
        check_answers(l, now, cost, &state, d, &s)?;
        prop_assert_eq!(d.is_allowed(), naive, "at {:?}, cost {}", now, cost);
        if d.is_allowed() && cost > 0 {
            admitted.push((latest, cost));
        }
        state = Some(s);
    }
    Ok(admitted)
}

/// In every interval of one window length ending at an admission:
/// admitted ≤ limit.
fn check_bound(l: &SlidingLog, admitted: &[(u128, u64)]) -> Result<(), TestCaseError> {
    let w = u128::from(l.per.window_ns);
    for &(t, _) in admitted {
        let total: u128 = admitted
            .iter()
            .filter(|&&(a, _)| a <= t && a + w > t)
            .map(|&(_, c)| u128::from(c))
            .sum();
        prop_assert!(
            total <= u128::from(l.per.limit),
            "{total} in ({}, {t}]",
            t + 1 - w
        );
    }
    Ok(())
}

#[test]
fn five_logins_per_fifteen_minutes() {
    let l = log(5, Duration::from_secs(15 * 60));
    let t0 = Duration::from_secs(1_700_000_000);
    let mut state = None;
    for i in 0..5u64 {
        let (d, s) = l.decide(state, 1, t0 + Duration::from_secs(60 * i));
        assert_eq!(d.remaining(), 4 - i);
        state = Some(s);
    }
    let now = t0 + Duration::from_secs(600);
    let (d, s) = l.decide(state.clone(), 1, now);
    assert_eq!(
        d,
        Decision::Deny {
            retry_after: Duration::from_secs(300),
            reset_after: Duration::from_secs(540),
        }
    );
    // Exactly one window after the first login it has left.
    let (d, _) = l.decide(Some(s), 1, t0 + Duration::from_secs(900));
    assert_eq!(
        d,
        Decision::Allow {
            remaining: 0,
            reset_after: Duration::from_secs(900),
        }
    );
}

#[test]
fn weighted_costs_leave_together() {
    let l = log(10, ns(100));
    let (_, s) = l.decide(None, 4, ns(1_000));
    let (_, s) = l.decide(Some(s), 5, ns(1_050));
    assert_eq!(s.hits.len(), 2);
    // 9 used: 6 needs both gone, the second leaves at 1,150.
    let (d, _) = l.decide(Some(s.clone()), 6, ns(1_060));
    assert_eq!(d.retry_after(), Some(ns(90)));
    // 5 needs only the first gone, at 1,100.
    let (d, _) = l.decide(Some(s), 5, ns(1_060));
    assert_eq!(d.retry_after(), Some(ns(40)));
}

#[test]
fn limit_above_the_maximum_is_refused() {
    assert!(SlidingLog::new(MAX_LOG_LIMIT, Duration::from_secs(60)).is_ok());
    assert_eq!(
        SlidingLog::new(MAX_LOG_LIMIT + 1, Duration::from_secs(60)),
        Err(InvalidLimit::LogLimitTooLarge {
            limit: 1_001,
            max: MAX_LOG_LIMIT,
        })
    );
    assert_eq!(
        SlidingLog::new(1, Duration::ZERO),
        Err(InvalidLimit::ZeroWindow)
    );
    assert!(SlidingLog::new(1, Duration::MAX).is_err());
    let l = log(7, Duration::from_secs(2));
    assert_eq!(
        (l.rate().limit(), l.rate().window()),
        (7, Duration::from_secs(2))
    );
}

#[test]
fn cost_above_the_limit_and_zero_limit() {
    let l = log(3, ns(10));
    let (d, s) = l.decide(None, 4, ns(5));
    assert_eq!(
        d,
        Decision::ExceedsCapacity {
            capacity: 3,
            reset_after: Duration::ZERO,
        }
    );
    assert!(s.hits.is_empty());
    let closed = log(0, ns(10));
    assert!(!closed.decide(None, 1, ns(5)).0.is_allowed());
    assert!(closed.decide(None, 0, ns(5)).0.is_allowed());
}

/// Regression: a log drained by a later `now` must not admit a full
/// limit again on a clock that steps back into the drained window.
#[test]
fn drained_log_remembers_the_latest_time() {
    let l = log(2, ns(100));
    let (_, s) = l.decide(None, 2, ns(1_000));
    let (_, s) = l.decide(Some(s), 0, ns(2_000));
    assert!(s.hits.is_empty());
    // Back to 1,010: decided at 2,000, so the new hit is logged there.
    let (d, s) = l.decide(Some(s), 2, ns(1_010));
    assert!(d.is_allowed());
    assert_eq!(s.hits.front().map(|h| h.at), Some(ns(2_000)));
    assert_eq!(
        l.decide(Some(s), 1, ns(1_020)).0.retry_after(),
        Some(ns(1_080))
    );
}

#[test]
fn unsorted_state_is_sorted_first() {
    let l = log(3, ns(100));
    let state = SlidingLogState {
        hits: [(150, 1), (120, 1), (60, 1)]
            .into_iter()
            .map(|(at, cost)| Hit { at: ns(at), cost })
            .collect(),
        latest: ns(150),
    };
    // At 160, the hit at 60 has left: 2 used.
    let (d, s) = l.decide(Some(state), 1, ns(160));
    assert_eq!(d.remaining(), 0);
    assert_eq!(
        s.hits.iter().map(|h| h.at).collect::<Vec<_>>(),
        [ns(120), ns(150), ns(160)]
    );
}

#[test]
fn extremes_do_not_overflow() {
    let century = Duration::from_secs(100 * 365 * 86_400);
    let times = [Duration::ZERO, NS, century, MAX_WINDOW, Duration::MAX];
    for l in [
        log(MAX_LOG_LIMIT, NS),
        log(MAX_LOG_LIMIT, MAX_WINDOW),
        log(1, century),
        log(0, NS),
    ] {
        for now in times {
            for latest in times {
                for at in times {
                    for hit_cost in [0, 1, u64::MAX] {
                        let state = SlidingLogState {
                            hits: [
                                Hit { at, cost: hit_cost },
                                Hit {
                                    at: NS,
                                    cost: u64::MAX,
                                },
                            ]
                            .into_iter()
                            .collect(),
                            latest,
                        };
                        for cost in [0, 1, MAX_LOG_LIMIT, u64::MAX] {
                            let (d, s) = l.decide(Some(state.clone()), cost, now);
                            if let Some(retry) = d.retry_after() {
                                assert!(retry > Duration::ZERO);
                            }
                            let _ = l.expires_after(&s, now);
                        }
                    }
                }
            }
        }
    }
}

/// (time, cost) sequences: time moves by a signed fraction of the window
/// (permille, plus a few ns of jitter), costs a little above the limit.
fn steps(
    window_ns: u64,
    limit: u64,
    backwards: bool,
) -> impl Strategy<Value = Vec<(Duration, u64)>> {
    crate::limiter::testing::arrivals(window_ns, limit, backwards, 1500)
}

fn params() -> impl Strategy<Value = SlidingLog> {
    (0u64..=20, prop_oneof![1u64..=10, 1u64..=10_000]).prop_map(|(limit, w)| log(limit, ns(w)))
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(500))]
    /// `in_window` counts in place what `pruned` keeps (the audit reads
    /// it on every audited decision, without copying the log).
    #[test]
    fn in_window_counts_what_the_window_keeps(
        hits in prop::collection::vec((0u64..5_000, 1u64..4), 0..40),
        latest in 0u64..5_000,
        now in 0u64..6_000,
    ) {
        let l = SlidingLog::reference(5_000, Duration::from_millis(1_000)).expect("valid");
        let state = SlidingLogState {
            hits: hits
                .iter()
                .map(|&(at, cost)| Hit { at: Duration::from_millis(at), cost })
                .collect(),
            latest: Duration::from_millis(latest),
        };
        let now = Duration::from_millis(now);
        let (kept, _) = l.pruned(Some(state.clone()), now);
        let expected: u64 = kept.hits.iter().map(|h| h.cost).sum();
        prop_assert_eq!(l.in_window(&state, now), expected);
    }


    /// Monotone time: exact (same decisions as a naive log), never above
    /// the limit in a window, exact retries and remaining.
    #[test]
    fn exact_and_never_above_the_limit(
        (l, steps) in params().prop_flat_map(|l| (Just(l), steps(l.per.window_ns, l.per.limit, false)))
    ) {
        check_bound(&l, &simulate(&l, &steps)?)?;
    }

    /// Time going backwards: decided at the high-water mark, exact and
    /// within the limit over those effective times.
    #[test]
    fn backwards_time_keeps_the_bound(
        (l, steps) in params().prop_flat_map(|l| (Just(l), steps(l.per.window_ns, l.per.limit, true)))
    ) {
        check_bound(&l, &simulate(&l, &steps)?)?;
    }

    /// After the TTL an absent key decides exactly as the stored state.
    #[test]
    fn expired_state_equals_absent(
        (l, steps) in params().prop_flat_map(|l| (Just(l), steps(l.per.window_ns, l.per.limit, true))),
        later in 0u64..30_000,
        cost in 0u64..=20,
    ) {
        crate::limiter::testing::expired_equals_absent(&l, &steps, ns(later), cost)?;
    }

    /// Extreme parameters (limits to the maximum, windows from 1 ns to
    /// 584 years, costs to u64::MAX): the laws hold.
    #[test]
    fn extreme_parameters_keep_the_laws(
        limit in prop_oneof![Just(0u64), Just(1u64), Just(MAX_LOG_LIMIT), 0..=MAX_LOG_LIMIT],
        window_ns in prop_oneof![Just(1u64), Just(u64::MAX), any::<u64>()],
        moves in prop::collection::vec(
            (0u64..(1 << 62), prop_oneof![Just(0u64), Just(1u64), Just(u64::MAX), any::<u64>()]),
            1..20,
        ),
    ) {
        let l = log(limit, ns(window_ns.max(1)));
        let mut now = 0u128;
        let mut steps = Vec::with_capacity(moves.len());
        for (dt, raw) in moves {
            now += u128::from(dt);
            // Half the costs within the limit, half anything.
            let cost = if raw % 2 == 0 { raw % (limit + 1) } else { raw };
            steps.push((from_nanos(now), cost));
        }
        check_bound(&l, &simulate(&l, &steps)?)?;
    }

    /// Any state, any time, any cost: never panics, denials always wait.
    #[test]
    fn arbitrary_inputs_never_panic(
        limit in 0..=MAX_LOG_LIMIT,
        window_ns in 1u64..,
        hits in prop::collection::vec(((any::<u64>(), 0u32..1_000_000_000), any::<u64>()), 0..8),
        latest in (any::<u64>(), 0u32..1_000_000_000),
        now in (any::<u64>(), 0u32..1_000_000_000),
        cost in any::<u64>(),
    ) {
        let l = log(limit, ns(window_ns));
        let state = SlidingLogState {
            hits: hits
                .into_iter()
                .map(|((secs, nanos), cost)| Hit { at: Duration::new(secs, nanos), cost })
                .collect(),
            latest: Duration::new(latest.0, latest.1),
        };
        let now = Duration::new(now.0, now.1);
        let (d, s) = l.decide(Some(state), cost, now);
        if let Some(retry) = d.retry_after() {
            prop_assert!(retry > Duration::ZERO);
        }
        let _ = l.expires_after(&s, now);
    }
}
