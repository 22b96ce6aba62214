//! How one rule's rate is split between the Envoys that report its bucket:
//! max-min fair on their demand, with headroom, never above the rate.

/// An Envoy's demand counts for this much more in the split, so that one
/// below its share can grow before the next report shows it.
pub const HEADROOM: f64 = 1.25;

/// Max-min fair shares of `rate` among `demands` (requests per second,
/// headroom already added): water-filling. Every demand at or below the
/// level gets what it asks; the others get the level; what the demands
/// leave is spread evenly over all of them, so the shares always add up to
/// `rate` exactly (up to rounding) and never above it. Empty demands give
/// empty shares; negative or non-finite demands count as zero.
pub fn max_min(rate: f64, demands: &[f64]) -> Vec<f64> {
    let n = demands.len();
    if n == 0 {
        return Vec::new();
    }
    let rate = if rate.is_finite() { rate.max(0.0) } else { 0.0 };
    let clean: Vec<f64> = demands
        .iter()
        .map(|&d| if d.is_finite() { d.max(0.0) } else { 0.0 })
        .collect();
    let mut order: Vec<usize> = (0..n).collect();
    order.sort_by(|&a, &b| clean[a].total_cmp(&clean[b]));
    let mut shares = vec![0.0; n];
    let mut left = rate;
    for (k, &i) in order.iter().enumerate() {
        let level = left / (n - k) as f64;
        let share = clean[i].min(level);
        shares[i] = share;
        left -= share;
    }
    // What the demands left: spread evenly.
    let spare = (left / n as f64).max(0.0);
    for s in &mut shares {
        *s += spare;
    }
    shares
}

/// Whether a share moving from `current` to `target` is worth a new
/// assignment: Envoy restarts its bucket full on every change, so small
/// moves (within 10 % of the current share, and within 2 % of the rule's
/// rate) keep the assignment as it is.
pub fn moved(current: f64, target: f64, rate: f64) -> bool {
    let by = (target - current).abs();
    by > 0.1 * current && by > 0.02 * rate
}

/// The new assignments of Envoys that hold `assigned` and report `demands`
/// (requests per second, without headroom) on one rule of `rate`: each
/// moves to its max-min share (with [`HEADROOM`]) unless that move is
/// small ([`moved`]), and the assignments never add up past `rate`: when
/// the kept ones would, every Envoy kept above its share gets its share.
/// Equal inputs give equal outputs, so every instance that re-splits one
/// board agrees.
pub fn resplit(rate: f64, demands: &[f64], assigned: &[f64]) -> Vec<f64> {
    let with_headroom: Vec<f64> = demands.iter().map(|d| d * HEADROOM).collect();
    let targets = max_min(rate, &with_headroom);
    let mut out: Vec<f64> = targets
        .iter()
        .zip(assigned)
        .map(|(&t, &a)| if moved(a, t, rate) { t } else { a })
        .collect();
    if out.iter().sum::<f64>() > rate * (1.0 + 1e-12) {
        for (o, &t) in out.iter_mut().zip(&targets) {
            if *o > t {
                *o = t;
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn the_light_envoy_gets_its_demand_and_the_busy_ones_split_the_rest() {
        let s = max_min(100.0, &[150.0 * HEADROOM, 60.0 * HEADROOM, 10.0 * HEADROOM]);
        assert!((s[2] - 12.5).abs() < 1e-9, "{s:?}");
        assert!(
            (s[0] - 43.75).abs() < 1e-9 && (s[1] - 43.75).abs() < 1e-9,
            "{s:?}"
        );
    }

    #[test]
    fn what_the_demands_leave_is_spread_evenly() {
        let s = max_min(100.0, &[10.0, 20.0]);
        assert_eq!(s, vec![45.0, 55.0]);
        assert_eq!(max_min(100.0, &[]), Vec::<f64>::new());
        assert_eq!(max_min(100.0, &[0.0, 0.0]), vec![50.0, 50.0]);
    }

    #[test]
    fn small_moves_keep_the_assignment() {
        assert!(!moved(50.0, 54.0, 100.0), "8 % of the share");
        assert!(moved(50.0, 56.0, 100.0));
        assert!(!moved(1.0, 1.5, 100.0), "below 2 % of the rate");
    }

    #[test]
    fn a_newcomer_gets_its_share_at_once_and_the_others_shrink() {
        // One Envoy held the whole rate; a newcomer counts as wanting all.
        let s = resplit(10.0, &[30.0, 10.0], &[10.0, 0.0]);
        assert_eq!(s, vec![5.0, 5.0]);
        // A small move keeps what is held.
        let s = resplit(100.0, &[60.0, 60.0], &[52.0, 48.0]);
        assert_eq!(s, vec![52.0, 48.0]);
        // A leaver's share goes to those who remain.
        assert_eq!(resplit(10.0, &[30.0], &[5.0]), vec![10.0]);
    }

    proptest! {
        /// Whatever was held, the new assignments never add up past the
        /// rate, and a re-split of its own output keeps it.
        #[test]
        fn resplit_never_passes_the_rate(rate in 1.0f64..1e4, lines in prop::collection::vec((0.0f64..1e4, 0.0f64..1e4), 1..12)) {
            let (demands, held): (Vec<f64>, Vec<f64>) = lines.into_iter().unzip();
            let s = resplit(rate, &demands, &held);
            prop_assert!(s.iter().sum::<f64>() <= rate * (1.0 + 1e-9));
            prop_assert!(s.iter().all(|a| *a >= 0.0));
            let again = resplit(rate, &demands, &s);
            prop_assert_eq!(again, s);
        }

        /// Never above the rate, never below zero; a demand below the
        /// level it would share is met.
        #[test]
        fn shares_add_up_to_the_rate(rate in 0.0f64..1e6, demands in prop::collection::vec(0.0f64..1e6, 1..20)) {
            let s = max_min(rate, &demands);
            let sum: f64 = s.iter().sum();
            prop_assert!(sum <= rate * (1.0 + 1e-9) + 1e-9);
            prop_assert!((sum - rate).abs() <= rate * 1e-9 + 1e-6);
            let fair = rate / demands.len() as f64;
            for (d, share) in demands.iter().zip(&s) {
                prop_assert!(*share >= 0.0);
                if *d <= fair {
                    prop_assert!(*share + 1e-6 >= *d);
                }
                prop_assert!(*share + 1e-6 >= fair.min(*d));
            }
        }
    }
}
