-- acquire: take the lock if nobody holds it; else, for a waiter, join the
-- queue of waiters that release hands the lock to.
-- KEYS[1] lock hash, KEYS[2] fence counter, KEYS[3] waiter queue (zset, by
-- arrival), KEYS[4] waiter data (hash: id -> "alive_until_ms|ttl|token|owner")
-- ARGV[1] token, ARGV[2] ttl in ms, ARGV[3] owner, ARGV[4] waiter id or ''
-- for a single attempt, ARGV[5] how long the waiter entry lives without a
-- renewed attempt, in ms
-- Returns {1, fence} when the lock is ours, {0, pttl} when another holder
-- has it.
local key, fencekey, queue, qdata = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local token, ttl, owner, waiter = ARGV[1], ARGV[2], ARGV[3], ARGV[4]

if redis.call('EXISTS', key) == 1 then
  -- HGET fails with WRONGTYPE when the key is not a hash: nothing written yet.
  local held = redis.call('HGET', key, 'token')
  if held == token then
    -- Ours already: a release handed it to us, or this is our own acquire
    -- sent again after a lost reply. Report success, never strand it.
    return {1, tonumber(redis.call('HGET', key, 'fence'))}
  end
  if waiter ~= '' then
    local now_ms, now_us = server_now()
    local alive = tonumber(ARGV[5])
    -- A waiter keeps its place in line when it renews its entry.
    if not redis.call('ZSCORE', queue, waiter) then
      redis.call('ZADD', queue, now_us, waiter)
    end
    redis.call('HSET', qdata, waiter, string.format('%d|%s|%s|%s', now_ms + alive, ttl, token, owner))
    redis.call('PEXPIRE', queue, 2 * alive)
    redis.call('PEXPIRE', qdata, 2 * alive)
  end
  return {0, redis.call('PTTL', key)}
end

local err = check_fence(fencekey)
if err then return err end
if waiter ~= '' and redis.call('ZREM', queue, waiter) == 1 then
  redis.call('HDEL', qdata, waiter)
end
local now_ms, now_us = server_now()
local fence = next_fence(fencekey, now_us)
grant(key, fence, token, ttl, owner, now_ms)
return {1, fence}
