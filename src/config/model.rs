//! Typed decoding of a document that passed the key check into the raw model.
//!
//! The structs mirror the YAML and carry the
//! line of each node for error messages. Decoding follows yaml.v2 into the
//! original's Go structs: pairs are applied in document order (so a duplicate
//! key's last value wins), a known key in the wrong place is ignored, null
//! gives the zero value, and every type error of the file is collected, in
//! document order, with yaml.v2's text.

use super::error::TypeError;
use crate::go::yaml::{Node, NodeKind, Resolved};

/// One file: `domain` and its top-level descriptors.
#[derive(Debug, Clone, Default)]
pub(crate) struct RawFile {
    pub(crate) domain: String,
    pub(crate) domain_line: usize,
    pub(crate) descriptors: Vec<RawDescriptor>,
}

/// One descriptor node.
#[derive(Debug, Clone, Default)]
pub(crate) struct RawDescriptor {
    pub(crate) line: usize,
    pub(crate) key: String,
    pub(crate) value: String,
    pub(crate) rate_limit: Option<RawRateLimit>,
    /// The extension `rate_limits:`; `Some` when the key is present.
    pub(crate) rate_limits: Option<(usize, Vec<RawRateLimit>)>,
    pub(crate) descriptors: Vec<RawDescriptor>,
    pub(crate) shadow_mode: bool,
    pub(crate) quota_mode: bool,
    pub(crate) detailed_metric: bool,
    pub(crate) value_to_metric: bool,
    pub(crate) share_threshold: bool,
    pub(crate) metadata: Option<RawMetadata>,
}

/// A descriptor's `metadata`: a YAML mapping, or (from xDS) a decoded
/// `Struct`.
#[derive(Debug, Clone)]
pub(crate) enum RawMetadata {
    Yaml(Node),
    Decoded(super::Metadata),
}

/// A `rate_limit` block.
#[derive(Debug, Clone, Default)]
pub(crate) struct RawRateLimit {
    pub(crate) line: usize,
    pub(crate) unit: String,
    pub(crate) requests_per_unit: u32,
    pub(crate) unlimited: bool,
    pub(crate) name: String,
    pub(crate) replaces: Vec<RawReplace>,
    /// Extension: `algorithm:` ("" when absent).
    pub(crate) algorithm: String,
    /// Extension: `burst:` (token bucket capacity).
    pub(crate) burst: Option<u32>,
    /// Extension: `unit_multiplier:`.
    pub(crate) unit_multiplier: Option<u32>,
    /// Extension: `failure_mode:` ("" when absent).
    pub(crate) failure_mode: String,
    /// Extension: `fallback_requests_per_unit:`.
    pub(crate) fallback_requests_per_unit: Option<u32>,
    /// Extension: `durability:` ("" when absent).
    pub(crate) durability: String,
    /// Extension: `shards:` (sub-buckets of a hot limit).
    pub(crate) shards: Option<u32>,
    /// Extension: `lease:` (token leasing of a hot limit).
    pub(crate) lease: bool,
    /// Extension: `calendar:` (calendar windows instead of epoch-aligned).
    pub(crate) calendar: bool,
    /// Extension: `time_zone:` of a calendar ("" when absent), and its line.
    pub(crate) time_zone: String,
    pub(crate) time_zone_line: usize,
    /// Extension: `max_in_flight:` of an in-flight limit.
    pub(crate) max_in_flight: Option<u32>,
    /// Extension: `max_duration:` of an in-flight limit ("" when absent).
    pub(crate) max_duration: String,
    /// Extension: `sync_interval:` of a local-first fixed window ("" when
    /// absent).
    pub(crate) sync_interval: String,
}

/// One `replaces` entry.
#[derive(Debug, Clone, Default)]
pub(crate) struct RawReplace {
    pub(crate) line: usize,
    pub(crate) name: String,
}

