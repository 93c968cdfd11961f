-- sliding_window: KEYS[1] is a hash {index (current window since the epoch), current, previous}.
-- ARGV[4] window W (ms), ARGV[5] capacity. Twin of core/src/algorithms/sliding_window.rs: whole
-- milliseconds and integers, so every product (capacity x W) stays below 2^53.
local W = tonumber(ARGV[4])
local cap = tonumber(ARGV[5])
local q = QUANTITY

local index, elapsed, cur, prev = read_sliding_window(W)

local function first_fit_ms()
  if q > cap then
    return nil
  end
  local room = cap - (cur + q)
  if room >= 0 and prev > 0 then
    local e = math.max(W - idiv(room * W, prev), 0)
    if e < W then
      return e
    end
  end
  room = cap - q
  local e = 0
  if cur ~= 0 then
    e = math.max(W - idiv(room * W, cur), 0)
  end
  if e < W then
    return W + e
  end
  return 2 * W
end

-- Start of the current window relative to now, in ns.
local start_rel = (index * W - NOW_MS) * 1000000 - NOW_SUB_MS
local room = cap - (cur + q)
local weighted_prev_ceil = idiv(prev * (W - elapsed) + W - 1, W)
local allowed = 0
local retry = -1
local k = 0
if room >= 0 and prev * (W - elapsed) <= room * W then
  allowed = 1
  if q > 0 then
    -- A lease: k more units in the same step, from what is left after q.
    k = grant(math.max(room - weighted_prev_ceil, 0))
    if prev * (W - elapsed) > (room - k) * W then
      k = 0 -- never for a state this script wrote (see sluice_core::leased)
    end
    redis.call('HSET', KEYS[1], 'index', fmt(index), 'current', fmt(cur + q + k), 'previous', fmt(prev))
    redis.call('PEXPIRE', KEYS[1], TTL_MS)
  end
  cur = cur + q + k
else
  local fit = first_fit_ms()
  if fit then
    retry = math.max(start_rel + fit * 1000000, 0)
  end
end
local remaining = math.max(math.max(cap - cur, 0) - weighted_prev_ceil, 0)
local reset = 0
if cur > 0 then
  reset = math.max(start_rel + 2 * W * 1000000, 0)
elseif prev > 0 then
  reset = math.max(start_rel + W * 1000000, 0)
end
return { allowed, remaining, retry, reset, prev, W - elapsed, W, cur, k }
