//! A `PROMETHEUS_MAPPER_YAML` file: the common subset of `statsd_exporter`
//! mapping files (glob and regex `match`, `name`, `labels` with `$n`
//! substitutions, `match_metric_type`, `action: drop`,
//! `timer_type`/`observer_type`, histogram `buckets` and `scale`), with
//! `statsd_exporter`'s semantics, unanchored regexes included: they are the
//! operator's own rules. It replaces the default mapping entirely.

use std::collections::BTreeSet;
use std::path::Path;

use regex::Regex;

use super::{escape_metric_name, is_label_name, Mapped, StatKind, DEFAULT_BUCKETS};
use crate::go::yaml::{self, Node, NodeKind, Resolved};

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

    pub(super) fn histogram_buckets(&self) -> Vec<(String, Vec<f64>)> {
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
    use crate::metrics::prometheus_mapping::tests::l;

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
        let counter = |name: &str| m.map(name, StatKind::Counter).expect("mapped");
        let two = counter("ratelimit.service.rate_limit.rl.foo.over_limit");
        assert_eq!(two.name, "rl_over_two");
        assert_eq!(two.labels, l(&[("domain", "rl"), ("key1", "foo")]));
        let three = counter("ratelimit.service.rate_limit.rl.a.b.over_limit");
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
