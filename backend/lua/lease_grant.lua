-- lease_grant: adds a lease grant to the key's lease pool (sluice_core::budget::BudgetRecord::
-- record_lease_grant): the units the filter's lease returns (commits with a `lease-` id) may give
-- back at most, having no reservation recorded of their own (commit.lua).
-- KEYS[1]: the budget record's reservations in flight, `<state key>:inflight`; the pool is its
-- field '#leases' (no commit id can be that: '#' is not allowed in one), 'units:until_ms:at_ms'.
-- ARGV[1] now in ms ("" = Redis TIME), ARGV[2] the units granted, ARGV[3] how long the pool
-- lasts after the latest grant (ms), ARGV[4] the hash's shortest TTL (ms).
-- Reply: the pool's units after the grant.
local now = now_ms(ARGV[1])
local pool = 0
local held = redis.call('HGET', KEYS[1], '#leases')
if held then
  local u, untl = string.match(held, '^(%d+):(%d+):%d+$')
  if u and tonumber(untl) > now then
    pool = tonumber(u)
  end
end
pool = pool + tonumber(ARGV[2])
local span = tonumber(ARGV[3])
redis.call('HSET', KEYS[1], '#leases',
  string.format('%d', pool) .. ':' .. string.format('%d', now + span) .. ':' .. string.format('%d', now))
if redis.call('PTTL', KEYS[1]) < tonumber(ARGV[4]) then
  redis.call('PEXPIRE', KEYS[1], ARGV[4])
end
return pool
