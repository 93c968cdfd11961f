-- leaky_bucket: KEYS[1] is a hash {level (ns of drain time), last (absolute ns)}.
-- ARGV[4] interval T (ns), ARGV[5] capacity. Twin of core/src/algorithms/leaky_bucket.rs.
local T = tonumber(ARGV[4])
local cap = tonumber(ARGV[5])
local tol = T * cap
local q = QUANTITY

local current, last = read_leaky()
-- After a clock step back the level is as it was at `last`: every wait starts there.
local catch_up = math.max(0, last)

if q <= cap then
  -- current + need may pass 2^53 (2 x tolerance): compare against the room instead.
  local need = T * q
  if need <= tol - current then
    local after = current + need
    -- A lease: k more units in the same step, from what is left after q.
    local k = 0
    if q > 0 then
      k = grant(idiv(tol - after, T))
      if T * k > tol - after then
        k = 0 -- never for a state this script wrote (see sluice_core::leased)
      end
      after = after + T * k
    end
    if q > 0 then
      redis.call('HSET', KEYS[1], 'level', fmt(after), 'last', abs(math.max(0, last)))
      redis.call('PEXPIRE', KEYS[1], TTL_MS)
    end
    return { 1, idiv(tol - after, T), -1, meter_reset(after, catch_up), after, T, 0, 0, k }
  end
  return { 0, idiv(math.max(tol - current, 0), T), need - (tol - current) + catch_up, meter_reset(current, catch_up), current, T, 0, 0, 0 }
end
return { 0, idiv(math.max(tol - current, 0), T), -1, meter_reset(current, catch_up), current, T, 0, 0, 0 }
