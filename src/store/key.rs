//! The fixed-window cache key, byte-identical to the original's,
//! so that an old and a new
//! instance on one Redis share counters.
//!
//! `prefix · domain · "_" · Σ (key · "_" · (pattern or value) · "_") · window_start`
//!
//! The parts are joined with `_` without escaping, so distinct descriptors
//! can share a counter (`[(a,"b_c_d")]` and `[(a,"b"),(c,"d")]`); that is the
//! original's format and must stay for compatibility.

use crate::config::Entry;
use crate::limiter::CalendarUnit;

/// One descriptor's part of every key it has (`domain · "_" · Σ (key ·
/// "_" · (pattern or value) · "_")`), built once per descriptor of a
/// request: every key of the descriptor's limits, windows, sub-buckets and
/// audit references is this text with a prefix and a suffix, so building it
/// once is the only walk over the request's entries.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct DescriptorKey {
    descriptor: String,
}

impl DescriptorKey {
    /// The descriptor part of `entries` in `domain`. `pattern`, from
    /// `share_threshold`, gives per entry a pattern that replaces the
    /// value, or "" to keep the value.
    pub fn new(domain: &str, entries: &[Entry], pattern: Option<&[String]>) -> DescriptorKey {
        let mut descriptor = String::with_capacity(
            domain.len()
                + 1
                + entries
                    .iter()
                    .map(|e| e.key.len() + e.value.len() + 2)
                    .sum::<usize>(),
        );
        descriptor.push_str(domain);
        descriptor.push('_');
        for (i, e) in entries.iter().enumerate() {
            descriptor.push_str(&e.key);
            descriptor.push('_');
            match pattern.and_then(|p| p.get(i)).filter(|p| !p.is_empty()) {
                Some(p) => descriptor.push_str(p),
                None => descriptor.push_str(&e.value),
            }
            descriptor.push('_');
        }
        DescriptorKey { descriptor }
    }

    /// The descriptor part itself: two descriptors with the same text share
    /// every counter (the original's joining), so they are one key.
    pub fn as_str(&self) -> &str {
        &self.descriptor
    }

    /// `before · descriptor · after`, allocated once.
    fn joined(&self, before: &[&str], after: &[&str]) -> String {
        let len =
            self.descriptor.len() + before.iter().chain(after).map(|p| p.len()).sum::<usize>();
        let mut key = String::with_capacity(len);
        before.iter().for_each(|p| key.push_str(p));
        key.push_str(&self.descriptor);
        after.iter().for_each(|p| key.push_str(p));
        key
    }

    /// The key of the original's window that starts at `window_start` (unix
    /// seconds, a multiple of the window length): `prefix · descriptor ·
    /// window_start`, byte-identical to the original's.
    pub fn fixed_window(&self, prefix: &str, window_start: u64) -> String {
        self.joined(&[prefix], &[&window_start.to_string()])
    }

    /// The key of one opt-in limit of the descriptor:
    /// `prefix · "rl2:{" · descriptor · "}:" · suffix`, where `suffix`
    /// (`<algorithm>:<window>s`) tells the descriptor's limits apart.
    /// Versioned (`rl2`) so that it never meets a fixed-window counter of
    /// the original, and hash-tagged (`{…}`) so that every limit of one
    /// descriptor is on one Redis Cluster slot: the tag is the text between
    /// the first `{` and the next `}`, which the descriptor's keys share
    /// whatever the prefix, domain or values contain, since they agree up to
    /// the `}` written here.
    pub fn algorithm(&self, prefix: &str, suffix: &str) -> String {
        self.joined(&[prefix, "rl2:{"], &["}:", suffix])
    }

    /// The key of one calendar period's counter: [`DescriptorKey::algorithm`]
    /// with the suffix `cal:<unit>:<period start>`, e.g.
    /// `rl2:{d_k_v_}:cal:month:1764547200`. It names its period, as the
    /// original's key names its window, and never meets one of the
    /// original's keys (`rl2:`), so a calendar rule and an epoch-aligned rule
    /// of the same unit keep separate counts.
    pub fn calendar(&self, prefix: &str, unit: CalendarUnit, period_start: u64) -> String {
        self.algorithm(prefix, &format!("cal:{unit}:{period_start}"))
    }

    /// The key of the decision audit's reference of one limit:
    /// [`DescriptorKey::algorithm`] with the suffix `audit:<suffix>`, one per
    /// descriptor and limit whatever its window or sub-bucket, so that it
    /// sees every request of the logical limit. It keeps `rl2:{`, so it
    /// shares the limit's hash tag whatever the prefix holds: on Redis
    /// Cluster it sits on the slot of the limit's own key (and, without a `{`
    /// in the prefix, of sub-bucket 0 of a sharded one).
    pub fn reference(&self, prefix: &str, suffix: &str) -> String {
        self.algorithm(prefix, &format!("audit:{suffix}"))
    }

