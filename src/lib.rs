//! `ratelimit`: a drop-in replacement for the Envoy (Lyft) rate limit service.
//!
//! # Layout
//!
//! Dependencies point inward: the service layer calls the engine, which uses
//! the configuration and the stores; nothing in `config` or `settings` knows
//! about the network.
//!
//! - [`settings`]: every environment variable of the original, parsed through
//!   an injectable [`settings::Source`].
//! - [`config`]: descriptor YAML — the YAML 1.1 reader, key checking and typed
//!   decoding, validation into a [`config::DescriptorTree`], matching, the
//!   `/rlconfig` dump, the runtime-directory provider and the hot-reload
//!   watcher.
//! - [`limiter`]: the algorithms as pure functions of state, cost and `now`
//!   (no I/O), and the injected [`limiter::Clock`].
//! - [`store`]: where counters live — [`store::MemoryStore`],
//!   [`store::RedisStore`] (single, sentinel, cluster) — behind the
//!   [`store::Store`] trait that resilience layers will wrap.
//! - [`engine`]: the one call — a request's descriptors to statuses, the
//!   overall code, headers and dynamic metadata.
//! - [`metrics`]: every statistic under the original's names, and its
//!   exporters (Prometheus, statsd).
//! - [`service`]: gRPC (`RateLimitService`, health), the HTTP and debug
//!   ports, TLS; generated protobuf types stay in `service::rls`.
//! - [`app`]: wiring and lifecycle; `main.rs` only reads settings, sets up
//!   logging and signals, and calls [`app::run`].
//! - [`cli`]: Go-style flag parsing for the drop-in command-line tools.
#![forbid(unsafe_code)]
#![warn(missing_docs, missing_debug_implementations, unreachable_pub)]

pub mod app;
pub mod audit;
pub mod cli;
pub mod config;
pub mod engine;
mod go_syntax;
pub mod hotkeys;
pub mod limiter;
pub mod logging;
pub mod metrics;
pub mod resilience;
pub mod service;
pub mod settings;
pub mod store;
pub mod telemetry;
