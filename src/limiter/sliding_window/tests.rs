use super::*;
use proptest::prelude::*;

const NS: Duration = Duration::from_nanos(1);
const MAX_WINDOW: Duration = Duration::from_nanos(u64::MAX);

fn counter(limit: u64, window: Duration) -> SlidingWindowCounter {
    SlidingWindowCounter::new(limit, window).expect("valid test parameters")
}

fn ns(n: u64) -> Duration {
    Duration::from_nanos(n)
}

/// One admitted cost at its effective time, with the `previous` of its
/// window.
#[derive(Debug, Clone, Copy)]
struct Admitted {
    at: u128,
    cost: u64,
    previous: u64,
}

/// Deny ⇒ retry_after > 0, admitted exactly then and not 1 ns before;
/// Allow ⇒ `remaining` is exact; reset_after is the new state's TTL.
fn check_answers(
    c: &SlidingWindowCounter,
    now: Duration,
    cost: u64,
    before: Option<SlidingWindowState>,
    d: Decision,
    after: SlidingWindowState,
) -> Result<(), TestCaseError> {
    match d {
        Decision::Deny { retry_after, .. } => {
            prop_assert!(retry_after > Duration::ZERO);
            let at = now + retry_after;
            prop_assert!(c.decide(before, cost, at).0.is_allowed(), "retry at {at:?}");
            prop_assert!(!c.decide(before, cost, at - NS).0.is_allowed());
        }
        Decision::Allow { remaining, .. } => {
            prop_assert!(c.decide(Some(after), remaining, now).0.is_allowed());
            if remaining < c.per.limit {
                prop_assert!(!c.decide(Some(after), remaining + 1, now).0.is_allowed());
            }
        }
        Decision::ExceedsCapacity { capacity, .. } => {
            prop_assert!(cost > capacity);
            prop_assert_eq!(capacity, c.per.limit);
        }
    }
    prop_assert_eq!(d.reset_after(), c.expires_after(&after, now));
    prop_assert!(after.current <= c.per.limit && after.previous <= c.per.limit);
    if let Some(before) = before {
        prop_assert!(after.window_start >= before.window_start);
    }
    Ok(())
}

/// Decides `steps` in order from a fresh key, checking every answer;
/// returns what was admitted.
fn simulate(
    c: &SlidingWindowCounter,
    steps: &[(Duration, u64)],
) -> Result<Vec<Admitted>, TestCaseError> {
    let mut state = None;
    let mut admitted = Vec::new();
    for &(now, cost) in steps {
        let (d, s) = c.decide(state, cost, now);
        check_answers(c, now, cost, state, d, s)?;
        if d.is_allowed() && cost > 0 {
            admitted.push(Admitted {
                // The effective time: clamped to the state's window.
                at: now.as_nanos().max(s.window_start.as_nanos()),
                cost,
                previous: s.previous,
            });
        }
        state = Some(s);
    }
    Ok(admitted)
}

/// For every interval of one window length ending at an admission `t`:
/// admitted ≤ limit + ⌊previous × elapsed / window⌋ ≤ 2 × limit − 1.
fn check_bound(c: &SlidingWindowCounter, admitted: &[Admitted]) -> Result<(), TestCaseError> {
    let w = u128::from(c.per.window_ns);
    let limit = u128::from(c.per.limit);
    for end in admitted {
        let t = end.at;
        let total: u128 = admitted
            .iter()
            .filter(|a| a.at <= t && a.at + w > t)
            .map(|a| u128::from(a.cost))
            .sum();
        let sharp = limit + u128::from(end.previous) * (t % w) / w;
        prop_assert!(
            total <= sharp,
            "{total} admitted in ({}, {t}] with {c:?}",
            t + 1 - w
        );
        prop_assert!(total < 2 * limit);
    }
    Ok(())
}

#[test]
fn estimate_weighs_the_previous_window() {
    let c = counter(10, Duration::from_secs(60));
    let t0 = Duration::from_secs(1_700_000_040); // a multiple of 60 s
    let mut state = None;
    for _ in 0..8 {
        state = Some(c.decide(state, 1, t0 + Duration::from_secs(30)).1);
    }
    // 15 s into the next window: estimate 8 × 0.75 = 6.
    let now = t0 + Duration::from_secs(75);
    let (d, s) = c.decide(state, 4, now);
    assert_eq!(
        d,
        Decision::Allow {
            remaining: 0,
            reset_after: Duration::from_secs(105),
        }
    );
    assert_eq!(
        s,
        SlidingWindowState {
            window_start: t0 + Duration::from_secs(60),
            current: 4,
            previous: 8,
        }
    );
    // 6 + 4 + 1 > 10 until the previous weight drops by 1: 8 × (1 − x) ≤ 5,
    // x ≥ 3/8, 22.5 s into the window.
    let (d, _) = c.decide(Some(s), 1, now);
    assert_eq!(
        d,
        Decision::Deny {
            retry_after: Duration::from_millis(7_500),
            reset_after: Duration::from_secs(105),
        }
    );
}

