//! The chaos soak's parts, as a library: the rules and clients it runs,
//! the nemesis and its faults, the logs, and the checker that holds every
//! logged call to the bound the docs state. The soak itself is the `chaos`
//! binary (`src/main.rs`, run by `scripts/chaos.sh`); the checker's own
//! tests (`tests/checker.rs`) hold it to runs they write.

// The soak measures the real time of real processes.
#![allow(clippy::disallowed_types)]

pub use ratelimit_testkit as support;

pub mod boards;
pub mod check;
pub mod client;
pub mod faults;
pub mod findings;
pub mod host;
pub mod instances;
pub mod links;
pub mod log;
pub mod quota;
pub mod report;
pub mod rules;
pub mod run;
