-- token_bucket: KEYS[1] is a hash {tokens (ns of refill time), last (absolute ns)}; fresh = full.
-- ARGV[4] interval T (ns), ARGV[5] capacity. Twin of core/src/algorithms/token_bucket.rs.
local T = tonumber(ARGV[4])
local cap = tonumber(ARGV[5])
local tol = T * cap
local q = QUANTITY

local current, last = read_tokens(tol)
-- After a clock step back the tokens are as they were at `last`: every wait starts there.
local catch_up = math.max(0, last)

if q <= cap then
  local need = T * q
  if current >= need then
    local after = current - need
    -- A lease: k more units in the same step, from what is left after q.
    local k = 0
    if q > 0 then
      k = grant(idiv(after, T))
      if T * k > after then
        k = 0 -- never for a state this script wrote (see sluice_core::leased)
      end
      after = after - T * k
    end
    if q > 0 then
      redis.call('HSET', KEYS[1], 'tokens', fmt(after), 'last', abs(math.max(0, last)))
      redis.call('PEXPIRE', KEYS[1], TTL_MS)
    end
    return { 1, idiv(after, T), -1, meter_reset(tol - after, catch_up), tol - after + catch_up, T, 0, 0, k }
  end
  return { 0, idiv(current, T), need - current + catch_up, meter_reset(tol - current, catch_up), tol - current + catch_up, T, 0, 0, 0 }
end
-- The level counts the wait for `last` too (a commit's debt: commit.lua).
return { 0, idiv(current, T), -1, meter_reset(tol - current, catch_up), tol - current + catch_up, T, 0, 0, 0 }
