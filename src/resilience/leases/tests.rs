use super::*;
use crate::limiter::{AlgorithmName, Limiter, ManualClock};
use crate::resilience::testing::{Behaviour, Scripted};
use crate::store::{testing::RunItems, MemoryStore, RuleOptions};

const MS: Duration = Duration::from_millis(1);

/// Instances on one store: each node's lease layer over a clone of one
/// scripted store, which counts every call that reaches it.
struct Fleet {
    clock: Arc<ManualClock>,
    store: Arc<MemoryStore>,
    scripted: Scripted,
    nodes: Vec<Leases<Scripted>>,
}

fn fleet(nodes: usize) -> Fleet {
    let options = LeaseOptions {
        min_rate: 10,
        ..LeaseOptions::default()
    };
    fleet_with(nodes, options)
}

fn fleet_with(nodes: usize, options: LeaseOptions) -> Fleet {
    let clock = Arc::new(ManualClock::at_secs(1_000_000));
    let store = Arc::new(MemoryStore::new(clock.clone()));
    let scripted = Scripted::on(Arc::clone(&store));
    let nodes = (0..nodes)
        .map(|_| Leases::new(scripted.clone(), options, clock.clone()))
        .collect();
    Fleet {
        clock,
        store,
        scripted,
        nodes,
    }
}

fn leased(key: &str, limiter: Limiter) -> Item {
    let mut item = Item::new(key, Limit::Algorithm(limiter), 1);
    item.rule.lease = true;
    item
}

fn minute(limit: u64, a: AlgorithmName) -> Limiter {
    Limiter::new(a, limit, Duration::from_secs(60), None).expect("valid")
}

/// `n` admitted requests, 1 ms apart: a hot key with a lease out.
async fn warm(f: &Fleet, check: &Item, n: usize) {
    for _ in 0..n {
        assert!(admitted(&f.nodes[0], check).await);
        f.clock.advance(MS);
    }
}

async fn admitted(node: &Leases<Scripted>, check: &Item) -> bool {
    let reply = node
        .run(std::slice::from_ref(check), Policy::Commit)
        .await
        .expect("answered");
    reply.committed
}

#[tokio::test]
async fn a_hot_key_is_answered_from_its_lease_and_admits_exactly_the_limit() {
    for a in [
        AlgorithmName::FixedWindow,
        AlgorithmName::SlidingWindow,
        AlgorithmName::TokenBucket,
    ] {
        let f = fleet(1);
        let check = leased("k", minute(2_000, a));
        let mut yes = 0;
        // 5,000 decisions at 1,000/s, within one minute.
        for _ in 0..5_000 {
            yes += u64::from(admitted(&f.nodes[0], &check).await);
            f.clock.advance(MS);
        }
        let calls = f.scripted.calls();
        // A token bucket refills 2,000/min: 166 more over the 5 s.
        let limit = if a == AlgorithmName::TokenBucket {
            2_166
        } else {
            2_000
        };
        // Under by at most the one instance's batch (5 % of 2,000).
        assert!(
            yes <= limit + 1 && yes + 100 >= limit,
            "{a}: admitted {yes}"
        );
        assert!(
            calls * 10 < 5_000,
            "{a}: {calls} store calls for 5,000 decisions"
        );
    }
}

#[tokio::test]
async fn a_refund_of_a_leased_key_goes_into_its_lease() {
    let f = fleet(1);
    let check = leased("k", minute(1_000, AlgorithmName::TokenBucket));
    warm(&f, &check, 200).await;
    let now = f.clock.now();
    let held = f.nodes[0].table.held("k", now);
    assert!(held > 0, "a lease is out");
    let calls = f.scripted.calls();
    let back = check.clone().giving_back();
    let reply = f.nodes[0]
        .run(&[back.clone(), back], Policy::Commit)
        .await
        .expect("answered");
    assert!(reply.results.iter().all(|r| r.decision.is_allowed()));
    assert_eq!(f.scripted.calls(), calls, "no store call");
    assert_eq!(
        f.nodes[0].table.held("k", now),
        held + 2,
        "both into the lease"
    );
    // Without a lease, the store takes it.
    let other = leased("cold", minute(1_000, AlgorithmName::TokenBucket));
    f.nodes[0]
        .run(&[other.giving_back()], Policy::Commit)
        .await
        .expect("answered");
    assert_eq!(f.scripted.calls(), calls + 1);
    // The lease's tokens, the refunds with them, go back when it ends.
    let returned = f.nodes[0].return_all().await;
    assert_eq!(returned, held + 2);
}

#[tokio::test]
async fn a_fleet_never_admits_more_than_the_limit() {
    let f = fleet(4);
    let check = leased("k", minute(1_000, AlgorithmName::FixedWindow));
    let mut yes = 0;
    for i in 0..8_000 {
        yes += u64::from(admitted(&f.nodes[i % 4], &check).await);
        if i % 4 == 3 {
            f.clock.advance(MS);
        }
    }
    assert!(yes <= 1_000, "admitted {yes}");
    // Under-admission at most nodes × largest batch (5 % of 1,000).
    assert!(yes >= 1_000 - 4 * 50, "admitted {yes}");
}

