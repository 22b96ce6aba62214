//! [`Breaker`]: one [`Circuit`] per store node in front of a store.
//!
//! Each item goes to the node it names ([`Item::node`]: for Redis Cluster
//! the primary that owns its slot, so a bad primary never holds back keys
//! on the others); an item that names none is always sent. Items for a node
//! whose circuit is open are not sent: they fail at once with
//! [`StoreErrorKind::CircuitOpen`] and the time until the node's next
//! probe, for the failure policies above to answer. A node counts one
//! failure per request whose items on it timed out or could not be sent;
//! any answer (even an error reply) is a success.
//!
//! Bound: after `failures` consecutive failed requests a node costs a
//! request nothing (no wait, no send) until `cooldown` has passed; then one
//! request probes it, and only that one waits up to the deadline.
//!
//! A call whose caller stops waiting (the gRPC call was cancelled, so its
//! future is dropped) still counts: with [`Breaker::counting_abandoned`], it
//! is recorded as a failure of each node it was sent to at the instant it
//! would have timed out, unless that node answered another call sent at or
//! after it meanwhile. So a node that hangs opens its circuit even behind
//! callers that give up before the store's deadline. Items failed as
//! [`StoreErrorKind::Expired`] were never sent and count for no node.
//!
//! One log line when a node's circuit opens and one when it closes, and the
//! gauge `ratelimit.store.breaker.<node>.open`.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use parking_lot::Mutex;
use tokio::time::Instant;

use super::circuit::{Admit, Change, Circuit};
#[cfg(doc)]
use crate::store::Item;
use crate::store::{Done, Job, NodeId, Store, StoreError, StoreErrorKind};

/// When a node's circuit opens, and for how long.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BreakerOptions {
    /// Consecutive failed requests that open a node's circuit (≥ 1).
    pub failures: u32,
    /// How long an open circuit sends nothing before one probe.
    pub cooldown: Duration,
}

#[derive(Debug)]
struct NodeCircuit {
    circuit: Circuit,
    gauge: metrics::Gauge,
}

/// The circuits of every node seen, shared with the checks of abandoned
/// calls.
#[derive(Debug)]
struct Circuits {
    options: BreakerOptions,
    nodes: Mutex<HashMap<NodeId, NodeCircuit>>,
    origin: Instant,
}

impl Circuits {
    fn now(&self) -> Duration {
        self.origin.elapsed()
    }

    /// Applies `outcome` to `node`'s circuit and tells the operator of a
    /// change.
    fn settle(&self, node: &NodeId, outcome: impl FnOnce(&mut Circuit) -> Option<Change>) {
        let mut circuits = self.nodes.lock();
        let Some(entry) = circuits.get_mut(node) else {
            return;
        };
        match outcome(&mut entry.circuit) {
            Some(Change::Opened) => {
                entry.gauge.set(1.0);
                tracing::warn!(
                    node = %node,
                    failures = self.options.failures,
                    cooldown = ?self.options.cooldown,
                    "store node failing: circuit breaker opened; its limits are answered by their failure_mode until a probe succeeds"
                );
            }
            Some(Change::Closed) => {
                entry.gauge.set(0.0);
                // At warn, as the opening: the original's default log
                // level is warn, and the operator who saw one must see the
                // other.
                tracing::warn!(node = %node, "store node answering again: circuit breaker closed");
            }
            None => {}
        }
    }
}

/// A store behind per-node circuit breakers.
#[derive(Debug)]
pub struct Breaker<S> {
    inner: S,
    circuits: Arc<Circuits>,
    /// How long after it was sent an abandoned call counts as timed out;
    /// `None`: abandoned calls are not counted.
    abandoned_after: Option<Duration>,
}

impl<S: Store> Breaker<S> {
    /// `inner` behind breakers with `options`.
    pub fn new(inner: S, options: BreakerOptions) -> Breaker<S> {
        Breaker {
            inner,
            circuits: Arc::new(Circuits {
                options,
                nodes: Mutex::new(HashMap::new()),
                origin: Instant::now(),
            }),
            abandoned_after: None,
        }
    }

    /// Counts a call whose caller went away unanswered as a failure of its
    /// nodes at its deadline, or `timeout` after it was sent (the store's
    /// own deadline), whichever is earlier; unless the node answered a
    /// later call meanwhile.
    pub fn counting_abandoned(mut self, timeout: Duration) -> Breaker<S> {
        self.abandoned_after = Some(timeout);
        self
    }

