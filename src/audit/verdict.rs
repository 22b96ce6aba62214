//! The comparison of one decision with its contract. Pure: the stores
//! decide the reference beside the decision (see
//! [`crate::store::Limit::Reference`]); this reads the two answers.
//!
//! - *over*: the rule admitted (and the request was counted), the
//!   contract refuses;
//! - *under*: the rule refused, the contract admits.
//!
//! The reference records what was really admitted, not what it would have
//! admitted, so one disagreement does not shift every later comparison.

use crate::store::{Answer, StoreError};

/// How one audited decision compares with its contract.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Both admit, or both refuse (or the rule admitted but another limit
    /// of the request refused it, so nothing was counted).
    Agree,
    /// Admitted, but the contract refuses.
    Over,
    /// Refused, but the contract admits.
    Under,
}

/// What the audit could make of one audited decision.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Compared; `in_window` is what the window contract's reference holds
    /// in its trailing window with this request, when it was admitted.
    Compared {
        /// The comparison.
        verdict: Verdict,
        /// Admitted cost in the trailing window including this request
        /// (window contracts, admitted requests only).
        in_window: Option<u64>,
    },
    /// The store could not decide: the rule's failure policy answered
    /// (the floor, or a denial), which no fleet-wide reference can check.
    ByPolicy,
    /// The store decided, but the reference did not answer (its node
    /// failed on another slot).
    Unverified,
}

/// The verdict when the rule `admitted` (and it was counted) or `refused`
/// (neither: admitted but not counted), and the contract admits or not.
pub fn compare(admitted: bool, refused: bool, contract_admits: bool) -> Verdict {
    match (admitted, refused, contract_admits) {
        (true, _, false) => Verdict::Over,
        (_, true, true) => Verdict::Under,
        _ => Verdict::Agree,
    }
}