#[tokio::test]
async fn unspent_tokens_go_back_and_refusals_are_remembered() {
    let f = fleet(1);
    let limiter = minute(1_000, AlgorithmName::FixedWindow);
    let check = leased("k", limiter);
    warm(&f, &check, 200).await;
    let held = f.nodes[0].table().held("k", f.clock.now());
    assert!(held > 0, "a lease is out");
    let returned = f.nodes[0].return_all().await;
    assert_eq!(returned, held);
    // The store has exactly what the 200 admissions took.
    let peek = f
        .store
        .run(
            &[Item {
                hits: crate::store::Hits::Take(0),
                rule: RuleOptions {
                    lease: false,
                    ..check.rule.clone()
                },
                ..check.clone()
            }],
            Policy::Decide,
        )
        .await
        .expect("answered");
    assert_eq!(peek.results[0].decision.remaining(), 800);

    // Exhausted: the refusal is remembered, and costs no round trip.
    let small = leased("s", minute(20, AlgorithmName::FixedWindow));
    let mut yes = 0;
    for _ in 0..100 {
        yes += u64::from(admitted(&f.nodes[0], &small).await);
    }
    assert_eq!(yes, 20);
    let before = f.scripted.calls();
    for _ in 0..100 {
        assert!(!admitted(&f.nodes[0], &small).await);
    }
    assert_eq!(f.scripted.calls(), before, "denied from memory");
}

#[tokio::test]
async fn a_refused_request_puts_its_lease_tokens_back() {
    let f = fleet(1);
    let hot = leased("hot", minute(1_000, AlgorithmName::FixedWindow));
    warm(&f, &hot, 200).await;
    let held = f.nodes[0].table().held("hot", f.clock.now());
    let full = Item::new(
        "full",
        Limit::Algorithm(minute(1, AlgorithmName::FixedWindow)),
        1,
    );
    assert!(
        f.nodes[0]
            .run(std::slice::from_ref(&full), Policy::Commit)
            .await
            .expect("ok")
            .committed
    );
    let both = f.nodes[0]
        .run(&[hot.clone(), full.clone()], Policy::Commit)
        .await
        .expect("answered");
    assert!(!both.committed);
    assert_eq!(
        f.nodes[0].table().held("hot", f.clock.now()),
        held,
        "nothing spent"
    );
}

#[tokio::test]
async fn a_lease_ends_with_its_ttl() {
    let f = fleet(1);
    let check = leased("k", minute(10_000, AlgorithmName::FixedWindow));
    warm(&f, &check, 200).await;
    assert!(f.nodes[0].table().held("k", f.clock.now()) > 0);
    f.clock.advance(Duration::from_secs(1));
    assert_eq!(f.nodes[0].table().held("k", f.clock.now()), 0);
    let ended = f.nodes[0].table.ended(f.clock.now(), false);
    assert_eq!(ended.len(), 1);
    let tokens = ended[0].2.tokens;
    assert_eq!(give_back(&f.store, ended).await, tokens);
}

#[tokio::test]
async fn during_an_outage_a_lease_is_spent_then_items_fail_for_their_policy() {
    let f = fleet(1);
    let check = leased("k", minute(10_000, AlgorithmName::FixedWindow));
    warm(&f, &check, 200).await;
    let held = f.nodes[0].table().held("k", f.clock.now());
    assert!(held > 0);
    f.scripted.set(Behaviour::Refuse);
    let mut local = 0;
    let mut failed = 0;
    let work = Work::new(vec![check.clone()], Policy::Commit);
    for _ in 0..held + 10 {
        match f.nodes[0].execute(&work, None).await.answers[0] {
            Ok(_) => local += 1,
            Err(ref e) => {
                assert_eq!(e.kind, StoreErrorKind::Unavailable);
                failed += 1;
            }
        }
    }
    assert_eq!(
        (local, failed),
        (held, 10),
        "the lease, then the store's failure"
    );
}

/// What a fleet did with one key offered over its limit.
struct Overload {
    /// When each admitted request was decided.
    admitted: Vec<Duration>,
    /// Decisions and store calls after the first (warm-up) second.
    decisions: u64,
    calls: u64,
    /// What the algorithm admits deciding each request on its own, on
    /// the same times.
    ideal: u64,
}

