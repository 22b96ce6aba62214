//! Local-first windows through the layer: instances (each a layer over a
//! clone of one scripted store that counts the calls reaching it) on one
//! shared memory store, on a manual clock; write-backs run by hand.

use std::sync::Arc;
use std::time::Duration;

use super::super::sync::write_back;
use super::super::{LeaseOptions, Leases};
use crate::limiter::fixed_window::Window;
use crate::limiter::ManualClock;
use crate::resilience::testing::{Behaviour, Scripted};
use crate::store::testing::RunItems;
use crate::store::{Item, Limit, MemoryStore, OriginalWindow, Policy};

const MS: Duration = Duration::from_millis(1);

struct Instances {
    clock: Arc<ManualClock>,
    scripted: Scripted,
    nodes: Vec<Leases<Scripted>>,
    counted: Vec<u64>,
}

impl Instances {
    fn new(n: usize) -> Instances {
        Instances::with(n, LeaseOptions::default())
    }

    fn with(n: usize, options: LeaseOptions) -> Instances {
        // On a whole minute: one window for the whole test.
        let clock = Arc::new(ManualClock::at_secs(1_000_020));
        let store = Arc::new(MemoryStore::new(clock.clone()));
        let scripted = Scripted::on(store);
        let nodes = (0..n)
            .map(|_| Leases::new(scripted.clone(), options, clock.clone()))
            .collect();
        Instances {
            clock,
            scripted,
            nodes,
            counted: vec![0; n],
        }
    }

    /// One write-back on every instance.
    async fn write_back(&mut self) {
        for (node, counted) in self.nodes.iter().zip(&mut self.counted) {
            let (store, clock) = (node.inner.as_ref(), node.clock.as_ref());
            write_back(store, &node.table, &node.fleet, clock, counted).await;
        }
    }

    /// Every instance sees a request, then two write-backs a second
    /// apart: each counts all of them.
    async fn counted(&mut self, item: &Item) {
        for i in 0..self.nodes.len() {
            self.admitted(i, item).await;
        }
        self.write_back().await;
        self.clock.advance(Duration::from_secs(1));
        self.write_back().await;
    }

    async fn admitted(&self, i: usize, item: &Item) -> bool {
        let ran = self.nodes[i]
            .run(std::slice::from_ref(item), Policy::Commit)
            .await
            .expect("decided");
        ran.results[0].decision.is_allowed()
    }
}

/// The original's counter of `limit` a minute, local-first.
fn window(key: &str, limit: u64) -> Item {
    let now = 1_000_020;
    let counter = OriginalWindow {
        limit,
        window: Window::containing(now, 60),
        ttl_seconds: 60,
        jitter_seconds: 0,
    };
    let mut item = Item::new(key, Limit::Counter(counter), 1);
    item.rule.sync_interval = Some(50 * MS);
    item
}

/// What `item`'s key holds in the store, read (a cost of 0) at the store.
async fn read(f: &Instances, mut item: Item) -> u64 {
    item.hits = crate::store::Hits::Take(0);
    item.rule.sync_interval = None;
    f.scripted
        .run(&[item], Policy::Commit)
        .await
        .expect("read")
        .results[0]
        .count
}

/// The key's counter in the store.
async fn counter(f: &Instances, key: &str) -> u64 {
    read(f, window(key, 1_000)).await
}

#[tokio::test]
async fn far_from_its_limit_a_window_costs_no_store_call() {
    let mut f = Instances::new(3);
    let item = window("far", 100_000);
    f.counted(&item).await;
    assert_eq!(f.nodes[0].fleet.instances(), 3);
    let calls = f.scripted.calls();
    for r in 0..300 {
        assert!(f.admitted(r % 3, &item).await);
        f.clock.advance(MS);
    }
    assert_eq!(f.scripted.calls(), calls, "no call on a request's path");
    f.write_back().await;
    assert_eq!(
        f.scripted.calls() - calls,
        3,
        "one write-back work per instance"
    );
    assert_eq!(counter(&f, "far").await, 303, "every admission written");
}

