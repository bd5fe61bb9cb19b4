-- The demo shop's read: the stock left and how many orders the user has.
-- KEYS[1] stock, KEYS[2] orders (hash user -> count), KEYS[3] highest fence seen.
-- ARGV[1] the reader's fencing token, or '' for a reader without one (the
-- naive lock), ARGV[2] the user.
--
-- A fenced read records its fence, so that a holder whose lock expired can
-- no longer write once the next holder has read: otherwise the stale write
-- could land between the next holder's read and write, and be overwritten
-- by a value computed before it. Returns {ok, stock, orders}; ok is 0 when
-- the fence is below the highest seen.
if ARGV[1] ~= '' then
  local fence = tonumber(ARGV[1])
  local last = tonumber(redis.call('GET', KEYS[3]) or '0')
  if fence < last then
    return {0, 0, 0}
  end
  redis.call('SET', KEYS[3], ARGV[1])
end
local stock = tonumber(redis.call('GET', KEYS[1]) or '0')
local orders = tonumber(redis.call('HGET', KEYS[2], ARGV[2]) or '0')
return {1, stock, orders}
