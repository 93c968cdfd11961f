-- sluice prelude, prepended (in Rust, at load time) to every algorithm script and to commit.lua:
-- the clock, exact integer helpers, the calendar windows, and one state reader per algorithm
-- (at the end), so that a decision and a commit read a key's state the same way.
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

-- Now in whole milliseconds (the windows count in them) and the ns beyond that millisecond.
local NOW_MS = NOW_S * 1000 + idiv(NOW_N, 1000000)
local NOW_SUB_MS = NOW_N - idiv(NOW_N, 1000000) * 1000000

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

-- The state readers: KEYS[1] is the state as the algorithm's script keeps it (its header says
-- how); each reader returns what it means now, as core's decide and commit read it.

-- leaky_bucket: (level now in ns, `last` relative to now). Fresh: empty, `last` long ago.
local function read_leaky()
  local h = redis.call('HMGET', KEYS[1], 'level', 'last')
  if not h[1] then
    return 0, -TWO53
  end
  local level = int(h[1])
  local last = rel(h[2])
  return math.max(0, level - math.max(0, -last)), last
end

-- token_bucket with tolerance `tol` (T x capacity): (tokens now in ns, `last` relative to now).
-- Fresh: full.
local function read_tokens(tol)
  local h = redis.call('HMGET', KEYS[1], 'tokens', 'last')
  if not h[1] then
    return tol, -TWO53
  end
  local tokens = int(h[1])
  local last = rel(h[2])
  local elapsed = math.max(0, -last)
  -- tokens + elapsed may pass 2^53: compare against the room first.
  if elapsed >= tol - tokens then
    return tol, last
  end
  return tokens + elapsed, last
end

-- A meter's reset_after for a level of `l` ns: 0 when empty, else the level's drain plus
-- `catch_up`, the wait for a `last` that lies ahead (after a clock step back, or a commit's debt).
local function meter_reset(l, catch_up)
  if l > 0 then
    return l + catch_up
  end
  return 0
end

-- fixed_window of window spec `spec` (ARGV[4]) at now: (the hash field of its index, the current
-- window's index and count, the stored index and count). A stored window later than now's (another
-- clock ran ahead) stays current until its end; an earlier one counts 0.
local function read_fixed_window(spec)
  local field = window_field(spec)
  local h = redis.call('HMGET', KEYS[1], field, 'count')
  local s_start, s_count = 0, 0
  if h[1] then
    s_start = int(h[1])
    s_count = int(h[2])
  end
  local start = math.max((window_of(spec, NOW_MS)), s_start)
  local count = 0
  if start == s_start then
    count = s_count
  end
  return field, start, count, s_start, s_count
end

-- sliding_window of W ms at now: (the current window's index, the ms elapsed in it, its current
-- and previous counts, the stored index, current and previous).
local function read_sliding_window(W)
  local h = redis.call('HMGET', KEYS[1], 'index', 'current', 'previous')
  local s_index, s_cur, s_prev = 0, 0, 0
  if h[1] then
    s_index = int(h[1])
    s_cur = int(h[2])
    s_prev = int(h[3])
  end
  local now_index = idiv(NOW_MS, W)
  -- The clock stepped back (now before the stored window): stay at the start of the stored window.
  local index, elapsed = s_index, 0
  if now_index >= s_index then
    index = now_index
    elapsed = NOW_MS - now_index * W
  end
  local cur, prev = 0, 0
  if index == s_index then
    cur, prev = s_cur, s_prev
  elseif index - s_index == 1 then
    cur, prev = 0, s_cur
  end
  return index, elapsed, cur, prev, s_index, s_cur, s_prev
end

-- sliding_log: entry i of the list (an absolute ns string), relative to now.
local function log_at(i)
  return rel(redis.call('LINDEX', KEYS[1], i))
end
-- The first index in [lo, len) whose entry passes `test`, by binary search (entries are sorted,
-- so the ones that pass are a suffix).
local function log_first(lo, len, test)
  local hi = len
  while lo < hi do
    local mid = math.floor((lo + hi) / 2)
    if test(log_at(mid)) then
      hi = mid
    else
      lo = mid + 1
    end
  end
  return lo
end
-- sliding_log of a window of `w_ns` ns at now: (the list's length, the index of its first live
-- entry, one with t + W > now).
local function read_log(w_ns)
  local len = redis.call('LLEN', KEYS[1])
  return len, log_first(0, len, function(t) return t + w_ns > 0 end)
end
-- Appends `n` entries at `stamp` (absolute ns) to the log, 500 per RPUSH (unpack's stack).
local function log_append(stamp, n)
  local left = n
  while left > 0 do
    local m = math.min(left, 500)
    local batch = {}
    for i = 1, m do
      batch[i] = stamp
    end
    redis.call('RPUSH', KEYS[1], unpack(batch))
    left = left - m
  end
end
