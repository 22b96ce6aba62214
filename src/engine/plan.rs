//! A request's store work: every matched descriptor's items in one
//! [`Work`], and what each descriptor needs to read its answers back.
//!
//! A descriptor of a rule in the original's vocabulary is the original's
//! counter ([`Limit::Counter`]), counted whatever the other limits decide,
//! unless `ALL_OR_NOTHING` asks for it to be decided first
//! ([`Limit::Window`]). Any other rule (an `algorithm`, `burst`,
//! `unit_multiplier` or `rate_limits`) gives one [`Limit::Algorithm`] item
//! per limit. Everything is pure: keys, windows and costs from the request,
//! the rule and `now`.
//!
//! The rule "a request that an original window refuses takes nothing from
//! the opt-in limits" is the work's policy: a binding counter over its
//! limit vetoes the commit in the store (see [`crate::store::Policy`]), and
//! a counter answered by the local over-limit cache vetoes it here, before
//! any I/O, by asking the store only to decide.

use std::ops::Range;
use std::sync::Arc;

use crate::config::MatchedLimit;
use crate::limiter::fixed_window::Window;
use crate::limiter::Calendar;
use crate::metrics::RuleStats;
use crate::store::key::DescriptorKey;
use crate::store::{Item, Limit, OriginalWindow, Placement, Policy, RuleOptions, Work};

use super::types::RateLimitRequest;
use super::FailureDefaults;

/// One descriptor's part of the work.
pub(crate) struct Planned {
    /// Its position in the request.
    pub(crate) index: usize,
    pub(crate) limit: MatchedLimit,
    pub(crate) stats: Arc<RuleStats>,
    pub(crate) hits: u64,
    /// It gives its hits back (`is_negative_hits`): its items are
    /// give-backs, and its status is a refund's.
    pub(crate) give_back: bool,
    /// Its items in the work (one per limit; none when the local cache
    /// answered it).
    pub(crate) items: Range<usize>,
    pub(crate) shape: Shape,
    /// Its part of every key (with `share_threshold`'s patterns applied):
    /// what its items', its audit references' and its hot-key entry's keys
    /// are made from.
    pub(crate) key: DescriptorKey,
}

/// How a descriptor is counted, and so how its answers read.
pub(crate) enum Shape {
    /// The original's counter, counted the original's way.
    Counted {
        window: Window,
        /// The counter's key (what the local cache remembers).
        key: String,
        /// The local over-limit cache holds the key: no item, over limit.
        cached_over: bool,
    },
    /// Decided all or nothing with the request's other limits: the opt-in
    /// limits, or with `ALL_OR_NOTHING` the original's window (`window`).
    Decided { window: Option<Window> },
}

/// What planning needs from the engine's options.
pub(crate) struct PlanOptions<'a> {
    pub(crate) prefix: &'a str,
    /// Global `SHADOW_MODE`: nothing binds.
    pub(crate) shadow_mode: bool,
    /// `ALL_OR_NOTHING`: the original's windows are decided, not counted.
    pub(crate) all_or_nothing: bool,
    /// `STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT`.
    pub(crate) stop_when_over: bool,
    /// Which descriptors of the request count as quotas (`quota_mode`).
    pub(crate) quota: &'a [bool],
    /// The failure policy of rules that set none.
    pub(crate) failure: FailureDefaults,
    /// Where the store keeps a key (each item names its node).
    pub(crate) placement: &'a dyn Placement,
    /// `EXPIRATION_JITTER_MAX_SECONDS`, for the original's counters.
    pub(crate) expiration_jitter: u64,
    /// `LOCAL_FIRST_SYNC_INTERVAL`: the write-back interval of fixed
    /// windows whose rule sets none.
    pub(crate) local_first: Option<std::time::Duration>,
}

