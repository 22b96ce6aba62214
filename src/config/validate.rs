//! Phase B: raw files into a [`DescriptorTree`], with the original's rules
//! and error order: files in the given order,
//! descriptors depth first in document order, first error wins.

use std::sync::Arc;

use super::error::{ConfigError, ConfigErrorKind};
use super::failure::{Durability, FailureMode, FailurePolicy};
use super::metadata;
use super::model::{RawDescriptor, RawFile, RawMetadata, RawRateLimit};
use super::tree::{ConfiguredLimit, DescriptorTree, HotKeyPolicy, Node, RateLimitRule};
use crate::limiter::{AlgorithmName, Calendar, CalendarError, Limiter, Unit};

/// Builds the tree from parsed files. With `merge_domains`, a domain seen
/// again gets the later file's top-level descriptors appended (a shallow
/// merge); without it, that is an error naming the later file.
pub(crate) fn build(
    files: &[(&str, &RawFile)],
    merge_domains: bool,
) -> Result<DescriptorTree, ConfigError> {
    let mut tree = DescriptorTree::default();
    for (name, file) in files {
        if file.domain.is_empty() {
            return Err(ConfigError::new(
                name,
                ConfigErrorKind::EmptyDomain,
                Some(file.domain_line),
            ));
        }
        if tree.domains.contains_key(&file.domain) && !merge_domains {
            return Err(ConfigError::new(
                name,
                ConfigErrorKind::DuplicateDomain(file.domain.clone()),
                Some(file.domain_line),
            ));
        }
        let root = tree
            .domains
            .entry(file.domain.clone())
            .or_insert_with(|| Node::new(""));
        load_descriptors(name, root, &file.domain, &file.descriptors)?;
    }
    Ok(tree)
}

/// Refuses the first rule that a store holding the original's fixed
/// windows only (memcache) cannot count: an opt-in algorithm, a burst, a
/// unit multiplier, several limits, sub-buckets or leasing. Files, then
/// descriptors depth first in document order, as the other errors.
pub(crate) fn require_original_windows(files: &[(&str, &RawFile)]) -> Result<(), ConfigError> {
    fn walk(
        file: &str,
        parent_key: &str,
        descriptors: &[RawDescriptor],
    ) -> Result<(), ConfigError> {
        for d in descriptors {
            let load_key = match d.value.is_empty() {
                true => format!("{parent_key}.{}", d.key),
                false => format!("{parent_key}.{}_{}", d.key, d.value),
            };
            if let Some((line, feature)) = opt_in_feature(d) {
                let kind = ConfigErrorKind::StoreCannotCount {
                    rule: load_key,
                    feature,
                };
                return Err(ConfigError::new(file, kind, Some(line)));
            }
            walk(file, &load_key, &d.descriptors)?;
        }
        Ok(())
    }
    for (name, file) in files {
        walk(name, &file.domain, &file.descriptors)?;
    }
    Ok(())
}

/// The first opt-in feature a descriptor's rule uses, and its line.
fn opt_in_feature(d: &RawDescriptor) -> Option<(usize, &'static str)> {
    if let Some((line, _)) = &d.rate_limits {
        return Some((*line, "rate_limits"));
    }
    let rl = d.rate_limit.as_ref()?;
    let feature = if rl.calendar {
        "calendar"
    } else if !rl.algorithm.is_empty() {
        "algorithm"
    } else if rl.burst.is_some() {
        "burst"
    } else if rl.unit_multiplier.is_some() {
        "unit_multiplier"
    } else if rl.shards.is_some() {
        "shards"
    } else if rl.lease {
        "lease"
    } else {
        return None;
    };
    Some((rl.line, feature))
}

fn load_descriptors(
    file: &str,
    parent: &mut Node,
    parent_key: &str,
    descriptors: &[RawDescriptor],
) -> Result<(), ConfigError> {
    for d in descriptors {
        let err = |kind, line| ConfigError::new(file, kind, Some(line));
        if d.key.is_empty() {
            return Err(err(ConfigErrorKind::EmptyKey, d.line));
        }
        let composite = if d.value.is_empty() {
            d.key.clone()
        } else {
            format!("{}_{}", d.key, d.value)
        };
        let load_key = format!("{parent_key}.{composite}");
        if parent.has_child(&composite) {
            return Err(err(
                ConfigErrorKind::DuplicateCompositeKey(load_key),
                d.line,
            ));
        }
        let (unit, failure, calendar) = match &d.rate_limit {
            Some(rl) => (
                Some(check_rate_limit(file, rl)?),
                failure_policy(file, rl)?,
                calendar_of(file, rl)?,
            ),
            None => (None, FailurePolicy::default(), None),
        };
        let (blocks, limits) = extension_limits(file, d)?;
        if d.share_threshold && !composite.contains('*') {
            return Err(err(
                ConfigErrorKind::ShareThresholdWithoutWildcard(composite),
                d.line,
            ));
        }
        let metadata = match &d.metadata {
            Some(RawMetadata::Yaml(node)) => Some(Arc::new(
                metadata::from_node(node)
                    .map_err(|e| err(ConfigErrorKind::Metadata(e), node.line))?,
            )),
            Some(RawMetadata::Decoded(m)) => Some(Arc::new(m.clone())),
            None => None,
        };
        // The composite moves into the node, and the rule owns the load
        // key that the children extend: a long value is copied as few
        // times as the tree needs.
        let mut child = Node::new(composite);
        child.value_to_metric = d.value_to_metric;
        child.share_threshold = d.share_threshold;
        let rule = match (&d.rate_limit, blocks) {
            (Some(rl), _) => unit.map(|unit| (rl, unit)),
            (None, Some(first)) => limits.first().map(|l| (first, l.unit)),
            (None, None) => None,
        };
        child.limit = rule.map(|(rl, unit)| {
            Arc::new(RateLimitRule {
                requests_per_unit: limit_of(rl),
                unit,
                name: rl.name.clone(),
                unlimited: rl.unlimited,
                shadow_mode: d.shadow_mode,
                quota_mode: d.quota_mode,
                detailed_metric: d.detailed_metric,
                replaces: rl.replaces.iter().map(|r| r.name.clone()).collect(),
                metadata: metadata.clone(),
                id: super::tree::RuleId::new(&load_key),
                load_key: load_key.clone(),
                limits: limits.clone(),
                failure,
                calendar: calendar.clone(),
            })
        });
        let rule = child.limit.clone();
        let parent_key = match &rule {
            Some(rule) => {
                drop(load_key);
                rule.load_key.as_str()
            }
            None => load_key.as_str(),
        };
        load_descriptors(file, &mut child, parent_key, &d.descriptors)?;
        parent.insert(child);
    }
    Ok(())
}

