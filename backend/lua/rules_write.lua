-- Writes or deletes one rule and bumps the rules version in the same atomic step.
-- KEYS[1]: rules hash (action -> rule JSON). KEYS[2]: version counter (same slot).
-- ARGV[1]: "put" or "del". ARGV[2]: action. ARGV[3]: rule JSON (put only).
-- Returns the new version, or nil when deleting a rule that does not exist.
if ARGV[1] == 'put' then
  redis.call('HSET', KEYS[1], ARGV[2], ARGV[3])
  return redis.call('INCR', KEYS[2])
end
if redis.call('HDEL', KEYS[1], ARGV[2]) == 1 then
  return redis.call('INCR', KEYS[2])
end
return false
