//! The translation of the original's statsd names into Prometheus metric
//! names and labels.
//!
//! The original feeds every flushed stat into an embedded `statsd_exporter`
//! whose mapping is either the built-in default or the file named by
//! `PROMETHEUS_MAPPER_YAML`. This module reproduces both:
//!
//! - [`map_statsd_name`] / [`Mapper::Default`]: the built-in default mapping
//!   as a pure function (the original's default table);
//! - [`CustomMapping`]: the common subset of `statsd_exporter` mapping files
//!   (glob and regex `match`, `name`, `labels` with `$n` substitutions,
//!   `match_metric_type`, `action: drop`, `timer_type`/`observer_type`,
//!   histogram `buckets` and `scale`).
//!
//! # Deliberate differences from the original
//!
//! - The default mapping's three-or-more-level rules are **anchored**: the
//!   original's regexes are unanchored, so
//!   `ratelimit.service.rate_limit.D.K1.K2.over_limit_with_local_cache` was
//!   also counted into `ratelimit_service_rate_limit_over_limit`. Here such a
//!   name is not folded; it becomes its escaped name
//!   (`ratelimit_service_rate_limit_D_K1_K2_over_limit_with_local_cache`),
//!   exactly as the original already does for the two-level form.
//! - `EXTRA_TAGS` are not serialised into the name before mapping (which in
//!   the original breaks every rate-limit mapping); the exporter maps the bare
//!   name and adds the tags as labels (a mapping's own labels win on a clash).
//! - Custom mapping files keep `statsd_exporter`'s semantics (unanchored
//!   regexes included): they are the operator's own rules.

use std::collections::BTreeSet;
use std::path::Path;

use regex::Regex;

use crate::yaml::{self, Node, NodeKind, Resolved};

/// `statsd_exporter`'s (and Prometheus') default histogram buckets, in
/// seconds: 5 ms … 10 s.
pub const DEFAULT_BUCKETS: [f64; 11] = [
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];

/// Prometheus name of the gRPC response-time histogram (default mapping).
pub const RESPONSE_TIME_METRIC: &str = "ratelimit_service_response_time_seconds";

/// The per-rule statistics the default mapping turns into labelled metrics:
/// the original's five, and ours of the decision audit (which the
/// original never emits, so its mapping of its own names is unchanged).
const RULE_STATS: [&str; 9] = [
    "near_limit",
    "over_limit",
    "total_hits",
    "within_limit",
    "shadow_mode",
    "audit_decisions",
    "audit_over",
    "audit_under",
    "audit_unverified",
];

/// The kind of a statsd statistic, as `match_metric_type` distinguishes them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum StatKind {
    /// `|c`: a counter (flushed as deltas).
    Counter,
    /// `|g`: a gauge.
    Gauge,
    /// `|ms`: a timer (an "observer" in `statsd_exporter`).
    Timer,
}

/// Where one statsd stat goes in Prometheus.
#[derive(Debug, Clone, PartialEq)]
pub struct Mapped {
    /// Prometheus metric name; always matches `[a-zA-Z_][a-zA-Z0-9_]*`.
    pub name: String,
    /// Labels in mapping order; names are valid Prometheus label names.
    pub labels: Vec<(String, String)>,
    /// Factor applied to every timer sample (1.0 = unchanged).
    pub scale: f64,
}

/// The statsd → Prometheus translation in force.
#[derive(Debug, Clone)]
pub enum Mapper {
    /// The original's built-in default mapping.
    Default {
        /// `PROMETHEUS_RESPONSE_TIME_AS_MILLISECONDS`: keep gRPC response
        /// times in milliseconds instead of scaling them to seconds.
        response_time_as_ms: bool,
    },
    /// A `PROMETHEUS_MAPPER_YAML` file (replaces the default entirely).
    Custom(CustomMapping),
}

impl Mapper {
    /// Maps one stat; `None` when a mapping drops it (`action: drop`).
    /// Unmatched names become their escaped name without labels.
    pub fn map(&self, name: &str, kind: StatKind) -> Option<Mapped> {
        match self {
            Mapper::Default {
                response_time_as_ms,
            } => {
                let (name, labels, is_response_time) = default_mapping(name, kind);
                let scale = if is_response_time && !response_time_as_ms {
                    0.001
                } else {
                    1.0
                };
                Some(Mapped {
                    name,
                    labels,
                    scale,
                })
            }
            Mapper::Custom(custom) => custom.map(name, kind),
        }
    }

