//! Rate-limit response headers (runtime.md §9). Pure.

use crate::engine::aggregate::Disposition;
use crate::engine::types::{Code, DescriptorStatus};

/// The three header names (`LIMIT_*_HEADER`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeaderNames {
    /// `RateLimit-Limit` by default.
    pub limit: String,
    /// `RateLimit-Remaining` by default.
    pub remaining: String,
    /// `RateLimit-Reset` by default.
    pub reset: String,
}

impl Default for HeaderNames {
    fn default() -> Self {
        HeaderNames {
            limit: "RateLimit-Limit".into(),
            remaining: "RateLimit-Remaining".into(),
            reset: "RateLimit-Reset".into(),
        }
    }
}

/// The status the headers describe: the smallest remaining wins (ties keep
/// the earlier); any non-quota OVER_LIMIT descriptor overrides that, the
/// last such one winning.
pub fn chosen_status(
    statuses: &[DescriptorStatus],
    dispositions: &[Disposition],
    quota: &[bool],
) -> Option<usize> {
    let mut min = u32::MAX;
    let mut chosen = None;
    for (i, s) in statuses.iter().enumerate() {
        if s.current_limit.is_some() && s.limit_remaining < min {
            chosen = Some(i);
            min = s.limit_remaining;
        }
        let unlimited = dispositions.get(i) == Some(&Disposition::Unlimited);
        let is_quota = quota.get(i).copied().unwrap_or(false);
        if !unlimited && s.code == Code::OverLimit && !is_quota {
            chosen = Some(i);
            min = 0;
        }
    }
    chosen
}

/// The headers for the chosen status, in the original's order (limit,
/// remaining, reset); `reset_seconds` is the chosen window's time to reset.
pub fn headers(
    names: &HeaderNames,
    status: &DescriptorStatus,
    reset_seconds: u64,
) -> Vec<(String, String)> {
    let Some(limit) = &status.current_limit else {
        return Vec::new();
    };
    vec![
        (names.limit.clone(), limit.requests_per_unit.to_string()),
        (names.remaining.clone(), status.limit_remaining.to_string()),
        (names.reset.clone(), reset_seconds.to_string()),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::types::CurrentLimit;
    use crate::limiter::Unit;

    fn st(code: Code, limit: Option<u32>, remaining: u32) -> DescriptorStatus {
        DescriptorStatus {
            code,
            current_limit: limit.map(|l| CurrentLimit {
                requests_per_unit: l,
                unit: Unit::Minute,
                name: String::new(),
            }),
            limit_remaining: remaining,
            duration_until_reset: None,
        }
    }

    const C: Disposition = Disposition::Checked;

    #[test]
    fn smallest_remaining_ties_keep_the_earlier() {
        let s = [st(Code::Ok, Some(10), 3), st(Code::Ok, Some(5), 3)];
        assert_eq!(chosen_status(&s, &[C, C], &[false, false]), Some(0));
        let s = [st(Code::Ok, Some(10), 3), st(Code::Ok, Some(5), 2)];
        assert_eq!(chosen_status(&s, &[C, C], &[false, false]), Some(1));
    }

    #[test]
    fn last_non_quota_over_limit_wins() {
        let s = [
            st(Code::OverLimit, Some(10), 0),
            st(Code::Ok, Some(5), 0),
            st(Code::OverLimit, Some(7), 0),
        ];
        assert_eq!(
            chosen_status(&s, &[C, C, C], &[false, false, false]),
            Some(2)
        );
        assert_eq!(
            chosen_status(&s, &[C, C, C], &[false, false, true]),
            Some(0)
        );
    }

    #[test]
    fn no_limit_no_headers() {
        let s = [st(Code::Ok, None, 0)];
        assert_eq!(chosen_status(&s, &[Disposition::NoLimit], &[false]), None);
        let h = headers(
            &HeaderNames::default(),
            &st(Code::OverLimit, Some(10), 0),
            58,
        );
        assert_eq!(
            h,
            vec![
                ("RateLimit-Limit".into(), "10".into()),
                ("RateLimit-Remaining".into(), "0".into()),
                ("RateLimit-Reset".into(), "58".into())
            ]
        );
    }
}
