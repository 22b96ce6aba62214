-- Fixed-window decisions; see scripts.rs for the contract.
-- ARGV: the number of decisions, then per decision its mode, its number of
-- keys n, and per key: hits, ttl, limit. KEYS: every decision's keys, in
-- order. Returns every key's value after its decision, in order.
local out = {}
local a = 2
local k = 0
for _ = 1, tonumber(ARGV[1]) do
  local mode = ARGV[a]
  local n = tonumber(ARGV[a + 1])
  a = a + 2
  if mode == 'read' then
    for i = 1, n do
      out[k + i] = tonumber(redis.call('GET', KEYS[k + i]) or '0')
    end
  else
    local add = {}
    local any = false
    for i = 1, n do
      local hits = tonumber(ARGV[a + 3 * (i - 1)])
      add[i] = hits
      if mode == 'stop' then
        local current = tonumber(redis.call('GET', KEYS[k + i]) or '0')
        if current + hits > tonumber(ARGV[a + 3 * (i - 1) + 2]) then
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
      local v = redis.call('INCRBY', KEYS[k + i], hits)
      if v == hits then
        redis.call('EXPIRE', KEYS[k + i], ARGV[a + 3 * (i - 1) + 1])
      end
      out[k + i] = v
    end
  end
  a = a + 3 * n
  k = k + n
end
return out
