-- release: let the lock go if it is still ours, and hand it straight to the
-- first live waiter in line, so waking costs one message whatever the number
-- of waiters.
-- KEYS[1] lock hash, KEYS[2] fence counter, KEYS[3] waiter queue, KEYS[4]
-- waiter data (see acquire.lua), KEYS[5] this token's release record
-- ARGV[1] token, ARGV[2] record lifetime in ms, or 0 for none,
-- ARGV[3] the kind of release: '0' the holder's; '1' the client gives the
-- token up (a waiter leaving, or a grant whose reply was lost): drop its
-- queue entry and mark it ended; 'w' a Redlock withdraws one attempt of the
-- token while its lock may live on other nodes (see mark in common.lua);
-- 'f' a forced unlock: the record says so, and the holder's own later
-- release reports "not held",
-- ARGV[4] prefix of the waiters' hand-off channels, ARGV[5] '1' to tell the
-- waiter on a shard channel (SPUBLISH: in a Cluster the message stays on the
-- lock's shard), ARGV[6] the fence counter's idle lifetime in ms, ARGV[7]
-- the min hold in ms (WithMinHold), or 0 for none
-- Returns 1 when released now (or kept for the min hold), 2 when this token
-- was released before (a re-sent release), 0 when the lock is not ours.
--
-- With nobody waiting this is four commands (HGET, ZRANGE, DEL, SET).
local key, fencekey, queue, qdata, record = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local token = ARGV[1]

-- The record lets a release that the client sends again after a lost reply
-- report success instead of a false "not held". It is keyed by token: on a
-- contended name the next holders acquire and release before go-redis sends
-- the command again, and one record per name would be theirs by then. It
-- also marks a token its client gave up, so that an attempt of it sent
-- before and delayed on the way grants and queues nothing (acquire.lua).
local kind = ARGV[3]
if kind == '1' or kind == 'w' then
  leave(queue, qdata, token)
  mark(record, ARGV[2], kind)
end

if redis.call('HGET', key, 'token') ~= token then
  if released_before(record, kind) then
    return 2
  end
  return 0
end

-- WithMinHold: released before grant + min hold, the lock is kept until then
-- and handed to nobody, so that a job that finished early still blocks the
-- tick on an instance that runs late. since is the server's clock at the
-- grant or hand-off, as now is: no client clock takes part. The token is
-- replaced by one no client has, so that this holder's renewal or Refresh
-- already on the way extends nothing, and a re-sent release finds the
-- record. Waiters wake at the lease's end, as after a crashed holder. The
-- lease is only ever shortened: the first lease was at least the min hold.
if ARGV[7] ~= '0' then
  local left = tonumber(redis.call('HGET', key, 'since')) + tonumber(ARGV[7]) - server_now()
  if left > 0 then
    redis.call('HSET', key, 'token', 'min-hold')
    if redis.call('PTTL', key) > left then
      redis.call('PEXPIRE', key, left)
    end
    remember(record, ARGV[2])
    return 1
  end
end

-- A forced unlock of every reader at once (the token is the readers'
-- marker): each reader gets the 'f' record a forced unlock of its own token
-- would write, or a reader's acquire that go-redis sends again after a lost
-- reply would take the read lock back. The records share the lock's hash
-- tag: record is KEYS[5], the marker's own.
if token == READERS and kind == 'f' then
  local prefix = string.sub(record, 1, #record - #READERS)
  local all = redis.call('HGETALL', key)
  for i = 1, #all, 2 do
    if string.sub(all[i], 1, 2) == 'r:' then
      mark(prefix .. string.sub(all[i], 3), ARGV[2], 'f')
    end
  end
end

-- Hand over to the first live waiter (or the first readers), else free it.
local handed, err = hand_off(key, fencekey, queue, qdata, token, ARGV[4], ARGV[5] == '1', ARGV[6])
if err then return err end
if not handed then
  redis.call('DEL', key)
end
if kind == 'f' then
  mark(record, ARGV[2], 'f')
elseif kind ~= 'w' then
  -- A withdrawal that found the lock ours (a renewal took the node again
  -- before the withdrawal arrived) leaves its 'w': the live lock may take
  -- the node again.
  remember(record, ARGV[2])
end
return 1
