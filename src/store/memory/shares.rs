//! How a full shard of the memory store makes room: its capacity is shared
//! between the rules that hold keys in it, so that one rule's flood of new
//! keys takes only its own part.
//!
//! A shard keeps, per rule (its [`RuleId`]), how many keys it holds there
//! and the order in which they were added. When a new key finds the shard
//! full (after its expired keys are gone), the rule that holds the **most**
//! keys in the shard gives up its least recently used one, the inserting
//! rule first among equals. "Least recently used" is the second-chance
//! (CLOCK) approximation: a key hit again since it was last passed over
//! goes to the back of its rule's order once, so a flood's keys (hit once)
//! make way before the keys of the same rule that its real clients keep
//! using. So:
//!
//! - a rule is only ever evicted while it holds the most keys of its
//!   shard: with `n` rules holding keys there, one that holds fewer than
//!   `capacity / n` of them is never evicted (max-min fair: a rule that
//!   needs little keeps all of it, the floods share what is left equally);
//! - a flooding rule's own oldest keys make way for its new ones, and an
//!   evicted key starts again from nothing: within its window it may admit
//!   its limit once more, so a rule admits at most its limit once more per
//!   eviction of one of its keys (the `evictions` statistic).
//!
//! Keys hash uniformly into the 64 shards, so per-shard shares are the
//! store's shares within the spread of a hash. All of it runs under the
//! shard's lock the work already holds; nothing is scanned on a request
//! that adds no key to a full shard.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

use crate::config::tree::RuleId;

/// What a key keeps of its rule: 32 bits of the rule's hash (two rules
/// whose hashes agree there would share one share, with probability about
/// rules² / 2³³).
pub(super) type Owner = u32;

/// The owner of a key no rule was named for.
pub(super) const UNOWNED: Owner = 0;

/// The owner a store keeps for `rule`.
pub(super) fn owner_hash(rule: Option<&RuleId>) -> Owner {
    rule.map_or(UNOWNED, |r| {
        let h = r.hash();
        (h ^ (h >> 32)) as u32
    })
}

/// What a shard says of a key its rule's order names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Seen {
    /// No longer the rule's (expired, or added again for another rule).
    Gone,
    /// Hit since it was last passed over: its mark is cleared, and it is
    /// kept for another round.
    Used,
    /// Not hit since: it may go.
    Unused,
}

/// One rule's keys in one shard.
#[derive(Debug)]
pub(super) struct Holding {
    /// The rule's load key.
    pub(super) name: Arc<str>,
    /// Keys it holds in the shard.
    pub(super) held: usize,
    /// Its keys, oldest first; some may have gone since (expired, or
    /// re-added under another rule), which [`CapShares::oldest_of`] skips.
    order: VecDeque<u128>,
    /// Its keys evicted from the shard so far.
    pub(super) evictions: u64,
}

/// Every rule's holdings in one shard.
#[derive(Debug, Default)]
pub(super) struct CapShares {
    pub(super) by_rule: HashMap<Owner, Holding>,
}

impl CapShares {
    /// Key `id` of `owner` was added.
    pub(super) fn added(&mut self, id: u128, owner: Option<&RuleId>) {
        let h = self
            .by_rule
            .entry(owner_hash(owner))
            .or_insert_with(|| Holding {
                name: owner.map_or_else(|| Arc::from("unowned"), |o| Arc::clone(o.name())),
                held: 0,
                order: VecDeque::new(),
                evictions: 0,
            });
        h.held += 1;
        h.order.push_back(id);
    }

    /// A key of the rule hashed `owner` is gone (expired or evicted).
    pub(super) fn removed(&mut self, owner: Owner) {
        if let Some(h) = self.by_rule.get_mut(&owner) {
            h.held = h.held.saturating_sub(1);
        }
    }

    /// The rule that gives up a key for a new one of `inserting`: the one
    /// that holds the most, `inserting` first among equals. `None` when no
    /// rule holds a key.
    pub(super) fn victim(&self, inserting: Owner) -> Option<Owner> {
        self.by_rule
            .iter()
            .filter(|(_, h)| h.held > 0)
            .max_by_key(|(&rule, h)| (h.held, rule == inserting))
            .map(|(&rule, _)| rule)
    }

    /// Takes the least recently used key of `rule` (the oldest that
    /// `seen(id)` finds [`Seen::Unused`]; a [`Seen::Used`] one, whose mark
    /// `seen` clears, goes to the back), counting it evicted; `None` if it
    /// has none left. At most two rounds of its order.
    pub(super) fn oldest_of(
        &mut self,
        rule: Owner,
        mut seen: impl FnMut(u128) -> Seen,
    ) -> Option<u128> {
        let h = self.by_rule.get_mut(&rule)?;
        let mut rounds = 2 * h.order.len() + 1;
        while let Some(id) = h.order.pop_front() {
            match seen(id) {
                Seen::Gone => {}
                Seen::Used if rounds > 0 => h.order.push_back(id),
                Seen::Used | Seen::Unused => {
                    h.held = h.held.saturating_sub(1);
                    h.evictions += 1;
                    return Some(id);
                }
            }
            rounds = rounds.saturating_sub(1);
        }
        None
    }

