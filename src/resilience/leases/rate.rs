//! [`RateMeter`]: how many decisions (or tokens) per second one instance
//! sees for one key, in O(1) space, on an injected clock.

use std::time::Duration;

/// Decisions counted per whole second of a local clock.
///
/// The rate read at `now` is the larger of the last complete second's count
/// and the current second's count so far: a key that turns hot is seen as
/// hot as soon as it has done `LEASE_MIN_RATE` decisions within one second,
/// and one that goes quiet reads 0 two seconds later. It never reads more
/// than the decisions of one calendar second of the clock.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RateMeter {
    second: u64,
    current: u64,
    previous: u64,
}

impl RateMeter {
    /// Counts one decision at `now`.
    pub fn record(&mut self, now: Duration) {
        self.add(now, 1);
    }

    /// Counts `n` at `now` (the tokens of a grant).
    pub fn add(&mut self, now: Duration, n: u64) {
        self.roll(now);
        self.current = self.current.saturating_add(n);
    }

    /// Decisions per second at `now` (see the type's doc).
    pub fn rate(&self, now: Duration) -> u64 {
        let mut m = *self;
        m.roll(now);
        m.previous.max(m.current)
    }

    /// The last second a decision was counted in.
    pub fn last_second(&self) -> u64 {
        self.second
    }

    fn roll(&mut self, now: Duration) {
        let s = now.as_secs();
        if s == self.second {
            return;
        }
        self.previous = if s == self.second + 1 {
            self.current
        } else {
            0
        };
        self.current = 0;
        self.second = s;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn reads_the_last_full_second_or_the_current_one() {
        let mut m = RateMeter::default();
        let t = Duration::from_secs(100);
        for i in 0..500 {
            m.record(t + 2 * MS * i);
        }
        assert_eq!(m.rate(t + 999 * MS), 500);
        assert_eq!(m.rate(t + 1500 * MS), 500, "the full second before");
        assert_eq!(m.rate(t + 2000 * MS), 0, "quiet for a whole second");
    }

    proptest! {
        /// Never above the most decisions counted in one clock second.
        #[test]
        fn never_reads_more_than_one_second_holds(steps in prop::collection::vec(0u32..400, 1..300)) {
            let mut m = RateMeter::default();
            let mut now = Duration::from_secs(1_000);
            let mut per_second = std::collections::HashMap::<u64, u64>::new();
            for step in steps {
                now += MS * step;
                m.record(now);
                *per_second.entry(now.as_secs()).or_default() += 1;
                let most = per_second.values().copied().max().unwrap_or(0);
                prop_assert!(m.rate(now) <= most);
                prop_assert!(m.rate(now) >= per_second[&now.as_secs()]);
            }
        }
    }
}
