-- budget_read: one key's cost-budget figures from its budget record
-- (sluice_core::budget::BudgetRecord::figures).
-- KEYS[1]: `<state key>:inflight` (id -> 'units:recorded_at_ms'), KEYS[2]: `<state key>:overshoot`
-- ('overshoot', 'debited', 'until' in ms; written by commit.lua).
-- ARGV[1] now in ms ("" = Redis TIME), ARGV[2] how long a reservation counts (ms).
-- Reply: {reserved in flight, reservations in flight, overshoot, debited, until (0: none)}.
local now = now_ms(ARGV[1])
local span = tonumber(ARGV[2])
local units, count = 0, 0
local all = redis.call('HGETALL', KEYS[1])
for i = 1, #all, 2 do
  local u, at = string.match(all[i + 1], '^(%d+):(%d+)$')
  if u and tonumber(at) + span > now then
    units = units + tonumber(u)
    count = count + 1
  end
end
local h = redis.call('HMGET', KEYS[2], 'overshoot', 'debited', 'until')
if h[3] and tonumber(h[3]) > now then
  return { units, count, tonumber(h[1]), tonumber(h[2]), tonumber(h[3]) }
end
return { units, count, 0, 0, 0 }
