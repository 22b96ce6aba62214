//! Sink selection, the global recorder, the flush task and the Prometheus
//! endpoint.
//!
//! [`install`] chooses the sink exactly as the original, installs the
//! process's [`MetricsRecorder`] once and starts the flush task; the returned
//! [`MetricsHandle`] renders `/stats` and the Prometheus text, serves the
//! Prometheus port and performs the final flush at shutdown.
//!
//! # Differences from the original
//!
//! - [`MetricsHandle::flush_and_stop`] flushes one last time, so the
//!   counts of the last interval are not lost at shutdown.
//! - [`MetricsHandle::serve_prometheus`] serves only the metrics
//!   path (no `/debug/pprof`, no `/debug/vars`) and reports listener errors;
//!   an unreadable or invalid `PROMETHEUS_MAPPER_YAML` is a start-up error
//!   instead of silently dropping every mapping.
//! - the Prometheus names: see [`prometheus_mapping`](super::prometheus_mapping); in
//!   addition, [`record_grpc_call`](super::record_grpc_call) records response times with sub-millisecond
//!   precision, so the Prometheus histogram no longer rounds fast calls down
//!   to 0 s (statsd still receives whole milliseconds, truncated, as before).
//! - Timers reach statsd at the next flush (batched with the counters)
//!   instead of as soon as they are recorded; at most
//!   [`MAX_PENDING_SAMPLES`](super::recorder::MAX_PENDING_SAMPLES) samples per
//!   timer and interval are buffered.
//! - The Prometheus text has no `statsd_exporter_*`, `go_*` or `process_*`
//!   families; `EXTRA_TAGS` become labels instead of name suffixes.
//! - `USE_DOG_STATSD` is supported without mogrifiers
//!   (`USE_DOG_STATSD_MOGRIFIERS` is refused at start-up).

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use metrics_exporter_prometheus::{BuildError, Matcher, PrometheusBuilder, PrometheusHandle};
use metrics_util::MetricKindMask;
use parking_lot::Mutex;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

use super::prometheus_mapping::{CustomMapping, Mapper, MapperError};
use super::recorder::{Core, Meta, MetricsRecorder, Naming, Sample, WireStyle};
use super::statsd::{StatsdClient, StatsdProtocol};

/// Upper bound of every single statsd network operation (resolution,
/// connect, write); also capped by the flush interval.
pub const STATSD_IO_TIMEOUT: Duration = Duration::from_secs(2);

/// Default of [`MetricsOptions::idle_timeout`].
pub const DEFAULT_IDLE_TIMEOUT: Duration = Duration::from_secs(600);

/// Content type of the Prometheus text exposition format.
pub const PROMETHEUS_CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// The statistics settings, as plain data.
#[derive(Debug, Clone, PartialEq)]
pub struct MetricsOptions {
    /// `DISABLE_STATS`: emit nothing (statistics stay readable in-process).
    pub disable_stats: bool,
    /// `USE_DOG_STATSD`: DogStatsD over UDP.
    pub use_dog_statsd: bool,
    /// `USE_DOG_STATSD_MOGRIFIERS`: not supported (must be empty when
    /// DogStatsD is used).
    pub dog_statsd_mogrifiers: Vec<String>,
    /// `USE_STATSD` (default true).
    pub use_statsd: bool,
    /// `STATSD_HOST`.
    pub statsd_host: String,
    /// `STATSD_PORT`.
    pub statsd_port: u16,
    /// `STATSD_PROTOCOL` (plain statsd only; DogStatsD is always UDP).
    pub statsd_protocol: StatsdProtocol,
    /// `STATS_FLUSH_INTERVAL`; must be > 0.
    pub flush_interval: Duration,
    /// `USE_PROMETHEUS`.
    pub use_prometheus: bool,
    /// `PROMETHEUS_ADDR` (Go syntax, `:9090`); see [`listen_addr`].
    pub prometheus_addr: String,
    /// `PROMETHEUS_PATH`.
    pub prometheus_path: String,
    /// `PROMETHEUS_RESPONSE_TIME_AS_MILLISECONDS` (default mapping only).
    pub prometheus_response_time_as_ms: bool,
    /// `PROMETHEUS_MAPPER_YAML`: a mapping file replacing the default; empty
    /// for the default mapping.
    pub prometheus_mapper_yaml: String,
    /// `EXTRA_TAGS`.
    pub extra_tags: BTreeMap<String, String>,
    /// How long a per-key statistic (request-supplied stats keys, unknown
    /// domains) may stay unchanged and unreferenced before it is forgotten;
    /// zero = never. Not a setting of the original (which never forgets).
    pub idle_timeout: Duration,
}

