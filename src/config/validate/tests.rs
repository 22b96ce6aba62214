use std::time::Duration;

use crate::config::{
    load, ConfigError, ConfigErrorKind, ConfigFile, Durability, Entry, FailureMode, FailurePolicy,
    Lookup,
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
        e.hint.as_deref(),
        Some("valid units: second, minute, hour, day, week, month, year")
    );
    // A near miss is named; the message stays the original's.
    let e = error_of(&format!(
        "{HEAD}    rate_limit:\n      unit: minuet\n      requests_per_unit: 1\n"
    ));
    assert_eq!(e.kind, ConfigErrorKind::InvalidUnit("minuet".into()));
    assert!(e
        .kind
        .to_string()
        .ends_with("invalid rate limit unit 'minuet'"));
    assert_eq!(
        e.hint.as_deref(),
        Some("did you mean 'minute'? valid units: second, minute, hour, day, week, month, year")
    );
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
            format!("{HEAD}{rl}      failure_mode: closed\n      fallback_requests_per_unit: 2\n"),
            ConfigErrorKind::FallbackWithoutOpen,
        ),
        (
            format!("{HEAD}{rl}      failure_mode: open\n      fallback_requests_per_unit: 0\n"),
            ConfigErrorKind::FallbackOutOfRange {
                fallback: 0,
                limit: 10,
            },
        ),
        (
            format!("{HEAD}{rl}      failure_mode: open\n      fallback_requests_per_unit: 11\n"),
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

#[test]
fn sync_interval_makes_a_fixed_window_local_first() {
    let rule = rule_of(&format!(
        "{HEAD}    rate_limit:\n      unit: minute\n      requests_per_unit: 1000\n      sync_interval: 50ms\n"
    ));
    assert!(rule.is_original(), "the original's window and keys");
    assert_eq!(rule.sync_interval, Some(Duration::from_millis(50)));
    let calendar = rule_of(&format!(
        "{HEAD}    rate_limit:\n      unit: day\n      requests_per_unit: 1000\n      calendar: true\n      sync_interval: 1s\n"
    ));
    assert!(calendar.calendar.is_some());
    assert_eq!(calendar.sync_interval, Some(Duration::from_secs(1)));
    let plain = rule_of(&format!(
        "{HEAD}    rate_limit:\n      unit: minute\n      requests_per_unit: 1000\n"
    ));
    assert_eq!(plain.sync_interval, None, "absent: as the setting says");
}

#[test]
fn sync_interval_is_refused_where_the_store_must_decide() {
    let window = "      unit: minute\n      requests_per_unit: 100\n";
    let cases = [
        (
            format!("{HEAD}    rate_limit:\n{window}      sync_interval: soon\n"),
            ConfigErrorKind::InvalidSyncInterval("soon".into()),
        ),
        (
            format!("{HEAD}    rate_limit:\n{window}      sync_interval: 0s\n"),
            ConfigErrorKind::InvalidSyncInterval("0s".into()),
        ),
        (
            format!("{HEAD}    rate_limit:\n{window}      algorithm: sliding_log\n      sync_interval: 50ms\n"),
            ConfigErrorKind::SyncIntervalWith("algorithm: sliding_log"),
        ),
        (
            format!("{HEAD}    rate_limit:\n      algorithm: concurrency\n      max_in_flight: 3\n      max_duration: 60s\n      sync_interval: 50ms\n"),
            ConfigErrorKind::SyncIntervalWith("algorithm: concurrency"),
        ),
        (
            format!("{HEAD}    rate_limit:\n{window}      algorithm: token_bucket\n      sync_interval: 50ms\n"),
            ConfigErrorKind::SyncIntervalWith("this algorithm"),
        ),
        (
            format!("{HEAD}    rate_limit:\n{window}      unit_multiplier: 5\n      sync_interval: 50ms\n"),
            ConfigErrorKind::SyncIntervalWith("unit_multiplier"),
        ),
    ];
    for (yaml, kind) in cases {
        let e = error_of(&yaml);
        assert_eq!(e.kind, kind, "{yaml}");
        assert_eq!(e.line, Some(5), "the block's line: {yaml}");
        assert!(e.to_string().starts_with("f.yaml: "), "{e}");
    }
    let e = error_of(&format!(
        "{HEAD}    rate_limits:\n      - unit: minute\n        requests_per_unit: 100\n        algorithm: fixed_window\n        sync_interval: 50ms\n"
    ));
    assert_eq!(e.kind, ConfigErrorKind::SyncIntervalWith("rate_limits"));
    assert_eq!(e.line, Some(5), "the item's line");
}

#[test]
fn a_local_first_window_shows_its_bound_in_the_dump() {
    let dump = load_one(&format!(
        "{HEAD}    rate_limit:\n      unit: minute\n      requests_per_unit: 1000\n      sync_interval: 50ms\n"
    ))
    .expect("valid")
    .dump();
    assert_eq!(
        dump,
        "d.k: unit=MINUTE requests_per_unit=1000, shadow_mode: false, quota_mode: false, sync_interval: 50ms (at most 1000 + N·⌊ε·1000/N⌋ a window)\n"
    );
}

#[test]
fn a_window_made_local_first_by_the_setting_says_so_in_the_dump() {
    let config = load_one(&format!(
        "{HEAD}    rate_limit:\n      unit: minute\n      requests_per_unit: 1000\n  - key: own\n    rate_limit:\n      unit: minute\n      requests_per_unit: 10\n      sync_interval: 1s\n  - key: bucket\n    rate_limit:\n      unit: second\n      requests_per_unit: 10\n      algorithm: token_bucket\n"
    ))
    .expect("valid");
    let dump = config.dump_with(Some(Duration::from_millis(50)));
    let lines: Vec<&str> = dump.lines().collect();
    assert!(
        lines[0].ends_with(", sync_interval: 50ms (LOCAL_FIRST_SYNC_INTERVAL; at most 1000 + N·⌊ε·1000/N⌋ a window)"),
        "{dump}"
    );
    assert!(
        lines[1].ends_with(", sync_interval: 1s (at most 10 + N·⌊ε·10/N⌋ a window)"),
        "the rule's own interval wins: {dump}"
    );
    assert!(
        !lines[2].contains("sync_interval"),
        "not a fixed window: {dump}"
    );
    assert!(
        !config.dump().contains("LOCAL_FIRST_SYNC_INTERVAL"),
        "without the setting, only the rule's own interval shows"
    );
}