/// One key of `limiter` offered `factor` × its limit per second for
/// `secs` seconds, the requests evenly spaced and dealt to `nodes`
/// instances in turn, with the default options; with `shards` > 1, the
/// limit split into that many sub-buckets (keys), each request on one
/// of them in a scrambled order, as `shards: K` does.
async fn overload(limiter: Limiter, nodes: usize, factor: f64, secs: u64, shards: u64) -> Overload {
    use crate::limiter::Algorithm;
    let f = fleet_with(nodes, LeaseOptions::default());
    let part = limiter
        .scaled_to(limiter.limit() / shards)
        .expect("a sub-bucket");
    let checks: Vec<Item> = (0..shards)
        .map(|k| leased(&format!("k{k}"), part))
        .collect();
    let offered = (factor * limiter.limit() as f64) as u64;
    let gap = Duration::from_secs(1) / offered as u32;
    let start = f.clock.now();
    let mut out = Overload {
        admitted: Vec::new(),
        decisions: 0,
        calls: 0,
        ideal: 0,
    };
    let mut ideal: Vec<_> = checks.iter().map(|_| None).collect();
    let mut swept = start;
    for i in 0..offered * secs {
        let now = f.clock.now();
        // The sweeper, every 250 ms (LEASE_TTL / 4), as in production;
        // its refunds are store calls too.
        let sweep = now - swept >= Duration::from_millis(250);
        if sweep {
            swept = now;
        }
        let before = f.scripted.calls();
        if sweep {
            for node in &f.nodes {
                give_back(node.inner.as_ref(), node.table.ended(now, false)).await;
            }
        }
        let warm = now - start < Duration::from_secs(1);
        let k = (i.wrapping_mul(0x9E37_79B9) >> 7) % shards;
        let check = &checks[k as usize];
        if admitted(&f.nodes[i as usize % nodes], check).await {
            out.admitted.push(now - start);
        }
        let ideal = &mut ideal[k as usize];
        let (d, state) = part.decide(ideal.take(), 1, now);
        *ideal = Some(state);
        out.ideal += u64::from(d.is_allowed());
        if !warm {
            out.decisions += 1;
            out.calls += f.scripted.calls() - before;
        }
        f.clock.advance(gap);
    }
    out
}

/// The most admitted within one window of `period` aligned to the
/// clock (the fleet's clock starts on a whole second).
fn most_in_a_window(admitted: &[Duration], period: Duration) -> u64 {
    let mut per = std::collections::HashMap::<u128, u64>::new();
    for t in admitted {
        *per.entry(t.as_nanos() / period.as_nanos()).or_default() += 1;
    }
    per.values().copied().max().unwrap_or(0)
}

#[tokio::test]
async fn a_key_in_overload_costs_a_store_call_per_batch_and_keeps_its_bound() {
    let second = Duration::from_secs(1);
    let secs = 6;
    for a in [
        AlgorithmName::FixedWindow,
        AlgorithmName::SlidingWindow,
        AlgorithmName::TokenBucket,
    ] {
        // 100 per second per instance: each instance decides at least
        // 150 a second at 1.5x, above LEASE_MIN_RATE.
        for nodes in [2u64, 4] {
            let limit = 100 * nodes;
            let burst = (a == AlgorithmName::TokenBucket).then_some(2 * limit);
            let limiter = Limiter::new(a, limit, second, burst).expect("valid");
            let batch = LeaseOptions::default().largest_batch(limiter.capacity());
            let nodes = nodes as usize;
            for (factor, shards) in [(1.5, 1), (5.0, 1), (3.0, 2)] {
                let o = overload(limiter, nodes, factor, secs, shards).await;
                let per = o.calls as f64 / o.decisions as f64;
                let what = format!(
                        "{a}, {nodes} instances, {factor}x, {shards} shards: admitted {} (ideal {}), {} calls for {} decisions ({per:.3})",
                        o.admitted.len(),
                        o.ideal,
                        o.calls,
                        o.decisions
                    );
                println!("{what}");
                let mut windows = std::collections::BTreeMap::<u64, u64>::new();
                for t in &o.admitted {
                    *windows.entry(t.as_secs()).or_default() += 1;
                }
                println!("  admitted per second {:?}", windows.values());
                // Admitted: never above the algorithm's own bound.
                if a == AlgorithmName::TokenBucket {
                    for (n, t) in o.admitted.iter().enumerate() {
                        let refilled = (t.as_secs_f64() * limit as f64).floor() as usize;
                        let most = 2 * limit as usize + refilled;
                        assert!(n < most + 1, "burst + rate × elapsed: {what}");
                    }
                } else {
                    assert!(most_in_a_window(&o.admitted, second) <= limit, "{what}");
                }
                // Under-admission: at most instances × batch per period.
                let slack = nodes as u64 * batch * secs;
                assert!(o.admitted.len() as u64 + slack >= o.ideal, "{what}");
                assert!(o.admitted.len() as u64 <= o.ideal + batch, "{what}");
                assert!(per <= 0.1, "store calls: {what}");
            }
        }
    }
}

#[tokio::test]
async fn concurrent_requests_wait_for_one_take() {
    let f = fleet(1);
    let check = leased("k", minute(100_000, AlgorithmName::FixedWindow));
    // Hot (1,000 decisions this second), with no lease out: 64
    // requests at once take one batch and wait for it.
    for _ in 0..1_000 {
        admitted(&f.nodes[0], &check).await;
    }
    f.nodes[0].return_all().await;
    let before = f.scripted.calls();
    let node = &f.nodes[0];
    let all = futures::future::join_all((0..64).map(|_| admitted(node, &check))).await;
    assert!(all.iter().all(|ok| *ok));
    let calls = f.scripted.calls() - before;
    assert_eq!(calls, 1, "store calls for 64 concurrent requests");
}
