-- sliding_log: KEYS[1] is a list of admission times (absolute ns strings), oldest first, one per
-- admitted unit. ARGV[4] window W (ms), ARGV[5] capacity (<= 10,000).
-- Twin of core/src/algorithms/sliding_log.rs.
local W_NS = tonumber(ARGV[4]) * 1000000
local cap = tonumber(ARGV[5])
local q = QUANTITY
local key = KEYS[1]

local len, live_from = read_log(W_NS)
local live = len - live_from

if q <= math.max(cap - live, 0) and q > 0 then
  -- A lease: k more entries in the same step.
  local k = grant(cap - live - q)
  q = q + k
  local t = 0
  if live > 0 then
    t = math.max(0, log_at(len - 1))
  end
  if live_from > 0 then
    redis.call('LTRIM', key, live_from, -1)
  end
  log_append(abs(t), q)
  redis.call('PEXPIRE', key, TTL_MS)
  local count = live + q
  return { 1, math.max(cap - count, 0), -1, t + W_NS, count, 0, 0, 0, k }
end

local allowed = 0
if q <= math.max(cap - live, 0) then
  allowed = 1
end
local retry = -1
if allowed == 0 and q <= cap then
  -- The (live + q - cap)-th oldest live entry must expire first.
  local must = live + q - cap
  retry = math.max(log_at(live_from + must - 1) + W_NS, 0)
end
local reset = 0
if live > 0 then
  reset = math.max(log_at(len - 1) + W_NS, 0)
end
return { allowed, math.max(cap - live, 0), retry, reset, live, 0, 0, 0, 0 }
