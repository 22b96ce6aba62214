-- The RLQS demand board of one quota: a hash of Envoy -> "demand:assigned:
-- expires_ms", at Redis's own TIME. Mirrors `exchange` in
-- src/store/board.rs: drop the expired lines, then write this Envoy's line,
-- its assignment the one it wants (or the one it held, with "") capped so
-- that the board's assignments add up to at most the rate.
--
-- KEYS[1]: the board. ARGV: me, demand, want ("" keeps), rate, ttl (ms).
-- Returns its assignment, then the other live Envoys' demands (strings).
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local me, demand, want = ARGV[1], tonumber(ARGV[2]), ARGV[3]
local rate, ttl = tonumber(ARGV[4]), tonumber(ARGV[5])
local all = redis.call('HGETALL', KEYS[1])
local taken, held, others = 0, 0, {}
for i = 1, #all, 2 do
  local d, a, e = string.match(all[i + 1], '^([^:]+):([^:]+):(%d+)$')
  if not d or tonumber(e) <= now then
    redis.call('HDEL', KEYS[1], all[i])
  elseif all[i] == me then
    held = tonumber(a)
  else
    taken = taken + tonumber(a)
    others[#others + 1] = d
  end
end
local assigned = held
if want ~= '' then assigned = tonumber(want) end
assigned = math.min(math.max(assigned, 0), math.max(rate - taken, 0))
redis.call('HSET', KEYS[1], me, string.format('%.17g:%.17g:%d', demand, assigned, now + ttl))
redis.call('PEXPIRE', KEYS[1], ttl)
local out = {string.format('%.17g', assigned)}
for _, d in ipairs(others) do out[#out + 1] = d end
return out