/// A limit's outcome: its answer, whether it was `taken` (a counter with
/// a cost, or any other limit of a committed work), and its reference's
/// answer. `window`: the contract is a window (its reference reports what
/// it held before).
pub fn of(
    subject: &Result<Answer, StoreError>,
    taken: bool,
    reference: &Result<Answer, StoreError>,
    cost: u64,
    window: bool,
) -> Outcome {
    let decision = match subject {
        Ok(Answer::Decided(c)) => c.decision,
        Ok(Answer::ByPolicy(_)) | Err(_) => return Outcome::ByPolicy,
    };
    let Ok(Answer::Decided(contract)) = reference else {
        return Outcome::Unverified;
    };
    let admitted = taken && decision.is_allowed();
    let verdict = compare(
        admitted,
        !decision.is_allowed(),
        contract.decision.is_allowed(),
    );
    Outcome::Compared {
        verdict,
        in_window: (window && admitted).then(|| contract.count.saturating_add(cost)),
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use proptest::prelude::*;

    use super::*;
    use crate::limiter::{Algorithm, AlgorithmName, Limiter, LimiterState};

    const S: Duration = Duration::from_secs(1);

    /// Counts of a replay.
    #[derive(Debug, Default)]
    struct Tally {
        over: u64,
        under: u64,
        peak: u64,
        admitted: u64,
    }

    /// Replays `arrivals` (ms offsets, costs) through `real` and through
    /// its exact reference, the reference following the real admissions,
    /// as a store does in one step.
    fn replay(real: &Limiter, arrivals: &[(u64, u64)]) -> Tally {
        let reference = real.reference_of().expect("valid");
        let (mut state, mut ref_state): (Option<LimiterState>, Option<LimiterState>) = (None, None);
        let mut t = Duration::from_secs(1_800_000_000);
        let mut tally = Tally::default();
        for &(gap_ms, cost) in arrivals {
            t += Duration::from_millis(gap_ms);
            let (decision, next) = real.decide(state.clone(), cost, t);
            let held = reference.in_window(ref_state.as_ref(), t);
            let (contract, _) = reference.decide(ref_state.clone(), cost, t);
            let admitted = decision.is_allowed() && cost > 0;
            if admitted {
                state = Some(next);
                ref_state = Some(reference.record(ref_state, cost, t));
                tally.admitted += cost;
                tally.peak = tally.peak.max(held + cost);
            }
            match compare(admitted, !decision.is_allowed(), contract.is_allowed()) {
                Verdict::Over => tally.over += 1,
                Verdict::Under => tally.under += 1,
                Verdict::Agree => {}
            }
        }
        tally
    }

    fn limiter(a: AlgorithmName, limit: u64) -> Limiter {
        Limiter::new(a, limit, S, None).expect("valid")
    }

    fn arrivals() -> impl Strategy<Value = Vec<(u64, u64)>> {
        prop::collection::vec((0u64..120, 1u64..3), 1..400)
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(300))]

        #[test]
        fn exact_algorithms_never_disagree(arrivals in arrivals(), limit in 1u64..20) {
            for a in [AlgorithmName::SlidingLog, AlgorithmName::TokenBucket] {
                let t = replay(&limiter(a, limit), &arrivals);
                prop_assert_eq!((t.over, t.under), (0, 0), "{:?}", a);
            }
        }

        #[test]
        fn a_fixed_window_is_over_only_past_the_limit_and_never_under(
            arrivals in arrivals(), limit in 1u64..20,
        ) {
            let t = replay(&limiter(AlgorithmName::FixedWindow, limit), &arrivals);
            prop_assert_eq!(t.under, 0);
            prop_assert!(t.peak <= 2 * limit, "peak {} of {}", t.peak, limit);
            prop_assert_eq!(t.over > 0, t.peak > limit);
        }

        #[test]
        fn a_sliding_window_stays_within_its_estimate(arrivals in arrivals(), limit in 1u64..20) {
            let t = replay(&limiter(AlgorithmName::SlidingWindow, limit), &arrivals);
            prop_assert!(t.peak < 2 * limit, "peak {} of {}", t.peak, limit);
            prop_assert_eq!(t.over > 0, t.peak > limit);
        }
    }

    #[test]
    fn the_boundary_burst_is_over_by_exactly_the_second_window() {
        // 10 at the end of one second, 10 at the start of the next.
        let mut arrivals = vec![(990, 1)];
        arrivals.extend(std::iter::repeat_n((0, 1), 9));
        arrivals.push((20, 1));
        arrivals.extend(std::iter::repeat_n((0, 1), 9));
        let t = replay(&limiter(AlgorithmName::FixedWindow, 10), &arrivals);
        assert_eq!((t.admitted, t.over, t.under, t.peak), (20, 10, 0, 20));
    }

    #[test]
    fn the_reference_follows_real_admissions_so_errors_do_not_compound() {
        // A rule that refused everything: the reference recorded nothing,
        // so every refusal is under, and none turns into an over later.
        let reference = limiter(AlgorithmName::SlidingLog, 3);
        let mut t = Duration::from_secs(1_000);
        let mut under = 0;
        for _ in 0..10 {
            t += Duration::from_millis(10);
            let (contract, _) = reference.decide(None, 1, t);
            if compare(false, true, contract.is_allowed()) == Verdict::Under {
                under += 1;
            }
        }
        assert_eq!(under, 10);
        // Admitted past the limit: each admission beyond it is over.
        let mut state = None;
        let mut over = 0;
        for _ in 0..5 {
            let (contract, _) = reference.decide(state.clone(), 1, t);
            if compare(true, false, contract.is_allowed()) == Verdict::Over {
                over += 1;
            }
            state = Some(reference.record(state, 1, t));
        }
        assert_eq!(over, 2);
    }

    #[test]
    fn answers_are_read_into_outcomes() {
        use crate::limiter::Decision;
        use crate::store::{Decided, PolicyAnswer, StoreErrorKind};
        let checked = |allowed: bool, count: u64| {
            Ok(Answer::Decided(Decided {
                decision: if allowed {
                    Decision::Allow {
                        remaining: 0,
                        reset_after: S,
                    }
                } else {
                    Decision::Deny {
                        retry_after: S,
                        reset_after: S,
                    }
                },
                count,
                at: Duration::ZERO,
            }))
        };
        let over = of(&checked(true, 0), true, &checked(false, 10), 1, true);
        assert_eq!(
            over,
            Outcome::Compared {
                verdict: Verdict::Over,
                in_window: Some(11)
            }
        );
        // Admitted by the rule but not committed: nothing was counted.
        let agree = of(&checked(true, 0), false, &checked(false, 10), 1, true);
        assert_eq!(
            agree,
            Outcome::Compared {
                verdict: Verdict::Agree,
                in_window: None
            }
        );
        let under = of(&checked(false, 0), false, &checked(true, 2), 1, true);
        assert_eq!(
            under,
            Outcome::Compared {
                verdict: Verdict::Under,
                in_window: None
            }
        );
        let policy = Ok(Answer::ByPolicy(PolicyAnswer {
            decision: Decision::Allow {
                remaining: 0,
                reset_after: S,
            },
            fell_back: true,
        }));
        let down = Err(StoreError::new(StoreErrorKind::Timeout, "t"));
        assert_eq!(of(&policy, true, &down, 1, true), Outcome::ByPolicy);
        assert_eq!(
            of(&checked(true, 0), true, &down, 1, true),
            Outcome::Unverified
        );

        // The original's counters: taken whatever the work decides; one
        // over its limit (11 of 10) refused, agreeing with a full contract.
        assert_eq!(
            of(&checked(false, 11), true, &checked(false, 10), 1, true),
            Outcome::Compared {
                verdict: Verdict::Agree,
                in_window: None
            }
        );
        assert_eq!(
            of(&checked(true, 3), true, &checked(false, 10), 1, true),
            Outcome::Compared {
                verdict: Verdict::Over,
                in_window: Some(11)
            }
        );
    }
}
