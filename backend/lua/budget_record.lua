-- budget_record: records an allowed reservation as in flight in the key's budget record
-- (sluice_core::budget::BudgetRecord::record_reservation), called only for a throttle request that
-- carried a reservation_id, after its allowed decision.
-- KEYS[1]: the budget record's reservations in flight, `<state key>:inflight` (a hash
-- id -> 'units:recorded_at_ms'). KEYS[2]: the id's commit receipt, `<state key>:commit:<id>`
-- (both in the state's hash tag).
-- ARGV[1] now in ms ("" = Redis TIME), ARGV[2] the id, ARGV[3] units, ARGV[4] how long a
-- reservation counts (ms), ARGV[5] most in flight per key, ARGV[6] the hash's TTL (ms).
-- Reply: 1 recorded, 0 not (its commit already came, or the key lists the most live ones).
local now = now_ms(ARGV[1])
if redis.call('EXISTS', KEYS[2]) == 1 then
  return 0
end
local span = tonumber(ARGV[4])
local most = tonumber(ARGV[5])
if redis.call('HLEN', KEYS[1]) >= most and redis.call('HEXISTS', KEYS[1], ARGV[2]) == 0 then
  local all = redis.call('HGETALL', KEYS[1])
  for i = 1, #all, 2 do
    local at = tonumber(string.match(all[i + 1], ':(%d+)$'))
    if at == nil or at + span <= now then
      redis.call('HDEL', KEYS[1], all[i])
    end
  end
  if redis.call('HLEN', KEYS[1]) >= most then
    return 0
  end
end
redis.call('HSET', KEYS[1], ARGV[2], ARGV[3] .. ':' .. string.format('%d', now))
redis.call('PEXPIRE', KEYS[1], ARGV[6])
return 1
