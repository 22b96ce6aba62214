//! The original's fixed window: one counter per epoch-aligned window, and
//! the original's status arithmetic, reproduced exactly (including
//! the 32-bit float near-limit threshold and unsigned wrap-around), so that
//! statuses and per-rule counters match the original's for the same counts.
//!
//! Error bound: a fixed window admits up to `2 × limit` within any span of
//! one window length that straddles a boundary (`limit` at the end of one
//! window, `limit` at the start of the next). That is the original's
//! behaviour and the default; other algorithms are opt-in.

use std::time::Duration;

use super::Decision;

/// A window of whole seconds, `[start, start + length)`: epoch-aligned
/// (the original's, [`Window::containing`]) or a calendar period
/// ([`super::calendar::Calendar::window_at`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Window {
    /// Start, in Unix seconds.
    pub start: u64,
    /// Length in seconds (≥ 1).
    pub length: u64,
}

impl Window {
    /// The window containing `now`. A zero length is treated as one second.
    pub fn containing(now: u64, unit_seconds: u64) -> Window {
        let length = unit_seconds.max(1);
        Window {
            start: now - now % length,
            length,
        }
    }

    /// Seconds until the window ends, in `[1, length]`: `start + length −
    /// now` for a `now` inside it, which for an epoch-aligned window is the
    /// original's `U − (now mod U)`; 1 once it has ended.
    pub fn reset_after(&self, now: u64) -> u64 {
        let length = self.length.max(1);
        (self.start + length).saturating_sub(now).clamp(1, length)
    }

    /// The first second after the window.
    pub fn end(&self) -> u64 {
        self.start + self.length
    }
}

/// What one counted hit means for the caller: status and per-rule stats.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Verdict {
    /// Over the limit (before per-rule shadow mode is applied).
    pub over_limit: bool,
    /// `limit − after` when within the limit, else 0.
    pub remaining: u32,
    /// Added to the rule's `over_limit` counter.
    pub over_limit_hits: u64,
    /// Added to the rule's `near_limit` counter.
    pub near_limit_hits: u64,
    /// Added to the rule's `within_limit` counter.
    pub within_limit_hits: u64,
    /// Hits that were over the limit: what shadow mode lets through.
    pub shadowable_hits: u64,
}

/// `floor(float32(limit) × float32(ratio))`, computed in 32-bit floats as the
/// original does (limit 15 → 12, 14 → 11, 8 → 6, 5 → 4, 20 → 16 at 0.8).
pub fn near_limit_threshold(limit: u32, ratio: f32) -> u64 {
    let n = (limit as f32 * ratio).floor();
    if n <= 0.0 {
        0
    } else {
        n as u64
    }
}

/// The verdict for a counter that went from `before` to `after` on a
/// request of `hits` (the counted cases; a local-cache hit is
/// [`judge_cached_over_limit`]). Callers pass
/// `before = after.wrapping_sub(hits)` with the nominal hits, which wraps, as
/// the original's unsigned arithmetic does, when the counter was not
/// incremented (`STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT`).
pub fn judge(limit: u32, near_ratio: f32, hits: u64, before: u64, after: u64) -> Verdict {
    let l = u64::from(limit);
    let n = near_limit_threshold(limit, near_ratio);
    if after > l {
        let (over, near) = if before >= l {
            (hits, 0)
        } else {
            (after - l, l - n.max(before))
        };
        Verdict {
            over_limit: true,
            remaining: 0,
            over_limit_hits: over,
            near_limit_hits: near,
            within_limit_hits: 0,
            shadowable_hits: if before >= l { hits } else { after - l },
        }
    } else {
        let near = if after > n {
            if before >= n {
                hits
            } else {
                after - n
            }
        } else {
            0
        };
        Verdict {
            over_limit: false,
            remaining: (l - after) as u32,
            over_limit_hits: 0,
            near_limit_hits: near,
            within_limit_hits: hits,
            shadowable_hits: 0,
        }
    }
}

/// The verdict for a key found in the local over-limit cache (case A): no
/// store I/O, over the limit, all hits count as over.
pub fn judge_cached_over_limit(hits: u64) -> Verdict {
    Verdict {
        over_limit: true,
        remaining: 0,
        over_limit_hits: hits,
        near_limit_hits: 0,
        within_limit_hits: 0,
        shadowable_hits: hits,
    }
}

/// The original's fixed window as a store item sees it: its key (see
/// [`crate::store::key::fixed_window_key`]) already names the window.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OriginalWindow {
    /// Requests per window.
    pub limit: u64,
    /// The window the key counts; the counter expires when it ends.
    pub window: Window,
    /// Seconds a store with server-side expiry keeps the key, before the
    /// jitter: the window's length (a calendar period's: until it ends).
    pub ttl_seconds: u64,
    /// Exclusive bound of the random seconds added to `ttl_seconds` when
    /// the key is created (`EXPIRATION_JITTER_MAX_SECONDS`; 0 for none),
    /// so that keys created together do not all expire together. The store
    /// that creates the key draws it: one window's counters then share
    /// their arguments on the way there.
    pub jitter_seconds: u64,
}

impl OriginalWindow {
    /// The TTL for a key created now: `ttl_seconds` plus a uniform draw
    /// from `0 .. jitter_seconds`.
    pub fn expiry_seconds(&self) -> u64 {
        match self.jitter_seconds {
            0 => self.ttl_seconds,
            max => self.ttl_seconds + rand::random_range(0..max),
        }
    }

    /// Whether a counter holding `after` once incremented admits the
    /// request: iff it is within the limit.
    pub fn admits(&self, after: u64) -> bool {
        after <= self.limit
    }

