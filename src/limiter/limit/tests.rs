use super::*;

const S: Duration = Duration::from_secs(1);

#[test]
fn a_scaled_limit_keeps_the_algorithm_and_period() {
    let minute = Duration::from_secs(60);
    for a in AlgorithmName::ALL {
        let l = Limiter::new(a, 60, minute, None).expect("valid");
        let s = l.scaled_to(6).expect("valid");
        assert_eq!((s.name(), s.limit(), s.period()), (a, 6, minute));
    }
    // A token bucket's burst scales with its rate, at least 1.
    let b = Limiter::new(AlgorithmName::TokenBucket, 10, S, Some(40)).expect("valid");
    assert_eq!(b.scaled_to(5).expect("valid").capacity(), 20);
    let b = Limiter::new(AlgorithmName::TokenBucket, 100, S, Some(3)).expect("valid");
    assert_eq!(b.scaled_to(1).expect("valid").capacity(), 1);
}

#[test]
fn sub_buckets_add_up_to_the_limit_exactly() {
    let minute = Duration::from_secs(60);
    for a in AlgorithmName::ALL {
        for (limit, k) in [(100, 8), (7, 7), (1000, 64), (65, 64)] {
            let l = Limiter::new(a, limit, minute, None).expect("valid");
            let subs: Vec<Limiter> = (0..k).map(|i| l.sub_bucket(i, k).expect("valid")).collect();
            assert_eq!(
                subs.iter().map(Limiter::limit).sum::<u64>(),
                limit,
                "{a} {limit}/{k}"
            );
            assert!(subs.iter().all(|s| s.name() == a && s.period() == minute));
            let (lo, hi) = (limit / k, limit.div_ceil(k));
            assert!(subs.iter().all(|s| (lo..=hi).contains(&s.limit())));
        }
        let l = Limiter::new(a, 3, minute, None).expect("valid");
        assert!(l.sub_bucket(3, 4).is_err(), "a sub-bucket with nothing");
    }
    let b = Limiter::new(AlgorithmName::TokenBucket, 100, S, Some(30)).expect("valid");
    let bursts: u64 = (0..8)
        .map(|i| b.sub_bucket(i, 8).expect("valid").capacity())
        .sum();
    assert_eq!(bursts, 30, "the burst splits the same way");
}

proptest::proptest! {
    /// Any split adds up to the limit (and a bucket's burst) exactly,
    /// with every sub-bucket within one of an even share.
    #[test]
    fn any_split_adds_up(limit in 1u64..100_000, burst in 1u64..100_000, k in 2u64..=64) {
        let minute = Duration::from_secs(60);
        let l = Limiter::new(AlgorithmName::TokenBucket, limit, minute, Some(burst)).expect("valid");
        let subs: Result<Vec<Limiter>, _> = (0..k).map(|i| l.sub_bucket(i, k)).collect();
        match subs {
            Ok(subs) => {
                proptest::prop_assert!(k <= limit && k <= burst);
                proptest::prop_assert_eq!(subs.iter().map(Limiter::limit).sum::<u64>(), limit);
                proptest::prop_assert_eq!(subs.iter().map(Limiter::capacity).sum::<u64>(), burst);
                for s in &subs {
                    proptest::prop_assert!(s.limit() == limit / k || s.limit() == limit / k + 1);
                }
            }
            Err(_) => proptest::prop_assert!(k > limit || k > burst),
        }
    }
}

#[test]
fn a_refund_undoes_what_it_took_while_that_still_counts() {
    let w = Duration::from_secs(10);
    for a in AlgorithmName::ALL {
        let l = Limiter::new(a, 10, w, None).expect("valid");
        let t0 = Duration::from_secs(100);
        let (d, s) = l.decide(None, 6, t0);
        assert!(d.is_allowed());
        // Given back within the window: the key admits as if never taken.
        let back = l.refund(s.clone(), 6, t0, t0 + S);
        assert!(l.decide(Some(back), 10, t0 + S).0.is_allowed(), "{a}");
        // Half given back: only that half is free again.
        let half = l.refund(s.clone(), 3, t0, t0);
        assert!(l.decide(Some(half.clone()), 7, t0).0.is_allowed(), "{a}");
        assert!(!l.decide(Some(half), 8, t0).0.is_allowed(), "{a}");
    }
    // A fixed window that has ended is not given anything.
    let fw = Limiter::new(AlgorithmName::FixedWindow, 10, w, None).expect("valid");
    let (_, s) = fw.decide(None, 10, Duration::from_secs(105));
    let (_, later) = fw.decide(Some(s), 10, Duration::from_secs(112));
    let after = fw.refund(
        later.clone(),
        10,
        Duration::from_secs(105),
        Duration::from_secs(112),
    );
    assert_eq!(after, later, "the next window's count is untouched");
    // A token bucket never goes above full.
    let tb = Limiter::new(AlgorithmName::TokenBucket, 10, w, None).expect("valid");
    let (_, s) = tb.decide(None, 1, Duration::from_secs(100));
    let over = tb.refund(s, 50, Duration::from_secs(100), Duration::from_secs(100));
    assert!(!tb
        .decide(Some(over), 11, Duration::from_secs(100))
        .0
        .is_allowed());
}

