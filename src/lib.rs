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
//!   operation, [`store::Store::call`], over one shape of work, a
//!   [`store::Job`].
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
//! - [`platform`]: what the process runs on: the gRPC worker runtimes (one
//!   per core, on which the edge serves connections and the Redis store
//!   keeps connections of each worker's own), logging, OTLP tracing, client
//!   TLS.
//! - [`service`]: gRPC (`RateLimitService`, `RateLimitQuotaService`, health,
//!   TLS) in `service::grpc`, the HTTP and debug ports in `service::http`.
//! - [`app`]: wiring and lifecycle; `main.rs` only reads settings, sets up
//!   logging and signals, and calls [`app::run`].
//! - [`go`]: Go's behaviours the drop-in relies on: Go-style flag parsing
//!   for the command-line tools, `strconv`'s numbers, and the YAML 1.1
//!   reader (yaml.v2's behaviour) that the descriptor files and the
//!   Prometheus mapping file are read with.
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
pub mod config;
pub mod engine;
pub mod go;
pub mod hotkeys;
pub mod limiter;
pub mod metrics;
pub mod overrides;
pub mod platform;
pub mod quota;
pub mod resilience;
pub mod service;
pub mod settings;
pub mod store;
pub mod xds;
