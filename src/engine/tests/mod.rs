//! The engine on the memory store with a manual clock: the opt-in
//! algorithms, several limits per descriptor, and all-or-nothing commits.

use std::sync::Arc;
use std::time::Duration;

use super::*;
use crate::config::{load, ConfigFile, Entry};
use crate::limiter::{ManualClock, Unit};
use crate::store::MemoryStore;

const S: Duration = Duration::from_secs(1);

struct Fixture {
    engine: Engine,
    clock: Arc<ManualClock>,
}

fn fixture(yaml: &str, options: EngineOptions) -> Fixture {
    let config = load(&[ConfigFile::new("t.yaml", yaml)], false)
        .unwrap_or_else(|e| panic!("{}", e.detailed()));
    let live = LiveConfig::new();
    live.publish(Arc::new(config));
    // Half a second into a minute (and a 5-minute window).
    let clock = Arc::new(ManualClock::new(Duration::from_millis(1_700_000_400_500)));
    let store = Arc::new(MemoryStore::new(clock.clone()));
    let engine = Engine::new(
        live,
        store,
        clock.clone(),
        options,
        None,
        Arc::new(crate::metrics::Stats::new()),
    );
    Fixture { engine, clock }
}

fn request(descriptors: &[&[(&str, &str)]], hits: u32) -> RateLimitRequest {
    RateLimitRequest {
        domain: "d".into(),
        descriptors: descriptors
            .iter()
            .map(|entries| RequestDescriptor {
                entries: entries.iter().map(|(k, v)| Entry::new(*k, *v)).collect(),
                ..RequestDescriptor::default()
            })
            .collect(),
        hits_addend: hits,
    }
}

impl Fixture {
    async fn ask(&self, descriptors: &[&[(&str, &str)]], hits: u32) -> RateLimitResponse {
        self.engine
            .should_rate_limit(&request(descriptors, hits))
            .await
            .expect("decided")
    }

    /// How many of `n` unit requests on `descriptors` are admitted now.
    async fn admitted(&self, descriptors: &[&[(&str, &str)]], n: usize) -> usize {
        let mut ok = 0;
        for _ in 0..n {
            ok += usize::from(self.ask(descriptors, 1).await.overall_code == Code::Ok);
        }
        ok
    }
}

const TB: &str = "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: second\n      requests_per_unit: 10\n      algorithm: token_bucket\n      burst: 5\n";

#[tokio::test]
async fn token_bucket_bursts_then_refills_at_its_rate() {
    let f = fixture(TB, EngineOptions::default());
    assert_eq!(f.admitted(&[&[("k", "")]], 20).await, 5, "the burst");
    f.clock.advance(Duration::from_millis(300));
    assert_eq!(f.admitted(&[&[("k", "")]], 20).await, 3, "10/s for 0.3 s");
    let r = f.ask(&[&[("k", "")]], 1).await;
    let s = &r.statuses[0];
    assert_eq!(s.code, Code::OverLimit);
    assert_eq!(s.limit_remaining, 0);
    assert_eq!(
        s.duration_until_reset,
        Some(Duration::from_millis(100)),
        "a denial reports when the next token comes"
    );
    assert_eq!(
        s.current_limit,
        Some(CurrentLimit {
            requests_per_unit: 10,
            unit: Unit::Second,
            name: String::new(),
            window_seconds: 1,
            burst: Some(5),
        })
    );
}

#[tokio::test]
async fn hits_addend_is_the_cost() {
    let f = fixture(TB, EngineOptions::default());
    assert_eq!(f.ask(&[&[("k", "")]], 4).await.overall_code, Code::Ok);
    assert_eq!(
        f.ask(&[&[("k", "")]], 2).await.overall_code,
        Code::OverLimit
    );
    assert_eq!(
        f.ask(&[&[("k", "")]], 1).await.statuses[0].limit_remaining,
        0
    );
    // Above the burst: never admittable.
    f.clock.advance(10 * S);
    assert_eq!(
        f.ask(&[&[("k", "")]], 6).await.overall_code,
        Code::OverLimit
    );
    assert_eq!(f.ask(&[&[("k", "")]], 5).await.overall_code, Code::Ok);
}

