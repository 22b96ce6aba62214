//! The network face: gRPC (`RateLimitService`, `RateLimitQuotaService`, health), the main HTTP port
//! and the debug port, each a thin adapter over the [`crate::engine`].

pub mod admit;
pub mod debug;
pub mod edge;
pub mod error;
pub mod grpc_metrics;
pub mod health;
pub mod http;
pub mod http_server;
pub mod json;
pub mod release;
pub mod rlqs;
pub mod rls;
pub mod tls;
