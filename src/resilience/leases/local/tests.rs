use super::*;
use proptest::prelude::*;

#[test]
fn the_share_is_the_allowed_excess_split_among_the_instances() {
    let s = Share::of(1000, 3, 0.01);
    assert_eq!(
        s,
        Share {
            unwritten: 3,
            margin: 6
        }
    );
    assert_eq!(s.bound(1000, 3), 1009, "within 1 % of the limit");
    assert_eq!(Share::of(1000, 1, 0.01).margin, 0, "alone: no margin");
    let small = Share::of(50, 3, 0.01);
    assert_eq!(small.unwritten, 0, "a small limit is exact");
    assert_eq!(small.bound(50, 3), 50);
    assert_eq!(Share::of(1000, 0, 0.01).unwritten, 10, "at least one");
}

#[test]
fn far_from_the_limit_a_decision_is_local_and_near_it_the_store_decides() {
    let share = Share::of(1000, 3, 0.01);
    let mut v = View {
        counter: Some(900),
        ..View::default()
    };
    assert_eq!(v.admit(1, 1000, share), Some(901));
    assert_eq!(v.admit(2, 1000, share), Some(903));
    assert_eq!(v.admit(1, 1000, share), None, "the unwritten share is full");
    assert_eq!(v.send(), 3);
    v.written(3, 990);
    assert_eq!(v.unwritten, 0);
    assert_eq!(v.admit(1, 1000, share), Some(991));
    assert_eq!(v.admit(3, 1000, share), None, "991 + 1 + 3 + 6 > 1000");
    v.observe(980);
    assert_eq!(v.counter, Some(990), "a view never goes back");
}

#[test]
fn a_cold_key_admits_within_its_share_only() {
    let share = Share::of(1000, 3, 0.01);
    let mut v = View::default();
    assert_eq!(v.admit(2, 1000, share), Some(2));
    assert_eq!(v.admit(1, 1000, share), Some(3));
    assert_eq!(v.admit(1, 1000, share), None);
    assert_eq!(View::default().admit(0, 1000, share), None, "a read");
}

#[test]
fn a_failed_sync_keeps_what_it_owes() {
    let share = Share::of(1000, 1, 0.01);
    let mut v = View {
        counter: Some(0),
        ..View::default()
    };
    v.admit(4, 1000, share);
    assert_eq!(v.send(), 4);
    v.admit(1, 1000, share);
    assert_eq!(v.send(), 1, "only what is not on its way");
    v.unsent(4);
    v.unadmit(2);
    assert_eq!(
        (v.unwritten, v.sending),
        (3, 1),
        "an unsent admission can be taken back"
    );
    assert_eq!(v.send(), 2);
    v.written(1, 10);
    v.written(2, 12);
    assert_eq!((v.unwritten, v.sending, v.counter), (0, 0, Some(12)));
}

/// One shared counter and `n` instances, each with its view of it, under
/// a schedule of events in any order: decisions (local, or at the store
/// with its answer delayed), syncs sent, applied, answered or lost.
struct Fleet {
    limit: u64,
    share: Share,
    /// The store's counter.
    counter: u64,
    views: Vec<View>,
    /// Syncs applied or lost, their answers not yet delivered: (instance,
    /// delta, counter after, applied).
    in_flight: Vec<(usize, u64, u64, bool)>,
    /// Store answers not yet delivered: (instance, counter).
    answers: Vec<(usize, u64)>,
    admitted: u64,
    decided: bool,
}

impl Fleet {
    fn new(limit: u64, n: usize, max_over: f64, decided: bool) -> Fleet {
        Fleet {
            limit,
            share: Share::of(limit, n as u64, max_over),
            counter: 0,
            views: vec![View::default(); n],
            in_flight: Vec::new(),
            answers: Vec::new(),
            admitted: 0,
            decided,
        }
    }

    fn step(&mut self, event: u8, instance: usize, pick: usize, cost: u64) {
        let i = instance % self.views.len();
        match event % 6 {
            // A request.
            0..=2 => {
                if self.views[i].admit(cost, self.limit, self.share).is_some() {
                    self.admitted += cost;
                    return;
                }
                // The store decides: the original's counter counts every
                // request; a decided window only what it admits.
                let admitted = if self.decided {
                    let fits = self.counter + cost <= self.limit;
                    if fits {
                        self.counter += cost;
                    }
                    fits
                } else {
                    self.counter += cost;
                    self.counter <= self.limit
                };
                if admitted {
                    self.admitted += cost;
                }
                self.answers.push((i, self.counter));
            }
            // A sync sent and applied (or lost on the way).
            3 => {
                let delta = self.views[i].send();
                if delta > 0 {
                    let applied = !pick.is_multiple_of(4);
                    if applied {
                        self.counter += delta;
                    }
                    self.in_flight.push((i, delta, self.counter, applied));
                }
            }
            // A sync's answer delivered (a lost one, or one applied whose
            // answer was lost, fails).
            4 if !self.in_flight.is_empty() => {
                let (at, delta, counter, applied) =
                    self.in_flight.remove(pick % self.in_flight.len());
                if applied && !pick.is_multiple_of(5) {
                    self.views[at].written(delta, counter);
                } else {
                    self.views[at].unsent(delta);
                }
            }
            // A store answer delivered.
            5 if !self.answers.is_empty() => {
                let (at, counter) = self.answers.remove(pick % self.answers.len());
                self.views[at].observe(counter);
            }
            _ => {}
        }
    }
}

proptest! {
    /// The bound holds under any order of requests, syncs and answers,
    /// lost syncs and lost answers included, for the original's counter
    /// and a decided window.
    #[test]
    fn admissions_stay_within_the_bound(
        limit in 0u64..3_000,
        n in 1usize..6,
        max_over in 0.0f64..0.2,
        decided: bool,
        events in prop::collection::vec((any::<u8>(), 0usize..6, any::<usize>(), 1u64..4), 1..3_000),
    ) {
        let mut fleet = Fleet::new(limit, n, max_over, decided);
        for (event, instance, pick, cost) in events {
            fleet.step(event, instance, pick, cost);
            prop_assert!(
                fleet.admitted <= fleet.share.bound(limit, n as u64),
                "admitted {} > bound {} (limit {limit}, {n} instances, share {:?})",
                fleet.admitted,
                fleet.share.bound(limit, n as u64),
                fleet.share
            );
        }
    }

    /// Far from the limit, with syncs answered, every decision is local.
    #[test]
    fn far_from_the_limit_nothing_goes_to_the_store(n in 1usize..6, requests in 1usize..200) {
        let mut fleet = Fleet::new(1_000_000, n, 0.01, false);
        for r in 0..requests {
            let i = r % n;
            fleet.step(0, i, 0, 1);
            fleet.step(3, i, 1, 0);
            fleet.step(4, i, 1, 0);
        }
        prop_assert!(fleet.answers.is_empty(), "{} store decisions", fleet.answers.len());
        prop_assert_eq!(fleet.admitted, requests as u64);
    }
}