    /// The wrapped store.
    pub fn inner(&self) -> &S {
        &self.inner
    }

    /// Whether `node`'s circuit is open or probing.
    pub fn is_open(&self, node: &NodeId) -> bool {
        self.circuits
            .nodes
            .lock()
            .get(node)
            .is_some_and(|n| n.circuit.is_open())
    }

    /// The admission of every distinct node of `nodes`, in first-seen order.
    fn admit(&self, nodes: &[Option<NodeId>]) -> Vec<(NodeId, Admit)> {
        let now = self.circuits.now();
        let options = self.circuits.options;
        let mut out: Vec<(NodeId, Admit)> = Vec::new();
        let mut circuits = self.circuits.nodes.lock();
        for node in nodes.iter().flatten() {
            if out.iter().any(|(n, _)| n == node) {
                continue;
            }
            let entry = circuits.entry(node.clone()).or_insert_with(|| NodeCircuit {
                circuit: Circuit::new(options.failures, options.cooldown),
                gauge: crate::metrics::breaker_gauge(&node.0),
            });
            out.push((node.clone(), entry.circuit.admit(now)));
        }
        out
    }

    fn record(&self, admitted: &[(NodeId, Admit)], nodes: &[Option<NodeId>], done: &Done) {
        let now = self.circuits.now();
        for (node, admit) in admitted {
            let probe = match admit {
                Admit::Send => false,
                Admit::Probe => true,
                Admit::Refuse { .. } => continue,
            };
            let mine = || {
                (0..nodes.len())
                    .filter(move |&i| nodes[i].as_ref() == Some(node))
                    .map(|i| done.error(i))
            };
            // Nothing of it was sent: the caller's deadline had passed.
            if mine().all(|e| e.is_some_and(|e| e.kind == StoreErrorKind::Expired)) {
                continue;
            }
            let failed = mine().any(|e| e.is_some_and(node_failed));
            self.circuits
                .settle(node, |c| c.record(!failed, probe, now));
        }
    }
}

/// A call on its way to its nodes, with their admissions: if dropped
/// before it is answered (its caller went away) and `expires` is set, it
/// has each node it was sent to check, at the instant the call would have
/// timed out, whether that node answered anything since.
struct InFlight {
    circuits: Arc<Circuits>,
    admitted: Vec<(NodeId, Admit)>,
    sent: Duration,
    expires: Option<Instant>,
}

impl Drop for InFlight {
    fn drop(&mut self) {
        let Some(expires) = self.expires else {
            return;
        };
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let (circuits, sent) = (Arc::clone(&self.circuits), self.sent);
        let admitted = std::mem::take(&mut self.admitted);
        runtime.spawn(async move {
            tokio::time::sleep_until(expires).await;
            let now = circuits.now();
            for (node, admit) in &admitted {
                let probe = match admit {
                    Admit::Send => false,
                    Admit::Probe => true,
                    Admit::Refuse { .. } => continue,
                };
                circuits.settle(node, |c| c.record_abandoned(sent, probe, now));
            }
        });
    }
}

/// Whether an item's error says its node did not answer.
fn node_failed(e: &StoreError) -> bool {
    matches!(
        e.kind,
        StoreErrorKind::Timeout | StoreErrorKind::Unavailable
    )
}

fn circuit_open(node: &NodeId, retry_after: Duration) -> StoreError {
    StoreError {
        kind: StoreErrorKind::CircuitOpen,
        message: format!("redis node {node} unavailable: circuit breaker open"),
        retry_after: Some(retry_after),
    }
}

/// Each position's refusal, if its node's circuit refused it.
fn refusals(admitted: &[(NodeId, Admit)], nodes: &[Option<NodeId>]) -> Vec<Option<StoreError>> {
    nodes
        .iter()
        .map(|node| {
            let node = node.as_ref()?;
            admitted.iter().find_map(|(n, a)| match a {
                Admit::Refuse { retry_after } if n == node => Some(circuit_open(n, *retry_after)),
                _ => None,
            })
        })
        .collect()
}

