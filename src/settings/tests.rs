use super::*;
use std::cell::RefCell;
use std::collections::BTreeSet;
use std::time::Duration;

fn src(pairs: &[(&str, &str)]) -> MapSource {
    pairs.iter().copied().collect()
}

fn parse(pairs: &[(&str, &str)]) -> Result<Settings, SettingsError> {
    Settings::from_source(&src(pairs))
}

fn errors(pairs: &[(&str, &str)]) -> Vec<(&'static str, ParseError)> {
    parse(pairs)
        .expect_err("should be invalid")
        .invalid()
        .iter()
        .map(|v| (v.name, v.error.clone()))
        .collect()
}

#[test]
fn grpc_workers_are_auto_by_default_or_a_count() {
    assert_eq!(Settings::default().listener.grpc_workers, GrpcWorkers::Auto);
    for (value, want) in [
        ("auto", GrpcWorkers::Auto),
        ("0", GrpcWorkers::Count(0)),
        ("3", GrpcWorkers::Count(3)),
        ("100000", GrpcWorkers::Count(1024)),
    ] {
        let s = parse(&[("GRPC_WORKERS", value)]).expect("valid");
        assert_eq!(s.listener.grpc_workers, want, "{value}");
    }
    assert_eq!(errors(&[("GRPC_WORKERS", "many")]).len(), 1);
}

#[test]
fn the_decision_audit_is_off_by_default_and_takes_a_share_from_0_to_1() {
    let s = Settings::default().audit;
    assert_eq!(
        s,
        AuditSettings {
            sample: 0.0,
            max_limit: 10_000
        }
    );
    let on = parse(&[
        ("DECISION_AUDIT_SAMPLE", "0.01"),
        ("DECISION_AUDIT_MAX_LIMIT", "500"),
    ])
    .expect("valid");
    assert_eq!((on.audit.sample, on.audit.max_limit), (0.01, 500));
    assert_eq!(
        parse(&[("DECISION_AUDIT_SAMPLE", "1")])
            .expect("valid")
            .audit
            .sample,
        1.0
    );
    assert_eq!(
        errors(&[("DECISION_AUDIT_SAMPLE", "1.5")]),
        vec![("DECISION_AUDIT_SAMPLE", ParseError::ShareOutOfUnitRange)]
    );
    assert_eq!(
        errors(&[("DECISION_AUDIT_MAX_LIMIT", "-1")]),
        vec![(
            "DECISION_AUDIT_MAX_LIMIT",
            ParseError::OutOfRange {
                min: 0,
                max: i64::MAX
            }
        )]
    );
}

#[test]
fn store_failure_settings_default_and_refuse_bad_values() {
    let s = Settings::default().store_failure;
    assert_eq!(
        s,
        StoreFailureSettings {
            timeout: Duration::from_millis(50),
            breaker_failures: 5,
            breaker_cooldown: Duration::from_secs(1),
            failure_mode: FailureMode::Error,
            fallback_share: 0.1,
        }
    );
    let s = parse(&[
        ("STORE_TIMEOUT", "5ms"),
        ("STORE_BREAKER_FAILURES", "0"),
        ("STORE_FAILURE_MODE", "open"),
        ("STORE_FALLBACK_SHARE", "0.25"),
    ])
    .expect("valid")
    .store_failure;
    assert_eq!(s.timeout, Duration::from_millis(5));
    assert_eq!(s.breaker_failures, 0, "0 disables the breaker");
    assert_eq!(s.failure_mode, FailureMode::Open);
    assert_eq!(s.fallback_share, 0.25);
    assert_eq!(
        errors(&[
            ("STORE_TIMEOUT", "0s"),
            ("STORE_BREAKER_FAILURES", "-1"),
            ("STORE_FAILURE_MODE", "fail_open"),
            ("STORE_FALLBACK_SHARE", "1.5"),
        ]),
        vec![
            ("STORE_TIMEOUT", ParseError::NotPositive),
            (
                "STORE_BREAKER_FAILURES",
                ParseError::OutOfRange {
                    min: 0,
                    max: i64::from(u32::MAX)
                }
            ),
            (
                "STORE_FAILURE_MODE",
                ParseError::OneOf {
                    expected: "error, open, closed"
                }
            ),
            ("STORE_FALLBACK_SHARE", ParseError::ShareOutOfRange),
        ]
    );
}

