-- Adds one action's counts to one history step and raises its last-seen time.
-- KEYS[1]: the hash of the step's 10-minute block: field = the step's index in the block (0-59),
-- value = its six counts "a l d c p f" (allowed, leased, denied, cached_denied,
-- passed_unchecked, failed), space-separated. One small hash per block (60 fields, Redis's compact
-- encoding) rather than one key per step: reading an hour is 7 HGETALLs, not 360 lookups.
-- KEYS[2]: the action's last-seen time (ms, a string).
-- ARGV[1]: the block's TTL (ms). ARGV[2]: the last-seen TTL (ms). ARGV[3]: last seen (ms, 0 =
-- not in this record). ARGV[4]: the step's index. ARGV[5..10]: the six counts, in field order.
-- For a filter report with an identity, also KEYS[3]: the highest seq applied for (action,
-- reporter), ARGV[11]: the report's seq, ARGV[12]: the mark's TTL (ms). Then nothing is added
-- unless ARGV[11] is above the mark, and the mark is raised in this same step (one slot: KEYS[3]
-- shares the action's hash tag), so every copy of a report after the first, on any replica,
-- adds nothing. Returns 1 when applied, 0 for a copy.
if KEYS[3] then
  local held = tonumber(redis.call('GET', KEYS[3]) or '-1') or -1
  if tonumber(ARGV[11]) <= held then
    return 0
  end
  redis.call('SET', KEYS[3], ARGV[11], 'PX', ARGV[12])
end
local add = {}
local any = false
for i = 1, 6 do
  add[i] = tonumber(ARGV[4 + i])
  if add[i] ~= 0 then
    any = true
  end
end
if any then
  local held = redis.call('HGET', KEYS[1], ARGV[4])
  local sums = {0, 0, 0, 0, 0, 0}
  if held then
    local i = 1
    for n in string.gmatch(held, '%d+') do
      sums[i] = tonumber(n)
      i = i + 1
    end
  end
  local out = {}
  for i = 1, 6 do
    out[i] = string.format('%d', sums[i] + add[i])
  end
  redis.call('HSET', KEYS[1], ARGV[4], table.concat(out, ' '))
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
