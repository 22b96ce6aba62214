//! Rate-limit arithmetic that does no I/O: pure functions of state, cost
//! and `now`, so each is unit-testable without a store.
//!
//! - [`Unit`]: a limit's time unit, numbered as Envoy's enum;
//! - [`calendar`]: calendar windows (day, ISO week, month, year) in a time
//!   zone, the opt-in alternative to epoch-aligned windows;
//! - [`clock`]: the injected time source;
//! - [`fixed_window`]: the original's algorithm and status arithmetic (the
//!   default; up to 2 × limit across a window boundary), and
//!   [`fixed_window::OriginalWindow`], that window as a store item carries
//!   it (its limit, its period, its key's expiry);
//! - the opt-in algorithms, one [`Limiter`] of them per configured limit, behind the [`Algorithm`] trait, each with its
//!   error bound in its doc: [`gcra`] (token bucket, one timestamp per key),
//!   [`sliding_window`] (two counters, at most limit − 1 above exact),
//!   [`sliding_log`] (exact, limits up to [`MAX_LOG_LIMIT`]),
//!   [`window_counter`] (fixed window of any length that counts only what
//!   it admits, at most 2 × limit across a boundary);
//! - [`concurrency`]: in-flight limits (slots taken by a hit, given back
//!   by a refund or by themselves after `max_duration`), with their bound;
//! - [`per_window`]: "at most `limit` per `window`", what the window
//!   algorithms share;
//! - [`decision`]: what they answer: allow with remaining, or deny with a
//!   retry time that is always positive;
//! - [`share`]: one rate split max-min fair between the Envoys that
//!   enforce it (RLQS), never above the rate.

pub mod algorithm;
pub mod calendar;
pub mod clock;
pub mod concurrency;
pub mod decision;
pub mod fixed_window;
pub mod gcra;
pub mod limit;
pub mod per_window;
pub mod share;
pub mod sliding_log;
pub mod sliding_window;
#[cfg(test)]
mod testing;
pub mod unit;
pub mod window_counter;

pub use algorithm::Algorithm;
pub use calendar::{Calendar, CalendarError, CalendarUnit};
pub use clock::{Clock, ManualClock, SystemClock};
pub use concurrency::{Concurrency, MAX_IN_FLIGHT};
pub use decision::{Decision, InvalidLimit};
pub use gcra::{Gcra, GcraState};
pub use limit::{AlgorithmName, Limiter, LimiterState};
pub use per_window::PerWindow;
pub use sliding_log::{Hit, SlidingLog, SlidingLogState, MAX_LOG_LIMIT};
pub use sliding_window::{SlidingWindowCounter, SlidingWindowState};
pub use unit::Unit;
pub use window_counter::{FixedWindowCounter, WindowCount};
