//! The Lua script that makes a fixed-window decision atomic in Redis.
//!
//! One call covers every counter of a request that lives on one node (one
//! hash slot in Redis Cluster). `KEYS` are the counters; `ARGV[1]` is the
//! mode and then, per key, `hits`, `ttl` and `limit`:
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
pub const FIXED_WINDOW: &str = r#"
local mode = ARGV[1]
local n = #KEYS
local out = {}
if mode == 'read' then
  for i = 1, n do
    out[i] = tonumber(redis.call('GET', KEYS[i]) or '0')
  end
  return out
end
local add = {}
local any = false
for i = 1, n do
  local hits = tonumber(ARGV[3 * i - 1])
  add[i] = hits
  if mode == 'stop' then
    local current = tonumber(redis.call('GET', KEYS[i]) or '0')
    if current + hits > tonumber(ARGV[3 * i + 1]) then
      any = true
      add[i] = -hits - 1
    end
  end
end
for i = 1, n do
  local hits = add[i]
  if hits < 0 then
    hits = -hits - 1
  elseif any then
    hits = 0
  end
  local v = redis.call('INCRBY', KEYS[i], hits)
  if v == hits then
    redis.call('EXPIRE', KEYS[i], ARGV[3 * i])
  end
  out[i] = v
end
return out
"#;
