use super::*;
use proptest::prelude::*;

const NS: Duration = Duration::from_nanos(1);
const YEAR: u64 = 365 * 86_400;

fn gcra(limit: u64, period: Duration, burst: u64) -> Gcra {
    Gcra::with_burst(limit, period, burst).expect("valid test parameters")
}

/// Decides `steps` of (time, cost) in order from a fresh key, checking
/// every answer; returns the admitted (time in ns, cost) pairs.
fn simulate(g: &Gcra, steps: &[(Duration, u64)]) -> Result<Vec<(u128, u64)>, TestCaseError> {
    let mut state = None;
    let mut admitted = Vec::new();
    for &(now, cost) in steps {
        let (d, s) = g.decide(state, cost, now);
        check_answers(g, now, cost, state, d, s)?;
        if d.is_allowed() {
            admitted.push((now.as_nanos(), cost));
        }
        state = Some(s);
    }
    Ok(admitted)
}

/// The bound: in any interval [a, b], admitted cost ≤ burst + (b − a) × limit / period,
/// checked on every interval whose ends are admission times, in the
/// form `C − burst ≤ ⌊(b − a) × limit / period⌋` (valid for b − a < 2⁶⁴ ns).
fn check_bound(g: &Gcra, admitted: &[(u128, u64)]) -> Result<(), TestCaseError> {
    let mut sorted = admitted.to_vec();
    sorted.sort_unstable();
    for (i, &(a, _)) in sorted.iter().enumerate() {
        let mut total: u128 = 0;
        for &(b, cost) in &sorted[i..] {
            total += u128::from(cost);
            let allowance = (b - a) * u128::from(g.rate.limit) / u128::from(g.rate.window_ns);
            prop_assert!(
                total <= u128::from(g.burst) + allowance,
                "{total} admitted in [{a}, {b}] with {g:?}"
            );
        }
    }
    Ok(())
}

/// Deny ⇒ retry_after > 0, admitted exactly then and not 1 ns before;
/// Allow ⇒ `remaining` is exact.
fn check_answers(
    g: &Gcra,
    now: Duration,
    cost: u64,
    before: Option<GcraState>,
    d: Decision,
    after: GcraState,
) -> Result<(), TestCaseError> {
    match d {
        Decision::Deny { retry_after, .. } => {
            prop_assert!(retry_after > Duration::ZERO);
            prop_assert_eq!(after, before.unwrap_or(GcraState { tat: now }));
            let at = now + retry_after;
            prop_assert!(g.decide(before, cost, at).0.is_allowed(), "retry at {at:?}");
            prop_assert!(!g.decide(before, cost, at - NS).0.is_allowed());
        }
        Decision::Allow { remaining, .. } => {
            prop_assert!(g.decide(Some(after), remaining, now).0.is_allowed());
            if remaining < g.burst {
                prop_assert!(!g.decide(Some(after), remaining + 1, now).0.is_allowed());
            }
        }
        Decision::ExceedsCapacity { capacity, .. } => {
            prop_assert!(cost > capacity);
            prop_assert_eq!(capacity, g.burst);
        }
    }
    prop_assert_eq!(d.reset_after(), g.expires_after(&after, now));
    Ok(())
}

#[test]
fn burst_then_rate() {
    // 10 per second, burst 5: 5 at once, then one per 100 ms.
    let g = gcra(10, Duration::from_secs(1), 5);
    let t0 = Duration::from_secs(1_700_000_000);
    let mut state = None;
    for i in 0..5 {
        let (d, s) = g.decide(state, 1, t0);
        assert_eq!(
            d,
            Decision::Allow {
                remaining: 4 - i,
                reset_after: Duration::from_millis(100 * (i + 1)),
            }
        );
        state = Some(s);
    }
    let (d, _) = g.decide(state, 1, t0);
    assert_eq!(
        d,
        Decision::Deny {
            retry_after: Duration::from_millis(100),
            reset_after: Duration::from_millis(500),
        }
    );
    let (d, _) = g.decide(state, 2, t0 + Duration::from_millis(150));
    assert_eq!(
        d,
        Decision::Deny {
            retry_after: Duration::from_millis(50),
            reset_after: Duration::from_millis(350),
        }
    );
    let (d, s) = g.decide(state, 2, t0 + Duration::from_millis(200));
    assert_eq!(
        d,
        Decision::Allow {
            remaining: 0,
            reset_after: Duration::from_millis(500),
        }
    );
    assert_eq!(s.tat, t0 + Duration::from_millis(700));
    // A full refill later the key is as good as absent.
    assert_eq!(
        g.expires_after(&s, t0 + Duration::from_millis(200)),
        Duration::from_millis(500)
    );
    assert_eq!(
        g.expires_after(&s, t0 + Duration::from_secs(9)),
        Duration::ZERO
    );
}