/// Whether the block is an in-flight limit (`algorithm: concurrency`).
fn is_concurrency(rl: &RawRateLimit) -> bool {
    rl.algorithm == AlgorithmName::Concurrency.as_str()
}

/// What the block limits: `max_in_flight` for an in-flight limit, else
/// `requests_per_unit`.
fn limit_of(rl: &RawRateLimit) -> u32 {
    match is_concurrency(rl) {
        true => rl.max_in_flight.unwrap_or(0),
        false => rl.requests_per_unit,
    }
}

/// The in-flight keys: on another algorithm `max_in_flight` and
/// `max_duration` are refused; an in-flight limit needs both and takes no
/// key of a window. `Some(Unit::Unknown)` (its unit) for a valid in-flight
/// limit, `None` for any other block.
fn check_in_flight(rl: &RawRateLimit) -> Result<Option<Unit>, (ConfigErrorKind, Option<String>)> {
    if !is_concurrency(rl) {
        let stray = match (rl.max_in_flight.is_some(), !rl.max_duration.is_empty()) {
            (true, _) => Some("max_in_flight"),
            (_, true) => Some("max_duration"),
            _ => None,
        };
        return match stray {
            Some(key) => Err((
                ConfigErrorKind::InFlightWithoutConcurrency(key),
                Some("did you mean to add 'algorithm: concurrency'?".into()),
            )),
            None => Ok(None),
        };
    }
    let window_keys = [
        (
            !rl.unit.is_empty(),
            "unit",
            "slots are held until their request ends, not for a window: drop unit",
        ),
        (
            rl.requests_per_unit != 0,
            "requests_per_unit",
            "did you mean 'max_in_flight'?",
        ),
        (rl.unlimited, "unlimited", "drop the rule instead"),
        (rl.calendar, "calendar", "drop calendar"),
        (rl.burst.is_some(), "burst", "did you mean 'max_in_flight'?"),
        (
            rl.unit_multiplier.is_some(),
            "unit_multiplier",
            "did you mean 'max_duration'?",
        ),
        (
            rl.shards.is_some(),
            "shards",
            "a slot's release must reach the sub-bucket its take did: drop shards",
        ),
        (rl.lease, "lease", "slots cannot be lent out: drop lease"),
    ];
    if let Some((_, key, hint)) = window_keys.into_iter().find(|(given, ..)| *given) {
        return Err((ConfigErrorKind::ConcurrencyWith(key), Some(hint.into())));
    }
    if rl.max_in_flight.is_none() {
        return Err((
            ConfigErrorKind::MissingMaxInFlight,
            Some("e.g. max_in_flight: 10".into()),
        ));
    }
    if rl.max_duration.is_empty() {
        return Err((
            ConfigErrorKind::MissingMaxDuration,
            Some("e.g. max_duration: 60s, the route's timeout".into()),
        ));
    }
    max_duration_of(rl)?;
    Ok(Some(Unit::Unknown))
}

/// An in-flight limit's `max_duration`.
fn max_duration_of(
    rl: &RawRateLimit,
) -> Result<std::time::Duration, (ConfigErrorKind, Option<String>)> {
    crate::settings::parse::parse_positive_duration(&rl.max_duration).map_err(|_| {
        (
            ConfigErrorKind::InvalidMaxDuration(rl.max_duration.clone()),
            None,
        )
    })
}

/// The unit rules (a known unit, none on `unlimited`) and the `replaces` rules; returns the unit to
/// store (UNKNOWN for unlimited rules).
fn check_rate_limit(file: &str, rl: &RawRateLimit) -> Result<Unit, ConfigError> {
    if let Some(unit) = check_in_flight(rl).map_err(|(kind, hint)| ConfigError {
        hint,
        ..ConfigError::new(file, kind, Some(rl.line))
    })? {
        return Ok(unit);
    }
    let valid = Unit::from_name(&rl.unit).filter(|u| *u != Unit::Unknown);
    let unit = match (rl.unlimited, valid) {
        (true, Some(_)) => {
            return Err(ConfigError::new(
                file,
                ConfigErrorKind::UnitWithUnlimited,
                Some(rl.line),
            ))
        }
        (true, None) => Unit::Unknown,
        (false, Some(unit)) => unit,
        (false, None) => {
            return Err(ConfigError::new(
                file,
                ConfigErrorKind::InvalidUnit(rl.unit.clone()),
                Some(rl.line),
            ))
        }
    };
    for r in &rl.replaces {
        if r.name.is_empty() {
            return Err(ConfigError::new(
                file,
                ConfigErrorKind::EmptyReplaces,
                Some(r.line),
            ));
        }
        if r.name == rl.name {
            return Err(ConfigError::new(
                file,
                ConfigErrorKind::ReplacesSelf,
                Some(r.line),
            ));
        }
    }
    Ok(unit)
}

