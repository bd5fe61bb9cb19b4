-- refresh: extend the lock's lease if it is still ours (see extend in
-- common.lua: a lease is never shortened).
-- KEYS[1] lock hash
-- ARGV[1] token, ARGV[2] new ttl in ms
-- Returns 1 when extended, 0 when the lock is not ours.
local key = KEYS[1]
if redis.call('HGET', key, 'token') == ARGV[1] then
  extend(key, ARGV[2])
  return 1
end
return 0
