//! The fixed-window cache key, byte-identical to the original's
//! (runtime.md §4.2, config-and-matching.md §5.10), so that an old and a new
//! instance on one Redis share counters.
//!
//! `prefix · domain · "_" · Σ (key · "_" · (pattern or value) · "_") · window_start`
//!
//! The parts are joined with `_` without escaping, so distinct descriptors
//! can share a counter (`[(a,"b_c_d")]` and `[(a,"b"),(c,"d")]`); that is the
//! original's format and must stay for compatibility.

use crate::config::Entry;

/// The key of the window that starts at `window_start` (unix seconds,
/// a multiple of the window length). `pattern`, from `share_threshold`, gives
/// per entry a pattern that replaces the value, or "" to keep the value.
pub fn fixed_window_key(
    prefix: &str,
    domain: &str,
    entries: &[Entry],
    pattern: Option<&[String]>,
    window_start: u64,
) -> String {
    let mut key = String::with_capacity(
        prefix.len()
            + domain.len()
            + 24
            + entries
                .iter()
                .map(|e| e.key.len() + e.value.len() + 2)
                .sum::<usize>(),
    );
    key.push_str(prefix);
    key.push_str(domain);
    key.push('_');
    for (i, e) in entries.iter().enumerate() {
        key.push_str(&e.key);
        key.push('_');
        match pattern.and_then(|p| p.get(i)).filter(|p| !p.is_empty()) {
            Some(p) => key.push_str(p),
            None => key.push_str(&e.value),
        }
        key.push('_');
    }
    key.push_str(&window_start.to_string());
    key
}

/// The start of the window of `unit_seconds` that contains `now`.
pub fn window_start(now: u64, unit_seconds: u64) -> u64 {
    now - now % unit_seconds.max(1)
}
