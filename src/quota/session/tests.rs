use std::sync::Arc;

use super::*;
use crate::config::{load, ConfigFile, LiveConfig};
use crate::limiter::ManualClock;
use crate::metrics::Stats;
use crate::quota::{QuotaOptions, QuotaParts};
use crate::resilience::testing::{Behaviour, Scripted};
use crate::store::{InProcess, MemoryStore, Store};

const RULES: &str = "
domain: q
descriptors:
  - key: fleet
    rate_limit: {unit: second, requests_per_unit: 100}
  - key: bucket
    rate_limit: {unit: second, requests_per_unit: 20, algorithm: token_bucket, burst: 40}
  - key: open
    rate_limit: {unit: second, requests_per_unit: 10, failure_mode: open}
";

struct Fixture {
    quotas: Quotas,
    clock: Arc<ManualClock>,
}

fn fixture_on(store: Arc<dyn Store>, clock: Arc<ManualClock>, options: QuotaOptions) -> Fixture {
    let live = LiveConfig::new();
    let config = load(&[ConfigFile::new("q.yaml", RULES)], false).expect("loads");
    live.publish(Arc::new(config));
    let quotas = Quotas::new(QuotaParts {
        config: live,
        stats: Arc::new(Stats::new()),
        store,
        placement: Arc::new(InProcess),
        clock: clock.clone(),
        options,
        instance: "test".into(),
    });
    Fixture { quotas, clock }
}

fn fixture(options: QuotaOptions) -> Fixture {
    let clock = Arc::new(ManualClock::at_secs(1_000));
    fixture_on(Arc::new(MemoryStore::new(clock.clone())), clock, options)
}

fn usage(key: &str, elapsed: Option<u64>, allowed: u64) -> Usage {
    Usage {
        bucket: vec![(key.into(), "x".into())],
        elapsed: elapsed.map(Duration::from_secs),
        allowed,
        denied: 0,
    }
}

async fn one(s: &mut Session, domain: &str, u: Usage) -> Option<Action> {
    let mut out = s.report(domain, vec![u]).await.expect("a valid report");
    out.pop().and_then(|(_, a)| a)
}

fn bucket_of(a: Option<Action>) -> EnvoyBucket {
    match a {
        Some(Action::Assign {
            strategy: Strategy::Bucket(b),
            ..
        }) => b,
        other => panic!("not a token bucket: {other:?}"),
    }
}

#[tokio::test]
async fn a_lone_envoy_gets_the_whole_rate_as_a_bucket_it_can_run() {
    let f = fixture(QuotaOptions::default());
    let (mut s, _pushes) = f.quotas.open();
    let a = one(&mut s, "q", usage("fleet", None, 0)).await;
    assert!(matches!(a, Some(Action::Assign { ttl, .. }) if ttl == Duration::from_secs(15)));
    let b = bucket_of(a);
    assert_eq!(
        (b.tokens_per_fill, b.fill_interval_secs, b.max_tokens),
        (100, 1, 100)
    );
    // A token bucket rule: its burst goes with the share.
    let b = bucket_of(one(&mut s, "q", usage("bucket", None, 0)).await);
    assert_eq!((b.tokens_per_fill, b.max_tokens), (20, 40));
}

#[tokio::test]
async fn a_newcomer_gets_an_even_share_at_once_and_the_other_is_pushed_its_shrunk_one() {
    let f = fixture(QuotaOptions::default());
    let (mut first, mut first_pushes) = f.quotas.open();
    one(&mut first, "q", usage("fleet", None, 0)).await;
    // It uses it all, and more.
    let b = bucket_of(one(&mut first, "q", usage("fleet", Some(5), 1_500)).await);
    assert_eq!(b.tokens_per_fill, 100);
    let (mut second, _) = f.quotas.open();
    let b = bucket_of(one(&mut second, "q", usage("fleet", None, 0)).await);
    assert_eq!(
        b.tokens_per_fill, 50,
        "half at once, not what the first left"
    );
    let push = first_pushes.try_recv().expect("pushed at once");
    let (_, action) = first.pushed(push).expect("a moved share is sent");
    assert_eq!(bucket_of(Some(action)).tokens_per_fill, 50);
    // The same share again sends nothing.
    assert_eq!(first.pushed(push), None);
}

#[tokio::test]
async fn a_leavers_share_is_pushed_to_those_who_stay() {
    let f = fixture(QuotaOptions::default());
    let (mut a, mut a_pushes) = f.quotas.open();
    let (mut b, _) = f.quotas.open();
    one(&mut a, "q", usage("fleet", None, 0)).await;
    one(&mut b, "q", usage("fleet", None, 0)).await;
    while let Ok(p) = a_pushes.try_recv() {
        a.pushed(p);
    }
    b.close().await;
    let push = a_pushes.try_recv().expect("pushed when the other left");
    let (_, action) = a.pushed(push).expect("grown");
    assert_eq!(bucket_of(Some(action)).tokens_per_fill, 100);
}

#[tokio::test]
async fn a_report_without_a_domain_is_in_the_streams_domain() {
    let f = fixture(QuotaOptions::default());
    let (mut s, _) = f.quotas.open();
    assert_eq!(
        s.report("", vec![usage("fleet", None, 0)]).await.err(),
        Some(ReportError::NoDomain),
        "the first report names it"
    );
    one(&mut s, "q", usage("fleet", None, 0)).await;
    let b = bucket_of(one(&mut s, "", usage("fleet", Some(5), 10)).await);
    assert_eq!(b.tokens_per_fill, 100);
    assert_eq!(
        s.report("other", vec![usage("fleet", Some(5), 10)])
            .await
            .err(),
        Some(ReportError::OtherDomain {
            stream: "q".into(),
            report: "other".into()
        })
    );
}

