//! Request-level post-processing of matched limits: `unlimited` and
//! `replaces`. Pure.

use crate::config::MatchedLimit;

/// What happens to one descriptor of a request after matching.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Disposition {
    /// No limit applies: status OK, nothing counted.
    NoLimit,
    /// The limit is counted against the store.
    Checked,
    /// An unlimited rule matched: OK with remaining `u32::MAX`, nothing counted.
    Unlimited,
    /// Another limit of the request `replaces` this one's name: treated as no
    /// limit, nothing counted.
    DroppedByReplaces,
}

/// Applies `unlimited` and `replaces` over a whole request, in place: every
/// descriptor that is not [`Disposition::Checked`] has its limit removed.
///
/// Unlimited limits still contribute their `replaces`; names are compared
/// exactly; every limit carrying a replaced name is dropped, so two limits
/// that replace each other are both dropped (as in the original).
pub fn apply_replaces(limits: &mut [Option<MatchedLimit>]) -> Vec<Disposition> {
    let mut replacing: Vec<&str> = Vec::new();
    let mut out = vec![Disposition::NoLimit; limits.len()];
    for (i, limit) in limits.iter().enumerate() {
        if let Some(l) = limit {
            replacing.extend(l.rule.replaces.iter().map(String::as_str));
            out[i] = if l.rule.unlimited {
                Disposition::Unlimited
            } else {
                Disposition::Checked
            };
        }
    }
    for (i, limit) in limits.iter().enumerate() {
        if let (Disposition::Checked, Some(l)) = (out[i], limit) {
            if l.rule.names().any(|n| replacing.contains(&n)) {
                out[i] = Disposition::DroppedByReplaces;
            }
        }
    }
    for (limit, d) in limits.iter_mut().zip(&out) {
        if *d != Disposition::Checked {
            *limit = None;
        }
    }
    out
}

/// The overall code: OVER_LIMIT iff a non-quota
/// descriptor is over its limit, or there are quota descriptors and all of
/// them are. Unlimited descriptors are skipped. Returns the code and which
/// descriptors "passed" (for dynamic metadata).
///
/// `quota[i]` is whether descriptor `i` counts as a quota descriptor (its
/// rule's `quota_mode`, or global `QUOTA_MODE`, which in the original also
/// covers descriptors without a limit).
pub fn overall_code(
    statuses: &[crate::engine::types::DescriptorStatus],
    dispositions: &[Disposition],
    quota: &[bool],
) -> (crate::engine::types::Code, Vec<usize>) {
    use crate::engine::types::Code;
    let (mut failed_rate, mut failed_quota, mut total_quota) = (0, 0, 0);
    let mut passed = Vec::new();
    for (i, status) in statuses.iter().enumerate() {
        if dispositions.get(i) == Some(&Disposition::Unlimited) {
            continue;
        }
        let is_quota = quota.get(i).copied().unwrap_or(false);
        if status.code == Code::OverLimit {
            if is_quota {
                failed_quota += 1;
            } else {
                failed_rate += 1;
            }
        } else {
            passed.push(i);
        }
        if is_quota {
            total_quota += 1;
        }
    }
    let over = failed_rate > 0 || (total_quota > 0 && failed_quota == total_quota);
    (if over { Code::OverLimit } else { Code::Ok }, passed)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::types::{Code, DescriptorStatus};

    fn st(code: Code) -> DescriptorStatus {
        DescriptorStatus {
            code,
            ..DescriptorStatus::default()
        }
    }

    /// Quota mode: a refused quota descriptor refuses the request only when
    /// every descriptor of the request refuses, and is reported as OK.
    #[test]
    fn quota_mode_rules() {
        use Code::{Ok as K, OverLimit as O};
        let c = Disposition::Checked;
        let cases: [(&[Code], &[bool], Code); 6] = [
            (&[O, O], &[true, true], O),
            (&[O, K], &[true, true], K),
            (&[O, K], &[false, true], O),
            (&[K, O], &[false, true], O),
            (&[K, K], &[false, true], K),
            (&[O, K], &[false, false], O),
        ];
        for (codes, quota, want) in cases {
            let statuses: Vec<_> = codes.iter().map(|&c| st(c)).collect();
            let (got, _) = overall_code(&statuses, &[c, c], quota);
            assert_eq!(got, want, "{codes:?} {quota:?}");
        }
    }

    #[test]
    fn unlimited_descriptors_are_skipped_and_never_pass() {
        let statuses = [st(Code::Ok), st(Code::Ok)];
        let (code, passed) = overall_code(
            &statuses,
            &[Disposition::Unlimited, Disposition::Checked],
            &[true, true],
        );
        assert_eq!(code, Code::Ok);
        assert_eq!(passed, vec![1]);
    }
}