    /// Histogram bucket bounds per Prometheus metric name; mapped timers not
    /// listed here are rendered as summaries.
    pub fn histogram_buckets(&self) -> Vec<(String, Vec<f64>)> {
        match self {
            Mapper::Default { .. } => {
                vec![(RESPONSE_TIME_METRIC.to_string(), DEFAULT_BUCKETS.to_vec())]
            }
            Mapper::Custom(custom) => custom.histogram_buckets(),
        }
    }
}

/// The original's built-in default mapping, with the three-level
/// rules anchored (see the module documentation): the Prometheus name and
/// labels of a statsd `name`, taking each name as the kind the catalogue
/// gives it — which only matters for the counter-only rules
/// (`should_rate_limit.*`, `total_requests`, `config_load_*`), all counters.
///
/// ```
/// use ratelimit::metrics::prometheus_mapping::map_statsd_name;
/// let (name, labels) = map_statsd_name("ratelimit.service.rate_limit.rl.foo.over_limit");
/// assert_eq!(name, "ratelimit_service_rate_limit_over_limit");
/// assert_eq!(labels, vec![("domain".into(), "rl".into()), ("key1".into(), "foo".into())]);
/// ```
pub fn map_statsd_name(name: &str) -> (String, Vec<(String, String)>) {
    let kind = if name.starts_with("ratelimit_server.") && name.ends_with(".response_time") {
        StatKind::Timer
    } else {
        StatKind::Counter
    };
    let (name, labels, _) = default_mapping(name, kind);
    (name, labels)
}

/// The default mapping of a stat of `kind`: name, labels, and whether it is
/// the response-time rule (whose samples are scaled ms → s).
fn default_mapping(name: &str, kind: StatKind) -> (String, Vec<(String, String)>, bool) {
    let segs: Vec<&str> = name.split('.').collect();
    let label = |k: &str, v: &str| (k.to_string(), v.to_string());
    // Glob rules (tried first, as statsd_exporter does).
    match segs.as_slice() {
        ["ratelimit", "service", "rate_limit", domain, key1, stat] if RULE_STATS.contains(stat) => {
            return (
                format!("ratelimit_service_rate_limit_{stat}"),
                vec![label("domain", domain), label("key1", key1)],
                false,
            );
        }
        ["ratelimit", "service", "call", "should_rate_limit", err] if kind == StatKind::Counter => {
            return (
                "ratelimit_service_should_rate_limit_error".to_string(),
                vec![label("err_type", err)],
                false,
            );
        }
        ["ratelimit_server", method, "total_requests"] if kind == StatKind::Counter => {
            return (
                "ratelimit_service_total_requests".to_string(),
                vec![label("grpc_method", method)],
                false,
            );
        }
        ["ratelimit_server", method, "response_time"] => {
            return (
                RESPONSE_TIME_METRIC.to_string(),
                vec![label("grpc_method", method)],
                kind == StatKind::Timer,
            );
        }
        // Ours: one breaker gauge per store node, the node as a label.
        ["ratelimit", "store", "breaker", node, "open"] => {
            return (
                "ratelimit_store_breaker_open".to_string(),
                vec![label("node", node)],
                false,
            );
        }
        // Ours: the busiest keys' rates by rank (1 = busiest), the rank as
        // a label: at most HOT_KEYS_TOP_K series.
        ["ratelimit", "hot_keys", rank, "rate"] if rank.starts_with("rank_") => {
            return (
                "ratelimit_hot_keys_rate".to_string(),
                vec![label("rank", &rank["rank_".len()..])],
                false,
            );
        }
        ["ratelimit", "service", "config_load_success"] if kind == StatKind::Counter => {
            return (
                "ratelimit_service_config_load_success".to_string(),
                Vec::new(),
                false,
            );
        }
        ["ratelimit", "service", "config_load_error"] if kind == StatKind::Counter => {
            return (
                "ratelimit_service_config_load_error".to_string(),
                Vec::new(),
                false,
            );
        }
        _ => {}
    }
    // Regex rules, anchored: D.K1.K2[.more…].<stat>, deeper segments dropped.
    if let ["ratelimit", "service", "rate_limit", domain, key1, key2, .., stat] = segs.as_slice() {
        if RULE_STATS.contains(stat) {
            return (
                format!("ratelimit_service_rate_limit_{stat}"),
                vec![
                    label("domain", domain),
                    label("key1", key1),
                    label("key2", key2),
                ],
                false,
            );
        }
    }
    (escape_metric_name(name), Vec::new(), false)
}