impl PlanOptions<'_> {
    fn is_quota(&self, index: usize) -> bool {
        self.quota.get(index).copied().unwrap_or(false)
    }

    /// Whether a refusal of decided descriptor `index` refuses the request
    /// by itself, and so vetoes the commit: not in shadow mode (reported,
    /// let through), and not a quota unless it is the request's only one (a
    /// request is refused by its quotas only when all of them refuse, which
    /// one item cannot know; with several, a refused request can be counted
    /// by its other limits).
    fn decided_binds(&self, index: usize, rule_shadow_mode: bool) -> bool {
        let one_quota = self.quota.iter().filter(|q| **q).count() == 1;
        !(self.shadow_mode || rule_shadow_mode) && (!self.is_quota(index) || one_quota)
    }

    /// Whether an original counter over its limit refuses the request: not
    /// in shadow mode, and not a quota (the original's rule).
    fn counter_binds(&self, index: usize, rule_shadow_mode: bool) -> bool {
        !(self.shadow_mode || rule_shadow_mode || self.is_quota(index))
    }

    fn item(&self, key: String, limit: Limit, cost: u64, binding: bool) -> Item {
        let node = self.placement.node_of(&key, limit.one_second());
        Item {
            binding,
            node,
            ..Item::new(key, limit, cost)
        }
    }
}

/// A request's work and its descriptors.
pub(crate) struct Plan {
    pub(crate) work: Work,
    pub(crate) descriptors: Vec<Planned>,
}

impl Plan {
    /// An empty plan; [`Plan::settle`] sets its policy.
    pub(crate) fn new() -> Plan {
        Plan {
            work: Work::default(),
            descriptors: Vec::new(),
        }
    }

