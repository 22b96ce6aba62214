//! One `rate_limit` block (or one entry of `rate_limits`): the original's
//! checks of its unit and value, then ours of its opt-in fields, into the
//! [`ConfiguredLimit`]s and the rule's failure policy, calendar and
//! local-first interval.

use crate::config::error::{ConfigError, ConfigErrorKind};
use crate::config::failure::{Durability, FailureMode, FailurePolicy};
use crate::config::model::{RawDescriptor, RawRateLimit};
use crate::config::tree::{ConfiguredLimit, HotKeyPolicy};
use crate::limiter::{AlgorithmName, Calendar, CalendarError, Limiter, Unit};

/// Whether the block is an in-flight limit (`algorithm: concurrency`).
fn is_concurrency(rl: &RawRateLimit) -> bool {
    rl.algorithm == AlgorithmName::Concurrency.as_str()
}

/// What the block limits: `max_in_flight` for an in-flight limit, else
/// `requests_per_unit`.
pub(super) fn limit_of(rl: &RawRateLimit) -> u32 {
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

/// The block's `sync_interval`: a positive duration, on a fixed window
/// only (the original's, or a calendar's), whose counter can be counted
/// first and written after. Every other limit is decided at the store: an
/// exact one (`sliding_log`, `concurrency`) by what it is, the others
/// because their local-first bound is not built yet.
pub(super) fn sync_interval_of(
    file: &str,
    rl: &RawRateLimit,
) -> Result<Option<std::time::Duration>, ConfigError> {
    if rl.sync_interval.is_empty() {
        return Ok(None);
    }
    let err = |kind, hint: Option<&str>| ConfigError {
        hint: hint.map(str::to_string),
        ..ConfigError::new(file, kind, Some(rl.line))
    };
    let algorithm = rl.algorithm.as_str();
    let other = [
        (
            is_concurrency(rl),
            "algorithm: concurrency",
            Some("an in-flight limit is exact: drop sync_interval"),
        ),
        (
            algorithm == AlgorithmName::SlidingLog.as_str(),
            "algorithm: sliding_log",
            Some("an exact log is decided at the store: drop sync_interval"),
        ),
        (
            !algorithm.is_empty() && algorithm != AlgorithmName::FixedWindow.as_str(),
            "this algorithm",
            Some("drop sync_interval, or use a fixed window"),
        ),
        (rl.burst.is_some(), "burst", None),
        (
            rl.unit_multiplier.is_some_and(|m| m != 1),
            "unit_multiplier",
            None,
        ),
        (rl.shards.is_some(), "shards", None),
        (
            rl.lease,
            "lease",
            Some("a local-first window needs no lease: drop lease"),
        ),
        (rl.unlimited, "unlimited", None),
    ];
    if let Some((_, key, hint)) = other.into_iter().find(|(set, ..)| *set) {
        return Err(err(ConfigErrorKind::SyncIntervalWith(key), hint));
    }
    crate::settings::parse::parse_positive_duration(&rl.sync_interval)
        .map(Some)
        .map_err(|_| {
            err(
                ConfigErrorKind::InvalidSyncInterval(rl.sync_interval.clone()),
                None,
            )
        })
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
pub(super) fn check_rate_limit(file: &str, rl: &RawRateLimit) -> Result<Unit, ConfigError> {
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
            // The original's message, with the valid units beside it.
            let valid = Unit::NAMES.join(", ");
            let hint = match crate::config::check::closest(&rl.unit.to_lowercase(), Unit::NAMES) {
                Some(near) => format!("did you mean '{near}'? valid units: {valid}"),
                None => format!("valid units: {valid}"),
            };
            return Err(ConfigError {
                hint: Some(hint),
                ..ConfigError::new(
                    file,
                    ConfigErrorKind::InvalidUnit(rl.unit.clone()),
                    Some(rl.line),
                )
            });
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
pub(super) fn calendar_of(file: &str, rl: &RawRateLimit) -> Result<Option<Calendar>, ConfigError> {
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
pub(super) fn failure_policy(file: &str, rl: &RawRateLimit) -> Result<FailurePolicy, ConfigError> {
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
pub(super) fn extension_limits<'a>(
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
    let sync_interval = sync_interval_of(file, rl)?;
    if sync_interval.is_some() && calendar.is_none() {
        // Only the original's counter and a calendar's are counted first
        // and written after; an extension's fixed window is its limiter's.
        return Err(ConfigError {
            hint: Some(
                "use a single rate_limit in the original's vocabulary, or calendar: true".into(),
            ),
            ..err(ConfigErrorKind::SyncIntervalWith("rate_limits"))
        });
    }
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
        sync_interval,
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