/// `statsd_exporter`'s escaping of an unmapped name: every character outside
/// `[a-zA-Z0-9_]` becomes `_`, and a leading digit gets a `_` prefix. The
/// result is a valid Prometheus metric name (empty input stays empty).
pub fn escape_metric_name(name: &str) -> String {
    let mut out = String::with_capacity(name.len() + 1);
    if name.starts_with(|c: char| c.is_ascii_digit()) {
        out.push('_');
    }
    out.extend(name.chars().map(|c| {
        if c.is_ascii_alphanumeric() || c == '_' {
            c
        } else {
            '_'
        }
    }));
    out
}

/// A Prometheus label name: `[a-zA-Z_][a-zA-Z0-9_]*`.
pub(crate) fn is_label_name(s: &str) -> bool {
    let mut chars = s.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// A label name made valid: invalid characters become `_`, a leading digit
/// gets a `_` prefix; empty stays empty (callers drop empty names).
pub(crate) fn sanitize_label_name(s: &str) -> String {
    escape_metric_name(s)
}

/// An error in a `PROMETHEUS_MAPPER_YAML` file.
#[derive(Debug, thiserror::Error)]
pub enum MapperError {
    /// The file could not be read.
    #[error("cannot read Prometheus mapper file {path}: {source}")]
    Read {
        /// The file.
        path: String,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The file is not valid YAML.
    #[error("Prometheus mapper file: {0}")]
    Yaml(String),
    /// The YAML is valid but a mapping is not.
    #[error("Prometheus mapper file, mapping {index}: {message}")]
    Mapping {
        /// 0-based position of the mapping in `mappings:`.
        index: usize,
        /// What is wrong.
        message: String,
    },
    /// The document structure is wrong outside the mappings.
    #[error("Prometheus mapper file: {0}")]
    Structure(String),
}

/// Whether a matched stat is exported.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Action {
    Map,
    Drop,
}

/// How a mapped timer is exported.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Observer {
    Histogram,
    Summary,
}

/// One compiled mapping of a custom file.
#[derive(Debug, Clone)]
struct Rule {
    /// Anchored for globs (`*` = one dot-free segment), as written for regexes.
    regex: Regex,
    name: String,
    labels: Vec<(String, String)>,
    metric_type: Option<StatKind>,
    action: Action,
    scale: f64,
    observer: Observer,
    buckets: Option<Vec<f64>>,
}

/// A parsed `statsd_exporter` mapping file (the supported subset).
///
/// Invariants: glob rules come before regex rules, each group in file order
/// (the order `statsd_exporter` tries them); every literal metric and label
/// name is valid; names produced by `$n` substitution are escaped.
#[derive(Debug, Clone)]
pub struct CustomMapping {
    rules: Vec<Rule>,
    default_buckets: Vec<f64>,
    /// Keys present in the file that this subset ignores (for one warning).
    ignored_keys: BTreeSet<String>,
}

impl CustomMapping {
    /// Reads and parses a mapping file.
    pub fn from_file(path: &Path) -> Result<CustomMapping, MapperError> {
        let text = std::fs::read(path).map_err(|source| MapperError::Read {
            path: path.display().to_string(),
            source,
        })?;
        CustomMapping::from_yaml(&text)
    }

    /// Parses a mapping file's text.
    pub fn from_yaml(text: &[u8]) -> Result<CustomMapping, MapperError> {
        let root = yaml::parse(text).map_err(|e| MapperError::Yaml(e.message))?;
        let NodeKind::Map(top) = &root.kind else {
            return Err(MapperError::Structure(
                "the document must be a mapping".into(),
            ));
        };
        let mut ignored = BTreeSet::new();
        let mut defaults = Defaults::default();
        let mut mappings: Option<&Vec<Node>> = None;
        for (k, v) in top {
            match scalar(k).unwrap_or("") {
                "mappings" => match &v.kind {
                    NodeKind::Seq(items) => mappings = Some(items),
                    NodeKind::Scalar(s) if s.value == Resolved::Null => {}
                    _ => return Err(MapperError::Structure("`mappings` must be a list".into())),
                },
                "defaults" => defaults = Defaults::parse(v, &mut ignored)?,
                other => {
                    ignored.insert(other.to_string());
                }
            }
        }
        let mut globs = Vec::new();
        let mut regexes = Vec::new();
        for (index, node) in mappings.into_iter().flatten().enumerate() {
            let (rule, is_glob) = parse_rule(node, &defaults, &mut ignored)
                .map_err(|message| MapperError::Mapping { index, message })?;
            if is_glob {
                globs.push(rule);
            } else {
                regexes.push(rule);
            }
        }
        globs.extend(regexes);
        Ok(CustomMapping {
            rules: globs,
            default_buckets: defaults.buckets.unwrap_or_else(|| DEFAULT_BUCKETS.to_vec()),
            ignored_keys: ignored,
        })
    }

