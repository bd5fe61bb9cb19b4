-- release_shared: a reader leaves; the last live reader to leave hands the
-- lock on as release.lua does (hand_off in common.lua).
-- KEYS, ARGV and replies as release.lua.
local key, fencekey, queue, qdata, record = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local token = ARGV[1]
local field = 'r:' .. token

-- ARGV[3] as release.lua's, without 'w' (a Redlock takes no read locks).
local kind = ARGV[3]
if kind == '1' then
  leave(queue, qdata, token)
  mark(record, ARGV[2], '1')
end

-- ended writes the record of this reader's release: 'f' when forced, so
-- that nothing takes a read lock again for the token and its holder's own
-- release says "not ours".
local function ended()
  if kind == 'f' then
    mark(record, ARGV[2], 'f')
  else
    remember(record, ARGV[2])
  end
end

local now_ms = server_now()
local held = redis.call('HMGET', key, 'token', field)
local exp
if held[1] == READERS and held[2] then
  exp = parse_reader(held[2])
  redis.call('HDEL', key, field)
end
if not exp or exp <= now_ms then
  -- Not a reader now; a lapsed lease held nothing since it ended.
  if released_before(record, kind) then
    return 2
  end
  return 0
end

local live, last = live_readers(key, now_ms)
if live > 0 then
  -- The key lives as long as the longest lease left, no longer: a waiting
  -- writer wakes at the key's PTTL, and a crashed reader must not hold it
  -- for the lease of one that left.
  redis.call('PEXPIREAT', key, last)
  ended()
  return 1
end

local handed, err = hand_off(key, fencekey, queue, qdata, token, ARGV[4], ARGV[5] == '1', ARGV[6])
if err then return err end
if not handed then
  redis.call('DEL', key)
end
ended()
return 1
