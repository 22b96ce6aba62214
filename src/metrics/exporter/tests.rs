//! Exporter tests. Every test builds its own recorder and records through
//! `metrics::with_local_recorder`; the global recorder is never installed.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use tokio::time::Instant;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream, UdpSocket};

use super::*;
use crate::metrics::{record_grpc_call, record_local_cache, LocalCacheGauges};
use crate::metrics::{Stats, CONFIG_LOAD_SUCCESS, MAX_DYNAMIC_SERIES, REDIS_ERROR};

fn opts() -> MetricsOptions {
    MetricsOptions {
        use_statsd: false,
        ..MetricsOptions::default()
    }
}

fn prom_opts() -> MetricsOptions {
    MetricsOptions {
        use_prometheus: true,
        ..opts()
    }
}

fn tags(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

fn record(handle: &MetricsHandle, f: impl FnOnce()) {
    metrics::with_local_recorder(&handle.recorder(), f);
}

#[test]
fn sink_selection_follows_the_original() {
    let cases: [(MetricsOptions, Option<SinkKind>); 9] = [
        (MetricsOptions::default(), Some(SinkKind::Statsd)),
        (
            MetricsOptions {
                disable_stats: true,
                use_prometheus: true,
                use_dog_statsd: true,
                ..MetricsOptions::default()
            },
            Some(SinkKind::Null),
        ),
        (
            MetricsOptions {
                use_dog_statsd: true,
                ..MetricsOptions::default()
            },
            None,
        ),
        (
            MetricsOptions {
                use_dog_statsd: true,
                ..opts()
            },
            Some(SinkKind::DogStatsd),
        ),
        (
            MetricsOptions {
                use_dog_statsd: true,
                use_prometheus: true,
                ..opts()
            },
            None,
        ),
        (
            MetricsOptions {
                use_prometheus: true,
                ..MetricsOptions::default()
            },
            None,
        ),
        (prom_opts(), Some(SinkKind::Prometheus)),
        (opts(), Some(SinkKind::Log)),
        (
            MetricsOptions {
                use_dog_statsd: true,
                dog_statsd_mogrifiers: vec!["A".into()],
                ..opts()
            },
            None,
        ),
    ];
    for (i, (o, want)) in cases.iter().enumerate() {
        assert_eq!(select_sink(o).ok(), *want, "case {i}");
    }
    let err = select_sink(&MetricsOptions {
        use_prometheus: true,
        ..MetricsOptions::default()
    })
    .err()
    .map(|e| e.to_string())
    .unwrap_or_default();
    assert!(
        err.contains("unable to use more than one stats sink"),
        "{err}"
    );
    assert!(err.contains("enabled: USE_STATSD, USE_PROMETHEUS"), "{err}");
    assert!(matches!(
        select_sink(&MetricsOptions {
            use_dog_statsd: true,
            dog_statsd_mogrifiers: vec!["A".into()],
            ..opts()
        }),
        Err(MetricsError::Unsupported(_))
    ));
}

#[test]
fn build_rejects_bad_options() {
    assert!(matches!(
        build(MetricsOptions {
            flush_interval: Duration::ZERO,
            ..opts()
        }),
        Err(MetricsError::ZeroFlushInterval)
    ));
    // A mapper file that cannot be read maps nothing, as in the original
    // (Envoy Gateway's mapper ConfigMap is optional).
    assert!(build(MetricsOptions {
        prometheus_mapper_yaml: "/nonexistent/mapper.yaml".into(),
        ..prom_opts()
    })
    .is_ok());
    // The mapper file is only read for the Prometheus sink.
    assert!(build(MetricsOptions {
        prometheus_mapper_yaml: "/nonexistent/mapper.yaml".into(),
        ..opts()
    })
    .is_ok());
}

#[test]
fn listen_addr_accepts_go_syntax() {
    assert_eq!(listen_addr(":9090"), "0.0.0.0:9090");
    assert_eq!(listen_addr("127.0.0.1:9090"), "127.0.0.1:9090");
}

#[tokio::test]
async fn render_stats_lists_every_statistic_sorted() {
    let (_, handle) = build(MetricsOptions {
        disable_stats: true,
        extra_tags: tags(&[("app", "rl")]),
        ..MetricsOptions::default()
    })
    .expect("build");
    let stats = Stats::new();
    record(&handle, || {
        stats.config_load(true);
        stats.rule("rl.foo", false).total_hits.increment(3);
        stats.rule("rl.foo", false).over_limit.increment(1);
        stats.domain_not_found("nope");
        stats.redis_error();
        record_grpc_call("ShouldRateLimit", Duration::from_micros(1500));
        record_grpc_call("ShouldRateLimit", Duration::from_micros(2500));
    });
    handle.add_generator(|| {
        record_local_cache(&LocalCacheGauges {
            hit_count: 7,
            ..LocalCacheGauges::default()
        })
    });
    // DISABLE_STATS emits nothing but keeps everything readable.
    let report = handle.flush().await;
    assert_eq!(report.lines, 0);
    let expected = "\
ratelimit.localcache.averageAccessTime: 0
ratelimit.localcache.entryCount: 0
ratelimit.localcache.evacuateCount: 0
ratelimit.localcache.expiredCount: 0
ratelimit.localcache.hitCount: 7
ratelimit.localcache.lookupCount: 0
ratelimit.localcache.missCount: 0
ratelimit.localcache.overwriteCount: 0
ratelimit.service.call.should_rate_limit.redis_error: 1
ratelimit.service.config_load_success: 1
ratelimit.service.rate_limit.nope.domain_not_found: 1
ratelimit.service.rate_limit.rl.foo.near_limit: 0
ratelimit.service.rate_limit.rl.foo.over_limit: 1
ratelimit.service.rate_limit.rl.foo.over_limit_with_local_cache: 0
ratelimit.service.rate_limit.rl.foo.shadow_mode: 0
ratelimit.service.rate_limit.rl.foo.total_hits: 3
ratelimit.service.rate_limit.rl.foo.within_limit: 0
ratelimit_server.ShouldRateLimit.response_time: count=2 sum_ms=4.000
ratelimit_server.ShouldRateLimit.total_requests: 2
runtime.load_attempts: 1
";
    assert_eq!(handle.render_stats(), expected);
    assert_eq!(handle.render_prometheus(), "");
}

/// The sample lines of a Prometheus text (comments and blanks dropped).
fn samples(text: &str) -> BTreeSet<String> {
    text.lines()
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(str::to_string)
        .collect()
}

#[tokio::test]
async fn render_prometheus_uses_the_default_mapping() {
    let (_, handle) = build(prom_opts()).expect("build");
    let stats = Stats::new();
    record(&handle, || {
        stats.config_load(true);
        stats.rule("rl.foo", false).total_hits.increment(3);
        stats.rule("rl.a.b.c", false).over_limit.increment(2);
        stats.rule("rl.a.b.d", false).over_limit.increment(1);
        stats
            .rule("rl.a.b", false)
            .over_limit_with_local_cache
            .increment(4);
        stats.domain_not_found("nope");
        stats.redis_error();
        record_grpc_call("ShouldRateLimit", Duration::from_micros(1500));
    });
    let text = handle.render_prometheus();
    let s = samples(&text);
    for line in [
        "ratelimit_service_config_load_success 1",
        "ratelimit_service_rate_limit_total_hits{domain=\"rl\",key1=\"foo\"} 3",
        // Three-level keys fold deeper segments into one series.
        "ratelimit_service_rate_limit_over_limit{domain=\"rl\",key1=\"a\",key2=\"b\"} 3",
        // Its own series, not folded into over_limit as the original's mapping does.
        "ratelimit_service_rate_limit_rl_a_b_over_limit_with_local_cache 4",
        "ratelimit_service_rate_limit_nope_domain_not_found 1",
        "ratelimit_service_should_rate_limit_error{err_type=\"redis_error\"} 1",
        "ratelimit_service_total_requests{grpc_method=\"ShouldRateLimit\"} 1",
        "ratelimit_service_response_time_seconds_bucket{grpc_method=\"ShouldRateLimit\",le=\"0.005\"} 1",
        "ratelimit_service_response_time_seconds_count{grpc_method=\"ShouldRateLimit\"} 1",
    ] {
        assert!(s.contains(line), "missing {line:?} in\n{text}");
    }
    assert!(
        text.contains("# TYPE ratelimit_service_response_time_seconds histogram"),
        "{text}"
    );
    // Counters never incremented are not exported (zero deltas are skipped).
    assert!(!text.contains("near_limit"), "{text}");
    // Counters accumulate across renders.
    record(&handle, || {
        stats.rule("rl.foo", false).total_hits.increment(2)
    });
    let s = samples(&handle.render_prometheus());
    assert!(s.contains("ratelimit_service_rate_limit_total_hits{domain=\"rl\",key1=\"foo\"} 5"));
    assert!(s.contains("ratelimit_service_config_load_success 1"));
}

#[tokio::test]
async fn prometheus_extra_tags_become_labels_and_ms_option() {
    let (_, handle) = build(MetricsOptions {
        extra_tags: tags(&[("env", "prod.eu"), ("domain", "clash")]),
        prometheus_response_time_as_ms: true,
        ..prom_opts()
    })
    .expect("build");
    record(&handle, || {
        metrics::counter!("ratelimit.service.rate_limit.rl.foo.total_hits").increment(1);
        record_grpc_call("Check", Duration::from_millis(3));
    });
    let text = handle.render_prometheus();
    let s = samples(&text);
    assert!(
        s.contains(
            "ratelimit_service_rate_limit_total_hits{domain=\"rl\",key1=\"foo\",env=\"prod.eu\"} 1"
        ),
        "{text}"
    );
    // Milliseconds kept: 3 ms is above every default bucket but 5 and 10.
    assert!(
        s.contains(
            "ratelimit_service_response_time_seconds_bucket{grpc_method=\"Check\",domain=\"clash\",env=\"prod.eu\",le=\"2.5\"} 0"
        ),
        "{text}"
    );
    assert!(
        s.contains(
            "ratelimit_service_response_time_seconds_sum{grpc_method=\"Check\",domain=\"clash\",env=\"prod.eu\"} 3"
        ),
        "{text}"
    );
}

#[tokio::test]
async fn prometheus_custom_mapper_file() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("mapper.yaml");
    std::fs::write(
        &path,
        "mappings:\n\
         - match: \"ratelimit.service.rate_limit.*.*.total_hits\"\n\
         \x20 name: \"hits\"\n\
         \x20 labels:\n\
         \x20   d: \"$1\"\n\
         - match: \"ratelimit.service.config_load_success\"\n\
         \x20 action: drop\n",
    )
    .expect("write");
    let (_, handle) = build(MetricsOptions {
        prometheus_mapper_yaml: path.display().to_string(),
        ..prom_opts()
    })
    .expect("build");
    record(&handle, || {
        metrics::counter!("ratelimit.service.rate_limit.rl.foo.total_hits").increment(2);
        metrics::counter!(CONFIG_LOAD_SUCCESS).increment(1);
        metrics::counter!(REDIS_ERROR).increment(1);
    });
    let text = handle.render_prometheus();
    let s = samples(&text);
    assert!(s.contains("hits{d=\"rl\"} 2"), "{text}");
    // The default mapping is replaced entirely.
    assert!(
        s.contains("ratelimit_service_call_should_rate_limit_redis_error 1"),
        "{text}"
    );
    assert!(!text.contains("config_load_success"), "{text}");
    // Dropped from Prometheus only: still in /stats.
    assert!(handle
        .render_stats()
        .contains("ratelimit.service.config_load_success: 1\n"));
}

