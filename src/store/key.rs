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
    let mut key = with_capacity(prefix, domain, entries, 24);
    key.push_str(prefix);
    push_descriptor(&mut key, domain, entries, pattern);
    key.push_str(&window_start.to_string());
    key
}

/// The key of one opt-in limit of a descriptor:
/// `prefix · "rl2:{" · <the original's descriptor part> · "}:" · suffix`,
/// where `suffix` (`<algorithm>:<window>s`) tells the descriptor's limits
/// apart. Versioned (`rl2`) so that it never meets a fixed-window counter of
/// the original, and hash-tagged (`{…}`) so that every limit of one
/// descriptor is on one Redis Cluster slot: the tag is the text between the
/// first `{` and the next `}`, which the descriptor's keys share whatever
/// the prefix, domain or values contain, since they agree up to the `}`
/// written here.
pub fn algorithm_key(
    prefix: &str,
    domain: &str,
    entries: &[Entry],
    pattern: Option<&[String]>,
    suffix: &str,
) -> String {
    let mut key = with_capacity(prefix, domain, entries, 8 + suffix.len());
    key.push_str(prefix);
    key.push_str("rl2:{");
    push_descriptor(&mut key, domain, entries, pattern);
    key.push_str("}:");
    key.push_str(suffix);
    key
}

fn with_capacity(prefix: &str, domain: &str, entries: &[Entry], extra: usize) -> String {
    String::with_capacity(
        prefix.len()
            + domain.len()
            + extra
            + entries
                .iter()
                .map(|e| e.key.len() + e.value.len() + 2)
                .sum::<usize>(),
    )
}

/// `domain · "_" · Σ (key · "_" · (pattern or value) · "_")`.
fn push_descriptor(key: &mut String, domain: &str, entries: &[Entry], pattern: Option<&[String]>) {
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
}

/// The start of the window of `unit_seconds` that contains `now`.
pub fn window_start(now: u64, unit_seconds: u64) -> u64 {
    now - now % unit_seconds.max(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn algorithm_keys_are_versioned_and_share_a_slot_per_descriptor() {
        let entries = [Entry::new("user", "a}b{c"), Entry::new("path", "/x")];
        let tb = algorithm_key("p{x:", "d", &entries, None, "tb:1s");
        let sw = algorithm_key("p{x:", "d", &entries, None, "sw:86400s");
        assert_eq!(tb, "p{x:rl2:{d_user_a}b{c_path_/x_}:tb:1s");
        assert_eq!(
            fred::util::redis_keyslot(tb.as_bytes()),
            fred::util::redis_keyslot(sw.as_bytes())
        );
        let plain = [Entry::new("k", "v")];
        assert_eq!(
            algorithm_key("", "d", &plain, None, "sl:60s"),
            "rl2:{d_k_v_}:sl:60s"
        );
        assert_eq!(
            fred::util::redis_keyslot(algorithm_key("", "d", &plain, None, "sl:60s").as_bytes()),
            fred::util::redis_keyslot(b"d_k_v_"),
            "the slot is the descriptor's"
        );
        let shared = [String::from("*")];
        assert_eq!(
            algorithm_key("", "d", &plain, Some(&shared), "tb:1s"),
            "rl2:{d_k_*_}:tb:1s"
        );
    }
}
