-- common.lua is prepended to every script that grants or extends a lock, so
-- acquire, refresh and the hand-off in release write a lock in exactly the
-- same way.

-- server_now returns the server clock in ms and in µs.
local function server_now()
  local t = redis.call('TIME')
  local s, us = tonumber(t[1]), tonumber(t[2])
  return s * 1000 + math.floor(us / 1000), s * 1000000 + us
end

-- next_fence hands out the next fencing token: above the last one this
-- counter handed out, and at least the server clock in µs. The clock is what
-- keeps fences growing when the counter is gone: expired after its idle
-- lifetime (ARGV lifetime, ms), lost in a restart, or never replicated to the
-- replica that a failover promoted. Fences then still grow as long as the
-- new primary's clock is not behind by more than the time since the lost
-- grant.
-- It is the first write of every grant: a script that fails half way keeps
-- its earlier writes, so a counter that dlock did not write must stop us
-- before anything changed.
local function next_fence(fencekey, lifetime)
  local cur = redis.pcall('GET', fencekey)
  local n = 0
  if type(cur) == 'table' and cur.err then
    n = nil
  elseif cur then
    n = tonumber(cur)
  end
  if not n then
    return nil, redis.error_reply('WRONGTYPE fence counter ' .. fencekey .. ' does not hold an integer')
  end
  local _, now_us = server_now()
  local fence = math.max(n + 1, now_us)
  redis.call('SET', fencekey, string.format('%d', fence), 'PX', lifetime)
  return fence
end

-- grant writes the lock hash with its lease.
local function grant(key, fence, token, ttl, owner, since_ms)
  redis.call('HSET', key, 'token', token, 'fence', string.format('%d', fence),
    'owner', owner, 'since', since_ms, 'ttl', ttl)
  redis.call('PEXPIRE', key, ttl)
end

-- extend sets the lease to at least ttl ms from now, and never shortens it.
-- Lease changes of one lock can cross on the way to Redis (a renewal and a
-- Refresh, or a command sent again after a lost reply); whatever the order
-- they run in, Redis then keeps the longest, and every lease the client was
-- told of (dated from its send time) ends no later than the one in Redis.
local function extend(key, ttl)
  if redis.call('PTTL', key) < tonumber(ttl) then
    redis.call('PEXPIRE', key, ttl)
  end
  redis.call('HSET', key, 'ttl', ttl)
end

-- leave removes a waiter's entry: its place in line and its data. The entry
-- is keyed by the waiter's token, which does not change while it waits, so
-- a re-sent attempt cannot leave a second one and leaving is exact.
local function leave(queue, qdata, token)
  redis.call('ZREM', queue, token)
  redis.call('HDEL', qdata, token)
end
