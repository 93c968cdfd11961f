-- fixed_window: KEYS[1] is a hash {start (window index), count}; windows are clock-aligned:
-- index = floor(NOW_MS / W). A calendar window keeps its start in ms as `cstart` instead
-- (prelude's window_of), so a rule changed between the two never reads one as the other.
-- ARGV[4] window W (ms) or calendar, ARGV[5] capacity.
-- Twin of core/src/algorithms/fixed_window.rs.
local SPEC = ARGV[4]
local cap = tonumber(ARGV[5])
local q = QUANTITY

local FIELD, start, count = read_fixed_window(SPEC)
-- End of the window, relative to now: end_ms whole ms less NOW_SUB_MS ns (at least 1 ns: start is
-- at or after now's window). A 365-day window's end in ns passes 2^53, so end_rel (a double,
-- exact to the ns below 2^53 and only compared) is never returned: the reply carries end_text,
-- the same number as an exact decimal string (core/src/limits.rs, MAX_FIXED_WINDOW_SPAN_MS).
local end_ms = window_end(SPEC, start) - NOW_MS
local end_rel = end_ms * 1000000 - NOW_SUB_MS
local end_text
if NOW_SUB_MS == 0 then
  end_text = fmt(end_ms) .. '000000'
else
  end_text = fmt(end_ms - 1) .. string.format('%06d', 1000000 - NOW_SUB_MS)
end

if q <= math.max(cap - count, 0) then
  -- A lease: k more units in the same step; none with under 1 ms of the window left, since a
  -- grant ends with its window (its ttl, whole ms, is capped in Rust at the reset below).
  local k = 0
  if q > 0 and end_rel >= 1000000 then
    k = grant(cap - count - q)
  end
  local after = count + q + k
  if q > 0 then
    redis.call('HSET', KEYS[1], FIELD, fmt(start), 'count', fmt(after))
    redis.call('PEXPIRE', KEYS[1], TTL_MS)
  end
  local reset = 0
  if after > 0 then
    reset = end_text
  end
  return { 1, math.max(cap - after, 0), -1, reset, after, 0, 0, 0, k }
end
local retry = -1
if q <= cap then
  retry = end_text
end
local reset = 0
if count > 0 then
  reset = end_text
end
return { 0, math.max(cap - count, 0), retry, reset, count, 0, 0, 0, 0 }
