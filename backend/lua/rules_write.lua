-- Writes or deletes one rule and bumps the rules version in the same atomic step.
-- KEYS[1]: rules hash: action -> rule JSON, and the version counter in the field '#version'
-- (kept inside the hash so that losing the hash loses the version too: see rules_load.lua).
-- ARGV[1]: "put" or "del". ARGV[2]: action. ARGV[3]: rule JSON (put only).
-- Returns the new version, or nil when deleting a rule that does not exist.
local current = redis.call('HGET', KEYS[1], '#version')
if current and not string.match(current, '^%d+$') then
  return redis.error_reply('WRONGTYPE sluice: the rules version (field #version of ' .. KEYS[1]
    .. ') holds ' .. string.format('%q', string.sub(current, 1, 40)) .. ', not a whole number')
end
if ARGV[1] == 'put' then
  redis.call('HSET', KEYS[1], ARGV[2], ARGV[3])
  return redis.call('HINCRBY', KEYS[1], '#version', 1)
end
if redis.call('HDEL', KEYS[1], ARGV[2]) == 1 then
  return redis.call('HINCRBY', KEYS[1], '#version', 1)
end
return false
