//! [`HotKeysView`]: what `/hotkeys` and the `ratelimit.hot_keys` gauges
//! show, from the top keys and the lease table.

use std::sync::Arc;

use super::top::TopKeys;
use crate::limiter::Clock;
use crate::resilience::leases::LeaseTable;

/// The top keys with what this instance holds of their leases.
#[derive(Debug, Clone)]
pub struct HotKeysView {
    /// The counted keys.
    pub top: Arc<TopKeys>,
    /// The leases (none on the memory store).
    pub leases: Option<Arc<LeaseTable>>,
    /// The clock both count on.
    pub clock: Arc<dyn Clock>,
}

impl HotKeysView {
    /// The `/hotkeys` body: `{"hot_keys": [{domain, descriptor: [{key,
    /// value}], rate, shards, lease, leased_tokens}]}`, busiest first.
    pub fn json(&self) -> serde_json::Value {
        let now = self.clock.now();
        let keys: Vec<serde_json::Value> = self
            .top
            .snapshot(now)
            .into_iter()
            .map(|h| {
                let held: u64 = match &self.leases {
                    Some(t) => h.info.lease_keys.iter().map(|k| t.held(k, now)).sum(),
                    None => 0,
                };
                serde_json::json!({
                    "domain": h.info.domain,
                    "descriptor": h.info.entries.iter()
                        .map(|(k, v)| serde_json::json!({"key": k, "value": v}))
                        .collect::<Vec<_>>(),
                    "rate": (h.rate * 10.0).round() / 10.0,
                    "shards": h.info.shards,
                    "lease": h.info.lease,
                    "leased_tokens": held,
                })
            })
            .collect();
        serde_json::json!({ "hot_keys": keys })
    }

    /// Decisions per second of the busiest keys by rank (1 = busiest), for
    /// the gauges `ratelimit.hot_keys.rank_<n>.rate`: at most `k` series,
    /// whatever the keys are.
    pub fn rates_by_rank(&self) -> Vec<f64> {
        self.top
            .snapshot(self.clock.now())
            .into_iter()
            .map(|h| (h.rate * 10.0).round() / 10.0)
            .collect()
    }
}
