-- Every kind of limit item, decided inside Redis at Redis's own TIME: one
-- call per node carries one or more groups (one request's items on this
-- node each; groups of concurrent requests are coalesced into one call),
-- each applied on its own. Mirrors src/limiter/*.rs and the memory store
-- (see args.rs for the layout and how it differs).
--
-- ARGV: the number of groups, then per group: mode, nonce, taken-at time
-- (µs, refund only), n, then per item six fields: kind, limit, period,
-- burst, cost, flag; or, for a group of the original's counters alone
-- counted ("count-same", "count"), the compact layouts given below. KEYS:
-- the groups' keys in order, one per item.
--
-- A prelude (single_keys.lua or node_keys.lua) says where they are: the
-- keys are KT[key_at + 1 ..] and the layout starts at ARGV[at].
--
-- Modes: "count-same" and "count" (the compact groups: "commit" or
-- "decide" of counters alone), "commit" (counters count; the rest is taken iff every binding
-- item is admitted), "stop" (commit, but if any counter would pass its
-- limit only those counters are incremented), "decide" (counters count,
-- nothing else is taken), "refund" (each item taken on commit gives its
-- cost back to the window of the taken-at time, then answers as "read"),
-- "read" (counters are read, nothing is taken).
--
-- Kinds: "oc" the original's counter (period: its TTL in s; burst: its
-- expiry jitter bound in s), counted the original's way (INCRBY, EXPIRE
-- when it creates the key, see `created`); "ow" the same
-- counter decided before it is counted; "fw", "sw", "tb", "sl" the opt-in
-- algorithms and "cc" the in-flight limit (limit: max_in_flight; period:
-- max_duration), all with the period in µs.
--
-- Flag: 1 binding, 0 not; 2 a give-back (is_negative_hits): before the
-- group's other items are decided, and whatever they decide, its cost
-- comes back to what counts now (a window's current count, never below 0;
-- a bucket's tokens, never above the burst; a sliding log's newest entries;
-- an in-flight limit's oldest slots), then it answers as a read, never
-- binding; negative, the decision audit's reference of
-- another item, never binding, whose cost is recorded even where it would
-- refuse: -1 iff the group commits, -(j + 1) iff counter j of the group was
-- incremented and is within its limit. Its count is what it held before.
--
-- Returns, per group in order: for a compact group its counters' values
-- after; for any other, time (µs; 0 for a group of the original's counters
-- alone, which reads no time) and committed (0/1), then per item: for
-- "oc" its value after; otherwise code (1 allow, 0 deny, 2 exceeds
-- capacity), remaining, retry (µs), reset (µs), count.

local call = redis.call
-- Redis's TIME of this call in µs (0 until a general group reads it).
local now = 0

-- A counter the increment just created expires after its `ttl` (s) plus a
-- uniform draw from 0 .. jitter - 1 (EXPIRATION_JITTER_MAX_SECONDS), drawn
-- here rather than by the caller so that one window's counters share
-- their arguments. Lua's generator is seeded once per call from TIME: a
-- server that reseeds it on every script call (before Redis 7) would
-- otherwise draw the same sequence in each.
local seeded = false
local function created(key, ttl, jitter)
  jitter = tonumber(jitter)
  if jitter > 0 then
    if not seeded then
      local t = call('TIME')
      math.randomseed(tonumber(t[1]) % 2000 * 1000000 + tonumber(t[2]))
      seeded = true
    end
    ttl = tonumber(ttl) + math.random(0, jitter - 1)
  end
  call('EXPIRE', key, ttl)
end

-- The general path: every kind of item, every mode. Built on the first
-- group that needs it, so that a call of the original's counters alone
-- creates none of its closures (the script body runs on every call, and
-- makes only its two top-level functions, `created` and this one).
local function build_general()
  -- Redis's TIME in µs, read once per call and only by a group that holds
  -- more than the original's counters (those name their window in the key).
  local function read_time()
    if now == 0 then
      local t = call('TIME')
      now = tonumber(t[1]) * 1000000 + tonumber(t[2])
    end
  end
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

  -- The original's counter: INCRBY, and the TTL when this creates the key.
  local function count(key, hits, ttl, jitter)
    local v = call('INCRBY', key, hits)
    if v == hits then created(key, ttl, jitter) end
    return v
  end

  -- Gives `cost` taken at `tc` back to an item's key.
  local function refund(kind, key, limit, period, cost, tc, nonce)
    if kind == 'tb' then
      local tat = tonumber(call('GET', key))
      if tat then
        tat = tat - ceil_div(cost * period, limit)
        if tat <= now then call('DEL', key)
        else call('SET', key, string.format('%d', tat), 'KEEPTTL') end
      end
    elseif kind == 'sw' or kind == 'fw' then
      local k, a, b = parse3(call('GET', key))
      local kc = floor(tc / period)
      if k == kc then a = math.max(a - cost, 0)
      elseif k == kc + 1 and kind == 'sw' then b = math.max(b - cost, 0) end
      if k then call('SET', key, string.format('%d:%d:%d', k, a, b), 'KEEPTTL') end
    elseif kind == 'ow' then
      if call('EXISTS', key) == 1 then call('DECRBY', key, cost) end
    elseif kind == 'sl' or kind == 'cc' then
      for j = 1, cost do
        call('ZREM', key, string.format('%d:%s:%d', tc, nonce, j))
      end
    end
  end

  -- Gives `cost` back to what counts now on an item's key (flag 2).
  local function give_back(kind, key, limit, period, cost)
    if cost <= 0 then return end
    if kind == 'oc' or kind == 'ow' then
      local v = tonumber(call('GET', key))
      if v then call('SET', key, string.format('%d', math.max(v - cost, 0)), 'KEEPTTL') end
    elseif kind == 'sl' or kind == 'cc' then
      call('ZREMRANGEBYSCORE', key, '-inf', now - period)
      -- One member per unit of cost: a log's newest, a slot's oldest.
      if kind == 'sl' then call('ZPOPMAX', key, cost) else call('ZPOPMIN', key, cost) end
    else
      refund(kind, key, limit, period, cost, now, '')
    end
  end

  -- One group: its items are ARGV[base + 1 ..] and KT[key_at + 1 ..].
  local function run_group(mode, nonce, tc, n, key_at, base, out)
    -- A give-back's cost is given back first; it is then decided as a read.
    local function item(i)
      local o = base + (i - 1) * 6
      local flag = tonumber(ARGV[o + 6])
      local cost = tonumber(ARGV[o + 5])
      if flag == 2 then cost = 0 end
      return ARGV[o + 1], tonumber(ARGV[o + 2]), tonumber(ARGV[o + 3]),
        tonumber(ARGV[o + 4]), cost, flag
    end

    local counting = mode == 'commit' or mode == 'stop' or mode == 'decide'
    for i = 1, n do
      if ARGV[base + (i - 1) * 6 + 1] ~= 'oc' then read_time() break end
    end
    for i = 1, n do
      local o = base + (i - 1) * 6
      if ARGV[o + 6] == '2' then
        give_back(ARGV[o + 1], KT[key_at + i], tonumber(ARGV[o + 2]),
          tonumber(ARGV[o + 3]), tonumber(ARGV[o + 5]))
      end
    end
    if mode == 'refund' then
      for i = 1, n do
        local kind, limit, period, _, cost = item(i)
        if kind ~= 'oc' then refund(kind, KT[key_at + i], limit, period, cost, tc, nonce) end
      end
    end

    -- STOP: whether each counter would pass its limit.
    local over, any = {}, false
    if mode == 'stop' then
      for i = 1, n do
        local kind, limit, _, _, cost, flag = item(i)
        if kind == 'oc' and flag ~= 2 then
          over[i] = (tonumber(call('GET', KT[key_at + i])) or 0) + cost > limit
          any = any or over[i]
        end
      end
    end

    -- Decide every item; `pending[key]` holds what the group would write, so
    -- that items on one key see the ones before them.
    local pending = {}
    local first = #out + 1
    out[first] = now
    out[first + 1] = 0
    local writes = {}
    local all = true
    -- Per counter of the group: whether it was incremented and is within
    -- its limit (what its references follow).
    local taken = {}

    for i = 1, n do
      local kind, limit, period, burst, cost, flag = item(i)
      local key = KT[key_at + i]
      local binding, record = flag == 1, flag < 0
      local code, remaining, retry, reset, held = 1, 0, 0, 0, 0
      local p = pending[key]
      local write

      if kind == 'oc' then
        local v
        if not counting or flag == 2 then v = tonumber(call('GET', key)) or 0
        else
          local hits = cost
          if any and not over[i] then hits = 0 end
          v = count(key, hits, period, burst)
          taken[i] = hits > 0 and v <= limit
        end
        if binding and v > limit then all = false end
        out[#out + 1] = v

      else
        if kind == 'tb' then
          -- GCRA; TAT in µs: admit iff (TAT - now)+ <= floor((burst - cost) * T).
          local tat = p and p.tat or tonumber(call('GET', key)) or now
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
              write = function()
                call('SET', key, string.format('%d', new_tat), 'PX', ms(new_tat - now))
              end
            end
            if not fits then code, remaining, retry, reset = 0, 0, debt - tolerance, debt end
          end

        elseif kind == 'sw' then
          local w = period
          local k_now = floor(now / w)
          local k, cur, prev
          if p then k, cur, prev = p.k, p.cur, p.prev
          else k, cur, prev = parse3(call('GET', key)) end
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
              write = function()
                call('SET', key, string.format('%d:%d:%d', s, c, pv), 'PX', ms(r))
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
          -- fw: "k:count:0" with the window index k; ow: the original's
          -- integer counter on a key that already names its window.
          local k, c
          if p then k, c = p.k, p.count
          elseif kind == 'fw' then k, c = parse3(call('GET', key))
          else k, c = 0, tonumber(call('GET', key)) or 0 end
          local w = period
          local start = kind == 'fw' and floor(now / w) or 0
          if kind == 'fw' and (not k or k < start) then k, c = start, 0 end
          if kind == 'fw' then start = k end
          local until_end = kind == 'fw' and (start + 1) * w - now or 0
          held = c
          if cost > limit then code, reset = 2, (c == 0) and 0 or until_end
          elseif c + cost <= limit then
            remaining = limit - c - cost
            reset = (c + cost == 0) and 0 or until_end
            if cost > 0 then
              local nc = c + cost
              pending[key] = {k = k, count = nc}
              if kind == 'fw' then
                write = function()
                  call('SET', key, string.format('%d:%d:0', k, nc), 'PX', ms(until_end))
                end
              else
                write = function() count(key, cost, period, burst) end
              end
            end
          else code, retry, reset = 0, until_end, until_end end

        elseif kind == 'sl' or kind == 'cc' then
          -- One member per unit of cost, scored by its time; keep (now - w, now].
          -- An in-flight limit's slots are the same log over max_duration.
          local w = period
          if not p then
            call('ZREMRANGEBYSCORE', key, '-inf', now - w)
            p = {used = call('ZCARD', key), added = 0}
            pending[key] = p
          end
          local used = p.used + p.added
          local function drained()
            if p.added > 0 then return w end
            local newest = call('ZRANGE', key, -1, -1, 'WITHSCORES')
            if newest[2] then return math.max(tonumber(newest[2]) + w - now, 0) end
            return 0
          end
          if record then held = used end
          if cost > limit then code, reset = 2, drained()
          elseif used + cost <= limit or record then
            if used + cost > limit then code = 0 end
            remaining = math.max(limit - used - cost, 0)
            if cost > 0 then
              local from = p.added
              p.added = p.added + cost
              write = function()
                local args = {}
                for j = from + 1, from + cost do
                  args[#args + 1] = now
                  args[#args + 1] = string.format('%d:%s:%d', now, nonce, j)
                end
                call('ZADD', key, unpack(args))
                call('PEXPIRE', key, ms(w))
              end
            end
            reset = drained()
          else
            -- The (used + cost - limit)-th oldest entry must leave first.
            local need = used + cost - limit
            local at
            if need <= p.used then
              local e = call('ZRANGE', key, need - 1, need - 1, 'WITHSCORES')
              at = tonumber(e[2]) + w
            else at = now + w end
            code, retry, reset = 0, math.max(at - now, 1), drained()
          end
        end

        local subject = -flag - 1
        if record and subject > 0 then
          -- A counter's reference: recorded now iff the counter took; the
          -- next item on its key reads what is stored.
          if write and taken[subject] then write() end
          pending[key] = nil
        elseif write and counting and mode ~= 'decide' then
          writes[#writes + 1] = write
        end
        if code ~= 1 and binding then all = false end
        out[#out + 1] = code
        out[#out + 1] = remaining
        out[#out + 1] = retry
        out[#out + 1] = reset
        out[#out + 1] = held
      end
    end

    -- Commit all or nothing.
    if all and (mode == 'commit' or mode == 'stop') then
      for _, w in ipairs(writes) do w() end
      out[first + 1] = 1
    end
  end
  return run_group
end

-- Groups in order. A group of the original's counters alone, counted
-- without STOP, comes in a compact layout: "count-same", n, then the one
-- cost, TTL (s) and jitter bound (s) of all n counters; or "count", n,
-- then per counter its cost, TTL and jitter bound. It answers each
-- counter's value after and nothing else
-- (the caller, which knows the limits, decides from the values). It is the
-- common case and makes no closure or table of its own and formats no
-- number (the cost goes to INCRBY as the string it came as); Redis spends
-- its time here.
local out = {}
local run_group
for _ = 1, tonumber(ARGV[at]) do
  local mode = ARGV[at + 1]
  if mode == 'count-same' then
    local n, hits = tonumber(ARGV[at + 2]), ARGV[at + 3]
    local new = tonumber(hits)
    local first = #out
    for i = 1, n do
      local key = KT[key_at + i]
      local v = call('INCRBY', key, hits)
      if v == new then created(key, ARGV[at + 4], ARGV[at + 5]) end
      out[first + i] = v
    end
    key_at = key_at + n
    at = at + 5
  elseif mode == 'count' then
    local n = tonumber(ARGV[at + 2])
    local first = #out
    for i = 1, n do
      local o = at + 3 * i
      local key, hits = KT[key_at + i], ARGV[o]
      local v = call('INCRBY', key, hits)
      if v == tonumber(hits) then created(key, ARGV[o + 1], ARGV[o + 2]) end
      out[first + i] = v
    end
    key_at = key_at + n
    at = at + 2 + 3 * n
  else
    run_group = run_group or build_general()
    local n = tonumber(ARGV[at + 4])
    run_group(mode, ARGV[at + 2], tonumber(ARGV[at + 3]), n, key_at, at + 4, out)
    key_at = key_at + n
    at = at + 4 + 6 * n
  end
end
return out
