-- leaky_bucket: KEYS[1] is a hash {level (ns of drain time), last (absolute ns)}.
-- ARGV[4] interval T (ns), ARGV[5] capacity. Twin of core/src/algorithms/leaky_bucket.rs.
local T = tonumber(ARGV[4])
local cap = tonumber(ARGV[5])
local tol = T * cap
local q = QUANTITY

local h = redis.call('HMGET', KEYS[1], 'level', 'last')
local level, last = 0, 0
if h[1] then
  level = int(h[1])
  last = rel(h[2])
else
  last = -TWO53 -- fresh: last = the epoch, long ago
end
local current = math.max(0, level - math.max(0, -last))

if q <= cap then
  local after = current + T * q
  if after <= tol then
    if q > 0 then
      redis.call('HSET', KEYS[1], 'level', fmt(after), 'last', abs(math.max(0, last)))
      redis.call('PEXPIRE', KEYS[1], TTL_MS)
    end
    return { 1, idiv(tol - after, T), -1, after, after, T, 0, 0 }
  end
  return { 0, idiv(math.max(tol - current, 0), T), after - tol, current, current, T, 0, 0 }
end
return { 0, idiv(math.max(tol - current, 0), T), -1, current, current, T, 0, 0 }
