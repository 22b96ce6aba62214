-- The opt-in algorithms, decided inside Redis at Redis's own TIME, all or
-- nothing over the keys of one group. Mirrors src/limiter/*.rs (see the
-- doc of algorithms.rs for the layout and for how it differs).
--
-- One call carries one or more groups (one request's checks on this node
-- each; groups of different requests are coalesced into one call). ARGV:
-- the number of groups, then per group: mode ("commit" | "peek" (decide
-- only) | "refund"), nonce, commit time (µs, refund only), n, then per
-- check: kind, limit, period (µs; for "ow" the TTL in s), burst, cost,
-- binding ("1", "0", or "r": the decision audit's reference, never binding,
-- whose cost is recorded whenever the group commits, even if it would have
-- refused; its count is what it held before). KEYS: the groups' keys in
-- order, one per check.
-- "refund" gives each check's cost back to the window of the commit time
-- and then answers as "peek". Returns, per group in order: time (µs) and
-- committed (0/1), then per check: code (1 allow, 0 deny, 2 exceeds
-- capacity), remaining, retry (µs), reset (µs), count.

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local floor = math.floor
local function ceil_div(a, b) return floor((a + b - 1) / b) end
local function ms(us) return floor(us / 1000) + 1 end

-- "k:a:b" strings (window index and counters).
local function parse3(v)
  if not v then return nil end
  local k, a, b = string.match(v, '^(%d+):(%d+):(%d+)$')
  if not k then return nil end
  return tonumber(k), tonumber(a), tonumber(b)
end

-- One group: its checks are ARGV[base + 1 ..] and KEYS[key_at + 1 ..].
local function run_group(mode, nonce, tc, n, key_at, base, out)
  local function check(i)
    local o = base + (i - 1) * 6
    return ARGV[o + 1], tonumber(ARGV[o + 2]), tonumber(ARGV[o + 3]),
      tonumber(ARGV[o + 4]), tonumber(ARGV[o + 5]), ARGV[o + 6] == '1',
      ARGV[o + 6] == 'r'
  end

  if mode == 'refund' then
    for i = 1, n do
      local kind, limit, period, _, cost = check(i)
      local key = KEYS[key_at + i]
      if kind == 'tb' then
        local tat = tonumber(redis.call('GET', key))
        if tat then
          tat = tat - ceil_div(cost * period, limit)
          if tat <= now then redis.call('DEL', key)
          else redis.call('SET', key, string.format('%d', tat), 'KEEPTTL') end
        end
      elseif kind == 'sw' or kind == 'fw' then
        local k, a, b = parse3(redis.call('GET', key))
        local kc = floor(tc / period)
        if k == kc then a = math.max(a - cost, 0)
        elseif k == kc + 1 and kind == 'sw' then b = math.max(b - cost, 0) end
        if k then
          redis.call('SET', key, string.format('%d:%d:%d', k, a, b), 'KEEPTTL')
        end
      elseif kind == 'ow' then
        if redis.call('EXISTS', key) == 1 then redis.call('DECRBY', key, cost) end
      elseif kind == 'sl' then
        for j = 1, cost do
          redis.call('ZREM', key, string.format('%d:%s:%d', tc, nonce, j))
        end
      end
    end
    -- Then answered as a peek.
  end

  -- Phase 1: decide every check; `pending[key]` holds what the batch would
  -- write, so that checks on one key see the ones before them.
  local pending = {}
  local first = #out + 1
  out[first] = now
  out[first + 1] = 0
  local writes = {}
  local all = true

  for i = 1, n do
    local kind, limit, period, burst, cost, binding, record = check(i)
    local key = KEYS[key_at + i]
    local code, remaining, retry, reset, count = 1, 0, 0, 0, 0
    local p = pending[key]

    if kind == 'tb' then
      -- GCRA; TAT in µs: admit iff (TAT - now)+ <= floor((burst - cost) * T).
      local tat = p and p.tat or tonumber(redis.call('GET', key)) or now
      local debt = math.max(tat - now, 0)
      local function free(d)
        if limit == 0 then return 0 end
        return math.max(burst - ceil_div(d * limit, period), 0)
      end
      if cost > burst then code, reset = 2, debt
      elseif cost == 0 then remaining, reset = free(debt), debt
      else
        local tolerance = floor((burst - cost) * period / limit)
        local fits = debt <= tolerance
        if fits or record then
          local new_tat = math.max(tat, now) + ceil_div(cost * period, limit)
          remaining, reset = free(new_tat - now), new_tat - now
          pending[key] = {tat = new_tat}
          writes[#writes + 1] = function()
            redis.call('SET', key, string.format('%d', new_tat), 'PX', ms(new_tat - now))
          end
        end
        if not fits then code, remaining, retry, reset = 0, 0, debt - tolerance, debt end
      end

    elseif kind == 'sw' then
      local w = period
      local k_now = floor(now / w)
      local k, cur, prev
      if p then k, cur, prev = p.k, p.cur, p.prev
      else k, cur, prev = parse3(redis.call('GET', key)) end
      local start, elapsed = k_now, now - k_now * w
      if not k then cur, prev = 0, 0
      elseif k_now < k then start, elapsed = k, 0
      elseif k_now == k + 1 then prev, cur = cur, 0
      elseif k_now > k + 1 then cur, prev = 0, 0 end
      local function fits(c)
        local slack = limit - cur - c
        return slack >= 0 and prev * (w - elapsed) <= slack * w
      end
      local function reset_after()
        local e = start * w
        if cur > 0 then e = e + 2 * w elseif prev > 0 then e = e + w end
        return math.max(e - now, 0)
      end
      if cost > limit then code, reset = 2, reset_after()
      elseif cost == 0 or fits(cost) then
        cur = cur + cost
        remaining = math.max(limit - cur - ceil_div(prev * (w - elapsed), w), 0)
        reset = reset_after()
        if cost > 0 then
          local s, c, pv, r = start, cur, prev, reset
          pending[key] = {k = s, cur = c, prev = pv}
          writes[#writes + 1] = function()
            redis.call('SET', key, string.format('%d:%d:%d', s, c, pv), 'PX', ms(r))
          end
        end
      else
        local at
        local slack = limit - cur - cost
        if slack >= 0 and prev > 0 then
          local f = math.min(floor(slack * w / prev), w)
          if f > 0 then at = start * w + w - f end
        end
        if not at then
          local nxt = start * w + w
          if cur == 0 then at = nxt
          else at = nxt + w - math.min(floor((limit - cost) * w / cur), w) end
        end
        code, retry, reset = 0, math.max(at - now, 1), reset_after()
      end

    elseif kind == 'fw' or kind == 'ow' then
      -- fw: "k:count:0" with the window index k; ow: the original's integer
      -- counter on a key that already names its window.
      local k, c
      if p then k, c = p.k, p.count
      elseif kind == 'fw' then k, c = parse3(redis.call('GET', key))
      else k, c = 0, tonumber(redis.call('GET', key)) or 0 end
      local w = period
      local start = kind == 'fw' and floor(now / w) or 0
      if kind == 'fw' and (not k or k < start) then k, c = start, 0 end
      if kind == 'fw' then start = k end
      local until_end = kind == 'fw' and (start + 1) * w - now or 0
      count = c
      if cost > limit then code, reset = 2, (c == 0) and 0 or until_end
      elseif c + cost <= limit then
        remaining = limit - c - cost
        reset = (c + cost == 0) and 0 or until_end
        if cost > 0 then
          local nc = c + cost
          pending[key] = {k = k, count = nc}
          if kind == 'fw' then
            writes[#writes + 1] = function()
              redis.call('SET', key, string.format('%d:%d:0', k, nc), 'PX', ms(until_end))
            end
          else
            writes[#writes + 1] = function()
              if redis.call('INCRBY', key, cost) == cost then redis.call('EXPIRE', key, period) end
            end
          end
        end
      else code, retry, reset = 0, until_end, until_end end

    elseif kind == 'sl' then
      -- One member per unit of cost, scored by its time; keep (now - w, now].
      local w = period
      if not p then
        redis.call('ZREMRANGEBYSCORE', key, '-inf', now - w)
        p = {used = redis.call('ZCARD', key), added = 0}
        pending[key] = p
      end
      local used = p.used + p.added
      local function drained()
        if p.added > 0 then return w end
        local newest = redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')
        if newest[2] then return math.max(tonumber(newest[2]) + w - now, 0) end
        return 0
      end
      if record then count = used end
      if cost > limit then code, reset = 2, drained()
      elseif used + cost <= limit or record then
        if used + cost > limit then code = 0 end
        remaining = math.max(limit - used - cost, 0)
        if cost > 0 then
          local first = p.added
          p.added = p.added + cost
          writes[#writes + 1] = function()
            local args = {}
            for j = first + 1, first + cost do
              args[#args + 1] = now
              args[#args + 1] = string.format('%d:%s:%d', now, nonce, j)
            end
            redis.call('ZADD', key, unpack(args))
            redis.call('PEXPIRE', key, ms(w))
          end
        end
        reset = drained()
      else
        -- The (used + cost - limit)-th oldest entry must leave first.
        local need = used + cost - limit
        local at
        if need <= p.used then
          local e = redis.call('ZRANGE', key, need - 1, need - 1, 'WITHSCORES')
          at = tonumber(e[2]) + w
        else at = now + w end
        code, retry, reset = 0, math.max(at - now, 1), drained()
      end
    end

    if code ~= 1 and binding then all = false end
    out[#out + 1] = code
    out[#out + 1] = remaining
    out[#out + 1] = retry
    out[#out + 1] = reset
    out[#out + 1] = count
  end

  -- Phase 2: commit all or nothing.
  if all and mode == 'commit' then
    for _, write in ipairs(writes) do write() end
    out[first + 1] = 1
  end
end

local out = {}
local key_at, at = 0, 1
for _ = 1, tonumber(ARGV[1]) do
  local n = tonumber(ARGV[at + 4])
  run_group(ARGV[at + 1], ARGV[at + 2], tonumber(ARGV[at + 3]), n, key_at, at + 4, out)
  key_at = key_at + n
  at = at + 4 + 6 * n
end
return out
