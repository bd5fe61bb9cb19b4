-- common.lua is prepended to every script that grants or extends a lock, so
-- acquire, refresh and the hand-off in release write a lock in exactly the
-- same way.

-- server_now returns the server clock in ms and in µs, read once per run:
-- a script is one atomic step, so one reading serves all of it, and every
-- redis.call costs the hot path about a microsecond of Redis's time.
local now_ms_once, now_us_once
local function server_now()
  if not now_ms_once then
    local t = redis.call('TIME')
    local s, us = tonumber(t[1]), tonumber(t[2])
    now_ms_once, now_us_once = s * 1000 + math.floor(us / 1000), s * 1000000 + us
  end
  return now_ms_once, now_us_once
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

-- sem_held returns the refusal {0, -7, n, held} of an exclusive or read
-- lock of a name whose semaphore (sem, data: see sem_common.lua) has held
-- permits, or nil when none is held. A permit whose lease has ended does not
-- count; the next semaphore script purges it.
local function sem_held(sem, data, now_ms)
  local held = redis.call('ZCOUNT', sem, string.format('(%d', now_ms), '+inf')
  if held == 0 then
    return nil
  end
  return {0, -7, tonumber(redis.call('HGET', data, 'n')) or 0, held}
end

-- grant writes the lock hash with its lease.
local function grant(key, fence, token, ttl, owner, since_ms)
  redis.call('HSET', key, 'token', token, 'fence', string.format('%d', fence),
    'owner', owner, 'since', since_ms, 'ttl', ttl)
  redis.call('PEXPIRE', key, ttl)
end

-- outlive makes key live at least ttl ms from now, and never shortens its
-- life; it reports whether it moved the expiry. From Redis 7.0
-- (redis.REDIS_VERSION_NUM is new there too; Valkey has it) PEXPIRE GT
-- does that in one command, where PTTL then PEXPIRE took two. GT counts a
-- key without expiry as the longest life, so NX then gives one to a key
-- that has none: a key the script has just made (a semaphore's first
-- permit), or one that lost its expiry (PERSIST by someone else), which
-- would otherwise keep the name locked for good once its holder dies.
local function outlive(key, ttl)
  if redis.REDIS_VERSION_NUM then
    return redis.call('PEXPIRE', key, ttl, 'GT') == 1 or redis.call('PEXPIRE', key, ttl, 'NX') == 1
  end
  return redis.call('PTTL', key) < tonumber(ttl) and redis.call('PEXPIRE', key, ttl) == 1
end

-- extend sets the lease to at least ttl ms from now, and never shortens it.
-- Lease changes of one lock can cross on the way to Redis (a renewal and a
-- Refresh, or a command sent again after a lost reply); whatever the order
-- they run in, Redis then keeps the longest, and every lease the client was
-- told of (dated from its send time) ends no later than the one in Redis.
--
-- had is the ttl field, read with the token: a renewal asks for the same
-- ttl each time, and rewriting it would cost a command for nothing. But
-- extend always writes something: a WAIT or WAITAOF after the call counts
-- the writes of its own connection, and covers another connection's write
-- before it (the releaser's hand-off, confirmed by the waiter's refresh)
-- only because this one came after it. A refresh in the millisecond of its
-- hand-off moves no expiry, so the ttl field is written then.
local function extend(key, ttl, had)
  if not outlive(key, ttl) or had ~= ttl then
    redis.call('HSET', key, 'ttl', ttl)
  end
end

-- leave removes a waiter's entry: its place in line and its data. The entry
-- is keyed by the waiter's token, which does not change while it waits, so
-- a re-sent attempt cannot leave a second one and leaving is exact.
local function leave(queue, qdata, token)
  redis.call('ZREM', queue, token)
  redis.call('HDEL', qdata, token)
end

-- remember writes the release record of a token (see release.lua) when its
-- lock was ours and ended here: ARGV-free so both release scripts share it.
-- lifetime '0' writes none (a forced unlock writes 'f' with mark instead).
local function remember(record, lifetime)
  if lifetime ~= '0' then
    redis.call('SET', record, '1', 'PX', lifetime)
  end
end

