//! Rate-limit arithmetic that does no I/O.
//!
//! For now this holds the [`Unit`] of a limit; the algorithms (fixed window
//! and the opt-in ones) join it as pure functions of state and time.

pub mod unit;

pub use unit::Unit;