    /// Keys of the file this implementation ignores (unsupported options).
    pub fn ignored_keys(&self) -> impl Iterator<Item = &str> {
        self.ignored_keys.iter().map(String::as_str)
    }

    /// Maps one stat: the first matching rule (globs first), `None` if it
    /// drops the stat, the escaped name if nothing matches.
    pub fn map(&self, name: &str, kind: StatKind) -> Option<Mapped> {
        for rule in &self.rules {
            if rule.metric_type.is_some_and(|t| t != kind) {
                continue;
            }
            let Some(caps) = rule.regex.captures(name) else {
                continue;
            };
            if rule.action == Action::Drop {
                return None;
            }
            let mut metric = String::new();
            caps.expand(&rule.name, &mut metric);
            let labels = rule
                .labels
                .iter()
                .map(|(k, template)| {
                    let mut v = String::new();
                    caps.expand(template, &mut v);
                    (k.clone(), v)
                })
                .collect();
            return Some(Mapped {
                name: escape_metric_name(&metric),
                labels,
                scale: rule.scale,
            });
        }
        Some(Mapped {
            name: escape_metric_name(name),
            labels: Vec::new(),
            scale: 1.0,
        })
    }

    fn histogram_buckets(&self) -> Vec<(String, Vec<f64>)> {
        self.rules
            .iter()
            .filter(|r| {
                r.action == Action::Map
                    && r.observer == Observer::Histogram
                    && !r.name.contains('$')
            })
            .map(|r| {
                let buckets = r
                    .buckets
                    .clone()
                    .unwrap_or_else(|| self.default_buckets.clone());
                (r.name.clone(), buckets)
            })
            .collect()
    }
}

/// The `defaults:` section (supported part).
#[derive(Debug, Default)]
struct Defaults {
    regex: bool,
    observer: Option<Observer>,
    buckets: Option<Vec<f64>>,
}

impl Defaults {
    fn parse(node: &Node, ignored: &mut BTreeSet<String>) -> Result<Defaults, MapperError> {
        let mut d = Defaults::default();
        let NodeKind::Map(pairs) = &node.kind else {
            return Err(MapperError::Structure(
                "`defaults` must be a mapping".into(),
            ));
        };
        let err = |m: String| MapperError::Structure(format!("defaults: {m}"));
        for (k, v) in pairs {
            let key = scalar(k).unwrap_or("");
            match key {
                "match_type" => d.regex = parse_match_type(v).map_err(err)?,
                "timer_type" | "observer_type" => d.observer = parse_observer(v).map_err(err)?,
                "buckets" => d.buckets = Some(parse_buckets(v).map_err(err)?),
                "histogram_options" => {
                    if let Some(b) = parse_histogram_options(v, ignored).map_err(err)? {
                        d.buckets = Some(b);
                    }
                }
                other => {
                    ignored.insert(format!("defaults.{other}"));
                }
            }
        }
        Ok(d)
    }
}

fn scalar(node: &Node) -> Option<&str> {
    match &node.kind {
        NodeKind::Scalar(s) => Some(s.text.as_str()),
        _ => None,
    }
}

fn string(node: &Node, what: &str) -> Result<String, String> {
    match &node.kind {
        NodeKind::Scalar(s) if s.value != Resolved::Null => Ok(s.text.clone()),
        NodeKind::Scalar(_) => Ok(String::new()),
        _ => Err(format!("`{what}` must be a string")),
    }
}

fn parse_match_type(node: &Node) -> Result<bool, String> {
    match string(node, "match_type")?.as_str() {
        "" | "glob" => Ok(false),
        "regex" => Ok(true),
        other => Err(format!("unknown match_type {other:?}")),
    }
}

