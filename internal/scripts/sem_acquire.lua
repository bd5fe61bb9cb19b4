-- sem_acquire: take one of n permits if one is free and no live waiter is
-- ahead; else, for a waiter, join the queue that freed permits go to.
-- KEYS[1] permits zset, KEYS[2] permit data, KEYS[3] fence counter, KEYS[4]
-- waiter queue, KEYS[5] waiter data (see sem_common.lua), KEYS[6] this
-- token's release record (see release.lua), KEYS[7] the name's exclusive
-- lock hash
-- ARGV[1] token, ARGV[2] ttl in ms, ARGV[3] owner, ARGV[4] waiter's client
-- id or '', ARGV[5] how long the waiter entry lives, in ms, ARGV[6] the
-- queue's expiry in ms, ARGV[7] the fence counter's idle lifetime in ms,
-- ARGV[8] n, ARGV[9] prefix of the hand-off channels, ARGV[10] '1' for
-- SPUBLISH
-- Returns {1, fence} when a permit is ours; {0, pttl, fence counter} when
-- all are held (see sem_busy); {0, -3, 0} for a token its client gave up;
-- {0, -4, n of the holders} when the holders use another n; {0, -5, 0} when
-- the name is held as an exclusive lock, {0, -6, 0} as a read lock.
local k = {sem = KEYS[1], data = KEYS[2], fence = KEYS[3], queue = KEYS[4], qdata = KEYS[5]}
local token, ttl, owner, waiter = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
local n = tonumber(ARGV[8])
local a = {lifetime = ARGV[7], handoff = ARGV[9], sharded = ARGV[10]}

if redis.call('EXISTS', KEYS[6]) == 1 then
  return {0, -3, 0}
end
if redis.call('EXISTS', KEYS[7]) == 1 then
  -- Readers hold it when its token is the readers' marker (READERS in
  -- common.lua): only on this refusal is the hash read.
  if redis.call('TYPE', KEYS[7]).ok == 'hash' and redis.call('HGET', KEYS[7], 'token') == '*readers' then
    return {0, -6, 0}
  end
  return {0, -5, 0}
end
local now_ms, now_us = server_now()

-- Ours already: a hand-off whose message is late or lost, or this attempt
-- sent again after a lost reply. One permit, never two.
local fence = sem_extend(k.sem, k.data, token, ttl, now_ms)
if fence then
  if waiter ~= '' then
    leave(k.queue, k.qdata, token)
  end
  return {1, fence}
end

local held = sem_purge(k.sem, k.data, now_ms)
if held > 0 then
  local agreed = tonumber(redis.call('HGET', k.data, 'n'))
  if agreed and agreed ~= n then
    return {0, -4, agreed}
  end
end

local free = n - held
if free > 0 then
  local err
  free, err = sem_fill(k, free, n, token, now_ms, a)
  if err then return err end
end
if free > 0 then
  local err
  fence, err = next_fence(k.fence, a.lifetime)
  if err then return err end
  if waiter ~= '' then
    leave(k.queue, k.qdata, token)
  end
  sem_grant(k.sem, k.data, fence, token, ttl, owner, n, now_ms)
  return {1, fence}
end

if waiter ~= '' then
  -- NX: a waiter that renews its entry keeps its place in line.
  redis.call('ZADD', k.queue, 'NX', now_us, token)
  redis.call('HSET', k.qdata, token, string.format('%s|%s|%d|%d|%s', waiter, ttl, now_ms + tonumber(ARGV[5]), n, owner))
  redis.call('PEXPIRE', k.queue, ARGV[6])
  redis.call('PEXPIRE', k.qdata, ARGV[6])
end
return sem_busy(k, now_ms)