    /// Adds descriptor `index` (matched to `limit`, costing `hits`);
    /// `cached_over(key, now)` asks the local over-limit cache about an
    /// original counter, and `ttl(seconds)` gives the TTL of a key that
    /// must live `seconds` (an epoch window's length; what is left of a
    /// calendar's period, so that the key ends with it).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn add(
        &mut self,
        request: &RateLimitRequest,
        index: usize,
        limit: MatchedLimit,
        stats: Arc<RuleStats>,
        hits: u64,
        now_secs: u64,
        options: &PlanOptions<'_>,
        cached_over: impl Fn(&str) -> bool,
    ) {
        let entries = &request.descriptors[index].entries;
        let give_back = request.descriptors[index].is_negative_hits;
        let descriptor = DescriptorKey::new(
            &request.domain,
            entries,
            limit.share_threshold_key_pattern.as_deref(),
        );
        // The counter of a calendar's period: on a key that names the
        // period, expiring when it ends.
        let period_counter = |calendar: &Calendar, limit: u64| {
            let window = calendar.window_at(now_secs);
            let key = descriptor.calendar(options.prefix, calendar.unit(), window.start);
            let counter = OriginalWindow {
                limit,
                window,
                ttl_seconds: window.reset_after(now_secs),
                jitter_seconds: options.expiration_jitter,
            };
            (key, counter)
        };
        let items = &mut self.work.items;
        let first = items.len();
        let shape = if limit.rule.is_original() {
            let requests = u64::from(limit.rule.requests_per_unit);
            let (key, original) = match &limit.rule.calendar {
                Some(calendar) => period_counter(calendar, requests),
                None => {
                    // Validation refuses other units, and overrides with
                    // UNKNOWN are rejected by the lookup.
                    let Some(unit_seconds) = limit.rule.unit.seconds() else {
                        return;
                    };
                    let window = Window::containing(now_secs, unit_seconds);
                    let key = descriptor.fixed_window(options.prefix, window.start);
                    let original = OriginalWindow {
                        limit: requests,
                        window,
                        ttl_seconds: window.length,
                        jitter_seconds: options.expiration_jitter,
                    };
                    (key, original)
                }
            };
            let window = original.window;
            let item = |limit, binding| options.item(key.clone(), limit, hits, binding);
            let rule = RuleOptions {
                id: Some(limit.rule.id.clone()),
                on_failure: options
                    .failure
                    .on_failure(&limit.rule.failure, original.limit),
                lease: false,
                replicated: limit.rule.failure.replicated(),
                sync_interval: limit.rule.sync_interval.or(options.local_first),
            };
            if options.all_or_nothing {
                let binding = options.decided_binds(index, limit.rule.shadow_mode);
                items.push(Item {
                    rule,
                    ..item(Limit::Window(original), binding)
                });
                Shape::Decided {
                    window: Some(window),
                }
            } else {
                // A give-back always reaches the store.
                let cached = !give_back && cached_over(&key);
                if !cached {
                    let binding = options.counter_binds(index, limit.rule.shadow_mode);
                    items.push(Item {
                        rule,
                        ..item(Limit::Counter(original), binding)
                    });
                }
                Shape::Counted {
                    window,
                    key,
                    cached_over: cached,
                }
            }
        } else {
            let binding = options.decided_binds(index, limit.rule.shadow_mode);
            // One pick per descriptor: its limits with the same `shards`
            // use the same sub-bucket, on one slot.
            let pick = rand::random::<u32>();
            for l in &limit.rule.limits {
                let rule = RuleOptions {
                    id: Some(limit.rule.id.clone()),
                    on_failure: options
                        .failure
                        .on_failure(&l.failure, u64::from(l.requests_per_unit)),
                    lease: l.hot.lease,
                    replicated: l.failure.replicated(),
                    sync_interval: None,
                };
                if let Some(calendar) = &l.calendar {
                    // A calendar's fixed window: decided before it is
                    // counted, as the original's window is under
                    // ALL_OR_NOTHING.
                    let (key, original) = period_counter(calendar, u64::from(l.requests_per_unit));
                    // A calendar's window is never leased.
                    items.push(Item {
                        rule: RuleOptions {
                            lease: false,
                            sync_interval: l.sync_interval.or(options.local_first),
                            ..rule
                        },
                        ..options.item(key, Limit::Window(original), hits, binding)
                    });
                    continue;
                }
                let (key, limiter) = match u8::try_from(l.sub_buckets.len()) {
                    Ok(k @ 2..) => {
                        // < k ≤ 64.
                        let i = u8::try_from(pick % u32::from(k)).unwrap_or(0);
                        let key = descriptor.sub_bucket(options.prefix, &l.key_suffix, i, k);
                        (key, l.sub_buckets[usize::from(i)])
                    }
                    _ => (
                        descriptor.algorithm(options.prefix, &l.key_suffix),
                        l.limiter,
                    ),
                };
                items.push(Item {
                    rule,
                    ..options.item(key, Limit::Algorithm(limiter), hits, binding)
                });
            }
            Shape::Decided { window: None }
        };
        if give_back {
            for item in &mut self.work.items[first..] {
                item.give_back_instead();
            }
        }
        self.descriptors.push(Planned {
            index,
            limit,
            stats,
            hits,
            give_back,
            items: first..self.work.items.len(),
            shape,
            key: descriptor,
        });
    }

    /// The work's policy, once every descriptor is in: a binding counter
    /// that the local cache answered vetoes the commit (and with
    /// `STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT` stops every increment, as
    /// the original's).
    pub(crate) fn settle(&mut self, options: &PlanOptions<'_>) {
        let cached = |d: &Planned| {
            matches!(
                d.shape,
                Shape::Counted {
                    cached_over: true,
                    ..
                }
            )
        };
        let any_cached = self.descriptors.iter().any(cached);
        let vetoed = self
            .descriptors
            .iter()
            .any(|d| cached(d) && options.counter_binds(d.index, d.limit.rule.shadow_mode));
        if options.stop_when_over && any_cached {
            for item in &mut self.work.items {
                if let (Limit::Counter(_), false) = (&item.limit, item.gives_back()) {
                    item.hits = crate::store::Hits::Take(0);
                }
            }
        }
        self.work.policy = match (vetoed, options.stop_when_over) {
            (true, _) => Policy::Decide,
            (false, true) => Policy::CommitStopping,
            (false, false) => Policy::Commit,
        };
    }
}