#[tokio::test]
async fn unit_multiplier_makes_longer_windows_and_reports_the_real_reset() {
    let yaml = "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: minute\n      requests_per_unit: 3\n      unit_multiplier: 5\n";
    let f = fixture(yaml, EngineOptions::default());
    assert_eq!(f.admitted(&[&[("k", "")]], 5).await, 3);
    let s = &f.ask(&[&[("k", "")]], 1).await.statuses[0];
    // 1_700_000_400.5 s is 0.5 s into a 300 s window.
    assert_eq!(s.duration_until_reset, Some(Duration::from_millis(299_500)));
    assert_eq!(s.current_limit.as_ref().map(|c| c.unit), Some(Unit::Minute));
    f.clock.advance(60 * S);
    assert_eq!(
        f.admitted(&[&[("k", "")]], 1).await,
        0,
        "still the same 5-minute window"
    );
    f.clock.advance(240 * S);
    assert_eq!(f.admitted(&[&[("k", "")]], 5).await, 3);
}

#[tokio::test]
async fn sliding_log_is_exact_over_any_window() {
    let yaml = "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: minute\n      requests_per_unit: 5\n      algorithm: sliding_log\n";
    let f = fixture(yaml, EngineOptions::default());
    assert_eq!(f.admitted(&[&[("k", "")]], 3).await, 3);
    f.clock.advance(50 * S);
    assert_eq!(f.admitted(&[&[("k", "")]], 5).await, 2);
    f.clock.advance(10 * S);
    assert_eq!(f.admitted(&[&[("k", "")]], 5).await, 3, "the first 3 left");
}

const TWO_LIMITS: &str = "domain: d\ndescriptors:\n  - key: k\n    rate_limits:\n      - unit: second\n        requests_per_unit: 10\n        algorithm: token_bucket\n        name: per_second\n      - unit: minute\n        requests_per_unit: 15\n        algorithm: sliding_window\n        name: per_minute\n";

#[tokio::test]
async fn several_limits_must_all_pass_and_the_tightest_is_reported() {
    let f = fixture(TWO_LIMITS, EngineOptions::default());
    assert_eq!(
        f.admitted(&[&[("k", "")]], 20).await,
        10,
        "the bucket first"
    );
    f.clock.advance(S);
    let r = f.ask(&[&[("k", "")]], 1).await;
    assert_eq!(r.overall_code, Code::Ok);
    let s = &r.statuses[0];
    // The bucket has 9 of 10 left, the minute 4 of 15: the minute is closer.
    assert_eq!(s.limit_remaining, 4);
    let current = s.current_limit.as_ref().expect("a limit");
    assert_eq!(
        (current.name.as_str(), current.unit),
        ("per_minute", Unit::Minute)
    );
    assert_eq!(f.admitted(&[&[("k", "")]], 10).await, 4);
    let s = &f.ask(&[&[("k", "")]], 1).await.statuses[0];
    assert_eq!(s.code, Code::OverLimit);
    assert_eq!(
        s.current_limit.as_ref().map(|c| c.name.as_str()),
        Some("per_minute")
    );
}

#[tokio::test]
async fn a_refused_request_takes_nothing_from_its_other_limits() {
    let yaml = "domain: d\ndescriptors:\n  - key: a\n    rate_limit:\n      unit: minute\n      requests_per_unit: 100\n      algorithm: sliding_window\n  - key: b\n    rate_limit:\n      unit: minute\n      requests_per_unit: 2\n      algorithm: token_bucket\n";
    let f = fixture(yaml, EngineOptions::default());
    let both: &[&[(&str, &str)]] = &[&[("a", "")], &[("b", "")]];
    assert_eq!(f.admitted(both, 10).await, 2);
    // `a` saw 10 requests, 8 of them refused by `b`: it was charged 2.
    let s = &f.ask(&[&[("a", "")]], 1).await.statuses[0];
    assert_eq!(s.limit_remaining, 97);
}

