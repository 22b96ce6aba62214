//! Settings of the statistics sinks: statsd (and DogStatsD) and Prometheus.

use std::collections::BTreeMap;
use std::time::Duration;

use super::parse::{parse_bool, parse_list, parse_map, parse_port, parse_positive_duration};
use super::reader::Reader;
use super::vars::*;

/// Statistics sinks. The sink choice is made by the stats layer from
/// the flags; conflicting flags are not an error here.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StatsSettings {
    /// `USE_DOG_STATSD`: DogStatsD sink.
    pub use_dog_statsd: bool,
    /// `USE_DOG_STATSD_MOGRIFIERS`: mogrifier names.
    pub dog_statsd_mogrifiers: Vec<String>,
    /// `USE_STATSD`: plain statsd sink (on by default).
    pub use_statsd: bool,
    /// `STATSD_HOST`: statsd/DogStatsD host.
    pub statsd_host: String,
    /// `STATSD_PORT`: statsd/DogStatsD port.
    pub statsd_port: u16,
    /// `EXTRA_TAGS`: tags added to every stat.
    pub extra_tags: BTreeMap<String, String>,
    /// `STATS_FLUSH_INTERVAL`: flush period; never zero (zero is rejected, as the original
    /// crashes on it).
    pub flush_interval: Duration,
    /// `DISABLE_STATS`: discard all stats.
    pub disable_stats: bool,
    /// `USE_PROMETHEUS`: Prometheus sink.
    pub use_prometheus: bool,
    /// `PROMETHEUS_ADDR`: Prometheus listen address.
    pub prometheus_addr: String,
    /// `PROMETHEUS_PATH`: Prometheus scrape path.
    pub prometheus_path: String,
    /// `PROMETHEUS_MAPPER_YAML`: statsd_exporter mapping file replacing the default; empty
    /// means the default mapping.
    pub prometheus_mapper_yaml: String,
    /// `PROMETHEUS_RESPONSE_TIME_AS_MILLISECONDS`: keep response times in milliseconds in the
    /// default mapping.
    pub prometheus_response_time_as_milliseconds: bool,
    /// `RULE_LIMIT_GAUGES` (ours): each rule's configured limit as gauges.
    pub rule_limit_gauges: bool,
}

impl StatsSettings {
    pub(super) fn read(r: &mut Reader<'_>) -> StatsSettings {
        StatsSettings {
            use_dog_statsd: r.get(ENV_USE_DOG_STATSD, parse_bool),
            dog_statsd_mogrifiers: r.get(ENV_USE_DOG_STATSD_MOGRIFIERS, |s| Ok(parse_list(s))),
            use_statsd: r.get(ENV_USE_STATSD, parse_bool),
            statsd_host: r.string(ENV_STATSD_HOST),
            statsd_port: r.get(ENV_STATSD_PORT, parse_port),
            extra_tags: r.get(ENV_EXTRA_TAGS, parse_map),
            flush_interval: r.get(ENV_STATS_FLUSH_INTERVAL, parse_positive_duration),
            disable_stats: r.get(ENV_DISABLE_STATS, parse_bool),
            use_prometheus: r.get(ENV_USE_PROMETHEUS, parse_bool),
            prometheus_addr: r.string(ENV_PROMETHEUS_ADDR),
            prometheus_path: r.string(ENV_PROMETHEUS_PATH),
            prometheus_mapper_yaml: r.string(ENV_PROMETHEUS_MAPPER_YAML),
            prometheus_response_time_as_milliseconds: r
                .get(ENV_PROMETHEUS_RESPONSE_TIME_AS_MILLISECONDS, parse_bool),
            rule_limit_gauges: r.get(ENV_RULE_LIMIT_GAUGES, parse_bool),
        }
    }
}
