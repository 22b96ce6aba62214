-- Fixed-window decisions; see scripts.rs for the contract.
-- ARGV: the number of decisions, then per decision its mode, its number of
-- keys n, (for the audited modes "always+" and "stop+" a nonce,) and per key:
-- hits, ttl, limit. KEYS: every decision's keys, in order. Returns every
-- key's value after its decision, in order.
--
-- In the audited modes a key whose ttl is negative is the decision audit's
-- reference of the counter right before it: a sorted set of the admissions
-- of the trailing -ttl µs, read at Redis's TIME; its value is what it held
-- before, and the hits are added to it iff that counter was incremented and
-- is within its limit after (what the original's rule admitted).
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

local now, seq = nil, 0
-- Reference j over a window of `w` µs: what it held, then `hits` recorded
-- if `admitted`.
local function reference(j, hits, w, admitted, nonce)
  if not now then
    local t = call('TIME')
    now = tonumber(t[1]) * 1000000 + tonumber(t[2])
  end
  call('ZREMRANGEBYSCORE', KEYS[j], '-inf', now - w)
  out[j] = call('ZCARD', KEYS[j])
  if admitted and hits > 0 then
    local args = {}
    for _ = 1, hits do
      seq = seq + 1
      args[#args + 1] = now
      args[#args + 1] = string.format('%d:%s:%d', now, nonce, seq)
    end
    call('ZADD', KEYS[j], unpack(args))
    call('PEXPIRE', KEYS[j], math.floor(w / 1000) + 1)
  end
end

local a = 2
local k = 0
-- Field f (0 hits, 1 ttl, 2 limit) of key i of the decision at a.
local function arg(i, f) return ARGV[a + 3 * (i - 1) + f] end
for _ = 1, tonumber(ARGV[1]) do
  local mode = ARGV[a]
  local n = tonumber(ARGV[a + 1])
  a = a + 2
  local nonce
  if mode == 'always+' or mode == 'stop+' then
    nonce = ARGV[a]
    a = a + 1
  end
  if mode == 'always' then
    -- The common case, kept free of tables: Redis spends its time here.
    for i = 1, n do
      add(k + i, tonumber(ARGV[a + 3 * (i - 1)]), ARGV[a + 3 * (i - 1) + 1])
    end
  elseif mode == 'read' then
    for i = 1, n do
      if tonumber(arg(i, 1)) < 0 then out[k + i] = 0
      else out[k + i] = tonumber(call('GET', KEYS[k + i]) or '0') end
    end
  else
    -- 'stop': add nothing to the others if any counter would exceed.
    local stop = mode == 'stop' or mode == 'stop+'
    local over = {}
    local any = false
    for i = 1, n do
      local hits, ttl = tonumber(arg(i, 0)), tonumber(arg(i, 1))
      over[i] = -1
      if stop and ttl >= 0 then
        local current = tonumber(call('GET', KEYS[k + i]) or '0')
        if current + hits > tonumber(arg(i, 2)) then
          any = true
          over[i] = hits
        end
      end
    end
    -- What the last counter added, and whether it is within its limit.
    local added, within = 0, false
    for i = 1, n do
      local hits, ttl = tonumber(arg(i, 0)), tonumber(arg(i, 1))
      if ttl < 0 then
        reference(k + i, hits, -ttl, added > 0 and within, nonce)
        added = 0
      else
        if over[i] >= 0 then hits = over[i] elseif any then hits = 0 end
        add(k + i, hits, ttl)
        added, within = hits, out[k + i] <= tonumber(arg(i, 2))
      end
    end
  end
  a = a + 3 * n
  k = k + n
end
return out
