-- refresh: extend the lock's lease if it is still ours (see extend in
-- common.lua: a lease is never shortened).
-- KEYS[1] lock hash
-- ARGV[1] token, ARGV[2] new ttl in ms
-- Returns 1 when extended, 0 when the lock is not ours.
local key = KEYS[1]
local held = redis.call('HMGET', key, 'token', 'ttl')
if held[1] == ARGV[1] then
  extend(key, ARGV[2], held[2])
  return 1
end
return 0
