//! The script's argument layout: how one node's part of a work becomes a
//! group of `limits.lua`'s ARGV (the layout is described at the top of the
//! script), how groups of concurrent requests share one call's arguments,
//! and how a group's rows of the reply become decisions.

use std::time::Duration;

use fred::types::Value;

use crate::limiter::Decision;
use crate::store::{Decided, Item, Limit, NodeId, StoreError, StoreErrorKind};

/// Which script call serves a key: its hash slot's (slot 0 off a
/// cluster), or, on a cluster that runs the per-node script, its primary's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Route {
    Slot(u16),
    Primary(NodeId),
}

/// A count as a script argument (Redis integers are signed).
pub(super) fn int(n: u64) -> Value {
    Value::Integer(i64::try_from(n).unwrap_or(i64::MAX))
}

/// Fields per item in ARGV, and per counter in a compact group.
pub(super) const FIELDS: usize = 6;
const COUNTER_FIELDS: usize = 3;
/// Values the script answers for a counter, and for any other item.
pub(super) const COUNTER_REPLY: usize = 1;
pub(super) const ITEM_REPLY: usize = 5;

/// Which script call serves a group of items: on which deployment (the
/// per-second Redis or the main one) and route, and whether its counts must
/// reach a replica before they are answered (such calls go over a lane of
/// their own: see `Node::replicated`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Destination {
    pub(super) per_second: bool,
    pub(super) route: Route,
    pub(super) replicated: bool,
}

/// One script call's worth of a work's items.
pub(super) struct Part<'a> {
    pub(super) to: Destination,
    pub(super) positions: Vec<usize>,
    pub(super) items: &'a [Item],
}

impl Part<'_> {
    /// The script group for `mode` over this part's items (or `only` of
    /// them), with `cost(i)` as item `i`'s cost.
    pub(super) fn group(
        &self,
        mode: &'static str,
        nonce: &str,
        taken_at: u64,
        only: Option<&[usize]>,
        cost: impl Fn(usize) -> u64,
    ) -> Group {
        let positions: &[usize] = only.unwrap_or(&self.positions);
        if self.is_compact(mode, positions) {
            return self.counters(positions, cost);
        }
        let mut args = Vec::with_capacity(4 + FIELDS * positions.len());
        args.extend([
            Value::from_static_str(mode),
            Value::from(nonce),
            int(taken_at),
            int(positions.len() as u64),
        ]);
        let mut reply_len = 2;
        for &i in positions {
            let c = &self.items[i];
            let (kind, limit, period, burst) = fields(&c.limit);
            let flag = match (&c.limit, c.binding) {
                // A give-back, whatever it is.
                _ if c.gives_back() => 2,
                // -(j + 1) for a counter subject, the group's 1-based item
                // j; -1 for the commit.
                (Limit::Reference { subject, .. }, _) => {
                    let j = subject
                        .filter(|&s| matches!(self.items[s].limit, Limit::Counter(_)))
                        .and_then(|s| positions.iter().position(|&p| p == s))
                        .map_or(0, |j| j as i64 + 1);
                    -(j + 1)
                }
                (_, true) => 1,
                (_, false) => 0,
            };
            args.extend([
                Value::from_static_str(kind),
                int(limit),
                int(period),
                int(burst),
                int(cost(i)),
                Value::Integer(flag),
            ]);
            reply_len += if kind == "oc" {
                COUNTER_REPLY
            } else {
                ITEM_REPLY
            };
        }
        Group {
            keys: self.keys(positions),
            args: GroupArgs::Listed(args),
            reply_len,
            deadline: None,
        }
    }

    /// The keys of the items at `positions`, in order.
    fn keys(&self, positions: &[usize]) -> Vec<String> {
        positions
            .iter()
            .map(|&i| self.items[i].key.clone())
            .collect()
    }

    /// Whether the group for `mode` over `positions` is a compact one: the
    /// original's counters alone, none giving back, in a mode that counts them without STOP
    /// (commit or decide). Such a group needs no decision in Redis, only
    /// the increments; [`Part::compact_commits`] decides it from the values.
    pub(super) fn is_compact(&self, mode: &str, positions: &[usize]) -> bool {
        matches!(mode, "commit" | "decide")
            && positions.iter().all(|&i| {
                let item = &self.items[i];
                matches!(item.limit, Limit::Counter(_)) && !item.gives_back()
            })
    }

    /// The compact group: the one cost, TTL and jitter bound of all its
    /// counters (a request's counters on a node usually share all three),
    /// or else `count`, `n`, then per counter its own. The script answers
    /// each counter's value after, and nothing else.
    fn counters(&self, positions: &[usize], cost: impl Fn(usize) -> u64) -> Group {
        let counter_args = |i: usize| {
            let (_, _, ttl, jitter) = fields(&self.items[i].limit);
            CounterArgs {
                cost: cost(i),
                ttl,
                jitter,
            }
        };
        let shared = positions
            .first()
            .map(|&i| counter_args(i))
            .filter(|&first| positions.iter().all(|&i| counter_args(i) == first));
        let args = match shared {
            Some(shared) => GroupArgs::SameCounters(shared),
            None => {
                let mut args = Vec::with_capacity(2 + COUNTER_FIELDS * positions.len());
                args.extend([Value::from_static_str("count"), int(positions.len() as u64)]);
                for &i in positions {
                    args.extend(counter_args(i).args());
                }
                GroupArgs::Listed(args)
            }
        };
        Group {
            keys: self.keys(positions),
            args,
            reply_len: COUNTER_REPLY * positions.len(),
            deadline: None,
        }
    }

    /// Whether a compact group under `mode` committed, from its counters'
    /// `values` after: in commit mode, iff no binding counter passed its
    /// limit (the counters count either way, as the original's do).
    pub(super) fn compact_commits(&self, mode: &str, values: &[i64]) -> bool {
        mode == "commit"
            && self.positions.iter().zip(values).all(|(&i, &v)| {
                let item = &self.items[i];
                match &item.limit {
                    Limit::Counter(w) if item.binding => w.admits(v.max(0).unsigned_abs()),
                    _ => true,
                }
            })
    }
}

