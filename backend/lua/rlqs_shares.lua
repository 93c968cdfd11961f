-- rlqs_shares: one replica's sync of one key's RLQS shares (store/redis/rlqs.rs; the Rust twin
-- of the ceiling is store::rlqs::ceiling). KEYS[1]: the key's shares hash, field = replica id,
-- value = "holders burst tokens_per_fill fill_interval_s expires_ms paid_ms".
-- ARGV: [1] now ms ('' = Redis TIME), [2] this replica's id, [3] stale ms, [4] keep ms (the
-- hash's TTL), [5] rule burst, [6] rule tokens_per_fill, [7] rule fill_interval_s, [8] my
-- holders, [9] my burst, [10] my tokens_per_fill, [11] my fill_interval_s, [12] ms until my last
-- share expires, [13] ms each turn of the remainder lasts.
-- Drops expired records; takes over (deletes and returns) records not paid for `stale` ms; writes
-- mine (deleted when I hold nothing) with paid = now. Returns {now, ceiling burst, ceiling
-- tokens_per_fill, others' holders, burst, tokens_per_fill, live records, then 7 per orphan:
-- id, holders, burst, tokens_per_fill, fill_interval_s, expires_ms, paid_ms}.
local now = now_ms(ARGV[1])
local me = ARGV[2]
local stale = tonumber(ARGV[3])
local rb, rn, rf = tonumber(ARGV[5]), tonumber(ARGV[6]), tonumber(ARGV[7])
local mh, mb, mn, mf = tonumber(ARGV[8]), tonumber(ARGV[9]), tonumber(ARGV[10]), tonumber(ARGV[11])
local mexp = now + tonumber(ARGV[12])
local rotate = math.max(tonumber(ARGV[13]), 1)
local oh, ob, on, live = 0, 0, 0, 0
-- every live replica holding the key: {id, holders}, for the remainder of the parts
local reps = {}
local out_orphans = {}
local flat = redis.call('HGETALL', KEYS[1])
for i = 1, #flat, 2 do
  local field = flat[i]
  if field ~= me then
    local h, b, n, f, exp, paid = string.match(flat[i + 1],
      '^(%d+) (%d+) (%d+) (%d+) (%d+) (%d+)$')
    if not h then
      return redis.error_reply('rlqs shares: bad record ' .. field)
    end
    h, b, n, f, exp, paid = tonumber(h), tonumber(b), tonumber(n), tonumber(f), tonumber(exp),
      tonumber(paid)
    if exp <= now then
      redis.call('HDEL', KEYS[1], field)
    elseif paid + stale <= now then
      redis.call('HDEL', KEYS[1], field)
      for _, v in ipairs({field, h, b, n, f, exp, paid}) do
        table.insert(out_orphans, v)
      end
    else
      live = live + 1
      if h > 0 then table.insert(reps, {field, h}) end
      oh = oh + h
      ob = ob + b
      -- its rate on the rule's fill interval, rounded up
      on = on + math.ceil(n * rf / math.max(f, 1))
    end
  end
end
-- my part: my holders' share of the rule, within what the others hold. The parts are rounded
-- down; what that leaves (v minus the parts) goes one unit each to the replicas holding the key
-- in the order of their ids rotated by one every `rotate` ms, so one token held through two
-- replicas is not 0 on both (the Rust twin is store::rlqs::ceiling_with_remainder).
local all = mh + oh
if mh > 0 then table.insert(reps, {me, mh}) end
table.sort(reps, function(x, y) return x[1] < y[1] end)
local function part(v, taken)
  local fair = 0
  if all > 0 then fair = math.floor(v * mh / all) end
  if mh > 0 and #reps > 0 then
    local given = 0
    local pos = 0
    local start = math.floor(now / rotate) % #reps
    for i, r in ipairs(reps) do
      given = given + math.floor(v * r[2] / all)
      if r[1] == me then pos = (i - 1 - start) % #reps end
    end
    if pos < v - given then fair = fair + 1 end
  end
  return math.max(0, math.min(fair, v - taken))
end
local cb, cn = part(rb, ob), part(rn, on)
if mh == 0 and mb == 0 and mn == 0 then
  redis.call('HDEL', KEYS[1], me)
else
  live = live + 1
  local rec_b = mb
  local rec_n = mn
  if mf == rf then
    rec_b = math.max(cb, mb)
    rec_n = math.max(cn, mn)
  end
  redis.call('HSET', KEYS[1], me,
    string.format('%d %d %d %d %d %d', mh, rec_b, rec_n, mf, mexp, now))
  redis.call('PEXPIRE', KEYS[1], ARGV[4])
end
local reply = {now, cb, cn, oh, ob, on, live}
for _, v in ipairs(out_orphans) do
  table.insert(reply, v)
end
return reply
