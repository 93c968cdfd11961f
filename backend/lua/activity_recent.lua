-- The newest ARGV[1] keys of one action with their counts: flat {key, last_ms, allowed, denied, ...}.
-- KEYS[1]: the recent zset. KEYS[2]: the counts hash.
local out = {}
local rows = redis.call('ZREVRANGE', KEYS[1], 0, tonumber(ARGV[1]) - 1, 'WITHSCORES')
for i = 1, #rows, 2 do
  local member = rows[i]
  local counts = redis.call('HMGET', KEYS[2], 'a:' .. member, 'd:' .. member)
  out[#out + 1] = member
  out[#out + 1] = rows[i + 1]
  out[#out + 1] = counts[1] or '0'
  out[#out + 1] = counts[2] or '0'
end
return out
