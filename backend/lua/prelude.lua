-- sluice prelude, prepended (in Rust, at load time) to every algorithm script.
--
-- Lua 5.1 numbers are IEEE doubles: integers are exact only below 2^53. Nanoseconds since the
-- epoch (~1.8e18) are not, so the scripts never hold an absolute time in a number. "Now" is kept
-- as whole seconds (NOW_S) plus nanoseconds within the second (NOW_N); every stored absolute
-- time (a decimal ns string) is turned into a time RELATIVE to now, which sluice's limits
-- (core/src/limits.rs: 90-day horizon, capacity x window_ms) keep far below 2^53.
-- gcra is the exception: cl.throttle takes redis-cell's spans up to 2^63 ns, so gcra.lua keeps
-- every time and span as an exact (seconds, nanoseconds) pair instead (see its header).
--
-- ARGV[1]: "now" in ns as a decimal string (tests), or "" to use Redis TIME (production).
-- ARGV[2]: quantity. ARGV[3]: TTL in ms for every write. ARGV[4], ARGV[5]: algorithm parameters.
-- ARGV[6]: lease max, "0" for no lease (sluice_core::leased): an allowed request of q >= 1 also
-- debits k = min(max, floor(left / 2)) more units in the same call, left being what the key has
-- after q, and the reply's 9th value is k. gcra takes two more (ARGV[7], ARGV[8]: see gcra.lua).

local TWO53 = 9007199254740992
-- Seconds beyond which a stored time is clamped (104 days, more than the 90-day horizon), so
-- that every relative value stays below 2^53 in magnitude.
local CLAMP_S = 9000000

-- Splits a decimal ns string into (seconds, ns within the second); nil when not all digits.
local function split_ns(text)
  if type(text) ~= 'string' or not string.find(text, '^%d+$') then
    return nil
  end
  local len = string.len(text)
  if len > 9 then
    return tonumber(string.sub(text, 1, len - 9)), tonumber(string.sub(text, len - 8))
  end
  return 0, tonumber(text)
end

local NOW_S, NOW_N
if ARGV[1] == nil or ARGV[1] == '' then
  local t = redis.call('TIME')
  NOW_S = tonumber(t[1])
  NOW_N = tonumber(t[2]) * 1000
else
  NOW_S, NOW_N = split_ns(ARGV[1])
  if NOW_S == nil then
    return redis.error_reply('ERR sluice: "now" must be decimal nanoseconds')
  end
end

-- Exact floor(x / y) for integers x and y > 0 below 2^53: the float quotient may round the
-- wrong way near 2^53, so correct it by one in either direction.
local function idiv(x, y)
  local q = math.floor(x / y)
  if q * y > x then
    q = q - 1
  elseif (q + 1) * y <= x then
    q = q + 1
  end
  return q
end

-- Aborts the script with an error the Rust side maps to StoreError::WrongType.
local function corrupt(what)
  error({ err = 'WRONGTYPE sluice: key ' .. KEYS[1] .. ' holds ' .. what })
end

-- A stored integer field (level, tokens, count, ...), which must be all digits.
local function int(text)
  if type(text) ~= 'string' or not string.find(text, '^%d+$') then
    corrupt('a non-integer field')
  end
  return tonumber(text)
end

-- A stored absolute time (decimal ns) as ns relative to now, clamped to +-2^53.
local function rel(text)
  local s, n = split_ns(text)
  if s == nil then
    corrupt('a non-numeric time')
  end
  local ds = s - NOW_S
  if ds < -CLAMP_S then
    return -TWO53
  end
  if ds > CLAMP_S then
    return TWO53
  end
  return ds * 1000000000 + (n - NOW_N)
end

-- A relative time (ns, not before the epoch) back to an absolute decimal ns string.
local function abs(r)
  local total = NOW_N + r
  local q = idiv(total, 1000000000)
  local s = NOW_S + q
  local n = total - q * 1000000000
  if s <= 0 then
    return string.format('%d', s * 1000000000 + n)
  end
  return string.format('%d%09d', s, n)
end

-- An integer (below 2^53) as a decimal string; tostring would print 1e+15 style.
local function fmt(x)
  return string.format('%d', x)
end

local QUANTITY = tonumber(ARGV[2])
local LEASE_MAX = tonumber(ARGV[6]) or 0

