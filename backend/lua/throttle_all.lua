-- throttle_all: the 2 to 8 checks of one all-or-nothing request (twin of sluice_core::all). On a
-- single node (mode 'all') every check is decided in ONE call; on a Redis Cluster the checks' keys
-- live in different slots, so backend/src/store/redis/all.rs calls it once per check (modes
-- 'probe', then 'reserve' tightest first, refunded by throttle_refund.lua on a denial).
-- Built in Rust (scripts.rs): each algorithm script, with its own copy of the prelude, is wrapped
-- unchanged as STEPS['<algorithm>'] = function(KEYS, ARGV) ... end, so a step reads its key and
-- arguments exactly as the single-check script does; this driver follows them.
--
-- KEYS[i]: check i's state key (checks naming the same state repeat the same key).
-- ARGV[1]: n, the number of checks. ARGV[2]: mode, 'all' (every check here, all or nothing),
-- 'probe' (Redis Cluster: decide, answer, and put every key back: nothing changes) or 'reserve'
-- (Redis Cluster: one check per call; the reply also carries, per key, its DUMP and PTTL before
-- and its DUMP after, for a later refund by throttle_refund.lua).
-- Then per check: algorithm name, '1' if the rule is enforced, '0' if not, 's' if the check is
-- counted on its own (sluice_core::all::Part::OnItsOwn: never denies the request; denied, it
-- takes what is left of its limit), argc, then the argc arguments of the single-check script
-- (scripts.rs algorithm_args, lease max always '0').
--
-- Checks run in order, each on what the earlier ones left. At the first check an enforced rule
-- denies, every key an earlier check may have written is put back as it was (RESTORE of its
-- DUMP with its PTTL, or DEL if it did not exist) and every other check is answered by a peek
-- (quantity 0) of the restored state.
-- A step that raises an error also puts every key back before the error goes on.
-- Reply: { denied (1-based index, 0 = allowed), { reply of check 1, ... }[, snapshots] }.

local n = tonumber(ARGV[1])
local mode = ARGV[2]
local checks = {}
local pos = 3
-- One "now" for every check, as core decides them all at one instant.
local t = redis.call('TIME')
local now = string.format('%d%06d000', tonumber(t[1]), tonumber(t[2]))
for i = 1, n do
  local argc = tonumber(ARGV[pos + 2])
  local args = {}
  for j = 1, argc do
    args[j] = ARGV[pos + 2 + j]
  end
  if args[1] == '' then
    args[1] = now
  end
  checks[i] = {
    algorithm = ARGV[pos],
    enforce = ARGV[pos + 1] == '1',
    own = ARGV[pos + 1] == 's',
    args = args,
  }
  pos = pos + 3 + argc
end

-- Each key's state before this call changed it, taken just before the first step that may write
-- it: a step writes only when it admits a quantity >= 1 (every algorithm script writes in its
-- allowed branch only), so a peek's key needs none, and in mode 'all' neither does the last
-- check's own key (if it denies it wrote nothing; if it allows, nothing is put back). In the
-- Cluster modes (one check per call) the snapshot is the point: probe puts it back, reserve
-- returns it for a refund.
local before = {}
local keys = {}
local function snapshot(i)
  local k = KEYS[i]
  if before[k] ~= nil then
    return
  end
  if tonumber(checks[i].args[2]) == 0 then
    return
  end
  if mode == 'all' and i == n then
    return
  end
  local ttl = redis.call('PTTL', k)
  if ttl == -2 then
    before[k] = false
  else
    before[k] = { redis.call('DUMP', k), ttl }
  end
  keys[#keys + 1] = k
end

local function restore()
  for _, k in ipairs(keys) do
    local b = before[k]
    if b == false then
      redis.call('DEL', k)
    else
      local ttl = b[2]
      if ttl < 0 then
        ttl = 0
      end
      redis.call('RESTORE', k, ttl, b[1], 'REPLACE')
    end
  end
end

-- quantity: nil for the check's own, else the units to ask instead (0 peeks).
local function run(i, quantity)
  local c = checks[i]
  local args = c.args
  if quantity ~= nil then
    args = {}
    for j, v in ipairs(c.args) do
      args[j] = v
    end
    args[2] = tostring(quantity)
    args[6] = '0'
    if c.algorithm == 'gcra' then
      args[8] = string.format('%.0f', tonumber(args[4]) * quantity)
    end
  end
  local step = STEPS[c.algorithm]
  if step == nil then
    restore()
    return redis.error_reply('ERR sluice: unknown algorithm ' .. tostring(c.algorithm))
  end
  local ok, reply = pcall(step, { KEYS[i] }, args)
  if not ok then
    restore()
    error(reply)
  end
  if type(reply) == 'table' and reply.err then
    restore()
  end
  return reply
end

-- What is left of check i's limit after its denial `reply`: the reply's remaining, except for
-- gcra, whose script leaves that slot 0 (Rust derives it from the exact ahead time): there
-- floor((tolerance - ahead) / T), exact while the times stay below 2^53 ns (else 0: nothing
-- taken).
local function rest_of(c, reply)
  if c.algorithm ~= 'gcra' then
    return tonumber(reply[2])
  end
  local tol, ahead, t = tostring(c.args[7]), tostring(reply[4]), tostring(c.args[4])
  if #tol > 15 or #ahead > 15 or #t > 15 then
    return 0
  end
  local x = tonumber(tol) - tonumber(ahead)
  local T = tonumber(t)
  if x <= 0 or T <= 0 then
    return 0
  end
  local q = math.floor(x / T)
  while q > 0 and q * T > x do
    q = q - 1
  end
  while (q + 1) * T <= x do
    q = q + 1
  end
  return q
end

local replies = {}
local denied = 0
for i = 1, n do
  snapshot(i)
  local reply = run(i, nil)
  if reply.err then
    return reply
  end
  replies[i] = reply
  if reply[1] == 0 and checks[i].own then
    -- Counted on its own: a quantity that does not fit takes what is left (its reply stays the
    -- denial).
    local rest = rest_of(checks[i], reply)
    if rest > 0 and tonumber(checks[i].args[2]) > 0 then
      local taken = run(i, rest)
      if taken.err then
        return taken
      end
    end
  elseif reply[1] == 0 and checks[i].enforce then
    denied = i
    break
  end
end
if denied > 0 then
  restore()
  for i = 1, n do
    if i ~= denied then
      local reply = run(i, 0)
      if reply.err then
        return reply
      end
      replies[i] = reply
    end
  end
end
if mode == 'probe' then
  -- Would each check pass now? Answer, then put every key back.
  restore()
  return { denied, replies }
end
if mode ~= 'reserve' then
  return { denied, replies }
end
local snapshots = {}
for _, k in ipairs(keys) do
  local b = before[k]
  local after = ''
  if redis.call('EXISTS', k) == 1 then
    after = redis.call('DUMP', k)
  end
  if b == false then
    snapshots[#snapshots + 1] = { k, '0', '', '0', after }
  else
    snapshots[#snapshots + 1] = { k, '1', b[1], tostring(b[2]), after }
  end
end
return { denied, replies, snapshots }
