-- release: let the lock go if it is still ours, and hand it straight to the
-- first live waiter in line, so waking costs one message whatever the number
-- of waiters.
-- KEYS[1] lock hash, KEYS[2] fence counter, KEYS[3] waiter queue, KEYS[4]
-- waiter data, KEYS[5] tombstone of the last release
-- ARGV[1] token, ARGV[2] release channel, ARGV[3] tombstone lifetime in ms,
-- ARGV[4] our own waiter id to drop from the queue, or '', ARGV[5] prefix of
-- the waiters' hand-off channels
-- Returns 1 when released now, 2 when this token was released before (a
-- re-sent release), 0 when the lock is not ours.
local key, fencekey, queue, qdata, last = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local token, waiter = ARGV[1], ARGV[4]

-- A waiter that gives up drops its entry, but only its own: the entry may
-- already carry the token of the next waiter of the same process.
if waiter ~= '' then
  local d = redis.call('HGET', qdata, waiter)
  if d and string.match(d, '^%d+|%d+|([^|]*)|') == token then
    redis.call('ZREM', queue, waiter)
    redis.call('HDEL', qdata, waiter)
  end
end

if redis.call('EXISTS', key) == 0 or redis.call('HGET', key, 'token') ~= token then
  if redis.call('GET', last) == token then
    return 2
  end
  return 0
end

local err = check_fence(fencekey)
if err then return err end
redis.call('DEL', key)
-- The tombstone lets a release that the client sends again after a lost
-- reply report success instead of a false "not held".
redis.call('SET', last, token, 'PX', ARGV[3])

-- Hand over to the first waiter whose entry is still alive; entries of
-- waiters that died or gave up without a word are dropped on the way.
local now_ms, now_us = server_now()
while true do
  local head = redis.call('ZRANGE', queue, 0, 0)
  if #head == 0 then break end
  local id = head[1]
  local d = redis.call('HGET', qdata, id)
  redis.call('ZREM', queue, id)
  redis.call('HDEL', qdata, id)
  if d then
    local alive, ttl, wtoken, owner = string.match(d, '^(%d+)|(%d+)|([^|]*)|(.*)$')
    if alive and tonumber(alive) >= now_ms then
      local fence = next_fence(fencekey, now_us)
      grant(key, fence, wtoken, ttl, owner, now_ms)
      redis.call('PUBLISH', ARGV[5] .. id, wtoken .. ':' .. string.format('%d', fence))
      break
    end
  end
end
redis.call('PUBLISH', ARGV[2], token)
return 1