/// The block's calendar (`calendar`, `time_zone`), checked against the
/// rest of the block: a day, week, month or year of a fixed window, in a
/// zone of the IANA database (UTC by default), and nothing that would make
/// its window other than the calendar's. `None` without `calendar: true`.
fn calendar_of(file: &str, rl: &RawRateLimit) -> Result<Option<Calendar>, ConfigError> {
    let err = |kind, line, hint: Option<String>| ConfigError {
        hint,
        ..ConfigError::new(file, kind, Some(line))
    };
    if !rl.calendar {
        return match rl.time_zone.is_empty() {
            true => Ok(None),
            false => Err(err(
                ConfigErrorKind::TimeZoneWithoutCalendar,
                rl.time_zone_line,
                Some("did you mean to add 'calendar: true'?".into()),
            )),
        };
    }
    if let Ok(algorithm) = rl.algorithm.parse::<AlgorithmName>() {
        if algorithm != AlgorithmName::FixedWindow {
            return Err(err(
                ConfigErrorKind::CalendarAlgorithm(algorithm),
                rl.line,
                Some("did you mean 'algorithm: fixed_window'? (or drop calendar)".into()),
            ));
        }
    }
    let other = [
        (rl.unlimited, "unlimited"),
        (rl.burst.is_some(), "burst"),
        (
            rl.unit_multiplier.is_some_and(|m| m != 1),
            "unit_multiplier",
        ),
        (rl.shards.is_some(), "shards"),
        (rl.lease, "lease"),
    ];
    if let Some((_, key)) = other.into_iter().find(|(set, _)| *set) {
        return Err(err(ConfigErrorKind::CalendarWith(key), rl.line, None));
    }
    let unit = Unit::from_name(&rl.unit).unwrap_or(Unit::Unknown);
    let zone = match rl.time_zone.as_str() {
        "" => crate::limiter::calendar::DEFAULT_ZONE,
        zone => zone,
    };
    Calendar::new(unit, zone).map(Some).map_err(|e| match e {
        CalendarError::Unit(unit) => err(
            ConfigErrorKind::CalendarUnit(unit),
            rl.line,
            Some("did you mean 'unit: day'? (windows shorter than a day need no calendar)".into()),
        ),
        CalendarError::UnknownZone { name, closest } => err(
            ConfigErrorKind::UnknownTimeZone(name),
            rl.time_zone_line,
            closest.map(|c| format!("did you mean '{c}'?")),
        ),
    })
}

/// The block's `failure_mode`, `fallback_requests_per_unit` and
/// `durability`, checked.
fn failure_policy(file: &str, rl: &RawRateLimit) -> Result<FailurePolicy, ConfigError> {
    let err = |kind| ConfigError::new(file, kind, Some(rl.line));
    let mode = if rl.failure_mode.is_empty() {
        None
    } else {
        Some(
            rl.failure_mode
                .parse::<FailureMode>()
                .map_err(|()| err(ConfigErrorKind::InvalidFailureMode(rl.failure_mode.clone())))?,
        )
    };
    if let Some(fallback) = rl.fallback_requests_per_unit {
        if mode != Some(FailureMode::Open) {
            return Err(err(ConfigErrorKind::FallbackWithoutOpen));
        }
        if fallback == 0 || fallback > limit_of(rl) {
            return Err(err(ConfigErrorKind::FallbackOutOfRange {
                fallback,
                limit: limit_of(rl),
            }));
        }
    }
    let durability = match rl.durability.as_str() {
        "" => Durability::default(),
        text => text
            .parse()
            .map_err(|()| err(ConfigErrorKind::InvalidDurability(text.to_string())))?,
    };
    Ok(FailurePolicy {
        mode,
        fallback_requests_per_unit: rl.fallback_requests_per_unit,
        durability,
    })
}

/// The extension limits of a descriptor (`algorithm`, `burst`,
/// `unit_multiplier`, `rate_limits`): the first block (for the rule's
/// name, unit and `requests_per_unit`) and every limit built. No limits for
/// a `rate_limit` in the original's vocabulary (or an unlimited one), so
/// that it keeps the original's behaviour exactly.
fn extension_limits<'a>(
    file: &str,
    d: &'a RawDescriptor,
) -> Result<(Option<&'a RawRateLimit>, Vec<ConfiguredLimit>), ConfigError> {
    let err = |kind, line| ConfigError::new(file, kind, Some(line));
    match (&d.rate_limit, &d.rate_limits) {
        (Some(_), Some((line, _))) => Err(err(ConfigErrorKind::BothRateLimitForms, *line)),
        (Some(rl), None) => {
            let original = rl.algorithm.is_empty() || rl.algorithm == "fixed_window";
            let hot = rl.shards.is_some() || rl.lease;
            if rl.unlimited
                || (original && !hot && rl.burst.is_none() && rl.unit_multiplier.unwrap_or(1) == 1)
            {
                // The original's fixed window (a misspelled algorithm or a
                // zero multiplier is not `original` and is refused below).
                return Ok((None, Vec::new()));
            }
            Ok((Some(rl), vec![build_limit(file, rl)?]))
        }
        (None, Some((line, blocks))) => {
            let Some(first) = blocks.first() else {
                return Err(err(ConfigErrorKind::EmptyRateLimits, *line));
            };
            let mut limits: Vec<ConfiguredLimit> = Vec::with_capacity(blocks.len());
            for rl in blocks {
                if rl.unlimited {
                    return Err(err(
                        ConfigErrorKind::NotAllowedInRateLimits("unlimited"),
                        rl.line,
                    ));
                }
                if let Some(r) = rl.replaces.first() {
                    return Err(err(
                        ConfigErrorKind::NotAllowedInRateLimits("replaces"),
                        r.line,
                    ));
                }
                check_rate_limit(file, rl)?;
                let limit = build_limit(file, rl)?;
                if limits.iter().any(|l| l.key_suffix == limit.key_suffix) {
                    return Err(err(
                        ConfigErrorKind::DuplicateLimitWindow {
                            algorithm: limit.limiter.name(),
                            seconds: limit.limiter.period().as_secs(),
                        },
                        rl.line,
                    ));
                }
                limits.push(limit);
            }
            Ok((Some(first), limits))
        }
        (None, None) => Ok((None, Vec::new())),
    }
}

