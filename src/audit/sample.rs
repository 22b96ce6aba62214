//! Which keys are audited: a stable share of them, chosen by a hash of the
//! reference key, so that a key is audited entirely or not at all, and by
//! every instance of a fleet alike (the reference in Redis must see all of
//! the key's requests, or it would under-count what was admitted).

use std::hash::Hasher;

use siphasher::sip::SipHasher13;

/// Fixed SipHash keys: the choice must agree across processes and
/// versions, so it is not keyed per process. Changing them changes which
/// keys a fleet audits.
const KEYS: (u64, u64) = (0x7261_7465_6c69_6d69, 0x7420_6175_6469_7421);

/// Picks `share` of all keys (`DECISION_AUDIT_SAMPLE`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Sampler {
    share: f64,
    /// Keys whose hash is below this are picked (`share × 2⁶⁴`).
    threshold: u64,
}

impl Sampler {
    /// A sampler of `share` of the keys, or `None` when that is no key at
    /// all (0, negative or not a number).
    pub fn new(share: f64) -> Option<Sampler> {
        if share.is_nan() || share <= 0.0 {
            return None;
        }
        let share = share.min(1.0);
        // `as` saturates: 1.0 × 2⁶⁴ becomes u64::MAX.
        let threshold = (share * 18_446_744_073_709_551_616.0) as u64;
        Some(Sampler { share, threshold })
    }

    /// The share it picks.
    pub fn share(&self) -> f64 {
        self.share
    }

    /// Whether the key whose reference is `reference_key` is audited.
    pub fn picks(&self, reference_key: &str) -> bool {
        if self.share >= 1.0 {
            return true;
        }
        let mut h = SipHasher13::new_with_keys(KEYS.0, KEYS.1);
        h.write(reference_key.as_bytes());
        h.finish() < self.threshold
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nothing_is_picked_at_zero_and_everything_at_one() {
        assert!(Sampler::new(0.0).is_none());
        assert!(Sampler::new(-1.0).is_none());
        assert!(Sampler::new(f64::NAN).is_none());
        let all = Sampler::new(1.0).expect("on");
        assert!((0..1000).all(|i| all.picks(&format!("k{i}"))));
        assert_eq!(Sampler::new(7.0).expect("on").share(), 1.0);
    }

    #[test]
    fn the_share_is_kept_and_the_choice_is_stable() {
        let s = Sampler::new(0.01).expect("on");
        let picked: Vec<usize> = (0..100_000)
            .filter(|i| s.picks(&format!("rl2:{{d_user_{i}_}}:audit:fw:60s")))
            .collect();
        // 1,000 expected; binomial σ ≈ 31.
        assert!((850..=1150).contains(&picked.len()), "{}", picked.len());
        // The same keys every time, and from another sampler of the share.
        let again = Sampler::new(0.01).expect("on");
        assert!(picked
            .iter()
            .all(|i| again.picks(&format!("rl2:{{d_user_{i}_}}:audit:fw:60s"))));
        // A larger share picks a superset.
        let more = Sampler::new(0.5).expect("on");
        assert!(picked
            .iter()
            .all(|i| more.picks(&format!("rl2:{{d_user_{i}_}}:audit:fw:60s"))));
    }
}
