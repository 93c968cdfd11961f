-- now_ms: the clock of the budget and reset scripts, in ms. Their ARGV[1] is the caller's time in
-- ms as text (fixed-time tests), or "" for Redis TIME (production: the one clock every replica
-- shares). Prepended to each script that uses it (store/redis/scripts.rs, with_now_ms).
local function now_ms(arg)
  if arg == '' then
    local t = redis.call('TIME')
    return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  end
  return tonumber(arg)
end
