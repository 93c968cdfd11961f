-- Reads one action's history: KEYS[1..n-1] the hashes of the 10-minute blocks the range touches
-- (oldest first), KEYS[n] the last-seen key. Returns {last_seen or '0', {each block's HGETALL:
-- index in the block, counts "a l d c p f", ...}, in KEYS order}: the replies are passed through
-- as they are, without a loop in Lua (which costs more than the reads themselves).
local blocks = {}
for i = 1, #KEYS - 1 do
  blocks[i] = redis.call('HGETALL', KEYS[i])
end
return {redis.call('GET', KEYS[#KEYS]) or '0', blocks}
