-- The index of touched actions: KEYS[1] a zset action -> last touched (ms). ARGV[1] the time,
-- ARGV[2] how many to keep (the most recently touched), ARGV[3] the key's TTL in ms, then the
-- actions. A time never goes back (GT adds new members and only raises the others); the key
-- expires as a whole only after ARGV[3] ms without any touch.
local at = ARGV[1]
for i = 4, #ARGV do
  redis.call('ZADD', KEYS[1], 'GT', at, ARGV[i])
end
local keep = tonumber(ARGV[2])
local n = redis.call('ZCARD', KEYS[1])
if n > keep then
  redis.call('ZREMRANGEBYRANK', KEYS[1], 0, n - keep - 1)
end
redis.call('PEXPIRE', KEYS[1], ARGV[3])
return n
