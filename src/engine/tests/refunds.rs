//! Refunds (`is_negative_hits`) and in-flight limits through the engine on
//! the memory store: every algorithm gets back what a refund gives, a
//! refund is never refused, and slots are taken and given back.

use super::*;

/// A descriptor's entries.
type Entries<'a> = &'a [(&'a str, &'a str)];
/// A descriptor: its entries, its own `hits_addend`, `is_negative_hits`.
type Sent<'a> = (Entries<'a>, Option<u64>, bool);

/// `descriptors`, each giving back (`negative`) or taking `hits` of its own.
fn request_of(descriptors: &[Sent<'_>]) -> RateLimitRequest {
    RateLimitRequest {
        domain: "d".into(),
        descriptors: descriptors
            .iter()
            .map(|(entries, hits, negative)| RequestDescriptor {
                entries: entries.iter().map(|(k, v)| Entry::new(*k, *v)).collect(),
                hits_addend: *hits,
                is_negative_hits: *negative,
                ..RequestDescriptor::default()
            })
            .collect(),
        hits_addend: 0,
    }
}

impl Fixture {
    async fn send(&self, descriptors: &[Sent<'_>]) -> RateLimitResponse {
        self.engine
            .should_rate_limit(&request_of(descriptors))
            .await
            .expect("decided")
    }

    /// A request that takes 1 on `k`, then its release.
    async fn take_and_give_back(&self) -> (Code, Code) {
        let k: &[(&str, &str)] = &[("k", "")];
        let take = self.send(&[(k, None, false)]).await.overall_code;
        let back = self.send(&[(k, Some(1), true)]).await.overall_code;
        (take, back)
    }
}

/// A rule of 10 a minute of every kind a refund gives back to.
fn rules_of_ten() -> Vec<(&'static str, String)> {
    let head = "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n";
    let mut rules = vec![
        (
            "original",
            format!("{head}      unit: minute\n      requests_per_unit: 10\n"),
        ),
        (
            "calendar",
            format!("{head}      unit: day\n      requests_per_unit: 10\n      calendar: true\n"),
        ),
    ];
    for a in [
        "fixed_window",
        "sliding_window",
        "sliding_log",
        "token_bucket",
    ] {
        rules.push((
            a,
            format!(
                "{head}      unit: minute\n      requests_per_unit: 10\n      algorithm: {a}\n"
            ),
        ));
    }
    rules
}

#[tokio::test]
async fn fourteen_requests_that_each_give_back_their_hit_are_all_admitted() {
    for all_or_nothing in [false, true] {
        for (name, yaml) in rules_of_ten() {
            let options = EngineOptions {
                all_or_nothing,
                ..EngineOptions::default()
            };
            let f = fixture(&yaml, options);
            for i in 0..14 {
                let (take, back) = f.take_and_give_back().await;
                assert_eq!(
                    take,
                    Code::Ok,
                    "{name} (all_or_nothing {all_or_nothing}): request {i}"
                );
                assert_eq!(back, Code::Ok, "{name}: a refund is never refused");
                f.clock.advance(Duration::from_millis(100));
            }
            // Without the refunds, the 11th is refused.
            let k: &[(&str, &str)] = &[("k", "")];
            let mut admitted = 0;
            for _ in 0..14 {
                admitted += usize::from(f.send(&[(k, None, false)]).await.overall_code == Code::Ok);
            }
            assert_eq!(admitted, 10, "{name}");
        }
    }
}

#[tokio::test]
async fn a_refund_is_never_over_limit_and_gives_back_no_more_than_was_taken() {
    let yaml = "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: minute\n      requests_per_unit: 3\n";
    let f = fixture(yaml, EngineOptions::default());
    let k: &[(&str, &str)] = &[("k", "")];
    assert_eq!(f.admitted(&[k], 5).await, 3);
    // Over the limit, a refund is still OK, with what is left after it.
    let r = f.send(&[(k, Some(1), true)]).await;
    assert_eq!((r.overall_code, r.statuses[0].code), (Code::Ok, Code::Ok));
    // The counter had counted all 5 (the original's way): 4 after.
    assert_eq!(r.statuses[0].limit_remaining, 0);
    // A refund of far more brings it to 0, never below.
    let r = f.send(&[(k, Some(100), true)]).await;
    assert_eq!(r.statuses[0].limit_remaining, 3);
    assert_eq!(f.admitted(&[k], 5).await, 3, "no more than the limit after");
    // An explicit 0 gives back nothing.
    f.send(&[(k, Some(0), true)]).await;
    assert_eq!(f.admitted(&[k], 1).await, 0);
}

#[tokio::test]
async fn a_request_may_take_on_one_descriptor_and_give_back_on_another() {
    let yaml = "domain: d\ndescriptors:\n  - key: a\n    rate_limit:\n      unit: minute\n      requests_per_unit: 2\n      algorithm: token_bucket\n  - key: b\n    rate_limit:\n      unit: minute\n      requests_per_unit: 1\n      algorithm: token_bucket\n";
    let f = fixture(yaml, EngineOptions::default());
    let (a, b): (Entries<'_>, Entries<'_>) = (&[("a", "")], &[("b", "")]);
    assert_eq!(f.admitted(&[a], 2).await, 2);
    assert_eq!(f.admitted(&[b], 1).await, 1);
    // `b` refuses: `a`'s refund in the same request is applied anyway.
    let r = f.send(&[(b, None, false), (a, Some(2), true)]).await;
    assert_eq!(r.overall_code, Code::OverLimit);
    assert_eq!(
        (r.statuses[0].code, r.statuses[1].code),
        (Code::OverLimit, Code::Ok)
    );
    assert_eq!(f.admitted(&[a], 3).await, 2, "both of a's tokens came back");
}

const SLOTS: &str = "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      algorithm: concurrency\n      max_in_flight: 3\n      max_duration: 60s\n";

#[tokio::test]
async fn an_in_flight_limit_takes_slots_and_gets_them_back() {
    let f = fixture(SLOTS, EngineOptions::default());
    let k: &[(&str, &str)] = &[("k", "")];
    assert_eq!(f.admitted(&[k], 8).await, 3, "three slots");
    let refused = f.send(&[(k, None, false)]).await;
    let s = &refused.statuses[0];
    assert_eq!((s.code, s.limit_remaining), (Code::OverLimit, 0));
    let limit = s.current_limit.as_ref().expect("a limit");
    assert_eq!((limit.requests_per_unit, limit.window_seconds), (3, 0));
    f.clock.advance(10 * S);
    // A release of a refused request (0 went upstream) frees nothing.
    f.send(&[(k, Some(0), true)]).await;
    assert_eq!(f.admitted(&[k], 1).await, 0);
    // Two releases: two more in.
    for _ in 0..2 {
        let r = f.send(&[(k, Some(1), true)]).await;
        assert_eq!(r.overall_code, Code::Ok);
    }
    assert_eq!(f.admitted(&[k], 8).await, 2);
    // Never released: the slots return by themselves after max_duration.
    // The releases gave back the two oldest: one of the first three is
    // left, and the two taken 10 s later.
    f.clock.advance(49 * S);
    assert_eq!(f.admitted(&[k], 1).await, 0);
    f.clock.advance(S);
    assert_eq!(
        f.admitted(&[k], 8).await,
        1,
        "the slot taken at 0 s is back at 60 s"
    );
    f.clock.advance(10 * S);
    assert_eq!(
        f.admitted(&[k], 8).await,
        2,
        "those taken at 10 s are back at 70 s"
    );
}

#[tokio::test]
async fn an_in_flight_limit_is_all_or_nothing_with_the_descriptors_other_limits() {
    let yaml = "domain: d\ndescriptors:\n  - key: k\n    rate_limits:\n      - algorithm: concurrency\n        max_in_flight: 5\n        max_duration: 60s\n      - unit: minute\n        requests_per_unit: 2\n        algorithm: token_bucket\n";
    let f = fixture(yaml, EngineOptions::default());
    let k: &[(&str, &str)] = &[("k", "")];
    assert_eq!(f.admitted(&[k], 5).await, 2, "the bucket refuses first");
    // The refused ones took no slot: the two releases free all five, and
    // (a descriptor's refund gives back to each of its limits) the
    // bucket's two tokens.
    let r = f.send(&[(k, Some(2), true)]).await;
    assert_eq!(r.overall_code, Code::Ok);
    assert_eq!(r.statuses[0].limit_remaining, 5);
    assert_eq!(f.admitted(&[k], 5).await, 2);
}

#[tokio::test]
async fn the_audit_gives_a_refund_to_the_contract_and_counts_it_apart() {
    let audit = Arc::new(crate::audit::Audit::new(1.0, 1_000).expect("an audit"));
    let mut f = fixture(SLOTS, EngineOptions::default());
    f.engine = f.engine.with_audit(Arc::clone(&audit));
    let k: Entries<'_> = &[("k", "")];
    // Three taken and given back, three times: the contract agrees each
    // time (it got the refunds too), and counts the refunds apart.
    for _ in 0..3 {
        assert_eq!(f.admitted(&[k], 3).await, 3);
        f.send(&[(k, Some(3), true)]).await;
    }
    assert_eq!(f.admitted(&[k], 4).await, 3);
    let rows = audit.book().to_json();
    let row = rows.first().expect("the rule is audited");
    assert_eq!(row["refunded"], 9, "{row}");
    assert_eq!(row["over"], 0, "{row}");
    assert_eq!(row["under"], 0, "{row}");
    assert_eq!(row["decisions"], 13, "{row}");
}