/// Receives datagrams until `quiet` passes without one; returns the lines.
async fn recv_lines(sock: &UdpSocket, quiet: Duration) -> Vec<String> {
    let mut lines = Vec::new();
    let mut buf = vec![0u8; 65536];
    while let Ok(Ok(n)) = tokio::time::timeout(quiet, sock.recv(&mut buf)).await {
        let text = String::from_utf8_lossy(&buf[..n]).into_owned();
        assert!(text.ends_with('\n'), "{text:?}");
        lines.extend(text.lines().map(str::to_string));
    }
    lines
}

fn statsd_opts(port: u16, protocol: StatsdProtocol) -> MetricsOptions {
    MetricsOptions {
        statsd_host: "127.0.0.1".into(),
        statsd_port: port,
        statsd_protocol: protocol,
        ..MetricsOptions::default()
    }
}

#[tokio::test]
async fn statsd_udp_sink_sends_deltas_gauges_and_timers() {
    let server = UdpSocket::bind("127.0.0.1:0").await.expect("bind");
    let port = server.local_addr().expect("addr").port();
    let (_, handle) = build(MetricsOptions {
        extra_tags: tags(&[("zone", "eu.1"), ("app", "rl")]),
        ..statsd_opts(port, StatsdProtocol::Udp)
    })
    .expect("build");
    assert_eq!(handle.sink(), SinkKind::Statsd);
    let stats = Stats::new();
    record(&handle, || {
        stats.config_load(true);
        stats.rule("rl.foo", false).total_hits.increment(3);
        record_grpc_call("ShouldRateLimit", Duration::from_micros(12_900));
    });
    handle.add_generator(|| {
        record_local_cache(&LocalCacheGauges {
            hit_count: 7,
            ..LocalCacheGauges::default()
        })
    });
    let report = handle.flush().await;
    assert!(report.delivered);
    let lines: BTreeSet<String> = recv_lines(&server, Duration::from_millis(300))
        .await
        .into_iter()
        .collect();
    assert_eq!(lines.len() as u64, report.lines);
    let t = ".__app=rl.__zone=eu_1";
    for want in [
        format!("ratelimit.service.config_load_success{t}:1|c"),
        format!("ratelimit.service.rate_limit.rl.foo.total_hits{t}:3|c"),
        format!("ratelimit_server.ShouldRateLimit.total_requests{t}:1|c"),
        format!("ratelimit_server.ShouldRateLimit.response_time{t}:12|ms"),
        format!("ratelimit.localcache.hitCount{t}:7|g"),
        format!("ratelimit.localcache.missCount{t}:0|g"),
    ] {
        assert!(lines.contains(&want), "missing {want:?} in {lines:#?}");
    }
    // Zero deltas are skipped.
    assert!(
        !lines.iter().any(|l| l.contains("near_limit")),
        "{lines:#?}"
    );

    // Second flush: deltas only, gauges again.
    record(&handle, || {
        stats.rule("rl.foo", false).total_hits.increment(2)
    });
    handle.flush().await;
    let lines: BTreeSet<String> = recv_lines(&server, Duration::from_millis(300))
        .await
        .into_iter()
        .collect();
    let expected: BTreeSet<String> = [
        format!("ratelimit.service.rate_limit.rl.foo.total_hits{t}:2|c"),
        format!("ratelimit.localcache.averageAccessTime{t}:0|g"),
        format!("ratelimit.localcache.entryCount{t}:0|g"),
        format!("ratelimit.localcache.evacuateCount{t}:0|g"),
        format!("ratelimit.localcache.expiredCount{t}:0|g"),
        format!("ratelimit.localcache.hitCount{t}:7|g"),
        format!("ratelimit.localcache.lookupCount{t}:0|g"),
        format!("ratelimit.localcache.missCount{t}:0|g"),
        format!("ratelimit.localcache.overwriteCount{t}:0|g"),
    ]
    .into_iter()
    .collect();
    assert_eq!(lines, expected);
}

