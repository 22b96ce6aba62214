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
            name: String::new()
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