#[test]
fn default_is_the_empty_source_and_matches_the_spec() {
    let s = Settings::from_source(&MapSource::new()).expect("defaults parse");
    assert_eq!(s, Settings::default());

    assert_eq!(s.listener.host, "0.0.0.0");
    assert_eq!(s.listener.port, 8080);
    assert_eq!(s.listener.debug_port, 6070);
    assert_eq!(s.listener.grpc_port, 8081);
    assert_eq!(s.listener.grpc_uds, "");
    assert_eq!(
        s.listener.grpc_max_connection_age,
        Duration::from_secs(86_400)
    );
    assert_eq!(
        s.listener.grpc_max_connection_age_grace,
        Duration::from_secs(3600)
    );
    assert!(!s.listener.grpc_tls.enabled);
    assert_eq!(s.log.level, LogLevel::Warn);
    assert_eq!(s.log.format, LogFormat::Text);
    let cp = &s.config_provider;
    assert_eq!(cp.config_type, ConfigType::File);
    assert_eq!(cp.runtime.root, "/srv/runtime_data/current");
    assert_eq!(cp.runtime.subdirectory, "");
    assert_eq!(cp.runtime.app_directory, "config");
    assert!(!cp.runtime.ignore_dot_files);
    assert!(cp.runtime.watch_root);
    assert!(!cp.merge_domain_config);
    assert_eq!(cp.xds.node_id, "default");
    assert_eq!(cp.xds.server_url, "localhost:18000");
    assert_eq!(cp.xds.connect_retry_interval, Duration::from_secs(3));
    assert!(cp.xds.additional_headers.is_empty());
    assert_eq!(cp.xds.backoff_random_factor, 0.5);
    assert!(cp.xds.backoff_jitter);
    assert_eq!(cp.xds.max_msg_size_in_bytes, 0);
    assert!(s.stats.use_statsd);
    assert!(s.stats.dog_statsd_mogrifiers.is_empty());
    assert_eq!(s.stats.statsd_port, 8125);
    assert_eq!(s.stats.flush_interval, Duration::from_secs(10));
    assert_eq!(s.stats.prometheus_addr, ":9090");
    assert_eq!(s.stats.prometheus_path, "/metrics");
    assert_eq!(s.limiter.backend_type, BackendType::Redis);
    assert_eq!(s.limiter.near_limit_ratio, 0.8f32);
    assert_eq!(s.limiter.expiration_jitter_max_seconds, 300);
    assert_eq!(s.limiter.local_cache_size_in_bytes, 0);
    assert_eq!(s.response.headers.limit, "RateLimit-Limit");
    assert_eq!(s.response.headers.remaining, "RateLimit-Remaining");
    assert_eq!(s.response.headers.reset, "RateLimit-Reset");
    assert_eq!(s.redis.main.url, "/var/run/nutcracker/ratelimit.sock");
    assert_eq!(s.redis.main.socket_type, "unix");
    assert_eq!(s.redis.main.redis_type, RedisType::Single);
    assert_eq!(s.redis.main.pool_size, 10);
    assert_eq!(s.redis.main.cluster_pipeline_parallelism, 1);
    assert_eq!(s.redis.main.timeout, Duration::from_secs(10));
    assert_eq!(
        s.redis.main.pool_on_empty_behavior,
        PoolOnEmptyBehavior::Wait
    );
    assert_eq!(
        s.redis.per_second.url,
        "/var/run/nutcracker/ratelimitpersecond.sock"
    );
    assert!(!s.redis.per_second_enabled);
    assert_eq!(s.redis.startup_initial_interval, Duration::from_secs(1));
    assert_eq!(s.redis.startup_max_interval, Duration::from_secs(30));
    assert_eq!(s.redis.startup_max_elapsed_time, Duration::ZERO);
    assert_eq!(s.memcache.max_idle_conns, 2);
    assert!(s.memcache.host_port.is_empty());
    assert_eq!(s.tracing.service_name, "RateLimit");
    assert_eq!(s.tracing.exporter_protocol, TracingProtocol::Http);
    assert_eq!(s.tracing.sampling_rate, 1.0);
}

