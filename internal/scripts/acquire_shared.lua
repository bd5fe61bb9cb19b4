-- acquire_shared: take a read lock; see the reader layout in common.lua.
-- KEYS and ARGV as acquire.lua, and ARGV[8] '1' to join readers even while
-- a live writer waits in line (WithoutWriterPriority).
-- Replies as acquire.lua: {1, fence}, {0, pttl, holder fence, ...} (see
-- holder_reply in common.lua), {0, -3, 0}, {0, -7, n, held}.
-- When busy because a writer waits ahead, pttl is what is left of the
-- readers' leases (the lock frees then at the latest).
local key, fencekey, queue, qdata = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local token, ttl, owner, waiter = ARGV[1], ARGV[2], ARGV[3], ARGV[4]

-- A token its client gave up: see acquire.lua.
if redis.call('EXISTS', KEYS[5]) == 1 then
  return {0, -3, 0}
end

local now_ms = server_now()
-- Ours already: a hand-off whose message is late or lost, or our own
-- attempt sent again after a lost reply. Extend it, as acquire.lua does.
local mine = extend_reader(key, token, ttl, now_ms)
if mine then
  if waiter ~= '' then
    leave(queue, qdata, token)
  end
  return {1, mine}
end

local function busy(pttl, held)
  if waiter ~= '' then
    join(queue, qdata, token, waiter, ttl, ARGV[5], ARGV[6], owner)
  end
  return holder_reply(key, queue, pttl, held)
end

-- HMGET fails with WRONGTYPE when the key is not a hash: nothing written yet.
local held = redis.call('HMGET', key, 'token', 'fence', 'owner')
if held[1] and held[1] ~= READERS then
  return busy(redis.call('PTTL', key), held) -- a writer holds it
end

-- free: no hash, or one whose readers' leases are all over. Only then can
-- permits be held: a semaphore is refused a name with a live hash.
local free = not held[1]
if held[1] == READERS then
  local live, last = live_readers(key, now_ms)
  if live == 0 then
    redis.call('DEL', key) -- every lease is over: the lock is free
    free = true
  elseif ARGV[8] ~= '1' then
    -- Writers go first: a live writer in line ahead of this token (all of
    -- the line, when the token is not in it yet) keeps new readers out, or
    -- a stream of overlapping readers would starve it.
    local rank = redis.call('ZRANK', queue, token)
    local ahead
    if rank then
      ahead = rank > 0 and redis.call('ZRANGE', queue, 0, rank - 1) or {}
    else
      ahead = redis.call('ZRANGE', queue, 0, -1)
    end
    for _, t in ipairs(ahead) do
      if not is_shared(t) then
        local _, _, alive = waiter_entry(qdata, t)
        if alive and alive >= now_ms then
          return busy(last - now_ms, held)
        end
      end
    end
  end
end

-- No writer, but maybe permits (see acquire.lua); readers joining live
-- readers skip the check.
if free then
  local permits = sem_held(KEYS[6], KEYS[7], now_ms)
  if permits then return permits end
end

local fence, err = next_fence(fencekey, ARGV[7])
if err then return err end
if waiter ~= '' then
  leave(queue, qdata, token)
end
grant_reader(key, fence, token, ttl, owner, now_ms)
return {1, fence}
