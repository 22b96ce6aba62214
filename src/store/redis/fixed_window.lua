-- Fixed-window decisions; see scripts.rs for the contract.
-- ARGV: the number of decisions, then per decision its mode, its number of
-- keys n, and per key: hits, ttl, limit. KEYS: every decision's keys, in
-- order. Returns every key's value after its decision, in order.
local out = {}
local call = redis.call

-- Adds hits to counter j (KEYS[j]); sets its TTL when this creates it.
local function add(j, hits, ttl)
  local v = call('INCRBY', KEYS[j], hits)
  if v == hits then
    call('EXPIRE', KEYS[j], ttl)
  end
  out[j] = v
end

local a = 2
local k = 0
for _ = 1, tonumber(ARGV[1]) do
  local mode = ARGV[a]
  local n = tonumber(ARGV[a + 1])
  a = a + 2
  if mode == 'always' then
    -- The common case, kept free of tables: Redis spends its time here.
    for i = 1, n do
      add(k + i, tonumber(ARGV[a + 3 * (i - 1)]), ARGV[a + 3 * (i - 1) + 1])
    end
  elseif mode == 'read' then
    for i = 1, n do
      out[k + i] = tonumber(call('GET', KEYS[k + i]) or '0')
    end
  else -- 'stop': add nothing to the others if any key would exceed
    local over = {}
    local any = false
    for i = 1, n do
      local hits = tonumber(ARGV[a + 3 * (i - 1)])
      local current = tonumber(call('GET', KEYS[k + i]) or '0')
      if current + hits > tonumber(ARGV[a + 3 * (i - 1) + 2]) then
        any = true
        over[i] = hits
      else
        over[i] = -1
      end
    end
    for i = 1, n do
      local hits = over[i]
      if hits < 0 then
        hits = any and 0 or tonumber(ARGV[a + 3 * (i - 1)])
      end
      add(k + i, hits, ARGV[a + 3 * (i - 1) + 1])
    end
  end
  a = a + 3 * n
  k = k + n
end
return out
