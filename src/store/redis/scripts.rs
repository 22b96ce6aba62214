//! The Lua script that makes a fixed-window decision atomic in Redis.
//!
//! One call carries one or more *decisions*, each every counter of one
//! request that lives on one node (one hash slot in Redis Cluster); the
//! whole call is atomic, so each decision is. `ARGV[1]` is the number of
//! decisions, then per decision its mode, its number of keys and per key
//! `hits`, `ttl` and `limit`; `KEYS` are the decisions' counters in order.
//! Modes:
//!
//! - `always`: `INCRBY key hits` for every key (the original's behaviour);
//! - `stop`: `STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT` — if any key would go
//!   over its limit, only those keys are incremented, else all are; the
//!   check and the increments are one atomic step (the original's GET then
//!   INCRBY in two round trips races, `[W4]`);
//! - `read`: `GET` only (the first phase when the counters span slots).
//!
//! The TTL is set only when an increment creates the key (its value equals
//! the hits added), not on every hit as the original does, which halves the
//! commands. Keys and values are the original's, so an old instance and this
//! one share counters. Returns each key's value after the step.

/// The script text.
pub const FIXED_WINDOW: &str = include_str!("fixed_window.lua");

/// The opt-in algorithms' script (`algorithms.lua`): one or more groups
/// (each the checks of one request on this node or slot), each decided at
/// the server's `TIME` and committed all or nothing on its own; the layout
/// is in the script's header.
pub const ALGORITHMS: &str = include_str!("algorithms.lua");
