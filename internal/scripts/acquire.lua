-- acquire: take the lock if nobody holds it.
-- KEYS[1] lock hash, KEYS[2] fence counter
-- ARGV[1] token, ARGV[2] ttl in ms, ARGV[3] owner
-- Returns {1, fence} when the lock is ours, {0, pttl} when another holder has it.
--
-- Every check runs before the first write: a script that fails half way keeps
-- its earlier writes, so a wrong-type key must stop us before anything changes.
local key, fencekey = KEYS[1], KEYS[2]
local token, ttl = ARGV[1], tonumber(ARGV[2])

if redis.call('EXISTS', key) == 1 then
  -- HGET fails with WRONGTYPE when the key is not a hash: nothing written yet.
  local held = redis.call('HGET', key, 'token')
  if held == token then
    -- Our own acquire, sent again by the client after a lost reply: it
    -- already succeeded, so report success instead of stranding the lock.
    return {1, tonumber(redis.call('HGET', key, 'fence'))}
  end
  return {0, redis.call('PTTL', key)}
end

local last = redis.call('GET', fencekey)
local now = redis.call('TIME')
local fence
if last then
  if not tonumber(last) then
    return redis.error_reply('WRONGTYPE fence counter ' .. fencekey .. ' does not hold an integer')
  end
  fence = redis.call('INCR', fencekey)
else
  -- A missing counter (first use, or Redis restarted empty) is seeded from the
  -- server clock in microseconds, so fences keep growing across a restart.
  fence = tonumber(now[1]) * 1000000 + tonumber(now[2])
  redis.call('SET', fencekey, string.format('%d', fence))
end

local since = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)
redis.call('HSET', key, 'token', token, 'fence', string.format('%d', fence),
  'owner', ARGV[3], 'since', string.format('%d', since), 'ttl', ARGV[2])
redis.call('PEXPIRE', key, ttl)
return {1, fence}
