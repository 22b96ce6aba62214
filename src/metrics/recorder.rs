//! The process's metrics recorder: one registry of every statistic under its
//! statsd name, from which every sink reads.
//!
//! Handles given to callers point at cells owned by a
//! [`metrics_util::registry::Registry`]; a cell keeps the cumulative value
//! (for `/stats`), the value at the previous flush (for statsd deltas and the
//! Prometheus feed) and, for timers, the samples recorded since the previous
//! flush (bounded by [`MAX_PENDING_SAMPLES`]).
//!
//! Cardinality: cells whose name starts with
//! [`RATE_LIMIT_PREFIX`](super::RATE_LIMIT_PREFIX) (request-supplied keys)
//! are *dynamic*. A dynamic cell is removed by [`Core::sweep`] once nothing
//! but the registry references it (no handle is held anywhere, checked under
//! the registry's shard write lock, so no handle can be created
//! concurrently), its value has not changed for the idle timeout, and its
//! last change has been flushed — so no count is ever lost by a sink. At most
//! [`MAX_DYNAMIC_SERIES`] dynamic cells exist; past that, new dynamic keys
//! get no-op handles (and a rate-limited warning), except a rule's own
//! series (see [`beyond_the_cap`]), which the config bounds: a flood of
//! per-value series never blinds a rule. Other cells are never removed.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use tokio::time::Instant;

use metrics::{
    Counter, CounterFn, Gauge, GaugeFn, Histogram, HistogramFn, Key, KeyName, Label, Metadata,
    Recorder, SharedString, Unit,
};
use metrics_exporter_prometheus::PrometheusRecorder;
use metrics_util::registry::{Registry, Storage};
use parking_lot::{Mutex, RwLock};

use super::prometheus_mapping::{sanitize_label_name, Mapper, StatKind};
use super::statsd::{dogstatsd_tags, serialize_tags};
use super::RATE_LIMIT_PREFIX;

mod render;

thread_local! {
    /// Set while a rule's own series (bounded by the config) registers.
    static BEYOND_THE_CAP: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Runs `register` with the per-key cap lifted for the handles it creates:
/// for a rule's own series, which the config bounds. They still count
/// towards the cap, and are forgotten when idle as any per-key cell is.
pub(crate) fn beyond_the_cap<T>(register: impl FnOnce() -> T) -> T {
    BEYOND_THE_CAP.with(|b| b.set(true));
    let out = register();
    BEYOND_THE_CAP.with(|b| b.set(false));
    out
}

/// Most dynamic (request-keyed) cells kept at once.
pub const MAX_DYNAMIC_SERIES: usize = 100_000;

/// Most timer samples buffered per timer between two flushes; later samples
/// of the same interval are counted in `/stats` but not sent.
pub const MAX_PENDING_SAMPLES: usize = 1_000_000;

/// How names are written for the active sink.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum WireStyle {
    /// Tags serialised into the name (`.__k=v`).
    Statsd,
    /// Bare name plus a `|#k:v` block.
    DogStatsd,
}

/// Everything needed to name a new cell.
#[derive(Debug)]
pub(crate) struct Naming {
    pub(crate) style: WireStyle,
    pub(crate) extra_tags: BTreeMap<String, String>,
    /// Present when the Prometheus sink is active.
    pub(crate) mapper: Option<Mapper>,
    /// Whether timer samples are kept for a sink.
    pub(crate) buffer_samples: bool,
}

/// Immutable description of one cell.
#[derive(Debug)]
pub(crate) struct Meta {
    /// The statsd name without `EXTRA_TAGS` (labels of a labelled key are
    /// serialised like tags): what `/stats` shows.
    pub(crate) stat_name: String,
    /// The name as sent (with `EXTRA_TAGS` for plain statsd).
    pub(crate) wire_name: String,
    /// DogStatsD tag block, or empty.
    pub(crate) wire_tags: String,
    /// The Prometheus series, when the Prometheus sink is active and the
    /// mapping does not drop the stat.
    pub(crate) prom_key: Option<Key>,
    /// Factor for timer samples fed to Prometheus.
    pub(crate) prom_scale: f64,
    pub(crate) dynamic: bool,
}