/// One request's items on one node, as one group of a script call.
#[derive(Debug)]
pub(super) struct Group {
    keys: Vec<String>,
    args: GroupArgs,
    /// How many values the script answers for it.
    reply_len: usize,
    /// When its request stops waiting for the call: a replicated lane's
    /// `WAIT` gives up before the earliest of its groups' deadlines.
    pub(super) deadline: Option<tokio::time::Instant>,
}

impl Group {
    /// How many keys it holds.
    pub(super) fn len(&self) -> usize {
        self.keys.len()
    }
}

/// What the script needs of a counter besides its key: the increment, and
/// the TTL (s) and jitter bound (s) it draws the key's expiry from when the
/// increment creates the key.
#[derive(Debug, Clone, Copy, PartialEq)]
struct CounterArgs {
    cost: u64,
    ttl: u64,
    jitter: u64,
}

impl CounterArgs {
    fn args(self) -> [Value; COUNTER_FIELDS] {
        [int(self.cost), int(self.ttl), int(self.jitter)]
    }
}

/// A group's arguments, after the keys.
#[derive(Debug, PartialEq)]
enum GroupArgs {
    /// Counters alone, sharing one [`CounterArgs`]: sent as the script's
    /// `count-same`, `n`, cost, TTL, jitter, one such header for a run of
    /// these groups with the same one (see [`CallArgs`]).
    SameCounters(CounterArgs),
    /// Any other group, as the script reads it: `mode, nonce, taken-at
    /// time, n`, then the items' fields, or a `count` group.
    Listed(Vec<Value>),
}

/// One script call's keys, arguments and answer sizes, from its groups in
/// order. Consecutive counter groups with the same [`CounterArgs`] (the
/// common case when many requests' counters are coalesced into one call)
/// become one `count-same` group of the script: its answer, a value per
/// counter in key order, is the groups' answers one after another, so it
/// still splits back by their sizes; the call sends one header for the run
/// instead of one per group.
#[derive(Debug)]
pub(super) struct CallArgs {
    pub(super) keys: Vec<String>,
    /// The script's group count, then its groups.
    pub(super) args: Vec<Value>,
    /// Per group given, how many values of the answer are its.
    pub(super) sizes: Vec<usize>,
}

