//! The dry run: for every algorithm, what `evaluate` says of a request is
//! what the real request then gets, and asking changes nothing.

use super::*;

/// One rule per algorithm (and the original's window, and a calendar
/// month), each 4 per window so that a few requests cross the limit.
const EVERY: &str = "domain: d
descriptors:
  - key: original
    rate_limit: {unit: minute, requests_per_unit: 4, name: plain}
  - key: fixed
    rate_limit: {unit: minute, requests_per_unit: 4, algorithm: fixed_window}
  - key: sliding
    rate_limit: {unit: minute, requests_per_unit: 4, algorithm: sliding_window}
  - key: bucket
    rate_limit: {unit: minute, requests_per_unit: 4, algorithm: token_bucket, burst: 4}
  - key: log
    rate_limit: {unit: minute, requests_per_unit: 4, algorithm: sliding_log}
  - key: slots
    rate_limit: {algorithm: concurrency, max_in_flight: 4, max_duration: 60s}
  - key: month
    rate_limit: {unit: month, requests_per_unit: 4, calendar: true}
  - key: trial
    shadow_mode: true
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: free
    rate_limit: {unlimited: true}
";

#[tokio::test]
async fn the_dry_run_answers_what_the_next_request_gets_for_every_algorithm() {
    let f = fixture(EVERY, EngineOptions::default());
    for key in [
        "original", "fixed", "sliding", "bucket", "log", "slots", "month",
    ] {
        for step in 0..7 {
            // Costs 1 and 2 alternate, so that a cost that no longer fits
            // is refused while a smaller one still would be.
            let hits = 1 + step % 2;
            let req = request(&[&[(key, "v")]], hits);
            let first = f.engine.evaluate(&req, None).await.expect("evaluated");
            let again = f.engine.evaluate(&req, None).await.expect("evaluated");
            assert_eq!(first, again, "{key} step {step}: asking took something");
            let e = &first[0];
            assert_eq!(e.hits, u64::from(hits));
            let real = f.engine.should_rate_limit(&req).await.expect("decided");
            let status = &real.statuses[0];
            assert_eq!(
                e.allowed,
                real.overall_code == Code::Ok,
                "{key} step {step}: the dry run said {e:?}, the request got {real:?}"
            );
            if e.allowed {
                assert_eq!(
                    e.limits[0].remaining,
                    u64::from(status.limit_remaining),
                    "{key} step {step}: remaining"
                );
            }
            assert_eq!(e.limits[0].limit, 4, "{key}");
        }
    }
}

#[tokio::test]
async fn the_dry_run_names_the_rule_its_usage_and_why_none_applies() {
    let f = fixture(EVERY, EngineOptions::default());
    f.ask(&[&[("original", "u")]], 3).await;
    let req = request(
        &[
            &[("original", "u")],
            &[("free", "")],
            &[("nothing", "")],
            &[("trial", "")],
        ],
        1,
    );
    let e = f.engine.evaluate(&req, None).await.expect("evaluated");
    let rule = e[0].rule.as_ref().expect("a rule");
    assert_eq!(
        (rule.label.as_str(), rule.path.as_str()),
        ("plain", "d.original")
    );
    let limit = &e[0].limits[0];
    assert_eq!(
        (limit.algorithm, limit.used, limit.remaining, limit.allowed),
        ("fixed_window", Some(3), 0, true),
        "3 used of 4: one more fits, and leaves none"
    );
    assert_eq!(limit.window_seconds, 60);
    assert_eq!(e[1].why.as_deref(), Some("unlimited"));
    assert_eq!(e[2].why.as_deref(), Some("no rule matched"));
    let trial = e[3].rule.as_ref().expect("the shadow rule");
    assert!(trial.shadow_mode && e[3].allowed);
    // A usage read (cost 0) of the same key: 3 used, 1 left, nothing taken.
    let usage = f.engine.evaluate(&req, Some(0)).await.expect("read");
    assert_eq!(
        (usage[0].limits[0].used, usage[0].limits[0].remaining),
        (Some(3), 1)
    );
    let real = f.ask(&[&[("original", "u")]], 1).await;
    assert_eq!(real.statuses[0].limit_remaining, 0, "the read took nothing");
}