impl Meta {
    fn new(key: &Key, kind: StatKind, naming: &Naming) -> Meta {
        let key_labels: BTreeMap<String, String> = key
            .labels()
            .map(|l| (l.key().to_string(), l.value().to_string()))
            .collect();
        let stat_name = format!("{}{}", key.name(), serialize_tags(&key_labels));
        let mut tags = naming.extra_tags.clone();
        tags.extend(key_labels.clone());
        let (wire_name, wire_tags) = match naming.style {
            WireStyle::Statsd => (
                format!("{}{}", key.name(), serialize_tags(&tags)),
                String::new(),
            ),
            WireStyle::DogStatsd => (key.name().to_string(), dogstatsd_tags(&tags)),
        };
        let mut prom_scale = 1.0;
        let prom_key = naming.mapper.as_ref().and_then(|m| {
            let mapped = m.map(key.name(), kind)?;
            prom_scale = mapped.scale;
            let mut labels: Vec<Label> = Vec::new();
            let mut seen = std::collections::HashSet::new();
            for (k, v) in mapped.labels {
                if seen.insert(k.clone()) {
                    labels.push(Label::new(k, v));
                }
            }
            // Key labels, then EXTRA_TAGS, as labels; a mapping label wins.
            for (k, v) in key_labels.iter().chain(naming.extra_tags.iter()) {
                let name = sanitize_label_name(k);
                if name.is_empty() || v.is_empty() || !seen.insert(name.clone()) {
                    continue;
                }
                labels.push(Label::new(name, v.clone()));
            }
            Some(Key::from_parts(mapped.name, labels))
        });
        Meta {
            stat_name,
            wire_name,
            wire_tags,
            prom_key,
            prom_scale,
            dynamic: key.name().starts_with(RATE_LIMIT_PREFIX),
        }
    }
}

/// Sweep bookkeeping shared by every cell kind (only the sweeper writes it).
#[derive(Debug, Default)]
pub(crate) struct Idle {
    sweeps: AtomicU32,
}

/// A counter: cumulative value and value at the previous flush.
#[derive(Debug)]
pub(crate) struct CounterCell {
    pub(crate) meta: Meta,
    value: AtomicU64,
    flushed: AtomicU64,
    seen: AtomicU64,
    /// Fed to Prometheus at least once (then fed at every sync, so the
    /// exporter's idle timeout never drops a series still in the registry).
    fed: AtomicBool,
    idle: Idle,
}

impl CounterFn for CounterCell {
    fn increment(&self, value: u64) {
        self.value.fetch_add(value, Ordering::Relaxed);
    }

    fn absolute(&self, value: u64) {
        self.value.fetch_max(value, Ordering::Relaxed);
    }
}

/// A gauge (f64 bits) and whether it was set since the previous sweep.
#[derive(Debug)]
pub(crate) struct GaugeCell {
    pub(crate) meta: Meta,
    bits: AtomicU64,
    touched: AtomicBool,
    idle: Idle,
}

impl GaugeCell {
    fn update(&self, f: impl Fn(f64) -> f64) {
        let _ = self
            .bits
            .fetch_update(Ordering::AcqRel, Ordering::Relaxed, |b| {
                Some(f(f64::from_bits(b)).to_bits())
            });
        self.touched.store(true, Ordering::Relaxed);
    }

    pub(crate) fn value(&self) -> f64 {
        f64::from_bits(self.bits.load(Ordering::Acquire))
    }
}

impl GaugeFn for GaugeCell {
    fn increment(&self, value: f64) {
        self.update(|v| v + value);
    }

    fn decrement(&self, value: f64) {
        self.update(|v| v - value);
    }

    fn set(&self, value: f64) {
        self.update(|_| value);
    }
}