-- mark writes a token's record of kind, where the lock may not be ours:
--   '1' the token's lock ended: given up by its client (a waiter leaving, a
--       grant whose reply was lost, a Redlock releasing every node);
--   'w' one attempt of the token was withdrawn on this node while its lock
--       may be held on others (Redlock): a renewal of that lock may take the
--       node again (acquire.lua's ARGV[9]), a plain attempt may not;
--   'f' force-unlocked by an operator: nothing takes the node again for the
--       token, and the holder's own release reports "not ours".
-- A record never steps down ('w' < '1' < 'f'): a withdrawal that arrives
-- late must not turn an ended lock into one a renewal may take again, nor
-- a give-up a forced unlock into a release. lifetime '0' writes none.
local function mark(record, lifetime, kind)
  if lifetime == '0' then
    return
  end
  if kind == 'w' then
    redis.call('SET', record, 'w', 'PX', lifetime, 'NX')
  elseif kind == 'f' or redis.call('GET', record) ~= 'f' then
    redis.call('SET', record, kind, 'PX', lifetime)
  end
end

-- released_before reports whether a release of kind, finding the token's
-- lock gone, is a copy of one that already ran (go-redis sends a command
-- again after a lost reply): the holder's release or a give-up finds its
-- lock ended here ('1'), a forced unlock its own 'f'. A withdrawn attempt,
-- or a holder whose lock was forced, is "not ours".
local function released_before(record, kind)
  local r = redis.call('GET', record)
  if kind == 'f' then
    return r == 'f'
  end
  return r == '1'
end

-- Read-write locks. A lock that readers hold has READERS in its token field
-- (no real token equals it, so the exclusive scripts see "held by another"),
-- fence = the largest reader fence granted since the key was written, and one
-- field per reader: 'r:' .. token = "expiry_ms|ttl|since_ms|fence|owner".
-- A reader whose expiry (server clock) is past holds nothing; its field is
-- dropped by the next reader script that reads the fields. The key lives at
-- least as long as every live reader's lease. Keep READERS and
-- SHARED_PREFIX equal to node.ReadersMarker and node.SharedPrefix.
local READERS = '*readers'
local SHARED_PREFIX = 'R'

local function is_shared(token)
  return string.sub(token, 1, #SHARED_PREFIX) == SHARED_PREFIX
end

local function parse_reader(v)
  local exp, ttl, since, fence, owner = string.match(v, '^(%d+)|(%d+)|(%d+)|(%d+)|(.*)$')
  return tonumber(exp), ttl, since, fence, owner
end

-- live_until makes the key last at least until at (server ms), never less
-- than it has: another reader's lease may be longer. As outlive: GT, then
-- NX for a key without expiry (the first reader's, or one PERSISTed), from
-- Redis 7.0; PTTL then PEXPIREAT before.
local function live_until(key, at, now_ms)
  if redis.REDIS_VERSION_NUM then
    if redis.call('PEXPIREAT', key, at, 'GT') == 0 then
      redis.call('PEXPIREAT', key, at, 'NX')
    end
    return
  end
  local left = redis.call('PTTL', key)
  if left < 0 or now_ms + left < at then
    redis.call('PEXPIREAT', key, at)
  end
end

-- grant_reader adds token as a reader of key with its own fence.
local function grant_reader(key, fence, token, ttl, owner, now_ms)
  local exp = now_ms + tonumber(ttl)
  redis.call('HSET', key, 'token', READERS, 'r:' .. token,
    string.format('%d|%s|%d|%d|%s', exp, ttl, now_ms, fence, owner))
  -- fence stays the largest granted: a busy reply's holder fence must be
  -- above every grant made before it (the stale-message rule in wait.go).
  local cur = tonumber(redis.call('HGET', key, 'fence')) or 0
  if fence > cur then
    redis.call('HSET', key, 'fence', string.format('%d', fence))
  end
  live_until(key, exp, now_ms)
end

-- extend_reader makes token's read lease last at least ttl ms from now (never
-- shorter, as extend) and returns its fence, or nil when token is not a live
-- reader of key.
local function extend_reader(key, token, ttl, now_ms)
  local held = redis.call('HMGET', key, 'token', 'r:' .. token)
  if held[1] ~= READERS or not held[2] then
    return nil
  end
  local exp, _, since, fence, owner = parse_reader(held[2])
  if not exp or exp <= now_ms then
    return nil
  end
  exp = math.max(exp, now_ms + tonumber(ttl))
  redis.call('HSET', key, 'r:' .. token, string.format('%d|%s|%s|%s|%s', exp, ttl, since, fence, owner))
  live_until(key, exp, now_ms)
  return tonumber(fence)
end

-- live_readers drops the fields of readers whose lease is over, and returns
-- how many live ones are left and when the last of their leases ends.
local function live_readers(key, now_ms)
  local all = redis.call('HGETALL', key)
  local n, last = 0, 0
  for i = 1, #all, 2 do
    if string.sub(all[i], 1, 2) == 'r:' then
      local exp = parse_reader(all[i + 1])
      if exp and exp > now_ms then
        n = n + 1
        last = math.max(last, exp)
      else
        redis.call('HDEL', key, all[i])
      end
    end
  end
  return n, last
end

-- waiter_entry reads a waiter's data (see acquire.lua): client id, ttl,
-- alive until (ms), owner; nil when it has none.
local function waiter_entry(qdata, token)
  local data = redis.call('HGET', qdata, token)
  if not data then return nil end
  local id, ttl, alive, owner = string.match(data, '^([^|]*)|(%d+)|(%d+)|(.*)$')
  return id, ttl, tonumber(alive), owner
end

-- hand_off gives the free lock to the first live waiter in line and tells
-- it: if that waiter is a reader, also every live reader behind it up to the
-- next live writer, each with its own fence, and each client gets ONE
-- message "token:fence[;token:fence...]" for all its tokens. Entries of
-- waiters that died or gave up are dropped on the way; token's own entry
-- (an attempt that ran after it was granted) is never handed the lock.
-- Returns true when handed over, false when nobody lives in line (the caller
-- deletes the key), or nil and an error reply when no fence could be taken:
-- then nothing was written, the next fence being the first write.
local function hand_off(key, fencekey, queue, qdata, token, channels, sharded, lifetime)
  local head = redis.call('ZRANGE', queue, 0, 0)
  if #head == 0 then
    return false
  end
  -- If no live waiter is found, the number is skipped; fences need only grow.
  local fence, err = next_fence(fencekey, lifetime)
  if err then return nil, err end
  local now_ms = server_now()
  local granted, msgs, order = 0, {}, {}
  while #head > 0 do
    local wtoken = head[1]
    local id, ttl, alive, owner
    if wtoken ~= token then
      id, ttl, alive, owner = waiter_entry(qdata, wtoken)
    end
    local live = alive and alive >= now_ms
    local shared = is_shared(wtoken)
    if live and granted > 0 and not shared then
      break -- the next writer waits for the readers just let in
    end
    leave(queue, qdata, wtoken)
    if live then
      if granted == 0 then
        -- The last holder's fields (readers' among them) must not outlive it.
        redis.call('DEL', key)
      else
        fence = next_fence(fencekey, lifetime) -- the counter took a write above
      end
      granted = granted + 1
      if shared then
        grant_reader(key, fence, wtoken, ttl, owner, now_ms)
      else
        grant(key, fence, wtoken, ttl, owner, string.format('%d', now_ms))
      end
      local m = wtoken .. ':' .. string.format('%d', fence)
      if msgs[id] then
        msgs[id] = msgs[id] .. ';' .. m
      else
        msgs[id] = m
        order[#order + 1] = id
      end
      if not shared then
        break
      end
    end
    head = redis.call('ZRANGE', queue, 0, 0)
  end
  local publish = 'PUBLISH'
  if sharded then publish = 'SPUBLISH' end
  for _, id in ipairs(order) do
    redis.call(publish, channels .. id, msgs[id])
  end
  return granted > 0
end

-- join puts (or keeps) a waiter's token in line. NX: a waiter that renews
-- its entry keeps its place.
local function join(queue, qdata, token, waiter, ttl, alive_ms, expiry_ms, owner)
  local now_ms, now_us = server_now()
  redis.call('ZADD', queue, 'NX', now_us, token)
  redis.call('HSET', qdata, token, string.format('%s|%s|%d|%s', waiter, ttl, now_ms + tonumber(alive_ms), owner))
  redis.call('PEXPIRE', queue, expiry_ms)
  redis.call('PEXPIRE', qdata, expiry_ms)
end

-- holder_reply is a busy attempt's reply: {0, pttl, holder fence, owner,
-- kind, readers, waiters}, kind 'x' for an exclusive holder, 'r' for
-- readers (owner '', readers how many the hash has, one may have just
-- expired), 'm' for a name kept for its min hold by its finished holder;
-- waiters is the length of the line, this attempt's place included.
local function holder_reply(key, queue, pttl, held)
  local kind, owner, readers = 'x', held[3] or '', 0
  if held[1] == READERS then
    kind, owner, readers = 'r', '', math.max(redis.call('HLEN', key) - 2, 0)
  elseif held[1] == 'min-hold' then
    kind = 'm'
  end
  return {0, pttl, tonumber(held[2]) or 0, owner, kind, readers, redis.call('ZCARD', queue)}
end