#[tokio::test]
async fn an_idle_bucket_is_abandoned_and_leaves_its_share() {
    let f = fixture(QuotaOptions {
        idle: Duration::from_secs(10),
        ..QuotaOptions::default()
    });
    let (mut s, _) = f.quotas.open();
    let (mut other, _) = f.quotas.open();
    one(&mut other, "q", usage("fleet", None, 0)).await;
    one(&mut s, "q", usage("fleet", None, 0)).await;
    assert!(matches!(
        one(&mut s, "q", usage("fleet", Some(5), 0)).await,
        Some(Action::Assign { .. })
    ));
    assert_eq!(
        one(&mut s, "q", usage("fleet", Some(5), 0)).await,
        Some(Action::Abandon)
    );
    let b = bucket_of(one(&mut other, "q", usage("fleet", Some(5), 500)).await);
    assert_eq!(b.tokens_per_fill, 100, "the abandoned line left the board");
}

#[tokio::test]
async fn malformed_reports_are_refused() {
    let f = fixture(QuotaOptions {
        max_buckets: 2,
        ..QuotaOptions::default()
    });
    let (mut s, _) = f.quotas.open();
    let empty = Usage {
        bucket: vec![],
        ..usage("fleet", None, 0)
    };
    assert_eq!(
        s.report("q", vec![empty]).await.err(),
        Some(ReportError::EmptyBucket)
    );
    let three: Vec<Usage> = ["a", "b", "c"].iter().map(|k| usage(k, None, 0)).collect();
    assert_eq!(
        s.report("q", three).await.err(),
        Some(ReportError::TooManyBuckets(2))
    );
}

#[tokio::test]
async fn a_failing_board_keeps_the_assignment_for_its_ttl_then_follows_the_failure_mode() {
    let clock = Arc::new(ManualClock::at_secs(1_000));
    let store = Scripted::new();
    let f = fixture_on(
        Arc::new(store.clone()),
        clock.clone(),
        QuotaOptions::default(),
    );
    let (mut s, _) = f.quotas.open();
    one(&mut s, "q", usage("fleet", None, 0)).await;
    one(&mut s, "q", usage("open", None, 0)).await;
    store.set(Behaviour::Refuse);
    assert_eq!(one(&mut s, "q", usage("fleet", Some(5), 10)).await, None);
    assert_eq!(one(&mut s, "q", usage("open", Some(5), 10)).await, None);
    f.clock.advance(Duration::from_secs(15));
    // failure_mode error (the default): nothing, Envoy's own behaviour.
    assert_eq!(one(&mut s, "q", usage("fleet", Some(5), 10)).await, None);
    // failure_mode open: allow all.
    assert!(matches!(
        one(&mut s, "q", usage("open", Some(5), 10)).await,
        Some(Action::Assign {
            strategy: Strategy::AllowAll,
            ..
        })
    ));
    store.set(Behaviour::Answer);
    let _ = bucket_of(one(&mut s, "q", usage("open", Some(5), 10)).await);
}

#[tokio::test]
async fn expire_all_sends_each_assignment_with_a_ttl_of_zero() {
    let f = fixture(QuotaOptions::default());
    let (mut s, _) = f.quotas.open();
    one(&mut s, "q", usage("fleet", None, 0)).await;
    let expired = s.expire_all();
    assert_eq!(expired.len(), 1);
    assert!(matches!(expired[0].1, Action::Assign { ttl, .. } if ttl.is_zero()));
}

/// The rate a session's last action for its one bucket runs.
fn rate_of(a: &Action) -> f64 {
    match a {
        Action::Assign {
            strategy: Strategy::Bucket(b),
            ..
        } => b.rate(),
        other => panic!("not a token bucket: {other:?}"),
    }
}

#[tokio::test]
async fn a_share_the_board_cuts_to_keep_within_the_rate_is_never_kept_above_it() {
    // Three Envoys split 100 a second evenly (33.3 each). The first reports
    // 25.6 a second (32 with headroom): a move too small to send. When the
    // third leaves, the second's share grows to 68 and, since 33.3 + 68
    // would pass the rate, the board cuts the first to its 32. The first
    // must run at most 32 from then on, though the cut is a small move.
    let f = fixture(QuotaOptions::default());
    let (mut a, mut a_pushes) = f.quotas.open();
    let (mut b, mut b_pushes) = f.quotas.open();
    let (mut c, _) = f.quotas.open();
    let mut runs = [0.0; 2];
    for (i, s) in [&mut a, &mut b, &mut c].into_iter().enumerate() {
        let action = one(s, "q", usage("fleet", None, 0)).await.expect("a share");
        if i < 2 {
            runs[i] = rate_of(&action);
        }
    }
    for (s, allowed) in [(&mut a, 128), (&mut b, 5_000), (&mut c, 5_000)] {
        one(s, "q", usage("fleet", Some(5), allowed)).await;
    }
    c.close().await;
    for (i, (s, pushes)) in [(&mut a, &mut a_pushes), (&mut b, &mut b_pushes)]
        .into_iter()
        .enumerate()
    {
        while let Ok(p) = pushes.try_recv() {
            if let Some((_, action)) = s.pushed(p) {
                runs[i] = rate_of(&action);
            }
        }
    }
    assert!((runs[1] - 68.0).abs() < 1.0, "the second grew: {runs:?}");
    assert!(
        runs[0] + runs[1] <= 100.0 + 1e-9,
        "the Envoys run {runs:?}: past the rate"
    );
}
