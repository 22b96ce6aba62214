//! Rate-limit arithmetic that does no I/O: pure functions of state, cost
//! and `now`, so each is unit-testable without a store.
//!
//! - [`Unit`]: a limit's time unit, numbered as Envoy's enum;
//! - [`clock`]: the injected time source;
//! - [`fixed_window`]: the original's algorithm and status arithmetic.

pub mod clock;
pub mod fixed_window;
pub mod unit;

pub use clock::{Clock, ManualClock, SystemClock};
pub use unit::Unit;
