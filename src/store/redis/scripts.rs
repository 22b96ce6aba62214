//! The Lua scripts: the one that makes a request's store work atomic on a
//! Redis node (`limits.lua`; its header gives the layout), and RLQS's
//! demand boards (`board.lua`). Each comes in two key layouts: declared
//! as `KEYS` (one node, or one Cluster slot), or passed in `ARGV` for one
//! call per Cluster primary (`node_keys.lua`).
//!
//! One call carries one or more *groups*, each every item of one request
//! that lives on the node (one hash slot in Redis Cluster); the whole call
//! is atomic, so each group is. The original's counters are counted as the
//! original counts them, `INCRBY` on the original's key, so an old instance
//! and this one share counters; the TTL is set only when an increment
//! creates the key (its value equals the hits added), not on every hit as
//! the original does, which halves the commands. With
//! `STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT` the check and the increments
//! are one atomic step (the original's GET then INCRBY in two round trips
//! races). The opt-in algorithms decide at the server's `TIME` and are
//! taken all or nothing with the group.

/// The script text, for one node (its keys declared as `KEYS`).
pub const LIMITS: &str = concat!(include_str!("single_keys.lua"), include_str!("limits.lua"));

/// The same script for one call per Redis Cluster primary: the keys of
/// all of a request's slots on that primary in one call
/// (`node_keys.lua` says how they are passed). Needs Redis 7 or Valkey
/// (script flags); a deployment that refuses it keeps one call per slot.
pub const LIMITS_PER_NODE: &str =
    concat!(include_str!("node_keys.lua"), include_str!("limits.lua"));

/// RLQS's demand boards: every step of one report on one node (see
/// `crate::store::board`), its keys declared as `KEYS`.
pub const BOARD: &str = concat!(include_str!("single_keys.lua"), include_str!("board.lua"));

/// The boards' script for one call per Cluster primary.
pub const BOARD_PER_NODE: &str = concat!(include_str!("node_keys.lua"), include_str!("board.lua"));

/// The per-tenant overrides' book: one step per call, its three keys on one
/// hash tag (see `crate::store::overrides`).
pub const OVERRIDES: &str = include_str!("overrides.lua");