#[tokio::test]
async fn a_window_offered_five_times_its_limit_stays_within_its_bound() {
    // 600 a minute over 3 instances at 1 %: P = 2, M = 4; bound 606.
    let mut f = Instances::new(3);
    let item = window("hot", 600);
    f.counted(&item).await;
    let mut admitted = 3;
    for r in 0..3_000 {
        if f.admitted(r % 3, &item).await {
            admitted += 1;
        }
        if r % 7 == 0 {
            f.write_back().await;
        }
    }
    f.write_back().await;
    assert!(admitted <= 606, "admitted {admitted}");
    assert!(
        admitted >= 600,
        "admitted {admitted}: near the limit the store decides"
    );
}

#[tokio::test]
async fn a_cold_key_is_sent_to_the_store_until_the_instances_are_counted() {
    let f = Instances::new(1);
    let item = window("cold", 1_000);
    assert!(f.admitted(0, &item).await);
    assert_eq!(f.scripted.calls(), 1, "not counted yet: the store decides");
}

#[tokio::test]
async fn a_failed_write_back_is_owed_and_sent_again() {
    let mut f = Instances::new(1);
    let item = window("owed", 1_000);
    f.counted(&item).await;
    for _ in 0..5 {
        assert!(f.admitted(0, &item).await);
    }
    f.scripted.set(Behaviour::Refuse);
    f.write_back().await;
    assert_eq!(f.nodes[0].table.views(), (1, 5), "owed still");
    f.scripted.set(Behaviour::Answer);
    f.write_back().await;
    assert_eq!(f.nodes[0].table.views(), (1, 0));
    assert_eq!(counter(&f, "owed").await, 6);
}

#[tokio::test]
async fn an_instance_without_views_shares_the_counter() {
    // One instance local-first, the other (the original, or this service
    // without `sync_interval`) at the store: one counter.
    let mut f = Instances::new(1);
    let item = window("shared", 1_000);
    f.counted(&item).await;
    let mut plain = item.clone();
    plain.rule.sync_interval = None;
    for _ in 0..10 {
        assert!(f.admitted(0, &item).await);
        f.scripted
            .run(std::slice::from_ref(&plain), Policy::Commit)
            .await
            .expect("decided");
    }
    f.write_back().await;
    assert_eq!(counter(&f, "shared").await, 21);
}

/// A larger instance count is taken at once; a smaller one only once every
/// count for `stale_after` has been smaller, so a count that comes out low
/// after an outage (the store missed the seconds' presence) never widens
/// the shares.
#[test]
fn the_instance_count_rises_at_once_and_falls_only_when_it_stays_low() {
    use super::super::views::{stale_after, Fleet};
    let fleet = Fleet::default();
    fleet.note(50 * MS);
    let held = stale_after(50 * MS);
    let t = Duration::from_secs(100);
    fleet.counted(3, t);
    assert_eq!(fleet.instances(), 3);
    // One low count (the first second after an outage): held at 3.
    fleet.counted(1, t + Duration::from_secs(1));
    assert_eq!(fleet.instances(), 3);
    // Back to 3 within the hold: the low count is forgotten.
    fleet.counted(3, t + Duration::from_secs(2));
    fleet.counted(2, t + Duration::from_secs(3));
    fleet.counted(2, t + Duration::from_secs(3) + held - MS);
    assert_eq!(fleet.instances(), 3, "not low for long enough");
    // Low for the whole hold (an instance left): the largest low count.
    fleet.counted(1, t + Duration::from_secs(3) + held);
    assert_eq!(fleet.instances(), 2);
    // A rise is taken at once.
    fleet.counted(4, t + Duration::from_secs(10));
    assert_eq!(fleet.instances(), 4);
}

/// The decision audit's reference of `key`'s counter, following the item
/// at `subject` of its work.
fn reference(key: &str, subject: usize) -> Item {
    let contract =
        crate::limiter::SlidingLog::reference(1_000, Duration::from_secs(60)).expect("contract");
    Item {
        binding: false,
        ..Item::new(
            format!("ref_{key}"),
            Limit::Reference {
                contract: crate::limiter::Limiter::SlidingLog(contract),
                subject: Some(subject),
            },
            1,
        )
    }
}

