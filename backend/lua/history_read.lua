-- Reads one action's history: KEYS[1..n-1] the steps' hashes (oldest first), KEYS[n] the
-- last-seen key. Returns {last_seen or '0', then for each step holding anything: its index (from
-- 0) and its six counts a l d c p f, as strings}.
local out = {redis.call('GET', KEYS[#KEYS]) or '0'}
for i = 1, #KEYS - 1 do
  local v = redis.call('HMGET', KEYS[i], 'a', 'l', 'd', 'c', 'p', 'f')
  if v[1] or v[2] or v[3] or v[4] or v[5] or v[6] then
    out[#out + 1] = tostring(i - 1)
    for j = 1, 6 do
      out[#out + 1] = v[j] or '0'
    end
  end
end
return out