#[tokio::test]
async fn shadow_mode_limits_report_but_do_not_veto() {
    let yaml = "domain: d\ndescriptors:\n  - key: a\n    rate_limit:\n      unit: minute\n      requests_per_unit: 100\n      algorithm: token_bucket\n  - key: b\n    shadow_mode: true\n    rate_limit:\n      unit: minute\n      requests_per_unit: 1\n      algorithm: token_bucket\n";
    let f = fixture(yaml, EngineOptions::default());
    let both: &[&[(&str, &str)]] = &[&[("a", "")], &[("b", "")]];
    assert_eq!(f.admitted(both, 5).await, 5);
    assert_eq!(
        f.ask(&[&[("a", "")]], 1).await.statuses[0].limit_remaining,
        94
    );
}

const ORIGINAL: &str = "domain: d\ndescriptors:\n  - key: a\n    rate_limit:\n      unit: minute\n      requests_per_unit: 100\n  - key: b\n    rate_limit:\n      unit: minute\n      requests_per_unit: 2\n";

#[tokio::test]
async fn the_original_counts_refused_requests_unless_all_or_nothing() {
    let both: &[&[(&str, &str)]] = &[&[("a", "")], &[("b", "")]];
    let f = fixture(ORIGINAL, EngineOptions::default());
    assert_eq!(f.admitted(both, 10).await, 2);
    assert_eq!(
        f.ask(&[&[("a", "")]], 1).await.statuses[0].limit_remaining,
        89,
        "the original's behaviour: every hit counted"
    );
    let f = fixture(
        ORIGINAL,
        EngineOptions {
            all_or_nothing: true,
            ..EngineOptions::default()
        },
    );
    assert_eq!(f.admitted(both, 10).await, 2);
    let r = f.ask(&[&[("a", "")]], 1).await;
    assert_eq!(
        r.statuses[0].limit_remaining, 97,
        "only admitted requests counted"
    );
    assert_eq!(
        r.statuses[0].duration_until_reset,
        Some(Duration::from_secs(60)),
        "the original's whole-second reset"
    );
}

#[tokio::test]
async fn a_request_the_original_window_refuses_takes_nothing_from_the_new_limits() {
    let yaml = "domain: d\ndescriptors:\n  - key: a\n    rate_limit:\n      unit: minute\n      requests_per_unit: 100\n      algorithm: token_bucket\n  - key: b\n    rate_limit:\n      unit: minute\n      requests_per_unit: 2\n";
    let f = fixture(yaml, EngineOptions::default());
    let both: &[&[(&str, &str)]] = &[&[("a", "")], &[("b", "")]];
    assert_eq!(f.admitted(both, 10).await, 2);
    assert_eq!(
        f.ask(&[&[("a", "")]], 1).await.statuses[0].limit_remaining,
        97
    );
    // In global shadow mode the request goes through, so it is counted.
    let f = fixture(
        yaml,
        EngineOptions {
            shadow_mode: true,
            ..EngineOptions::default()
        },
    );
    assert_eq!(f.admitted(both, 10).await, 10);
    assert_eq!(
        f.ask(&[&[("a", "")]], 1).await.statuses[0].limit_remaining,
        89
    );
}

#[tokio::test]
async fn a_quota_vetoes_only_when_its_refusal_refuses_the_request() {
    let yaml = "domain: d\ndescriptors:\n  - key: a\n    rate_limit:\n      unit: minute\n      requests_per_unit: 100\n      algorithm: token_bucket\n  - key: q\n    quota_mode: true\n    rate_limit:\n      unit: minute\n      requests_per_unit: 1\n      algorithm: token_bucket\n  - key: r\n    quota_mode: true\n    rate_limit:\n      unit: minute\n      requests_per_unit: 100\n      algorithm: token_bucket\n";
    let f = fixture(yaml, EngineOptions::default());
    // The only quota refuses: the request is refused, `a` is not charged.
    let one_quota: &[&[(&str, &str)]] = &[&[("a", "")], &[("q", "")]];
    assert_eq!(f.admitted(one_quota, 5).await, 1);
    assert_eq!(
        f.ask(&[&[("a", "")]], 1).await.statuses[0].limit_remaining,
        98
    );
    // Another quota passes: the request passes and everything that passed
    // is counted.
    let two_quotas: &[&[(&str, &str)]] = &[&[("a", "")], &[("q", "")], &[("r", "")]];
    assert_eq!(f.admitted(two_quotas, 3).await, 3);
    assert_eq!(
        f.ask(&[&[("a", "")]], 1).await.statuses[0].limit_remaining,
        94
    );
}

