-- rlqs_index: the index of keys holding RLQS share records (store/redis/rlqs.rs). KEYS[1]: a zset,
-- member = action .. "\n" .. key, score = when a replica last synced it (ms).
-- ARGV: [1] now ms ('' = Redis TIME), [2] stale ms, [3] limit, [4] keep ms (the zset's TTL),
-- [5] n, then n members held (scored now), then members found empty (removed unless synced
-- within stale ms). Returns {now, up to limit members not synced for stale ms}.
local now = now_ms(ARGV[1])
local cutoff = now - tonumber(ARGV[2])
local n = tonumber(ARGV[5])
for i = 6, 5 + n do
  redis.call('ZADD', KEYS[1], now, ARGV[i])
end
for i = 6 + n, #ARGV do
  local score = redis.call('ZSCORE', KEYS[1], ARGV[i])
  if score and tonumber(score) <= cutoff then
    redis.call('ZREM', KEYS[1], ARGV[i])
  end
end
if n > 0 then
  redis.call('PEXPIRE', KEYS[1], ARGV[4])
end
local reply = {now}
local stale = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', cutoff, 'LIMIT', 0, tonumber(ARGV[3]))
for _, m in ipairs(stale) do
  table.insert(reply, m)
end
return reply
