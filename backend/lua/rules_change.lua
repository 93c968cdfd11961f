-- An admin's change to the rules, its version bump and its audit entry, in one atomic step.
-- KEYS[1]: the rules hash (action -> rule JSON, and the version in the field '#version').
-- KEYS[2]: the overrides hash of the action (key -> rule JSON), same slot ('{<prefix>:rules}').
-- KEYS[3]: the audit list (newest first), same slot.
-- ARGV[1]: 'put_rule', 'del_rule', 'put_override' or 'del_override'. ARGV[2]: action.
-- ARGV[3]: key (overrides; '' otherwise). ARGV[4]: the new JSON (puts; '' for deletes).
-- ARGV[5]: the audit entry's leading fields as a JSON object without its closing brace ('': no
-- audit). ARGV[6]: audit entries kept. ARGV[7]: most overrides per action.
-- Returns {'ok', version, before JSON or false}, or {'missing'} (nothing to delete), {'no_rule'}
-- (an override of an action without a rule) or {'too_many'}: those three write nothing.
local current = redis.call('HGET', KEYS[1], '#version')
if current and not string.match(current, '^%d+$') then
  return redis.error_reply('WRONGTYPE sluice: the rules version (field #version of ' .. KEYS[1]
    .. ') holds ' .. string.format('%q', string.sub(current, 1, 40)) .. ', not a whole number')
end
local op, action, key, json = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
local before
if op == 'put_rule' then
  before = redis.call('HGET', KEYS[1], action)
  redis.call('HSET', KEYS[1], action, json)
elseif op == 'del_rule' then
  before = redis.call('HGET', KEYS[1], action)
  if not before then
    return {'missing'}
  end
  redis.call('HDEL', KEYS[1], action)
  redis.call('DEL', KEYS[2])
elseif op == 'put_override' or op == 'del_override' then
  if redis.call('HEXISTS', KEYS[1], action) == 0 then
    return {'no_rule'}
  end
  before = redis.call('HGET', KEYS[2], key)
  if op == 'put_override' then
    if not before and redis.call('HLEN', KEYS[2]) >= tonumber(ARGV[7]) then
      return {'too_many'}
    end
    redis.call('HSET', KEYS[2], key, json)
  else
    if not before then
      return {'missing'}
    end
    redis.call('HDEL', KEYS[2], key)
  end
else
  return redis.error_reply('ERR sluice: unknown rules change ' .. string.format('%q', op))
end
local version = redis.call('HINCRBY', KEYS[1], '#version', 1)
if ARGV[5] ~= '' then
  local after = json
  if after == '' then
    after = 'null'
  end
  redis.call('LPUSH', KEYS[3], ARGV[5] .. ',"version":' .. string.format('%d', version)
    .. ',"before":' .. (before or 'null') .. ',"after":' .. after .. '}')
  redis.call('LTRIM', KEYS[3], 0, tonumber(ARGV[6]) - 1)
end
return {'ok', string.format('%d', version), before or false}
