//! The integration tests, in one binary: the real `ratelimit` binary (and
//! the real Redis, memcached and Envoy processes they start on free
//! loopback ports) driven through its public surface. One support crate
//! (`testkit/`, here as `support`) serves every scenario and the chaos soak,
//! and is compiled once.
//!
//! Run one group with a filter: `cargo test --test integration --
//! redis_faults::`. Two scenarios stand in binaries of their own, each for
//! a reason: `config_vectors` (the original's test vectors, one trial each,
//! through libtest-mimic's harness) and `fuzz` (its panic hook is
//! process-wide). The chaos soak is the workspace member `soak/`.

// The tests measure the real elapsed time of real processes.
#![allow(clippy::disallowed_types)]

use ratelimit_testkit as support;

mod accuracy;
mod audit;
mod client_and_bench;
mod config_bad_input;
mod config_check;
mod envoy;
mod envoy_refunds;
mod envoy_rlqs;
mod headers;
mod hot_keys;
mod local_first;
mod memcache;
mod overrides;
mod redis_faults;
mod redis_infra;
mod redis_service;
mod reload;
mod rlqs;
mod service;
mod service_bounds;
mod store_conformance;
mod tls;
mod tracing;
mod xds;