impl<S: Store> Breaker<S> {
    /// The call about to go to `admitted`, counted if abandoned.
    fn in_flight(&self, admitted: Vec<(NodeId, Admit)>, deadline: Option<Instant>) -> InFlight {
        let start = self.abandoned_after.map(|timeout| {
            let now = Instant::now();
            let own = now + timeout;
            (now, deadline.map_or(own, |d| d.min(own)))
        });
        InFlight {
            circuits: Arc::clone(&self.circuits),
            sent: start.map_or(Duration::ZERO, |(now, _)| {
                now.saturating_duration_since(self.circuits.origin)
            }),
            expires: start.map(|(_, expires)| expires),
            admitted,
        }
    }
}

#[async_trait]
impl<S: Store> Store for Breaker<S> {
    /// Every kind of job alike: an entry goes to its node's circuit, is
    /// refused at once while it is open, and counts as the node's success
    /// or failure.
    async fn call(&self, job: Job<'_>, deadline: Option<Instant>) -> Done {
        let nodes = job.nodes();
        let admitted = self.admit(&nodes);
        let refused = refusals(&admitted, &nodes);
        let mut call = self.in_flight(admitted, deadline);
        let done = if refused.iter().all(Option::is_none) {
            self.inner.call(job, deadline).await
        } else {
            let sent: Vec<usize> = (0..nodes.len()).filter(|&i| refused[i].is_none()).collect();
            let answered = if sent.is_empty() {
                job.none_sent()
            } else {
                self.inner.call(job.select(&sent).job(), deadline).await
            };
            answered.merged(refused)
        };
        // Answered: recorded now, not at its deadline.
        call.expires = None;
        self.record(&call.admitted, &nodes, &done);
        done
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resilience::testing::{work_on, Behaviour, Scripted};
    use crate::resilience::Deadline;
    use crate::store::{Reply, StoreExt};

    const MS: Duration = Duration::from_millis(1);
    const OPTIONS: BreakerOptions = BreakerOptions {
        failures: 3,
        cooldown: Duration::from_secs(1),
    };

    /// A breaker over a deadline of 50 ms over the scripted store.
    fn breaker() -> (Breaker<Deadline<Scripted>>, Scripted) {
        breaker_opening_after(OPTIONS.failures)
    }

    /// [`breaker`], opening after `failures` in a row.
    fn breaker_opening_after(failures: u32) -> (Breaker<Deadline<Scripted>>, Scripted) {
        let store = Scripted::new();
        let options = BreakerOptions {
            failures,
            ..OPTIONS
        };
        let b = Breaker::new(Deadline::new(store.clone(), 50 * MS), options)
            .counting_abandoned(50 * MS);
        (b, store)
    }

    fn kind(reply: &Reply) -> Option<StoreErrorKind> {
        reply.answers[0].as_ref().err().map(|e| e.kind)
    }

    #[tokio::test(start_paused = true)]
    async fn consecutive_timeouts_open_the_circuit_and_then_nothing_is_sent() {
        let (b, store) = breaker();
        store.set(Behaviour::Hang);
        for _ in 0..3 {
            let r = b.execute(&work_on("n", 5), None).await;
            assert_eq!(kind(&r), Some(StoreErrorKind::Timeout));
        }
        let t0 = Instant::now();
        let r = b.execute(&work_on("n", 5), None).await;
        assert_eq!(kind(&r), Some(StoreErrorKind::CircuitOpen));
        assert_eq!(t0.elapsed(), Duration::ZERO, "refused at once");
        assert_eq!(store.calls(), 3);
        // After the cooldown one probe goes; its answer closes the circuit.
        store.set(Behaviour::Answer);
        tokio::time::advance(OPTIONS.cooldown).await;
        assert_eq!(kind(&b.execute(&work_on("n", 5), None).await), None);
        assert!(!b.is_open(&NodeId::new("n")));
    }

    #[tokio::test(start_paused = true)]
    async fn an_open_circuit_refuses_only_its_own_nodes_items() {
        let (b, store) = breaker();
        store.set(Behaviour::Refuse);
        for _ in 0..3 {
            b.execute(&work_on("bad", 5), None).await;
        }
        assert!(b.is_open(&NodeId::new("bad")));
        store.set(Behaviour::Answer);
        // One work across both nodes: the healthy node's item is sent and
        // decided, the bad node's refused without a call.
        let mut work = work_on("bad", 5);
        let mut healthy = work.items[0].clone();
        healthy.key = "other".into();
        healthy.node = Some(NodeId::new("good"));
        work.items.push(healthy);
        let calls = store.calls();
        let r = b.execute(&work, None).await;
        assert_eq!(kind(&r), Some(StoreErrorKind::CircuitOpen));
        assert!(r.answers[1].is_ok(), "the healthy node decides: {r:?}");
        assert_eq!(store.calls(), calls + 1, "one call, for the healthy node");
        assert!(!b.is_open(&NodeId::new("good")));
    }

    #[tokio::test(start_paused = true)]
    async fn board_steps_share_the_nodes_circuit_with_its_items() {
        use crate::resilience::testing::board_work_on;
        let (b, store) = breaker();
        store.set(Behaviour::Hang);
        // Two hung board calls and one hung item open the node's circuit.
        for _ in 0..2 {
            let r = b.share(&board_work_on("n"), None).await;
            assert_eq!(
                r[0].as_ref().err().map(|e| e.kind),
                Some(StoreErrorKind::Timeout)
            );
        }
        assert_eq!(
            kind(&b.execute(&work_on("n", 5), None).await),
            Some(StoreErrorKind::Timeout)
        );
        let t0 = Instant::now();
        let r = b.share(&board_work_on("n"), None).await;
        assert_eq!(
            r[0].as_ref().err().map(|e| e.kind),
            Some(StoreErrorKind::CircuitOpen)
        );
        assert_eq!(t0.elapsed(), Duration::ZERO, "refused at once");
        assert_eq!(store.calls(), 3);
        // Another node's step still goes.
        store.set(Behaviour::Answer);
        assert!(b.share(&board_work_on("m"), None).await[0].is_ok());
    }

    #[tokio::test(start_paused = true)]
    async fn a_hanging_node_opens_even_when_every_caller_gives_up_first() {
        let (b, store) = breaker();
        store.set(Behaviour::Hang);
        // Each caller stops waiting at 20 ms, before the store's 50 ms.
        for _ in 0..3 {
            let gave_up = tokio::time::timeout(20 * MS, b.execute(&work_on("n", 5), None)).await;
            assert!(gave_up.is_err());
        }
        assert!(!b.is_open(&NodeId::new("n")), "counted at their deadlines");
        tokio::time::sleep(40 * MS).await;
        assert!(b.is_open(&NodeId::new("n")));
        let r = b.execute(&work_on("n", 5), None).await;
        assert_eq!(kind(&r), Some(StoreErrorKind::CircuitOpen));
        assert_eq!(store.calls(), 3);
    }

    #[tokio::test(start_paused = true)]
    async fn an_abandoned_call_does_not_count_when_the_node_answers_a_later_one() {
        let (b, store) = breaker_opening_after(1);
        store.set(Behaviour::Hang);
        let gave_up = tokio::time::timeout(20 * MS, b.execute(&work_on("n", 5), None)).await;
        assert!(gave_up.is_err());
        store.set(Behaviour::Answer);
        assert_eq!(kind(&b.execute(&work_on("n", 5), None).await), None);
        tokio::time::sleep(100 * MS).await;
        assert!(!b.is_open(&NodeId::new("n")));
    }

    #[tokio::test(start_paused = true)]
    async fn items_never_sent_for_want_of_time_count_for_no_node() {
        let (b, store) = breaker_opening_after(1);
        for _ in 0..5 {
            let r = b.execute(&work_on("n", 5), Some(Instant::now())).await;
            assert_eq!(kind(&r), Some(StoreErrorKind::Expired));
        }
        assert!(!b.is_open(&NodeId::new("n")));
        assert_eq!(store.calls(), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn a_refused_connection_counts_and_an_answer_resets_the_count() {
        let (b, store) = breaker();
        store.set(Behaviour::Refuse);
        b.execute(&work_on("n", 5), None).await;
        b.execute(&work_on("n", 5), None).await;
        store.set(Behaviour::Answer);
        b.execute(&work_on("n", 5), None).await;
        store.set(Behaviour::Refuse);
        b.execute(&work_on("n", 5), None).await;
        b.execute(&work_on("n", 5), None).await;
        assert!(
            !b.is_open(&NodeId::new("n")),
            "failures must be consecutive"
        );
        b.execute(&work_on("n", 5), None).await;
        assert!(b.is_open(&NodeId::new("n")));
        // Another node is not touched.
        store.set(Behaviour::Answer);
        assert_eq!(kind(&b.execute(&work_on("m", 5), None).await), None);
    }
}