#[test]
fn a_give_back_lowers_what_counts_now_and_never_below_nothing() {
    let w = Duration::from_secs(10);
    let t = Duration::from_secs(100);
    for a in AlgorithmName::ALL {
        let l = Limiter::new(a, 10, w, None).expect("valid");
        // 14 hits each given back: never refused.
        let mut state = None;
        for i in 0..14u32 {
            let now = t + Duration::from_millis(u64::from(i) * 100);
            let (d, s) = l.decide(state, 1, now);
            assert!(d.is_allowed(), "{a}: request {i}");
            state = Some(l.give_back(s, 1, now));
        }
        // More given back than taken: the key is as good as empty.
        let (_, s) = l.decide(state, 4, t + S);
        let s = l.give_back(s, 50, t + S);
        assert!(l.decide(Some(s.clone()), 10, t + S).0.is_allowed(), "{a}");
        assert!(!l.decide(Some(s), 11, t + S).0.is_allowed(), "{a}");
    }
    // A sliding log gives back its newest entries.
    let sl = Limiter::new(AlgorithmName::SlidingLog, 10, w, None).expect("valid");
    let (_, s) = sl.decide(None, 5, t);
    let (_, s) = sl.decide(Some(s), 5, t + 5 * S);
    let s = sl.give_back(s, 5, t + 6 * S);
    assert_eq!(sl.in_window(Some(&s), t + 9 * S), 5);
    assert_eq!(
        sl.in_window(Some(&s), t + 10 * S),
        0,
        "the older five remain"
    );
    // A fixed window's refund in the next window finds nothing to give.
    let fw = Limiter::new(AlgorithmName::FixedWindow, 10, w, None).expect("valid");
    let (_, s) = fw.decide(None, 10, Duration::from_secs(109));
    let (_, s) = fw.decide(Some(s), 3, Duration::from_secs(110));
    let s = fw.give_back(s, 10, Duration::from_secs(110));
    assert!(fw
        .decide(Some(s.clone()), 10, Duration::from_secs(110))
        .0
        .is_allowed());
    assert!(!fw
        .decide(Some(s), 11, Duration::from_secs(110))
        .0
        .is_allowed());
}

#[test]
fn names_round_trip() {
    for a in AlgorithmName::ALL {
        assert_eq!(a.as_str().parse::<AlgorithmName>(), Ok(a));
    }
    assert!("leaky_bucket".parse::<AlgorithmName>().is_err());
    assert_eq!(AlgorithmName::default(), AlgorithmName::FixedWindow);
}

#[test]
fn burst_only_for_the_bucket() {
    assert_eq!(
        Limiter::new(AlgorithmName::SlidingLog, 5, S, Some(3)),
        Err(InvalidLimit::BurstWithoutBucket { burst: 3 })
    );
    let tb = Limiter::new(AlgorithmName::TokenBucket, 10, S, Some(3)).unwrap();
    assert_eq!((tb.limit(), tb.capacity(), tb.period()), (10, 3, S));
    let tb = Limiter::new(AlgorithmName::TokenBucket, 10, S, None).unwrap();
    assert_eq!(tb.capacity(), 10, "burst defaults to the limit");
}

#[test]
fn log_limit_is_capped() {
    assert!(matches!(
        Limiter::new(AlgorithmName::SlidingLog, 1_001, S, None),
        Err(InvalidLimit::LogLimitTooLarge { .. })
    ));
}

#[test]
fn dispatches_and_treats_foreign_state_as_absent() {
    for name in AlgorithmName::ALL {
        let l = Limiter::new(name, 2, S, None).unwrap();
        assert_eq!(l.name(), name);
        let (d1, s1) = l.decide(None, 2, S);
        assert!(d1.is_allowed());
        assert!(!l.decide(Some(s1.clone()), 1, S).0.is_allowed(), "{name}");
        assert!(l.expires_after(&s1, S) > Duration::ZERO);
        let foreign = if name == AlgorithmName::TokenBucket {
            LimiterState::FixedWindow(WindowCount {
                window_start: S,
                count: 2,
            })
        } else {
            LimiterState::TokenBucket(GcraState { tat: 100 * S })
        };
        assert_eq!(
            l.decide(Some(foreign.clone()), 1, S).0,
            l.decide(None, 1, S).0
        );
        assert_eq!(l.expires_after(&foreign, S), Duration::ZERO);
    }
}

#[test]
fn only_a_fixed_window_waits_for_its_end_to_refill() {
    let s = Duration::from_secs(1);
    for (a, refills) in [
        (AlgorithmName::FixedWindow, false),
        (AlgorithmName::SlidingWindow, true),
        (AlgorithmName::SlidingLog, true),
        (AlgorithmName::TokenBucket, true),
        (AlgorithmName::Concurrency, true),
    ] {
        let l = Limiter::new(a, 10, s, None).expect("valid");
        assert_eq!(l.refills(), refills, "{a}");
    }
}
