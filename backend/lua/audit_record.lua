-- Adds one audit entry that goes with no rules change (a key reset) and trims the list.
-- KEYS[1]: the audit list (newest first). ARGV[1]: the entry's JSON. ARGV[2]: entries kept.
redis.call('LPUSH', KEYS[1], ARGV[1])
redis.call('LTRIM', KEYS[1], 0, tonumber(ARGV[2]) - 1)
return 1
