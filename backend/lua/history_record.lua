-- Adds one action's counts to one history step and raises its last-seen time.
-- KEYS[1]: the step's hash (fields a l d c p f: allowed, leased, denied, cached_denied,
-- passed_unchecked, failed). KEYS[2]: the action's last-seen time (ms, a string).
-- ARGV[1]: the step's TTL (ms). ARGV[2]: the last-seen TTL (ms). ARGV[3]: last seen (ms, 0 = not
-- in this record). ARGV[4..9]: the six counts, in field order.
local fields = {'a', 'l', 'd', 'c', 'p', 'f'}
local wrote = false
for i = 1, 6 do
  local n = ARGV[3 + i]
  if n ~= '0' then
    redis.call('HINCRBY', KEYS[1], fields[i], n)
    wrote = true
  end
end
if wrote then
  redis.call('PEXPIRE', KEYS[1], ARGV[1])
end
local seen = tonumber(ARGV[3])
if seen > 0 then
  local held = tonumber(redis.call('GET', KEYS[2]) or '0') or 0
  if seen > held then
    redis.call('SET', KEYS[2], ARGV[3], 'PX', ARGV[2])
  else
    redis.call('PEXPIRE', KEYS[2], ARGV[2])
  end
end
return 1
