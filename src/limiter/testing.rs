//! Shared property-test generators for the algorithm modules.

use std::time::Duration;

use proptest::prelude::*;

use super::decision::from_nanos;

/// A (time, cost) arrival sequence. Time moves by a signed fraction of
/// `unit_ns` (permille, up to `max_forward_permille` forward and, with
/// `backwards`, up to a whole unit back), so many steps fall inside one unit;
/// costs range up to a little above `max_cost`.
pub(crate) fn arrivals(
    unit_ns: u64,
    max_cost: u64,
    backwards: bool,
    max_forward_permille: i64,
) -> impl Strategy<Value = Vec<(Duration, u64)>> {
    let low = if backwards { -1_000i64 } else { 0 };
    (
        0u64..(1 << 62),
        prop::collection::vec(
            (low..=max_forward_permille, 0u64..=3, 0..=max_cost + 2),
            1..60,
        ),
    )
        .prop_map(move |(start, moves)| {
            let mut now = u128::from(start);
            let mut out = Vec::with_capacity(moves.len());
            for (permille, jitter, cost) in moves {
                let by = u128::from(unit_ns) * u128::from(permille.unsigned_abs()) / 1_000
                    + u128::from(jitter);
                now = if permille < 0 {
                    now.saturating_sub(by)
                } else {
                    now + by
                };
                out.push((from_nanos(now), cost));
            }
            out
        })
}

/// The state after deciding every `(now, cost)` step in order.
pub(crate) fn replay<A: super::Algorithm>(a: &A, steps: &[(Duration, u64)]) -> Option<A::State> {
    let mut state = None;
    for &(now, cost) in steps {
        state = Some(a.decide(state, cost, now).1);
    }
    state
}

/// The expiry law: `later` past `expires_after`, the stored state decides
/// `cost` exactly as an absent key.
pub(crate) fn expired_equals_absent<A: super::Algorithm>(
    a: &A,
    steps: &[(Duration, u64)],
    later: Duration,
    cost: u64,
) -> Result<(), TestCaseError> {
    let Some(state) = replay(a, steps) else {
        return Ok(());
    };
    let now = steps.last().map_or(Duration::ZERO, |s| s.0);
    let at = now + a.expires_after(&state, now) + later;
    prop_assert_eq!(
        a.decide(Some(state), cost, at).0,
        a.decide(None, cost, at).0
    );
    Ok(())
}
