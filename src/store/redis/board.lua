-- The RLQS demand boards: per quota a hash of line -> "demand:assigned:
-- expires_ms", at Redis's own TIME. Mirrors `apply` in src/store/board.rs:
-- per board, drop the expired lines, apply the step, re-split the rate
-- over every live line (`resplit` in src/limiter/share.rs), write it back.
--
-- The keys: KT[key_at + 1 ..] (see single_keys.lua, node_keys.lua).
-- ARGV[at ..]: instance, ttl (ms), n boards, then per board: op (0 sync,
-- 1 report, 2 leave), line, demand, rate (both millionths of a request
-- per second). Returns per board: m, then m pairs (line, assigned in
-- millionths, rounded down) of the instance's lines on it.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local instance, ttl, n = ARGV[at], tonumber(ARGV[at + 1]), tonumber(ARGV[at + 2])
local HEADROOM = 1.25
local prefix = instance .. '/'

local function max_min(rate, d)
  local count, order = #d, {}
  for i = 1, count do order[i] = i end
  table.sort(order, function(x, y) return d[x] < d[y] end)
  local s, left = {}, rate
  for k, i in ipairs(order) do
    local v = math.min(d[i], left / (count - k + 1))
    s[i] = v
    left = left - v
  end
  local spare = math.max(left / count, 0)
  for i = 1, count do s[i] = s[i] + spare end
  return s
end

local function moved(current, target, rate)
  local by = math.abs(target - current)
  return by > 0.1 * current and by > 0.02 * rate
end

local out = {}
for i = 1, n do
  local key = KT[key_at + i]
  local b = at + 3 + (i - 1) * 4
  local op, line = tonumber(ARGV[b]), ARGV[b + 1]
  local demand, rate = tonumber(ARGV[b + 2]) / 1e6, tonumber(ARGV[b + 3]) / 1e6
  local me = prefix .. line
  local lines = {}
  local all = redis.call('HGETALL', key)
  for j = 1, #all, 2 do
    local d, a, e = string.match(all[j + 1], '^([^:]+):([^:]+):(%d+)$')
    if not d or tonumber(e) <= now then
      redis.call('HDEL', key, all[j])
    else
      lines[all[j]] = {tonumber(d), tonumber(a), tonumber(e)}
    end
  end
  if op == 1 then
    local l = lines[me] or {demand, 0, 0}
    l[1], l[3], l[4] = demand, now + ttl, true
    lines[me] = l
  elseif op == 2 and lines[me] then
    lines[me] = nil
    redis.call('HDEL', key, me)
  end
  local names, demands, held = {}, {}, {}
  for name in pairs(lines) do names[#names + 1] = name end
  table.sort(names)
  for k, name in ipairs(names) do
    demands[k] = lines[name][1] * HEADROOM
    held[k] = lines[name][2]
  end
  local targets = max_min(rate, demands)
  local split, sum = {}, 0
  for k = 1, #names do
    split[k] = moved(held[k], targets[k], rate) and targets[k] or held[k]
    sum = sum + split[k]
  end
  if sum > rate * (1 + 1e-12) then
    for k = 1, #names do
      if split[k] > targets[k] then split[k] = targets[k] end
    end
  end
  -- Only lines that changed are written: a sync of a settled board
  -- writes nothing.
  local mine, last, wrote = {}, now, false
  for k, name in ipairs(names) do
    local l = lines[name]
    if l[4] or split[k] ~= held[k] then
      redis.call('HSET', key, name, string.format('%.17g:%.17g:%d', l[1], split[k], l[3]))
      wrote = true
    end
    if l[3] > last then last = l[3] end
    if string.sub(name, 1, #prefix) == prefix then
      mine[#mine + 1] = tonumber(string.sub(name, #prefix + 1))
      mine[#mine + 1] = math.floor(split[k] * 1e6)
    end
  end
  if wrote then redis.call('PEXPIRE', key, last - now) end
  out[#out + 1] = #mine / 2
  for _, v in ipairs(mine) do out[#out + 1] = v end
end
return out
