-- refresh_many: refresh for several locks of one node in one script call,
-- as the renewer sends the renewals due together. For Redis a script call
-- costs several times the commands inside it (about 8 µs against 2), so
-- renewing many locks one call each was most of renewal's cost to Redis.
-- Each lock is answered as refresh would answer it alone: one whose key
-- holds another type gets its own error, and the others still run. Its keys
-- need not share a hash tag: it is never sent to a Cluster.
-- KEYS[i] the i-th lock hash
-- ARGV[2i-1] its token, ARGV[2i] its new ttl in ms
-- Returns an array: per lock, 1 when extended, 0 when not ours, or the
-- error of its HGET (WRONGTYPE).
local out = {}
for i, key in ipairs(KEYS) do
  local token = redis.pcall('HGET', key, 'token')
  if type(token) == 'table' and token.err then
    out[i] = token
  elseif token == ARGV[2 * i - 1] then
    extend(key, ARGV[2 * i])
    out[i] = 1
  else
    out[i] = 0
  end
end
return out
