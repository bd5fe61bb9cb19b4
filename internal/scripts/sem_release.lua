-- sem_release: give token's permit back and hand it, with any other free
-- permit, to the first live waiters in line.
-- KEYS[1] permits zset, KEYS[2] permit data, KEYS[3] fence counter, KEYS[4]
-- waiter queue, KEYS[5] waiter data, KEYS[6] this token's release record
-- ARGV as release.lua: ARGV[1] token, ARGV[2] record lifetime in ms (0:
-- none), ARGV[3] '1' to give the token up, 'f' a forced unlock, ARGV[4] hand-off channel prefix,
-- ARGV[5] '1' for SPUBLISH, ARGV[6] the fence counter's idle lifetime in ms
-- Returns 1 when released now, 2 when this token was released before (a
-- re-sent release), 0 when the token holds no permit.
local k = {sem = KEYS[1], data = KEYS[2], fence = KEYS[3], queue = KEYS[4], qdata = KEYS[5]}
local token, record = ARGV[1], KEYS[6]
local a = {lifetime = ARGV[6], handoff = ARGV[4], sharded = ARGV[5]}

-- The record is keyed by token, as in release.lua: a re-sent release
-- reports success, and returns no second permit. A forced unlock (ARGV[3]
-- 'f') writes 'f': nothing takes a permit again for the token, and its
-- holder's own release says "not ours" (mark in common.lua).
local kind = ARGV[3]
local function ended()
  if kind == '1' or kind == 'f' then
    mark(record, ARGV[2], kind)
  elseif ARGV[2] ~= '0' then
    redis.call('SET', record, '1', 'PX', ARGV[2]) -- the holder's: nothing to step down from
  end
end

if kind == '1' then
  leave(k.queue, k.qdata, token)
  ended()
end

local now_ms = server_now()
local score = redis.call('ZSCORE', k.sem, token)
if not score or tonumber(score) <= now_ms then
  -- An expired permit is left to the purge below the next script: it is
  -- not ours any more.
  if released_before(record, kind) then
    return 2
  end
  return 0
end

local n = tonumber(redis.call('HGET', k.data, 'n'))
redis.call('ZREM', k.sem, token)
redis.call('HDEL', k.data, token)
ended()
local held = sem_purge(k.sem, k.data, now_ms)
if n and n > held then
  local _, err = sem_fill(k, n - held, n, '', now_ms, a)
  if err then return err end
end
return 1