#[tokio::test]
async fn statsd_tcp_sink_delivers_and_closes_on_stop() {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let port = listener.local_addr().expect("addr").port();
    let reader = tokio::spawn(async move {
        let (mut s, _) = listener.accept().await.expect("accept");
        let mut text = String::new();
        s.read_to_string(&mut text).await.expect("read");
        text
    });
    let (_, handle) = build(statsd_opts(port, StatsdProtocol::Tcp)).expect("build");
    record(&handle, || {
        metrics::counter!(CONFIG_LOAD_SUCCESS).increment(1);
        metrics::counter!(REDIS_ERROR).increment(2);
    });
    assert!(handle.flush().await.delivered);
    record(&handle, || metrics::counter!(REDIS_ERROR).increment(1));
    handle.flush_and_stop().await;
    let text = tokio::time::timeout(Duration::from_secs(5), reader)
        .await
        .expect("reader finished")
        .expect("reader task");
    let lines: Vec<&str> = text.lines().collect();
    assert!(text.ends_with('\n'));
    assert_eq!(lines.len(), 3, "{text}");
    assert!(lines.contains(&"ratelimit.service.config_load_success:1|c"));
    assert!(lines.contains(&"ratelimit.service.call.should_rate_limit.redis_error:2|c"));
    assert_eq!(
        lines.last(),
        Some(&"ratelimit.service.call.should_rate_limit.redis_error:1|c")
    );
}