impl CallArgs {
    pub(super) fn new(groups: Vec<Group>) -> CallArgs {
        let n_keys: usize = groups.iter().map(|g| g.keys.len()).sum();
        let n_args: usize = groups
            .iter()
            .map(|g| match &g.args {
                GroupArgs::SameCounters(_) => 2 + COUNTER_FIELDS,
                GroupArgs::Listed(args) => args.len(),
            })
            .sum();
        let mut keys = Vec::with_capacity(n_keys);
        let mut sizes = Vec::with_capacity(groups.len());
        let mut args = Vec::with_capacity(1 + n_args);
        args.push(Value::Null);
        let mut script_groups = 0u64;
        // The open `count-same` run: where its `n` sits, its arguments, its `n`.
        let mut run: Option<(usize, CounterArgs, u64)> = None;
        for g in groups {
            let n = g.keys.len() as u64;
            keys.extend(g.keys);
            sizes.push(g.reply_len);
            match g.args {
                GroupArgs::SameCounters(shared) => match &mut run {
                    Some((at, same, count)) if *same == shared => {
                        *count += n;
                        args[*at] = int(*count);
                    }
                    _ => {
                        args.push(Value::from_static_str("count-same"));
                        run = Some((args.len(), shared, n));
                        args.push(int(n));
                        args.extend(shared.args());
                        script_groups += 1;
                    }
                },
                GroupArgs::Listed(listed) => {
                    args.extend(listed);
                    run = None;
                    script_groups += 1;
                }
            }
        }
        args[0] = int(script_groups);
        CallArgs { keys, args, sizes }
    }
}

/// `kind, limit, period (µs; the TTL in s for the original's), burst (the
/// jitter bound in s for the original's)`.
fn fields(limit: &Limit) -> (&'static str, u64, u64, u64) {
    let micros = |d: Duration| u64::try_from(d.as_micros()).unwrap_or(u64::MAX).max(1);
    match limit {
        Limit::Algorithm(l) | Limit::Reference { contract: l, .. } => (
            l.name().key_tag(),
            l.limit(),
            micros(l.period()),
            l.capacity(),
        ),
        Limit::Counter(w) => ("oc", w.limit, w.ttl_seconds, w.jitter_seconds),
        Limit::Window(w) => ("ow", w.limit, w.ttl_seconds, w.jitter_seconds),
    }
}

/// One item's answer from its row of the reply: a counter's value, or
/// `code, remaining, retry µs, reset µs, count`.
pub(super) fn decided(c: &Item, row: &[i64], now_us: i64) -> Decided {
    let us = |v: i64| Duration::from_micros(v.max(0).unsigned_abs());
    let at = us(now_us);
    if let Limit::Counter(w) = &c.limit {
        // A group of counters alone reads no time in Redis: the key names
        // the window, and the reset this reports is only informational.
        let at = match now_us {
            0 => crate::limiter::Clock::now(&crate::limiter::SystemClock),
            _ => at,
        };
        let value = row[0].max(0).unsigned_abs();
        return Decided {
            decision: w.decision(value, at.as_secs()),
            count: value,
            at,
        };
    }
    let (code, remaining, mut retry, mut reset, count) = (
        row[0],
        row[1].max(0).unsigned_abs(),
        us(row[2]),
        us(row[3]),
        row[4].max(0).unsigned_abs(),
    );
    if let Limit::Window(w) = &c.limit {
        // The key names the window; its end is the reset.
        let end = w.window.start + w.window.length;
        reset = Duration::from_secs(end.saturating_sub(at.as_secs()).max(1));
        retry = reset;
    }
    let decision = match code {
        1 => Decision::Allow {
            remaining,
            reset_after: reset,
        },
        2 => Decision::ExceedsCapacity {
            capacity: match &c.limit {
                Limit::Algorithm(l) | Limit::Reference { contract: l, .. } => l.capacity(),
                Limit::Counter(w) | Limit::Window(w) => w.limit,
            },
            reset_after: reset,
        },
        _ => Decision::Deny {
            retry_after: retry.max(Duration::from_micros(1)),
            reset_after: reset,
        },
    };
    Decided {
        decision,
        count,
        at,
    }
}

