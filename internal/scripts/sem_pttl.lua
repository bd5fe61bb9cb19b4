-- sem_pttl: the remaining lease of token's permit in ms, or -1 when it
-- holds none.
-- KEYS[1] permits zset
-- ARGV[1] token
local score = redis.call('ZSCORE', KEYS[1], ARGV[1])
if not score then
  return -1
end
local t = redis.call('TIME')
local left = tonumber(score) - (tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000))
if left <= 0 then
  return -1
end
return left