-- Units to grant beyond a request that leaves `left` units (an integer below 2^53): never more
-- than the lease's max, never more than half of what is left (sluice_core::lease::grant_units).
local function grant(left)
  return math.min(LEASE_MAX, math.floor(left / 2))
end
local TTL_MS = ARGV[3]

-- fixed_window's window holding t_ms (ms since the epoch): (stored index, end in ms). `spec` is
-- ARGV[4]: a window length W in ms (index floor(t / W), windows [i W, (i + 1) W)), a calendar
-- "<day|week|month>:<minutes east of UTC>" (sluice_core::calendar, the same arithmetic), or a
-- named zone's calendar as the boundaries the backend computed in core around its own clock,
-- "bounds:<a>,<b>,<c>,<d>" (Calendar::script_arg: Lua cannot read a tz database), windows
-- [a, b), [b, c), [c, d). A calendar's index is the window's start in ms (kept in the field
-- window_field names). Twin of WindowParams::bounds.
local DAY_MS = 86400000
local function day_of_month(days)
  local z = days + 719468
  local era = math.floor(z / 146097)
  local doe = z - era * 146097
  local yoe = math.floor((doe - math.floor(doe / 1460) + math.floor(doe / 36524)
    - math.floor(doe / 146096)) / 365)
  local doy = doe - (365 * yoe + math.floor(yoe / 4) - math.floor(yoe / 100))
  local mp = math.floor((5 * doy + 2) / 153)
  return doy - math.floor((153 * mp + 2) / 5) + 1
end
-- The window of a "bounds:" list holding t_ms, or nil when the list does not reach t_ms.
local function listed_window(list, t_ms)
  local b = {}
  for x in string.gmatch(list, '%-?%d+') do
    b[#b + 1] = tonumber(x)
  end
  for i = 1, #b - 1 do
    if b[i] <= t_ms and t_ms < b[i + 1] then
      return b[i], b[i + 1]
    end
  end
  return nil
end
local function window_of(spec, t_ms)
  local W = tonumber(spec)
  if W then
    local i = idiv(t_ms, W)
    return i, (i + 1) * W
  end
  local list = string.match(spec, '^bounds:(.*)$')
  if list then
    local s, e = listed_window(list, t_ms)
    if s == nil then
      -- Never a guess: the backend's clock and Redis TIME (or a stored window) are more than a
      -- window apart. The store answers it as a script error naming fixed_window (a 500).
      error({ err = 'ERR sluice: calendar boundaries ' .. list .. ' (from the backend clock) do not hold '
        .. fmt(t_ms) .. ' ms (Redis TIME or the stored window): clocks more than a window apart' })
    end
    return s, e
  end
  local unit, off = string.match(spec, '^(%a+):(%-?%d+)$')
  if unit == nil then
    error({ err = 'ERR sluice: bad window ' .. tostring(spec) })
  end
  local off_ms = tonumber(off) * 60000
  local days = math.floor((t_ms + off_ms) / DAY_MS)
  local first, next = days, days + 1
  if unit == 'week' then
    first = days - (days + 3) % 7
    next = first + 7
  elseif unit == 'month' then
    first = days - (day_of_month(days) - 1)
    local later = first + 31
    next = later - (day_of_month(later) - 1)
  elseif unit ~= 'day' then
    error({ err = 'ERR sluice: bad calendar unit ' .. unit })
  end
  return first * DAY_MS - off_ms, next * DAY_MS - off_ms
end
-- The hash field fixed_window keeps the index in: 'start' for a duration, 'cstart' for a
-- calendar (a start in ms, not comparable with a duration's index).
local function window_field(spec)
  if tonumber(spec) then
    return 'start'
  end
  return 'cstart'
end
-- Whether t_ms lies in the window that starts at `start` (commit.lua: was the reservation made in
-- the current window?). A time a "bounds:" list does not reach is in none of its windows, so not
-- in that one (the current window is always in the list).
local function window_holds(spec, t_ms, start)
  local list = string.match(spec, '^bounds:(.*)$')
  if list then
    return (listed_window(list, t_ms)) == start
  end
  return (window_of(spec, t_ms)) == start
end
-- The end (ms) of the window whose index is `index`.
local function window_end(spec, index)
  local W = tonumber(spec)
  if W then
    return (index + 1) * W
  end
  local _, e = window_of(spec, index)
  return e
end