#[tokio::test]
async fn dogstatsd_sink_uses_native_tags_over_udp() {
    let server = UdpSocket::bind("127.0.0.1:0").await.expect("bind");
    let port = server.local_addr().expect("addr").port();
    let (_, handle) = build(MetricsOptions {
        use_dog_statsd: true,
        use_statsd: false,
        // DogStatsD is always UDP.
        statsd_protocol: StatsdProtocol::Tcp,
        extra_tags: tags(&[("env", "a:b")]),
        ..statsd_opts(port, StatsdProtocol::Tcp)
    })
    .expect("build");
    record(&handle, || {
        metrics::counter!(CONFIG_LOAD_SUCCESS).increment(1);
    });
    handle.flush().await;
    let lines = recv_lines(&server, Duration::from_millis(300)).await;
    assert_eq!(
        lines,
        vec!["ratelimit.service.config_load_success:1|c|#env:a_b".to_string()]
    );
}

#[tokio::test]
async fn unreachable_statsd_never_fails() {
    // A port with nothing listening.
    let port = {
        let l = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        l.local_addr().expect("addr").port()
    };
    for o in [
        statsd_opts(port, StatsdProtocol::Tcp),
        statsd_opts(port, StatsdProtocol::Udp),
        MetricsOptions {
            statsd_host: "statsd.invalid".into(),
            ..statsd_opts(port, StatsdProtocol::Tcp)
        },
    ] {
        let (_, handle) = build(o).expect("build");
        let started = Instant::now();
        for i in 1..=3 {
            record(&handle, || {
                metrics::counter!(CONFIG_LOAD_SUCCESS).increment(1)
            });
            let report = handle.flush().await;
            assert_eq!(report.lines, 1, "round {i}");
        }
        handle.flush_and_stop().await;
        assert!(started.elapsed() < STATSD_IO_TIMEOUT * 6);
        // Recording keeps working.
        record(&handle, || {
            metrics::counter!(CONFIG_LOAD_SUCCESS).increment(1)
        });
        assert!(handle
            .render_stats()
            .contains("ratelimit.service.config_load_success: 4\n"));
    }
    // TCP to a closed port reports the failure.
    let (_, handle) = build(statsd_opts(port, StatsdProtocol::Tcp)).expect("build");
    record(&handle, || {
        metrics::counter!(CONFIG_LOAD_SUCCESS).increment(1)
    });
    assert!(!handle.flush().await.delivered);
}

