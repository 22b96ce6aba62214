-- The fixed-window decision; see scripts.rs for the contract.
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
