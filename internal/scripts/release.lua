-- release: let the lock go if it is still ours, and hand it straight to the
-- first live waiter in line, so waking costs one message whatever the number
-- of waiters.
-- KEYS[1] lock hash, KEYS[2] fence counter, KEYS[3] waiter queue (see
-- acquire.lua), KEYS[4] tombstone of the last release
-- ARGV[1] token, ARGV[2] tombstone lifetime in ms, or 0 for none (a forced
-- unlock: the holder's own later release must report "not held"), ARGV[3] our own queue
-- entry to drop (a waiter giving up), or '', ARGV[4] prefix of the waiters'
-- hand-off channels, ARGV[5] '1' to tell the waiter on a shard channel
-- (SPUBLISH: in a Cluster the message stays on the lock's shard)
-- Returns 1 when released now, 2 when this token was released before (a
-- re-sent release), 0 when the lock is not ours.
--
-- With nobody waiting this is four commands (HGET, ZRANGE, DEL, SET).
local key, fencekey, queue, last = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local token = ARGV[1]

if ARGV[3] ~= '' then
  redis.call('ZREM', queue, ARGV[3])
end

if redis.call('HGET', key, 'token') ~= token then
  if redis.call('GET', last) == token then
    return 2
  end
  return 0
end

-- The tombstone lets a release that the client sends again after a lost
-- reply report success instead of a false "not held".
local function tombstone()
  if ARGV[2] ~= '0' then
    redis.call('SET', last, token, 'PX', ARGV[2])
  end
end

-- Hand over to the first waiter whose entry is still alive; entries of
-- waiters that died or gave up without a word are dropped on the way.
local head = redis.call('ZRANGE', queue, 0, 0)
if #head > 0 then
  -- The next fence is taken first: it is the write that can fail (a counter
  -- dlock did not write), and it must fail before any other write. If no
  -- live waiter is found, the number is skipped; fences need only grow.
  local fence, err = next_fence(fencekey)
  if err then return err end
  local now_ms = server_now()
  while #head > 0 do
    redis.call('ZREM', queue, head[1])
    local id, wtoken, ttl, alive, owner = string.match(head[1], '^([^|]*)|([^|]*)|(%d+)|(%d+)|(.*)$')
    -- An entry of the releasing token itself (a queued attempt sent twice
    -- leaves two) must not hand the lock back to it.
    if alive and wtoken ~= token and tonumber(alive) >= now_ms then
      tombstone()
      grant(key, fence, wtoken, ttl, owner, string.format('%d', now_ms))
      local publish = 'PUBLISH'
      if ARGV[5] == '1' then publish = 'SPUBLISH' end
      redis.call(publish, ARGV[4] .. id, wtoken .. ':' .. string.format('%d', fence))
      return 1
    end
    head = redis.call('ZRANGE', queue, 0, 0)
  end
end

redis.call('DEL', key)
tombstone()
return 1