impl Default for MetricsOptions {
    /// The original's defaults.
    fn default() -> Self {
        MetricsOptions {
            disable_stats: false,
            use_dog_statsd: false,
            dog_statsd_mogrifiers: Vec::new(),
            use_statsd: true,
            statsd_host: "localhost".into(),
            statsd_port: 8125,
            statsd_protocol: StatsdProtocol::Tcp,
            flush_interval: Duration::from_secs(10),
            use_prometheus: false,
            prometheus_addr: ":9090".into(),
            prometheus_path: "/metrics".into(),
            prometheus_response_time_as_ms: false,
            prometheus_mapper_yaml: String::new(),
            extra_tags: BTreeMap::new(),
            idle_timeout: DEFAULT_IDLE_TIMEOUT,
        }
    }
}

/// The sink chosen by [`select_sink`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SinkKind {
    /// `DISABLE_STATS`: nothing emitted.
    Null,
    /// `USE_DOG_STATSD`: DogStatsD over UDP.
    DogStatsd,
    /// `USE_STATSD`: plain statsd over `STATSD_PROTOCOL`.
    Statsd,
    /// `USE_PROMETHEUS`: the mapped Prometheus text.
    Prometheus,
    /// No sink enabled: every flushed stat is logged at debug level.
    Log,
}

