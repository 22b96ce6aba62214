//! Rate-limit arithmetic that does no I/O: pure functions of state, cost
//! and `now`, so each is unit-testable without a store.
//!
//! - [`Unit`]: a limit's time unit, numbered as Envoy's enum;
//! - [`clock`]: the injected time source;
//! - [`fixed_window`]: the original's algorithm and status arithmetic.

pub mod clock;
pub mod decision;
pub mod fixed_window;
pub mod gcra;
pub mod sliding_log;
pub mod sliding_window;
#[cfg(test)]
mod testing;
pub mod unit;

pub use clock::{Clock, ManualClock, SystemClock};
pub use decision::{Decision, InvalidLimit};
pub use gcra::{Gcra, GcraState};
pub use sliding_log::{Hit, SlidingLog, SlidingLogState, MAX_LOG_LIMIT};
pub use sliding_window::{SlidingWindowCounter, SlidingWindowState};
pub use unit::Unit;