/// One limit from a block whose unit is already checked.
fn build_limit(file: &str, rl: &RawRateLimit) -> Result<ConfiguredLimit, ConfigError> {
    let err = |kind| ConfigError::new(file, kind, Some(rl.line));
    let algorithm = if rl.algorithm.is_empty() {
        AlgorithmName::default()
    } else {
        rl.algorithm
            .parse::<AlgorithmName>()
            .map_err(|()| err(ConfigErrorKind::InvalidAlgorithm(rl.algorithm.clone())))?
    };
    let multiplier = rl.unit_multiplier.unwrap_or(1);
    if multiplier == 0 {
        return Err(err(ConfigErrorKind::ZeroUnitMultiplier));
    }
    let unit = Unit::from_name(&rl.unit).unwrap_or(Unit::Unknown);
    let unit_seconds = unit.seconds().unwrap_or(1);
    let seconds = unit_seconds * u64::from(multiplier);
    let period = match is_concurrency(rl) {
        true => max_duration_of(rl).map_err(|(kind, _)| err(kind))?,
        false => std::time::Duration::from_secs(seconds),
    };
    let limiter = Limiter::new(
        algorithm,
        u64::from(limit_of(rl)),
        period,
        rl.burst.map(u64::from),
    )
    .map_err(|e| err(ConfigErrorKind::InvalidLimit(e)))?;
    let calendar = calendar_of(file, rl)?;
    let hot = hot_key_policy(rl, &limiter).map_err(err)?;
    let sub_buckets = if hot.shards > 1 {
        let k = u64::from(hot.shards);
        (0..k)
            .map(|i| limiter.sub_bucket(i, k))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| err(ConfigErrorKind::InvalidLimit(e)))?
    } else {
        Vec::new()
    };
    Ok(ConfiguredLimit {
        requests_per_unit: limit_of(rl),
        unit,
        unit_multiplier: multiplier,
        name: rl.name.clone(),
        limiter,
        key_suffix: match &calendar {
            Some(c) => format!("cal:{}", c.unit()),
            // An in-flight limit's slots, over its max_duration.
            None if is_concurrency(rl) => match period.subsec_nanos() {
                0 => format!("cc:{}s", period.as_secs()),
                _ => format!("cc:{}ms", period.as_millis()),
            },
            None => format!("{}:{seconds}s", algorithm.key_tag()),
        },
        failure: failure_policy(file, rl)?,
        hot,
        sub_buckets,
        calendar,
    })
}

