-- Reads every rule, every per-key override and the version in one atomic step.
-- KEYS[1]: rules hash: action -> rule JSON, and the version in the field '#version' (no action
-- can be named so), so that losing the hash (a stray DEL, eviction) loses the version with it and
-- every replica notices.
-- KEYS[2]: the separate version counter of older sluice releases (same slot). If it exists it is
-- migrated: its value moves into the hash (when the hash exists and has no version yet), then the
-- key is deleted. A hash that is gone while that key remains counts as lost (version nil).
-- The overrides of an action live in the hash KEYS[1] .. ':overrides:' .. action (same slot: it
-- shares the '{<prefix>:rules}' tag), key -> rule JSON.
-- Returns { version or false, { field, value, ... } (the '#version' field included),
--           { action, key, rule JSON, ... } }.
local version = redis.call('HGET', KEYS[1], '#version')
local legacy = redis.call('GET', KEYS[2])
if legacy then
  if not version and redis.call('EXISTS', KEYS[1]) == 1 then
    redis.call('HSET', KEYS[1], '#version', legacy)
    version = legacy
  end
  redis.call('DEL', KEYS[2])
end
local rules = redis.call('HGETALL', KEYS[1])
local overrides = {}
for i = 1, #rules, 2 do
  local action = rules[i]
  if action ~= '#version' then
    local flat = redis.call('HGETALL', KEYS[1] .. ':overrides:' .. action)
    for j = 1, #flat, 2 do
      overrides[#overrides + 1] = action
      overrides[#overrides + 1] = flat[j]
      overrides[#overrides + 1] = flat[j + 1]
    end
  end
end
return { version, rules, overrides }
