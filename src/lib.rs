//! `ratelimit`: a drop-in replacement for the Envoy (Lyft) rate limit service.
//!
//! # Layout
//!
//! Dependencies point inward: the service calls the engine, which uses the
//! configuration, the limiter arithmetic and one store seam; settings are
//! read only by [`app`], which hands every other part its own options.
//!
//! - [`settings`]: every environment variable of the original, parsed through
//!   an injectable [`settings::Source`].
//! - [`config`]: descriptor YAML — key checking and typed decoding, validation into a [`config::DescriptorTree`], matching, the
//!   `/rlconfig` dump, the runtime-directory provider, the hot-reload
//!   watcher, and the xDS resource as the same model.
//! - [`limiter`]: the algorithms as pure functions of state, cost and `now`
//!   (no I/O), and the injected [`limiter::Clock`].
//! - [`store`]: where the state of the limits lives — [`store::MemoryStore`],
//!   [`store::RedisStore`] (single, sentinel, cluster), memcache — behind one
//!   operation, [`store::Store::execute`], over one shape of work.
//! - [`resilience`]: the layers over a store, each with its bound: deadline,
//!   breaker, leases, fallback.
//! - [`engine`]: the one call — a request's descriptors to one store work,
//!   the statuses, the overall code, headers and dynamic metadata.
//! - [`quota`]: RLQS — each rule's rate split between the Envoys that
//!   enforce it themselves, by their reported demand.
//! - [`hotkeys`]: detection of the keys that take most of the traffic.
//! - [`audit`]: sampled decisions against each rule's exact contract.
//! - [`metrics`]: every statistic under the original's names, and its
//!   exporters (Prometheus, statsd).
//! - [`xds`]: the xDS config source, one ADS stream to a management
//!   server (the network side of `CONFIG_TYPE=GRPC_XDS_SOTW`).
//! - [`telemetry`]: OTLP tracing.
//! - [`workers`]: the gRPC worker runtimes, one per core, on which the
//!   edge serves connections and the Redis store keeps connections of
//!   each worker's own.
//! - [`service`]: gRPC (`RateLimitService`, `RateLimitQuotaService`, health), the HTTP and debug
//!   ports, TLS; generated protobuf types stay in `service::rls`.
//! - [`app`]: wiring and lifecycle; `main.rs` only reads settings, sets up
//!   logging and signals, and calls [`app::run`].
//! - [`cli`]: Go-style flag parsing for the drop-in command-line tools;
//!   `yaml`: the YAML 1.1 reader (Go's yaml.v2 behaviour) that the
//!   descriptor files and the Prometheus mapping file are read with.
#![forbid(unsafe_code)]
#![warn(missing_docs, missing_debug_implementations, unreachable_pub)]

/// This build's version and the source revision it was built from
/// (`RATELIMIT_REVISION` at build time, else the checkout's commit):
/// what `ratelimit --version` prints.
pub const VERSION: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    " (revision ",
    env!("RATELIMIT_REVISION"),
    ")"
);

pub mod app;
pub mod audit;
pub mod cli;
pub mod client_tls;
pub mod config;
pub mod engine;
mod go_syntax;
pub mod hotkeys;
pub mod limiter;
pub mod logging;
pub mod metrics;
pub mod quota;
pub mod resilience;
pub mod service;
pub mod settings;
pub mod store;
pub mod telemetry;
pub mod workers;
pub mod xds;
mod yaml;