pub(super) fn malformed(what: &str) -> StoreError {
    StoreError::new(
        StoreErrorKind::Rejected,
        format!("unexpected reply from the limits script: {what}"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn counter(limit: u64, binding: bool) -> Item {
        let window = crate::limiter::fixed_window::Window::containing(120, 60);
        Item {
            binding,
            ..Item::new(
                format!("k_{limit}_{binding}"),
                Limit::Counter(crate::store::OriginalWindow {
                    limit,
                    window,
                    ttl_seconds: 60,
                    jitter_seconds: 0,
                }),
                1,
            )
        }
    }

    /// One part holding every one of `items`, on one node.
    fn whole(items: &[Item]) -> Part<'_> {
        Part {
            to: Destination {
                per_second: false,
                route: Route::Slot(0),
                replicated: false,
            },
            positions: (0..items.len()).collect(),
            items,
        }
    }

    #[test]
    fn a_compact_group_commits_iff_no_binding_counter_passed_its_limit() {
        let items = [counter(5, true), counter(2, false), counter(3, true)];
        let part = whole(&items);
        assert!(part.is_compact("commit", &part.positions));
        assert!(part.is_compact("decide", &part.positions));
        assert!(!part.is_compact("stop", &part.positions));
        // At the limit admits; a non-binding counter over its own does not
        // stop the commit.
        assert!(part.compact_commits("commit", &[5, 9, 3]));
        assert!(!part.compact_commits("commit", &[6, 0, 3]));
        assert!(!part.compact_commits("commit", &[0, 0, 4]));
        // Decide never commits.
        assert!(!part.compact_commits("decide", &[0, 0, 0]));
        // A group with any other kind of item is not compact.
        let mut mixed = items.clone();
        mixed[1].limit = Limit::Window(crate::store::OriginalWindow {
            limit: 2,
            window: crate::limiter::fixed_window::Window::containing(120, 60),
            ttl_seconds: 60,
            jitter_seconds: 0,
        });
        let part = Part {
            items: &mixed,
            ..part
        };
        assert!(!part.is_compact("commit", &part.positions));
    }

    /// The script's view of `args` as text, integers and all.
    fn text(args: &[Value]) -> Vec<String> {
        args.iter()
            .map(|v| v.as_string().unwrap_or_default())
            .collect()
    }

    #[test]
    fn counters_that_share_cost_and_ttl_send_them_once() {
        let items = [counter(5, true), counter(2, false), counter(3, true)];
        let part = whole(&items);
        let same = part.group("commit", "", 0, None, |i| items[i].cost());
        let shared = CounterArgs {
            cost: 1,
            ttl: 60,
            jitter: 0,
        };
        assert_eq!(same.args, GroupArgs::SameCounters(shared));
        assert_eq!(same.reply_len, 3);
        // Another cost, or another TTL, and each counter carries its own.
        let costs = part.group("commit", "", 0, None, |i| 1 + i as u64);
        let GroupArgs::Listed(args) = &costs.args else {
            panic!("per-counter costs are listed: {costs:?}");
        };
        #[rustfmt::skip]
        assert_eq!(text(args), ["count", "3", "1", "60", "0", "2", "60", "0", "3", "60", "0"]);
        let mut hourly = items.clone();
        if let Limit::Counter(w) = &mut hourly[2].limit {
            w.ttl_seconds = 3600;
        }
        let part = Part {
            items: &hourly,
            ..part
        };
        let ttls = part.group("decide", "", 0, None, |i| hourly[i].cost());
        let GroupArgs::Listed(args) = &ttls.args else {
            panic!("per-counter TTLs are listed: {ttls:?}");
        };
        #[rustfmt::skip]
        assert_eq!(text(args), ["count", "3", "1", "60", "0", "1", "60", "0", "1", "3600", "0"]);
        assert_eq!(ttls.reply_len, 3);
    }

    #[test]
    fn a_call_sends_one_header_per_run_of_counter_groups_with_one_cost_and_ttl() {
        let same = |keys: &[&str], cost, ttl, jitter| Group {
            keys: keys.iter().map(|k| k.to_string()).collect(),
            args: GroupArgs::SameCounters(CounterArgs { cost, ttl, jitter }),
            reply_len: keys.len(),
            deadline: None,
        };
        let listed = Group {
            keys: vec!["x".into()],
            args: GroupArgs::Listed(vec![
                Value::from_static_str("count"),
                int(1),
                int(4),
                int(60),
                int(0),
            ]),
            reply_len: 1,
            deadline: None,
        };
        let call = CallArgs::new(vec![
            same(&["a", "b"], 1, 60, 300),
            same(&["c"], 1, 60, 300),
            same(&["d", "e", "f"], 1, 60, 300),
            same(&["g"], 2, 60, 300),
            same(&["h"], 2, 3600, 300),
            same(&["j"], 2, 3600, 0),
            listed,
            same(&["i"], 2, 3600, 0),
        ]);
        assert_eq!(
            call.keys,
            ["a", "b", "c", "d", "e", "f", "g", "h", "j", "x", "i"]
        );
        // Each group's share of the answer, as given: the merged run
        // answers its counters in key order, so it splits back the same.
        assert_eq!(call.sizes, [2, 1, 3, 1, 1, 1, 1, 1]);
        #[rustfmt::skip]
        let want = [
            "6",
            "count-same", "6", "1", "60", "300",
            "count-same", "1", "2", "60", "300",
            "count-same", "1", "2", "3600", "300",
            "count-same", "1", "2", "3600", "0",
            "count", "1", "4", "60", "0",
            "count-same", "1", "2", "3600", "0",
        ];
        assert_eq!(text(&call.args), want);
    }
}