/// The block's `shards` and `lease`, checked against its limit.
fn hot_key_policy(rl: &RawRateLimit, limiter: &Limiter) -> Result<HotKeyPolicy, ConfigErrorKind> {
    let capacity = limiter.limit().min(limiter.capacity());
    let shards = match rl.shards {
        None => 1,
        Some(k) if !(2..=64).contains(&k) => return Err(ConfigErrorKind::ShardsOutOfRange(k)),
        Some(k) if u64::from(k) > capacity => {
            return Err(ConfigErrorKind::ShardsAboveCapacity {
                shards: k,
                capacity,
            })
        }
        // 2..=64 fits.
        Some(k) => u8::try_from(k).unwrap_or(64),
    };
    if rl.lease && limiter.name() == AlgorithmName::SlidingLog {
        return Err(ConfigErrorKind::LeaseWithSlidingLog);
    }
    Ok(HotKeyPolicy {
        shards,
        lease: rl.lease,
    })
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use crate::config::{
        load, ConfigError, ConfigErrorKind, ConfigFile, Durability, Entry, FailureMode,
        FailurePolicy, Lookup,
    };
    use crate::limiter::{AlgorithmName, InvalidLimit, Limiter};

    fn load_one(yaml: &str) -> Result<crate::config::Config, ConfigError> {
        load(&[ConfigFile::new("f.yaml", yaml)], false)
    }

    fn rule_of(yaml: &str) -> std::sync::Arc<crate::config::RateLimitRule> {
        let config = load_one(yaml).unwrap_or_else(|e| panic!("{}", e.detailed()));
        match config.tree().find("d", &[Entry::new("k", "")], None) {
            Ok(Lookup::Limit(m)) => m.rule,
            other => panic!("no limit: {other:?}"),
        }
    }

    fn error_of(yaml: &str) -> ConfigError {
        load_one(yaml).expect_err("must be refused")
    }

    const HEAD: &str = "domain: d\ndescriptors:\n  - key: k\n";

    #[test]
    fn an_in_flight_limit_has_slots_and_a_max_duration() {
        let rule = rule_of(&format!(
            "{HEAD}    rate_limits:\n      - algorithm: concurrency\n        max_in_flight: 3\n        max_duration: 1m30s\n        failure_mode: open\n        fallback_requests_per_unit: 1\n"
        ));
        let l = &rule.limits[0];
        assert_eq!(l.limiter.name(), AlgorithmName::Concurrency);
        assert_eq!(
            (l.limiter.limit(), l.limiter.period()),
            (3, Duration::from_secs(90))
        );
        assert_eq!((rule.requests_per_unit, l.requests_per_unit), (3, 3));
        assert_eq!(l.key_suffix, "cc:90s");
        // The single form too, and beside a window on one descriptor.
        let rule = rule_of(&format!(
            "{HEAD}    rate_limits:\n      - algorithm: concurrency\n        max_in_flight: 10\n        max_duration: 500ms\n      - unit: minute\n        requests_per_unit: 100\n        algorithm: token_bucket\n"
        ));
        assert_eq!(rule.limits[0].key_suffix, "cc:500ms");
        assert_eq!(rule.limits[1].limiter.name(), AlgorithmName::TokenBucket);
        let single = rule_of(&format!(
            "{HEAD}    rate_limit:\n      algorithm: concurrency\n      max_in_flight: 2\n      max_duration: 60s\n"
        ));
        assert_eq!(single.limits[0].limiter.capacity(), 2);
    }

    #[test]
    fn an_in_flight_limit_refuses_what_only_a_window_takes() {
        let rl = "    rate_limit:\n      algorithm: concurrency\n";
        let slots = "      max_in_flight: 3\n      max_duration: 60s\n";
        let cases = [
            (format!("{HEAD}{rl}      max_duration: 60s\n"), ConfigErrorKind::MissingMaxInFlight),
            (format!("{HEAD}{rl}      max_in_flight: 3\n"), ConfigErrorKind::MissingMaxDuration),
            (
                format!("{HEAD}{rl}      max_in_flight: 3\n      max_duration: soon\n"),
                ConfigErrorKind::InvalidMaxDuration("soon".into()),
            ),
            (
                format!("{HEAD}{rl}      max_in_flight: 3\n      max_duration: 0s\n"),
                ConfigErrorKind::InvalidMaxDuration("0s".into()),
            ),
            (format!("{HEAD}{rl}{slots}      unit: minute\n"), ConfigErrorKind::ConcurrencyWith("unit")),
            (
                format!("{HEAD}{rl}{slots}      requests_per_unit: 3\n"),
                ConfigErrorKind::ConcurrencyWith("requests_per_unit"),
            ),
            (format!("{HEAD}{rl}{slots}      calendar: true\n"), ConfigErrorKind::ConcurrencyWith("calendar")),
            (format!("{HEAD}{rl}{slots}      shards: 2\n"), ConfigErrorKind::ConcurrencyWith("shards")),
            (format!("{HEAD}{rl}{slots}      lease: true\n"), ConfigErrorKind::ConcurrencyWith("lease")),
            (format!("{HEAD}{rl}{slots}      burst: 4\n"), ConfigErrorKind::ConcurrencyWith("burst")),
            (
                format!("{HEAD}{rl}      max_in_flight: 10001\n      max_duration: 60s\n"),
                ConfigErrorKind::InvalidLimit(InvalidLimit::InFlightTooLarge { max_in_flight: 10_001, max: 10_000 }),
            ),
            (
                format!("{HEAD}    rate_limit:\n      unit: minute\n      requests_per_unit: 3\n      algorithm: token_bucket\n      max_in_flight: 3\n"),
                ConfigErrorKind::InFlightWithoutConcurrency("max_in_flight"),
            ),
            (
                format!("{HEAD}    rate_limit:\n      unit: minute\n      requests_per_unit: 3\n      max_duration: 60s\n"),
                ConfigErrorKind::InFlightWithoutConcurrency("max_duration"),
            ),
        ];
        for (yaml, kind) in cases {
            let e = error_of(&yaml);
            assert_eq!(e.kind, kind, "{yaml}");
            assert_eq!(e.line, Some(5), "the block's line: {yaml}");
            assert!(e.to_string().starts_with("f.yaml: "), "{e}");
        }
        let e = error_of(&format!("{HEAD}{rl}      max_duration: 60s\n"));
        assert_eq!(e.hint.as_deref(), Some("e.g. max_in_flight: 10"));
    }

    #[test]
    fn the_original_vocabulary_keeps_the_original_fixed_window() {
        for extra in [
            "",
            "      algorithm: fixed_window\n",
            "      unit_multiplier: 1\n",
        ] {
            let yaml = format!(
                "{HEAD}    rate_limit:\n      unit: minute\n      requests_per_unit: 5\n{extra}"
            );
            let rule = rule_of(&yaml);
            assert!(rule.is_original(), "{extra:?}");
            assert_eq!(
                load_one(&yaml).unwrap().dump(),
                "d.k: unit=MINUTE requests_per_unit=5, shadow_mode: false, quota_mode: false\n"
            );
        }
    }

    #[test]
    fn each_algorithm_builds_with_its_window() {
        let cases = [
            (
                "token_bucket",
                "      burst: 20\n",
                AlgorithmName::TokenBucket,
                "tb:60s",
            ),
            ("sliding_window", "", AlgorithmName::SlidingWindow, "sw:60s"),
            ("sliding_log", "", AlgorithmName::SlidingLog, "sl:60s"),
            (
                "fixed_window",
                "      unit_multiplier: 5\n",
                AlgorithmName::FixedWindow,
                "fw:300s",
            ),
        ];
        for (name, extra, algorithm, suffix) in cases {
            let yaml = format!(
                "{HEAD}    rate_limit:\n      unit: minute\n      requests_per_unit: 10\n      algorithm: {name}\n{extra}"
            );
            let rule = rule_of(&yaml);
            assert_eq!(rule.limits.len(), 1);
            let l = &rule.limits[0];
            assert_eq!(l.limiter.name(), algorithm);
            assert_eq!(l.key_suffix, suffix);
            assert_eq!(l.requests_per_unit, 10);
        }
        let rule = rule_of(&format!(
            "{HEAD}    rate_limit:\n      unit: minute\n      requests_per_unit: 10\n      algorithm: token_bucket\n      burst: 20\n"
        ));
        assert_eq!(rule.limits[0].limiter.capacity(), 20);
        let rule = rule_of(&format!(
            "{HEAD}    rate_limit:\n      unit: hour\n      requests_per_unit: 10\n      algorithm: token_bucket\n"
        ));
        assert_eq!(
            rule.limits[0].limiter.capacity(),
            10,
            "burst defaults to the limit"
        );
        assert_eq!(rule.limits[0].limiter.period(), Duration::from_secs(3_600));
    }

    #[test]
    fn several_limits_on_one_descriptor() {
        let yaml = format!(
            "{HEAD}    rate_limits:\n      - unit: second\n        requests_per_unit: 10\n        algorithm: token_bucket\n        name: burst\n      - unit: day\n        requests_per_unit: 10000\n        algorithm: sliding_window\n        name: daily\n"
        );
        let rule = rule_of(&yaml);
        assert_eq!(rule.limits.len(), 2);
        assert_eq!((rule.requests_per_unit, rule.name.as_str()), (10, "burst"));
        assert_eq!(
            rule.names().collect::<Vec<_>>(),
            ["burst", "burst", "daily"]
        );
        assert_eq!(
            load_one(&yaml).unwrap().dump(),
            "d.k: unit=SECOND requests_per_unit=10, shadow_mode: false, quota_mode: false, limits: token_bucket 10/1s burst 10, sliding_window 10000/86400s\n"
        );
        // A plain fixed window inside rate_limits uses the extension path too.
        let rule = rule_of(&format!(
            "{HEAD}    rate_limits:\n      - unit: second\n        requests_per_unit: 1\n"
        ));
        assert!(!rule.is_original());
        assert!(matches!(rule.limits[0].limiter, Limiter::FixedWindow(_)));
    }

    #[test]
    fn refusals_say_what_and_where() {
        let rl = "    rate_limit:\n      unit: second\n      requests_per_unit: 10\n";
        let cases: [(String, ConfigErrorKind, usize); 9] = [
            (
                format!("{HEAD}{rl}      algorithm: leaky_bucket\n"),
                ConfigErrorKind::InvalidAlgorithm("leaky_bucket".into()),
                5,
            ),
            (
                format!("{HEAD}{rl}      unit_multiplier: 0\n"),
                ConfigErrorKind::ZeroUnitMultiplier,
                5,
            ),
            (
                format!("{HEAD}{rl}      burst: 5\n"),
                ConfigErrorKind::InvalidLimit(InvalidLimit::BurstWithoutBucket { burst: 5 }),
                5,
            ),
            (
                format!("{HEAD}    rate_limit:\n      unit: second\n      requests_per_unit: 1001\n      algorithm: sliding_log\n"),
                ConfigErrorKind::InvalidLimit(InvalidLimit::LogLimitTooLarge { limit: 1001, max: 1000 }),
                5,
            ),
            (
                format!("{HEAD}{rl}    rate_limits:\n      - unit: second\n        requests_per_unit: 1\n"),
                ConfigErrorKind::BothRateLimitForms,
                8,
            ),
            (
                format!("{HEAD}    rate_limits: []\n"),
                ConfigErrorKind::EmptyRateLimits,
                4,
            ),
            (
                format!("{HEAD}    rate_limits:\n      - unlimited: true\n"),
                ConfigErrorKind::NotAllowedInRateLimits("unlimited"),
                5,
            ),
            (
                format!("{HEAD}    rate_limits:\n      - unit: second\n        requests_per_unit: 1\n        replaces:\n          - name: x\n"),
                ConfigErrorKind::NotAllowedInRateLimits("replaces"),
                8,
            ),
            (
                format!("{HEAD}    rate_limits:\n      - unit: minute\n        requests_per_unit: 1\n        algorithm: sliding_window\n      - unit: second\n        requests_per_unit: 2\n        unit_multiplier: 60\n        algorithm: sliding_window\n"),
                ConfigErrorKind::DuplicateLimitWindow { algorithm: AlgorithmName::SlidingWindow, seconds: 60 },
                8,
            ),
        ];
        for (yaml, kind, line) in cases {
            let e = error_of(&yaml);
            assert_eq!(e.kind, kind, "{yaml}");
            assert_eq!(e.line, Some(line), "{yaml}");
            assert!(e.to_string().starts_with("f.yaml: "));
        }
        // The unit rules of a rate_limit block hold inside rate_limits.
        let e = error_of(&format!(
            "{HEAD}    rate_limits:\n      - unit: fortnight\n        requests_per_unit: 1\n"
        ));
        assert_eq!(e.kind, ConfigErrorKind::InvalidUnit("fortnight".into()));
        assert_eq!(
            error_of(&format!("{HEAD}{rl}      burst: many\n")).to_string(),
            "f.yaml: error loading config file: yaml: unmarshal errors:\n  line 7: cannot unmarshal !!str `many` into uint32"
        );
    }

    #[test]
    fn durability_is_a_rules_own_shows_in_the_dump_and_is_checked() {
        let yaml = format!(
            "{HEAD}    rate_limit:\n      unit: second\n      requests_per_unit: 5\n      failure_mode: closed\n      durability: replicated\n"
        );
        let rule = rule_of(&yaml);
        assert!(rule.is_original(), "same keys and arithmetic as before");
        assert_eq!(rule.failure.durability, Durability::Replicated);
        assert_eq!(
            load_one(&yaml).unwrap().dump(),
            "d.k: unit=SECOND requests_per_unit=5, shadow_mode: false, quota_mode: false, failure_mode: closed, durability: replicated\n"
        );
        let rule = rule_of(&format!(
            "{HEAD}    rate_limits:\n      - unit: second\n        requests_per_unit: 10\n        durability: replicated\n      - unit: day\n        requests_per_unit: 1000\n        algorithm: token_bucket\n"
        ));
        let durability: Vec<_> = rule.limits.iter().map(|l| l.failure.durability).collect();
        assert_eq!(
            durability,
            [Durability::Replicated, Durability::Acknowledged]
        );
        let e = error_of(&format!(
            "{HEAD}    rate_limit:\n      unit: second\n      requests_per_unit: 5\n      durability: durable\n"
        ));
        assert_eq!(e.kind, ConfigErrorKind::InvalidDurability("durable".into()));
        assert_eq!(e.line, Some(5));
        assert_eq!(
            e.to_string(),
            "f.yaml: invalid durability 'durable' (expected one of acknowledged, replicated)"
        );
    }

    #[test]
    fn failure_mode_keeps_the_original_window_and_shows_in_the_dump() {
        let yaml = format!(
            "{HEAD}    rate_limit:\n      unit: minute\n      requests_per_unit: 50\n      failure_mode: open\n      fallback_requests_per_unit: 5\n"
        );
        let rule = rule_of(&yaml);
        assert!(rule.is_original(), "same keys and arithmetic as before");
        assert_eq!(rule.failure.mode, Some(FailureMode::Open));
        assert_eq!(rule.failure.fallback_requests_per_unit, Some(5));
        assert_eq!(
            load_one(&yaml).unwrap().dump(),
            "d.k: unit=MINUTE requests_per_unit=50, shadow_mode: false, quota_mode: false, failure_mode: open fallback 5\n"
        );
        let rule = rule_of(&format!(
            "{HEAD}    rate_limit:\n      unit: minute\n      requests_per_unit: 50\n"
        ));
        assert_eq!(
            rule.failure,
            FailurePolicy::default(),
            "absent: the settings decide"
        );
        // Each item of rate_limits has its own.
        let rule = rule_of(&format!(
            "{HEAD}    rate_limits:\n      - unit: second\n        requests_per_unit: 10\n        failure_mode: closed\n      - unit: day\n        requests_per_unit: 1000\n        algorithm: sliding_window\n        failure_mode: open\n"
        ));
        let modes: Vec<_> = rule.limits.iter().map(|l| l.failure.mode).collect();
        assert_eq!(modes, [Some(FailureMode::Closed), Some(FailureMode::Open)]);
        let rule = rule_of(&format!(
            "{HEAD}    rate_limit:\n      unit: second\n      requests_per_unit: 10\n      algorithm: token_bucket\n      failure_mode: error\n"
        ));
        assert_eq!(rule.limits[0].failure.mode, Some(FailureMode::Error));
    }

    #[test]
    fn bad_failure_settings_say_what_and_where() {
        let rl = "    rate_limit:\n      unit: second\n      requests_per_unit: 10\n";
        let cases: [(String, ConfigErrorKind); 5] = [
            (
                format!("{HEAD}{rl}      failure_mode: fail_open\n"),
                ConfigErrorKind::InvalidFailureMode("fail_open".into()),
            ),
            (
                format!("{HEAD}{rl}      fallback_requests_per_unit: 2\n"),
                ConfigErrorKind::FallbackWithoutOpen,
            ),
            (
                format!(
                    "{HEAD}{rl}      failure_mode: closed\n      fallback_requests_per_unit: 2\n"
                ),
                ConfigErrorKind::FallbackWithoutOpen,
            ),
            (
                format!(
                    "{HEAD}{rl}      failure_mode: open\n      fallback_requests_per_unit: 0\n"
                ),
                ConfigErrorKind::FallbackOutOfRange {
                    fallback: 0,
                    limit: 10,
                },
            ),
            (
                format!(
                    "{HEAD}{rl}      failure_mode: open\n      fallback_requests_per_unit: 11\n"
                ),
                ConfigErrorKind::FallbackOutOfRange {
                    fallback: 11,
                    limit: 10,
                },
            ),
        ];
        for (yaml, kind) in cases {
            let e = error_of(&yaml);
            assert_eq!(e.kind, kind, "{yaml}");
            assert_eq!(e.line, Some(5), "{yaml}");
        }
        assert_eq!(
            error_of(&format!("{HEAD}{rl}      failure_mode: fail_open\n")).to_string(),
            "f.yaml: invalid failure_mode 'fail_open' (expected one of error, open, closed)"
        );
        // Inside rate_limits, on the item's line.
        let e = error_of(&format!(
            "{HEAD}    rate_limits:\n      - unit: second\n        requests_per_unit: 1\n      - unit: hour\n        requests_per_unit: 9\n        failure_mode: open\n        fallback_requests_per_unit: 10\n"
        ));
        assert_eq!(
            e.kind,
            ConfigErrorKind::FallbackOutOfRange {
                fallback: 10,
                limit: 9
            }
        );
        assert_eq!(e.line, Some(7));
        let e = error_of(&format!("{HEAD}{rl}      failure_mod: open\n"));
        assert_eq!(e.hint.as_deref(), Some("did you mean 'failure_mode'?"));
    }

    #[test]
    fn misspelled_extension_keys_get_a_hint() {
        let e = error_of(&format!(
            "{HEAD}    rate_limit:\n      unit: second\n      requests_per_unit: 1\n      algoritm: token_bucket\n"
        ));
        assert_eq!(e.kind, ConfigErrorKind::UnknownKey("algoritm".into()));
        assert_eq!(e.hint.as_deref(), Some("did you mean 'algorithm'?"));
        let e = error_of(&format!("{HEAD}    rate_limit:\n      unit: second\n      requests_per_unit: 1\n      unit_multipler: 2\n"));
        assert_eq!(e.hint.as_deref(), Some("did you mean 'unit_multiplier'?"));
    }

    #[test]
    fn a_store_of_original_windows_refuses_opt_in_rules_by_name_and_line() {
        let load = |yaml: &str| {
            let file = crate::config::ConfigFile::new("f.yaml", yaml);
            let options = crate::config::loader::LoadOptions {
                merge_domains: false,
                original_windows_only: true,
            };
            crate::config::loader::load_with(&[file], options)
        };
        let original = "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 5}\n";
        assert!(load(original).is_ok(), "the original's vocabulary loads");
        let cases = [
            (
                "algorithm: token_bucket, unit: second, requests_per_unit: 5",
                "algorithm",
            ),
            (
                "unit: second, requests_per_unit: 5, unit_multiplier: 2",
                "unit_multiplier",
            ),
            ("unit: second, requests_per_unit: 5, shards: 2", "shards"),
        ];
        for (block, feature) in cases {
            let yaml = format!(
                "domain: d\ndescriptors:\n  - key: a\n    descriptors:\n      - key: b\n        value: v\n        rate_limit: {{{block}}}\n"
            );
            let e = load(&yaml).expect_err(feature);
            assert_eq!(e.line, Some(7), "{feature}");
            assert_eq!(
                e.kind,
                ConfigErrorKind::StoreCannotCount {
                    rule: "d.a.b_v".into(),
                    feature
                }
            );
            assert!(e.to_string().contains("f.yaml"), "{e}");
        }
        let several = "domain: d\ndescriptors:\n  - key: k\n    rate_limits:\n      - {unit: second, requests_per_unit: 5}\n";
        let e = load(several).expect_err("rate_limits");
        assert_eq!(e.line, Some(5), "the list's first item");
    }

    #[test]
    fn shards_and_lease_are_opt_in_extensions_of_a_limit() {
        let rl = "    rate_limit:\n      unit: minute\n      requests_per_unit: 100\n";
        // An original window with shards becomes a fixed_window limit on
        // versioned keys, split exactly.
        let rule = rule_of(&format!("{HEAD}{rl}      shards: 8\n      lease: true\n"));
        assert!(!rule.is_original());
        let l = &rule.limits[0];
        assert_eq!(l.limiter.name(), AlgorithmName::FixedWindow);
        assert_eq!((l.hot.shards, l.hot.lease), (8, true));
        assert_eq!(l.sub_buckets.len(), 8);
        assert_eq!(l.sub_buckets.iter().map(Limiter::limit).sum::<u64>(), 100);
        let dump = load_one(&format!("{HEAD}{rl}      shards: 8\n      lease: true\n"))
            .expect("valid")
            .dump();
        assert!(
            dump.contains("limits: fixed_window 100/60s shards 8 lease"),
            "{dump}"
        );
        // Without them nothing changes.
        let rule = rule_of(&format!("{HEAD}{rl}"));
        assert!(rule.is_original());
    }

    #[test]
    fn bad_hot_key_settings_say_what_and_where() {
        let rl = "    rate_limit:\n      unit: second\n      requests_per_unit: 10\n";
        let cases: [(String, ConfigErrorKind); 4] = [
            (
                format!("{HEAD}{rl}      shards: 1\n"),
                ConfigErrorKind::ShardsOutOfRange(1),
            ),
            (
                format!("{HEAD}{rl}      shards: 65\n"),
                ConfigErrorKind::ShardsOutOfRange(65),
            ),
            (
                format!("{HEAD}{rl}      shards: 11\n"),
                ConfigErrorKind::ShardsAboveCapacity {
                    shards: 11,
                    capacity: 10,
                },
            ),
            (
                format!("{HEAD}{rl}      algorithm: sliding_log\n      lease: true\n"),
                ConfigErrorKind::LeaseWithSlidingLog,
            ),
        ];
        for (yaml, kind) in cases {
            let e = error_of(&yaml);
            assert_eq!(e.kind, kind, "{yaml}");
            assert_eq!(e.line, Some(5), "{yaml}");
        }
        // A token bucket's burst bounds the sub-buckets too.
        let e = error_of(&format!(
            "{HEAD}{rl}      algorithm: token_bucket\n      burst: 3\n      shards: 4\n"
        ));
        assert_eq!(
            e.kind,
            ConfigErrorKind::ShardsAboveCapacity {
                shards: 4,
                capacity: 3
            }
        );
    }

    #[test]
    fn calendar_windows_are_opt_in_and_show_in_the_dump() {
        let rl = "    rate_limit:\n      unit: month\n      requests_per_unit: 10000\n";
        let rule = rule_of(&format!("{HEAD}{rl}      calendar: true\n"));
        assert!(rule.is_original(), "counted the original's way");
        let c = rule.calendar.as_ref().expect("a calendar");
        assert_eq!(c.to_string(), "month UTC", "UTC by default");
        let rule = rule_of(&format!(
            "{HEAD}{rl}      calendar: true\n      time_zone: Europe/Berlin\n"
        ));
        assert_eq!(
            rule.calendar.as_ref().map(|c| c.zone_name()),
            Some("Europe/Berlin")
        );
        assert_eq!(
            load_one(&format!("{HEAD}{rl}      calendar: true\n      time_zone: Asia/Kolkata\n"))
                .unwrap()
                .dump(),
            "d.k: unit=MONTH requests_per_unit=10000, shadow_mode: false, quota_mode: false, calendar: month Asia/Kolkata\n"
        );
        // `algorithm: fixed_window` is the same rule.
        let rule = rule_of(&format!(
            "{HEAD}{rl}      calendar: true\n      algorithm: fixed_window\n"
        ));
        assert!(rule.is_original() && rule.calendar.is_some());
        // `calendar: false` (or none) is the original's rule, unchanged.
        for extra in ["", "      calendar: false\n"] {
            let rule = rule_of(&format!("{HEAD}{rl}{extra}"));
            assert_eq!(rule.calendar, None);
        }
        // In rate_limits, each item has its own.
        let yaml = format!(
            "{HEAD}    rate_limits:\n      - unit: day\n        requests_per_unit: 500\n        calendar: true\n        time_zone: America/New_York\n      - unit: second\n        requests_per_unit: 10\n"
        );
        let rule = rule_of(&yaml);
        assert_eq!(rule.limits[0].key_suffix, "cal:day");
        assert_eq!(
            rule.limits[0]
                .calendar
                .as_ref()
                .map(|c| c.to_string())
                .as_deref(),
            Some("day America/New_York")
        );
        assert_eq!(rule.limits[1].calendar, None);
        assert_eq!(
            load_one(&yaml).unwrap().dump(),
            "d.k: unit=DAY requests_per_unit=500, shadow_mode: false, quota_mode: false, limits: fixed_window 500/calendar day America/New_York, fixed_window 10/1s\n"
        );
    }

    #[test]
    fn calendar_refusals_say_what_where_and_what_was_meant() {
        let block = |unit: &str, extra: &str| {
            format!("{HEAD}    rate_limit:\n      unit: {unit}\n      requests_per_unit: 10\n      calendar: true\n{extra}")
        };
        let cases: Vec<(String, ConfigErrorKind, usize, Option<&str>)> = vec![
            (
                block("month", "      time_zone: Europe/Berln\n"),
                ConfigErrorKind::UnknownTimeZone("Europe/Berln".into()),
                8,
                Some("did you mean 'Europe/Berlin'?"),
            ),
            (
                block("month", "      time_zone: Mars/Base\n"),
                ConfigErrorKind::UnknownTimeZone("Mars/Base".into()),
                8,
                None,
            ),
            (
                block("hour", ""),
                ConfigErrorKind::CalendarUnit(crate::limiter::Unit::Hour),
                5,
                Some("did you mean 'unit: day'? (windows shorter than a day need no calendar)"),
            ),
            (
                block("day", "      algorithm: token_bucket\n"),
                ConfigErrorKind::CalendarAlgorithm(AlgorithmName::TokenBucket),
                5,
                Some("did you mean 'algorithm: fixed_window'? (or drop calendar)"),
            ),
            (
                block("day", "      algorithm: sliding_window\n"),
                ConfigErrorKind::CalendarAlgorithm(AlgorithmName::SlidingWindow),
                5,
                Some("did you mean 'algorithm: fixed_window'? (or drop calendar)"),
            ),
            (
                block("day", "      unit_multiplier: 2\n"),
                ConfigErrorKind::CalendarWith("unit_multiplier"),
                5,
                None,
            ),
            (
                block("day", "      lease: true\n"),
                ConfigErrorKind::CalendarWith("lease"),
                5,
                None,
            ),
            (
                format!("{HEAD}    rate_limit:\n      unit: day\n      requests_per_unit: 10\n      time_zone: UTC\n"),
                ConfigErrorKind::TimeZoneWithoutCalendar,
                7,
                Some("did you mean to add 'calendar: true'?"),
            ),
            (
                format!("{HEAD}    rate_limits:\n      - unit: second\n        requests_per_unit: 1\n      - unit: week\n        requests_per_unit: 9\n        calendar: true\n        time_zone: Europe/Pariss\n"),
                ConfigErrorKind::UnknownTimeZone("Europe/Pariss".into()),
                10,
                Some("did you mean 'Europe/Paris'?"),
            ),
        ];
        for (yaml, kind, line, hint) in cases {
            let e = error_of(&yaml);
            assert_eq!(
                (&e.kind, e.line, e.hint.as_deref()),
                (&kind, Some(line), hint),
                "{yaml}"
            );
        }
        assert_eq!(
            error_of(&block("month", "      time_zone: Europe/Berln\n")).detailed(),
            "f.yaml: unknown time_zone 'Europe/Berln' (expected an IANA name such as Europe/Berlin or UTC) (line 8); did you mean 'Europe/Berlin'?"
        );
        // A misspelt key is caught by the key check.
        let e = error_of(&block("day", "      time_zon: UTC\n"));
        assert_eq!(e.hint.as_deref(), Some("did you mean 'time_zone'?"));
    }
}