    /// A counter's decision from its value `after` the increment: admitted
    /// iff [`OriginalWindow::admits`]; either way the window's end is the
    /// reset (at least 1 s).
    pub fn decision(&self, after: u64, now_secs: u64) -> Decision {
        let reset = Duration::from_secs(self.window.reset_after(now_secs).max(1));
        if self.admits(after) {
            Decision::Allow {
                remaining: self.limit - after,
                reset_after: reset,
            }
        } else {
            Decision::Deny {
                retry_after: reset,
                reset_after: reset,
            }
        }
    }

    /// The decision before counting ([`crate::store::Limit::Window`]) on a
    /// counter that holds `count`: [`decide_before_counting`], the window's
    /// end being the reset and the retry.
    pub fn decide(&self, count: u64, cost: u64, now_secs: u64) -> Decision {
        let until_end = Duration::from_secs(self.window.reset_after(now_secs));
        decide_before_counting(self.limit, count, cost, until_end).0
    }
}

/// A fixed window's rule when it decides before it counts (the original's
/// window decided all or nothing, and the opt-in fixed window): `cost`
/// fits iff `count + cost ≤ limit`, so no window ever holds more than
/// `limit`; a cost above the limit never fits; a refusal retries when the
/// window ends, `until_end` from now. Answers the decision and the count
/// after it (unchanged when refused).
pub fn decide_before_counting(
    limit: u64,
    count: u64,
    cost: u64,
    until_end: Duration,
) -> (Decision, u64) {
    if cost > limit {
        let decision = Decision::ExceedsCapacity {
            capacity: limit,
            reset_after: until_end,
        };
        (decision, count)
    } else if count <= limit - cost {
        // `cost ≤ limit`, so the subtraction above cannot wrap.
        let after = count + cost;
        let decision = Decision::Allow {
            remaining: limit - after,
            reset_after: until_end,
        };
        (decision, after)
    } else {
        let decision = Decision::Deny {
            retry_after: until_end,
            reset_after: until_end,
        };
        (decision, count)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn near_threshold_is_32_bit_float() {
        for (l, n) in [
            (15, 12),
            (14, 11),
            (8, 6),
            (5, 4),
            (20, 16),
            (10, 8),
            (0, 0),
        ] {
            assert_eq!(near_limit_threshold(l, 0.8), n, "L={l}");
        }
    }

    /// The original's status arithmetic, row by row: within, near, crossing
    /// and already over the limit, each with its per-rule counts.
    #[test]
    fn status_arithmetic_table() {
        // (L, h, before, after, over?, remaining, over, near, within);
        // the last two rows have a `before` the original's tests set apart
        // from `after − h`.
        type Row = (u32, u64, u64, u64, bool, u32, u64, u64, u64);
        let rows: [Row; 14] = [
            (10, 1, 4, 5, false, 5, 0, 0, 1),
            (10, 1, 10, 11, true, 0, 1, 0, 0),
            (10, 0, 11, 11, true, 0, 0, 0, 0),
            (15, 1, 10, 11, false, 4, 0, 0, 1),
            (15, 1, 12, 13, false, 2, 0, 1, 1),
            (15, 1, 15, 16, true, 0, 1, 0, 0),
            (20, 3, 2, 5, false, 15, 0, 0, 3),
            (8, 2, 5, 7, false, 1, 0, 1, 2),
            (20, 3, 16, 19, false, 1, 0, 3, 3),
            (20, 3, 19, 22, true, 0, 2, 1, 0),
            (20, 7, 15, 22, true, 0, 2, 4, 0),
            (10, 3, 27, 30, true, 0, 3, 0, 0),
            (5, 1, 2, 7, true, 0, 2, 1, 0),
            (10, 1, 2, 6, false, 4, 0, 0, 1),
        ];
        for (i, (l, h, before, after, over, rem, o, n, w)) in rows.into_iter().enumerate() {
            let v = judge(l, 0.8, h, before, after);
            assert_eq!(
                (
                    v.over_limit,
                    v.remaining,
                    v.over_limit_hits,
                    v.near_limit_hits,
                    v.within_limit_hits
                ),
                (over, rem, o, n, w),
                "row C-{}",
                i + 1
            );
        }
    }

    #[test]
    fn zero_limit_is_always_over() {
        for h in 1..5 {
            assert!(judge(0, 0.8, h, 0, h).over_limit);
        }
    }

    #[test]
    fn reset_is_in_one_to_unit() {
        let w = Window::containing(2222, 60);
        assert_eq!(w.start, 2220);
        assert_eq!(w.reset_after(2222), 58);
        assert_eq!(Window::containing(1200, 60).reset_after(1200), 60);
        assert_eq!(Window::containing(1234, 1).start, 1234);
        // A window that is not epoch-aligned resets at its own end.
        let w = Window {
            start: 1000,
            length: 90,
        };
        assert_eq!((w.reset_after(1000), w.reset_after(1089)), (90, 1));
        assert_eq!(w.reset_after(5000), 1, "an ended window resets at once");
    }

    #[test]
    fn a_new_keys_expiry_is_its_ttl_plus_a_draw_below_the_jitter_bound() {
        let window = |jitter_seconds| OriginalWindow {
            limit: 10,
            window: Window::containing(120, 60),
            ttl_seconds: 60,
            jitter_seconds,
        };
        assert_eq!(window(0).expiry_seconds(), 60);
        let drawn: std::collections::BTreeSet<u64> =
            (0..500).map(|_| window(5).expiry_seconds()).collect();
        // 500 draws from 5 values miss one with a chance below 10^-47.
        assert_eq!(drawn, (60..65).collect());
    }
}