/// A source that records every name asked for.
#[derive(Default)]
struct Recording {
    asked: RefCell<BTreeSet<String>>,
}

impl Source for Recording {
    fn get(&self, name: &str) -> Option<String> {
        self.asked.borrow_mut().insert(name.to_owned());
        None
    }
}

#[test]
fn from_source_reads_exactly_the_table() {
    let rec = Recording::default();
    Settings::from_source(&rec).expect("defaults parse");
    let table: BTreeSet<String> = VARS
        .iter()
        .chain(vars::EXTENSIONS)
        .map(|v| v.name.to_owned())
        .collect();
    assert_eq!(*rec.asked.borrow(), table);
}

#[test]
fn empty_is_set_not_unset() {
    assert_eq!(errors(&[("PORT", "")]), [("PORT", ParseError::Empty)]);
    let s = parse(&[("CACHE_KEY_PREFIX", "")]).expect("empty string is a valid prefix");
    assert_eq!(s.limiter.cache_key_prefix, "");
    let s = parse(&[("RUNTIME_ROOT", "")]).expect("strings take the empty value");
    assert_eq!(s.config_provider.runtime.root, "");
    for name in [
        "USE_STATSD",
        "REDIS_TIMEOUT",
        "NEAR_LIMIT_RATIO",
        "REDIS_POOL_SIZE",
    ] {
        assert_eq!(errors(&[(name, "")]), [(name, ParseError::Empty)]);
    }
    let s = parse(&[("EXTRA_TAGS", ""), ("MEMCACHE_HOST_PORT", "")]).expect("empty");
    assert!(s.stats.extra_tags.is_empty() && s.memcache.host_port.is_empty());
}

#[test]
fn values_are_parsed_into_their_fields() {
    let s = parse(&[
        ("PORT", "0x1F90"),
        ("GRPC_PORT", "017"),
        ("GRPC_MAX_CONNECTION_AGE", "1h30m"),
        ("USE_STATSD", "F"),
        ("EXTRA_TAGS", "env:prod,az:a:b"),
        ("USE_DOG_STATSD_MOGRIFIERS", "a,b"),
        ("NEAR_LIMIT_RATIO", "0.9"),
        ("EXPIRATION_JITTER_MAX_SECONDS", "-5"),
        ("REDIS_PERSECOND", "1"),
        ("REDIS_PERSECOND_URL", "localhost:6380"),
        ("REDIS_PERSECOND_TIMEOUT", "150\u{b5}s"),
        ("REDIS_PERSECOND_TYPE", "Cluster"),
    ])
    .expect("valid");
    assert_eq!(s.listener.port, 8080);
    assert_eq!(s.listener.grpc_port, 15);
    assert_eq!(
        s.listener.grpc_max_connection_age,
        Duration::from_secs(5400)
    );
    assert!(!s.stats.use_statsd);
    assert_eq!(
        s.stats.extra_tags.get("az").map(String::as_str),
        Some("a:b")
    );
    assert_eq!(s.stats.dog_statsd_mogrifiers, ["a", "b"]);
    assert_eq!(s.limiter.near_limit_ratio, 0.9f32);
    assert_eq!(s.limiter.expiration_jitter_max_seconds, -5);
    assert!(s.redis.per_second_enabled);
    assert_eq!(s.redis.per_second.url, "localhost:6380");
    assert_eq!(s.redis.per_second.timeout, Duration::from_micros(150));
    assert_eq!(s.redis.per_second.redis_type, RedisType::Cluster);
    // The main client is untouched by the per-second variables.
    assert_eq!(s.redis.main.url, "/var/run/nutcracker/ratelimit.sock");
    assert_eq!(s.redis.main.redis_type, RedisType::Single);
}

#[test]
fn ports_out_of_range_are_rejected() {
    let range = ParseError::OutOfRange { min: 0, max: 65535 };
    assert_eq!(errors(&[("PORT", "70000")]), [("PORT", range.clone())]);
    assert_eq!(errors(&[("STATSD_PORT", "-1")]), [("STATSD_PORT", range)]);
}

#[test]
fn zero_stats_flush_interval_is_rejected() {
    assert_eq!(
        errors(&[("STATS_FLUSH_INTERVAL", "0")]),
        [("STATS_FLUSH_INTERVAL", ParseError::NotPositive)]
    );
}

