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
//! One log line when a node's circuit opens and one when it closes, and the
//! gauge `ratelimit.store.breaker.<node>.open`.

use std::collections::HashMap;
use std::time::Duration;

use async_trait::async_trait;
use parking_lot::Mutex;
use tokio::time::Instant;

use super::circuit::{Admit, Change, Circuit};
#[cfg(doc)]
use crate::store::Item;
use crate::store::{NodeId, Reply, Store, StoreError, StoreErrorKind, Work};

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

/// A store behind per-node circuit breakers.
#[derive(Debug)]
pub struct Breaker<S> {
    inner: S,
    options: BreakerOptions,
    nodes: Mutex<HashMap<NodeId, NodeCircuit>>,
    origin: Instant,
}

impl<S: Store> Breaker<S> {
    /// `inner` behind breakers with `options`.
    pub fn new(inner: S, options: BreakerOptions) -> Breaker<S> {
        Breaker {
            inner,
            options,
            nodes: Mutex::new(HashMap::new()),
            origin: Instant::now(),
        }
    }

    /// The wrapped store.
    pub fn inner(&self) -> &S {
        &self.inner
    }

    fn now(&self) -> Duration {
        self.origin.elapsed()
    }

    /// Whether `node`'s circuit is open or probing.
    pub fn is_open(&self, node: &NodeId) -> bool {
        self.nodes
            .lock()
            .get(node)
            .is_some_and(|n| n.circuit.is_open())
    }

    /// The admission of every distinct node of `nodes`, in first-seen order.
    fn admit(&self, nodes: &[Option<NodeId>]) -> Vec<(NodeId, Admit)> {
        let now = self.now();
        let mut out: Vec<(NodeId, Admit)> = Vec::new();
        let mut circuits = self.nodes.lock();
        for node in nodes.iter().flatten() {
            if out.iter().any(|(n, _)| n == node) {
                continue;
            }
            let entry = circuits.entry(node.clone()).or_insert_with(|| NodeCircuit {
                circuit: Circuit::new(self.options.failures, self.options.cooldown),
                gauge: crate::metrics::breaker_gauge(&node.0),
            });
            out.push((node.clone(), entry.circuit.admit(now)));
        }
        out
    }

    fn record(&self, admitted: &[(NodeId, Admit)], nodes: &[Option<NodeId>], reply: &Reply) {
        let now = self.now();
        let mut circuits = self.nodes.lock();
        for (node, admit) in admitted {
            let probe = match admit {
                Admit::Send => false,
                Admit::Probe => true,
                Admit::Refuse { .. } => continue,
            };
            let failed = nodes
                .iter()
                .zip(&reply.answers)
                .any(|(n, a)| n.as_ref() == Some(node) && a.as_ref().is_err_and(node_failed));
            let Some(entry) = circuits.get_mut(node) else {
                continue;
            };
            match entry.circuit.record(!failed, probe, now) {
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
                    // level is warn, and the operator who saw one must see
                    // the other.
                    tracing::warn!(node = %node, "store node answering again: circuit breaker closed");
                }
                None => {}
            }
        }
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

#[async_trait]
impl<S: Store> Store for Breaker<S> {
    async fn execute(&self, work: &Work, deadline: Option<Instant>) -> Reply {
        let nodes: Vec<Option<NodeId>> = work.items.iter().map(|i| i.node.clone()).collect();
        let admitted = self.admit(&nodes);
        let refusal = |node: &Option<NodeId>| {
            let node = node.as_ref()?;
            admitted.iter().find_map(|(n, a)| match a {
                Admit::Refuse { retry_after } if n == node => Some(circuit_open(n, *retry_after)),
                _ => None,
            })
        };
        let refused: Vec<Option<StoreError>> = nodes.iter().map(refusal).collect();
        let reply = if refused.iter().all(Option::is_none) {
            self.inner.execute(work, deadline).await
        } else {
            let sent: Vec<usize> = (0..work.len()).filter(|&i| refused[i].is_none()).collect();
            // What was sent is committed as the store decided it; the
            // refused items are failures, answered by their policies.
            let sub = if sent.is_empty() {
                Reply {
                    answers: Vec::new(),
                    committed: true,
                }
            } else {
                self.inner.execute(&work.select(&sent), deadline).await
            };
            let committed = sub.committed;
            let mut answered = sub.answers.into_iter();
            let answers = refused
                .into_iter()
                .map(|r| match r {
                    Some(e) => Err(e),
                    None => answered.next().unwrap_or_else(|| {
                        Err(StoreError::new(
                            StoreErrorKind::Rejected,
                            "a store answered fewer items than it was sent",
                        ))
                    }),
                })
                .collect();
            Reply { answers, committed }
        };
        self.record(&admitted, &nodes, &reply);
        reply
    }
}
