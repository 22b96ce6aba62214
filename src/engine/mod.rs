//! The one call: a request's descriptors to per-descriptor decisions and an
//! overall code. Pure parts live in their own modules.

pub mod aggregate;
