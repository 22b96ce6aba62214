//! Hot keys: what spreads the store work of one very busy key, and what
//! finds such keys.
//!
//! - sub-bucket sharding (`shards: K`) is a property of the limit: the
//!   split is [`crate::limiter::Limiter::sub_bucket`], the placement of the
//!   sub-buckets over Redis Cluster slots is
//!   [`crate::store::key::sub_bucket_key`], and the engine picks a
//!   sub-bucket per request;
//! - token leasing (`lease: true`) is a store layer,
//!   [`crate::resilience::Leases`], with its pure accounting and its bound
//!   in [`crate::resilience::leases::lease`];
//! - detection is [`TopKeys`]: a bounded top-K of keys by decisions per
//!   second, served on `/hotkeys` (by `crate::service::http::debug::HotKeysView`).

pub mod top;

pub use top::TopKeys;
