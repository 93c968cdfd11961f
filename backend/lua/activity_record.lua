-- Records recent activity of one action: KEYS[1] a zset key -> last seen (ms), KEYS[2] a hash of
-- counts ("a:" .. key allowed, "d:" .. key denied). Keeps the newest ARGV[1] keys; both keys
-- expire after ARGV[2] ms without activity. Then groups of 4: key, last_seen_ms, allowed, denied.
local keep = tonumber(ARGV[1])
for i = 3, #ARGV, 4 do
  local member = ARGV[i]
  redis.call('ZADD', KEYS[1], 'GT', ARGV[i + 1], member)
  if ARGV[i + 2] ~= '0' then
    redis.call('HINCRBY', KEYS[2], 'a:' .. member, ARGV[i + 2])
  end
  if ARGV[i + 3] ~= '0' then
    redis.call('HINCRBY', KEYS[2], 'd:' .. member, ARGV[i + 3])
  end
end
local n = redis.call('ZCARD', KEYS[1])
if n > keep then
  local old = redis.call('ZRANGE', KEYS[1], 0, n - keep - 1)
  for _, member in ipairs(old) do
    redis.call('HDEL', KEYS[2], 'a:' .. member, 'd:' .. member)
  end
  redis.call('ZREMRANGEBYRANK', KEYS[1], 0, n - keep - 1)
end
redis.call('PEXPIRE', KEYS[1], ARGV[2])
redis.call('PEXPIRE', KEYS[2], ARGV[2])
return n