/// What the reference of `key` holds in its trailing window.
async fn referenced(f: &Instances, key: &str) -> u64 {
    read(f, reference(key, 0)).await
}

#[tokio::test]
async fn an_audited_view_admission_is_recorded_in_its_reference() {
    // A request of a local-first counter answered from its view and a
    // counter sent to the store (non-binding, over its limit), each with
    // its reference: the store's part is renumbered, so that the viewed
    // counter's reference follows the commit and the other's its counter.
    let mut f = Instances::new(1);
    let viewed = window("viewed", 100_000);
    f.counted(&viewed).await;
    let mut over = window("over", 1);
    over.rule.sync_interval = None;
    over.binding = false;
    f.scripted
        .run(std::slice::from_ref(&over), Policy::Commit)
        .await
        .expect("decided");
    let items = [
        viewed.clone(),
        over.clone(),
        reference("viewed", 0),
        reference("over", 1),
    ];
    let calls = f.scripted.calls();
    let ran = f.nodes[0]
        .run(&items, Policy::Commit)
        .await
        .expect("decided");
    assert!(ran.committed);
    assert_eq!(f.scripted.calls() - calls, 1, "one store call");
    assert!(ran.results[0].decision.is_allowed(), "from the view");
    assert!(!ran.results[1].decision.is_allowed(), "over its limit");
    assert_eq!(referenced(&f, "viewed").await, 1, "admitted: recorded");
    assert_eq!(referenced(&f, "over").await, 0, "refused: not recorded");
}

#[tokio::test]
async fn a_give_back_is_taken_from_the_unsent_admissions_with_no_store_call() {
    let mut f = Instances::new(1);
    let item = window("refunded", 1_000);
    f.counted(&item).await;
    for _ in 0..3 {
        assert!(f.admitted(0, &item).await);
    }
    f.write_back().await;
    assert_eq!(counter(&f, "refunded").await, 4);
    for _ in 0..3 {
        assert!(f.admitted(0, &item).await);
    }
    let calls = f.scripted.calls();
    let give_back = item.clone().giving_back();
    assert!(f.admitted(0, &give_back).await, "a give-back is answered");
    assert_eq!(f.scripted.calls(), calls, "taken from the view");
    assert_eq!(f.nodes[0].table.views(), (1, 2));
    // More than the view holds unsent: the store takes it.
    let big = Item {
        hits: crate::store::Hits::GiveBack(3),
        ..item.clone()
    };
    assert!(f.admitted(0, &big).await);
    assert_eq!(f.scripted.calls(), calls + 1, "sent to the store");
    assert_eq!(counter(&f, "refunded").await, 1);
    f.write_back().await;
    // 4 written, 3 admitted, 1 given back here and 3 at the store.
    assert_eq!(counter(&f, "refunded").await, 3);
    assert_eq!(f.nodes[0].table.views(), (1, 0));
}

#[tokio::test]
async fn views_stop_at_their_cap_and_keys_without_one_go_to_the_store() {
    let mut f = Instances::with(
        1,
        LeaseOptions {
            max_views: 2,
            ..LeaseOptions::default()
        },
    );
    f.counted(&window("first", 1_000)).await;
    assert!(f.admitted(0, &window("second", 1_000)).await);
    assert_eq!(f.nodes[0].table.views().0, 2, "the cap");
    let calls = f.scripted.calls();
    for _ in 0..3 {
        assert!(f.admitted(0, &window("third", 1_000)).await);
    }
    assert_eq!(f.scripted.calls() - calls, 3, "no view: the store decides");
    assert_eq!(f.nodes[0].table.views().0, 2);
    assert_eq!(counter(&f, "third").await, 3, "exact");
    // Views end with their windows (written back first): room again.
    f.write_back().await;
    f.clock.advance(Duration::from_secs(120));
    f.nodes[0]
        .table
        .ended(crate::limiter::Clock::now(f.clock.as_ref()), false);
    assert_eq!(f.nodes[0].table.views().0, 0);
    f.write_back().await;
    assert!(f.admitted(0, &window("fourth", 1_000)).await);
    assert_eq!(f.nodes[0].table.views().0, 1, "a view again");
}