#[test]
fn default_burst_is_the_limit() {
    let g = Gcra::new(3, Duration::from_secs(60)).expect("valid");
    assert_eq!(
        (g.rate().limit(), g.burst(), g.rate().window()),
        (3, 3, Duration::from_secs(60))
    );
    let (d, _) = g.decide(None, 3, Duration::ZERO);
    assert_eq!(
        d,
        Decision::Allow {
            remaining: 0,
            reset_after: Duration::from_secs(60),
        }
    );
}

#[test]
fn cost_above_burst_is_never_admittable() {
    let g = gcra(10, Duration::from_secs(1), 5);
    let now = Duration::from_secs(100);
    for cost in [6, 1_000, u64::MAX] {
        let (d, s) = g.decide(None, cost, now);
        assert_eq!(
            d,
            Decision::ExceedsCapacity {
                capacity: 5,
                reset_after: Duration::ZERO,
            }
        );
        assert_eq!(s, GcraState { tat: now });
    }
}

#[test]
fn cost_zero_asks_without_taking() {
    let g = gcra(2, Duration::from_secs(1), 2);
    let now = Duration::from_secs(5);
    let (_, s) = g.decide(None, 1, now);
    let (d, s2) = g.decide(Some(s), 0, now);
    assert_eq!(
        d,
        Decision::Allow {
            remaining: 1,
            reset_after: Duration::from_millis(500),
        }
    );
    assert_eq!(s, s2);
}

#[test]
fn zero_limit_is_closed() {
    let g = Gcra::new(0, Duration::from_secs(1)).expect("a closed limit is valid");
    let now = Duration::from_secs(1);
    assert_eq!(
        g.decide(None, 1, now).0,
        Decision::ExceedsCapacity {
            capacity: 0,
            reset_after: Duration::ZERO,
        }
    );
    assert_eq!(
        g.decide(None, 0, now).0,
        Decision::Allow {
            remaining: 0,
            reset_after: Duration::ZERO,
        }
    );
}

#[test]
fn invalid_parameters_are_rejected() {
    assert_eq!(Gcra::new(1, Duration::ZERO), Err(InvalidLimit::ZeroWindow));
    assert!(matches!(
        Gcra::new(1, Duration::MAX),
        Err(InvalidLimit::WindowTooLong { .. })
    ));
    assert_eq!(
        Gcra::with_burst(0, Duration::from_secs(1), 1),
        Err(InvalidLimit::BurstWithoutRate { burst: 1 })
    );
    // 1 per century with a burst of 6 takes 600 years to refill.
    let century = Duration::from_secs(100 * YEAR);
    assert!(Gcra::with_burst(1, century, 5).is_ok());
    assert!(matches!(
        Gcra::with_burst(1, century, 6),
        Err(InvalidLimit::RefillTooLong { .. })
    ));
    assert!(Gcra::with_burst(u64::MAX, NS, u64::MAX).is_ok());
}

/// `T = 1 s / 3` is not whole nanoseconds. Rounding each TAT up costs
/// 2/3 ns per request (7.2 µs over the hour), which ms-spaced attempts
/// never see: the count is the exact bucket's, 3 at once and then one per
/// T, the 10,799th refill landing before 3,610 s.
#[test]
fn fractional_emission_interval_matches_the_exact_bucket() {
    let g = gcra(3, Duration::from_secs(1), 3);
    let mut state = None;
    let mut admitted = 0;
    let mut now = Duration::from_secs(10);
    while now < Duration::from_secs(10 + 3_600) {
        let (d, s) = g.decide(state, 1, now);
        if d.is_allowed() {
            admitted += 1;
        }
        state = Some(s);
        now += Duration::from_millis(1);
    }
    assert_eq!(admitted, 3 + 10_799);
}