/// The worst case of the bound: 2 × limit − 1 in one window length.
#[test]
fn worst_case_is_twice_the_limit_less_one() {
    let c = counter(10, ns(100));
    let (d, mut state) = c.decide(None, 10, ns(99));
    assert!(d.is_allowed());
    let mut admitted = 10;
    for t in 100..=198 {
        let (d, s) = c.decide(Some(state), 1, ns(t));
        if d.is_allowed() {
            admitted += 1;
        }
        state = s;
    }
    assert_eq!(admitted, 19, "within [99, 198], 100 ns");
}

/// The other direction: traffic that left the interval still weighs.
#[test]
fn under_admits_after_early_previous_traffic() {
    let c = counter(10, ns(100));
    let (_, s) = c.decide(None, 10, ns(100));
    // At 200 the exact log's interval (100, 200] is empty, but the
    // estimate is 10: nothing until the weight decays.
    let (d, _) = c.decide(Some(s), 1, ns(200));
    assert_eq!(d.retry_after(), Some(ns(10)));
    let (d, _) = c.decide(Some(s), 10, ns(200));
    assert_eq!(d.retry_after(), Some(ns(100)));
}

#[test]
fn windows_roll_and_expire() {
    let c = counter(5, ns(10));
    let (_, s) = c.decide(None, 2, ns(13));
    assert_eq!((s.window_start, s.current, s.previous), (ns(10), 2, 0));
    assert_eq!(c.expires_after(&s, ns(13)), ns(17));
    let (_, s) = c.decide(Some(s), 0, ns(25));
    assert_eq!((s.window_start, s.current, s.previous), (ns(20), 0, 2));
    assert_eq!(c.expires_after(&s, ns(25)), ns(5));
    let (_, s) = c.decide(Some(s), 0, ns(30));
    assert_eq!((s.window_start, s.current, s.previous), (ns(30), 0, 0));
    assert_eq!(c.expires_after(&s, ns(30)), Duration::ZERO);
    let (_, s) = c.decide(Some(SlidingWindowState { current: 3, ..s }), 1, ns(55));
    assert_eq!((s.window_start, s.current, s.previous), (ns(50), 1, 0));
}

#[test]
fn backwards_time_is_clamped_to_the_window_start() {
    let c = counter(4, ns(10));
    let (_, s) = c.decide(None, 4, ns(15));
    let (_, s) = c.decide(Some(s), 0, ns(21));
    // Back to 5 ns: read at 20 ns, where the previous 4 weigh fully.
    let (d, s2) = c.decide(Some(s), 1, ns(5));
    assert_eq!(d.retry_after(), Some(ns(15 + 3)), "fits at 23 ns");
    assert_eq!(s2.window_start, ns(20));
    // Inside the window no clamp is needed: 23 ns fits, 22 ns does not.
    assert!(c.decide(Some(s), 1, ns(23)).0.is_allowed());
    assert!(!c.decide(Some(s), 1, ns(22)).0.is_allowed());
}

#[test]
fn cost_above_the_limit_and_zero_limit() {
    let c = counter(3, Duration::from_secs(1));
    let (d, _) = c.decide(None, 4, Duration::from_secs(1));
    assert_eq!(
        d,
        Decision::ExceedsCapacity {
            capacity: 3,
            reset_after: Duration::ZERO,
        }
    );
    let closed = counter(0, Duration::from_secs(1));
    assert!(!closed
        .decide(None, 1, Duration::from_secs(1))
        .0
        .is_allowed());
    assert_eq!(
        closed.decide(None, 0, Duration::from_secs(1)).0.remaining(),
        0
    );
    assert_eq!(
        (c.rate().limit(), c.rate().window()),
        (3, Duration::from_secs(1))
    );
}

#[test]
fn invalid_windows_are_rejected() {
    assert_eq!(
        SlidingWindowCounter::new(1, Duration::ZERO),
        Err(InvalidLimit::ZeroWindow)
    );
    assert!(SlidingWindowCounter::new(1, Duration::MAX).is_err());
    assert!(SlidingWindowCounter::new(u64::MAX, MAX_WINDOW).is_ok());
}

