//! The network face, each part a thin adapter over the [`crate::engine`]
//! and [`crate::quota`]: gRPC (`RateLimitService`, `RateLimitQuotaService`,
//! health) in [`grpc`], the main HTTP port and the debug port in [`http`],
//! and what both share: the health state ([`health`]) and how an error is
//! answered ([`error`]).

pub mod error;
pub mod grpc;
pub mod health;
pub mod http;