#[test]
fn extremes_do_not_overflow() {
    let century = Duration::from_secs(100 * YEAR);
    let cases = [
        gcra(u64::MAX, NS, u64::MAX),
        gcra(u64::MAX, MAX_WINDOW, u64::MAX),
        gcra(1, NS, u64::MAX),
        gcra(1, century, 1),
        gcra(1, MAX_WINDOW, 1),
        gcra(u64::MAX, NS, 1),
    ];
    let times = [
        Duration::ZERO,
        NS,
        Duration::from_secs(1 << 40),
        MAX_WINDOW,
        Duration::MAX,
    ];
    for g in cases {
        for now in times {
            for tat in times {
                for cost in [0, 1, g.burst / 2, g.burst, u64::MAX] {
                    let (d, s) = g.decide(Some(GcraState { tat }), cost, now);
                    if let Some(retry) = d.retry_after() {
                        assert!(retry > Duration::ZERO);
                    }
                    let _ = g.expires_after(&s, now);
                    let _ = g.decide(None, cost, now);
                }
            }
        }
    }
    // At the end of representable time the TAT saturates.
    let (d, s) = gcra(1, Duration::from_secs(1), 1).decide(None, 1, Duration::MAX);
    assert!(d.is_allowed());
    assert_eq!(s.tat, Duration::MAX);
}

#[test]
fn a_century_period() {
    let century = Duration::from_secs(100 * YEAR);
    let g = gcra(4, century, 4);
    let now = Duration::from_secs(1_700_000_000);
    let (d, s) = g.decide(None, 4, now);
    assert_eq!(
        d,
        Decision::Allow {
            remaining: 0,
            reset_after: century,
        }
    );
    let (d, _) = g.decide(Some(s), 1, now);
    assert_eq!(d.retry_after(), Some(century / 4));
}

/// A (time, cost) sequence: time moves by a signed fraction of the period
/// (permille, so many steps fall inside one emission interval), costs
/// range a little above the burst.
fn steps(
    period_ns: u64,
    burst: u64,
    backwards: bool,
) -> impl Strategy<Value = Vec<(Duration, u64)>> {
    crate::limiter::testing::arrivals(period_ns, burst, backwards, 2000)
}

