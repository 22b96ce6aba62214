//! Request-level post-processing of matched limits: `unlimited` and
//! `replaces` (config-and-matching.md §5.7–5.8). Pure.

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
            if !l.rule.name.is_empty() && replacing.contains(&l.rule.name.as_str()) {
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
