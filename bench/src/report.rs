//! The report of a load: rates and latency percentiles, as text and JSON.

use super::flags::LoadConfig;
use super::tally::Tally;
use super::Failure;

/// One finished load.
pub(crate) struct Report {
    pub(crate) label: &'static str,
    pub(crate) config: LoadConfig,
    pub(crate) tally: Tally,
}

impl Report {
    pub(crate) fn requests(&self) -> u64 {
        let t = &self.tally;
        t.ok + t.over_limit + t.other_code + t.errors
    }

    /// Adds another load of the same definition (one more round).
    pub(crate) fn absorb(&mut self, other: Report) -> Result<(), Failure> {
        self.config.duration += other.config.duration;
        self.config.warmup += other.config.warmup;
        self.tally.merge(other.tally)
    }

    pub(crate) fn rps(&self) -> f64 {
        self.requests() as f64 / self.config.duration.as_secs_f64()
    }

    pub(crate) fn quantile(&self, q: f64) -> u64 {
        self.tally.latency.value_at_quantile(q)
    }

    pub(crate) fn json(&self) -> serde_json::Value {
        let c = &self.config;
        let t = &self.tally;
        serde_json::json!({
            "target": c.target,
            "http": c.http,
            "connections": c.connections,
            "threads": c.threads,
            "concurrency": c.concurrency,
            "in_flight": c.connections * c.concurrency,
            "duration_s": c.duration.as_secs_f64(),
            "warmup_s": c.warmup.as_secs_f64(),
            "open_loop_rps": c.rps,
            "descriptors": c.entries.len(),
            "keys": c.keys.describe(),
            "requests": self.requests(),
            "rps": round2(self.rps()),
            "ok": t.ok,
            "over_limit": t.over_limit,
            "other_code": t.other_code,
            "errors": t.errors,
            "p50_us": self.quantile(0.5),
            "p90_us": self.quantile(0.9),
            "p99_us": self.quantile(0.99),
            "p999_us": self.quantile(0.999),
            "max_us": t.latency.max(),
            "mean_us": round2(t.latency.mean()),
        })
    }

    pub(crate) fn print(&self) {
        let c = &self.config;
        let t = &self.tally;
        let mode = match c.rps {
            Some(r) => format!("open loop at {r} req/s"),
            None => "closed loop".into(),
        };
        out!(
            "[{}] {}: {} connection(s) x {} in flight = {} on {} load thread(s), {mode}, {:?} (+{:?} warmup)",
            self.label,
            c.target,
            c.connections,
            c.concurrency,
            c.connections * c.concurrency,
            c.threads,
            c.duration,
            c.warmup
        );
        out!(
            "[{}] domain {:?}, {} descriptor(s) per request, entries {:?}, keys {}",
            self.label,
            c.domain,
            c.entries.len(),
            c.entries,
            c.keys.describe()
        );
        out!(
            "[{}] requests {} ({:.1}/s)  ok {}  over_limit {}  other_code {}  errors {}",
            self.label,
            self.requests(),
            self.rps(),
            t.ok,
            t.over_limit,
            t.other_code,
            t.errors
        );
        out!(
            "[{}] latency us: p50 {}  p90 {}  p99 {}  p99.9 {}  max {}  mean {:.1}",
            self.label,
            self.quantile(0.5),
            self.quantile(0.9),
            self.quantile(0.99),
            self.quantile(0.999),
            t.latency.max(),
            t.latency.mean()
        );
        let mut kinds: Vec<(&String, &u64)> = t.error_kinds.iter().collect();
        kinds.sort_by(|a, b| b.1.cmp(a.1));
        for (kind, count) in kinds.into_iter().take(5) {
            out!("[{}] error x{count}: {kind}", self.label);
        }
    }
}

pub(crate) fn round2(x: f64) -> f64 {
    (x * 100.0).round() / 100.0
}

pub(crate) fn round2_4(x: f64) -> f64 {
    (x * 10_000.0).round() / 10_000.0
}

pub(crate) fn finite(x: f64) -> serde_json::Value {
    if x.is_finite() {
        x.into()
    } else {
        serde_json::Value::Null
    }
}
