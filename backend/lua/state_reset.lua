-- Resets one key under one action, as if it had never been seen: KEYS are its state keys, one
-- per algorithm (same slot: they share the '{<action>:<subject>}' tag). For each, in this one
-- atomic step: deletes the state and its budget record (`<state>:inflight`,
-- `<state>:overshoot`: sluice_core::budget), writes the commit receipt 'reset' for every
-- reservation the record listed in flight (`<state>:commit:<id>`: its commit changes nothing, see
-- commit.lua), and
-- remembers the reset's time in ms (`<state>:reset`: a commit of a reservation decided at or
-- before it changes nothing, sluice_core::budget::before_reset). These keys are named from the
-- state key, so they share its hash tag and its Cluster slot.
-- ARGV[1] now in ms ("" = Redis TIME), ARGV[2] how long the receipts are kept (ms).
-- Returns the 1-based indices of the state keys that existed.
local now = now_ms(ARGV[1])
local removed = {}
for i = 1, #KEYS do
  local state = KEYS[i]
  if redis.call('DEL', state) == 1 then
    removed[#removed + 1] = i
  end
  local inflight = state .. ':inflight'
  local ids = redis.call('HKEYS', inflight)
  for j = 1, #ids do
    redis.call('SET', state .. ':commit:' .. ids[j], 'reset', 'PX', ARGV[2])
  end
  redis.call('DEL', inflight, state .. ':overshoot')
  redis.call('SET', state .. ':reset', string.format('%d', now), 'PX', ARGV[2])
end
return removed