const HEADERS: &str = "domain: d\ndescriptors:\n  - key: min\n    rate_limit: {unit: minute, requests_per_unit: 2, name: per_min}\n  - key: tb\n    rate_limit: {unit: second, requests_per_unit: 10, algorithm: token_bucket, burst: 20}\n  - key: shadow\n    shadow_mode: true\n    rate_limit: {unit: minute, requests_per_unit: 1}\n  - key: free\n    rate_limit: {unlimited: true}\n";

fn with_headers(format: HeaderFormat, jitter: Duration) -> EngineOptions {
    EngineOptions {
        response_headers: Some(HeaderNames::default()),
        header_format: format,
        retry_after_jitter: jitter,
        ..EngineOptions::default()
    }
}

fn header<'a>(r: &'a RateLimitResponse, name: &str) -> Option<&'a str> {
    r.response_headers_to_add
        .iter()
        .find(|(n, _)| n == name)
        .map(|(_, v)| v.as_str())
}

#[tokio::test]
async fn ietf_lists_each_applied_limit_but_not_shadow_or_unlimited_ones() {
    let f = fixture(HEADERS, with_headers(HeaderFormat::Ietf, Duration::ZERO));
    let all: &[&[(&str, &str)]] = &[
        &[("min", "a")],
        &[("tb", "x")],
        &[("shadow", "s")],
        &[("free", "f")],
    ];
    let r = f.ask(all, 1).await;
    assert_eq!(r.overall_code, Code::Ok);
    assert_eq!(
        header(&r, "RateLimit-Policy"),
        Some(r#""per_min";q=2;w=60, "tb=x";q=10;w=1;rl-burst=20"#)
    );
    // 59.5 s left in the minute: t is rounded up.
    assert_eq!(
        header(&r, "RateLimit"),
        Some(r#""per_min";r=1;t=60, "tb=x";r=19;t=1"#)
    );
    assert_eq!(header(&r, "Retry-After"), None, "allowed: no Retry-After");
    f.ask(&[&[("min", "a")]], 1).await;
    let refused = f.ask(&[&[("min", "a")]], 1).await;
    assert_eq!(refused.overall_code, Code::OverLimit);
    assert_eq!(header(&refused, "Retry-After"), Some("60"));
    assert_eq!(header(&refused, "RateLimit"), Some(r#""per_min";r=0;t=60"#));
}

#[tokio::test]
async fn x_ratelimit_is_envoys_spelling() {
    let f = fixture(
        HEADERS,
        with_headers(HeaderFormat::XRateLimit, Duration::ZERO),
    );
    let r = f.ask(&[&[("tb", "x")], &[("min", "a")]], 1).await;
    // The chosen status is the one with the least remaining (per_min: 1).
    assert_eq!(
        header(&r, "X-RateLimit-Limit"),
        Some(r#"2, 10;w=1, 2;w=60;name="per_min""#)
    );
    assert_eq!(header(&r, "X-RateLimit-Remaining"), Some("1"));
    assert_eq!(header(&r, "X-RateLimit-Reset"), Some("60"));
}

/// RETRY_AFTER_JITTER: every refusal's wait is the real one plus
/// [0, jitter), spread over the range, never earlier.
#[tokio::test]
async fn jitter_spreads_retries_over_its_range_and_never_earlier() {
    let jitter = Duration::from_secs(10);
    let f = fixture(HEADERS, with_headers(HeaderFormat::Ietf, jitter));
    f.admitted(&[&[("min", "j")]], 2).await;
    // The original's window reports whole seconds: 60 s at a minute's start.
    let real = Duration::from_secs(60);
    let mut waits = Vec::new();
    for _ in 0..200 {
        let r = f.ask(&[&[("min", "j")]], 1).await;
        assert_eq!(r.overall_code, Code::OverLimit);
        let wait = r.statuses[0].duration_until_reset.expect("a retry time");
        assert!(wait >= real && wait < real + jitter, "{wait:?}");
        let retry: u64 = header(&r, "Retry-After")
            .expect("Retry-After")
            .parse()
            .unwrap();
        assert!((60..=70).contains(&retry), "Retry-After {retry}");
        waits.push(wait - real);
    }
    let (min, max) = (
        waits.iter().min().copied().unwrap_or_default(),
        waits.iter().max().copied().unwrap_or_default(),
    );
    // 200 uniform draws: all in the top or bottom 80 % has odds below 1e-19.
    assert!(
        min < Duration::from_secs(2) && max > Duration::from_secs(8),
        "{min:?}..{max:?}"
    );
    // Allowed statuses are never jittered.
    let ok = f.ask(&[&[("tb", "j")]], 1).await;
    assert_eq!(
        ok.statuses[0].duration_until_reset,
        Some(Duration::from_millis(100))
    );
}

#[tokio::test]
async fn original_format_is_unchanged_by_the_new_settings_defaults() {
    let f = fixture(
        HEADERS,
        with_headers(HeaderFormat::Original, Duration::ZERO),
    );
    let r = f.ask(&[&[("min", "o")]], 1).await;
    assert_eq!(
        r.response_headers_to_add,
        vec![
            ("RateLimit-Limit".to_string(), "2".to_string()),
            ("RateLimit-Remaining".to_string(), "1".to_string()),
            ("RateLimit-Reset".to_string(), "60".to_string()),
        ]
    );
}

#[tokio::test]
async fn global_shadow_mode_lists_nothing_and_never_says_retry() {
    let options = EngineOptions {
        shadow_mode: true,
        ..with_headers(HeaderFormat::Ietf, Duration::ZERO)
    };
    let f = fixture(HEADERS, options);
    for _ in 0..3 {
        let r = f.ask(&[&[("min", "s")]], 1).await;
        assert_eq!(
            r.overall_code,
            Code::Ok,
            "shadow mode lets everything through"
        );
        assert!(
            r.response_headers_to_add.is_empty(),
            "{:?}",
            r.response_headers_to_add
        );
    }
}

fn sharded(algorithm: &str, limit: u32, shards: u32) -> String {
    format!(
        "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: minute\n      requests_per_unit: {limit}\n      algorithm: {algorithm}\n      shards: {shards}\n"
    )
}

/// The bound of `shards: K`: never above the logical limit, and at twice
/// the limit offered uniformly at least 95 % of it admitted.
#[tokio::test]
async fn a_sharded_limit_admits_at_most_its_limit_and_nearly_all_of_it() {
    for algorithm in [
        "fixed_window",
        "sliding_window",
        "token_bucket",
        "sliding_log",
    ] {
        for (limit, shards) in [(1_000, 8), (800, 16), (400, 2)] {
            let f = fixture(&sharded(algorithm, limit, shards), EngineOptions::default());
            let admitted = f.admitted(&[&[("k", "")]], 2 * limit as usize).await;
            assert!(
                admitted <= limit as usize,
                "{algorithm} {limit}/{shards}: {admitted}"
            );
            assert!(
                admitted * 100 >= 95 * limit as usize,
                "{algorithm} {limit}/{shards}: only {admitted} of {limit}"
            );
        }
    }
}

/// A sub-bucket's remaining is reported as the whole limit's.
#[tokio::test]
async fn a_sharded_limit_reports_the_logical_limit() {
    let f = fixture(&sharded("fixed_window", 800, 8), EngineOptions::default());
    let r = f.ask(&[&[("k", "")]], 1).await;
    let s = &r.statuses[0];
    assert_eq!(
        s.current_limit.as_ref().map(|l| l.requests_per_unit),
        Some(800)
    );
    assert_eq!(
        s.limit_remaining,
        99 * 8,
        "a sub-bucket of 100 with 99 left"
    );
}

/// 2026-12-31T23:59:00 in Asia/Kolkata (18:29:00 UTC): a minute before
/// the month (and year) ends there, while in UTC it is still 31 December.
const KOLKATA_NEW_YEAR_MINUS_60: u64 = 1_798_741_740;

#[tokio::test]
async fn a_calendar_month_counts_its_limit_and_resets_at_the_zones_month_end() {
    let yaml = "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: month\n      requests_per_unit: 3\n      calendar: true\n      time_zone: Asia/Kolkata\n";
    let f = fixture(yaml, EngineOptions::default());
    f.clock.set(Duration::from_secs(KOLKATA_NEW_YEAR_MINUS_60));
    assert_eq!(f.admitted(&[&[("k", "")]], 5).await, 3);
    let s = &f.ask(&[&[("k", "")]], 1).await.statuses[0];
    assert_eq!(s.code, Code::OverLimit);
    assert_eq!(
        s.duration_until_reset,
        Some(60 * S),
        "at the zone's month end"
    );
    let limit = s.current_limit.as_ref().expect("a limit");
    assert_eq!(limit.unit, Unit::Month);
    assert_eq!(limit.window_seconds, 31 * 86_400, "December's length");
    f.clock.advance(59 * S);
    assert_eq!(f.admitted(&[&[("k", "")]], 1).await, 0, "still December");
    f.clock.advance(S);
    assert_eq!(f.admitted(&[&[("k", "")]], 5).await, 3, "January is fresh");
    let s = &f.ask(&[&[("k", "")]], 1).await.statuses[0];
    assert_eq!(s.duration_until_reset, Some(31 * 86_400 * S));
}

#[tokio::test]
async fn a_calendar_limit_in_rate_limits_is_decided_all_or_nothing() {
    // A day in New York and 2 a second: a request the day refuses takes
    // nothing from the second's limit, and the other way round.
    let yaml = "domain: d\ndescriptors:\n  - key: k\n    rate_limits:\n      - unit: day\n        requests_per_unit: 3\n        calendar: true\n        time_zone: America/New_York\n      - unit: second\n        requests_per_unit: 2\n";
    let f = fixture(yaml, EngineOptions::default());
    // 2026-03-07T23:59:30 in New York (EST): the next day has 23 hours.
    f.clock.set(Duration::from_secs(1_772_945_970));
    assert_eq!(
        f.admitted(&[&[("k", "")]], 3).await,
        2,
        "the second's limit"
    );
    f.clock.advance(S);
    assert_eq!(f.admitted(&[&[("k", "")]], 3).await, 1, "the day's third");
    let s = &f.ask(&[&[("k", "")]], 1).await.statuses[0];
    assert_eq!(s.code, Code::OverLimit);
    assert_eq!(s.duration_until_reset, Some(29 * S), "midnight in New York");
    f.clock.advance(29 * S);
    let s = &f.ask(&[&[("k", "")]], 1).await.statuses[0];
    assert_eq!(s.code, Code::Ok, "a new day");
    f.clock.advance(S);
    assert_eq!(f.admitted(&[&[("k", "")]], 3).await, 2);
    let s = &f.ask(&[&[("k", "")]], 0).await.statuses[0];
    assert_eq!(
        s.current_limit.as_ref().map(|c| c.window_seconds),
        Some(23 * 3_600),
        "the day clocks go forward"
    );
    assert_eq!(s.limit_remaining, 0);
}

#[tokio::test]
async fn headers_follow_the_calendar() {
    let yaml = "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: day, requests_per_unit: 2, name: daily, calendar: true, time_zone: Europe/Berlin}\n";
    let f = fixture(yaml, with_headers(HeaderFormat::Ietf, Duration::ZERO));
    // 2026-10-25T23:00 in Berlin: the 25-hour day clocks go back, an hour
    // before its end.
    f.clock.set(Duration::from_secs(1_792_965_600));
    let r = f.ask(&[&[("k", "")]], 1).await;
    assert_eq!(
        header(&r, "RateLimit-Policy"),
        Some(r#""daily";q=2;w=90000"#),
        "the day's own length"
    );
    assert_eq!(header(&r, "RateLimit"), Some(r#""daily";r=1;t=3600"#));
    f.ask(&[&[("k", "")]], 1).await;
    let refused = f.ask(&[&[("k", "")]], 1).await;
    assert_eq!(refused.overall_code, Code::OverLimit);
    assert_eq!(
        header(&refused, "Retry-After"),
        Some("3600"),
        "Berlin's midnight"
    );
}

/// A request of many descriptors yields to the worker's other requests
/// every `SLICE` descriptors: on one thread, a small request sent after a
/// big one is answered before the big one is. (Without the slicing, the big
/// one would be decided whole in its first poll, and answered first.)
#[test]
fn a_big_request_lets_a_small_one_through_on_the_same_worker() {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    let yaml = "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: hour, requests_per_unit: 1000000}\n";
    let values: Vec<String> = (0..1_000).map(|i| format!("v{i}")).collect();
    let big: Vec<Vec<(String, String)>> = values
        .iter()
        .map(|v| vec![("k".to_string(), v.clone())])
        .collect();
    let order = Arc::new(std::sync::Mutex::new(Vec::new()));
    runtime.block_on(async {
        let f = Arc::new(fixture(yaml, EngineOptions::default()));
        let (f1, o1) = (Arc::clone(&f), Arc::clone(&order));
        let big_task = tokio::spawn(async move {
            let descriptors: Vec<Vec<(&str, &str)>> = big
                .iter()
                .map(|d| d.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect())
                .collect();
            let refs: Vec<&[(&str, &str)]> = descriptors.iter().map(Vec::as_slice).collect();
            let r = f1.ask(&refs, 1).await;
            o1.lock().expect("order").push(("big", r.statuses.len()));
        });
        let (f2, o2) = (Arc::clone(&f), Arc::clone(&order));
        let small_task = tokio::spawn(async move {
            let r = f2.ask(&[&[("k", "small")]], 1).await;
            o2.lock().expect("order").push(("small", r.statuses.len()));
        });
        big_task.await.expect("big");
        small_task.await.expect("small");
    });
    assert_eq!(
        *order.lock().expect("order"),
        [("small", 1), ("big", 1_000)],
        "the small request is answered while the big one is in progress"
    );
}

#[test]
fn the_expiry_jitter_bound_stays_within_what_the_redis_script_draws_from() {
    let with = |max| EngineOptions {
        expiration_jitter_max_seconds: max,
        ..EngineOptions::default()
    };
    assert_eq!(with(300).expiration_jitter(), 300);
    assert_eq!(with(0).expiration_jitter(), 0);
    assert_eq!(with(u64::MAX).expiration_jitter(), i32::MAX as u64);
}

mod evaluate;
mod refunds;

fn upstream_names() -> HeaderNames {
    HeaderNames {
        limit: "x-upstream-limit".into(),
        remaining: "x-upstream-remaining".into(),
        reset: "x-upstream-reset".into(),
    }
}

#[tokio::test]
async fn request_headers_carry_the_chosen_status_within_and_over_the_limit() {
    let options = EngineOptions {
        request_headers: Some(upstream_names()),
        ..EngineOptions::default()
    };
    let f = fixture(HEADERS, options);
    let expected = |remaining: &str| {
        vec![
            ("x-upstream-limit".to_string(), "2".to_string()),
            ("x-upstream-remaining".to_string(), remaining.to_string()),
            ("x-upstream-reset".to_string(), "60".to_string()),
        ]
    };
    let within = f.ask(&[&[("min", "r")]], 1).await;
    assert_eq!(within.request_headers_to_add, expected("1"));
    assert!(
        within.response_headers_to_add.is_empty(),
        "the two switches are independent"
    );
    f.ask(&[&[("min", "r")]], 1).await;
    let over = f.ask(&[&[("min", "r")]], 1).await;
    assert_eq!(over.overall_code, Code::OverLimit);
    assert_eq!(over.request_headers_to_add, expected("0"));
}

#[tokio::test]
async fn request_headers_show_a_shadow_rule_over_its_limit_to_the_upstream() {
    let options = EngineOptions {
        request_headers: Some(upstream_names()),
        ..with_headers(HeaderFormat::Ietf, Duration::ZERO)
    };
    let f = fixture(HEADERS, options);
    f.ask(&[&[("shadow", "s")]], 1).await;
    let r = f.ask(&[&[("shadow", "s")]], 1).await;
    assert_eq!(r.overall_code, Code::Ok, "a shadow rule never refuses");
    assert_eq!(
        r.request_headers_to_add,
        vec![
            ("x-upstream-limit".to_string(), "1".to_string()),
            ("x-upstream-remaining".to_string(), "0".to_string()),
            ("x-upstream-reset".to_string(), "60".to_string()),
        ],
        "the upstream sees the shadow rule spent"
    );
    assert!(
        r.response_headers_to_add
            .iter()
            .all(|(n, _)| !n.starts_with("x-upstream")),
        "the response keeps its own format and names: {:?}",
        r.response_headers_to_add
    );
}

mod overrides;
