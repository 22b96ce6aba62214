//! What happens when the store cannot answer: layers over the one store
//! seam ([`Store::execute`]), each a [`Store`] wrapping a [`Store`], as
//! tower's layers wrap a service.
//!
//! The stack, outermost first (see [`wrap`]):
//! - [`Fallback`]: items the store could not answer are answered by their
//!   rule's `failure_mode`: `open` by a local floor, `closed` by a denial,
//!   `error` left failing (the original's UNKNOWN);
//! - [`Breaker`]: a [`circuit::Circuit`] per store node; an open one sends
//!   nothing and fails its items at once;
//! - [`Deadline`]: `STORE_TIMEOUT` on every call.
//!
//! The memory store has nothing to fail and is not wrapped.
//!
//! [`Store::execute`]: crate::store::Store::execute

pub mod breaker;
pub mod circuit;
pub mod deadline;
pub mod fallback;

use std::sync::Arc;
use std::time::Duration;

pub use breaker::{Breaker, BreakerOptions};
pub use deadline::Deadline;
pub use fallback::Fallback;

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

/// `store` with a deadline, per-node breakers (unless disabled) and the
/// failure policies' fallback, outermost last. The local floor reads time
/// from `clock`. Needs a tokio runtime (the floor's sweeper).
pub fn wrap<S: Store + 'static>(
    store: S,
    options: ResilienceOptions,
    clock: Arc<dyn Clock>,
) -> Arc<dyn Store> {
    let timed = Deadline::new(store, options.timeout);
    match options.breaker {
        Some(b) => Arc::new(Fallback::new(Breaker::new(timed, b), clock)),
        None => Arc::new(Fallback::new(timed, clock)),
    }
}
