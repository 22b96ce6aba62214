//! The memcache store's statistics (scope `ratelimit.memcache`, the
//! original's names, tags as the statsd sink spells them).

/// A multi-key `get` of a request's counters that memcached answered.
pub const MULTIGET_SUCCESS: &str = "ratelimit.memcache.multiget.__code=success";
/// A multi-key `get` that failed (the server did not answer).
pub const MULTIGET_ERROR: &str = "ratelimit.memcache.multiget.__code=error";
/// An `incr` of an existing counter.
pub const INCREMENT_SUCCESS: &str = "ratelimit.memcache.increment.__code=success";
/// An `incr` of a counter memcached did not hold (then it is added).
pub const INCREMENT_MISS: &str = "ratelimit.memcache.increment.__code=miss";
/// An `incr` that failed.
pub const INCREMENT_ERROR: &str = "ratelimit.memcache.increment.__code=error";
/// An `add` that created a counter.
pub const ADD_SUCCESS: &str = "ratelimit.memcache.add.__code=success";
/// An `add` that failed.
pub const ADD_ERROR: &str = "ratelimit.memcache.add.__code=error";
/// An `add` that lost a race with another instance's (then `incr` again).
pub const ADD_NOT_STORED: &str = "ratelimit.memcache.add.__code=not_stored";
/// Keys asked for in multi-key `get`s.
pub const KEYS_REQUESTED: &str = "ratelimit.memcache.keys_requested";
/// Keys those `get`s found.
pub const KEYS_FOUND: &str = "ratelimit.memcache.keys_found";
