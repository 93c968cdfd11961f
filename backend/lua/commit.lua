-- commit: commits one reservation (sluice_core::commit, the twin of core/src/commit.rs) on the
-- state of any of the six algorithms, once per request id (the words: docs/cost-budgets.md).
-- KEYS[1]: the throttle state (as the algorithm's script keeps it). KEYS[2]: the id's commit
-- receipt, `<state key>:commit:<id>`, in the same hash tag and so the same Cluster slot.
-- ARGV[1] now ("" = Redis TIME), ARGV[2] '0', ARGV[3] TTL of the state (ms), ARGV[4], ARGV[5]
-- the algorithm's parameters, ARGV[6] '0' (the prelude's layout), ARGV[7] the algorithm,
-- ARGV[8] reserved, ARGV[9] actual, ARGV[10] reserved_at (decimal ns), ARGV[11] the receipt's
-- TTL (ms), ARGV[12] the id, ARGV[13] the carry bound (sluice_core::commit::carry_bound: a
-- meter's most level in ns, a window's most count, a sliding log's most entries): a debit that
-- does not fit is carried as debt, the level above the capacity, up to it. ARGV[14] the most
-- commit receipts the key keeps (sluice_core::limits::MAX_RECEIPTS_PER_KEY): they are listed in
-- `<state key>:receipts` (a list of 'expiry_ms:id' in the order written, so by expiry; same hash
-- tag); past the bound the oldest are deleted (shed) before this one is written.
-- KEYS[3], KEYS[4]: the key's budget record (sluice_core::budget), in the same hash tag: the
-- reservations in flight (`<state key>:inflight`, id -> 'units:recorded_at_ms', budget_record.lua)
-- and the debits beyond reservations (`<state key>:overshoot`: 'overshoot', 'debited', 'until'
-- ms). A first commit removes its id from the first and adds a debit to the second.
-- KEYS[5]: the key's latest reset time in ms, `<state key>:reset` (written by state_reset.lua,
-- which also writes the receipt 'reset' for each reservation in flight it dropped). A reservation
-- from before the reset (its receipt 'reset', or reserved_at at or before the reset's ms:
-- sluice_core::budget::before_reset) changes nothing: a first commit of nothing, with a receipt.
-- A lease return (an id 'lease-...') with no record of its own is bounded by the key's lease pool
-- instead (KEYS[3]'s field '#leases', 'units:until_ms:at_ms', lease_grant.lua), which it spends.
-- What the caller claims is bounded by the reservation recorded in KEYS[3] under its id
-- (sluice_core::budget::bounded_commit): at most its units are given back, from no later than its
-- millisecond; with no record nothing is given back and the whole actual is debited.
-- Reply: {duplicate (0/1), refunded, debited, overshoot, a, b, c, d, unrecorded (0/1), shed}, the level
-- being a / b for the meters, a for fixed_window and sliding_log, a x b / c + d for
-- sliding_window (the same f64 operations as core). A duplicate answers the first commit's
-- numbers and today's level, and writes nothing.
local ALG = ARGV[7]
local cap = tonumber(ARGV[5])
local P = tonumber(ARGV[4])
local BOUND = tonumber(ARGV[13])
-- A meter's level after the commit (ns), for budget_until and the state's TTL.
local METER_LEVEL = 0

local duplicate = 0
local ACTUAL = tonumber(ARGV[9])
-- The claim, bounded by the record (bounded_commit).
local RESERVED = tonumber(ARGV[8])
local unrecorded = 0
-- When the reservation was decided (decimal ns), bounded by the record's time below.
local RA_TEXT = ARGV[10]
local held = redis.call('HGET', KEYS[3], ARGV[12])
local h_units, h_at = nil, nil
local FROM_POOL = nil
if held then
  h_units, h_at = string.match(held, '^(%d+):(%d+)$')
elseif string.sub(ARGV[12], 1, 6) == 'lease-' then
  local pool = redis.call('HGET', KEYS[3], '#leases')
  if pool then
    local u, untl, at = string.match(pool, '^(%d+):(%d+):(%d+)$')
    if u and tonumber(untl) > NOW_MS and tonumber(u) > 0 then
      h_units, h_at = u, at
      FROM_POOL = { tonumber(u), untl, at }
    end
  end
end
if h_units then
  RESERVED = math.min(RESERVED, tonumber(h_units))
  -- The end of the record's millisecond, as decimal ns ('<ms>999999'), when the claim is later.
  local c_s, c_n = split_ns(RA_TEXT)
  if c_s == nil or c_s * 1000 + idiv(c_n, 1000000) > tonumber(h_at) then
    RA_TEXT = h_at .. '999999'
  end
else
  if RESERVED > 0 then
    unrecorded = 1
  end
  RESERVED = 0
end
-- No reservation holds more than the capacity: a claim of more gives back at most that.
local refund = math.max(math.min(RESERVED, cap) - ACTUAL, 0)
local debit = math.max(ACTUAL - RESERVED, 0)
local first = redis.call('GET', KEYS[2])
local stale = first == 'reset'
if stale then
  first = false
elseif not first then
  local reset_ms = redis.call('GET', KEYS[5])
  local ra_s, ra_n = split_ns(RA_TEXT)
  if reset_ms and ra_s then
    stale = ra_s * 1000 + idiv(ra_n, 1000000) <= tonumber(reset_ms)
  end
end
if first then
  duplicate = 1
end
if first or stale then
  refund, debit, unrecorded = 0, 0, 0
end
-- The reservation's time relative to now (never after now).
local ra = math.min(rel(RA_TEXT), 0)

-- When the budget this commit debits into is surely whole again, in ms (budget_until_ms).
local function budget_until()
  if ALG == 'fixed_window' then
    local _, window_end = window_of(ARGV[4], NOW_MS)
    return window_end
  elseif ALG == 'sliding_window' then
    return (idiv(NOW_MS, P) + 2) * P
  elseif ALG == 'sliding_log' then
    return NOW_MS + P
  end
  return NOW_MS + idiv(math.max(P * cap, METER_LEVEL) + 999999, 1000000)
end

-- A meter state's TTL (ms): the idle TTL, or longer while its level (debt) takes longer to drain.
local function meter_ttl(level)
  return math.max(tonumber(ARGV[3]), idiv(level + 999999, 1000000) + 1000)
end

-- Records the commit in the budget record (BudgetRecord::record_commit).
local function record_commit(overshoot)
  redis.call('HDEL', KEYS[3], ARGV[12])
  if FROM_POOL and not stale then
    redis.call('HSET', KEYS[3], '#leases', fmt(math.max(FROM_POOL[1] - RESERVED, 0)) .. ':' ..
      FROM_POOL[2] .. ':' .. FROM_POOL[3])
  end
  if debit == 0 then
    return
  end
  local h = redis.call('HMGET', KEYS[4], 'overshoot', 'debited', 'until')
  local o, d, u = 0, 0, 0
  if h[3] and tonumber(h[3]) > NOW_MS then
    o, d, u = tonumber(h[1]), tonumber(h[2]), tonumber(h[3])
  end
  local until_ms = math.max(u, budget_until())
  redis.call('HSET', KEYS[4], 'overshoot', fmt(o + overshoot), 'debited', fmt(d + debit),
    'until', fmt(until_ms))
  -- Kept past its end by a second; with a fixed test time at least as long as the state.
  local ttl = until_ms - NOW_MS + 1000
  if ARGV[1] ~= '' then
    ttl = math.max(ttl, 600000)
  end
  redis.call('PEXPIRE', KEYS[4], ttl)
end

local function reply(refunded, overshoot, a, b, c, d)
  if duplicate == 1 then
    local r, db, o = string.match(first, '^(%d+):(%d+):(%d+)$')
    if r == nil then
      corrupt('a commit receipt that is not refunded:debited:overshoot')
    end
    return { 1, tonumber(r), tonumber(db), tonumber(o), a, b, c, d, 0, 0 }
  end
  -- The key's receipts, bounded: expired entries leave the index, then the oldest live ones are
  -- shed (their receipts deleted: same hash tag, so the same slot) to make room for this one.
  local index = KEYS[1] .. ':receipts'
  local most = tonumber(ARGV[14])
  local shed = 0
  while true do
    local head = redis.call('LINDEX', index, 0)
    if not head then
      break
    end
    local expires, old = string.match(head, '^(%d+):(.*)$')
    local expired = expires == nil or tonumber(expires) <= NOW_MS
    if not expired and redis.call('LLEN', index) < most then
      break
    end
    redis.call('LPOP', index)
    -- Only a commit's receipt (a reset's 'reset' under the same id stays).
    local gone = old and redis.call('GET', KEYS[1] .. ':commit:' .. old)
    if gone and gone ~= 'reset' then
      redis.call('DEL', KEYS[1] .. ':commit:' .. old)
      if not expired then
        shed = shed + 1
      end
    end
  end
  redis.call('RPUSH', index, fmt(NOW_MS + tonumber(ARGV[11])) .. ':' .. ARGV[12])
  redis.call('PEXPIRE', index, ARGV[11])
  redis.call('SET', KEYS[2], fmt(refunded) .. ':' .. fmt(debit) .. ':' .. fmt(overshoot), 'PX', ARGV[11])
  record_commit(overshoot)
  return { 0, refunded, debit, overshoot, a, b, c, d, unrecorded, shed }
