//! The process's platform: what the service runs on rather than what it
//! decides. The gRPC worker runtimes ([`workers`]), logs in the original's
//! formats ([`logging`]), OTLP tracing ([`telemetry`]) and client TLS to the
//! servers it dials ([`client_tls`]). Each takes plain options; the settings
//! are converted at the edge, in `app`.

pub mod client_tls;
pub mod logging;
pub mod telemetry;
pub mod workers;
