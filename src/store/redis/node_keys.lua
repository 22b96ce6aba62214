#!lua flags=allow-cross-slot-keys
-- Redis Cluster, one call per primary: a call may declare keys of one hash
-- slot only, and a request's keys on one primary sit on many. So KEYS[1]
-- alone is declared (it routes the call to its primary); ARGV[1] is the
-- number of keys n, ARGV[2 .. n + 1] every key (the first again), and the
-- layout of limits.lua follows from ARGV[n + 2]. Read in place, not
-- copied: `key_at` and `at` start past them. The flag lets the script
-- touch the keys of every slot this node serves; a key of a slot it does
-- not serve (routes changing under a failover or a resharding) fails the
-- call.
local KT, key_at, at = ARGV, 1, tonumber(ARGV[1]) + 2