#[test]
fn every_bad_variable_is_reported_at_once() {
    let err = parse(&[
        ("PORT", "http"),
        ("USE_STATSD", "yes"),
        ("REDIS_TIMEOUT", "10"),
        ("HOST", "fine"),
        ("CONFIG_TYPE", "file"),
    ])
    .expect_err("invalid");
    assert_eq!(
            err.to_string(),
            "PORT=http is not valid: expected an integer such as 42, -7, 0x1F, 0o17, 017 or 0b101\n\
             CONFIG_TYPE=file is not valid: expected one of FILE, GRPC_XDS_SOTW\n\
             USE_STATSD=yes is not valid: expected a boolean: 1, t, T, TRUE, true, True, 0, f, F, FALSE, false or False\n\
             REDIS_TIMEOUT=10 is not valid: missing unit in duration (units: ns, us, µs, ms, s, m, h; only 0 may omit it)"
        );
    assert_eq!(err.invalid().len(), 4);
}

#[test]
fn error_lines_escape_control_characters() {
    let err = parse(&[("PORT", "80\n80")]).expect_err("invalid");
    assert_eq!(
        err.to_string(),
        "PORT=80\\n80 is not valid: expected an integer such as 42, -7, 0x1F, 0o17, 017 or 0b101"
    );
}

/// A source holding one value that is not UTF-8.
struct NonUtf8;

impl Source for NonUtf8 {
    fn get(&self, _: &str) -> Option<String> {
        None
    }

    fn get_utf8(&self, name: &str) -> Result<Option<String>, NotUnicode> {
        if name == ENV_REDIS_URL {
            Err(NotUnicode {
                lossy: "redis\u{fffd}".to_owned(),
            })
        } else {
            Ok(None)
        }
    }
}

#[test]
fn non_utf8_value_is_an_invalid_value() {
    let err = Settings::from_source(&NonUtf8).expect_err("invalid");
    assert_eq!(
        err.to_string(),
        "REDIS_URL=redis\u{fffd} is not valid: not valid UTF-8"
    );
}

#[test]
fn config_type_is_exact() {
    assert_eq!("FILE".parse(), Ok(ConfigType::File));
    assert_eq!("GRPC_XDS_SOTW".parse(), Ok(ConfigType::GrpcXdsSotw));
    for s in ["file", "File", "", "GRPC_XDS", " FILE"] {
        assert!(s.parse::<ConfigType>().is_err(), "{s:?}");
    }
}

#[test]
fn backend_type_empty_is_redis() {
    assert_eq!("redis".parse(), Ok(BackendType::Redis));
    assert_eq!("".parse(), Ok(BackendType::Redis));
    assert_eq!("memcache".parse(), Ok(BackendType::Memcache));
    assert_eq!("memory".parse(), Ok(BackendType::Memory));
    for s in ["Redis", "REDIS", "memcached", "mem"] {
        assert!(s.parse::<BackendType>().is_err(), "{s:?}");
    }
}

#[test]
fn redis_type_is_case_insensitive() {
    assert_eq!("SINGLE".parse(), Ok(RedisType::Single));
    assert_eq!("single".parse(), Ok(RedisType::Single));
    assert_eq!("Sentinel".parse(), Ok(RedisType::Sentinel));
    assert_eq!("cLuStEr".parse(), Ok(RedisType::Cluster));
    for s in ["", "standalone", "single "] {
        assert!(s.parse::<RedisType>().is_err(), "{s:?}");
    }
}

#[test]
fn log_format_json_any_case_else_text() {
    assert_eq!("json".parse(), Ok(LogFormat::Json));
    assert_eq!("JSON".parse(), Ok(LogFormat::Json));
    assert_eq!("text".parse(), Ok(LogFormat::Text));
    assert_eq!("xml".parse(), Ok(LogFormat::Text));
    assert_eq!("".parse(), Ok(LogFormat::Text));
}

