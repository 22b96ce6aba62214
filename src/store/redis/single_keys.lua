-- One Redis node: the keys are KEYS, the layout of limits.lua starts at
-- ARGV[1].
local KT, key_at, at = KEYS, 0, 1
