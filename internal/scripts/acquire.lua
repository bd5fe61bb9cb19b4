-- acquire: take the lock if nobody holds it; else, for a waiter, join the
-- queue of waiters that release hands the lock to.
-- KEYS[1] lock hash, KEYS[2] fence counter, KEYS[3] waiter queue: a zset of
-- waiter tokens scored by arrival (µs), KEYS[4] waiter data: a hash from
-- token to "client_id|ttl|alive_until_ms|owner", KEYS[5] this token's
-- release record (see release.lua), KEYS[6] and KEYS[7] the name's
-- semaphore permits and permit data (see sem_common.lua)
-- ARGV[1] token, ARGV[2] ttl in ms, ARGV[3] owner, ARGV[4] waiter's client
-- id, or '' for a single attempt that does not queue, ARGV[5] how long the
-- waiter entry lives without a renewed attempt, in ms, ARGV[6] the queue's
-- expiry in ms (the same for every waiter, so no waiter cuts the line short
-- for others), ARGV[7] the fence counter's idle lifetime in ms, ARGV[8]
-- (acquire_shared.lua's), ARGV[9] '1' for a Redlock renewal taking a node
-- again for its live lock: a withdrawn attempt's record does not refuse it
-- Returns {1, fence} when the lock is ours, {0, pttl, fence, ...} when
-- another holder has it (fence: that holder's fencing token; a hand-off
-- message with a fence not above it was sent before this attempt ran, and
-- is stale; the rest names the holder: see holder_reply in common.lua), and
-- {0, -3, 0} for a token its client gave up on, and {0, -7, n, held} when
-- held permits of the name's semaphore (WithPermits(n)) keep it.
--
-- The free path is eight commands (GET, HMGET, TIME, ZCOUNT, GET, SET, HSET,
-- PEXPIRE): it is the path every uncontended lock takes.
local key, fencekey, queue, qdata = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local token, ttl, owner, waiter = ARGV[1], ARGV[2], ARGV[3], ARGV[4]

-- The client gave this token up (its reply was lost, or its wait ended) and
-- withdrew it: this attempt reached Redis after that, delayed on the way. It
-- must neither take the lock nor queue, or nobody would hold it for a TTL.
-- Nor may a forced unlock ('f') be undone. Only a renewal of a Redlock that
-- is held elsewhere may take a node where one attempt was withdrawn ('w'):
-- that attempt's own re-sent copy carries no ARGV[9] and is refused.
local record = redis.call('GET', KEYS[5])
if record and not (record == 'w' and ARGV[9] == '1') then
  return {0, -3, 0}
end

-- HMGET fails with WRONGTYPE when the key is not a hash: nothing written yet.
local held = redis.call('HMGET', key, 'token', 'fence', 'owner', 'ttl')
if held[1] == token then
  -- Ours already: a release handed it to us (and its message is late or
  -- lost), or this is our own acquire sent again after a lost reply. Report
  -- success, never strand it; and make the lease last at least ttl from now,
  -- because the caller dates its lease from this attempt.
  extend(key, ttl, held[4])
  if waiter ~= '' then
    leave(queue, qdata, token)
  end
  return {1, tonumber(held[2])}
end
if held[1] then
  if waiter ~= '' then
    join(queue, qdata, token, waiter, ttl, ARGV[5], ARGV[6], owner)
  end
  return holder_reply(key, queue, redis.call('PTTL', key), held)
end

-- Free of locks, but maybe not of permits: a name is a semaphore or a
-- lock at a time (sem_acquire.lua refuses the other way round).
local now_ms = server_now()
local permits = sem_held(KEYS[6], KEYS[7], now_ms)
if permits then return permits end

local fence, err = next_fence(fencekey, ARGV[7])
if err then return err end
if waiter ~= '' then
  leave(queue, qdata, token)
end
-- since is the server's clock, as in a hand-off, so ages compare.
grant(key, fence, token, ttl, owner, string.format('%d', now_ms))
return {1, fence}
