-- pttl_shared: a reader's remaining lease in ms, if it is a live reader.
-- KEYS[1] lock hash; ARGV[1] token
-- Returns the remaining ms, or -1 when token is not a live reader.
local held = redis.call('HMGET', KEYS[1], 'token', 'r:' .. ARGV[1])
if held[1] == READERS and held[2] then
  local left = parse_reader(held[2]) - server_now()
  if left > 0 then
    return left
  end
end
return -1