end

-- The meters on a level in ns: (refunded, overshoot, new level).
local function meter(level)
  local T = P
  local tol = T * cap
  local elapsed = -ra
  -- Only the time beyond T x actual can have eaten into what is owed (core/src/commit.rs).
  -- T x actual may pass 2^53; it exceeds elapsed exactly when actual > floor(elapsed / T).
  local dry = 0
  if ACTUAL <= idiv(elapsed, T) then
    dry = elapsed - T * ACTUAL
  end
  local owed = 0
  if dry < T * refund then
    owed = refund - idiv(dry + T - 1, T)
  end
  local refunded = math.max(math.min(refund, idiv(level, T), owed), 0)
  level = level - refunded * T
  local fits = math.min(debit, idiv(math.max(tol - level, 0), T))
  -- The whole debit is carried (debt above the tolerance), up to the bound.
  local carried = math.min(debit, idiv(math.max(BOUND - level, 0), T))
  if carried < debit then
    level = math.max(BOUND, level)
  else
    level = level + carried * T
  end
  METER_LEVEL = level
  return refunded, debit - fits, level
end

local function moved(refunded)
  return refunded > 0 or debit > 0
end

if ALG == 'gcra' then
  local stored = redis.call('GET', KEYS[1])
  local level = 0
  if stored then
    level = math.max(rel(stored), 0)
  end
  local refunded, overshoot, after = meter(level)
  if moved(refunded) then
    redis.call('SET', KEYS[1], abs(after), 'PX', meter_ttl(after))
  end
  return reply(refunded, overshoot, after, P, 0, 0)
