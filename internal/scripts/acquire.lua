-- acquire: take the lock if nobody holds it; else, for a waiter, join the
-- queue of waiters that release hands the lock to.
-- KEYS[1] lock hash, KEYS[2] fence counter, KEYS[3] waiter queue: a zset
-- scored by arrival, each member "id|token|ttl|alive_until_ms|owner"
-- ARGV[1] token, ARGV[2] ttl in ms, ARGV[3] owner, ARGV[4] waiter id or ''
-- for a single attempt, ARGV[5] how long the waiter entry lives without a
-- renewed attempt, in ms, ARGV[6] the queue's expiry in ms (the same for
-- every waiter, so no waiter cuts the line short for others), ARGV[7] the waiter's entry from its last attempt, or ''
-- Returns {1, fence} when the lock is ours, {0, pttl, entry} when another
-- holder has it (entry: the waiter's queue entry now, or '').
--
-- The free path is five commands (HGET, INCR, TIME, HSET, PEXPIRE): it is
-- the path every uncontended lock takes.
local key, fencekey, queue = KEYS[1], KEYS[2], KEYS[3]
local token, ttl, owner, waiter, prev = ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[7]

-- HGET fails with WRONGTYPE when the key is not a hash: nothing written yet.
local held = redis.call('HGET', key, 'token')
if held == token then
  -- Ours already: a release handed it to us (and its message was lost), or
  -- this is our own acquire sent again after a lost reply. Report success,
  -- never strand it; and start the lease now, because the caller dates its
  -- lease from this attempt, not from the hand-off it never heard of.
  redis.call('PEXPIRE', key, ttl)
  redis.call('HSET', key, 'ttl', ttl)
  if prev ~= '' then
    redis.call('ZREM', queue, prev)
  end
  return {1, tonumber(redis.call('HGET', key, 'fence'))}
end
if held then
  local entry = ''
  if waiter ~= '' then
    local now_ms, now_us = server_now()
    local alive = tonumber(ARGV[5])
    entry = string.format('%s|%s|%s|%d|%s', waiter, token, ttl, now_ms + alive, owner)
    -- A waiter that renews its entry keeps its place in line.
    local score = now_us
    if prev ~= '' then
      local s = redis.call('ZSCORE', queue, prev)
      if s then
        score = s
        redis.call('ZREM', queue, prev)
      end
    end
    redis.call('ZADD', queue, score, entry)
    redis.call('PEXPIRE', queue, ARGV[6])
  end
  return {0, redis.call('PTTL', key), entry}
end

local fence, err = next_fence(fencekey)
if err then return err end
if prev ~= '' then
  redis.call('ZREM', queue, prev)
end
-- since is the server's clock, as in a hand-off, so ages compare.
grant(key, fence, token, ttl, owner, string.format('%d', (server_now())))
return {1, fence}