    /// Forgets the order entries of keys that `present` no longer finds,
    /// and the rules that hold nothing and never evicted (a sweep).
    pub(super) fn compact(&mut self, present: impl Fn(u128) -> bool) {
        for h in self.by_rule.values_mut() {
            if h.order.len() > h.held.saturating_mul(2) + 16 {
                h.order.retain(|&id| present(id));
            }
            if h.order.capacity() > 4 * h.order.len() + 64 {
                h.order.shrink_to_fit();
            }
        }
        self.by_rule.retain(|_, h| h.held > 0 || h.evictions > 0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_largest_holder_gives_way_the_inserting_rule_first_among_equals() {
        let (a, b) = (RuleId::new("d.a"), RuleId::new("d.b"));
        let mut s = CapShares::default();
        for id in 0..6 {
            s.added(id, Some(&a));
        }
        for id in 10..12 {
            s.added(id, Some(&b));
        }
        // b (2 keys) inserting: a (6) gives way, its oldest first.
        assert_eq!(s.victim(owner_hash(Some(&b))), Some(owner_hash(Some(&a))));
        assert_eq!(s.oldest_of(owner_hash(Some(&a)), |_| Seen::Unused), Some(0));
        // a inserting: a still holds the most, so its own oldest goes.
        assert_eq!(s.victim(owner_hash(Some(&a))), Some(owner_hash(Some(&a))));
        // Equal holdings: the inserting rule first.
        let mut eq = CapShares::default();
        eq.added(1, Some(&a));
        eq.added(2, Some(&b));
        assert_eq!(eq.victim(owner_hash(Some(&a))), Some(owner_hash(Some(&a))));
        assert_eq!(eq.victim(owner_hash(Some(&b))), Some(owner_hash(Some(&b))));
        assert_eq!(CapShares::default().victim(owner_hash(Some(&a))), None);
    }

    #[test]
    fn keys_gone_since_are_skipped() {
        let a = RuleId::new("d.a");
        let mut s = CapShares::default();
        for id in 0..3 {
            s.added(id, Some(&a));
        }
        s.removed(owner_hash(Some(&a)));
        let seen = |id| if id == 0 { Seen::Gone } else { Seen::Unused };
        assert_eq!(
            s.oldest_of(owner_hash(Some(&a)), seen),
            Some(1),
            "0 had expired"
        );
        assert_eq!(s.by_rule[&owner_hash(Some(&a))].held, 1);
        assert_eq!(s.by_rule[&owner_hash(Some(&a))].evictions, 1);
    }

    #[test]
    fn a_key_hit_again_gets_a_second_chance() {
        let a = RuleId::new("d.a");
        let mut s = CapShares::default();
        for id in 0..4 {
            s.added(id, Some(&a));
        }
        // 0 and 1 were hit again: 2 goes first, then 3, then 0 (its mark
        // cleared on the first pass).
        let mut used: std::collections::HashSet<u128> = [0, 1].into();
        let mut seen = |id| {
            if used.remove(&id) {
                Seen::Used
            } else {
                Seen::Unused
            }
        };
        assert_eq!(s.oldest_of(owner_hash(Some(&a)), &mut seen), Some(2));
        assert_eq!(s.oldest_of(owner_hash(Some(&a)), &mut seen), Some(3));
        assert_eq!(s.oldest_of(owner_hash(Some(&a)), &mut seen), Some(0));
        // Every key always used: still one goes, after two rounds.
        let mut always = |_| Seen::Used;
        assert_eq!(s.oldest_of(owner_hash(Some(&a)), &mut always), Some(1));
    }

    proptest::proptest! {
        /// Under any mix of inserts into a full shard, a rule that holds
        /// fewer than capacity / rules keys is never evicted.
        #[test]
        fn a_rule_below_its_fair_share_is_never_evicted(
            inserts in proptest::collection::vec(0u8..4, 1..400),
        ) {
            let rules: Vec<RuleId> = (0..4).map(|i| RuleId::new(&format!("d.r{i}"))).collect();
            let capacity = 20usize;
            let mut s = CapShares::default();
            let mut keys: HashMap<u128, Owner> = HashMap::new();
            for (n, r) in inserts.into_iter().enumerate() {
                let rule = &rules[usize::from(r)];
                if keys.len() >= capacity {
                    let holders = s.by_rule.values().filter(|h| h.held > 0).count()
                        + usize::from(s.by_rule.get(&owner_hash(Some(rule))).is_none_or(|h| h.held == 0));
                    let victim = s.victim(owner_hash(Some(rule))).expect("a full shard has holders");
                    let held = s.by_rule[&victim].held;
                    proptest::prop_assert!(held * holders >= capacity, "evicted {held} of {capacity} with {holders} rules");
                    let seen = |id| if keys.get(&id) == Some(&victim) { Seen::Unused } else { Seen::Gone };
                    let id = s.oldest_of(victim, seen).expect("a key");
                    keys.remove(&id);
                }
                let id = n as u128 + 1_000;
                keys.insert(id, owner_hash(Some(rule)));
                s.added(id, Some(rule));
            }
        }
    }
}