    /// The key of sub-bucket `i` of `k` of one opt-in limit (`shards: k`):
    /// `prefix · "rl2s:{" · tag · "}:" · descriptor · ":" · suffix · ":" · i ·
    /// "/" · k`. The hash tag is chosen so that the sub-buckets of one
    /// descriptor sit on `k` slots spaced `16384 / k` apart (rounded down),
    /// starting from the slot of the descriptor itself: Redis Cluster
    /// primaries own contiguous slot ranges, so the sub-buckets spread over
    /// the primaries by construction. (A `prefix` that itself holds a `{…}`
    /// fixes the slot and defeats the spread.) Sub-buckets of one
    /// descriptor's limits with the same `k` and `i` share a slot, so they
    /// are still decided in one script.
    pub fn sub_bucket(&self, prefix: &str, suffix: &str, i: u8, k: u8) -> String {
        let slot = sub_bucket_slot(fred::util::redis_keyslot(self.descriptor.as_bytes()), i, k);
        let tail = format!(":{suffix}:{i}/{k}");
        self.joined(&[prefix, "rl2s:{", slot_tag(slot), "}:"], &[&tail])
    }

    /// The key of an RLQS demand board (see [`crate::store::board`]), one
    /// per quota: `prefix · "rlqs:{" · descriptor · "}"`, a hash of the lines
    /// of every Envoy bucket that draws from it. Its own namespace
    /// (`rlqs:`), so it never meets a counter; hash-tagged, so one board is
    /// one Redis Cluster slot.
    pub fn board(&self, prefix: &str) -> String {
        self.joined(&[prefix, "rlqs:{"], &["}"])
    }
}

/// [`DescriptorKey::fixed_window`] of one descriptor.
pub fn fixed_window_key(
    prefix: &str,
    domain: &str,
    entries: &[Entry],
    pattern: Option<&[String]>,
    window_start: u64,
) -> String {
    DescriptorKey::new(domain, entries, pattern).fixed_window(prefix, window_start)
}

/// [`DescriptorKey::algorithm`] of one descriptor.
pub fn algorithm_key(
    prefix: &str,
    domain: &str,
    entries: &[Entry],
    pattern: Option<&[String]>,
    suffix: &str,
) -> String {
    DescriptorKey::new(domain, entries, pattern).algorithm(prefix, suffix)
}

/// [`DescriptorKey::board`] of one quota's descriptor.
pub fn board_key(prefix: &str, domain: &str, entries: &[Entry]) -> String {
    DescriptorKey::new(domain, entries, None).board(prefix)
}

/// [`DescriptorKey::calendar`] of one descriptor.
pub fn calendar_key(
    prefix: &str,
    domain: &str,
    entries: &[Entry],
    pattern: Option<&[String]>,
    unit: CalendarUnit,
    period_start: u64,
) -> String {
    DescriptorKey::new(domain, entries, pattern).calendar(prefix, unit, period_start)
}

/// [`DescriptorKey::reference`] of one descriptor.
pub fn reference_key(
    prefix: &str,
    domain: &str,
    entries: &[Entry],
    pattern: Option<&[String]>,
    suffix: &str,
) -> String {
    DescriptorKey::new(domain, entries, pattern).reference(prefix, suffix)
}

/// [`DescriptorKey::sub_bucket`] of one descriptor.
pub fn sub_bucket_key(
    prefix: &str,
    domain: &str,
    entries: &[Entry],
    pattern: Option<&[String]>,
    suffix: &str,
    i: u8,
    k: u8,
) -> String {
    DescriptorKey::new(domain, entries, pattern).sub_bucket(prefix, suffix, i, k)
}

/// Redis Cluster's slot count.
pub const SLOTS: u16 = 16384;

/// The slot of sub-bucket `i` of `k` for a descriptor on slot `base`.
pub fn sub_bucket_slot(base: u16, i: u8, k: u8) -> u16 {
    let step = u32::from(SLOTS) / u32::from(k.max(1));
    let slot = (u32::from(base) + u32::from(i) * step) % u32::from(SLOTS);
    // < 16384.
    u16::try_from(slot).unwrap_or(0)
}