/// Decodes a document that passed the key check.
pub(crate) fn decode_file(root: &Node) -> Result<RawFile, Vec<TypeError>> {
    let mut d = Decoder::default();
    let mut file = RawFile {
        domain_line: root.line,
        ..RawFile::default()
    };
    for (key, value) in pairs(root) {
        match key {
            "domain" => {
                file.domain = d.string(value);
                file.domain_line = value.line;
            }
            "descriptors" => file.descriptors = d.descriptors(value),
            _ => {}
        }
    }
    if d.errors.is_empty() {
        Ok(file)
    } else {
        Err(d.errors)
    }
}

/// The string-keyed pairs of a mapping node, in document order.
fn pairs(node: &Node) -> impl Iterator<Item = (&str, &Node)> {
    let pairs: &[(Node, Node)] = match &node.kind {
        NodeKind::Map(p) => p,
        _ => &[],
    };
    pairs.iter().filter_map(|(k, v)| match &k.kind {
        NodeKind::Scalar(s) => Some((s.text.as_str(), v)),
        _ => None,
    })
}

#[derive(Default)]
struct Decoder {
    errors: Vec<TypeError>,
}

impl Decoder {
    fn fail(&mut self, node: &Node, go_type: &'static str) {
        let text = match &node.kind {
            NodeKind::Scalar(s) => Some(s.text.as_str()),
            _ => None,
        };
        self.errors
            .push(TypeError::new(node.line, node.tag(), text, go_type));
    }

    /// Any scalar decodes into a string field as its text; null is "".
    fn string(&mut self, node: &Node) -> String {
        match &node.kind {
            NodeKind::Scalar(s) => match &s.value {
                Resolved::Null => String::new(),
                Resolved::Binary(bytes) => String::from_utf8_lossy(bytes).into_owned(),
                _ => s.text.clone(),
            },
            _ => {
                self.fail(node, "string");
                String::new()
            }
        }
    }

    /// Only YAML booleans decode into a bool field; null is false.
    fn bool(&mut self, node: &Node) -> bool {
        match &node.kind {
            NodeKind::Scalar(s) => match s.value {
                Resolved::Bool(b) => b,
                Resolved::Null => false,
                _ => {
                    self.fail(node, "bool");
                    false
                }
            },
            _ => {
                self.fail(node, "bool");
                false
            }
        }
    }

    /// Only ints in 0..=u32::MAX decode into `requests_per_unit`; null is 0.
    fn uint32(&mut self, node: &Node) -> u32 {
        if let NodeKind::Scalar(s) = &node.kind {
            match s.value {
                Resolved::Null => return 0,
                Resolved::Int(i) => {
                    if let Ok(v) = u32::try_from(i) {
                        return v;
                    }
                }
                _ => {}
            }
        }
        self.fail(node, "uint32");
        0
    }

    /// `None` for an explicit null, as if the key were absent.
    fn optional_uint32(&mut self, node: &Node) -> Option<u32> {
        match &node.kind {
            NodeKind::Scalar(s) if s.value == Resolved::Null => None,
            _ => Some(self.uint32(node)),
        }
    }

    /// The extension `rate_limits:`, a list of `rate_limit` blocks.
    fn rate_limit_list(&mut self, node: &Node) -> Vec<RawRateLimit> {
        match &node.kind {
            NodeKind::Seq(items) => items.iter().filter_map(|i| self.rate_limit(i)).collect(),
            NodeKind::Scalar(s) if s.value == Resolved::Null => Vec::new(),
            _ => {
                self.fail(node, "[]config.YamlRateLimit");
                Vec::new()
            }
        }
    }

    fn descriptors(&mut self, node: &Node) -> Vec<RawDescriptor> {
        match &node.kind {
            NodeKind::Seq(items) => items
                .iter()
                .filter_map(|item| match item.kind {
                    NodeKind::Map(_) => Some(self.descriptor(item)),
                    NodeKind::Scalar(ref s) if s.value == Resolved::Null => Some(RawDescriptor {
                        line: item.line,
                        ..RawDescriptor::default()
                    }),
                    _ => {
                        self.fail(item, "config.YamlDescriptor");
                        None
                    }
                })
                .collect(),
            NodeKind::Scalar(s) if s.value == Resolved::Null => Vec::new(),
            _ => {
                self.fail(node, "[]config.YamlDescriptor");
                Vec::new()
            }
        }
    }

