#!lua flags=allow-cross-slot-keys
-- Redis Cluster, one call per primary: a call may declare keys of one hash
-- slot only, and a request's keys on one primary sit on many. So KEYS[1]
-- alone is declared (it routes the call to its primary); ARGV[1] is the
-- number of keys in all and ARGV[2 .. ARGV[1]] the keys after the first;
-- the layout of limits.lua follows. The flag lets the script touch the
-- keys of every slot this node serves; a key of a slot it does not serve
-- (routes changing under a failover or a resharding) fails the call.
local KEYS, ARGV = (function(keys, argv)
  local n = tonumber(argv[1])
  local k, a = { keys[1] }, {}
  for i = 2, n do k[i] = argv[i] end
  for i = n + 1, #argv do a[#a + 1] = argv[i] end
  return k, a
end)(KEYS, ARGV)