fn params() -> impl Strategy<Value = Gcra> {
    (1u64..=20, prop_oneof![1u64..=10, 1u64..=10_000])
        .prop_flat_map(|(limit, period_ns)| (Just(limit), Just(period_ns), 0..=3 * limit))
        .prop_map(|(limit, period_ns, burst)| gcra(limit, Duration::from_nanos(period_ns), burst))
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(500))]

    /// Monotone time: the interval bound, exact retries, exact remaining.
    #[test]
    fn never_exceeds_burst_plus_rate(
        (g, steps) in params().prop_flat_map(|g| (Just(g), steps(g.rate.window_ns, g.burst, false)))
    ) {
        check_bound(&g, &simulate(&g, &steps)?)?;
    }

    /// Time going backwards: no clamp needed, the same bound holds over
    /// the given times, and retries stay exact.
    #[test]
    fn backwards_time_keeps_the_bound(
        (g, steps) in params().prop_flat_map(|g| (Just(g), steps(g.rate.window_ns, g.burst, true)))
    ) {
        check_bound(&g, &simulate(&g, &steps)?)?;
    }

    /// With a whole-nanosecond T there is no rounding, and GCRA decides
    /// exactly as a token bucket of capacity `burst` refilled lazily at
    /// one token per T.
    #[test]
    fn equals_a_token_bucket(
        limit in 1u64..=20,
        t in 1u64..=1_000,
        burst_factor in 0u64..=3,
        moves in prop::collection::vec((0u64..=3_000, 0u64..=8), 1..80),
    ) {
        let burst = burst_factor * limit;
        let g = gcra(limit, Duration::from_nanos(limit * t), burst);
        // Credit in nanoseconds of emission time: tokens × T.
        let capacity = u128::from(burst) * u128::from(t);
        let mut credit = capacity;
        let mut last = 0u128;
        let mut now = 1u128 << 50;
        let mut state = None;
        for (dt, cost) in moves {
            now += u128::from(dt);
            credit = (credit + (now - last)).min(capacity);
            last = now;
            let need = u128::from(cost) * u128::from(t);
            let bucket_admits = cost <= burst && need <= credit;
            if bucket_admits {
                credit -= need;
            }
            let (d, s) = g.decide(state, cost, from_nanos(now));
            prop_assert_eq!(d.is_allowed(), bucket_admits);
            if bucket_admits {
                prop_assert_eq!(u128::from(d.remaining()), credit / u128::from(t));
            }
            state = Some(s);
        }
    }

    /// After the TTL an absent key decides exactly as the stored state.
    #[test]
    fn expired_state_equals_absent(
        (g, steps) in params().prop_flat_map(|g| (Just(g), steps(g.rate.window_ns, g.burst, true))),
        later in 0u64..1_000,
        cost in 0u64..=20,
    ) {
        crate::limiter::testing::expired_equals_absent(&g, &steps, Duration::from_nanos(later), cost)?;
        let state = crate::limiter::testing::replay(&g, &steps).expect("at least one step");
        let now = steps[steps.len() - 1].0;
        let at = now + g.expires_after(&state, now) + Duration::from_nanos(later);
        let (stored, stored_next) = g.decide(Some(state), cost, at);
        let (absent, absent_next) = g.decide(None, cost, at);
        prop_assert_eq!(stored, absent);
        // The same state, or (nothing taken) two states both equivalent to absent.
        prop_assert_eq!(g.expires_after(&stored_next, at), g.expires_after(&absent_next, at));
        if stored.is_allowed() && cost > 0 {
            prop_assert_eq!(stored_next, absent_next);
        }
    }

    /// Extreme parameters (limits to u64::MAX, periods from 1 ns to
    /// 584 years, costs to u64::MAX): no panic, and the laws hold for
    /// times in the first 2⁶³ ns.
    #[test]
    fn extreme_parameters_keep_the_laws(
        limit in prop_oneof![Just(1u64), Just(u64::MAX), any::<u64>()],
        period_ns in prop_oneof![Just(1u64), Just(u64::MAX), any::<u64>()],
        burst in prop_oneof![Just(0u64), Just(1u64), Just(u64::MAX), any::<u64>()],
        moves in prop::collection::vec(
            (0u64..(1 << 56), prop_oneof![Just(0u64), Just(1u64), Just(u64::MAX), any::<u64>()]),
            1..20,
        ),
    ) {
        let g = match Gcra::with_burst(limit, Duration::from_nanos(period_ns), burst) {
            Ok(g) => g,
            Err(e) => {
                prop_assert!(matches!(e, InvalidLimit::RefillTooLong { .. }), "{e}");
                return Ok(());
            }
        };
        let mut now = 0u128;
        let mut state = None;
        let mut admitted = Vec::new();
        for (dt, raw) in moves {
            now += u128::from(dt);
            let at = from_nanos(now);
            // Half the costs within the burst, half anything.
            let cost = if raw % 2 == 0 { raw % g.burst.saturating_add(1) } else { raw };
            let (d, s) = g.decide(state, cost, at);
            check_answers(&g, at, cost, state, d, s)?;
            if d.is_allowed() {
                admitted.push((now, cost));
            }
            state = Some(s);
        }
        check_bound(&g, &admitted)?;
    }

    /// Any state, any time, any cost: never panics, denials always wait.
    #[test]
    fn arbitrary_inputs_never_panic(
        limit in any::<u64>(),
        period_ns in any::<u64>(),
        burst in any::<u64>(),
        tat in (any::<u64>(), 0u32..1_000_000_000),
        now in (any::<u64>(), 0u32..1_000_000_000),
        cost in any::<u64>(),
    ) {
        if let Ok(g) = Gcra::with_burst(limit, Duration::from_nanos(period_ns), burst) {
            let state = GcraState { tat: Duration::new(tat.0, tat.1) };
            let now = Duration::new(now.0, now.1);
            let (d, s) = g.decide(Some(state), cost, now);
            if let Some(retry) = d.retry_after() {
                prop_assert!(retry > Duration::ZERO);
            }
            let _ = g.expires_after(&s, now);
        }
    }
}
