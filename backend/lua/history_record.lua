-- Adds one action's counts to one history step and raises its last-seen time.
-- KEYS[1]: the hash of the step's 10-minute block: field = the step's index in the block (0-59),
-- value = its six counts "a l d c p f" (allowed, leased, denied, cached_denied,
-- passed_unchecked, failed), space-separated. One small hash per block (60 fields, Redis's compact
-- encoding) rather than one key per step: reading an hour is 7 HGETALLs, not 360 lookups.
-- KEYS[2]: the action's last-seen time (ms, a string).
-- ARGV[1]: the block's TTL (ms). ARGV[2]: the last-seen TTL (ms). ARGV[3]: last seen (ms, 0 =
-- not in this record). ARGV[4]: the step's index. ARGV[5..10]: the six counts, in field order,
-- each what to add less what to take back (a decision withdrawn: negative); no count goes below 0.
-- For a filter report with an identity, also KEYS[3]: the action's report seqs (a hash member ->
-- the highest seq applied) and KEYS[4]: when each was last applied (a zset member -> ms), both in
-- the action's hash tag (history::marks is the memory store's twin). ARGV[11]: the report's
-- seq, ARGV[12]: the marks' TTL (ms), ARGV[13]: the member (the reporter, or `<action>/<reporter>`
-- in the set actions without a rule share), ARGV[14]: now (ms), ARGV[15]: the most members
-- (MAX_REPORTERS_PER_ACTION), ARGV[16]: how long a record is kept whatever the bound
-- (REPORT_MARK_SETTLE_MS). Nothing is added unless ARGV[11] is above the member's live seq (one
-- applied within the TTL), and the mark is raised in this same step, so every copy of a report
-- after the first, on any replica, adds nothing. A new member of a full set first makes room:
-- members not applied within the TTL go, then the least recently applied one: dropped if it was
-- applied at least ARGV[16] ago, else shed (each counted apart). A new member is never refused:
-- minted ids kept young must not hold the bound against a real new reporter.
-- Returns {1, dropped, shed} when applied, {0, 0, 0} for a copy; without KEYS[3], 1.
local dropped = 0
local shed = 0
if KEYS[3] then
  local member = ARGV[13]
  local seq = tonumber(ARGV[11])
  local ttl = tonumber(ARGV[12])
  local now = tonumber(ARGV[14])
  local most = tonumber(ARGV[15])
  local held = redis.call('HGET', KEYS[3], member)
  local at = redis.call('ZSCORE', KEYS[4], member)
  if held and at and tonumber(at) + ttl > now and seq <= tonumber(held) then
    return { 0, 0, 0 }
  end
  if not at and redis.call('ZCARD', KEYS[4]) >= most then
    local expired = redis.call('ZRANGEBYSCORE', KEYS[4], '-inf', now - ttl)
    for i = 1, #expired, 500 do
      local batch = {}
      for j = i, math.min(i + 499, #expired) do
        batch[#batch + 1] = expired[j]
      end
      redis.call('ZREM', KEYS[4], unpack(batch))
      redis.call('HDEL', KEYS[3], unpack(batch))
    end
    if redis.call('ZCARD', KEYS[4]) >= most then
      local oldest = redis.call('ZRANGE', KEYS[4], 0, 0, 'WITHSCORES')
      redis.call('ZREM', KEYS[4], oldest[1])
      redis.call('HDEL', KEYS[3], oldest[1])
      if tonumber(oldest[2]) + tonumber(ARGV[16]) > now then
        shed = 1
      else
        dropped = 1
      end
    end
  end
  redis.call('HSET', KEYS[3], member, ARGV[11])
  redis.call('ZADD', KEYS[4], ARGV[14], member)
  redis.call('PEXPIRE', KEYS[3], ARGV[12])
  redis.call('PEXPIRE', KEYS[4], ARGV[12])
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
    out[i] = string.format('%d', math.max(0, sums[i] + add[i]))
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
if KEYS[3] then
  return { 1, dropped, shed }
end
return 1
