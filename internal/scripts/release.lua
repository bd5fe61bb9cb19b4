-- release: delete the lock if it is still ours and tell waiters.
-- KEYS[1] lock hash, KEYS[2] tombstone of the last release
-- ARGV[1] token, ARGV[2] release channel, ARGV[3] tombstone lifetime in ms
-- Returns 1 when released now, 2 when this token was released before (a
-- re-sent release), 0 when the lock is not ours.
local key, last = KEYS[1], KEYS[2]
local token = ARGV[1]

if redis.call('EXISTS', key) == 1 and redis.call('HGET', key, 'token') == token then
  redis.call('DEL', key)
  -- The tombstone lets a release that the client sends again after a lost
  -- reply report success instead of a false "not held".
  redis.call('SET', last, token, 'PX', ARGV[3])
  redis.call('PUBLISH', ARGV[2], token)
  return 1
end
if redis.call('GET', last) == token then
  return 2
end
return 0
