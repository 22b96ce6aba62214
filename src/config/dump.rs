//! The `/rlconfig` text.

use std::fmt::Write as _;

use std::time::Duration;

use super::failure::{Durability, FailurePolicy};
use super::tree::DescriptorTree;

/// One line per rule:
/// `<load key>: unit=<UNIT> requests_per_unit=<n>, shadow_mode: <b>, quota_mode: <b>`,
/// each ending in `\n`; a rule with extension limits adds
/// `, limits: <algorithm> <n>/<seconds>s[ burst <b>], …` before it (a
/// calendar limit `<n>/calendar <unit> <zone>`), and a calendar rule in
/// the original's vocabulary `, calendar: <unit> <zone>`; a local-first
/// window adds its `sync_interval` and bound, and a window that is
/// local-first only by `LOCAL_FIRST_SYNC_INTERVAL` (`default_sync`: the
/// original's windows and calendar windows whose rule sets none) says so.
/// Order is deterministic: domains in load order, a node before its
/// descendants, siblings in document order.
pub fn dump(tree: &DescriptorTree, default_sync: Option<Duration>) -> String {
    let mut out = String::new();
    for rule in tree.rules() {
        // Writing into a String cannot fail.
        let _ = write!(
            out,
            "{}: unit={} requests_per_unit={}, shadow_mode: {}, quota_mode: {}",
            rule.load_key, rule.unit, rule.requests_per_unit, rule.shadow_mode, rule.quota_mode
        );
        // Rules in the original's vocabulary print exactly as the original's.
        if let Some(calendar) = &rule.calendar {
            let _ = write!(out, ", calendar: {calendar}");
        }
        for (i, l) in rule.limits.iter().enumerate() {
            if let crate::limiter::Limiter::Concurrency(c) = &l.limiter {
                let _ = write!(
                    out,
                    "{} concurrency {} in flight, max_duration {:?}",
                    if i == 0 { ", limits:" } else { "," },
                    c.rate().limit(),
                    c.rate().window(),
                );
                write_failure(&mut out, &l.failure);
                continue;
            }
            let _ = write!(
                out,
                "{} {} {}/",
                if i == 0 { ", limits:" } else { "," },
                l.limiter.name(),
                l.requests_per_unit,
            );
            match &l.calendar {
                Some(calendar) => {
                    let _ = write!(out, "calendar {calendar}");
                }
                None => {
                    let _ = write!(out, "{}s", l.limiter.period().as_secs());
                }
            }
            if let crate::limiter::Limiter::TokenBucket(b) = &l.limiter {
                let _ = write!(out, " burst {}", b.burst());
            }
            if l.hot.shards > 1 {
                let _ = write!(out, " shards {}", l.hot.shards);
            }
            if l.hot.lease {
                out.push_str(" lease");
            }
            let sync = match (&l.calendar, l.sync_interval) {
                (Some(_), None) => default_sync.map(Sync::ByDefault),
                (_, own) => own.map(Sync::Own),
            };
            write_sync(&mut out, sync, l.requests_per_unit);
            write_failure(&mut out, &l.failure);
        }
        if rule.limits.is_empty() {
            let sync = match rule.sync_interval {
                Some(own) => Some(Sync::Own(own)),
                None => default_sync.map(Sync::ByDefault),
            };
            write_sync(&mut out, sync, rule.requests_per_unit);
            write_failure(&mut out, &rule.failure);
        }
        out.push('\n');
    }
    out
}

/// Where a window's write-back interval comes from.
#[derive(Clone, Copy)]
enum Sync {
    /// Its rule's `sync_interval`.
    Own(Duration),
    /// `LOCAL_FIRST_SYNC_INTERVAL`.
    ByDefault(Duration),
}

/// `, sync_interval: <d> (at most <L> + N·⌊ε·<L>/N⌋ a window)` for a
/// local-first window: its bound, with `N` the instances and `ε`
/// `LOCAL_FIRST_MAX_OVER`; `(LOCAL_FIRST_SYNC_INTERVAL; at most …)` when
/// the setting, not the rule, made it local-first.
fn write_sync(out: &mut String, sync: Option<Sync>, limit: u32) {
    let bound = format!("at most {limit} + N·⌊ε·{limit}/N⌋ a window");
    let _ = match sync {
        Some(Sync::Own(d)) => write!(out, ", sync_interval: {d:?} ({bound})"),
        Some(Sync::ByDefault(d)) => write!(
            out,
            ", sync_interval: {d:?} (LOCAL_FIRST_SYNC_INTERVAL; {bound})"
        ),
        None => Ok(()),
    };
}

/// ` failure_mode <mode>[ fallback <n>]`, only when the rule sets one;
/// `, durability: replicated` when it asks for it.
fn write_failure(out: &mut String, policy: &FailurePolicy) {
    if let Some(mode) = policy.mode {
        let _ = write!(out, ", failure_mode: {mode}");
        if let Some(n) = policy.fallback_requests_per_unit {
            let _ = write!(out, " fallback {n}");
        }
    }
    if policy.durability != Durability::default() {
        let _ = write!(out, ", durability: {}", policy.durability);
    }
}