/// A start-up or serving error of the metrics subsystem.
#[derive(Debug, thiserror::Error)]
pub enum MetricsError {
    /// Two sinks enabled at once (fatal in the original too); lists the
    /// enabled ones.
    #[error(
        "Error: unable to use more than one stats sink at the same time. Set one of \
         USE_DOG_STATSD, USE_STATSD, USE_PROMETHEUS. (enabled: {0}; note that USE_STATSD \
         defaults to true and must be set to false explicitly)"
    )]
    ConflictingSinks(String),
    /// A feature of the original this implementation does not have yet.
    #[error("{0} is not supported yet")]
    Unsupported(&'static str),
    /// `STATS_FLUSH_INTERVAL` is zero.
    #[error("STATS_FLUSH_INTERVAL must be greater than zero")]
    ZeroFlushInterval,
    /// The custom Prometheus mapping file is unreadable or invalid.
    #[error(transparent)]
    Mapper(#[from] MapperError),
    /// The Prometheus exporter rejected the histogram configuration.
    #[error("invalid Prometheus histogram configuration: {0}")]
    Prometheus(#[from] BuildError),
    /// [`install`] was called while a global recorder already exists.
    #[error("a global metrics recorder is already installed")]
    AlreadyInstalled,
    /// [`install`] was called outside a Tokio runtime.
    #[error("the metrics flush task needs a Tokio runtime: call install() from within one")]
    NoRuntime,
    /// `PROMETHEUS_PATH` does not start with `/`.
    #[error("PROMETHEUS_PATH must start with `/`, got {0:?}")]
    InvalidPath(String),
    /// The Prometheus listener failed.
    #[error("Prometheus listener failed: {0}")]
    Serve(#[source] std::io::Error),
}

/// The statistics sink, checked in the original's order: `DISABLE_STATS`,
/// then `USE_DOG_STATSD` (exclusive with the others), then `USE_STATSD`
/// (exclusive with Prometheus — and on by default), then `USE_PROMETHEUS`,
/// else the logging sink.
pub fn select_sink(opts: &MetricsOptions) -> Result<SinkKind, MetricsError> {
    if opts.disable_stats {
        return Ok(SinkKind::Null);
    }
    let enabled: Vec<&str> = [
        (opts.use_dog_statsd, "USE_DOG_STATSD"),
        (opts.use_statsd, "USE_STATSD"),
        (opts.use_prometheus, "USE_PROMETHEUS"),
    ]
    .into_iter()
    .filter_map(|(on, name)| on.then_some(name))
    .collect();
    if enabled.len() > 1 {
        return Err(MetricsError::ConflictingSinks(enabled.join(", ")));
    }
    if opts.use_dog_statsd {
        if !opts.dog_statsd_mogrifiers.is_empty() {
            return Err(MetricsError::Unsupported(
                "USE_DOG_STATSD_MOGRIFIERS (DogStatsD mogrifiers)",
            ));
        }
        return Ok(SinkKind::DogStatsd);
    }
    if opts.use_statsd {
        return Ok(SinkKind::Statsd);
    }
    if opts.use_prometheus {
        return Ok(SinkKind::Prometheus);
    }
    Ok(SinkKind::Log)
}

/// A Go listen address (`:9090`, `host:port`) as a Rust one: an empty host
/// means every IPv4 interface.
pub fn listen_addr(addr: &str) -> String {
    match addr.strip_prefix(':') {
        Some(port) => format!("0.0.0.0:{port}"),
        None => addr.to_string(),
    }
}

/// What one flush did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FlushReport {
    /// Lines handed to the sink (statsd lines, log events).
    pub lines: u64,
    /// Whether the statsd payload was delivered (true when nothing was due).
    pub delivered: bool,
    /// Timer samples discarded since the previous flush (buffer full).
    pub dropped_samples: u64,
}

#[derive(Debug)]
struct FlushTask {
    stop: oneshot::Sender<()>,
    join: JoinHandle<()>,
}

/// Access to the installed statistics. Cheap to clone.
///
/// Invariant: exactly one flush task runs per [`install`]; after
/// [`flush_and_stop`](Self::flush_and_stop) none runs, and later calls only
/// flush once more.
#[derive(Debug, Clone)]
pub struct MetricsHandle {
    core: Arc<Core>,
    sink: SinkKind,
    flush_interval: Duration,
    prometheus: Option<PrometheusHandle>,
    statsd: Option<Arc<tokio::sync::Mutex<StatsdClient>>>,
    task: Arc<Mutex<Option<FlushTask>>>,
}

/// Builds the recorder and its handle without installing anything and
/// without starting the flush task (for tests and embedding: use
/// [`metrics::with_local_recorder`] and [`MetricsHandle::flush`]).
pub fn build(opts: MetricsOptions) -> Result<(MetricsRecorder, MetricsHandle), MetricsError> {
    if opts.flush_interval.is_zero() {
        return Err(MetricsError::ZeroFlushInterval);
    }
    let sink = select_sink(&opts)?;
    let mapper = if sink == SinkKind::Prometheus {
        Some(if opts.prometheus_mapper_yaml.is_empty() {
            Mapper::Default {
                response_time_as_ms: opts.prometheus_response_time_as_ms,
            }
        } else {
            let custom = match CustomMapping::from_file(Path::new(&opts.prometheus_mapper_yaml)) {
                // The original ignores a file it cannot read and maps
                // nothing (Envoy Gateway's mapper ConfigMap is optional).
                Err(e @ MapperError::Read { .. }) => {
                    tracing::warn!(target: "ratelimit::metrics", "{e}; no mappings");
                    CustomMapping::from_yaml(b"mappings: []")?
                }
                other => other?,
            };
            let ignored: Vec<&str> = custom.ignored_keys().collect();
            if !ignored.is_empty() {
                tracing::warn!(
                    target: "ratelimit::metrics",
                    "PROMETHEUS_MAPPER_YAML {}: options not supported and ignored: {}",
                    opts.prometheus_mapper_yaml,
                    ignored.join(", ")
                );
            }
            Mapper::Custom(custom)
        })
    } else {
        None
    };
    let prometheus = match &mapper {
        Some(m) => {
            let mut builder = PrometheusBuilder::new().idle_timeout(
                MetricKindMask::COUNTER | MetricKindMask::GAUGE,
                (!opts.idle_timeout.is_zero()).then_some(opts.idle_timeout),
            );
            for (name, buckets) in m.histogram_buckets() {
                builder = builder.set_buckets_for_metric(Matcher::Full(name), &buckets)?;
            }
            Some(builder.build_recorder())
        }
        None => None,
    };
    let prometheus_handle = prometheus.as_ref().map(|p| p.handle());
    let idle_sweeps = if opts.idle_timeout.is_zero() {
        u32::MAX
    } else {
        let ticks = opts
            .idle_timeout
            .as_nanos()
            .div_ceil(opts.flush_interval.as_nanos());
        u32::try_from(ticks).unwrap_or(u32::MAX)
    };
    let naming = Naming {
        style: if sink == SinkKind::DogStatsd {
            WireStyle::DogStatsd
        } else {
            WireStyle::Statsd
        },
        extra_tags: opts.extra_tags.clone(),
        mapper,
        buffer_samples: sink != SinkKind::Null,
    };
    let core = Arc::new(Core::new(naming, prometheus, idle_sweeps));
    let statsd = match sink {
        SinkKind::Statsd | SinkKind::DogStatsd => {
            let protocol = if sink == SinkKind::DogStatsd {
                StatsdProtocol::Udp
            } else {
                opts.statsd_protocol
            };
            Some(Arc::new(tokio::sync::Mutex::new(StatsdClient::new(
                &opts.statsd_host,
                opts.statsd_port,
                protocol,
                STATSD_IO_TIMEOUT.min(opts.flush_interval),
            ))))
        }
        _ => None,
    };
    let handle = MetricsHandle {
        core: core.clone(),
        sink,
        flush_interval: opts.flush_interval,
        prometheus: prometheus_handle,
        statsd,
        task: Arc::new(Mutex::new(None)),
    };
    Ok((MetricsRecorder { core }, handle))
}

/// Chooses the sink, installs the global recorder (once per
/// process) and starts the flush task. Must be called within a Tokio
/// runtime. Nothing is installed when an error is returned.
pub fn install(opts: MetricsOptions) -> Result<MetricsHandle, MetricsError> {
    let runtime = tokio::runtime::Handle::try_current().map_err(|_| MetricsError::NoRuntime)?;
    let (recorder, handle) = build(opts)?;
    metrics::set_global_recorder(recorder).map_err(|_| MetricsError::AlreadyInstalled)?;
    handle.start(&runtime);
    tracing::info!(target: "ratelimit::metrics", sink = ?handle.sink, "stats initialized");
    Ok(handle)
}

impl MetricsHandle {
    /// The sink in use.
    pub fn sink(&self) -> SinkKind {
        self.sink
    }

    /// A recorder writing into this handle's registry (for
    /// [`metrics::with_local_recorder`]).
    pub fn recorder(&self) -> MetricsRecorder {
        MetricsRecorder {
            core: self.core.clone(),
        }
    }

    /// Registers a callback run before every flush and render, with this
    /// handle's recorder as the thread's recorder: the place to refresh
    /// gauges such as [`record_local_cache`](super::record_local_cache)'s.
    pub fn add_generator(&self, generator: impl Fn() + Send + Sync + 'static) {
        self.core.add_generator(Arc::new(generator));
    }

    /// Number of per-key (request-keyed) statistics currently tracked.
    pub fn dynamic_stats(&self) -> usize {
        self.core.dynamic_cells()
    }

    fn start(&self, runtime: &tokio::runtime::Handle) {
        let (stop, mut stopped) = oneshot::channel();
        let me = self.clone();
        let period = self.flush_interval;
        let join = runtime.spawn(async move {
            let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + period, period);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tokio::select! {
                    _ = tick.tick() => {
                        me.flush().await;
                    }
                    _ = &mut stopped => break,
                }
            }
            me.flush().await;
            me.close().await;
        });
        *self.task.lock() = Some(FlushTask { stop, join });
    }

    async fn close(&self) {
        if let Some(client) = &self.statsd {
            client.lock().await.close().await;
        }
    }

    /// Flushes now: statsd/DogStatsD lines (counter deltas, gauges, timer
    /// samples) are sent, the logging sink logs them, the Prometheus
    /// registry is brought up to date; then idle per-key statistics are
    /// forgotten. Never fails: delivery errors are logged (rate-limited).
    pub async fn flush(&self) -> FlushReport {
        self.core.run_generators();
        let mut report = FlushReport {
            delivered: true,
            ..FlushReport::default()
        };
        match self.sink {
            SinkKind::Null => {
                report.dropped_samples = self.core.drain(&mut |_, _| {});
            }
            SinkKind::Log => {
                let mut lines = 0;
                report.dropped_samples = self.core.drain(&mut |meta: &Meta, sample| {
                    lines += 1;
                    log_sample(meta, sample);
                });
                report.lines = lines;
            }
            SinkKind::Prometheus => {
                report.dropped_samples = self.core.sync_prometheus();
            }
            SinkKind::Statsd | SinkKind::DogStatsd => {
                let mut payload = String::new();
                let mut lines = 0;
                report.dropped_samples = self.core.drain(&mut |meta: &Meta, sample| {
                    if Core::push_statsd(&mut payload, meta, sample) {
                        lines += 1;
                    }
                });
                report.lines = lines;
                if let Some(client) = &self.statsd {
                    if lines > 0 {
                        report.delivered = client
                            .lock()
                            .await
                            .send_or_warn(payload.as_bytes(), lines)
                            .await;
                    }
                }
            }
        }
        if report.dropped_samples > 0 {
            tracing::warn!(
                target: "ratelimit::metrics",
                "{} timer samples dropped this interval (more than {} per timer)",
                report.dropped_samples,
                super::recorder::MAX_PENDING_SAMPLES
            );
        }
        self.core.sweep();
        report
    }

    /// Stops the flush task after one final flush, waiting for it
    /// at most a few statsd timeouts. Without a task (see [`build`]) it just
    /// flushes. Safe to call more than once.
    pub async fn flush_and_stop(&self) {
        let task = self.task.lock().take();
        match task {
            Some(FlushTask { stop, mut join }) => {
                let _ = stop.send(());
                let bound = STATSD_IO_TIMEOUT * 4 + Duration::from_secs(1);
                if tokio::time::timeout(bound, &mut join).await.is_err() {
                    join.abort();
                    tracing::warn!(target: "ratelimit::metrics", "final stats flush timed out");
                }
            }
            None => {
                self.flush().await;
                self.close().await;
            }
        }
    }

    /// The Prometheus text of every mapped statistic, brought up to date
    /// first; empty unless the Prometheus sink is active.
    pub fn render_prometheus(&self) -> String {
        let Some(handle) = &self.prometheus else {
            return String::new();
        };
        self.core.run_generators();
        let dropped = self.core.sync_prometheus();
        if dropped > 0 {
            tracing::warn!(target: "ratelimit::metrics", "{dropped} timer samples dropped");
        }
        handle.render()
    }

    /// Every statistic for the debug port's `/stats`: one
    /// `name: value\n` line per statistic in the original's statsd naming
    /// (without `EXTRA_TAGS`), sorted by name. Counters show their total
    /// since start (or since the statistic was last forgotten), gauges their
    /// value, timers `count=<n> sum_ms=<total>`. Works with every sink,
    /// `DISABLE_STATS` included.
    pub fn render_stats(&self) -> String {
        self.core.run_generators();
        self.core.render_stats()
    }
}

/// The logging sink: one debug event per flushed stat, as the original's
/// `gostats.loggingsink`.
fn log_sample(meta: &Meta, sample: Sample) {
    let (kind, value) = match sample {
        Sample::Counter(d) => ("counter", d as f64),
        Sample::Gauge(v) => ("gauge", v),
        Sample::Timer(v) => ("timer", v),
    };
    tracing::debug!(
        target: "gostats.loggingsink",
        name = %meta.wire_name,
        r#type = kind,
        value = %format_args!("{value:.6}"),
        "flushing {kind}"
    );
}

mod prometheus_endpoint;

#[cfg(test)]
mod tests;
