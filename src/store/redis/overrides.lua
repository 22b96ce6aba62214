-- The per-tenant overrides' book (see `crate::store::overrides`): one step
-- per call, atomic. KEYS[1] the entries hash (id -> "<version> <expires at
-- ms> <record>"), KEYS[2] the book's version, KEYS[3] the change log.
--
-- ARGV[1] is the step:
--   "read", known                   -> {version} when unchanged, else
--                                      {version, id1, value1, id2, ...}
--   "log", count                    -> the newest `count` lines, oldest first
--   "write", id, record ("" to delete), expires at ms, if_version (-1:
--   none), max entries, now ms, log cap, log head
--                                   -> {"written", version, before value or ""}
--                                      {"stale", current version}
--                                      {"full"} / {"missing"}
local step = ARGV[1]
if step == "read" then
  local version = redis.call("GET", KEYS[2]) or "0"
  if version == ARGV[2] then
    return {version}
  end
  local all = redis.call("HGETALL", KEYS[1])
  table.insert(all, 1, version)
  return all
end
if step == "log" then
  local count = tonumber(ARGV[2])
  if count <= 0 then
    return {}
  end
  return redis.call("LRANGE", KEYS[3], -count, -1)
end

local id, record = ARGV[2], ARGV[3]
local expires_at, if_version = ARGV[4], tonumber(ARGV[5])
local max_entries, now = tonumber(ARGV[6]), tonumber(ARGV[7])
local log_cap, log_head = tonumber(ARGV[8]), ARGV[9]

local before = redis.call("HGET", KEYS[1], id)
if before then
  local at = tonumber(string.match(before, "^%d+ (%d+) "))
  if at and at ~= 0 and at <= now then
    -- An expired entry is no entry.
    redis.call("HDEL", KEYS[1], id)
    before = false
  end
end
local current = 0
if before then
  current = tonumber(string.match(before, "^(%d+) ")) or 0
end
if if_version >= 0 and if_version ~= current then
  return {"stale", current}
end
if record == "" and not before then
  return {"missing"}
end
if record ~= "" and not before and redis.call("HLEN", KEYS[1]) >= max_entries then
  -- Full: expired entries are dropped (they are never counted), once.
  local all = redis.call("HGETALL", KEYS[1])
  for i = 1, #all, 2 do
    local at = tonumber(string.match(all[i + 1], "^%d+ (%d+) "))
    if at and at ~= 0 and at <= now then
      redis.call("HDEL", KEYS[1], all[i])
    end
  end
  if redis.call("HLEN", KEYS[1]) >= max_entries then
    return {"full"}
  end
end

local version = redis.call("INCR", KEYS[2])
if record == "" then
  redis.call("HDEL", KEYS[1], id)
else
  redis.call("HSET", KEYS[1], id, version .. " " .. expires_at .. " " .. record)
end
local before_record = "null"
if before then
  before_record = string.match(before, "^%d+ %d+ (.*)$") or "null"
end
redis.call("RPUSH", KEYS[3], log_head .. ',"version":' .. version .. ',"before":' .. before_record .. "}")
redis.call("LTRIM", KEYS[3], -log_cap, -1)
return {"written", version, before or ""}
