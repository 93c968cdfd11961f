-- throttle_refund: Redis Cluster's undo of one check debited by throttle_all.lua (mode 'reserve':
-- not a cost budget's reservation), when a later check of the same request was denied. A
-- compare-and-set: KEYS[1] is put back to its state before the debit only if it still holds
-- exactly what the debit left (DUMP equal; or still absent). Otherwise another request changed it
-- since, and restoring would erase that request's debit: nothing is written and the reply is 0
-- (counted by the caller).
-- ARGV[1]: '1' if the key existed before, ARGV[2] its DUMP then, ARGV[3] its PTTL then (-1: no
-- expiry), ARGV[4] its DUMP after the debit ('' = absent).
local current = ''
if redis.call('EXISTS', KEYS[1]) == 1 then
  current = redis.call('DUMP', KEYS[1])
end
if current ~= ARGV[4] then
  return 0
end
if ARGV[1] == '1' then
  local ttl = tonumber(ARGV[3])
  if ttl < 0 then
    ttl = 0
  end
  redis.call('RESTORE', KEYS[1], ttl, ARGV[2], 'REPLACE')
else
  redis.call('DEL', KEYS[1])
end
return 1
