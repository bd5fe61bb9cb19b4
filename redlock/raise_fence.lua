-- raise_fence: write a Redlock's fence into a node's fence counter, if it is
-- larger and the node still holds the lock for the token, so that the node's
-- next grant hands out a larger fence (see raiseFence in fence_raise.go).
-- KEYS[1] lock hash, KEYS[2] fence counter
-- ARGV[1] token, ARGV[2] fence, ARGV[3] the counter's idle lifetime in ms, as
-- the acquire script sets it
-- Returns 1 when the counter is at least the fence, 0 when the lock is not
-- ours; a counter dlock did not write is refused, as the acquire script
-- refuses it.
if redis.call('HGET', KEYS[1], 'token') ~= ARGV[1] then
  return 0
end
local cur = redis.pcall('GET', KEYS[2])
local n = 0
if type(cur) == 'table' and cur.err then
  n = nil
elseif cur then
  n = tonumber(cur)
end
if not n then
  return redis.error_reply('WRONGTYPE fence counter ' .. KEYS[2] .. ' does not hold an integer')
end
if tonumber(ARGV[2]) > n then
  redis.call('SET', KEYS[2], ARGV[2], 'PX', ARGV[3])
end
return 1