elseif ALG == 'leaky_bucket' or ALG == 'token_bucket' then
  local tol = P * cap
  local level, last
  if ALG == 'leaky_bucket' then
    level, last = read_leaky()
  else
    -- The tokens used, plus the time until `last` when it lies ahead (debt: the bucket refills
    -- only from then on; core's token_level).
    local tokens
    tokens, last = read_tokens(tol)
    level = tol - tokens + math.max(0, last)
  end
  local refunded, overshoot, after = meter(level)
  if moved(refunded) then
    if ALG == 'token_bucket' then
      -- Debt: an empty bucket whose refill starts when the debt is paid back.
      redis.call('HSET', KEYS[1], 'tokens', fmt(math.max(tol - after, 0)), 'last',
        abs(math.max(after - tol, 0)))
    else
      redis.call('HSET', KEYS[1], 'level', fmt(after), 'last', abs(math.max(0, last)))
    end
    redis.call('PEXPIRE', KEYS[1], meter_ttl(after))
  end
  return reply(refunded, overshoot, after, P, 0, 0)
end

-- The windows count in whole milliseconds. The reservation's millisecond: now's, when it lies at
-- or after now. Read from RA_TEXT itself, not from ra, which rel clamps beyond 104 days: a
-- 365-day fixed_window may count a reservation older than that, and its window must be told
-- exactly (whole ms stay below 2^53).
local ra_ms = NOW_MS
if ra < 0 then
  local ra_s, ra_n = split_ns(RA_TEXT)
  ra_ms = math.min(ra_s * 1000 + idiv(ra_n, 1000000), NOW_MS)
end

if ALG == 'fixed_window' then
  local SPEC = ARGV[4]
  local FIELD, start, count, s_start, s_count = read_fixed_window(SPEC)
  local refunded = 0
  if window_holds(SPEC, ra_ms, start) and s_start == start then
    refunded = math.min(refund, count)
  end
  count = count - refunded
  local fits = math.min(debit, math.max(cap - count, 0))
  count = count + math.min(debit, math.max(BOUND - count, 0))
  if moved(refunded) and (count ~= s_count or start ~= s_start) then
    redis.call('HSET', KEYS[1], FIELD, fmt(start), 'count', fmt(count))
    redis.call('PEXPIRE', KEYS[1], ARGV[3])
  end
  return reply(refunded, debit - fits, count, 0, 0, 0)
elseif ALG == 'sliding_window' then
  local W = P
  local index, elapsed, cur, prev, s_index, s_cur, s_prev = read_sliding_window(W)
  local refunded = 0
  if idiv(ra_ms, W) == index and s_index == index then
    refunded = math.min(refund, cur)
  end
  cur = cur - refunded
  local weighted = idiv(prev * (W - elapsed) + W - 1, W)
  local fits = math.min(debit, math.max(math.max(cap - cur, 0) - weighted, 0))
  cur = cur + math.min(debit, math.max(BOUND - cur, 0))
  if moved(refunded) and (index ~= s_index or cur ~= s_cur or prev ~= s_prev) then
    redis.call('HSET', KEYS[1], 'index', fmt(index), 'current', fmt(cur), 'previous', fmt(prev))
    redis.call('PEXPIRE', KEYS[1], ARGV[3])
  end
  return reply(refunded, debit - fits, prev, W - elapsed, W, cur)
elseif ALG == 'sliding_log' then
  local W_NS = P * 1000000
  local key = KEYS[1]
  local len, live_from = read_log(W_NS)
  -- Entries not newer than the reservation end before `upto`.
  local upto = log_first(live_from, len, function(t) return t > ra end)
  local refunded = math.min(refund, upto - live_from)
  local cut = upto - refunded
  local live = len - live_from - refunded
  local fits = math.min(debit, math.max(cap - live, 0))
  local carried = math.min(debit, math.max(BOUND - live, 0))
  if refunded > 0 or carried > 0 then
    local tail = {}
    if upto < len then
      tail = redis.call('LRANGE', key, upto, -1)
    end
    -- Keep [live_from, cut) (LTRIM's end is inclusive, and an end of -1 would mean the last).
    if cut > live_from then
      redis.call('LTRIM', key, live_from, cut - 1)
    else
      redis.call('DEL', key)
    end
    local i = 1
    while i <= #tail do
      local batch = {}
      for j = i, math.min(i + 499, #tail) do
        batch[#batch + 1] = tail[j]
      end
      redis.call('RPUSH', key, unpack(batch))
      i = i + 500
    end
    -- A debit's entries at now (or the newest entry's time, after a clock step back).
    local t = 0
    if live > 0 then
      t = math.max(0, log_at(-1))
    end
    log_append(abs(t), carried)
    if live + carried > 0 then
      redis.call('PEXPIRE', key, ARGV[3])
    end
  end
  return reply(refunded, debit - fits, live + carried, 0, 0, 0)
end
return redis.error_reply('ERR sluice: commit of an unknown algorithm ' .. tostring(ALG))