#[tokio::test]
async fn flush_task_flushes_on_stop() {
    let server = UdpSocket::bind("127.0.0.1:0").await.expect("bind");
    let port = server.local_addr().expect("addr").port();
    let (_, handle) = build(MetricsOptions {
        flush_interval: Duration::from_secs(3600),
        ..statsd_opts(port, StatsdProtocol::Udp)
    })
    .expect("build");
    handle.start(&tokio::runtime::Handle::current());
    record(&handle, || {
        metrics::counter!(CONFIG_LOAD_SUCCESS).increment(5)
    });
    handle.flush_and_stop().await;
    let lines = recv_lines(&server, Duration::from_millis(300)).await;
    assert_eq!(
        lines,
        vec!["ratelimit.service.config_load_success:5|c".to_string()]
    );
    // Stopping again just flushes (nothing is due).
    handle.flush_and_stop().await;
    assert!(recv_lines(&server, Duration::from_millis(100))
        .await
        .is_empty());
}

#[tokio::test]
async fn idle_per_key_statistics_are_forgotten() {
    let (_, handle) = build(MetricsOptions {
        disable_stats: true,
        flush_interval: Duration::from_secs(1),
        idle_timeout: Duration::from_secs(1),
        ..MetricsOptions::default()
    })
    .expect("build");
    let stats = Stats::new();
    record(&handle, || {
        metrics::counter!("ratelimit.service.rate_limit.gone.domain_not_found").increment(1);
        stats.rule("rl.kept", false).total_hits.increment(1);
        metrics::counter!(CONFIG_LOAD_SUCCESS).increment(1);
    });
    assert_eq!(handle.dynamic_stats(), 7);
    handle.flush().await; // changed since the last sweep: kept
    assert!(handle.render_stats().contains("gone.domain_not_found: 1"));
    handle.flush().await; // idle for one interval, unreferenced: forgotten
    let text = handle.render_stats();
    assert!(!text.contains("gone"), "{text}");
    // Held handles (the Stats cache) and static names stay.
    assert!(text.contains("ratelimit.service.rate_limit.rl.kept.total_hits: 1"));
    assert!(text.contains("ratelimit.service.config_load_success: 1"));
    assert_eq!(handle.dynamic_stats(), 6);
    // A forgotten key comes back from zero when used again.
    record(&handle, || {
        metrics::counter!("ratelimit.service.rate_limit.gone.domain_not_found").increment(1)
    });
    assert!(handle.render_stats().contains("gone.domain_not_found: 1"));
}

