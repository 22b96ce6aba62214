-- Fixed-window decisions; see scripts.rs for the contract.
-- ARGV: the number of decisions, then per decision its mode, its number of
-- keys n, and per key: hits, ttl, limit. KEYS: every decision's keys, in
-- order. Returns every key's value after its decision, in order.
local out = {}
local call = redis.call
local a = 2
local k = 0
for _ = 1, tonumber(ARGV[1]) do
  local mode = ARGV[a]
  local n = tonumber(ARGV[a + 1])
  a = a + 2
  if mode == 'always' then
    -- The common case, kept free of tables: Redis spends its time here.
    for i = 1, n do
      local key = KEYS[k + i]
      local hits = tonumber(ARGV[a + 3 * (i - 1)])
      local v = call('INCRBY', key, hits)
      if v == hits then
        call('EXPIRE', key, ARGV[a + 3 * (i - 1) + 1])
      end
      out[k + i] = v
    end
  elseif mode == 'read' then
    for i = 1, n do
      out[k + i] = tonumber(call('GET', KEYS[k + i]) or '0')
    end
  else -- 'stop': add nothing to the others if any key would exceed
    local add = {}
    local any = false
    for i = 1, n do
      local hits = tonumber(ARGV[a + 3 * (i - 1)])
      local current = tonumber(call('GET', KEYS[k + i]) or '0')
      if current + hits > tonumber(ARGV[a + 3 * (i - 1) + 2]) then
        any = true
        add[i] = hits
      else
        add[i] = -1
      end
    end
    for i = 1, n do
      local key = KEYS[k + i]
      local hits = add[i]
      if hits < 0 then
        hits = any and 0 or tonumber(ARGV[a + 3 * (i - 1)])
      end
      local v = call('INCRBY', key, hits)
      if v == hits then
        call('EXPIRE', key, ARGV[a + 3 * (i - 1) + 1])
      end
      out[k + i] = v
    end
  end
  a = a + 3 * n
  k = k + n
end
return out
