//! The audit's results: per audited limit, its counts beside its bound,
//! for `/audit` and as statistics in the original's per-rule naming
//! (`ratelimit.service.rate_limit.<rule>.audit_decisions`, `…audit_over`,
//! `…audit_under`, `…audit_unverified`).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;

use parking_lot::RwLock;

use super::bound::{Bound, LimitFacts};
use super::verdict::{Outcome, Verdict};
use crate::metrics;

/// One audited limit of one rule.
#[derive(Debug)]
pub struct Row {
    rule: String,
    /// Which limit of the rule (its key suffix, e.g. `fw:60s`).
    limit: String,
    facts: LimitFacts,
    bound: Bound,
    decisions: AtomicU64,
    over: AtomicU64,
    under: AtomicU64,
    unverified: AtomicU64,
    by_policy: AtomicU64,
    /// Cost given back (`is_negative_hits`), taken out of the contract.
    refunded: AtomicU64,
    /// The most admitted in a trailing window of the contract.
    peak: AtomicU64,
    /// The id of the last decision that admitted over the contract (0:
    /// none yet), to find it in Envoy's access log and the service's log.
    last_over: AtomicU64,
    stats: metrics::AuditStats,
}

impl Row {
    fn new(rule: &str, limit: &str, facts: LimitFacts) -> Row {
        Row {
            rule: rule.to_string(),
            limit: limit.to_string(),
            bound: Bound::of(&facts),
            facts,
            decisions: AtomicU64::new(0),
            over: AtomicU64::new(0),
            under: AtomicU64::new(0),
            unverified: AtomicU64::new(0),
            by_policy: AtomicU64::new(0),
            refunded: AtomicU64::new(0),
            peak: AtomicU64::new(0),
            last_over: AtomicU64::new(0),
            stats: metrics::AuditStats::register(rule),
        }
    }

    /// Counts one audited decision, the one the engine names `decision`.
    pub fn record(&self, outcome: Outcome, decision: u64) {
        match outcome {
            Outcome::Compared { verdict, in_window } => {
                self.decisions.fetch_add(1, Relaxed);
                self.stats.decisions.increment(1);
                match verdict {
                    Verdict::Over => {
                        self.over.fetch_add(1, Relaxed);
                        self.stats.over.increment(1);
                        self.last_over.store(decision, Relaxed);
                        tracing::debug!(
                            decision = %decision_id(decision),
                            rule = %self.rule,
                            limit = %self.limit,
                            "audit: admitted over the contract"
                        );
                    }
                    Verdict::Under => {
                        self.under.fetch_add(1, Relaxed);
                        self.stats.under.increment(1);
                    }
                    Verdict::Agree => {}
                }
                if let Some(n) = in_window {
                    self.peak.fetch_max(n, Relaxed);
                }
            }
            Outcome::ByPolicy => {
                self.by_policy.fetch_add(1, Relaxed);
                self.stats.unverified.increment(1);
            }
            Outcome::Unverified => {
                self.unverified.fetch_add(1, Relaxed);
                self.stats.unverified.increment(1);
            }
        }
    }

    /// Counts `cost` given back to the limit and to its contract alike.
    pub fn refunded(&self, cost: u64) {
        self.refunded.fetch_add(cost, Relaxed);
    }

    /// The row as `/audit` shows it.
    pub fn to_json(&self) -> serde_json::Value {
        let decisions = self.decisions.load(Relaxed);
        let (over, under) = (self.over.load(Relaxed), self.under.load(Relaxed));
        let peak = self.peak.load(Relaxed);
        let rate = |n: u64| match decisions {
            0 => 0.0,
            d => n as f64 / d as f64,
        };
        serde_json::json!({
            "rule": self.rule,
            "limit": self.limit,
            "contract": self.facts.to_json(),
            "decisions": decisions,
            "over": over,
            "under": under,
            "over_rate": rate(over),
            "under_rate": rate(under),
            "peak_in_window": peak,
            "by_policy": self.by_policy.load(Relaxed),
            "refunded": self.refunded.load(Relaxed),
            "unverified": self.unverified.load(Relaxed),
            "bound": self.bound.to_json(),
            "within_bound": self.bound.holds(peak, over, under),
            "last_over_decision": match self.last_over.load(Relaxed) {
                0 => serde_json::Value::Null,
                id => decision_id(id).into(),
            },
        })
    }
}

/// A decision's id as the engine shows it (16 hex digits).
fn decision_id(id: u64) -> String {
    format!("{id:016x}")
}

/// Every audited limit's row, at most [`metrics::MAX_DYNAMIC_KEYS`]; a
/// rule past that is not audited (its decisions go uncounted).
#[derive(Debug, Default)]
pub struct AuditBook {
    rows: RwLock<HashMap<(String, String), Arc<Row>>>,
}

impl AuditBook {
    /// The row of `limit` (its key suffix) of `rule` (its stats key), made
    /// with `facts` the first time; `None` once the book is full.
    pub fn row(
        &self,
        rule: &str,
        limit: &str,
        facts: impl FnOnce() -> LimitFacts,
    ) -> Option<Arc<Row>> {
        let key = (rule.to_string(), limit.to_string());
        if let Some(row) = self.rows.read().get(&key) {
            return Some(row.clone());
        }
        let mut rows = self.rows.write();
        if rows.len() >= metrics::MAX_DYNAMIC_KEYS && !rows.contains_key(&key) {
            return None;
        }
        Some(
            rows.entry(key)
                .or_insert_with(|| Arc::new(Row::new(rule, limit, facts())))
                .clone(),
        )
    }

    /// Every row, ordered by rule and limit.
    pub fn to_json(&self) -> Vec<serde_json::Value> {
        let rows = self.rows.read();
        let mut keys: Vec<_> = rows.keys().collect();
        keys.sort();
        keys.into_iter().map(|k| rows[k].to_json()).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_row_counts_and_judges_against_its_bound() {
        let book = AuditBook::default();
        let facts = || LimitFacts {
            algorithm: "fixed_window",
            limit: 10,
            window_seconds: 1,
            burst: None,
            shards: 1,
            lease: false,
            local_first_over: 0,
        };
        let row = book.row("d.k", "ow:1s", facts).expect("room");
        for n in 1..=20 {
            let verdict = if n > 10 {
                Verdict::Over
            } else {
                Verdict::Agree
            };
            row.record(
                Outcome::Compared {
                    verdict,
                    in_window: Some(n),
                },
                n,
            );
        }
        row.record(Outcome::ByPolicy, 21);
        row.record(Outcome::Unverified, 22);
        let v = &book.to_json()[0];
        assert_eq!(v["decisions"], 20);
        assert_eq!(v["over"], 10);
        assert_eq!(v["over_rate"], 0.5);
        assert_eq!(v["peak_in_window"], 20);
        assert_eq!(
            (v["by_policy"].as_u64(), v["unverified"].as_u64()),
            (Some(1), Some(1))
        );
        assert_eq!(
            v["within_bound"], true,
            "a 2x burst is the fixed window's bound"
        );
        assert_eq!(
            v["last_over_decision"], "0000000000000014",
            "the last decision over the contract is named"
        );
        row.record(
            Outcome::Compared {
                verdict: Verdict::Over,
                in_window: Some(21),
            },
            0xbeef,
        );
        assert_eq!(book.to_json()[0]["within_bound"], false);
        assert_eq!(book.to_json()[0]["last_over_decision"], "000000000000beef");
        // The same row again, not a new one.
        assert!(Arc::ptr_eq(
            &row,
            &book.row("d.k", "ow:1s", facts).expect("room")
        ));
    }
}