#[test]
fn log_level_logrus_names_any_case() {
    let cases = [
        ("trace", LogLevel::Trace),
        ("DEBUG", LogLevel::Debug),
        ("Info", LogLevel::Info),
        ("WARN", LogLevel::Warn),
        ("warning", LogLevel::Warn),
        ("error", LogLevel::Error),
        ("fatal", LogLevel::Fatal),
        ("PANIC", LogLevel::Panic),
    ];
    for (s, level) in cases {
        assert_eq!(s.parse(), Ok(level), "{s}");
    }
    for s in ["", "verbose", "warn ", "critical"] {
        assert!(s.parse::<LogLevel>().is_err(), "{s:?}");
    }
    assert!(LogLevel::Error < LogLevel::Warn && LogLevel::Warn < LogLevel::Debug);
}

#[test]
fn pool_on_empty_behavior_unknown_is_wait() {
    assert_eq!("WAIT".parse(), Ok(PoolOnEmptyBehavior::Wait));
    assert_eq!("create".parse(), Ok(PoolOnEmptyBehavior::Create));
    assert_eq!("Error".parse(), Ok(PoolOnEmptyBehavior::Error));
    assert_eq!("bogus".parse(), Ok(PoolOnEmptyBehavior::Wait));
    assert_eq!("".parse(), Ok(PoolOnEmptyBehavior::Wait));
}

#[test]
fn tracing_protocol_is_exact() {
    assert_eq!("http".parse(), Ok(TracingProtocol::Http));
    assert_eq!("".parse(), Ok(TracingProtocol::Http));
    assert_eq!("grpc".parse(), Ok(TracingProtocol::Grpc));
    assert!("GRPC".parse::<TracingProtocol>().is_err());
}

#[test]
fn enum_errors_reach_the_settings_error() {
    assert_eq!(
        errors(&[("LOG_LEVEL", "loud"), ("REDIS_PERSECOND_TYPE", "ring")]),
        [
            (
                "LOG_LEVEL",
                ParseError::OneOf {
                    expected: "trace, debug, info, warn, warning, error, fatal, panic (any case)"
                }
            ),
            (
                "REDIS_PERSECOND_TYPE",
                ParseError::OneOf {
                    expected: "single, sentinel, cluster (any case)"
                }
            ),
        ]
    );
}

#[test]
fn inactive_list_names_set_accepted_variables_in_table_order() {
    let source = src(&[
        ("REDIS_PIPELINE_LIMIT", "8"),
        ("LOG_LEVEL", "debug"),
        ("PORT", "9090"),
        ("REDIS_PERSECOND_PIPELINE_WINDOW", "150us"),
        ("CACHE_KEY_PREFIX", ""),
        ("RUNTIME_ROOT", "/data"),
        ("NOT_A_SETTING", "1"),
    ]);
    let settings = Settings::from_source(&source).expect("valid");
    assert_eq!(
        settings.accepted_but_inactive(&source),
        ["REDIS_PIPELINE_LIMIT", "REDIS_PERSECOND_PIPELINE_WINDOW"]
    );
    assert!(Settings::default()
        .accepted_but_inactive(&MapSource::new())
        .is_empty());
}

#[test]
fn debug_redacts_credentials() {
    let s = parse(&[
        ("REDIS_AUTH", "user:hunter2"),
        ("REDIS_PERSECOND_SENTINEL_AUTH", "hunter3"),
        (
            "CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS",
            "authorization:Bearer hunter4",
        ),
    ])
    .expect("valid");
    let debug = format!("{s:?}");
    for secret in ["hunter2", "hunter3", "hunter4"] {
        assert!(!debug.contains(secret), "{secret} leaked: {debug}");
    }
    assert!(debug.contains("authorization"));
    assert!(debug.contains("auth: <redacted>"));
    assert!(debug.contains("sentinel_auth: \"\""));
}

#[test]
fn module_doc_example() {
    let src: MapSource = [("LOG_LEVEL", "debug"), ("PORT", "0x1F90")]
        .into_iter()
        .collect();
    let settings = Settings::from_source(&src).expect("valid");
    assert_eq!(settings.log.level, LogLevel::Debug);
    assert_eq!(settings.listener.port, 8080);
    let bad: MapSource = [("PORT", ""), ("USE_STATSD", "yes")].into_iter().collect();
    assert_eq!(
        Settings::from_source(&bad)
            .expect_err("invalid")
            .invalid()
            .len(),
        2
    );
}
