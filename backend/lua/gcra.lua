-- gcra: KEYS[1] is a string holding the TAT (absolute ns since the epoch, decimal).
-- ARGV[4] interval T (ns), ARGV[5] capacity, ARGV[6] lease max (prelude), ARGV[7] tolerance
-- T x capacity, ARGV[8] increment T x quantity: decimal strings, the products formed exactly in
-- Rust (scripts.rs).
-- Twin of core/src/algorithms/gcra.rs (redis-cell's CL.THROTTLE maths).
--
-- cl.throttle accepts what redis-cell accepts: tolerances and increments up to 2^63 - 1 ns
-- (292 years), so TATs up to ~2^64 ns. Doubles are exact only below 2^53, so this script holds
-- every time and span as a pair {s, n}: whole seconds and nanoseconds within the second
-- (0 <= n < 1e9), the split Redis TIME already uses. s stays below 2^35 in magnitude, so sums,
-- differences and comparisons of pairs are exact. It only adds, subtracts and compares:
-- remaining = floor((tolerance - ttl) / T) and the level are derived in Rust from the exact ttl
-- (sluice_core::algorithms::gcra::report), so the reply's remaining slot is 0.

local E9 = 1000000000

-- A decimal ns string from Rust as a pair.
local function arg_pair(text)
  local s, n = split_ns(text)
  return { s, n }
end

local function add(a, b)
  local s, n = a[1] + b[1], a[2] + b[2]
  if n >= E9 then
    return { s + 1, n - E9 }
  end
  return { s, n }
end

local function sub(a, b)
  local s, n = a[1] - b[1], a[2] - b[2]
  if n < 0 then
    return { s - 1, n + E9 }
  end
  return { s, n }
end

-- a <= b
local function le(a, b)
  return a[1] < b[1] or (a[1] == b[1] and a[2] <= b[2])
end

-- A pair times a whole k <= 100,000 (a lease's max), exactly: a[1] x k < 2^50, a[2] x k < 2^47.
local function mul(a, k)
  local n = a[2] * k
  local carry = idiv(n, E9)
  return { a[1] * k + carry, n - carry * E9 }
end

-- A lease's units beyond a request that leaves room = tolerance - (new_tat - now): the largest
-- k <= LEASE_MAX with k x 2T <= room, i.e. min(max, floor(floor(room / T) / 2)), found from the
-- double estimate and corrected with exact pair products.
local function lease_units(room, t)
  if LEASE_MAX <= 0 then
    return 0
  end
  local t2 = add(t, t)
  local k = math.floor((room[1] * E9 + room[2]) / (t2[1] * E9 + t2[2]))
  k = math.max(0, math.min(LEASE_MAX, k))
  while k > 0 and not le(mul(t2, k), room) do
    k = k - 1
  end
  while k < LEASE_MAX and le(mul(t2, k + 1), room) do
    k = k + 1
  end
  return k
end

-- A non-negative pair as decimal ns.
local function text(a)
  if a[1] > 0 then
    return string.format('%d%09d', a[1], a[2])
  end
  return string.format('%d', a[2])
end

-- No TAT sluice writes lies more than a tolerance (at most 2^63 - 1 ns) ahead of the clock that
-- wrote it. A stored one further ahead was written by someone else (or survived a clock step
-- back of centuries); it is clamped to 2^63 - 1 ns ahead, so it answers a long but bounded
-- denial whose times fit the i64 reply, rather than breaking the exact pair arithmetic.
local MAX_AHEAD = { 9223372036, 854775807 }

local tol = arg_pair(ARGV[7])
local inc = arg_pair(ARGV[8])
local now = { NOW_S, NOW_N }

-- ahead = max(tat, now) - now: how far the stored TAT lies in the future (0 when fresh or past).
local ahead = { 0, 0 }
local stored = redis.call('GET', KEYS[1])
if stored then
  local s, n = split_ns(stored)
  if s == nil then
    corrupt('a non-numeric time')
  end
  local d = sub({ s, n }, now)
  if not le(d, MAX_AHEAD) then
    ahead = MAX_AHEAD
  elseif d[1] >= 0 then
    ahead = d
  end
end

-- More than the capacity (increment > tolerance) can never pass: no retry.
local retry = -1
if le(inc, tol) then
  local after = add(ahead, inc) -- new_tat - now
  if le(after, tol) then
    local k = 0
    if ARGV[2] ~= '0' then
      -- A lease: k more units in the same step, from what is left after q.
      k = lease_units(sub(tol, after), arg_pair(ARGV[4]))
      local leased = add(after, mul(arg_pair(ARGV[4]), k))
      if le(leased, tol) then
        after = leased
      else
        k = 0 -- never (k x 2T <= room); kept as the twin of sluice_core::leased's fallback
      end
      redis.call('SET', KEYS[1], text(add(now, after)), 'PX', TTL_MS)
    end
    return { 1, 0, -1, text(after), text(after), ARGV[4], 0, 0, k }
  end
  retry = text(sub(after, tol))
end
-- A denial stores nothing.
return { 0, 0, retry, text(ahead), text(ahead), ARGV[4], 0, 0, 0 }
