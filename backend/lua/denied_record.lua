-- Adds backend denials per key to one action's top-denied minute bucket: KEYS[1] a zset key ->
-- denials. ARGV[1]: keys kept (the least denied beyond it are dropped, so a spray of denied keys
-- cannot grow it). ARGV[2]: the bucket's TTL (ms). Then pairs: key, denials.
for i = 3, #ARGV, 2 do
  redis.call('ZINCRBY', KEYS[1], ARGV[i + 1], ARGV[i])
end
local keep = tonumber(ARGV[1])
local n = redis.call('ZCARD', KEYS[1])
if n > keep then
  redis.call('ZREMRANGEBYRANK', KEYS[1], 0, n - keep - 1)
end
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return n