#[tokio::test]
async fn forgetting_never_loses_statsd_counts() {
    let server = UdpSocket::bind("127.0.0.1:0").await.expect("bind");
    let port = server.local_addr().expect("addr").port();
    let (_, handle) = build(MetricsOptions {
        flush_interval: Duration::from_secs(1),
        idle_timeout: Duration::from_secs(1),
        ..statsd_opts(port, StatsdProtocol::Udp)
    })
    .expect("build");
    let name = "ratelimit.service.rate_limit.x.domain_not_found";
    let mut total = 0;
    for _ in 0..4 {
        record(&handle, || metrics::counter!(name).increment(1));
        handle.flush().await;
        handle.flush().await;
    }
    for line in recv_lines(&server, Duration::from_millis(300)).await {
        let n: u64 = line
            .strip_prefix(&format!("{name}:"))
            .and_then(|r| r.strip_suffix("|c"))
            .and_then(|v| v.parse().ok())
            .expect("counter line");
        total += n;
    }
    assert_eq!(total, 4);
}

/// A flood of per-value series fills the cap; a rule first seen after it
/// still gets its series, and a new per-value one does not.
#[tokio::test]
async fn a_full_cap_never_blinds_a_rule() {
    let (_, handle) = build(MetricsOptions {
        disable_stats: true,
        ..MetricsOptions::default()
    })
    .expect("build");
    let stats = Stats::new();
    record(&handle, || {
        for i in 0..MAX_DYNAMIC_SERIES {
            stats
                .rule(&format!("rl.detailed_v{i}"), true)
                .total_hits
                .increment(1);
        }
        stats.rule("rl.late", false).over_limit.increment(2);
        stats.rule("rl.detailed_late", true).over_limit.increment(3);
    });
    let text = handle.render_stats();
    assert!(
        text.contains("ratelimit.service.rate_limit.rl.late.over_limit: 2\n"),
        "the rule's own series exists"
    );
    assert!(
        !text.contains("rl.detailed_late"),
        "per-value series stay capped"
    );
}

#[tokio::test]
async fn per_key_statistics_are_capped() {
    let (_, handle) = build(MetricsOptions {
        disable_stats: true,
        ..MetricsOptions::default()
    })
    .expect("build");
    record(&handle, || {
        for i in 0..MAX_DYNAMIC_SERIES + 10 {
            metrics::counter!(format!(
                "ratelimit.service.rate_limit.d{i}.domain_not_found"
            ))
            .increment(1);
        }
        // Static names are never refused.
        metrics::counter!(CONFIG_LOAD_SUCCESS).increment(1);
    });
    assert_eq!(handle.dynamic_stats(), MAX_DYNAMIC_SERIES);
    let text = handle.render_stats();
    assert!(text.contains("ratelimit.service.config_load_success: 1\n"));
    assert!(!text.contains(&format!("d{}.", MAX_DYNAMIC_SERIES + 1)));
}

async fn http_get(port: u16, path: &str) -> String {
    let mut s = TcpStream::connect(("127.0.0.1", port))
        .await
        .expect("connect");
    let req = format!("GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n");
    s.write_all(req.as_bytes()).await.expect("write");
    let mut out = String::new();
    s.read_to_string(&mut out).await.expect("read");
    out
}

#[tokio::test]
async fn serve_prometheus_serves_only_the_metrics_path() {
    let (_, handle) = build(prom_opts()).expect("build");
    record(&handle, || {
        metrics::counter!(CONFIG_LOAD_SUCCESS).increment(1)
    });
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let port = listener.local_addr().expect("addr").port();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let h = handle.clone();
    let server = tokio::spawn(async move {
        h.serve_prometheus(listener, String::new(), async {
            let _ = stopped.await;
        })
        .await
    });
    let ok = http_get(port, "/metrics").await;
    assert!(ok.starts_with("HTTP/1.1 200"), "{ok}");
    assert!(ok.contains(PROMETHEUS_CONTENT_TYPE), "{ok}");
    assert!(
        ok.contains("ratelimit_service_config_load_success 1"),
        "{ok}"
    );
    for other in ["/debug/pprof/", "/debug/vars", "/", "/metrics/x"] {
        let nf = http_get(port, other).await;
        assert!(nf.starts_with("HTTP/1.1 404"), "{other}: {nf}");
        assert!(nf.ends_with("404 page not found\n"), "{other}: {nf}");
    }
    let _ = stop.send(());
    let result = tokio::time::timeout(Duration::from_secs(5), server)
        .await
        .expect("server stopped")
        .expect("server task");
    assert!(result.is_ok());
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    assert!(matches!(
        handle
            .serve_prometheus(listener, "metrics".into(), async {})
            .await,
        Err(MetricsError::InvalidPath(_))
    ));
}
