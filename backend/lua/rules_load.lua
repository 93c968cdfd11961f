-- Reads one page of the rules (HSCAN from the cursor ARGV[1], about ARGV[2] fields), their
-- per-key overrides, and the version, in one atomic step. A page at a time, so that a large
-- configuration (10,000 rules) never holds Redis for long nor outlasts the command timeout;
-- backend/src/store/redis/rules.rs pages through and starts again if the version moved.
-- KEYS[1]: rules hash: action -> rule JSON, and the version in the field '#version' (no action
-- can be named so), so that losing the hash (a stray DEL, eviction) loses the version with it and
-- every replica notices.
-- KEYS[2]: the separate version counter of older sluice releases (same slot). If it exists it is
-- migrated: its value moves into the hash (when the hash exists and has no version yet), then the
-- key is deleted. A hash that is gone while that key remains counts as lost (version nil).
-- The overrides of an action live in the hash KEYS[1] .. ':overrides:' .. action (same slot: it
-- shares the '{<prefix>:rules}' tag), key -> rule JSON.
-- Returns { version or false, next cursor ('0' after the last page),
--           { field, value, ... } (the '#version' field may be among them),
--           { action, key, rule JSON, ... } }.
local version = redis.call('HGET', KEYS[1], '#version')
local legacy = false
if ARGV[1] == '0' then
  legacy = redis.call('GET', KEYS[2])
end
if legacy then
  if not version and redis.call('EXISTS', KEYS[1]) == 1 then
    redis.call('HSET', KEYS[1], '#version', legacy)
    version = legacy
  end
  redis.call('DEL', KEYS[2])
end
local page = redis.call('HSCAN', KEYS[1], ARGV[1], 'COUNT', ARGV[2])
local rules = page[2]
local overrides = {}
for i = 1, #rules, 2 do
  local action = rules[i]
  if action ~= '#version' then
    local flat = redis.call('HGETALL', KEYS[1] .. ':overrides:' .. action)
    for j = 1, #flat, 2 do
      overrides[#overrides + 1] = action
      overrides[#overrides + 1] = flat[j]
      overrides[#overrides + 1] = flat[j + 1]
    end
  end
end
return { version, page[1], rules, overrides }