fn parse_observer(node: &Node) -> Result<Option<Observer>, String> {
    match string(node, "observer_type")?.as_str() {
        "" | "default" => Ok(None),
        "histogram" => Ok(Some(Observer::Histogram)),
        "summary" => Ok(Some(Observer::Summary)),
        other => Err(format!("unknown observer_type {other:?}")),
    }
}

fn parse_buckets(node: &Node) -> Result<Vec<f64>, String> {
    let NodeKind::Seq(items) = &node.kind else {
        return Err("`buckets` must be a list of numbers".into());
    };
    let mut out = Vec::with_capacity(items.len());
    for item in items {
        let value = match &item.kind {
            NodeKind::Scalar(s) => match s.value {
                Resolved::Int(i) => i as f64,
                Resolved::Float(f) => f,
                _ => return Err(format!("bucket {:?} is not a number", s.text)),
            },
            _ => return Err("`buckets` must be a list of numbers".into()),
        };
        out.push(value);
    }
    if out.is_empty() {
        return Err("`buckets` must not be empty".into());
    }
    Ok(out)
}

fn parse_histogram_options(
    node: &Node,
    ignored: &mut BTreeSet<String>,
) -> Result<Option<Vec<f64>>, String> {
    let NodeKind::Map(pairs) = &node.kind else {
        return Err("`histogram_options` must be a mapping".into());
    };
    let mut buckets = None;
    for (k, v) in pairs {
        match scalar(k).unwrap_or("") {
            "buckets" => buckets = Some(parse_buckets(v)?),
            other => {
                ignored.insert(format!("histogram_options.{other}"));
            }
        }
    }
    Ok(buckets)
}

/// Compiles one entry of `mappings:`; `true` = glob rule.
fn parse_rule(
    node: &Node,
    defaults: &Defaults,
    ignored: &mut BTreeSet<String>,
) -> Result<(Rule, bool), String> {
    let NodeKind::Map(pairs) = &node.kind else {
        return Err("a mapping must be a YAML mapping".into());
    };
    let mut pattern = None;
    let mut name = None;
    let mut labels = Vec::new();
    let mut regex_type = defaults.regex;
    let mut metric_type = None;
    let mut action = Action::Map;
    let mut scale = 1.0;
    let mut observer = defaults.observer;
    let mut buckets = None;
    for (k, v) in pairs {
        let key = scalar(k).unwrap_or("");
        match key {
            "match" => pattern = Some(string(v, "match")?),
            "name" => name = Some(string(v, "name")?),
            "labels" => {
                let NodeKind::Map(lp) = &v.kind else {
                    return Err("`labels` must be a mapping".into());
                };
                for (lk, lv) in lp {
                    let label = string(lk, "label name")?;
                    if !is_label_name(&label) {
                        return Err(format!("invalid label name {label:?}"));
                    }
                    labels.retain(|(existing, _): &(String, String)| *existing != label);
                    labels.push((label, string(lv, "label value")?));
                }
            }
            "match_type" => regex_type = parse_match_type(v)?,
            "match_metric_type" => {
                metric_type = match string(v, "match_metric_type")?.as_str() {
                    "" => None,
                    "counter" => Some(StatKind::Counter),
                    "gauge" => Some(StatKind::Gauge),
                    "observer" | "timer" => Some(StatKind::Timer),
                    other => return Err(format!("unknown match_metric_type {other:?}")),
                }
            }
            "action" => {
                action = match string(v, "action")?.as_str() {
                    "" | "map" => Action::Map,
                    "drop" => Action::Drop,
                    other => return Err(format!("unknown action {other:?}")),
                }
            }
            "scale" => {
                scale = match &v.kind {
                    NodeKind::Scalar(s) => match s.value {
                        Resolved::Int(i) => i as f64,
                        Resolved::Float(f) => f,
                        _ => return Err(format!("scale {:?} is not a number", s.text)),
                    },
                    _ => return Err("`scale` must be a number".into()),
                }
            }
            "timer_type" | "observer_type" => observer = parse_observer(v)?,
            "buckets" => buckets = Some(parse_buckets(v)?),
            "histogram_options" => {
                if let Some(b) = parse_histogram_options(v, ignored)? {
                    buckets = Some(b);
                }
            }
            // Documentation only: nothing to do.
            "help" => {}
            other => {
                ignored.insert(format!("mappings.{other}"));
            }
        }
    }
    let pattern = pattern
        .filter(|p| !p.is_empty())
        .ok_or("`match` is required")?;
    let name = name.unwrap_or_default();
    if action == Action::Map {
        if name.is_empty() {
            return Err("`name` is required".into());
        }
        if !name.contains('$') && escape_metric_name(&name) != name {
            return Err(format!("invalid metric name {name:?}"));
        }
    }
    let regex = if regex_type {
        Regex::new(&pattern).map_err(|e| format!("invalid regex {pattern:?}: {e}"))?
    } else {
        glob_regex(&pattern)?
    };
    let rule = Rule {
        regex,
        name,
        labels,
        metric_type,
        action,
        scale,
        observer: observer.unwrap_or(Observer::Summary),
        buckets,
    };
    Ok((rule, !regex_type))
}