/// A timer's totals and unflushed samples.
#[derive(Debug, Default)]
pub(crate) struct TimerState {
    pub(crate) count: u64,
    pub(crate) sum: f64,
    pending: Vec<f64>,
    dropped: u64,
    seen_count: u64,
}

/// A timer (values in milliseconds for the original's timers).
#[derive(Debug)]
pub(crate) struct TimerCell {
    pub(crate) meta: Meta,
    buffer: bool,
    pub(crate) state: Mutex<TimerState>,
    idle: Idle,
}

impl TimerCell {
    /// Takes the samples recorded since the last flush, and adds to
    /// `dropped` those the cap ([`MAX_PENDING_SAMPLES`]) left out.
    pub(crate) fn take_pending(&self, dropped: &mut u64) -> Vec<f64> {
        let mut s = self.state.lock();
        *dropped += std::mem::take(&mut s.dropped);
        std::mem::take(&mut s.pending)
    }
}

impl HistogramFn for TimerCell {
    fn record(&self, value: f64) {
        self.record_many(value, 1);
    }

    fn record_many(&self, value: f64, count: usize) {
        let mut s = self.state.lock();
        s.count += count as u64;
        s.sum += value * count as f64;
        if self.buffer {
            let room = MAX_PENDING_SAMPLES.saturating_sub(s.pending.len());
            let kept = count.min(room);
            s.pending.extend(std::iter::repeat_n(value, kept));
            s.dropped += (count - kept) as u64;
        }
    }
}

/// Creates cells; counts the dynamic ones.
#[derive(Debug)]
pub(crate) struct CellStorage {
    naming: Arc<Naming>,
    dynamic: Arc<AtomicUsize>,
}

impl CellStorage {
    fn note(&self, meta: &Meta) {
        if meta.dynamic {
            self.dynamic.fetch_add(1, Ordering::Relaxed);
        }
    }
}

impl Storage<Key> for CellStorage {
    type Counter = Arc<CounterCell>;
    type Gauge = Arc<GaugeCell>;
    type Histogram = Arc<TimerCell>;

    fn counter(&self, key: &Key) -> Self::Counter {
        let meta = Meta::new(key, StatKind::Counter, &self.naming);
        self.note(&meta);
        Arc::new(CounterCell {
            meta,
            value: AtomicU64::new(0),
            flushed: AtomicU64::new(0),
            seen: AtomicU64::new(0),
            fed: AtomicBool::new(false),
            idle: Idle::default(),
        })
    }

    fn gauge(&self, key: &Key) -> Self::Gauge {
        let meta = Meta::new(key, StatKind::Gauge, &self.naming);
        self.note(&meta);
        Arc::new(GaugeCell {
            meta,
            bits: AtomicU64::new(0f64.to_bits()),
            touched: AtomicBool::new(true),
            idle: Idle::default(),
        })
    }

    fn histogram(&self, key: &Key) -> Self::Histogram {
        let meta = Meta::new(key, StatKind::Timer, &self.naming);
        self.note(&meta);
        Arc::new(TimerCell {
            meta,
            buffer: self.naming.buffer_samples,
            state: Mutex::new(TimerState::default()),
            idle: Idle::default(),
        })
    }
}

/// One sample handed to a statsd-like sink by [`Core::drain`].
#[derive(Debug, Clone, Copy)]
pub(crate) enum Sample {
    /// A counter's increase since the previous flush (never 0).
    Counter(u64),
    /// A gauge's current value.
    Gauge(f64),
    /// One timer sample.
    Timer(f64),
}

/// A stat-generating callback run before every flush and render.
pub(crate) type Generator = Arc<dyn Fn() + Send + Sync>;

