-- common.lua is prepended to every script that grants a lock, so acquire and
-- the hand-off in release write a lock in exactly the same way.

-- server_now returns the server clock in ms and in µs.
local function server_now()
  local t = redis.call('TIME')
  local s, us = tonumber(t[1]), tonumber(t[2])
  return s * 1000 + math.floor(us / 1000), s * 1000000 + us
end

-- next_fence hands out the next fencing token. It is the first write of every
-- grant: a script that fails half way keeps its earlier writes, so a fence
-- counter that dlock did not write must stop us before anything changed.
-- A missing counter (first use, or Redis restarted empty) is seeded from the
-- server clock in µs, so fences keep growing across a restart.
local function next_fence(fencekey)
  local fence = redis.pcall('INCR', fencekey)
  if type(fence) == 'table' and fence.err then
    return nil, redis.error_reply('WRONGTYPE fence counter ' .. fencekey .. ' does not hold an integer')
  end
  if fence == 1 then
    local _, now_us = server_now()
    fence = now_us
    redis.call('SET', fencekey, string.format('%d', fence))
  end
  return fence
end

-- grant writes the lock hash with its lease.
local function grant(key, fence, token, ttl, owner, since_ms)
  redis.call('HSET', key, 'token', token, 'fence', string.format('%d', fence),
    'owner', owner, 'since', since_ms, 'ttl', ttl)
  redis.call('PEXPIRE', key, ttl)
end
