-- common.lua is prepended to every script that grants a lock, so acquire and
-- the hand-off in release write a lock in exactly the same way.

-- server_now returns the server clock in ms and in µs.
local function server_now()
  local t = redis.call('TIME')
  local s, us = tonumber(t[1]), tonumber(t[2])
  return s * 1000 + math.floor(us / 1000), s * 1000000 + us
end

-- check_fence fails with WRONGTYPE before anything is written when the fence
-- counter holds something dlock did not write. A script that fails half way
-- keeps its earlier writes, so every check runs before the first write.
local function check_fence(fencekey)
  local last = redis.call('GET', fencekey) -- WRONGTYPE if not a string
  if last and not tonumber(last) then
    return redis.error_reply('WRONGTYPE fence counter ' .. fencekey .. ' does not hold an integer')
  end
  return nil
end

-- next_fence hands out the next fencing token. A missing counter (first use,
-- or Redis restarted empty) is seeded from the server clock in µs, so fences
-- keep growing across a restart.
local function next_fence(fencekey, now_us)
  if redis.call('EXISTS', fencekey) == 1 then
    return redis.call('INCR', fencekey)
  end
  redis.call('SET', fencekey, string.format('%d', now_us))
  return now_us
end

-- grant writes the lock hash with its lease.
local function grant(key, fence, token, ttl, owner, now_ms)
  redis.call('HSET', key, 'token', token, 'fence', string.format('%d', fence),
    'owner', owner, 'since', string.format('%d', now_ms), 'ttl', ttl)
  redis.call('PEXPIRE', key, ttl)
end
