//! The layers between the engine and a store: each a [`Store`] wrapping a
//! [`Store`] through the one seam ([`Store::call`]), as tower's layers
//! wrap a service, each with its bound in its own doc. A request's work
//! goes down them once.
//!
//! The stack, outermost first (see [`wrap`]):
//! - [`Fallback`]: items the store could not answer are answered by their
//!   rule's failure policy ([`crate::config::OnFailure`], the one RLQS follows too): `open`
//!   by a local floor, `closed` by a denial, `error` left failing (the
//!   original's UNKNOWN);
//! - [`Leases`]: leased hot keys answered from batches, and local-first
//!   windows from this instance's views, written back in batches (below
//!   the fallback, so that a lease or a view is spent during an outage and
//!   a failed take is answered by the rule's policy for the request's own
//!   cost);
//! - [`Breaker`]: a [`circuit::Circuit`] per store node, named in each item;
//!   an open one sends nothing and fails its items at once;
//! - [`Deadline`]: `STORE_TIMEOUT` on every call, or the caller's own
//!   deadline (`grpc-timeout` less a margin) when that comes first: the
//!   request's one deadline.
//!
//! The memory store has nothing to time out or break: it gets the
//! fallback alone ([`Layers::InProcess`]).
//!
//! Each layer writes its rule once for every kind of [`Job`]: the deadline
//! and the breaker over any job, the fallback and the leases over a
//! request's limits, passing every other kind through.
//!
//! [`Store::call`]: crate::store::Store::call
//! [`Job`]: crate::store::Job

pub mod breaker;
pub mod circuit;
pub mod deadline;
pub mod fallback;
pub mod leases;
#[cfg(test)]
pub(crate) mod testing;

use std::sync::Arc;
use std::time::Duration;

pub use breaker::{Breaker, BreakerOptions};
pub use deadline::Deadline;
pub use fallback::Fallback;
pub use leases::{LeaseOptions, Leases};

use crate::limiter::Clock;
use crate::store::Store;

/// What the layers need from the settings.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ResilienceOptions {
    /// `STORE_TIMEOUT`.
    pub timeout: Duration,
    /// `STORE_BREAKER_FAILURES` and `STORE_BREAKER_COOLDOWN`; `None`
    /// (failures `0`) disables the breaker.
    pub breaker: Option<BreakerOptions>,
}

/// Which layers a store needs.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Layers {
    /// A store in this process (memory): nothing to time out or break,
    /// its state already local; only the fallback (a full store fails new
    /// keys, for their rules' policies to answer).
    InProcess,
    /// A store across the network: the whole stack.
    Remote {
        /// The deadline and the breaker.
        options: ResilienceOptions,
        /// The leases.
        leases: LeaseOptions,
    },
}

/// `store` in the layers it needs: for a remote store a deadline,
/// per-node breakers (unless disabled), leases and the failure policies'
/// fallback, outermost last; for one in this process the fallback alone.
/// Every backend's stack, the RLQS boards' included, is built here. The
/// local floor and the leases read time from `clock`. Needs a tokio
/// runtime (the sweepers).
pub fn wrap<S: Store + 'static>(store: S, layers: Layers, clock: Arc<dyn Clock>) -> Wrapped {
    let Layers::Remote { options, leases } = layers else {
        return Wrapped {
            store: Arc::new(Fallback::new(store, clock)),
            leases: None,
            _sweeper: None,
            _write_back: None,
        };
    };
    let timed = Deadline::new(store, options.timeout);
    let guarded: Arc<dyn Store> = match options.breaker {
        Some(b) => Arc::new(Breaker::new(timed, b).counting_abandoned(options.timeout)),
        None => Arc::new(timed),
    };
    let leased = Arc::new(Leases::new(guarded, leases, Arc::clone(&clock)));
    let sweeper = leased.spawn_sweeper(
        (leases.ttl / 4).clamp(Duration::from_millis(10), Duration::from_millis(250)),
    );
    let write_back = leased.spawn_write_back();
    Wrapped {
        store: Arc::new(Fallback::new(Arc::clone(&leased), clock)),
        leases: Some(leased),
        _sweeper: Some(AbortOnDrop(sweeper)),
        _write_back: Some(AbortOnDrop(write_back)),
    }
}

/// A wrapped store and a handle on its leases.
#[derive(Debug)]
pub struct Wrapped {
    /// The whole stack.
    pub store: Arc<dyn Store>,
    /// The lease layer of a remote store (its table for `/hotkeys`;
    /// returned at shutdown).
    pub leases: Option<Arc<Leases<Arc<dyn Store>>>>,
    _sweeper: Option<AbortOnDrop>,
    _write_back: Option<AbortOnDrop>,
}

/// Stops a background task when dropped.
#[derive(Debug)]
pub(crate) struct AbortOnDrop(pub(crate) tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}
