-- pttl: the lock's remaining lease in ms, if it is still ours.
-- KEYS[1] lock hash
-- ARGV[1] token
-- Returns the remaining ms, or -1 when the lock is not ours.
local key = KEYS[1]
if redis.call('EXISTS', key) == 1 and redis.call('HGET', key, 'token') == ARGV[1] then
  return redis.call('PTTL', key)
end
return -1
