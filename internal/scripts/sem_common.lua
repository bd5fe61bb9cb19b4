-- sem_common.lua follows common.lua in every semaphore script. A semaphore
-- of a name has its own keys, apart from the exclusive lock's hash:
--   sem   zset: permit token -> end of its lease, server clock in ms
--   data  hash: 'n' -> the number of permits the holders agreed on, and
--         permit token -> 'fence|since_ms|ttl_ms|owner'
--   queue zset of waiter tokens by arrival (µs), qdata hash: waiter token ->
--         'client_id|ttl|alive_until_ms|n|owner'
-- Each permit is its own lease: an expired one is purged by the next script
-- that looks, so a crashed holder's permit comes back after its TTL.

-- sem_keep makes key live at least ttl ms from now (outlive in common.lua):
-- the keys outlive every permit in them, and go when the last lease ends.
-- Every script that calls it writes the permit's data too.
local function sem_keep(key, ttl)
  outlive(key, ttl)
end

-- sem_purge drops the permits whose lease has ended and returns how many
-- are held. With none held, the agreed n is forgotten with them.
local function sem_purge(sem, data, now_ms)
  local gone = redis.call('ZRANGEBYSCORE', sem, '-inf', now_ms)
  if #gone > 0 then
    redis.call('ZREMRANGEBYSCORE', sem, '-inf', now_ms)
    for _, t in ipairs(gone) do
      redis.call('HDEL', data, t)
    end
  end
  local held = redis.call('ZCARD', sem)
  if held == 0 then
    redis.call('DEL', data)
  end
  return held
end

-- sem_grant writes token's permit, its lease ending ttl ms from now.
local function sem_grant(sem, data, fence, token, ttl, owner, n, now_ms)
  redis.call('ZADD', sem, now_ms + tonumber(ttl), token)
  redis.call('HSET', data, 'n', n, token, string.format('%d|%d|%s|%s', fence, now_ms, ttl, owner))
  sem_keep(sem, ttl)
  sem_keep(data, ttl)
end

-- sem_extend makes token's lease last at least ttl ms from now and never
-- shortens it (see extend in common.lua for why). It returns the permit's
-- fence, or nil when token holds no live permit.
local function sem_extend(sem, data, token, ttl, now_ms)
  local score = redis.call('ZSCORE', sem, token)
  if not score or tonumber(score) <= now_ms then
    return nil
  end
  local rec = redis.call('HGET', data, token)
  if not rec then
    return nil
  end
  local fence, since, _, owner = string.match(rec, '^(%d+)|(%d+)|(%d+)|(.*)$')
  if now_ms + tonumber(ttl) > tonumber(score) then
    redis.call('ZADD', sem, 'XX', now_ms + tonumber(ttl), token)
  end
  redis.call('HSET', data, token, string.format('%s|%s|%s|%s', fence, since, ttl, owner))
  sem_keep(sem, ttl)
  sem_keep(data, ttl)
  return tonumber(fence)
end

-- sem_fill hands up to free permits to the first live waiters in line, one
-- message to each waiter's client, and stops before stop (the token of the
-- attempt running, which then takes its permit itself): free permits never
-- go past a live waiter. Entries of dead waiters, and of waiters that asked
-- for another n, are dropped on the way (the latter learn of the mismatch at
-- their next attempt). Returns the permits still free, or nil and an error.
local function sem_fill(k, free, n, stop, now_ms, a)
  while free > 0 do
    local head = redis.call('ZRANGE', k.queue, 0, 0)
    if #head == 0 or head[1] == stop then
      return free
    end
    local wtoken = head[1]
    local rec = redis.call('HGET', k.qdata, wtoken)
    local id, ttl, alive, wn, owner
    if rec then
      id, ttl, alive, wn, owner = string.match(rec, '^([^|]*)|(%d+)|(%d+)|(%d+)|(.*)$')
    end
    if alive and tonumber(alive) >= now_ms and tonumber(wn) == n
        and not redis.call('ZSCORE', k.sem, wtoken) then
      -- The fence is the write that can fail (a counter dlock did not
      -- write): before this waiter's entry is touched.
      local fence, err = next_fence(k.fence, a.lifetime)
      if err then return nil, err end
      leave(k.queue, k.qdata, wtoken)
      sem_grant(k.sem, k.data, fence, wtoken, ttl, owner, n, now_ms)
      local publish = 'PUBLISH'
      if a.sharded == '1' then publish = 'SPUBLISH' end
      redis.call(publish, a.handoff .. id, wtoken .. ':' .. string.format('%d', fence))
      free = free - 1
    else
      leave(k.queue, k.qdata, wtoken)
    end
  end
  return free
end

-- sem_busy is the reply of an attempt that found every permit held:
-- {0, ms until the earliest lease ends (a waiter wakes then), the fence
-- counter, permits held, their n, waiters in line}. The counter is above every grant made before this attempt ran,
-- so a hand-off message with a fence not above it is stale (wait.go); the
-- fence of any one holder would not be, with several holders.
local function sem_busy(k, now_ms)
  local first = redis.call('ZRANGE', k.sem, 0, 0, 'WITHSCORES')
  local left = 0
  if #first == 2 then
    left = math.max(tonumber(first[2]) - now_ms, 1)
  end
  local cur = redis.pcall('GET', k.fence)
  if type(cur) ~= 'string' then cur = '0' end
  return {0, left, tonumber(cur) or 0, redis.call('ZCARD', k.sem),
    tonumber(redis.call('HGET', k.data, 'n')) or 0, redis.call('ZCARD', k.queue)}
end
