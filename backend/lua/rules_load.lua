-- Reads every rule and the version in one atomic step.
-- KEYS[1]: rules hash: action -> rule JSON, and the version in the field '#version' (no action
-- can be named so), so that losing the hash (a stray DEL, eviction) loses the version with it and
-- every replica notices.
-- KEYS[2]: the separate version counter of older sluice releases (same slot). If it exists it is
-- migrated: its value moves into the hash (when the hash exists and has no version yet), then the
-- key is deleted. A hash that is gone while that key remains counts as lost (version nil).
-- Returns { version or false, { field, value, ... } } (the '#version' field included).
local version = redis.call('HGET', KEYS[1], '#version')
local legacy = redis.call('GET', KEYS[2])
if legacy then
  if not version and redis.call('EXISTS', KEYS[1]) == 1 then
    redis.call('HSET', KEYS[1], '#version', legacy)
    version = legacy
  end
  redis.call('DEL', KEYS[2])
end
return { version, redis.call('HGETALL', KEYS[1]) }
