//! The gRPC face: the listener's edge (one single-threaded runtime per core,
//! [`edge`]), what a connection may hold ([`admit`], [`release`]), TLS
//! ([`tls`]), the call statistics ([`metrics`]), and the two services, each
//! only the wire over its library: `RateLimitService` over the engine
//! ([`rls`]) and `RateLimitQuotaService` over the quotas ([`rlqs`]).

pub mod admit;
pub mod edge;
pub mod metrics;
pub mod release;
pub mod rlqs;
pub mod rls;
pub mod tls;
