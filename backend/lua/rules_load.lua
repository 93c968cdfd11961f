-- Reads every rule and the version in one atomic step.
-- KEYS[1]: rules hash. KEYS[2]: version counter. Returns { version or false, {action, json, ...} }.
local version = redis.call('GET', KEYS[2])
return { version, redis.call('HGETALL', KEYS[1]) }
