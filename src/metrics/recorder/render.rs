//! The three sinks' reading of the registry: the Prometheus feed (every
//! unflushed change, once), the `/stats` page (every cumulative value) and
//! statsd's line format (one sample). The registry is [`Core`]'s; this is
//! only how each sink renders it.

use std::sync::atomic::Ordering;

use metrics::Recorder;

use super::super::statsd::{format_gauge, format_timer_ms, push_line};
use super::{Core, Meta, Sample, META};

impl Core {
    /// Feeds every unflushed change into the Prometheus recorder (no-op
    /// without one): counters by their delta (fed counters also with zero
    /// deltas, which keeps their series from idling out), gauges by value,
    /// timer samples scaled.
    pub(crate) fn sync_prometheus(&self) -> u64 {
        let Some(prom) = &self.prometheus else {
            return 0;
        };
        let _guard = self.flush_lock.lock();
        self.registry.visit_counters(|_, c| {
            let now = c.value.load(Ordering::Relaxed);
            let before = c.flushed.swap(now, Ordering::Relaxed);
            let delta = now.saturating_sub(before);
            if let Some(key) = &c.meta.prom_key {
                if delta > 0 || c.fed.load(Ordering::Relaxed) {
                    prom.register_counter(key, &META).increment(delta);
                    c.fed.store(true, Ordering::Relaxed);
                }
            }
        });
        self.registry.visit_gauges(|_, g| {
            if let Some(key) = &g.meta.prom_key {
                prom.register_gauge(key, &META).set(g.value());
            }
        });
        let mut dropped = 0;
        self.registry.visit_histograms(|_, t| {
            let pending = t.take_pending(&mut dropped);
            if let Some(key) = &t.meta.prom_key {
                let h = prom.register_histogram(key, &META);
                for v in pending {
                    h.record(v * t.meta.prom_scale);
                }
            }
        });
        dropped
    }

    /// Every statistic, one `name: value` line each, sorted by name:
    /// counters by cumulative value, gauges by value, timers as
    /// `count=<n> sum_ms=<total>`.
    pub(crate) fn render_stats(&self) -> String {
        let mut lines: Vec<(String, String)> = Vec::new();
        self.registry.visit_counters(|_, c| {
            lines.push((
                c.meta.stat_name.clone(),
                c.value.load(Ordering::Relaxed).to_string(),
            ));
        });
        self.registry.visit_gauges(|_, g| {
            let v = g.value();
            let text = if v.is_finite() && v.fract() == 0.0 && v.abs() < 1e15 {
                format!("{}", v as i64)
            } else {
                format!("{v}")
            };
            lines.push((g.meta.stat_name.clone(), text));
        });
        self.registry.visit_histograms(|_, t| {
            let s = t.state.lock();
            lines.push((
                t.meta.stat_name.clone(),
                format!("count={} sum_ms={:.3}", s.count, s.sum),
            ));
        });
        lines.sort();
        let mut out = String::with_capacity(lines.len() * 48);
        for (name, value) in lines {
            out.push_str(&name);
            out.push_str(": ");
            out.push_str(&value);
            out.push('\n');
        }
        out
    }

    /// Appends the statsd line of `sample` to `buf`; returns whether a line
    /// was written (NaN gauges and negative timer samples are not sent).
    pub(crate) fn push_statsd(buf: &mut String, meta: &Meta, sample: Sample) -> bool {
        let (value, ty) = match sample {
            Sample::Counter(d) => (Some(d.to_string()), "c"),
            Sample::Gauge(v) => (format_gauge(v), "g"),
            Sample::Timer(ms) => (format_timer_ms(ms), "ms"),
        };
        match value {
            Some(v) => {
                push_line(buf, &meta.wire_name, &v, ty, &meta.wire_tags);
                true
            }
            None => false,
        }
    }
}
