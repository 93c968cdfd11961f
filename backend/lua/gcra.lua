-- gcra: KEYS[1] is a string holding the TAT (absolute ns). ARGV[4] interval T (ns), ARGV[5] capacity.
-- Twin of core/src/algorithms/gcra.rs (redis-cell's CL.THROTTLE maths).
local T = tonumber(ARGV[4])
local cap = tonumber(ARGV[5])
local tol = T * cap
local q = QUANTITY

local stored = redis.call('GET', KEYS[1])
local tat = 0 -- a fresh key: tat = now
if stored then
  tat = rel(stored)
end

if q <= cap then
  -- new_tat = base + increment may reach 2 x tolerance, past 2^53: compare and subtract so that
  -- no intermediate exceeds the tolerance (room may be negative after a clock step back).
  local base = math.max(0, tat)
  local increment = T * q
  local room = tol - base
  if increment <= room then
    local new_tat = base + increment
    if q > 0 then
      redis.call('SET', KEYS[1], abs(new_tat), 'PX', TTL_MS)
    end
    return { 1, idiv(tol - new_tat, T), -1, new_tat, new_tat, T, 0, 0 }
  end
  local ttl = math.max(tat, 0)
  return { 0, idiv(math.max(tol - ttl, 0), T), increment - room, ttl, ttl, T, 0, 0 }
end
-- More than the capacity can never pass: no retry.
local ttl = math.max(tat, 0)
return { 0, idiv(math.max(tol - ttl, 0), T), -1, ttl, ttl, T, 0, 0 }
