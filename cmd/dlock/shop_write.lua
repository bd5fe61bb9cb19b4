-- The demo shop's write: set the stock to the value the caller computed and
-- record one order for the user. The business logic's read-check-write is
-- deliberately not atomic (the lock is what protects it); only this single
-- write is, and with a fence it is refused when a newer holder was seen.
-- KEYS[1] stock, KEYS[2] orders, KEYS[3] highest fence seen.
-- ARGV[1] fencing token or '', ARGV[2] user, ARGV[3] new stock.
-- Returns 1 when written, 0 when refused as stale.
if ARGV[1] ~= '' then
  local fence = tonumber(ARGV[1])
  local last = tonumber(redis.call('GET', KEYS[3]) or '0')
  if fence < last then
    return 0
  end
  redis.call('SET', KEYS[3], ARGV[1])
end
redis.call('SET', KEYS[1], ARGV[3])
redis.call('HINCRBY', KEYS[2], ARGV[2], 1)
return 1