/// The shared state behind the recorder and the handle.
pub(crate) struct Core {
    pub(crate) registry: Registry<Key, CellStorage>,
    dynamic: Arc<AtomicUsize>,
    pub(crate) naming: Arc<Naming>,
    /// Present when the Prometheus sink is active.
    pub(crate) prometheus: Option<PrometheusRecorder>,
    /// Serialises flushes, Prometheus syncs and sweeps (the `flushed`
    /// cursors have one writer at a time).
    flush_lock: Mutex<()>,
    generators: RwLock<Vec<Generator>>,
    /// Sweeps a dynamic cell must stay unchanged before it is removed.
    idle_sweeps: u32,
    overflow_warned: Mutex<Option<Instant>>,
}

impl std::fmt::Debug for Core {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Core")
            .field("naming", &self.naming)
            .field("dynamic", &self.dynamic.load(Ordering::Relaxed))
            .field("prometheus", &self.prometheus.is_some())
            .field("generators", &self.generators.read().len())
            .field("idle_sweeps", &self.idle_sweeps)
            .finish()
    }
}

const META: Metadata<'static> = Metadata::new(
    "ratelimit::metrics",
    metrics::Level::INFO,
    Some(module_path!()),
);

impl Core {
    pub(crate) fn new(
        naming: Naming,
        prometheus: Option<PrometheusRecorder>,
        idle_sweeps: u32,
    ) -> Core {
        let naming = Arc::new(naming);
        let dynamic = Arc::new(AtomicUsize::new(0));
        Core {
            registry: Registry::new(CellStorage {
                naming: naming.clone(),
                dynamic: dynamic.clone(),
            }),
            dynamic,
            naming,
            prometheus,
            flush_lock: Mutex::new(()),
            generators: RwLock::new(Vec::new()),
            idle_sweeps: idle_sweeps.max(1),
            overflow_warned: Mutex::new(None),
        }
    }

    /// Number of dynamic cells currently in the registry.
    pub(crate) fn dynamic_cells(&self) -> usize {
        self.dynamic.load(Ordering::Relaxed)
    }

    /// Whether a new dynamic `key` must get a no-op handle: the cap is
    /// reached and `exists` (only asked then) says it is not registered yet.
    fn refuse(&self, key: &Key, exists: impl FnOnce() -> bool) -> bool {
        if self.dynamic.load(Ordering::Relaxed) < MAX_DYNAMIC_SERIES
            || BEYOND_THE_CAP.with(|b| b.get())
            || !key.name().starts_with(RATE_LIMIT_PREFIX)
            || exists()
        {
            return false;
        }
        let mut warned = self.overflow_warned.lock();
        if warned.is_none_or(|t| t.elapsed() >= super::statsd::WARN_INTERVAL) {
            tracing::warn!(
                target: "ratelimit::metrics",
                "{MAX_DYNAMIC_SERIES} per-key statistics already tracked; \
                 statistics of new keys are discarded until idle ones are forgotten"
            );
            *warned = Some(Instant::now());
        }
        true
    }

    pub(crate) fn add_generator(&self, g: Generator) {
        self.generators.write().push(g);
    }

    /// Runs the generators with this core as the thread's recorder.
    pub(crate) fn run_generators(self: &Arc<Self>) {
        let generators: Vec<Generator> = self.generators.read().clone();
        if generators.is_empty() {
            return;
        }
        let recorder = MetricsRecorder {
            core: Arc::clone(self),
        };
        metrics::with_local_recorder(&recorder, || {
            for g in &generators {
                g();
            }
        });
    }

    /// Hands every unflushed change to `emit` and marks it flushed: counter
    /// deltas (zero deltas skipped), every gauge, every buffered timer
    /// sample. Returns the number of timer samples dropped since the previous
    /// drain because a buffer was full.
    pub(crate) fn drain(&self, emit: &mut dyn FnMut(&Meta, Sample)) -> u64 {
        let _guard = self.flush_lock.lock();
        self.registry.visit_counters(|_, c| {
            let now = c.value.load(Ordering::Relaxed);
            let before = c.flushed.swap(now, Ordering::Relaxed);
            let delta = now.saturating_sub(before);
            if delta > 0 {
                emit(&c.meta, Sample::Counter(delta));
            }
        });
        self.registry
            .visit_gauges(|_, g| emit(&g.meta, Sample::Gauge(g.value())));
        let mut dropped = 0;
        self.registry.visit_histograms(|_, t| {
            let pending = t.take_pending(&mut dropped);
            for v in pending {
                emit(&t.meta, Sample::Timer(v));
            }
        });
        dropped
    }