#[test]
fn extremes_do_not_overflow() {
    let century = Duration::from_secs(100 * 365 * 86_400);
    let times = [Duration::ZERO, NS, century, MAX_WINDOW, Duration::MAX];
    let counts = [0, 1, u64::MAX / 2, u64::MAX];
    for c in [
        counter(u64::MAX, NS),
        counter(u64::MAX, MAX_WINDOW),
        counter(1, NS),
        counter(1, century),
        counter(0, MAX_WINDOW),
    ] {
        for now in times {
            for window_start in times {
                for current in counts {
                    for previous in counts {
                        let state = SlidingWindowState {
                            window_start,
                            current,
                            previous,
                        };
                        for cost in counts {
                            let (d, s) = c.decide(Some(state), cost, now);
                            if let Some(retry) = d.retry_after() {
                                assert!(retry > Duration::ZERO);
                            }
                            let _ = c.expires_after(&s, now);
                            let _ = c.expires_after(&state, now);
                        }
                    }
                }
            }
        }
    }
    let (d, s) = counter(u64::MAX, NS).decide(None, u64::MAX, Duration::MAX);
    assert!(d.is_allowed());
    assert_eq!(s.current, u64::MAX);
}

/// (time, cost) sequences: time moves by a signed fraction of the window
/// (permille, plus a few ns of jitter), costs a little above the limit.
fn steps(
    window_ns: u64,
    limit: u64,
    backwards: bool,
) -> impl Strategy<Value = Vec<(Duration, u64)>> {
    crate::limiter::testing::arrivals(window_ns, limit, backwards, 2000)
}

fn params() -> impl Strategy<Value = SlidingWindowCounter> {
    (0u64..=20, prop_oneof![1u64..=10, 1u64..=10_000]).prop_map(|(limit, w)| counter(limit, ns(w)))
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(500))]

    /// Monotone time: the stated bound, exact retries, exact remaining.
    #[test]
    fn never_exceeds_the_stated_bound(
        (c, steps) in params().prop_flat_map(|c| (Just(c), steps(c.per.window_ns, c.per.limit, false)))
    ) {
        check_bound(&c, &simulate(&c, &steps)?)?;
    }

    /// Time going backwards: clamped, and the bound holds over the
    /// effective times.
    #[test]
    fn backwards_time_keeps_the_bound(
        (c, steps) in params().prop_flat_map(|c| (Just(c), steps(c.per.window_ns, c.per.limit, true)))
    ) {
        check_bound(&c, &simulate(&c, &steps)?)?;
    }

    /// After the TTL an absent key decides exactly as the stored state.
    #[test]
    fn expired_state_equals_absent(
        (c, steps) in params().prop_flat_map(|c| (Just(c), steps(c.per.window_ns, c.per.limit, true))),
        later in 0u64..30_000,
        cost in 0u64..=20,
    ) {
        crate::limiter::testing::expired_equals_absent(&c, &steps, ns(later), cost)?;
    }

    /// Extreme parameters (limits to u64::MAX, windows from 1 ns to
    /// 584 years, costs to u64::MAX): the laws hold.
    #[test]
    fn extreme_parameters_keep_the_laws(
        limit in prop_oneof![Just(0u64), Just(1u64), Just(u64::MAX), any::<u64>()],
        window_ns in prop_oneof![Just(1u64), Just(u64::MAX), any::<u64>()],
        moves in prop::collection::vec(
            (0u64..(1 << 62), prop_oneof![Just(0u64), Just(1u64), Just(u64::MAX), any::<u64>()]),
            1..20,
        ),
    ) {
        let c = counter(limit, ns(window_ns.max(1)));
        let mut now = 0u128;
        let mut steps = Vec::with_capacity(moves.len());
        for (dt, raw) in moves {
            now += u128::from(dt);
            // Half the costs within the limit, half anything.
            let cost = if raw % 2 == 0 { raw % limit.saturating_add(1) } else { raw };
            steps.push((from_nanos(now), cost));
        }
        check_bound(&c, &simulate(&c, &steps)?)?;
    }

    /// Any state, any time, any cost: never panics, denials always wait.
    #[test]
    fn arbitrary_inputs_never_panic(
        limit in any::<u64>(),
        window_ns in 1u64..,
        start in (any::<u64>(), 0u32..1_000_000_000),
        current in any::<u64>(),
        previous in any::<u64>(),
        now in (any::<u64>(), 0u32..1_000_000_000),
        cost in any::<u64>(),
    ) {
        let c = counter(limit, ns(window_ns));
        let state = SlidingWindowState {
            window_start: Duration::new(start.0, start.1),
            current,
            previous,
        };
        let now = Duration::new(now.0, now.1);
        let (d, s) = c.decide(Some(state), cost, now);
        if let Some(retry) = d.retry_after() {
            prop_assert!(retry > Duration::ZERO);
        }
        let _ = c.expires_after(&s, now);
    }
}