/// A short hash tag whose slot is `slot`: the first string over
/// `[0-9a-z]`, shortest first, that hashes there. Found once for all
/// 16384 slots (every slot has one of at most four characters).
pub fn slot_tag(slot: u16) -> &'static str {
    static TAGS: std::sync::OnceLock<Vec<String>> = std::sync::OnceLock::new();
    let tags = TAGS.get_or_init(|| {
        const ALPHABET: &[u8] = b"0123456789abcdefghijklmnopqrstuvwxyz";
        let mut tags = vec![String::new(); usize::from(SLOTS)];
        let mut missing = usize::from(SLOTS);
        let mut tag = Vec::with_capacity(4);
        'lengths: for len in 1..=4u32 {
            for n in 0..ALPHABET.len().pow(len) {
                tag.clear();
                let mut m = n;
                for _ in 0..len {
                    tag.push(ALPHABET[m % ALPHABET.len()]);
                    m /= ALPHABET.len();
                }
                let s = usize::from(fred::util::redis_keyslot(&tag));
                if tags[s].is_empty() {
                    tags[s] = String::from_utf8_lossy(&tag).into_owned();
                    missing -= 1;
                    if missing == 0 {
                        break 'lengths;
                    }
                }
            }
        }
        tags
    });
    tags.get(usize::from(slot)).map_or("", String::as_str)
}

/// The start of the window of `unit_seconds` that contains `now`.
pub fn window_start(now: u64, unit_seconds: u64) -> u64 {
    now - now % unit_seconds.max(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_slot_has_a_tag_that_hashes_to_it() {
        for slot in 0..SLOTS {
            let tag = slot_tag(slot);
            assert!(!tag.is_empty() && tag.len() <= 4, "slot {slot}");
            assert_eq!(fred::util::redis_keyslot(tag.as_bytes()), slot);
        }
    }

    #[test]
    fn sub_buckets_sit_on_evenly_spaced_slots() {
        let entries = [Entry::new("tenant", "big")];
        for k in [2u8, 3, 8, 16, 64] {
            let slots: Vec<u16> = (0..k)
                .map(|i| {
                    let key = sub_bucket_key("p_", "d", &entries, None, "fw:60s", i, k);
                    assert!(
                        key.starts_with("p_rl2s:{") && key.ends_with(&format!(":fw:60s:{i}/{k}"))
                    );
                    fred::util::redis_keyslot(key.as_bytes())
                })
                .collect();
            let base = fred::util::redis_keyslot(b"d_tenant_big_");
            assert_eq!(
                slots[0], base,
                "sub-bucket 0 is on the descriptor's own slot"
            );
            let step = SLOTS / u16::from(k);
            for w in 0..usize::from(k) {
                let next = slots[(w + 1) % usize::from(k)];
                let gap = (next + SLOTS - slots[w]) % SLOTS;
                if w + 1 < usize::from(k) {
                    assert_eq!(gap, step, "k={k}");
                } else {
                    assert!(
                        gap >= step && gap < step + u16::from(k),
                        "k={k}: wrap gap {gap}"
                    );
                }
            }
        }
    }

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

    #[test]
    fn a_board_key_is_its_descriptor_hash_tagged_in_its_own_namespace() {
        let entries = [Entry::new("tenant", "beta"), Entry::new("route", "api")];
        let key = board_key("p_", "rlqs", &entries);
        assert_eq!(key, "p_rlqs:{rlqs_tenant_beta_route_api_}");
        assert_eq!(
            fred::util::redis_keyslot(key.as_bytes()),
            fred::util::redis_keyslot(b"rlqs_tenant_beta_route_api_")
        );
    }

    #[test]
    fn a_calendar_key_names_its_period_and_shares_the_descriptors_slot() {
        let plain = [Entry::new("k", "v")];
        let key = calendar_key("p_", "d", &plain, None, CalendarUnit::Month, 1_764_547_200);
        assert_eq!(key, "p_rl2:{d_k_v_}:cal:month:1764547200");
        assert_eq!(
            fred::util::redis_keyslot(key.as_bytes()),
            fred::util::redis_keyslot(algorithm_key("p_", "d", &plain, None, "fw:60s").as_bytes())
        );
        assert_ne!(
            key,
            fixed_window_key("p_", "d", &plain, None, 1_764_547_200),
            "never the original's key"
        );
    }

    #[test]
    fn a_reference_key_is_versioned_and_on_its_limits_slot() {
        let slot = |k: &str| fred::util::redis_keyslot(k.as_bytes());
        for (prefix, entries) in [
            ("", vec![Entry::new("k", "v")]),
            (
                "p{x:",
                vec![Entry::new("user", "a}b{c"), Entry::new("path", "/x")],
            ),
        ] {
            let reference = reference_key(prefix, "d", &entries, None, "fw:60s");
            assert!(reference.ends_with("}:audit:fw:60s"));
            assert_eq!(
                slot(&reference),
                slot(&algorithm_key(prefix, "d", &entries, None, "fw:60s"))
            );
        }
        let plain = [Entry::new("k", "v")];
        let reference = reference_key("", "d", &plain, None, "ow:60s");
        assert_eq!(reference, "rl2:{d_k_v_}:audit:ow:60s");
        assert_eq!(
            slot(&sub_bucket_key("", "d", &plain, None, "ow:60s", 0, 4)),
            slot(&reference),
            "sub-bucket 0 sits on the reference's slot"
        );
    }
}