    /// Forgets idle, unreferenced, fully flushed dynamic cells (see the
    /// module documentation). Call right after a flush or sync.
    pub(crate) fn sweep(&self) {
        let _guard = self.flush_lock.lock();
        let limit = self.idle_sweeps;
        let removed = AtomicUsize::new(0);
        // Whether a cell stayed idle long enough; `changed` resets the clock.
        let idle_enough = |idle: &Idle, changed: bool| {
            if changed {
                idle.sweeps.store(0, Ordering::Relaxed);
                false
            } else {
                let n = idle.sweeps.load(Ordering::Relaxed).saturating_add(1);
                idle.sweeps.store(n, Ordering::Relaxed);
                n >= limit
            }
        };
        self.registry.retain_counters(|_, c| {
            let now = c.value.load(Ordering::Relaxed);
            let changed = c.seen.swap(now, Ordering::Relaxed) != now;
            let forget = c.meta.dynamic
                && idle_enough(&c.idle, changed)
                && c.flushed.load(Ordering::Relaxed) == now
                && Arc::strong_count(c) == 1;
            if forget {
                removed.fetch_add(1, Ordering::Relaxed);
            }
            !forget
        });
        self.registry.retain_gauges(|_, g| {
            let changed = g.touched.swap(false, Ordering::Relaxed);
            let forget =
                g.meta.dynamic && idle_enough(&g.idle, changed) && Arc::strong_count(g) == 1;
            if forget {
                removed.fetch_add(1, Ordering::Relaxed);
            }
            !forget
        });
        self.registry.retain_histograms(|_, t| {
            let (changed, flushed) = {
                let mut s = t.state.lock();
                let changed = s.seen_count != s.count;
                s.seen_count = s.count;
                (changed, s.pending.is_empty())
            };
            let forget = t.meta.dynamic
                && idle_enough(&t.idle, changed)
                && flushed
                && Arc::strong_count(t) == 1;
            if forget {
                removed.fetch_add(1, Ordering::Relaxed);
            }
            !forget
        });
        let removed = removed.into_inner();
        if removed > 0 {
            self.dynamic.fetch_sub(removed, Ordering::Relaxed);
        }
    }
}

/// The [`metrics::Recorder`] of this crate. Cheap to clone; every clone
/// records into the same registry as the [`MetricsHandle`](super::MetricsHandle)
/// it was built with.
#[derive(Debug, Clone)]
pub struct MetricsRecorder {
    pub(crate) core: Arc<Core>,
}

impl Recorder for MetricsRecorder {
    fn describe_counter(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}

    fn describe_gauge(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}

    fn describe_histogram(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}

    fn register_counter(&self, key: &Key, _: &Metadata<'_>) -> Counter {
        let r = &self.core.registry;
        if self.core.refuse(key, || r.get_counter(key).is_some()) {
            return Counter::noop();
        }
        r.get_or_create_counter(key, |c| Counter::from_arc(c.clone()))
    }

    fn register_gauge(&self, key: &Key, _: &Metadata<'_>) -> Gauge {
        let r = &self.core.registry;
        if self.core.refuse(key, || r.get_gauge(key).is_some()) {
            return Gauge::noop();
        }
        r.get_or_create_gauge(key, |g| Gauge::from_arc(g.clone()))
    }

    fn register_histogram(&self, key: &Key, _: &Metadata<'_>) -> Histogram {
        let r = &self.core.registry;
        if self.core.refuse(key, || r.get_histogram(key).is_some()) {
            return Histogram::noop();
        }
        r.get_or_create_histogram(key, |t| Histogram::from_arc(t.clone()))
    }
}
