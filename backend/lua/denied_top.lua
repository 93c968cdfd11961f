-- The denials per key of one action over some minute buckets: KEYS[1..n] the buckets' zsets
-- (each holds at most the kept number of keys). Returns flat {key, denials, ...}, unordered: the
-- caller ranks them (Lua's string order follows Redis's locale, Rust's is bytes).
local sums = {}
local order = {}
for i = 1, #KEYS do
  local rows = redis.call('ZRANGE', KEYS[i], 0, -1, 'WITHSCORES')
  for j = 1, #rows, 2 do
    local key = rows[j]
    if not sums[key] then
      order[#order + 1] = key
      sums[key] = 0
    end
    sums[key] = sums[key] + tonumber(rows[j + 1])
  end
end
local out = {}
for _, key in ipairs(order) do
  out[#out + 1] = key
  out[#out + 1] = string.format('%d', sums[key])
end
return out
