-- Removes one key's throttle state under one action: KEYS are its state keys, one per algorithm
-- (same slot: they share the '{<action>:<subject>}' tag). Returns the 1-based indices of the keys
-- that existed.
local removed = {}
for i = 1, #KEYS do
  if redis.call('DEL', KEYS[i]) == 1 then
    removed[#removed + 1] = i
  end
end
return removed