    fn descriptor(&mut self, node: &Node) -> RawDescriptor {
        let mut d = RawDescriptor {
            line: node.line,
            ..RawDescriptor::default()
        };
        for (key, value) in pairs(node) {
            match key {
                "key" => d.key = self.string(value),
                "value" => d.value = self.string(value),
                "rate_limit" => d.rate_limit = self.rate_limit(value),
                "rate_limits" => d.rate_limits = Some((value.line, self.rate_limit_list(value))),
                "descriptors" => d.descriptors = self.descriptors(value),
                "shadow_mode" => d.shadow_mode = self.bool(value),
                "quota_mode" => d.quota_mode = self.bool(value),
                "detailed_metric" => d.detailed_metric = self.bool(value),
                "value_to_metric" => d.value_to_metric = self.bool(value),
                "share_threshold" => d.share_threshold = self.bool(value),
                "metadata" => d.metadata = self.metadata(value),
                _ => {}
            }
        }
        d
    }

    fn rate_limit(&mut self, node: &Node) -> Option<RawRateLimit> {
        match &node.kind {
            NodeKind::Map(_) => {
                let mut rl = RawRateLimit {
                    line: node.line,
                    ..RawRateLimit::default()
                };
                for (key, value) in pairs(node) {
                    match key {
                        "unit" => rl.unit = self.string(value),
                        "requests_per_unit" => rl.requests_per_unit = self.uint32(value),
                        "unlimited" => rl.unlimited = self.bool(value),
                        "name" => rl.name = self.string(value),
                        "replaces" => rl.replaces = self.replaces(value),
                        "algorithm" => rl.algorithm = self.string(value),
                        "burst" => rl.burst = self.optional_uint32(value),
                        "unit_multiplier" => rl.unit_multiplier = self.optional_uint32(value),
                        "failure_mode" => rl.failure_mode = self.string(value),
                        "fallback_requests_per_unit" => {
                            rl.fallback_requests_per_unit = self.optional_uint32(value)
                        }
                        "durability" => rl.durability = self.string(value),
                        "shards" => rl.shards = self.optional_uint32(value),
                        "lease" => rl.lease = self.bool(value),
                        "calendar" => rl.calendar = self.bool(value),
                        "max_in_flight" => rl.max_in_flight = self.optional_uint32(value),
                        "max_duration" => rl.max_duration = self.string(value),
                        "sync_interval" => rl.sync_interval = self.string(value),
                        "time_zone" => {
                            rl.time_zone = self.string(value);
                            rl.time_zone_line = value.line;
                        }
                        _ => {}
                    }
                }
                Some(rl)
            }
            NodeKind::Scalar(s) if s.value == Resolved::Null => None,
            _ => {
                self.fail(node, "config.YamlRateLimit");
                None
            }
        }
    }

    fn replaces(&mut self, node: &Node) -> Vec<RawReplace> {
        match &node.kind {
            NodeKind::Seq(items) => items
                .iter()
                .map(|item| {
                    let mut r = RawReplace {
                        line: item.line,
                        name: String::new(),
                    };
                    match item.kind {
                        NodeKind::Map(_) => {
                            for (key, value) in pairs(item) {
                                if key == "name" {
                                    r.name = self.string(value);
                                }
                            }
                        }
                        NodeKind::Scalar(ref s) if s.value == Resolved::Null => {}
                        _ => self.fail(item, "config.YamlReplaces"),
                    }
                    r
                })
                .collect(),
            NodeKind::Scalar(s) if s.value == Resolved::Null => Vec::new(),
            _ => {
                self.fail(node, "[]config.YamlReplaces");
                Vec::new()
            }
        }
    }

    fn metadata(&mut self, node: &Node) -> Option<RawMetadata> {
        match &node.kind {
            NodeKind::Map(_) => Some(RawMetadata::Yaml(node.clone())),
            NodeKind::Scalar(s) if s.value == Resolved::Null => None,
            _ => {
                self.fail(node, "map[string]interface {}");
                None
            }
        }
    }
}
