-- One key's denials in each of some minute buckets of one action: KEYS[1..n] the buckets' zsets
-- (newest first, all in the action's slot), ARGV[1] the key. Returns one count per bucket, in
-- KEYS order, "0" where the bucket does not hold the key (never denied then, or trimmed as one
-- of the least denied of a spray).
local out = {}
for i = 1, #KEYS do
  local n = redis.call('ZSCORE', KEYS[i], ARGV[1])
  out[i] = n and string.format('%d', tonumber(n)) or '0'
end
return out
