//! What a run was: its streams, decisions, RLQS events and faults, and
//! the questions every checker asks of them (which faults touch a key and
//! when, which config may be live, whether an instance was down).

use super::log::{Decision, Fault, FaultKind, QuotaEvent};
use super::rules::{Placement, Rule, Shape, Stream, DOMAIN};

/// How long after a reload an instance may still run the config before it
/// (the watcher's debounce and the load).
pub const RELOAD_SETTLE_US: u64 = 3_000_000;
/// How long after a fault healed its errors still count as its own (a
/// breaker's cooldown, a topology read, a reconnection's back-off).
pub const RECOVERY_PAD_US: u64 = 5_000_000;
/// How long before a failover took effect, and after, a count the old
/// primary acknowledged may be missing on the new one (asynchronous
/// replication): the loss window, padded far beyond loopback's lag.
pub const LOSS_PAD_US: u64 = 1_000_000;
/// A killed instance's calls are "down", not unanswered, from its kill to
/// this long after it listens again (the clients' reconnection).
pub const RESTART_PAD_US: u64 = 3_000_000;

/// What the run was.
pub struct Run<'a> {
    pub streams: &'a [Stream],
    pub decisions: &'a [Decision],
    /// What the RLQS Envoys did and heard.
    pub quota: &'a [QuotaEvent],
    pub faults: &'a [Fault],
    pub instances: usize,
    pub start_us: u64,
    pub end_us: u64,
    /// The store's deadline plus 5 ms: the answer time stated for 99.9 %.
    pub answer_bound_us: u64,
}

/// The Cluster slot of a rule's key for `value`, for a window starting at
/// `window_start` (the original's keys name their window).
pub fn slot(rule: &Rule, value: &str, window_start: u64) -> Option<u16> {
    let descriptor = format!("{DOMAIN}_{}_{value}_", rule.name);
    match rule.placement {
        Placement::Original => Some(fred::util::redis_keyslot(
            format!("{descriptor}{window_start}").as_bytes(),
        )),
        Placement::Tagged => Some(fred::util::redis_keyslot(descriptor.as_bytes())),
        Placement::Anywhere => None,
    }
}

impl Run<'_> {
    pub fn rule_of(&self, stream: usize) -> Option<(&'static Rule, &Stream)> {
        let s = self.streams.iter().find(|s| s.id == stream)?;
        Some((Rule::by_name(s.rule)?, s))
    }

    pub fn at_s(&self, us: u64) -> f64 {
        us.saturating_sub(self.start_us) as f64 / 1e6
    }

    /// Whether fault `f` touches the store for `rule`'s key `value` at
    /// `at_us` (seen from `instance`, if given).
    pub fn touches(
        &self,
        f: &Fault,
        rule: &Rule,
        value: &str,
        at_us: u64,
        instance: Option<usize>,
    ) -> bool {
        if !f.kind.touches_the_store() {
            return false;
        }
        if let (Some(fi), Some(i)) = (f.instance, instance) {
            if fi != i {
                return false;
            }
        }
        let unit = match rule.shape {
            Shape::Window { unit_s, .. } => unit_s,
            _ => 1,
        };
        match slot(rule, value, at_us / 1_000_000 / unit * unit) {
            None => true,
            Some(s) => f.covers(s),
        }
    }

    /// Faults that touch the key within `[from, to]`, the fault's own
    /// span widened by `before` and `after`.
    pub fn touching(
        &self,
        rule: &Rule,
        value: &str,
        from: u64,
        to: u64,
        instance: Option<usize>,
        (before, after): (u64, u64),
    ) -> Vec<&Fault> {
        self.faults
            .iter()
            .filter(|f| f.start_us.saturating_sub(before) <= to && from <= f.end_us + after)
            .filter(|f| {
                self.touches(f, rule, value, from, instance)
                    || self.touches(f, rule, value, to, instance)
            })
            .collect()
    }

    /// The config versions that may be live in `[from, to]`.
    pub fn versions(&self, from: u64, to: u64) -> Vec<usize> {
        let mut reloads: Vec<u64> = self
            .faults
            .iter()
            .filter(|f| f.kind == FaultKind::Reload)
            .map(|f| f.start_us)
            .collect();
        reloads.sort_unstable();
        let version_at = |t: u64| reloads.iter().filter(|&&r| r <= t).count() % 2;
        let mut out = vec![
            version_at(from.saturating_sub(RELOAD_SETTLE_US)),
            version_at(to),
        ];
        for &r in &reloads {
            if r + RELOAD_SETTLE_US >= from && r <= to {
                out.push(version_at(r));
                out.push(version_at(r.saturating_sub(1)));
            }
        }
        out.sort_unstable();
        out.dedup();
        out
    }

    /// Instance starts (after a kill) within `[from, to]`.
    pub fn restarts(&self, from: u64, to: u64) -> u64 {
        self.faults
            .iter()
            .filter(|f| f.kind == FaultKind::KillInstance && f.end_us >= from && f.end_us <= to)
            .count() as u64
    }

    /// Whether instance `i` was killed (or reconnecting) around `[send, answer]`.
    pub fn instance_down(&self, i: usize, send: u64, answer: u64) -> bool {
        self.faults.iter().any(|f| {
            f.kind == FaultKind::KillInstance
                && f.instance == Some(i)
                && f.start_us <= answer
                && send <= f.end_us + RESTART_PAD_US
        })
    }

    /// The loss windows of the faults that can lose acknowledged counts on
    /// `rule`'s key: a killed primary, a forced failover, a pause that let
    /// the replica take over. A graceful failover waits for the replica to
    /// catch up, and loses nothing.
    pub fn loss_windows(
        &self,
        rule: &Rule,
        value: &str,
        from: u64,
        to: u64,
    ) -> Vec<(u64, u64, usize)> {
        if rule.durable {
            return Vec::new();
        }
        self.faults
            .iter()
            .filter(|f| match f.kind {
                FaultKind::KillPrimary | FaultKind::ForcedFailover => true,
                FaultKind::PausePrimary => f.promoted_us.is_some(),
                _ => false,
            })
            .filter(|f| {
                self.touches(f, rule, value, from, None) || self.touches(f, rule, value, to, None)
            })
            .map(|f| {
                let took_over = f.promoted_us.unwrap_or(f.end_us);
                let end = match f.kind {
                    // The old primary is gone: it acknowledged nothing after.
                    FaultKind::KillPrimary => f.start_us,
                    _ => took_over.max(f.end_us.min(took_over + LOSS_PAD_US)),
                };
                (
                    f.start_us.saturating_sub(LOSS_PAD_US),
                    end + LOSS_PAD_US,
                    f.id,
                )
            })
            .filter(|&(a, b, _)| a <= to && from <= b)
            .collect()
    }
}