/// A glob as an anchored regex: `*` matches one dot-free segment (possibly
/// empty), every other character itself.
fn glob_regex(glob: &str) -> Result<Regex, String> {
    let mut re = String::with_capacity(glob.len() * 2 + 2);
    re.push('^');
    let mut literal = [0u8; 4];
    for c in glob.chars() {
        if c == '*' {
            re.push_str("([^.]*)");
        } else {
            re.push_str(&regex::escape(c.encode_utf8(&mut literal)));
        }
    }
    re.push('$');
    Regex::new(&re).map_err(|e| format!("invalid glob {glob:?}: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn l(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn check(statsd: &str, prom: &str, labels: &[(&str, &str)]) {
        assert_eq!(
            map_statsd_name(statsd),
            (prom.to_string(), l(labels)),
            "{statsd}"
        );
    }

    #[test]
    fn hot_key_gauges_carry_their_rank_as_a_label() {
        check(
            "ratelimit.hot_keys.rank_3.rate",
            "ratelimit_hot_keys_rate",
            &[("rank", "3")],
        );
    }

    #[test]
    fn row_two_level_near_limit() {
        check(
            "ratelimit.service.rate_limit.rl.foo.near_limit",
            "ratelimit_service_rate_limit_near_limit",
            &[("domain", "rl"), ("key1", "foo")],
        );
    }

    #[test]
    fn row_two_level_over_limit() {
        check(
            "ratelimit.service.rate_limit.rl.foo.over_limit",
            "ratelimit_service_rate_limit_over_limit",
            &[("domain", "rl"), ("key1", "foo")],
        );
    }

    #[test]
    fn row_two_level_total_hits() {
        check(
            "ratelimit.service.rate_limit.basic.key1.total_hits",
            "ratelimit_service_rate_limit_total_hits",
            &[("domain", "basic"), ("key1", "key1")],
        );
    }

    #[test]
    fn row_two_level_within_limit() {
        check(
            "ratelimit.service.rate_limit.rl.unspec_unspecified_value.within_limit",
            "ratelimit_service_rate_limit_within_limit",
            &[("domain", "rl"), ("key1", "unspec_unspecified_value")],
        );
    }

    #[test]
    fn row_two_level_shadow_mode() {
        check(
            "ratelimit.service.rate_limit.rl.foo.shadow_mode",
            "ratelimit_service_rate_limit_shadow_mode",
            &[("domain", "rl"), ("key1", "foo")],
        );
    }

    #[test]
    fn row_three_level_near_limit() {
        check(
            "ratelimit.service.rate_limit.rl.foo.bar_bkthomps.near_limit",
            "ratelimit_service_rate_limit_near_limit",
            &[("domain", "rl"), ("key1", "foo"), ("key2", "bar_bkthomps")],
        );
    }

    #[test]
    fn row_three_or_more_levels_every_stat() {
        for stat in RULE_STATS {
            check(
                &format!("ratelimit.service.rate_limit.domain1.key1_val1.key2_val2.{stat}"),
                &format!("ratelimit_service_rate_limit_{stat}"),
                &[
                    ("domain", "domain1"),
                    ("key1", "key1_val1"),
                    ("key2", "key2_val2"),
                ],
            );
            // Deeper segments are dropped.
            check(
                &format!(
                    "ratelimit.service.rate_limit.domain1.key3_val3.key4_val4.key5_val5.k6.{stat}"
                ),
                &format!("ratelimit_service_rate_limit_{stat}"),
                &[
                    ("domain", "domain1"),
                    ("key1", "key3_val3"),
                    ("key2", "key4_val4"),
                ],
            );
        }
    }

    #[test]
    fn the_audit_counters_are_labelled_like_the_rule_stats() {
        for stat in [
            "audit_decisions",
            "audit_over",
            "audit_under",
            "audit_unverified",
        ] {
            let (name, labels) = map_statsd_name(&format!(
                "ratelimit.service.rate_limit.api.tenant_big.{stat}"
            ));
            assert_eq!(name, format!("ratelimit_service_rate_limit_{stat}"));
            assert_eq!(
                labels,
                vec![
                    ("domain".to_string(), "api".to_string()),
                    ("key1".to_string(), "tenant_big".to_string())
                ]
            );
        }
    }

    #[test]
    fn row_should_rate_limit_errors() {
        check(
            "ratelimit.service.call.should_rate_limit.redis_error",
            "ratelimit_service_should_rate_limit_error",
            &[("err_type", "redis_error")],
        );
        check(
            "ratelimit.service.call.should_rate_limit.service_error",
            "ratelimit_service_should_rate_limit_error",
            &[("err_type", "service_error")],
        );
    }

    #[test]
    fn row_total_requests() {
        check(
            "ratelimit_server.ShouldRateLimit.total_requests",
            "ratelimit_service_total_requests",
            &[("grpc_method", "ShouldRateLimit")],
        );
    }

    #[test]
    fn row_response_time_is_scaled_histogram() {
        check(
            "ratelimit_server.ShouldRateLimit.response_time",
            RESPONSE_TIME_METRIC,
            &[("grpc_method", "ShouldRateLimit")],
        );
        let secs = Mapper::Default {
            response_time_as_ms: false,
        };
        let ms = Mapper::Default {
            response_time_as_ms: true,
        };
        let name = "ratelimit_server.Check.response_time";
        assert_eq!(
            secs.map(name, StatKind::Timer).map(|m| m.scale),
            Some(0.001)
        );
        assert_eq!(ms.map(name, StatKind::Timer).map(|m| m.scale), Some(1.0));
        assert_eq!(
            secs.histogram_buckets(),
            vec![(RESPONSE_TIME_METRIC.to_string(), DEFAULT_BUCKETS.to_vec())]
        );
    }

    #[test]
    fn row_config_load() {
        check(
            "ratelimit.service.config_load_success",
            "ratelimit_service_config_load_success",
            &[],
        );
        check(
            "ratelimit.service.config_load_error",
            "ratelimit_service_config_load_error",
            &[],
        );
    }

    #[test]
    fn row_everything_else_is_escaped() {
        check(
            "ratelimit.service.rate_limit.rl.domain_not_found",
            "ratelimit_service_rate_limit_rl_domain_not_found",
            &[],
        );
        check(
            "ratelimit.service.global_shadow_mode",
            "ratelimit_service_global_shadow_mode",
            &[],
        );
        check(
            "ratelimit.service.rate_limit.rl.foo.over_limit_with_local_cache",
            "ratelimit_service_rate_limit_rl_foo_over_limit_with_local_cache",
            &[],
        );
        check(
            "ratelimit.redis_pool.cx_active",
            "ratelimit_redis_pool_cx_active",
            &[],
        );
        check(
            "ratelimit.localcache.hitCount",
            "ratelimit_localcache_hitCount",
            &[],
        );
        check("runtime.load_attempts", "runtime_load_attempts", &[]);
    }

    #[test]
    fn w25_three_level_local_cache_stat_is_not_folded() {
        check(
            "ratelimit.service.rate_limit.rl.a.b.over_limit_with_local_cache",
            "ratelimit_service_rate_limit_rl_a_b_over_limit_with_local_cache",
            &[],
        );
        // A stat name that merely starts with a mapped one is not mapped either.
        check(
            "ratelimit.service.rate_limit.rl.a.b.total_hits_x",
            "ratelimit_service_rate_limit_rl_a_b_total_hits_x",
            &[],
        );
    }

    #[test]
    fn counter_only_rules_ignore_other_kinds() {
        let m = Mapper::Default {
            response_time_as_ms: false,
        };
        let g = m
            .map("ratelimit_server.Check.total_requests", StatKind::Gauge)
            .map(|m| m.name);
        assert_eq!(g.as_deref(), Some("ratelimit_server_Check_total_requests"));
        let c = m
            .map("ratelimit_server.Check.total_requests", StatKind::Counter)
            .map(|m| m.name);
        assert_eq!(c.as_deref(), Some("ratelimit_service_total_requests"));
    }

    #[test]
    fn escaping_follows_statsd_exporter() {
        assert_eq!(escape_metric_name("a.b-c:d|e"), "a_b_c_d_e");
        assert_eq!(escape_metric_name("1abc"), "_1abc");
        assert_eq!(escape_metric_name("a.é"), "a__");
        assert_eq!(escape_metric_name(""), "");
    }

    const CUSTOM: &str = r#"
defaults:
  timer_type: histogram
  buckets: [0.1, 1]
mappings:
  - match: "ratelimit\\.service\\.rate_limit\\.(.*)\\.over_limit"
    match_type: regex
    name: "rl_over_limit"
    labels:
      key: "$1"
  - match: "ratelimit.service.rate_limit.*.*.over_limit"
    name: "rl_over_two"
    labels:
      domain: "$1"
      key1: "${2}"
  - match: "ratelimit.service.rate_limit.*.*.near_limit"
    action: drop
  - match: "ratelimit_server.*.response_time"
    name: "rpc_seconds"
    scale: 0.001
    labels:
      method: "$1"
  - match: "ratelimit_server.*.total_requests"
    match_metric_type: gauge
    name: "never_for_counters"
  - match: "ratelimit.*.cx_*"
    name: "pool_$2"
    ttl: 5m
"#;

    #[test]
    fn custom_mapping_subset() {
        let m = CustomMapping::from_yaml(CUSTOM.as_bytes()).expect("valid file");
        // Globs first, then regexes.
        let two = m
            .map(
                "ratelimit.service.rate_limit.rl.foo.over_limit",
                StatKind::Counter,
            )
            .expect("mapped");
        assert_eq!(two.name, "rl_over_two");
        assert_eq!(two.labels, l(&[("domain", "rl"), ("key1", "foo")]));
        let three = m
            .map(
                "ratelimit.service.rate_limit.rl.a.b.over_limit",
                StatKind::Counter,
            )
            .expect("mapped");
        assert_eq!(three.name, "rl_over_limit");
        assert_eq!(three.labels, l(&[("key", "rl.a.b")]));
        assert_eq!(
            m.map(
                "ratelimit.service.rate_limit.rl.foo.near_limit",
                StatKind::Counter
            ),
            None
        );
        let rt = m
            .map("ratelimit_server.Check.response_time", StatKind::Timer)
            .expect("mapped");
        assert_eq!((rt.name.as_str(), rt.scale), ("rpc_seconds", 0.001));
        assert_eq!(rt.labels, l(&[("method", "Check")]));
        let tr = m
            .map("ratelimit_server.Check.total_requests", StatKind::Counter)
            .expect("mapped");
        assert_eq!(tr.name, "ratelimit_server_Check_total_requests");
        let pool = m
            .map("ratelimit.redis_pool.cx_total", StatKind::Counter)
            .expect("mapped");
        assert_eq!(pool.name, "pool_total");
        assert_eq!(m.ignored_keys().collect::<Vec<_>>(), vec!["mappings.ttl"]);
        // `defaults.timer_type: histogram` applies to every literal name.
        let names: Vec<String> = m
            .histogram_buckets()
            .into_iter()
            .map(|(n, b)| {
                assert_eq!(b, vec![0.1, 1.0]);
                n
            })
            .collect();
        assert_eq!(
            names,
            [
                "rl_over_two",
                "rpc_seconds",
                "never_for_counters",
                "rl_over_limit"
            ]
        );
    }

    #[test]
    fn custom_mapping_errors() {
        let bad = [
            "mappings:\n  - name: x\n",
            "mappings:\n  - match: a.b\n",
            "mappings:\n  - match: a.b\n    name: 'bad-name'\n",
            "mappings:\n  - match: '('\n    match_type: regex\n    name: x\n",
            "mappings:\n  - match: a\n    name: x\n    labels:\n      'bad-label': v\n",
            "mappings: 3\n",
            "[1, 2]\n",
            "mappings: [\n",
        ];
        for text in bad {
            assert!(CustomMapping::from_yaml(text.as_bytes()).is_err(), "{text}");
        }
        assert!(matches!(
            CustomMapping::from_file(Path::new("/nonexistent/mapper.yaml")),
            Err(MapperError::Read { .. })
        ));
    }
}
